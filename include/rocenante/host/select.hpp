// host/select.hpp — the start-up decision: which transport every rank uses, decided by all ranks together
// (hazard H9), logged once and queryable (hazard H15), then fixed for the life of the communicator.
//
//   1. Every rank reads the environment (core/env.hpp) and probes each candidate transport locally:
//        ibverbs   libibverbs loads, the devices (ROCENANTE_IB_HCA, else the first ACTIVE one) open, their port
//                  is ACTIVE and they have a usable GID (the ibverbs code's own probe() and open_device())
//        socket    an interface to listen on exists (ROCENANTE_SOCKET_IFNAME, else every address); host executor
//        nccl      libnccl loads (transport/nccl/api.hpp); GPU executor only
//        loopback  every rank runs in this process (decided after the exchange: process tokens compared)
//   2. One bootstrap all_gather of a fixed-size card per rank: environment outcome, choices, process token, and a
//      verdict {ok, reason code, short reason} per candidate.
//   3. Every rank evaluates the same table the same way: the first candidate, in preference order, that is ok on
//      every rank is chosen. `auto` prefers ibverbs and falls back *together*: on the host executor to loopback
//      when every rank runs in one process, else to socket (TCP, transport/socket.hpp); on the GPU executor to
//      nccl. A forced transport that fails on any rank is a transport_error on every rank, naming the ranks and
//      their reasons.
//   4. selected_communicator then builds the chosen communicator, checks connectivity (pairs that fail; only ring
//      neighbours => one_shot refused, ring allowed; not even neighbours => the transport is unusable) and runs a
//      start-up test collective of every allowed algorithm against an exact reference (hence byte-identical across
//      ranks). Each step ends with a vote, so a failure anywhere moves every rank to the next candidate (auto) or
//      fails every rank (forced). Connectivity comes from select_config::reachable, else from the transport's own
//      `reachable(peer)` when it has one: the ibverbs transport probes every queue pair at set-up (a signalled
//      zero-length RDMA WRITE; a pair that cannot even be connected counts as unreachable), so a cut link between
//      two ranks is reported as the failing pair (tests/softroce/vm/select_cut.sh).
//
// Fail-stop after start-up: the transport never changes once chosen. A runtime failure (timeout, dead peer, peer
// abort) poisons the communicator and is reported naming the peer (host::communicator); nothing switches to
// another transport mid-run, because ranks could not agree on the switch point without a working transport.
// To recover, build a new communicator (which runs the whole decision again).
//
// Host only. The ibverbs candidate exists when rdma-core's headers were found at build time (define
// ROCENANTE_NO_IBVERBS to leave it out); without them its verdict is "not built into this binary".
#pragma once

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "../algorithm/auto.hpp"
#include "../bootstrap/concepts.hpp"
#include "../config.hpp"
#include "../core/env.hpp"
#include "../core/error.hpp"
#include "../core/identity.hpp"
#include "../core/log.hpp"
#include "../core/options.hpp"
#include "../transport/loopback.hpp"
#include "../transport/nccl/api.hpp"
#include "../transport/socket.hpp"
#include "communicator.hpp"

#if !defined(ROCENANTE_NO_IBVERBS) && __has_include(<infiniband/verbs.h>)
#define ROCENANTE_HAS_IBVERBS 1
#include "../transport/ibverbs/ibverbs.hpp"
#else
#define ROCENANTE_HAS_IBVERBS 0
#endif

namespace rocenante::host {

enum class transport_kind : std::uint8_t { none = 0, loopback = 1, ibverbs = 2, nccl = 3, socket = 4, cuda_ipc = 5 };
inline constexpr int transport_kinds = 6;

inline const char* to_string(transport_kind t) {
  switch (t) {
    case transport_kind::none: return "none";
    case transport_kind::loopback: return "loopback";
    case transport_kind::ibverbs: return "ibverbs";
    case transport_kind::nccl: return "nccl";
    case transport_kind::socket: return "socket";
    case transport_kind::cuda_ipc: return "cuda_ipc";
  }
  return "?";
}

/// Why a transport is not usable on a rank (the `code` of a verdict).
enum class probe_code : std::uint16_t {
  ok = 0,
  not_built,          ///< this binary was built without the transport
  library_missing,    ///< libibverbs / libnccl cannot be loaded
  no_devices,         ///< no RDMA device (or the kernel has no RDMA support)
  device_unusable,    ///< device not found, port not ACTIVE, no usable GID, no interface, bad configuration
  other_process,      ///< loopback: not every rank runs in this process
  other_host,         ///< cuda_ipc: not every rank runs on this host
  wrong_executor,     ///< the transport does not exist for this executor (nccl and cuda_ipc on the host)
  injected,           ///< set by a test hook (select_config::probe_hook)
  setup_failed,       ///< the transport's set-up threw on some rank
  unreachable,        ///< ring neighbours cannot reach each other
  self_test_failed,   ///< the start-up collective disagreed with the reference or between ranks
  not_probed,         ///< not a candidate of this decision
};

inline const char* to_string(probe_code c) {
  switch (c) {
    case probe_code::ok: return "ok";
    case probe_code::not_built: return "not_built";
    case probe_code::library_missing: return "library_missing";
    case probe_code::no_devices: return "no_devices";
    case probe_code::device_unusable: return "device_unusable";
    case probe_code::other_process: return "other_process";
    case probe_code::other_host: return "other_host";
    case probe_code::wrong_executor: return "wrong_executor";
    case probe_code::injected: return "injected";
    case probe_code::setup_failed: return "setup_failed";
    case probe_code::unreachable: return "unreachable";
    case probe_code::self_test_failed: return "self_test_failed";
    case probe_code::not_probed: return "not_probed";
  }
  return "?";
}

/// One rank's verdict on one transport. Fixed size and trivially copyable: exchanged with all_gather.
struct verdict {
  std::uint8_t ok = 0;
  std::uint8_t transport = 0;  ///< transport_kind
  std::uint16_t code = static_cast<std::uint16_t>(probe_code::not_probed);
  std::int32_t rank = -1;
  char reason[248] = {};  ///< short reason, NUL-terminated (truncated)

  static verdict make(transport_kind t, int rank, probe_code c, const std::string& why = {}) {
    verdict v;
    v.ok = c == probe_code::ok ? 1 : 0;
    v.transport = static_cast<std::uint8_t>(t);
    v.code = static_cast<std::uint16_t>(c);
    v.rank = rank;
    const std::size_t n = std::min(why.size(), sizeof v.reason - 1);
    std::memcpy(v.reason, why.data(), n);
    v.reason[n] = '\0';
    return v;
  }
  bool usable() const { return ok != 0; }
  probe_code code_value() const { return static_cast<probe_code>(code); }
  transport_kind kind() const { return static_cast<transport_kind>(transport); }
  std::string text() const { return std::string(reason, strnlen(reason, sizeof reason)); }
};
static_assert(sizeof(verdict) == 256 && std::is_trivially_copyable_v<verdict>);

/// Which pairs of ranks can reach each other through the chosen transport. reach[a*n + b]: rank a reached rank b
/// (as rank a reported it); a pair connects when both directions do.
struct connectivity_report {
  int ranks = 0;
  std::vector<std::uint8_t> reach;

  static connectivity_report full(int n) {
    return connectivity_report{n, std::vector<std::uint8_t>(static_cast<std::size_t>(n) * n, 1)};
  }
  bool connected(int a, int b) const {
    return a == b || (reach[static_cast<std::size_t>(a) * ranks + b] && reach[static_cast<std::size_t>(b) * ranks + a]);
  }
  /// Pairs (a < b) that do not connect, in order.
  std::vector<std::pair<int, int>> failed_pairs() const {
    std::vector<std::pair<int, int>> out;
    for (int a = 0; a < ranks; ++a)
      for (int b = a + 1; b < ranks; ++b)
        if (!connected(a, b)) out.emplace_back(a, b);
    return out;
  }
  /// Every pair connects: what one_shot needs (every rank writes to every peer).
  bool any_to_any() const { return failed_pairs().empty(); }
  /// Every rank connects to its ring successor: all ring needs (a switchless ring of nodes).
  bool neighbours() const {
    for (int r = 0; r < ranks; ++r)
      if (!connected(r, (r + 1) % ranks)) return false;
    return true;
  }
  bool allows(algorithm::algo a) const { return a == algorithm::algo::ring ? neighbours() : any_to_any(); }
  /// "every pair of 4 ranks connects" or "pairs that failed: 0-2, 1-3".
  std::string describe() const {
    const auto f = failed_pairs();
    if (f.empty()) return "every pair of " + std::to_string(ranks) + " ranks connects";
    std::string s = "pairs that failed:";
    for (std::size_t i = 0; i < f.size(); ++i)
      s += (i ? ", " : " ") + std::to_string(f[i].first) + "-" + std::to_string(f[i].second);
    return s;
  }
  /// Why algorithm `a` is refused (empty when allowed).
  std::string refusal(algorithm::algo a) const {
    if (allows(a)) return {};
    if (a == algorithm::algo::one_shot)
      return "one_shot needs every pair of ranks connected, and start-up found " + describe() +
             (neighbours() ? "; ring needs only ring neighbours and is allowed: use ring (ROCENANTE_ALGO=ring or auto)"
                           : "; ring neighbours do not connect either");
    return "ring needs every rank connected to its successor, and start-up found " + describe();
  }
};

/// Gathers every rank's row: `reachable(peer)` is this rank's own test (a test hook, or the transport's probe).
inline connectivity_report gather_connectivity(bootstrap::bootstrap_ref boot, const std::function<bool(int)>& reachable) {
  const int n = boot.size();
  std::vector<std::uint8_t> row(max_ranks, 1);
  for (int q = 0; q < n; ++q) row[q] = q == boot.rank() || !reachable ? 1 : (reachable(q) ? 1 : 0);
  std::vector<std::uint8_t> all(static_cast<std::size_t>(n) * max_ranks);
  boot.all_gather(row.data(), all.data(), max_ranks);
  connectivity_report r = connectivity_report::full(n);
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) r.reach[static_cast<std::size_t>(a) * n + b] = all[static_cast<std::size_t>(a) * max_ranks + b];
  return r;
}

/// "ranks 0, 2: <reason>; rank 3: <other reason>": verdicts that failed, grouped by identical reason.
inline std::string describe_failures(const std::vector<verdict>& vs) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (const verdict& v : vs) {
    if (v.usable()) continue;
    const std::string t = v.text().empty() ? to_string(v.code_value()) : v.text();
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == t; });
    if (it == groups.end()) groups.push_back({t, {v.rank}});
    else it->second.push_back(v.rank);
  }
  std::string s;
  for (const auto& g : groups) {
    s += s.empty() ? "" : "; ";
    s += g.second.size() == 1 ? "rank " : "ranks ";
    for (std::size_t i = 0; i < g.second.size(); ++i) s += (i ? ", " : "") + std::to_string(g.second[i]);
    s += ": " + g.first;
  }
  return s;
}

/// The decision, identical on every rank: what was asked, what was chosen, and why.
struct selection {
  env::transport_choice requested = env::transport_choice::automatic;
  env::algo_choice algo = env::algo_choice::automatic;
  transport_kind preferred = transport_kind::none;  ///< first candidate in preference order
  transport_kind chosen = transport_kind::none;
  bool fell_back = false;         ///< chosen != preferred
  std::vector<verdict> verdicts;  ///< per rank (index = rank), for `preferred`
  std::vector<verdict> chosen_verdicts;  ///< per rank, for `chosen`
  std::string reason;             ///< why `chosen`; names the failing rank(s) and their reasons
  connectivity_report connectivity;

  /// The ranks whose verdict on `preferred` failed.
  std::vector<int> failing_ranks() const {
    std::vector<int> r;
    for (const verdict& v : verdicts)
      if (!v.usable()) r.push_back(v.rank);
    return r;
  }
  /// The log line's body.
  std::string summary() const {
    std::string s = "transport " + std::string(to_string(chosen)) + " (ROCENANTE_TRANSPORT=" + env::to_string(requested) +
                    ", ROCENANTE_ALGO=" + env::to_string(algo) + "): " + reason;
    if (connectivity.ranks > 0) s += "; connectivity: " + connectivity.describe();
    return s;
  }
};

/// What selected_communicator (and select_transport) can be told besides the environment.
struct select_config {
  /// The environment's settings; unset: read with env::settings::read() on every rank at set-up. Their IB fields
  /// steer the ibverbs probe only: the ibverbs transport itself reads ROCENANTE_IB_* from the environment; so does
  /// socket_if (the socket probe) with ROCENANTE_SOCKET_IFNAME.
  std::optional<env::settings> settings;
  /// API equivalent of ROCENANTE_TRANSPORT / ROCENANTE_ALGO; when set, they win over the environment.
  std::optional<env::transport_choice> transport;
  std::optional<env::algo_choice> algo;
  /// Test hook: called with this rank's verdict of each candidate after the real probe; may overwrite it
  /// (e.g. verdict::make(kind, rank, probe_code::injected, "...")). Never a fake libibverbs.
  std::function<void(transport_kind, verdict&)> probe_hook;
  /// Test hook / transport probe: whether this rank reaches `peer` through the chosen transport (default: every
  /// peer, which is what a transport whose set-up succeeded guarantees for loopback).
  std::function<bool(transport_kind, int peer)> reachable;
  /// Run the start-up test collective of every allowed algorithm (consumes one sequence number per algorithm).
  bool self_test = true;
};

namespace select_detail {

inline constexpr std::uint32_t card_magic = 0x52435345;  // "RCSE"
inline constexpr std::uint32_t card_version = 3;  // 3: six transport kinds (cuda_ipc) and the host identity

/// One rank's contribution to the vote.
struct probe_card {
  std::uint32_t magic, version;
  std::int32_t rank;
  std::uint8_t transport_choice, algo_choice, env_ok, pad;
  std::uint64_t process_token;
  std::uint64_t host_token;  ///< core/identity.hpp: equal for ranks of one host
  std::uint32_t pid, pad2;
  char env_error[248];
  verdict v[transport_kinds];  ///< indexed by transport_kind
};
static_assert(std::is_trivially_copyable_v<probe_card>);

/// Same value on every rank of one process, different between processes (core/identity.hpp).
inline std::uint64_t process_token() { return identity::process(); }

inline verdict probe_ibverbs(int rank, const env::settings& s) {
#if ROCENANTE_HAS_IBVERBS
  namespace ib = transport::ib;
  const ib::availability a = ib::probe();
  if (!a.available)
    return verdict::make(transport_kind::ibverbs, rank,
                         ib::verbs().ok ? probe_code::no_devices : probe_code::library_missing, a.why);
  try {
    std::vector<env::ib_device_name> devs = s.ib_hca;
    if (devs.empty()) devs.push_back({ib::default_device(), 1});
    std::string names;
    for (const auto& d : devs) {
      ib::device_info info = ib::open_device(d.name, d.port, s.ib_gid_index);
      names += (names.empty() ? "" : ", ") + info.name + " GID " + std::to_string(info.gid_index) + " " + info.gid_text;
      ib::verbs().api.close_device(info.ctx);
    }
    return verdict::make(transport_kind::ibverbs, rank, probe_code::ok, names);
  } catch (const error& e) {
    return verdict::make(transport_kind::ibverbs, rank, probe_code::device_unusable, e.what());
  }
#else
  (void)s;
  return verdict::make(transport_kind::ibverbs, rank, probe_code::not_built,
                       "ibverbs not built into this binary (no rdma-core headers at build time)");
#endif
}

/// The socket transport's local probe: the address it would listen on (ROCENANTE_SOCKET_IFNAME must match an UP
/// IPv4 interface). Whether peers connect is found at set-up (reachable()). Host executor: transport::socket; GPU
/// executor: transport::cuda_socket (host-mapped windows).
inline verdict probe_socket(int rank, const env::settings& s) {
  try {
    return verdict::make(transport_kind::socket, rank, probe_code::ok, transport::sock::choose_address(s.socket_if).text());
  } catch (const error& e) {
    return verdict::make(transport_kind::socket, rank, probe_code::device_unusable, e.what());
  }
}

inline verdict probe_nccl(int rank, bool gpu_executor) {
  if (!gpu_executor)
    return verdict::make(transport_kind::nccl, rank, probe_code::wrong_executor,
                         "nccl runs with the GPU executor only (transport/nccl.hpp); the host executor has ibverbs, socket and "
                         "loopback");
  const auto& l = transport::nccl_api::instance();
  if (!l.ok) return verdict::make(transport_kind::nccl, rank, probe_code::library_missing, l.why);
  return verdict::make(transport_kind::nccl, rank, probe_code::ok, "libnccl " + l.version_string());
}

}  // namespace select_detail

/// Which executor the decision is for: the candidates differ (nccl exists only on the GPU).
enum class executor : std::uint8_t { host, gpu };

/// Candidates in preference order for a choice: auto on the host executor -> ibverbs, then loopback and socket
/// (vote_probes keeps the one that fits once the ranks' processes are known: loopback when every rank runs in one
/// process, socket otherwise); auto on the GPU executor -> cuda_ipc (usable when every rank is on one node), then
/// ibverbs, then nccl. socket on the GPU executor (cuda_socket) only when forced: it exists to run the whole proxy
/// path on machines without an RDMA device.
inline std::vector<transport_kind> candidates(env::transport_choice c, executor x) {
  switch (c) {
    case env::transport_choice::ibverbs: return {transport_kind::ibverbs};
    case env::transport_choice::nccl: return {transport_kind::nccl};
    case env::transport_choice::loopback: return {transport_kind::loopback};
    case env::transport_choice::socket: return {transport_kind::socket};
    case env::transport_choice::cuda_ipc: return {transport_kind::cuda_ipc};
    case env::transport_choice::automatic: break;
  }
  return x == executor::host ? std::vector{transport_kind::ibverbs, transport_kind::loopback, transport_kind::socket}
                             : std::vector{transport_kind::cuda_ipc, transport_kind::ibverbs, transport_kind::nccl};
}

/// Every rank's verdict on every candidate, after the exchange; identical on every rank.
struct vote_table {
  int ranks = 0;
  env::settings settings;  ///< this rank's (identical choices on every rank: checked)
  env::transport_choice requested = env::transport_choice::automatic;
  env::algo_choice algo = env::algo_choice::automatic;
  std::vector<transport_kind> order;
  std::vector<std::array<verdict, transport_kinds>> v;  ///< [rank][kind]

  std::vector<verdict> column(transport_kind k) const {
    std::vector<verdict> c;
    for (const auto& row : v) c.push_back(row[static_cast<int>(k)]);
    return c;
  }
  bool usable_everywhere(transport_kind k) const {
    for (const auto& row : v)
      if (!row[static_cast<int>(k)].usable()) return false;
    return true;
  }
  /// Marks `k` failed on `rank` (a later step: set-up, connectivity, self-test).
  void fail(transport_kind k, int rank, probe_code c, const std::string& why) {
    v[static_cast<std::size_t>(rank)][static_cast<int>(k)] = verdict::make(k, rank, c, why);
  }
};

/// Steps 1-2: every rank probes and the cards are exchanged (one all_gather). Throws, on every rank alike,
/// config_error when a rank's environment is invalid and config_mismatch_error when ranks asked for different
/// transports or algorithms.
inline vote_table vote_probes(bootstrap::bootstrap_ref boot, const select_config& cfg, executor x) {
  const int me = boot.rank(), n = boot.size();
  select_detail::probe_card mine{};
  mine.magic = select_detail::card_magic;
  mine.version = select_detail::card_version;
  mine.rank = me;
  mine.process_token = select_detail::process_token();
  mine.host_token = identity::host();
  mine.pid = static_cast<std::uint32_t>(::getpid());
  mine.env_ok = 1;
  vote_table t;
  t.ranks = n;
  try {
    t.settings = cfg.settings ? *cfg.settings : env::settings::read();
  } catch (const error& e) {
    mine.env_ok = 0;
    std::snprintf(mine.env_error, sizeof mine.env_error, "%s", e.what());
  }
  t.requested = cfg.transport.value_or(t.settings.transport);
  t.algo = cfg.algo.value_or(t.settings.algo);
  mine.transport_choice = static_cast<std::uint8_t>(t.requested);
  mine.algo_choice = static_cast<std::uint8_t>(t.algo);
  t.order = candidates(t.requested, x);
  for (int k = 0; k < transport_kinds; ++k)
    mine.v[k] = verdict::make(static_cast<transport_kind>(k), me, probe_code::not_probed, "not a candidate");
  if (mine.env_ok) {
    for (transport_kind k : t.order) {
      verdict& v = mine.v[static_cast<int>(k)];
      if (k == transport_kind::ibverbs) v = select_detail::probe_ibverbs(me, t.settings);
      else if (k == transport_kind::nccl) v = select_detail::probe_nccl(me, x == executor::gpu);
      else if (k == transport_kind::socket) v = select_detail::probe_socket(me, t.settings);
      else if (k == transport_kind::loopback) v = verdict::make(k, me, probe_code::ok, "in-process windows");
      else if (k == transport_kind::cuda_ipc)
        v = x == executor::gpu ? verdict::make(k, me, probe_code::ok, "GPU windows mapped between the processes of one node")
                               : verdict::make(k, me, probe_code::wrong_executor,
                                               "cuda_ipc runs with the GPU executor only (transport/cuda_ipc.hpp)");
      if (cfg.probe_hook) cfg.probe_hook(k, v);
      v.rank = me;
      v.transport = static_cast<std::uint8_t>(k);
    }
  }
  std::vector<select_detail::probe_card> all(static_cast<std::size_t>(n));
  boot.all_gather(&mine, all.data(), sizeof mine);

  for (int q = 0; q < n; ++q)
    if (all[q].magic != select_detail::card_magic || all[q].version != select_detail::card_version || all[q].rank != q)
      throw config_mismatch_error("version", "transport selection: rank " + std::to_string(q) +
                                                 " sent a selection card of another RoCEnante version; deploy one build");
  for (int q = 0; q < n; ++q)
    if (!all[q].env_ok)
      throw config_error("rank " + std::to_string(q) + ": " + std::string(all[q].env_error, strnlen(all[q].env_error, sizeof all[q].env_error)) +
                         " (seen by rank " + std::to_string(me) + "; docs/environment.md lists the accepted values)");
  for (int q = 1; q < n; ++q) {
    if (all[q].transport_choice != all[0].transport_choice)
      throw config_mismatch_error(
          "ROCENANTE_TRANSPORT", std::string("transport selection: ROCENANTE_TRANSPORT is ") +
                                     env::to_string(static_cast<env::transport_choice>(all[0].transport_choice)) +
                                     " on rank 0 but " + env::to_string(static_cast<env::transport_choice>(all[q].transport_choice)) +
                                     " on rank " + std::to_string(q) + "; every rank must ask for the same transport");
    if (all[q].algo_choice != all[0].algo_choice)
      throw config_mismatch_error(
          "ROCENANTE_ALGO", std::string("transport selection: ROCENANTE_ALGO is ") +
                                env::to_string(static_cast<env::algo_choice>(all[0].algo_choice)) + " on rank 0 but " +
                                env::to_string(static_cast<env::algo_choice>(all[q].algo_choice)) + " on rank " +
                                std::to_string(q) + "; every rank must ask for the same algorithm");
  }
  t.v.resize(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q)
    for (int k = 0; k < transport_kinds; ++k) t.v[q][k] = all[q].v[k];
  // Loopback: usable only when every rank shares rank 0's process.
  const int lb = static_cast<int>(transport_kind::loopback);
  for (int q = 0; q < n; ++q)
    if (t.v[q][lb].usable() && all[q].process_token != all[0].process_token)
      t.v[q][lb] = verdict::make(transport_kind::loopback, q, probe_code::other_process,
                                 "runs in another process (pid " + std::to_string(all[q].pid) +
                                     ") than rank 0 (pid " + std::to_string(all[0].pid) +
                                     "); loopback needs every rank in one process");
  // cuda_ipc: usable only when every rank runs on rank 0's host.
  const int ipc = static_cast<int>(transport_kind::cuda_ipc);
  for (int q = 0; q < n; ++q)
    if (t.v[q][ipc].usable() && all[q].host_token != all[0].host_token)
      t.v[q][ipc] = verdict::make(transport_kind::cuda_ipc, q, probe_code::other_host,
                                  "runs on another host than rank 0; cuda_ipc maps windows between the processes of one node");
  // auto on the host executor: the fallback after ibverbs is loopback when every rank runs in one process, socket
  // otherwise (the same on every rank: the tokens are the exchanged ones).
  if (t.requested == env::transport_choice::automatic && x == executor::host) {
    bool one_process = true;
    for (int q = 0; q < n; ++q) one_process = one_process && all[q].process_token == all[0].process_token;
    const transport_kind drop = one_process ? transport_kind::socket : transport_kind::loopback;
    t.order.erase(std::remove(t.order.begin(), t.order.end(), drop), t.order.end());
  }
  return t;
}

/// Step 3: the first candidate at or after `from` usable on every rank; identical on every rank. Throws
/// transport_error when there is none (every rank alike: the table is the same everywhere).
inline selection decide(const vote_table& t, std::size_t from = 0) {
  selection s;
  s.requested = t.requested;
  s.algo = t.algo;
  s.preferred = t.order.empty() ? transport_kind::none : t.order.front();
  s.verdicts = t.column(s.preferred);
  std::string why_not;
  for (std::size_t i = 0; i < t.order.size(); ++i) {
    const transport_kind k = t.order[i];
    if (i >= from && t.usable_everywhere(k)) {
      s.chosen = k;
      s.chosen_verdicts = t.column(k);
      s.fell_back = k != s.preferred;
      if (!s.fell_back) {
        s.reason = std::string(to_string(k)) + " usable on every rank";
        const std::string rank0 = t.v[0][static_cast<int>(k)].text();
        if (!rank0.empty()) s.reason += " (rank 0: " + rank0 + ")";
      } else {
        s.reason = why_not + "; every rank falls back to " + to_string(k) + " together";
      }
      return s;
    }
    why_not += (why_not.empty() ? "" : "; then ") + std::string(to_string(k)) + " unusable: " + describe_failures(t.column(k));
  }
  const bool forced = t.requested != env::transport_choice::automatic;
  throw transport_error(std::string("no transport usable by every rank (ROCENANTE_TRANSPORT=") + env::to_string(t.requested) +
                        "): " + why_not +
                        (forced ? "; the transport was forced, so there is no fallback (unset ROCENANTE_TRANSPORT or set "
                                  "it to auto to allow one)"
                                : ""));
}

/// Steps 1-3 for callers that build the transport themselves (GPU executor: ibverbs or nccl). Logs the decision
/// once (INFO; WARN when some ranks could have used the preferred transport).
inline selection select_transport(bootstrap::bootstrap_ref boot, const select_config& cfg, executor x) {
  vote_table t = vote_probes(boot, cfg, x);
  selection s = decide(t);
  const bool split = s.fell_back && s.failing_ranks().size() < static_cast<std::size_t>(t.ranks);
  log_line(split ? log_level::warn : log_level::info, t.settings.debug, boot.rank(), s.summary());
  return s;
}

/// All-gathers (code, reason) of a step; marks the ranks that failed in `t`. True when some rank failed.
inline bool vote_step(bootstrap::bootstrap_ref b, vote_table& t, transport_kind k, probe_code code, const std::string& why) {
  const verdict mine = verdict::make(k, b.rank(), code, why);
  std::vector<verdict> all(static_cast<std::size_t>(b.size()));
  b.all_gather(&mine, all.data(), sizeof mine);
  bool failed = false;
  for (int q = 0; q < b.size(); ++q)
    if (!all[q].usable()) {
      t.fail(k, q, all[q].code_value(), all[q].text());
      failed = true;
    }
  return failed;
}

/// Step 4, the same for every executor: build the chosen candidate, vote on its set-up, gather its connectivity,
/// run the start-up self-test, vote again; a failure anywhere moves every rank to the next candidate (auto) or fails
/// every rank (forced). `build(kind)` constructs the communicator (throws rocenante::error when it cannot),
/// `reset()` drops it, `reachable(kind)` is the transport's own per-pair probe (empty: every pair connects),
/// `self_test(conn)` returns an empty string or why the start-up collective failed. Returns the decision,
/// identical on every rank.
template <class Build, class Reset, class Reach, class SelfTest>
selection settle(bootstrap::bootstrap_ref b, vote_table& t, const select_config& cfg, Build&& build, Reset&& reset,
                 Reach&& reachable, SelfTest&& self_test) {
  const bool forced = t.requested != env::transport_choice::automatic;
  std::size_t from = 0;
  for (;;) {
    selection s = decide(t, from);  // throws when nothing is left
    std::string failure;
    probe_code code = probe_code::ok;
    try {
      build(s.chosen);
    } catch (const error& e) {
      failure = e.what();
      code = probe_code::setup_failed;
    }
    // Vote on set-up: a rank whose set-up threw must not leave its peers with a half-built communicator.
    bool failed = vote_step(b, t, s.chosen, code, failure);
    connectivity_report conn;
    if (!failed) {
      // Every rank gathers the same matrix, so every rank draws the same conclusions from it without a vote.
      std::function<bool(int)> reach = reachable(s.chosen);
      if (cfg.reachable) reach = [&](int q) { return cfg.reachable(s.chosen, q); };
      conn = gather_connectivity(b, reach);
      if (!conn.neighbours()) {
        for (int q = 0; q < t.ranks; ++q)
          t.fail(s.chosen, q, probe_code::unreachable, "ring neighbours do not connect: " + conn.describe());
        failed = true;
      }
    }
    if (!failed && cfg.self_test) {
      const std::string why = self_test(conn);
      failed = vote_step(b, t, s.chosen, why.empty() ? probe_code::ok : probe_code::self_test_failed, why);
    }
    if (!failed) {
      if (s.algo == env::algo_choice::one_shot && !conn.any_to_any())
        throw config_error("rank " + std::to_string(b.rank()) + ": ROCENANTE_ALGO=one_shot refused on transport " +
                           to_string(s.chosen) + ": " + conn.refusal(algorithm::algo::one_shot));
      // Decide again on the updated table: the reason then names every failure met on the way (set-up,
      // connectivity, self-test of earlier candidates).
      selection out = decide(t, from);
      out.connectivity = conn;
      return out;
    }
    reset();
    if (forced)
      throw transport_error(std::string(to_string(s.chosen)) + " was forced (ROCENANTE_TRANSPORT) and failed at start-up: " +
                            describe_failures(t.column(s.chosen)));
    from = static_cast<std::size_t>(std::find(t.order.begin(), t.order.end(), s.chosen) - t.order.begin()) + 1;
  }
}

/// The decision's log line, once per rank (INFO; WARN when some ranks could have used the preferred transport).
/// The decision as the start-up log line states it: selection::summary() and, with more than one rank, the
/// algorithm clause (which algorithm a call that names none runs, and up to which size).
inline std::string decision_line(const selection& sel, int size) {
  std::string line = sel.summary();
  if (sel.chosen != transport_kind::none && size > 1) {
    const std::uint64_t lim = algorithm::one_shot_limit(size);
    line += "; algorithm " + std::string(env::to_string(sel.algo));
    if (sel.algo == env::algo_choice::automatic)
      line += sel.connectivity.any_to_any()
                  ? " (" + std::string(algorithm::h200_single_gpu.name) + ": one_shot up to " + std::to_string(lim / 1024) +
                        " KiB at " + std::to_string(size) + " ranks, ring above)"
                  : " (ring only: one_shot refused by connectivity)";
  }
  return line;
}

inline void log_decision(const vote_table& t, const selection& sel, int rank, int size) {
  const bool split = sel.fell_back && sel.failing_ranks().size() < static_cast<std::size_t>(t.ranks);
  log_line(split ? log_level::warn : log_level::info, t.settings.debug, rank, decision_line(sel, size));
}

template <class... Comms>
class selected_base {
 public:
  selected_base(const selected_base&) = delete;
  selected_base& operator=(const selected_base&) = delete;

  /// The start-up decision, identical on every rank.
  const selection& selected() const { return sel_; }
  /// The start-up decision as one line, identical on every rank: what the start-up log line says (decision_line).
  std::string decision() const { return decision_line(sel_, size_); }
  /// The sequence number of the first collective called after construction: options::first_sequence (after the
  /// environment's settings) plus the start-up collectives that ran on the communicator that was kept. Identical on
  /// every rank; messages name sequences, so a binding can count calls from here.
  std::uint32_t first_call_sequence() const { return first_sequence_ + setup_calls_; }
  transport_kind transport() const { return sel_.chosen; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  /// The algorithm a call of `bytes` bytes per rank that names none runs.
  algorithm::algo algorithm_for(std::uint64_t bytes) const {
    if (sel_.algo == env::algo_choice::one_shot) return algorithm::algo::one_shot;
    if (sel_.algo == env::algo_choice::ring || !sel_.connectivity.any_to_any()) return algorithm::algo::ring;
    return algorithm::choose(bytes, size_);
  }

  /// Health without waiting for anything (the built communicator's).
  health check_health() const {
    health h;
    std::visit(
        [&](const auto& c) {
          if constexpr (!std::is_same_v<std::decay_t<decltype(c)>, std::monostate>) h = c->check_health();
        },
        comm_);
    return h;
  }
  const std::string& last_error() const { return last_error_; }

  /// Collectives that did not complete on this rank (the built communicator's failures(); 0 over a transport that
  /// keeps no count, i.e. nccl).
  std::uint64_t failures() const {
    std::uint64_t n = 0;
    std::visit(
        [&](const auto& c) {
          if constexpr (requires { c->failures(); }) n = c->failures();
        },
        comm_);
    return n;
  }

  /// Why a call would be refused (empty: it would run): the built communicator's refusal (call_refusal), plus
  /// what start-up connectivity refuses; `a` empty is the algorithm a call that names none runs. Rank-invariant,
  /// never poisons.
  std::string refusal(std::size_t count, dtype t, std::optional<algorithm::algo> a = std::nullopt,
                      protocol::collective c = protocol::collective::all_reduce) const {
    const algorithm::algo x = a ? *a
                              : c == protocol::collective::all_gather ? algorithm::algo::one_shot
                                                                       : algorithm_for(std::uint64_t{count} * element_bytes(t));
    std::string why = sel_.connectivity.refusal(x);
    if (!why.empty()) return why;
    std::visit(
        [&](const auto& p) {
          if constexpr (std::is_same_v<std::decay_t<decltype(p)>, std::monostate>) why = "no communicator was built";
          else if constexpr (requires { p->refusal(count, t, x, c); }) why = p->refusal(count, t, x, c);
          else why = call_refusal(count, t, x, c, nullptr, "nccl transport");  // NCCL's own limits beyond these
        },
        comm_);
    return why;
  }
  bool accepts(std::size_t count, dtype t, std::optional<algorithm::algo> a = std::nullopt,
               protocol::collective c = protocol::collective::all_reduce) const {
    return refusal(count, t, a, c).empty();
  }

  /// The underlying communicator, when it is of type C (nullptr otherwise).
  template <class C>
  C* get() {
    auto* p = std::get_if<std::unique_ptr<C>>(&comm_);
    return p ? p->get() : nullptr;
  }

 protected:
  selected_base() = default;
  ~selected_base() = default;

  /// A call of algorithm `a` that start-up connectivity refuses: not_supported, no sequence consumed (every rank
  /// refuses alike: the connectivity report is the same everywhere).
  std::optional<status> refuse_if_unreachable(algorithm::algo a) {
    const std::string why = sel_.connectivity.refusal(a);
    if (why.empty()) return std::nullopt;
    last_error_ = "rocenante rank " + std::to_string(rank_) + ": " + why;
    return status::not_supported;
  }

  /// f(the built communicator); its last_error() becomes this object's.
  template <class F>
  status pass(F&& f) {
    status st = status::internal;
    std::visit(
        [&](auto& c) {
          if constexpr (std::is_same_v<std::decay_t<decltype(c)>, std::monostate>) {
            last_error_ = "rocenante: no communicator was built";
          } else {
            st = f(*c);
            last_error_ = st == status::ok ? std::string() : c->last_error();
          }
        },
        comm_);
    return st;
  }

  /// What every selected communicator's constructor does, `self` being that communicator: the vote, then settle
  /// (`self.build(b, kind, options)` constructs a candidate into comm_, `self.self_test(conn, options)` runs the
  /// start-up collective on it and says what went wrong), then the decision's log line.
  template <class Self>
  void select_and_build(Self& self, bootstrap::bootstrap_ref b, const options& opts, const select_config& cfg,
                        executor e) {
    vote_table t = vote_probes(b, cfg, e);
    const options o = t.settings.apply(opts);
    rank_ = b.rank();
    size_ = b.size();
    first_sequence_ = o.first_sequence;
    sel_ = settle(
        b, t, cfg,
        [&](transport_kind k) {
          setup_calls_ = 0;  // a new candidate starts at first_sequence again
          self.build(b, k, o);
        },
        [&] { comm_ = std::monostate{}; },
        [&](transport_kind) { return built_reachable(); },
        [&](const connectivity_report& conn) { return self.self_test(conn, o); });
    log_decision(t, sel_, rank_, size_);
  }

  /// The built communicator's transport's own per-pair probe, `bool reachable(int peer)` (ibverbs: a signalled
  /// zero-length RDMA WRITE per queue pair at set-up; socket: both connections of the pair established at set-up;
  /// this rank's view, gathered by gather_connectivity); empty (every pair) when its transport has none.
  std::function<bool(int)> built_reachable() {
    std::function<bool(int)> reach;
    std::visit(
        [&](auto& p) {
          if constexpr (!std::is_same_v<std::decay_t<decltype(p)>, std::monostate>) {
            using comm_type = typename std::decay_t<decltype(p)>::element_type;
            if constexpr (requires(comm_type& c) { { c.transport().reachable(0) } -> std::convertible_to<bool>; })
              reach = [c = p.get()](int q) { return static_cast<bool>(c->transport().reachable(q)); };
          }
        },
        comm_);
    return reach;
  }

  std::variant<std::monostate, std::unique_ptr<Comms>...> comm_;
  selection sel_;
  int rank_ = 0, size_ = 1;
  std::string last_error_;
  std::uint32_t first_sequence_ = 1;
  std::uint32_t setup_calls_ = 0;  ///< start-up collectives run on comm_ (each self_test call counts one)
};

namespace select_detail {
#if ROCENANTE_HAS_IBVERBS
using host_base = selected_base<communicator<transport::loopback>, communicator<transport::socket>,
                                communicator<transport::ibverbs>>;
#else
using host_base = selected_base<communicator<transport::loopback>, communicator<transport::socket>>;
#endif
}  // namespace select_detail

/// A host communicator over the transport the ranks chose together; same calls as host::communicator.
///
/// Who calls: every rank, collectively (as host::communicator). Set-up throws config_error (bad environment, forced
/// algorithm the connectivity refuses), config_mismatch_error (ranks asked for different transports or
/// algorithms), transport_error (no usable transport; a forced transport failed on some rank: the message names
/// the rank and its reason). Calls return a status and never throw.
/// Algorithm of calls that name none: ROCENANTE_ALGO / select_config::algo (auto: algorithm::choose).
/// The start-up collective (every executor's): rank r contributes small integers, exact in fp32 in any summation
/// order, so every rank computes the exact reference itself, and an output equal to it on every rank (the vote that
/// follows) is also byte-identical across ranks (hazard H10).
inline std::size_t self_test_count(int ranks) { return 64 * static_cast<std::size_t>(ranks) + 3; }
inline float self_test_value(int rank, std::size_t i) { return static_cast<float>((rank + 1) * 3 + static_cast<int>(i % 7)); }
/// Empty, or why the start-up all-reduce with algorithm `a` (status `st`, message `error`) is wrong.
inline std::string self_test_check(algorithm::algo a, status st, const std::string& error, const float* out,
                                   std::size_t count, int ranks) {
  const char* an = a == algorithm::algo::ring ? "ring" : "one_shot";
  if (st != status::ok) return std::string("start-up ") + an + " all-reduce returned " + to_string(st) + ": " + error;
  for (std::size_t i = 0; i < count; ++i) {
    float ref = 0;
    for (int q = 0; q < ranks; ++q) ref += self_test_value(q, i);
    if (out[i] != ref)
      return std::string("start-up ") + an + " all-reduce: element " + std::to_string(i) + " is " +
             std::to_string(out[i]) + ", expected " + std::to_string(ref);
  }
  return {};
}

/// What the host and GPU selected communicators share: the decision, one communicator over whichever candidate was
/// built (a variant over `Comms`), and the forwarding of a call to it. Derived classes build it through `settle`.
class selected_communicator : public select_detail::host_base {
 public:
  using loopback_comm = communicator<transport::loopback>;
  using socket_comm = communicator<transport::socket>;
#if ROCENANTE_HAS_IBVERBS
  using ibverbs_comm = communicator<transport::ibverbs>;
#else
  struct ibverbs_comm {};  // never constructed
#endif

  template <bootstrap::bootstrap B>
  selected_communicator(B& boot, const options& opts, select_config cfg = {}) {
    select_and_build(*this, bootstrap::bootstrap_ref(boot), opts, cfg, executor::host);
  }

  /// All-reduce with the configured algorithm (ROCENANTE_ALGO; auto: by size and rank count).
  template <class T>
  status all_reduce(const T* in, T* out, std::size_t count) {
    return all_reduce(in, out, count, algorithm::automatic{});
  }
  template <class T>
  status all_reduce(const T* in, T* out, std::size_t count, algorithm::automatic) {
    if (algorithm_for(std::uint64_t{count} * sizeof(T)) == algorithm::algo::ring)
      return all_reduce(in, out, count, algorithm::ring{});
    return all_reduce(in, out, count, algorithm::one_shot{});
  }
  /// A named algorithm; refused (not_supported, no sequence consumed: every rank refuses alike, since the
  /// connectivity report is the same everywhere) when start-up found it cannot run.
  template <algorithm::algorithm A, class T>
  status all_reduce(const T* in, T* out, std::size_t count, A a) {
    if (auto s = refuse_if_unreachable(A::id)) return *s;
    return pass([&](auto& c) { return c.all_reduce(in, out, count, a); });
  }
  template <class T>
  status all_gather(const T* in, T* out, std::size_t count) {
    if (auto s = refuse_if_unreachable(algorithm::algo::one_shot)) return *s;
    return pass([&](auto& c) { return c.all_gather(in, out, count); });
  }
  /// Runtime dispatch (tools).
  status all_reduce(const void* in, void* out, std::size_t count, dtype t, algorithm::algo a) {
    if (auto s = refuse_if_unreachable(a)) return *s;
    return pass([&](auto& c) { return c.all_reduce(in, out, count, t, a); });
  }
  status all_reduce(const void* in, void* out, std::size_t count, dtype t, algorithm::automatic) {
    return all_reduce(in, out, count, t, algorithm_for(std::uint64_t{count} * element_bytes(t)));
  }

  status all_gather(const void* in, void* out, std::size_t count, dtype t) {
    if (auto s = refuse_if_unreachable(algorithm::algo::one_shot)) return *s;
    return pass([&](auto& c) { return c.all_gather(in, out, count, t); });
  }

  /// communicator::reject: refuses this call for a reason the caller found, telling the peers (poisons).
  status reject(const std::string& why, status code = status::invalid_argument) {
    return pass([&](auto& c) { return c.reject(why, code); });
  }

 private:
  friend select_detail::host_base;  // select_and_build() calls build and self_test

  void build(bootstrap::bootstrap_ref b, transport_kind k, const options& o) {
    if (k == transport_kind::loopback) {
      comm_ = std::make_unique<loopback_comm>(b, o);
      return;
    }
    if (k == transport_kind::socket) {
      comm_ = std::make_unique<socket_comm>(b, o);
      return;
    }
#if ROCENANTE_HAS_IBVERBS
    if (k == transport_kind::ibverbs) {
      comm_ = std::make_unique<ibverbs_comm>(b, o);
      return;
    }
#endif
    throw transport_error(std::string("transport ") + to_string(k) + " cannot be built by the host executor");
  }

  /// Start-up collective of every allowed algorithm (self_test_check).
  std::string self_test(const connectivity_report& conn, const options&) {
    const int me = rank_, n = size_;
    const std::size_t count = self_test_count(n);
    std::vector<float> in(count), out(count);
    for (std::size_t i = 0; i < count; ++i) in[i] = self_test_value(me, i);
    for (algorithm::algo a : {algorithm::algo::one_shot, algorithm::algo::ring}) {
      if (!conn.allows(a) || (a == algorithm::algo::ring && n < 2)) continue;
      std::fill(out.begin(), out.end(), -1.0f);
      ++setup_calls_;
      const status st = pass([&](auto& c) { return c.all_reduce(in.data(), out.data(), count, dtype::f32, a); });
      if (std::string why = self_test_check(a, st, last_error_, out.data(), count, n); !why.empty()) return why;
    }
    return {};
  }
};

}  // namespace rocenante::host

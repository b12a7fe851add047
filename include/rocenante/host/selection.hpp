// host/selection.hpp — the start-up decision both executors share: which transport every rank uses, decided by all
// ranks together (hazard H9), logged once and queryable (hazard H15), then fixed for the life of the communicator.
// The host executor's candidates are in host/select.hpp, the GPU executor's in gpu/candidates.hpp; each is a
// `candidate_rules` type that this file's vote asks.
//
//   1. Every rank reads the environment (core/env.hpp) and probes each candidate of its executor locally (the
//      rules' probe: ibverbs and socket here, shared by both executors; loopback, nccl, cuda_ipc in the rules).
//   2. One set-up vote (bootstrap/vote.hpp, step "transport probes") of a fixed-size card per rank: choices,
//      process and host tokens, and a verdict {ok, reason code, short reason} per candidate. A candidate that needs
//      every rank in one process or on one host (the rules' needs()) is unusable on the ranks that are not.
//   3. Every rank evaluates the same table the same way: the first candidate, in preference order, that is ok on
//      every rank is chosen. `auto` falls back *together*; a forced transport that fails on any rank is a
//      transport_error on every rank, naming the ranks and their reasons.
//   4. settle() builds the chosen candidate, gathers its connectivity (pairs that fail; only ring neighbours =>
//      one_shot refused, ring allowed; not even neighbours => the transport is unusable) and runs a start-up test
//      collective of every allowed algorithm against an exact reference (hence byte-identical across ranks). Each
//      is a set-up vote ("build <kind>", "connectivity of <kind>", "self-test on <kind>"), and every local step
//      inside a build is one too, so a failure anywhere on any rank moves every rank to the next candidate (auto)
//      or fails every rank (forced), with the same table, reason and log line on every rank. Connectivity comes
//      from the transport's own `reachable(peer)` when it has one: the ibverbs transport probes every queue pair
//      at set-up (a signalled zero-length RDMA WRITE; a pair that cannot even be connected counts as unreachable),
//      so a cut link between two ranks is reported as the failing pair (tests/softroce/vm/select_cut.sh).
//
// Fail-stop after start-up: the transport never changes once chosen. A runtime failure (timeout, dead peer, peer
// abort) poisons the communicator and is reported naming the peer; nothing switches to another transport mid-run,
// because ranks could not agree on the switch point without a working transport. To recover, build a new
// communicator (which runs the whole decision again).
//
// Host code. The ibverbs candidate exists when rdma-core's headers were found at build time (define
// ROCENANTE_NO_IBVERBS to leave it out); without them its verdict is "not built into this binary".
#pragma once

#include <unistd.h>

#include <algorithm>
#include <array>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "../algorithm/auto.hpp"
#include "../bootstrap/concepts.hpp"
#include "../bootstrap/vote.hpp"
#include "../config.hpp"
#include "../core/capabilities.hpp"
#include "../core/env.hpp"
#include "../core/error.hpp"
#include "../core/identity.hpp"
#include "../core/log.hpp"
#include "../core/options.hpp"
#include "../core/status.hpp"
#include "../protocol/flags.hpp"
#include "../transport/socket/net.hpp"
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
  injected,           ///< a test build's fault plan failed the probe (bootstrap/vote.hpp)
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
    if (a != algorithm::algo::ring)
      return std::string(a == algorithm::algo::two_shot ? "two_shot" : "one_shot") +
             " needs every pair of ranks connected, and start-up found " + describe() +
             (neighbours() ? "; ring needs only ring neighbours and is allowed: use ring (ROCENANTE_ALGO=ring or auto)"
                           : "; ring neighbours do not connect either");
    return "ring needs every rank connected to its successor, and start-up found " + describe();
  }
};

/// Gathers every rank's row (a set-up vote named `step`): `reachable(peer)` is this rank's own test (the
/// transport's probe; empty: every peer). A test build's fault plan can cut pairs (setup::fault_cuts).
inline connectivity_report gather_connectivity(bootstrap::bootstrap_ref boot, const std::function<bool(int)>& reachable,
                                               std::string_view step = "connectivity") {
  const int n = boot.size(), me = boot.rank();
  std::array<std::uint8_t, max_ranks> row;
  row.fill(1);
  const auto all = setup::vote(boot, step, row, [&] {
    for (int q = 0; q < n; ++q)
      row[q] = q == me || ((!reachable || reachable(q)) && !setup::fault_cuts(me, q)) ? 1 : 0;
  });
  connectivity_report r = connectivity_report::full(n);
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) r.reach[static_cast<std::size_t>(a) * n + b] = all[a][b];
  return r;
}

/// "ranks 0, 2: <reason>; rank 3: <other reason>": verdicts that failed, grouped by identical reason
/// (setup::describe).
inline std::string describe_failures(const std::vector<verdict>& vs) {
  std::vector<setup::failure> fs;
  for (const verdict& v : vs)
    if (!v.usable()) fs.push_back({v.rank, v.text().empty() ? to_string(v.code_value()) : v.text()});
  return setup::describe(fs);
}

/// The decision, identical on every rank: what was asked, what was chosen, and why.
struct selection {
  env::transport_choice requested = env::transport_choice::automatic;
  env::algo_choice algo = env::algo_choice::automatic;
  transport_kind preferred = transport_kind::none;  ///< first candidate in preference order
  transport_kind chosen = transport_kind::none;
  bool fell_back = false;         ///< chosen != preferred
  /// A candidate before `chosen` failed on some ranks but not all: those ranks could have used it (the log line is
  /// a WARN).
  bool split = false;
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
  /// Run the start-up test collective of every allowed algorithm (consumes one sequence number per algorithm).
  bool self_test = true;
};

/// The one transport a forced choice names (ROCENANTE_TRANSPORT other than auto); none for auto.
inline std::optional<transport_kind> forced_kind(env::transport_choice c) {
  switch (c) {
    case env::transport_choice::ibverbs: return transport_kind::ibverbs;
    case env::transport_choice::nccl: return transport_kind::nccl;
    case env::transport_choice::loopback: return transport_kind::loopback;
    case env::transport_choice::socket: return transport_kind::socket;
    case env::transport_choice::cuda_ipc: return transport_kind::cuda_ipc;
    case env::transport_choice::automatic: break;
  }
  return std::nullopt;
}

/// Where a candidate needs its ranks to run.
enum class placement : std::uint8_t { anywhere, one_process, one_host };

/// Where the ranks of this decision run, from the exchanged cards.
struct placement_facts {
  bool one_process = true;  ///< every rank runs in rank 0's process
  bool one_host = true;     ///< every rank runs on rank 0's host
};

/// An executor's candidates, as the vote asks them: `order(choice)` — what to probe, in preference order;
/// `probe(kind, rank, settings)` — this rank's verdict (never throws); `needs(kind)` — where its ranks must run;
/// `arrange(choice, order, facts)` — the order once the ranks' placement is known (identical on every rank).
template <class R>
concept candidate_rules = requires(env::transport_choice c, transport_kind k, int rank, const env::settings& s,
                                   std::vector<transport_kind> order, const placement_facts& f) {
  { R::order(c) } -> std::same_as<std::vector<transport_kind>>;
  { R::probe(k, rank, s) } -> std::same_as<verdict>;
  { R::needs(k) } -> std::same_as<placement>;
  { R::arrange(c, order, f) } -> std::same_as<std::vector<transport_kind>>;
};

namespace select_detail {

inline constexpr std::uint32_t card_magic = 0x52435345;  // "RCSE"
inline constexpr std::uint32_t card_version = 4;  // 4: the outcome travels in the set-up vote's ballot

/// One rank's contribution to the vote.
struct probe_card {
  std::uint32_t magic, version;
  std::int32_t rank;
  std::uint8_t transport_choice, algo_choice, pad[2];
  std::uint64_t process_token;
  std::uint64_t host_token;  ///< core/identity.hpp: equal for ranks of one host
  std::uint32_t pid, pad2;
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

}  // namespace select_detail

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

/// Steps 1-2: every rank probes its executor's candidates (`Rules`) and the cards are exchanged (the set-up vote
/// "transport probes"; a test build's fault plan can fail a rank's probe of one candidate at the step
/// "probe <kind>"). Throws, on every rank alike, config_error when a rank's environment is invalid (the vote names
/// the rank) and config_mismatch_error when ranks asked for different transports or algorithms.
template <candidate_rules Rules>
vote_table vote_probes(bootstrap::bootstrap_ref boot, const select_config& cfg) {
  const int me = boot.rank(), n = boot.size();
  select_detail::probe_card mine{};
  mine.magic = select_detail::card_magic;
  mine.version = select_detail::card_version;
  mine.rank = me;
  mine.process_token = select_detail::process_token();
  mine.host_token = identity::host();
  mine.pid = static_cast<std::uint32_t>(::getpid());
  for (int k = 0; k < transport_kinds; ++k)
    mine.v[k] = verdict::make(static_cast<transport_kind>(k), me, probe_code::not_probed, "not a candidate");
  vote_table t;
  t.ranks = n;
  const std::vector<select_detail::probe_card> all = setup::vote(boot, "transport probes", mine, [&] {
    try {
      t.settings = cfg.settings ? *cfg.settings : env::settings::read();
    } catch (const config_error& e) {
      throw config_error(std::string(e.what()) + " (docs/environment.md lists the accepted values)");
    }
    t.requested = cfg.transport.value_or(t.settings.transport);
    t.algo = cfg.algo.value_or(t.settings.algo);
    mine.transport_choice = static_cast<std::uint8_t>(t.requested);
    mine.algo_choice = static_cast<std::uint8_t>(t.algo);
    for (transport_kind k : Rules::order(t.requested)) {
      verdict& v = mine.v[static_cast<int>(k)];
      try {
        setup::fault_point(me, std::string("probe ") + to_string(k));
        v = Rules::probe(k, me, t.settings);
      } catch (const error& e) {
        v = verdict::make(k, me, probe_code::injected, e.what());
      }
      v.rank = me;
      v.transport = static_cast<std::uint8_t>(k);
    }
  });

  for (int q = 0; q < n; ++q)
    if (all[q].magic != select_detail::card_magic || all[q].version != select_detail::card_version || all[q].rank != q)
      throw config_mismatch_error("version", "transport selection: rank " + std::to_string(q) +
                                                 " sent a selection card of another RoCEnante version; deploy one build");
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
  // Where the ranks run decides the candidates that need one process or one host (the same on every rank: the
  // tokens are the exchanged ones).
  placement_facts facts;
  for (int q = 0; q < n; ++q) {
    facts.one_process = facts.one_process && all[q].process_token == all[0].process_token;
    facts.one_host = facts.one_host && all[q].host_token == all[0].host_token;
  }
  for (int k = 0; k < transport_kinds; ++k) {
    const auto kind = static_cast<transport_kind>(k);
    const placement need = Rules::needs(kind);
    for (int q = 0; q < n && need != placement::anywhere; ++q) {
      if (!t.v[q][k].usable()) continue;
      if (need == placement::one_process && all[q].process_token != all[0].process_token)
        t.v[q][k] = verdict::make(kind, q, probe_code::other_process,
                                  "runs in another process (pid " + std::to_string(all[q].pid) + ") than rank 0 (pid " +
                                      std::to_string(all[0].pid) + "); " + to_string(kind) +
                                      " needs every rank in one process");
      if (need == placement::one_host && all[q].host_token != all[0].host_token)
        t.v[q][k] = verdict::make(kind, q, probe_code::other_host,
                                  std::string("runs on another host than rank 0; ") + to_string(kind) +
                                      " needs every rank on one node");
    }
  }
  t.order = Rules::arrange(t.requested, Rules::order(t.requested), facts);
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
    const std::vector<verdict> col = t.column(k);
    const auto failing = std::count_if(col.begin(), col.end(), [](const verdict& v) { return !v.usable(); });
    s.split = s.split || (failing > 0 && failing < t.ranks);
    why_not += (why_not.empty() ? "" : "; then ") + std::string(to_string(k)) + " unusable: " + describe_failures(col);
  }
  const bool forced = t.requested != env::transport_choice::automatic;
  throw transport_error(std::string("no transport usable by every rank (ROCENANTE_TRANSPORT=") + env::to_string(t.requested) +
                        "): " + why_not +
                        (forced ? "; the transport was forced, so there is no fallback (unset ROCENANTE_TRANSPORT or set "
                                  "it to auto to allow one)"
                                : ""));
}

/// Steps 1-3 for callers that build the transport themselves. Logs the decision once (INFO; WARN when some ranks
/// could have used an earlier candidate).
template <candidate_rules Rules>
selection select_transport(bootstrap::bootstrap_ref boot, const select_config& cfg) {
  vote_table t = vote_probes<Rules>(boot, cfg);
  selection s = decide(t);
  log_line(s.split ? log_level::warn : log_level::info, t.settings.debug, boot.rank(), s.summary());
  return s;
}

/// Step 4, the same for every executor: build the chosen candidate, gather its connectivity, run the start-up
/// self-test, each a set-up vote; a failure on any rank moves every rank to the next candidate (auto) or fails
/// every rank (forced). `build(kind)` constructs the communicator (throws rocenante::error when it cannot),
/// `reset()` drops it, `reachable(kind)` is the transport's own per-pair probe (empty: every pair connects),
/// `self_test(conn)` returns an empty string or why the start-up collective failed. A failing rank is recorded in
/// the table with the innermost step that failed and its reason. Returns the decision, identical on every rank.
template <class Build, class Reset, class Reach, class SelfTest>
selection settle(bootstrap::bootstrap_ref b, vote_table& t, const select_config& cfg, Build&& build, Reset&& reset,
                 Reach&& reachable, SelfTest&& self_test) {
  const bool forced = t.requested != env::transport_choice::automatic;
  std::size_t from = 0;
  for (;;) {
    selection s = decide(t, from);  // throws when nothing is left
    const std::string name = to_string(s.chosen);
    connectivity_report conn;
    bool failed = false;
    probe_code code = probe_code::setup_failed;
    try {
      // A rank whose build failed must not leave its peers with a half-built communicator: the vote ends the build.
      setup::vote(b, "build " + name, [&] { build(s.chosen); });
      // Every rank gathers the same matrix, so every rank draws the same conclusions from it without a vote.
      conn = gather_connectivity(b, reachable(s.chosen), "connectivity of " + name);
      if (!conn.neighbours()) {
        for (int q = 0; q < t.ranks; ++q)
          t.fail(s.chosen, q, probe_code::unreachable, "ring neighbours do not connect: " + conn.describe());
        failed = true;
      } else if (cfg.self_test) {
        code = probe_code::self_test_failed;
        setup::vote(b, "self-test on " + name, [&] {
          if (const std::string why = self_test(conn); !why.empty()) throw transport_error(why);
        });
      }
    } catch (const setup::vote_failure& f) {
      for (const setup::failure& x : f.failures()) t.fail(s.chosen, x.rank, code, "step '" + f.step() + "': " + x.why);
      failed = true;
    }
    if (!failed) {
      if ((s.algo == env::algo_choice::one_shot || s.algo == env::algo_choice::two_shot) && !conn.any_to_any()) {
        const auto a = s.algo == env::algo_choice::one_shot ? algorithm::algo::one_shot : algorithm::algo::two_shot;
        throw config_error("rank " + std::to_string(b.rank()) + ": ROCENANTE_ALGO=" + env::to_string(s.algo) +
                           " refused on transport " + to_string(s.chosen) + ": " + conn.refusal(a));
      }
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

/// The decision as the start-up log line states it: selection::summary(), with more than one rank the algorithm
/// clause (which algorithm a call that names none runs, and up to which size), and the guarantees of the library the
/// chosen transport lacks (`caps`: core/capabilities.hpp), if any.
inline std::string decision_line(const selection& sel, int size,
                                 const rocenante::capabilities& caps = rocenante::capabilities::protocol()) {
  std::string line = sel.summary();
  if (sel.chosen != transport_kind::none && size > 1) {
    const std::uint64_t lim = algorithm::one_shot_limit(size), lim2 = algorithm::two_shot_limit(size);
    line += "; algorithm " + std::string(env::to_string(sel.algo));
    if (sel.algo == env::algo_choice::automatic)
      line += sel.connectivity.any_to_any()
                  ? " (" + std::string(algorithm::h200_single_gpu.name) + ": one_shot up to " + std::to_string(lim / 1024) +
                        " KiB at " + std::to_string(size) + " ranks" +
                        (lim2 != 0 ? ", two_shot up to " + std::to_string(lim2 / 1024) + " KiB" : std::string()) +
                        ", ring above)"
                  : " (ring only: one_shot refused by connectivity)";
  }
  if (!caps.all())
    line += "; " + std::string(to_string(sel.chosen)) + " does not give " + caps.missing() + " (docs/api.md §1.2)";
  return line;
}

/// The decision's log line, once per rank: INFO, or WARN when some ranks could have used an earlier candidate or
/// the chosen transport lacks some of the library's guarantees.
inline void log_decision(const vote_table& t, const selection& sel, int rank, int size, const rocenante::capabilities& caps) {
  log_line(sel.split || !caps.all() ? log_level::warn : log_level::info, t.settings.debug, rank,
           decision_line(sel, size, caps));
}

/// The start-up collective (every executor's): rank r contributes small integers, exact in fp32 in any summation
/// order, so every rank computes the exact reference itself, and an output equal to it on every rank (the vote that
/// follows) is also byte-identical across ranks (hazard H10).
inline std::size_t self_test_count(int ranks) { return 64 * static_cast<std::size_t>(ranks) + 3; }
inline float self_test_value(int rank, std::size_t i) { return static_cast<float>((rank + 1) * 3 + static_cast<int>(i % 7)); }
/// Empty, or why the start-up all-reduce with algorithm `a` (status `st`, message `error`) is wrong.
inline std::string self_test_check(algorithm::algo a, status st, const std::string& error, const float* out,
                                   std::size_t count, int ranks) {
  const char* an = a == algorithm::algo::ring ? "ring" : a == algorithm::algo::two_shot ? "two_shot" : "one_shot";
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
template <class... Comms>
class selected_base {
 public:
  selected_base(const selected_base&) = delete;
  selected_base& operator=(const selected_base&) = delete;

  /// The start-up decision, identical on every rank.
  const selection& selected() const { return sel_; }
  /// The start-up decision as one line, identical on every rank: what the start-up log line says (decision_line).
  std::string decision() const { return decision_line(sel_, size_, capabilities()); }
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
    if (sel_.algo == env::algo_choice::two_shot) return algorithm::algo::two_shot;
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

  /// Collectives that did not complete on this rank (the built communicator's failures(); over nccl only the calls
  /// refused before NCCL or rejected by it: capabilities()).
  std::uint64_t failures() const {
    std::uint64_t n = 0;
    std::visit(
        [&](const auto& c) {
          if constexpr (requires { c->failures(); }) n = c->failures();
        },
        comm_);
    return n;
  }

  /// What the built communicator guarantees (core/capabilities.hpp): everything over the library's own transports,
  /// nothing over nccl. The same on every rank.
  rocenante::capabilities capabilities() const {
    rocenante::capabilities c;
    std::visit(
        [&](const auto& p) {
          if constexpr (!std::is_same_v<std::decay_t<decltype(p)>, std::monostate>) c = p->capabilities();
        },
        comm_);
    return c;
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

  /// The built communicator's symmetric input area (options::symmetric_bytes; empty over a transport without one:
  /// proxy mode, nccl). An all-reduce whose input lies there, at the same offset on every rank, with its output
  /// elsewhere, reads the peers' inputs in place (algorithm/one_shot.hpp, "In-place path").
  std::span<std::byte> symmetric_input() {
    std::span<std::byte> area;
    std::visit(
        [&](auto& p) {
          if constexpr (requires { p->symmetric_input(); }) area = p->symmetric_input();
        },
        comm_);
    return area;
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

  /// What every selected communicator's constructor does, `self` being that communicator and `Rules` its
  /// executor's candidates: the vote, then settle (`self.build(b, kind, options)` constructs a candidate into comm_,
  /// `self.self_test(conn, options)` runs the start-up collective on it and says what went wrong), then the
  /// decision's log line.
  template <candidate_rules Rules, class Self>
  void select_and_build(Self& self, bootstrap::bootstrap_ref b, const options& opts, const select_config& cfg) {
    vote_table t = vote_probes<Rules>(b, cfg);
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
    log_decision(t, sel_, rank_, size_, capabilities());
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

}  // namespace rocenante::host

// transport/ibverbs/transport.hpp — the RDMA transport: RC queue pairs over libibverbs, driven by a CPU proxy
// thread. It plugs into the transport concept exactly as the loopback proxy does (transport/loopback_proxy.hpp):
// the collective stages its bytes in a registered staging area and posts a descriptor on its part's queue; one
// proxy thread per rank drains every queue in ticket order (catch-up by construction, hazard H1) and turns each
// descriptor into RDMA WRITEs. `post_one` is the only step that differs from the loopback proxy.
//
// One descriptor = three RDMA WRITEs on one RC queue pair, chained in one ibv_post_send:
//   1. payload:        staging[data_offset(slot) + off, +bytes) -> peer window, same offset  (unsignalled; absent
//                      when bytes == 0, e.g. abort flags)
//   2. flag, high half: 4 bytes (the call signature) of a registered flag-source ring entry -> flag word + 4
//   3. flag, low half:  4 bytes (the sequence number) -> flag word + 0                          (signalled)
// Hazard H4: the flag travels behind the payload on the same RC queue pair, not packed into the data. RC executes and
// places the RDMA WRITEs of one queue pair in order at the responder, and the window is registered without
// IBV_ACCESS_RELAXED_ORDERING, so a peer that sees the flag also sees the payload: ib::ordering states the set-up,
// ib::ordering_violation refuses any other (at compile time for the constants, at start-up for each queue pair). Packing flags into the
// data (NCCL LL/LL128) would change the window layout every transport shares and cost 1/16 to 1/2 of the
// bandwidth; separate writes cost small extra packets per descriptor. (GPUDirect into GPU memory would need a
// flush or the PCIe ordering attribute; this transport registers host memory only: plain or pinned host-mapped.)
// Why the flag is split: nothing in the verbs contract makes an 8-byte RDMA WRITE land atomically, and Soft-RoCE
// does not (it copies with memcpy; under emulation the bytes land one at a time). A reader that saw the new
// sequence (low half) beside the old signature (high half) took it for a peer in another collective: 2 false
// mismatches in 10,000 collectives at 1% loss (docs/results/softroce-2026-12-03). Writing the signature first,
// then the sequence, makes every torn state carry an old sequence, which a waiter ignores. Residual case: a slot's
// very first use when the sequence is 0xffffffff (the unset word's low half) — only tests start there.
//
// Striping (a DGX Spark port is two PCIe functions): with D devices, descriptors of part p to peer q use device
// (p + q) mod D. A descriptor's payload and flag always share one queue pair, so striping needs no cross-device
// ordering; a message is striped when it is split into several parts (options::max_parts >= D).
//
// Credits: at most `send_depth` work requests outstanding per queue pair; every flag write is signalled, and its
// completion retires every earlier request of the queue pair. Out of credits, the proxy polls the completion queue
// (stop is honoured: at teardown it gives up after the drain deadline).
//
// Failure (hazard H14): a completion error (IBV_WC_RETRY_EXC_ERR when a peer died, remote access errors, ...)
// marks the queue pair failed and records a message naming the peer and the device. From then on the proxy posts
// nothing to that peer and writes abort words naming it into this rank's own flags for the sequence it is posting
// and the next one, so the rank's current wait fails at once through the protocol's fail-stop path
// (session::wait_one sees an abort word of its sequence, poisons the rank and aborts the sequence at every peer).
//
// Start-up probe: after connecting and before the proxy starts, one signalled zero-length RDMA WRITE per queue
// pair, waited for within about twice the queue pair's retry budget; a pair that fails it (or could not be
// connected) is marked, not fatal: reachable(peer) reports it, host::selected_communicator turns it into the
// connectivity report (one_shot refused, ring allowed when only neighbours connect), and only a descriptor that
// needs the pair fails the rank, naming the peer.
//
// Memory (hazard H21): per rank, the window (layout().total_bytes(), registered LOCAL_WRITE | REMOTE_WRITE, never
// REMOTE_READ), a staging area of the same size (local access only), post queues (max_parts x 3,200 B) and a flag
// ring of 8 x send_depth bytes per peer per device.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../../bootstrap/concepts.hpp"
#include "../../core/error.hpp"
#include "../../core/options.hpp"
#include "../../protocol/flags.hpp"
#include "../../protocol/layout.hpp"
#include "../../protocol/state.hpp"
#include "../card.hpp"
#include "../concepts.hpp"
#include "../proxy.hpp"
#include "device.hpp"
#include "verbs_api.hpp"

namespace rocenante::transport {

namespace ib {

/// Version of the connection card below; ranks with different versions refuse to connect.
inline constexpr std::uint32_t card_version = 2;
inline constexpr std::uint32_t card_magic = 0x52434e56;  // "RCNV"

/// The verbs set-up the protocol's write ordering rests on (docs/design.md, "RDMA write ordering"): a waiter that
/// reads a flag word reads its payload next, with no completion at the responder, so the payload's RDMA WRITE
/// must be placed in the window before the flag's, and the flag's two halves in the order they were posted.
struct ordering_setup {
  int window_access;  ///< ibv_reg_mr access flags of the window (the memory peers write into)
  int qp_type;        ///< ibv_qp_type of every queue pair
  int qps_per_route;  ///< queue pairs one descriptor's writes may be spread over (per peer and device)
};

/// What this transport does: strict (non-relaxed) ordering on the window, RC, one queue pair per peer and device
/// carrying a descriptor's payload and flag in one ibv_post_send chain.
inline constexpr ordering_setup ordering{IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, IBV_QPT_RC, 1};

/// Why `s` would let a peer see a flag before its payload; nullptr when it would not.
constexpr const char* ordering_violation(const ordering_setup& s) {
  if (s.window_access & IBV_ACCESS_RELAXED_ORDERING)
    return "the window is registered with IBV_ACCESS_RELAXED_ORDERING, which lets the NIC and PCIe place RDMA "
           "WRITEs into it in any order (a flag before its payload); register it without that flag";
  if ((s.window_access & IBV_ACCESS_REMOTE_WRITE) == 0)
    return "the window is registered without IBV_ACCESS_REMOTE_WRITE; peers cannot write their payload and flags";
  if (s.qp_type != IBV_QPT_RC)
    return "queue pairs are not IBV_QPT_RC: only a reliable connected queue pair places the RDMA WRITEs it carries "
           "in posting order at the responder";
  if (s.qps_per_route != 1)
    return "a descriptor's writes may use more than one queue pair per peer and device; RDMA WRITEs on different "
           "queue pairs are not ordered, so a payload and its flag must share one";
  return nullptr;
}
static_assert(ordering_violation(ordering) == nullptr, "the ibverbs transport's own set-up must keep the write order");

/// What one rank publishes about one of its devices.
struct device_card {
  char name[32];
  std::uint8_t gid[16];
  std::uint32_t mtu;  ///< ibv_mtu of the port
  std::uint32_t window_rkey;
  std::uint64_t window_addr;
  std::uint32_t qpn[max_ranks];  ///< this rank's queue pair for peer q on this device
  std::uint32_t psn[max_ranks];  ///< its initial send PSN
};

/// A rank's connection card, exchanged with bootstrap all_gather (twice: local set-up, then connection).
struct card {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint32_t size;  ///< sizeof(card) on the sender
  std::int32_t rank;
  std::uint32_t devices;
  std::uint32_t ok;  ///< 0: set-up failed on this rank; `error` says why
  std::uint64_t window_bytes;
  std::uint32_t rails;  ///< devices per route (ROCENANTE_IB_ROUTES; else every device)
  std::uint32_t pad;
  /// rail_dev[q][k]: the device (index into dev) this rank uses for rail k to rank q; no_route where it has none
  std::uint8_t rail_dev[max_ranks][max_devices];
  char error[512];
  device_card dev[max_devices];
};
inline constexpr std::uint8_t no_route = 0xff;

/// Checks a peer's card. Returns an empty string when it is acceptable, else why not.
inline std::string validate_card(const card& c, int expected_rank, std::uint32_t my_rails, std::uint64_t window_bytes) {
  if (std::string why = check_card_header(c, expected_rank, card_magic, card_version, ""); !why.empty()) return why;
  if (c.ok == 0) return "";  // reported separately, with the peer's own message
  const std::string who = "rank " + std::to_string(expected_rank);
  if (c.rails != my_rails)
    return who + " stripes a call over " + std::to_string(c.rails) + " RDMA device(s), this rank over " +
           std::to_string(my_rails) + "; set ROCENANTE_IB_HCA (and ROCENANTE_IB_ROUTES) to the same number of "
           "devices per peer on every rank";
  if (c.devices > static_cast<std::uint32_t>(max_devices))
    return who + " names " + std::to_string(c.devices) + " RDMA devices, more than " + std::to_string(max_devices);
  for (int q = 0; q < max_ranks; ++q)
    for (int k = 0; k < max_devices; ++k)
      if (c.rail_dev[q][k] != no_route && c.rail_dev[q][k] >= c.devices)
        return who + "'s route to rank " + std::to_string(q) + " names device " + std::to_string(c.rail_dev[q][k]) +
               " of its " + std::to_string(c.devices);
  if (c.window_bytes != window_bytes)
    return who + "'s window is " + std::to_string(c.window_bytes) + " bytes, this rank's " + std::to_string(window_bytes);
  return "";
}

/// Every verbs object of one rank; released in reverse order of creation, also when set-up fails half-way.
struct resources {
  struct per_device {
    device_info info;
    ibv_pd* pd = nullptr;
    ibv_cq* cq = nullptr;
    ibv_mr* window_mr = nullptr;
    ibv_mr* staging_mr = nullptr;
    ibv_mr* flag_mr = nullptr;
    std::unique_ptr<std::uint64_t[]> flag_src;  ///< send_depth words per peer: sources of flag writes
    bool inline_flags = false;                  ///< every queue pair of the device takes 8 bytes inline
    std::vector<ibv_qp*> qps;                   ///< per peer (nullptr for self)
  };
  std::vector<per_device> dev;

  ~resources() {
    const verbs_api& api = verbs().api;
    for (auto& d : dev) {
      for (ibv_qp* q : d.qps)
        if (q) api.destroy_qp(q);
      if (d.cq) api.destroy_cq(d.cq);
      if (d.flag_mr) api.dereg_mr(d.flag_mr);
      if (d.staging_mr) api.dereg_mr(d.staging_mr);
      if (d.window_mr) api.dereg_mr(d.window_mr);
      if (d.pd) api.dealloc_pd(d.pd);
      if (d.info.ctx) api.close_device(d.info.ctx);
    }
  }
};

}  // namespace ib

/// What the RDMA proxy measured, beyond the loopback proxy's counters.
struct ibverbs_stats : proxy_stats {
  std::uint64_t completions = 0;        ///< signalled completions polled
  std::uint64_t completion_errors = 0;  ///< completions with a status other than success (flushes included)
  std::uint64_t credit_waits = 0;       ///< descriptors that found their queue pair out of credits
  std::uint64_t device_posts[ib::max_devices] = {};  ///< descriptors posted per device (striping)
};

template <class Mapping>
class basic_ibverbs {
 public:
  static constexpr const char* name = "ibverbs";
  using handle_type = proxy_handle;

  /// Collective: every rank calls. Configuration from the ROCENANTE_IB_* environment variables.
  basic_ibverbs(bootstrap::bootstrap_ref boot, const protocol::window_layout& layout, const options& opts)
      : basic_ibverbs(boot, layout, opts, ib::ib_config::from_env()) {}

  /// Collective: every rank calls. Opens and checks the devices, registers memory, creates one RC queue pair per
  /// peer per device, exchanges connection cards through `boot`, connects, probes every pair (reachable()), and
  /// starts the proxy thread. A failure on any rank fails set-up on every rank (transport_error naming the rank
  /// and the device): no rank is left waiting for a peer that gave up (hazard H9). A pair that cannot be
  /// connected or does not answer the probe is not such a failure: it is marked unreachable (see probe_pairs).
  basic_ibverbs(bootstrap::bootstrap_ref boot, const protocol::window_layout& layout, const options& opts,
                ib::ib_config cfg)
      : layout_(layout), cfg_(std::move(cfg)), timeout_ns_(opts.timeout_ns), me_(boot.rank()),
        n_(check_ranks(boot.size())), mem_(layout) {
    const int n = n_;
    const std::uint64_t bytes = layout.total_bytes();

    // 1. Local set-up; its outcome travels with the card, so that every rank fails together.
    ib::card mine{};
    stamp_card(mine, ib::card_magic, ib::card_version, me_);
    mine.window_bytes = bytes;
    std::vector<std::uint32_t> psn(static_cast<std::size_t>(n), 0);
    std::vector<ib::card> all = exchange_cards(boot, mine, [&] { set_up_local(mine, psn); });
    check_cards(all, mine);

    // 2. Connect every queue pair, then vote again: a rank whose connection failed must not leave peers posting.
    ib::card vote{};
    stamp_card(vote, ib::card_magic, ib::card_version, me_);
    all = exchange_cards(boot, vote, [&] { connect(all); });  // also the barrier: every queue pair is RTS after it
    for (int q = 0; q < n; ++q)
      if (all[q].ok == 0)
        throw transport_error("ibverbs: connecting the queue pairs failed on rank " + std::to_string(q) + ": " +
                              all[q].error);

    conns_.assign(res_.dev.size() * static_cast<std::size_t>(n), conn{});
    // 3. Per-pair probe (before the proxy starts): one signalled zero-length RDMA WRITE per queue pair.
    probe_pairs();
    handle_ = mem_.handle(me_, n, layout, opts.timeout_ns, rails_);
    proxy_.start(this, mem_.queue_array(), layout_.max_parts, cfg_.idle);
  }

  basic_ibverbs(const basic_ibverbs&) = delete;
  basic_ibverbs& operator=(const basic_ibverbs&) = delete;

  /// Posts what this rank already published (peers may wait for it), waits for those writes to complete for at
  /// most min(timeout, 1 s), stops the proxy and releases every verbs object. Returns promptly with dead peers.
  ~basic_ibverbs() { proxy_.stop(); }

  handle_type handle() const { return handle_; }

  /// Test hooks: a paused proxy posts nothing (a descheduled proxy; hazard H1).
  void pause() { proxy_.pause(); }
  void resume() { proxy_.resume(); }

  /// True once a completion error (or a failed post) was seen; failure_message() names the peer and device.
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  std::string failure_message() const {
    if (!failed()) return {};
    return failure_;  // written once, before failed_ is released
  }

  /// steady_clock time (detail::now_ns) at which the first failure was recorded; 0 when none.
  std::uint64_t failure_time_ns() const { return failed() ? failure_ns_ : 0; }

  /// "rxe0 (198.18.0.1, GID 1, MTU 1024)", one entry per device.
  std::string describe() const {
    std::string s;
    for (const auto& d : res_.dev)
      s += (s.empty() ? "" : ", ") + d.info.name + " (" + d.info.gid_text + ", GID " + std::to_string(d.info.gid_index) +
           ", MTU " + std::to_string(ib::mtu_bytes(d.info.active_mtu)) + ")";
    return s;
  }
  /// Path MTU in bytes of the queue pair to `peer` on device `dev` (min of both ends).
  int path_mtu(int dev, int peer) const { return ib::mtu_bytes(path_mtu_[static_cast<std::size_t>(dev) * n_ + peer]); }
  int devices() const { return static_cast<int>(res_.dev.size()); }
  const ib::ib_config& config() const { return cfg_; }

  /// Whether the start-up probe's write to `peer` completed on every device (this rank's view: a pair connects
  /// when both ends say so; host::selected_communicator gathers the matrix). Self: true. Unreachable peers poison
  /// nothing at start-up: the pair is only marked, and a later descriptor for it fails the rank naming the peer.
  bool reachable(int peer) const { return reach_.reachable(peer); }
  /// Why the probe to `peer` failed (empty when it did not).
  std::string unreachable_reason(int peer) const { return reach_.reason(peer); }

  /// This rank's side of every connection, for a timeout message: per queue pair the work requests posted and
  /// completed by the proxy, the state, and (ibv_query_qp) the next send PSN and next expected receive PSN; a credit
  /// wait in progress; a post queue holding a descriptor the proxy has not taken. Read beside the peer's report for
  /// the flag that did not arrive: posted > completed at the sender is a write still in the provider; a sender's
  /// send PSN above the receiver's receive PSN, packets sent and not placed. The reports are taken when each rank
  /// records its failure, after its abort flags were published: a receive PSN a little ahead of the peer's send PSN
  /// is those flags, and a write held back until then (by the provider or a proxy that did not run) shows as
  /// completed. Then, per pair, how long ago the proxy polled its last completion and the last flag words it posted
  /// (signature | sequence) with their ages, newest first: whether the flag a peer waits for went out, and whether
  /// before the abort flags or with them. Any thread; one verbs call per queue pair.
  std::string queue_pair_report() const {
    static const char* const states[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    std::string s;
    for (std::size_t d = 0; d < res_.dev.size(); ++d)
      for (int q = 0; q < n_; ++q) {
        if (q == me_ || !res_.dev[d].qps[q]) continue;
        if (std::find(route_[q].begin(), route_[q].end(), static_cast<int>(d)) == route_[q].end()) continue;  // unused
        const conn& c = conns_[d * n_ + q];
        const auto posted = detail::load_relaxed(const_cast<std::uint64_t*>(&c.posted));
        const auto completed = detail::load_relaxed(const_cast<std::uint64_t*>(&c.completed));
        char buf[256];
        const int len = std::snprintf(buf, sizeof buf, "%sto rank %d (%s): posted %llu, completed %llu",
                                      s.empty() ? "" : "; ", q, res_.dev[d].info.name.c_str(),
                                      static_cast<unsigned long long>(posted), static_cast<unsigned long long>(completed));
        ibv_qp_attr a{};
        ibv_qp_init_attr ia{};
        if (ib::verbs().api.query_qp(res_.dev[d].qps[q], &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RQ_PSN, &ia) == 0)
          std::snprintf(buf + len, sizeof buf - static_cast<std::size_t>(len), ", %s, send PSN %u, receive PSN %u",
                        a.qp_state < 7 ? states[a.qp_state] : "?", a.sq_psn, a.rq_psn);
        s += buf;
        // When the proxy last heard from this pair, and the last flags it posted to it, newest first.
        const std::uint64_t now = detail::now_ns();
        auto ago = [now](std::uint64_t t) { return t ? static_cast<double>(now - t) / 1e6 : -1.0; };
        std::snprintf(buf, sizeof buf, ", last completion %.1f ms ago, last flags posted", ago(detail::load_relaxed(const_cast<std::uint64_t*>(&c.completion_ns))));
        s += buf;
        const std::uint64_t n_desc = detail::load_relaxed(const_cast<std::uint64_t*>(&c.descriptors));
        for (std::uint64_t i = 0; i < conn::marks && i < n_desc; ++i) {
          const auto& m = c.recent[(n_desc - 1 - i) % conn::marks];
          std::snprintf(buf, sizeof buf, " %#llx %.1f ms ago",
                        static_cast<unsigned long long>(detail::load_relaxed(const_cast<std::uint64_t*>(&m.flag))),
                        ago(detail::load_relaxed(const_cast<std::uint64_t*>(&m.ns))));
          s += buf;
        }
        if (n_desc == 0) s += " none";
      }
    if (const int q = detail::load_relaxed(const_cast<int*>(&credit_wait_peer_)); q >= 0)
      s += "; the proxy is waiting for send credits on the queue pair to rank " + std::to_string(q);
    // The post queues: a descriptor published but not taken means the proxy thread has not run (or is blocked).
    const post_queue* qs = mem_.queue_array();
    for (std::uint32_t p = 0; p < layout_.max_parts; ++p) {
      auto* consumed = const_cast<std::uint64_t*>(&qs[p].consumed);
      const std::uint64_t taken = detail::load_acquire(consumed);
      auto* stamp = const_cast<std::uint64_t*>(&qs[p].entries[taken % post_queue_depth].stamp);
      if (detail::load_acquire(stamp) == taken + 1)
        s += "; part " + std::to_string(p) + "'s post queue holds a descriptor the proxy has not taken (ticket " +
             std::to_string(taken) + ")";
    }
    return s;
  }

  ibverbs_stats stats() const {
    ibverbs_stats s;
    static_cast<proxy_stats&>(s) = proxy_.stats();
    s.completions = completions_.load(std::memory_order_relaxed);
    s.completion_errors = completion_errors_.load(std::memory_order_relaxed);
    s.credit_waits = credit_waits_.load(std::memory_order_relaxed);
    for (int d = 0; d < ib::max_devices; ++d) s.device_posts[d] = device_posts_[d].load(std::memory_order_relaxed);
    return s;
  }

 private:
  friend class proxy_thread;

  static int check_ranks(int n) {
    if (n > max_ranks)
      throw config_error("ibverbs: " + std::to_string(n) + " ranks exceed max_ranks (" + std::to_string(max_ranks) + ")");
    return n;
  }

  /// Proxy-private state of one queue pair.
  struct conn {
    // Written by the proxy thread only, with relaxed atomic stores: queue_pair_report() reads them from another.
    std::uint64_t posted = 0;     ///< work requests posted
    std::uint64_t signaled = 0;   ///< number of the last work request posted signalled
    std::uint64_t completed = 0;  ///< work requests known complete (a signalled completion retires all before it)
    std::uint64_t completion_ns = 0;  ///< detail::now_ns() of the last completion polled for this queue pair
    /// The last few descriptors posted: when, and the flag word each carried (signature | sequence), so that a
    /// report tells whether a flag a peer waits for went out, and whether before or after the abort flags.
    struct post_mark {
      std::uint64_t ns = 0, flag = 0;
    };
    static constexpr std::size_t marks = 4;
    post_mark recent[marks] = {};
    std::uint64_t descriptors = 0;  ///< descriptors posted (recent[descriptors % marks] is the next slot)
    bool failed = false;
    bool probe_failed = false;  ///< the start-up probe found no path: nothing is posted; a descriptor fails the rank
  };

  /// One signalled zero-length RDMA WRITE (touches no memory at the peer, so a write that lands late is harmless)
  /// per queue pair; waits for each completion, success or error, until a deadline of about twice the queue pair's
  /// own retry budget (timeout x (retry_cnt + 1)) plus 1 s. A pair whose write failed or did not complete is
  /// marked (probe_failed), not fatal: its late completion error is ignored, and only a descriptor that needs the
  /// pair fails the rank (naming the peer).
  void probe_pairs() {
    reach_.reset(me_, n_);
    if (n_ < 2) return;
    const std::size_t nd = res_.dev.size();
    // 0: pending, 1: ok, 2: failed
    std::vector<int> state(nd * static_cast<std::size_t>(n_), 1);
    for (int q = 0; q < n_; ++q) {
      if (q == me_) continue;
      if (!connect_failed_[q].empty()) {  // no route, or a rail that could not be connected
        reach_.ok[q] = 0;
        reach_.why[q] = connect_failed_[q];
        for (std::size_t d = 0; d < nd; ++d) conns_[d * n_ + q].probe_failed = true;
        continue;
      }
      for (const int di : route_[q]) {
        const std::size_t d = static_cast<std::size_t>(di);
        const auto remote = remote_[d * n_ + q];
        ibv_send_wr wr{};
        wr.wr_id = wr_id(d, q, 0);
        wr.sg_list = nullptr;
        wr.num_sge = 0;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = remote.addr;
        wr.wr.rdma.rkey = remote.rkey;
        ibv_send_wr* bad = nullptr;
        const int rc = ibv_post_send(res_.dev[d].qps[q], &wr, &bad);
        if (rc != 0) {
          state[d * n_ + q] = 2;
          reach_.why[q] = "device " + res_.dev[d].info.name + ": ibv_post_send failed (" + std::strerror(rc) + ")";
        } else {
          state[d * n_ + q] = 0;
        }
      }
    }
    const double try_s = 4.096e-6 * static_cast<double>(1ull << cfg_.timeout) * (cfg_.retry_cnt + 1);
    const std::uint64_t deadline = detail::now_ns() + static_cast<std::uint64_t>((2 * try_s + 1.0) * 1e9);
    auto pending = [&] { return std::count(state.begin(), state.end(), 0) > 0; };
    while (pending() && detail::now_ns() < deadline) {
      bool any = false;
      for (std::size_t d = 0; d < nd; ++d) {
        ibv_wc wc[16];
        const int got = ibv_poll_cq(res_.dev[d].cq, 16, wc);
        for (int i = 0; i < got; ++i) {
          any = true;
          const int peer = static_cast<int>((wc[i].wr_id >> 52) & 0xff);
          if (peer < 0 || peer >= n_) continue;
          if (wc[i].status == IBV_WC_SUCCESS) {
            state[d * n_ + peer] = 1;
          } else {
            state[d * n_ + peer] = 2;
            reach_.why[peer] = "device " + res_.dev[d].info.name + ": completion error " +
                               ib::verbs().api.wc_status_str(wc[i].status);
          }
        }
      }
      if (!any) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    for (std::size_t d = 0; d < nd; ++d)
      for (int q = 0; q < n_; ++q) {
        if (q == me_ || state[d * n_ + q] == 1) continue;
        if (state[d * n_ + q] == 0 && reach_.why[q].empty())
          reach_.why[q] = "device " + res_.dev[d].info.name + ": no completion within the probe deadline";
        reach_.ok[q] = 0;
        conns_[d * n_ + q].probe_failed = true;
      }
  }

  void set_up_local(ib::card& mine, std::vector<std::uint32_t>& psn) {
    const ib::verbs_load& v = ib::verbs();
    if (!v.ok) throw transport_error("ibverbs unavailable: " + v.why);
    const ib::verbs_api& api = v.api;
    std::vector<std::string> names = cfg_.hca;
    std::vector<int> ports = cfg_.ports;
    if (names.empty()) {
      names.push_back(ib::default_device());
      ports.push_back(1);
    }
    std::mt19937 gen(static_cast<std::uint32_t>(::getpid()) ^
                     static_cast<std::uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
    for (int q = 0; q < n_; ++q) psn[q] = gen() & 0xffffffu;
    const std::uint64_t bytes = layout_.total_bytes();
    const std::size_t depth = static_cast<std::size_t>(cfg_.send_depth);
    res_.dev.resize(names.size());
    mine.devices = static_cast<std::uint32_t>(names.size());
    for (std::size_t d = 0; d < names.size(); ++d) {
      auto& r = res_.dev[d];
      r.info = ib::open_device(names[d], ports[d], cfg_.gid_index);
      const std::string where = "RDMA device " + r.info.name + ": ";
      r.pd = api.alloc_pd(r.info.ctx);
      if (!r.pd) throw transport_error(where + "ibv_alloc_pd failed (" + std::strerror(errno) + ")");
      const int cqe = static_cast<int>(depth) * (n_ > 1 ? n_ - 1 : 1) + 16;
      r.cq = api.create_cq(r.info.ctx, cqe, nullptr, nullptr, 0);
      if (!r.cq) throw transport_error(where + "ibv_create_cq(" + std::to_string(cqe) + ") failed (" + std::strerror(errno) + ")");
      // Receive slots: remote write only, never remote read, never relaxed ordering (ib::ordering, hazard H4).
      r.window_mr = api.reg_mr(r.pd, mem_.window.get(), bytes, ib::ordering.window_access);
      if (!r.window_mr)
        throw transport_error(where + "registering the " + std::to_string(bytes) + "-byte window failed (" +
                              std::strerror(errno) + "); raise the locked-memory limit (ulimit -l) or lower capacity_bytes");
      r.staging_mr = api.reg_mr(r.pd, mem_.staging.get(), bytes, 0);
      if (!r.staging_mr)
        throw transport_error(where + "registering the staging area failed (" + std::strerror(errno) + "); raise ulimit -l");
      r.flag_src.reset(new std::uint64_t[depth * static_cast<std::size_t>(n_)]());
      r.flag_mr = api.reg_mr(r.pd, r.flag_src.get(), depth * static_cast<std::size_t>(n_) * 8, 0);
      if (!r.flag_mr) throw transport_error(where + "registering the flag ring failed (" + std::strerror(errno) + ")");
      r.qps.assign(static_cast<std::size_t>(n_), nullptr);
      r.inline_flags = true;
      ib::device_card& c = mine.dev[d];
      copy_text(c.name, sizeof c.name, r.info.name);
      std::memcpy(c.gid, r.info.gid.raw, 16);
      c.mtu = static_cast<std::uint32_t>(r.info.active_mtu);
      c.window_addr = reinterpret_cast<std::uint64_t>(mem_.window.get());
      c.window_rkey = r.window_mr->rkey;
      for (int q = 0; q < n_; ++q) {
        if (q == me_) continue;
        ibv_qp_init_attr ia{};
        ia.send_cq = r.cq;
        ia.recv_cq = r.cq;
        ia.qp_type = static_cast<ibv_qp_type>(ib::ordering.qp_type);
        ia.sq_sig_all = 0;
        ia.cap.max_send_wr = static_cast<std::uint32_t>(depth);
        ia.cap.max_recv_wr = 1;
        ia.cap.max_send_sge = 1;
        ia.cap.max_recv_sge = 1;
        // Flag writes inline (8 bytes copied at post time: no read of host memory by the NIC); a provider that
        // refuses gets the same queue pair without, and flags read from the registered flag ring.
        ia.cap.max_inline_data = 8;
        r.qps[q] = api.create_qp(r.pd, &ia);
        if (!r.qps[q]) {
          ia.cap.max_inline_data = 0;
          r.qps[q] = api.create_qp(r.pd, &ia);
        }
        r.inline_flags = r.inline_flags && ia.cap.max_inline_data >= 8;
        if (!r.qps[q])
          throw transport_error(where + "ibv_create_qp for rank " + std::to_string(q) + " failed (" +
                                std::strerror(errno) + "); lower ROCENANTE_IB_SEND_DEPTH");
        // Start-up check of what the provider actually created (the write order rests on it).
        if (const char* why = ib::ordering_violation({ib::ordering.window_access, static_cast<int>(r.qps[q]->qp_type), 1}))
          throw transport_error(where + "queue pair for rank " + std::to_string(q) + ": " + why);
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = static_cast<std::uint8_t>(r.info.port);
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
        if (api.modify_qp(r.qps[q], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
          throw transport_error(where + "queue pair for rank " + std::to_string(q) + ": RESET -> INIT failed (" +
                                std::strerror(errno) + ")");
        c.qpn[q] = r.qps[q]->qp_num;
        c.psn[q] = psn[q];
      }
    }
    psn_ = psn;
    plan_routes(mine);
  }

  void check_cards(const std::vector<ib::card>& all, const ib::card& mine) const {
    const std::string first = first_card_problem(
        all, [&](const ib::card& c, int q) { return ib::validate_card(c, q, mine.rails, mine.window_bytes); });
    if (!first.empty()) throw transport_error("ibverbs (seen by rank " + std::to_string(me_) + "): " + first);
  }

  /// route_[q]: the devices (rails) this rank reaches rank q over: ROCENANTE_IB_ROUTES, else every device; rails_ the
  /// common length. Published in the card (rail_dev), so that each rail's queue pair connects to the peer's queue
  /// pair of the same rail. Runs inside set-up's first exchange: a bad route fails every rank, naming this one.
  void plan_routes(ib::card& mine) {
    const int nd = static_cast<int>(res_.dev.size());
    route_.assign(static_cast<std::size_t>(n_), {});
    if (cfg_.routes.empty()) {
      for (int q = 0; q < n_; ++q)
        for (int d = 0; d < nd && q != me_; ++d) route_[q].push_back(d);
      rails_ = static_cast<std::uint32_t>(nd);
    } else {
      rails_ = 0;
      for (const auto& [peer, names] : cfg_.routes) {
        if (peer < 0 || peer >= n_ || peer == me_)
          throw config_error("ROCENANTE_IB_ROUTES names rank " + std::to_string(peer) + ", not a peer of rank " +
                             std::to_string(me_) + " in a world of " + std::to_string(n_));
        for (const std::string& name : names) {
          int d = 0;
          while (d < nd && res_.dev[d].info.name != name) ++d;
          if (d == nd)
            throw config_error("ROCENANTE_IB_ROUTES routes rank " + std::to_string(peer) + " over " + name +
                               ", which is not one of the devices in ROCENANTE_IB_HCA");
          if (std::find(route_[peer].begin(), route_[peer].end(), d) != route_[peer].end())
            throw config_error("ROCENANTE_IB_ROUTES names " + name + " twice for rank " + std::to_string(peer));
          route_[peer].push_back(d);
        }
        if (rails_ != 0 && route_[peer].size() != rails_)
          throw config_error("ROCENANTE_IB_ROUTES: every route must have the same number of devices (rank " +
                             std::to_string(peer) + ": " + std::to_string(route_[peer].size()) + ", another: " +
                             std::to_string(rails_) + ")");
        rails_ = static_cast<std::uint32_t>(route_[peer].size());
      }
    }
    // A call posted once has one flag per rail (part d of its channel).
    if (rails_ > layout_.max_parts)
      throw config_error("ibverbs: a call is striped over " + std::to_string(rails_) + " RDMA devices with one flag "
                         "each, but options::max_parts = " + std::to_string(layout_.max_parts) +
                         ": raise max_parts or name fewer devices in ROCENANTE_IB_HCA");
    mine.rails = rails_;
    std::memset(mine.rail_dev, ib::no_route, sizeof mine.rail_dev);
    for (int q = 0; q < n_; ++q)
      for (std::size_t k = 0; k < route_[q].size(); ++k) mine.rail_dev[q][k] = static_cast<std::uint8_t>(route_[q][k]);
  }

  /// Rail k to rank q: this rank's device route_[q][k] to the peer's device all[q].rail_dev[me][k]. A pair without a
  /// route on either side, or that cannot be connected, is unreachable (the probe reports it), not a failed transport.
  void connect(const std::vector<ib::card>& all) {
    path_mtu_.assign(res_.dev.size() * static_cast<std::size_t>(n_), IBV_MTU_256);
    connect_failed_.assign(static_cast<std::size_t>(n_), std::string());
    remote_.resize(res_.dev.size() * static_cast<std::size_t>(n_));
    for (int q = 0; q < n_; ++q) {
      if (q == me_) continue;
      if (route_[q].empty()) {
        connect_failed_[q] = "no route to rank " + std::to_string(q) + " in ROCENANTE_IB_ROUTES";
        continue;
      }
      for (std::size_t k = 0; k < route_[q].size(); ++k) {
        const std::uint8_t theirs = all[q].rail_dev[me_][k];
        if (theirs == ib::no_route) {
          connect_failed_[q] = "rank " + std::to_string(q) + " has no route to this rank (its ROCENANTE_IB_ROUTES)";
          break;
        }
        try {
          // INIT -> RTR resolves the peer's address: ETIMEDOUT when there is no path
          connect_pair(static_cast<std::size_t>(route_[q][k]), q, all[q].dev[theirs]);
        } catch (const error& e) {
          connect_failed_[q] = e.what();
          break;
        }
      }
    }
  }

  void connect_pair(std::size_t d, int q, const ib::device_card& pc) {
    const ib::verbs_api& api = ib::verbs().api;
    auto& r = res_.dev[d];
    const std::string where = "RDMA device " + r.info.name + ", queue pair to rank " + std::to_string(q) + " (" +
                              std::string(pc.name, strnlen(pc.name, sizeof pc.name)) + "): ";
    const ibv_mtu mtu = static_cast<ibv_mtu>(pc.mtu < static_cast<std::uint32_t>(r.info.active_mtu)
                                                 ? pc.mtu
                                                 : static_cast<std::uint32_t>(r.info.active_mtu));
    path_mtu_[d * n_ + q] = mtu;
    remote_[d * n_ + q] = {pc.window_addr, pc.window_rkey};
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = pc.qpn[me_];
    a.rq_psn = pc.psn[me_];
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, pc.gid, 16);
    a.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(r.info.gid_index);
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.traffic_class = static_cast<std::uint8_t>(cfg_.traffic_class);
    a.ah_attr.sl = static_cast<std::uint8_t>(cfg_.service_level);
    a.ah_attr.port_num = static_cast<std::uint8_t>(r.info.port);
    if (api.modify_qp(r.qps[q], &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      throw transport_error(where + "INIT -> RTR failed (" + std::strerror(errno) +
                            "); check the GID index (ROCENANTE_IB_GID_INDEX) and that the peer's address is reachable");
    std::memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = static_cast<std::uint8_t>(cfg_.timeout);
    a.retry_cnt = static_cast<std::uint8_t>(cfg_.retry_cnt);
    a.rnr_retry = 0;  // no SENDs are ever posted, so receiver-not-ready cannot happen
    a.sq_psn = psn_[q];
    a.max_rd_atomic = 1;
    if (api.modify_qp(r.qps[q], &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC))
      throw transport_error(where + "RTR -> RTS failed (" + std::strerror(errno) + ")");
  }

  // ---- proxy thread ----------------------------------------------------------------------------------------

  static std::uint64_t wr_id(std::size_t dev, int peer, std::uint64_t seq) {
    return (static_cast<std::uint64_t>(dev) << 60) | (static_cast<std::uint64_t>(peer) << 52) | (seq & ((1ull << 52) - 1));
  }

  void record_failure(std::size_t dev, int peer, const std::string& what) {
    conn& c = conns_[dev * n_ + peer];
    c.failed = true;
    if (!failed_.load(std::memory_order_relaxed)) {
      failed_peer_ = peer;
      failure_ = "rank " + std::to_string(me_) + ": RDMA " + what + " on the queue pair to rank " + std::to_string(peer) +
                 " (device " + res_.dev[dev].info.name + "); rank " + std::to_string(peer) +
                 " is dead or unreachable, or its link is down; the communicator fails over to the protocol's "
                 "fail-stop path";
      failure_ns_ = detail::now_ns();
      failed_.store(true, std::memory_order_release);
    }
    abort_.publish_last(mem_.window.get(), layout_, failed_peer_);
  }

  void poll_completions(std::size_t d) {
    ibv_wc wc[32];
    const int got = ibv_poll_cq(res_.dev[d].cq, 32, wc);
    if (got < 0) {
      record_failure(d, failed_peer_ >= 0 ? failed_peer_ : (me_ + 1) % n_, "ibv_poll_cq failed");
      return;
    }
    for (int i = 0; i < got; ++i) {
      const int peer = static_cast<int>((wc[i].wr_id >> 52) & 0xff);
      const std::uint64_t seq = wc[i].wr_id & ((1ull << 52) - 1);
      conn& c = conns_[d * n_ + peer];
      if (seq > c.completed) detail::store_relaxed(&c.completed, seq);
      detail::store_relaxed(&c.completion_ns, detail::now_ns());
      completions_.fetch_add(1, std::memory_order_relaxed);
      if (wc[i].status != IBV_WC_SUCCESS) {
        completion_errors_.fetch_add(1, std::memory_order_relaxed);
        if (!c.failed && !c.probe_failed)
          record_failure(d, peer, std::string("completion error ") + ib::verbs().api.wc_status_str(wc[i].status) +
                                      " (status " + std::to_string(wc[i].status) + ", vendor error " +
                                      std::to_string(wc[i].vendor_err) + ")");
      }
    }
  }

  void poll_all() {
    for (std::size_t d = 0; d < res_.dev.size(); ++d) poll_completions(d);
  }

  /// A descriptor for one peer (a part's range, or an abort word): on device (part + peer) mod D, the payload, then
  /// the flag as two 4-byte writes (signature first: the file header). A whole call (all_peers): per peer, starting
  /// after this rank, and per rail d (device d), one payload write of the rail's share of the range and one 8-byte
  /// flag write (flag index + d x channels); the share of the last rail ends with the call trailer.
  void post_one(const post& e) {
    const std::uint32_t seq = protocol::flag_seq(e.flag_value);
    abort_.taken(seq);
    if (failed_.load(std::memory_order_relaxed)) abort_.publish(mem_.window.get(), layout_, seq, failed_peer_);
    const std::uint64_t at = layout_.data_offset(e.slot) + e.offset;
    if (e.peer != all_peers) {
      const int peer = static_cast<int>(e.peer);
      if (!routed(peer)) return;
      const std::uint32_t part = static_cast<std::uint32_t>((e.flag_index / layout_.channels) % layout_.max_parts);
      const auto& route = route_[e.peer];
      write_to(static_cast<std::size_t>(route[(part + e.peer) % route.size()]), peer, at, e.bytes, e.flag_index,
               e.flag_value, true);
      proxy_.count_bytes(e.bytes);
      return;
    }
    const std::uint64_t units = protocol::ceil_div(e.bytes, rail_unit);
    for (int k = 1; k < n_; ++k) {
      const int peer = (me_ + k) % n_;
      if (!routed(peer)) continue;
      for (std::uint32_t d = 0; d < rails_; ++d) {
        // Rail d: [b_d, b_{d+1}) in 64-byte units, b_rails = bytes; the last rail's share is never empty.
        const std::uint64_t b0 = units * d / rails_ * rail_unit;
        const std::uint64_t b1 = d + 1 == rails_ ? e.bytes : units * (d + 1) / rails_ * rail_unit;
        write_to(static_cast<std::size_t>(route_[peer][d]), peer, at + b0, b1 - b0,
                 e.flag_index + std::uint64_t{d} * layout_.channels, e.flag_value, false);
      }
      proxy_.count_bytes(e.bytes);
    }
  }

  /// Whether `peer` has a route; a write for a peer without one fails the rank, naming the peer.
  bool routed(int peer) {
    if (!route_[static_cast<std::size_t>(peer)].empty()) return true;
    if (!conns_[static_cast<std::size_t>(peer)].failed)
      record_failure(0, peer, "write to a peer with no route (" + reach_.why[static_cast<std::size_t>(peer)] + ")");
    return false;
  }

  /// Granule of a whole call's split over rails (a cache line: a rail's write never shares one with another's).
  static constexpr std::uint64_t rail_unit = 64;

  /// Writes `bytes` of staging at window offset `at` to `peer` over device `d`, then its flag word `index`: as two
  /// 4-byte writes (`split`: signature first) or as one 8-byte write (a whole call; the call trailer settles a torn
  /// one: session::wait_call). Unsignalled but every send_depth / 2 work requests (and every one at teardown): a
  /// signalled completion retires every earlier request of the queue pair, so credits never run out while a
  /// signalled request is outstanding.
  void write_to(std::size_t d, int peer, std::uint64_t at, std::uint64_t bytes, std::uint64_t index, std::uint64_t value,
                bool split) {
    conn& c = conns_[d * n_ + peer];
    if (c.probe_failed && !c.failed)
      record_failure(d, peer, "write to a peer the start-up probe could not reach (" + reach_.why[peer] + ")");
    if (c.failed) return;
    const std::uint64_t need = (bytes ? 1 : 0) + (split ? 2 : 1);
    const std::uint64_t depth = static_cast<std::uint64_t>(cfg_.send_depth);
    if (c.posted - c.completed + need > depth) {
      credit_waits_.fetch_add(1, std::memory_order_relaxed);
      detail::store_relaxed(&credit_wait_peer_, peer);
      struct clear_wait {
        int* p;
        ~clear_wait() { detail::store_relaxed(p, -1); }
      } clear{&credit_wait_peer_};
      std::uint64_t polls = 0;
      while (c.posted - c.completed + need > depth) {
        poll_completions(d);
        if (c.failed) return;
        // Stop is honoured while waiting for credits: at teardown, give up at the drain deadline.
        if (proxy_.stopping() && detail::now_ns() >= deadline_ns_) return;
        if (++polls > 64) std::this_thread::yield();
      }
    }
    auto& r = res_.dev[d];
    const auto remote = remote_[d * n_ + peer];
    ibv_sge sg[3]{};
    ibv_send_wr wr[3]{};
    int k = 0;
    auto add = [&](std::uint64_t local, std::uint32_t length, std::uint32_t lkey, std::uint64_t remote_addr) {
      sg[k].addr = local;
      sg[k].length = length;
      sg[k].lkey = lkey;
      wr[k].wr_id = wr_id(d, peer, c.posted + static_cast<std::uint64_t>(k) + 1);
      wr[k].sg_list = &sg[k];
      wr[k].num_sge = 1;
      wr[k].opcode = IBV_WR_RDMA_WRITE;
      wr[k].wr.rdma.remote_addr = remote_addr;
      wr[k].wr.rdma.rkey = remote.rkey;
      if (k > 0) wr[k - 1].next = &wr[k];
      ++k;
    };
    if (bytes)
      add(reinterpret_cast<std::uint64_t>(mem_.staging.get() + at), static_cast<std::uint32_t>(bytes), r.staging_mr->lkey,
          remote.addr + at);
    // The flag's source: a ring entry per queue pair, reused after depth requests (outstanding <= depth, so the
    // request that last read it has completed); inline where the queue pair takes it (copied at post time).
    const std::uint64_t last = c.posted + need;  // number of the last request: the flag write
    std::uint64_t* src = r.flag_src.get() + static_cast<std::size_t>(peer) * depth + (last % depth);
    *src = value;
    const std::uint64_t flag_addr = remote.addr + index * 8;
    if (split) {
      add(reinterpret_cast<std::uint64_t>(src) + 4, 4, r.flag_mr->lkey, flag_addr + 4);
      add(reinterpret_cast<std::uint64_t>(src), 4, r.flag_mr->lkey, flag_addr);
    } else {
      add(reinterpret_cast<std::uint64_t>(src), 8, r.flag_mr->lkey, flag_addr);
    }
    if (r.inline_flags) wr[k - 1].send_flags |= IBV_SEND_INLINE;
    if (last - c.signaled >= depth / 2 || proxy_.stopping()) {
      wr[k - 1].send_flags |= IBV_SEND_SIGNALED;
      detail::store_relaxed(&c.signaled, last);
    }
    proxy_.count_writes(need);  // before the flag can reach the peer, like posts
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(r.qps[peer], wr, &bad);
    if (rc != 0) {
      record_failure(d, peer, std::string("ibv_post_send failed (") + std::strerror(rc) + ")");
      return;
    }
    detail::store_relaxed(&c.posted, last);
    auto& m = c.recent[c.descriptors % conn::marks];
    detail::store_relaxed(&m.ns, detail::now_ns());
    detail::store_relaxed(&m.flag, value);
    detail::store_relaxed(&c.descriptors, c.descriptors + 1);
    device_posts_[d].fetch_add(1, std::memory_order_relaxed);
  }

  /// Teardown: a queue pair whose last requests went unsignalled gets one signalled zero-length write, so that
  /// all_complete() can tell when everything posted has been placed.
  void signal_tails() {
    for (std::size_t d = 0; d < res_.dev.size(); ++d)
      for (int q = 0; q < n_; ++q) {
        conn& c = conns_[d * n_ + q];
        if (q == me_ || c.failed || c.probe_failed || c.signaled >= c.posted) continue;
        if (c.posted - c.completed + 1 > static_cast<std::uint64_t>(cfg_.send_depth)) continue;  // a signalled one is out
        ibv_send_wr wr{};
        const std::uint64_t last = c.posted + 1;
        wr.wr_id = wr_id(d, q, last);
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = remote_[d * n_ + q].addr;
        wr.wr.rdma.rkey = remote_[d * n_ + q].rkey;
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(res_.dev[d].qps[q], &wr, &bad) != 0) continue;
        detail::store_relaxed(&c.posted, last);
        detail::store_relaxed(&c.signaled, last);
      }
  }

  bool all_complete() const {
    for (const conn& c : conns_)
      if (!c.failed && c.completed < c.signaled) return false;
    return true;
  }

  // Hooks of the shared proxy loop (transport/proxy.hpp, proxy_thread): completions are polled once per poll;
  // at teardown the final drain is followed by a wait of at most min(timeout, 1 s) for the writes to complete.
  void progress() { poll_all(); }
  void before_final_drain() {
    const std::uint64_t bound = timeout_ns_ != 0 && timeout_ns_ < 1'000'000'000ull ? timeout_ns_ : 1'000'000'000ull;
    deadline_ns_ = detail::now_ns() + bound;
  }
  void after_final_drain() {
    signal_tails();
    while (!all_complete() && detail::now_ns() < deadline_ns_) {
      poll_all();
      std::this_thread::yield();
    }
  }

  struct remote_window {
    std::uint64_t addr = 0;
    std::uint32_t rkey = 0;
  };

  protocol::window_layout layout_;
  ib::ib_config cfg_;
  std::uint64_t timeout_ns_;
  int me_ = 0, n_ = 0;
  proxy_memory<Mapping> mem_;
  ib::resources res_;  // declared after the memory it registers: deregistered before that memory is freed
  std::vector<std::uint32_t> psn_;
  std::vector<ibv_mtu> path_mtu_;
  std::vector<remote_window> remote_;
  std::vector<conn> conns_;  // [device][peer], proxy thread only (the constructor's probe writes it first)
  pair_reach reach_;  // the start-up probe's outcome; written before the proxy starts
  std::vector<std::string> connect_failed_;  // [peer]: why that pair has no route or a rail could not connect (empty: ok)
  std::vector<std::vector<int>> route_;      // [peer]: the devices of its rails (plan_routes)
  std::uint32_t rails_ = 1;
  proxy_handle handle_{};
  std::atomic<bool> failed_{false};
  std::string failure_;
  std::uint64_t failure_ns_ = 0;
  int failed_peer_ = -1;
  local_abort abort_;  // proxy thread only
  int credit_wait_peer_ = -1;  // proxy thread writes (relaxed), queue_pair_report reads: a credit wait in progress
  std::uint64_t deadline_ns_ = ~std::uint64_t{0};
  std::atomic<std::uint64_t> completions_{0}, completion_errors_{0}, credit_waits_{0};
  std::atomic<std::uint64_t> device_posts_[ib::max_devices] = {};
  proxy_thread proxy_;  // last member: its destructor (stop + join) runs first, before anything post_one uses
};

/// The RDMA transport on the host executor: windows and staging in plain host memory.
using ibverbs = basic_ibverbs<host_mapping>;
static_assert(check_transport<ibverbs>());

}  // namespace rocenante::transport

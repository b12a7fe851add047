// transport/loopback_proxy.hpp — proxy mode of the loopback transport: ranks in one process, but the code that
// runs a collective only stages bytes and posts descriptors (transport/proxy.hpp); one CPU proxy thread per rank
// moves the bytes into the peers' windows and sets their flags. The only step that differs from the ibverbs
// transport is `post_one` (a memcpy + a release store here; an RDMA write + a write of the flag there).
//
// Memory policies: host_mapping (plain host memory: the host executor) and, in transport/cuda_window.hpp,
// cuda_mapping (pinned host-mapped windows, staging and queues that a GPU kernel reads and writes in place —
// the DGX Spark path — and producer cursors in device memory).
//
// Copy engines. A NIC moves one call's bytes to every peer at once (its DMA engines serve several queue pairs);
// one proxy thread copying to each peer in turn would stand in for a NIC that cannot. With E copy engines (threads),
// the proxy hands each write to engine (peer mod E), which copies and then release-stores the flag; a peer's writes
// keep their posting order (one engine, one FIFO). E comes from ROCENANTE_PROXY_COPY_ENGINES (0 .. ranks-1), else 0
// (every write in the proxy thread): ranks sharing a host each bring a proxy thread, and with one engine per peer
// as well, 4 ranks on a 16-core GPU machine ran 16 polling threads and their calls took 19-4,000 us where the same
// calls without engines took 20-143 us (docs/results/h100-2026-12-07/proxy-ff7af38/).
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../bootstrap/concepts.hpp"
#include "../core/error.hpp"
#include "../core/options.hpp"
#include "../protocol/flags.hpp"
#include "../protocol/layout.hpp"
#include "loopback.hpp"
#include "proxy.hpp"

namespace rocenante::transport {

/// One copy engine of a loopback proxy (file header): a thread that carries out, in order, the copies and flag stores
/// the proxy thread hands it through a single-producer single-consumer ring.
class copy_engine {
 public:
  struct job {
    std::byte* dst;
    const std::byte* src;
    std::uint64_t bytes;
    std::uint64_t* flag;
    std::uint64_t value;
#ifdef ROCENANTE_TRACE_PHASES
    std::uint64_t* copied_at = nullptr;   ///< proxy_timeline: where to stamp the end of the copy (null: nowhere)
    std::uint64_t* flagged_at = nullptr;  ///< proxy_timeline: where to stamp the flag's store
#endif
  };

  copy_engine() = default;
  copy_engine(const copy_engine&) = delete;
  copy_engine& operator=(const copy_engine&) = delete;
  ~copy_engine() { stop(); }

  /// `owner` receives the copy time (proxy_thread::count_copy_ns).
  void start(proxy_thread* owner, idle_policy idle) {
    thread_ = std::thread([this, owner, idle] { run(owner, idle); });
  }
  /// Proxy thread only: queue one job; waits (yielding) while the ring is full.
  void push(const job& j) {
    const std::uint64_t h = head_.load(std::memory_order_relaxed);
    while (h - tail_.load(std::memory_order_acquire) >= depth) std::this_thread::yield();
    ring_[h % depth] = j;
    head_.store(h + 1, std::memory_order_release);
  }
  /// Carries out every job already pushed, then joins. Idempotent.
  void stop() {
    stop_.store(true, std::memory_order_release);
    if (thread_.joinable()) thread_.join();
  }

 private:
  static constexpr std::uint64_t depth = 256;

  void run(proxy_thread* owner, idle_policy idle) {
    std::uint64_t t = 0, empty = 0;
    for (;;) {
      if (t == head_.load(std::memory_order_acquire)) {
        if (stop_.load(std::memory_order_acquire) && t == head_.load(std::memory_order_acquire)) return;
        if (++empty >= idle.spin_polls && idle.kind != idle_policy::spin) std::this_thread::yield();
        continue;
      }
      empty = 0;
      const job& j = ring_[t % depth];
      if (j.bytes) {
        const std::uint64_t t0 = detail::now_ns();
        std::memcpy(j.dst, j.src, j.bytes);
        owner->count_copy_ns(detail::now_ns() - t0);
#ifdef ROCENANTE_TRACE_PHASES
        if (j.copied_at) *j.copied_at = detail::now_ns();
#endif
      }
      detail::store_release(j.flag, j.value);
#ifdef ROCENANTE_TRACE_PHASES
      if (j.flagged_at) *j.flagged_at = detail::now_ns();
#endif
      tail_.store(++t, std::memory_order_release);
    }
  }

  std::unique_ptr<job[]> ring_{new job[depth]};
  alignas(64) std::atomic<std::uint64_t> head_{0};
  alignas(64) std::atomic<std::uint64_t> tail_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

template <class Mapping>
class basic_loopback_proxy {
 public:
  static constexpr const char* name = "loopback_proxy";
  using handle_type = proxy_handle;

  /// Collective: every rank calls. Starts this rank's proxy thread.
  basic_loopback_proxy(bootstrap::bootstrap_ref boot, const protocol::window_layout& layout, const options& opts,
                       idle_policy idle = {})
      : layout_(layout), ranks_checked_(check_ranks(boot.size())), mem_(layout) {
    const int n = boot.size();
    struct card {
      long pid;
      std::shared_ptr<std::byte>* window;
    };
    const card mine{static_cast<long>(::getpid()), &mem_.window};
    std::vector<card> all(static_cast<std::size_t>(n));
    boot.all_gather(&mine, all.data(), sizeof(card));
    peers_.resize(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) {
      if (all[q].pid != mine.pid)
        throw transport_error("loopback_proxy: rank " + std::to_string(q) + " is in another process; use ibverbs");
      peers_[q] = *all[q].window;
    }
    boot.barrier();
    handle_ = mem_.handle(boot.rank(), n, layout, opts.timeout_ns);
    engines_ = std::vector<copy_engine>(copy_engines(n));
    for (auto& e : engines_) e.start(&proxy_, idle);
    proxy_.start(this, mem_.queue_array(), layout_.max_parts, idle);
  }

  basic_loopback_proxy(const basic_loopback_proxy&) = delete;
  basic_loopback_proxy& operator=(const basic_loopback_proxy&) = delete;

  /// Posts what this rank has already published (its peers may still be waiting for it), then stops and joins
  /// the proxy thread. Returns promptly even when peers are dead: the producer has stopped, so the final drain
  /// is finite.
  ~basic_loopback_proxy() {
    proxy_.stop();
    for (auto& e : engines_) e.stop();  // after the proxy's final drain: what it handed them is carried out
  }

  handle_type handle() const { return handle_; }

  /// Test hooks: a paused proxy posts nothing (a proxy thread descheduled or stopped with SIGSTOP).
  void pause() { proxy_.pause(); }
  void resume() { proxy_.resume(); }

  proxy_stats stats() const { return proxy_.stats(); }

  /// Diagnostics: one post queue per part (layout().max_parts of them), as the proxy sees them.
  const post_queue* queues() const { return mem_.queue_array(); }

#ifdef ROCENANTE_TRACE_PHASES
  /// Trace build only: this proxy's host stamps (proxy_timeline). Read it once the calls of interest have completed.
  const proxy_timeline* timeline() const { return timeline_.get(); }
#endif

 private:
  friend class proxy_thread;

  /// The proxy thread's step (called by proxy_thread): copy the range from staging to the same offset of the
  /// peer's window, then release-store the peer's flag; a whole call (all_peers) does so for every peer, starting
  /// after this rank so that the ranks' proxies do not all write into the same peer first.
  void post_one(const post& e) {
#ifdef ROCENANTE_TRACE_PHASES
    const trace_scope traced(*this, e);
#endif
    if (e.peer != all_peers) return deliver(static_cast<int>(e.peer), e);
    const int n = static_cast<int>(peers_.size()), me = handle_.rank();
    for (int k = 1; k < n; ++k) deliver((me + k) % n, e);
  }

  void deliver(int peer, const post& e) {
    std::byte* dst = peers_[static_cast<std::size_t>(peer)].get();
    const std::uint64_t at = layout_.data_offset(e.slot) + e.offset;
    proxy_.count_writes(e.bytes ? 2 : 1);  // before the flag, like posts: a peer that saw it finds them counted
    proxy_.count_bytes(e.bytes);
#ifdef ROCENANTE_TRACE_PHASES
    if (trace_ != nullptr) trace_->seen[trace_part_][peer] = trace_seen_;
#endif
    if (!engines_.empty()) {
      copy_engine::job j{dst + at, mem_.staging.get() + at, e.bytes, reinterpret_cast<std::uint64_t*>(dst) + e.flag_index,
                         e.flag_value};
#ifdef ROCENANTE_TRACE_PHASES
      if (trace_ != nullptr) {
        j.copied_at = &trace_->copied[trace_part_][peer];
        j.flagged_at = &trace_->flagged[trace_part_][peer];
      }
#endif
      engines_[static_cast<std::size_t>(peer) % engines_.size()].push(j);
      return;
    }
    if (e.bytes) {
      const std::uint64_t t0 = detail::now_ns();
      std::memcpy(dst + at, mem_.staging.get() + at, e.bytes);
      const std::uint64_t t1 = detail::now_ns();
      proxy_.count_copy_ns(t1 - t0);
#ifdef ROCENANTE_TRACE_PHASES
      if (trace_ != nullptr) trace_->copied[trace_part_][peer] = t1;
#endif
    }
    detail::store_release(reinterpret_cast<std::uint64_t*>(dst) + e.flag_index, e.flag_value);
#ifdef ROCENANTE_TRACE_PHASES
    if (trace_ != nullptr) trace_->flagged[trace_part_][peer] = detail::now_ns();
#endif
  }

#ifdef ROCENANTE_TRACE_PHASES
  /// Trace build only: while post_one carries out a descriptor, the proxy_timeline entry of its sequence (null for a
  /// part past proxy_timeline::parts), its part and when it was taken; deliver stamps the copy and the flag there.
  /// Two clock reads per descriptor and peer beyond the copy's own (taken, flag stored): they lengthen the proxy's
  /// busy time a little, most where a call is posted per part (48 descriptors per call at 4 ranks and 16 parts).
  struct trace_scope {
    basic_loopback_proxy& o;
    trace_scope(basic_loopback_proxy& owner, const post& e) : o(owner) {
      const std::uint64_t now = detail::now_ns();
      proxy_timeline::entry& t = o.timeline_->at(protocol::flag_seq(e.flag_value));
      if (t.taken++ == 0) {
        t.poll = o.proxy_.trace_poll_ns;
        t.poll_before = o.proxy_.trace_prev_poll_ns;
        t.yields = o.proxy_.trace_yields;
      }
      // A whole call sets part 0's flag (of its channel) at every peer; a part's descriptor sets its own part's.
      const std::uint64_t part = e.peer == all_peers ? 0 : (e.flag_index / o.layout_.channels) % o.layout_.max_parts;
      o.trace_ = part < static_cast<std::uint64_t>(proxy_timeline::parts) ? &t : nullptr;
      o.trace_part_ = static_cast<std::uint32_t>(part);
      o.trace_seen_ = now;
    }
    ~trace_scope() { o.trace_ = nullptr; }
  };
#endif

  /// Copy engines (file header): ROCENANTE_PROXY_COPY_ENGINES, else none.
  static std::size_t copy_engines(int n) {
    const int most = n > 1 ? n - 1 : 0;
    if (const char* s = std::getenv("ROCENANTE_PROXY_COPY_ENGINES"); s && *s) {
      char* end = nullptr;
      const long v = std::strtol(s, &end, 10);
      if (*end != '\0' || v < 0 || v > most)
        throw config_error(std::string("ROCENANTE_PROXY_COPY_ENGINES='") + s + "' is not an integer in [0, " +
                           std::to_string(most) + "] (copy engines of a loopback proxy: at most one per peer)");
      return static_cast<std::size_t>(v);
    }
    return 0;
  }

  /// Runs before any allocation (member initialiser order).
  static int check_ranks(int n) {
    if (n > max_ranks) throw transport_error("loopback_proxy: too many ranks");
    return n;
  }

  protocol::window_layout layout_;
  int ranks_checked_;
  proxy_memory<Mapping> mem_;
  std::vector<std::shared_ptr<std::byte>> peers_;
  proxy_handle handle_{};
  std::vector<copy_engine> engines_;  // stopped after the proxy (the destructor's order)
#ifdef ROCENANTE_TRACE_PHASES
  std::unique_ptr<proxy_timeline> timeline_ = std::make_unique<proxy_timeline>();  // zeroed
  proxy_timeline::entry* trace_ = nullptr;  // trace_scope
  std::uint32_t trace_part_ = 0;
  std::uint64_t trace_seen_ = 0;
#endif
  proxy_thread proxy_;  // last: stopped first (the destructor stops it explicitly anyway)
};

/// Proxy mode on the host executor: host memory, one proxy thread per rank.
using loopback_proxy = basic_loopback_proxy<host_mapping>;

}  // namespace rocenante::transport

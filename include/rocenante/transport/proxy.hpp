// transport/proxy.hpp — proxy mode: the code that runs a collective never writes into a peer's memory itself.
// It stages its bytes in its own staging area and posts a descriptor; a CPU proxy thread (standing in for a NIC,
// and the thread that will drive RDMA writes in the ibverbs transport) moves the bytes into the peer's window
// and then sets the peer's flag. This is the DGX Spark path: windows in pinned host memory that the GPU reads
// in place, a doorbell the kernel rings, a proxy that posts.
//
// Posting (hazards H1, H2): one descriptor queue per part, a single producer per queue (the team's thread 0),
// one consumer (the proxy). A descriptor is published by writing its stamp (= ticket + 1) last, with release.
// The proxy consumes every descriptor from its tail up to the last published one, in order, so a proxy that
// slept across several doorbells catches up on all of them — it never sees only "the newest sequence".
// "Staged" and "posted" are separate: the producer posts only after a team barrier that follows the staging
// of every byte the descriptor names.
// Two kinds of descriptor: one for one peer (a part's range, or an abort word), and one for every peer (a whole
// call, posted once by the part that staged last: post_call). The second is the decode-size path: one doorbell
// per call, one payload write and one flag write per peer (and rail) on the wire.
// Flow control: the producer waits (bounded by the wait policy's timeout) while the queue is full; the proxy
// publishes how many tickets it has consumed.
//
// The host side shared by every proxy-mode transport (loopback_proxy, ibverbs, socket) is here too, once:
// host_mapping and proxy_memory (window, staging, queues, cursors), and proxy_thread (the drain loop with its
// idle policy, pause/resume test hooks, statistics and the stop-then-final-drain teardown). A transport supplies
// only `post_one(const post&)` — how one descriptor reaches the peer — and optionally a per-poll `progress()`
// and the teardown hooks `before_final_drain()` / `after_final_drain()` (ibverbs: completions). The two that
// connect processes (ibverbs, socket) also share pair_reach (what set-up found about each pair) and local_abort
// (the abort words written when a peer fails). The host parts are ordinary host code (std::thread); device code
// uses only proxy_handle.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "../config.hpp"
#include "../core/atomic.hpp"
#include "../core/clock.hpp"
#include "../core/error.hpp"
#include "../protocol/flags.hpp"
#include "../protocol/layout.hpp"
#include "../protocol/state.hpp"

namespace rocenante::transport {

/// `post::peer` of a descriptor for every peer but the poster (a whole call: post_call).
inline constexpr std::uint32_t all_peers = 0xffffffffu;

/// One posted write: bytes [offset, offset+bytes) of slot `slot` from the staging area into `peer`'s window (every
/// peer's when `peer` is all_peers), then flag `flag_index` of that peer set to `flag_value`. A transport with
/// several rails (ibverbs over several devices) splits a whole call's bytes over them and sets, per rail d, flag
/// `flag_index + d * channels` (part d of the same slot and channel).
struct post {
  std::uint64_t stamp;  ///< ticket + 1 once the descriptor is complete; written last, with release
  std::uint64_t offset;
  std::uint64_t bytes;
  std::uint64_t flag_index;
  std::uint64_t flag_value;
  std::uint32_t peer;
  std::uint32_t slot;
};

inline constexpr std::uint32_t post_queue_depth = 64;

struct alignas(128) post_queue {
  std::uint64_t consumed;  ///< tickets the proxy has finished (proxy writes, producer reads)
  std::uint8_t pad[120];
  post entries[post_queue_depth];
};

/// Producer-private cursor of one queue; lives where the producer runs (device memory for GPU kernels).
struct post_cursor {
  std::uint64_t head;            ///< next ticket
  std::uint64_t consumed_cache;  ///< last value of post_queue::consumed this producer read
};

/// Handle of a proxy-mode transport: shared_staging — put_ptr() is this rank's staging area for every peer,
/// and signal() posts a descriptor instead of storing into the peer.
struct proxy_handle {
  static constexpr bool shared_staging = true;

  int rank_;
  int ranks_;
  protocol::window_layout layout_;
  std::byte* window_;       ///< this rank's window (flags + received slots); host-mapped for GPUs
  std::byte* staging_;      ///< this rank's staging area, same layout as a window
  post_queue* queues_;      ///< one per part; host-mapped for GPUs
  post_cursor* cursors_;    ///< one per part; producer-private
  std::uint64_t timeout_ns_;
  std::uint32_t rails_;     ///< flags per peer of a call posted once (1, or the RDMA rails a call is striped over)

  ROCENANTE_HOST_DEVICE int rank() const { return rank_; }
  ROCENANTE_HOST_DEVICE int ranks() const { return ranks_; }
  ROCENANTE_HOST_DEVICE memory_scope scope() const { return memory_scope::system; }
  ROCENANTE_HOST_DEVICE const protocol::window_layout& layout() const { return layout_; }
  ROCENANTE_HOST_DEVICE std::byte* put_ptr(int, std::uint32_t slot, std::uint64_t off) {
    return staging_ + layout_.data_offset(slot) + off;
  }
  ROCENANTE_HOST_DEVICE const std::byte* recv_ptr(std::uint32_t slot, std::uint64_t off) const {
    return window_ + layout_.data_offset(slot) + off;
  }
  ROCENANTE_HOST_DEVICE std::uint64_t* local_flag(std::uint64_t index) {
    return reinterpret_cast<std::uint64_t*>(window_) + index;
  }
  /// Flags per peer of a call posted once: a peer's call is complete when its flags of parts 0 .. rails()-1 (its
  /// channel) are set; the last rail's write carries the call trailer.
  ROCENANTE_HOST_DEVICE std::uint32_t rails() const { return rails_; }

  /// Post one descriptor on the queue of the part that `index` belongs to. Called by one thread per part at a
  /// time. Returns false when the proxy did not make room within the timeout (the caller fails the collective).
  ROCENANTE_HOST_DEVICE bool signal(int peer, std::uint32_t slot, std::uint64_t off, std::uint64_t bytes,
                                    std::uint64_t index, std::uint64_t value) {
    return post_on(static_cast<std::uint32_t>((index / layout_.channels) % layout_.max_parts),
                   static_cast<std::uint32_t>(peer), slot, off, bytes, index, value);
  }

  /// A whole call, posted once by the part that staged last, on its own queue `queue`: bytes [off, off+bytes) of
  /// slot `slot` to every peer, then at each its flag `index` (one per rail: post) set to `value`.
  ROCENANTE_HOST_DEVICE bool post_call(std::uint32_t queue, std::uint32_t slot, std::uint64_t off, std::uint64_t bytes,
                                       std::uint64_t index, std::uint64_t value) {
    return post_on(queue, all_peers, slot, off, bytes, index, value);
  }

  /// Post one descriptor on queue `queue` (the caller's part: one producer per queue at a time).
  ROCENANTE_HOST_DEVICE bool post_on(std::uint32_t queue, std::uint32_t peer, std::uint32_t slot, std::uint64_t off,
                                     std::uint64_t bytes, std::uint64_t index, std::uint64_t value) {
    post_queue& q = queues_[queue];
    post_cursor& c = cursors_[queue];
    const std::uint64_t ticket = c.head;
    if (ticket - c.consumed_cache >= post_queue_depth) {
      const std::uint64_t start = detail::now_ns();
      std::uint64_t polls = 0;
      for (;;) {
        c.consumed_cache = detail::load_acquire(&q.consumed);
        if (ticket - c.consumed_cache < post_queue_depth) break;
        if (++polls % 16 == 0 && timeout_ns_ != 0 && detail::now_ns() - start >= timeout_ns_) return false;
        detail::relax(polls);
      }
    }
    post& e = q.entries[ticket % post_queue_depth];
    e.offset = off;
    e.bytes = bytes;
    e.flag_index = index;
    e.flag_value = value;
    e.peer = peer;
    e.slot = slot;
    detail::store_release(&e.stamp, ticket + 1);
    c.head = ticket + 1;
    return true;
  }
};

/// How the proxy waits when there is nothing to post (hazard H20): spin keeps the latency of a doorbell at a
/// memory read but burns a core; yield gives the core away between polls; sleep adds a scheduler wake-up to
/// the first collective after an idle period.
struct idle_policy {
  enum kind_t : std::uint32_t { spin = 0, yield = 1, sleep = 2 } kind = yield;
  std::uint32_t spin_polls = 20000;  ///< empty polls before yielding / sleeping
  std::uint32_t sleep_us = 50;       ///< sleep length for kind == sleep
};

/// The consumer side, one call per poll: consume every published descriptor of every queue, in ticket order,
/// through `post_fn(const post&)` (which moves the bytes and sets the flag). Returns how many were posted.
template <class PostFn>
std::uint64_t drain_queues(post_queue* queues, std::uint32_t parts, std::uint64_t* tails, PostFn&& post_fn) {
  std::uint64_t done = 0;
  for (std::uint32_t p = 0; p < parts; ++p) {
    post_queue& q = queues[p];
    std::uint64_t t = tails[p];
    for (;;) {
      post& e = q.entries[t % post_queue_depth];
      if (detail::load_acquire(&e.stamp) != t + 1) break;
      post_fn(e);
      ++t;
      ++done;
    }
    if (t != tails[p]) {
      tails[p] = t;
      detail::store_release(&q.consumed, t);
    }
  }
  return done;
}

/// Diagnostics for a collective that timed out in proxy mode (a snapshot read without synchronisation): per queue
/// of `parts`, the tickets the proxy has consumed, and whether the next entry is published but not consumed (the
/// proxy is behind or stuck) — with the last consumed entry's flag, so that a lost flag can be told from a
/// descriptor never posted (the producer's cursor lives where the producer runs and is not read here). Queues
/// never used are left out.
inline std::string describe_queues(const post_queue* queues, std::uint32_t parts) {
  std::string out;
  char buf[160];
  for (std::uint32_t p = 0; p < parts; ++p) {
    const post_queue& q = queues[p];
    const std::uint64_t c = detail::load_acquire(&q.consumed);
    const post& next = q.entries[c % post_queue_depth];
    const bool pending = detail::load_acquire(&next.stamp) == c + 1;
    if (c == 0 && !pending) continue;
    int k = std::snprintf(buf, sizeof buf, "%squeue %u: consumed %llu", out.empty() ? "" : "; ", p,
                          static_cast<unsigned long long>(c));
    if (c != 0) {
      const post& last = q.entries[(c - 1) % post_queue_depth];
      k += std::snprintf(buf + k, sizeof buf - static_cast<std::size_t>(k), " (last: peer %s, flag %llu = 0x%016llx)",
                         last.peer == all_peers ? "all" : std::to_string(last.peer).c_str(),
                         static_cast<unsigned long long>(last.flag_index),
                         static_cast<unsigned long long>(last.flag_value));
    }
    if (pending) std::snprintf(buf + k, sizeof buf - static_cast<std::size_t>(k), ", next published, not consumed");
    out += buf;
  }
  return out.empty() ? "no descriptor ever posted" : out;
}

/// Plain host memory (host executor).
struct host_mapping {
  static constexpr const char* where = "host";
  static std::shared_ptr<std::byte> shared(std::uint64_t bytes) {
    auto* p = static_cast<std::byte*>(::operator new(bytes, std::align_val_t{4096}, std::nothrow));
    if (!p) throw transport_error("proxy transport: could not allocate " + std::to_string(bytes) + " bytes of host memory");
    std::memset(p, 0, bytes);
    return std::shared_ptr<std::byte>(p, [](std::byte* q) { ::operator delete(q, std::align_val_t{4096}); });
  }
  /// Memory only the producer touches (cursors).
  static std::shared_ptr<std::byte> producer_private(std::uint64_t bytes) { return shared(bytes); }
  static void fill(std::byte* p, int value, std::uint64_t bytes) { std::memset(p, value, bytes); }
};

/// The memory of one rank of a proxy-mode transport, in the places `Mapping` puts it: the window (flags set to
/// flag_unset, payload zeroed), a staging area laid out like the window, one post queue and one producer cursor
/// per part.
template <class Mapping>
struct proxy_memory {
  std::shared_ptr<std::byte> window, staging, queues, cursors;

  explicit proxy_memory(const protocol::window_layout& layout) {
    window = Mapping::shared(layout.total_bytes());
    for (int k = 0; k < 2; ++k) Mapping::fill(window.get() + layout.ones_ranges(k).offset, 0xff, layout.ones_ranges(k).bytes);
    staging = Mapping::shared(layout.total_bytes());
    queues = Mapping::shared(sizeof(post_queue) * layout.max_parts);
    cursors = Mapping::producer_private(sizeof(post_cursor) * layout.max_parts);
  }
  post_queue* queue_array() const { return reinterpret_cast<post_queue*>(queues.get()); }
  proxy_handle handle(int rank, int ranks, const protocol::window_layout& layout, std::uint64_t timeout_ns,
                      std::uint32_t rails = 1) const {
    return proxy_handle{rank,          ranks,         layout,
                        window.get(),  staging.get(), queue_array(),
                        reinterpret_cast<post_cursor*>(cursors.get()), timeout_ns, rails};
  }
};

/// What the proxy measured, for the breakdown of where proxy-mode time goes. Per call, in proxy-mode rows of
/// rocenante-perf: doorbells = posts (descriptors), writes (what goes on the wire: payload and flag writes, the
/// work requests of the ibverbs transport), busy_ns split into copy_ns (a loopback proxy's memcpy, standing in for
/// a NIC's DMA) and the rest (posting).
struct proxy_stats {
  std::uint64_t posts = 0;         ///< descriptors posted (counted as the proxy takes each, before carrying it out)
  std::uint64_t calls = 0;         ///< of which whole calls (a descriptor for every peer: post_call)
  std::uint64_t writes = 0;        ///< writes issued: payload and flag writes (ibverbs: work requests; socket: frames)
  std::uint64_t bytes = 0;         ///< payload bytes moved
  std::uint64_t busy_ns = 0;       ///< time spent inside post_one (copy + flag)
  std::uint64_t copy_ns = 0;       ///< of which copying payload (loopback proxy only; 0 elsewhere)
  std::uint64_t drains = 0;        ///< polls that found work
  std::uint64_t idle_polls = 0;    ///< polls that found nothing
};

#ifdef ROCENANTE_TRACE_PHASES
/// The proxy's side of the proxy-mode timeline (protocol::rank_state::timeline; benchmarks/gpu/trace_phases.cu, never
/// in a normal build): per sequence, when the proxy took each descriptor and when its payload copy and its flag store
/// were done, in detail::now_ns() of the host (steady_clock). The tool maps them onto the GPU's %globaltimer through a
/// calibration of the two clocks, so that "doorbell rung", "descriptor taken", "flag stored" and "flag seen" line up
/// on one axis. [part][peer]: the part whose flag the descriptor sets (a whole call: 0) and the peer written.
/// Written by the proxy thread (copies and flags: by the copy engine that did them); read after the run.
struct proxy_timeline {
  static constexpr int slots = 64, parts = 16;
  struct entry {
    std::uint32_t seq;              ///< the sequence this entry holds
    std::uint32_t taken;            ///< descriptors of it taken
    std::uint64_t poll;             ///< start of the poll that took its first descriptor
    std::uint64_t poll_before;      ///< start of the poll before that one (empty, or busy with earlier work)
    std::uint64_t yields;           ///< the idle policy's yields since the proxy last found work, at that poll
    std::uint64_t seen[parts][max_ranks];     ///< the descriptor taken (post_one began)
    std::uint64_t copied[parts][max_ranks];   ///< its payload copied to the peer (0: no payload)
    std::uint64_t flagged[parts][max_ranks];  ///< the peer's flag release-stored
  };
  entry entries[slots];

  /// The entry of `seq`, cleared when it still held the sequence `slots` earlier (a few KiB, once per sequence, on
  /// the proxy thread before its first copy: cells a call does not use must not show an older call's stamps).
  entry& at(std::uint32_t seq) {
    entry& e = entries[seq % slots];
    if (e.seq != seq || e.taken == 0) {
      e = entry{};
      e.seq = seq;
    }
    return e;
  }
};
#endif

/// The proxy thread of one rank. `start(owner, ...)` runs, until `stop()`:
///   owner->progress()                      (optional) once per poll, before the queues are read
///   drain_queues(..., owner->post_one)     every published descriptor, in ticket order (hazard H1)
///   the idle policy when a poll found nothing (hazard H20); a paused proxy posts nothing
/// and at stop: owner->before_final_drain() (optional), one last drain of what the producer already published
/// (peers may be waiting for it), owner->after_final_drain() (optional); then the thread returns. The producer
/// has stopped by then, so the final drain is finite; the hooks must bound their own waits.
/// The owner calls stop() in its destructor, before any member post_one uses is destroyed.
class proxy_thread {
 public:
  proxy_thread() = default;
  proxy_thread(const proxy_thread&) = delete;
  proxy_thread& operator=(const proxy_thread&) = delete;
  ~proxy_thread() { stop(); }

  template <class Owner>
  void start(Owner* owner, post_queue* queues, std::uint32_t parts, idle_policy idle) {
    thread_ = std::thread([this, owner, queues, parts, idle] { run(owner, queues, parts, idle); });
  }
  /// Stops and joins the thread (after its final drain). Idempotent.
  void stop() {
    stop_.store(true, std::memory_order_release);
    if (thread_.joinable()) thread_.join();
  }
  bool stopping() const { return stop_.load(std::memory_order_acquire); }

  /// Test hooks: a paused proxy posts nothing (a proxy thread descheduled or stopped with SIGSTOP).
  void pause() { paused_.store(true, std::memory_order_release); }
  void resume() { paused_.store(false, std::memory_order_release); }

  /// Payload bytes moved, writes issued and time spent copying; post_one reports them.
  void count_bytes(std::uint64_t b) { bytes_.fetch_add(b, std::memory_order_relaxed); }
  void count_writes(std::uint64_t w) { writes_.fetch_add(w, std::memory_order_relaxed); }
  void count_copy_ns(std::uint64_t ns) { copy_ns_.fetch_add(ns, std::memory_order_relaxed); }

#ifdef ROCENANTE_TRACE_PHASES
  /// Trace build only (proxy_timeline): the start of the current and of the previous poll, and the idle policy's
  /// yields since work was last found. Written by the proxy thread before each poll's drain and read by the owner's
  /// post_one during it, on the same thread.
  std::uint64_t trace_poll_ns = 0, trace_prev_poll_ns = 0, trace_yields = 0;
#endif

  proxy_stats stats() const {
    proxy_stats s;
    s.posts = posts_.load(std::memory_order_relaxed);
    s.calls = calls_.load(std::memory_order_relaxed);
    s.writes = writes_.load(std::memory_order_relaxed);
    s.bytes = bytes_.load(std::memory_order_relaxed);
    s.busy_ns = busy_ns_.load(std::memory_order_relaxed);
    s.copy_ns = copy_ns_.load(std::memory_order_relaxed);
    s.drains = drains_.load(std::memory_order_relaxed);
    s.idle_polls = idle_polls_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  template <class Owner>
  void run(Owner* owner, post_queue* queues, std::uint32_t parts, idle_policy idle) {
    std::vector<std::uint64_t> tails(parts, 0);
    std::uint64_t empty = 0;
    // A post is counted before it is carried out: a peer that has received it (and a test that waited for that
    // peer) then finds it in stats() — counted after the drain, it could still be missing there.
    auto fn = [this, owner](const post& e) {
      posts_.fetch_add(1, std::memory_order_relaxed);
      if (e.peer == all_peers) calls_.fetch_add(1, std::memory_order_relaxed);
      owner->post_one(e);
    };
    for (;;) {
      if constexpr (requires { owner->progress(); }) owner->progress();
      if (stop_.load(std::memory_order_acquire)) {
        if constexpr (requires { owner->before_final_drain(); }) owner->before_final_drain();
        drain_queues(queues, parts, tails.data(), fn);
        if constexpr (requires { owner->after_final_drain(); }) owner->after_final_drain();
        return;
      }
      if (paused_.load(std::memory_order_acquire)) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        continue;
      }
      const std::uint64_t t0 = detail::now_ns();
#ifdef ROCENANTE_TRACE_PHASES
      trace_prev_poll_ns = trace_poll_ns;
      trace_poll_ns = t0;
#endif
      const std::uint64_t got = drain_queues(queues, parts, tails.data(), fn);
      if (got) {
        busy_ns_.fetch_add(detail::now_ns() - t0, std::memory_order_relaxed);
        drains_.fetch_add(1, std::memory_order_relaxed);
        empty = 0;
#ifdef ROCENANTE_TRACE_PHASES
        trace_yields = 0;
#endif
        continue;
      }
      idle_polls_.fetch_add(1, std::memory_order_relaxed);
      if (++empty < idle.spin_polls || idle.kind == idle_policy::spin) continue;
#ifdef ROCENANTE_TRACE_PHASES
      ++trace_yields;  // a sleep too: either gives the core away
#endif
      if (idle.kind == idle_policy::yield)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(idle.sleep_us));
    }
  }

  std::thread thread_;
  std::atomic<bool> stop_{false}, paused_{false};
  std::atomic<std::uint64_t> posts_{0}, calls_{0}, writes_{0}, bytes_{0}, busy_ns_{0}, copy_ns_{0}, drains_{0},
      idle_polls_{0};
};

/// What set-up found about each pair of this rank, for the transports that connect processes (ibverbs: the
/// start-up probe; socket: both connections of the pair made): whether `peer` is reachable, and why not. Written
/// before the proxy starts, read-only after.
struct pair_reach {
  int me = 0;
  std::vector<std::uint8_t> ok;  ///< [peer]
  std::vector<std::string> why;  ///< [peer]: why the pair failed (empty when it did not)

  void reset(int rank, int ranks) {
    me = rank;
    ok.assign(static_cast<std::size_t>(ranks), 1);
    why.assign(static_cast<std::size_t>(ranks), std::string());
  }
  /// Self: true; a rank out of range: false.
  bool reachable(int peer) const {
    if (peer == me) return true;
    if (peer < 0 || peer >= static_cast<int>(ok.size())) return false;
    return ok[static_cast<std::size_t>(peer)] != 0;
  }
  std::string reason(int peer) const {
    return peer >= 0 && peer < static_cast<int>(why.size()) ? why[static_cast<std::size_t>(peer)] : std::string();
  }
};

/// The abort words a proxy transport that lost a peer writes into its own rank's flags (ibverbs, socket; hazard
/// H14): for the sequence it is posting and the next one (the rank's current wait is at one of the two: the proxy
/// has taken its descriptors of the first), so that wait fails at once through the protocol's fail-stop path,
/// naming the suspect. Proxy thread only.
class local_abort {
 public:
  /// The proxy takes a descriptor of sequence `seq`.
  void taken(std::uint32_t seq) {
    last_ = seq;
    have_last_ = true;
  }
  /// Abort words naming `suspect` for sequences s and s + 1 into every part's and channel's flag of `window`; once
  /// per s.
  void publish(std::byte* window, const protocol::window_layout& layout, std::uint32_t s, int suspect) {
    if (published_any_ && s == published_) return;
    published_any_ = true;
    published_ = s;
    auto* flags = reinterpret_cast<std::uint64_t*>(window);
    for (std::uint32_t k = 0; k < 2; ++k) {
      const std::uint32_t seq = s + k;
      const std::uint64_t value = protocol::make_flag(
          seq, protocol::abort_signature(static_cast<std::uint32_t>(protocol::failure_kind::timeout), suspect));
      for (std::uint32_t p = 0; p < layout.max_parts; ++p)
        for (std::uint32_t ch = 0; ch < layout.channels; ++ch)
          detail::store_release(flags + layout.flag_index(seq & 1u, p, ch), value);
    }
  }
  /// The same for the sequence of the last descriptor taken; nothing before the first.
  void publish_last(std::byte* window, const protocol::window_layout& layout, int suspect) {
    if (have_last_) publish(window, layout, last_, suspect);
  }

 private:
  std::uint32_t last_ = 0, published_ = 0;
  bool have_last_ = false, published_any_ = false;
};

}  // namespace rocenante::transport

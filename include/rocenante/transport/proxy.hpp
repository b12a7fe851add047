// transport/proxy.hpp — proxy mode: the code that runs a collective never writes into a peer's memory itself.
// It stages its bytes in its own staging area and posts a descriptor; a CPU proxy thread (standing in for a NIC,
// and the thread that will drive RDMA writes in the ibverbs transport) moves the bytes into the peer's window
// and then sets the peer's flag. This is the DGX Spark path: windows in pinned host memory that the GPU reads
// in place, a doorbell the kernel rings, a proxy that posts.
//
// Posting (HAZARDS #1, #2): one descriptor queue per part, a single producer per queue (the team's thread 0),
// one consumer (the proxy). A descriptor is published by writing its stamp (= ticket + 1) last, with release.
// The proxy consumes every descriptor from its tail up to the last published one, in order, so a proxy that
// slept across several doorbells catches up on all of them — it never sees only "the newest sequence".
// "Staged" and "posted" are separate: the producer posts only after a team barrier that follows the staging
// of every byte the descriptor names.
// Flow control: the producer waits (bounded by the wait policy's timeout) while the queue is full; the proxy
// publishes how many tickets it has consumed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../config.hpp"
#include "../core/atomic.hpp"
#include "../core/clock.hpp"
#include "../protocol/layout.hpp"

namespace rocenante::transport {

/// One posted write: bytes [offset, offset+bytes) of slot `slot` from the staging area into `peer`'s window,
/// then flag `flag_index` of `peer` set to `flag_value`.
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

  /// Post one descriptor on the queue of the part that `index` belongs to. Called by one thread per part at a
  /// time. Returns false when the proxy did not make room within the timeout (the caller fails the collective).
  ROCENANTE_HOST_DEVICE bool signal(int peer, std::uint32_t slot, std::uint64_t off, std::uint64_t bytes,
                                    std::uint64_t index, std::uint64_t value) {
    const std::uint32_t part = static_cast<std::uint32_t>((index / layout_.channels) % layout_.max_parts);
    post_queue& q = queues_[part];
    post_cursor& c = cursors_[part];
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
    e.peer = static_cast<std::uint32_t>(peer);
    e.slot = slot;
    detail::store_release(&e.stamp, ticket + 1);
    c.head = ticket + 1;
    return true;
  }
};

/// How the proxy waits when there is nothing to post (HAZARDS #20): spin keeps the latency of a doorbell at a
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

}  // namespace rocenante::transport

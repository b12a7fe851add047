// transport/loopback_proxy.hpp — proxy mode of the loopback transport: ranks in one process, but the code that
// runs a collective only stages bytes and posts descriptors (transport/proxy.hpp); one CPU proxy thread per rank
// moves the bytes into the peers' windows and sets their flags. The only step that differs from the ibverbs
// transport is `post_one` (a memcpy + a release store here; an RDMA write + a write of the flag there).
//
// Memory policies: host_mapping (plain host memory: the host executor) and, in transport/cuda_window.hpp,
// cuda_mapping (pinned host-mapped windows, staging and queues that a GPU kernel reads and writes in place —
// the DGX Spark path — and producer cursors in device memory).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../bootstrap/concepts.hpp"
#include "../core/error.hpp"
#include "../core/options.hpp"
#include "../protocol/flags.hpp"
#include "../protocol/layout.hpp"
#include "loopback.hpp"
#include "proxy.hpp"

namespace rocenante::transport {

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
    proxy_.start(this, mem_.queue_array(), layout_.max_parts, idle);
  }

  basic_loopback_proxy(const basic_loopback_proxy&) = delete;
  basic_loopback_proxy& operator=(const basic_loopback_proxy&) = delete;

  /// Posts what this rank has already published (its peers may still be waiting for it), then stops and joins
  /// the proxy thread. Returns promptly even when peers are dead: the producer has stopped, so the final drain
  /// is finite.
  ~basic_loopback_proxy() { proxy_.stop(); }

  handle_type handle() const { return handle_; }

  /// Test hooks: a paused proxy posts nothing (a proxy thread descheduled or stopped with SIGSTOP).
  void pause() { proxy_.pause(); }
  void resume() { proxy_.resume(); }

  proxy_stats stats() const { return proxy_.stats(); }

  /// Diagnostics: one post queue per part (layout().max_parts of them), as the proxy sees them.
  const post_queue* queues() const { return mem_.queue_array(); }

 private:
  friend class proxy_thread;

  /// The proxy thread's step (called by proxy_thread): copy the range from staging to the same offset of the
  /// peer's window, then release-store the peer's flag; a whole call (all_peers) does so for every peer, starting
  /// after this rank so that the ranks' proxies do not all write into the same peer first.
  void post_one(const post& e) {
    if (e.peer != all_peers) return deliver(static_cast<int>(e.peer), e);
    const int n = static_cast<int>(peers_.size()), me = handle_.rank();
    for (int k = 1; k < n; ++k) deliver((me + k) % n, e);
  }

  void deliver(int peer, const post& e) {
    std::byte* dst = peers_[static_cast<std::size_t>(peer)].get();
    const std::uint64_t at = layout_.data_offset(e.slot) + e.offset;
    proxy_.count_writes(e.bytes ? 2 : 1);  // before the flag, like posts: a peer that saw it finds them counted
    proxy_.count_bytes(e.bytes);
    if (e.bytes) {
      const std::uint64_t t0 = detail::now_ns();
      std::memcpy(dst + at, mem_.staging.get() + at, e.bytes);
      proxy_.count_copy_ns(detail::now_ns() - t0);
    }
    detail::store_release(reinterpret_cast<std::uint64_t*>(dst) + e.flag_index, e.flag_value);
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
  proxy_thread proxy_;  // last: stopped first (the destructor stops it explicitly anyway)
};

/// Proxy mode on the host executor: host memory, one proxy thread per rank.
using loopback_proxy = basic_loopback_proxy<host_mapping>;

}  // namespace rocenante::transport

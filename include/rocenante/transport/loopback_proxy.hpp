// transport/loopback_proxy.hpp — proxy mode of the loopback transport: ranks in one process, but the code that
// runs a collective only stages bytes and posts descriptors (transport/proxy.hpp); one CPU proxy thread per rank
// moves the bytes into the peers' windows and sets their flags. The only step that differs from the ibverbs
// transport is `post_one` (a memcpy + a release store here; an RDMA write + a write of the flag there).
//
// Memory policies: host_mapping (plain host memory: the host executor) and, in transport/cuda_window.hpp,
// cuda_mapping (pinned host-mapped windows, staging and queues that a GPU kernel reads and writes in place —
// the DGX Spark path — and producer cursors in device memory).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
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

/// Plain host memory (host executor).
struct host_mapping {
  static constexpr const char* where = "host";
  static std::shared_ptr<std::byte> shared(std::uint64_t bytes) {
    auto* p = static_cast<std::byte*>(::operator new(bytes, std::align_val_t{4096}, std::nothrow));
    if (!p) throw transport_error("loopback_proxy: could not allocate " + std::to_string(bytes) + " bytes");
    std::memset(p, 0, bytes);
    return std::shared_ptr<std::byte>(p, [](std::byte* q) { ::operator delete(q, std::align_val_t{4096}); });
  }
  /// Memory only the producer touches (cursors).
  static std::shared_ptr<std::byte> producer_private(std::uint64_t bytes) { return shared(bytes); }
  static void fill(std::byte* p, int value, std::uint64_t bytes) { std::memset(p, value, bytes); }
};

/// What the proxy measured, for the breakdown of where proxy-mode time goes.
struct proxy_stats {
  std::uint64_t posts = 0;         ///< descriptors posted
  std::uint64_t bytes = 0;         ///< payload bytes moved
  std::uint64_t busy_ns = 0;       ///< time spent inside post_one (copy + flag)
  std::uint64_t drains = 0;        ///< polls that found work
  std::uint64_t idle_polls = 0;    ///< polls that found nothing
};

template <class Mapping>
class basic_loopback_proxy {
 public:
  static constexpr const char* name = "loopback_proxy";
  /// Every rank lives in this process (and shares its CUDA context when on a GPU).
  static constexpr bool ranks_share_process = true;
  using handle_type = proxy_handle;

  /// Collective: every rank calls. Starts this rank's proxy thread.
  basic_loopback_proxy(bootstrap::bootstrap_ref boot, const protocol::window_layout& layout, const options& opts,
                       idle_policy idle = {})
      : layout_(layout), idle_(idle) {
    const int n = boot.size();
    if (n > max_ranks) throw transport_error("loopback_proxy: too many ranks");
    window_ = Mapping::shared(layout.total_bytes());
    Mapping::fill(window_.get(), 0xff, layout.flags_bytes());
    staging_ = Mapping::shared(layout.total_bytes());
    queue_mem_ = Mapping::shared(sizeof(post_queue) * layout.max_parts);
    cursor_mem_ = Mapping::producer_private(sizeof(post_cursor) * layout.max_parts);
    struct card {
      long pid;
      std::shared_ptr<std::byte>* window;
    };
    const card mine{static_cast<long>(::getpid()), &window_};
    std::vector<card> all(static_cast<std::size_t>(n));
    boot.all_gather(&mine, all.data(), sizeof(card));
    peers_.resize(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) {
      if (all[q].pid != mine.pid)
        throw transport_error("loopback_proxy: rank " + std::to_string(q) + " is in another process; use ibverbs");
      peers_[q] = *all[q].window;
    }
    boot.barrier();
    handle_ = proxy_handle{boot.rank(),
                           n,
                           layout,
                           window_.get(),
                           staging_.get(),
                           reinterpret_cast<post_queue*>(queue_mem_.get()),
                           reinterpret_cast<post_cursor*>(cursor_mem_.get()),
                           opts.timeout_ns};
    thread_ = std::thread([this] { run(); });
  }

  basic_loopback_proxy(const basic_loopback_proxy&) = delete;
  basic_loopback_proxy& operator=(const basic_loopback_proxy&) = delete;

  /// Posts what this rank has already published (its peers may still be waiting for it), then stops and joins
  /// the proxy thread. Returns promptly even when peers are dead: the producer has stopped, so the final drain
  /// is finite.
  ~basic_loopback_proxy() {
    stop_.store(true, std::memory_order_release);
    if (thread_.joinable()) thread_.join();
  }

  handle_type handle() const { return handle_; }

  /// Test hooks: a paused proxy posts nothing (a proxy thread descheduled or stopped with SIGSTOP).
  void pause() { paused_.store(true, std::memory_order_release); }
  void resume() { paused_.store(false, std::memory_order_release); }

  proxy_stats stats() const {
    proxy_stats s;
    s.posts = posts_.load(std::memory_order_relaxed);
    s.bytes = bytes_.load(std::memory_order_relaxed);
    s.busy_ns = busy_ns_.load(std::memory_order_relaxed);
    s.drains = drains_.load(std::memory_order_relaxed);
    s.idle_polls = idle_polls_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  void post_one(const post& e) {
    std::byte* dst = peers_[e.peer].get();
    const std::uint64_t at = layout_.data_offset(e.slot) + e.offset;
    if (e.bytes) std::memcpy(dst + at, staging_.get() + at, e.bytes);
    detail::store_release(reinterpret_cast<std::uint64_t*>(dst) + e.flag_index, e.flag_value);
    bytes_.fetch_add(e.bytes, std::memory_order_relaxed);
  }

  void run() {
    std::vector<std::uint64_t> tails(layout_.max_parts, 0);
    std::uint64_t empty = 0;
    auto* queues = reinterpret_cast<post_queue*>(queue_mem_.get());
    for (;;) {
      if (stop_.load(std::memory_order_acquire)) {
        drain_queues(queues, layout_.max_parts, tails.data(), [&](const post& e) { post_one(e); });
        return;
      }
      if (paused_.load(std::memory_order_acquire)) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        continue;
      }
      const std::uint64_t t0 = detail::now_ns();
      const std::uint64_t n = drain_queues(queues, layout_.max_parts, tails.data(), [&](const post& e) { post_one(e); });
      if (n) {
        busy_ns_.fetch_add(detail::now_ns() - t0, std::memory_order_relaxed);
        posts_.fetch_add(n, std::memory_order_relaxed);
        drains_.fetch_add(1, std::memory_order_relaxed);
        empty = 0;
        continue;
      }
      idle_polls_.fetch_add(1, std::memory_order_relaxed);
      if (++empty < idle_.spin_polls || idle_.kind == idle_policy::spin) continue;
      if (idle_.kind == idle_policy::yield)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(idle_.sleep_us));
    }
  }

  protocol::window_layout layout_;
  idle_policy idle_;
  std::shared_ptr<std::byte> window_, staging_, queue_mem_, cursor_mem_;
  std::vector<std::shared_ptr<std::byte>> peers_;
  proxy_handle handle_{};
  std::thread thread_;
  std::atomic<bool> stop_{false}, paused_{false};
  std::atomic<std::uint64_t> posts_{0}, bytes_{0}, busy_ns_{0}, drains_{0}, idle_polls_{0};
};

/// Proxy mode on the host executor: host memory, one proxy thread per rank.
using loopback_proxy = basic_loopback_proxy<host_mapping>;

}  // namespace rocenante::transport

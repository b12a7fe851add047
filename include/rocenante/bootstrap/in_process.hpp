// bootstrap/in_process.hpp — bootstrap for ranks that are threads of one process (host executor, GPU
// loopback, tests). Every rank holds an `in_process` made from one shared `in_process_world`.
//
// Every exchange is bounded: a rank that does not arrive within the world's timeout makes every waiting rank
// throw bootstrap_error naming the missing ranks, and the world stays broken (later calls throw at once).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "concepts.hpp"

namespace rocenante::bootstrap {

class in_process_world {
 public:
  explicit in_process_world(int size, std::chrono::milliseconds timeout = std::chrono::seconds(60))
      : size_(size), timeout_(timeout), buffers_(static_cast<std::size_t>(size > 0 ? size : 0)),
        arrived_(static_cast<std::size_t>(size > 0 ? size : 0), false) {
    if (size <= 0) throw config_error("in_process_world: size must be at least 1, got " + std::to_string(size));
  }
  in_process_world(const in_process_world&) = delete;
  in_process_world& operator=(const in_process_world&) = delete;

  int size() const { return size_; }

  void all_gather(int rank, const void* send, void* recv, std::size_t bytes) {
    std::unique_lock lock(mu_);
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    // Wait for the previous exchange to drain.
    if (!cv_.wait_until(lock, deadline, [&] { return broken_ || !draining_; })) fail_locked(rank, "drain");
    if (broken_) throw bootstrap_error(broken_why_);
    if (arrived_[rank]) throw bootstrap_error("in_process bootstrap: rank " + std::to_string(rank) + " entered twice");
    if (count_ == 0) {
      bytes_ = bytes;
    } else if (bytes != bytes_) {
      broken_ = true;
      broken_why_ = "in_process bootstrap: ranks exchanged different sizes (" + std::to_string(bytes) + " bytes on rank " +
                    std::to_string(rank) + ", " + std::to_string(bytes_) + " on others): set-up calls are out of order";
      cv_.notify_all();
      throw bootstrap_error(broken_why_);
    }
    buffers_[rank].assign(static_cast<const std::byte*>(send), static_cast<const std::byte*>(send) + bytes);
    arrived_[rank] = true;
    const std::uint64_t gen = generation_;
    if (++count_ == size_) {
      draining_ = true;
      cv_.notify_all();
    } else if (!cv_.wait_until(lock, deadline, [&] { return broken_ || (draining_ && generation_ == gen); })) {
      fail_locked(rank, "all_gather");
    }
    if (broken_) throw bootstrap_error(broken_why_);
    for (int q = 0; q < size_; ++q) std::memcpy(static_cast<std::byte*>(recv) + q * bytes, buffers_[q].data(), bytes);
    if (++departed_ == size_) {
      draining_ = false;
      departed_ = 0;
      count_ = 0;
      ++generation_;
      arrived_.assign(arrived_.size(), false);
      cv_.notify_all();
    }
  }

 private:
  [[noreturn]] void fail_locked(int rank, const char* where) {
    std::string missing;
    for (int q = 0; q < size_; ++q)
      if (!arrived_[q]) missing += (missing.empty() ? "" : ", ") + std::to_string(q);
    broken_ = true;
    broken_why_ = "in_process bootstrap: rank " + std::to_string(rank) + " waited " +
                  std::to_string(timeout_.count()) + " ms in " + where + " for rank(s) " +
                  (missing.empty() ? std::string("(draining)") : missing) +
                  " that never arrived; check that every rank performs the same set-up calls";
    cv_.notify_all();
    throw bootstrap_error(broken_why_);
  }

  int size_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<std::byte>> buffers_;
  std::vector<bool> arrived_;
  std::size_t bytes_ = 0;
  int count_ = 0, departed_ = 0;
  bool draining_ = false, broken_ = false;
  std::string broken_why_;
  std::uint64_t generation_ = 0;
};

/// One rank's view of an in_process_world.
class in_process {
 public:
  in_process(in_process_world& world, int rank) : world_(&world), rank_(rank) {
    if (rank < 0 || rank >= world.size())
      throw config_error("in_process bootstrap: rank " + std::to_string(rank) + " is outside [0, " +
                         std::to_string(world.size()) + ")");
  }
  int rank() const { return rank_; }
  int size() const { return world_->size(); }
  void all_gather(const void* send, void* recv, std::size_t bytes) { world_->all_gather(rank_, send, recv, bytes); }
  void barrier() {
    std::vector<std::byte> sink(static_cast<std::size_t>(size()));
    std::byte b{};
    world_->all_gather(rank_, &b, sink.data(), 1);
  }

 private:
  in_process_world* world_;
  int rank_;
};
static_assert(bootstrap<in_process>);

}  // namespace rocenante::bootstrap

// transport/nccl.hpp — all-reduce and all-gather through NCCL, as a whole-collective transport: the last fallback the
// ranks choose together (gpu/select.hpp, design.md §1.3 option (a)). Same host API shape as gpu::communicator:
// all_reduce(in, out, count, stream) -> status, all_gather(in, out, count, stream) -> status, check_health(),
// last_error(), failures(), capabilities().
//
// Who calls: one host thread per rank, each with its GPU current (cudaSetDevice); set-up is collective through the
// bootstrap. NCCL puts at most one rank on a GPU. Launch path: enqueues on the caller's stream, never throws,
// allocates nothing of its own; as capture-safe as NCCL is (NCCL supports CUDA graph capture).
// Set-up: libnccl is loaded lazily (transport/nccl/api.hpp), so a binary starts without NCCL. Two set-up votes
// (bootstrap/vote.hpp): "nccl: library" (libnccl loaded on every rank; rank 0 makes the unique id) keeps every rank
// out of NCCL's init when one rank cannot use NCCL, and "nccl: init" (ncclCommInitRankConfig, non-blocking, polled
// with ncclCommGetAsyncError for at most options::timeout_ns, then ncclCommAbort) makes a rank that fails or never
// joins fail every rank with the same transport_error, within the timeout, instead of leaving its peers inside
// NCCL's init. (NCCL before 2.14 has no non-blocking init: ncclCommInitRank then waits as long as NCCL does.)
// Failure: a call NCCL rejects returns the library's status for NCCL's result (invalid_argument for an invalid
// argument or usage, timeout when a non-blocking enqueue did not finish within the timeout, internal otherwise)
// with NCCL's message, poisons this object (every later call returns status::poisoned: fail-stop, no switch of
// transport, hazards H12/H15) and is counted (failures()); the destructor then aborts the NCCL communicator instead
// of destroying it. check_health() reads ncclCommGetAsyncError without synchronising.
// Limits (NCCL's, not hidden; capabilities() says so, docs/api.md §1.2): the waits inside NCCL's kernels are NCCL's
// (no library timeout), an output is never filled with NaN, failures() counts only the calls this object refused
// or NCCL rejected when they were enqueued (not a failure inside NCCL's kernels), and a rank that refuses a call
// locally cannot tell its peers to abort, as the library's own protocol does: those peers wait inside NCCL. So this
// object forwards every call to NCCL and leaves argument checks to NCCL; the caller must issue the same calls on
// every rank.
//
// Not in kernels: NCCL's API is a host call that enqueues NCCL's own kernels; it cannot be fused into a user
// kernel. `handle_type` exists only to say so at compile time (gpu::communicator, device::context, block
// collectives over transport::nccl stop with a static_assert naming the host calls to use instead).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "../bootstrap/concepts.hpp"
#include "../bootstrap/vote.hpp"
#include "../core/capabilities.hpp"
#include "../core/clock.hpp"
#include "../core/error.hpp"
#include "../core/options.hpp"
#include "../core/status.hpp"
#include "../host/communicator.hpp"  // host::health
#include "nccl/api.hpp"

namespace rocenante::transport {

namespace nccl_detail {
template <class T>
inline constexpr bool always_false = false;

/// What `transport::nccl::handle_type` names. Instantiating it (every in-kernel use does) stops the build here.
template <class Transport>
struct no_device_handle {
  static_assert(always_false<Transport>,
                "transport::nccl cannot be used in kernels: NCCL's host API (ncclAllReduce / ncclAllGather enqueued "
                "on a stream) cannot be fused into a user kernel, so it has no device handle for gpu::communicator, "
                "device::context or device::block_all_reduce. Call transport::nccl::all_reduce(in, out, count, stream) "
                "or all_gather from the host instead");
};

template <class T>
constexpr int data_type() {
  if constexpr (std::is_same_v<T, float>) return nccl_api::float32;
  else if constexpr (std::is_same_v<T, __half>) return nccl_api::float16;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return nccl_api::bfloat16;
  else static_assert(always_false<T>, "transport::nccl supports float, __half and __nv_bfloat16");
}

/// What the library vote carries: rank 0's unique id (others: zero).
struct id_card {
  nccl_api::unique_id id;
};
static_assert(std::is_trivially_copyable_v<id_card>);

/// The library's status for a result NCCL returned (ncclInvalidArgument, ncclInvalidUsage: the call's arguments or
/// use; anything else: internal).
inline status to_status(nccl_api::result_t r) {
  if (r == nccl_api::success || r == nccl_api::in_progress) return status::ok;
  return r == 4 || r == 5 ? status::invalid_argument : status::internal;
}
}  // namespace nccl_detail

class nccl {
 public:
  static constexpr const char* name = "nccl";
  /// There is none: see the file comment. Naming the type is allowed; using it stops the build with the reason.
  using handle_type = nccl_detail::no_device_handle<nccl>;

  /// Collective: every rank calls, with its device current and the same options (options::timeout_ns bounds NCCL's
  /// init and each non-blocking enqueue; 0: no bound). Throws transport_error on every rank when any rank cannot load
  /// libnccl, or NCCL's init fails or does not finish within the timeout on any rank (the message names the ranks and
  /// NCCL's reason).
  template <bootstrap::bootstrap B>
  explicit nccl(B& boot, const options& opts = {}) : nccl(bootstrap::bootstrap_ref(boot), nccl_api::instance(), opts) {}

  /// As above, with an explicit library (tests load a missing path with nccl_api::load).
  nccl(bootstrap::bootstrap_ref boot, const nccl_api::library& lib, const options& opts = {})
      : lib_(&lib), rank_(boot.rank()), size_(boot.size()), timeout_ns_(opts.timeout_ns) {
    nccl_detail::id_card mine{};
    const std::vector<nccl_detail::id_card> all = setup::vote(boot, "nccl: library", mine, [&] {
      if (!lib.ok) throw transport_error(lib.why);
      if (rank_ != 0) return;
      const nccl_api::result_t r = lib.get_unique_id(&mine.id);
      if (r != nccl_api::success) throw transport_error("NCCL unavailable: ncclGetUniqueId failed: " + lib.describe(r));
    });
    try {
      setup::vote(boot, "nccl: init", [&] { init(all[0].id); });
    } catch (...) {
      // Some rank failed: a rank whose own init finished leaves NCCL without waiting for the others.
      if (comm_ != nullptr) lib.comm_abort(comm_);
      comm_ = nullptr;
      throw;
    }
  }

  nccl(const nccl&) = delete;
  nccl& operator=(const nccl&) = delete;
  /// Destroys the NCCL communicator (aborts it after a failure, which returns without waiting for peers).
  ~nccl() {
    if (comm_ == nullptr) return;
    if (poisoned_.load(std::memory_order_acquire)) lib_->comm_abort(comm_);
    else lib_->comm_destroy(comm_);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  const nccl_api::library& library() const { return *lib_; }
  /// The NCCL communicator, for callers who want NCCL calls of their own on it.
  nccl_api::comm_t comm() const { return comm_; }

  /// out[i] = sum over ranks of in[i], on `stream`. `in == out` allowed (NCCL's in-place). Every rank, same order.
  template <class T>
  status all_reduce(const T* in, T* out, std::size_t count, cudaStream_t stream) {
    if (poisoned_.load(std::memory_order_acquire)) return refuse(status::poisoned, first_error_);
    return check(lib_->all_reduce(in, out, count, nccl_detail::data_type<T>(), nccl_api::sum, comm_, stream),
                 "ncclAllReduce");
  }
  /// out[q*count + i] = in_q[i] for every rank q (out holds size()*count elements), on `stream`.
  template <class T>
  status all_gather(const T* in, T* out, std::size_t count, cudaStream_t stream) {
    if (poisoned_.load(std::memory_order_acquire)) return refuse(status::poisoned, first_error_);
    return check(lib_->all_gather(in, out, count, nccl_detail::data_type<T>(), comm_, stream), "ncclAllGather");
  }

  /// Refuses this call for a reason the caller found (a binding's checks). NCCL has no message that aborts a peer's
  /// call: this rank stops here (poisoned: every later call refused, the destructor aborts; counted in failures())
  /// and its peers wait inside NCCL. The caller must issue the same calls on every rank (Limits, above).
  status reject(const std::string& why, cudaStream_t) {
    const std::string w = "rank " + std::to_string(rank_) + ": " + why +
                          "; over the nccl transport the peers cannot be told (they wait inside NCCL) and this "
                          "communicator refuses every later call";
    if (!poisoned_.load(std::memory_order_relaxed)) {
      first_error_ = w;
      poisoned_.store(true, std::memory_order_release);
    }
    return refuse(status::invalid_argument, w);
  }

  /// Waits for nothing: NCCL's asynchronous error (ncclCommGetAsyncError), or this object's first failure.
  host::health check_health() const {
    host::health h;
    if (poisoned_.load(std::memory_order_acquire)) {
      h.state = status::poisoned;
      h.message = first_error_;
      return h;
    }
    nccl_api::result_t async = nccl_api::success;
    const nccl_api::result_t r = lib_->comm_get_async_error(comm_, &async);
    if (r != nccl_api::success || (async != nccl_api::success && async != nccl_api::in_progress)) {
      h.state = status::internal;
      h.message = "rank " + std::to_string(rank_) + ": NCCL reports " + lib_->describe(r != nccl_api::success ? r : async, comm_);
    }
    return h;
  }
  const std::string& last_error() const { return last_error_; }

  /// Calls of this rank that this object refused (poisoned, reject()) or that NCCL rejected when enqueued. A
  /// failure inside NCCL's kernels is not counted (capabilities().counts_failures is false).
  std::uint64_t failures() const { return failures_.load(std::memory_order_relaxed); }

  /// What NCCL gives of the library's guarantees: none (the Limits above).
  static constexpr rocenante::capabilities capabilities() { return {}; }

 private:
  /// NCCL's init of this rank from rank 0's id, bounded by the timeout (non-blocking where NCCL has it).
  void init(const nccl_api::unique_id& id) {
    if (lib_->comm_init_rank_config == nullptr) {
      const nccl_api::result_t r = lib_->comm_init_rank(&comm_, size_, id, rank_);
      if (r != nccl_api::success) {
        comm_ = nullptr;
        throw transport_error("ncclCommInitRank failed: " + lib_->describe(r));
      }
      return;
    }
    nccl_api::config_v21400 cfg;
    cfg.blocking = 0;
    nccl_api::result_t r = lib_->comm_init_rank_config(&comm_, size_, id, rank_, &cfg);
    if (r == nccl_api::in_progress && comm_ != nullptr) r = wait_async();
    if (r == nccl_api::success) return;
    const std::string why = r == nccl_api::in_progress
                                ? "ncclCommInitRankConfig did not finish within " + std::to_string(timeout_ns_ / 1'000'000) +
                                      " ms (options::timeout_ns): a peer never joined or cannot be reached; NCCL's init "
                                      "was aborted"
                                : "ncclCommInitRankConfig failed: " + lib_->describe(r, comm_);
    if (comm_ != nullptr) lib_->comm_abort(comm_);
    comm_ = nullptr;
    throw transport_error(why);
  }

  /// NCCL's state of a non-blocking communicator once it leaves ncclInProgress, or in_progress when the timeout ran
  /// out first. Polls ncclCommGetAsyncError: yields at first (an enqueue finishes within microseconds), then sleeps.
  nccl_api::result_t wait_async() const {
    const std::uint64_t start = detail::now_ns();
    for (std::uint64_t polls = 0;; ++polls) {
      nccl_api::result_t state = nccl_api::in_progress;
      const nccl_api::result_t r = lib_->comm_get_async_error(comm_, &state);
      if (r != nccl_api::success) return r;
      if (state != nccl_api::in_progress) return state;
      if (timeout_ns_ != 0 && detail::now_ns() - start >= timeout_ns_) return nccl_api::in_progress;
      if (polls < 1024) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  status check(nccl_api::result_t r, const char* call) {
    if (r == nccl_api::in_progress) r = wait_async();
    if (r == nccl_api::success) return status::ok;
    const bool late = r == nccl_api::in_progress;
    const std::string why = "rank " + std::to_string(rank_) + ": " + call +
                            (late ? " was not enqueued within " + std::to_string(timeout_ns_ / 1'000'000) +
                                        " ms (options::timeout_ns)"
                                  : " failed: " + lib_->describe(r, comm_)) +
                            "; the NCCL transport is poisoned (fail-stop: no transport switch mid-run)";
    // One thread issues a rank's calls (as on every communicator), so the first failure is recorded before the
    // release that check_health's acquire pairs with.
    if (!poisoned_.load(std::memory_order_relaxed)) {
      first_error_ = why;
      poisoned_.store(true, std::memory_order_release);
    }
    return refuse(late ? status::timeout : nccl_detail::to_status(r), why);
  }
  /// Every call that returns anything but ok ends here: it is counted.
  status refuse(status s, const std::string& why) {
    failures_.fetch_add(1, std::memory_order_relaxed);
    last_error_ = "rocenante " + why;
    return s;
  }

  const nccl_api::library* lib_;
  int rank_, size_;
  std::uint64_t timeout_ns_;
  nccl_api::comm_t comm_ = nullptr;
  std::atomic<bool> poisoned_{false};
  std::atomic<std::uint64_t> failures_{0};
  std::string first_error_, last_error_;
};

}  // namespace rocenante::transport

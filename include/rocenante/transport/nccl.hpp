// transport/nccl.hpp — all-reduce and all-gather through NCCL, as a whole-collective transport: the fallback the
// ranks choose together when RDMA is unusable (host/select.hpp, design.md §1.3 option (a)). Same host API shape as
// gpu::communicator: all_reduce(in, out, count, stream) -> status, all_gather(in, out, count, stream) -> status,
// check_health(), last_error().
//
// Who calls: one host thread per rank, each with its GPU current (cudaSetDevice); set-up is collective through the
// bootstrap. NCCL puts at most one rank on a GPU. Launch path: enqueues on the caller's stream, never throws,
// allocates nothing of its own; as capture-safe as NCCL is (NCCL supports CUDA graph capture).
// Set-up: libnccl is loaded lazily (transport/nccl/api.hpp), so a binary starts without NCCL; every rank votes on
// "library loaded" before rank 0 makes the unique id and again after ncclCommInitRank, so a rank that cannot use
// NCCL makes every rank throw transport_error ("NCCL unavailable on rank q: ...") instead of leaving its peers
// inside ncclCommInitRank. (A rank that dies *inside* ncclCommInitRank is NCCL's to detect.)
// Failure: a call NCCL rejects returns status::internal with NCCL's message, poisons this object (every later call
// returns status::poisoned: fail-stop, no switch of transport, hazards H12/H15), and the destructor then aborts the
// NCCL communicator instead of destroying it. check_health() reads ncclCommGetAsyncError without synchronising.
// Limits (NCCL's, not hidden): a rank that refuses a call locally cannot tell its peers to abort, as the library's
// own protocol does: those peers wait inside NCCL. So this object forwards every call to NCCL and leaves argument
// checks to NCCL; the caller must issue the same calls on every rank.
//
// Not in kernels: NCCL's API is a host call that enqueues NCCL's own kernels; it cannot be fused into a user
// kernel. `handle_type` exists only to say so at compile time (gpu::communicator, device::context, block
// collectives over transport::nccl stop with a static_assert naming the host calls to use instead).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "../bootstrap/concepts.hpp"
#include "../core/error.hpp"
#include "../core/options.hpp"
#include "../core/status.hpp"
#include "../host/communicator.hpp"  // host::health
#include "card.hpp"
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

/// One rank's outcome of a set-up step, exchanged so that every rank fails together.
struct step_card {
  std::int32_t rank;
  std::uint32_t ok;
  nccl_api::unique_id id;  ///< rank 0's unique id (others: zero)
  char why[376];
};
static_assert(std::is_trivially_copyable_v<step_card>);
}  // namespace nccl_detail

class nccl {
 public:
  static constexpr const char* name = "nccl";
  /// There is none: see the file comment. Naming the type is allowed; using it stops the build with the reason.
  using handle_type = nccl_detail::no_device_handle<nccl>;

  /// Collective: every rank calls, with its device current. Throws transport_error on every rank when any rank
  /// cannot load libnccl or ncclCommInitRank fails on any rank (the message names the rank and NCCL's reason).
  template <bootstrap::bootstrap B>
  explicit nccl(B& boot) : nccl(bootstrap::bootstrap_ref(boot), nccl_api::instance()) {}

  /// As above, with an explicit library (tests load a missing path with nccl_api::load).
  nccl(bootstrap::bootstrap_ref boot, const nccl_api::library& lib) : lib_(&lib), rank_(boot.rank()), size_(boot.size()) {
    // 1. Library on every rank, and rank 0's unique id, in one exchange.
    nccl_detail::step_card mine{};
    mine.rank = rank_;
    mine.ok = lib.ok ? 1 : 0;
    std::string why = lib.why;
    if (lib.ok && rank_ == 0) {
      const nccl_api::result_t r = lib.get_unique_id(&mine.id);
      if (r != nccl_api::success) {
        mine.ok = 0;
        why = "NCCL unavailable: ncclGetUniqueId failed: " + lib.describe(r);
      }
    }
    copy_text(mine.why, sizeof mine.why, why);
    std::vector<nccl_detail::step_card> all(static_cast<std::size_t>(size_));
    boot.all_gather(&mine, all.data(), sizeof mine);
    fail_if_any(all, "before ncclCommInitRank");

    // 2. Every rank initialises its NCCL communicator from rank 0's id, then votes again.
    std::memset(&mine, 0, sizeof mine);
    mine.rank = rank_;
    mine.ok = 1;
    const nccl_api::result_t r = lib.comm_init_rank(&comm_, size_, all[0].id, rank_);
    if (r != nccl_api::success) {
      mine.ok = 0;
      copy_text(mine.why, sizeof mine.why, "ncclCommInitRank failed: " + lib.describe(r));
      comm_ = nullptr;
    }
    boot.all_gather(&mine, all.data(), sizeof mine);
    try {
      fail_if_any(all, "in ncclCommInitRank");
    } catch (...) {
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
  /// call: this rank stops here (poisoned: every later call refused, the destructor aborts) and its peers wait inside
  /// NCCL. The caller must issue the same calls on every rank (Limits, above).
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

 private:
  void fail_if_any(const std::vector<nccl_detail::step_card>& all, const char* when) const {
    for (int q = 0; q < size_; ++q)
      if (all[q].ok == 0)
        throw transport_error("NCCL unavailable on rank " + std::to_string(q) + " (" + when + ", seen by rank " +
                              std::to_string(rank_) + "): " + std::string(all[q].why, strnlen(all[q].why, sizeof all[q].why)));
  }

  status check(nccl_api::result_t r, const char* call) {
    if (r == nccl_api::success || r == nccl_api::in_progress) return status::ok;
    const std::string why = "rank " + std::to_string(rank_) + ": " + call + " failed: " + lib_->describe(r, comm_) +
                            "; the NCCL transport is poisoned (fail-stop: no transport switch mid-run)";
    // One thread issues a rank's calls (as on every communicator), so the first failure is recorded before the
    // release that check_health's acquire pairs with.
    if (!poisoned_.load(std::memory_order_relaxed)) {
      first_error_ = why;
      poisoned_.store(true, std::memory_order_release);
    }
    return refuse(status::internal, why);
  }
  status refuse(status s, const std::string& why) {
    last_error_ = "rocenante " + why;
    return s;
  }

  const nccl_api::library* lib_;
  int rank_, size_;
  nccl_api::comm_t comm_ = nullptr;
  std::atomic<bool> poisoned_{false};
  std::string first_error_, last_error_;
};

}  // namespace rocenante::transport

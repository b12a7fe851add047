// gpu/lifetime.hpp — why a kernel captured in a CUDA graph cannot run against a destroyed or rebuilt communicator.
//
// A captured collective holds raw pointers: the rank's state and mirror, and the windows (its handle). Replayed
// after its communicator was destroyed, it would read freed memory; after a rebuild the allocator may return the
// same addresses, and the stale graph would run silently against the new communicator's state. Two measures:
//
//   1. The state and the mirror outlive every graph that captured a kernel of the communicator: they are held by a
//      CUDA user object (cudaUserObjectCreate), and every launch into a capturing stream gives the graph being
//      captured a reference (cudaStreamGetCaptureInfo, cudaGraphRetainUserObject). An executable graph
//      instantiated from it keeps references of its own. So a new communicator can never be given the same state
//      address while such a graph exists.
//   2. The destructor retires the state (retire(): poisoned, part 0's first failure already taken). A kernel
//      replayed from such a graph returns at entry, before it reads a window or waits for a peer — session::enter()
//      reads only the state — fills its output with the poison value and counts the call in the kept state and
//      mirror (protocol::count_failed_call), exactly as a call on a poisoned communicator does. The windows need
//      not outlive the graph: a retired kernel never reaches them.
//
// CUDA runs a user object's destructor on an internal thread that must not call CUDA, so that destructor only
// hands the memory to a list (deferred_frees) that the next GPU communicator's set-up or teardown in the process
// frees. A communicator none of whose kernels was captured frees its memory at once.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

#include "../core/cuda_check.hpp"
#include "../protocol/state.hpp"

namespace rocenante::gpu::lifetime {

/// What a destroyed communicator leaves for a kernel that still runs it: the state poisoned, with part 0's
/// first unfinished call already taken (so every later call is counted), and a record naming this rank. The record
/// is never reported (no communicator is left to ask); the poison word and part0_failed are what kernels read.
inline void retire(protocol::rank_state& s, int rank) {
  s.failure = protocol::failure_record{};
  s.failure.kind = static_cast<std::uint32_t>(protocol::failure_kind::rejected);
  s.failure.peer = rank;
  s.failure.reporter = rank;
  s.part0_failed = 1;
  s.poison = protocol::poisoned;
}

/// A communicator's state in device memory and its mirror in mapped pinned host memory.
struct state_memory {
  protocol::rank_state* state = nullptr;
  protocol::rank_state* mirror = nullptr;
};

/// Memory whose last owner went away on a thread that may not call CUDA; drained on a thread that may.
class deferred_frees {
 public:
  void add(const state_memory& m) {
    std::lock_guard lock(mu_);
    pending_.push_back(m);
  }
  /// Calls free(m) for every entry added so far, outside the lock.
  template <class Free>
  void drain(Free&& free) {
    std::vector<state_memory> now;
    {
      std::lock_guard lock(mu_);
      now.swap(pending_);
    }
    for (const state_memory& m : now) free(m);
  }
  std::size_t pending() const {
    std::lock_guard lock(mu_);
    return pending_.size();
  }

 private:
  mutable std::mutex mu_;
  std::vector<state_memory> pending_;
};

/// The process's list (one for every GPU communicator).
inline deferred_frees& graveyard() {
  static deferred_frees g;
  return g;
}

/// Frees what the list holds (a host thread: CUDA calls allowed; errors ignored, teardown must return).
inline void free_deferred() {
  graveyard().drain([](const state_memory& m) {
    if (m.state) (void)cudaFree(m.state);
    if (m.mirror) (void)cudaFreeHost(m.mirror);
  });
}

/// Owns one communicator's state and mirror and the user object that lends them to graphs (the file comment).
class kept_state {
 public:
  kept_state() = default;
  kept_state(const kept_state&) = delete;
  kept_state& operator=(const kept_state&) = delete;

  /// Allocates the state (set to `init`) and its mirror for rank `rank`. Throws cuda_error; what was allocated is
  /// freed by the destructor.
  void create(const protocol::rank_state& init, int rank) {
    free_deferred();
    rank_ = rank;
    ROCENANTE_CUDA_CHECK(cudaMalloc(&mem_.state, sizeof(protocol::rank_state)));
    ROCENANTE_CUDA_CHECK(cudaMemcpy(mem_.state, &init, sizeof init, cudaMemcpyHostToDevice));
    ROCENANTE_CUDA_CHECK(cudaHostAlloc(&mem_.mirror, sizeof(protocol::rank_state), cudaHostAllocMapped));
    *mem_.mirror = init;
    ROCENANTE_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&mirror_dev_), mem_.mirror, 0));
    lent_ = new lent{mem_, false};
    const cudaError_t e = cudaUserObjectCreate(&object_, lent_, &give_back, 1, cudaUserObjectNoDestructorSync);
    if (e != cudaSuccess) {
      delete lent_;
      lent_ = nullptr;
      object_ = nullptr;
      ROCENANTE_CUDA_CHECK(e);
    }
  }

  /// Retires the state (kernels still holding it refuse at entry), then frees it at once when no graph captured a
  /// kernel of it, else leaves it to the graphs' references (freed by a later free_deferred()).
  ~kept_state() {
    if (mem_.state == nullptr && mem_.mirror == nullptr) return;
    if (mem_.state) {
      protocol::rank_state r{};
      retire(r, rank_);
      (void)cudaMemcpy(&mem_.state->failure, &r.failure, sizeof r.failure, cudaMemcpyHostToDevice);
      (void)cudaMemcpy(&mem_.state->part0_failed, &r.part0_failed, sizeof r.part0_failed, cudaMemcpyHostToDevice);
      (void)cudaMemcpy(&mem_.state->poison, &r.poison, sizeof r.poison, cudaMemcpyHostToDevice);
    }
    if (mem_.mirror) {
      protocol::rank_state r{};
      retire(r, rank_);
      mem_.mirror->failure = r.failure;
      rocenante::detail::store_release(&mem_.mirror->poison, protocol::poisoned);
    }
    const bool shared = captured_;
    if (object_ != nullptr) {
      if (!shared) lent_->owner_frees = true;  // read by give_back, which then only deletes `lent_`
      (void)cudaUserObjectRelease(object_, 1);
    }
    if (!shared) {
      if (mem_.state) (void)cudaFree(mem_.state);
      if (mem_.mirror) (void)cudaFreeHost(mem_.mirror);
    }
    (void)cudaGetLastError();
    free_deferred();
  }

  protocol::rank_state* state() const { return mem_.state; }
  protocol::rank_state* mirror_host() const { return mem_.mirror; }
  protocol::rank_state* mirror_device() const { return mirror_dev_; }

  /// When `stream` is capturing, the graph being captured takes a reference to this state: call before a launch
  /// that reads it. Never throws; a failed query leaves the graph without one (CUDA's own launch then reports the
  /// stream's error).
  void hold_in_capture(cudaStream_t stream) noexcept {
    if (object_ == nullptr) return;
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    cudaGraph_t graph = nullptr;
    if (cudaStreamGetCaptureInfo(stream, &st, &id, &graph) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    if (st != cudaStreamCaptureStatusActive || graph == nullptr) return;
    if (captured_ && id == capture_id_) return;  // this capture holds one already
    if (cudaGraphRetainUserObject(graph, object_, 1, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    captured_ = true;
    capture_id_ = id;
  }

  /// Whether a graph took a reference (the memory then outlives this object).
  bool captured() const { return captured_; }

 private:
  /// What the user object owns: the memory, and whether the owner freed it itself.
  struct lent {
    state_memory mem;
    bool owner_frees;
  };
  /// The user object's destructor (CUDA's internal thread: no CUDA calls).
  static void CUDART_CB give_back(void* p) {
    auto* l = static_cast<lent*>(p);
    if (!l->owner_frees) graveyard().add(l->mem);
    delete l;
  }

  state_memory mem_;
  protocol::rank_state* mirror_dev_ = nullptr;
  cudaUserObject_t object_ = nullptr;
  lent* lent_ = nullptr;
  int rank_ = 0;
  bool captured_ = false;
  unsigned long long capture_id_ = 0;
};

}  // namespace rocenante::gpu::lifetime

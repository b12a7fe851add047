// core/atomic.hpp — the few atomic operations the protocol needs, on host and device, at a chosen scope.
// libcu++'s cuda::atomic_ref compiles for both sides. Flags that a peer on the same GPU writes need device
// scope; flags written by another GPU, a CPU proxy or a NIC need system scope, whose fences cost far more on a
// GPU. A transport handle says which one its flags need (memory_scope), as a run-time value so that one kernel
// serves both (the branch is uniform and free next to the fence it saves).
#pragma once

#include <cstdint>
#include <cuda/atomic>

#include "../config.hpp"

namespace rocenante {

enum class memory_scope : std::uint8_t { device = 0, system = 1 };

namespace detail {

template <class T, cuda::thread_scope S = cuda::thread_scope_system>
using atomic_ref_t = cuda::atomic_ref<T, S>;

/// Acquire load: memory operations after it are ordered after the store that produced the value.
template <class T, cuda::thread_scope S = cuda::thread_scope_system>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE T load_acquire(T* p) {
  return atomic_ref_t<T, S>(*p).load(cuda::std::memory_order_acquire);
}

template <class T, cuda::thread_scope S = cuda::thread_scope_system>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE T load_relaxed(T* p) {
  return atomic_ref_t<T, S>(*p).load(cuda::std::memory_order_relaxed);
}

/// Release store: every memory operation before it (by this thread, and by threads ordered before it through
/// a team barrier) is visible to whoever observes the value with an acquire load of the same scope.
template <class T, cuda::thread_scope S = cuda::thread_scope_system>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void store_release(T* p, T v) {
  atomic_ref_t<T, S>(*p).store(v, cuda::std::memory_order_release);
}

template <class T, cuda::thread_scope S = cuda::thread_scope_system>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void store_relaxed(T* p, T v) {
  atomic_ref_t<T, S>(*p).store(v, cuda::std::memory_order_relaxed);
}

template <class T, cuda::thread_scope S = cuda::thread_scope_system>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE T fetch_add_acq_rel(T* p, T v) {
  return atomic_ref_t<T, S>(*p).fetch_add(v, cuda::std::memory_order_acq_rel);
}

/// Strong compare-and-swap; returns true when `*p` held `expected` and now holds `desired`.
template <class T, cuda::thread_scope S = cuda::thread_scope_system>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE bool compare_exchange(T* p, T expected, T desired) {
  return atomic_ref_t<T, S>(*p).compare_exchange_strong(expected, desired, cuda::std::memory_order_acq_rel,
                                                        cuda::std::memory_order_acquire);
}

/// Scope chosen at run time (see the file comment).
template <class T>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE T load_acquire(T* p, memory_scope s) {
  return s == memory_scope::device ? load_acquire<T, cuda::thread_scope_device>(p) : load_acquire<T>(p);
}
template <class T>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void store_release(T* p, T v, memory_scope s) {
  if (s == memory_scope::device)
    store_release<T, cuda::thread_scope_device>(p, v);
  else
    store_release<T>(p, v);
}

}  // namespace detail
}  // namespace rocenante

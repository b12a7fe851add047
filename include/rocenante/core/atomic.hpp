// core/atomic.hpp — the few atomic operations the protocol needs, at system scope, on host and device.
// libcu++'s cuda::atomic_ref compiles for both sides; system scope is required because peers (other
// threads, other GPUs, a CPU proxy, a NIC) write the words that a rank waits on.
#pragma once

#include <cstdint>
#include <cuda/atomic>

#include "../config.hpp"

namespace rocenante::detail {

template <class T>
using sys_atomic_ref = cuda::atomic_ref<T, cuda::thread_scope_system>;

/// Acquire load: memory operations after it are ordered after the store that produced the value.
template <class T>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE T load_acquire(T* p) {
  return sys_atomic_ref<T>(*p).load(cuda::std::memory_order_acquire);
}

template <class T>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE T load_relaxed(T* p) {
  return sys_atomic_ref<T>(*p).load(cuda::std::memory_order_relaxed);
}

/// Release store: every memory operation before it (by this thread, and by threads ordered before it through
/// a team barrier) is visible to whoever observes the value with an acquire load.
template <class T>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void store_release(T* p, T v) {
  sys_atomic_ref<T>(*p).store(v, cuda::std::memory_order_release);
}

template <class T>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void store_relaxed(T* p, T v) {
  sys_atomic_ref<T>(*p).store(v, cuda::std::memory_order_relaxed);
}

template <class T>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE T fetch_add_acq_rel(T* p, T v) {
  return sys_atomic_ref<T>(*p).fetch_add(v, cuda::std::memory_order_acq_rel);
}

/// Strong compare-and-swap; returns true when `*p` held `expected` and now holds `desired`.
template <class T>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE bool compare_exchange(T* p, T expected, T desired) {
  return sys_atomic_ref<T>(*p).compare_exchange_strong(expected, desired, cuda::std::memory_order_acq_rel,
                                                       cuda::std::memory_order_acquire);
}

}  // namespace rocenante::detail

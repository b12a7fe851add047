// core/clock.hpp — a nanosecond clock and a polite pause for wait loops, on host and device.
// Device: %globaltimer (nanoseconds, coarse ticks of ~1 us on some parts, but monotonic and global).
// Host: std::chrono::steady_clock.
#pragma once

#include <cstdint>

#include "../config.hpp"

#if !ROCENANTE_DEVICE_PASS
#include <chrono>
#include <thread>
#endif

namespace rocenante::detail {

ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE std::uint64_t now_ns() {
#if ROCENANTE_DEVICE_PASS
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#else
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
#endif
}

/// Called between polls of a flag. `polls` counts the polls of this wait so far.
/// Host: spin briefly, then yield — ranks run as threads and may outnumber cores (8 ranks on a 2-core CI
/// machine), so a spinning waiter must give its core to the rank it waits for.
/// Device: spin for the first 2048 polls (a flag usually arrives within a few microseconds, and a sleep on the
/// critical path costs more than the poll), then back off with __nanosleep so that a long wait leaves issue
/// slots and memory bandwidth to co-resident CTAs.
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void relax(std::uint64_t polls) {
#if ROCENANTE_DEVICE_PASS
#if __CUDA_ARCH__ >= 700
  if (polls > 2048) __nanosleep(polls > 16384 ? 1000 : 100);
#endif
#else
  if (polls > 64) std::this_thread::yield();
#endif
}

}  // namespace rocenante::detail

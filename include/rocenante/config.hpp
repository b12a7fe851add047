// config.hpp — compile-time configuration shared by host and device code: the
// host/device annotation macros, the library version and hard limits.
// Comments across the headers cite hazards as Hn: the numbered list in docs/design.md §9.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ROCENANTE_HOST_DEVICE __host__ __device__
#define ROCENANTE_DEVICE __device__
#define ROCENANTE_FORCEINLINE __forceinline__
#else
#define ROCENANTE_HOST_DEVICE
#define ROCENANTE_DEVICE
#define ROCENANTE_FORCEINLINE inline
#endif

#if defined(__CUDA_ARCH__)
#define ROCENANTE_UNROLL _Pragma("unroll")
#else
#define ROCENANTE_UNROLL
#endif

#if defined(__CUDA_ARCH__)
#define ROCENANTE_DEVICE_PASS 1
#else
#define ROCENANTE_DEVICE_PASS 0
#endif

/// Tuning values are constants next to the code they tune, each citing its receipt; none is a macro, which could
/// differ between translation units of one program. ROCENANTE_TRACE_PHASES is a measurement build, not a knob: only
/// benchmarks/gpu/trace_phases.cu (one translation unit) defines it, before its first include; it adds timestamp
/// stores and their arrays to the rank's local state (protocol/state.hpp) and host-clock stamps to the loopback proxy
/// (transport/proxy.hpp, proxy_timeline), never to a window or the wire.

/// Code that runs only when something went wrong (recording a failure) or for unusual inputs (a misaligned pointer,
/// a partial last packet) is a called function in GPU code, so that the hot path spans fewer instruction-cache
/// lines with fewer jumps over cold code (measured against everything inlined: docs/performance.md).
#if defined(__CUDACC__)
#define ROCENANTE_COLD inline __noinline__
#else
#define ROCENANTE_COLD inline
#endif

namespace rocenante::detail {
/// `v` behind an empty asm that "changes" it: the compiler's front end (NVVM) then computes it where this call stands
/// and cannot sink or recompute it past this point (ptxas, which sees no instruction there, still may). It keeps
/// the decode-size all-reduce's source addresses and every session's call signature out of the paths between a
/// barrier and the load or release after it (design.md §1.4; 0.04 us at 4 ranks:
/// docs/results/h200-2026-12-05/s11-0c4216e).
template <class T>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE T held(T v) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "held() keeps 32- or 64-bit values (offsets, pointers, words)");
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 8)
    asm volatile("" : "+l"(v));
  else
    asm volatile("" : "+r"(v));
#endif
  return v;
}
}  // namespace rocenante::detail

#define ROCENANTE_VERSION_MAJOR 0
#define ROCENANTE_VERSION_MINOR 1
#define ROCENANTE_VERSION_PATCH 0

namespace rocenante {

/// Library version packed as major*10000 + minor*100 + patch; published at set-up so that ranks built
/// from different versions refuse to talk to each other (hazard H8).
inline constexpr std::uint32_t version =
    ROCENANTE_VERSION_MAJOR * 10000u + ROCENANTE_VERSION_MINOR * 100u + ROCENANTE_VERSION_PATCH;

/// Largest number of ranks in one communicator. Device handles hold one pointer per rank, so this bounds
/// their size; 16 covers DGX Spark clusters and 8-GPU servers with room to spare.
inline constexpr int max_ranks = 16;

/// Every payload moves in 16-byte packets (one `uint4` / `float4` access on the GPU).
inline constexpr int packet_bytes = 16;

/// Two receive slots: collective `seq` uses slot `seq & 1`. See docs/design.md for why two suffice.
inline constexpr std::uint32_t slot_count = 2;

/// Largest input of one rank (bytes) that a one-shot all-reduce on a directly written window (loopback on GPUs)
/// sends as LL lines: each 16-byte line carries 8 payload bytes and the call's 32-bit flag twice, so the receiver
/// polls the data itself (no fence, no separate flag, no barrier between staging and signalling). Windows carry an
/// LL area of 2 x ranks x this (rounded) per slot. See algorithm/one_shot.hpp and docs/design.md.
inline constexpr std::uint64_t ll_max_bytes = 64 * 1024;

/// Most ranks for which the LL path is used: faster than packets + flag at 2 ranks, slower at 4 and 8 (bf16, H200:
/// docs/results/h200-2026-12-04/ll-1145a32; with the decode-size kernel, s7c-6003473). A constant, not an option:
/// it selects the protocol, so every rank of every build must agree on it.
inline constexpr int ll_max_ranks = 2;
static_assert(ll_max_ranks >= 0 && ll_max_ranks <= max_ranks, "ll_max_ranks must be in [0, max_ranks]");

/// Most ranks for which a window carries a Lamport area (options::lamport_max_bytes; algorithm/one_shot.hpp,
/// "Lamport path"): its poll keeps one packet per source in registers, one group of at most 8.
inline constexpr int lamport_max_ranks = 8;
static_assert(lamport_max_ranks >= 2 && lamport_max_ranks <= 8, "the Lamport poll keeps at most 8 sources in registers");

/// Largest options::max_parts: the rank state keeps one sequence word per part (protocol/state.hpp).
inline constexpr std::uint32_t max_parts_limit = 4096;

}  // namespace rocenante

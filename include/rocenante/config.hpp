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

/// Compact kernels (1, the default): the code that runs only when something went wrong (recording a failure) or for
/// unusual inputs (a misaligned pointer, a partial last packet) is compiled as called functions in GPU code
/// (ROCENANTE_COLD), and the one-shot's per-peer store loop (one_shot::put_packet) is not unrolled, so that the hot
/// path spans fewer instruction-cache lines with fewer jumps over cold code. 0 inlines and unrolls them (the layout
/// before 2026-12-05, kept for side-by-side runs: docs/performance.md has both). One value per program, on the
/// compiler's command line.
#ifndef ROCENANTE_COMPACT_KERNELS
#define ROCENANTE_COMPACT_KERNELS 1
#endif
#if ROCENANTE_COMPACT_KERNELS && defined(__CUDACC__)
#define ROCENANTE_COLD inline __noinline__
#else
#define ROCENANTE_COLD inline
#endif

/// Whether the decode-size all-reduce (one_shot::all_reduce_small) loads a plain input (16-byte aligned, whole
/// packets) with one 16-byte load issued before enter()'s epoch and poison loads and not waited for until the
/// staging (1), or through load_user, whose branch made the fixed-rank kernels wait for the input before enter()'s
/// loads (0). The same bytes either way. 1 is the default: measured side by side on the H200 (run s11,
/// docs/results/h200-2026-12-05/s11-0c4216e), it took 0.04 us off 8 and 48 KiB at 4 ranks. One value per program.
#ifndef ROCENANTE_SMALL_EARLY_INPUT
#define ROCENANTE_SMALL_EARLY_INPUT 1
#endif

/// Whether detail::held() makes values opaque to the compiler (1, the default: measured side by side on the H200 with
/// early input, docs/results/h200-2026-12-05/s11-0c4216e) or returns them unchanged (0).
/// ptxas recomputes cheap values from a kernel's parameters where they are used, to save registers: in the
/// decode-size all-reduce that put the reduce's source addresses (27 instructions, a constant-bank load among them)
/// between the barrier after the wait and the first load, and the call signature's hash (11 dependent instructions)
/// between the staging barrier and the flag's release. The signature is held in every protocol::session, so 1
/// touches every collective kernel (one register), not only the decode-size one. One value per program.
#ifndef ROCENANTE_SMALL_HOLD_ADDRESSES
#define ROCENANTE_SMALL_HOLD_ADDRESSES 1
#endif

namespace rocenante::detail {
/// `v` behind an empty asm that "changes" it when ROCENANTE_SMALL_HOLD_ADDRESSES is 1, otherwise `v` itself. The
/// compiler's front end (NVVM) then computes it where this call stands and cannot sink or recompute it past this
/// point; ptxas, which sees no instruction there, may still rematerialize it. What it changed is read in the SASS
/// (design.md §1.4), what it saves on the H200 (docs/results/h200-2026-12-05/s11-0c4216e).
template <class T>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE T held(T v) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "held() keeps 32- or 64-bit values (offsets, pointers, words)");
#if ROCENANTE_SMALL_HOLD_ADDRESSES && defined(__CUDA_ARCH__)
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

/// Most ranks for which the LL path is used. Measured on one H200 (bf16, 48 KiB, graph replay; receipt
/// docs/results/h200-2026-12-04/ll-1145a32): LL vs packets + flag, programmatic launch off / on: 2 ranks 4.26 /
/// 3.55 us vs 4.43 / 3.83 us (faster); 4 ranks 5.31 / 4.66 us vs 5.05 / 4.15 us and 8 ranks 8.63 us vs 6.28 us
/// (slower: each thread polls 2(n-1) lines and the LL bytes double, against one flag per peer per CTA). With more
/// CTAs per rank (s5e-0f5442b, programmatic launch on) LL at 4 ranks: 48 KiB 4.46 us vs 4.24 us, 8 KiB 3.96 vs 4.15 us.
/// With the decode-size kernel and every poll's loads issued together (s7c-6003473): 4 ranks 4.39 vs 3.60 us at
/// 48 KiB, 4.09 vs 3.45 us at 8 KiB — still slower.
/// ROCENANTE_LL_MAX_RANKS overrides it for tuning experiments (tools/gpu/run.sh --variant), on the compiler's command
/// line (one value per program). It selects the protocol: ranks built with different values fail each call
/// that one takes on the LL path and the other not, with status::mismatch (protocol::ll_word_signature).
#ifndef ROCENANTE_LL_MAX_RANKS
#define ROCENANTE_LL_MAX_RANKS 2
#endif
static_assert(ROCENANTE_LL_MAX_RANKS >= 0 && ROCENANTE_LL_MAX_RANKS <= 16, "ROCENANTE_LL_MAX_RANKS must be in [0, max_ranks]");
inline constexpr int ll_max_ranks = ROCENANTE_LL_MAX_RANKS;

/// Largest options::max_parts: the rank state keeps one sequence word per part (protocol/state.hpp).
inline constexpr std::uint32_t max_parts_limit = 4096;

}  // namespace rocenante

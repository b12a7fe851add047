// floor.cuh — measuring sticks for the GPU benchmarks (not product code): what the structure of a graph-launched
// collective costs on this GPU, to set beside the library's kernels in the same run.
//
//   floor_empty            a kernel of the collective's grid and block that does nothing but the
//                          programmatic-launch entry
//   floor_one_shot_minimal the least one-shot all-reduce on directly written windows (bf16, one part per CTA):
//                          load input and the epoch | store into every peer's slot | barrier | release flag to each
//                          peer | acquire peers' flags | barrier | load every source, sum in fp32 in rank order |
//                          store | epoch + 1. No timeouts beyond a poll bound that reports a broken run, no
//                          poisoning, no call signature, no epilogue.
//
// Bloat (an experiment on instruction fetch): the minimal kernel with Bloat KiB of code that never runs between each
// two phases (a branch on a run-time value that is never true jumps over it), so that its hot path spans as many
// instruction-cache lines, with as many jumps over cold code, as the library's kernel does (its failure paths,
// unaligned-input paths and loop variants sit between its phases). If the rows with bloat are slower, instruction
// fetch is part of what the library pays above the floor, and moving cold code out of the hot path is worth it.
//
// Plus (the protocol's costs, priced one by one): the minimal kernel with one or more of the library's protocol
// features added the way protocol/session.hpp does them — plus_vote: the enter vote (thread 0 reads a poison word
// beside the epoch, the CTA votes on it with a barrier); plus_checked_poll: the bounded wait's poll loop (a word of
// this sequence with another value fails, every 16th poll reads the poison word and the clock, back-off after 2048
// polls); plus_finish_barrier: a CTA barrier after the epoch store. The poison word is `failed` (zero while healthy).
// plus_poll_backoff: 200 ns of __nanosleep between two polls of a flag — with Staged, whether the pollers' reads
// across the bus (3 per CTA, 16 CTAs per rank, each an 8-byte read of host memory in flight at all times) slow the
// traffic that matters: the staging and the reduce's reads.
//
// Staged (the proxy mode's bus traffic, priced with a proxy that costs nothing): windows and flags in pinned host
// memory mapped into the GPU (world(n, true)), as transport::cuda_loopback_proxy places them. Each rank stores its
// packets once, into source `rank` of its own window (its staging slot), releases a flag to each peer at system
// scope (where the library's last part publishes its descriptor to the CPU proxy), and every peer, polling at system
// scope, reads the packets where they were staged. Per rank S bytes cross the bus to the host and (n-1) x S back,
// as in proxy mode, where the proxy's copy between two host buffers adds nothing to the bus. With ranks sharing one
// GPU every rank's traffic shares that GPU's one link: n x (n-1) x S read per call, which bounds proxy mode on the
// GPU machine from below, whatever the proxy and the posting do. Not a stand-in for a DGX Spark, whose GPU reads
// host memory at memory speed.
//
// With a trace buffer, thread 0 of part 0 stamps %globaltimer at the points the library's phase tracer uses
// (protocol/session.hpp: 0 enter, 1 epoch read, 2 stored + barrier, 3 flags published, 4 peers seen + barrier,
// 5 reduced and stored, 6 epoch advanced), trace_slots collectives deep: benchmarks/gpu/trace_phases.cu prints them
// beside the library's phases.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstring>
#include <vector>

namespace floor_bench {

constexpr int max_ranks = 8;
constexpr unsigned max_parts = 64;
constexpr unsigned cap_packets = 4096;  // 64 KiB per source and slot
constexpr unsigned trace_slots = 64;

struct peers {
  uint4* win[max_ranks];                // [slot 2][source max_ranks][cap_packets]
  unsigned long long* flag[max_ranks];  // [slot 2][part max_parts][source max_ranks]
};

__device__ __forceinline__ void entry(bool pdl) {
  if (pdl) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
}

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void empty_kernel(bool pdl) { entry(pdl); }

/// KiB KiB of instructions (about 64 per KiB) that run only when `never` is true, which it never is; the result goes
/// to `sink` so that the compiler keeps them. Quadratic steps, which no closed form folds.
template <int KiB>
__device__ __forceinline__ void bloat(bool never, unsigned* sink, unsigned x) {
  if constexpr (KiB > 0) {
    if (never) {
#pragma unroll
      for (int k = 0; k < KiB * 32; ++k) x = x * (x | 1u) + static_cast<unsigned>(k);
      atomicAdd(sink, x);
    }
  }
}

enum plus : unsigned { plus_vote = 1, plus_checked_poll = 2, plus_finish_barrier = 4, plus_poll_backoff = 8 };

/// The flag's release and acquire: GPU scope between ranks on direct windows, system scope for Staged (the scope the
/// library's host-mapped words need: a CPU proxy reads and writes them).
template <bool Sys>
__device__ __forceinline__ void release_flag(unsigned long long* p, unsigned long long v) {
  if constexpr (Sys) asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  else asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
template <bool Sys>
__device__ __forceinline__ unsigned long long acquire_flag(const unsigned long long* p) {
  unsigned long long v;
  if constexpr (Sys) asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  else asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

/// trace: nullptr, or [trace_slots][7] stamps of this rank. Bloat, Plus, Staged: see the file comment.
template <int N, int Bloat = 0, unsigned Plus = 0, bool Staged = false>
__global__ void __launch_bounds__(512, 1)
    one_shot_minimal(peers ps, int rank, const uint4* in, uint4* out, unsigned* epoch, unsigned packets, bool pdl,
                     unsigned* failed, unsigned long long* trace) {
  entry(pdl);
  const unsigned part = blockIdx.x, per = (packets + gridDim.x - 1) / gridDim.x;
  const unsigned i = part * per + threadIdx.x;
  const bool mine = threadIdx.x < per && i < packets;
  const int t = static_cast<int>(threadIdx.x);
  const bool never = packets == 0xffffffffu;  // a run-time value: the compiler must keep the bloat's branches
  const bool stamps = trace != nullptr && part == 0 && t == 0;
  unsigned long long st[7];
  if (stamps) st[0] = now_ns();
  bloat<Bloat>(never, failed, i);
  uint4 v{};
  if (mine) v = in[i];
  unsigned seq;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(seq) : "l"(epoch + part) : "memory");
  if constexpr ((Plus & plus_vote) != 0) {
    unsigned p = 0;
    if (t == 0) asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(p) : "l"(failed) : "memory");
    if (!__syncthreads_and(p == 0)) return;
  }
  const unsigned slot = seq & 1u;
  const unsigned long long f = seq + 1ull;
  if (stamps) {  // after the epoch arrived: an instruction that reads it stalls the warp until then (in-order issue)
    unsigned z;
    asm volatile("and.b32 %0, %1, 0;" : "=r"(z) : "r"(seq));
    st[1] = now_ns() + z;
  }
  bloat<Bloat>(never, failed, seq);
  if (mine) {
    if constexpr (Staged) {
      ps.win[rank][(slot * max_ranks + rank) * cap_packets + i] = v;
    } else {
#pragma unroll
      for (int q = 0; q < N; ++q)
        if (q != rank) ps.win[q][(slot * max_ranks + rank) * cap_packets + i] = v;
    }
  }
  __syncthreads();
  if (stamps) st[2] = now_ns();
  bloat<Bloat>(never, failed, i + 1);
  if (t < N && t != rank) {
    release_flag<Staged>(ps.flag[t] + (slot * max_parts + part) * max_ranks + rank, f);
  }
  if (stamps) st[3] = now_ns();
  bloat<Bloat>(never, failed, i + 2);
  if (t < N && t != rank) {
    const unsigned long long* mine_flag = ps.flag[rank] + (slot * max_parts + part) * max_ranks + t;
    unsigned long long seen = 0;
    if constexpr ((Plus & plus_checked_poll) != 0) {
      const unsigned long long start = now_ns();
      for (unsigned long long polls = 0;;) {
        seen = acquire_flag<Staged>(mine_flag);
        if (seen == f) break;
        ++polls;
        if (static_cast<unsigned>(seen) == static_cast<unsigned>(f) && seen != 0) {  // this sequence, another word
          atomicAdd(failed, 1u);
          break;
        }
        if ((polls & 15u) == 0) {
          unsigned p;
          asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(p) : "l"(failed) : "memory");
          if (p != 0 || now_ns() - start > 10'000'000'000ull) {
            atomicAdd(failed, 1u);
            break;
          }
        }
        if (polls > 2048) __nanosleep(polls > 16384 ? 1000 : 100);
      }
    } else {
      for (unsigned polls = 0;; ++polls) {
        seen = acquire_flag<Staged>(mine_flag);
        if (seen == f) break;
        if (polls > (1u << 26)) {  // a bound, so that a broken run ends (and is reported) instead of hanging
          atomicAdd(failed, 1u);
          break;
        }
        if constexpr ((Plus & plus_poll_backoff) != 0) __nanosleep(200);
      }
    }
  }
  __syncthreads();
  if (stamps) st[4] = now_ns();
  bloat<Bloat>(never, failed, i + 3);
  if (mine) {
    uint4 w[N];
#pragma unroll
    for (int q = 0; q < N; ++q) w[q] = q == rank ? v : ps.win[Staged ? q : rank][(slot * max_ranks + q) * cap_packets + i];
    float acc[8] = {};
#pragma unroll
    for (int q = 0; q < N; ++q) {
      const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&w[q]);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 x = __bfloat1622float2(b[k]);
        acc[2 * k] += x.x;
        acc[2 * k + 1] += x.y;
      }
    }
    uint4 o;
    __nv_bfloat162* ob = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
    for (int k = 0; k < 4; ++k) ob[k] = __floats2bfloat162_rn(acc[2 * k], acc[2 * k + 1]);
    out[i] = o;
  }
  if (stamps) st[5] = now_ns();
  bloat<Bloat>(never, failed, i + 4);
  if (t == 0) asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(epoch + part), "r"(seq + 1u) : "memory");
  if constexpr ((Plus & plus_finish_barrier) != 0) __syncthreads();
  if (stamps) {
    st[6] = now_ns();
    for (int k = 0; k < 7; ++k) trace[(seq % trace_slots) * 7 + k] = st[k];
  }
}

__global__ void fill(__nv_bfloat16* p, unsigned count, float value) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) p[i] = __float2bfloat16(value);
}

/// The minimal kernel's windows, flags, epochs and traces for n ranks, zeroed once; `host`: windows and flags in
/// pinned host memory mapped into the GPU (the Staged kernel's), else device memory.
struct world {
  static constexpr std::size_t flag_bytes = sizeof(unsigned long long) * 2 * max_parts * max_ranks;
  peers ps{};
  std::vector<unsigned*> epoch;
  std::vector<unsigned long long*> trace;
  unsigned* failed = nullptr;
  bool host = false;
  explicit world(int n, bool in_host = false) : epoch(n), trace(n), host(in_host) {
    for (int r = 0; r < n; ++r) {
      if (host) {  // mapped, portable: every rank's stream reaches it; UVA makes the host pointer the device's
        cudaHostAlloc(reinterpret_cast<void**>(&ps.win[r]), sizeof(uint4) * 2 * max_ranks * cap_packets,
                      cudaHostAllocMapped | cudaHostAllocPortable);
        cudaHostAlloc(reinterpret_cast<void**>(&ps.flag[r]), flag_bytes, cudaHostAllocMapped | cudaHostAllocPortable);
      } else {
        cudaMalloc(&ps.win[r], sizeof(uint4) * 2 * max_ranks * cap_packets);
        cudaMalloc(&ps.flag[r], flag_bytes);
      }
      clear_flags(r);
      cudaMalloc(&epoch[r], sizeof(unsigned) * max_parts);
      cudaMemset(epoch[r], 0, sizeof(unsigned) * max_parts);
      cudaMalloc(&trace[r], sizeof(unsigned long long) * trace_slots * 7);
      cudaMemset(trace[r], 0, sizeof(unsigned long long) * trace_slots * 7);
    }
    cudaMalloc(&failed, sizeof(unsigned));
    cudaMemset(failed, 0, sizeof(unsigned));
  }
  /// Back to the first collective, healthy (between benchmark rows: a failed row — whose variants may have left
  /// parts' epochs apart — must not spoil the next). Synchronous: call with nothing running.
  void reset() {
    cudaDeviceSynchronize();
    for (std::size_t r = 0; r < epoch.size(); ++r) {
      clear_flags(static_cast<int>(r));
      cudaMemset(epoch[r], 0, sizeof(unsigned) * max_parts);
    }
    cudaMemset(failed, 0, sizeof(unsigned));
    cudaDeviceSynchronize();
  }
  void clear_flags(int r) {
    if (host) std::memset(ps.flag[r], 0, flag_bytes);
    else cudaMemset(ps.flag[r], 0, flag_bytes);
  }
};

template <class... Params, class... Args>
bool launch(void (*fn)(Params...), unsigned grid, unsigned block, cudaStream_t stream, bool pdl, Args... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1]{};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, fn, args...) == cudaSuccess;
}

/// Which minimal kernel: `bloat` KiB of never-run code between phases (0, 4 or 16), protocol features `plus`
/// (a mask of enum plus), or `staged` (over a world in host memory), one of them (see the file comment).
struct variant {
  int bloat = 0;
  unsigned plus = 0;
  bool staged = false;
};

template <int N>
bool launch_minimal_n(world& w, int r, const uint4* i, uint4* o, unsigned packets, unsigned ctas, unsigned threads,
                      cudaStream_t stream, bool pdl, unsigned long long* tr, variant v) {
  auto go = [&](auto kernel) {
    return launch(kernel, ctas, threads, stream, pdl, w.ps, r, i, o, w.epoch[r], packets, pdl, w.failed, tr);
  };
  if (v.staged != w.host) return false;
  if (v.staged) {
    if (v.bloat != 0) return false;
    if (v.plus == 0) return go(one_shot_minimal<N, 0, 0, true>);
    return v.plus == plus_poll_backoff && go(one_shot_minimal<N, 0, plus_poll_backoff, true>);
  }
  if (v.plus == 0) {
    switch (v.bloat) {
      case 0: return go(one_shot_minimal<N, 0, 0>);
      case 4: return go(one_shot_minimal<N, 4, 0>);
      case 16: return go(one_shot_minimal<N, 16, 0>);
    }
    return false;
  }
  if (v.bloat != 0) return false;
  switch (v.plus) {
    case plus_vote: return go(one_shot_minimal<N, 0, plus_vote>);
    case plus_checked_poll: return go(one_shot_minimal<N, 0, plus_checked_poll>);
    case plus_finish_barrier: return go(one_shot_minimal<N, 0, plus_finish_barrier>);
    case plus_vote | plus_checked_poll | plus_finish_barrier:
      return go(one_shot_minimal<N, 0, plus_vote | plus_checked_poll | plus_finish_barrier>);
  }
  return false;
}

/// One minimal one-shot of rank r (n ranks: 2, 4 or 8) on `stream`; `traced` records the stamps; `v`: which kernel.
inline bool launch_minimal(world& w, int n, int r, const void* in, void* out, unsigned packets, unsigned ctas,
                           unsigned threads, cudaStream_t stream, bool pdl, bool traced, variant v = {}) {
  const uint4* i = static_cast<const uint4*>(in);
  uint4* o = static_cast<uint4*>(out);
  unsigned long long* tr = traced ? w.trace[r] : nullptr;
  switch (n) {
    case 2: return launch_minimal_n<2>(w, r, i, o, packets, ctas, threads, stream, pdl, tr, v);
    case 4: return launch_minimal_n<4>(w, r, i, o, packets, ctas, threads, stream, pdl, tr, v);
    case 8: return launch_minimal_n<8>(w, r, i, o, packets, ctas, threads, stream, pdl, tr, v);
  }
  return false;
}

}  // namespace floor_bench

// peers.cuh — the published all-reduce kernels the library is judged against, written here from their published
// algorithms, to run beside the library's rows in the same benchmark run (measuring sticks, not product code, like
// floor.cuh). bf16 sum; ranks are streams of one GPU, as in every row of rocenante-bench-gpu.
//
//   peer_vllm_one_shot            vLLM csrc/custom_all_reduce.cuh, cross_device_reduce_1stage
//   peer_vllm_two_shot            vLLM csrc/custom_all_reduce.cuh, cross_device_reduce_2stage
//   peer_trtllm_lamport_one_shot  TensorRT-LLM cpp/tensorrt_llm/kernels/communicationKernels/
//                                 allReduceFusionKernels.cu, allreduce_fusion_kernel_oneshot_lamport (pattern
//                                 kAllReduce: the all-reduce alone, no residual, norm or quantization)
//
// What is the same as the published code:
// - vLLM, both: a Signal per rank with start[36][8] and end[36][8] 32-bit flags (per block, per peer) and a
//   per-block counter; barrier_at_start (threads 0..n-1 each store the block's next counter value into one peer's
//   start[block][rank] and spin on their own start[block][peer]; volatile stores and loads), barrier_at_end (the same
//   on end[]; volatile when it ends the kernel, st.release.sys / ld.acquire.sys when data written in this kernel
//   must be visible after it). Every rank's input is read where it lies through a pointer table (vLLM's RankData:
//   registered buffers). 16-byte packed loads, fp32 accumulation, rounding to bf16 at the store. 512 threads, blocks
//   = min(36, ceil(packets / 512)), a plain launch (no programmatic dependent launch). Eager rows first copy the
//   input into the rank's registered buffer with cudaMemcpyAsync, as vLLM's unregistered path does outside CUDA
//   graphs; graph rows read the input in place, as vLLM's registered graph buffers are read.
//   one_shot: start barrier | every thread reads packet idx of every rank at the grid's stride, sums in rank order
//   0..n-1, stores | end barrier (volatile). two_shot: start barrier | the rank reduces its n-th of the packets (the
//   last rank also the remainder), reading peers in the order rank, rank+1, ... as vLLM does, into its temp buffer
//   (behind its Signal) | end barrier (release/acquire) | every thread gathers the same indices it reduced from
//   every rank's temp. vLLM's launcher picks two_shot for 4 ranks from 512 KiB and 8 ranks from 256 KiB, one_shot
//   otherwise (counter `auto` = 1 on the row it would pick).
// - TensorRT-LLM: per rank three Lamport buffers, each [n sources][packets] of 16 bytes, filled with -0.0 (fp32 word
//   0x80000000) before the first call; a per-rank flag in 0..2 picks the buffer of this call, (flag + 2) % 3 the
//   one to clear (the previous call's: its size times n). Every thread loads its 16 bytes of input, turns -0.0
//   words into +0.0, and stores them into slot [rank] of every rank's buffer (its own too); clears the previous
//   buffer with -0.0; then polls its n slots in its own buffer with volatile 16-byte loads until no word is -0.0
//   (the data is its own flag: no barrier, no flag words), sums in rank order in bf16 (the default; fp32 only with
//   ALL_REDUCE_FUSION_KERNEL_ACC_FP32), stores. Each block counts itself in on entry; block 0 waits for the count
//   to reach the grid, then advances the flag, records the clear size and zeroes the count. griddepcontrol.wait
//   before the flag is read and launch_dependents at the end; programmatic dependent launch on (TRTLLM_ENABLE_PDL
//   defaults to on from sm_90; TRTLLM_ENABLE_PDL=0 turns it off here too). The grid and block come from the
//   launcher's rules for tokens of hidden_dim elements: hidden_dim / 8 threads per token over a cluster of 8 blocks
//   (sm_90), at least 128 threads per block, blocks widened while tokens x cluster exceed the SMs; grid =
//   min(SMs, tokens x cluster) rounded to the cluster. TensorRT-LLM runs the one-shot up to 128 tokens
//   (kOneShotMaxToken; counter `auto`).
//
// What differs:
// - Ranks are streams of one GPU: peers' buffers are plain device pointers (no IPC handles, no registration step),
//   their loads and stores go through this GPU's L2, not NVLink.
// - Each row's blocks of every rank must be resident at once (a block waits for the blocks of the same index on
//   every rank). With n ranks on one GPU the grid is capped at the blocks one GPU holds (occupancy x SMs) divided
//   by n; a capped row says so (counter `capped` = 1, `published_ctas` the uncapped grid). One rank per GPU has no
//   such cap.
// - Every poll is bounded (every 1024th poll checks a bound and a shared failure word): a broken row fails and says
//   so instead of hanging the run. The published loops spin unbounded.
// - TensorRT-LLM: no thread-block clusters. The cluster only lets the fused RMSNorm reduce a token across its
//   blocks; the plain all-reduce never uses it, and packet idx = block x threads + thread is the launcher's own
//   token x hidden_dim / 8 + rank-in-cluster. The benchmark's sizes are read as tokens of 4096 bf16 (8 KiB, a
//   Llama-class width): 8 KiB is one token, 1 MiB 128.
// - The result is checked: four collectives of seeded inputs before timing (each seed's own values, so a stale
//   buffer or flag shows) and the last one after, bit-exact against a host reference. The inputs are multiples of
//   1/8 up to 4 in magnitude and never zero, so every summation order and bf16 or fp32 accumulation give the same
//   exact sum: the check says every rank's contribution arrived once, fresh, not which order summed it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "floor.cuh"  // floor_bench::launch: one launch helper for every measuring stick

namespace peer_bench {

constexpr int max_ranks = 8;
constexpr std::size_t cap_bytes = std::size_t{4} << 20;  // the largest peer row
constexpr unsigned poll_bound = 1u << 22;
constexpr unsigned check_seeds = 4;  // checked collectives before timing, each with its own inputs (seeds 1..4)

enum class kind { vllm_one_shot, vllm_two_shot, trtllm_lamport_one_shot };

inline const char* name(kind k) {
  switch (k) {
    case kind::vllm_one_shot: return "peer_vllm_one_shot";
    case kind::vllm_two_shot: return "peer_vllm_two_shot";
    case kind::trtllm_lamport_one_shot: return "peer_trtllm_lamport_one_shot";
  }
  return "?";
}

// --- memory access ------------------------------------------------------------------------------------------------

__device__ __forceinline__ void st_volatile(std::uint32_t* p, std::uint32_t v) {
  asm volatile("st.volatile.global.u32 [%1], %0;" ::"r"(v), "l"(p) : "memory");
}
__device__ __forceinline__ std::uint32_t ld_volatile(const std::uint32_t* p) {
  std::uint32_t v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_sys(std::uint32_t* p, std::uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%1], %0;" ::"r"(v), "l"(p) : "memory");
}
__device__ __forceinline__ std::uint32_t ld_acquire_sys(const std::uint32_t* p) {
  std::uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint4 ld_volatile_v4(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

/// Every 1024th poll of a wait: true (and `failed` set) once the wait has polled past poll_bound times or another
/// wait of the run has failed, so that a broken row ends instead of hanging.
__device__ __forceinline__ bool give_up(unsigned polls, unsigned* failed) {
  if ((polls & 1023u) != 0) return false;
  if (polls <= poll_bound && ld_volatile(failed) == 0) return false;
  atomicExch(failed, 1u);
  return true;
}

/// Spins until *p == want; volatile or acquire (system scope) loads.
template <bool Acquire>
__device__ __forceinline__ void wait_for(const std::uint32_t* p, std::uint32_t want, unsigned* failed) {
  for (unsigned polls = 1;; ++polls) {
    if ((Acquire ? ld_acquire_sys(p) : ld_volatile(p)) == want || give_up(polls, failed)) return;
  }
}

// --- vLLM custom all-reduce ---------------------------------------------------------------------------------------

constexpr int vllm_max_blocks = 36;  // kMaxBlocks and the CUDA launcher's default block limit
constexpr unsigned vllm_threads = 512;

struct vllm_signal {
  alignas(128) std::uint32_t start[vllm_max_blocks][max_ranks];
  alignas(128) std::uint32_t end[vllm_max_blocks][max_ranks];
  alignas(128) std::uint32_t flag[vllm_max_blocks];  // this rank's counter per block
};

/// Every rank's buffer of one registration (vLLM's RankData).
struct alignas(16) vllm_rank_data {
  const void* ptrs[max_ranks];
};
struct alignas(16) vllm_rank_signals {
  vllm_signal* signals[max_ranks];
};

/// The temp buffer behind a rank's Signal (vLLM's get_tmp_buf).
__device__ __forceinline__ uint4* vllm_temp(vllm_signal* s) { return reinterpret_cast<uint4*>(s + 1); }

template <int N>
__device__ __forceinline__ void vllm_barrier_at_start(const vllm_rank_signals& sg, vllm_signal* self, int rank,
                                                      unsigned* failed) {
  const std::uint32_t flag = self->flag[blockIdx.x] + 1;
  if (threadIdx.x < N) {
    st_volatile(&sg.signals[threadIdx.x]->start[blockIdx.x][rank], flag);
    wait_for<false>(&self->start[blockIdx.x][threadIdx.x], flag, failed);
  }
  __syncthreads();
  if (threadIdx.x == 0) self->flag[blockIdx.x] = flag;
}

template <int N, bool Final>
__device__ __forceinline__ void vllm_barrier_at_end(const vllm_rank_signals& sg, vllm_signal* self, int rank,
                                                    unsigned* failed) {
  __syncthreads();
  const std::uint32_t flag = self->flag[blockIdx.x] + 1;
  if (threadIdx.x < N) {
    std::uint32_t* peer = &sg.signals[threadIdx.x]->end[blockIdx.x][rank];
    const std::uint32_t* mine = &self->end[blockIdx.x][threadIdx.x];
    if constexpr (Final) {
      st_volatile(peer, flag);
      wait_for<false>(mine, flag, failed);
    } else {
      st_release_sys(peer, flag);
      wait_for<true>(mine, flag, failed);
    }
  }
  if constexpr (!Final) __syncthreads();
  if (threadIdx.x == 0) self->flag[blockIdx.x] = flag;
}

/// Packet idx of N sources summed in fp32 in the order given, rounded to bf16 (vLLM's packed_reduce).
template <int N>
__device__ __forceinline__ uint4 reduce_fp32(const uint4* const* src, int idx) {
  uint4 v[N];
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = src[i][idx];
  float acc[8];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 x = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(&v[0])[k]);
    acc[2 * k] = x.x;
    acc[2 * k + 1] = x.y;
  }
#pragma unroll
  for (int i = 1; i < N; ++i)
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 x = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(&v[i])[k]);
      acc[2 * k] += x.x;
      acc[2 * k + 1] += x.y;
    }
  uint4 o;
#pragma unroll
  for (int k = 0; k < 4; ++k) reinterpret_cast<__nv_bfloat162*>(&o)[k] = __floats2bfloat162_rn(acc[2 * k], acc[2 * k + 1]);
  return o;
}

template <int N>
__global__ void __launch_bounds__(512, 1)
    vllm_one_shot(const vllm_rank_data* data, vllm_rank_signals sg, vllm_signal* self, uint4* __restrict__ out, int rank,
                  int packets, unsigned* failed) {
  const vllm_rank_data dp = *data;
  const uint4* src[N];
#pragma unroll
  for (int i = 0; i < N; ++i) src[i] = static_cast<const uint4*>(dp.ptrs[i]);
  vllm_barrier_at_start<N>(sg, self, rank, failed);
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < packets; idx += gridDim.x * blockDim.x)
    out[idx] = reduce_fp32<N>(src, idx);
  vllm_barrier_at_end<N, true>(sg, self, rank, failed);
}

template <int N>
__global__ void __launch_bounds__(512, 1)
    vllm_two_shot(const vllm_rank_data* data, vllm_rank_signals sg, vllm_signal* self, uint4* __restrict__ out, int rank,
                  int packets, unsigned* failed) {
  const int tid = blockIdx.x * blockDim.x + threadIdx.x;
  const int stride = gridDim.x * blockDim.x;
  const int part = packets / N;
  const int start = rank * part;
  const int end = rank == N - 1 ? packets : start + part;
  const int largest_part = part + packets % N;
  const uint4* src[N];
  uint4* tmp[N];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int target = (rank + i) % N;
    src[i] = static_cast<const uint4*>(data->ptrs[target]);
    tmp[i] = vllm_temp(sg.signals[target]);
  }
  vllm_barrier_at_start<N>(sg, self, rank, failed);
  for (int idx = start + tid; idx < end; idx += stride) tmp[0][idx - start] = reduce_fp32<N>(src, idx);
  vllm_barrier_at_end<N, false>(sg, self, rank, failed);
  // The same tid as in the reduce-scatter: the barrier orders a thread's stores before the same thread's loads on
  // the other ranks (vLLM's note).
  for (int idx = tid; idx < largest_part; idx += stride) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int from = (rank + i) % N;
      if (from == N - 1 || idx < part) out[from * part + idx] = tmp[i][idx];
    }
  }
}

// --- TensorRT-LLM Lamport one-shot --------------------------------------------------------------------------------

constexpr unsigned trtllm_hidden = 4096;        // elements per token (8 KiB of bf16)
constexpr unsigned trtllm_one_shot_max_token = 128;  // kOneShotMaxToken
constexpr std::uint32_t neg_zero = 0x80000000u;

/// A rank's Lamport comm state (the workspace's counter, flag and clear size, in packets).
struct lamport_state {
  int counter;
  int flag;
  int clear;
};
/// Every rank's three Lamport buffers, each buf_packets of 16 bytes.
struct lamport_peers {
  uint4* bufs[max_ranks];
};

__device__ __forceinline__ bool has_neg_zero(uint4 v) {
  return v.x == neg_zero || v.y == neg_zero || v.z == neg_zero || v.w == neg_zero;
}

template <int N>
__device__ __forceinline__ uint4 sum_bf16(const uint4* v) {
  uint4 acc = v[0];
#pragma unroll
  for (int r = 1; r < N; ++r)
#pragma unroll
    for (int k = 0; k < 4; ++k)
      reinterpret_cast<__nv_bfloat162*>(&acc)[k] =
          __hadd2(reinterpret_cast<const __nv_bfloat162*>(&acc)[k], reinterpret_cast<const __nv_bfloat162*>(&v[r])[k]);
  return acc;
}

template <int N>
__global__ void __launch_bounds__(1024)
    trtllm_lamport_one_shot(lamport_peers peers, lamport_state* state, int rank, const uint4* __restrict__ in,
                            uint4* __restrict__ out, int packets, long long buf_packets, unsigned* failed) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int flag = state->flag;
  const int clear = state->clear;
  uint4* data[N];
#pragma unroll
  for (int r = 0; r < N; ++r) data[r] = peers.bufs[r] + (flag % 3) * buf_packets;
  uint4* clear_buf = peers.bufs[rank] + ((flag + 2) % 3) * buf_packets;
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(&state->counter, 1);

  const int first = blockIdx.x * blockDim.x + threadIdx.x;
  const int stride = gridDim.x * blockDim.x;
  for (int idx = first; idx < packets; idx += stride) {
    uint4 v = in[idx];
    if (v.x == neg_zero) v.x = 0;
    if (v.y == neg_zero) v.y = 0;
    if (v.z == neg_zero) v.z = 0;
    if (v.w == neg_zero) v.w = 0;
#pragma unroll
    for (int r = 0; r < N; ++r) data[r][rank * packets + idx] = v;
  }
  for (int idx = first; idx < clear; idx += stride) clear_buf[idx] = make_uint4(neg_zero, neg_zero, neg_zero, neg_zero);

  const uint4* mine = data[rank];
  for (int idx = first; idx < packets; idx += stride) {
    uint4 v[N];
    for (unsigned polls = 1;; ++polls) {
      bool done = true;
#pragma unroll
      for (int r = 0; r < N; ++r) {
        v[r] = ld_volatile_v4(mine + r * packets + idx);
        done &= !has_neg_zero(v[r]);
      }
      if (done || give_up(polls, failed)) break;
    }
    out[idx] = sum_bf16<N>(v);
  }

  if (blockIdx.x == 0 && threadIdx.x == 0) {
    for (unsigned polls = 1;; ++polls)
      if (static_cast<unsigned>(*reinterpret_cast<volatile int*>(&state->counter)) == gridDim.x || give_up(polls, failed)) break;
    state->flag = (flag + 1) % 3;
    state->clear = packets * N;
    state->counter = 0;
  }
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// --- inputs and the reference ---------------------------------------------------------------------------------------

/// Element i of rank `rank`'s input for `seed`: k / 8 with k in [-32, -1] or [1, 32] (never zero, so never the
/// Lamport sentinel; sums of up to 8 are exact in bf16).
__host__ __device__ inline float test_value(int rank, unsigned i, unsigned seed) {
  unsigned h = (i + 1u) * 2654435761u ^ (static_cast<unsigned>(rank) + 1u) * 40503u ^ seed * 9176533u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  const int k = static_cast<int>(h & 63u);
  return static_cast<float>(k < 32 ? k - 32 : k - 31) / 8.0f;
}

__global__ void fill_test_values(__nv_bfloat16* p, unsigned count, int rank, unsigned seed) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x)
    p[i] = __float2bfloat16(test_value(rank, i, seed));
}

__global__ void fill_words(std::uint32_t* p, std::size_t count, std::uint32_t value) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += std::size_t{gridDim.x} * blockDim.x) p[i] = value;
}

// --- host side ----------------------------------------------------------------------------------------------------

/// How one row launches: its grid and block, and what the published code would have done.
struct plan {
  kind k{};
  std::size_t bytes = 0;
  int packets = 0;
  unsigned grid = 0, threads = 0;
  unsigned published_grid = 0;  // the published launcher's grid before the co-residency cap
  bool capped = false;          // grid < published_grid: n x published_grid blocks do not fit on one GPU
  bool pdl = false;             // programmatic dependent launch
  bool staged = false;          // the input is copied into the registered buffer first (vLLM's eager path)
  bool chosen = false;          // the published dispatch picks this kernel at this size and rank count
  std::string error;            // non-empty: the row cannot run
};

/// TRTLLM_ENABLE_PDL as TensorRT-LLM reads it from sm_90 on: on unless set to "0".
inline bool trtllm_pdl() {
  const char* e = std::getenv("TRTLLM_ENABLE_PDL");
  return !(e != nullptr && std::strcmp(e, "0") == 0);
}

/// The buffers, pointer tables, signals and Lamport state of n ranks on this GPU, allocated once (cap_bytes per
/// rank and row, three Lamport buffers of n x cap_bytes per rank).
class world {
 public:
  explicit world(int n) : n_(n), in_(n), out_(n), staged_(n), sig_(n), lamport_state_(n) {
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, dev), "SM count");
    for (int r = 0; r < n; ++r) {
      check(cudaMalloc(&in_[r], cap_bytes), "input");
      check(cudaMalloc(&out_[r], cap_bytes), "output");
      check(cudaMalloc(&staged_[r], cap_bytes), "registered buffer");
      check(cudaMalloc(&sig_[r], sizeof(vllm_signal) + cap_bytes), "signal + temp");
      check(cudaMalloc(&lamport_.bufs[r], 3 * lamport_buf_bytes()), "Lamport buffers");
      check(cudaMalloc(&lamport_state_[r], sizeof(lamport_state)), "Lamport state");
      signals_.signals[r] = sig_[r];
    }
    check(cudaMalloc(&failed_, sizeof(unsigned)), "failure word");
    vllm_rank_data in{}, staged{};
    for (int r = 0; r < n; ++r) {
      in.ptrs[r] = in_[r];
      staged.ptrs[r] = staged_[r];
    }
    check(cudaMalloc(&table_in_, sizeof(vllm_rank_data)), "pointer table");
    check(cudaMalloc(&table_staged_, sizeof(vllm_rank_data)), "pointer table");
    check(cudaMemcpy(table_in_, &in, sizeof in, cudaMemcpyHostToDevice), "pointer table");
    check(cudaMemcpy(table_staged_, &staged, sizeof staged, cudaMemcpyHostToDevice), "pointer table");
  }
  world(const world&) = delete;
  world& operator=(const world&) = delete;
  ~world() {
    for (int r = 0; r < n_; ++r) {
      cudaFree(in_[r]);
      cudaFree(out_[r]);
      cudaFree(staged_[r]);
      cudaFree(sig_[r]);
      cudaFree(lamport_.bufs[r]);
      cudaFree(lamport_state_[r]);
    }
    cudaFree(failed_);
    cudaFree(table_in_);
    cudaFree(table_staged_);
  }

  /// Empty unless set-up failed (then what failed).
  const std::string& error() const { return error_; }

  /// Back to the state before the first call, healthy: signals and counters zero, Lamport buffers -0.0, flag 0 and
  /// nothing to clear (between rows: a failed row must not spoil the next). Synchronous: call with nothing running.
  bool reset() {
    for (int r = 0; r < n_; ++r) {
      check(cudaMemset(sig_[r], 0, sizeof(vllm_signal)), "signal reset");
      fill_words<<<264, 512>>>(reinterpret_cast<std::uint32_t*>(lamport_.bufs[r]), 3 * lamport_buf_bytes() / 4, neg_zero);
      check(cudaGetLastError(), "Lamport fill");
      check(cudaMemset(lamport_state_[r], 0, sizeof(lamport_state)), "Lamport state reset");
    }
    check(cudaMemset(failed_, 0, sizeof(unsigned)), "failure word reset");
    check(cudaDeviceSynchronize(), "reset");
    return error_.empty();
  }

  /// The launch of row `k` at `bytes` per rank, with the co-residency cap applied.
  plan plan_for(kind k, std::size_t bytes, bool graph) const {
    plan p;
    p.k = k;
    p.bytes = bytes;
    p.packets = static_cast<int>(bytes / sizeof(uint4));
    if (bytes == 0 || bytes % sizeof(uint4) != 0 || bytes > cap_bytes) {
      p.error = "size must be a non-zero multiple of 16 bytes up to the peer world's capacity";
      return p;
    }
    const void* fn = nullptr;
    switch (k) {
      case kind::vllm_one_shot:
      case kind::vllm_two_shot: {
        p.threads = vllm_threads;
        p.published_grid = std::min<unsigned>(vllm_max_blocks, (p.packets + vllm_threads - 1) / vllm_threads);
        p.staged = !graph;
        const bool one_shot = n_ == 2 || (n_ <= 4 && bytes < (512u << 10)) || (n_ <= 8 && bytes < (256u << 10));
        p.chosen = one_shot == (k == kind::vllm_one_shot);
        fn = k == kind::vllm_one_shot ? kernel_of<kind::vllm_one_shot>() : kernel_of<kind::vllm_two_shot>();
        break;
      }
      case kind::trtllm_lamport_one_shot: {
        const std::size_t token_bytes = trtllm_hidden * sizeof(__nv_bfloat16);
        if (bytes % token_bytes != 0) {
          p.error = "the Lamport row's launch shape wants whole tokens of 4096 bf16 (8 KiB)";
          return p;
        }
        if (bytes * n_ > lamport_buf_bytes()) {
          p.error = "n x size exceeds a Lamport buffer";
          return p;
        }
        // allreduce_fusion_kernel_launcher's shape for sm_90 (clusters of `cluster` blocks per token).
        const unsigned tokens = static_cast<unsigned>(bytes / token_bytes);
        const unsigned threads_per_token = trtllm_hidden / 8;
        unsigned cluster = 8;
        while (threads_per_token % cluster != 0 && cluster > 1) cluster /= 2;
        unsigned threads = threads_per_token / cluster;
        while (threads < 128 && cluster >= 2) threads *= 2, cluster /= 2;
        while (tokens * cluster > static_cast<unsigned>(sms_) && cluster > 1 && threads <= 512) threads *= 2, cluster /= 2;
        p.threads = threads;
        p.published_grid = (std::min(static_cast<unsigned>(sms_), tokens * cluster) / cluster) * cluster;
        p.pdl = trtllm_pdl();
        p.chosen = tokens <= trtllm_one_shot_max_token;
        fn = kernel_of<kind::trtllm_lamport_one_shot>();
        break;
      }
    }
    int per_sm = 0;
    if (fn == nullptr || cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, static_cast<int>(p.threads), 0) != cudaSuccess) {
      p.error = "occupancy query failed";
      return p;
    }
    const unsigned fit = static_cast<unsigned>(per_sm * sms_ / n_);
    p.grid = std::min(p.published_grid, fit);
    p.capped = p.grid < p.published_grid;
    if (p.grid == 0) p.error = "not one block per rank fits on the GPU at once";
    return p;
  }

  /// One collective of rank r on `stream` (a memcpy first where the plan stages); false if a launch failed.
  bool launch(const plan& p, int r, cudaStream_t stream) {
    switch (n_) {
      case 2: return launch_n<2>(p, r, stream);
      case 4: return launch_n<4>(p, r, stream);
      case 8: return launch_n<8>(p, r, stream);
    }
    return false;
  }

  /// Every rank's input filled with test_value(rank, i, seed); synchronous.
  bool fill_inputs(std::size_t bytes, unsigned seed) {
    const unsigned count = static_cast<unsigned>(bytes / sizeof(__nv_bfloat16));
    for (int r = 0; r < n_; ++r) fill_test_values<<<264, 256>>>(static_cast<__nv_bfloat16*>(in_[r]), count, r, seed);
    return cudaGetLastError() == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
  }

  /// Output elements, over every rank, that differ (bits) from the sum of the inputs of `seed`; call after the
  /// collectives ended.
  std::size_t count_wrong(std::size_t bytes, unsigned seed) {
    const std::size_t count = bytes / sizeof(__nv_bfloat16);
    const std::vector<std::uint16_t>& want = reference(count, seed);
    std::vector<std::uint16_t> got(count);
    std::size_t wrong = 0;
    for (int r = 0; r < n_; ++r) {
      if (cudaMemcpy(got.data(), out_[r], bytes, cudaMemcpyDeviceToHost) != cudaSuccess) return count * n_;
      for (std::size_t i = 0; i < count; ++i) wrong += got[i] != want[i];
    }
    return wrong;
  }

  /// Non-zero once a poll of any row gave up since the last reset.
  unsigned failed() const {
    unsigned f = 1;
    cudaMemcpy(&f, failed_, sizeof f, cudaMemcpyDeviceToHost);
    return f;
  }

 private:
  std::size_t lamport_buf_bytes() const { return static_cast<std::size_t>(n_) * cap_bytes; }

  /// The bf16 bits of the sum over ranks of test_value(rank, i, seed), i < count; kept per seed for the last count
  /// (Google Benchmark calls a row's function several times, and the check runs in each call).
  const std::vector<std::uint16_t>& reference(std::size_t count, unsigned seed) {
    reference_slot& w = want_[seed % check_seeds];
    if (w.count == count && w.seed == seed) return w.bits;
    w.bits.resize(count);
    for (std::size_t i = 0; i < count; ++i) {
      float s = 0;
      for (int r = 0; r < n_; ++r) s += test_value(r, static_cast<unsigned>(i), seed);
      const __nv_bfloat16 b = __float2bfloat16(s);
      std::memcpy(&w.bits[i], &b, sizeof b);
    }
    w.count = count;
    w.seed = seed;
    return w.bits;
  }

  void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess && error_.empty()) error_ = std::string("peer world set-up: ") + what + ": " + cudaGetErrorString(e);
  }

  template <kind K>
  const void* kernel_of() const {
    switch (n_) {
      case 2: return kernel_n<K, 2>();
      case 4: return kernel_n<K, 4>();
      case 8: return kernel_n<K, 8>();
    }
    return nullptr;
  }
  template <kind K, int N>
  static const void* kernel_n() {
    if constexpr (K == kind::vllm_one_shot) return reinterpret_cast<const void*>(vllm_one_shot<N>);
    else if constexpr (K == kind::vllm_two_shot) return reinterpret_cast<const void*>(vllm_two_shot<N>);
    else return reinterpret_cast<const void*>(trtllm_lamport_one_shot<N>);
  }

  template <int N>
  bool launch_n(const plan& p, int r, cudaStream_t stream) {
    uint4* out = static_cast<uint4*>(out_[r]);
    switch (p.k) {
      case kind::vllm_one_shot:
      case kind::vllm_two_shot: {
        const vllm_rank_data* table = table_in_;
        if (p.staged) {
          if (cudaMemcpyAsync(staged_[r], in_[r], p.bytes, cudaMemcpyDeviceToDevice, stream) != cudaSuccess) return false;
          table = table_staged_;
        }
        auto fn = p.k == kind::vllm_one_shot ? vllm_one_shot<N> : vllm_two_shot<N>;
        return floor_bench::launch(fn, p.grid, p.threads, stream, false, table, signals_, sig_[r], out, r, p.packets, failed_);
      }
      case kind::trtllm_lamport_one_shot:
        return floor_bench::launch(trtllm_lamport_one_shot<N>, p.grid, p.threads, stream, p.pdl, lamport_, lamport_state_[r], r,
                             static_cast<const uint4*>(in_[r]), out, p.packets,
                             static_cast<long long>(lamport_buf_bytes() / sizeof(uint4)), failed_);
    }
    return false;
  }

  int n_;
  int sms_ = 0;
  std::string error_;
  std::vector<void*> in_, out_, staged_;
  std::vector<vllm_signal*> sig_;
  vllm_rank_signals signals_{};
  vllm_rank_data* table_in_ = nullptr;
  vllm_rank_data* table_staged_ = nullptr;
  lamport_peers lamport_{};
  std::vector<lamport_state*> lamport_state_;
  unsigned* failed_ = nullptr;
  struct reference_slot {
    std::vector<std::uint16_t> bits;
    std::size_t count = 0;
    unsigned seed = 0;
  };
  reference_slot want_[check_seeds];
};

}  // namespace peer_bench

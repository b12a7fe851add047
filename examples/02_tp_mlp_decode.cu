// examples/02_tp_mlp_decode.cu — one decode step of a tensor-parallel transformer MLP, the place an inference
// engine calls an all-reduce ~100 times per token:
//
//   up_r  = silu(W_up[r] . x)        column-parallel up-projection: rank r holds F/n rows of W_up   (cuBLAS)
//   y_r   = W_down[:, r] . up_r      row-parallel down-projection: rank r holds F/n columns          (cuBLAS)
//   h     = x + sum_r y_r            all-reduce with the residual add fused into its epilogue (one rounding)
//   out   = rmsnorm(h) * gamma       a separate kernel: the library's epilogue is per 16-byte packet and
//                                    RMSNorm runs as its own kernel here; the fused form is nvfp4_epilogue::norm_out (docs/nvfp4.md)
//
// The result is checked against single-rank math (the same bf16 weights unsplit, one GEMM each, fp32 down-
// projection, residual and RMSNorm), every rank must hold identical bytes, and each step is timed per algorithm
// (eager and CUDA graph), with NCCL beside it where NCCL can run (one rank per GPU: on a single GPU that is
// --ranks 1) and the GPU's energy per step from NVML where the driver reports it.
//
//   build/examples/02_tp_mlp_decode                      (4 ranks as threads sharing the visible GPUs, 1 token)
//   build/examples/02_tp_mlp_decode --ranks 1            (world of one: NCCL can run beside the library)
//   build/examples/02_tp_mlp_decode --ranks 8 --tokens 4
//
// With n ranks on one GPU the step time is that of n ranks sharing one GPU's SMs and HBM, not a TP speed-up.
// Prints PASS (exit 0), FAIL (exit 1), or SKIP with the reason (exit 77) on a machine without a GPU.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <rocenante/gpu/communicator.hpp>
#include <rocenante/host/spawn.hpp>

#include "nvml.hpp"
#if ROCENANTE_EXAMPLE_NCCL
#include "nccl_loader.hpp"
#endif

// ---- configuration ----------------------------------------------------------------------------------------
constexpr int    hidden         = 4096;   // H: model width (Llama-3-8B)
constexpr int    ffn            = 14336;  // F: MLP width, split over the ranks (must divide by --ranks)
constexpr float  rms_eps        = 1e-5f;
constexpr int    warmup_steps   = 10;
constexpr int    eager_steps    = 200;    // timed eager steps (one sample each)
constexpr int    graph_steps    = 20;     // steps captured in one CUDA graph per rank
constexpr int    graph_launches = 20;     // timed launches of that graph (one sample each)
constexpr double energy_seconds = 1.0;    // graph replay time over which NVML's energy counter is read
constexpr float  tolerance      = 1.0f / 64;  // |tp - reference| <= tolerance * (1 + |reference|), see check()
// ---------------------------------------------------------------------------------------------------------------

using namespace rocenante;
using bf16 = __nv_bfloat16;

#define CHECK_CUDA(call)                                                                                  \
  do {                                                                                                    \
    const cudaError_t e_ = (call);                                                                        \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(e_)); \
  } while (0)
#define CHECK_CUBLAS(call)                                                                                  \
  do {                                                                                                      \
    const cublasStatus_t s_ = (call);                                                                       \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                                        \
      throw std::runtime_error(std::string(#call) + ": cuBLAS status " + std::to_string(static_cast<int>(s_))); \
  } while (0)

namespace {

// ---- kernels ------------------------------------------------------------------------------------------------

/// Deterministic uniform value in [-1, 1) for global index i: shards and the unsplit matrices agree exactly.
__host__ __device__ float uniform(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + i;
  x ^= x >> 30; x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27; x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return float(x >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void init(bf16* p, std::uint64_t n, std::uint64_t seed, std::uint64_t offset, float scale, float shift) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n; i += std::uint64_t{gridDim.x} * blockDim.x)
    p[i] = __float2bfloat16_rn(shift + scale * uniform(seed, offset + i));
}

__global__ void silu_inplace(bf16* p, std::uint64_t n) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n; i += std::uint64_t{gridDim.x} * blockDim.x) {
    const float v = __bfloat162float(p[i]);
    p[i] = __float2bfloat16_rn(v / (1.0f + __expf(-v)));
  }
}

/// One CTA per token: v = h (+ residual), out = v * rsqrt(mean(v^2) + eps) * gamma. T_in is bf16 (the step) or
/// float (the reference, whose residual is added in fp32).
template <class T_in, class T_out>
__global__ void rmsnorm(const T_in* h, const bf16* residual, const bf16* gamma, T_out* out, int width, float eps) {
  __shared__ float partial[32];
  const int t = blockIdx.x;
  const T_in* row = h + std::size_t(t) * width;
  auto value = [&](int i) {
    float v = float(row[i]);
    if (residual) v += __bfloat162float(residual[std::size_t(t) * width + i]);
    return v;
  };
  float ss = 0;
  for (int i = threadIdx.x; i < width; i += blockDim.x) ss += value(i) * value(i);
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    ss = threadIdx.x < (blockDim.x + 31) / 32 ? partial[threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (threadIdx.x == 0) partial[0] = ss;
  }
  __syncthreads();
  const float scale = rsqrtf(partial[0] / float(width) + eps);
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    const float v = value(i) * scale * __bfloat162float(gamma[i]);
    if constexpr (std::is_same_v<T_out, float>) out[std::size_t(t) * width + i] = v;
    else out[std::size_t(t) * width + i] = __float2bfloat16_rn(v);
  }
}

/// The all-reduce epilogue: add the residual to the fp32 sum before the single rounding to bf16. A pure function
/// of its arguments and of x, which is identical on every rank, so every rank still ends with the same bytes.
struct add_residual {
  const bf16* residual;
  std::uint64_t count;
  template <class Acc>
  __host__ __device__ void operator()(std::uint64_t first, Acc& acc) const {
    constexpr int lanes = sizeof(acc.v) / sizeof(acc.v[0]);
    for (int l = 0; l < lanes; ++l)
      if (first + l < count) acc.v[l] += __bfloat162float(residual[first + l]);
  }
};

constexpr int grid = 1024, block = 256;
constexpr std::uint64_t seed_x = 1, seed_up = 2, seed_down = 3, seed_gamma = 4;

/// C = op(A) . B with bf16 inputs, fp32 accumulation (column-major, as cuBLAS).
void gemm(cublasHandle_t h, cublasOperation_t ta, int m, int n, int k, const bf16* a, int lda, const bf16* b, int ldb,
          void* c, cudaDataType_t ct, int ldc) {
  const float one = 1.0f, zero = 0.0f;
  CHECK_CUBLAS(cublasGemmEx(h, ta, CUBLAS_OP_N, m, n, k, &one, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &zero, c, ct,
                            ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// ---- the world ------------------------------------------------------------------------------------------------

enum class impl { one_shot, ring, nccl };
const char* name(impl v) { return v == impl::one_shot ? "one_shot" : v == impl::ring ? "ring" : "nccl"; }

struct timing {
  std::vector<std::vector<double>> eager, graph;  // [rank][sample], us per step
  double energy_mj_per_step = -1, avg_power_w = -1, energy_steps = 0;
};

struct world {
  int ranks = 4, tokens = 1, gpus = 1;
  std::vector<int> device;
  std::vector<impl> impls;
  std::string nccl_note;
#if ROCENANTE_EXAMPLE_NCCL
  std::unique_ptr<perf::nccl_loader> nccl;
  std::vector<ncclComm_t> comms;
#endif
  std::vector<float> reference;                      // [tokens][hidden], fp32
  std::vector<std::vector<std::vector<bf16>>> outs;  // [impl][rank] -> output of one checked step
  std::vector<timing> times;                         // [impl]
  std::atomic<int> energy_launches{0};
  std::mutex mu;
  std::vector<std::string> errors;
  void fail(const std::string& e) {
    std::lock_guard<std::mutex> lock(mu);
    errors.push_back(e);
  }
};

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}
double p99(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[static_cast<std::size_t>(std::ceil(0.99 * double(v.size()))) - 1];
}
/// Sample i of a row is the slowest rank's.
std::vector<double> slowest(const std::vector<std::vector<double>>& per_rank) {
  std::vector<double> s(per_rank.empty() ? 0 : per_rank[0].size(), 0.0);
  for (const auto& r : per_rank)
    for (std::size_t i = 0; i < s.size() && i < r.size(); ++i) s[i] = std::max(s[i], r[i]);
  return s;
}

/// Single-rank math on GPU 0: the unsplit weights, one GEMM each, fp32 down-projection, residual and RMSNorm.
void compute_reference(world& w) {
  CHECK_CUDA(cudaSetDevice(0));
  const std::uint64_t H = hidden, F = ffn, B = w.tokens;
  bf16 *x, *wup, *wdown, *gamma, *up;
  float *down, *out;
  CHECK_CUDA(cudaMalloc(&x, H * B * sizeof(bf16)));
  CHECK_CUDA(cudaMalloc(&wup, H * F * sizeof(bf16)));
  CHECK_CUDA(cudaMalloc(&wdown, H * F * sizeof(bf16)));
  CHECK_CUDA(cudaMalloc(&gamma, H * sizeof(bf16)));
  CHECK_CUDA(cudaMalloc(&up, F * B * sizeof(bf16)));
  CHECK_CUDA(cudaMalloc(&down, H * B * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&out, H * B * sizeof(float)));
  init<<<grid, block>>>(x, H * B, seed_x, 0, 1.0f, 0.0f);
  init<<<grid, block>>>(wup, H * F, seed_up, 0, 1.0f / std::sqrt(float(H)), 0.0f);
  init<<<grid, block>>>(wdown, H * F, seed_down, 0, 1.0f / std::sqrt(float(F)), 0.0f);
  init<<<grid, block>>>(gamma, H, seed_gamma, 0, 0.5f, 1.0f);
  cublasHandle_t h;
  CHECK_CUBLAS(cublasCreate(&h));
  gemm(h, CUBLAS_OP_T, int(F), int(B), int(H), wup, int(H), x, int(H), up, CUDA_R_16BF, int(F));
  silu_inplace<<<grid, block>>>(up, F * B);
  gemm(h, CUBLAS_OP_N, int(H), int(B), int(F), wdown, int(H), up, int(F), down, CUDA_R_32F, int(H));
  rmsnorm<float, float><<<int(B), 1024>>>(down, x, gamma, out, int(H), rms_eps);
  CHECK_CUDA(cudaGetLastError());
  w.reference.resize(H * B);
  CHECK_CUDA(cudaMemcpy(w.reference.data(), out, H * B * sizeof(float), cudaMemcpyDeviceToHost));
  cublasDestroy(h);
  for (void* p : {(void*)x, (void*)wup, (void*)wdown, (void*)gamma, (void*)up, (void*)down, (void*)out}) cudaFree(p);
}

/// One rank: its shards, its stream, every variant checked once, timed eager, timed in graphs, energy.
void run_rank(bootstrap::in_process& boot, world& w) {
  const int r = boot.rank(), n = boot.size();
  CHECK_CUDA(cudaSetDevice(w.device[r]));
  const std::uint64_t H = hidden, B = w.tokens, Fr = ffn / n, count = H * B;
  options o = gpu::default_options();
  o.capacity_bytes = count * sizeof(bf16);
  gpu::communicator<> comm(boot, o);

  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  bf16 *x, *wup, *wdown, *gamma, *up, *y, *h, *out, *host_out;
  void* workspace;
  CHECK_CUDA(cudaMalloc(&x, count * sizeof(bf16)));
  CHECK_CUDA(cudaMalloc(&wup, H * Fr * sizeof(bf16)));
  CHECK_CUDA(cudaMalloc(&wdown, H * Fr * sizeof(bf16)));
  CHECK_CUDA(cudaMalloc(&gamma, H * sizeof(bf16)));
  CHECK_CUDA(cudaMalloc(&up, Fr * B * sizeof(bf16)));
  CHECK_CUDA(cudaMalloc(&y, count * sizeof(bf16)));
  CHECK_CUDA(cudaMalloc(&h, count * sizeof(bf16)));
  CHECK_CUDA(cudaMalloc(&out, count * sizeof(bf16)));
  CHECK_CUDA(cudaMallocHost(&host_out, count * sizeof(bf16)));
  const std::size_t workspace_bytes = std::size_t{32} << 20;  // cuBLAS allocates nothing while capturing graphs
  CHECK_CUDA(cudaMalloc(&workspace, workspace_bytes));
  // Rank r's shards are slices of the unsplit column-major [H x F] matrices: columns [r*Fr, (r+1)*Fr).
  init<<<grid, block, 0, s>>>(x, count, seed_x, 0, 1.0f, 0.0f);
  init<<<grid, block, 0, s>>>(wup, H * Fr, seed_up, r * Fr * H, 1.0f / std::sqrt(float(H)), 0.0f);
  init<<<grid, block, 0, s>>>(wdown, H * Fr, seed_down, r * Fr * H, 1.0f / std::sqrt(float(ffn)), 0.0f);
  init<<<grid, block, 0, s>>>(gamma, H, seed_gamma, 0, 0.5f, 1.0f);
  cublasHandle_t blas;
  CHECK_CUBLAS(cublasCreate(&blas));
  CHECK_CUBLAS(cublasSetStream(blas, s));
  CHECK_CUBLAS(cublasSetWorkspace(blas, workspace, workspace_bytes));

  auto step = [&](impl v) -> status {
    gemm(blas, CUBLAS_OP_T, int(Fr), int(B), int(H), wup, int(H), x, int(H), up, CUDA_R_16BF, int(Fr));
    silu_inplace<<<grid, block, 0, s>>>(up, Fr * B);
    gemm(blas, CUBLAS_OP_N, int(H), int(B), int(Fr), wdown, int(H), up, int(Fr), y, CUDA_R_16BF, int(H));
    status st = status::ok;
    if (v == impl::nccl) {
#if ROCENANTE_EXAMPLE_NCCL
      // NCCL has no epilogue: the residual is added inside the RMSNorm kernel instead.
      if (w.nccl->all_reduce(y, h, count, ncclBfloat16, ncclSum, w.comms[r], s) != ncclSuccess) st = status::internal;
      rmsnorm<bf16, bf16><<<int(B), 1024, 0, s>>>(h, x, gamma, out, int(H), rms_eps);
#endif
    } else {
      const add_residual epi{x, count};
      st = v == impl::ring ? comm.all_reduce(y, h, count, s, algorithm::ring{}, epi)
                           : comm.all_reduce(y, h, count, s, algorithm::one_shot{}, epi);
      rmsnorm<bf16, bf16><<<int(B), 1024, 0, s>>>(h, nullptr, gamma, out, int(H), rms_eps);
    }
    return st;
  };
  // Load and run every non-collective kernel once before set-up ends (no peer is waiting yet).
  gemm(blas, CUBLAS_OP_T, int(Fr), int(B), int(H), wup, int(H), x, int(H), up, CUDA_R_16BF, int(Fr));
  silu_inplace<<<grid, block, 0, s>>>(up, Fr * B);
  gemm(blas, CUBLAS_OP_N, int(H), int(B), int(Fr), wdown, int(H), up, int(Fr), y, CUDA_R_16BF, int(H));
  rmsnorm<bf16, bf16><<<int(B), 1024, 0, s>>>(h, x, gamma, out, int(H), rms_eps);
  // The collective kernels too: under lazy module loading a first launch could wait for a peer's spinning kernel.
  {
    using handle = gpu::communicator<>::handle_type;
    cudaFuncAttributes attr{};
    CHECK_CUDA(cudaFuncGetAttributes(&attr, kernel::all_reduce<algorithm::one_shot, reduce::sum<bf16>, handle, add_residual>));
    CHECK_CUDA(cudaFuncGetAttributes(&attr, kernel::all_reduce<algorithm::ring, reduce::sum<bf16>, handle, add_residual>));
    CHECK_CUDA(cudaFuncGetAttributes(&attr, kernel::reject<handle>));
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  constexpr int events = std::max(eager_steps, graph_launches);
  std::vector<cudaEvent_t> e0(events), e1(events);
  for (int i = 0; i < events; ++i) {
    CHECK_CUDA(cudaEventCreate(&e0[i]));
    CHECK_CUDA(cudaEventCreate(&e1[i]));
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  boot.barrier();  // set-up ends: from here on only asynchronous work on `s` until the last barrier

  perf::nvml nv;
  std::vector<perf::nvml::device> meters;  // every GPU this run uses, read by rank 0
  if (r == 0 && nv.ok())
    for (int g = 0; g < w.gpus; ++g) {
      char bus[64] = {};
      if (cudaDeviceGetPCIBusId(bus, sizeof bus, g) == cudaSuccess) meters.push_back(nv.by_pci_bus_id(bus));
    }
  auto energy_mj = [&]() -> long long {
    long long sum = 0;
    for (auto d : meters) {
      const long long e = nv.energy_mj(d);
      if (e < 0) return -1;
      sum += e;
    }
    return meters.empty() ? -1 : sum;
  };

  for (std::size_t vi = 0; vi < w.impls.size(); ++vi) {
    const impl v = w.impls[vi];
    timing& t = w.times[vi];
    status first = status::ok;
    auto run = [&] {
      const status st = step(v);
      if (st != status::ok && first == status::ok) first = st;
    };
    // check: one step from poisoned outputs
    for (int i = 0; i < warmup_steps; ++i) run();
    CHECK_CUDA(cudaMemsetAsync(h, 0xff, count * sizeof(bf16), s));
    CHECK_CUDA(cudaMemsetAsync(out, 0xff, count * sizeof(bf16), s));
    run();
    CHECK_CUDA(cudaMemcpyAsync(host_out, out, count * sizeof(bf16), cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    w.outs[vi][r].assign(host_out, host_out + count);
    // `samples` timings of work() between two events on s, in us per step (work() runs `steps` steps)
    auto time_us = [&](int samples, int steps, auto&& work) {
      for (int i = 0; i < samples; ++i) {
        CHECK_CUDA(cudaEventRecord(e0[i], s));
        work();
        CHECK_CUDA(cudaEventRecord(e1[i], s));
      }
      CHECK_CUDA(cudaStreamSynchronize(s));
      std::vector<double> us(samples);
      for (int i = 0; i < samples; ++i) {
        float ms = 0;
        CHECK_CUDA(cudaEventElapsedTime(&ms, e0[i], e1[i]));
        us[i] = ms * 1e3 / steps;
      }
      return us;
    };
    t.eager[r] = time_us(eager_steps, 1, run);  // eager: one sample per step
    // graph: graph_steps steps in one graph; one sample per launch
    cudaGraph_t g;
    cudaGraphExec_t exec;
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < graph_steps; ++i) run();
    CHECK_CUDA(cudaStreamEndCapture(s, &g));
    CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
    CHECK_CUDA(cudaGraphDestroy(g));
    boot.barrier();  // instantiation may allocate: nobody launches before every rank has instantiated
    CHECK_CUDA(cudaGraphLaunch(exec, s));  // warm
    t.graph[r] = time_us(graph_launches, graph_steps, [&] { CHECK_CUDA(cudaGraphLaunch(exec, s)); });
    // energy: rank 0 picks a launch count that replays for about energy_seconds; every rank uses it
    if (r == 0) {
      const double step_us = std::max(1.0, median(t.graph[0]));
      w.energy_launches = std::max(1, int(energy_seconds * 1e6 / (step_us * graph_steps)));
    }
    boot.barrier();
    const int launches = w.energy_launches.load();
    const long long ej0 = r == 0 ? energy_mj() : -1;
    const double t0 = now_s();
    for (int l = 0; l < launches; ++l) CHECK_CUDA(cudaGraphLaunch(exec, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    boot.barrier();  // every rank's replay is done
    if (r == 0) {
      const long long ej1 = energy_mj();
      const double dt = now_s() - t0;
      t.energy_steps = double(launches) * graph_steps;
      if (ej0 >= 0 && ej1 >= ej0) {
        t.energy_mj_per_step = double(ej1 - ej0) / t.energy_steps;
        t.avg_power_w = double(ej1 - ej0) / 1e3 / dt;
      }
    }
    CHECK_CUDA(cudaGraphExecDestroy(exec));
    const auto health = comm.check_health();
    if (first != status::ok) w.fail("rank " + std::to_string(r) + " " + name(v) + ": " + comm.last_error());
    if (!health.ok()) w.fail("rank " + std::to_string(r) + " " + name(v) + ": " + health.message);
    boot.barrier();
  }
  boot.barrier();  // nobody frees memory a peer's kernel may still read
  for (int i = 0; i < events; ++i) {
    cudaEventDestroy(e0[i]);
    cudaEventDestroy(e1[i]);
  }
  cublasDestroy(blas);
  for (void* p : {(void*)x, (void*)wup, (void*)wdown, (void*)gamma, (void*)up, (void*)y, (void*)h, (void*)out, workspace})
    cudaFree(p);
  cudaFreeHost(host_out);
  cudaStreamDestroy(s);
}

/// |tp - ref| <= tolerance * (1 + |ref|) per element. The TP step differs from single-rank math by bf16
/// roundings: of each y_r (small: |y_r| << |h|), of h (at most half an ulp, 2^-8 relative, carried into out by the
/// normalization) and of out itself (again at most 2^-8 relative). Together below 2^-7 * |ref| + a little, so below
/// 2^-7 * (1 + |ref|); the tolerance 2^-6 leaves a factor of 2 for GEMM summation-order differences.
bool check(const world& w, std::size_t vi, double* max_err) {
  const auto& outs = w.outs[vi];
  bool identical = true;
  for (int q = 1; q < w.ranks; ++q)
    identical = identical && std::memcmp(outs[q].data(), outs[0].data(), outs[0].size() * sizeof(bf16)) == 0;
  bool within = true;
  *max_err = 0;
  for (std::size_t i = 0; i < w.reference.size(); ++i) {
    const double got = double(__bfloat162float(outs[0][i])), want = w.reference[i];
    const double err = std::fabs(got - want);
    if (!(err <= tolerance * (1.0 + std::fabs(want)))) within = false;  // NaN fails too
    *max_err = std::max(*max_err, std::isnan(err) ? INFINITY : err);
  }
  if (!identical) std::printf("  %s: ranks' outputs differ in their bytes\n", name(w.impls[vi]));
  // Byte-identical outputs are the library's promise (design.md §1.2); NCCL does not document one, so for NCCL
  // a difference is reported but only the tolerance decides.
  return (identical || w.impls[vi] == impl::nccl) && within;
}

}  // namespace

int main(int argc, char** argv) {
  // Ranks sharing a GPU spin inside their kernels waiting for each other; CUDA's lazy module loading could make
  // a first launch wait for those kernels. Load every module at start-up instead (unless the user chose).
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  // The ranks' streams share this process's hardware work queues (8 by default, fewer under MPS), and two ranks on
  // one queue can block each other: ask for CUDA's most, 32 (unless the user chose).
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  world w;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ranks" && i + 1 < argc) w.ranks = std::atoi(argv[++i]);
    else if (a == "--tokens" && i + 1 < argc) w.tokens = std::atoi(argv[++i]);
    else {
      std::printf("usage: 02_tp_mlp_decode [--ranks N] [--tokens B]\n");
      return 2;
    }
  }
  if (w.ranks < 1 || w.ranks > max_ranks || ffn % w.ranks != 0 || w.tokens < 1 || w.tokens > 1024) {
    std::printf("--ranks must divide %d (1..%d) and --tokens be 1..1024\n", ffn, max_ranks);
    return 2;
  }
  int visible = 0;
  const cudaError_t e = cudaGetDeviceCount(&visible);
  if (e != cudaSuccess || visible == 0) {
    std::printf("SKIP: no usable CUDA GPU (%s); this example needs one\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  bool passed = false;
  try {
    w.gpus = std::min(w.ranks, visible);
    for (int r = 0; r < w.ranks; ++r) w.device.push_back(r % w.gpus);
    w.impls = {impl::one_shot, impl::ring};
    if (w.ranks > w.gpus) {
      w.nccl_note = "skipped: " + std::to_string(w.ranks) + " ranks share " + std::to_string(w.gpus) +
                    " GPU(s); NCCL cannot put several ranks of one communicator on one device (run with --ranks 1, "
                    "or on one GPU per rank)";
    } else {
#if ROCENANTE_EXAMPLE_NCCL
      w.nccl = std::make_unique<perf::nccl_loader>();
      if (!w.nccl->ok()) {
        w.nccl_note = "skipped: " + w.nccl->why();
      } else {
        w.comms.assign(std::size_t(w.ranks), nullptr);
        if (w.nccl->comm_init_all(w.comms.data(), w.ranks, w.device.data()) != ncclSuccess) {
          w.nccl_note = "skipped: ncclCommInitAll failed";
          w.comms.clear();
        } else {
          w.impls.push_back(impl::nccl);
          w.nccl_note = "ran: NCCL " + w.nccl->version_string() + " all-reduce, residual added in the RMSNorm kernel";
        }
      }
#else
      w.nccl_note = "not built: nccl.h was not found at configure time";
#endif
    }
    cudaDeviceProp p{};
    CHECK_CUDA(cudaGetDeviceProperties(&p, 0));
    std::printf("02_tp_mlp_decode: TP=%d ranks (threads, one stream each) on %d GPU(s) [%s], tokens=%d, hidden=%d, "
                "ffn=%d, bf16 weights and activations, fp32 accumulation\n",
                w.ranks, w.gpus, p.name, w.tokens, hidden, ffn);
    std::printf("NCCL: %s\n", w.nccl_note.c_str());
    compute_reference(w);
    w.outs.assign(w.impls.size(), std::vector<std::vector<bf16>>(std::size_t(w.ranks)));
    w.times.assign(w.impls.size(), timing{});
    for (auto& t : w.times) {
      t.eager.assign(std::size_t(w.ranks), {});
      t.graph.assign(std::size_t(w.ranks), {});
    }
    host::spawn_ranks(w.ranks, [&](bootstrap::in_process& boot) { run_rank(boot, w); }, std::chrono::seconds(120));
#if ROCENANTE_EXAMPLE_NCCL
    for (ncclComm_t c : w.comms) w.nccl->comm_destroy(c);
#endif

    passed = w.errors.empty();
    for (const auto& err : w.errors) std::printf("error: %s\n", err.c_str());
    std::printf("\ncheck against single-rank math (tolerance %.4g * (1 + |ref|)); the library's rows must also be "
                "byte-identical on every rank:\n", double(tolerance));
    for (std::size_t vi = 0; vi < w.impls.size(); ++vi) {
      double err = 0;
      const bool ok = check(w, vi, &err);
      std::printf("  %-9s max |err| = %.3g  %s\n", name(w.impls[vi]), err, ok ? "ok" : "WRONG");
      passed = passed && ok;
    }
    std::printf("\nstep time in us (whole MLP step: 2 GEMMs, SiLU, all-reduce + residual, RMSNorm), slowest rank:\n");
    std::printf("  eager: median/p99 over %d steps (CUDA events per step); graph: %d steps per graph, median/p99 over %d "
                "launches\n", eager_steps, graph_steps, graph_launches);
    std::printf("  energy: NVML total-energy counter of the GPU(s) used, over ~%.1f s of graph replay, divided by steps\n",
                energy_seconds);
    std::printf("  %-9s %10s %10s %10s %10s %14s %10s\n", "algorithm", "eager_med", "eager_p99", "graph_med",
                "graph_p99", "energy_mJ/step", "avg_W");
    for (std::size_t vi = 0; vi < w.impls.size(); ++vi) {
      const timing& t = w.times[vi];
      const auto ea = slowest(t.eager), gr = slowest(t.graph);
      char energy[32] = "n/a", power[32] = "n/a";
      if (t.energy_mj_per_step >= 0) {
        std::snprintf(energy, sizeof energy, "%.4g", t.energy_mj_per_step);
        std::snprintf(power, sizeof power, "%.1f", t.avg_power_w);
      }
      std::printf("  %-9s %10.2f %10.2f %10.2f %10.2f %14s %10s\n", name(w.impls[vi]), median(ea), p99(ea), median(gr),
                  p99(gr), energy, power);
    }
    if (w.ranks > w.gpus) std::printf("  nccl      %s\n", w.nccl_note.c_str());
  } catch (const std::exception& ex) {
    std::printf("error: %s\n", ex.what());
    passed = false;
  }
  std::printf("%s\n", passed ? "PASS" : "FAIL");
  return passed ? 0 : 1;
}

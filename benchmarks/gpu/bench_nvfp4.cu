// bench_nvfp4.cu — Google Benchmark suite for NVFP4, CUDA-event manual time:
//
//   copy/d2d/bytes:67108864                        device-to-device copy, read + write counted (rw_GBps): the bar
//   nvfp4/quantize_epilogue/bf16/bytes:67108864/<variant>
//        the standalone quantizing epilogue on 64 MiB of bf16 (8192 x 4096), launched by
//        kernel::launch_nvfp4_quantize_rows: variant plain (x -> NVFP4, swizzled scales: the whole-blocks kernel),
//        residual_rmsnorm (x + residual -> residual_out, RMSNorm -> NVFP4: nvfp4_quantize_rows, the device code
//        all_reduce_quantize runs per row). plain/rows_kernel[/linear]/in_flight:1/ctas_per_sm:8: the general lean
//        kernel (rows split over CTAs) for comparison; plain/whole_kernel/ahead:<0|1>/ctas_per_sm:<8|16|32>: the
//        whole-blocks kernel without and with its next block loaded ahead. Counters: GBps = compulsory bytes
//        (inputs read once, outputs written once) / time; vs_copy = GBps / rw_GBps of a 64 MiB copy measured inside
//        the same benchmark (acceptance: >= 0.70); kernel = 0 launcher, 1 rows, 2 whole, 3 whole with loads ahead.
//   nvfp4/quantize/bf16/bytes:67108864             the 1-D codec kernel (kernel::nvfp4_quantize), same counters
//   all_reduce/<one_shot|one_shot_fp4>/loopback_proxy/bf16/bytes:<N>/ranks:<R>
//        latency of the plain bf16 one-shot vs the NVFP4-wire one-shot, proxy mode (cuda_loopback_proxy: windows in
//        pinned host memory, a CPU proxy thread per rank copies the payload), N = 48 KiB .. 16 MiB. Counters:
//        wire_bytes = bytes rank 0's proxy moved per collective (measured), wire_bytes_model = the exact formula.
//
// Run (H200, about 60 s):
//   build/benchmarks/gpu/rocenante-bench-nvfp4 --benchmark_out=nvfp4.json --benchmark_out_format=json
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <rocenante/gpu/nvfp4.hpp>
#include <rocenante/host/spawn.hpp>

#include "copy_bench.cuh"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace rocenante;

// Ranks sharing a GPU spin inside their kernels waiting for each other; under CUDA's lazy module loading a kernel's
// first launch may wait for the device to go idle, i.e. for those spinning peers (docs/api.md). Load every module
// when the context is created: set before main, hence before the first CUDA call.
static const bool eager_module_loading = [] { return setenv("CUDA_MODULE_LOADING", "EAGER", 1) == 0; }();
// The ranks also share the context's hardware work queues (8 by default, fewer under MPS): two ranks on one queue
// can block each other, and gpu::communicator refuses more ranks than queues. CUDA's most, unless the user chose.
static const bool enough_work_queues = [] { return setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0) == 0; }();
namespace fp4 = rocenante::reduce::nvfp4;
using bf16 = __nv_bfloat16;

namespace {

constexpr std::size_t big = std::size_t{64} << 20;

using rocenante_bench::copy_rw_gbps;
using rocenante_bench::set_bandwidth_counters;
using rocenante_bench::time_between_events;

void fill_bf16(bf16* d, std::size_t n, std::uint32_t seed, float sigma) {
  std::vector<bf16> h(n);
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, sigma);
  for (auto& x : h) x = __float2bfloat16_rn(nd(g));
  cudaMemcpy(d, h.data(), n * 2, cudaMemcpyHostToDevice);
}

/// Which kernel bench_epilogue times: what kernel::launch_nvfp4_quantize_rows picks (what a caller gets), the
/// general lean kernel, or the whole-blocks kernel without / with loads ahead.
enum class epi_kernel { launcher = 0, rows = 1, whole = 2, whole_ahead = 3 };

/// The standalone quantizing epilogue on 64 MiB of bf16, 8192 rows x 4096 cols.
/// `in_flight` (rows kernel only): blocks per thread loaded together; `per_sm`: CTAs of 256 per SM in the grid.
void bench_epilogue(benchmark::State& state, bool full, epi_kernel kind = epi_kernel::launcher, int per_sm = 8,
                    bool swizzled = true, int in_flight = 1) {
  const std::size_t rows = 8192, cols = 4096, count = rows * cols;
  const auto layout = swizzled ? fp4::sf_layout::swizzled_128x4 : fp4::sf_layout::linear;
  const std::size_t sfb = fp4::sf_bytes(layout, rows, cols);
  bf16 *x, *res, *rout, *w;
  std::uint8_t *data, *sc;
  cudaMalloc(&x, count * 2);
  cudaMalloc(&res, count * 2);
  cudaMalloc(&rout, count * 2);
  cudaMalloc(&w, cols * 2);
  cudaMalloc(&data, count / 2);
  cudaMalloc(&sc, sfb);
  fill_bf16(x, count, 1, 1.0f);
  fill_bf16(res, count, 2, 1.0f);
  fill_bf16(w, cols, 3, 1.0f);
  algorithm::nvfp4_epilogue<bf16> e;
  e.rows = rows;
  e.cols = cols;
  e.residual = full ? res : nullptr;
  e.residual_out = full ? rout : nullptr;
  e.rms_norm = full;
  e.weight = full ? w : nullptr;
  e.global_scale = 448.0f * 6.0f / (full ? 8.0f : 5.0f);
  e.out_data = data;
  e.out_scales = sc;
  e.layout = layout;
  const double copy = copy_rw_gbps(big);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  // the launcher: the whole-blocks kernel for plain, one warp per row for residual + RMSNorm; the others: per_sm
  // CTAs of 256 per SM
  const int threads = 256, grid = full ? static_cast<int>(rows / (threads / 32)) : sms * per_sm;
  auto launch = [&] {
    switch (kind) {
      case epi_kernel::launcher: (void)kernel::launch_nvfp4_quantize_rows(x, e, 0, threads, per_sm); break;
      case epi_kernel::whole: kernel::nvfp4_quantize_whole_blocks<bf16, false><<<grid, threads>>>(x, e); break;
      case epi_kernel::whole_ahead: kernel::nvfp4_quantize_whole_blocks<bf16, false, true><<<grid, threads>>>(x, e); break;
      case epi_kernel::rows:
        if (in_flight == 4) kernel::nvfp4_quantize_rows<bf16, false, 4><<<grid, threads>>>(x, e);
        else if (in_flight == 2) kernel::nvfp4_quantize_rows<bf16, false, 2><<<grid, threads>>>(x, e);
        else kernel::nvfp4_quantize_rows<bf16, false, 1><<<grid, threads>>>(x, e);
        break;
    }
  };
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  launch();  // warm-up
  if (cudaDeviceSynchronize() != cudaSuccess) state.SkipWithError("epilogue kernel failed");
  for (auto _ : state)
    state.SetIterationTime(time_between_events(e0, e1, nullptr, [&] { for (int k = 0; k < 10; ++k) launch(); }) / 1e3 / 10);
  if (cudaGetLastError() != cudaSuccess) state.SkipWithError("epilogue kernel launch failed");
  // compulsory traffic: x (+ residual) read once, (residual_out,) codes and scales written once, weight read once
  const double bytes = double(count) * 2 * (full ? 3 : 1) + double(count) / 2 + double(sfb) + (full ? cols * 2.0 : 0.0);
  set_bandwidth_counters(state, bytes, copy);
  state.counters["bytes"] = bytes;
  state.counters["sms"] = sms;
  state.counters["kernel"] = static_cast<int>(kind);
  state.counters["in_flight"] = kind == epi_kernel::rows ? in_flight : 0;
  state.counters["grid"] = grid;
  cudaFree(x), cudaFree(res), cudaFree(rout), cudaFree(w), cudaFree(data), cudaFree(sc);
}

void bench_codec(benchmark::State& state) {
  const std::size_t count = big / 2;
  bf16* x;
  std::uint8_t *data, *sc;
  cudaMalloc(&x, big);
  cudaMalloc(&data, count / 2);
  cudaMalloc(&sc, count / 16);
  fill_bf16(x, count, 4, 1.0f);
  const double copy = copy_rw_gbps(big);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (auto _ : state) {
    const float ms = time_between_events(e0, e1, nullptr, [&] {
      for (int k = 0; k < 10; ++k) kernel::nvfp4_quantize<bf16><<<sms * 8, 256>>>(x, count, 448.0f, data, sc);
    });
    state.SetIterationTime(ms / 1e3 / 10);
  }
  if (cudaGetLastError() != cudaSuccess) state.SkipWithError("codec kernel failed");
  const double bytes = double(big) + count / 2.0 + count / 16.0;
  set_bandwidth_counters(state, bytes, copy);
  cudaFree(x), cudaFree(data), cudaFree(sc);
}

// --- all-reduce latency, proxy mode -------------------------------------------------------------------------------

using proxy_t = transport::cuda_loopback_proxy;
constexpr std::size_t proxy_capacity = std::size_t{16} << 20;

struct world {
  int n;
  std::vector<std::unique_ptr<gpu::communicator<proxy_t>>> comms;
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> done;
  std::vector<bf16*> in, out;
  cudaStream_t master{};
  cudaEvent_t start{}, stop{};
  explicit world(int ranks) : n(ranks), comms(ranks), streams(ranks), done(ranks), in(ranks), out(ranks) {
    options o = gpu::default_options();
    o.capacity_bytes = proxy_capacity;
    host::spawn_ranks(n, [&](bootstrap::in_process& b) { comms[b.rank()] = std::make_unique<gpu::communicator<proxy_t>>(b, o); });
    for (int r = 0; r < n; ++r) {
      cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking);
      cudaEventCreateWithFlags(&done[r], cudaEventDisableTiming);
      cudaMalloc(&in[r], proxy_capacity);
      cudaMalloc(&out[r], proxy_capacity);
      fill_bf16(in[r], proxy_capacity / 2, 10 + r, 1.0f);
    }
    cudaStreamCreateWithFlags(&master, cudaStreamNonBlocking);
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
  }
};

world& get_world(int n) {
  static std::unique_ptr<world> worlds[9];
  if (!worlds[n]) worlds[n] = std::make_unique<world>(n);
  return *worlds[n];
}

void bench_all_reduce(benchmark::State& state, int n, bool fp4_wire, std::size_t bytes) {
  auto& w = get_world(n);
  const std::size_t count = bytes / 2;
  const int per_iter = bytes >= (std::size_t{4} << 20) ? 4 : 20;
  const auto before = w.comms[0]->transport().stats();
  std::string why;
  auto launch = [&](int r) {
    if (fp4_wire) return gpu::all_reduce_fp4(*w.comms[r], w.in[r], w.out[r], count, w.streams[r], &why);
    return w.comms[r]->template all_reduce<algorithm::one_shot>(w.in[r], w.out[r], count, w.streams[r]);
  };
  std::uint64_t launched = 0;
  for (auto _ : state) {
    const float ms = time_between_events(w.start, w.stop, w.master, [&] {
      rocenante_bench::fork_streams(w.start, w.streams);
      for (int k = 0; k < per_iter; ++k)
        for (int r = 0; r < n; ++r)
          if (launch(r) != status::ok) state.SkipWithError(("launch failed: " + why + w.comms[r]->last_error()).c_str());
      rocenante_bench::join_streams(w.master, w.streams, w.done);
    });
    launched += per_iter;
    state.SetIterationTime(ms / 1e3 / per_iter);
  }
  for (int r = 0; r < n; ++r) {
    const auto h = w.comms[r]->check_health();
    if (!h.ok()) state.SkipWithError(h.message.c_str());
  }
  const auto after = w.comms[0]->transport().stats();
  const std::uint32_t parts = fp4_wire ? algorithm::one_shot_fp4::parts_for(count, 2, w.comms[0]->opts().min_part_bytes,
                                                                            w.comms[0]->opts().max_parts)
                                       : 0;
  const double model = fp4_wire ? double(n - 1) * algorithm::one_shot_fp4::payload_bytes(count, parts)
                                : double(n - 1) * double(bytes);
  state.counters["wire_bytes"] = launched ? double(after.bytes - before.bytes) / double(launched) : 0.0;
  state.counters["wire_bytes_model"] = model;
  state.counters["algbw"] = benchmark::Counter(double(bytes) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["busbw"] = benchmark::Counter(double(bytes) / 1e9 * 2.0 * (n - 1) / n, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ranks"] = n;
  state.counters["bytes"] = double(bytes);
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIP: no usable CUDA GPU on this machine\n");
    return 77;
  }
  benchmark::RegisterBenchmark("copy/d2d/bytes:67108864", [](benchmark::State& s) { rocenante_bench::bench_copy(s, big); })->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.1);
  benchmark::RegisterBenchmark("nvfp4/quantize_epilogue/bf16/bytes:67108864/plain",
                               [](benchmark::State& s) { bench_epilogue(s, false); })
      ->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
  // the general lean kernel (rows split over CTAs, 64-bit indices, 61 registers): blocks in flight per thread x
  // CTAs per SM (a sweep of 1/2/4 x 2/4/8/16 on the H200 is in docs/results/h200-2026-12-04/validate-f301f95), and
  // linear scales
  for (auto [f, per_sm, swz] : {std::tuple{1, 8, true}, std::tuple{1, 8, false}}) {
    const std::string name = "nvfp4/quantize_epilogue/bf16/bytes:67108864/plain/rows_kernel" + std::string(swz ? "" : "/linear") +
                             "/in_flight:" + std::to_string(f) + "/ctas_per_sm:" + std::to_string(per_sm);
    benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bench_epilogue(s, false, epi_kernel::rows, per_sm, swz, f); })
        ->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.1);
  }
  // the whole-blocks kernel itself: without and with the next block's loads issued ahead, x CTAs of 256 per SM
  for (int ahead : {0, 1})
    for (int per_sm : {8, 16, 32}) {
      const std::string name = "nvfp4/quantize_epilogue/bf16/bytes:67108864/plain/whole_kernel/ahead:" + std::to_string(ahead) +
                               "/ctas_per_sm:" + std::to_string(per_sm);
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) {
        bench_epilogue(s, false, ahead ? epi_kernel::whole_ahead : epi_kernel::whole, per_sm, true);
      })->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.1);
    }
  benchmark::RegisterBenchmark("nvfp4/quantize_epilogue/bf16/bytes:67108864/residual_rmsnorm",
                               [](benchmark::State& s) { bench_epilogue(s, true); })
      ->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
  benchmark::RegisterBenchmark("nvfp4/quantize/bf16/bytes:67108864", bench_codec)
      ->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
  for (int n : {2, 4})
    for (std::size_t bytes : {49152ul, 262144ul, 1048576ul, 4194304ul, 16777216ul})
      for (bool wire : {false, true}) {
        const std::string name = std::string("all_reduce/") + (wire ? "one_shot_fp4" : "one_shot") +
                                 "/loopback_proxy/bf16/bytes:" + std::to_string(bytes) + "/ranks:" + std::to_string(n);
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bench_all_reduce(s, n, wire, bytes); })
            ->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.05);
      }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

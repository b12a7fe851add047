// copy_bench.cuh — the bar the GPU benchmarks set their bandwidth beside: a device-to-device copy (cudaMemcpyAsync),
// 10 copies per timed iteration between CUDA events, read + write counted (rw_GBps). Not product code.
#pragma once

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace rocenante_bench {

/// Times `copies` device-to-device copies of `bytes` between two events on the default stream; returns milliseconds.
inline float time_d2d_copies(void* dst, const void* src, std::size_t bytes, int copies) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0);
  for (int k = 0; k < copies; ++k) cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms;
}

/// Read + write GB/s of a device-to-device copy of `bytes` (10 copies after one untimed).
inline double copy_rw_gbps(std::size_t bytes) {
  void *a, *b;
  cudaMalloc(&a, bytes);
  cudaMalloc(&b, bytes);
  cudaMemset(a, 1, bytes);
  cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
  const float ms = time_d2d_copies(b, a, bytes, 10);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes * 10 / (ms / 1e3) / 1e9;
}

/// Benchmark body: manual time per copy of `bytes`; counter rw_GBps.
inline void bench_copy(benchmark::State& state, std::size_t bytes) {
  void *a, *b;
  cudaMalloc(&a, bytes);
  cudaMalloc(&b, bytes);
  cudaMemset(a, 1, bytes);
  for (auto _ : state) state.SetIterationTime(time_d2d_copies(b, a, bytes, 10) / 1e3 / 10);
  state.counters["rw_GBps"] = benchmark::Counter(2.0 * bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  cudaFree(a);
  cudaFree(b);
}

}  // namespace rocenante_bench

// copy_bench.cuh — what the GPU benchmarks share: CUDA-event manual time (events around one iteration's work, rank
// streams forked from and joined to a master stream), and the bar they set their bandwidth beside, a
// device-to-device copy (cudaMemcpyAsync), 10 copies per timed iteration between CUDA events, read + write counted
// (rw_GBps). Not product code.
#pragma once

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

namespace rocenante_bench {

/// Milliseconds between `start` and `stop`, recorded on `stream` around what `work()` queues.
template <class Work>
float time_between_events(cudaEvent_t start, cudaEvent_t stop, cudaStream_t stream, Work&& work) {
  cudaEventRecord(start, stream);
  work();
  cudaEventRecord(stop, stream);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  return ms;
}

/// Every rank stream waits for `forked` (an event recorded on the master stream).
inline void fork_streams(cudaEvent_t forked, const std::vector<cudaStream_t>& streams) {
  for (cudaStream_t s : streams) cudaStreamWaitEvent(s, forked, 0);
}

/// `master` waits for everything queued on the rank streams so far, through one event per stream.
inline void join_streams(cudaStream_t master, const std::vector<cudaStream_t>& streams, const std::vector<cudaEvent_t>& done) {
  for (std::size_t r = 0; r < streams.size(); ++r) {
    cudaEventRecord(done[r], streams[r]);
    cudaStreamWaitEvent(master, done[r], 0);
  }
}

/// Times `copies` device-to-device copies of `bytes` between two events on the default stream; returns milliseconds.
inline float time_d2d_copies(void* dst, const void* src, std::size_t bytes, int copies) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const float ms = time_between_events(e0, e1, nullptr, [&] {
    for (int k = 0; k < copies; ++k) cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice);
  });
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

/// Counters of a kernel that moves `bytes` per iteration, beside a copy of `copy_gbps` (copy_rw_gbps): GBps,
/// copy_rw_GBps and vs_copy (GBps / copy_rw_GBps).
inline void set_bandwidth_counters(benchmark::State& state, double bytes, double copy_gbps) {
  state.counters["GBps"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["copy_rw_GBps"] = copy_gbps;
  state.counters["vs_copy"] = benchmark::Counter(bytes / 1e9 / copy_gbps, benchmark::Counter::kIsIterationInvariantRate);
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

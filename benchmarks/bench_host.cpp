// bench_host.cpp — Google Benchmark suite for the host executor over the in-process loopback transport.
//
//   build/benchmarks/bench_host --benchmark_filter='ranks:4' --benchmark_out=bench_host.json --benchmark_out_format=json
//
// Names: <collective>/<algorithm>/loopback/<dtype>/bytes:<N>/ranks:<R>, N = bytes of one rank's input (Google
// Benchmark appends /real_time).
// Each benchmark run starts R-1 peer threads and the benchmark's own thread is rank 0; all construct their
// communicator and do one untimed collective, then every rank runs exactly state.max_iterations collectives back
// to back (rank 0 inside the timed loop). Time is wall-clock (UseRealTime) on rank 0, so it is the throughput of
// back-to-back collectives, peers included. Counters algbw and busbw are GB/s with nccl-tests' formulas:
// busbw = algbw * 2(R-1)/R for all-reduce, algbw * (R-1)/R for all-gather (all-gather algbw counts the gathered
// output, R*N bytes).
//
// These are CPU times of CPU threads (the host executor), not a GPU, NVLink or RoCE performance figure.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <rocenante/rocenante.hpp>

namespace {

using namespace rocenante;

enum class collective_kind { all_reduce, all_gather };

template <class A, class T>
void bm_collective(benchmark::State& state, collective_kind c, std::uint64_t bytes, int ranks) {
  const std::uint64_t count = bytes / sizeof(T);
  const std::uint64_t out_count = c == collective_kind::all_gather ? count * ranks : count;
  options opts;
  opts.capacity_bytes = bytes;
  const auto iterations = state.max_iterations;
  bootstrap::in_process_world world(ranks, std::chrono::seconds(60));
  std::atomic<bool> failed{false};
  std::string error;  // written by rank 0 only

  auto collective = [&](host::communicator<transport::loopback>& comm, const T* in, T* out) {
    if (c == collective_kind::all_gather) {
      if constexpr (A::supports_all_gather) return comm.template all_gather<A>(in, out, count);
      return status::not_supported;
    }
    return comm.template all_reduce<A>(in, out, count);
  };

  std::vector<std::thread> peers;
  for (int r = 1; r < ranks; ++r)
    peers.emplace_back([&, r] {
      try {
        bootstrap::in_process boot(world, r);
        host::communicator<transport::loopback> comm(boot, opts);
        std::vector<T> in(count, reduce::sum<T>::from_accum(1.0f)), out(out_count);
        if (collective(comm, in.data(), out.data()) != status::ok) failed = true;
        for (benchmark::IterationCount i = 0; i < iterations; ++i)
          if (collective(comm, in.data(), out.data()) != status::ok) failed = true;
      } catch (...) {
        failed = true;
      }
    });

  double seconds = 0;
  try {
    bootstrap::in_process boot(world, 0);
    host::communicator<transport::loopback> comm(boot, opts);
    std::vector<T> in(count, reduce::sum<T>::from_accum(1.0f)), out(out_count);
    if (collective(comm, in.data(), out.data()) != status::ok) failed = true;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
      if (collective(comm, in.data(), out.data()) != status::ok) failed = true;
      benchmark::DoNotOptimize(out.data());
      benchmark::ClobberMemory();
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (failed) error = comm.last_error();
  } catch (const std::exception& e) {
    failed = true;
    error = e.what();
  }
  for (auto& t : peers) t.join();
  if (failed) {
    state.SkipWithError(error.empty() ? "a collective failed on a peer rank" : error.c_str());
    return;
  }
  if (seconds > 0 && state.iterations() > 0) {
    const double per_iter = seconds / static_cast<double>(state.iterations());
    const double moved = c == collective_kind::all_gather ? double(bytes) * ranks : double(bytes);
    const double algbw = moved / per_iter / 1e9;
    const double factor = c == collective_kind::all_gather ? double(ranks - 1) / ranks : 2.0 * (ranks - 1) / ranks;
    state.counters["algbw"] = algbw;
    state.counters["busbw"] = algbw * factor;
  }
}

template <class A, class T>
void register_one(collective_kind c, std::uint64_t bytes, int ranks) {
  const std::string name = std::string(c == collective_kind::all_reduce ? "all_reduce/" : "all_gather/") + A::name +
                           "/loopback/" + reduce::sum<T>::name + "/bytes:" + std::to_string(bytes) +
                           "/ranks:" + std::to_string(ranks);
  benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bm_collective<A, T>(s, c, bytes, ranks); })
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
}

template <class T>
void register_type() {
  for (int ranks : {2, 4})
    for (std::uint64_t bytes : {std::uint64_t{4096}, std::uint64_t{49152}, std::uint64_t{1} << 20}) {
      register_one<algorithm::one_shot, T>(collective_kind::all_reduce, bytes, ranks);
      register_one<algorithm::two_shot, T>(collective_kind::all_reduce, bytes, ranks);
      register_one<algorithm::ring, T>(collective_kind::all_reduce, bytes, ranks);
      register_one<algorithm::one_shot, T>(collective_kind::all_gather, bytes, ranks);
    }
}

}  // namespace

int main(int argc, char** argv) {
  register_type<float>();
  register_type<__half>();
  register_type<__nv_bfloat16>();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// bench_gpu.cu — Google Benchmark suite for the fused GPU collectives with several ranks on one GPU (cuda_loopback,
// one stream per rank). Manual time from CUDA events around K collectives per rank; reported per collective.
//
// Names: all_reduce/<algorithm>/loopback/<dtype>/bytes:<N>/ranks:<R>[/graph:1] (algorithm: one_shot, two_shot, ring
// at the same sizes), all_gather/one_shot/..., copy/d2d/bytes:<N> (device-to-device copy bandwidth in the same run,
// read + write counted). Besides the library's algorithms, <algorithm> is a peer row: peer_vllm_one_shot,
// peer_vllm_two_shot, peer_trtllm_lamport_one_shot, the published kernels of vLLM and TensorRT-LLM
// (benchmarks/gpu/peers.cuh; tools/gpu/peer-table.py sets them beside the library's rows).
// Counters: algbw and busbw (GB/s, nccl-tests formulas), and for all-reduce mem_GBps (the one-shot algorithm's
// loads and stores: per rank (n-1)S stage writes + S stage reads + nS reduce reads + S writes; with parts sized for
// L2, options::max_part_bytes, part of them is served by L2 and never reaches HBM).
//
// Run: build/benchmarks/rocenante-bench-gpu --benchmark_out=h200-loopback.json --benchmark_out_format=json
#include <cstdlib>
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <rocenante/gpu/communicator.hpp>
#include <rocenante/host/spawn.hpp>

#include "copy_bench.cuh"
#include "floor.cuh"
#include "peers.cuh"

#include <cstdio>
#include <memory>
#include <type_traits>
#include <string>
#include <vector>

using namespace rocenante;

namespace {

constexpr int collectives_per_iteration = 50;

template <class Transport>
struct world {
  int n;
  std::vector<std::unique_ptr<gpu::communicator<Transport>>> comms;
  std::vector<cudaStream_t> streams;
  cudaStream_t master{};
  cudaEvent_t start{}, stop{}, fork{};
  std::vector<cudaEvent_t> done;
  std::vector<void*> in, out;
  std::size_t capacity;

  /// mode 1: options::lamport_max_bytes = 64 KiB (the Lamport path's rows, beside the default's in the same run);
  /// mode 2: options::symmetric_bytes = cap, every rank's input in its symmetric area (the in-place path's rows).
  world(int ranks, std::size_t cap, int mode = 0)
      : n(ranks), comms(ranks), streams(ranks), done(ranks), in(ranks), out(ranks), capacity(cap) {
    options o = gpu::default_options();
    o.capacity_bytes = cap;
    if (mode == 1) o.lamport_max_bytes = 64 * 1024;
    if (mode == 2) o.symmetric_bytes = cap;
    o.max_parts = ranks == 8 ? 16 : 32;
    if (std::is_same_v<Transport, transport::cuda_loopback>) {
      // Direct windows: messages above CTAs x max_part_bytes are cut into parts small enough that a rank's staged
      // data is read by its peers from L2 (docs/performance.md: ranks on the GPU x CTAs x (n - 1) x part bytes,
      // 24 MiB at 4 ranks). The proxy world keeps one part per CTA (its proxy scans every part's queue).
      o.max_ctas = o.max_parts;
      o.max_parts = 1024;
      o.max_part_bytes = ranks == 8 ? 32768 : 65536;
    }
    // Tuning experiments: ROCENANTE_BENCH_MIN_PART / ROCENANTE_BENCH_MAX_PARTS override the split.
    if (const char* e = std::getenv("ROCENANTE_BENCH_MIN_PART")) o.min_part_bytes = std::strtoull(e, nullptr, 10);
    if (const char* e = std::getenv("ROCENANTE_BENCH_MAX_PARTS")) o.max_parts = static_cast<std::uint32_t>(std::strtoul(e, nullptr, 10));
    // ROCENANTE_BENCH_MAX_CTAS / ROCENANTE_BENCH_MAX_PART_BYTES: CTAs per rank and the part size above which a
    // collective gets more parts than CTAs (options::max_ctas, max_part_bytes).
    if (const char* e = std::getenv("ROCENANTE_BENCH_MAX_CTAS")) o.max_ctas = static_cast<std::uint32_t>(std::strtoul(e, nullptr, 10));
    if (const char* e = std::getenv("ROCENANTE_BENCH_MAX_PART_BYTES")) o.max_part_bytes = std::strtoull(e, nullptr, 10);
    if (o.max_ctas > o.max_parts) o.max_ctas = o.max_parts;
    host::spawn_ranks(n, [&](bootstrap::in_process& b) { comms[b.rank()] = std::make_unique<gpu::communicator<Transport>>(b, o); });
    // ROCENANTE_BENCH_PDL=0 launches without programmatic dependent launch (on by default), for side-by-side runs.
    if (const char* e = std::getenv("ROCENANTE_BENCH_PDL"))
      for (auto& c : comms) c->set_programmatic_launch(std::strtol(e, nullptr, 10) != 0);
    for (int r = 0; r < n; ++r) {
      cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking);
      cudaEventCreateWithFlags(&done[r], cudaEventDisableTiming);
      if (mode == 2) {
        in[r] = comms[r]->symmetric_input().data();  // a window's memory: starts zero, freed with the communicator
      } else {
        cudaMalloc(&in[r], cap);
        cudaMemset(in[r], 0, cap);
      }
      cudaMalloc(&out[r], cap * n);
    }
    cudaStreamCreateWithFlags(&master, cudaStreamNonBlocking);
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
  }
};

template <class Transport>
world<Transport>& get_world(int n, int mode = 0) {
  static std::unique_ptr<world<Transport>> worlds[3][9];
  const std::size_t cap = mode == 1 ? std::size_t{1} << 20 : mode == 2 ? std::size_t{4} << 20
                          : std::is_same_v<Transport, transport::cuda_loopback> ? std::size_t{64} << 20
                                                                                : std::size_t{4} << 20;
  auto& w = worlds[mode][n];
  if (!w) w = std::make_unique<world<Transport>>(n, cap, mode);
  return *w;
}

enum class coll { all_reduce_one_shot, all_reduce_ring, all_gather, all_reduce_two_shot };

template <class T, class W>
status launch(W& w, int r, coll c, std::size_t count) {
  auto& comm = *w.comms[r];
  const T* in = static_cast<const T*>(w.in[r]);
  T* out = static_cast<T*>(w.out[r]);
  switch (c) {
    case coll::all_reduce_one_shot: return comm.template all_reduce<algorithm::one_shot>(in, out, count, w.streams[r]);
    case coll::all_reduce_ring: return comm.template all_reduce<algorithm::ring>(in, out, count, w.streams[r]);
    case coll::all_reduce_two_shot: return comm.template all_reduce<algorithm::two_shot>(in, out, count, w.streams[r]);
    case coll::all_gather: return comm.template all_gather<algorithm::one_shot>(in, out, count, w.streams[r]);
  }
  return status::internal;
}

/// Times K launches per rank: `launch_one(r)` puts one collective of rank r on w.streams[r] and returns false on
/// failure. Graph mode: one graph holds every rank's launches (captured from the master stream, forked to the rank
/// streams and joined back), so that all ranks start together from one launch, as ranks on separate GPUs or nodes
/// would; launching one graph per rank from this one CPU thread would skew the ranks by a launch each.
template <class W, class Launch>
void time_launches(benchmark::State& state, W& w, bool graph, Launch&& launch_one) {
  const int n = w.n;
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g;
    cudaStreamBeginCapture(w.master, cudaStreamCaptureModeThreadLocal);
    cudaEventRecord(w.fork, w.master);
    rocenante_bench::fork_streams(w.fork, w.streams);
    for (int r = 0; r < n; ++r)
      for (int k = 0; k < collectives_per_iteration; ++k)
        if (!launch_one(r)) state.SkipWithError("launch failed under capture");
    rocenante_bench::join_streams(w.master, w.streams, w.done);
    if (cudaStreamEndCapture(w.master, &g) != cudaSuccess || cudaGraphInstantiate(&exec, g, 0) != cudaSuccess)
      state.SkipWithError("graph capture failed");
    cudaGraphDestroy(g);
  }
  for (auto _ : state) {
    const float ms = rocenante_bench::time_between_events(w.start, w.stop, w.master, [&] {
      if (graph) {
        cudaGraphLaunch(exec, w.master);
        return;
      }
      rocenante_bench::fork_streams(w.start, w.streams);
      for (int k = 0; k < collectives_per_iteration; ++k)
        for (int r = 0; r < n; ++r)
          if (!launch_one(r)) state.SkipWithError("launch failed");
      rocenante_bench::join_streams(w.master, w.streams, w.done);
    });
    state.SetIterationTime(ms / 1e3 / collectives_per_iteration);
  }
  if (exec) cudaGraphExecDestroy(exec);
}

template <class T, class Transport = transport::cuda_loopback>
void bench_collective(benchmark::State& state, int n, coll c, std::size_t bytes, bool graph, int mode = 0) {
  auto& w = get_world<Transport>(n, mode);
  transport::proxy_stats before{};
  if constexpr (!std::is_same_v<Transport, transport::cuda_loopback>) before = w.comms[0]->transport().stats();
  const std::size_t count = bytes / sizeof(T);
  time_launches(state, w, graph, [&](int r) {
    if (launch<T>(w, r, c, count) != status::ok) state.SkipWithError(w.comms[r]->last_error().c_str());
    return true;
  });
  for (int r = 0; r < n; ++r) {
    const auto h = w.comms[r]->check_health();
    if (!h.ok()) state.SkipWithError(h.message.c_str());
  }
  const double factor = c == coll::all_gather ? double(n - 1) : 2.0 * (n - 1) / n;
  const double total = c == coll::all_gather ? double(bytes) * n : double(bytes);
  state.counters["pdl"] = w.comms[0]->programmatic_launch() ? 1 : 0;  // programmatic dependent launch (opt-in)
  state.counters["algbw"] = benchmark::Counter(total / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["busbw"] = benchmark::Counter(total / 1e9 * factor, benchmark::Counter::kIsIterationInvariantRate);
  if (c == coll::all_reduce_one_shot)
    state.counters["mem_GBps"] = benchmark::Counter(double(bytes) * (2.0 * n + 1) * n / 1e9,
                                                    benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ranks"] = n;
  state.counters["bytes"] = double(bytes);
  // The launch's shape, to set beside the floor rows' (rank 0; every rank derives the same).
  if (c == coll::all_reduce_two_shot) {
    const auto sp = w.comms[0]->template split_for<T, algorithm::two_shot>(count);
    state.counters["ctas"] = sp.ctas;
    state.counters["parts"] = sp.parts;
  } else if (c != coll::all_reduce_ring) {
    const auto sp = w.comms[0]->template split_for<T>(count);
    state.counters["ctas"] = sp.ctas;
    state.counters["parts"] = sp.parts;
    if (c == coll::all_reduce_one_shot) {
      const bool inplace = algorithm::one_shot::inplace_offset<reduce::sum<T>>(w.comms[0]->device_context().handle,
                                                                              static_cast<const T*>(w.in[0]), static_cast<T*>(w.out[0]),
                                                                              count) != algorithm::one_shot::no_inplace;
      state.counters["path"] = inplace ? int(kernel::reduce_path::inplace) : int(w.comms[0]->template path_for<T>(count));
    }
  }
  if constexpr (!std::is_same_v<Transport, transport::cuda_loopback>) {
    // Where proxy-mode time goes, rank 0's proxy: time inside post (copy + flag) per collective.
    const auto after = w.comms[0]->transport().stats();
    const double colls = double(state.iterations()) * collectives_per_iteration;
    state.counters["proxy_post_us"] = double(after.busy_ns - before.busy_ns) / 1e3 / colls;
    state.counters["proxy_copy_us"] = double(after.copy_ns - before.copy_ns) / 1e3 / colls;
    state.counters["proxy_posts"] = double(after.posts - before.posts) / colls;
    state.counters["proxy_writes"] = double(after.writes - before.writes) / colls;
  }
}

// --- Floors (benchmarks/gpu/floor.cuh): measuring sticks beside the library's rows in the same run. floor/empty: a
// kernel of the collective's grid that does nothing, K per rank stream; floor/one_shot_minimal: the least one-shot
// all-reduce on direct windows. The library's kernel must answer for every microsecond it costs above them. Results
// are checked after timing (a wrong sum skips the row with an error).

/// kind 0: floor/empty; kind 1: floor/one_shot_minimal (bf16, `bytes` per rank), variant `v`: never-run code between
/// its phases or protocol features added (floor.cuh).
void bench_floor(benchmark::State& state, int n, int kind, std::size_t bytes, unsigned ctas, unsigned threads, bool pdl,
                 floor_bench::variant v = {}) {
  auto& w = get_world<transport::cuda_loopback>(n);
  static std::unique_ptr<floor_bench::world> fws[2][floor_bench::max_ranks + 1];  // [staged: host memory]
  auto& slot = fws[v.staged ? 1 : 0][n];
  if (!slot) slot = std::make_unique<floor_bench::world>(n, v.staged);
  auto& fw = *slot;
  const unsigned packets = static_cast<unsigned>(bytes / sizeof(uint4));
  if (kind == 1) {
    if ((packets + ctas - 1) / ctas > threads || packets > floor_bench::cap_packets || ctas > floor_bench::max_parts) {
      state.SkipWithError("shape out of the minimal kernel's range");
      return;
    }
    fw.reset();
    for (int r = 0; r < n; ++r) floor_bench::fill<<<64, 256>>>(static_cast<__nv_bfloat16*>(w.in[r]), packets * 8, 0.25f * (r + 1));
    cudaDeviceSynchronize();
  }
  time_launches(state, w, true, [&](int r) {
    if (kind == 0) return floor_bench::launch(floor_bench::empty_kernel, ctas, threads, w.streams[r], pdl, pdl);
    return floor_bench::launch_minimal(fw, n, r, w.in[r], w.out[r], packets, ctas, threads, w.streams[r], pdl, false, v);
  });
  if (kind == 1) {
    unsigned failed = 0;
    cudaMemcpy(&failed, fw.failed, sizeof failed, cudaMemcpyDeviceToHost);
    const float want = 0.25f * n * (n + 1) / 2;
    std::size_t wrong = 0;
    std::vector<__nv_bfloat16> h(packets * 8);
    for (int r = 0; r < n; ++r) {
      cudaMemcpy(h.data(), w.out[r], h.size() * sizeof(h[0]), cudaMemcpyDeviceToHost);
      for (auto x : h) wrong += __bfloat162float(x) != want;
    }
    state.counters["wrong"] = double(wrong);
    if (failed != 0 || wrong != 0 || cudaGetLastError() != cudaSuccess) state.SkipWithError("minimal one-shot gave a wrong sum or timed out");
  }
  state.counters["ranks"] = n;
  state.counters["ctas"] = ctas;
  state.counters["threads"] = threads;
  state.counters["pdl"] = pdl ? 1 : 0;
  state.counters["bloat_KiB"] = v.bloat;
  state.counters["plus"] = v.plus;
  state.counters["staged"] = v.staged ? 1 : 0;
}

void register_floors() {
  for (int n : {1, 2, 4, 8})
    for (int pdl : {0, 1}) {
      const std::string name = "floor/empty/ranks:" + std::to_string(n) + "/ctas:16/pdl:" + std::to_string(pdl) + "/graph:1";
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bench_floor(s, n, 0, 0, 16, 512, pdl); })
          ->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.05);
    }
  for (int n : {2, 4, 8})
    for (std::size_t bytes : {8192ul, 49152ul})
      for (unsigned threads : {256u, 512u})
        for (int pdl : {0, 1}) {
          const std::string name = "floor/one_shot_minimal/bf16/bytes:" + std::to_string(bytes) + "/ranks:" + std::to_string(n) +
                                   "/ctas:16/threads:" + std::to_string(threads) + "/pdl:" + std::to_string(pdl) + "/graph:1";
          benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bench_floor(s, n, 1, bytes, 16, threads, pdl); })
              ->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.05);
        }
  // The library's own shapes at 48 KiB: min_part_bytes 3072 (the default: 16 parts of 192 packets, one CTA of 192
  // threads each) and 4096 (12 parts of 256 packets; ROCENANTE_BENCH_MIN_PART=4096, the default before s11).
  for (int n : {2, 4, 8})
    for (unsigned ctas : {12u, 16u}) {
      const unsigned threads = 3072 / ctas;
      const std::string name = "floor/one_shot_minimal/bf16/bytes:49152/ranks:" + std::to_string(n) + "/ctas:" +
                               std::to_string(ctas) + "/threads:" + std::to_string(threads) + "/pdl:1/graph:1";
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bench_floor(s, n, 1, 49152, ctas, threads, true); })
          ->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.05);
    }
  // The instruction-fetch experiment (never-run code between the phases) and the protocol's features added one by
  // one (vote, checked poll, finish barrier; 7 = all three): floor.cuh.
  for (int n : {2, 4, 8})
    for (std::size_t bytes : {8192ul, 49152ul})
      for (floor_bench::variant v : {floor_bench::variant{4, 0}, floor_bench::variant{16, 0}, floor_bench::variant{0, 1},
                                     floor_bench::variant{0, 2}, floor_bench::variant{0, 4}, floor_bench::variant{0, 7}}) {
        const std::string name = "floor/one_shot_minimal/bf16/bytes:" + std::to_string(bytes) + "/ranks:" + std::to_string(n) +
                                 "/ctas:16/threads:256/pdl:1/" +
                                 (v.bloat != 0 ? "bloat:" + std::to_string(v.bloat) : "plus:" + std::to_string(v.plus)) + "/graph:1";
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bench_floor(s, n, 1, bytes, 16, 256, true, v); })
            ->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.05);
      }
  // Proxy mode's bus traffic with a proxy that costs nothing (floor.cuh, "Staged"): the floor under the
  // all_reduce/one_shot/loopback_proxy rows, whatever the posting design.
  // With plus:8, its pollers back off (floor.cuh, plus_poll_backoff): whether polling across the bus slows it.
  for (int n : {2, 4, 8})
    for (std::size_t bytes : {8192ul, 49152ul})
      for (unsigned plus : {0u, unsigned{floor_bench::plus_poll_backoff}}) {
        const std::string name = "floor/host_staged/bf16/bytes:" + std::to_string(bytes) + "/ranks:" + std::to_string(n) +
                                 "/ctas:16/threads:256/pdl:1/" + (plus != 0 ? "plus:" + std::to_string(plus) + "/" : "") + "graph:1";
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) {
          bench_floor(s, n, 1, bytes, 16, 256, true, floor_bench::variant{0, plus, true});
        })->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.05);
      }
}

// --- Peer rows (benchmarks/gpu/peers.cuh): the published kernels the library is judged against — vLLM's custom
// all-reduce (one and two stages) and TensorRT-LLM's Lamport one-shot — written there from the published algorithms,
// timed in the same world of streams and events, with the same collectives per iteration, as the library's rows.
// They launch with their own published defaults: ROCENANTE_BENCH_MAX_CTAS and ROCENANTE_BENCH_PDL do not apply
// (TRTLLM_ENABLE_PDL=0 turns TensorRT-LLM's programmatic launch off, as it does there). Each row's result is checked
// on four seeded inputs before timing and once after; a wrong sum or a poll that gave up skips the row with an error.

void bench_peer(benchmark::State& state, int n, peer_bench::kind k, std::size_t bytes, bool graph) {
  auto& w = get_world<transport::cuda_loopback>(n);
  static std::unique_ptr<peer_bench::world> pws[peer_bench::max_ranks + 1];
  if (!pws[n]) pws[n] = std::make_unique<peer_bench::world>(n);
  auto& pw = *pws[n];
  const peer_bench::plan p = pw.plan_for(k, bytes, graph);
  if (!pw.error().empty() || !p.error.empty()) {
    state.SkipWithError((pw.error().empty() ? p.error : pw.error()).c_str());
    return;
  }
  if (!pw.reset()) {
    state.SkipWithError(pw.error().c_str());
    return;
  }
  // Seeds 1..4 with their own inputs, so that a buffer or flag left from the collective before shows as a wrong sum
  // (the Lamport row cycles its three buffers in three).
  constexpr unsigned seeds = peer_bench::check_seeds;
  std::size_t wrong = 0;
  for (unsigned seed = 1; seed <= seeds; ++seed) {
    bool ok = pw.fill_inputs(bytes, seed);
    for (int r = 0; r < n && ok; ++r) ok = pw.launch(p, r, w.streams[r]);
    if (!ok || cudaDeviceSynchronize() != cudaSuccess) {
      state.SkipWithError("peer row: a launch of the check before timing failed");
      return;
    }
    wrong += pw.count_wrong(bytes, seed);
  }
  state.counters["wrong"] = double(wrong);
  if (wrong != 0 || pw.failed() != 0) {
    state.SkipWithError(wrong != 0 ? "peer row: wrong sum before timing" : "peer row: a poll gave up before timing");
    return;
  }
  time_launches(state, w, graph, [&](int r) { return pw.launch(p, r, w.streams[r]); });
  const bool synced = cudaDeviceSynchronize() == cudaSuccess;
  wrong = synced ? pw.count_wrong(bytes, seeds) : bytes / 2 * n;
  state.counters["wrong"] = double(wrong);
  if (!synced || wrong != 0 || pw.failed() != 0)
    state.SkipWithError(wrong != 0 ? "peer row: wrong sum after timing" : "peer row: a poll gave up while timed");
  const double factor = 2.0 * (n - 1) / n;
  state.counters["algbw"] = benchmark::Counter(double(bytes) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["busbw"] = benchmark::Counter(double(bytes) / 1e9 * factor, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ranks"] = n;
  state.counters["bytes"] = double(bytes);
  state.counters["ctas"] = p.grid;
  state.counters["threads"] = p.threads;
  state.counters["published_ctas"] = p.published_grid;
  state.counters["capped"] = p.capped ? 1 : 0;
  state.counters["pdl"] = p.pdl ? 1 : 0;
  state.counters["staged"] = p.staged ? 1 : 0;
  state.counters["auto"] = p.chosen ? 1 : 0;  // the published dispatch picks this kernel here
}

void register_peers() {
  for (int n : {2, 4, 8})
    for (std::size_t bytes : {8192ul, 49152ul, 262144ul, 1048576ul, 4194304ul})
      for (int graph : {0, 1})
        for (peer_bench::kind k :
             {peer_bench::kind::vllm_one_shot, peer_bench::kind::vllm_two_shot, peer_bench::kind::trtllm_lamport_one_shot}) {
          const std::string name = std::string("all_reduce/") + peer_bench::name(k) + "/loopback/bf16/bytes:" +
                                   std::to_string(bytes) + "/ranks:" + std::to_string(n) + (graph ? "/graph:1" : "");
          benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bench_peer(s, n, k, bytes, graph); })
              ->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.05);
        }
}

using rocenante_bench::bench_copy;

template <class T>
void register_type(const char* tname, const std::vector<std::size_t>& sizes, const std::vector<int>& ranks, bool with_gather) {
  for (int n : ranks)
    for (std::size_t bytes : sizes)
      for (int graph : {0, 1}) {
        const std::string suffix = std::string("/") + tname + "/bytes:" + std::to_string(bytes) + "/ranks:" + std::to_string(n) +
                                   (graph ? "/graph:1" : "");
        for (coll c : {coll::all_reduce_one_shot, coll::all_reduce_two_shot, coll::all_reduce_ring}) {
          const char* algo = c == coll::all_reduce_ring ? "ring" : c == coll::all_reduce_two_shot ? "two_shot" : "one_shot";
          const std::string name = std::string("all_reduce/") + algo + "/loopback" + suffix;
          benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bench_collective<T>(s, n, c, bytes, graph); })
              ->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.05);
        }
        // one_shot with options::lamport_max_bytes = 64 KiB: its decode-size calls on the Lamport path (the row's
        // `path` counter says which kernel ran)
        if (bytes <= 64 * 1024 && n <= lamport_max_ranks) {
          const std::string name = "all_reduce/one_shot_lamport/loopback" + suffix;
          benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) {
            bench_collective<T>(s, n, coll::all_reduce_one_shot, bytes, graph, 1);
          })->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.05);
        }
        // one_shot and two_shot with every rank's input in its symmetric area (options::symmetric_bytes): the
        // in-place path
        if (bytes <= (std::size_t{4} << 20))
          for (coll c : {coll::all_reduce_one_shot, coll::all_reduce_two_shot}) {
            const std::string name = std::string("all_reduce/") + (c == coll::all_reduce_one_shot ? "one_shot" : "two_shot") +
                                     "_inplace/loopback" + suffix;
            benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bench_collective<T>(s, n, c, bytes, graph, 2); })
                ->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.05);
          }
        if (with_gather && bytes * n <= (std::size_t{64} << 20) * n) {
          const std::string name = "all_gather/one_shot/loopback" + suffix;
          benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bench_collective<T>(s, n, coll::all_gather, bytes, graph); })
              ->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.05);
        }
      }
}

}  // namespace

int main(int argc, char** argv) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);  // ranks share this process's context (docs/api.md)
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);  // and its hardware work queues: one per rank stream (docs/api.md)
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIP: no usable CUDA GPU on this machine\n");
    return 77;
  }
  benchmark::RegisterBenchmark("copy/d2d/bytes:67108864", [](benchmark::State& s) { bench_copy(s, std::size_t{64} << 20); })
      ->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.1);
  const std::vector<std::size_t> sizes = {256, 1024, 8192, 49152, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
  register_type<__nv_bfloat16>("bf16", sizes, {2, 4, 8}, true);
  register_floors();
  register_peers();
  for (std::size_t bytes : {8192ul, 49152ul, 262144ul, 1048576ul})
    for (int graph : {0, 1}) {
      const std::string name = "all_reduce/one_shot/loopback_proxy/bf16/bytes:" + std::to_string(bytes) + "/ranks:4" +
                               (graph ? "/graph:1" : "");
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) {
        bench_collective<__nv_bfloat16, transport::cuda_loopback_proxy>(s, 4, coll::all_reduce_one_shot, bytes, graph);
      })->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.05);
    }
  register_type<__half>("fp16", {8192, 49152, 1 << 20, 64 << 20}, {4}, false);
  register_type<float>("fp32", {8192, 49152, 1 << 20, 64 << 20}, {4}, false);
  benchmark::RegisterBenchmark("copy/d2d/bytes:67108864/after", [](benchmark::State& s) { bench_copy(s, std::size_t{64} << 20); })
      ->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.1);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

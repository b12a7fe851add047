// trace_phases.cu — where the time of one one-shot all-reduce goes: ranks share one GPU (cuda_loopback, one stream
// per rank, one CUDA graph holding every rank's collectives, as benchmarks/gpu/bench_gpu.cu), built with
// ROCENANTE_TRACE_PHASES so that thread 0 of part 0 of every rank stamps each phase of protocol/session.hpp and
// algorithm/one_shot.hpp (SM cycles and %globaltimer ns):
//
//   0 enter begins (input already loading)    1 after enter (epoch read, poison vote)
//   2 payload stored to every peer + barrier  3 flags published
//   4 every peer's flag seen + barrier        5 reduced and stored
//   6 epoch advanced (end of the collective)
//
// and the gap from the end of one collective to the start of the next on the same rank (launch + drain). A
// diagnostic, not a benchmark: the stamps add a few stores to the measured kernel. Prints medians over ranks and
// the last 64 collectives, with and without programmatic dependent launch; then the same for the floor kernel of
// benchmarks/gpu/floor.cuh (the least one-shot) with programmatic launch: plain, with 16 KiB of never-run code
// between its phases (the instruction-fetch experiment), and with the protocol's vote, checked poll and finish barrier.
//
// usage: rocenante-trace-phases [bytes=49152] [ranks=4] [max_parts=16] [capacity_bytes=67108864] [proxy]
// (ROCENANTE_BENCH_MIN_PART=<bytes> sets options::min_part_bytes, the input per CTA). `proxy`: the same over
// cuda_loopback_proxy (host-mapped windows, a CPU proxy thread per rank), programmatic launch off and on, no floor
// rows; there "signal" is the part's count and, in the part that stages last, the call trailer and the doorbell,
// and "wait for peers" holds the proxy's copy and the flags' way back to the GPU. Then the doorbell's own round trip:
// one GPU thread release-stores round i into pinned host-mapped memory (system scope), a CPU thread that polls it
// acquires it and release-stores i into an acknowledgement word, which the GPU thread polls before the next round
// (20,000 rounds in one kernel, CUDA events; half of it is one crossing, GPU -> CPU or CPU -> GPU).
#define ROCENANTE_TRACE_PHASES 1
#include <cuda_runtime.h>

#include <rocenante/gpu/communicator.hpp>
#include <rocenante/host/spawn.hpp>

#include "floor.cuh"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

using namespace rocenante;
using bf16 = __nv_bfloat16;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// One stream, input and output per rank, and a graph that holds every rank's `per_graph` launches (captured from
/// a master stream, forked and joined, as benchmarks/gpu/bench_gpu.cu does); replay() returns the time per
/// collective (us, mean of the second half of `replays` launches), or a negative value if a launch or the capture
/// failed.
struct graph_world {
  int n;
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> done;
  std::vector<void*> in, out;
  cudaStream_t master{};
  cudaEvent_t fork{}, e0{}, e1{};
  graph_world(int ranks, std::size_t bytes) : n(ranks), streams(ranks), done(ranks), in(ranks), out(ranks) {
    cudaStreamCreateWithFlags(&master, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int r = 0; r < n; ++r) {
      cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking);
      cudaEventCreateWithFlags(&done[r], cudaEventDisableTiming);
      cudaMalloc(&in[r], bytes);
      cudaMalloc(&out[r], bytes);
      cudaMemset(in[r], 0, bytes);
    }
  }
  /// Streams and events too: every run builds a world of its own, and CUDA maps every stream of the process onto
  /// the context's hardware work queues (gpu/topology.hpp, work_queues), so earlier runs' streams are not kept.
  ~graph_world() {
    for (int r = 0; r < n; ++r) {
      cudaFree(in[r]), cudaFree(out[r]);
      cudaStreamDestroy(streams[r]);
      cudaEventDestroy(done[r]);
    }
    cudaStreamDestroy(master);
    cudaEventDestroy(fork);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
  /// launch(r) puts one collective of rank r on streams[r]; false: it failed (the message is printed by it).
  template <class Launch>
  double replay(int per_graph, int replays, Launch&& launch) {
    cudaGraph_t g;
    cudaGraphExec_t exec;
    cudaStreamBeginCapture(master, cudaStreamCaptureModeThreadLocal);
    cudaEventRecord(fork, master);
    bool ok = true;
    for (int r = 0; r < n; ++r) {
      cudaStreamWaitEvent(streams[r], fork, 0);
      for (int k = 0; k < per_graph && ok; ++k) ok = launch(r);
      cudaEventRecord(done[r], streams[r]);
      cudaStreamWaitEvent(master, done[r], 0);
    }
    if (cudaStreamEndCapture(master, &g) != cudaSuccess || !ok || cudaGraphInstantiate(&exec, g, 0) != cudaSuccess) {
      std::printf("graph capture failed\n");
      return -1;
    }
    float total_ms = 0;
    for (int i = 0; i < replays; ++i) {
      cudaEventRecord(e0, master);
      cudaGraphLaunch(exec, master);
      cudaEventRecord(e1, master);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (i >= replays / 2) total_ms += ms;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    return total_ms * 1e3 / (replays / 2) / per_graph;
  }
};

template <class Transport = transport::cuda_loopback>
int run(std::size_t bytes, int n, std::uint32_t max_parts, std::size_t capacity, bool pdl) {
  constexpr int per_graph = 50, replays = 40;
  options o = gpu::default_options();
  o.capacity_bytes = std::max(bytes, capacity);
  o.max_parts = max_parts;
  // ROCENANTE_BENCH_MIN_PART: input bytes per CTA below which the call is not split further (as in bench_gpu.cu);
  // ROCENANTE_BENCH_CALL_POST_MAX_BYTES: options::call_post_max_bytes (proxy mode; 0: every call posted per part);
  // ROCENANTE_BENCH_LAMPORT_MAX_BYTES: options::lamport_max_bytes (direct windows: the Lamport path)
  if (const char* e = std::getenv("ROCENANTE_BENCH_MIN_PART")) o.min_part_bytes = std::strtoull(e, nullptr, 10);
  if (const char* e = std::getenv("ROCENANTE_BENCH_CALL_POST_MAX_BYTES")) o.call_post_max_bytes = std::strtoull(e, nullptr, 10);
  if (const char* e = std::getenv("ROCENANTE_BENCH_LAMPORT_MAX_BYTES")) o.lamport_max_bytes = std::strtoull(e, nullptr, 10);
  std::vector<std::unique_ptr<gpu::communicator<Transport>>> comms(n);
  host::spawn_ranks(n, [&](bootstrap::in_process& b) {
    comms[b.rank()] = std::make_unique<gpu::communicator<Transport>>(b, o);
  });
  const std::size_t count = bytes / sizeof(bf16);
  for (int r = 0; r < n; ++r) comms[r]->set_programmatic_launch(pdl);
  graph_world w(n, bytes);
  transport::proxy_stats p0{};
  if constexpr (requires { comms[0]->transport().stats().writes; }) p0 = comms[0]->transport().stats();
  const double per_coll_us = w.replay(per_graph, replays, [&](int r) {
    if (comms[r]->all_reduce(static_cast<const bf16*>(w.in[r]), static_cast<bf16*>(w.out[r]), count, w.streams[r]) == status::ok)
      return true;
    std::printf("launch failed: %s\n", comms[r]->last_error().c_str());
    return false;
  });
  if (per_coll_us < 0) return 1;
  transport::proxy_stats p1{};
  if constexpr (requires { comms[0]->transport().stats().writes; }) p1 = comms[0]->transport().stats();
  // phases (medians over ranks x the last 64 collectives, excluding each graph's first collective)
  std::vector<double> d_clk[7], d_ns[7], gap_ns, whole_ns, start_ns, start_gap_ns;
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  // Every rank's failure, not only the first: a rank stuck in one call and its peers timing out in the next name
  // different sequences and words, and only together do they say which rank stopped where.
  bool healthy = true;
  for (int r = 0; r < n; ++r)
    if (const host::health h = comms[r]->check_health(); !h.ok()) {
      std::printf("rank %d: %s\n", r, h.message.c_str());
      healthy = false;
    }
  if (!healthy) return 1;
  for (int r = 0; r < n; ++r) {
    protocol::rank_state st;
    cudaMemcpy(&st, comms[r]->device_context().state, sizeof st, cudaMemcpyDeviceToHost);
    const std::uint32_t next = st.seq[0];  // sequence of the next collective
    for (std::uint32_t s = next - 63; s != next; ++s) {
      const auto& t = st.trace[s % protocol::rank_state::trace_slots];
      const auto& tn = st.trace_ns[s % protocol::rank_state::trace_slots];
      for (int k = 1; k < 7; ++k) {
        d_clk[k].push_back(double(t[k] - t[k - 1]));
        d_ns[k].push_back(double(tn[k] - tn[k - 1]));
      }
      whole_ns.push_back(double(tn[6] - tn[0]));
      const auto& p = st.trace_ns[(s - 1) % protocol::rank_state::trace_slots];
      if ((s - o.first_sequence) % per_graph != 0) gap_ns.push_back(double(tn[0]) - double(p[6]));
      // point 7: where the kernel's wait for its stream predecessor returned (the decode-size kernels; 0 elsewhere)
      if (tn[7] != 0) {
        start_ns.push_back(double(tn[0]) - double(tn[7]));
        if ((s - o.first_sequence) % per_graph != 0) start_gap_ns.push_back(double(tn[7]) - double(p[6]));
      }
    }
  }
  static const char* names[7] = {"", "enter (epoch read, vote)", "stage stores + barrier", "signal (fence + flag)",
                                 "wait for peers + barrier", "reduce + store", "finish (epoch)"};
  std::printf("\nbf16 one_shot all-reduce over %s, %zu bytes, %d ranks on one GPU, max_parts %u (%u CTAs), capacity %zu, "
              "graph of %d per rank, programmatic launch %s\n",
              Transport::name, bytes, n, max_parts, comms[0]->template parts_for<bf16>(count), std::size_t(o.capacity_bytes),
              per_graph, pdl ? "on" : "off");
  std::printf("  per collective (events, whole graph / %d): %.2f us\n", per_graph, per_coll_us);
  if (p1.posts != p0.posts) {
    // rank 0's proxy over every collective of the run (the epoch counts them)
    protocol::rank_state st0;
    cudaMemcpy(&st0, comms[0]->device_context().state, sizeof st0, cudaMemcpyDeviceToHost);
    const double calls = double(st0.seq[0] - o.first_sequence);
    std::printf("  proxy of rank 0, per collective: %.2f doorbells (%.2f whole calls), %.2f writes, busy %.2f us "
                "(copying %.2f us, summed over its copy engines), call_post_max_bytes %llu\n",
                double(p1.posts - p0.posts) / calls, double(p1.calls - p0.calls) / calls, double(p1.writes - p0.writes) / calls,
                double(p1.busy_ns - p0.busy_ns) / 1e3 / calls, double(p1.copy_ns - p0.copy_ns) / 1e3 / calls,
                static_cast<unsigned long long>(o.call_post_max_bytes));
  }
  std::printf("  %-28s %10s %10s\n", "phase (part 0, thread 0)", "cycles", "ns (clk)");
  for (int k = 1; k < 7; ++k)
    std::printf("  %-28s %10.0f %10.0f   globaltimer %6.0f ns\n", names[k], median(d_clk[k]),
                median(d_clk[k]) * 1e6 / clock_khz, median(d_ns[k]));
  std::printf("  %-28s %21s   globaltimer %6.0f ns\n", "enter -> end", "", median(whole_ns));
  std::printf("  %-28s %21s   globaltimer %6.0f ns\n", "end -> next enter (gap)", "", median(gap_ns));
  if (!start_ns.empty()) {
    std::printf("  of which:\n");
    std::printf("  %-28s %21s   globaltimer %6.0f ns\n", "end -> next start", "", median(start_gap_ns));
    std::printf("  %-28s %21s   globaltimer %6.0f ns\n", "start -> enter", "", median(start_ns));
    std::printf("  (start: where the kernel's wait for its stream predecessor returned)\n");
  }
  return 0;
}

/// The same table for floor_bench::one_shot_minimal (benchmarks/gpu/floor.cuh: the least one-shot on direct
/// windows, no timeouts, poisoning or signatures) at the same size, ranks and CTAs, 256 threads, so that each
/// phase of the library's kernel has a floor beside it; v: never-run code between its phases or protocol features added (floor.cuh).
int run_floor(std::size_t bytes, int n, std::uint32_t max_parts, bool pdl, floor_bench::variant v = {}) {
  constexpr int per_graph = 50, replays = 40;
  // The library's CTA count for this call (algorithm::part_count with run()'s options: min_part_bytes, max_parts).
  options o = gpu::default_options();
  if (const char* e = std::getenv("ROCENANTE_BENCH_MIN_PART")) o.min_part_bytes = std::strtoull(e, nullptr, 10);
  const unsigned ctas = algorithm::part_count(protocol::ceil_div(bytes, packet_bytes), protocol::ceil_div(o.min_part_bytes, packet_bytes),
                                              max_parts < floor_bench::max_parts ? max_parts : floor_bench::max_parts);
  constexpr unsigned threads = 256;
  const unsigned packets = static_cast<unsigned>(bytes / 16);
  if (n != 2 && n != 4 && n != 8) return 0;
  if ((packets + ctas - 1) / ctas > threads || packets > floor_bench::cap_packets) {
    std::printf("\nfloor: %zu bytes is outside the minimal kernel's range\n", bytes);
    return 0;
  }
  floor_bench::world fw(n);
  graph_world w(n, bytes);
  const double per_coll_us = w.replay(per_graph, replays, [&](int r) {
    if (floor_bench::launch_minimal(fw, n, r, w.in[r], w.out[r], packets, ctas, threads, w.streams[r], pdl, true, v)) return true;
    std::printf("floor launch failed\n");
    return false;
  });
  if (per_coll_us < 0) return 1;
  unsigned failed = 0;
  cudaMemcpy(&failed, fw.failed, sizeof failed, cudaMemcpyDeviceToHost);
  if (failed != 0) {
    std::printf("floor: %u waits ran past their bound\n", failed);
    return 1;
  }
  std::vector<double> d_ns[7], gap_ns, whole_ns;
  const unsigned next = static_cast<unsigned>(replays) * per_graph;  // epoch after the last collective
  for (int r = 0; r < n; ++r) {
    std::vector<unsigned long long> tr(floor_bench::trace_slots * 7);
    cudaMemcpy(tr.data(), fw.trace[r], tr.size() * sizeof(tr[0]), cudaMemcpyDeviceToHost);
    for (unsigned s = next - 63; s != next; ++s) {
      const unsigned long long* t = &tr[(s % floor_bench::trace_slots) * 7];
      const unsigned long long* p = &tr[((s - 1) % floor_bench::trace_slots) * 7];
      for (int k = 1; k < 7; ++k) d_ns[k].push_back(double(t[k] - t[k - 1]));
      whole_ns.push_back(double(t[6] - t[0]));
      if (s % per_graph != 0) gap_ns.push_back(double(t[0]) - double(p[6]));
    }
  }
  static const char* names[7] = {"", "epoch read", "stage stores + barrier", "signal (release flag)",
                                 "wait for peers + barrier", "reduce + store", "finish (epoch)"};
  std::printf("\nfloor (benchmarks/gpu/floor.cuh, the least one-shot), %zu bytes, %d ranks, %u CTAs of %u threads, graph of %d "
              "per rank, programmatic launch %s, %d KiB of never-run code between phases, protocol features %u\n", bytes,
              n, ctas, threads, per_graph, pdl ? "on" : "off", v.bloat, v.plus);
  std::printf("  per collective (events, whole graph / %d): %.2f us\n", per_graph, per_coll_us);
  for (int k = 1; k < 7; ++k) std::printf("  %-28s %21s   globaltimer %6.0f ns\n", names[k], "", median(d_ns[k]));
  std::printf("  %-28s %21s   globaltimer %6.0f ns\n", "enter -> end", "", median(whole_ns));
  std::printf("  %-28s %21s   globaltimer %6.0f ns\n", "end -> next enter (gap)", "", median(gap_ns));
  return 0;
}

}  // namespace

__global__ void doorbell_ping(std::uint64_t* bell, std::uint64_t* ack, std::uint64_t rounds, unsigned* failed) {
  const std::uint64_t t0 = detail::now_ns();
  for (std::uint64_t i = 1; i <= rounds; ++i) {
    detail::store_release(bell, i);
    while (detail::load_acquire(ack) != i)
      if (detail::now_ns() - t0 > 10'000'000'000ull) {
        *failed = 1;
        return;
      }
  }
}

/// The doorbell round trip (file header), median of 5 kernels of `rounds` rounds; the CPU thread spins.
int run_doorbell() {
  constexpr std::uint64_t rounds = 20000;
  std::uint64_t* words = nullptr;  // [0] bell, [16] ack: separate cache lines
  unsigned* failed = nullptr;
  if (cudaHostAlloc(reinterpret_cast<void**>(&words), 256, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess ||
      cudaMalloc(&failed, sizeof(unsigned)) != cudaSuccess)
    return 1;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> us;
  unsigned f = 0;
  for (int k = 0; k < 5 && f == 0; ++k) {
    std::memset(words, 0, 256);
    cudaMemset(failed, 0, sizeof(unsigned));
    cudaDeviceSynchronize();
    std::atomic<bool> stop{false};
    std::thread cpu([&] {
      std::uint64_t seen = 0;
      while (seen < rounds && !stop.load(std::memory_order_relaxed)) {
        const std::uint64_t b = detail::load_acquire(words);
        if (b != seen) {
          seen = b;
          detail::store_release(words + 16, b);
        }
      }
    });
    cudaEventRecord(e0);
    doorbell_ping<<<1, 1>>>(words, words + 16, rounds, failed);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    stop = true;
    cpu.join();
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    us.push_back(double(ms) * 1e3 / double(rounds));
    cudaMemcpy(&f, failed, sizeof f, cudaMemcpyDeviceToHost);
  }
  if (f == 0)
    std::printf("\ndoorbell round trip (GPU -> host-mapped word -> CPU thread -> host-mapped word -> GPU), %llu rounds "
                "per kernel, median of %zu kernels: %.3f us (one crossing ~ %.3f us)\n",
                static_cast<unsigned long long>(rounds), us.size(), median(us), median(us) / 2);
  else
    std::printf("\ndoorbell round trip: the CPU thread did not acknowledge within 10 s\n");
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(failed);
  cudaFreeHost(words);
  return f == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);  // ranks as threads: a hardware work queue each (docs/api.md)
  int dev_count = 0;
  if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  const std::size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 49152;
  const int n = argc > 2 ? std::atoi(argv[2]) : 4;
  const std::uint32_t parts = argc > 3 ? static_cast<std::uint32_t>(std::atoi(argv[3])) : 16;
  const std::size_t cap = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : std::size_t{64} << 20;
  if (argc > 5 && std::string(argv[5]) == "proxy")
    return run<transport::cuda_loopback_proxy>(bytes, n, parts, cap, false) |
           run<transport::cuda_loopback_proxy>(bytes, n, parts, cap, true) | run_doorbell();
  int rc = run(bytes, n, parts, cap, false);
  rc |= run(bytes, n, parts, cap, true);
  rc |= run_floor(bytes, n, parts, true);
  rc |= run_floor(bytes, n, parts, true, {16, 0});  // the instruction-fetch experiment (floor.cuh)
  rc |= run_floor(bytes, n, parts, true, {0, 7});   // with the protocol's vote, checked poll and finish barrier
  return rc;
}

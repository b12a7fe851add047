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
// usage: [ROCENANTE_BENCH_CALL_POST_MAX_BYTES=<bytes>] rocenante-trace-phases [bytes=49152] [ranks=4] [max_parts=16]
//        [capacity_bytes=67108864] [proxy]
// (ROCENANTE_BENCH_MIN_PART=<bytes> sets options::min_part_bytes, the input per CTA). `proxy`: the same over
// cuda_loopback_proxy (host-mapped windows, a CPU proxy thread per rank), programmatic launch off and on; there
// "signal" is the part's count and, in the part that stages last, the call trailer and the doorbell, and "wait for
// peers" holds the proxy's copy and the flags' way back to the GPU; after the doorbell's round trip (below), the
// staged floor (floor.cuh: the same bytes across the bus, with a proxy that costs nothing). ROCENANTE_BENCH_CALL_POST_MAX_BYTES
// sets options::call_post_max_bytes: 0 posts every call per part (a descriptor per part and peer), 1048576 posts
// calls of up to 1 MiB once (one doorbell, rung by the part that counts last); ROCENANTE_PROXY_COPY_ENGINES as in
// transport/loopback_proxy.hpp. Then the doorbell's own round trip: one GPU thread release-stores round i into
// pinned host-mapped memory (system scope), a CPU thread that polls it acquires it and release-stores i into an
// acknowledgement word, which the GPU thread polls before the next round (20,000 rounds in one kernel, CUDA events;
// half of it is one crossing, GPU -> CPU or CPU -> GPU).
//
// Proxy mode, the timeline. Part 0's phases cannot say where a call posted once spends its "wait for peers" (when the
// part that stages last rang the doorbell, when each proxy took it and stored each flag, when each flag was seen),
// so each proxy run also prints the call across ranks: every part of every rank stamps %globaltimer
// (protocol::rank_state::timeline: its staging's end; posted once its count and, the last part, the doorbell after
// the trailer; per part each descriptor published; each waiting thread the moment it saw its peer's flag), and each
// rank's proxy thread stamps the host clock (transport::proxy_timeline: each descriptor taken, each copy done, each
// flag stored, the start of the poll that took it and of the one before, the idle policy's yields). Ranks share one
// GPU, so their stamps compare directly; the host stamps are mapped onto %globaltimer by a calibration just before
// and just after the run, the offset between them interpolated: a one-thread kernel reads %globaltimer each time the
// CPU asks through a host-mapped word and answers through another (2,000 rounds); the CPU's clock read before the
// request (h0) and after the answer (h1) bound the reading g, so the offset lies in [g - h1, g + timer step - h0] in
// every round, and the intersection over rounds (its midpoint +- half its width; the fastest round's where they do
// not meet) is printed with its drift over the run. Every figure is a median over the last 63 collectives, per rank
// and over ranks ("all"), in ns:
//   posted once, per rank: its part 0's enter after the first rank's; the parts' staging ends and their counts (the
//     system-scope add of session::post_call), first .. last; the doorbell, and (d-c) its trailer and descriptor after
//     the last part's count; the proxy's pickup after the doorbell, the gap between the starts of the poll that took
//     it and the one before / yields; its busy time (pickup to last flag stored); each peer's flag stored after the
//     pickup, in delivery order; part 0's wait ended (trace point 4), all from the rank's part 0 enter;
//   per part, per rank: the same enter and staging; the first and the last descriptor published; part 0's
//     descriptors after its staging, in posting order; the proxy's pickup of the first and of the last descriptor;
//     the poll gap; busy (first pickup to last flag); the last flag stored; part 0's wait ended;
//   both, per receiving rank and peer: the peer's flag seen by the first and by the last part after the peer's
//     doorbell (per part: after its last descriptor for the rank), after the peer's proxy stored it (its way back),
//     and when the last part saw it; the same by the order in which the peer's proxy delivers (per part: the order
//     in which a part posts); then part 0's wait split at the peer whose flag it saw last: from part 0's post to
//     that peer's doorbell (per part: its part 0's descriptor for the rank), pickup, copies until the flag stored,
//     the way back, the barrier.
// The timeline's stamps are stores to device memory (no fence) in every part, and two host clock reads per
// descriptor and peer in the proxy: they lengthen its busy time a little, most where calls are posted per part.
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

/// Clock calibration (file header), round i of `rounds`: the CPU stamps h0 and release-stores i into words[0]; this
/// thread, polling it, reads %globaltimer into words[16] and then release-stores i into words[32]; the CPU, polling
/// that, stamps h1. So the GPU's reading g was taken between h0 and h1 of the host clock. words[48]: the timer's
/// update step, seen here first (g may lag the true time by up to one step).
__global__ void clock_probe(std::uint64_t* words, std::uint64_t rounds, unsigned* failed) {
  const std::uint64_t a = detail::now_ns();
  std::uint64_t b = a, c = a;
  while ((b = detail::now_ns()) == a) {
  }
  while ((c = detail::now_ns()) == b) {
  }
  words[48] = c - b;  // read after the kernel
  for (std::uint64_t i = 1; i <= rounds; ++i) {
    while (detail::load_acquire(words) != i)
      if (detail::now_ns() - c > 10'000'000'000ull) {
        *failed = 1;
        return;
      }
    detail::store_relaxed(words + 16, detail::now_ns());
    detail::store_release(words + 32, i);
  }
}

/// The host clock of the proxy's stamps (detail::now_ns() on the host: steady_clock) against %globaltimer: offset =
/// globaltimer - host clock, known to lie within +- error_ns. Each round says the offset is in [g - h1, g + step - h0]
/// (clock_probe); the bound kept is the intersection of every round's interval, which is narrower than the fastest
/// round's alone when the two crossings' shares of the round trips vary; where they do not intersect (a clock that
/// drifted within the rounds) it is the fastest round's midpoint, +- half its round trip.
struct clock_fit {
  bool ok = false;
  std::int64_t offset_ns = 0;  ///< globaltimer - host clock (int64: globaltimer counts from 1970, a double loses ns)
  std::int64_t error_ns = 0;
  std::uint64_t host_ns = 0;   ///< host clock in the middle of the calibration
  std::uint64_t best_rtt_ns = 0, step_ns = 0;
  bool intersected = false;
};

clock_fit calibrate_clocks() {
  constexpr std::uint64_t rounds = 2000;
  clock_fit f;
  std::uint64_t* words = nullptr;  // [0] request, [16] globaltimer, [32] acknowledgement, [48] step: separate lines
  unsigned* failed = nullptr;
  cudaStream_t st{};
  if (cudaHostAlloc(reinterpret_cast<void**>(&words), 512, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess)
    return f;
  if (cudaMalloc(&failed, sizeof(unsigned)) != cudaSuccess || cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) {
    cudaFreeHost(words);
    if (failed) cudaFree(failed);
    return f;
  }
  std::memset(words, 0, 512);
  cudaMemset(failed, 0, sizeof(unsigned));
  cudaDeviceSynchronize();
  clock_probe<<<1, 1, 0, st>>>(words, rounds, failed);
  std::int64_t lo = INT64_MIN, hi = INT64_MAX, best_mid = 0;
  std::uint64_t best = ~std::uint64_t{0}, first_h = 0, last_h = 0;
  bool answered = true;
  struct round_t {
    std::uint64_t h0, h1, g;
  };
  std::vector<round_t> got;
  got.reserve(rounds);
  for (std::uint64_t i = 1; i <= rounds && answered; ++i) {
    const std::uint64_t h0 = detail::now_ns();
    detail::store_release(words, i);
    while (detail::load_acquire(words + 32) != i)
      if (detail::now_ns() - h0 > 1'000'000'000ull) {
        answered = false;
        break;
      }
    const std::uint64_t h1 = detail::now_ns();
    if (answered) got.push_back({h0, h1, detail::load_relaxed(words + 16)});
  }
  const bool done = cudaStreamSynchronize(st) == cudaSuccess;
  unsigned bad = 0;
  cudaMemcpy(&bad, failed, sizeof bad, cudaMemcpyDeviceToHost);
  if (answered && done && bad == 0 && !got.empty()) {
    f.step_ns = words[48];
    for (const round_t& r : got) {
      const std::int64_t a = static_cast<std::int64_t>(r.g - r.h1), b = static_cast<std::int64_t>(r.g + f.step_ns - r.h0);
      lo = std::max(lo, a);
      hi = std::min(hi, b);
      if (r.h1 - r.h0 < best) {
        best = r.h1 - r.h0;
        best_mid = a + (b - a) / 2;
      }
    }
    first_h = got.front().h0;
    last_h = got.back().h1;
    f.ok = true;
    f.best_rtt_ns = best;
    f.host_ns = first_h + (last_h - first_h) / 2;
    f.intersected = lo <= hi;
    f.offset_ns = f.intersected ? lo + (hi - lo) / 2 : best_mid;
    f.error_ns = f.intersected ? (hi - lo + 1) / 2 : static_cast<std::int64_t>(best + f.step_ns + 1) / 2;
  }
  cudaStreamDestroy(st);
  cudaFree(failed);
  cudaFreeHost(words);
  return f;
}

/// Host clock -> %globaltimer, the offset interpolated between the calibrations before (c0) and after (c1) the run.
struct clock_map {
  clock_fit c0, c1;
  std::int64_t to_gpu(std::uint64_t h) const {
    if (!c1.ok || c1.host_ns == c0.host_ns) return static_cast<std::int64_t>(h) + c0.offset_ns;
    const double w = double(static_cast<std::int64_t>(h - c0.host_ns)) / double(c1.host_ns - c0.host_ns);
    return static_cast<std::int64_t>(h) + c0.offset_ns + static_cast<std::int64_t>(w * double(c1.offset_ns - c0.offset_ns));
  }
};

/// b - a for two stamps of one clock, as a signed ns count.
double ns(std::uint64_t a, std::uint64_t b) { return double(static_cast<std::int64_t>(b - a)); }
double ns(std::uint64_t a, std::int64_t b) { return double(b - static_cast<std::int64_t>(a)); }
double ns(std::int64_t a, std::uint64_t b) { return double(static_cast<std::int64_t>(b) - a); }

/// Medians of named columns, per rank and over every rank (row n).
struct columns {
  int n;
  std::vector<std::vector<std::vector<double>>> v;  // [rank or n][column]
  columns(int ranks, int cols) : n(ranks), v(ranks + 1, std::vector<std::vector<double>>(cols)) {}
  void add(int r, int c, double x) {
    v[r][c].push_back(x);
    v[n][c].push_back(x);
  }
  double at(int r, int c) const { return median(v[r][c]); }
};

/// The proxy-mode timeline (file header) of the last 63 collectives: every rank's GPU stamps (rank_state::timeline,
/// %globaltimer) and its proxy's host stamps (transport::proxy_timeline) on one axis through `clk`. `parts`: the call's.
void print_timeline(const std::vector<std::unique_ptr<protocol::rank_state>>& st,
                    const std::vector<std::unique_ptr<transport::proxy_timeline>>& px, int n, std::uint32_t parts,
                    const clock_map& clk) {
  using protocol::rank_state;
  const std::uint32_t next = st[0]->seq[0];
  const std::uint32_t P = std::min<std::uint32_t>(parts, rank_state::timeline_parts);
  const std::uint32_t PX = std::min<std::uint32_t>(parts, transport::proxy_timeline::parts);
  const int slots = rank_state::trace_slots;
  int used = 0, skipped = 0, once_calls = 0;
  // Whether each collective's stamps are complete: every rank's parts staged, its proxy's entry of that sequence.
  auto complete = [&](std::uint32_t s) {
    const int k = static_cast<int>(s % slots);
    for (int r = 0; r < n; ++r) {
      const auto& e = px[r]->entries[s % transport::proxy_timeline::slots];
      if (e.seq != s || e.taken == 0 || st[r]->trace_ns[k][0] == 0) return false;
      for (std::uint32_t p = 0; p < P; ++p)
        if (st[r]->timeline[k][p].staged == 0) return false;
    }
    return true;
  };
  for (std::uint32_t s = next - 63; s != next; ++s) {
    if (!complete(s)) continue;
    once_calls += st[0]->call[s % slots].posted_once != 0;
  }
  const bool once = once_calls > 0;
  std::printf("\n  timeline of a call %s (ns, medians over the last 63 collectives; each rank's from its part 0's enter, "
              "%%globaltimer; proxy stamps mapped from the host clock)\n",
              once ? "posted once (one doorbell, by the part that counts last)" : "posted per part (a descriptor per part and peer)");
  if (!clk.c0.ok) {
    std::printf("  clock calibration failed: proxy stamps are left out\n");
  } else {
    std::printf("  clocks: globaltimer = host steady_clock + %lld ns +- %lld ns (%s; best round trip %llu ns, timer step "
                "%llu ns); by the run's end %+lld ns +- %lld ns\n",
                static_cast<long long>(clk.c0.offset_ns), static_cast<long long>(clk.c0.error_ns),
                clk.c0.intersected ? "every round's interval" : "the fastest round", static_cast<unsigned long long>(clk.c0.best_rtt_ns),
                static_cast<unsigned long long>(clk.c0.step_ns),
                clk.c1.ok ? static_cast<long long>(clk.c1.offset_ns - clk.c0.offset_ns) : 0LL,
                clk.c1.ok ? static_cast<long long>(clk.c1.error_ns) : -1LL);
  }
  const bool mapped = clk.c0.ok;
  // Columns of the per-rank table.
  enum {
    c_enter, c_staged0, c_staged1, c_counted0, c_counted1, c_doorbell, c_trailer, c_pickup, c_gap, c_yields, c_busy,
    c_desc0, c_desc1, c_pick_first, c_pick_last, c_last_flag, c_wait, c_w_bell, c_w_pick, c_w_stored, c_w_seen, c_w_end,
    c_w_total, c_flag_k, c_part0_desc = c_flag_k + max_ranks, c_count = c_part0_desc + max_ranks
  };
  columns cols(n, c_count);
  // The flag's way back, per receiving rank r and peer q: [r][q][what]; what: 0 seen by the first part after q's
  // doorbell (per part: after q's last descriptor for r), 1 by the last part, 2 first seen after q's proxy stored
  // it (per part: median over parts), 3 when r saw it last, from r's part 0's enter.
  std::vector<std::vector<std::vector<double>>> back(n, std::vector<std::vector<double>>(n * 4));
  std::vector<std::vector<double>> back_k(n * 4);  // the same, by the order k = 1..n-1 in which the peer posts to r
  // A whole call is delivered to peers q+1, q+2, ... in turn (loopback_proxy::post_one); a part posts to its peers
  // in rank order (one_shot::signal_and_wait).
  auto order = [&](int r, int q) { return once ? (r - q + n) % n : (r < q ? r + 1 : r); };
  auto add_back = [&](int r, int q, int what, double x) {
    back[r][q * 4 + what].push_back(x);
    back_k[order(r, q) * 4 + what].push_back(x);
  };
  for (std::uint32_t s = next - 63; s != next; ++s) {
    if (!complete(s)) {
      ++skipped;
      continue;
    }
    ++used;
    const int k = static_cast<int>(s % slots);
    std::uint64_t first_enter = ~std::uint64_t{0};
    for (int r = 0; r < n; ++r) first_enter = std::min(first_enter, st[r]->trace_ns[k][0]);
    for (int r = 0; r < n; ++r) {
      const rank_state& S = *st[r];
      const auto* T = S.timeline[k];
      const auto& C = S.call[k];
      const auto& E = px[r]->entries[s % transport::proxy_timeline::slots];
      const std::uint64_t e0 = S.trace_ns[k][0];
      cols.add(r, c_enter, ns(first_enter, e0));
      std::uint64_t st0 = ~0ull, st1 = 0, ct0 = ~0ull, ct1 = 0;
      for (std::uint32_t p = 0; p < P; ++p) {
        st0 = std::min(st0, T[p].staged), st1 = std::max(st1, T[p].staged);
        if (once) ct0 = std::min(ct0, T[p].counted), ct1 = std::max(ct1, T[p].counted);
      }
      cols.add(r, c_staged0, ns(e0, st0));
      cols.add(r, c_staged1, ns(e0, st1));
      cols.add(r, c_wait, ns(e0, S.trace_ns[k][4]));
      cols.add(r, c_gap, ns(E.poll_before, E.poll));
      cols.add(r, c_yields, double(E.yields));
      if (once) {
        const int first_peer = (r + 1) % n;
        cols.add(r, c_counted0, ns(e0, ct0));
        cols.add(r, c_counted1, ns(e0, ct1));
        cols.add(r, c_doorbell, ns(e0, C.doorbell));
        if (C.last_part < P) cols.add(r, c_trailer, ns(T[C.last_part].counted, C.doorbell));
        if (mapped) cols.add(r, c_pickup, ns(C.doorbell, clk.to_gpu(E.seen[0][first_peer])));
        std::uint64_t done = 0;
        for (int j = 1; j < n; ++j) {
          cols.add(r, c_flag_k + j, ns(E.seen[0][first_peer], E.flagged[0][(r + j) % n]));
          done = std::max(done, E.flagged[0][(r + j) % n]);
        }
        cols.add(r, c_busy, ns(E.seen[0][first_peer], done));
      } else {
        // The first and the last descriptor this rank published, and the proxy's pickup of each.
        std::uint64_t d0 = ~0ull, d1 = 0;
        int p0 = 0, q0 = 0, p1 = 0, q1 = 0;
        for (std::uint32_t p = 0; p < P; ++p)
          for (int q = 0; q < n; ++q) {
            if (q == r) continue;
            const std::uint64_t t = T[p].posted[q];
            if (t < d0) d0 = t, p0 = static_cast<int>(p), q0 = q;
            if (t > d1) d1 = t, p1 = static_cast<int>(p), q1 = q;
          }
        cols.add(r, c_desc0, ns(e0, d0));
        cols.add(r, c_desc1, ns(e0, d1));
        for (int q = 0, j = 0; q < n; ++q)
          if (q != r) cols.add(r, c_part0_desc + ++j, ns(T[0].staged, T[0].posted[q]));
        std::uint64_t seen0 = ~0ull, flag1 = 0;
        for (std::uint32_t p = 0; p < PX; ++p)
          for (int q = 0; q < n; ++q)
            if (q != r && E.seen[p][q] != 0) seen0 = std::min(seen0, E.seen[p][q]), flag1 = std::max(flag1, E.flagged[p][q]);
        cols.add(r, c_busy, ns(seen0, flag1));
        if (mapped) {
          if (static_cast<std::uint32_t>(p0) < PX) cols.add(r, c_pick_first, ns(d0, clk.to_gpu(E.seen[p0][q0])));
          if (static_cast<std::uint32_t>(p1) < PX) cols.add(r, c_pick_last, ns(d1, clk.to_gpu(E.seen[p1][q1])));
          cols.add(r, c_last_flag, ns(e0, clk.to_gpu(flag1)));
        }
      }
      // Part 0's wait (trace points 3 to 4), split at the peer whose flag it saw last: that peer's doorbell (per part:
      // its part 0's descriptor for this rank), its proxy's pickup and flag store, the flag seen, the team barrier.
      if (mapped) {
        int last = -1;
        for (int q = 0; q < n; ++q)
          if (q != r && (last < 0 || T[0].seen[q] > T[0].seen[last])) last = q;
        if (last >= 0) {
          const auto& El = px[last]->entries[s % transport::proxy_timeline::slots];
          const std::uint64_t from = S.trace_ns[k][3];
          const std::uint64_t bell = once ? st[last]->call[k].doorbell : st[last]->timeline[k][0].posted[r];
          const std::int64_t pick = clk.to_gpu(El.seen[0][r]), stored = clk.to_gpu(El.flagged[0][r]);
          cols.add(r, c_w_bell, ns(from, bell));
          cols.add(r, c_w_pick, ns(bell, pick));
          cols.add(r, c_w_stored, double(stored - pick));
          cols.add(r, c_w_seen, ns(stored, T[0].seen[last]));
          cols.add(r, c_w_end, ns(T[0].seen[last], S.trace_ns[k][4]));
          cols.add(r, c_w_total, ns(from, S.trace_ns[k][4]));
        }
      }
      // The flags' way back to rank r.
      for (int q = 0; q < n; ++q) {
        if (q == r) continue;
        const auto& Eq = px[q]->entries[s % transport::proxy_timeline::slots];
        std::uint64_t f0 = ~0ull, f1 = 0;
        for (std::uint32_t p = 0; p < P; ++p) f0 = std::min(f0, T[p].seen[q]), f1 = std::max(f1, T[p].seen[q]);
        if (once) {
          const std::uint64_t bell = st[q]->call[k].doorbell;
          add_back(r, q, 0, ns(bell, f0));
          add_back(r, q, 1, ns(bell, f1));
          if (mapped) add_back(r, q, 2, ns(clk.to_gpu(Eq.flagged[0][r]), f0));
        } else {
          std::uint64_t last_desc = 0;
          std::vector<double> way;
          for (std::uint32_t p = 0; p < P; ++p) {
            last_desc = std::max(last_desc, st[q]->timeline[k][p].posted[r]);
            if (mapped && p < PX && Eq.flagged[p][r] != 0) way.push_back(ns(clk.to_gpu(Eq.flagged[p][r]), T[p].seen[q]));
          }
          add_back(r, q, 0, ns(last_desc, f0));
          add_back(r, q, 1, ns(last_desc, f1));
          if (!way.empty()) add_back(r, q, 2, median(way));
        }
        add_back(r, q, 3, ns(e0, f1));
      }
    }
  }
  if (used == 0) {
    std::printf("  no collective with every stamp (%d incomplete)\n", skipped);
    return;
  }
  auto row_name = [&](int r) { return r == n ? std::string("all") : std::to_string(r); };
  if (once) {
    std::printf("  %4s %7s %15s %15s %15s %7s %13s %7s   %-26s %7s\n", "rank", "enter", "staged f..l", "counted f..l",
                "doorbell (d-c)", "pickup", "poll gap/yld", "busy", "flag stored, k = 1..", "waited");
    for (int r = 0; r <= n; ++r) {
      char flags[64] = "";
      int off = 0;
      for (int j = 1; j < n && off < 56; ++j) off += std::snprintf(flags + off, sizeof flags - off, "%s%.0f", j > 1 ? " " : "", cols.at(r, c_flag_k + j));
      std::printf("  %4s %7.0f %7.0f..%-6.0f %7.0f..%-6.0f %8.0f (%4.0f) %7.0f %7.0f/%-5.0f %7.0f   %-26s %7.0f\n", row_name(r).c_str(),
                  cols.at(r, c_enter), cols.at(r, c_staged0), cols.at(r, c_staged1), cols.at(r, c_counted0),
                  cols.at(r, c_counted1), cols.at(r, c_doorbell), cols.at(r, c_trailer), cols.at(r, c_pickup),
                  cols.at(r, c_gap), cols.at(r, c_yields), cols.at(r, c_busy), flags, cols.at(r, c_wait));
    }
    std::printf("  (enter: after the first rank's; f..l: first .. last part; counted: the parts' system-scope count returned; "
                "doorbell: the last part's descriptor stored, d-c: its trailer and descriptor after its count; pickup: the proxy took it, after the "
                "doorbell; poll gap: between the starts of the poll that took it and the one before; busy: the proxy's copies "
                "and flags; flag stored: at each peer in delivery order, after the pickup; waited: part 0's wait + barrier ended)\n");
  } else {
    std::printf("  %4s %7s %15s %15s %23s %13s %13s %7s %9s %7s\n", "rank", "enter", "staged f..l", "descr. f..l",
                "part 0's descr., k = 1..", "pickup f/l", "poll gap/yld", "busy", "last flag", "waited");
    for (int r = 0; r <= n; ++r) {
      char d0[64] = "";
      int off = 0;
      for (int j = 1; j < n && off < 56; ++j) off += std::snprintf(d0 + off, sizeof d0 - off, "%s%.0f", j > 1 ? " " : "", cols.at(r, c_part0_desc + j));
      std::printf("  %4s %7.0f %7.0f..%-6.0f %7.0f..%-6.0f %23s %6.0f/%-6.0f %7.0f/%-5.0f %7.0f %9.0f %7.0f\n", row_name(r).c_str(),
                  cols.at(r, c_enter), cols.at(r, c_staged0), cols.at(r, c_staged1), cols.at(r, c_desc0), cols.at(r, c_desc1),
                  d0, cols.at(r, c_pick_first), cols.at(r, c_pick_last), cols.at(r, c_gap), cols.at(r, c_yields),
                  cols.at(r, c_busy), cols.at(r, c_last_flag), cols.at(r, c_wait));
    }
    std::printf("  (enter: after the first rank's; f..l: first .. last part; descr.: the first and the last descriptor this "
                "rank's parts published; "
                "part 0's: each of its descriptors after its staging, in posting order; pickup: the proxy took the first / "
                "the last descriptor, after it was published; poll gap: before the poll that took the first; busy: the "
                "proxy's first pickup to its last flag; last flag: stored, from part 0's enter; waited: part 0's wait + "
                "barrier ended)\n");
  }
  std::printf("  flags' way back, rank <- peer: seen by the first part / the last part, after the peer's %s; after the "
              "peer's proxy stored it%s; the last part saw it at (from the rank's enter)\n",
              once ? "doorbell" : "last descriptor for the rank", once ? "" : " (median over parts)");
  for (int r = 0; r < n; ++r)
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      std::printf("  %4d <- %-2d %8.0f / %-8.0f stored -> seen %7.0f   at %7.0f   (the peer's %s %d)\n", r, q,
                  median(back[r][q * 4]), median(back[r][q * 4 + 1]), median(back[r][q * 4 + 2]), median(back[r][q * 4 + 3]),
                  once ? "delivery" : "descriptor", order(r, q));
    }
  for (int j = 1; j < n; ++j)
    std::printf("   all, %s %d %8.0f / %-8.0f stored -> seen %7.0f   at %7.0f\n", once ? "delivery  " : "descriptor", j,
                median(back_k[j * 4]), median(back_k[j * 4 + 1]), median(back_k[j * 4 + 2]), median(back_k[j * 4 + 3]));
  if (mapped) {
    std::printf("  part 0's wait, split at the peer whose flag it saw last: its post -> that peer's %s -> the peer "
                "proxy's pickup -> flag stored -> flag seen -> barrier (medians of each; the sum is close to, not exactly, "
                "the median wait)\n", once ? "doorbell" : "part 0's descriptor for the rank");
    std::printf("  %4s %10s %8s %8s %8s %8s %8s\n", "rank", "-> bell", "pickup", "stored", "seen", "barrier", "wait");
    for (int r = 0; r <= n; ++r)
      std::printf("  %4s %10.0f %8.0f %8.0f %8.0f %8.0f %8.0f\n", row_name(r).c_str(), cols.at(r, c_w_bell),
                  cols.at(r, c_w_pick), cols.at(r, c_w_stored), cols.at(r, c_w_seen), cols.at(r, c_w_end), cols.at(r, c_w_total));
  }
  if (skipped) std::printf("  (%d of the 63 collectives left out: a stamp missing)\n", skipped);
}

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
  // Proxy mode: the host clock against %globaltimer, before and after the run (the proxy's stamps are host time).
  constexpr bool timeline = requires { comms[0]->transport().timeline(); };
  clock_map clk;
  if constexpr (timeline) clk.c0 = calibrate_clocks();
  const double per_coll_us = w.replay(per_graph, replays, [&](int r) {
    if (comms[r]->all_reduce(static_cast<const bf16*>(w.in[r]), static_cast<bf16*>(w.out[r]), count, w.streams[r]) == status::ok)
      return true;
    std::printf("launch failed: %s\n", comms[r]->last_error().c_str());
    return false;
  });
  if (per_coll_us < 0) return 1;
  if constexpr (timeline) clk.c1 = calibrate_clocks();
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
  if constexpr (timeline) {
    std::vector<std::unique_ptr<protocol::rank_state>> st(n);
    std::vector<std::unique_ptr<transport::proxy_timeline>> px(n);
    for (int r = 0; r < n; ++r) {
      st[r] = std::make_unique<protocol::rank_state>();
      cudaMemcpy(st[r].get(), comms[r]->device_context().state, sizeof(protocol::rank_state), cudaMemcpyDeviceToHost);
      // The proxies are idle: every flag of the run was seen (the graph completed) and the calibration after it took
      // milliseconds, long past their last stamps.
      px[r] = std::make_unique<transport::proxy_timeline>(*comms[r]->transport().timeline());
    }
    print_timeline(st, px, n, comms[0]->template parts_for<bf16>(count), clk);
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
  floor_bench::world fw(n, v.staged);
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
  std::printf("\nfloor (benchmarks/gpu/floor.cuh, the least one-shot%s), %zu bytes, %d ranks, %u CTAs of %u threads, graph of %d "
              "per rank, programmatic launch %s, %d KiB of never-run code between phases, protocol features %u\n",
              v.staged ? ", staged in host memory and read there: proxy mode's bus traffic" : "", bytes, n, ctas, threads,
              per_graph, pdl ? "on" : "off", v.bloat, v.plus);
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
           run<transport::cuda_loopback_proxy>(bytes, n, parts, cap, true) | run_doorbell() |
           run_floor(bytes, n, parts, true, floor_bench::variant{0, 0, true}) |  // the bus's floor (floor.cuh, "Staged")
           run_floor(bytes, n, parts, true, floor_bench::variant{0, floor_bench::plus_poll_backoff, true});
  int rc = run(bytes, n, parts, cap, false);
  rc |= run(bytes, n, parts, cap, true);
  rc |= run_floor(bytes, n, parts, true);
  rc |= run_floor(bytes, n, parts, true, {16, 0});  // the instruction-fetch experiment (floor.cuh)
  rc |= run_floor(bytes, n, parts, true, {0, 7});   // with the protocol's vote, checked poll and finish barrier
  return rc;
}

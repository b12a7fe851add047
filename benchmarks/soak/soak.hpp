// benchmarks/soak/soak.hpp — what rocenante-soak's translation units share: the command line, the seeded call
// sequence, the inputs and the exact check, the executor interface the loop drives, the loop itself (run_rank:
// fail-stop rebuilds, the receipt), and what ranks as threads of one process share (thread_world). The host
// executor, the launcher and main live in rocenante_soak.cpp; the GPU executors (eager and CUDA-graph calls
// through gpu::selected_communicator or gpu::communicator<cuda_loopback>) in gpu.cu, compiled and linked only in
// builds with nvcc (ROCENANTE_SOAK_GPU=1).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <rocenante/algorithm/concepts.hpp>
#include <rocenante/bootstrap/in_process.hpp>
#include <rocenante/bootstrap/tcp.hpp>
#include <rocenante/core/status.hpp>
#include <rocenante/reduce/sum.hpp>

namespace rocenante::soak {

using clk = std::chrono::steady_clock;

// ---- command line ---------------------------------------------------------------------------------------------

struct config {
  double seconds = 60;
  std::uint64_t seed = 2026;
  std::uint64_t timeout_ms = 20000;
  std::uint64_t min_bytes = 16;
  std::uint64_t max_bytes = 4u << 20;
  std::vector<double> weights = {50, 30, 15, 4.8, 0.2};  // per size bucket, see buckets
  double gather_share = 0.2;
  int max_rebuilds = 30;
  std::string json;
  long corrupt_call = -1;  // self-test: rank 1 flips one output byte of this call (the checker must count it)
  long list_from = -1, list_to = -1;  // --list-calls: print the choices of these calls and exit
  // GPU executor
  bool gpu = false;          // --gpu: gpu::selected_communicator per process, or gpu::communicator per thread
  int threads = 0;           // --threads N: N GPU ranks as threads of this process (cuda_loopback on GPU 0)
  double graph_share = -1;   // share of calls replayed from a CUDA graph (-1: 0.3 with --gpu, else 0)
  int graph_cache = 128;     // CUDA graphs kept per rank (least recently used evicted)
  bool pdl = false;          // programmatic dependent launch on (gpu: set_programmatic_launch)
  // launcher
  int launch = 0;
  int port = 0;
  double pause_mean_s = 10;
  double pause_min_ms = 50;
  double pause_max_ms = 0;  // 0: timeout / 4
  std::string hca_prefix;
  std::vector<std::string> argv;
};

/// Seconds after which the launcher (or the threads' controller) gives up on the ranks: the soak, plus rebuilds
/// (each at most a timeout to notice and the bootstrap's connect), plus slack.
inline double run_deadline_s(const config& c) {
  return c.seconds + static_cast<double>(c.max_rebuilds + 3) * static_cast<double>(c.timeout_ms) / 1000 + 300;
}

// ---- the call sequence ----------------------------------------------------------------------------------------

struct bucket_def {
  const char* name;
  std::uint64_t lo, hi;  // bytes per rank, [lo, hi]
};
inline constexpr bucket_def buckets[5] = {{"16B-256B", 16, 255},
                                          {"256B-4K", 256, 4095},
                                          {"4K-64K", 4096, 65535},
                                          {"64K-1M", 65536, 1048575},
                                          {"1M-4M", 1048576, 4194304}};
inline constexpr int n_buckets = 5;

struct call_choice {
  bool gather = false;
  dtype type = dtype::f32;
  algorithm::algo algo = algorithm::algo::one_shot;
  std::uint64_t bytes = 16;  // per rank, a multiple of 4 (a whole count in every dtype)
  int bucket = 0;
  bool graph = false;  // GPU: replayed from a CUDA graph of this shape (bytes snapped to a power of two)
};

/// Call k's choices: a function of (seed, k) only, so every rank agrees and a rebuilt rank can resume at any k.
call_choice choose(const config& c, std::uint64_t k);
/// "all_reduce ring bfloat16 1024 B" (and " graph" for a graph call).
std::string describe(const call_choice& ch);

/// Inputs whose sums are exact in every dtype and every order: small integers in [-6, 6].
inline float input_value(int rank, std::size_t i, std::uint64_t k) {
  return static_cast<float>(static_cast<int>((static_cast<std::uint64_t>(rank) * 5 + i % 11 + k) % 13) - 6);
}

/// This rank's input of call k: `count` = ch.bytes / sizeof(T) elements.
template <class T>
void fill_input(const call_choice& ch, std::uint64_t k, int rank, T* in) {
  const std::size_t count = ch.bytes / sizeof(T);
  for (std::size_t i = 0; i < count; ++i) in[i] = reduce::sum<T>::from_accum(input_value(rank, i, k));
}

/// Checks every element of call k's output on an n-rank world against the exact result; `corrupt` first flips one
/// byte (the self-test: the checker must count it). Returns "" when exact, else the first wrong element.
template <class T>
std::string check_output(const call_choice& ch, std::uint64_t k, int n, T* out, bool corrupt) {
  const std::size_t count = ch.bytes / sizeof(T);
  const std::size_t out_count = ch.gather ? count * static_cast<std::size_t>(n) : count;
  if (corrupt) reinterpret_cast<std::uint8_t*>(out)[(out_count * sizeof(T)) / 2] ^= 0x40;
  for (std::size_t i = 0; i < out_count; ++i) {
    float want = 0;
    if (ch.gather) want = input_value(static_cast<int>(i / count), i % count, k);
    else
      for (int q = 0; q < n; ++q) want += input_value(q, i, k);
    const float got = reduce::sum<T>::to_accum(out[i]);
    if (!(got == want)) {
      char buf[240];
      std::snprintf(buf, sizeof buf, "%s: element %zu is %g, expected %g", describe(ch).c_str(), i,
                    static_cast<double>(got), static_cast<double>(want));
      return buf;
    }
  }
  return {};
}

/// f(static_cast<T*>(nullptr)) with T the element type of `t` (fp32, fp16 or bf16).
template <class F>
auto with_type(dtype t, F&& f) {
  switch (t) {
    case dtype::f32: return f(static_cast<float*>(nullptr));
    case dtype::f16: return f(static_cast<__half*>(nullptr));
    default: return f(static_cast<__nv_bfloat16*>(nullptr));
  }
}

// ---- the executor under soak ----------------------------------------------------------------------------------

/// What an executor tells the receipt about itself.
struct exec_facts {
  std::string executor = "host";  // "host" or "gpu"
  std::string mode = "host";      // "host", "gpu-processes" or "gpu-threads"
  std::string gpu, gpu_detail;    // the GPU's name, and its sm, SMs, PCI bus id, CUDA versions
  bool pdl = false;
  std::uint64_t graph_captures = 0, graph_launches = 0, graph_evictions = 0;
};

/// One rank's executor, driven by run_rank. Collective members (build, barrier, all_gather, control, run) are
/// called by every rank in the same order. A call's status other than ok is a fail-stop: run_rank reports it
/// (last_error), calls quiesce and tear_down, and builds the next generation.
class executor {
 public:
  virtual ~executor() = default;
  /// A new bootstrap and communicator of this generation (throws when set-up fails).
  virtual void build(int generation) = 0;
  virtual bool has_bootstrap() const = 0;
  /// After a fail-stop of `generation`, before tear_down: nothing of this rank still runs.
  virtual void quiesce(int generation) { (void)generation; }
  virtual void tear_down() = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string transport() const = 0;
  virtual std::string decision() const = 0;
  virtual void barrier() = 0;
  virtual void all_gather(const void* send, void* recv, std::size_t bytes) = 0;
  /// One-element fp32 all-reduce of `flag` (rank 0's "time is up").
  virtual status control(float flag, float& sum) = 0;
  /// Fills, runs and checks call k: `seconds` is the time around the call (GPU: launch to stream synchronized),
  /// `wrong` the first wrong element ("" when exact).
  virtual status run(const call_choice& ch, std::uint64_t k, bool corrupt, double& seconds, std::string& wrong) = 0;
  /// What went wrong in the last call whose status was not ok.
  virtual std::string last_error() const = 0;
  /// Before every call (ranks as threads: a pause the controller asked for is slept here).
  virtual void before_call() {}
  virtual void facts(exec_facts& f) const { (void)f; }
};

/// One rank's whole soak over `ex` (built here): the loop, the fail-stop rebuilds, the summary exchange, rank 0's
/// receipt (cfg.json). Returns the exit status: 0, 1 (wrong results, a rank stopped) or 4 (fail-stops only).
int run_rank(const config& cfg, executor& ex);

/// bootstrap::tcp from the launcher's variables, on rank 0's port + generation (no rank of an older world joins).
std::unique_ptr<bootstrap::tcp> tcp_bootstrap(int generation);

// ---- ranks as threads of one process (--gpu --threads N) -------------------------------------------------------

struct pause_event {
  double t_s;
  int rank;
  double ms;
};

/// What the rank threads of one in-process soak share: a bootstrap world per generation; two waits that keep their
/// kernels apart (a CUDA-graph instantiation, a teardown after a fail-stop), each ended early when a rank leaves the
/// generation; and the pauses the controller asks for (SIGSTOP would stop every rank of the process: a paused rank's
/// thread sleeps before its next call instead, a slow rank whose peers' kernels wait for it).
class thread_world {
 public:
  thread_world(int ranks, std::chrono::milliseconds timeout, clk::time_point t0);
  int size() const { return n_; }
  /// The bootstrap world of `generation` (made by the first rank to ask).
  bootstrap::in_process_world& world(int generation);
  /// Round `round` of `generation`: ok once every rank arrived; poisoned when a rank left the generation (a
  /// fail-stop there), timeout when the wait ran out.
  status all_arrived(int generation, std::uint64_t round);
  /// This rank leaves `generation` (its stream is synchronized); waits, bounded, until every rank has. True: all left.
  bool leave(int generation);
  /// Controller: rank `rank` sleeps `ms` before its next call.
  void request_pause(int rank, double ms);
  /// Rank thread, between calls: sleeps a pending pause, if any, and logs it.
  void take_pause(int rank);
  std::vector<pause_event> pauses();

 private:
  struct round_count {
    int arrived = 0, departed = 0;
  };
  const int n_;
  const std::chrono::milliseconds timeout_;
  const clk::time_point t0_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, std::unique_ptr<bootstrap::in_process_world>> worlds_;
  std::map<std::pair<int, std::uint64_t>, round_count> rounds_;
  std::map<int, int> left_;
  std::vector<std::atomic<double>> pending_;
  std::vector<pause_event> pauses_;
};

// ---- the GPU executors (gpu.cu; defined only in builds with nvcc) ---------------------------------------------

/// "" when a CUDA GPU is usable here, else why not.
std::string gpu_unavailable();
/// One rank-process: gpu::selected_communicator on GPU rank mod the device count. Exit status as run_rank; 77 when
/// this machine has no usable GPU.
int run_gpu_rank(const config& cfg);
/// The executor of rank thread `rank`: gpu::communicator<cuda_loopback> on GPU 0 over `tw`'s worlds.
std::unique_ptr<executor> make_gpu_thread_executor(const config& cfg, int rank, thread_world& tw);

}  // namespace rocenante::soak

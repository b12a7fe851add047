// rocenante-soak — a fixed-duration soak of an executor across ranks: a seeded mix of sizes (16 B..4 MiB, weighted
// toward decode sizes), dtypes (fp32, fp16, bf16), algorithms (one_shot, ring) and collectives (all-reduce,
// all-gather), every call checked exactly, ranks paused from outside (shorter than the timeout). Rank 0 writes a
// JSON receipt: collectives run, wrong results, fail-stops (status, message, rank), and per minute per size bucket
// p50/p99/p99.9 latency (drift), plus the pauses that were made.
//
//   rocenante-soak --launch 2 --seconds 60 --json soak.json                      (host: socket transport)
//   rocenante-soak --launch 2 --minutes 30 --hca-prefix rxe --json $SOFTROCE_OUT/soak.json   (tests/softroce/vm/soak.sh)
//   ROCENANTE_BOOTSTRAP=node0:29600 ROCENANTE_RANK=r ROCENANTE_WORLD_SIZE=n rocenante-soak --minutes 5   (one rank)
//   rocenante-soak --gpu --launch 4 --minutes 5 --json soak.json                 (GPU, ranks as processes)
//   rocenante-soak --gpu --threads 4 --minutes 5 --json soak.json                (GPU, ranks as threads)
//
// Executors (soak.hpp's `executor`, one loop for all):
//   host           host::selected_communicator over a bootstrap::tcp (the start-up vote: ibverbs where every rank
//                  has an RDMA device, else socket), host buffers. This file.
//   gpu-processes  (--gpu) gpu::selected_communicator over a bootstrap::tcp (ROCENANTE_TRANSPORT, unset = auto:
//                  cuda_ipc on one node), on GPU rank mod the device count. gpu.cu.
//   gpu-threads    (--gpu --threads N) gpu::communicator<cuda_loopback> per rank thread of this process on GPU 0,
//                  over a bootstrap::in_process world per generation (thread_world). gpu.cu.
// A GPU call stages its input from a pinned host copy, fills the output with 0xff, runs eagerly or replays a CUDA
// graph (--graph-share, default 0.3: one graph per (size, dtype, kind) shape, graph sizes snapped to a power of
// two so shapes recur, captured once and replayed with the inputs changed in place; at most --graph-cache graphs
// per rank, least recently used evicted), and copies the output back; the check is the host one on that copy.
//
// Roles:
//   rank      (default) one rank: bootstrap::tcp::from_env(), then the loop below.
//   launcher  (--launch N) forks N ranks of this program on 127.0.0.1 (ROCENANTE_BOOTSTRAP, ROCENANTE_RANK,
//             ROCENANTE_WORLD_SIZE; ROCENANTE_IB_HCA=PREFIX<r> with --hca-prefix), pauses a random rank for a random
//             time at random moments (SIGSTOP/SIGCONT), waits (bounded) for every rank, and merges its pause log into
//             rank 0's JSON. It never initialises CUDA (the ranks it forks do).
//   threads   (--gpu --threads N) N rank threads in this process; a controller thread asks a random rank to sleep a
//             random time before its next call (a slow rank: SIGSTOP would stop every rank of the process), and
//             merges the pauses into rank 0's JSON as the launcher does.
//
// The loop. Call k's choices come from a hash of (seed, k), so every rank makes the same choices (eager or graph
// included) and a rank can skip to any k. Inputs are small integers (exact sums in every dtype and order), so every
// rank checks its own output against a reference it computes itself. Every 16 calls a one-element all-reduce
// carries rank 0's "time is up" flag, so every rank stops after the same call. Latency is rank 0's steady_clock time
// around the call (what an engine sees, pauses of peers included; GPU: launch to stream synchronized).
//
// A fail-stop (a call's status is not ok: a timeout, a queue pair out of retries, ...; GPU: also the health after the
// stream synchronize, or a CUDA error) is counted and reported with the rank, the call and the communicator's
// message; the rank then rebuilds as docs/operations.md "After a failure" says (tear down, new bootstrap on port +
// generation or a new in-process world, new communicator), every rank agrees on the next call (the largest any rank
// reached) and the soak goes on. More than --max-rebuilds stops the run.
//
// Exit status: 0 no wrong result and no fail-stop; 1 wrong results, or a rank or the run failed; 4 fail-stops with
// 0 wrong results (each rebuilt and reported); 2 bad usage, or --gpu in a build without CUDA; 77 --gpu where no CUDA
// GPU is usable.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <rocenante/host/select.hpp>

#include "soak.hpp"

#ifndef ROCENANTE_SOURCE_DIR
#define ROCENANTE_SOURCE_DIR "."
#endif
#ifndef ROCENANTE_SOAK_GPU
#define ROCENANTE_SOAK_GPU 0
#endif

namespace rocenante::soak {
namespace {

// ---- command line ---------------------------------------------------------------------------------------------

[[noreturn]] void usage_error(const std::string& why) {
  std::fprintf(stderr, "rocenante-soak: %s (try --help)\n", why.c_str());
  std::exit(2);
}

void print_help() {
  std::printf(
      "usage: rocenante-soak [options]\n"
      "  --seconds S | --minutes M  duration (default 60 s)\n"
      "  --seed N                   seed of the call sequence, the same on every rank (default 2026)\n"
      "  --timeout-ms T             protocol timeout of every wait (default 20000)\n"
      "  --min-bytes / --max-bytes  size range per rank (default 16 .. 4M); K, M suffixes\n"
      "  --weights a,b,c,d,e        relative weight of the buckets 16B-256B, 256B-4K, 4K-64K, 64K-1M, 1M-4M\n"
      "                             (default 50,30,15,4.8,0.2: decode sizes; 1 call in 500 above 1 MiB)\n"
      "  --gather-share F           fraction of calls that are all-gathers (default 0.2)\n"
      "  --max-rebuilds N           fail-stops rebuilt before the run stops (default 30)\n"
      "  --json FILE                receipt (rank 0)\n"
      "  --launch N                 start N ranks on 127.0.0.1 and pause them (launcher)\n"
      "  --port P                   launcher: rank 0's bootstrap port (default: a free one); generation g uses P + g\n"
      "  --pause-mean-s S           launcher/threads: mean gap between pauses (default 10; 0: no pauses)\n"
      "  --pause-min-ms / --pause-max-ms   launcher/threads: pause length range (default 50 .. timeout/4)\n"
      "  --hca-prefix P             launcher: rank r gets ROCENANTE_IB_HCA=P<r> (Soft-RoCE VM: rxe)\n"
      "  --corrupt-call K           self-test: rank 1 flips a byte of call K's output\n"
      "  --list-calls A[,B]         print what calls A..B are with these options (seed, weights, ...) and exit\n"
      "GPU executor (a build with -Dcuda=enabled; the launcher itself never initialises CUDA):\n"
      "  --gpu                      the GPU executor. With --launch N: N processes, each gpu::selected_communicator on\n"
      "                             GPU rank mod the device count (ROCENANTE_TRANSPORT, unset = auto: cuda_ipc on one\n"
      "                             node; =socket forces the proxy path), paused with SIGSTOP/SIGCONT. With --threads N:\n"
      "                             ranks as threads. Alone: one rank of a world another launcher started\n"
      "  --threads N                N ranks as threads of this process sharing GPU 0 (gpu::communicator<cuda_loopback>,\n"
      "                             1..16). SIGSTOP would stop every rank, so a pause here is a rank's thread sleeping\n"
      "                             before its next call (a slow rank; the receipt's launcher.pause_kind says so)\n"
      "  --graph-share F            fraction of calls replayed from a CUDA graph (default 0.3): one graph per (size,\n"
      "                             dtype, kind) shape, graph calls' sizes snapped to a power of two so shapes recur,\n"
      "                             captured once, replayed with the inputs changed in place\n"
      "  --graph-cache N            CUDA graphs kept per rank, least recently used evicted (default 128)\n"
      "  --pdl                      programmatic dependent launch on (set_programmatic_launch; default off)\n"
      "exit status: 0 clean; 4 fail-stops only (each rebuilt and reported); 1 wrong results or a rank failed;\n"
      "             2 bad usage, or --gpu in a build without CUDA; 77 --gpu where no CUDA GPU is usable\n");
}

std::uint64_t parse_size(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) usage_error("bad size '" + s + "'");
  std::uint64_t m = 1;
  if (*end == 'K' || *end == 'k') m = 1024;
  else if (*end == 'M' || *end == 'm') m = 1024 * 1024;
  else if (*end != '\0') usage_error("bad size suffix in '" + s + "'");
  return static_cast<std::uint64_t>(v * static_cast<double>(m));
}

config parse(int argc, char** argv) {
  config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    bool keep = true;  // passed on to the ranks by the launcher
    if (a == "--help" || a == "-h") { print_help(); std::exit(0); }
    else if (a == "--seconds") c.seconds = std::stod(next());
    else if (a == "--minutes") c.seconds = 60 * std::stod(next());
    else if (a == "--seed") c.seed = std::stoull(next());
    else if (a == "--timeout-ms") c.timeout_ms = std::stoull(next());
    else if (a == "--min-bytes") c.min_bytes = parse_size(next());
    else if (a == "--max-bytes") c.max_bytes = parse_size(next());
    else if (a == "--gather-share") c.gather_share = std::stod(next());
    else if (a == "--max-rebuilds") c.max_rebuilds = std::stoi(next());
    else if (a == "--json") c.json = next();
    else if (a == "--corrupt-call") c.corrupt_call = std::stol(next());
    else if (a == "--list-calls") {
      const std::string v = next();
      const auto comma = v.find(',');
      c.list_from = std::stol(v.substr(0, comma));
      c.list_to = comma == std::string::npos ? c.list_from : std::stol(v.substr(comma + 1));
    }
    else if (a == "--weights") {
      c.weights.clear();
      std::stringstream ss(next());
      for (std::string w; std::getline(ss, w, ',');) c.weights.push_back(std::stod(w));
      if (c.weights.size() != 5) usage_error("--weights takes 5 values (one per size bucket)");
    }
    else if (a == "--gpu") c.gpu = true;
    else if (a == "--graph-share") c.graph_share = std::stod(next());
    else if (a == "--graph-cache") c.graph_cache = std::stoi(next());
    else if (a == "--pdl") c.pdl = true;
    else if (a == "--threads") { c.threads = std::stoi(next()); keep = false; }
    else if (a == "--launch") { c.launch = std::stoi(next()); keep = false; }
    else if (a == "--port") { c.port = std::stoi(next()); keep = false; }
    else if (a == "--pause-mean-s") { c.pause_mean_s = std::stod(next()); keep = false; }
    else if (a == "--pause-min-ms") { c.pause_min_ms = std::stod(next()); keep = false; }
    else if (a == "--pause-max-ms") { c.pause_max_ms = std::stod(next()); keep = false; }
    else if (a == "--hca-prefix") { c.hca_prefix = next(); keep = false; }
    else usage_error("unknown option " + a);
    if (keep) {
      c.argv.push_back(a);
      if (i > 0 && std::string(argv[i]) != a) c.argv.push_back(argv[i]);
    }
  }
  if (c.min_bytes < 16 || c.max_bytes < c.min_bytes) usage_error("need 16 <= --min-bytes <= --max-bytes");
  if (c.pause_max_ms == 0) c.pause_max_ms = static_cast<double>(c.timeout_ms) / 4;
  if (c.pause_max_ms >= static_cast<double>(c.timeout_ms))
    usage_error("--pause-max-ms must be shorter than --timeout-ms (a pause is not meant to be a failure)");
  if (c.launch < 0 || c.launch > 16) usage_error("--launch takes 1..16 ranks");
  if (c.threads != 0 && !c.gpu) usage_error("--threads runs GPU ranks as threads: it needs --gpu (host ranks: --launch N)");
  if (c.threads < 0 || c.threads > 16) usage_error("--threads takes 1..16 ranks");
  if (c.threads > 0 && c.launch > 0) usage_error("--threads and --launch exclude each other (ranks as threads or as processes)");
  if (!c.gpu && (c.graph_share > 0 || c.pdl)) usage_error("--graph-share and --pdl are for the GPU executor (--gpu)");
  if (c.graph_share < 0) c.graph_share = c.gpu ? 0.3 : 0.0;
  if (c.graph_share > 1) usage_error("--graph-share is a fraction in [0, 1]");
  if (c.graph_cache < 1) usage_error("--graph-cache keeps at least 1 graph");
  return c;
}

// ---- the call sequence ----------------------------------------------------------------------------------------

int bucket_of(std::uint64_t bytes) {
  for (int b = n_buckets - 1; b > 0; --b)
    if (bytes >= buckets[b].lo) return b;
  return 0;
}

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A graph call's size: the nearest power of two (log scale) within --min-bytes..--max-bytes, a multiple of 4, so
/// that shapes recur and their graphs are replayed.
std::uint64_t graph_bytes(const config& c, std::uint64_t bytes) {
  std::uint64_t p = 16;
  while (p * 2 <= bytes) p *= 2;
  if (static_cast<double>(bytes) > static_cast<double>(p) * std::sqrt(2.0)) p *= 2;
  return std::clamp<std::uint64_t>(p, c.min_bytes, c.max_bytes) / 4 * 4;
}

const char* algo_name(algorithm::algo a) { return a == algorithm::algo::ring ? "ring" : "one_shot"; }

}  // namespace

call_choice choose(const config& c, std::uint64_t k) {
  std::mt19937_64 rng(splitmix(c.seed * 0x100000001b3ull ^ splitmix(k)));
  std::uniform_real_distribution<double> u(0, 1);
  call_choice ch;
  ch.gather = u(rng) < c.gather_share;
  ch.type = std::array{dtype::f32, dtype::f16, dtype::bf16}[rng() % 3];
  ch.algo = ch.gather ? algorithm::algo::one_shot : (rng() % 2 ? algorithm::algo::ring : algorithm::algo::one_shot);
  std::discrete_distribution<int> pick(c.weights.begin(), c.weights.end());
  bool sized = false;
  for (int tries = 0; tries < 64 && !sized; ++tries) {
    const int b = pick(rng);
    const double lo = static_cast<double>(std::max(buckets[b].lo, c.min_bytes));
    const double hi = static_cast<double>(std::min(buckets[b].hi, c.max_bytes));
    if (lo > hi) continue;  // bucket outside --min-bytes..--max-bytes
    const double x = std::exp(std::log(lo) + u(rng) * (std::log(hi) - std::log(lo)));  // log-uniform in the bucket
    ch.bytes = std::clamp<std::uint64_t>((static_cast<std::uint64_t>(x) + 3) / 4 * 4, c.min_bytes, c.max_bytes);
    ch.bytes = ch.bytes / 4 * 4;
    sized = true;
  }
  if (!sized) ch.bytes = c.min_bytes / 4 * 4;
  // Eager or graph: from a hash of its own, so the rest of the sequence is the same with or without graphs.
  if (c.graph_share > 0 &&
      static_cast<double>(splitmix(splitmix(c.seed ^ 0x6772617068ull) ^ k) >> 11) * 0x1.0p-53 < c.graph_share) {
    ch.graph = true;
    ch.bytes = graph_bytes(c, ch.bytes);
  }
  ch.bucket = bucket_of(ch.bytes);
  return ch;
}

std::string describe(const call_choice& ch) {
  char b[112];
  std::snprintf(b, sizeof b, "%s %s %s %llu B%s", ch.gather ? "all_gather" : "all_reduce", ch.gather ? "-" : algo_name(ch.algo),
                to_string(ch.type), static_cast<unsigned long long>(ch.bytes), ch.graph ? " graph" : "");
  return b;
}

std::unique_ptr<bootstrap::tcp> tcp_bootstrap(int generation) {
  bootstrap::tcp_config cfg = bootstrap::tcp_config_from_env();
  cfg.port = static_cast<std::uint16_t>(cfg.port + generation);  // no rank of an older world can join
  return std::make_unique<bootstrap::tcp>(cfg);
}

namespace {

// ---- the host executor ----------------------------------------------------------------------------------------

/// host::selected_communicator over a bootstrap::tcp of one generation; host buffers.
class host_executor final : public executor {
 public:
  explicit host_executor(const config& cfg) : max_bytes_(cfg.max_bytes) {
    o_.capacity_bytes = cfg.max_bytes;
    o_.timeout_ns = cfg.timeout_ms * 1'000'000ull;
  }
  void build(int generation) override {
    boot_ = tcp_bootstrap(generation);
    comm_ = std::make_unique<host::selected_communicator>(*boot_, o_);
    if (inb_.empty()) {
      inb_.resize(max_bytes_);
      outb_.resize(max_bytes_ * static_cast<std::size_t>(comm_->size()));
    }
  }
  bool has_bootstrap() const override { return boot_ != nullptr; }
  void tear_down() override {
    comm_.reset();
    boot_.reset();
  }
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  std::string transport() const override { return host::to_string(comm_->transport()); }
  std::string decision() const override { return comm_->selected().summary(); }
  void barrier() override { boot_->barrier(); }
  void all_gather(const void* send, void* recv, std::size_t bytes) override { boot_->all_gather(send, recv, bytes); }
  status control(float flag, float& sum) override {
    return comm_->all_reduce(&flag, &sum, 1, dtype::f32, algorithm::automatic{});
  }
  status run(const call_choice& ch, std::uint64_t k, bool corrupt, double& seconds, std::string& wrong) override {
    return with_type(ch.type, [&]<class T>(T*) {
      const int n = comm_->size();
      const std::size_t count = ch.bytes / sizeof(T);
      T* in = reinterpret_cast<T*>(inb_.data());
      T* out = reinterpret_cast<T*>(outb_.data());
      fill_input(ch, k, comm_->rank(), in);
      const std::size_t out_count = ch.gather ? count * static_cast<std::size_t>(n) : count;
      std::memset(outb_.data(), 0xff, out_count * sizeof(T));  // NaN in every dtype: a call that writes nothing is caught
      const auto t0 = clk::now();
      const status st = ch.gather ? comm_->all_gather(in, out, count) : comm_->all_reduce(in, out, count, ch.type, ch.algo);
      seconds = std::chrono::duration<double>(clk::now() - t0).count();
      if (st == status::ok) wrong = check_output(ch, k, n, out, corrupt);
      return st;
    });
  }
  std::string last_error() const override { return comm_ ? comm_->last_error() : std::string(); }

 private:
  options o_;
  std::uint64_t max_bytes_;
  std::unique_ptr<bootstrap::tcp> boot_;
  std::unique_ptr<host::selected_communicator> comm_;
  std::vector<std::uint8_t> inb_, outb_;
};

// ---- the receipt ----------------------------------------------------------------------------------------------

struct fail_record {  // fixed size: gathered from every rank through the bootstrap
  double t_s;
  std::uint64_t call;
  std::uint32_t state;
  std::int32_t generation;
  char message[232];
};
struct wrong_record {
  std::uint64_t call;
  char what[248];
};
constexpr int max_records = 6;
struct rank_summary {
  std::int32_t rank;
  std::int32_t fatal;  // the rank stopped on an error it could not rebuild from
  std::uint64_t calls, wrong, fail_stops, control_calls;
  std::uint32_t n_fail, n_wrong;
  fail_record fails[max_records];
  wrong_record wrongs[max_records];
  char fatal_message[256];
};

/// Totals over every rank's summary. One fail-stop is usually seen by every rank (the one whose wait ran out, and the
/// peers it aborted): the event count is the largest any rank saw; the reports are every rank's.
struct totals {
  std::uint64_t wrong = 0, fail_stops = 0, fail_reports = 0;
  int fatal_ranks = 0;
  explicit totals(const std::vector<rank_summary>& all) {
    for (const rank_summary& s : all) {
      wrong += s.wrong;
      fail_stops = std::max<std::uint64_t>(fail_stops, s.fail_stops);
      fail_reports += s.fail_stops;
      fatal_ranks += s.fatal;
    }
  }
};

void copy_text(char* dst, std::size_t cap, const std::string& s) {
  const std::size_t n = std::min(s.size(), cap - 1);
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

using minute_cells = std::map<int, std::array<std::vector<float>, n_buckets>>;  // minute -> bucket -> microseconds
struct latency_table {
  minute_cells eager, graph;  // GPU: graph calls apart, so that the receipt can tell them apart
};

struct pct {
  std::size_t n = 0;
  double p50 = 0, p99 = 0, p999 = 0, max = 0;
};
pct percentiles(std::vector<float> v) {
  pct p;
  p.n = v.size();
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return static_cast<double>(v[static_cast<std::size_t>(std::max(1.0, std::ceil(q * static_cast<double>(v.size())))) - 1]); };
  p.p50 = at(0.5);
  p.p99 = at(0.99);
  p.p999 = at(0.999);
  p.max = v.back();
  return p;
}

std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\', o += ch;
    else if (static_cast<unsigned char>(ch) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", ch);
      o += b;
    } else o += ch;
  }
  return o + "\"";
}

/// The commit the binary was built from. Never called inside the timed loop: `git status` over the Soft-RoCE VM's
/// 9p root took longer than the 30 s protocol timeout and stalled rank 0 into fail-stops.
std::string git_commit() {
  if (const char* c = std::getenv("ROCENANTE_SOAK_COMMIT"); c && *c) return c;  // the launcher's, computed once
  std::string cmd = std::string("git -C '") + ROCENANTE_SOURCE_DIR + "' rev-parse --short=12 HEAD 2>/dev/null";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[128];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  if (out.empty()) return "unknown";
  if (FILE* p = ::popen((std::string("git -C '") + ROCENANTE_SOURCE_DIR + "' status --porcelain -uno 2>/dev/null").c_str(), "r")) {
    char buf[256];
    bool dirty = std::fgets(buf, sizeof buf, p) != nullptr;
    ::pclose(p);
    if (dirty) out += "-dirty";
  }
  return out;
}

/// Set by SIGTERM or SIGINT in a rank's process (ranks as threads: the process): rank 0 then says "time is up" at
/// the next control call, so that a run cut short by a time limit around it (tools/gpu/run.sh's `timeout` signals
/// the whole process group) still ends on every rank together and writes its whole receipt.
volatile std::sig_atomic_t stop_requested = 0;
void on_stop_request(int sig) { stop_requested = sig; }
void catch_stop_signals(void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  ::sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
}
/// How long the launcher and the threads' controller wait for the ranks after such a signal before ending them.
constexpr double stop_grace_s = 30;

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);  // rank threads call this at once
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

/// What rank 0 knows of the run, for the receipt.
struct run_record {
  std::string started, transport, decision, commit;
  int n = 0, generation = 0;
  double run_s = 0, busy_s = 0;
  std::int64_t t0_ns = 0;  // steady_clock (CLOCK_MONOTONIC, one clock for every process of the host) at rank 0's start
  std::uint64_t mix_bucket[n_buckets] = {}, mix_type[3] = {}, mix_kind[3] = {};  // kind: one_shot, ring, all_gather
  std::uint64_t calls_eager = 0, calls_graph = 0;
  exec_facts ex;
  latency_table lat;
};

/// Writes the JSON receipt (through a temporary file and a rename, so that a run killed mid-write leaves the last
/// whole receipt). `complete`: false for the minute-by-minute receipts written while the run goes on.
bool write_receipt(const config& cfg, const run_record& rr, const std::vector<rank_summary>& all, const rank_summary& mine,
                   bool complete, const std::string& exchange) {
  const totals sum(all);
  const std::uint64_t wrong = sum.wrong, fail_stops = sum.fail_stops, fail_reports = sum.fail_reports;
  const int fatal_ranks = sum.fatal_ranks;
  const bool gpu = rr.ex.executor == "gpu";
  const std::string tmp = cfg.json + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "rocenante-soak: cannot write %s: %s\n", tmp.c_str(), std::strerror(errno));
    return false;
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::fprintf(f, "{\n  \"tool\": \"rocenante-soak\",\n  \"complete\": %s,\n  \"git_commit\": %s,\n  \"started_utc\": %s,\n  \"finished_utc\": %s,\n",
               complete ? "true" : "false", json_string(rr.commit).c_str(), json_string(rr.started).c_str(), json_string(utc_now()).c_str());
  std::fprintf(f, "  \"host\": %s,\n  \"executor\": %s,\n  \"mode\": %s,\n  \"ranks\": %d,\n  \"transport\": %s,\n  \"decision\": %s,\n",
               json_string(host).c_str(), json_string(rr.ex.executor).c_str(), json_string(rr.ex.mode).c_str(), rr.n,
               json_string(rr.transport).c_str(), json_string(rr.decision).c_str());
  if (gpu)
    std::fprintf(f, "  \"gpu\": {\"name\": %s, \"detail\": %s},\n  \"programmatic_launch\": %s,\n", json_string(rr.ex.gpu).c_str(),
                 json_string(rr.ex.gpu_detail).c_str(), rr.ex.pdl ? "true" : "false");
  std::fprintf(f, "  \"config\": {\"seconds\": %.1f, \"seed\": %llu, \"timeout_ms\": %llu, \"min_bytes\": %llu, \"max_bytes\": %llu, "
               "\"gather_share\": %.3f, \"max_rebuilds\": %d, \"weights\": [",
               cfg.seconds, static_cast<unsigned long long>(cfg.seed), static_cast<unsigned long long>(cfg.timeout_ms),
               static_cast<unsigned long long>(cfg.min_bytes), static_cast<unsigned long long>(cfg.max_bytes), cfg.gather_share,
               cfg.max_rebuilds);
  for (std::size_t i = 0; i < cfg.weights.size(); ++i) std::fprintf(f, "%s%g", i ? ", " : "", cfg.weights[i]);
  std::fprintf(f, "], \"buckets\": [");
  for (int b = 0; b < n_buckets; ++b)
    std::fprintf(f, "%s{\"name\": \"%s\", \"lo\": %llu, \"hi\": %llu}", b ? ", " : "", buckets[b].name,
                 static_cast<unsigned long long>(buckets[b].lo), static_cast<unsigned long long>(buckets[b].hi));
  std::fprintf(f, "]},\n  \"t0_steady_ns\": %lld,\n  \"run_seconds\": %.1f,\n  \"busy_seconds_rank0\": %.1f,\n",
               static_cast<long long>(rr.t0_ns), rr.run_s, rr.busy_s);
  if (stop_requested)  // the run was cut short: rank 0 got SIGTERM or SIGINT and ended it at a control call
    std::fprintf(f, "  \"stopped_by_signal\": %d,\n", static_cast<int>(stop_requested));
  std::fprintf(f, "  \"collectives\": %llu,\n  \"calls_eager\": %llu,\n  \"calls_graph\": %llu,\n  \"control_calls\": %llu,\n"
               "  \"wrong_results\": %llu,\n  \"fail_stops\": %llu,\n"
               "  \"fail_stop_reports\": %llu,\n  \"rebuilds\": %d,\n  \"ranks_stopped_on_error\": %d,\n  \"summary_exchange\": %s,\n",
               static_cast<unsigned long long>(mine.calls), static_cast<unsigned long long>(rr.calls_eager),
               static_cast<unsigned long long>(rr.calls_graph), static_cast<unsigned long long>(mine.control_calls),
               static_cast<unsigned long long>(wrong), static_cast<unsigned long long>(fail_stops),
               static_cast<unsigned long long>(fail_reports), rr.generation, fatal_ranks,
               json_string(exchange).c_str());
  if (gpu)
    std::fprintf(f, "  \"graph\": {\"share\": %.3f, \"cache_capacity\": %d, \"captures_rank0\": %llu, \"launches_rank0\": %llu, "
                 "\"evictions_rank0\": %llu, \"note\": \"a graph call's size is snapped to a power of two; one graph per "
                 "(size, dtype, kind), captured once per generation, replayed with the inputs copied in place before "
                 "each launch; a rebuild drops every graph\"},\n",
                 cfg.graph_share, cfg.graph_cache, static_cast<unsigned long long>(rr.ex.graph_captures),
                 static_cast<unsigned long long>(rr.ex.graph_launches), static_cast<unsigned long long>(rr.ex.graph_evictions));
  std::fprintf(f, "  \"mix_rank0\": {\"buckets\": [%llu, %llu, %llu, %llu, %llu], \"fp32_fp16_bf16\": [%llu, %llu, %llu], "
               "\"one_shot_ring_all_gather\": [%llu, %llu, %llu]},\n",
               static_cast<unsigned long long>(rr.mix_bucket[0]), static_cast<unsigned long long>(rr.mix_bucket[1]),
               static_cast<unsigned long long>(rr.mix_bucket[2]), static_cast<unsigned long long>(rr.mix_bucket[3]),
               static_cast<unsigned long long>(rr.mix_bucket[4]), static_cast<unsigned long long>(rr.mix_type[0]),
               static_cast<unsigned long long>(rr.mix_type[1]), static_cast<unsigned long long>(rr.mix_type[2]),
               static_cast<unsigned long long>(rr.mix_kind[0]), static_cast<unsigned long long>(rr.mix_kind[1]),
               static_cast<unsigned long long>(rr.mix_kind[2]));
  std::fprintf(f, "  \"per_rank\": [\n");
  for (std::size_t i = 0; i < all.size(); ++i) {
    const rank_summary& s = all[i];
    std::fprintf(f, "    {\"rank\": %d, \"collectives\": %llu, \"wrong\": %llu, \"fail_stops\": %llu, \"stopped_on_error\": %s",
                 s.rank, static_cast<unsigned long long>(s.calls), static_cast<unsigned long long>(s.wrong),
                 static_cast<unsigned long long>(s.fail_stops), s.fatal ? json_string(s.fatal_message).c_str() : "false");
    std::fprintf(f, ",\n     \"fail_stop_reports\": [");
    for (std::uint32_t j = 0; j < s.n_fail; ++j)
      std::fprintf(f, "%s{\"t_s\": %.1f, \"call\": %llu, \"status\": \"%s\", \"generation\": %d, \"message\": %s}", j ? ", " : "",
                   s.fails[j].t_s, static_cast<unsigned long long>(s.fails[j].call), to_string(static_cast<status>(s.fails[j].state)),
                   s.fails[j].generation, json_string(s.fails[j].message).c_str());
    std::fprintf(f, "],\n     \"wrong_reports\": [");
    for (std::uint32_t j = 0; j < s.n_wrong; ++j)
      std::fprintf(f, "%s{\"call\": %llu, \"what\": %s}", j ? ", " : "", static_cast<unsigned long long>(s.wrongs[j].call),
                   json_string(s.wrongs[j].what).c_str());
    std::fprintf(f, "]}%s\n", i + 1 < all.size() ? "," : "");
  }
  auto write_pct = [&](const pct& p) {
    std::fprintf(f, "\"n\": %zu, \"p50_us\": %.1f, \"p99_us\": %.1f, \"p999_us\": %.1f, \"max_us\": %.1f", p.n, p.p50, p.p99,
                 p.p999, p.max);
  };
  // One bucket's samples over `tables` (eager, graph or both), of one minute or (minute < 0) of the whole run.
  auto samples = [&](std::initializer_list<const minute_cells*> tables, int minute, int b) {
    std::vector<float> v;
    for (const minute_cells* t : tables)
      for (const auto& [m, row] : *t)
        if (minute < 0 || m == minute) v.insert(v.end(), row[b].begin(), row[b].end());
    return v;
  };
  auto write_overall = [&](const char* key, std::initializer_list<const minute_cells*> tables, bool last) {
    std::fprintf(f, "  \"%s\": [", key);
    for (int b = 0; b < n_buckets; ++b) {
      std::fprintf(f, "%s\n    {\"bucket\": \"%s\", ", b ? "," : "", buckets[b].name);
      write_pct(percentiles(samples(tables, -1, b)));
      std::fprintf(f, "}");
    }
    std::fprintf(f, "\n  ]%s\n", last ? "" : ",");
  };
  std::fprintf(f, "  ],\n  \"latency_note\": %s,\n",
               json_string(std::string("rank 0's steady_clock time around each checked call, microseconds") +
                           (gpu ? " (GPU: from the launch, eager or cudaGraphLaunch, to its stream synchronized; inputs "
                                  "staged before and the output copied back after, untimed)"
                                : "") +
                           "; percentiles by nearest rank; p99.9 of a cell with fewer than 1000 calls is its maximum or "
                           "near it").c_str());
  write_overall("overall", {&rr.lat.eager, &rr.lat.graph}, false);
  if (gpu) {
    write_overall("overall_eager", {&rr.lat.eager}, false);
    write_overall("overall_graph", {&rr.lat.graph}, false);
  }
  std::map<int, bool> minutes;
  for (const minute_cells* t : {&rr.lat.eager, &rr.lat.graph})
    for (const auto& [m, row] : *t) minutes[m] = true;
  std::fprintf(f, "  \"per_minute\": [");
  bool first = true;
  for (const auto& [m, unused] : minutes)
    for (int b = 0; b < n_buckets; ++b) {
      std::vector<float> v = samples({&rr.lat.eager, &rr.lat.graph}, m, b);
      if (v.empty()) continue;
      std::fprintf(f, "%s\n    {\"minute\": %d, \"bucket\": \"%s\", ", first ? "" : ",", m, buckets[b].name);
      write_pct(percentiles(std::move(v)));
      std::fprintf(f, "}");
      first = false;
    }
  std::fprintf(f, "\n  ]\n}\n");
  std::fclose(f);
  if (std::rename(tmp.c_str(), cfg.json.c_str()) != 0) {
    std::fprintf(stderr, "rocenante-soak: cannot rename %s to %s: %s\n", tmp.c_str(), cfg.json.c_str(), std::strerror(errno));
    return false;
  }
  return true;
}

}  // namespace

// ---- one rank -------------------------------------------------------------------------------------------------

int run_rank(const config& cfg, executor& ex) {
  run_record rr;
  rr.started = utc_now();
  rr.commit = git_commit();  // before set-up: no peer waits on it
  int generation = 0;
  rank_summary mine{};
  auto fatal = [&](const std::string& why) {
    mine.fatal = 1;
    copy_text(mine.fatal_message, sizeof mine.fatal_message, why);
    std::fprintf(stderr, "rank %d: %s\n", mine.rank, why.c_str());
  };
  try {
    ex.build(generation);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rocenante-soak: set-up failed: %s\n", e.what());
    return 1;
  }
  const int me = ex.rank(), n = ex.size();
  mine.rank = me;
  rr.n = n;
  rr.transport = ex.transport();
  rr.decision = ex.decision();
  ex.facts(rr.ex);
  if (me == 0) {
    std::printf("rank 0: %d ranks, transport %s (%s)\n", n, rr.transport.c_str(), rr.decision.c_str());
    if (rr.ex.executor == "gpu")
      std::printf("rank 0: %s on %s (%s); %.0f%% of calls from CUDA graphs (at most %d per rank), programmatic launch %s\n",
                  rr.ex.mode.c_str(), rr.ex.gpu.c_str(), rr.ex.gpu_detail.c_str(), 100 * cfg.graph_share, cfg.graph_cache,
                  rr.ex.pdl ? "on" : "off");
  }
  ex.barrier();
  const auto t0 = clk::now();
  rr.t0_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count();
  auto elapsed = [&] { return std::chrono::duration<double>(clk::now() - t0).count(); };
  std::uint64_t k = 0;
  int last_minute_reported = -1;
  bool stop = false;
  while (!stop && !mine.fatal) {
    status st = status::ok;
    std::string message;
    ex.before_call();
    if (k % 16 == 15) {  // control call: rank 0's "time is up" flag, so every rank stops after the same call
      float flag = (me == 0 && (elapsed() >= cfg.seconds || stop_requested)) ? 1.0f : 0.0f, sum = -1;
      st = ex.control(flag, sum);
      if (st == status::ok) {
        ++mine.control_calls;
        if (sum != 0.0f && sum != 1.0f) {
          ++mine.wrong;
          if (mine.n_wrong < max_records) {
            mine.wrongs[mine.n_wrong].call = k;
            copy_text(mine.wrongs[mine.n_wrong++].what, sizeof mine.wrongs[0].what, "control all_reduce: " + std::to_string(sum));
          }
        }
        stop = sum >= 1.0f;
      }
    } else {
      const call_choice ch = choose(cfg, k);
      const bool corrupt = me == 1 && static_cast<long>(k) == cfg.corrupt_call;
      double secs = 0;
      std::string wrong;
      const double start = elapsed();
      st = ex.run(ch, k, corrupt, secs, wrong);
      if (st == status::ok) {
        ++mine.calls;
        rr.busy_s += secs;
        if (!wrong.empty()) {
          ++mine.wrong;
          std::fprintf(stderr, "rank %d: WRONG call %llu: %s\n", me, static_cast<unsigned long long>(k), wrong.c_str());
          if (mine.n_wrong < max_records) {
            mine.wrongs[mine.n_wrong].call = k;
            copy_text(mine.wrongs[mine.n_wrong++].what, sizeof mine.wrongs[0].what, wrong);
          }
        }
        if (me == 0) {
          const int minute = static_cast<int>(start / 60);
          (ch.graph ? rr.lat.graph : rr.lat.eager)[minute][ch.bucket].push_back(static_cast<float>(secs * 1e6));
          ++(ch.graph ? rr.calls_graph : rr.calls_eager);
          ++rr.mix_bucket[ch.bucket];
          ++rr.mix_type[ch.type == dtype::f32 ? 0 : ch.type == dtype::f16 ? 1 : 2];
          ++rr.mix_kind[ch.gather ? 2 : ch.algo == algorithm::algo::ring ? 1 : 0];
          if (minute > last_minute_reported && minute > 0) {
            last_minute_reported = minute;
            std::printf("rank 0: minute %d: %llu calls, %llu wrong, %llu fail-stops so far\n", minute,
                        static_cast<unsigned long long>(mine.calls), static_cast<unsigned long long>(mine.wrong),
                        static_cast<unsigned long long>(mine.fail_stops));
            std::fflush(stdout);
            if (!cfg.json.empty()) {  // rank 0's view so far: a run that is killed still leaves a receipt
              rr.run_s = elapsed();
              rr.generation = generation;
              ex.facts(rr.ex);
              (void)write_receipt(cfg, rr, {mine}, mine, false, "not yet (run in progress)");
            }
          }
        }
      }
    }
    if (st == status::ok) {
      ++k;
      continue;
    }
    // Fail-stop: report, tear down, rebuild on the next generation, agree on where to go on.
    message = (k % 16 == 15 ? std::string("control all_reduce f32 4 B") : describe(choose(cfg, k))) + ": " + ex.last_error();
    ++mine.fail_stops;
    std::fprintf(stderr, "rank %d: FAIL-STOP at call %llu (%.1f s): status %s: %s\n", me, static_cast<unsigned long long>(k),
                 elapsed(), to_string(st), message.c_str());
    if (mine.n_fail < max_records) {
      fail_record& f = mine.fails[mine.n_fail++];
      f.t_s = elapsed();
      f.call = k;
      f.state = static_cast<std::uint32_t>(st);
      f.generation = generation;
      copy_text(f.message, sizeof f.message, message);
    }
    if (generation >= cfg.max_rebuilds) {
      fatal("more than --max-rebuilds " + std::to_string(cfg.max_rebuilds) + " fail-stops: stopping");
      break;
    }
    const auto tr = clk::now();
    ex.quiesce(generation);
    ex.tear_down();
    ++generation;
    try {
      ex.build(generation);
      struct resume {
        std::uint64_t next;
        std::int32_t time_up;
        std::int32_t pad;
      } r{k + 1, me == 0 && (elapsed() >= cfg.seconds || stop_requested) ? 1 : 0, 0};
      std::vector<resume> all(static_cast<std::size_t>(n));
      ex.all_gather(&r, all.data(), sizeof r);
      k = 0;
      for (const resume& x : all) k = std::max(k, x.next);
      while (k % 16 == 15) ++k;  // resume on an ordinary call
      stop = all[0].time_up != 0;
      std::fprintf(stderr, "rank %d: rebuilt (generation %d, transport %s) in %.2f s; going on at call %llu\n", me,
                   generation, ex.transport().c_str(), std::chrono::duration<double>(clk::now() - tr).count(),
                   static_cast<unsigned long long>(k));
    } catch (const std::exception& e) {
      fatal(std::string("rebuild after a fail-stop failed: ") + e.what());
    }
  }
  const double run_s = elapsed();

  // Every rank's counts and records to rank 0 (bootstrap exchange of the last generation).
  std::vector<rank_summary> all(static_cast<std::size_t>(n));
  bool gathered = false;
  std::string gather_error;
  if (ex.has_bootstrap()) {
    try {
      ex.all_gather(&mine, all.data(), sizeof mine);
      gathered = true;
    } catch (const std::exception& e) {
      gather_error = e.what();
    }
  }
  if (!gathered) {
    all.assign(1, mine);
    if (me == 0) std::fprintf(stderr, "rank 0: the summary exchange failed (%s): the receipt has rank 0's counts only\n", gather_error.c_str());
  }
  const totals sum(all);
  const std::uint64_t wrong = sum.wrong, fail_stops = sum.fail_stops;
  const int fatal_ranks = sum.fatal_ranks;
  std::printf("rank %d: %llu collectives in %.1f s, %llu wrong, %llu fail-stops (this rank)\n", me,
              static_cast<unsigned long long>(mine.calls), run_s, static_cast<unsigned long long>(mine.wrong),
              static_cast<unsigned long long>(mine.fail_stops));
  const int rc = (wrong > 0 || fatal_ranks > 0 || !gathered) ? 1 : fail_stops > 0 ? 4 : 0;
  if (me != 0 || cfg.json.empty()) return rc;

  rr.run_s = run_s;
  rr.generation = generation;
  ex.facts(rr.ex);
  if (!write_receipt(cfg, rr, all, mine, true, gathered ? "ok" : "failed: " + gather_error)) return 1;
  std::printf("rank 0: receipt %s\n", cfg.json.c_str());
  return rc;
}

// ---- ranks as threads: what they share ------------------------------------------------------------------------

thread_world::thread_world(int ranks, std::chrono::milliseconds timeout, clk::time_point t0)
    : n_(ranks), timeout_(timeout), t0_(t0), pending_(static_cast<std::size_t>(ranks)) {}

bootstrap::in_process_world& thread_world::world(int generation) {
  std::lock_guard lock(mu_);
  auto& w = worlds_[generation];
  if (!w) w = std::make_unique<bootstrap::in_process_world>(n_, timeout_);
  return *w;
}

status thread_world::all_arrived(int generation, std::uint64_t round) {
  std::unique_lock lock(mu_);
  const auto key = std::make_pair(generation, round);
  round_count& c = rounds_[key];
  ++c.arrived;
  cv_.notify_all();
  cv_.wait_until(lock, clk::now() + timeout_, [&] { return c.arrived == n_ || left_[generation] > 0; });
  const status st = c.arrived == n_ ? status::ok : left_[generation] > 0 ? status::poisoned : status::timeout;
  if (++c.departed == n_) rounds_.erase(key);
  return st;
}

bool thread_world::leave(int generation) {
  std::unique_lock lock(mu_);
  ++left_[generation];
  cv_.notify_all();
  return cv_.wait_until(lock, clk::now() + timeout_, [&] { return left_[generation] >= n_; });
}

void thread_world::request_pause(int rank, double ms) { pending_[static_cast<std::size_t>(rank)].store(ms); }

void thread_world::take_pause(int rank) {
  const double ms = pending_[static_cast<std::size_t>(rank)].exchange(0.0);
  if (ms <= 0) return;
  {
    std::lock_guard lock(mu_);
    pauses_.push_back({std::chrono::duration<double>(clk::now() - t0_).count(), rank, ms});
  }
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

std::vector<pause_event> thread_world::pauses() {
  std::lock_guard lock(mu_);
  return pauses_;
}

namespace {

// ---- pauses and the launcher ----------------------------------------------------------------------------------

/// When and whom the launcher (or the threads' controller) pauses: exponential gaps of mean --pause-mean-s (the first
/// a few seconds in, after set-up), a random rank, a length uniform in --pause-min-ms..--pause-max-ms, none ending
/// after the soak.
class pause_schedule {
 public:
  explicit pause_schedule(const config& c)
      : c_(c), rng_(splitmix(c.seed ^ 0x5041555345ull)), gap_(c.pause_mean_s > 0 ? 1.0 / c.pause_mean_s : 1.0),
        len_(c.pause_min_ms, c.pause_max_ms) {
    next_ = c.pause_mean_s > 0 ? 5 + gap_(rng_) : 1e300;
  }
  bool due(double now) const { return now >= next_ && now + c_.pause_max_ms / 1000 < c_.seconds; }
  /// The rank and length (ms) of the pause due now.
  std::pair<int, double> pick(int n) {
    const int r = static_cast<int>(rng_() % static_cast<std::uint64_t>(n));
    const double ms = len_(rng_);
    return {r, ms};
  }
  void after(double now) { next_ = now + gap_(rng_); }
  /// How long to sleep before looking again.
  double idle(double now) const { return std::min(0.05, std::max(0.0, next_ - now)); }

 private:
  const config& c_;
  std::mt19937_64 rng_;
  std::exponential_distribution<double> gap_;
  std::uniform_real_distribution<double> len_;
  double next_;
};

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

/// The run's exit status from every rank's: 1 if any failed (1, 2, a signal: -1, anything unknown), else 4 if any had
/// fail-stops, else 0.
int combine_exits(const std::vector<int>& exits) {
  int rc = 0;
  for (int e : exits) {
    if (e == 1 || e == 2 || e < 0) rc = 1;
    else if (e == 4 && rc == 0) rc = 4;
    else if (e != 0 && e != 4) rc = 1;
  }
  return rc;
}

/// How the ranks were run, for the receipt's "launcher" object.
struct launch_record {
  int ranks = 0;
  std::string ranks_as;    // "processes" or "threads"
  std::string pause_kind;  // what a pause is
  std::string fields;      // more members, each `"key": value, `
  bool killed = false;
  int rc = 0;
  std::vector<std::string> rank_exits;  // JSON values
};

/// Rank 0's receipt `part` plus the launcher object and the pauses (on rank 0's time axis), written to cfg.json.
bool finish_receipt(const config& cfg, const std::string& part, clk::time_point t0, std::vector<pause_event> pauses,
                    const launch_record& lr) {
  std::string body;
  if (std::ifstream in(part); in) {
    std::stringstream ss;
    ss << in.rdbuf();
    body = ss.str();
    std::remove(part.c_str());
  }
  const auto close = body.rfind('}');
  if (close == std::string::npos) {
    body = "{\n  \"tool\": \"rocenante-soak\",\n  \"error\": \"rank 0 wrote no receipt\"";
  } else {
    body.resize(close);
    while (!body.empty() && (body.back() == '\n' || body.back() == ' ')) body.pop_back();
  }
  // Pauses on rank 0's time axis (its t0 is after set-up), so they line up with the per-minute cells and fail-stops.
  double shift = 0;
  if (const auto at = body.find("\"t0_steady_ns\": "); at != std::string::npos) {
    const long long rank0_t0 = std::strtoll(body.c_str() + at + 16, nullptr, 10);
    const long long mine_t0 = std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count();
    shift = static_cast<double>(rank0_t0 - mine_t0) / 1e9;
  }
  for (pause_event& p : pauses) p.t_s -= shift;
  FILE* f = std::fopen(cfg.json.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "rocenante-soak: cannot write %s: %s\n", cfg.json.c_str(), std::strerror(errno));
    return false;
  }
  std::fprintf(f, "%s,\n  \"launcher\": {\"ranks\": %d, \"ranks_as\": %s, \"pause_kind\": %s, %s\"pause_mean_s\": %.2f, "
               "\"pause_min_ms\": %.0f, \"pause_max_ms\": %.0f, \"killed_at_deadline\": %s, \"exit\": %d, \"rank0_start_after_launch_s\": %.3f, \"rank_exits\": [",
               body.c_str(), lr.ranks, json_string(lr.ranks_as).c_str(), json_string(lr.pause_kind).c_str(), lr.fields.c_str(),
               cfg.pause_mean_s, cfg.pause_min_ms, cfg.pause_max_ms, lr.killed ? "true" : "false", lr.rc, shift);
  for (std::size_t r = 0; r < lr.rank_exits.size(); ++r) std::fprintf(f, "%s%s", r ? ", " : "", lr.rank_exits[r].c_str());
  std::fprintf(f, "]},\n  \"pauses_note\": \"t_s: seconds since rank 0's start (after set-up), like fail-stop t_s\",\n  \"pauses\": [");
  for (std::size_t i = 0; i < pauses.size(); ++i)
    std::fprintf(f, "%s\n    {\"t_s\": %.2f, \"rank\": %d, \"ms\": %.0f}", i ? "," : "", pauses[i].t_s, pauses[i].rank, pauses[i].ms);
  std::fprintf(f, "\n  ]\n}\n");
  std::fclose(f);
  return true;
}

std::uint16_t free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (s < 0 || ::bind(s, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    std::fprintf(stderr, "rocenante-soak: cannot find a free port (%s): pass --port\n", std::strerror(errno));
    std::exit(1);
  }
  ::close(s);
  return ntohs(a.sin_port);
}

// The launcher's ranks, for its SIGTERM/SIGINT handler (a time limit around the whole run, e.g. tools/gpu/run.sh's
// `timeout`, signals the process group): a rank the launcher has paused gets SIGCONT, or the signal would stay
// pending in a stopped process; the launcher then passes the signal on (a stop request: rank 0 ends the run at its
// next control call and writes its receipt), waits up to stop_grace_s, kills what is left, and merges the receipt.
volatile std::sig_atomic_t stop_signal = 0;
const pid_t* rank_pids = nullptr;
int rank_count = 0;
void on_stop_signal(int sig) {
  stop_signal = sig;
  for (int r = 0; r < rank_count; ++r)
    if (rank_pids[r] > 0) ::kill(rank_pids[r], SIGCONT);
}

int run_launcher(const config& cfg, const char* self) {
  const int n = cfg.launch;
  const int port = cfg.port ? cfg.port : free_port();
  if (port + cfg.max_rebuilds > 65535) usage_error("--port leaves no room for the rebuild generations");
  const std::string part = cfg.json.empty() ? std::string() : cfg.json + ".rank0";
  std::vector<std::string> args = {self};
  for (std::size_t i = 0; i < cfg.argv.size(); ++i) {
    if (cfg.argv[i] == "--json") {
      args.push_back("--json");
      args.push_back(part);
      ++i;
    } else {
      args.push_back(cfg.argv[i]);
    }
  }
  ::setenv("ROCENANTE_SOAK_COMMIT", git_commit().c_str(), 1);  // once, for every rank
  std::vector<pid_t> pids(static_cast<std::size_t>(n), -1);
  std::vector<int> exit_code(static_cast<std::size_t>(n), -1), exit_signal(static_cast<std::size_t>(n), 0);
  const auto t0 = clk::now();
  auto elapsed = [&] { return std::chrono::duration<double>(clk::now() - t0).count(); };
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::fprintf(stderr, "rocenante-soak: fork failed: %s\n", std::strerror(errno));
      for (int q = 0; q < r; ++q) ::kill(pids[q], SIGKILL);
      return 1;
    }
    if (pid == 0) {
      ::setenv("ROCENANTE_BOOTSTRAP", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
      ::setenv("ROCENANTE_RANK", std::to_string(r).c_str(), 1);
      ::setenv("ROCENANTE_WORLD_SIZE", std::to_string(n).c_str(), 1);
      if (!cfg.hca_prefix.empty()) ::setenv("ROCENANTE_IB_HCA", (cfg.hca_prefix + std::to_string(r)).c_str(), 1);
      std::vector<char*> av;
      for (auto& a : args) av.push_back(const_cast<char*>(a.c_str()));
      av.push_back(nullptr);
      ::execv("/proc/self/exe", av.data());
      std::fprintf(stderr, "rocenante-soak: exec failed: %s\n", std::strerror(errno));
      std::_Exit(127);
    }
    pids[static_cast<std::size_t>(r)] = pid;
  }
  rank_pids = pids.data();
  rank_count = n;
  catch_stop_signals(on_stop_signal);
  const char* what = cfg.gpu ? " (GPU executor)" : "";
  if (cfg.pause_mean_s > 0)
    std::printf("launcher: %d ranks%s, bootstrap 127.0.0.1:%d, a pause every ~%.1f s of %.0f..%.0f ms (timeout %llu ms)\n", n,
                what, port, cfg.pause_mean_s, cfg.pause_min_ms, cfg.pause_max_ms, static_cast<unsigned long long>(cfg.timeout_ms));
  else
    std::printf("launcher: %d ranks%s, bootstrap 127.0.0.1:%d, no pauses\n", n, what, port);
  std::fflush(stdout);

  int alive = n;
  auto reap = [&] {
    for (int r = 0; r < n; ++r) {
      if (pids[r] < 0) continue;
      int ws = 0;
      if (::waitpid(pids[r], &ws, WNOHANG) == pids[r]) {
        if (WIFEXITED(ws)) exit_code[r] = WEXITSTATUS(ws);
        else if (WIFSIGNALED(ws)) exit_signal[r] = WTERMSIG(ws);
        pids[r] = -1;
        --alive;
      }
    }
  };
  const double deadline = run_deadline_s(cfg);
  pause_schedule schedule(cfg);
  std::vector<pause_event> pauses;
  while (alive > 0 && elapsed() < deadline && !stop_signal) {
    reap();
    if (alive == 0) break;
    const double now = elapsed();
    if (schedule.due(now)) {
      const auto [r, ms] = schedule.pick(n);
      if (pids[r] > 0 && ::kill(pids[r], SIGSTOP) == 0) {
        sleep_s(ms / 1000);
        ::kill(pids[r], SIGCONT);
        pauses.push_back({now, r, ms});
      }
      schedule.after(elapsed());
      continue;
    }
    sleep_s(schedule.idle(now));
  }
  if (stop_signal && alive > 0) {  // a stop request to every rank (again, when the signal went to the process group)
    std::fprintf(stderr, "launcher: signal %d after %.0f s: asking the ranks to stop (up to %.0f s)\n",
                 static_cast<int>(stop_signal), elapsed(), stop_grace_s);
    for (int r = 0; r < n; ++r)
      if (pids[r] > 0) ::kill(pids[r], SIGTERM);
    for (const double t = elapsed(); alive > 0 && elapsed() < t + stop_grace_s;) {
      sleep_s(0.05);
      reap();
    }
  }
  bool killed = false;
  if (alive > 0) {
    killed = true;
    if (stop_signal)
      std::fprintf(stderr, "launcher: signal %d after %.0f s: killing %d rank(s)\n", static_cast<int>(stop_signal), elapsed(), alive);
    else
      std::fprintf(stderr, "launcher: %d rank(s) still running %.0f s after the start (deadline): killing them\n", alive, elapsed());
    for (int r = 0; r < n; ++r)
      if (pids[r] > 0) {
        ::kill(pids[r], SIGCONT);
        ::kill(pids[r], SIGKILL);
      }
    for (int r = 0; r < n; ++r)
      if (pids[r] > 0) {
        int ws = 0;
        ::waitpid(pids[r], &ws, 0);
        exit_signal[r] = SIGKILL;
      }
  }
  std::vector<int> exits;
  bool no_gpu = true;  // every rank exited 77: no usable GPU (--gpu)
  for (int r = 0; r < n; ++r) {
    exits.push_back(exit_signal[r] ? -1 : exit_code[r]);
    no_gpu = no_gpu && !exit_signal[r] && exit_code[r] == 77;
  }
  const int rc = no_gpu ? 77 : combine_exits(exits);
  std::printf("launcher: %zu pauses; rank exits:", pauses.size());
  for (int r = 0; r < n; ++r)
    exit_signal[r] ? std::printf(" %d:signal %d", r, exit_signal[r]) : std::printf(" %d:%d", r, exit_code[r]);
  std::printf("; exit %d\n", rc);
  if (no_gpu) {
    std::fprintf(stderr, "launcher: no rank found a usable CUDA GPU (their messages above): nothing ran, no receipt\n");
    return rc;
  }
  if (cfg.json.empty()) return rc;

  launch_record lr;
  lr.ranks = n;
  lr.ranks_as = "processes";
  lr.pause_kind = "SIGSTOP of the rank's process, SIGCONT ms later";
  lr.fields = "\"port\": " + std::to_string(port) + ", \"hca_prefix\": " + json_string(cfg.hca_prefix) +
              ", \"stopped_by_signal\": " + std::to_string(static_cast<int>(stop_signal)) + ", ";
  lr.killed = killed;
  lr.rc = rc;
  for (int r = 0; r < n; ++r)
    lr.rank_exits.push_back(exit_signal[r] ? "\"signal " + std::to_string(exit_signal[r]) + "\"" : std::to_string(exit_code[r]));
  if (!finish_receipt(cfg, part, t0, std::move(pauses), lr)) return 1;
  std::printf("launcher: receipt %s\n", cfg.json.c_str());
  return rc;
}

// ---- ranks as threads (--gpu --threads N) ---------------------------------------------------------------------

#if ROCENANTE_SOAK_GPU
/// N rank threads, each the GPU executor of its rank over one thread_world; this thread is the controller: it asks a
/// random rank to sleep before its next call (the launcher's schedule), gives up at the launcher's deadline, and
/// merges the pauses into rank 0's receipt.
int run_threads(const config& cfg) {
  if (const std::string why = gpu_unavailable(); !why.empty()) {
    std::fprintf(stderr, "rocenante-soak: --gpu --threads: %s: nothing ran\n", why.c_str());
    return 77;
  }
  const int n = cfg.threads;
  ::setenv("ROCENANTE_SOAK_COMMIT", git_commit().c_str(), 1);  // once, before the threads read it
  config rank_cfg = cfg;
  const std::string part = cfg.json.empty() ? std::string() : cfg.json + ".rank0";
  rank_cfg.json = part;
  const auto t0 = clk::now();
  auto elapsed = [&] { return std::chrono::duration<double>(clk::now() - t0).count(); };
  // Every wait among the rank threads (bootstrap exchanges, the graph and teardown waits) is bounded by this: longer
  // than a kernel's timeout plus a pause, the longest a rank may legitimately be late.
  const auto wait = std::chrono::milliseconds(std::max<long long>(
      60000, static_cast<long long>(3 * cfg.timeout_ms) + static_cast<long long>(cfg.pause_max_ms)));
  thread_world tw(n, wait, t0);
  std::vector<int> exits(static_cast<std::size_t>(n), 1);
  std::atomic<int> running{n};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        std::unique_ptr<executor> ex = make_gpu_thread_executor(rank_cfg, r, tw);
        exits[static_cast<std::size_t>(r)] = run_rank(rank_cfg, *ex);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      --running;
    });
  if (cfg.pause_mean_s > 0)
    std::printf("threads: %d ranks on GPU 0, a rank's thread sleeps before its next call every ~%.1f s for %.0f..%.0f ms "
                "(timeout %llu ms)\n", n, cfg.pause_mean_s, cfg.pause_min_ms, cfg.pause_max_ms,
                static_cast<unsigned long long>(cfg.timeout_ms));
  else
    std::printf("threads: %d ranks on GPU 0, no pauses\n", n);
  std::fflush(stdout);
  const double deadline = run_deadline_s(cfg);
  pause_schedule schedule(cfg);
  catch_stop_signals(on_stop_request);
  double stop_at = 0;  // when a stop request was first seen
  while (running > 0) {
    const double now = elapsed();
    if (stop_requested && stop_at == 0) {
      stop_at = now;
      std::fprintf(stderr, "threads: signal %d after %.0f s: rank 0 ends the run at its next control call (up to %.0f s)\n",
                   static_cast<int>(stop_requested), now, stop_grace_s);
    }
    // A thread cannot be killed: past the deadline (or the grace after a stop request) the process ends, and rank
    // 0's last minute-by-minute receipt stays in `part`.
    if (now >= deadline || (stop_at > 0 && now >= stop_at + stop_grace_s)) {
      std::fprintf(stderr, "threads: %d rank(s) still running %.0f s after the start (%s): exiting\n", running.load(), now,
                   stop_at > 0 ? "after a stop request" : "deadline");
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(1);
    }
    if (schedule.due(now)) {
      const auto [r, ms] = schedule.pick(n);
      tw.request_pause(r, ms);
      sleep_s(ms / 1000);
      schedule.after(elapsed());
      continue;
    }
    sleep_s(schedule.idle(now));
  }
  for (auto& t : threads) t.join();
  const int rc = combine_exits(exits);
  const std::vector<pause_event> pauses = tw.pauses();
  std::printf("threads: %zu pauses; rank exits:", pauses.size());
  for (int r = 0; r < n; ++r) std::printf(" %d:%d", r, exits[static_cast<std::size_t>(r)]);
  std::printf("; exit %d\n", rc);
  if (cfg.json.empty()) return rc;
  launch_record lr;
  lr.ranks = n;
  lr.ranks_as = "threads";
  lr.pause_kind = "rank's thread slept ms before its next call (a slow rank; SIGSTOP would stop every rank of the process)";
  lr.rc = rc;
  for (int e : exits) lr.rank_exits.push_back(std::to_string(e));
  if (!finish_receipt(cfg, part, t0, pauses, lr)) return 1;
  std::printf("threads: receipt %s\n", cfg.json.c_str());
  return rc;
}
#endif

}  // namespace
}  // namespace rocenante::soak

int main(int argc, char** argv) {
  using namespace rocenante::soak;
  const config cfg = parse(argc, argv);
  if (cfg.list_from >= 0) {
    for (long k = cfg.list_from; k <= cfg.list_to; ++k)
      std::printf("call %ld: %s\n", k, k % 16 == 15 ? "control all_reduce f32 4 B" : describe(choose(cfg, static_cast<std::uint64_t>(k))).c_str());
    return 0;
  }
  if (cfg.gpu) {
    if (!ROCENANTE_SOAK_GPU) {
      std::fprintf(stderr, "rocenante-soak: --gpu needs the CUDA build: this binary was built without nvcc (configure with "
                           "meson setup BUILD -Dcuda=enabled -Dgpu_archs=90a, or tools/gpu/run.sh build)\n");
      return 2;
    }
    // Before the first CUDA call of any process of the run (ranks sharing a context refuse lazy module loading, and
    // a lazy first load can wait for peers' spinning kernels: docs/api.md §5). The launcher passes it on.
    ::setenv("CUDA_MODULE_LOADING", "EAGER", 1);
    // Ranks as threads share the context's hardware work queues (8 by default, fewer under MPS) and are refused
    // when they outnumber them: ask for CUDA's most unless the user chose (docs/api.md §5). Not for ranks as
    // processes (the launcher's children inherit this environment): each has a context of its own, and under MPS
    // every client's queues come out of one shared pool (docs/operations.md).
    if (cfg.threads > 0) ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  }
  if (cfg.launch > 0) return run_launcher(cfg, argv[0]);
  ::setvbuf(stdout, nullptr, _IOLBF, 0);
#if ROCENANTE_SOAK_GPU
  if (cfg.threads > 0) return run_threads(cfg);
#endif
  catch_stop_signals(on_stop_request);  // one rank: a stop request ends the run at rank 0's next control call
#if ROCENANTE_SOAK_GPU
  if (cfg.gpu) return run_gpu_rank(cfg);
#endif
  host_executor ex(cfg);
  return run_rank(cfg, ex);
}

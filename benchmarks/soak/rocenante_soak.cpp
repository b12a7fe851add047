// rocenante-soak — a fixed-duration soak of the host executor across processes: a seeded mix of sizes (16 B..4 MiB,
// weighted toward decode sizes), dtypes (fp32, fp16, bf16), algorithms (one_shot, ring) and collectives (all-reduce,
// all-gather), every call checked exactly, ranks paused from outside (SIGSTOP/SIGCONT shorter than the timeout).
// Rank 0 writes a JSON receipt: collectives run, wrong results, fail-stops (status, message, rank), and per minute
// per size bucket p50/p99/p99.9 latency (drift), plus the pauses the launcher made.
//
//   rocenante-soak --launch 2 --seconds 60 --json soak.json                      (host: socket transport)
//   rocenante-soak --launch 2 --minutes 30 --hca-prefix rxe --json $SOFTROCE_OUT/soak.json   (tests/softroce/vm/soak.sh)
//   ROCENANTE_BOOTSTRAP=node0:29600 ROCENANTE_RANK=r ROCENANTE_WORLD_SIZE=n rocenante-soak --minutes 5   (one rank)
//
// Two roles:
//   rank      (default) one rank: bootstrap::tcp::from_env(), host::selected_communicator (the start-up vote: ibverbs
//             where every rank has an RDMA device, else socket), then the loop below.
//   launcher  (--launch N) forks N ranks of this program on 127.0.0.1 (ROCENANTE_BOOTSTRAP, ROCENANTE_RANK,
//             ROCENANTE_WORLD_SIZE; ROCENANTE_IB_HCA=PREFIX<r> with --hca-prefix), pauses a random rank for a random
//             time at random moments, waits (bounded) for every rank, and merges its pause log into rank 0's JSON.
//
// The loop. Call k's choices come from a hash of (seed, k), so every rank makes the same choices and a rank can skip
// to any k. Inputs are small integers (exact sums in every dtype and order), so every rank checks its own output
// against a reference it computes itself. Every 16 calls a one-element all-reduce carries rank 0's "time is up" flag,
// so every rank stops after the same call. Latency is rank 0's steady_clock time around the call (what an engine
// sees, pauses of peers included).
//
// A fail-stop (a call's status is not ok: a timeout, a queue pair out of retries, ...) is counted and reported
// with the rank, the call and the communicator's message; the rank then rebuilds as docs/operations.md "After a
// failure" says (tear down, new bootstrap on port + generation, new communicator), every rank agrees on the next
// call (the largest any rank reached) and the soak goes on. More than --max-rebuilds stops the run.
//
// Only the host executor is here. A GPU mode (eager and CUDA-graph calls through gpu::selected_communicator) needs a
// second `soak_comm` and a run_call that stages inputs and outputs through device buffers; the call sequence, the
// checks on the host copies, the fail-stop rebuild and the receipt stay as they are.
//
// Exit status: 0 no wrong result and no fail-stop; 1 wrong results, or a rank or the run failed; 4 fail-stops with
// 0 wrong results (each rebuilt and reported); 2 bad usage.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
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

#include <rocenante/bootstrap/tcp.hpp>
#include <rocenante/host/select.hpp>

#ifndef ROCENANTE_SOURCE_DIR
#define ROCENANTE_SOURCE_DIR "."
#endif

namespace {

using namespace rocenante;
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
  // launcher
  int launch = 0;
  int port = 0;
  double pause_mean_s = 10;
  double pause_min_ms = 50;
  double pause_max_ms = 0;  // 0: timeout / 4
  std::string hca_prefix;
  std::vector<std::string> argv;
};

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
      "  --pause-mean-s S           launcher: mean gap between pauses (default 10; 0: no pauses)\n"
      "  --pause-min-ms / --pause-max-ms   launcher: pause length range (default 50 .. timeout/4)\n"
      "  --hca-prefix P             launcher: rank r gets ROCENANTE_IB_HCA=P<r> (Soft-RoCE VM: rxe)\n"
      "  --corrupt-call K           self-test: rank 1 flips a byte of call K's output\n"
      "  --list-calls A[,B]         print what calls A..B are with these options (seed, weights, ...) and exit\n");
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
    } else if (a == "--launch") { c.launch = std::stoi(next()); keep = false; }
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
  return c;
}

// ---- the call sequence ----------------------------------------------------------------------------------------

struct bucket_def {
  const char* name;
  std::uint64_t lo, hi;  // bytes per rank, [lo, hi]
};
constexpr bucket_def buckets[5] = {{"16B-256B", 16, 255},
                                   {"256B-4K", 256, 4095},
                                   {"4K-64K", 4096, 65535},
                                   {"64K-1M", 65536, 1048575},
                                   {"1M-4M", 1048576, 4194304}};
constexpr int n_buckets = 5;

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

struct call_choice {
  bool gather = false;
  dtype type = dtype::f32;
  algorithm::algo algo = algorithm::algo::one_shot;
  std::uint64_t bytes = 16;  // per rank, a multiple of 4 (a whole count in every dtype)
  int bucket = 0;
};

/// Call k's choices: a function of (seed, k) only, so every rank agrees and a rebuilt rank can resume at any k.
call_choice choose(const config& c, std::uint64_t k) {
  std::mt19937_64 rng(splitmix(c.seed * 0x100000001b3ull ^ splitmix(k)));
  std::uniform_real_distribution<double> u(0, 1);
  call_choice ch;
  ch.gather = u(rng) < c.gather_share;
  ch.type = std::array{dtype::f32, dtype::f16, dtype::bf16}[rng() % 3];
  ch.algo = ch.gather ? algorithm::algo::one_shot : (rng() % 2 ? algorithm::algo::ring : algorithm::algo::one_shot);
  std::discrete_distribution<int> pick(c.weights.begin(), c.weights.end());
  for (int tries = 0; tries < 64; ++tries) {
    const int b = pick(rng);
    const double lo = static_cast<double>(std::max(buckets[b].lo, c.min_bytes));
    const double hi = static_cast<double>(std::min(buckets[b].hi, c.max_bytes));
    if (lo > hi) continue;  // bucket outside --min-bytes..--max-bytes
    const double x = std::exp(std::log(lo) + u(rng) * (std::log(hi) - std::log(lo)));  // log-uniform in the bucket
    ch.bytes = std::clamp<std::uint64_t>((static_cast<std::uint64_t>(x) + 3) / 4 * 4, c.min_bytes, c.max_bytes);
    ch.bytes = ch.bytes / 4 * 4;
    ch.bucket = bucket_of(ch.bytes);
    return ch;
  }
  ch.bytes = c.min_bytes / 4 * 4;
  ch.bucket = bucket_of(ch.bytes);
  return ch;
}

const char* algo_name(algorithm::algo a) { return a == algorithm::algo::ring ? "ring" : "one_shot"; }

std::string describe(const call_choice& ch) {
  char b[96];
  std::snprintf(b, sizeof b, "%s %s %s %llu B", ch.gather ? "all_gather" : "all_reduce", ch.gather ? "-" : algo_name(ch.algo),
                to_string(ch.type), static_cast<unsigned long long>(ch.bytes));
  return b;
}

/// Inputs whose sums are exact in every dtype and every order: small integers in [-6, 6].
float input_value(int rank, std::size_t i, std::uint64_t k) {
  return static_cast<float>(static_cast<int>((static_cast<std::uint64_t>(rank) * 5 + i % 11 + k) % 13) - 6);
}

// ---- one rank -------------------------------------------------------------------------------------------------

/// The executor under soak. Host: host::selected_communicator over a bootstrap::tcp of one generation.
struct soak_comm {
  std::unique_ptr<bootstrap::tcp> boot;
  std::unique_ptr<host::selected_communicator> comm;

  void build(const options& o, int generation) {
    bootstrap::tcp_config cfg = bootstrap::tcp_config_from_env();
    cfg.port = static_cast<std::uint16_t>(cfg.port + generation);  // no rank of an older world can join
    boot = std::make_unique<bootstrap::tcp>(cfg);
    comm = std::make_unique<host::selected_communicator>(*boot, o);
  }
  void tear_down() {
    comm.reset();
    boot.reset();
  }
};

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

template <class T>
T encode(float v) {
  return reduce::sum<T>::from_accum(v);
}
template <class T>
float decode(T v) {
  return reduce::sum<T>::to_accum(v);
}

/// Fills, runs and checks one call; returns the status and, when wrong, what was wrong (first element).
template <class T>
status run_call(host::selected_communicator& c, const call_choice& ch, std::uint64_t k, std::vector<std::uint8_t>& inb,
                std::vector<std::uint8_t>& outb, bool corrupt, double& seconds, std::string& wrong) {
  const int n = c.size(), me = c.rank();
  const std::size_t count = ch.bytes / sizeof(T);
  T* in = reinterpret_cast<T*>(inb.data());
  T* out = reinterpret_cast<T*>(outb.data());
  for (std::size_t i = 0; i < count; ++i) in[i] = encode<T>(input_value(me, i, k));
  const std::size_t out_count = ch.gather ? count * static_cast<std::size_t>(n) : count;
  std::memset(outb.data(), 0xff, out_count * sizeof(T));  // NaN in every dtype: a call that writes nothing is caught
  const auto t0 = clk::now();
  const status st = ch.gather ? c.all_gather(in, out, count) : c.all_reduce(in, out, count, ch.type, ch.algo);
  seconds = std::chrono::duration<double>(clk::now() - t0).count();
  if (st != status::ok) return st;
  if (corrupt) reinterpret_cast<std::uint8_t*>(out)[(out_count * sizeof(T)) / 2] ^= 0x40;
  for (std::size_t i = 0; i < out_count; ++i) {
    float want = 0;
    if (ch.gather) want = input_value(static_cast<int>(i / count), i % count, k);
    else
      for (int q = 0; q < n; ++q) want += input_value(q, i, k);
    const float got = decode<T>(out[i]);
    if (!(got == want)) {
      char buf[240];
      std::snprintf(buf, sizeof buf, "%s %s %s %llu B: element %zu is %g, expected %g", ch.gather ? "all_gather" : "all_reduce",
                    ch.gather ? "-" : algo_name(ch.algo), to_string(ch.type), static_cast<unsigned long long>(ch.bytes), i,
                    static_cast<double>(got), static_cast<double>(want));
      wrong = buf;
      break;
    }
  }
  return st;
}

struct latency_table {
  std::map<int, std::array<std::vector<float>, n_buckets>> by_minute;  // minute -> bucket -> microseconds
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

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return b;
}

/// What rank 0 knows of the run, for the receipt.
struct run_record {
  std::string started, transport, decision, commit;
  int n = 0, generation = 0;
  double run_s = 0, busy_s = 0;
  std::int64_t t0_ns = 0;  // steady_clock (CLOCK_MONOTONIC, one clock for every process of the host) at rank 0's start
  std::uint64_t mix_bucket[n_buckets] = {}, mix_type[3] = {}, mix_kind[3] = {};  // kind: one_shot, ring, all_gather
  latency_table lat;
};

/// Writes the JSON receipt (through a temporary file and a rename, so that a run killed mid-write leaves the last
/// whole receipt). `complete`: false for the minute-by-minute receipts written while the run goes on.
bool write_receipt(const config& cfg, const run_record& rr, const std::vector<rank_summary>& all, const rank_summary& mine,
                   bool complete, const std::string& exchange) {
  const totals sum(all);
  const std::uint64_t wrong = sum.wrong, fail_stops = sum.fail_stops, fail_reports = sum.fail_reports;
  const int fatal_ranks = sum.fatal_ranks;
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
  std::fprintf(f, "  \"host\": %s,\n  \"executor\": \"host\",\n  \"ranks\": %d,\n  \"transport\": %s,\n  \"decision\": %s,\n",
               json_string(host).c_str(), rr.n, json_string(rr.transport).c_str(), json_string(rr.decision).c_str());
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
  std::fprintf(f, "  \"collectives\": %llu,\n  \"control_calls\": %llu,\n  \"wrong_results\": %llu,\n  \"fail_stops\": %llu,\n"
               "  \"fail_stop_reports\": %llu,\n  \"rebuilds\": %d,\n  \"ranks_stopped_on_error\": %d,\n  \"summary_exchange\": %s,\n",
               static_cast<unsigned long long>(mine.calls), static_cast<unsigned long long>(mine.control_calls),
               static_cast<unsigned long long>(wrong), static_cast<unsigned long long>(fail_stops),
               static_cast<unsigned long long>(fail_reports), rr.generation, fatal_ranks,
               json_string(exchange).c_str());
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
  std::fprintf(f, "  ],\n  \"latency_note\": \"rank 0's steady_clock time around each checked call, microseconds; percentiles by "
               "nearest rank; p99.9 of a cell with fewer than 1000 calls is its maximum or near it\",\n");
  std::fprintf(f, "  \"overall\": [");
  for (int b = 0; b < n_buckets; ++b) {
    std::vector<float> v;
    for (auto& [m, row] : rr.lat.by_minute) v.insert(v.end(), row[b].begin(), row[b].end());
    std::fprintf(f, "%s\n    {\"bucket\": \"%s\", ", b ? "," : "", buckets[b].name);
    write_pct(percentiles(std::move(v)));
    std::fprintf(f, "}");
  }
  std::fprintf(f, "\n  ],\n  \"per_minute\": [");
  bool first = true;
  for (auto& [m, row] : rr.lat.by_minute)
    for (int b = 0; b < n_buckets; ++b) {
      if (row[b].empty()) continue;
      std::fprintf(f, "%s\n    {\"minute\": %d, \"bucket\": \"%s\", ", first ? "" : ",", m, buckets[b].name);
      write_pct(percentiles(row[b]));
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

int run_rank(const config& cfg) {
  run_record rr;
  rr.started = utc_now();
  rr.commit = git_commit();  // before set-up: no peer waits on it
  options o;
  o.capacity_bytes = cfg.max_bytes;
  o.timeout_ns = cfg.timeout_ms * 1'000'000ull;
  soak_comm sc;
  int generation = 0;
  rank_summary mine{};
  auto fatal = [&](const std::string& why) {
    mine.fatal = 1;
    copy_text(mine.fatal_message, sizeof mine.fatal_message, why);
    std::fprintf(stderr, "rank %d: %s\n", mine.rank, why.c_str());
  };
  try {
    sc.build(o, generation);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rocenante-soak: set-up failed: %s\n", e.what());
    return 1;
  }
  const int me = sc.comm->rank(), n = sc.comm->size();
  mine.rank = me;
  rr.n = n;
  rr.transport = host::to_string(sc.comm->transport());
  rr.decision = sc.comm->selected().summary();
  if (me == 0) std::printf("rank 0: %d ranks, transport %s (%s)\n", n, rr.transport.c_str(), rr.decision.c_str());
  std::vector<std::uint8_t> inb(cfg.max_bytes), outb(cfg.max_bytes * static_cast<std::size_t>(n));
  sc.boot->barrier();
  const auto t0 = clk::now();
  rr.t0_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count();
  auto elapsed = [&] { return std::chrono::duration<double>(clk::now() - t0).count(); };
  std::uint64_t k = 0;
  int last_minute_reported = -1;
  bool stop = false;
  while (!stop && !mine.fatal) {
    status st = status::ok;
    std::string message;
    if (k % 16 == 15) {  // control call: rank 0's "time is up" flag, so every rank stops after the same call
      float flag = (me == 0 && elapsed() >= cfg.seconds) ? 1.0f : 0.0f, sum = -1;
      st = sc.comm->all_reduce(&flag, &sum, 1, dtype::f32, algorithm::automatic{});
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
      switch (ch.type) {
        case dtype::f32: st = run_call<float>(*sc.comm, ch, k, inb, outb, corrupt, secs, wrong); break;
        case dtype::f16: st = run_call<__half>(*sc.comm, ch, k, inb, outb, corrupt, secs, wrong); break;
        default: st = run_call<__nv_bfloat16>(*sc.comm, ch, k, inb, outb, corrupt, secs, wrong); break;
      }
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
          rr.lat.by_minute[minute][ch.bucket].push_back(static_cast<float>(secs * 1e6));
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
    message = (k % 16 == 15 ? std::string("control all_reduce f32 4 B") : describe(choose(cfg, k))) + ": " +
              sc.comm->last_error();
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
    sc.tear_down();
    ++generation;
    try {
      sc.build(o, generation);
      struct resume {
        std::uint64_t next;
        std::int32_t time_up;
        std::int32_t pad;
      } r{k + 1, me == 0 && elapsed() >= cfg.seconds ? 1 : 0, 0};
      std::vector<resume> all(static_cast<std::size_t>(n));
      sc.boot->all_gather(&r, all.data(), sizeof r);
      k = 0;
      for (const resume& x : all) k = std::max(k, x.next);
      while (k % 16 == 15) ++k;  // resume on an ordinary call
      stop = all[0].time_up != 0;
      std::fprintf(stderr, "rank %d: rebuilt (generation %d, transport %s) in %.2f s; going on at call %llu\n", me,
                   generation, host::to_string(sc.comm->transport()), std::chrono::duration<double>(clk::now() - tr).count(),
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
  if (sc.boot) {
    try {
      sc.boot->all_gather(&mine, all.data(), sizeof mine);
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
  if (!write_receipt(cfg, rr, all, mine, true, gathered ? "ok" : "failed: " + gather_error)) return 1;
  std::printf("rank 0: receipt %s\n", cfg.json.c_str());
  return rc;
}

// ---- launcher -------------------------------------------------------------------------------------------------

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

struct pause_event {
  double t_s;
  int rank;
  double ms;
};

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
  if (cfg.pause_mean_s > 0)
    std::printf("launcher: %d ranks, bootstrap 127.0.0.1:%d, a pause every ~%.1f s of %.0f..%.0f ms (timeout %llu ms)\n", n,
                port, cfg.pause_mean_s, cfg.pause_min_ms, cfg.pause_max_ms, static_cast<unsigned long long>(cfg.timeout_ms));
  else
    std::printf("launcher: %d ranks, bootstrap 127.0.0.1:%d, no pauses\n", n, port);
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
  // Bounded: the soak, plus rebuilds (each at most a timeout to notice and the bootstrap's connect), plus slack.
  const double deadline = cfg.seconds + static_cast<double>(cfg.max_rebuilds + 3) * static_cast<double>(cfg.timeout_ms) / 1000 + 300;
  std::mt19937_64 rng(splitmix(cfg.seed ^ 0x5041555345ull));
  std::exponential_distribution<double> gap(cfg.pause_mean_s > 0 ? 1.0 / cfg.pause_mean_s : 1.0);
  std::uniform_real_distribution<double> len(cfg.pause_min_ms, cfg.pause_max_ms);
  std::vector<pause_event> pauses;
  double next_pause = cfg.pause_mean_s > 0 ? 5 + gap(rng) : 1e300;  // the first after set-up (a few seconds in)
  auto sleep_s = [](double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); };
  while (alive > 0 && elapsed() < deadline) {
    reap();
    if (alive == 0) break;
    const double now = elapsed();
    if (now >= next_pause && now + cfg.pause_max_ms / 1000 < cfg.seconds) {
      const int r = static_cast<int>(rng() % static_cast<std::uint64_t>(n));
      const double ms = len(rng);
      if (pids[r] > 0 && ::kill(pids[r], SIGSTOP) == 0) {
        sleep_s(ms / 1000);
        ::kill(pids[r], SIGCONT);
        pauses.push_back({now, r, ms});
      }
      next_pause = elapsed() + gap(rng);
      continue;
    }
    sleep_s(std::min(0.05, std::max(0.0, next_pause - now)));
  }
  bool killed = false;
  if (alive > 0) {
    killed = true;
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
  int rc = 0;
  for (int r = 0; r < n; ++r) {
    const int e = exit_signal[r] ? 1 : exit_code[r];
    if (e == 1 || e == 2 || e < 0) rc = 1;
    else if (e == 4 && rc == 0) rc = 4;
    else if (e != 0 && e != 4) rc = 1;
  }
  std::printf("launcher: %zu pauses; rank exits:", pauses.size());
  for (int r = 0; r < n; ++r)
    exit_signal[r] ? std::printf(" %d:signal %d", r, exit_signal[r]) : std::printf(" %d:%d", r, exit_code[r]);
  std::printf("; exit %d\n", rc);
  if (cfg.json.empty()) return rc;

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
    std::fprintf(stderr, "launcher: cannot write %s: %s\n", cfg.json.c_str(), std::strerror(errno));
    return 1;
  }
  std::fprintf(f, "%s,\n  \"launcher\": {\"ranks\": %d, \"port\": %d, \"hca_prefix\": %s, \"pause_mean_s\": %.2f, "
               "\"pause_min_ms\": %.0f, \"pause_max_ms\": %.0f, \"killed_at_deadline\": %s, \"exit\": %d, \"rank0_start_after_launch_s\": %.3f, \"rank_exits\": [",
               body.c_str(), n, port, json_string(cfg.hca_prefix).c_str(), cfg.pause_mean_s, cfg.pause_min_ms, cfg.pause_max_ms,
               killed ? "true" : "false", rc, shift);
  for (int r = 0; r < n; ++r)
    std::fprintf(f, "%s%s", r ? ", " : "",
                 exit_signal[r] ? ("\"signal " + std::to_string(exit_signal[r]) + "\"").c_str() : std::to_string(exit_code[r]).c_str());
  std::fprintf(f, "]},\n  \"pauses_note\": \"t_s: seconds since rank 0's start (after set-up), like fail-stop t_s\",\n  \"pauses\": [");
  for (std::size_t i = 0; i < pauses.size(); ++i)
    std::fprintf(f, "%s\n    {\"t_s\": %.2f, \"rank\": %d, \"ms\": %.0f}", i ? "," : "", pauses[i].t_s, pauses[i].rank, pauses[i].ms);
  std::fprintf(f, "\n  ]\n}\n");
  std::fclose(f);
  std::printf("launcher: receipt %s\n", cfg.json.c_str());
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  const config cfg = parse(argc, argv);
  if (cfg.list_from >= 0) {
    for (long k = cfg.list_from; k <= cfg.list_to; ++k)
      std::printf("call %ld: %s\n", k, k % 16 == 15 ? "control all_reduce f32 4 B" : describe(choose(cfg, static_cast<std::uint64_t>(k))).c_str());
    return 0;
  }
  if (cfg.launch > 0) return run_launcher(cfg, argv[0]);
  ::setvbuf(stdout, nullptr, _IOLBF, 0);
  return run_rank(cfg);
}

// tests/host/processes.hpp — ranks as processes for the test programs: the program re-executes itself once per
// rank (`PROGRAM --rank SCENARIO`), with ROCENANTE_RANK / ROCENANTE_WORLD_SIZE and ROCENANTE_BOOTSTRAP set as a
// shell loop or a launcher would, and the parent reads each rank's exit status and output. Host code, included by
// host and GPU test programs (each has a custom main that dispatches `--rank`).
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <exception>
#include <initializer_list>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <rocenante/reduce/sum.hpp>
#include <rocenante/transport/socket/net.hpp>

namespace rtest {

/// FNV-1a over bytes: ranks print it for their outputs and the parent compares them (byte-identical results).
inline std::uint64_t fnv(const void* p, std::size_t n, std::uint64_t h = 1469598103934665603ull) {
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}

struct rank_result {
  int rank = -1;
  bool replacement = false;  ///< a process started in place of one that was killed (run_world's restart_killed)
  int exit_code = -1;      ///< -1: killed by a signal or did not finish
  int signal = 0;
  double seconds = 0;      ///< from the start of the world to the exit
  std::string out;         ///< what the rank printed (stdout and stderr)
  /// The value of "key=value" on a line of its own in `out` (empty when absent).
  std::string value(const std::string& key) const {
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);)
      if (line.rfind(key + "=", 0) == 0) return line.substr(key.size() + 1);
    return {};
  }
};

/// A free TCP port on this machine (bound and released; another process could take it in between, which a test
/// run would report as a bind error naming the port), below Linux's default ephemeral range (32768-60999): a
/// scenario that listens on the port again after a rank dies (recovery) must not find it taken by an outgoing
/// connection of a test running beside it, which the kernel gives an ephemeral port (seen under TSan).
inline std::uint16_t free_port() {
  static std::mt19937 pick(static_cast<unsigned>(::getpid()) * 2654435761u ^
                           static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()));
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const auto port = static_cast<std::uint16_t>(20000 + pick() % 12000);
    rocenante::transport::sock::fd f(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    if (::bind(f.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) return port;
  }
  FAIL("no free TCP port in [20000, 32000) on 127.0.0.1 after 1000 tries");
  return 0;
}

/// A variable's value in run_world's maps that removes the variable from the rank's environment (no environment
/// value can hold a NUL).
inline const std::string unset_variable{"\0unset", 6};

/// Starts `started` of a world of `size` ranks running `scenario` (ranks 0..started-1), each with the common
/// variables (unset_variable: removed), ROCENANTE_RANK / ROCENANTE_WORLD_SIZE, and `per_rank(rank)`'s extra variables; waits at most
/// `limit` for all of them, kills what is left, and returns each rank's exit and output, in rank order.
/// `restart_killed(rank)`: called when a rank's process ends by a signal; a non-empty answer is the scenario of a
/// replacement process started at once for that rank (ROCENANTE_REPLACEMENT=1 added), whose result is appended
/// after the `started` results, with `rank` and `replacement` set.
inline std::vector<rank_result> run_world(const std::string& scenario, int size, int started,
                                          std::map<std::string, std::string> common,
                                          const std::function<std::map<std::string, std::string>(int)>& per_rank = {},
                                          std::chrono::seconds limit = std::chrono::seconds(120),
                                          const std::function<std::string(int)>& restart_killed = {}) {
  if (!common.count("ROCENANTE_BOOTSTRAP")) common["ROCENANTE_BOOTSTRAP"] = "127.0.0.1:" + std::to_string(free_port());
  char self[4096] = {};
  REQUIRE(::readlink("/proc/self/exe", self, sizeof self - 1) > 0);
  const std::string dir = "/tmp/rocenante-mp-" + std::to_string(::getpid()) + "-" + scenario;
  ::mkdir(dir.c_str(), 0700);
  struct proc {
    int rank;
    pid_t pid;
    std::string log;
    bool done = false;
  };
  std::vector<proc> procs;
  const auto t0 = std::chrono::steady_clock::now();
  auto start = [&](int r, const std::string& what, bool replacement) {
    std::map<std::string, std::string> vars = common;
    vars["ROCENANTE_RANK"] = std::to_string(r);
    vars["ROCENANTE_WORLD_SIZE"] = std::to_string(size);
    if (per_rank)
      for (auto& [k, v] : per_rank(r)) vars[k] = v;
    if (replacement) vars["ROCENANTE_REPLACEMENT"] = "1";
    const std::string log = dir + "/rank" + std::to_string(r) + (replacement ? "-replacement" : "") + ".log";
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const int f = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(f, 1);
      ::dup2(f, 2);
      for (auto& [k, v] : vars) {
        if (v == unset_variable) ::unsetenv(k.c_str());
        else ::setenv(k.c_str(), v.c_str(), 1);
      }
      // variables of a launcher that may surround this test would take precedence over nothing: clear them
      for (const char* k : {"RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK",
                            "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE"})
        if (!vars.count(k)) ::unsetenv(k);
      ::execl(self, self, "--rank", what.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    procs.push_back(proc{r, pid, log});
  };
  for (int r = 0; r < started; ++r) start(r, scenario, false);
  std::vector<rank_result> res;
  auto left = [&] {
    return std::count_if(procs.begin(), procs.end(), [](const proc& p) { return !p.done; });
  };
  while (left() > 0 && std::chrono::steady_clock::now() - t0 < limit) {
    for (std::size_t i = 0; i < procs.size(); ++i) {
      if (procs[i].done) continue;
      int st = 0;
      if (::waitpid(procs[i].pid, &st, WNOHANG) != procs[i].pid) continue;
      procs[i].done = true;
      rank_result r;
      r.rank = procs[i].rank;
      r.replacement = i >= static_cast<std::size_t>(started);
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (WIFEXITED(st)) r.exit_code = WEXITSTATUS(st);
      if (WIFSIGNALED(st)) r.signal = WTERMSIG(st);
      res.push_back(r);
      if (r.signal != 0 && restart_killed)
        if (const std::string what = restart_killed(r.rank); !what.empty()) start(r.rank, what, true);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (std::size_t i = 0; i < procs.size(); ++i) {
    if (procs[i].done) continue;
    ::kill(procs[i].pid, SIGKILL);
    ::waitpid(procs[i].pid, nullptr, 0);
    rank_result r;
    r.rank = procs[i].rank;
    r.replacement = i >= static_cast<std::size_t>(started);
    r.out = "(did not finish within the test's limit)\n";
    res.push_back(r);
  }
  // rank order, replacements last; each result gets its process's output
  std::stable_sort(res.begin(), res.end(), [](const rank_result& a, const rank_result& b) {
    return a.replacement != b.replacement ? !a.replacement : a.rank < b.rank;
  });
  for (rank_result& r : res) {
    const auto it = std::find_if(procs.begin(), procs.end(), [&](const proc& p) {
      return p.rank == r.rank && (p.log.find("-replacement") != std::string::npos) == r.replacement;
    });
    std::ifstream in(it->log);
    r.out += std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::remove(it->log.c_str());
  }
  ::rmdir(dir.c_str());
  return res;
}

/// The rank side of a program started by run_world (`PROGRAM --rank SCENARIO`): runs the scenario named `name`
/// and returns its exit status. An exception is printed as `exception=WHAT` (exit 2); an unknown name exits 64.
inline int run_scenario(const std::string& name, std::initializer_list<std::pair<std::string_view, int (*)()>> scenarios) {
  // Line-buffered: what a rank printed survives the harness killing it at the test's limit.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    for (const auto& [n, run] : scenarios)
      if (n == name) return run();
  } catch (const std::exception& e) {
    std::printf("exception=%s\n", e.what());
    return 2;
  }
  std::printf("unknown scenario %s\n", name.c_str());
  return 64;
}

// --- exact collectives across processes ---------------------------------------------------------------------------

/// Input element i of `rank` in round `round`: a small integer in [-6, 6], so that sums are exact in every dtype and
/// every summation order. Every rank can compute every rank's input, hence check its own output alone.
template <class T>
T exact_input(int rank, std::size_t i, int round) {
  return rocenante::reduce::sum<T>::from_accum(static_cast<float>((rank * 5 + static_cast<int>(i % 11) + round) % 13 - 6));
}

/// Checks the output at `got` of an n-rank all-reduce of `count` exact_input elements (gather: of an all-gather,
/// count * n elements) in round `round`; returns an empty string or what was wrong. NaN (the 0xff poison: an element
/// never written) fails too.
template <class T>
std::string check_exact(const T* got, int n, std::size_t count, int round, bool gather) {
  using R = rocenante::reduce::sum<T>;
  const std::size_t out_count = gather ? count * static_cast<std::size_t>(n) : count;
  for (std::size_t i = 0; i < out_count; ++i) {
    float want = 0;
    if (gather) want = R::to_accum(exact_input<T>(static_cast<int>(i / count), i % count, round));
    else
      for (int q = 0; q < n; ++q) want += R::to_accum(exact_input<T>(q, i, round));
    const float have = R::to_accum(got[i]);
    if (have != want)
      return "element " + std::to_string(i) + " of " + std::to_string(out_count) + " is " + std::to_string(have) +
             ", expected " + std::to_string(want);
  }
  return {};
}

// --- recovery after a lost rank ----------------------------------------------------------------------------------

/// `t` in nanoseconds of steady_clock, which is CLOCK_MONOTONIC: one clock for every process of the host, so the
/// parent can compare the times its ranks print.
inline long long monotonic_ns(std::chrono::steady_clock::time_point t = std::chrono::steady_clock::now()) {
  return static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

/// The parent's checks of a recovery world of 4 ranks (docs/operations.md "After a failure"): run_world restarted
/// rank 2 after its SIGKILL, so `rs` holds the four first lives and then the replacement. Each survivor printed
/// failure= (the health message: it must name rank 2), failed_ns= (monotonic_ns when it saw the failure) and
/// close_seconds= (its communicator's teardown, below `close_s`); every rank of generation 1, replacement included,
/// printed ready_ns= (its new communicator built), exact_after_rebuild=1000 and hash= (the same on every rank), and
/// exited 0. "Rebuilt within `rebuild_s`": from the first survivor's sight of the failure to each rank's new
/// communicator (the replacement, started at once, waits for the survivors to see the failure). `transport`: what
/// every new communicator must report in transport= (empty: not checked).
inline void check_recovered(const std::vector<rank_result>& rs, double close_s, const std::string& transport = {},
                            double rebuild_s = 10.0) {
  REQUIRE(rs.size() == 5);  // four first lives, then rank 2's replacement
  CHECK(rs[2].signal == SIGKILL);
  CHECK(rs[4].rank == 2);
  CHECK(rs[4].replacement);
  long long first_failure = LLONG_MAX;
  for (int i : {0, 1, 3})
    if (!rs[i].value("failed_ns").empty()) first_failure = std::min(first_failure, std::stoll(rs[i].value("failed_ns")));
  CHECK(first_failure != LLONG_MAX);  // some survivor saw the failure
  auto number = [](const std::string& v, double none) { return v.empty() ? none : std::stod(v); };
  for (int i : {0, 1, 3, 4}) {
    CAPTURE(i);
    CHECK(rs[i].exit_code == 0);
    const std::string ready = rs[i].value("ready_ns");
    CHECK((!ready.empty() && std::stoll(ready) - first_failure < static_cast<long long>(rebuild_s * 1e9)));
    if (!transport.empty()) CHECK(rs[i].value("transport") == transport);
    CHECK(rs[i].value("exact_after_rebuild") == "1000");
    CHECK(rs[i].value("hash").size() == 16);
    CHECK(rs[i].value("hash") == rs[0].value("hash"));  // byte-identical across processes, the replacement too
    if (i != 4) {
      CHECK(rs[i].value("failure").find("rank 2") != std::string::npos);
      CHECK(number(rs[i].value("close_seconds"), 99) < close_s);
    }
  }
}

inline std::string all_output(const std::vector<rank_result>& rs) {
  std::string s;
  for (std::size_t r = 0; r < rs.size(); ++r)
    s += "--- rank " + std::to_string(rs[r].rank) + (rs[r].replacement ? " (replacement)" : "") + " (exit " + std::to_string(rs[r].exit_code) + ", signal " +
         std::to_string(rs[r].signal) + ", " + std::to_string(rs[r].seconds) + " s):\n" + rs[r].out;
  return s;
}

}  // namespace rtest

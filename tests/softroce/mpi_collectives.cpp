// tests/softroce/mpi_collectives.cpp — multi-process tests of the ibverbs transport, one rank per process,
// started by mpirun (bootstrap::mpi). Run inside the Soft-RoCE VM by tests/softroce/*.sh; every mode prints one
// line per check ("PASS ..." / "FAIL ...") and exits 0 only when every check passed on every rank.
//
//   mpi_collectives correctness [--callback]   every algorithm x dtype x count, in-place and out-of-place:
//                                              bit-exact to the documented summation order, within the float64
//                                              reference's tolerance, guard untouched, same bytes on every rank;
//                                              all-gather exact. --callback: set-up through bootstrap::callback
//                                              (an engine's own exchange; here MPI_Allgather behind two lambdas)
//   mpi_collectives loss N [--timeout-ms T]    N exact collectives (mixed kinds and sizes, small integers): counts
//                                              wrong results (must be 0) and fail-stops (rebuilds the communicator
//                                              and goes on); latency percentiles as JSON on rank 0
//   mpi_collectives kill VICTIM AT T_MS FILE   VICTIM raises SIGKILL at collective AT (after writing its clock to
//                                              FILE); every survivor must fail, naming VICTIM, within T_MS + 2 s,
//                                              and its teardown must return within 3 s
//   mpi_collectives cut VICTIM AT CMD          rank 0 runs CMD (cut VICTIM's link) before collective AT; with a 30 s
//                                              protocol timeout, every rank must fail within 5 s through the queue
//                                              pairs' completion errors, the survivors naming VICTIM
//   mpi_collectives stop                       (a) rank 0's proxy paused across two doorbells, then resumed;
//                                              (b) rank 1 stopped with SIGSTOP five times for 300 ms during 300
//                                              collectives, resumed with SIGCONT: every collective exact
//   mpi_collectives latency ITER BYTES...      one_shot fp32 all-reduce latency per size (JSON on rank 0)
//   mpi_collectives select [ALGO]              host::selected_communicator (the start-up decision: probe, vote,
//                                              connectivity, self-test; ROCENANTE_TRANSPORT / ROCENANTE_DEBUG from
//                                              the environment), prints the selection summary on every rank
//                                              ("SELECT rank r: ..."), then one all-reduce (ALGO: auto, the
//                                              default, ring or one_shot) checked against the exact sum, then
//                                              collectives after start-up on the chosen transport: fp32 and bf16
//                                              all-reduce (auto, ring, and one_shot when connectivity allows it)
//                                              and all-gather, counts 1, 7, 4099 and capacity, exact and
//                                              byte-identical on every rank
//
// Command line as used by the VM scripts, e.g.:
//   mpirun --allow-run-as-root --oversubscribe -np 2 tests/softroce/rank-env.sh build/tests/softroce/mpi_collectives correctness
#define OMPI_SKIP_MPICXX 1  // the C API only (the C++ bindings warn under -Wextra)
#include <mpi.h>
#include <signal.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

#include <rocenante/bootstrap/mpi.hpp>
#include <rocenante/host/select.hpp>
#include <rocenante/transport/ibverbs/ibverbs.hpp>

#include "../host/common.hpp"

using namespace rtest;
using ib_comm = host::communicator<transport::ibverbs>;

namespace {

int g_rank = 0, g_size = 1;
int g_failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    ++g_failures;
    std::printf("FAIL rank %d: %s\n", g_rank, what.c_str());
    std::fflush(stdout);
  }
}

std::uint64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

/// Every rank's failures summed; every rank returns the same exit code.
int finish(const char* mode) {
  int total = 0;
  MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("%s %s: %d failed check(s) over %d ranks\n", total ? "FAIL" : "PASS", mode, total, g_size);
  std::fflush(stdout);
  return total ? 1 : 0;
}

std::uint64_t fnv1a(const void* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/// Same bytes on every rank: compare hashes.
bool identical_everywhere(const void* p, std::size_t n) {
  const std::uint64_t h = fnv1a(p, n);
  std::vector<std::uint64_t> all(static_cast<std::size_t>(g_size));
  MPI_Allgather(&h, 8, MPI_BYTE, all.data(), 8, MPI_BYTE, MPI_COMM_WORLD);
  return std::all_of(all.begin(), all.end(), [&](std::uint64_t x) { return x == h; });
}

options test_options() {
  options o;
  o.capacity_bytes = 64 * 1024;
  o.max_parts = 3;  // 3 parts: striped over 2 devices when two are configured
  o.min_part_bytes = 16;
  o.timeout_ns = 20'000'000'000ull;
  return o;
}

// ---- correctness -------------------------------------------------------------------------------------------

template <class A, class T, class Comm>
int check_all_reduce(Comm& comm, std::uint64_t case_id) {
  const int n = g_size, r = g_rank;
  int cases = 0;
  const std::size_t cap = comm.opts().capacity_bytes / sizeof(T);
  for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{16}, std::size_t{4099}, cap}) {
    std::vector<std::vector<T>> inputs(static_cast<std::size_t>(n));
    std::vector<const std::vector<T>*> ptrs;
    for (int q = 0; q < n; ++q) inputs[q] = random_input<T>(count, seed_for(q, case_id * 64 + count));
    for (int q = 0; q < n; ++q) ptrs.push_back(&inputs[q]);
    std::vector<T> out(count + guard_elems), inplace(count + guard_elems);
    poison(out);
    poison(inplace);
    std::copy(inputs[r].begin(), inputs[r].end(), inplace.begin());
    const status s1 = comm.template all_reduce<A>(inputs[r].data(), out.data(), count);
    const status s2 = comm.template all_reduce<A>(inplace.data(), inplace.data(), count);
    const std::string what = std::string(A::name) + "/" + format<T>::name + " count " + std::to_string(count);
    check(s1 == status::ok, what + ": out-of-place status " + to_string(s1) + " " + comm.last_error());
    check(s2 == status::ok, what + ": in-place status " + to_string(s2) + " " + comm.last_error());
    std::size_t bad_model = 0, bad_ref = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const int first = std::is_same_v<A, algorithm::ring> ? ring_first_rank<T>(n, count, i) : 0;
      if (!same_bits(out[i], model_sum<T>(ptrs, i, first))) ++bad_model;
      const reference ref = reference_sum<T>(ptrs, i);
      if (!(std::fabs(static_cast<double>(to_float(out[i])) - ref.value) <= ref.tolerance)) ++bad_ref;
    }
    check(bad_model == 0, what + ": " + std::to_string(bad_model) + " element(s) differ from the documented order");
    check(bad_ref == 0, what + ": " + std::to_string(bad_ref) + " element(s) off the float64 reference");
    check(std::memcmp(out.data(), inplace.data(), count * sizeof(T)) == 0, what + ": in-place differs from out-of-place");
    check(std::all_of(out.begin() + count, out.end(), is_poison<T>) &&
              std::all_of(inplace.begin() + count, inplace.end(), is_poison<T>),
          what + ": wrote past count");
    check(identical_everywhere(out.data(), count * sizeof(T)), what + ": ranks hold different bytes");
    ++cases;
  }
  return cases;
}

template <class T, class Comm>
int check_all_gather(Comm& comm, std::uint64_t case_id) {
  const int n = g_size, r = g_rank;
  int cases = 0;
  const std::size_t cap = comm.opts().capacity_bytes / sizeof(T);
  for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{4099}, cap}) {
    std::vector<std::vector<T>> inputs(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) inputs[q] = random_input<T>(count, seed_for(q, case_id * 64 + count));
    std::vector<T> out(count * n + guard_elems);
    poison(out);
    const status s = comm.all_gather(inputs[r].data(), out.data(), count);
    const std::string what = std::string("all_gather/") + format<T>::name + " count " + std::to_string(count);
    check(s == status::ok, what + ": status " + to_string(s) + " " + comm.last_error());
    for (int q = 0; q < n; ++q)
      check(std::memcmp(out.data() + q * count, inputs[q].data(), count * sizeof(T)) == 0,
            what + ": block of rank " + std::to_string(q) + " differs");
    check(std::all_of(out.begin() + count * n, out.end(), is_poison<T>), what + ": wrote past n*count");
    ++cases;
  }
  return cases;
}

template <class Boot>
int run_correctness(Boot& boot, const char* how) {
  ib_comm comm(boot, test_options());
  if (g_rank == 0)
    std::printf("ranks %d, bootstrap %s, rank 0 devices: %s, path MTU to rank 1: %d\n", g_size, how,
                comm.transport().describe().c_str(), comm.transport().path_mtu(0, 1));
  int cases = 0;
  cases += check_all_reduce<algorithm::one_shot, float>(comm, 1);
  cases += check_all_reduce<algorithm::one_shot, __half>(comm, 2);
  cases += check_all_reduce<algorithm::one_shot, __nv_bfloat16>(comm, 3);
  cases += check_all_reduce<algorithm::ring, float>(comm, 4);
  cases += check_all_reduce<algorithm::ring, __half>(comm, 5);
  cases += check_all_reduce<algorithm::ring, __nv_bfloat16>(comm, 6);
  cases += check_all_reduce<algorithm::two_shot, float>(comm, 10);  // posted per part: every rank writes every peer
  cases += check_all_reduce<algorithm::two_shot, __nv_bfloat16>(comm, 11);
  cases += check_all_gather<float>(comm, 7);
  cases += check_all_gather<__half>(comm, 8);
  cases += check_all_gather<__nv_bfloat16>(comm, 9);
  const auto st = comm.transport().stats();
  check(comm.check_health().ok(), "health after the suite: " + comm.check_health().message);
  check(!comm.transport().failed(), "transport failure: " + comm.transport().failure_message());
  check(st.posts > 0 && st.completion_errors == 0,
        "proxy posted " + std::to_string(st.posts) + " descriptors with " + std::to_string(st.completion_errors) +
            " completion errors");
  std::string per_device;
  for (int d = 0; d < comm.transport().devices(); ++d) {
    per_device += (d ? ", " : "") + std::to_string(st.device_posts[d]);
    // Striping: with several devices, each carries descriptors (parts p of peer q go to device (p + q) mod D).
    check(st.device_posts[d] > 0, "device " + std::to_string(d) + " carried no descriptor: striping is broken");
  }
  if (g_rank == 0) std::printf("rank 0: descriptors per device: %s\n", per_device.c_str());
  if (g_rank == 0)
    std::printf("rank 0: %d cases, %llu descriptors posted, %llu bytes, %llu completions, %llu credit waits\n", cases,
                static_cast<unsigned long long>(st.posts), static_cast<unsigned long long>(st.bytes),
                static_cast<unsigned long long>(st.completions), static_cast<unsigned long long>(st.credit_waits));
  return cases;
}

int mode_correctness(bool use_callback) {
  if (use_callback) {
    bootstrap::callback boot(g_rank, g_size, [](const void* s, void* r, std::size_t bytes) {
      MPI_Allgather(s, static_cast<int>(bytes), MPI_BYTE, r, static_cast<int>(bytes), MPI_BYTE, MPI_COMM_WORLD);
    });
    run_correctness(boot, "callback");
  } else {
    bootstrap::mpi boot;
    run_correctness(boot, "mpi");
  }
  return finish(use_callback ? "correctness (callback bootstrap)" : "correctness (mpi bootstrap)");
}

// ---- loss --------------------------------------------------------------------------------------------------

/// One exact collective of a kind and size drawn from `gen` (same on every rank). Returns "" or what was wrong.
std::string exact_call(ib_comm& comm, std::mt19937& gen, int it, status& s, std::vector<float>& in,
                       std::vector<float>& out) {
  const unsigned what = gen() % 4;
  const std::size_t count = gen() % 4 == 0 ? 1 + gen() % 1024 : 1 + gen() % 64;
  for (std::size_t i = 0; i < count; ++i) in[i] = small_int<float>(it, g_rank, i);
  s = what == 0   ? comm.all_reduce<algorithm::one_shot>(in.data(), out.data(), count)
      : what == 1 ? comm.all_reduce<algorithm::ring>(in.data(), out.data(), count)
      : what == 3 ? comm.all_reduce<algorithm::two_shot>(in.data(), out.data(), count)
                  : comm.all_gather(in.data(), out.data(), count);
  if (s != status::ok) return "";
  for (std::size_t i = 0; i < count; ++i) {
    if (what == 2) {
      for (int q = 0; q < g_size; ++q)
        if (out[q * count + i] != small_int<float>(it, q, i)) return "gathered element " + std::to_string(i);
    } else {
      float expect = 0;
      for (int q = 0; q < g_size; ++q) expect += small_int<float>(it, q, i);
      if (out[i] != expect) return "element " + std::to_string(i);
    }
  }
  return "";
}

int mode_loss(long target, std::uint64_t timeout_ms) {
  options o = test_options();
  o.capacity_bytes = 16 * 1024;
  o.timeout_ns = timeout_ms * 1'000'000ull;
  std::vector<float> in(4096), out(4096 * static_cast<std::size_t>(g_size));
  std::vector<double> lat_us;
  lat_us.reserve(static_cast<std::size_t>(target));
  long ok_calls = 0, wrong = 0, fail_stops = 0, it = 0;
  std::string fail_messages;
  const std::uint64_t t0 = mono_ns();
  while (ok_calls < target && fail_stops < 20) {
    bootstrap::mpi boot;
    ib_comm comm(boot, o);
    int failed = 0;
    while (ok_calls < target) {
      std::mt19937 gen(static_cast<std::uint32_t>(it) * 2654435761u + 17u);
      status s = status::internal;
      const std::uint64_t a = mono_ns();
      const std::string bad = exact_call(comm, gen, static_cast<int>(it), s, in, out);
      const std::uint64_t b = mono_ns();
      ++it;
      if (s != status::ok) {
        failed = 1;
        const std::string msg = comm.last_error() + (comm.transport().failed() ? " | " + comm.transport().failure_message() : "");
        check(msg.find("rank ") != std::string::npos, "fail-stop message names no rank: " + msg);
        fail_messages += "  rank " + std::to_string(g_rank) + " call " + std::to_string(it - 1) + ": " + msg + "\n";
        break;
      }
      ++ok_calls;
      lat_us.push_back(static_cast<double>(b - a) / 1e3);
      if (g_rank == 0 && ok_calls % 250 == 0)
        std::printf("  %ld collectives, %.1f s\n", ok_calls, static_cast<double>(mono_ns() - t0) / 1e9);
      if (!bad.empty()) {
        ++wrong;
        check(false, "call " + std::to_string(it - 1) + ": wrong " + bad);
      }
    }
    // A rank that failed stops taking part, so every other rank fails too (at the latest one timeout later) or
    // has reached the target: all of them arrive here.
    int any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!any) break;
    ++fail_stops;
    // Re-align: every rank restarts at the largest call index reached, with a fresh communicator.
    long next = it;
    MPI_Allreduce(&it, &next, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
    long ok_min = ok_calls;
    MPI_Allreduce(&ok_calls, &ok_min, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
    it = next;
    ok_calls = ok_min;
  }
  const double secs = static_cast<double>(mono_ns() - t0) / 1e9;
  if (!fail_messages.empty()) std::printf("fail-stops seen by rank %d:\n%s", g_rank, fail_messages.c_str());
  check(ok_calls >= target, "only " + std::to_string(ok_calls) + " of " + std::to_string(target) + " collectives completed");
  std::sort(lat_us.begin(), lat_us.end());
  auto pct = [&](double p) { return lat_us.empty() ? 0.0 : lat_us[static_cast<std::size_t>(p * (lat_us.size() - 1))]; };
  double mean = 0;
  for (double x : lat_us) mean += x;
  mean = lat_us.empty() ? 0 : mean / static_cast<double>(lat_us.size());
  long wrong_total = 0;
  MPI_Allreduce(&wrong, &wrong_total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0)
    std::printf("JSON {\"mode\":\"loss\",\"ranks\":%d,\"collectives\":%ld,\"wrong\":%ld,\"fail_stops\":%ld,"
                "\"seconds\":%.1f,\"latency_us\":{\"mean\":%.1f,\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,\"max\":%.1f}}\n",
                g_size, ok_calls, wrong_total, fail_stops, secs, mean, pct(0.5), pct(0.9), pct(0.99), pct(1.0));
  return finish("loss");
}

// ---- kill --------------------------------------------------------------------------------------------------

int mode_kill(int victim, long at, std::uint64_t timeout_ms, const std::string& file) {
  options o = test_options();
  o.timeout_ns = timeout_ms * 1'000'000ull;
  bootstrap::mpi boot;
  auto comm = std::make_unique<ib_comm>(boot, o);
  std::vector<float> in(1024, 1.0f), out(1024);
  MPI_Barrier(MPI_COMM_WORLD);
  for (long it = 0;; ++it) {
    if (g_rank == victim && it == at) {
      std::FILE* f = std::fopen(file.c_str(), "w");
      if (f) {
        std::fprintf(f, "%llu\n", static_cast<unsigned long long>(mono_ns()));
        std::fclose(f);
      }
      ::raise(SIGKILL);
    }
    const status s = comm->all_reduce(in.data(), out.data(), in.size());
    if (s == status::ok) {
      if (out[0] != static_cast<float>(g_size)) check(false, "wrong sum before the kill");
      if (it > at + 100000) {
        check(false, "no failure seen 100000 collectives after the kill");
        break;
      }
      continue;
    }
    const std::uint64_t t_fail = mono_ns();
    const host::health h = comm->check_health();
    std::uint64_t t_kill = 0;
    for (int tries = 0; tries < 50 && t_kill == 0; ++tries) {
      std::ifstream f(file);
      unsigned long long v = 0;
      if (f >> v) t_kill = v;
      else std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const double after_s = t_kill ? static_cast<double>(t_fail - t_kill) / 1e9 : -1;
    const std::string transport_msg = comm->transport().failure_message();
    // detail::now_ns is steady_clock, which is CLOCK_MONOTONIC on Linux: comparable with the victim's clock.
    const std::uint64_t t_cqe = comm->transport().failure_time_ns();
    const double cqe_s = t_cqe && t_kill ? (static_cast<double>(t_cqe) - static_cast<double>(t_kill)) / 1e9 : -1;
    const std::uint64_t t_td = mono_ns();
    comm.reset();  // teardown with a dead peer
    const double teardown_s = static_cast<double>(mono_ns() - t_td) / 1e9;
    const std::string victim_name = "rank " + std::to_string(victim);
    check(t_kill != 0, "victim's kill time not found in " + file);
    check(after_s >= 0 && after_s < static_cast<double>(timeout_ms) / 1e3 + 2.0,
          "failure reported " + std::to_string(after_s) + " s after the kill (bound: timeout + 2 s)");
    check(h.failure.peer == victim, "health names rank " + std::to_string(h.failure.peer) + ", not " + victim_name);
    check(h.message.find(victim_name) != std::string::npos, "health message does not name " + victim_name + ": " + h.message);
    check(teardown_s < 3.0, "teardown took " + std::to_string(teardown_s) + " s");
    std::printf("%s rank %d: call %ld returned %s %.3f s after rank %d was killed; teardown %.3f s\n  health: %s\n"
                "  transport: %s\n",
                g_failures ? "FAIL" : "PASS", g_rank, it, to_string(s), after_s, victim, teardown_s, h.message.c_str(),
                transport_msg.empty() ? "(no completion error seen)" : transport_msg.c_str());
    std::printf("JSON {\"mode\":\"kill\",\"rank\":%d,\"victim\":%d,\"detect_s\":%.3f,\"teardown_s\":%.3f,"
                "\"completion_error_s\":%.3f,\"timeout_ms\":%llu}\n",
                g_rank, victim, after_s, teardown_s, cqe_s,
                static_cast<unsigned long long>(timeout_ms));
    break;
  }
  std::fflush(stdout);
  // A peer is dead: MPI_Finalize could wait for it. The survivors' verdict is on stdout; exit directly.
  ::_exit(g_failures ? 1 : 0);
}

// ---- cut ---------------------------------------------------------------------------------------------------

/// Rank 0 runs CMD (e.g. 100% netem loss on the victim's link) before collective AT. The protocol timeout is 30 s,
/// so a failure within 5 s can only come from the queue pairs: their retries run out (IBV_WC_RETRY_EXC_ERR) and the
/// proxy turns that into the fail-stop path. Every rank must fail within 5 s; every rank but the victim must name it;
/// at least one of them must have seen the completion error itself.
int mode_cut(int victim, long at, const std::string& cmd) {
  options o = test_options();
  o.timeout_ns = 30'000'000'000ull;
  bootstrap::mpi boot;
  auto comm = std::make_unique<ib_comm>(boot, o);
  std::vector<float> in(1024, 1.0f), out(1024);
  MPI_Barrier(MPI_COMM_WORLD);
  double t_cut = 0, t_fail = 0;
  int peer = -1;
  std::string msg, tmsg;
  for (long it = 0; it < at + 100000; ++it) {
    if (g_rank == 0 && it == at) {
      check(std::system(cmd.c_str()) == 0, "command failed: " + cmd);
      t_cut = static_cast<double>(mono_ns()) / 1e9;  // the link is cut once the command returned
    }
    const status s = comm->all_reduce(in.data(), out.data(), in.size());
    if (s == status::ok) continue;
    t_fail = static_cast<double>(mono_ns()) / 1e9;
    const host::health h = comm->check_health();
    peer = h.failure.peer;
    msg = h.message;
    tmsg = comm->transport().failure_message();
    break;
  }
  const std::uint64_t t_td = mono_ns();
  comm.reset();
  const double teardown_s = static_cast<double>(mono_ns() - t_td) / 1e9;
  MPI_Bcast(&t_cut, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  const double after = t_fail > 0 ? t_fail - t_cut : -1;
  const std::string victim_name = "rank " + std::to_string(victim);
  check(after >= 0 && after < 5.0, "failure " + std::to_string(after) + " s after the cut (bound 5 s, protocol timeout 30 s)");
  if (g_rank != victim) {
    check(peer == victim, "health names rank " + std::to_string(peer) + ", not " + victim_name);
    check(msg.find(victim_name) != std::string::npos, "health message does not name " + victim_name);
  }
  // Which writer's queue pair runs out of retries first is a race; its abort reaches the others. At least one rank
  // other than the victim must have seen the completion error naming the victim.
  int mine = g_rank != victim && tmsg.find(victim_name) != std::string::npos && tmsg.find("retry") != std::string::npos;
  int seen = 0;
  MPI_Allreduce(&mine, &seen, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  check(seen >= 1 || g_rank != 0, "no rank saw a retry-exhaustion completion error naming " + victim_name);
  check(teardown_s < 3.0, "teardown took " + std::to_string(teardown_s) + " s");
  std::printf("%s rank %d: failed %.3f s after the cut of rank %d's link, naming rank %d; teardown %.3f s\n  health: %s\n"
              "  transport: %s\n",
              g_failures ? "FAIL" : "PASS", g_rank, after, victim, peer, teardown_s, msg.c_str(),
              tmsg.empty() ? "(no completion error on this rank)" : tmsg.c_str());
  std::printf("JSON {\"mode\":\"cut\",\"rank\":%d,\"victim\":%d,\"fail_after_s\":%.3f,\"named\":%d,"
              "\"completion_error\":%s,\"teardown_s\":%.3f}\n",
              g_rank, victim, after, peer, tmsg.empty() ? "false" : "true", teardown_s);
  return finish("cut");
}

// ---- stop --------------------------------------------------------------------------------------------------

int mode_stop() {
  options o = test_options();
  o.timeout_ns = 30'000'000'000ull;
  bootstrap::mpi boot;
  ib_comm comm(boot, o);
  constexpr std::size_t count = 1000;
  // (a) Rank 0's proxy paused before collective A: A completes on rank 0 (its peers' proxies deliver), rank 0
  // enters B, and both A's and B's descriptors wait behind the paused proxy; its peers still wait in A. On resume
  // the proxy must post A's, then B's (HAZARDS #1).
  {
    std::vector<float> in_a(count, static_cast<float>(g_rank + 1)), in_b(count, static_cast<float>(10 * (g_rank + 1)));
    std::vector<float> out_a(count, -1), out_b(count, -1);
    MPI_Barrier(MPI_COMM_WORLD);
    std::optional<rtest::paused_proxy> paused;  // rank 0's proxy, for 500 ms
    if (g_rank == 0) paused.emplace(comm.transport(), std::chrono::milliseconds(500));
    const status a = comm.all_reduce(in_a.data(), out_a.data(), count);
    const status b = comm.all_reduce<algorithm::ring>(in_b.data(), out_b.data(), count);
    paused.reset();
    const float sa = static_cast<float>(g_size * (g_size + 1) / 2), sb = 10 * sa;
    check(a == status::ok && b == status::ok, std::string("paused proxy: statuses ") + to_string(a) + ", " + to_string(b) +
                                                   " " + comm.last_error());
    check(std::all_of(out_a.begin(), out_a.end(), [&](float v) { return v == sa; }), "paused proxy: collective A wrong");
    check(std::all_of(out_b.begin(), out_b.end(), [&](float v) { return v == sb; }), "paused proxy: collective B wrong");
    std::printf("%s rank %d: proxy paused across two doorbells: A %s, B %s\n", g_failures ? "FAIL" : "PASS", g_rank,
                to_string(a), to_string(b));
  }
  // (b) SIGSTOP / SIGCONT of a whole peer process during a stream of collectives.
  {
    std::vector<int> pids(static_cast<std::size_t>(g_size));
    const int pid = static_cast<int>(::getpid());
    MPI_Allgather(&pid, 1, MPI_INT, pids.data(), 1, MPI_INT, MPI_COMM_WORLD);
    std::atomic<bool> done{false};
    std::atomic<int> stops{0};
    std::thread stopper;
    if (g_rank == 0)
      stopper = std::thread([&] {
        for (int k = 0; k < 5 && !done.load(); ++k) {
          std::this_thread::sleep_for(std::chrono::milliseconds(150 + 70 * k));
          ::kill(pids[1], SIGSTOP);
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          ::kill(pids[1], SIGCONT);
          stops.fetch_add(1);
        }
      });
    std::vector<float> in(4096), out(4096 * static_cast<std::size_t>(g_size));
    long wrong = 0, failed = 0;
    const int iterations = 300;
    for (int it = 0; it < iterations; ++it) {
      std::mt19937 gen(static_cast<std::uint32_t>(it) * 7919u + 3u);
      status s = status::internal;
      const std::string bad = exact_call(comm, gen, it, s, in, out);
      if (s != status::ok) {
        ++failed;
        check(false, "call " + std::to_string(it) + " across SIGSTOP: " + to_string(s) + " " + comm.last_error());
        break;
      }
      if (!bad.empty()) ++wrong, check(false, "call " + std::to_string(it) + " across SIGSTOP wrong: " + bad);
    }
    done.store(true);
    if (stopper.joinable()) stopper.join();
    if (g_rank == 0) check(stops.load() >= 1, "rank 1 was never stopped");
    std::printf("%s rank %d: %d collectives across %d SIGSTOP/SIGCONT of rank 1: %ld wrong, %ld failed\n",
                g_failures ? "FAIL" : "PASS", g_rank, iterations, g_rank == 0 ? stops.load() : -1, wrong, failed);
  }
  return finish("stop");
}

// ---- latency -----------------------------------------------------------------------------------------------

int mode_latency(int iterations, const std::vector<std::size_t>& sizes) {
  options o = test_options();
  o.capacity_bytes = 64 * 1024;
  o.max_parts = 1;
  o.min_part_bytes = 64 * 1024;
  bootstrap::mpi boot;
  ib_comm comm(boot, o);
  std::string json;
  for (std::size_t bytes : sizes) {
    const std::size_t count = std::max<std::size_t>(1, bytes / 4);
    std::vector<float> in(count, 1.0f), out(count);
    std::vector<double> us;
    for (int it = 0; it < iterations + 100; ++it) {
      const std::uint64_t a = mono_ns();
      const status s = comm.all_reduce(in.data(), out.data(), count);
      const std::uint64_t b = mono_ns();
      if (s != status::ok) {
        check(false, "latency run failed: " + comm.last_error());
        break;
      }
      if (it >= 100) us.push_back(static_cast<double>(b - a) / 1e3);
    }
    check(out[0] == static_cast<float>(g_size), "latency run: wrong sum");
    std::sort(us.begin(), us.end());
    double mean = 0;
    for (double x : us) mean += x;
    mean = us.empty() ? 0 : mean / static_cast<double>(us.size());
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s{\"bytes\":%zu,\"iterations\":%zu,\"mean_us\":%.1f,\"p50_us\":%.1f,\"p99_us\":%.1f}",
                  json.empty() ? "" : ",", count * 4, us.size(), mean, us.empty() ? 0 : us[us.size() / 2],
                  us.empty() ? 0 : us[static_cast<std::size_t>(0.99 * (us.size() - 1))]);
    json += buf;
  }
  if (g_rank == 0)
    std::printf("JSON {\"mode\":\"latency\",\"ranks\":%d,\"algorithm\":\"one_shot\",\"dtype\":\"fp32\",\"devices\":\"%s\","
                "\"idle\":\"%s\",\"sizes\":[%s]}\n",
                g_size, comm.transport().describe().c_str(),
                comm.transport().config().idle.kind == transport::idle_policy::spin    ? "spin"
                : comm.transport().config().idle.kind == transport::idle_policy::yield ? "yield"
                                                                                       : "sleep",
                json.c_str());
  return finish("latency");
}

// ---- select ------------------------------------------------------------------------------------------------

/// Collectives after start-up on whatever transport the ranks chose: small integers (exact in fp32 and bf16 in
/// any order), every rank checks the exact sum / the concatenation and that its bytes equal every other rank's.
/// Returns how many collectives ran.
template <class T>
int select_after_start_typed(host::selected_communicator& comm) {
  const int n = g_size, r = g_rank;
  const std::size_t cap = test_options().capacity_bytes / sizeof(T);
  const bool any_to_any = comm.selected().connectivity.any_to_any();
  int done = 0;
  for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{4099}, cap}) {
    std::vector<T> in(count), out(count * n);
    for (std::size_t i = 0; i < count; ++i) in[i] = small_int<T>(count, r, i);
    for (int which = 0; which < 4; ++which) {
      if ((which == 2 || which == 3) && !any_to_any) continue;  // one_shot and all-gather need every pair
      const char* what = which == 0 ? "auto all-reduce" : which == 1 ? "ring all-reduce" : which == 2 ? "one_shot all-reduce" : "all-gather";
      poison(out);
      status s = status::internal;
      if (which == 0) s = comm.all_reduce(in.data(), out.data(), count);
      else if (which == 1) s = comm.all_reduce(in.data(), out.data(), count, algorithm::ring{});
      else if (which == 2) s = comm.all_reduce(in.data(), out.data(), count, algorithm::one_shot{});
      else s = comm.all_gather(in.data(), out.data(), count);
      ++done;
      const std::string tag = std::string(what) + " " + format<T>::name + " count " + std::to_string(count);
      check(s == status::ok, tag + ": " + to_string(s) + " " + comm.last_error());
      if (s != status::ok) return done;
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < count; ++i) {
        if (which == 3) {
          for (int q = 0; q < n; ++q)
            if (!same_bits(out[q * count + i], small_int<T>(count, q, i))) ++wrong;
        } else {
          float ref = 0;
          for (int q = 0; q < n; ++q) ref += to_float(small_int<T>(count, q, i));
          if (to_float(out[i]) != ref) ++wrong;
        }
      }
      check(wrong == 0, tag + ": " + std::to_string(wrong) + " element(s) wrong");
      check(identical_everywhere(out.data(), (which == 3 ? count * n : count) * sizeof(T)), tag + ": ranks hold different bytes");
    }
  }
  return done;
}

int select_after_start(host::selected_communicator& comm) {
  return select_after_start_typed<float>(comm) + select_after_start_typed<__nv_bfloat16>(comm);
}

int mode_select(const std::string& algo) {
  bootstrap::mpi boot;
  host::selected_communicator comm(boot, test_options());
  const host::selection& sel = comm.selected();
  std::printf("SELECT rank %d: %s\n", g_rank, sel.summary().c_str());
  std::fflush(stdout);
  // Small integers: exact in fp32 in any summation order.
  const std::size_t count = 1000;
  std::vector<float> in(count), out(count, -1.0f);
  for (std::size_t i = 0; i < count; ++i) in[i] = static_cast<float>((g_rank + 1) * 5 + static_cast<int>(i % 11));
  status s = status::internal;
  if (algo == "ring") s = comm.all_reduce(in.data(), out.data(), count, algorithm::ring{});
  else if (algo == "one_shot") s = comm.all_reduce(in.data(), out.data(), count, algorithm::one_shot{});
  else s = comm.all_reduce(in.data(), out.data(), count);
  if (s != status::ok) {
    std::printf("REFUSED rank %d: %s all-reduce: %s: %s\n", g_rank, algo.c_str(), to_string(s), comm.last_error().c_str());
    check(algo == "one_shot" && s == status::not_supported && !sel.connectivity.any_to_any(),
          algo + " all-reduce returned " + to_string(s) + ": " + comm.last_error());
    return finish("select");
  }
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    float ref = 0;
    for (int q = 0; q < g_size; ++q) ref += static_cast<float>((q + 1) * 5 + static_cast<int>(i % 11));
    if (out[i] != ref) ++wrong;
  }
  check(wrong == 0, algo + " all-reduce: " + std::to_string(wrong) + " of " + std::to_string(count) + " elements wrong");
  check(identical_everywhere(out.data(), count * sizeof(float)), algo + " all-reduce: results differ between ranks");
  if (wrong == 0)
    std::printf("PASS rank %d: %s all-reduce of %zu fp32 on transport %s exact\n", g_rank, algo.c_str(), count,
                host::to_string(comm.transport()));
  const int before = g_failures;
  const int done = select_after_start(comm);
  if (g_failures == before)
    std::printf("PASS rank %d: %d collectives after start-up on transport %s exact and identical on every rank\n",
                g_rank, done, host::to_string(comm.transport()));
  return finish("select");
}

int usage() {
  std::fprintf(stderr, "usage: mpi_collectives correctness [--callback] | loss N [--timeout-ms T] | "
                       "kill VICTIM AT TIMEOUT_MS FILE | cut VICTIM AT CMD | stop | latency ITER BYTES... | "
                       "select [auto|ring|one_shot]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  int rc = 2;
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "correctness") {
      rc = mode_correctness(argc > 2 && std::string(argv[2]) == "--callback");
    } else if (mode == "loss" && argc > 2) {
      std::uint64_t t = 5000;
      if (argc > 4 && std::string(argv[3]) == "--timeout-ms") t = std::strtoull(argv[4], nullptr, 10);
      rc = mode_loss(std::atol(argv[2]), t);
    } else if (mode == "kill" && argc > 5) {
      rc = mode_kill(std::atoi(argv[2]), std::atol(argv[3]), std::strtoull(argv[4], nullptr, 10), argv[5]);
    } else if (mode == "cut" && argc > 4) {
      rc = mode_cut(std::atoi(argv[2]), std::atol(argv[3]), argv[4]);
    } else if (mode == "select") {
      rc = mode_select(argc > 2 ? argv[2] : "auto");
    } else if (mode == "stop") {
      rc = mode_stop();
    } else if (mode == "latency" && argc > 3) {
      std::vector<std::size_t> sizes;
      for (int i = 3; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
      rc = mode_latency(std::atoi(argv[2]), sizes);
    } else {
      rc = usage();
    }
  } catch (const std::exception& e) {
    std::printf("FAIL rank %d: %s: %s\n", g_rank, mode.c_str(), e.what());
    std::fflush(stdout);
    // Set-up errors are thrown on every rank together; give the others a moment to print theirs.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  MPI_Finalize();
  return rc;
}

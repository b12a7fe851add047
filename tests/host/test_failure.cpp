// tests/host/test_failure.cpp — fail-stop when a rank stops taking part: every surviving rank returns
// status::timeout within the timeout (plus scheduling slack), check_health() names the missing peer and the
// sequence, later calls return status::poisoned at once, and teardown returns (HAZARDS #11, #12, #13).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "common.hpp"

using namespace rtest;
using algorithm::one_shot;
using algorithm::ring;
using comm_t = host::communicator<transport::loopback>;

namespace {

constexpr double timeout_s = 0.5;

options failure_options() {
  options o;
  o.capacity_bytes = 16 * 1024;
  o.timeout_ns = static_cast<std::uint64_t>(timeout_s * 1e9);
  return o;
}

struct survivor {
  int good = 0;  // collectives that returned ok before the failure
  status failed = status::internal;
  double failed_seconds = 0;
  host::health health;
  std::string error;
  status later = status::internal;
  double later_seconds = 0;
  bool sum_ok = false;  // the output of the failing call holds the full sum
};

/// n ranks run `good` collectives of algorithm A; then rank `quitter` stops (returns from its function, or
/// sleeps `sleep_s` and then makes the call anyway) while the others make one more call, and then another.
template <class A>
std::vector<survivor> run_with_quitter(int n, int quitter, int good, double sleep_s, const options& o,
                                       double* total_seconds) {
  std::vector<survivor> res(n);
  stopwatch total;
  host::spawn_ranks(n, [&](bootstrap::in_process& b) {
    comm_t comm(b, o);
    const int r = b.rank();
    std::vector<float> in(1000, static_cast<float>(r)), out(1000);
    for (int i = 0; i < good; ++i) {
      if (comm.all_reduce<A>(in.data(), out.data(), in.size()) != status::ok) return;
      ++res[r].good;
    }
    if (r == quitter) {
      if (sleep_s <= 0) return;  // dead: its communicator is destroyed while the others wait for it
      std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s));
    }
    stopwatch t;
    std::fill(out.begin(), out.end(), -1.0f);
    res[r].failed = comm.all_reduce<A>(in.data(), out.data(), in.size());
    res[r].failed_seconds = t.seconds();
    res[r].sum_ok = std::all_of(out.begin(), out.end(), [n](float v) { return v == static_cast<float>(n * (n - 1) / 2); });
    res[r].error = comm.last_error();
    res[r].health = comm.check_health();
    stopwatch t2;
    res[r].later = comm.all_reduce<A>(in.data(), out.data(), in.size());
    res[r].later_seconds = t2.seconds();
    if (res[r].failed == status::ok) res[r].health = comm.check_health();
  });
  *total_seconds = total.seconds();
  return res;
}

void check_survivor(const survivor& s, int expected_peer, std::uint32_t expected_seq) {
  INFO("status ", std::string(to_string(s.failed)), " after ", s.failed_seconds, " s: ", s.error);
  CHECK(s.failed == status::timeout);
  // No lower bound: a survivor may learn of the failure from a peer's relayed abort before its own wait runs out.
  CHECK(s.failed_seconds < timeout_s + 1.0);
  CHECK(s.health.state == status::timeout);
  CHECK(s.health.failure.kind == static_cast<std::uint32_t>(protocol::failure_kind::timeout));
  CHECK(s.health.failure.peer == expected_peer);
  CHECK(s.health.failure.seq == expected_seq);
  CHECK(s.health.failure.slot == (expected_seq & 1u));
  CHECK(contains(s.health.message, "rank " + std::to_string(expected_peer)));
  CHECK(contains(s.health.message, "sequence " + std::to_string(expected_seq)));
  CHECK(contains(s.error, "rank " + std::to_string(expected_peer)));
  CHECK(s.later == status::poisoned);
  CHECK(s.later_seconds < 0.1);
}

}  // namespace

TEST_SUITE("host.failure") {
  TEST_CASE("one_shot: a rank that returns after five collectives is reported by every other rank, by name and "
            "sequence, within the timeout") {
    const options o = failure_options();
    double total = 0;
    const auto res = run_with_quitter<one_shot>(4, 3, 5, 0, o, &total);
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      CHECK(res[r].good == 5);
      check_survivor(res[r], 3, o.first_sequence + 5);
    }
    CHECK(res[3].good == 5);
    CHECK(total < 5 * (timeout_s + 1.0));  // teardown returned: every thread joined
  }

  TEST_CASE("ring: a rank that returns after five collectives is named by every other rank within the bound") {
    // A ring rank waits only for its predecessor, so ranks 1 and 2 stall on a live neighbour, with deadlines as
    // early as rank 0's, which waits for the quitter itself. Every survivor must still name the quitter (the
    // failure spreads through abort flags that carry the culprit), never a live neighbour — least of all
    // itself. Blame is decided by which deadline fires first, so the scenario runs several times.
    const options o = failure_options();
    for (int round = 0; round < 6; ++round) {
      CAPTURE(round);
      double total = 0;
      const auto res = run_with_quitter<ring>(4, 3, 5, 0, o, &total);
      for (int r = 0; r < 3; ++r) {
        CAPTURE(r);
        CHECK(res[r].good == 5);
        check_survivor(res[r], 3, o.first_sequence + 5);
      }
      CHECK(total < 5 * (timeout_s + 1.0));
    }
  }

  TEST_CASE("a rank that sleeps past the timeout is reported by the others, and its own late call fails too") {
    const options o = failure_options();
    double total = 0;
    const auto res = run_with_quitter<one_shot>(4, 3, 5, 3 * timeout_s, o, &total);
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      check_survivor(res[r], 3, o.first_sequence + 5);
    }
    // The sleeper comes back to poisoned peers. The peers had published their flags of this sequence before
    // they timed out, so the sleeper may legitimately complete it (HAZARDS #12: one rank received every flag
    // while the others timed out) with the right sum, or fail; either way its calls end within the bound, and
    // by its next call at the latest it reports the failure.
    INFO("sleeper: ", std::string(to_string(res[3].failed)), ", then ", std::string(to_string(res[3].later)), ": ",
         res[3].health.message);
    CHECK((res[3].failed == status::ok || res[3].failed == status::timeout));
    CHECK(res[3].failed_seconds < timeout_s + 1.0);
    if (res[3].failed == status::ok) {
      CHECK(res[3].sum_ok);
      CHECK(res[3].later == status::timeout);
      CHECK(res[3].later_seconds < timeout_s + 1.0);
    } else {
      CHECK(res[3].later == status::poisoned);
    }
    CHECK_FALSE(res[3].health.ok());
    CHECK(contains(res[3].health.message, "sequence " + std::to_string(o.first_sequence + (res[3].failed == status::ok ? 6 : 5))));
    CHECK(total < 10.0);
  }

  TEST_CASE("the poll budget alone bounds a wait when there is no time bound") {
    options o = failure_options();
    o.timeout_ns = 0;
    o.max_polls = 20000;
    std::vector<status> st(2, status::internal);
    std::vector<host::health> h(2);
    double seconds = 0;
    host::spawn_ranks(2, [&](bootstrap::in_process& b) {
      comm_t comm(b, o);
      if (b.rank() == 1) return;  // never takes part
      std::vector<__half> in(64), out(64);
      stopwatch t;
      st[0] = comm.all_reduce(in.data(), out.data(), in.size());
      seconds = t.seconds();
      h[0] = comm.check_health();
    });
    CHECK(st[0] == status::timeout);
    CHECK(h[0].failure.peer == 1);
    CHECK(contains(h[0].message, "rank 1"));
    CHECK(seconds < 10.0);
  }

  TEST_CASE("a fresh window is never taken for a peer's flag, also when the first sequence is 0xffffffff") {
    // flag_unset has sequence bits 0xffffffff: a waiter for sequence 0xffffffff must not read it as a peer
    // that entered another collective (mismatch), nor as an arrival. The missing peer is a timeout.
    options o = failure_options();
    o.first_sequence = 0xffffffffu;
    std::vector<status> st(3, status::internal);
    std::vector<host::health> h(3);
    host::spawn_ranks(3, [&](bootstrap::in_process& b) {
      comm_t comm(b, o);
      const int r = b.rank();
      if (r == 2) return;
      std::vector<float> in(64, 1.0f), out(64);
      st[r] = comm.all_reduce<ring>(in.data(), out.data(), in.size());
      h[r] = comm.check_health();
    });
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      CHECK(st[r] == status::timeout);
      CHECK(h[r].failure.seq == 0xffffffffu);
      CHECK(contains(h[r].message, "sequence 4294967295"));
    }
  }

  TEST_CASE("check_health from a monitoring thread sees the failure while the rank is still in the call") {
    // HAZARDS #13: health must be readable without waiting for the stuck call to return.
    const options o = failure_options();
    std::atomic<bool> saw_failure{false};
    std::atomic<double> saw_at{-1.0};
    std::vector<status> st(3, status::internal);
    host::spawn_ranks(3, [&](bootstrap::in_process& b) {
      comm_t comm(b, o);
      const int r = b.rank();
      if (r == 2) return;
      std::vector<float> in(64, 1.0f), out(64);
      if (r == 0) {
        stopwatch t;
        std::atomic<bool> stop{false};
        std::thread monitor([&] {
          while (!stop.load()) {
            if (!comm.check_health().ok()) {
              saw_failure = true;
              saw_at = t.seconds();
              return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          }
        });
        st[r] = comm.all_reduce(in.data(), out.data(), in.size());
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // give the monitor a last look
        stop = true;
        monitor.join();
      } else {
        st[r] = comm.all_reduce(in.data(), out.data(), in.size());
      }
    });
    CHECK(st[0] == status::timeout);
    CHECK(st[1] == status::timeout);
    CHECK(saw_failure.load());
    CHECK(saw_at.load() >= timeout_s);
    CHECK(saw_at.load() < timeout_s + 1.0);
  }
}

// tests/host/test_failure.cpp — fail-stop when a rank stops taking part: every surviving rank returns
// status::timeout within the timeout (plus scheduling slack), check_health() names the missing peer and the
// sequence, later calls return status::poisoned at once, and teardown returns (HAZARDS #11, #12, #13). Suite
// host.failure.poison: a call that does not complete leaves the poison value in out and counts in failures().
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

#include "common.hpp"

using namespace rtest;

namespace {

constexpr double timeout_s = 0.5;

options failure_options() {
  return {.capacity_bytes = 16 * 1024, .timeout_ns = static_cast<std::uint64_t>(timeout_s * 1e9)};
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

/// Rank 3 of 4 returns after five collectives of A: ranks 0-2 each made the five, then named rank 3 and the
/// sequence after them (check_survivor), and teardown returned (every thread joined).
template <class A>
std::vector<survivor> check_quitter_after_five(const options& o) {
  double total = 0;
  auto res = run_with_quitter<A>(4, 3, 5, 0, o, &total);
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    CHECK(res[r].good == 5);
    check_survivor(res[r], 3, o.first_sequence + 5);
  }
  CHECK(total < 5 * (timeout_s + 1.0));
  return res;
}

}  // namespace

TEST_SUITE("host.failure") {
  TEST_CASE("one_shot: a rank that returns after five collectives is reported by every other rank, by name and "
            "sequence, within the timeout") {
    const auto res = check_quitter_after_five<one_shot>(failure_options());
    CHECK(res[3].good == 5);
  }

  TEST_CASE("ring: a rank that returns after five collectives is named by every other rank within the bound") {
    // A ring rank waits only for its predecessor, so ranks 1 and 2 stall on a live neighbour, with deadlines as
    // early as rank 0's, which waits for the quitter itself. Every survivor must still name the quitter (the
    // failure spreads through abort flags that carry the culprit), never a live neighbour — least of all
    // itself. Blame is decided by which deadline fires first, so the scenario runs several times.
    for (int round = 0; round < 6; ++round) {
      CAPTURE(round);
      check_quitter_after_five<ring>(failure_options());
    }
  }

  TEST_CASE("two_shot: a rank that returns after five collectives is named by every other rank within the bound") {
    // Every rank waits for the quitter in the reduce-scatter; a survivor whose reduce-scatter wait passed would wait
    // for the owners in the all-gather, whose bound has one hop of grace more, so it learns the culprit from their
    // aborts. Blame is decided by which deadline fires first, so the scenario runs several times.
    for (int round = 0; round < 4; ++round) {
      CAPTURE(round);
      const auto res = check_quitter_after_five<algorithm::two_shot>(failure_options());
      CHECK(res[3].good == 5);
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

// Poisoned collectives never leave stale output: a call that does not complete fills `out` with the poison value
// (quiet NaN; NVFP4: scale byte 0x7f, codes 0) and counts itself in failures(), on every surviving rank.
namespace {

template <class T>
std::uint32_t bits_of(T v) {
  std::uint32_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}

template <class T>
bool all_poison(const std::vector<T>& v) {
  return std::all_of(v.begin(), v.end(), [](T x) { return bits_of(x) == algorithm::poison_bits<T>(); });
}

template <class T>
bool none_poison(const std::vector<T>& v) {
  return std::none_of(v.begin(), v.end(), [](T x) { return bits_of(x) == algorithm::poison_bits<T>(); });
}

enum class call_kind { one_shot, ring, two_shot, all_gather };

struct poison_result {
  status failed = status::ok, later = status::ok;
  std::uint64_t failures_before = 99, failures_failed = 99, failures_later = 99;
  bool good_values = false;          // the last good call's output held the sum (the "previous values")
  bool failed_all_poison = false;    // the failing call's output: all poison
  bool later_all_poison = false;     // a call on the poisoned communicator: all poison
  bool in_place_all_poison = false;  // an in-place call on the poisoned communicator: all poison
};

/// 4 ranks make three good calls; rank 3 then stops taking part while ranks 0-2 call again (that call fails), then
/// once more on the poisoned communicator, and once in place. `out` keeps the previous call's result, so a call that
/// left it alone would be caught.
template <class T>
std::vector<poison_result> run_poisoned(call_kind kind, std::size_t count) {
  options o = failure_options();
  o.capacity_bytes = 64 * 1024;
  o.min_part_bytes = 256;  // several parts: every part's elements must be filled
  std::vector<poison_result> res(4);
  host::spawn_ranks(4, [&](bootstrap::in_process& b) {
    comm_t comm(b, o);
    const int r = b.rank();
    const std::size_t out_count = kind == call_kind::all_gather ? 4 * count : count;
    std::vector<T> in(count, T(float(r + 1))), out(out_count);
    auto call = [&](const T* i, T* ou) {
      switch (kind) {
        case call_kind::one_shot: return comm.all_reduce<one_shot>(i, ou, count);
        case call_kind::ring: return comm.all_reduce<ring>(i, ou, count);
        case call_kind::two_shot: return comm.all_reduce<algorithm::two_shot>(i, ou, count);
        default: return comm.all_gather(i, ou, count);
      }
    };
    auto& me = res[r];
    me.failures_before = comm.failures();
    for (int i = 0; i < 3; ++i)
      if (call(in.data(), out.data()) != status::ok) return;
    me.good_values = none_poison(out) && float(out[0]) == (kind == call_kind::all_gather ? 1.0f : 10.0f);
    if (r == 3) return;  // dead: the others' next call cannot complete
    me.failed = call(in.data(), out.data());
    me.failures_failed = comm.failures();
    me.failed_all_poison = all_poison(out);
    std::fill(out.begin(), out.end(), T(7.0f));  // a sentinel: the next call must overwrite it too
    me.later = call(in.data(), out.data());
    me.later_all_poison = all_poison(out);
    if (kind != call_kind::all_gather) {
      std::vector<T> buf(count, T(3.0f));
      (void)call(buf.data(), buf.data());
      me.in_place_all_poison = all_poison(buf);
    }
    me.failures_later = comm.failures();
  });
  return res;
}

template <class T>
void check_poisoned(call_kind kind, std::size_t count) {
  const auto res = run_poisoned<T>(kind, count);
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    const auto& s = res[r];
    CHECK(s.failures_before == 0);
    CHECK(s.good_values);
    CHECK(s.failed == status::timeout);
    CHECK(s.failed_all_poison);
    CHECK(s.failures_failed == 1);
    CHECK(s.later == status::poisoned);
    CHECK(s.later_all_poison);
    if (kind != call_kind::all_gather) CHECK(s.in_place_all_poison);
    CHECK(s.failures_later == (kind != call_kind::all_gather ? 3u : 2u));
  }
}

}  // namespace

TEST_SUITE("host.failure.poison") {
  TEST_CASE("the poison values are the documented quiet NaNs") {
    CHECK(algorithm::poison_bits<float>() == 0x7fc00000u);
    CHECK(algorithm::poison_bits<__half>() == 0x7e00u);
    CHECK(algorithm::poison_bits<__nv_bfloat16>() == 0x7fc0u);
    CHECK(std::isnan(float(__half(__half_raw{0x7e00}))));
    CHECK(std::isnan(float(__nv_bfloat16(__nv_bfloat16_raw{0x7fc0}))));
  }

  TEST_CASE("one_shot: after a peer dies every survivor's output is NaN, never the previous values, and counted") {
    SUBCASE("fp32") { check_poisoned<float>(call_kind::one_shot, 1000); }
    SUBCASE("fp16") { check_poisoned<__half>(call_kind::one_shot, 1001); }
    SUBCASE("bf16") { check_poisoned<__nv_bfloat16>(call_kind::one_shot, 999); }
  }

  TEST_CASE("ring: after a peer dies every survivor's output is NaN, never the previous values, and counted") {
    SUBCASE("fp32") { check_poisoned<float>(call_kind::ring, 1000); }
    SUBCASE("fp16") { check_poisoned<__half>(call_kind::ring, 1001); }
    SUBCASE("bf16") { check_poisoned<__nv_bfloat16>(call_kind::ring, 999); }
  }

  TEST_CASE("two_shot: after a peer dies every survivor's output is NaN, never the previous values, and counted") {
    SUBCASE("fp32") { check_poisoned<float>(call_kind::two_shot, 1000); }
    SUBCASE("fp16") { check_poisoned<__half>(call_kind::two_shot, 1001); }
    SUBCASE("bf16") { check_poisoned<__nv_bfloat16>(call_kind::two_shot, 999); }
  }

  TEST_CASE("all-gather: after a peer dies every survivor's whole output (size() x count) is NaN and counted") {
    SUBCASE("fp32") { check_poisoned<float>(call_kind::all_gather, 300); }
    SUBCASE("fp16") { check_poisoned<__half>(call_kind::all_gather, 301); }
    SUBCASE("bf16") { check_poisoned<__nv_bfloat16>(call_kind::all_gather, 299); }
  }

  TEST_CASE("a refused call fills its output where it is safe to, and every refused call is counted") {
    // Both ranks refuse the same call, so neither waits for the other.
    options o = failure_options();
    std::vector<int> done(2, 0);
    host::spawn_ranks(2, [&](bootstrap::in_process& b) {
      comm_t comm(b, o);
      const std::size_t cap = o.capacity_bytes / sizeof(float);
      std::vector<float> in(64, 1.0f), out(2 * cap, 5.0f);
      // overlap (out = in + 1 element): refused, and out (count elements) is filled
      std::vector<float> both(65, 2.0f);
      CHECK(comm.all_reduce(both.data(), both.data() + 1, 64) == status::invalid_argument);
      CHECK(comm.failures() == 1);
      CHECK(both[0] == 2.0f);  // input only: not part of out
      CHECK(std::all_of(both.begin() + 1, both.end(), [](float v) { return bits_of(v) == 0x7fc00000u; }));
      // count above capacity: refused on the poisoned communicator, out left alone (the size is suspect)
      CHECK(comm.all_reduce(in.data(), out.data(), cap + 1) == status::poisoned);
      CHECK(comm.failures() == 2);
      CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == 5.0f; }));
      // null input, valid output: filled
      CHECK(comm.all_reduce(static_cast<const float*>(nullptr), out.data(), 64) == status::poisoned);
      CHECK(comm.failures() == 3);
      CHECK(std::all_of(out.begin(), out.begin() + 64, [](float v) { return bits_of(v) == 0x7fc00000u; }));
      CHECK(out[64] == 5.0f);
      // null output: nothing to fill, still counted
      CHECK(comm.all_reduce(in.data(), static_cast<float*>(nullptr), 64) == status::poisoned);
      CHECK(comm.failures() == 4);
      done[b.rank()] = 1;
    });
    CHECK(done[0] + done[1] == 2);
  }

  TEST_CASE("a refusal on a healthy communicator (count above capacity) leaves out alone and counts once") {
    options o = failure_options();
    std::vector<std::uint64_t> failures(2, 99);
    std::vector<int> untouched(2, 0);
    host::spawn_ranks(2, [&](bootstrap::in_process& b) {
      comm_t comm(b, o);
      const std::size_t n = o.capacity_bytes / sizeof(float) + 1;
      std::vector<float> in(n, 1.0f), out(n, 5.0f);
      CHECK(comm.all_reduce(in.data(), out.data(), n) == status::invalid_argument);
      failures[b.rank()] = comm.failures();
      untouched[b.rank()] = std::all_of(out.begin(), out.end(), [](float v) { return v == 5.0f; });
    });
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      CHECK(failures[r] == 1);
      CHECK(untouched[r] == 1);
    }
  }
}

TEST_SUITE("host.failure.poison") {
  TEST_CASE("nvfp4: after a peer dies the compressed all-reduce, the quantizing all-reduce and the NVFP4 all-gather "
            "leave NaN (T outputs) and NaN blocks (scale byte 0x7f, codes 0) on every survivor, each counted") {
    namespace fp4 = reduce::nvfp4;
    options o = failure_options();
    o.capacity_bytes = 64 * 1024;
    constexpr std::uint64_t rows = 4, cols = 64, count = rows * cols;
    struct result {
      status fp4 = status::ok, quant = status::ok, gather = status::ok;
      bool fp4_nan = false, quant_nan = false, gather_nan = false;
      std::uint64_t failures = 99;
    };
    std::vector<result> res(3);
    host::spawn_ranks(3, [&](bootstrap::in_process& b) {
      host::nvfp4_communicator<transport::loopback> comm(b, o);
      const int r = b.rank();
      std::vector<float> in(count, 1.0f + r), out(count, 0.0f);
      if (comm.all_reduce_fp4(in.data(), out.data(), count) != status::ok) return;  // a good call first
      if (r == 2) return;
      auto& me = res[r];
      me.fp4 = comm.all_reduce_fp4(in.data(), out.data(), count);
      me.fp4_nan = all_poison(out);
      algorithm::nvfp4_epilogue<float> e;
      e.rows = rows;
      e.cols = cols;
      std::vector<std::uint8_t> data(count / 2, 0x55), scales(fp4::sf_bytes(e.layout, rows, cols), 0x11);
      std::vector<float> norm(count, 3.0f);
      e.out_data = data.data();
      e.out_scales = scales.data();
      e.norm_out = norm.data();
      me.quant = comm.all_reduce_quantize(in.data(), e);
      me.quant_nan = all_poison(norm) && std::all_of(data.begin(), data.end(), [](std::uint8_t v) { return v == 0; }) &&
                     std::all_of(scales.begin(), scales.end(), [](std::uint8_t v) { return v == 0x7f; });
      // Every element of a block with scale byte 0x7f decodes to NaN.
      std::vector<float> decoded(count);
      fp4::dequantize(data.data(), scales.data(), count, 1.0f, decoded.data());
      me.quant_nan = me.quant_nan && std::all_of(decoded.begin(), decoded.end(), [](float v) { return std::isnan(v); });
      std::vector<std::uint8_t> src(count / 2, 0x33), src_scales(rows * (cols / 16), 0x38);
      std::vector<std::uint8_t> gdata(3 * count / 2, 0x55), gscales(fp4::sf_bytes(fp4::sf_layout::linear, 3 * rows, cols), 0x11);
      algorithm::nvfp4_gather g;
      g.data = src.data();
      g.scales = src_scales.data();
      g.rows = rows;
      g.cols = cols;
      g.out_data = gdata.data();
      g.out_scales = gscales.data();
      g.out_layout = fp4::sf_layout::linear;
      me.gather = comm.all_gather_nvfp4(g);
      me.gather_nan = std::all_of(gdata.begin(), gdata.end(), [](std::uint8_t v) { return v == 0; }) &&
                      std::all_of(gscales.begin(), gscales.end(), [](std::uint8_t v) { return v == 0x7f; });
      me.failures = comm.failures();
    });
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      CHECK(res[r].fp4 == status::timeout);
      CHECK(res[r].fp4_nan);
      CHECK(res[r].quant == status::poisoned);
      CHECK(res[r].quant_nan);
      CHECK(res[r].gather == status::poisoned);
      CHECK(res[r].gather_nan);
      CHECK(res[r].failures == 3);
    }
  }
}

TEST_SUITE("host.failure.poison") {
  TEST_CASE("the failure count rises once per failed collective whichever part poisons the rank and whether part 0 "
            "finished (the GPU kernels' counting rule, driven by hand)") {
    // A kernel's parts: poison() counts the call that poisons the rank; thread 0 of part 0 calls count_failed_call
    // after every call it did not finish. S = the poisoning call's sequence.
    constexpr std::uint32_t S = 41;
    auto record = [](std::uint32_t seq) {
      protocol::failure_record rec{};
      rec.kind = static_cast<std::uint32_t>(protocol::failure_kind::timeout);
      rec.seq = seq;
      return rec;
    };
    protocol::rank_state st{}, mirror{};
    SUBCASE("part 0 itself fails in S") {
      protocol::init_state(st, S);
      CHECK(protocol::poison(&st, record(S), &mirror));
      protocol::count_failed_call(&st, &mirror);  // part 0's failure path in S: already counted
      CHECK(protocol::failures(&st) == 1);
      protocol::count_failed_call(&st, &mirror);  // the next call (seq[0] still S): returns at entry
      CHECK(protocol::failures(&st) == 2);
    }
    SUBCASE("another part poisons S; part 0 returns at entry in S") {
      protocol::init_state(st, S);
      CHECK(protocol::poison(&st, record(S), &mirror));
      protocol::count_failed_call(&st, &mirror);
      CHECK(protocol::failures(&st) == 1);
      protocol::count_failed_call(&st, &mirror);
      protocol::count_failed_call(&st, &mirror);
      CHECK(protocol::failures(&st) == 3);
    }
    SUBCASE("part 0 finishes S, another part poisons it: S counted once, every later call once") {
      protocol::init_state(st, S);
      st.seq[0] = S + 1;  // part 0's finish
      CHECK(protocol::poison(&st, record(S), &mirror));
      CHECK(protocol::failures(&st) == 1);
      protocol::count_failed_call(&st, &mirror);  // next call, part 0 at entry
      CHECK(protocol::failures(&st) == 2);
      protocol::count_failed_call(&st, &mirror);
      CHECK(protocol::failures(&st) == 3);
    }
    SUBCASE("a second poison() is not counted") {
      protocol::init_state(st, S);
      CHECK(protocol::poison(&st, record(S), &mirror));
      CHECK_FALSE(protocol::poison(&st, record(S), &mirror));
      CHECK(protocol::failures(&st) == 1);
    }
    SUBCASE("a healthy rank counts nothing") {
      protocol::init_state(st, S);
      protocol::count_failed_call(&st, &mirror);
      CHECK(protocol::failures(&st) == 0);
    }
    CHECK(mirror.failures == st.failures);  // the host reads the mirror
  }
}

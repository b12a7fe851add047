// tests/host/test_sequence.cpp — sequence numbers across 2^31 and 2^32 (HAZARDS #3): collectives on both sides
// of the boundary give exact results with both algorithms and all-gather, the slot keeps alternating, and
// next_sequence() wraps modulo 2^32.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "common.hpp"

using namespace rtest;
using algorithm::one_shot;
using algorithm::ring;
using comm_t = host::communicator<transport::loopback>;

namespace {

constexpr int calls = 8;

/// 3 ranks (not a power of two) and 3 parts, starting at `first`: 8 collectives alternating one_shot, ring
/// and all-gather, with counts that change every call. Returns nothing; checks on the test thread.
void run_across(std::uint32_t first, int n) {
  options o;
  o.capacity_bytes = 8 * 1024;
  o.max_parts = 3;
  o.min_part_bytes = 64;
  o.first_sequence = first;
  o.timeout_ns = 30'000'000'000ull;
  struct record {
    std::uint32_t seq_before[calls];
    status st[calls];
    std::string wrong;
    std::uint32_t seq_after = 0;
  };
  std::vector<record> rec(n);
  host::spawn_ranks(n, [&](bootstrap::in_process& b) {
    comm_t comm(b, o);
    const int r = b.rank();
    record& me = rec[r];
    for (int k = 0; k < calls; ++k) {
      const std::size_t count = 37 + 101 * static_cast<std::size_t>(k);
      std::vector<__nv_bfloat16> in(count), out(count * n + guard_elems);
      for (std::size_t i = 0; i < count; ++i) in[i] = small_int<__nv_bfloat16>(k, r, i);
      poison(out);
      me.seq_before[k] = comm.next_sequence();
      const int what = k % 3;
      me.st[k] = what == 0   ? comm.all_reduce<one_shot>(in.data(), out.data(), count)
                 : what == 1 ? comm.all_reduce<ring>(in.data(), out.data(), count)
                             : comm.all_gather(in.data(), out.data(), count);
      for (std::size_t i = 0; i < count && me.wrong.empty(); ++i) {
        if (what == 2) {
          for (int q = 0; q < n; ++q)
            if (!same_bits(out[q * count + i], small_int<__nv_bfloat16>(k, q, i)))
              me.wrong = "call " + std::to_string(k) + " gathered element " + std::to_string(i) + " wrong";
        } else {
          float expect = 0;
          for (int q = 0; q < n; ++q) expect += to_float(small_int<__nv_bfloat16>(k, q, i));
          if (to_float(out[i]) != expect) me.wrong = "call " + std::to_string(k) + " element " + std::to_string(i) + " wrong";
        }
      }
    }
    me.seq_after = comm.next_sequence();
  });
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    INFO(rec[r].wrong);
    CHECK(rec[r].wrong.empty());
    for (int k = 0; k < calls; ++k) {
      CAPTURE(k);
      CHECK(rec[r].st[k] == status::ok);
      CHECK(rec[r].seq_before[k] == static_cast<std::uint32_t>(first + static_cast<std::uint32_t>(k)));
    }
    CHECK(rec[r].seq_after == static_cast<std::uint32_t>(first + calls));
  }
}

}  // namespace

TEST_SUITE("host.sequence") {
  TEST_CASE("collectives across 2^31 (first sequence 0x7ffffffe) are exact with both algorithms") {
    run_across(0x7ffffffeu, 3);
    run_across(0x7ffffffeu, 4);
    static_assert(0x7ffffffeu + calls == 0x80000006u);
  }

  TEST_CASE("collectives across 2^32 (first sequence 0xfffffffd) are exact and next_sequence wraps to 5") {
    run_across(0xfffffffdu, 3);
    run_across(0xfffffffdu, 4);
    static_assert(static_cast<std::uint32_t>(0xfffffffdu + calls) == 5u);
  }

  TEST_CASE("first sequences 0 and 0xffffffff work: a fresh window never satisfies or confuses a wait") {
    run_across(0u, 2);
    run_across(0xffffffffu, 2);
  }

  TEST_CASE("a failure after the wrap reports the wrapped sequence") {
    options o;
    o.capacity_bytes = 4096;
    o.first_sequence = 0xfffffffeu;
    o.timeout_ns = 300'000'000ull;
    std::vector<host::health> h(2);
    std::vector<status> st(2, status::internal);
    host::spawn_ranks(2, [&](bootstrap::in_process& b) {
      comm_t comm(b, o);
      const int r = b.rank();
      std::vector<float> in(16, 1.0f), out(16);
      for (int k = 0; k < 3; ++k)  // sequences 0xfffffffe, 0xffffffff, 0
        if (comm.all_reduce(in.data(), out.data(), in.size()) != status::ok) return;
      if (r == 1) return;
      st[r] = comm.all_reduce<ring>(in.data(), out.data(), in.size());  // sequence 1
      h[r] = comm.check_health();
    });
    CHECK(st[0] == status::timeout);
    CHECK(h[0].failure.seq == 1u);
    CHECK(h[0].failure.slot == 1u);
    CHECK(contains(h[0].message, "sequence 1 "));
  }
}

// tests/host/test_sequence.cpp — sequence numbers across 2^31 and 2^32 (HAZARDS #3): collectives on both sides
// of the boundary give exact results with both algorithms and all-gather, the slot keeps alternating,
// next_sequence() wraps modulo 2^32, and a flag word left unused for exactly 2^32 calls is not taken for the
// current call's (session::finish clears such words at the wrap points).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "common.hpp"

using namespace rtest;

namespace {

constexpr int calls = 8;

/// 8 KiB capacity, up to 3 parts of at least 64 bytes, the first collective at sequence `first`.
options three_part_options(std::uint32_t first) {
  return {.capacity_bytes = 8 * 1024, .max_parts = 3, .min_part_bytes = 64, .timeout_ns = 30'000'000'000ull,
          .first_sequence = first};
}

/// 3 ranks (not a power of two) and 3 parts, starting at `first`: 8 collectives alternating one_shot, ring
/// and all-gather, with counts that change every call. Returns nothing; checks on the test thread.
void run_across(std::uint32_t first, int n) {
  const options o = three_part_options(first);
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

/// A communicator whose epoch the test can move. Jumping over a stretch of calls that holds no scrub point
/// (session::scrub_point) and uses only part 0 stands in for running those calls: they would touch nothing else.
struct epoch_comm : comm_t {
  using comm_t::comm_t;
  void jump_to(std::uint32_t seq) {
    for (auto& e : this->state_.seq) e = seq;
  }
  protocol::rank_state* state() { return &this->state_; }
};

}  // namespace

TEST_SUITE("host.sequence") {
  TEST_CASE("a flag word unused for exactly 2^32 calls is not taken for the current call's") {
    // Call A (3 parts) at sequence 2 leaves make_flag(2, A) in parts 1 and 2 of slot 0 of each window. Then only
    // one-part calls run, for 2^32 calls: those at the wrap points are run for real, the stretches between them
    // jumped. At sequence 2 + 2^32 (= 2) a wait for part 2 of the same call A must not accept the old word.
    const options o = three_part_options(2);
    constexpr std::size_t big = 1024, small = 4;  // floats: 256 packets (3 parts), 1 packet (1 part)
    using R = reduce::sum<float>;
    static_assert(algorithm::part_count(big / reduce::lanes<R>, 64 / packet_bytes, 3) == 3);
    static_assert(algorithm::part_count(small / reduce::lanes<R>, 64 / packet_bytes, 3) == 1);
    const std::uint32_t sig_a = protocol::call_signature(protocol::collective::all_reduce,
                                                         static_cast<std::uint32_t>(one_shot::id),
                                                         static_cast<std::uint32_t>(R::dtype_id),
                                                         static_cast<std::uint32_t>(R::op_id), big);
    std::vector<int> calls_ok(2, 0);
    std::vector<std::uint64_t> word_before(2, 0);
    bool accepted = true;
    protocol::failure_record failure{};
    host::spawn_ranks(2, [&](bootstrap::in_process& b) {
      epoch_comm comm(b, o);
      const int r = b.rank();
      std::vector<float> in(big, 1.0f), out(big);
      int good = comm.all_reduce<one_shot>(in.data(), out.data(), big) == status::ok && out[big - 1] == 2.0f;
      // 2^31 - 3 calls skipped; then sequences 2^31 - 1, 2^31 (slot 0 cleared), 2^31 + 1 (slot 1 cleared).
      b.barrier();
      comm.jump_to(0x7fffffffu);
      for (int k = 0; k < 3; ++k) good += comm.all_reduce<one_shot>(in.data(), out.data(), small) == status::ok;
      // Skipped again up to 2^32 - 2; then 2^32 - 2, 2^32 - 1, 0 (slot 0 cleared) and 1 (slot 1 cleared).
      b.barrier();
      comm.jump_to(0xfffffffeu);
      for (int k = 0; k < 4; ++k) good += comm.all_reduce<one_shot>(in.data(), out.data(), small) == status::ok;
      calls_ok[r] = good;
      b.barrier();
      if (r != 0) return;
      // Sequence 2 again: rank 1 does not call. Part 2 of call A waits for rank 1 on channel 1.
      auto handle = comm.transport().handle();
      word_before[r] = *handle.local_flag(comm.layout().flag_index(0, 2, 1));
      protocol::host_team team;
      protocol::wait_policy policy;
      policy.timeout_ns = 200'000'000ull;
      protocol::session<protocol::host_team, decltype(handle)> s(team, handle, comm.state(), policy, sig_a, 2);
      REQUIRE(s.enter());
      REQUIRE(s.seq() == 2u);
      accepted = s.wait_one(1, 1);
      failure = comm.check_health().failure;
    });
    CHECK(calls_ok[0] == 8);
    CHECK(calls_ok[1] == 8);
    INFO("flag word of slot 0, part 2, channel 1 before the wait: 0x" << std::hex << word_before[0]);
    CHECK(word_before[0] != protocol::make_flag(2, sig_a));
    CHECK_FALSE(accepted);
    CHECK(failure.kind == static_cast<std::uint32_t>(protocol::failure_kind::timeout));
    CHECK(failure.part == 2u);
    CHECK(failure.seq == 2u);
  }

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
    const options o{.capacity_bytes = 4096, .timeout_ns = 300'000'000ull, .first_sequence = 0xfffffffeu};
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

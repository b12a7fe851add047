// tests/host/test_concepts.cpp — the three axes' concepts accept the real types and reject a type missing any
// one requirement; the constexpr schedule math (part split, ring chunk walk, channels, slot and wire bytes),
// the window layout and the flag words. No ranks run here: everything is arithmetic.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>

#include "common.hpp"
#include "concept_mocks.hpp"

using namespace rocenante;
using algorithm::one_shot;
using algorithm::ring;

TEST_SUITE("host.concepts") {
  TEST_CASE("the built-in reductions satisfy reduce::reduction and a reduction missing a member does not") {
    static_assert(reduce::reduction<reduce::sum<float>>);
    static_assert(reduce::reduction<reduce::sum<__half>>);
    static_assert(reduce::reduction<reduce::sum<__nv_bfloat16>>);
    static_assert(reduce::reduction<mock::reduction_ok>);
    static_assert(!reduce::reduction<mock::reduction_no_combine>);
    static_assert(!reduce::reduction<mock::reduction_no_traits>);
    static_assert(!reduce::reduction<mock::reduction_no_accum_type>);
    static_assert(!reduce::reduction<mock::reduction_no_op>);
    static_assert(!reduce::reduction<mock::reduction_wrong_combine>);
    static_assert(!reduce::reduction<mock::reduction_odd_size>);
    static_assert(!reduce::reduction<int>);
    // The same verdicts, evaluated where a failure is reported instead of stopping the build.
    CHECK(reduce::reduction<mock::reduction_ok>);
    CHECK_FALSE(reduce::reduction<mock::reduction_no_combine>);
    CHECK_FALSE(reduce::reduction<mock::reduction_odd_size>);
    CHECK(std::is_same_v<reduce::sum_for<dtype::f16>::type, reduce::sum<__half>>);
    CHECK(std::is_same_v<reduce::sum_for<dtype::bf16>::type, reduce::sum<__nv_bfloat16>>);
    CHECK(reduce::sum<__nv_bfloat16>::dtype_id != reduce::sum<__half>::dtype_id);
  }

  TEST_CASE("one_shot, two_shot and ring satisfy algorithm::algorithm and an algorithm missing a member does not") {
    static_assert(algorithm::algorithm<one_shot>);
    static_assert(algorithm::algorithm<ring>);
    static_assert(algorithm::algorithm<algorithm::two_shot>);
    CHECK(algorithm::two_shot::id != one_shot::id);
    CHECK(algorithm::two_shot::id != ring::id);
    CHECK_FALSE(algorithm::two_shot::supports_all_gather);
    static_assert(algorithm::algorithm<mock::algorithm_ok>);
    static_assert(!algorithm::algorithm<mock::algorithm_no_wire_bytes>);
    static_assert(!algorithm::algorithm<mock::algorithm_no_id>);
    static_assert(!algorithm::algorithm<mock::algorithm_no_all_gather_trait>);
    CHECK_FALSE(algorithm::algorithm<mock::algorithm_no_wire_bytes>);
    CHECK(one_shot::id != ring::id);
    CHECK(one_shot::supports_all_gather);
    CHECK_FALSE(ring::supports_all_gather);
  }

  TEST_CASE("ring and two_shot refuse a reduction that is lossy per hop and one_shot accepts it") {
    CHECK_FALSE(ring::supports<mock::reduction_lossy>);
    CHECK_FALSE(algorithm::two_shot::supports<mock::reduction_lossy>);
    CHECK_FALSE(algorithm::two_shot::supports<reduce::nvfp4_sum<float>>);
    CHECK(algorithm::two_shot::supports<reduce::sum<__half>>);
    CHECK(ring::supports<mock::reduction_ok>);
    CHECK(one_shot::supports<mock::reduction_lossy>);
    CHECK(ring::supports<reduce::sum<__nv_bfloat16>>);
  }

  TEST_CASE("the loopback transport and its handle satisfy the transport concepts; incomplete ones do not") {
    static_assert(transport::transport<transport::loopback>);
    static_assert(transport::transport_handle<transport::direct_handle>);
    static_assert(transport::transport_handle<mock::handle_ok>);
    static_assert(transport::transport<mock::transport_of<mock::handle_ok>>);
    static_assert(!transport::transport_handle<mock::handle_no_signal>);
    static_assert(!transport::transport_handle<mock::handle_no_scope>);
    static_assert(!transport::transport_handle<mock::handle_const_put_ptr>);
    static_assert(!transport::transport_handle<mock::handle_not_trivially_copyable>);
    static_assert(!transport::transport<mock::transport_of<mock::handle_no_signal>>);
    static_assert(!transport::transport<mock::transport_of<mock::handle_not_trivially_copyable>>);
    static_assert(!transport::transport<mock::transport_no_handle_fn>);
    static_assert(!transport::transport<mock::transport_no_name>);
    CHECK_FALSE(transport::transport_handle<mock::handle_not_trivially_copyable>);
    CHECK_FALSE(transport::direct_handle::shared_staging);
  }

  TEST_CASE("the bootstraps satisfy bootstrap::bootstrap and one missing barrier or all_gather does not") {
    static_assert(bootstrap::bootstrap<bootstrap::in_process>);
    static_assert(bootstrap::bootstrap<bootstrap::callback>);
    static_assert(bootstrap::bootstrap<bootstrap::bootstrap_ref>);
    static_assert(bootstrap::bootstrap<mock::bootstrap_ok>);
    static_assert(!bootstrap::bootstrap<mock::bootstrap_no_barrier>);
    static_assert(!bootstrap::bootstrap<mock::bootstrap_no_all_gather>);
    CHECK_FALSE(bootstrap::bootstrap<mock::bootstrap_no_barrier>);
    CHECK(std::is_constructible_v<bootstrap::bootstrap_ref, mock::bootstrap_ok&>);
    CHECK_FALSE(std::is_constructible_v<bootstrap::bootstrap_ref, mock::bootstrap_no_barrier&>);
  }

  TEST_CASE("host_team satisfies protocol::team and a team without all(bool) -> bool does not") {
    static_assert(protocol::team<protocol::host_team>);
    static_assert(!protocol::team<mock::team_no_all>);
    static_assert(!protocol::team<mock::team_all_returns_int>);
    CHECK_FALSE(protocol::team<mock::team_no_all>);
  }
}

// --- schedule math ----------------------------------------------------------------------------------------

namespace {

/// Over the n-1 reduce-scatter steps every chunk is sent by n-1 distinct ranks, in ring order starting at the
/// chunk's own index, and ends at its owner (the one rank that never sent it); each step is a permutation;
/// what a rank receives is what its predecessor sent, and it forwards that in the next step.
/// The all-gather then delivers each owned chunk to every other rank exactly once.
constexpr bool ring_walk_is_sound(int n) {
  for (int c = 0; c < n; ++c) {
    int visits[max_ranks] = {};
    for (int k = 0; k < n - 1; ++k)
      for (int r = 0; r < n; ++r)
        if (ring::rs_send_chunk(n, r, k) == c) {
          if (r != (c + k) % n) return false;  // summation order c, c+1, ...
          ++visits[r];
        }
    int owners = 0;
    for (int r = 0; r < n; ++r)
      if (ring::owned_chunk(n, r) == c) {
        ++owners;
        ++visits[r];
      }
    if (owners != 1) return false;
    for (int r = 0; r < n; ++r)
      if (visits[r] != 1) return false;  // every rank contributes to chunk c exactly once
  }
  for (int r = 0; r < n; ++r) {
    const int prev = (r + n - 1) % n;
    for (int k = 0; k < n - 1; ++k) {
      if (ring::rs_recv_chunk(n, r, k) != ring::rs_send_chunk(n, prev, k)) return false;
      if (k + 1 < n - 1 && ring::rs_send_chunk(n, r, k + 1) != ring::rs_recv_chunk(n, r, k)) return false;
      if (ring::ag_recv_chunk(n, r, k) != ring::ag_send_chunk(n, prev, k)) return false;
      if (k + 1 < n - 1 && ring::ag_send_chunk(n, r, k + 1) != ring::ag_recv_chunk(n, r, k)) return false;
    }
    if (n > 1 && ring::owned_chunk(n, r) != ring::rs_recv_chunk(n, r, n - 2)) return false;
    if (n > 1 && ring::ag_send_chunk(n, r, 0) != ring::owned_chunk(n, r)) return false;
    int got[max_ranks] = {};
    ++got[ring::owned_chunk(n, r)];
    for (int k = 0; k < n - 1; ++k) ++got[ring::ag_recv_chunk(n, r, k)];
    for (int c = 0; c < n; ++c)
      if (got[c] != 1) return false;  // after the all-gather every rank holds every chunk, once
  }
  for (int k = 0; k < n - 1; ++k) {  // in every step the ranks send n distinct chunks
    int seen[max_ranks] = {};
    for (int r = 0; r < n; ++r) ++seen[ring::rs_send_chunk(n, r, k)];
    for (int c = 0; c < n; ++c)
      if (seen[c] != 1) return false;
  }
  return true;
}

static_assert(ring_walk_is_sound(2) && ring_walk_is_sound(3) && ring_walk_is_sound(4) && ring_walk_is_sound(8));

}  // namespace

TEST_SUITE("host.schedule") {
  TEST_CASE("split covers [0, total) with contiguous parts in order whose sizes differ by at most one") {
    for (std::uint64_t total = 0; total <= 70; ++total)
      for (std::uint32_t parts = 1; parts <= 9; ++parts) {
        CAPTURE(total);
        CAPTURE(parts);
        std::uint64_t expect_begin = 0, lo = ~0ull, hi = 0;
        for (std::uint32_t p = 0; p < parts; ++p) {
          const algorithm::range r = algorithm::split(total, parts, p);
          REQUIRE(r.begin == expect_begin);
          REQUIRE(r.end >= r.begin);
          expect_begin = r.end;
          lo = std::min(lo, r.size());
          hi = std::max(hi, r.size());
        }
        CHECK(expect_begin == total);
        CHECK(hi - lo <= 1);
      }
    CHECK(algorithm::split(std::uint64_t{1} << 40, 7, 6).end == std::uint64_t{1} << 40);
  }

  TEST_CASE("part_count gives at least one part, at most max_parts, and at least min packets per part") {
    CHECK(algorithm::part_count(0, 4, 8) == 1);
    CHECK(algorithm::part_count(1, 4, 8) == 1);
    CHECK(algorithm::part_count(5, 0, 8) == 8);  // no minimum: every part
    CHECK(algorithm::part_count(1000, 1, 3) == 3);
    for (std::uint64_t packets = 1; packets <= 200; ++packets)
      for (std::uint64_t min_pp : {1ull, 2ull, 7ull, 64ull})
        for (std::uint32_t max_parts : {1u, 2u, 3u, 4u, 16u}) {
          CAPTURE(packets);
          CAPTURE(min_pp);
          CAPTURE(max_parts);
          const std::uint32_t p = algorithm::part_count(packets, min_pp, max_parts);
          REQUIRE(p >= 1);
          REQUIRE(p <= max_parts);
          if (p > 1) REQUIRE(packets / (p - 1) >= min_pp);  // p-1 parts would hold the minimum
          if (packets >= min_pp * max_parts) REQUIRE(p == max_parts);
        }
  }

  TEST_CASE("part_count never makes a part smaller than min_part_bytes, and makes as many parts as it can") {
    // options::min_part_bytes: "Fewest bytes of input per part". split() makes parts of floor(packets/p) or
    // one more, so the smallest part holds packets/p packets.
    for (std::uint64_t packets = 1; packets <= 200; ++packets)
      for (std::uint64_t min_pp : {2ull, 7ull, 64ull})
        for (std::uint32_t max_parts : {2u, 3u, 4u, 16u}) {
          CAPTURE(packets);
          CAPTURE(min_pp);
          CAPTURE(max_parts);
          const std::uint32_t p = algorithm::part_count(packets, min_pp, max_parts);
          if (p > 1) REQUIRE(packets / p >= min_pp);
          if (p < max_parts) REQUIRE(packets / (p + 1) < min_pp);
        }
  }

  TEST_CASE("plan_split: CTAs as part_count gives them; more parts only to keep parts at most max_part packets") {
    for (std::uint64_t packets : {1ull, 7ull, 64ull, 1000ull, 4096ull, 100000ull, 1ull << 22})
      for (std::uint64_t min_pp : {1ull, 256ull})
        for (std::uint64_t max_pp : {0ull, 1ull, 256ull, 4096ull})
          for (std::uint32_t max_parts : {1u, 16u, 1024u, 4096u})
            for (std::uint32_t max_ctas : {1u, 3u, 32u}) {
              CAPTURE(packets);
              CAPTURE(min_pp);
              CAPTURE(max_pp);
              CAPTURE(max_parts);
              CAPTURE(max_ctas);
              const auto sp = algorithm::plan_split(packets, min_pp, max_pp, max_parts, max_ctas);
              const std::uint32_t cap = max_ctas < max_parts ? max_ctas : max_parts;
              REQUIRE(sp.ctas == algorithm::part_count(packets, min_pp, cap));
              REQUIRE(sp.parts >= sp.ctas);
              REQUIRE(sp.parts <= (max_parts > sp.ctas ? max_parts : sp.ctas));
              if (max_pp == 0) REQUIRE(sp.parts == sp.ctas);
              // every part holds at most max_pp packets unless the part count hit max_parts
              if (max_pp != 0 && sp.parts < max_parts) REQUIRE(protocol::ceil_div(packets, sp.parts) <= max_pp);
              // no more parts than needed for that
              if (sp.parts > sp.ctas) REQUIRE(protocol::ceil_div(packets, sp.parts - 1) > max_pp);
            }
  }

  TEST_CASE("ring chunks: every chunk visits every rank exactly once in reduce-scatter and owned_chunk matches") {
    for (int n = 2; n <= max_ranks; ++n) {
      CAPTURE(n);
      CHECK(ring_walk_is_sound(n));
      for (int r = 0; r < n; ++r) CHECK(ring::owned_chunk(n, r) == (r + 1) % n);
    }
  }

  TEST_CASE("channels, steps and wire bytes follow the closed forms of each algorithm") {
    for (int n = 1; n <= max_ranks; ++n) {
      CAPTURE(n);
      CHECK(one_shot::channels(n) == (n > 1 ? static_cast<std::uint32_t>(n) : 1u));
      CHECK(ring::channels(n) == (n > 1 ? 2u * (n - 1) : 1u));
      CHECK(one_shot::steps(n) == (n > 1 ? 1u : 0u));
      CHECK(ring::steps(n) == (n > 1 ? 2u * (n - 1) : 0u));
      CHECK(algorithm::two_shot::channels(n) == (n > 1 ? 2u * n : 1u));
      CHECK(algorithm::two_shot::steps(n) == (n > 1 ? 2u : 0u));
      for (std::uint64_t bytes : {16ull, 4100ull, 65536ull}) {
        CAPTURE(bytes);
        CHECK(one_shot::wire_bytes(n, bytes) == (n - 1) * bytes);
        const std::uint64_t chunk = (bytes + n - 1) / n;
        CHECK(ring::wire_bytes(n, bytes) == (n > 1 ? 2 * (n - 1) * chunk : 0));  // fp32: partials as wide as data
        CHECK(ring::wire_bytes(n, bytes, 2) == (n > 1 ? 3 * (n - 1) * chunk : 0));  // 16-bit: fp32 partials in RS
        if (n >= 3) CHECK(ring::wire_bytes(n, bytes) < one_shot::wire_bytes(n, bytes));  // why the ring exists
        CHECK(algorithm::two_shot::wire_bytes(n, bytes) == (n > 1 ? 2 * (n - 1) * chunk : 0));  // inputs, not partials
        if (n >= 3) CHECK(algorithm::two_shot::wire_bytes(n, bytes) < one_shot::wire_bytes(n, bytes));
        CHECK(algorithm::two_shot::wire_bytes(n, bytes) <= ring::wire_bytes(n, bytes, 2));
      }
    }
  }

  TEST_CASE("slot bytes hold the farthest byte each algorithm writes, for every count up to capacity") {
    for (int n = 1; n <= max_ranks; ++n)
      for (std::uint64_t cap : {1ull, 15ull, 16ull, 17ull, 4096ull + 12, 65536ull, 1000003ull}) {
        CAPTURE(n);
        CAPTURE(cap);
        // one_shot: source q at q * align_up(cap, 16), whole packets.
        const std::uint64_t stride = protocol::align_up(cap, packet_bytes);
        CHECK(one_shot::slot_bytes(n, cap) >= static_cast<std::uint64_t>(n) * stride);
        // ring: RS step j at j*K*A (A = 32 for 16-bit types, 16 for fp32), AG step j at (n-1)*K*A + j*K*16.
        for (std::uint64_t elem : {2ull, 4ull}) {
          const std::uint64_t count = cap / elem;
          if (count == 0 || n == 1) continue;
          const std::uint64_t lanes = packet_bytes / elem, abytes = 4 * lanes;
          const std::uint64_t k = ring::chunk_packets(n, protocol::ceil_div(count, lanes));
          const std::uint64_t end = (n - 1) * k * abytes + (n - 1) * k * packet_bytes;
          CHECK(ring::slot_bytes(n, cap) >= end);
          // two_shot: source q at q * n*K*16, packet i of chunk c at q * n*K*16 + i*16 (i < n*K).
          const std::uint64_t packets = protocol::ceil_div(count, lanes), k2 = algorithm::chunk_packets(n, packets);
          CHECK(algorithm::two_shot::source_stride(n, packets) == n * k2 * packet_bytes);
          CHECK(algorithm::two_shot::slot_bytes(n, cap) >= (n - 1) * n * k2 * packet_bytes + packets * packet_bytes);
        }
      }
  }

  TEST_CASE("two_shot: at every rank, the reduce-scatter packets and the all-gathered packets of a source never meet") {
    // At rank x, source q receives chunk x from q (reduce-scatter, q != x) and chunk q from its owner q (all-gather):
    // disjoint for q != x, and within the source's stride for every chunk.
    for (int n = 2; n <= max_ranks; ++n)
      for (std::uint64_t packets : {1ull, 2ull, 15ull, 16ull, 17ull, 1000ull}) {
        CAPTURE(n);
        CAPTURE(packets);
        const std::uint64_t k = algorithm::chunk_packets(n, packets);
        const std::uint64_t stride = algorithm::two_shot::source_stride(n, packets);
        for (int x = 0; x < n; ++x)
          for (int q = 0; q < n; ++q) {
            if (q == x) continue;
            const algorithm::range rs = algorithm::chunk_part(x, k, packets, {0, k});
            const algorithm::range ag = algorithm::chunk_part(q, k, packets, {0, k});
            CHECK((rs.end <= ag.begin || ag.end <= rs.begin));
            CHECK(rs.end * packet_bytes <= stride);
            CHECK(ag.end * packet_bytes <= stride);
          }
        for (int q = 0; q < n; ++q) {  // the abort path of a closed peer covers both of q's channels, nothing else
          for (std::uint32_t ch = 0; ch < algorithm::two_shot::channels(n); ++ch)
            CHECK(algorithm::writes_channel(static_cast<std::uint32_t>(algorithm::algo::two_shot), n, (q + 1) % n, q, ch) ==
                  (ch == algorithm::two_shot::rs_channel(q) || ch == algorithm::two_shot::ag_channel(n, q)));
        }
      }
  }

  TEST_CASE("make_layout: flags do not overlap data, slots do not overlap, every flag index is distinct") {
    for (int n : {1, 2, 3, 4, 8, 16})
      for (std::uint32_t max_parts : {1u, 3u, 4u, 64u})
        for (std::uint64_t cap : {16ull, 1000ull, 65536ull}) {
          CAPTURE(n);
          CAPTURE(max_parts);
          CAPTURE(cap);
          options o;
          o.capacity_bytes = cap;
          o.max_parts = max_parts;
          const protocol::window_layout l = host::make_layout<one_shot, ring, algorithm::two_shot>(n, o);
          CHECK(l.ranks == static_cast<std::uint32_t>(n));
          CHECK(l.channels >= one_shot::channels(n));
          CHECK(l.channels >= ring::channels(n));
          CHECK(l.channels >= algorithm::two_shot::channels(n));
          CHECK(l.slot_bytes >= algorithm::two_shot::slot_bytes(n, cap));
          CHECK(l.source_stride >= cap);
          CHECK(l.source_stride % packet_bytes == 0);
          CHECK(l.slot_bytes >= one_shot::slot_bytes(n, cap));
          CHECK(l.slot_bytes >= ring::slot_bytes(n, cap));
          CHECK(l.flag_count() == std::uint64_t{slot_count} * max_parts * l.channels);
          CHECK(l.flags_bytes() >= l.flag_count() * sizeof(std::uint64_t));
          CHECK(l.data_offset(0) >= l.flag_count() * sizeof(std::uint64_t));  // flags end before slot 0
          CHECK(l.data_offset(1) >= l.data_offset(0) + l.slot_bytes);         // slot 0 ends before slot 1
          CHECK(l.total_bytes() >= l.data_offset(1) + l.slot_bytes);          // slot 1 inside the window
          CHECK(l.data_offset(0) % 4096 == 0);
          CHECK(l.data_offset(1) % 4096 == 0);
          std::set<std::uint64_t> seen;
          for (std::uint32_t s = 0; s < slot_count; ++s)
            for (std::uint32_t p = 0; p < max_parts; ++p)
              for (std::uint32_t c = 0; c < l.channels; ++c) {
                const std::uint64_t i = l.flag_index(s, p, c);
                REQUIRE(i < l.flag_count());
                seen.insert(i);
              }
          CHECK(seen.size() == l.flag_count());
        }
  }

  TEST_CASE("make_layout: a Lamport area only for directly written GPU windows of 2..lamport_max_ranks ranks, after "
            "every other region, sized for ranks x the Lamport input of each slot") {
    for (int n : {1, 2, 3, 4, 8, 9, 16})
      for (bool with_ll : {false, true})
        for (std::uint64_t cap : {1000ull, 65536ull, 1ull << 20})
          for (std::uint64_t lamport : {0ull, 8192ull, 65536ull}) {
            CAPTURE(n);
            CAPTURE(with_ll);
            CAPTURE(cap);
            CAPTURE(lamport);
            options o;
            o.capacity_bytes = cap;
            o.lamport_max_bytes = lamport;
            const protocol::window_layout l = host::make_layout<one_shot, ring, algorithm::two_shot>(n, o, with_ll);
            const bool has = with_ll && n >= 2 && n <= lamport_max_ranks && lamport != 0;
            CHECK((l.lamport_bytes != 0) == has);
            CHECK(l.lamport_max_bytes == (has ? std::min(cap, lamport) : 0));
            if (!has) continue;
            CHECK(l.lamport_bytes >= std::uint64_t(n) * l.lamport_max_bytes);
            CHECK(l.lamport_offset(0) >= l.ll_offset(1) + l.ll_bytes);  // after the LL areas
            CHECK(l.lamport_offset(1) == l.lamport_offset(0) + l.lamport_bytes);
            CHECK(l.total_bytes() == l.lamport_offset(1) + l.lamport_bytes);
            CHECK(l.ones_ranges(0).offset == 0);
            CHECK(l.ones_ranges(0).bytes == l.flags_bytes());
            CHECK(l.ones_ranges(1).offset == l.lamport_offset(0));
            CHECK(l.ones_ranges(1).bytes == 2 * l.lamport_bytes);
            // every call the Lamport path takes fits its slot's area: n sources `source_stride` apart
            const std::uint64_t most = l.lamport_max_bytes / sizeof(float);
            CHECK(one_shot::source_stride<reduce::sum<float>>(l, most) * std::uint64_t(n) <= l.lamport_bytes);
          }
  }

  TEST_CASE("make_layout: a symmetric input area only for directly read windows of 2 ranks or more, last, 4 KiB "
            "aligned, with the 2n flag channels of its start and end") {
    for (int n : {1, 2, 3, 8})
      for (bool posted : {false, true})
        for (std::uint64_t sym : {0ull, 1000ull, 65536ull}) {
          CAPTURE(n);
          CAPTURE(posted);
          CAPTURE(sym);
          options o;
          o.capacity_bytes = 4096;
          o.lamport_max_bytes = 4096;
          o.symmetric_bytes = sym;
          const protocol::window_layout l = host::make_layout<one_shot>(n, o, true, posted);
          const bool has = !posted && n >= 2 && sym != 0;
          CHECK((l.input_bytes != 0) == has);
          CHECK(l.total_bytes() == l.input_offset() + l.input_bytes);
          CHECK(l.input_offset() >= l.lamport_offset(1) + l.lamport_bytes);  // after every other region
          if (!has) continue;
          CHECK(l.input_bytes == protocol::align_up(sym, 4096));
          CHECK(l.input_offset() % 4096 == 0);
          CHECK(l.channels >= 2u * std::uint32_t(n));
        }
    options huge;
    huge.symmetric_bytes = (std::uint64_t{1} << 40) + 1;
    CHECK_THROWS_AS((void)host::make_layout<one_shot>(2, huge), config_error);
  }

  TEST_CASE("make_layout refuses out-of-range values and a window whose size would overflow") {
    auto refused = [](int n, options o) {
      try {
        (void)host::make_layout<one_shot, ring>(n, o);
      } catch (const config_error& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    options o;
    CHECK(rtest::contains(refused(0, o), "ranks"));
    CHECK(rtest::contains(refused(max_ranks + 1, o), "ranks"));
    options zero = o;
    zero.capacity_bytes = 0;
    CHECK(rtest::contains(refused(2, zero), "capacity_bytes"));
    options huge = o;
    huge.capacity_bytes = (std::uint64_t{1} << 40) + 1;
    CHECK(rtest::contains(refused(2, huge), "capacity_bytes"));
    options lamport = o;
    lamport.lamport_max_bytes = ll_max_bytes + 16;
    CHECK(rtest::contains(refused(2, lamport), "lamport_max_bytes"));
    options no_parts = o;
    no_parts.max_parts = 0;
    CHECK(rtest::contains(refused(2, no_parts), "max_parts"));
    options many_parts = o;
    many_parts.max_parts = max_parts_limit + 1;
    CHECK(rtest::contains(refused(2, many_parts), "max_parts"));
    options big = o;
    big.capacity_bytes = std::uint64_t{1} << 40;  // 16 sources of 1 TiB per slot: 2^45 bytes
    CHECK(rtest::contains(refused(max_ranks, big), "too large"));
    CHECK(refused(2, o).empty());
    std::uint64_t out = 0;
    CHECK_FALSE(protocol::checked_mul(std::uint64_t{1} << 33, std::uint64_t{1} << 31, out));
    CHECK(protocol::checked_mul(std::uint64_t{1} << 32, std::uint64_t{1} << 31, out));
    CHECK(out == std::uint64_t{1} << 63);
  }
}

// --- flags -------------------------------------------------------------------------------------------------

TEST_SUITE("host.flags") {
  using protocol::collective;

  TEST_CASE("make_flag round-trips sequence and signature, and never produces flag_unset") {
    for (std::uint32_t seq : {0u, 1u, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu})
      for (collective c : {collective::all_reduce, collective::all_gather})
        for (std::uint32_t a = 0; a < 8; ++a)
          for (std::uint32_t d = 0; d < 8; ++d)
            for (std::uint64_t count : {1ull, 0xffffffull, 0x1000000ull, 0xffffffffffull}) {
              const std::uint32_t sig = protocol::call_signature(c, a, d, a % 8, count);
              const std::uint64_t f = protocol::make_flag(seq, sig);
              REQUIRE(protocol::flag_seq(f) == seq);
              REQUIRE(protocol::flag_signature(f) == sig);
              REQUIRE(f != protocol::flag_unset);
              REQUIRE((sig >> 24) != 0xffu);
            }
    CHECK(protocol::flag_seq(protocol::flag_unset) == 0xffffffffu);  // why waiters must compare whole words
  }

  TEST_CASE("call signatures differ when collective, algorithm, dtype, operator or count differ") {
    std::set<std::uint32_t> seen;
    std::size_t calls = 0;
    for (collective c : {collective::all_reduce, collective::all_gather})
      for (algorithm::algo a : {algorithm::algo::one_shot, algorithm::algo::ring})
        for (dtype d : {dtype::f32, dtype::f16, dtype::bf16, dtype::nvfp4})
          for (std::uint64_t count : {1ull, 2ull, 7ull, 100ull, 200ull, 4099ull, 16384ull, 32768ull, 0xffffffull,
                                      0x1fffffull, 0x200000ull, 0x200001ull, 0x1000000ull, 0x1000001ull, 0x1000064ull,
                                      0x2000000ull, 0x100000000ull})
            for (reduce::reduce_op op : {reduce::reduce_op::sum, reduce::reduce_op::max, reduce::reduce_op::min}) {
              seen.insert(protocol::call_signature(c, static_cast<std::uint32_t>(a), static_cast<std::uint32_t>(d),
                                                   static_cast<std::uint32_t>(op), count));
              ++calls;
            }
    CHECK(seen.size() == calls);
    // Counts below 2^21 are carried exactly, and every field reads back.
    for (std::uint64_t count = 1; count < (1u << 21); count = count * 3 + 1) CHECK(protocol::count_bits(count) == count);
    const std::uint32_t sig = protocol::call_signature(collective::all_reduce, 2, 3, 1, 1000);
    CHECK(protocol::signature_collective(sig) == 1u);
    CHECK(protocol::signature_algorithm(sig) == 2u);
    CHECK(protocol::signature_dtype(sig) == 3u);
    CHECK(protocol::signature_op(sig) == 1u);
    CHECK(protocol::signature_count(sig) == 1000u);
  }

  TEST_CASE("abort signatures carry kind, suspect and reporter, and an unknown reporter reads back as -1") {
    for (int suspect : {0, 3, max_ranks - 1})
      for (int reporter : {-1, 0, 5, max_ranks - 1}) {
        const std::uint32_t sig = protocol::abort_signature(2u, suspect, reporter);
        CHECK(protocol::is_abort(sig));
        CHECK(protocol::abort_kind(sig) == 2u);
        CHECK(protocol::abort_rank(sig) == suspect);
        CHECK(protocol::abort_reporter(sig) == reporter);
      }
  }

  TEST_CASE("a mismatch message names both calls, and a relayed one never blames the rank that reports it") {
    protocol::failure_record f{};
    f.kind = static_cast<std::uint32_t>(protocol::failure_kind::mismatch);
    f.peer = 0;
    f.seq = 9;
    f.expected = protocol::make_flag(9, protocol::call_signature(collective::all_reduce, 2, 3, 0, 1024));
    f.observed = protocol::make_flag(9, protocol::call_signature(collective::all_gather, 1, 1, 0, 512));
    f.reporter = 1;
    const std::string direct = host::describe_failure(1, f);
    CAPTURE(direct);
    CHECK(rtest::contains(direct, "rank 1: rank 0 entered a different collective at sequence 9"));
    CHECK(rtest::contains(direct, "this rank called all_reduce(ring, bfloat16, sum, count 1024)"));
    CHECK(rtest::contains(direct, "rank 0 called all_gather(one_shot, float, count 512)"));
    // Rank 0 learns it from rank 1's abort, which names rank 0 as the suspect and rank 1 as the detector.
    f.relayed = 1;
    f.peer = 0;
    f.reporter = 1;
    f.expected = f.observed;
    f.observed = protocol::make_flag(9, protocol::abort_signature(2u, 0, 1));
    const std::string relayed = host::describe_failure(0, f);
    CAPTURE(relayed);
    CHECK(rtest::contains(relayed, "rank 0: rank 1 entered a different collective at sequence 9 than this rank"));
    CHECK(rtest::contains(relayed, "relayed by a peer"));
    CHECK(rtest::contains(relayed, "this rank called all_gather(one_shot, float, count 512)"));
    CHECK_FALSE(rtest::contains(relayed, "rank 0 entered"));
    // A third rank names both sides.
    const std::string third = host::describe_failure(2, f);
    CAPTURE(third);
    CHECK(rtest::contains(third, "rank 2: rank 0 entered a different collective at sequence 9 than rank 1"));
  }

  TEST_CASE("a timeout abort with no reporter (a transport's own) says a connection ended, not that a wait timed out") {
    protocol::failure_record f{};
    f.kind = static_cast<std::uint32_t>(protocol::failure_kind::timeout);
    f.relayed = 1;
    f.peer = 0;
    f.seq = 52;
    f.reporter = -1;
    const std::string local = host::describe_failure(2, f);
    CAPTURE(local);
    CHECK(rtest::contains(local, "rank 2: rank 0 missed sequence 52 (a transport saw its connection to rank 0 end"));
    CHECK_FALSE(rtest::contains(local, "timed out"));
    f.reporter = 1;  // relayed from rank 1, whose wait timed out
    const std::string relayed = host::describe_failure(2, f);
    CAPTURE(relayed);
    CHECK(rtest::contains(relayed, "rank 2: rank 0 missed sequence 52 (a peer's wait for it timed out"));
  }

  TEST_CASE("status and dtype names are printable") {
    for (status s : {status::ok, status::invalid_argument, status::poisoned, status::timeout, status::mismatch,
                     status::not_supported, status::internal})
      CHECK(std::string(to_string(s)) != "unknown");
    for (dtype d : {dtype::f32, dtype::f16, dtype::bf16, dtype::nvfp4}) CHECK(std::string(to_string(d)) != "unknown");
  }
}

// --- packets -----------------------------------------------------------------------------------------------

TEST_SUITE("host.packet") {
  TEST_CASE("store_user writes only the lanes below count, at any alignment") {
    using R = reduce::sum<__half>;
    static_assert(reduce::lanes<R> == 8 && reduce::lanes<reduce::sum<float>> == 4);
    alignas(16) unsigned char raw[64];
    for (int offset : {0, 2, 6}) {
      CAPTURE(offset);
      std::memset(raw, 0xab, sizeof raw);
      auto* base = reinterpret_cast<__half*>(raw + offset);
      reduce::value_packet<R> v;
      for (int i = 0; i < 8; ++i) v.v[i] = rtest::from_float<__half>(static_cast<float>(i + 1));
      reduce::store_user<R>(base, 1, 8 + 3, v);  // packet 1 of an 11-element buffer: 3 valid lanes
      const unsigned char* first = raw + offset + 8 * sizeof(__half);
      CHECK(std::memcmp(first, &v, 3 * sizeof(__half)) == 0);
      CHECK(std::all_of(first + 3 * sizeof(__half), static_cast<const unsigned char*>(raw) + sizeof raw, [](unsigned char c) { return c == 0xab; }));
      CHECK(std::all_of(static_cast<const unsigned char*>(raw), first, [](unsigned char c) { return c == 0xab; }));
      const reduce::value_packet<R> back = reduce::load_user<R>(base, 1, 8 + 3);
      CHECK(std::memcmp(&back, &v, 3 * sizeof(__half)) == 0);
      for (int i = 3; i < 8; ++i) CHECK(rtest::to_float(back.v[i]) == 0.0f);  // lanes past count read as zero
    }
  }

  TEST_CASE("the single rounding is round-to-nearest-even for fp16 and bf16") {
    // 1 + 2^-11 is halfway between two fp16 neighbours of 1 (spacing 2^-10): ties go to the even one, 1.
    CHECK(rtest::to_float(rtest::from_float<__half>(1.0f + 0x1p-11f)) == 1.0f);
    CHECK(rtest::to_float(rtest::from_float<__half>(1.0f + 3 * 0x1p-11f)) == 1.0f + 0x1p-9f);
    CHECK(rtest::to_float(rtest::from_float<__nv_bfloat16>(1.0f + 0x1p-8f)) == 1.0f);
    CHECK(rtest::to_float(rtest::from_float<__nv_bfloat16>(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f);
    CHECK(rtest::ulp<__half>(1.0) == 0x1p-10);
    CHECK(rtest::ulp<__nv_bfloat16>(3.0) == 0x1p-6);
    CHECK(rtest::ulp<float>(0.75) == 0x1p-24);
  }
}

// tests/host/test_bad_input.cpp — input the launch path must refuse (count above capacity, zero count, null or
// overlapping buffers), input it must serve (misaligned pointers, adjacent buffers), calls that differ between
// ranks (count, dtype, algorithm, collective: status::mismatch, never a wrong answer) and configurations that
// differ between ranks (every constructor throws, naming the field).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <functional>
#include <mutex>

#include "common.hpp"

using namespace rtest;

namespace {

options small_options() {
  return {.capacity_bytes = 16 * 1024, .max_parts = 3, .min_part_bytes = 256, .timeout_ns = 30'000'000'000ull};
}

/// A buffer of `count` T starting `offset` bytes past a 16-byte boundary, read and written through memcpy
/// only (a float at byte offset 2 must not be dereferenced as a float).
template <class T>
struct offset_buffer {
  std::vector<unsigned char> storage;
  unsigned char* base;
  std::size_t count;
  offset_buffer(std::size_t n, std::size_t offset) : storage(n * sizeof(T) + 64, 0xff), count(n) {
    const auto a = reinterpret_cast<std::uintptr_t>(storage.data());
    base = storage.data() + (16 - a % 16) % 16 + offset;
  }
  T* ptr() { return reinterpret_cast<T*>(base); }
  void set(std::size_t i, T v) { std::memcpy(base + i * sizeof(T), &v, sizeof(T)); }
  T get(std::size_t i) const {
    T v;
    std::memcpy(&v, base + i * sizeof(T), sizeof(T));
    return v;
  }
};

/// What one rank saw: a good collective, then the call under test (`first`), then one more collective (which must
/// fail fast when the first poisoned the communicator).
struct divergent_result {
  status good = status::internal;
  status first = status::internal;
  double first_seconds = 0;
  status next = status::internal;
  double next_seconds = 0;
  host::health health;
  std::string error;
};

/// Every rank: one good collective, then `call(comm, rank)` timed, then one more collective timed. A rank whose
/// good collective fails stops there (its `first` stays internal, which every check refuses).
template <class Comm = comm_t, class Call>
std::vector<divergent_result> run_divergent(int n, const options& o, Call call) {
  std::vector<divergent_result> res(n);
  host::spawn_ranks(n, [&](bootstrap::in_process& b) {
    Comm comm(b, o);
    const int r = b.rank();
    std::vector<float> warm(64, 1.0f), warm_out(64);
    res[r].good = comm.all_reduce(warm.data(), warm_out.data(), warm.size());
    if (res[r].good != status::ok) return;
    stopwatch t;
    res[r].first = call(comm, r);
    res[r].first_seconds = t.seconds();
    res[r].error = comm.last_error();
    res[r].health = comm.check_health();
    stopwatch t2;
    res[r].next = comm.all_reduce(warm.data(), warm_out.data(), warm.size());
    res[r].next_seconds = t2.seconds();
  });
  return res;
}

options mismatch_options() {
  options o = small_options();
  o.timeout_ns = 5'000'000'000ull;  // detection must not wait for this
  return o;
}

void check_reported_as_mismatch_everywhere(const std::vector<divergent_result>& res) {
  for (std::size_t r = 0; r < res.size(); ++r) {
    CAPTURE(r);
    INFO("status ", std::string(to_string(res[r].first)), " after ", res[r].first_seconds, " s: ", res[r].error);
    CHECK(res[r].first == status::mismatch);
    CHECK(res[r].first_seconds < 2.0);
    CHECK(res[r].health.state == status::mismatch);
    CHECK(contains(res[r].health.message, "different collective"));
    // Named as the culprit in a peer's abort, a rank names the peer that saw the difference, never itself.
    const std::string self = "rank " + std::to_string(r);
    CHECK_FALSE(contains(res[r].health.message, self + ": " + self + " entered"));
    CHECK(contains(res[r].health.message, "this rank called "));
    CHECK(res[r].next == status::poisoned);
    CHECK(res[r].next_seconds < 0.1);
  }
}

void check_never_a_wrong_answer(const std::vector<divergent_result>& res) {
  for (std::size_t r = 0; r < res.size(); ++r) {
    CAPTURE(r);
    INFO("status ", std::string(to_string(res[r].first)), ": ", res[r].error);
    CHECK(res[r].first != status::ok);
    CHECK_FALSE(res[r].health.ok());
  }
}

/// Ranks whose calls differ (`call(comm, rank)`): never a wrong answer, and a mismatch reported on every rank.
template <class Comm = comm_t, class Call>
std::vector<divergent_result> check_mismatch(int n, Call call) {
  auto res = run_divergent<Comm>(n, mismatch_options(), call);
  check_never_a_wrong_answer(res);
  check_reported_as_mismatch_everywhere(res);
  return res;
}

/// n ranks make the same bad call `bad(comm, rank)` after a good one: each refuses it locally with `reason` in
/// last_error(), without waiting; then the communicator is poisoned (the rank took its place in the sequence and
/// told its peers to abort: session::reject).
template <class Bad>
void check_refused(int n, const std::string& reason, Bad bad) {
  const auto res = run_divergent(n, mismatch_options(), bad);
  for (std::size_t r = 0; r < res.size(); ++r) {
    CAPTURE(r);
    INFO(res[r].error);
    CHECK(res[r].good == status::ok);
    CHECK(res[r].first == status::invalid_argument);
    CHECK(contains(res[r].error, reason));
    CHECK(res[r].first_seconds < 0.5);
    CHECK(res[r].health.state == status::invalid_argument);
    CHECK(res[r].health.failure.kind == static_cast<std::uint32_t>(protocol::failure_kind::rejected));
    CHECK(res[r].next == status::poisoned);
    CHECK(res[r].next_seconds < 0.1);
  }
}

}  // namespace

TEST_SUITE("host.input") {
  TEST_CASE("a count above capacity is refused with invalid_argument naming the capacity") {
    const std::size_t cap = mismatch_options().capacity_bytes / sizeof(float);
    std::vector<float> in(cap + 1, 1.0f);
    std::vector<std::vector<float>> out(3, std::vector<float>(3 * (cap + 1)));
    SUBCASE("one_shot") {
      check_refused(3, "capacity", [&](comm_t& c, int r) { return c.all_reduce(in.data(), out[r].data(), cap + 1); });
    }
    SUBCASE("ring") {
      check_refused(3, "capacity", [&](comm_t& c, int r) {
        return c.all_reduce<ring>(in.data(), out[r].data(), cap + 1);
      });
    }
    SUBCASE("all-gather") {
      check_refused(3, "capacity", [&](comm_t& c, int r) { return c.all_gather(in.data(), out[r].data(), cap + 1); });
    }
  }

  TEST_CASE("a zero count is refused with invalid_argument") {
    std::vector<__half> in(8), out(2 * 8 + 8);
    check_refused(2, "zero", [&](comm_t& c, int) { return c.all_reduce(in.data(), out.data(), 0); });
  }

  TEST_CASE("refusal() answers with the call's own words for a shape problem (one body: host::shape_refusal)") {
    const std::size_t cap = mismatch_options().capacity_bytes / sizeof(float);  // 4096
    std::vector<float> in(cap + 1, 1.0f);
    std::vector<std::vector<float>> out(2, std::vector<float>(2 * (cap + 1)));
    std::vector<std::string> asked(2);
    auto check = [&](const std::vector<divergent_result>& res, const std::string& want) {
      for (std::size_t r = 0; r < res.size(); ++r) {
        CAPTURE(r);
        INFO(res[r].error);
        CHECK(asked[r] == want);
        CHECK(res[r].first == status::invalid_argument);
        CHECK(contains(res[r].error, want));
      }
    };
    SUBCASE("count above capacity: the count, its bytes, the capacity and the advice") {
      check(run_divergent(2, mismatch_options(), [&](comm_t& c, int r) {
        asked[r] = c.refusal(cap + 1, dtype::f32, algorithm::algo::ring);
        return c.all_reduce<ring>(in.data(), out[r].data(), cap + 1);
      }), "count 4097 (16388 bytes) exceeds capacity_bytes 16384; raise options::capacity_bytes on every rank");
    }
    SUBCASE("all-gather, count zero") {
      check(run_divergent(2, mismatch_options(), [&](comm_t& c, int r) {
        asked[r] = c.refusal(0, dtype::f32, algorithm::algo::one_shot, protocol::collective::all_gather);
        return c.all_gather(in.data(), out[r].data(), 0);
      }), "count is zero");
    }
    SUBCASE("a null pointer with count zero reports the pointer: pointers are checked first") {
      const auto res = run_divergent(2, mismatch_options(), [&](comm_t& c, int r) {
        return c.all_reduce(static_cast<const float*>(nullptr), out[r].data(), 0);
      });
      for (const auto& x : res) {
        CHECK(x.first == status::invalid_argument);
        CHECK(contains(x.error, "input or output pointer is null"));
        CHECK_FALSE(contains(x.error, "count is zero"));
      }
    }
  }

  TEST_CASE("null input or output pointers are refused with invalid_argument") {
    // One buffer per rank: a refused call fills its output with the poison value (docs/api.md).
    std::vector<std::vector<__half>> buf(2, std::vector<__half>(64));
    SUBCASE("null input") {
      check_refused(2, "null", [&](comm_t& c, int r) {
        return c.all_reduce<ring>(static_cast<const __half*>(nullptr), buf[r].data(), 8);
      });
    }
    SUBCASE("null output") {
      check_refused(2, "null", [&](comm_t& c, int r) {
        return c.all_reduce(buf[r].data(), static_cast<__half*>(nullptr), 8);
      });
    }
    SUBCASE("null all-gather input") {
      check_refused(2, "null", [&](comm_t& c, int r) {
        return c.all_gather(static_cast<const __half*>(nullptr), buf[r].data(), 8);
      });
    }
  }

  TEST_CASE("input and output that overlap without being the same buffer are refused with invalid_argument") {
    constexpr std::size_t count = 100;
    std::vector<std::vector<float>> buf(2, std::vector<float>(4 * count, 1.0f));
    SUBCASE("output one element above the input") {
      check_refused(2, "overlap", [&](comm_t& c, int r) {
        return c.all_reduce(buf[r].data(), buf[r].data() + 1, count);
      });
    }
    SUBCASE("output one element below the input") {
      check_refused(2, "overlap", [&](comm_t& c, int r) {
        return c.all_reduce(buf[r].data() + 1, buf[r].data(), count);
      });
    }
    SUBCASE("ring, overlapping by one element") {
      check_refused(2, "overlap", [&](comm_t& c, int r) {
        return c.all_reduce<ring>(buf[r].data(), buf[r].data() + count - 1, count);
      });
    }
    SUBCASE("all-gather in place (not offered)") {
      check_refused(2, "overlap", [&](comm_t& c, int r) { return c.all_gather(buf[r].data(), buf[r].data(), count); });
    }
    SUBCASE("all-gather input inside its output") {
      check_refused(2, "overlap", [&](comm_t& c, int r) {
        return c.all_gather(buf[r].data() + r * count, buf[r].data(), count);
      });
    }
  }

  TEST_CASE("adjacent input and output, and a count of exactly capacity, are served") {
    constexpr std::size_t count = 100;
    const std::size_t cap = mismatch_options().capacity_bytes / sizeof(float);
    std::vector<status> adjacent(2), gather_adjacent(2), at_capacity(2);
    std::vector<std::vector<float>> adjacent_out(2), gather_out(2), cap_out(2);
    host::spawn_ranks(2, [&](bootstrap::in_process& b) {
      comm_t comm(b, mismatch_options());
      const int r = b.rank();
      std::vector<float> buf(4 * count, static_cast<float>(r + 1));
      adjacent[r] = comm.all_reduce(buf.data(), buf.data() + count, count);
      adjacent_out[r].assign(buf.begin() + count, buf.begin() + 2 * count);
      std::fill(buf.begin(), buf.end(), static_cast<float>(r + 1));
      gather_adjacent[r] = comm.all_gather(buf.data() + 2 * count, buf.data(), count);
      gather_out[r].assign(buf.begin(), buf.begin() + 2 * count);
      std::vector<float> big(cap, static_cast<float>(r + 1));
      cap_out[r].assign(cap, -1.0f);
      at_capacity[r] = comm.all_reduce<ring>(big.data(), cap_out[r].data(), cap);
    });
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      CHECK(adjacent[r] == status::ok);
      CHECK(std::all_of(adjacent_out[r].begin(), adjacent_out[r].end(), [](float v) { return v == 3.0f; }));
      CHECK(gather_adjacent[r] == status::ok);
      for (int q = 0; q < 2; ++q)
        CHECK(std::all_of(gather_out[r].begin() + q * count, gather_out[r].begin() + (q + 1) * count,
                          [q](float v) { return v == static_cast<float>(q + 1); }));
      CHECK(at_capacity[r] == status::ok);
      CHECK(std::all_of(cap_out[r].begin(), cap_out[r].end(), [](float v) { return v == 3.0f; }));
    }
  }
}

TEST_SUITE("host.input") {
  // HAZARDS #7: a rank that refuses a collective its peers entered must not leave them waiting.
  TEST_CASE("bad input on one rank only makes every peer fail at once, naming that rank") {
    const std::size_t cap = mismatch_options().capacity_bytes / sizeof(float);
    std::vector<float> in(cap + 1, 1.0f);
    std::vector<std::vector<float>> out(4, std::vector<float>(cap + 1));
    auto check = [](const std::vector<divergent_result>& res, int culprit) {
      for (int r = 0; r < static_cast<int>(res.size()); ++r) {
        CAPTURE(r);
        INFO("status ", std::string(to_string(res[r].first)), " after ", res[r].first_seconds, " s: ", res[r].error);
        CHECK(res[r].first_seconds < 2.0);
        CHECK(res[r].next == status::poisoned);
        if (r == culprit) {
          CHECK(res[r].first == status::invalid_argument);
          continue;
        }
        CHECK(res[r].first == status::mismatch);
        CHECK(res[r].health.failure.kind == static_cast<std::uint32_t>(protocol::failure_kind::peer_rejected));
        CHECK(res[r].health.failure.peer == culprit);
        CHECK(contains(res[r].health.message, "rank " + std::to_string(culprit) + " refused"));
      }
    };
    SUBCASE("one_shot") {
      check(run_divergent(4, mismatch_options(),
                          [&](comm_t& c, int r) { return c.all_reduce(in.data(), out[r].data(), r == 1 ? cap + 1 : cap); }),
            1);
    }
    SUBCASE("ring") {
      check(run_divergent(4, mismatch_options(),
                          [&](comm_t& c, int r) {
                            return c.all_reduce<ring>(in.data(), out[r].data(), r == 1 ? cap + 1 : cap);
                          }),
            1);
    }
  }
}

namespace {

/// Misaligned in and out (offsets relative to a 16-byte boundary) against aligned buffers, every algorithm:
/// served, exact (small integers), and the same bytes as the aligned run.
template <class T>
void check_misaligned(std::size_t in_offset, std::size_t out_offset) {
  constexpr int n = 3;
  constexpr std::size_t count = 4096 + 3;
  options o = small_options();
  o.capacity_bytes = 64 * 1024;
  struct per_rank {
    status st[6] = {status::internal, status::internal, status::internal,
                    status::internal, status::internal, status::internal};
    std::vector<T> aligned_one_shot, aligned_ring, aligned_gather;
    std::vector<T> odd_one_shot, odd_ring, odd_gather;
  };
  std::vector<per_rank> res(n);
  host::spawn_ranks(n, [&](bootstrap::in_process& b) {
    comm_t comm(b, o);
    const int r = b.rank();
    per_rank& me = res[r];
    std::vector<T> in(count);
    for (std::size_t i = 0; i < count; ++i) in[i] = small_int<T>(r, i, 1);
    offset_buffer<T> odd_in(count, in_offset), odd_out(count, out_offset), odd_gathered(n * count, out_offset);
    for (std::size_t i = 0; i < count; ++i) odd_in.set(i, in[i]);
    auto read = [](const offset_buffer<T>& buf) {
      std::vector<T> v(buf.count);
      for (std::size_t i = 0; i < buf.count; ++i) v[i] = buf.get(i);
      return v;
    };
    me.aligned_one_shot.resize(count);
    me.aligned_ring.resize(count);
    me.aligned_gather.resize(n * count);
    me.st[0] = comm.all_reduce(in.data(), me.aligned_one_shot.data(), count);
    me.st[1] = comm.all_reduce(odd_in.ptr(), odd_out.ptr(), count);
    me.odd_one_shot = read(odd_out);
    me.st[2] = comm.all_reduce<ring>(in.data(), me.aligned_ring.data(), count);
    me.st[3] = comm.all_reduce<ring>(odd_in.ptr(), odd_out.ptr(), count);
    me.odd_ring = read(odd_out);
    me.st[4] = comm.all_gather(in.data(), me.aligned_gather.data(), count);
    me.st[5] = comm.all_gather(odd_in.ptr(), odd_gathered.ptr(), count);
    me.odd_gather = read(odd_gathered);
  });
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    for (status s : res[r].st) CHECK(s == status::ok);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) {
      float expect = 0;
      for (int q = 0; q < n; ++q) expect += to_float(small_int<T>(q, i, 1));
      wrong += to_float(res[r].odd_one_shot[i]) != expect;
      wrong += to_float(res[r].odd_ring[i]) != expect;
      for (int q = 0; q < n; ++q) wrong += !same_bits(res[r].odd_gather[q * count + i], small_int<T>(q, i, 1));
    }
    CHECK(wrong == 0);
    CHECK(std::memcmp(res[r].odd_one_shot.data(), res[r].aligned_one_shot.data(), count * sizeof(T)) == 0);
    CHECK(std::memcmp(res[r].odd_ring.data(), res[r].aligned_ring.data(), count * sizeof(T)) == 0);
    CHECK(std::memcmp(res[r].odd_gather.data(), res[r].aligned_gather.data(), n * count * sizeof(T)) == 0);
  }
}

}  // namespace

TEST_SUITE("host.input") {
  TEST_CASE("a float buffer at byte offset 2 is served, never declined, and gives the aligned result") {
    check_misaligned<float>(2, 6);
  }
  TEST_CASE("an fp16 buffer at byte offset 2 is served and gives the aligned result") { check_misaligned<__half>(2, 10); }
  TEST_CASE("a bf16 buffer at byte offset 6 is served and gives the aligned result") {
    check_misaligned<__nv_bfloat16>(6, 14);
  }

  TEST_CASE("the runtime dispatch serves every dtype and algorithm like the typed calls and refuses nvfp4") {
    constexpr std::size_t count = 301;
    std::vector<std::string> errors(2);
    std::vector<status> unsupported(2);
    std::vector<std::string> unsupported_why(2);
    host::spawn_ranks(2, [&](bootstrap::in_process& b) {
      comm_t comm(b, small_options());
      const int r = b.rank();
      std::string& err = errors[r];
      auto one = [&]<class T>(T*, dtype d) {
        std::vector<T> in = random_input<T>(count, seed_for(r, 77));
        std::vector<T> typed(count), dispatched(count), gathered(2 * count), gathered_dispatched(2 * count);
        for (algorithm::algo a : {algorithm::algo::one_shot, algorithm::algo::ring}) {
          const status s1 = a == algorithm::algo::ring ? comm.all_reduce<ring>(in.data(), typed.data(), count)
                                                       : comm.all_reduce<one_shot>(in.data(), typed.data(), count);
          const status s2 = comm.all_reduce(in.data(), dispatched.data(), count, d, a);
          if (s1 != status::ok || s2 != status::ok) err += "status; ";
          if (std::memcmp(typed.data(), dispatched.data(), count * sizeof(T)) != 0) err += "dispatch differs; ";
        }
        const status g1 = comm.all_gather(in.data(), gathered.data(), count);
        const status g2 = comm.all_gather(in.data(), gathered_dispatched.data(), count, d);
        if (g1 != status::ok || g2 != status::ok) err += "gather status; ";
        if (std::memcmp(gathered.data(), gathered_dispatched.data(), 2 * count * sizeof(T)) != 0)
          err += "gather dispatch differs; ";
      };
      one(static_cast<float*>(nullptr), dtype::f32);
      one(static_cast<__half*>(nullptr), dtype::f16);
      one(static_cast<__nv_bfloat16*>(nullptr), dtype::bf16);
      std::vector<std::uint8_t> bytes(64), out(64);
      unsupported[r] = comm.all_reduce(bytes.data(), out.data(), 64, dtype::nvfp4, algorithm::algo::one_shot);
      unsupported_why[r] = comm.last_error();
    });
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      CHECK(errors[r].empty());
      CHECK(unsupported[r] == status::not_supported);
      CHECK_FALSE(unsupported_why[r].empty());  // last_error(): "the message for the last status other than ok"
    }
  }
}

TEST_SUITE("host.mismatch") {
  TEST_CASE("counts that differ between ranks are a mismatch on every rank, found quickly, then poisoned") {
    std::vector<float> in(256, 1.0f);
    std::vector<std::vector<float>> out(4, std::vector<float>(256));
    const auto res = check_mismatch(4, [&](comm_t& comm, int r) {
      return comm.all_reduce(in.data(), out[r].data(), r == 0 ? 100 : 200);
    });
    for (int r = 0; r < 4; ++r) CHECK(contains(res[r].error, "different collective"));
  }

  TEST_CASE("counts that differ in the last rank only are a mismatch on every rank") {
    std::vector<__nv_bfloat16> in(256, from_float<__nv_bfloat16>(1.0f));
    std::vector<std::vector<__nv_bfloat16>> out(3, std::vector<__nv_bfloat16>(256));
    check_mismatch(3, [&](comm_t& comm, int r) {
      return comm.all_reduce(in.data(), out[r].data(), r == 2 ? 17 : 16);
    });
  }

  TEST_CASE("a dtype that differs between ranks at the same byte count is a mismatch, never a wrong answer") {
    std::vector<float> in(256, 1.0f);
    std::vector<std::vector<float>> out(4, std::vector<float>(256));
    check_mismatch(4, [&](comm_t& comm, int r) {
      if (r == 1)
        return comm.all_reduce(reinterpret_cast<const __half*>(in.data()), reinterpret_cast<__half*>(out[r].data()), 200);
      return comm.all_reduce(in.data(), out[r].data(), 100);
    });
  }

  TEST_CASE("all-gather on one rank and all-reduce on the others is a mismatch, never a wrong answer") {
    std::vector<float> in(256, 1.0f);
    std::vector<std::vector<float>> out(3, std::vector<float>(3 * 256));
    check_mismatch(3, [&](comm_t& comm, int r) {
      return r == 2 ? comm.all_gather(in.data(), out[r].data(), 64) : comm.all_reduce(in.data(), out[r].data(), 64);
    });
  }

  TEST_CASE("ring: counts that differ between ranks are a mismatch on every rank, found quickly") {
    std::vector<float> in(256, 1.0f);
    std::vector<std::vector<float>> out(4, std::vector<float>(256));
    check_mismatch(4, [&](comm_t& comm, int r) {
      return comm.all_reduce<ring>(in.data(), out[r].data(), r == 0 ? 100 : 200);
    });
  }

  TEST_CASE("a dtype that one rank's build does not support makes its peers fail at once, not at the timeout") {
    // HAZARDS #7: a rank that declines a collective its peers entered must not leave them waiting.
    std::vector<float> in(256, 1.0f);
    std::vector<std::vector<float>> out(3, std::vector<float>(256));
    const auto res = run_divergent(3, mismatch_options(), [&](comm_t& comm, int r) {
      return r == 0 ? comm.all_reduce(in.data(), out[r].data(), 64, dtype::nvfp4, algorithm::algo::one_shot)
                    : comm.all_reduce(in.data(), out[r].data(), 64, dtype::f32, algorithm::algo::one_shot);
    });
    // Were the refusal silent, the peers would return ok: their call would pair with rank 0's *next* call (same
    // signature), a wrong pairing that only looks right here because the next call's input is the same.
    CHECK(res[0].first == status::not_supported);
    for (int r = 1; r < 3; ++r) {
      CAPTURE(r);
      INFO("status ", std::string(to_string(res[r].first)), " after ", res[r].first_seconds, " s: ", res[r].error);
      CHECK(res[r].first != status::ok);
      CHECK(res[r].first_seconds < 2.0);
    }
  }

  TEST_CASE("an algorithm that differs between ranks at the same count is a mismatch, never a wrong answer") {
    std::vector<float> in(256, 1.0f);
    std::vector<std::vector<float>> out(4, std::vector<float>(256));
    check_mismatch(4, [&](comm_t& comm, int r) {
      return r == 0 ? comm.all_reduce<ring>(in.data(), out[r].data(), 100)
                    : comm.all_reduce<one_shot>(in.data(), out[r].data(), 100);
    });
  }
}

namespace {

/// A second operator, for tests only: the maximum, with its own operator id on the wire.
struct test_max : reduce::sum<float> {
  static constexpr const char* name = "fp32-max (test)";
  static constexpr reduce::reduce_op op_id = reduce::reduce_op::max;
  static constexpr float combine(float a, float b) { return a > b ? a : b; }
};
static_assert(reduce::check_reduction<test_max>());

/// The host communicator with an all-reduce over any reduction, built the way communicator::all_reduce builds
/// its call (signature from the reduction's dtype and operator, the same part count).
struct op_comm : comm_t {
  using comm_t::comm_t;
  template <class R>
  status all_reduce_with(const float* in, float* out, std::size_t count) {
    const std::uint32_t sig = protocol::call_signature(protocol::collective::all_reduce,
                                                       static_cast<std::uint32_t>(one_shot::id),
                                                       static_cast<std::uint32_t>(R::dtype_id),
                                                       static_cast<std::uint32_t>(R::op_id), count);
    const std::uint32_t parts = algorithm::part_count(protocol::ceil_div(count, reduce::lanes<R>),
                                                      protocol::ceil_div(this->opts().min_part_bytes, packet_bytes), this->opts().max_parts);
    return this->run_parts(
        sig, parts, [&](auto& s) { return one_shot::all_reduce<R>(s, in, out, count, parts); },
        [&] { algorithm::fill_poison(out, 0, count, 0, 1); });
  }
};

}  // namespace

TEST_SUITE("host.mismatch") {
  TEST_CASE("max on one rank and sum on the others is a mismatch naming both operators, never a wrong answer") {
    std::vector<float> in(256, 1.0f);
    std::vector<std::vector<float>> out(3, std::vector<float>(256));
    const auto res = check_mismatch<op_comm>(3, [&](op_comm& comm, int r) {
      return r == 1 ? comm.all_reduce_with<test_max>(in.data(), out[r].data(), 64)
                    : comm.all_reduce_with<reduce::sum<float>>(in.data(), out[r].data(), 64);
    });
    CHECK(contains(res[1].health.message, "this rank called all_reduce(one_shot, float, max, count 64)"));
    CHECK(contains(res[0].health.message, "this rank called all_reduce(one_shot, float, sum, count 64)"));
    // The rank that detected the mismatch first (there always is one: the others may learn it from its abort)
    // names both calls, with both operators.
    bool both_named = false;
    for (int r = 0; r < 3; ++r)
      both_named = both_named || (contains(res[r].health.message, "float, max, count 64") &&
                                  contains(res[r].health.message, "float, sum, count 64"));
    INFO(res[0].health.message, " | ", res[1].health.message, " | ", res[2].health.message);
    CHECK(both_named);
  }

  TEST_CASE("the same operator on every rank is served: the operator id alone changes nothing") {
    std::vector<float> in(64);
    std::vector<std::vector<float>> out(3, std::vector<float>(64));
    std::vector<status> st(3, status::internal);
    host::spawn_ranks(3, [&](bootstrap::in_process& b) {
      op_comm comm(b, mismatch_options());
      std::vector<float> mine(64);
      for (int i = 0; i < 64; ++i) mine[i] = static_cast<float>((i + b.rank()) % 5);
      st[b.rank()] = comm.all_reduce_with<test_max>(mine.data(), out[b.rank()].data(), 64);
    });
    for (int r = 0; r < 3; ++r) {
      CHECK(st[r] == status::ok);
      for (int i = 0; i < 64; ++i) CHECK(out[r][i] == static_cast<float>(std::max({i % 5, (i + 1) % 5, (i + 2) % 5})));
    }
  }
}

namespace {

/// Construct a communicator on every rank with options `per_rank(r)`; record what each constructor threw.
struct setup_result {
  bool threw = false;
  bool config = false, mismatch = false;
  std::string field, what;
  double seconds = 0;
};

std::vector<setup_result> construct_all(int n, std::function<options(int)> per_rank,
                                        std::chrono::milliseconds boot_timeout = std::chrono::seconds(20)) {
  std::vector<setup_result> res(n);
  host::spawn_ranks(
      n,
      [&](bootstrap::in_process& b) {
        const int r = b.rank();
        stopwatch t;
        try {
          comm_t comm(b, per_rank(r));
        } catch (const config_mismatch_error& e) {
          res[r] = {true, true, true, e.field(), e.what()};
        } catch (const config_error& e) {
          res[r] = {true, true, false, "", e.what()};
        } catch (const error& e) {
          res[r] = {true, false, false, "", e.what()};
        }
        res[r].seconds = t.seconds();
      },
      boot_timeout);
  return res;
}

}  // namespace

TEST_SUITE("host.config") {
  TEST_CASE("options that differ between ranks make every constructor throw config_mismatch_error naming the field") {
    struct skew {
      const char* field;
      int rank;
      std::function<void(options&)> change;
    };
    const skew skews[] = {
        {"capacity_bytes", 2, [](options& o) { o.capacity_bytes *= 2; }},
        {"timeout_ns", 1, [](options& o) { o.timeout_ns += 1; }},
        {"first_sequence", 3, [](options& o) { o.first_sequence = 0x7ffffffe; }},
        {"max_parts", 0, [](options& o) { o.max_parts = 2; }},
        {"min_part_bytes", 3, [](options& o) { o.min_part_bytes = 4096; }},
        {"max_polls", 2, [](options& o) { o.max_polls = 1000000; }},
        {"max_ctas", 1, [](options& o) { o.max_ctas = 1; }},
        {"max_part_bytes", 0, [](options& o) { o.max_part_bytes = 1 << 16; }},
        {"lamport_max_bytes", 2, [](options& o) { o.lamport_max_bytes = 8192; }},
        {"symmetric_bytes", 1, [](options& o) { o.symmetric_bytes = 4096; }},
    };
    for (const skew& s : skews) {
      CAPTURE(s.field);
      const auto res = construct_all(4, [&](int r) {
        options o = small_options();
        if (r == s.rank) s.change(o);
        return o;
      });
      for (int r = 0; r < 4; ++r) {
        CAPTURE(r);
        INFO(res[r].what);
        CHECK(res[r].mismatch);
        CHECK(res[r].field == s.field);
        CHECK(contains(res[r].what, s.field));
        CHECK(contains(res[r].what, "rank " + std::to_string(s.rank)));
      }
    }
  }

  TEST_CASE("the same options on every rank construct") {
    const auto res = construct_all(3, [](int) { return small_options(); });
    for (int r = 0; r < 3; ++r) CHECK_FALSE(res[r].threw);
  }

  TEST_CASE("invalid options on every rank throw config_error on every rank") {
    for (int variant = 0; variant < 3; ++variant) {
      CAPTURE(variant);
      const auto res = construct_all(3, [&](int) {
        options o = small_options();
        if (variant == 0) o.capacity_bytes = 0;
        else if (variant == 1) o.max_parts = 0;
        else o.max_ctas = o.max_parts + 1;
        return o;
      });
      for (int r = 0; r < 3; ++r) {
        CAPTURE(r);
        CHECK(res[r].config);
        CHECK(contains(res[r].what, variant == 0 ? "capacity_bytes" : variant == 1 ? "max_parts" : "max_ctas"));
      }
    }
  }

  TEST_CASE("invalid options on one rank throw config_error on that rank and make every other rank fail set-up") {
    const auto timeout = std::chrono::milliseconds(1500);
    const auto res = construct_all(
        4,
        [](int r) {
          options o = small_options();
          if (r == 2) o.capacity_bytes = 0;
          return o;
        },
        timeout);
    CHECK(res[2].config);
    CHECK(contains(res[2].what, "capacity_bytes"));
    for (int r = 0; r < 4; ++r) {
      CAPTURE(r);
      INFO(res[r].what);
      CHECK(res[r].threw);
      CHECK(res[r].seconds < 1.5 + 1.0);
    }
  }

  TEST_CASE("invalid options on one rank make the other ranks throw config_error naming the field, without waiting "
            "for the bootstrap timeout") {
    // HAZARDS #8: any difference fails set-up on every rank, naming the field. A rank whose options are invalid
    // must still take part in the exchange, or its peers wait out the bootstrap timeout and report a missing
    // rank instead of the bad field.
    const auto res = construct_all(
        4,
        [](int r) {
          options o = small_options();
          if (r == 2) o.capacity_bytes = 0;
          return o;
        },
        std::chrono::seconds(3));
    for (int r = 0; r < 4; ++r) {
      CAPTURE(r);
      INFO(res[r].what);
      CHECK(res[r].config);
      CHECK(contains(res[r].what, "capacity_bytes"));
      CHECK(res[r].seconds < 1.5);
    }
  }
}

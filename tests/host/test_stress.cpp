// tests/host/test_stress.cpp — 10,000 back-to-back collectives on 4 ranks, mixing one_shot, two_shot and ring
// all-reduce, all-gather, in-place calls, the three dtypes and sizes from 1 element to the capacity, through the
// runtime dispatch. Every rank draws the same sequence of calls from one seeded generator; inputs are small
// integers, so every result is exact and checked element by element, together with the untouched guard.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "common.hpp"

using namespace rtest;

namespace {

constexpr int ranks = 4;
constexpr int iterations = 10'000;
constexpr std::size_t max_count = 4096;

enum class op { one_shot, ring, all_gather, two_shot };

struct call {
  op what;
  dtype type;
  std::size_t count;
  bool in_place;
};

/// The call sequence, identical on every rank: the same seed drives the same generator.
std::vector<call> draw_calls(std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<call> calls(iterations);
  for (call& c : calls) {
    const unsigned k = gen() % 4, t = gen() % 3, size_class = gen() % 10;
    c.what = static_cast<op>(k);
    c.type = t == 0 ? dtype::f32 : t == 1 ? dtype::f16 : dtype::bf16;
    c.count = size_class < 5 ? 1 + gen() % 64 : size_class < 9 ? 65 + gen() % 960 : 1025 + gen() % (max_count - 1024);
    if (c.type == dtype::f32 && c.count > max_count) c.count = max_count;
    c.in_place = c.what != op::all_gather && gen() % 8 == 0;
  }
  return calls;
}

template <class T>
std::string run_one(comm_t& comm, const call& c, int it, int r, std::vector<unsigned char>& in_bytes,
                    std::vector<unsigned char>& out_bytes) {
  T* in = reinterpret_cast<T*>(in_bytes.data());
  T* out = reinterpret_cast<T*>(out_bytes.data());
  const std::size_t out_count = c.what == op::all_gather ? c.count * ranks : c.count;
  std::memset(out_bytes.data(), 0xff, (out_count + guard_elems) * sizeof(T));
  for (std::size_t i = 0; i < c.count; ++i) in[i] = small_int<T>(it, r, i);
  T* src = in;
  if (c.in_place) {
    std::memcpy(out, in, c.count * sizeof(T));
    src = out;
  }
  status s = status::internal;
  switch (c.what) {
    case op::one_shot: s = comm.all_reduce(src, out, c.count, c.type, algorithm::algo::one_shot); break;
    case op::ring: s = comm.all_reduce(src, out, c.count, c.type, algorithm::algo::ring); break;
    case op::two_shot: s = comm.all_reduce(src, out, c.count, c.type, algorithm::algo::two_shot); break;
    case op::all_gather: s = comm.all_gather(src, out, c.count, c.type); break;
  }
  auto where = [&] {
    return "call " + std::to_string(it) + " (op " + std::to_string(static_cast<int>(c.what)) + ", " +
           to_string(c.type) + ", count " + std::to_string(c.count) + (c.in_place ? ", in place" : "") + ")";
  };
  if (s != status::ok) return where() + ": status " + to_string(s) + ": " + comm.last_error();
  for (std::size_t i = 0; i < c.count; ++i) {
    if (c.what == op::all_gather) {
      for (int q = 0; q < ranks; ++q)
        if (!same_bits(out[q * c.count + i], small_int<T>(it, q, i)))
          return where() + ": element " + std::to_string(q * c.count + i) + " wrong";
    } else {
      float expect = 0;
      for (int q = 0; q < ranks; ++q) expect += to_float(small_int<T>(it, q, i));
      if (to_float(out[i]) != expect) return where() + ": element " + std::to_string(i) + " wrong";
    }
  }
  for (std::size_t i = out_count; i < out_count + guard_elems; ++i)
    if (!is_poison(out[i])) return where() + ": wrote past the output";
  return {};
}

}  // namespace

TEST_SUITE("host.stress") {
  TEST_CASE("ten thousand mixed collectives on four ranks are each exact") {
    const std::vector<call> calls = draw_calls(20240601u);
    options o;
    o.capacity_bytes = max_count * sizeof(float);
    o.max_parts = 4;
    o.min_part_bytes = 512;
    o.timeout_ns = 60'000'000'000ull;
    std::vector<std::string> first_error(ranks);
    std::vector<int> done(ranks, 0);
    std::vector<std::uint32_t> final_seq(ranks);
    stopwatch t;
    host::spawn_ranks(ranks, [&](bootstrap::in_process& b) {
      comm_t comm(b, o);
      const int r = b.rank();
      std::vector<unsigned char> in_bytes(max_count * sizeof(float) + 64);
      std::vector<unsigned char> out_bytes((max_count * ranks + guard_elems) * sizeof(float));
      for (int it = 0; it < iterations; ++it) {
        const call& c = calls[it];
        std::string err;
        switch (c.type) {
          case dtype::f32: err = run_one<float>(comm, c, it, r, in_bytes, out_bytes); break;
          case dtype::f16: err = run_one<__half>(comm, c, it, r, in_bytes, out_bytes); break;
          default: err = run_one<__nv_bfloat16>(comm, c, it, r, in_bytes, out_bytes); break;
        }
        if (!err.empty()) {
          first_error[r] = err;
          // Keep going only while the communicator is healthy: a wrong element is not a reason to hang peers.
          if (!comm.check_health().ok()) break;
        } else {
          ++done[r];
        }
      }
      final_seq[r] = comm.next_sequence();
    });
    MESSAGE("10,000 collectives on 4 ranks took ", t.seconds(), " s");
    for (int r = 0; r < ranks; ++r) {
      CAPTURE(r);
      INFO(first_error[r]);
      CHECK(first_error[r].empty());
      CHECK(done[r] == iterations);
      CHECK(final_seq[r] == o.first_sequence + iterations);
    }
  }
}

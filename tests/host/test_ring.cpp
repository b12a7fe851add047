// tests/host/test_ring.cpp — ring all-reduce against the float64 reference, for fp32, fp16 and bf16 at 2, 3, 4
// and 8 ranks, counts {1, 7, 16, 4096+3, capacity}, one part and three parts. The bit-exact model sums chunk c
// in ring order c, c+1, ..., c+n-1, as algorithm/ring.hpp documents.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "reference_case.hpp"

using namespace rtest;
using rocenante::algorithm::ring;

namespace {

const int rank_counts[] = {2, 3, 4, 8};

template <class T>
void all_reduce_cases(bool multi_part, std::uint64_t id) {
  for (int n : rank_counts) {
    CAPTURE(n);
    check_all_reduce_against_reference<ring, T>(n, reference_options(multi_part), id * 16 + n);
  }
}

}  // namespace

TEST_SUITE("host.ring.fp32") {
  TEST_CASE("sum matches the float64 reference and the ring-order fp32 sum on every rank, in one part") {
    all_reduce_cases<float>(false, 101);
  }
  TEST_CASE("sum matches the float64 reference and the ring-order fp32 sum on every rank, split in three parts") {
    all_reduce_cases<float>(true, 102);
  }
}

TEST_SUITE("host.ring.fp16") {
  TEST_CASE("sum matches the float64 reference and the ring-order fp32 sum on every rank, in one part") {
    all_reduce_cases<__half>(false, 103);
  }
  TEST_CASE("sum matches the float64 reference and the ring-order fp32 sum on every rank, split in three parts") {
    all_reduce_cases<__half>(true, 104);
  }
}

TEST_SUITE("host.ring.bf16") {
  TEST_CASE("sum matches the float64 reference and the ring-order fp32 sum on every rank, in one part") {
    all_reduce_cases<__nv_bfloat16>(false, 105);
  }
  TEST_CASE("sum matches the float64 reference and the ring-order fp32 sum on every rank, split in three parts") {
    all_reduce_cases<__nv_bfloat16>(true, 106);
  }
}

TEST_SUITE("host.ring.ranks") {
  TEST_CASE("a single rank copies its input") {
    check_all_reduce_against_reference<ring, float>(1, reference_options(true), 110);
  }
  TEST_CASE("sixteen ranks, the most a communicator holds, agree with the reference") {
    options o = reference_options(true);
    o.capacity_bytes = 16 * 1024;
    check_all_reduce_against_reference<ring, __nv_bfloat16>(max_ranks, o, 112);
  }
}

// tests/host/test_ring.cpp — ring all-reduce against the float64 reference, for fp32, fp16 and bf16 at 2, 3, 4
// and 8 ranks, counts {1, 7, 16, 4096+3, capacity}, one part and three parts. The bit-exact model sums chunk c
// in ring order c, c+1, ..., c+n-1, as algorithm/ring.hpp documents.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "reference_case.hpp"

using namespace rtest;

// Case ids per dtype d (fp32 0, fp16 1, bf16 2): 101 + 2d one part, 102 + 2d three parts.
TEST_SUITE("host.ring.dtypes") {
  TEST_CASE_TEMPLATE("sum matches the float64 reference and the ring-order fp32 sum on every rank, in one part", T, float,
                     __half, __nv_bfloat16) {
    all_reduce_cases<ring, T>(false, 101 + 2 * dtype_index<T>);
  }
  TEST_CASE_TEMPLATE("sum matches the float64 reference and the ring-order fp32 sum on every rank, split in three parts",
                     T, float, __half, __nv_bfloat16) {
    all_reduce_cases<ring, T>(true, 102 + 2 * dtype_index<T>);
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

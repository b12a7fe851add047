// tests/host/test_one_shot.cpp — one_shot all-reduce and all-gather against the float64 reference, for fp32,
// fp16 and bf16 at 2, 3, 4 and 8 ranks, counts {1, 7, 16, 4096+3, capacity}, one part and three parts.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "reference_case.hpp"

using namespace rtest;

// Case ids per dtype d (fp32 0, fp16 1, bf16 2): 3d + 1 one part, 3d + 2 three parts, 3d + 3 all-gather.
TEST_SUITE("host.one_shot.dtypes") {
  TEST_CASE_TEMPLATE("sum matches the float64 reference and the rank-order fp32 sum on every rank, in one part", T, float,
                     __half, __nv_bfloat16) {
    all_reduce_cases<one_shot, T>(false, 3 * dtype_index<T> + 1);
  }
  TEST_CASE_TEMPLATE("sum matches the float64 reference and the rank-order fp32 sum on every rank, split in three parts",
                     T, float, __half, __nv_bfloat16) {
    all_reduce_cases<one_shot, T>(true, 3 * dtype_index<T> + 2);
  }
  TEST_CASE_TEMPLATE("all-gather concatenates the inputs in rank order, exactly, on every rank", T, float, __half,
                     __nv_bfloat16) {
    const std::uint64_t id = 3 * dtype_index<T> + 3;
    for (int n : reference_rank_counts) {
      CAPTURE(n);
      check_all_gather<T>(n, reference_options(n % 2 == 1), id * 16 + n);
    }
  }
}

TEST_SUITE("host.one_shot.ranks") {
  TEST_CASE("a single rank copies its input for all-reduce and all-gather") {
    check_all_reduce_against_reference<one_shot, float>(1, reference_options(true), 10);
    check_all_gather<float>(1, reference_options(false), 11);
  }
  TEST_CASE("sixteen ranks, the most a communicator holds, agree with the reference") {
    options o = reference_options(true);
    o.capacity_bytes = 16 * 1024;
    check_all_reduce_against_reference<one_shot, __nv_bfloat16>(max_ranks, o, 12);
  }
}

namespace {

/// Transport T whose handle is transport::fixed_ranks<T's handle, N>: the algorithms built with the rank count a
/// compile-time constant (the GPU's decode-size kernels at the rank counts kernel::all_reduce_variants names).
template <class T, int N>
struct fixed_ranks_transport : T {
  using handle_type = rocenante::transport::fixed_ranks<typename T::handle_type, N>;
  using T::T;
  handle_type handle() const { return rocenante::transport::with_fixed_ranks<N>(T::handle()); }
};

template <int N>
void fixed_ranks_cases(std::uint64_t id) {
  using fixed = fixed_ranks_transport<rocenante::transport::loopback, N>;
  static_assert(rocenante::transport::check_transport<fixed>());
  static_assert(rocenante::transport::fixed_ranks_of<typename fixed::handle_type>() == N);
  for (bool multi_part : {false, true}) {
    CAPTURE(multi_part);
    check_all_reduce_against_reference<one_shot, __nv_bfloat16, fixed>(N, reference_options(multi_part), id * 8 + multi_part);
    check_all_reduce_against_reference<one_shot, float, fixed>(N, reference_options(multi_part), id * 8 + 2 + multi_part);
  }
  check_all_reduce_against_reference<rocenante::algorithm::ring, __half, fixed>(N, reference_options(true), id * 8 + 4);
}

}  // namespace

TEST_SUITE("host.fixed_ranks") {
  TEST_CASE("a handle with its rank count fixed at compile time gives the reference's bytes at 2, 4 and 8 ranks") {
    fixed_ranks_cases<2>(40);  // case ids 320.. (the cases above use 0..152)
    fixed_ranks_cases<4>(41);
    fixed_ranks_cases<8>(42);
  }
  TEST_CASE("with_fixed_ranks refuses a handle of another rank count") {
    rocenante::transport::direct_handle h{};
    h.ranks_ = 3;
    CHECK(rocenante::transport::fixed_ranks_of<rocenante::transport::direct_handle>() == 0);
    CHECK(rocenante::transport::with_fixed_ranks<3>(h).ranks() == 3);
    CHECK_THROWS_AS(rocenante::transport::with_fixed_ranks<4>(h), std::invalid_argument);
  }
}

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

namespace {

/// Each rank's input copied to offset `off` of its symmetric input area and summed from there into `out` (the
/// in-place path), and the same input summed from an ordinary buffer (the staged path): the two results must be
/// the same bytes on every rank, and the model's rank-order fp32 sum.
template <class A, class T>
void inplace_matches_staged(int n, std::size_t off, std::uint64_t case_id) {
  options o = reference_options(true);
  o.symmetric_bytes = 64 * 1024 + 4096;
  const std::vector<std::size_t> counts = {1, 7, 16, 4096 + 3, static_cast<std::size_t>(o.capacity_bytes / sizeof(T))};
  const std::size_t nc = counts.size();
  using buffers = std::vector<std::vector<T>>;
  std::vector<buffers> in(nc, buffers(n)), staged(nc, buffers(n)), inplace(nc, buffers(n));
  std::vector<std::vector<status>> st(nc, std::vector<status>(n, status::internal)), st_ip = st;
  std::vector<std::size_t> area(n, 0);
  for (std::size_t c = 0; c < nc; ++c)
    for (int r = 0; r < n; ++r) {
      in[c][r] = random_input<T>(counts[c], seed_for(r, case_id * 64 + c));
      staged[c][r].resize(counts[c] + guard_elems);
      inplace[c][r].resize(counts[c] + guard_elems);
      poison(staged[c][r]);
      poison(inplace[c][r]);
    }
  host::spawn_ranks(n, [&](bootstrap::in_process& b) {
    comm_t comm(b, o);
    const int r = b.rank();
    const std::span<std::byte> sym = comm.symmetric_input();
    area[r] = sym.size();
    for (std::size_t c = 0; c < nc; ++c) {
      st[c][r] = comm.template all_reduce<A>(in[c][r].data(), staged[c][r].data(), counts[c]);
      std::memcpy(sym.data() + off, in[c][r].data(), counts[c] * sizeof(T));
      st_ip[c][r] = comm.template all_reduce<A>(reinterpret_cast<const T*>(sym.data() + off), inplace[c][r].data(), counts[c]);
    }
  });
  for (int r = 0; r < n; ++r) CHECK(area[r] == o.symmetric_bytes);
  for (std::size_t c = 0; c < nc; ++c) {
    const std::size_t count = counts[c];
    CAPTURE(count);
    std::vector<const std::vector<T>*> inputs;
    for (int r = 0; r < n; ++r) inputs.push_back(&in[c][r]);
    std::size_t bad_model = 0;
    for (std::size_t i = 0; i < count; ++i)
      if (!same_bits(inplace[c][0][i], model_sum<T>(inputs, i, 0))) ++bad_model;
    CHECK(bad_model == 0);
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(st[c][r] == status::ok);
      CHECK(st_ip[c][r] == status::ok);
      CHECK(std::memcmp(inplace[c][r].data(), staged[c][r].data(), count * sizeof(T)) == 0);
      CHECK(std::memcmp(inplace[c][r].data(), inplace[c][0].data(), count * sizeof(T)) == 0);
      CHECK(std::all_of(inplace[c][r].begin() + count, inplace[c][r].end(), is_poison<T>));
    }
  }
}

/// Rank 1 calls with an input that is not where its peers read (another offset, or an ordinary buffer); every rank
/// calls one_shot, or with `two_shot` two_shot: every rank's call fails with status::mismatch and its output is NaN —
/// never a sum of the wrong bytes.
void inplace_disagreement(int n, bool ordinary_buffer, bool two_shot = false) {
  options o = reference_options(false);
  o.symmetric_bytes = 64 * 1024;
  o.timeout_ns = 5'000'000'000ull;
  constexpr std::size_t count = 1000;
  std::vector<status> st(n, status::internal);
  std::vector<std::vector<float>> out(n, std::vector<float>(count, 1.0f));
  host::spawn_ranks(n, [&](bootstrap::in_process& b) {
    comm_t comm(b, o);
    const int r = b.rank();
    const std::span<std::byte> sym = comm.symmetric_input();
    std::vector<float> own(count, float(r + 1));
    const std::size_t off = r == 1 && !ordinary_buffer ? 4096 : 0;
    std::memcpy(sym.data() + off, own.data(), count * sizeof(float));
    const float* in = r == 1 && ordinary_buffer ? own.data() : reinterpret_cast<const float*>(sym.data() + off);
    st[r] = two_shot ? comm.all_reduce(in, out[r].data(), count, rocenante::algorithm::two_shot{})
                     : comm.all_reduce(in, out[r].data(), count);
  });
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(st[r] == status::mismatch);
    CHECK(std::all_of(out[r].begin(), out[r].end(), [](float v) { return std::isnan(v); }));
  }
}

}  // namespace

TEST_SUITE("host.one_shot.inplace") {
  TEST_CASE_TEMPLATE("an input in the symmetric area is summed in place: the staged path's bytes on every rank", T, float,
                     __half, __nv_bfloat16) {
    for (int n : reference_rank_counts) {
      CAPTURE(n);
      inplace_matches_staged<one_shot, T>(n, n % 2 == 0 ? 0 : 4096 - 16 * n, 700 + 3 * dtype_index<T> * 16 + n);
    }
  }
  TEST_CASE_TEMPLATE("two_shot: an input in the symmetric area is reduced by its chunks' owners in place: the staged "
                     "path's bytes on every rank", T, float, __half, __nv_bfloat16) {
    for (int n : reference_rank_counts) {
      CAPTURE(n);
      inplace_matches_staged<rocenante::algorithm::two_shot, T>(n, n % 2 == 0 ? 4096 : 0, 800 + 3 * dtype_index<T> * 16 + n);
    }
  }
  TEST_CASE("ranks disagreeing on the input's place fail with mismatch, never a wrong sum") {
    inplace_disagreement(2, false);
    inplace_disagreement(3, true);
    inplace_disagreement(3, false, true);
    inplace_disagreement(2, true, true);
  }
  TEST_CASE("an output inside the input (in == out) takes the staged path; a rank that never calls is reported, bounded") {
    options o = reference_options(false);
    o.symmetric_bytes = 4096;
    o.timeout_ns = 300'000'000ull;
    constexpr std::size_t count = 64;
    std::vector<status> same(3, status::internal), late(3, status::internal);
    std::vector<float> got(3, 0.0f);
    std::vector<int> nan_out(3, 0);
    host::spawn_ranks(3, [&](bootstrap::in_process& b) {
      comm_t comm(b, o);
      const int r = b.rank();
      auto* sym = reinterpret_cast<float*>(comm.symmetric_input().data());
      for (std::size_t i = 0; i < count; ++i) sym[i] = float(r + 1);
      same[r] = comm.all_reduce(sym, sym, count);  // 1 + 2 + 3 written over the input, on every rank
      got[r] = sym[count - 1];
      b.barrier();
      if (r == 2) return;  // rank 2 never enters the next call
      std::vector<float> out(count, 0.0f);
      late[r] = comm.all_reduce(sym, out.data(), count);
      nan_out[r] = std::all_of(out.begin(), out.end(), [](float v) { return std::isnan(v); });
    });
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      CHECK(same[r] == status::ok);
      CHECK(got[r] == 6.0f);
    }
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      CHECK(late[r] != status::ok);
      CHECK(nan_out[r] == 1);
    }
  }
  TEST_CASE("a proxy-mode transport has no symmetric input area") {
    options o = reference_options(false);
    o.symmetric_bytes = 4096;
    std::vector<std::size_t> area(2, 1);
    host::spawn_ranks(2, [&](bootstrap::in_process& b) {
      host::communicator<transport::loopback_proxy> comm(b, o);
      area[b.rank()] = comm.symmetric_input().size();
    });
    CHECK(area[0] == 0);
    CHECK(area[1] == 0);
  }
}

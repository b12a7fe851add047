// tests/host/reference_case.hpp — the agreement check run for every algorithm x dtype x rank count:
// seeded random inputs per rank, outputs poisoned with NaN, then for every count of the acceptance list
//   - status ok on every rank (out-of-place and in-place),
//   - every element within the float64 reference's tolerance (common.hpp states the bound),
//   - every element bit for bit the fp32 sum in the algorithm's documented order, rounded once,
//   - the same bytes on every rank, and in-place bytes equal to out-of-place bytes,
//   - the guard elements past `count` still poisoned (nothing written out of bounds).
// Results are recorded by the rank threads and checked on the test's own thread.
#pragma once

#include <doctest/doctest.h>

#include <type_traits>

#include "common.hpp"
#include "typed_cases.hpp"

namespace rtest {

/// 64 KiB capacity keeps windows small (CI time); `multi_part` makes nearly every count split into 3 parts of
/// at least one packet, which exercises the part split (3 does not divide the packet counts used).
inline options reference_options(bool multi_part) {
  options o;
  o.capacity_bytes = 64 * 1024;
  o.max_parts = multi_part ? 3 : 1;
  o.min_part_bytes = multi_part ? 16 : 64 * 1024;
  o.timeout_ns = 60'000'000'000ull;  // generous: the sanitizer builds run 8 ranks on 2 cores
  return o;
}

template <class T>
std::vector<std::size_t> acceptance_counts(const options& o) {
  return {1, 7, 16, 4096 + 3, static_cast<std::size_t>(o.capacity_bytes / sizeof(T))};
}

/// `counts` empty: acceptance_counts.
template <class A, class T, class Transport = transport::loopback>
void check_all_reduce_against_reference(int n, const options& opts, std::uint64_t case_id,
                                        std::vector<std::size_t> counts = {}) {
  if (counts.empty()) counts = acceptance_counts<T>(opts);
  const std::size_t nc = counts.size();
  using buffers = std::vector<std::vector<T>>;
  std::vector<buffers> in(nc, buffers(n)), out(nc, buffers(n)), inplace(nc, buffers(n));
  std::vector<std::vector<status>> st(nc, std::vector<status>(n, status::internal)), st_ip = st;
  for (std::size_t c = 0; c < nc; ++c)
    for (int r = 0; r < n; ++r) {
      in[c][r] = random_input<T>(counts[c], seed_for(r, case_id * 64 + c));
      out[c][r].resize(counts[c] + guard_elems);
      poison(out[c][r]);
      inplace[c][r].resize(counts[c] + guard_elems);
      poison(inplace[c][r]);
      std::copy(in[c][r].begin(), in[c][r].end(), inplace[c][r].begin());
    }

  host::spawn_ranks(n, [&](bootstrap::in_process& b) {
    host::communicator<Transport> comm(b, opts);
    const int r = b.rank();
    for (std::size_t c = 0; c < nc; ++c) {
      st[c][r] = comm.template all_reduce<A>(in[c][r].data(), out[c][r].data(), counts[c]);
      st_ip[c][r] = comm.template all_reduce<A>(inplace[c][r].data(), inplace[c][r].data(), counts[c]);
    }
  });

  for (std::size_t c = 0; c < nc; ++c) {
    const std::size_t count = counts[c];
    CAPTURE(count);
    std::vector<const std::vector<T>*> inputs;
    for (int r = 0; r < n; ++r) inputs.push_back(&in[c][r]);
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(st[c][r] == status::ok);
      CHECK(st_ip[c][r] == status::ok);
    }
    std::size_t bad_ref = 0, bad_model = 0, first_bad = count;
    double worst_err = 0, worst_tol = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const reference ref = reference_sum<T>(inputs, i);
      int first = 0;
      if constexpr (std::is_same_v<A, algorithm::ring>) first = ring_first_rank<T>(n, count, i);
      const T model = model_sum<T>(inputs, i, first);
      const T got = out[c][0][i];  // every rank's bytes are compared to rank 0's below
      const double err = std::fabs(static_cast<double>(to_float(got)) - ref.value);
      if (!(err <= ref.tolerance)) {  // NaN (an unwritten element) fails here
        if (bad_ref++ == 0) first_bad = i, worst_err = err, worst_tol = ref.tolerance;
      }
      if (!same_bits(got, model)) ++bad_model;
    }
    INFO("first element off the float64 reference: ", first_bad, " (error ", worst_err, ", tolerance ", worst_tol, ")");
    CHECK(bad_ref == 0);
    CHECK(bad_model == 0);
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(std::memcmp(out[c][r].data(), out[c][0].data(), count * sizeof(T)) == 0);
      CHECK(std::memcmp(inplace[c][r].data(), out[c][r].data(), count * sizeof(T)) == 0);
      const bool guard_ok = std::all_of(out[c][r].begin() + count, out[c][r].end(), is_poison<T>) &&
                            std::all_of(inplace[c][r].begin() + count, inplace[c][r].end(), is_poison<T>);
      CHECK(guard_ok);
    }
  }
}

/// one_shot all-gather: out = in_0 | in_1 | ... | in_{n-1}, exact, on every rank; guard past n*count intact.
template <class T, class Transport = transport::loopback>
void check_all_gather(int n, const options& opts, std::uint64_t case_id) {
  const std::vector<std::size_t> counts = acceptance_counts<T>(opts);
  const std::size_t nc = counts.size();
  using buffers = std::vector<std::vector<T>>;
  std::vector<buffers> in(nc, buffers(n)), out(nc, buffers(n));
  std::vector<std::vector<status>> st(nc, std::vector<status>(n, status::internal));
  for (std::size_t c = 0; c < nc; ++c)
    for (int r = 0; r < n; ++r) {
      in[c][r] = random_input<T>(counts[c], seed_for(r, case_id * 64 + c));
      out[c][r].resize(counts[c] * n + guard_elems);
      poison(out[c][r]);
    }
  host::spawn_ranks(n, [&](bootstrap::in_process& b) {
    host::communicator<Transport> comm(b, opts);
    const int r = b.rank();
    for (std::size_t c = 0; c < nc; ++c) st[c][r] = comm.all_gather(in[c][r].data(), out[c][r].data(), counts[c]);
  });
  for (std::size_t c = 0; c < nc; ++c) {
    const std::size_t count = counts[c];
    CAPTURE(count);
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(st[c][r] == status::ok);
      for (int q = 0; q < n; ++q) {
        CAPTURE(q);
        CHECK(std::memcmp(out[c][r].data() + q * count, in[c][q].data(), count * sizeof(T)) == 0);
      }
      CHECK(std::all_of(out[c][r].begin() + n * count, out[c][r].end(), is_poison<T>));
    }
  }
}

/// The rank counts every algorithm x dtype is checked at (one rank and sixteen are cases of their own).
inline constexpr int reference_rank_counts[] = {2, 3, 4, 8};

/// check_all_reduce_against_reference<A, T> at every rank count; case ids id * 16 + n.
template <class A, class T>
void all_reduce_cases(bool multi_part, std::uint64_t id) {
  for (int n : reference_rank_counts) {
    CAPTURE(n);
    check_all_reduce_against_reference<A, T>(n, reference_options(multi_part), id * 16 + n);
  }
}

}  // namespace rtest

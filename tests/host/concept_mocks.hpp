// tests/host/concept_mocks.hpp — one complete type per concept (reduction, algorithm, transport handle and
// transport, bootstrap, team), and copies that each miss one requirement. Every requirement is a small piece and a
// mock is the list of pieces it has, so what a mock lacks reads off its base list. Used by test_concepts.cpp (the
// verdicts) and compile_fail.cpp (the words of the refusal).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <rocenante/rocenante.hpp>

namespace mock {

using namespace rocenante;

// --- reduce::reduction ----------------------------------------------------------------------------------------

struct float_value {
  using value_type = float;
};
struct float_accum {
  using accum_type = float;
};
struct named_f32 {
  static constexpr const char* name = "mock";
  static constexpr dtype dtype_id = dtype::f32;
};
struct sum_op {
  static constexpr reduce::reduce_op op_id = reduce::reduce_op::sum;
};
struct whole_values {
  static constexpr bool block_scaled = false;
};
struct exact_per_hop {
  static constexpr bool lossy_per_hop = false;
};
struct float_conversions {
  static float to_accum(float v) { return v; }
  static float from_accum(float a) { return a; }
};
struct float_combine {
  static float combine(float a, float b) { return a + b; }
};

struct reduction_ok : float_value, float_accum, named_f32, sum_op, whole_values, exact_per_hop, float_conversions,
                      float_combine {};
struct reduction_lossy : reduction_ok {
  static constexpr bool lossy_per_hop = true;
};
struct reduction_no_combine : float_value, float_accum, named_f32, sum_op, whole_values, exact_per_hop,
                              float_conversions {};
struct reduction_no_traits : float_value, float_accum, named_f32, sum_op, whole_values, float_conversions,
                             float_combine {};  // no lossy_per_hop
struct reduction_no_accum_type : float_value, named_f32, sum_op, whole_values, exact_per_hop, float_conversions,
                                 float_combine {};
struct reduction_no_op : float_value, float_accum, named_f32, whole_values, exact_per_hop, float_conversions,
                         float_combine {};  // every member but the operator id its flags carry
struct reduction_wrong_combine : reduction_ok {
  static double combine(float a, float b) { return double{a} + b; }  // not accum_type
};
struct three_bytes {
  unsigned char b[3];
};
struct reduction_odd_size : float_accum, named_f32, sum_op, whole_values, exact_per_hop, float_combine {
  using value_type = three_bytes;  // sizeof(value_type) does not divide the 16-byte packet
  static float to_accum(three_bytes) { return 0; }
  static three_bytes from_accum(float) { return {}; }
};

// --- algorithm::algorithm -------------------------------------------------------------------------------------

struct schedule_of_one {
  static constexpr const char* name = "mock";
  static constexpr std::uint32_t channels(int) { return 1; }
  static constexpr std::uint64_t slot_bytes(int, std::uint64_t c) { return c; }
  static constexpr std::uint32_t steps(int) { return 1; }
};
template <algorithm::algo A>
struct algo_id {
  static constexpr algorithm::algo id = A;
};
struct no_all_gather {
  static constexpr bool supports_all_gather = false;
};
struct wire_bytes_as_is {
  static constexpr std::uint64_t wire_bytes(int, std::uint64_t b) { return b; }
};

struct algorithm_ok : schedule_of_one, algo_id<algorithm::algo::one_shot>, no_all_gather, wire_bytes_as_is {};
struct algorithm_no_wire_bytes : schedule_of_one, algo_id<algorithm::algo::one_shot>, no_all_gather {};
struct algorithm_no_id : schedule_of_one, no_all_gather, wire_bytes_as_is {};
struct algorithm_no_all_gather_trait : schedule_of_one, algo_id<algorithm::algo::ring>, wire_bytes_as_is {};

// --- transport::transport_handle and transport::transport -----------------------------------------------------

struct handle_of_one_rank {
  static constexpr bool shared_staging = false;
  int rank() const { return 0; }
  int ranks() const { return 1; }
  const protocol::window_layout& layout() const { return layout_; }
  const std::byte* recv_ptr(std::uint32_t, std::uint64_t) const { return nullptr; }
  std::uint64_t* local_flag(std::uint64_t) { return nullptr; }
  protocol::window_layout layout_;
};
struct system_scope {
  memory_scope scope() const { return memory_scope::system; }
};
struct writable_put {
  std::byte* put_ptr(int, std::uint32_t, std::uint64_t) { return nullptr; }
};
struct signals {
  void signal(int, std::uint32_t, std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t) {}
};

struct handle_ok : handle_of_one_rank, system_scope, writable_put, signals {};
struct handle_no_scope : handle_of_one_rank, writable_put, signals {};  // its flags' memory scope is in the contract
struct handle_no_signal : handle_of_one_rank, system_scope, writable_put {};
struct handle_const_put_ptr : handle_of_one_rank, system_scope, signals {  // put_ptr must hand out writable memory
  const std::byte* put_ptr(int, std::uint32_t, std::uint64_t) { return nullptr; }
};
struct handle_not_trivially_copyable : handle_ok {  // cannot be passed by value into a kernel
  std::string label;
};

template <class H>
struct transport_of {
  static constexpr const char* name = "mock";
  using handle_type = H;
  handle_type handle() const { return {}; }
};
struct transport_no_handle_fn {
  static constexpr const char* name = "mock";
  using handle_type = handle_ok;
};
struct transport_no_name {
  using handle_type = handle_ok;
  handle_type handle() const { return {}; }
};

// --- bootstrap::bootstrap and protocol::team ------------------------------------------------------------------

struct world_of_one {
  int rank() const { return 0; }
  int size() const { return 1; }
};
struct gathers {
  void all_gather(const void*, void*, std::size_t) {}
};
struct barriers {
  void barrier() {}
};

struct bootstrap_ok : world_of_one, gathers, barriers {};
struct bootstrap_no_barrier : world_of_one, gathers {};
struct bootstrap_no_all_gather : world_of_one, barriers {};

struct team_no_all {
  int thread() const { return 0; }
  int size() const { return 1; }
  void sync() {}
};
struct team_all_returns_int : team_no_all {
  int all(bool b) { return b; }
};

}  // namespace mock

// reduce/concepts.hpp — AXIS: the reduction (element type x operator).
//
// A reduction `R` describes how elements are stored, accumulated and rounded:
//
//   Requires:
//     typename R::value_type          element type in user buffers and on the wire (float, __half, __nv_bfloat16)
//     typename R::accum_type          type sums are carried in (float for every built-in reduction)
//     R::name                         printable name ("fp32", "fp16", "bf16")
//     R::dtype_id                     small integer identifying the element type on the wire (see dtype)
//     R::op_id                        the operator on the wire (see reduce_op): a rank summing and a rank taking
//                                     the maximum at one sequence fail with status::mismatch
//     R::block_scaled                 true for block-scaled formats (NVFP4); such types need a codec
//     R::lossy_per_hop                true when forwarding a partial result loses precision (ring must refuse)
//     R::to_accum(value_type)         exact widening to the accumulator
//     R::combine(accum, accum)        the operator, applied in a fixed order: ((x0 op x1) op x2) ...
//     R::from_accum(accum_type)       the single rounding back to value_type (round-to-nearest-even)
//     packet_bytes % sizeof(value_type) == 0
//
// Every built-in reduction accumulates in fp32 and rounds once, at the end, so the result of a sum of n inputs
// does not depend on how the data was split into packets, parts or chunks — only on the order of the inputs,
// which every algorithm fixes (see algorithm/concepts.hpp).
#pragma once

#include <concepts>
#include <cstdint>

#include "../config.hpp"

namespace rocenante {

/// Element types known to the wire format. The id travels in every flag word, so that two ranks that call
/// the same collective with different element types fail with `status::mismatch` instead of mixing bytes.
enum class dtype : std::uint8_t { f32 = 1, f16 = 2, bf16 = 3, nvfp4 = 4 };

ROCENANTE_HOST_DEVICE constexpr const char* to_string(dtype t) noexcept {
  switch (t) {
    case dtype::f32: return "float";
    case dtype::f16: return "half";
    case dtype::bf16: return "bfloat16";
    case dtype::nvfp4: return "nvfp4";
  }
  return "unknown";
}

namespace reduce {

/// Reduction operators known to the wire format (3 bits of the flag signature, protocol/flags.hpp). Only `sum`
/// has built-in reductions; the other ids are reserved so that a reduction added later carries a fixed id.
/// All-gathers carry `sum` (0).
enum class reduce_op : std::uint8_t { sum = 0, max = 1, min = 2, prod = 3 };

ROCENANTE_HOST_DEVICE constexpr const char* to_string(reduce_op o) noexcept {
  switch (o) {
    case reduce_op::sum: return "sum";
    case reduce_op::max: return "max";
    case reduce_op::min: return "min";
    case reduce_op::prod: return "prod";
  }
  return "unknown";
}

template <class R>
concept reduction =
    requires(typename R::value_type v, typename R::accum_type a) {
      { R::name } -> std::convertible_to<const char*>;
      { R::dtype_id } -> std::convertible_to<dtype>;
      { R::op_id } -> std::convertible_to<reduce_op>;
      { R::block_scaled } -> std::convertible_to<bool>;
      { R::lossy_per_hop } -> std::convertible_to<bool>;
      { R::to_accum(v) } -> std::same_as<typename R::accum_type>;
      { R::combine(a, a) } -> std::same_as<typename R::accum_type>;
      { R::from_accum(a) } -> std::same_as<typename R::value_type>;
    } && (packet_bytes % sizeof(typename R::value_type) == 0);

/// Use at every entry point that takes a reduction: names what is missing instead of a wall of template errors.
template <class R>
constexpr bool check_reduction() {
  static_assert(requires { typename R::value_type; }, "reduction is missing `using value_type = ...`");
  static_assert(requires { typename R::accum_type; }, "reduction is missing `using accum_type = ...`");
  static_assert(requires { { R::name } -> std::convertible_to<const char*>; },
                "reduction is missing `static constexpr const char* name`");
  static_assert(requires { { R::dtype_id } -> std::convertible_to<dtype>; },
                "reduction is missing `static constexpr dtype dtype_id`");
  static_assert(requires { { R::op_id } -> std::convertible_to<reduce_op>; },
                "reduction is missing `static constexpr reduce_op op_id` (the operator its flags carry)");
  static_assert(requires { { R::block_scaled } -> std::convertible_to<bool>; } &&
                    requires { { R::lossy_per_hop } -> std::convertible_to<bool>; },
                "reduction is missing the traits `block_scaled` and `lossy_per_hop`");
  static_assert(reduction<R>,
                "reduction must provide to_accum(value_type)->accum_type, combine(accum, accum)->accum_type and "
                "from_accum(accum)->value_type, and sizeof(value_type) must divide 16");
  return true;
}

}  // namespace reduce
}  // namespace rocenante

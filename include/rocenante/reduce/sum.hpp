// reduce/sum.hpp — sum over fp32, fp16 (__half) and bf16 (__nv_bfloat16), accumulated in fp32 and rounded
// once to the element type with round-to-nearest-even (CUDA's own __float2half_rn / __float2bfloat16_rn,
// which compile for host and device and agree bit for bit).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "concepts.hpp"

namespace rocenante::reduce {

template <class T>
inline constexpr bool has_sum = false;
template <>
inline constexpr bool has_sum<float> = true;
template <>
inline constexpr bool has_sum<__half> = true;
template <>
inline constexpr bool has_sum<__nv_bfloat16> = true;

namespace detail {
/// What every sum of this header shares: fp32 accumulation, the `sum` operator and plain (unscaled, lossless per
/// hop) packets. A specialisation adds its name and its two conversions.
template <class T, dtype D>
struct fp32_sum {
  using value_type = T;
  using accum_type = float;
  static constexpr dtype dtype_id = D;
  static constexpr reduce_op op_id = reduce_op::sum;
  static constexpr bool block_scaled = false;
  static constexpr bool lossy_per_hop = false;
  ROCENANTE_HOST_DEVICE static constexpr float combine(float a, float b) { return a + b; }
};
}  // namespace detail

/// Only the specialisations below are reductions. The primary template says so in one message, and is complete
/// (members of the right shape, never usable: the assert fails first) so that no second error follows it.
template <class T>
struct sum : detail::fp32_sum<T, dtype::f32> {
  static_assert(has_sum<T>,
                "rocenante: no sum reduction for this element type; supported element types are float (fp32), "
                "__half (fp16) and __nv_bfloat16 (bf16), and NVFP4 on the wire via reduce::nvfp4_sum<T>");
  static constexpr const char* name = "unsupported";
  ROCENANTE_HOST_DEVICE static float to_accum(T) { return 0.0f; }
  ROCENANTE_HOST_DEVICE static T from_accum(float) { return T{}; }
};

template <>
struct sum<float> : detail::fp32_sum<float, dtype::f32> {
  static constexpr const char* name = "fp32";
  ROCENANTE_HOST_DEVICE static constexpr float to_accum(float v) { return v; }
  ROCENANTE_HOST_DEVICE static constexpr float from_accum(float a) { return a; }
};

template <>
struct sum<__half> : detail::fp32_sum<__half, dtype::f16> {
  static constexpr const char* name = "fp16";
  ROCENANTE_HOST_DEVICE static float to_accum(__half v) { return __half2float(v); }
  ROCENANTE_HOST_DEVICE static __half from_accum(float a) { return __float2half_rn(a); }
};

template <>
struct sum<__nv_bfloat16> : detail::fp32_sum<__nv_bfloat16, dtype::bf16> {
  static constexpr const char* name = "bf16";
  ROCENANTE_HOST_DEVICE static float to_accum(__nv_bfloat16 v) { return __bfloat162float(v); }
  ROCENANTE_HOST_DEVICE static __nv_bfloat16 from_accum(float a) { return __float2bfloat16_rn(a); }
};

static_assert(reduction<sum<float>> && reduction<sum<__half>> && reduction<sum<__nv_bfloat16>>);

/// Maps a runtime dtype to its sum reduction; used by the runtime dispatch (host::communicator::all_reduce with a runtime dtype).
template <dtype D>
struct sum_for;
template <>
struct sum_for<dtype::f32> {
  using type = sum<float>;
};
template <>
struct sum_for<dtype::f16> {
  using type = sum<__half>;
};
template <>
struct sum_for<dtype::bf16> {
  using type = sum<__nv_bfloat16>;
};

}  // namespace rocenante::reduce

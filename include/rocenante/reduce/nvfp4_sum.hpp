// reduce/nvfp4_sum.hpp — the reduction "sum of T, carried as NVFP4 on the wire": user buffers hold T (fp32, fp16
// or bf16), each rank's contribution travels as NVFP4 (reduce/nvfp4.hpp), receivers decode and sum in fp32 in
// rank order and round once to T. Its traits say what algorithms must know:
//   block_scaled  = true   the payload is not packets of value_type: only an algorithm with a codec
//                          (algorithm/one_shot_fp4.hpp) can move it
//   lossy_per_hop = true   each encode loses precision, so ring (which would re-encode partial sums n-1 times)
//                          refuses it at compile time (algorithm/ring.hpp's static_assert)
// dtype_id = nvfp4 travels in the flag signature: a rank on the compressed wire and a rank on the plain one at
// the same sequence fail with status::mismatch instead of mixing bytes.
#pragma once

#include "nvfp4.hpp"
#include "sum.hpp"

namespace rocenante::reduce {

template <class T>
struct nvfp4_sum : sum<T> {
  static constexpr const char* name = "nvfp4-wire";
  static constexpr dtype dtype_id = dtype::nvfp4;
  static constexpr bool block_scaled = true;
  static constexpr bool lossy_per_hop = true;
};

static_assert(reduction<nvfp4_sum<float>> && reduction<nvfp4_sum<__half>> && reduction<nvfp4_sum<__nv_bfloat16>>);

}  // namespace rocenante::reduce

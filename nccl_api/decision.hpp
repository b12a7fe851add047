// nccl_api/decision.hpp — which NCCL calls the layer serves with the library's own collectives and which it
// forwards to the real NCCL. The route is a pure function of values every rank of a communicator shares: the
// collective, the element count, the datatype and reduction operator, and the communicator's agreed configuration
// (ROCENANTE_NCCL_MAX_BYTES, voted equal on every rank at set-up; whether the library communicator was built, also
// voted). It never reads a pointer, a stream or any other rank-local state, so every rank routes a call the same way
// and no rank waits in the library for a peer that went to NCCL (hazard H7: rank-divergent eligibility).
//
// Served: ncclAllReduce with ncclSum, and ncclAllGather, of ncclFloat32, ncclFloat16 or ncclBfloat16, 1 to
// max_bytes bytes per rank (all-gather: the send count); a call of count 0 is answered as done. Everything else is
// forwarded. Host only, no allocation:
// called on every collective.
#pragma once

#include <cstdint>
#include <optional>

#include <rocenante/reduce/concepts.hpp>  // dtype

namespace rocenante::nccl_layer {

/// NCCL's enum values (nccl.h, stable since NCCL 2.0; nccl_api/layer.cpp checks them against nccl.h).
namespace nccl_values {
inline constexpr int int8 = 0, uint8 = 1, int32 = 2, uint32 = 3, int64 = 4, uint64 = 5, float16 = 6, float32 = 7,
                     float64 = 8, bfloat16 = 9, float8e4m3 = 10, float8e5m2 = 11;
inline constexpr int sum = 0, prod = 1, max = 2, min = 3, avg = 4, num_ops = 5;
}  // namespace nccl_values

enum class collective_kind : std::uint8_t { all_reduce, all_gather };

/// Where a call goes, and why when it is forwarded.
enum class route : std::uint8_t {
  served = 0,
  empty,           ///< count 0: nothing to move; answered here with ncclSuccess on every rank (NCCL's own answer), so
                   ///< that an empty call never needs NCCL (nccl-tests' smallest all-gathers are empty per rank)
  disabled,        ///< the communicator serves nothing (ROCENANTE_NCCL_MAX_BYTES=0, ROCENANTE_TRANSPORT=nccl, or the
                   ///< library communicator could not be built on every rank: the start-up line says which)
  reduction,       ///< all-reduce with another operator than ncclSum (incl. ncclAvg and ncclRedOpCreatePreMulSum's)
  datatype,        ///< not ncclFloat32, ncclFloat16 or ncclBfloat16
  too_large,       ///< more than max_bytes bytes per rank
  not_collective,  ///< not an all-reduce or all-gather (reduce, broadcast, send/recv, ...): always forwarded
};

inline const char* to_string(route r) {
  switch (r) {
    case route::served: return "served";
    case route::empty: return "served: count 0, nothing to do";
    case route::disabled: return "forwarded: this communicator serves nothing";
    case route::reduction: return "forwarded: only ncclSum is served";
    case route::datatype: return "forwarded: only ncclFloat32, ncclFloat16 and ncclBfloat16 are served";
    case route::too_large: return "forwarded: larger than ROCENANTE_NCCL_MAX_BYTES per rank";
    case route::not_collective: return "forwarded: not an all-reduce or all-gather";
  }
  return "?";
}

/// The library's element type for an NCCL datatype it serves.
inline std::optional<dtype> served_dtype(int nccl_datatype) {
  switch (nccl_datatype) {
    case nccl_values::float32: return dtype::f32;
    case nccl_values::float16: return dtype::f16;
    case nccl_values::bfloat16: return dtype::bf16;
    default: return std::nullopt;
  }
}

/// Bytes of one element of an NCCL datatype (0 for a value nccl.h does not define).
inline std::uint64_t nccl_element_bytes(int nccl_datatype) {
  switch (nccl_datatype) {
    case nccl_values::int8: case nccl_values::uint8: case nccl_values::float8e4m3: case nccl_values::float8e5m2: return 1;
    case nccl_values::float16: case nccl_values::bfloat16: return 2;
    case nccl_values::int32: case nccl_values::uint32: case nccl_values::float32: return 4;
    case nccl_values::int64: case nccl_values::uint64: case nccl_values::float64: return 8;
    default: return 0;
  }
}

/// What a communicator agreed on at set-up (identical on every rank: voted).
struct serve_policy {
  bool serves = false;          ///< a library communicator exists on every rank
  std::uint64_t max_bytes = 0;  ///< largest input of one rank served (all-gather: its contribution)
};

/// The route of a call of `count` elements of `nccl_datatype` (reduction `nccl_op`, all-reduce only).
inline route decide(collective_kind c, std::uint64_t count, int nccl_datatype, int nccl_op, const serve_policy& p) {
  if (!p.serves) return route::disabled;
  if (count == 0) return route::empty;
  if (c == collective_kind::all_reduce && nccl_op != nccl_values::sum) return route::reduction;
  if (!served_dtype(nccl_datatype)) return route::datatype;
  const std::uint64_t elem = nccl_element_bytes(nccl_datatype);
  if (count > p.max_bytes / elem) return route::too_large;
  return route::served;
}

}  // namespace rocenante::nccl_layer

// tests/host/typed_cases.hpp — for test cases typed over the element types (doctest TEST_CASE_TEMPLATE over float,
// __half, __nv_bfloat16): the names doctest gives them ("...<bf16>") and each type's index, from which a case derives
// its seeds. Included after doctest by the programs that have such cases.
#pragma once

#include <doctest/doctest.h>

#include <type_traits>

#include "common.hpp"

namespace rtest {

/// Index of T among the element types: fp32 0, fp16 1, bf16 2.
template <class T>
constexpr int dtype_index = std::is_same_v<T, float> ? 0 : std::is_same_v<T, __half> ? 1 : 2;

}  // namespace rtest

TYPE_TO_STRING_AS("fp32", float);
TYPE_TO_STRING_AS("fp16", __half);
TYPE_TO_STRING_AS("bf16", __nv_bfloat16);

// reduce/lamport.hpp — Lamport packets: 16-byte packets that are their own ready flag (the one-shot all-reduce's
// Lamport path, algorithm/one_shot.hpp; the argument is in docs/design.md §3, "Lamport area"). An area that
// receives them starts all ones; no element sent is all ones; a packet is its writer's once no element is.
// Device code.
#pragma once

#include <cstddef>
#include <cstdint>

#include "concepts.hpp"

#if ROCENANTE_DEVICE_PASS
namespace rocenante::reduce::lamport {

/// Element words: 4 bytes (fp32) or two of 2 bytes (fp16, bf16).
/// The word as sent: an all-ones element (a NaN) becomes the same NaN with its sign bit cleared.
template <reduce::reduction R>
ROCENANTE_DEVICE ROCENANTE_FORCEINLINE std::uint32_t word(std::uint32_t w) {
  if constexpr (sizeof(typename R::value_type) == 4) {
    return w == 0xffffffffu ? 0x7fffffffu : w;
  } else {
    const std::uint32_t lo = (w & 0xffffu) == 0xffffu ? 0x7fffu : (w & 0xffffu);
    const std::uint32_t hi = (w >> 16) == 0xffffu ? 0x7fff0000u : (w & 0xffff0000u);
    return hi | lo;
  }
}
/// Whether word `w` of a received packet still holds an empty (all-ones) element.
template <reduce::reduction R>
ROCENANTE_DEVICE ROCENANTE_FORCEINLINE bool empty(std::uint32_t w) {
  if constexpr (sizeof(typename R::value_type) == 4)
    return w == 0xffffffffu;
  else
    return (w & 0xffffu) == 0xffffu || (w >> 16) == 0xffffu;
}
template <reduce::reduction R>
ROCENANTE_DEVICE ROCENANTE_FORCEINLINE bool ready(const uint4& v) {
  return !(empty<R>(v.x) || empty<R>(v.y) || empty<R>(v.z) || empty<R>(v.w));
}
/// One packet as four 32-bit accesses: each word is stored and loaded whole (single-copy atomic), so a word a
/// poll reads is either all ones or the writer's, and a packet whose four words are not empty is the writer's
/// whole packet, whatever order its words landed in.
ROCENANTE_DEVICE ROCENANTE_FORCEINLINE void store(std::byte* p, const uint4& v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
ROCENANTE_DEVICE ROCENANTE_FORCEINLINE uint4 load(const std::byte* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

}  // namespace rocenante::reduce::lamport
#endif

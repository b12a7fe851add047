// algorithm/poison.hpp — what a collective that did not complete leaves in its output: the poison value over the
// elements a part owns, so that a caller that skips check_health() computes on NaN, never on a previous call's data.
//
//   fp32 0x7fc00000, fp16 0x7e00, bf16 0x7fc0 (quiet NaN); NVFP4 (E2M1 has no NaN): scale byte 0x7f, the E4M3 NaN,
//   with codes 0 — the encoding the codec gives a block that held a NaN, so every element decodes to NaN.
//
// Who calls: every team thread of the part (threads stride over the part's elements); on the failure path only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../config.hpp"
#include "../protocol/layout.hpp"
#include "../reduce/nvfp4.hpp"
#include "partition.hpp"

namespace rocenante::algorithm {

/// Bits of the poison value of T (a quiet NaN).
template <class T>
ROCENANTE_HOST_DEVICE constexpr std::uint32_t poison_bits() {
  if constexpr (std::is_same_v<T, float>) return 0x7fc00000u;
  else if constexpr (std::is_same_v<T, __half>) return 0x7e00u;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return 0x7fc0u;
  else static_assert(sizeof(T) == 0, "no poison value for this element type");
}

/// The NVFP4 poison scale byte (reduce::nvfp4::nan_scale); codes are written 0.
inline constexpr std::uint8_t poison_scale = reduce::nvfp4::nan_scale;

/// A byte range to fill with a repeated pattern of `width` (1, 2 or 4) bytes, from a base aligned to `width`:
/// what a refused or poisoned call on the GPU fills without knowing the algorithm's part ranges.
struct poison_span {
  void* data = nullptr;
  std::uint64_t bytes = 0;
  std::uint32_t pattern = 0;
  std::uint32_t width = 1;
};
/// Up to four outputs of one call (NVFP4 quantize: residual_out, norm_out, out_data, out_scales); trivially copyable.
struct poison_list {
  poison_span span[4];
};

template <class T>
ROCENANTE_HOST_DEVICE constexpr poison_span poison_of(T* out, std::uint64_t elems) {
  return {static_cast<void*>(out), elems * sizeof(T), poison_bits<std::remove_cv_t<T>>(), static_cast<std::uint32_t>(sizeof(T))};
}

/// Fills every span of `l`; thread `t` of `step` threads (words of 4 bytes where the base allows, bytes otherwise).
ROCENANTE_HOST_DEVICE inline void fill_poison(const poison_list& l, std::uint64_t t, std::uint64_t step) {
  for (const poison_span& s : l.span) {
    if (s.data == nullptr || s.bytes == 0) continue;
    auto* b = static_cast<std::uint8_t*>(s.data);
    const std::uint32_t word = s.width == 4 ? s.pattern : s.width == 2 ? (s.pattern & 0xffffu) * 0x00010001u : (s.pattern & 0xffu) * 0x01010101u;
    const bool words = reinterpret_cast<std::uintptr_t>(b) % 4 == 0;
    const std::uint64_t nw = words ? s.bytes / 4 : 0;
    for (std::uint64_t i = t; i < nw; i += step) reinterpret_cast<std::uint32_t*>(b)[i] = word;
    for (std::uint64_t i = nw * 4 + t; i < s.bytes; i += step) b[i] = static_cast<std::uint8_t>(word >> (8 * (i % 4)));
  }
}

/// Elements [first, last) of `out` set to the poison value of T, by thread `t` of `step`.
template <class T>
ROCENANTE_HOST_DEVICE inline void fill_poison(T* out, std::uint64_t first, std::uint64_t last, std::uint64_t t, std::uint64_t step) {
  const std::uint32_t bits = poison_bits<std::remove_cv_t<T>>();
  for (std::uint64_t i = first + t; i < last; i += step) {
    T v;
    std::memcpy(static_cast<void*>(&v), &bits, sizeof(T));  // little-endian: the low bytes are the value's
    out[i] = v;
  }
}

/// The elements part `part` of `parts` of a chunked all-reduce (ring, two_shot: partition.hpp, chunk_part) would have
/// written, set to the poison value: sub-range `part` of each of the `ranks` chunks. Every team thread calls.
template <class T, int Lanes, class Team>
ROCENANTE_HOST_DEVICE void fill_poison_chunked(Team& team, T* out, std::uint64_t count, std::uint32_t part,
                                               std::uint32_t parts, int ranks) {
  const int n = ranks > 1 ? ranks : 1;
  const std::uint64_t packets = (count + Lanes - 1) / Lanes;
  const std::uint64_t k = chunk_packets(n, packets);
  const range sub = split(k, parts, part);
  for (int c = 0; c < n; ++c) {
    const range pr = chunk_part(c, k, packets, sub);
    const std::uint64_t first = pr.begin * Lanes, last = pr.end * Lanes;
    fill_poison(out, first, last < count ? last : count, static_cast<std::uint64_t>(team.thread()),
                static_cast<std::uint64_t>(team.size()));
  }
}

}  // namespace rocenante::algorithm

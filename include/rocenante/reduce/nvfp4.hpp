// reduce/nvfp4.hpp — the NVFP4 codec, written once for host and device: E2M1 elements (two per byte, element 0
// in the low nibble), one E4M3 scale per 16 consecutive elements, one FP32 global scale per tensor (or per part of
// a wire payload, one_shot_fp4). Every conversion goes through CUDA's own cuda_fp4.h / cuda_fp8.h functions (PTX
// cvt on sm_100f/110f/120f family builds, the headers' software emulation on the host) — except E2M1 in sm_90 device
// code, where exact comparison/bit equivalents replace the slow emulation (see e2m1x2; tested equal), and every
// other float operation is a single IEEE-rounded multiply or divide (mul_rn/div_rn: no FMA contraction), so the
// host and every GPU target produce the same bytes. docs/nvfp4.md describes the format and the choices below.
//
// Quantize one block of 16 values x[i] with global scale gs (finite, > 0):
//   amax = max |x[i]|, NaN-propagating (any NaN in the block makes amax NaN)
//   sf   = e4m3_satfinite_rn( (gs * amax) / 6 )                    scale byte; NaN stays NaN (0x7f)
//   s    = float(sf)
//   s == 0 or NaN:  every code = 0                                  (all-zero / underflowing / NaN block)
//   else:           q[i] = e2m1_satfinite_rn( x[i] * (gs / s) )     |x| beyond 6*s/gs saturates to code +-6
// Dequantize:  d = s / gs (one division per block);  x'[i] = e2m1(q[i]) * d
//   a NaN scale byte decodes every element of its block to NaN: NaN input poisons its block (NaN propagates);
//   +-Inf input saturates to +-6 * 448 / gs (the largest magnitude the tensor scale can express) or less.
// Elements past `count` (count not a multiple of 16) are treated as 0 and their nibbles are written as 0.
//
// Scale-factor layouts for a (rows x cols) tensor, kb = ceil(cols/16) scale columns:
//   linear           offset(m, k) = m*kb + k                                 rows*kb bytes
//   swizzled_128x4   the cuBLASLt / CUTLASS "1D block scaling factors layout" (NVFP4 GEMM operands):
//                    offset(m, k) = (m/128)*(kt*512) + (k/4)*512 + (m%32)*16 + ((m%128)/32)*4 + k%4,
//                    kt = ceil(kb/4); size ceil(rows/128)*128 x kt*4 bytes (padding bytes are written as 0)
#pragma once

#include <cuda_fp4.h>
#include <cuda_fp8.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "concepts.hpp"

namespace rocenante::reduce::nvfp4 {

inline constexpr int block_elems = 16;        ///< elements sharing one E4M3 scale
inline constexpr int block_bytes = 8;         ///< packed bytes of one block's codes
inline constexpr float e2m1_max = 6.0f;
inline constexpr float e4m3_max = 448.0f;
inline constexpr std::uint8_t nan_scale = 0x7f;  ///< E4M3 NaN: the scale byte of a block that held a NaN

// --- exact-rounding float ops (no FMA contraction on device) -----------------------------------------------------

ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE float mul_rn(float a, float b) {
#if ROCENANTE_DEVICE_PASS
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE float add_rn(float a, float b) {
#if ROCENANTE_DEVICE_PASS
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE float div_rn(float a, float b) {
#if ROCENANTE_DEVICE_PASS
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE float sqrt_rn(float a) {
#if ROCENANTE_DEVICE_PASS
  return __fsqrt_rn(a);
#else
  return __builtin_sqrtf(a);
#endif
}
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE bool is_nan(float a) { return a != a; }
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE float abs_f(float a) { return a < 0.0f ? -a : (a == 0.0f ? 0.0f : a); }
/// max that propagates NaN from either side (a plain fmaxf drops it).
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE float max_nan(float a, float b) { return (is_nan(a) || a > b) ? a : b; }
/// max that ignores NaN and +-Inf (for tensor/part scales: one Inf must not zero every other block).
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE float max_finite(float a, float b) {
  const float ab = abs_f(b);
  return (ab <= 3.4028234663852886e38f && ab > a) ? ab : a;
}

// --- element and scale conversions (CUDA's own) ------------------------------------------------------------------

namespace detail {
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE std::uint32_t bits_of(float f) {
#if ROCENANTE_DEVICE_PASS
  return __float_as_uint(f);
#else
  std::uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
#endif
}
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE float float_of(std::uint32_t u) {
#if ROCENANTE_DEVICE_PASS
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
#endif
}

/// E2M1 round-to-nearest-even with saturation, by comparing |x| with the midpoints of the grid (a tie goes to the
/// even code: 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2.0, 2.5 -> 2.0, 3.5 -> 4.0, 5.0 -> 4.0); the sign bit is
/// kept, also for results of zero. For every float that is not NaN this equals CUDA's __nv_cvt_float_to_fp4(x,
/// __NV_E2M1, cudaRoundNearest): both are monotone step functions of |x| with the same steps, and
/// tests/host/test_nvfp4_codec.cpp checks every step and its float neighbours. The codec never converts a NaN
/// (a NaN block takes the all-zero path); here a NaN gives code 0 with its sign.
/// Written as a sum of seven comparisons, not a chain of conditionals: on a GPU that is seven predicate-free
/// compares and three adds per element, where a chain compiles to divergent branches (each lane of a warp takes
/// its own path through the grid, and the warp runs them all).
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE std::uint8_t e2m1_by_compare(float x) {
  const float a = x < 0.0f ? -x : x;
  const unsigned c = static_cast<unsigned>(a > 0.25f) + static_cast<unsigned>(a >= 0.75f) +
                     static_cast<unsigned>(a > 1.25f) + static_cast<unsigned>(a >= 1.75f) +
                     static_cast<unsigned>(a > 2.5f) + static_cast<unsigned>(a >= 3.5f) + static_cast<unsigned>(a > 5.0f);
  return static_cast<std::uint8_t>(c | ((bits_of(x) >> 28) & 8u));
}
/// |x| as an E2M1 magnitude code (0..7): exactly e2m1_by_compare(x) & 7 for every x that is not NaN, in about
/// ten instructions on a GPU (seven compares and selects would be ~18). Round to nearest even on the grid
/// {0, .5, 1, 1.5, 2, 3, 4, 6} by one IEEE addition per spacing: adding K = 1.5 x 2^22 (whose ulp is 0.5) rounds
/// |x| < 2 to a multiple of 0.5 in a single rounding, ties to the even multiple, and the distance from K in ulps
/// is then the code itself (0 .. 4); K = 1.5 x 2^23 (ulp 1) does the same for 2 <= |x| < 4 (code = ulps + 2);
/// from 4 on, 4 (code 6) up to 5 inclusive (the tie goes to the even code), 6 (code 7) above, saturating.
/// Both K have an even last mantissa bit, so "ties to even" in the addition is "ties to the even code".
/// tests/host/test_nvfp4_codec.cpp compares it with e2m1_by_compare on every float near each step and a sweep.
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE std::uint32_t e2m1_magnitude(float x) {
#if ROCENANTE_DEVICE_PASS
  const float a = fabsf(x);  // an operand modifier, not an instruction
#else
  const float a = x < 0.0f ? -x : x;
#endif
  constexpr float k1 = 6291456.0f;   // 1.5 x 2^22
  constexpr float k2 = 12582912.0f;  // 1.5 x 2^23
#if ROCENANTE_DEVICE_PASS
  const std::uint32_t c1 = __float_as_uint(__fadd_rn(a, k1)) - 0x4ac00000u;
  const std::uint32_t c2 = __float_as_uint(__fadd_rn(a, k2)) - (0x4b400000u - 2u);
#else
  volatile float s1 = a + k1, s2 = a + k2;  // volatile: no excess precision, no reassociation
  const std::uint32_t c1 = bits_of(s1) - 0x4ac00000u;
  const std::uint32_t c2 = bits_of(s2) - (0x4b400000u - 2u);
#endif
  const std::uint32_t c3 = a > 5.0f ? 7u : 6u;
  return a < 2.0f ? c1 : (a < 4.0f ? c2 : c3);
}

/// The value of an E2M1 code built from its bits (exact; equals CUDA's __nv_cvt_fp4_to_halfraw for all 16 codes,
/// checked exhaustively by the host test).
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE float e2m1_by_bits(std::uint8_t code) {
  const std::uint32_t e = (code >> 1) & 3u, m = code & 1u;
  std::uint32_t bits = e ? (((e + 126u) << 23) | (m << 22)) : (m ? (126u << 23) : 0u);
  bits |= static_cast<std::uint32_t>(code & 8u) << 28;
  return float_of(bits);
}
}  // namespace detail

/// Where the GPU has no conversion instruction (sm_90: the headers emulate it through double arithmetic, tens of
/// instructions per element), device code uses the exact equivalents above; the host and sm_100f/110f/120f family
/// builds use CUDA's conversions. Define ROCENANTE_NVFP4_CUDA_CVT_ONLY to use CUDA's everywhere.
#if ROCENANTE_DEVICE_PASS && !__CUDA_FP8_INTERNAL_CAN_RELY_ON_PTX_FOR_SHORTTYPESCVT__ && !defined(ROCENANTE_NVFP4_CUDA_CVT_ONLY)
#define ROCENANTE_NVFP4_COMPARE_CVT 1
#else
#define ROCENANTE_NVFP4_COMPARE_CVT 0
#endif

/// Two floats to two E2M1 codes (round to nearest even, saturating to +-6; element `lo` in the low nibble).
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE std::uint8_t e2m1x2(float lo, float hi) {
#if ROCENANTE_NVFP4_COMPARE_CVT
  return static_cast<std::uint8_t>(detail::e2m1_by_compare(lo) | (detail::e2m1_by_compare(hi) << 4));
#else
  return static_cast<std::uint8_t>(__nv_cvt_float2_to_fp4x2(make_float2(lo, hi), __NV_E2M1, cudaRoundNearest));
#endif
}
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE std::uint8_t e2m1(float x) {
#if ROCENANTE_NVFP4_COMPARE_CVT
  return detail::e2m1_by_compare(x);
#else
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest) & 0xf);
#endif
}
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE float e2m1_to_float(std::uint8_t code) {
#if ROCENANTE_NVFP4_COMPARE_CVT
  return detail::e2m1_by_bits(code & 0xf);
#else
  const __half_raw h = __nv_cvt_fp4_to_halfraw(static_cast<__nv_fp4_storage_t>(code & 0xf), __NV_E2M1);
  return __half2float(__half(h));
#endif
}
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE std::uint8_t e4m3(float x) {
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE float e4m3_to_float(std::uint8_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
  return __half2float(__half(h));
}

// --- scales ------------------------------------------------------------------------------------------------------

/// Global scale for a tensor whose largest finite magnitude is `amax`: the common recipe 448*6/amax, so that the
/// largest block's scale lands on E4M3's maximum. 1 for an all-zero (or all non-finite) tensor; a result that is
/// not a positive finite float (amax below ~1.7e-35) is clamped to the largest finite float.
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE float global_scale_for(float amax) {
  if (!(amax > 0.0f) || amax > 3.4028234663852886e38f) return 1.0f;
  const float gs = div_rn(e4m3_max * e2m1_max, amax);
  return gs > 3.4028234663852886e38f ? 3.4028234663852886e38f : gs;
}

/// Scale byte of a block whose NaN-propagating max magnitude is `amax`.
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE std::uint8_t block_scale(float amax, float gs) {
  return e4m3(div_rn(mul_rn(gs, amax), e2m1_max));
}

namespace detail {
/// encode_block's body, writing the 8 code bytes as two little-endian 32-bit words (byte j of the codes is
/// bits 8(j%4).. of words[j/4]): no byte array, so a GPU keeps the codes in registers. `Full` = every element
/// valid, so the compiler drops every per-element `valid` test.
template <bool Full>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE std::uint8_t encode(const float (&x)[block_elems], float gs,
                                                              std::uint32_t (&words)[2], int valid) {
  if constexpr (Full) valid = block_elems;
  // NaN-propagating max magnitude as an integer max of the magnitudes' bits: for floats without their sign, the
  // order of the bit patterns is the order of the values, and every NaN pattern lies above +Inf's, so a NaN
  // anywhere in the block makes the result a NaN (block_scale turns any NaN into the NaN scale byte, as max_nan
  // would). Two integer instructions per element instead of four compares and selects.
  std::uint32_t amax_bits = 0;
  ROCENANTE_UNROLL
  for (int i = 0; i < block_elems; ++i) {
    const std::uint32_t m = bits_of(x[i]) & 0x7fffffffu;
    if (i < valid) amax_bits = m > amax_bits ? m : amax_bits;
  }
  const float amax = float_of(amax_bits);
  const std::uint8_t sf = block_scale(amax, gs);
  const float s = e4m3_to_float(sf);
  words[0] = words[1] = 0;
  if (s == 0.0f || is_nan(s)) return sf;
  const float m = div_rn(gs, s);
#if ROCENANTE_NVFP4_COMPARE_CVT
  if constexpr (Full) {
    ROCENANTE_UNROLL
    for (int w = 0; w < 2; ++w) {
      std::uint32_t word = 0;
      ROCENANTE_UNROLL
      for (int i = 0; i < 8; ++i) {
        const float v = mul_rn(x[8 * w + i], m);
        word |= (e2m1_magnitude(v) | ((bits_of(v) >> 28) & 8u)) << (4 * i);
      }
      words[w] = word;
    }
  } else  // the general loop below; `else` so that it is not compiled, unreachable, after the whole-block path
#endif
  {
    ROCENANTE_UNROLL
    for (int j = 0; j < block_bytes; ++j) {
      const float lo = 2 * j < valid ? mul_rn(x[2 * j], m) : 0.0f;
      const float hi = 2 * j + 1 < valid ? mul_rn(x[2 * j + 1], m) : 0.0f;
      std::uint32_t c = e2m1x2(lo, hi);
      if (2 * j >= valid) c &= 0xf0u;  // padding: code 0 (not -0)
      if (2 * j + 1 >= valid) c &= 0x0fu;
      words[j / 4] |= c << (8 * (j % 4));
    }
  }
  return sf;
}

}  // namespace detail

/// Encode one block of `valid` (1..16) values; values past `valid` count as 0 and get code 0. Writes the 8 code
/// bytes as two little-endian words (see detail::encode); returns the scale byte. A whole block takes a path
/// without per-element tests.
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE std::uint8_t encode_block_words(const float (&x)[block_elems], float gs,
                                                                          std::uint32_t (&words)[2],
                                                                          int valid = block_elems) {
  return valid >= block_elems ? detail::encode<true>(x, gs, words, block_elems) : detail::encode<false>(x, gs, words, valid);
}

/// Encode one block of `valid` (1..16) values; values past `valid` count as 0 and get code 0.
/// Writes 8 bytes of codes; returns the scale byte.
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE std::uint8_t encode_block(const float (&x)[block_elems], float gs,
                                                                    std::uint8_t (&codes)[block_bytes],
                                                                    int valid = block_elems) {
  std::uint32_t w[2];
  const std::uint8_t sf = encode_block_words(x, gs, w, valid);
  ROCENANTE_UNROLL
  for (int j = 0; j < block_bytes; ++j) codes[j] = static_cast<std::uint8_t>(w[j / 4] >> (8 * (j % 4)));
  return sf;
}

/// Dequantization factor of a block: float(sf) / gs.
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE float block_factor(std::uint8_t sf, float gs) {
  return div_rn(e4m3_to_float(sf), gs);
}

/// Decode one block: x[i] = e2m1(q[i]) * (float(sf) / gs).
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void decode_block(const std::uint8_t (&codes)[block_bytes], std::uint8_t sf,
                                                            float gs, float (&x)[block_elems]) {
  const float d = block_factor(sf, gs);
  ROCENANTE_UNROLL
  for (int j = 0; j < block_bytes; ++j) {
    x[2 * j] = mul_rn(e2m1_to_float(codes[j] & 0xf), d);
    x[2 * j + 1] = mul_rn(e2m1_to_float(codes[j] >> 4), d);
  }
}

// --- scale-factor layouts ----------------------------------------------------------------------------------------

enum class sf_layout : std::uint8_t { linear = 0, swizzled_128x4 = 1 };

ROCENANTE_HOST_DEVICE constexpr std::uint64_t scale_cols(std::uint64_t cols) { return (cols + block_elems - 1) / block_elems; }

/// Byte offset of the scale of (row m, scale column k) in a tensor of `rows` x `cols` elements.
ROCENANTE_HOST_DEVICE constexpr std::uint64_t sf_offset(sf_layout l, std::uint64_t m, std::uint64_t k, std::uint64_t cols) {
  const std::uint64_t kb = scale_cols(cols);
  if (l == sf_layout::linear) return m * kb + k;
  const std::uint64_t kt = (kb + 3) / 4;
  return (m / 128) * (kt * 512) + (k / 4) * 512 + (m % 32) * 16 + ((m % 128) / 32) * 4 + (k % 4);
}

/// Bytes of the scale-factor array (padding included).
ROCENANTE_HOST_DEVICE constexpr std::uint64_t sf_bytes(sf_layout l, std::uint64_t rows, std::uint64_t cols) {
  const std::uint64_t kb = scale_cols(cols);
  if (l == sf_layout::linear) return rows * kb;
  return (rows + 127) / 128 * 128 * ((kb + 3) / 4 * 4);
}

static_assert(sf_offset(sf_layout::swizzled_128x4, 0, 0, 64) == 0);
static_assert(sf_offset(sf_layout::swizzled_128x4, 1, 0, 64) == 16);
static_assert(sf_offset(sf_layout::swizzled_128x4, 32, 0, 64) == 4);
static_assert(sf_offset(sf_layout::swizzled_128x4, 0, 4, 128) == 512);
static_assert(sf_offset(sf_layout::swizzled_128x4, 128, 0, 128) == 1024);
static_assert(sf_bytes(sf_layout::swizzled_128x4, 1, 16) == 512);

// --- 1-D tensors -------------------------------------------------------------------------------------------------

/// Bytes of packed codes for `count` elements: two per byte, the last byte's high nibble 0 when count is odd.
ROCENANTE_HOST_DEVICE constexpr std::uint64_t data_bytes(std::uint64_t count) { return (count + 1) / 2; }
ROCENANTE_HOST_DEVICE constexpr std::uint64_t blocks(std::uint64_t count) { return (count + block_elems - 1) / block_elems; }

/// An element of a user buffer as float (fp32, fp16 and bf16 inputs; exact).
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE float to_float(float v) { return v; }
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE float to_float(__half v) { return __half2float(v); }
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

/// Quantize block b of x[0..count) into data (packed codes, data_bytes(count)) and scales[b] (linear). One thread.
template <class T>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void quantize_block(const T* x, std::uint64_t count, std::uint64_t b, float gs,
                                                              std::uint8_t* data, std::uint8_t* scales) {
  const std::uint64_t first = b * block_elems;
  const int valid = count - first >= static_cast<std::uint64_t>(block_elems) ? block_elems : static_cast<int>(count - first);
  float v[block_elems];
  ROCENANTE_UNROLL
  for (int i = 0; i < block_elems; ++i) v[i] = i < valid ? to_float(x[first + i]) : 0.0f;
  std::uint8_t c[block_bytes];
  scales[b] = encode_block(v, gs, c, valid);
  const int nbytes = (valid + 1) / 2;
  for (int j = 0; j < nbytes; ++j) data[b * block_bytes + j] = c[j];
}

/// Dequantize block b into out[0..count) as float. One thread.
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void dequantize_block(const std::uint8_t* data, const std::uint8_t* scales,
                                                                std::uint64_t count, std::uint64_t b, float gs, float* out) {
  const std::uint64_t first = b * block_elems;
  const int valid = count - first >= static_cast<std::uint64_t>(block_elems) ? block_elems : static_cast<int>(count - first);
  std::uint8_t c[block_bytes] = {};
  ROCENANTE_UNROLL
  for (int j = 0; j < block_bytes; ++j)
    if (j < (valid + 1) / 2) c[j] = data[b * block_bytes + j];
  float v[block_elems];
  decode_block(c, scales[b], gs, v);
  ROCENANTE_UNROLL  // constant indices keep v in registers on a GPU
  for (int i = 0; i < block_elems; ++i)
    if (i < valid) out[first + i] = v[i];
}

/// Whole-tensor helpers for the host (and single-threaded device use): quantize / dequantize x[0..count).
template <class T>
inline void quantize(const T* x, std::uint64_t count, float gs, std::uint8_t* data, std::uint8_t* scales) {
  for (std::uint64_t b = 0; b < blocks(count); ++b) quantize_block(x, count, b, gs, data, scales);
}
inline void dequantize(const std::uint8_t* data, const std::uint8_t* scales, std::uint64_t count, float gs, float* out) {
  for (std::uint64_t b = 0; b < blocks(count); ++b) dequantize_block(data, scales, count, b, gs, out);
}

/// Largest finite magnitude of x[0..count) (NaN and +-Inf ignored).
template <class T>
inline float amax_finite(const T* x, std::uint64_t count) {
  float a = 0.0f;
  for (std::uint64_t i = 0; i < count; ++i) a = max_finite(a, to_float(x[i]));
  return a;
}

}  // namespace rocenante::reduce::nvfp4

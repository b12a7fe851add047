// algorithm/one_shot_fp4.hpp — NVFP4-aware one-shot collectives, written once for host and device (the team is one
// CPU thread or one CTA, as in one_shot.hpp):
//
//   one_shot_fp4::all_reduce<nvfp4_sum<T>>   NVFP4 on the wire: each rank encodes its contribution once, every
//                                            rank decodes all n contributions (its own included) and sums them in
//                                            fp32 in rank order 0..n-1, rounding once to T: identical bytes on every
//                                            rank, ~3.5x (bf16) / ~7x (fp32) fewer bytes than one_shot.
//   one_shot_fp4::all_reduce_quantize<T>     plain T on the wire, rows owned by parts; epilogue per row:
//                                            fp32 sum -> (+ residual) -> (RMSNorm) -> NVFP4 with the caller's
//                                            global scale, scales in linear or 128x4-swizzled layout; optionally the
//                                            residual output in T.
//   one_shot_fp4::all_gather_nvfp4           NVFP4 tensors (rows x cols per rank) gathered into one
//                                            (n*rows x cols) tensor, rows in rank order, scales re-laid out for the
//                                            gathered shape.
//
// Schedule, 4 ranks, one part (compressed all-reduce; E = encode, D = decode; A = part's amax pass):
//
//   rank 0:  A, E(X0) -> own + 1,2,3 | F -> 1,2,3 | wait 1,2,3 | out = D(E0)+D(E1)+D(E2)+D(E3)
//   rank 1:  A, E(X1) -> own + 0,2,3 | F -> 0,2,3 | wait 0,2,3 | out = D(E0)+D(E1)+D(E2)+D(E3)
//   ...      (rank order, fp32, one rounding to T; the own contribution is decoded from its own encoding)
//
// Wire region of part p (blocks [b0, b1) of 16 elements, nb = b1 - b0) inside source region `rank` of a slot:
//   offset(p) = align16(9*b0) + 64*p:  [16 B header: fp32 part scale, nb, part, magic][8*nb codes, pad 16]
//   [nb E4M3 scales, pad 16];  region_bytes(nb) = 16 + align16(8 nb) + align16(nb). The offsets never overlap
//   (offset(p+1) - offset(p) >= 9 nb + 49 > region_bytes(nb)), every region starts 16-byte aligned.
//
// Global scale (docs/nvfp4.md): the compressed wire needs no agreement round. Each part computes the largest
// finite magnitude of its own input range (a team max), derives gs = 448*6/amax and sends it in the region
// header; decoders use the sender's gs. The quantized-output epilogue and the all-gather produce a GEMM operand,
// which needs one tensor scale: there the caller passes it and must pass the same value on every rank.
//
// Cost for S bytes of T per rank (compressed): one step; each rank sends (n-1) * payload_bytes(count, parts)
// = (n-1) * (S * 4.5 / (8 sizeof T) + <= 46 + 64 per part); reads its input twice (amax, encode), decodes n
// regions. Epilogue: as one_shot, plus a second read of the n sources per row when RMSNorm is on.
//
// Assumptions: a device team is a whole number of warps (block_team of 512 threads); row-wise operations need
// cols % 16 == 0 (every GEMM operand satisfies it); the host executor and gpu executor pick parts with
// parts_for / row_parts_for, which depend only on counts and agreed options.
// Pitfalls: NVFP4 is lossy (docs/nvfp4.md gives the error); ring must not forward it (static_assert in
// ring.hpp); the wire payload of tiny counts with many parts can exceed the window: executors refuse it with
// fits_window (rank-invariant).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../reduce/nvfp4.hpp"
#include "../reduce/nvfp4_sum.hpp"
#include "../reduce/packet.hpp"
#include "concepts.hpp"
#include "one_shot.hpp"
#include "partition.hpp"
#include "poison.hpp"

namespace rocenante::algorithm {

/// Algorithm ids that travel in the flag signature (3-bit field, 1-2 named in algo): a rank running one of these
/// and a rank running one_shot/ring at the same sequence fail with a mismatch instead of mixing bytes.
inline constexpr algo one_shot_fp4_id = static_cast<algo>(3);       ///< compressed all-reduce, NVFP4 all-gather
inline constexpr algo one_shot_rows_id = static_cast<algo>(4);      ///< row-partitioned quantizing all-reduce

/// The quantized-output epilogue (all_reduce_quantize). Trivially copyable: kernels take it by value.
/// out = NVFP4( rmsnorm?( sum_q in_q + residual? ) ), rows x cols, cols % 16 == 0.
template <class T>
struct nvfp4_epilogue {
  std::uint64_t rows = 0, cols = 0;
  const T* residual = nullptr;      ///< optional: added to the fp32 sum
  T* residual_out = nullptr;        ///< optional: receives T(sum + residual), the next layer's residual
  bool rms_norm = false;            ///< y = h / sqrt(mean(h^2) + epsilon) * weight
  const T* weight = nullptr;        ///< RMSNorm weight (cols); nullptr = 1
  float epsilon = 1e-6f;
  float global_scale = 1.0f;        ///< caller-given; the same on every rank
  std::uint8_t* out_data = nullptr;    ///< rows * cols / 2 bytes, row-major, element 0 in the low nibble
  std::uint8_t* out_scales = nullptr;  ///< nvfp4::sf_bytes(layout, rows, cols) bytes (padding written as 0)
  reduce::nvfp4::sf_layout layout = reduce::nvfp4::sf_layout::swizzled_128x4;
  /// Optional: T(rmsnorm?(sum + residual?)), rows x cols, the normalised activations in the input type (the
  /// fused all-reduce + residual + RMSNorm of a decode layer whose next GEMM takes bf16/fp16). With out_data ==
  /// nullptr the epilogue ends there: no NVFP4 output, out_scales unused.
  T* norm_out = nullptr;
};

/// An NVFP4 tensor of rows x cols (cols % 16 == 0): packed codes row-major and E4M3 scales in `layout`.
struct nvfp4_gather {
  const std::uint8_t* data = nullptr;
  const std::uint8_t* scales = nullptr;
  reduce::nvfp4::sf_layout in_layout = reduce::nvfp4::sf_layout::linear;
  std::uint64_t rows = 0, cols = 0;          ///< this rank's shape (the same on every rank)
  std::uint8_t* out_data = nullptr;          ///< n*rows*cols/2 bytes: rank q's rows at q*rows
  std::uint8_t* out_scales = nullptr;        ///< sf_bytes(out_layout, n*rows, cols)
  reduce::nvfp4::sf_layout out_layout = reduce::nvfp4::sf_layout::swizzled_128x4;
};

/// Every output of a quantizing all-reduce, to be filled with the poison value (T outputs: NaN; NVFP4: codes 0 and
/// every scale byte, padding included, the E4M3 NaN 0x7f, so that every element decodes to NaN).
template <class T>
ROCENANTE_HOST_DEVICE poison_list poison_of(const nvfp4_epilogue<T>& e) {
  poison_list l{};
  const std::uint64_t count = e.rows * e.cols;
  if (e.residual_out != nullptr) l.span[0] = poison_of(e.residual_out, count);
  if (e.norm_out != nullptr) l.span[1] = poison_of(e.norm_out, count);
  if (e.out_data != nullptr) l.span[2] = {e.out_data, count / 2, 0u, 1u};
  if (e.out_data != nullptr && e.out_scales != nullptr)
    l.span[3] = {e.out_scales, reduce::nvfp4::sf_bytes(e.layout, e.rows, e.cols), poison_scale, 1u};
  return l;
}

/// Every output of an NVFP4 all-gather over `ranks` ranks, to be filled with the poison value (as above).
ROCENANTE_HOST_DEVICE inline poison_list poison_of(const nvfp4_gather& g, int ranks) {
  poison_list l{};
  const std::uint64_t rows = g.rows * static_cast<std::uint64_t>(ranks);
  if (g.out_data != nullptr) l.span[0] = {g.out_data, rows * g.cols / 2, 0u, 1u};
  if (g.out_scales != nullptr) l.span[1] = {g.out_scales, reduce::nvfp4::sf_bytes(g.out_layout, rows, g.cols), poison_scale, 1u};
  return l;
}

namespace fp4_detail {

namespace nv = reduce::nvfp4;
inline constexpr std::uint32_t region_magic = 0x34504e76u;  // "vNP4"

ROCENANTE_HOST_DEVICE constexpr std::uint64_t a16(std::uint64_t v) { return (v + 15) / 16 * 16; }

/// Load block b (16 elements) of x[0..count) as float; returns the number of valid elements (rest are 0).
template <class T>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE int load_block(const T* x, std::uint64_t count, std::uint64_t b,
                                                         float (&v)[nv::block_elems]) {
  const std::uint64_t first = b * nv::block_elems;
  const int valid = count - first >= 16u ? 16 : static_cast<int>(count - first);
#if ROCENANTE_DEVICE_PASS
  if (valid == 16 && reduce::detail::aligned16(x + first)) {
    constexpr int per = 16 / sizeof(T);
    ROCENANTE_UNROLL
    for (int w = 0; w < 16 / per; ++w) {
      uint4 u = reinterpret_cast<const uint4*>(x + first)[w];
      const T* e = reinterpret_cast<const T*>(&u);
      ROCENANTE_UNROLL
      for (int i = 0; i < per; ++i) v[w * per + i] = nv::to_float(e[i]);
    }
    return 16;
  }
#endif
  ROCENANTE_UNROLL
  for (int i = 0; i < 16; ++i) v[i] = i < valid ? nv::to_float(x[first + i]) : 0.0f;
  return valid;
}

/// Store the valid elements of a block of fp32 values, rounded once to T (round to nearest even).
template <class T>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void store_block(T* x, std::uint64_t count, std::uint64_t b,
                                                           const float (&v)[nv::block_elems]) {
  using R = reduce::sum<T>;
  const std::uint64_t first = b * nv::block_elems;
  const int valid = count - first >= 16u ? 16 : static_cast<int>(count - first);
#if ROCENANTE_DEVICE_PASS
  if (valid == 16 && reduce::detail::aligned16(x + first)) {
    constexpr int per = 16 / sizeof(T);
    ROCENANTE_UNROLL
    for (int w = 0; w < 16 / per; ++w) {
      uint4 u;
      T* e = reinterpret_cast<T*>(&u);
      ROCENANTE_UNROLL
      for (int i = 0; i < per; ++i) e[i] = R::from_accum(v[w * per + i]);
      reinterpret_cast<uint4*>(x + first)[w] = u;
    }
    return;
  }
#endif
  ROCENANTE_UNROLL  // a constant index keeps v in registers (a loop to `valid` would index it at run time)
  for (int i = 0; i < 16; ++i)
    if (i < valid) x[first + i] = R::from_accum(v[i]);
}

ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void load8(const std::byte* p, std::uint8_t (&c)[8]) {
#if ROCENANTE_DEVICE_PASS
  *reinterpret_cast<uint2*>(c) = *reinterpret_cast<const uint2*>(p);
#else
  std::memcpy(c, p, 8);
#endif
}
/// 8 bytes to any address (user output buffers need not be 8-byte aligned; slot memory always is).
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void store8(void* p, const std::uint8_t (&c)[8]) {
#if ROCENANTE_DEVICE_PASS
  if ((reinterpret_cast<std::uintptr_t>(p) & 7u) == 0) {
    *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(c);
  } else {
    for (int i = 0; i < 8; ++i) static_cast<std::uint8_t*>(p)[i] = c[i];
  }
#else
  std::memcpy(p, c, 8);
#endif
}

/// The 8 code bytes of a block, given as two little-endian words (reduce::nvfp4::encode_block_words), to p.
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void store_words(void* p, const std::uint32_t (&w)[2]) {
#if ROCENANTE_DEVICE_PASS
  if ((reinterpret_cast<std::uintptr_t>(p) & 7u) == 0) {
    *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
    return;
  }
#endif
  for (int j = 0; j < 8; ++j) static_cast<std::uint8_t*>(p)[j] = static_cast<std::uint8_t>(w[j / 4] >> (8 * (j % 4)));
}

ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void copy_bytes(void* d, const void* s, int bytes) {
  for (int i = 0; i < bytes; ++i) static_cast<unsigned char*>(d)[i] = static_cast<const unsigned char*>(s)[i];
}
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE std::uint32_t float_bits(float f) {
  std::uint32_t u;
  copy_bytes(&u, &f, 4);
  return u;
}

/// Team-wide max of non-negative finite values; every thread gets it. Device: the team is whole warps and
/// `scratch` holds one float per warp (shared memory). Host team: one thread, scratch unused.
template <class Team>
ROCENANTE_HOST_DEVICE float team_max(Team& team, float v, float* scratch) {
#if ROCENANTE_DEVICE_PASS
  ROCENANTE_UNROLL
  for (int o = 16; o; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  const int warps = (team.size() + 31) / 32;
  if ((team.thread() & 31) == 0) scratch[team.thread() >> 5] = v;
  team.sync();
  float r = 0.0f;
  for (int w = 0; w < warps; ++w) r = scratch[w] > r ? scratch[w] : r;
  team.sync();
  return r;
#else
  (void)team;
  (void)scratch;
  return v;
#endif
}

/// 1/sqrt(mean + eps) from a row's sum of squares, each step IEEE-rounded.
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE float rms_inverse(float sumsq, std::uint64_t cols, float eps) {
  return nv::div_rn(1.0f, nv::sqrt_rn(nv::add_rn(nv::div_rn(sumsq, static_cast<float>(cols)), eps)));
}

/// Row-wise epilogue over rows [m0, m1) for a source `src(m, k, h)` that fills h with the fp32 values (sum and
/// residual included) of block k of row m. Canonical order of the RMSNorm sum of squares (host = device bits):
/// virtual lane l (0..31) sums h^2 over blocks k = l, l+32, ... in element order; the 32 partials are combined by
/// the xor butterfly (offsets 16, 8, 4, 2, 1: p[l] = p[l] + p[l^o]). On a device team a warp owns a row.
/// `MayNorm` = false builds only the path without RMSNorm (a kernel with fewer registers, so more threads per SM);
/// the caller must then pass an epilogue with rms_norm == false.
/// `InFlight`: blocks each thread loads before it encodes any of them on the path without RMSNorm (the loads of
/// a group are issued back to back; more bytes in flight per thread, more registers).
template <class T, class Team, class Source, bool MayNorm = true, int InFlight = 2>
ROCENANTE_HOST_DEVICE void quantize_rows(Team& team, const nvfp4_epilogue<T>& e, Source& src, std::uint64_t m0,
                                         std::uint64_t m1, bool pad_rows, std::bool_constant<MayNorm> = {},
                                         std::integral_constant<int, InFlight> = {}) {
  const std::uint64_t kb = nv::scale_cols(e.cols);
  const bool swz = e.layout == nv::sf_layout::swizzled_128x4;
  const std::uint64_t kpad = swz ? (kb + 3) / 4 * 4 : kb;
  // lane's share of one row: blocks k = lane, lane+32, ...; pass 1 = sum of squares (and residual out)
  auto sumsq = [&](std::uint64_t m, int lane) {
    float ss = 0.0f;
    for (std::uint64_t k = lane; k < kb; k += 32) {
      float h[16];
#if !ROCENANTE_DEVICE_PASS
      for (float& x : h) x = 0.0f;  // src() fills it; GCC's host pass does not see that (a false -Wuninitialized)
#endif
      src(m, k, h);
      if (e.residual_out) store_block<T>(e.residual_out + m * e.cols, e.cols, k, h);
      ROCENANTE_UNROLL
      for (int i = 0; i < 16; ++i) ss = nv::add_rn(ss, nv::mul_rn(h[i], h[i]));
    }
    return ss;
  };
  // pass 2 for block k of row m, whose values are in h: RMSNorm, outputs, codes and scale
  auto finish_block = [&](std::uint64_t m, std::uint64_t k, float rinv, float (&h)[16]) {
    if (!e.rms_norm && e.residual_out) store_block<T>(e.residual_out + m * e.cols, e.cols, k, h);
    if (e.rms_norm) {
      ROCENANTE_UNROLL
      for (int i = 0; i < 16; ++i) {
        const float w = e.weight ? nv::to_float(e.weight[k * 16 + i]) : 1.0f;
        h[i] = nv::mul_rn(nv::mul_rn(h[i], rinv), w);
      }
    }
    if (e.norm_out) store_block<T>(e.norm_out + m * e.cols, e.cols, k, h);
    if (e.out_data == nullptr) return;
    std::uint32_t w[2];
    const std::uint8_t sf = nv::encode_block_words(h, e.global_scale, w);
    store_words(e.out_data + (m * e.cols) / 2 + k * 8, w);
    e.out_scales[nv::sf_offset(e.layout, m, k, e.cols)] = sf;
  };
  auto quant = [&](std::uint64_t m, int lane, float rinv) {
#if ROCENANTE_DEVICE_PASS
    // Two blocks per lane per iteration, both loaded before either is encoded: the compiler cannot move the
    // second load above the first block's stores (they might alias), and one block's loads alone leave the
    // memory system idle while the lane computes.
    std::uint64_t k = lane;
    for (; k + 32 < kb; k += 64) {
      float h0[16], h1[16];
      src(m, k, h0);
      src(m, k + 32, h1);
      finish_block(m, k, rinv, h0);
      finish_block(m, k + 32, rinv, h1);
    }
    if (k < kb) {
      float h[16];
      src(m, k, h);
      finish_block(m, k, rinv, h);
    }
#else
    for (std::uint64_t k = lane; k < kb; k += 32) {
      float h[16];
#if !ROCENANTE_DEVICE_PASS
      for (float& x : h) x = 0.0f;  // src() fills it; GCC's host pass does not see that (a false -Wuninitialized)
#endif
      src(m, k, h);
      finish_block(m, k, rinv, h);
    }
#endif
    if (e.out_data != nullptr)
      for (std::uint64_t k = kb + lane; k < kpad; k += 32) e.out_scales[nv::sf_offset(e.layout, m, k, e.cols)] = 0;
  };
#if ROCENANTE_DEVICE_PASS
  if (!MayNorm || !e.rms_norm) {
    // No row-wide statistic: every block of the part's rows is independent, so the team walks them flat (one
    // block per thread, two in flight), as the 1-D codec kernel does, instead of a warp per row.
    const std::uint64_t nblk = (m1 - m0) * kb, step = static_cast<std::uint64_t>(team.size());
    std::uint64_t i = static_cast<std::uint64_t>(team.thread());
    std::uint64_t m = m0 + i / kb, k = i % kb;                  // block i is (row m, column k)
    const std::uint64_t dm = step / kb, dk = step % kb;         // one step of the walk
    auto advance = [&](std::uint64_t& mm, std::uint64_t& kk) {
      mm += dm;
      kk += dk;
      if (kk >= kb) kk -= kb, ++mm;
    };
    // InFlight blocks per thread per group: all loaded before any is encoded (the compiler cannot move a later
    // load above an earlier block's stores, which might alias).
    for (; InFlight > 1 && i + (InFlight - 1) * step < nblk; i += InFlight * step) {
      std::uint64_t mm[InFlight], kk[InFlight];
      mm[0] = m, kk[0] = k;
      ROCENANTE_UNROLL
      for (int j = 1; j < InFlight; ++j) {
        mm[j] = mm[j - 1], kk[j] = kk[j - 1];
        advance(mm[j], kk[j]);
      }
      float h[InFlight][16];
      ROCENANTE_UNROLL
      for (int j = 0; j < InFlight; ++j) src(mm[j], kk[j], h[j]);
      ROCENANTE_UNROLL
      for (int j = 0; j < InFlight; ++j) finish_block(mm[j], kk[j], 1.0f, h[j]);
      m = mm[InFlight - 1], k = kk[InFlight - 1];
      advance(m, k);
    }
    for (; i < nblk; i += step) {
      float h[16];
      src(m, k, h);
      finish_block(m, k, 1.0f, h);
      advance(m, k);
    }
    if (e.out_data != nullptr && kpad > kb)  // scale columns kb..kpad of the swizzled layout are padding: 0
      for (std::uint64_t j = team.thread(); j < (m1 - m0) * (kpad - kb); j += step)
        e.out_scales[nv::sf_offset(e.layout, m0 + j / (kpad - kb), kb + j % (kpad - kb), e.cols)] = 0;
  } else if constexpr (MayNorm) {
  const int lane = team.thread() & 31, warps = team.size() >> 5;
  for (std::uint64_t m = m0 + (team.thread() >> 5); m < m1; m += warps) {
    float rinv = 1.0f;
    if (e.rms_norm) {
      float ss = sumsq(m, lane);
      ROCENANTE_UNROLL
      for (int o = 16; o; o >>= 1) ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, o));
      rinv = rms_inverse(ss, e.cols, e.epsilon);
    }
    quant(m, lane, rinv);
  }
  }
#else
  for (std::uint64_t m = m0 + team.thread(); m < m1; m += team.size()) {
    float rinv = 1.0f;
    if (e.rms_norm) {
      float p[32], q[32];
      for (int l = 0; l < 32; ++l) p[l] = sumsq(m, l);
      for (int o = 16; o; o >>= 1) {
        for (int l = 0; l < 32; ++l) q[l] = nv::add_rn(p[l], p[l ^ o]);
        for (int l = 0; l < 32; ++l) p[l] = q[l];
      }
      rinv = rms_inverse(p[0], e.cols, e.epsilon);
    }
    for (int l = 0; l < 32; ++l) quant(m, l, rinv);
  }
#endif
  if (pad_rows && swz && e.out_data != nullptr) {  // rows rows..align128(rows) of the swizzled array belong to no part: the last part zeroes them
    const std::uint64_t prow = (e.rows + 127) / 128 * 128;
    for (std::uint64_t i = team.thread(); i < (prow - e.rows) * kpad; i += team.size())
      e.out_scales[nv::sf_offset(e.layout, e.rows + i / kpad, i % kpad, e.cols)] = 0;
  }
}

}  // namespace fp4_detail

struct one_shot_fp4 {
  static constexpr const char* name = "one_shot_fp4";
  static constexpr algo id = one_shot_fp4_id;
  static constexpr bool supports_all_gather = false;  // all_gather_nvfp4 is its own entry point
  template <class R>
  static constexpr bool supports = R::block_scaled;

  ROCENANTE_HOST_DEVICE static constexpr std::uint32_t channels(int n) { return one_shot::channels(n); }
  ROCENANTE_HOST_DEVICE static constexpr std::uint64_t slot_bytes(int n, std::uint64_t capacity) {
    return one_shot::slot_bytes(n, capacity);
  }
  ROCENANTE_HOST_DEVICE static constexpr std::uint32_t steps(int n) { return one_shot::steps(n); }
  /// Bytes one rank sends for `bytes` bytes of bf16 input in one part (payload_bytes gives the exact figure for
  /// any element type and part count).
  ROCENANTE_HOST_DEVICE static constexpr std::uint64_t wire_bytes(int n, std::uint64_t bytes) {
    return static_cast<std::uint64_t>(n > 1 ? n - 1 : 0) * payload_bytes(bytes / 2, 1);
  }

  // --- wire regions -----------------------------------------------------------------------------------------

  ROCENANTE_HOST_DEVICE static constexpr std::uint64_t region_offset(std::uint64_t b0, std::uint32_t part) {
    return fp4_detail::a16(9 * b0) + 64ull * part;
  }
  ROCENANTE_HOST_DEVICE static constexpr std::uint64_t region_bytes(std::uint64_t nb) {
    return 16 + fp4_detail::a16(8 * nb) + fp4_detail::a16(nb);
  }
  /// Exact bytes one rank sends to each peer for `count` elements in `parts` parts.
  ROCENANTE_HOST_DEVICE static constexpr std::uint64_t payload_bytes(std::uint64_t count, std::uint32_t parts) {
    std::uint64_t total = 0;
    for (std::uint32_t p = 0; p < parts; ++p) total += region_bytes(split(reduce::nvfp4::blocks(count), parts, p).size());
    return total;
  }
  /// Parts of a compressed all-reduce: blocks of 16 elements, at least min_part_bytes of input per part.
  ROCENANTE_HOST_DEVICE static constexpr std::uint32_t parts_for(std::uint64_t count, std::uint64_t elem_bytes,
                                                               std::uint64_t min_part_bytes, std::uint32_t max_parts) {
    return part_count(reduce::nvfp4::blocks(count), protocol::ceil_div(min_part_bytes, 16 * elem_bytes), max_parts);
  }
  /// Whether the regions of every part fit one source region of the window (rank-invariant).
  ROCENANTE_HOST_DEVICE static constexpr bool fits_window(std::uint64_t count, std::uint32_t parts, std::uint64_t source_stride) {
    const range last = split(reduce::nvfp4::blocks(count), parts, parts - 1);
    return region_offset(last.begin, parts - 1) + region_bytes(last.size()) <= source_stride;
  }
  /// Parts of a row-partitioned collective (epilogue, all-gather): rows, at least min_part_bytes per part.
  ROCENANTE_HOST_DEVICE static constexpr std::uint32_t row_parts_for(std::uint64_t rows, std::uint64_t row_bytes,
                                                                   std::uint64_t min_part_bytes, std::uint32_t max_parts) {
    return part_count(rows, protocol::ceil_div(min_part_bytes, row_bytes ? row_bytes : 1), max_parts);
  }
  /// Gather regions: part p of rows [m0, m1) at align16(9*kb*m0) + 48*p: [codes 8*kb per row, pad][scales kb per row, pad].
  ROCENANTE_HOST_DEVICE static constexpr std::uint64_t gather_offset(std::uint64_t kb, std::uint64_t m0, std::uint32_t part) {
    return fp4_detail::a16(9 * kb * m0) + 48ull * part;
  }
  ROCENANTE_HOST_DEVICE static constexpr std::uint64_t gather_bytes(std::uint64_t kb, std::uint64_t nrows) {
    return fp4_detail::a16(8 * kb * nrows) + fp4_detail::a16(kb * nrows);
  }
  ROCENANTE_HOST_DEVICE static constexpr bool gather_fits(std::uint64_t rows, std::uint64_t cols, std::uint32_t parts,
                                                        std::uint64_t source_stride) {
    const std::uint64_t kb = reduce::nvfp4::scale_cols(cols);
    const range last = split(rows, parts, parts - 1);
    return gather_offset(kb, last.begin, parts - 1) + gather_bytes(kb, last.size()) <= source_stride;
  }

  /// Compressed all-reduce, part s.part() of `parts`. Every team thread of every rank calls, for every part.
  /// Result: out[i] = T( sum over q = 0..n-1, in that order, in fp32, of decode(encode_q(in_q))[i] ), valid for this
  /// part's elements when the call returns true; identical bytes on every rank. `scratch`: device, one float per
  /// warp of shared memory; host, unused (nullptr).
  template <reduce::reduction R, class Session>
  ROCENANTE_HOST_DEVICE static bool all_reduce(Session& s, const typename R::value_type* in,
                                               typename R::value_type* out, std::uint64_t count,
                                               std::uint32_t parts, float* scratch) {
    static_assert(R::block_scaled, "one_shot_fp4 moves block-scaled payloads: use reduce::nvfp4_sum<T>");
    namespace nv = reduce::nvfp4;
    using handle_t = typename Session::handle_type;
    if (!s.enter()) return false;
    auto& team = s.team();
    auto& h = s.handle();
    const int n = h.ranks(), r = h.rank();
    const std::uint64_t stride = h.layout().source_stride;
    const range pb = split(nv::blocks(count), parts, s.part());
    const std::uint64_t nb = pb.size();
    const std::uint64_t off = region_offset(pb.begin, s.part());
    const std::uint64_t codes = off + 16, scales = codes + fp4_detail::a16(8 * nb);
    const std::uint64_t t = static_cast<std::uint64_t>(team.thread()), step = static_cast<std::uint64_t>(team.size());

    // 1. the part's scale: largest finite magnitude of this rank's input in the part
    float amax = 0.0f;
    for (std::uint64_t b = pb.begin + t; b < pb.end; b += step) {
      float v[16];
      const int valid = fp4_detail::load_block(in, count, b, v);
      for (int i = 0; i < valid; ++i) amax = nv::max_finite(amax, v[i]);
    }
    const float gs = nv::global_scale_for(fp4_detail::team_max(team, amax, scratch));

    // 2. encode once; the own copy goes to put_ptr(r, ...) (own window in direct mode, the staging area otherwise)
    auto write = [&](std::uint64_t o, const void* src, int bytes) {
      for (int q = 0; q < n; ++q) {
        if (handle_t::shared_staging && q != r) continue;
        std::byte* d = h.put_ptr(q, s.slot(), r * stride + o);
        if (bytes == 8) fp4_detail::store8(d, *static_cast<const std::uint8_t(*)[8]>(src));
        else if (bytes == 1) *reinterpret_cast<std::uint8_t*>(d) = *static_cast<const std::uint8_t*>(src);
        else fp4_detail::copy_bytes(d, src, bytes);
      }
    };
    for (std::uint64_t b = pb.begin + t; b < pb.end; b += step) {
      float v[16];
      const int valid = fp4_detail::load_block(in, count, b, v);
      alignas(8) std::uint8_t c[8];
      const std::uint8_t sf = nv::encode_block(v, gs, c, valid);
      write(codes + (b - pb.begin) * 8, c, 8);
      write(scales + (b - pb.begin), &sf, 1);
    }
    if (t == 0) {
      const std::uint32_t hdr[4] = {fp4_detail::float_bits(gs), static_cast<std::uint32_t>(nb), s.part(),
                                    fp4_detail::region_magic};
      write(off, hdr, 16);
    }
    team.sync();
    const int first = handle_t::shared_staging ? (team.thread() == 0 ? 0 : n) : team.thread();
    const int every = handle_t::shared_staging ? 1 : team.size();
    for (int q = first; q < n; q += every)
      if (q != r) (void)s.signal(q, static_cast<std::uint32_t>(r), r * stride + off, region_bytes(nb));
    if (!s.wait_peers(n, r, [](int q) { return static_cast<std::uint32_t>(q); })) return false;

    // 3. decode every contribution (own included) and sum in rank order
    for (std::uint64_t b = pb.begin + t; b < pb.end; b += step) {
      float acc[16];
#if !ROCENANTE_DEVICE_PASS
      for (float& x : acc) x = 0.0f;  // set by q == 0 (n >= 1); GCC's host pass does not see that (-Wmaybe-uninitialized)
#endif
      for (int q = 0; q < n; ++q) {
        const std::byte* base = q == r ? h.put_ptr(r, s.slot(), r * stride) : h.recv_ptr(s.slot(), q * stride);
        const float gq = *reinterpret_cast<const float*>(base + off);
        alignas(8) std::uint8_t c[8];
        fp4_detail::load8(base + codes + (b - pb.begin) * 8, c);
        const std::uint8_t sf = *reinterpret_cast<const std::uint8_t*>(base + scales + (b - pb.begin));
        float v[16];
        nv::decode_block(c, sf, gq, v);
        ROCENANTE_UNROLL
        for (int i = 0; i < 16; ++i) acc[i] = q == 0 ? v[i] : nv::add_rn(acc[i], v[i]);
      }
      fp4_detail::store_block(out, count, b, acc);
    }
    s.finish(parts);
    return true;
  }

  /// Quantizing all-reduce over rows (part s.part() of `parts` owns rows split(rows, parts, part)). Every team
  /// thread of every rank calls. Result (valid for this part's rows when true is returned, identical on every
  /// rank): e.out_data/out_scales = NVFP4 of rmsnorm?(sum_q in_q + residual?) with e.global_scale, summed in fp32
  /// in rank order; e.residual_out = T(sum + residual) when given. The last part also zeroes the swizzled
  /// array's padding rows; every part zeroes the padding columns of its rows.
  template <class T, class Session>
  ROCENANTE_HOST_DEVICE static bool all_reduce_quantize(Session& s, const T* in, const nvfp4_epilogue<T>& e,
                                                        std::uint32_t parts) {
    using R = reduce::sum<T>;
    using handle_t = typename Session::handle_type;
    namespace nv = reduce::nvfp4;
    if (!s.enter()) return false;
    auto& team = s.team();
    auto& h = s.handle();
    const int n = h.ranks(), r = h.rank();
    const std::uint64_t stride = h.layout().source_stride;
    const range rows = split(e.rows, parts, s.part());
    const std::uint64_t count = e.rows * e.cols;
    constexpr std::uint64_t lanes = reduce::lanes<R>;
    const range pk{rows.begin * e.cols / lanes, rows.end * e.cols / lanes};  // cols % 16 == 0: whole packets
    const std::uint64_t base = r * stride;
    const std::uint64_t step = static_cast<std::uint64_t>(team.size());
    for (std::uint64_t i = pk.begin + team.thread(); i < pk.end; i += step) {
      const reduce::value_packet<R> v = reduce::load_user<R>(in, i, count);
      if constexpr (handle_t::shared_staging) {
        if (n > 1) reduce::store_packet<R>(h.put_ptr(r, s.slot(), base + i * packet_bytes), v);
      } else {
        for (int q = 0; q < n; ++q)
          if (q != r) reduce::store_packet<R>(h.put_ptr(q, s.slot(), base + i * packet_bytes), v);
      }
    }
    team.sync();
    const int first = handle_t::shared_staging ? (team.thread() == 0 ? 0 : n) : team.thread();
    const int every = handle_t::shared_staging ? 1 : team.size();
    for (int q = first; q < n; q += every)
      if (q != r) (void)s.signal(q, static_cast<std::uint32_t>(r), base + pk.begin * packet_bytes, pk.size() * packet_bytes);
    if (!s.wait_peers(n, r, [](int q) { return static_cast<std::uint32_t>(q); })) return false;

    auto src = [&](std::uint64_t m, std::uint64_t k, float (&hv)[16]) {
      const std::uint64_t b = (m * e.cols) / 16 + k;  // block index in the flattened tensor
      if (n < 1) __builtin_unreachable();  // a world has a rank: q == 0 below writes every hv[i] first
      for (int q = 0; q < n; ++q) {
        float v[16];
        if (q == r) {
          fp4_detail::load_block(in, count, b, v);
        } else {
          const T* p = reinterpret_cast<const T*>(h.recv_ptr(s.slot(), q * stride + b * 16 * sizeof(T)));
          fp4_detail::load_block(p, 16, 0, v);
        }
        ROCENANTE_UNROLL
        for (int i = 0; i < 16; ++i) hv[i] = q == 0 ? v[i] : nv::add_rn(hv[i], v[i]);
      }
      if (e.residual) {
        float v[16];
        fp4_detail::load_block(e.residual, count, b, v);
        ROCENANTE_UNROLL
        for (int i = 0; i < 16; ++i) hv[i] = nv::add_rn(hv[i], v[i]);
      }
    };
    fp4_detail::quantize_rows(team, e, src, rows.begin, rows.end, s.part() == parts - 1);
    s.finish(parts);
    return true;
  }

  /// NVFP4 all-gather, part s.part() of `parts` (rows split(g.rows, parts, part) of every rank). Every team thread
  /// of every rank calls. Result: g.out_data rows [q*rows, (q+1)*rows) = rank q's rows; g.out_scales holds every
  /// scale at its place in out_layout for the gathered shape (n*rows x cols), padding zeroed; identical on every
  /// rank. The global scale is not moved: every rank must have quantized with the same one.
  template <class Session>
  ROCENANTE_HOST_DEVICE static bool all_gather_nvfp4(Session& s, const nvfp4_gather& g, std::uint32_t parts) {
    namespace nv = reduce::nvfp4;
    using handle_t = typename Session::handle_type;
    if (!s.enter()) return false;
    auto& team = s.team();
    auto& h = s.handle();
    const int n = h.ranks(), r = h.rank();
    const std::uint64_t stride = h.layout().source_stride;
    const std::uint64_t kb = nv::scale_cols(g.cols), rb = 8 * kb;  // bytes of codes per row
    const range rows = split(g.rows, parts, s.part());
    const std::uint64_t nr = rows.size();
    const std::uint64_t off = gather_offset(kb, rows.begin, s.part());
    const std::uint64_t sc = off + fp4_detail::a16(rb * nr);
    const std::uint64_t t = static_cast<std::uint64_t>(team.thread()), step = static_cast<std::uint64_t>(team.size());
    auto put = [&](std::uint64_t o, std::uint8_t v) {
      for (int q = 0; q < n; ++q) {
        if (handle_t::shared_staging ? q != r : q == r) continue;
        reinterpret_cast<std::uint8_t*>(h.put_ptr(q, s.slot(), r * stride + o))[0] = v;
      }
    };
    if (n > 1) {
      for (std::uint64_t i = t; i < rb * nr; i += step) put(off + i, g.data[rows.begin * rb + i]);
      for (std::uint64_t i = t; i < kb * nr; i += step)
        put(sc + i, g.scales[nv::sf_offset(g.in_layout, rows.begin + i / kb, i % kb, g.cols)]);
    }
    team.sync();
    const int first = handle_t::shared_staging ? (team.thread() == 0 ? 0 : n) : team.thread();
    const int every = handle_t::shared_staging ? 1 : team.size();
    for (int q = first; q < n; q += every)
      if (q != r) (void)s.signal(q, static_cast<std::uint32_t>(r), r * stride + off, gather_bytes(kb, nr));
    if (!s.wait_peers(n, r, [](int q) { return static_cast<std::uint32_t>(q); })) return false;

    const bool swz = g.out_layout == nv::sf_layout::swizzled_128x4;
    const std::uint64_t kpad = swz ? (kb + 3) / 4 * 4 : kb;
    const std::uint64_t total_rows = g.rows * static_cast<std::uint64_t>(n);
    for (int q = 0; q < n; ++q) {
      const std::uint64_t m_out = static_cast<std::uint64_t>(q) * g.rows + rows.begin;
      const std::byte* src = q == r ? nullptr : h.recv_ptr(s.slot(), q * stride);
      for (std::uint64_t i = t; i < rb * nr; i += step)
        g.out_data[m_out * rb + i] = q == r ? g.data[rows.begin * rb + i] : reinterpret_cast<const std::uint8_t*>(src)[off + i];
      for (std::uint64_t i = t; i < kpad * nr; i += step) {
        const std::uint64_t m = i / kpad, k = i % kpad;
        std::uint8_t v = 0;
        if (k < kb)
          v = q == r ? g.scales[nv::sf_offset(g.in_layout, rows.begin + m, k, g.cols)]
                     : reinterpret_cast<const std::uint8_t*>(src)[sc + m * kb + k];
        g.out_scales[nv::sf_offset(g.out_layout, m_out + m, k, g.cols)] = v;
      }
    }
    if (swz && s.part() == parts - 1) {
      const std::uint64_t prow = (total_rows + 127) / 128 * 128;
      for (std::uint64_t i = t; i < (prow - total_rows) * kpad; i += step)
        g.out_scales[nv::sf_offset(g.out_layout, total_rows + i / kpad, i % kpad, g.cols)] = 0;
    }
    s.finish(parts);
    return true;
  }

  /// Failure paths (a wait failed, or the call returned at entry on a poisoned rank): every team thread of part
  /// `part` calls; the part's own outputs get the poison value (algorithm/poison.hpp), other parts' stay as they are.
  /// Out of line, so the descriptors come by value: a reference to a kernel parameter would make every kernel copy
  /// it to local memory at entry (docs/design.md §1.4, "Cold paths take values").
  template <reduce::reduction R, class Team>
  ROCENANTE_HOST_DEVICE ROCENANTE_COLD static void poison_part(Team& team, typename R::value_type* out, std::uint64_t count,
                                                              std::uint32_t part, std::uint32_t parts) {
    const range pb = split(reduce::nvfp4::blocks(count), parts, part);
    const std::uint64_t last = pb.end * 16 < count ? pb.end * 16 : count;
    fill_poison(out, pb.begin * 16, last, static_cast<std::uint64_t>(team.thread()), static_cast<std::uint64_t>(team.size()));
  }
  template <class T, class Team>
  ROCENANTE_HOST_DEVICE ROCENANTE_COLD static void poison_part(Team& team, nvfp4_epilogue<T> e, std::uint32_t part,
                                                              std::uint32_t parts) {
    const range rows = split(e.rows, parts, part);
    const std::uint64_t t = static_cast<std::uint64_t>(team.thread()), step = static_cast<std::uint64_t>(team.size());
    if (e.residual_out != nullptr) fill_poison(e.residual_out, rows.begin * e.cols, rows.end * e.cols, t, step);
    if (e.norm_out != nullptr) fill_poison(e.norm_out, rows.begin * e.cols, rows.end * e.cols, t, step);
    if (e.out_data != nullptr) poison_rows(e.out_data, e.out_scales, e.layout, e.cols, rows.begin, rows.end, t, step);
  }
  template <class Team>
  ROCENANTE_HOST_DEVICE ROCENANTE_COLD static void poison_part(Team& team, nvfp4_gather g, int ranks, std::uint32_t part,
                                                              std::uint32_t parts) {
    const range rows = split(g.rows, parts, part);
    const std::uint64_t t = static_cast<std::uint64_t>(team.thread()), step = static_cast<std::uint64_t>(team.size());
    for (int q = 0; q < ranks; ++q) {
      const std::uint64_t m0 = static_cast<std::uint64_t>(q) * g.rows;
      poison_rows(g.out_data, g.out_scales, g.out_layout, g.cols, m0 + rows.begin, m0 + rows.end, t, step);
    }
  }

 private:
  /// Rows [m0, m1) of an NVFP4 tensor: codes 0, scale bytes 0x7f.
  ROCENANTE_HOST_DEVICE static void poison_rows(std::uint8_t* data, std::uint8_t* scales, reduce::nvfp4::sf_layout layout,
                                                std::uint64_t cols, std::uint64_t m0, std::uint64_t m1, std::uint64_t t,
                                                std::uint64_t step) {
    const std::uint64_t kb = reduce::nvfp4::scale_cols(cols), rb = cols / 2;
    if (data != nullptr)
      for (std::uint64_t i = m0 * rb + t; i < m1 * rb; i += step) data[i] = 0;
    if (scales != nullptr)
      for (std::uint64_t i = t; i < (m1 - m0) * kb; i += step)
        scales[reduce::nvfp4::sf_offset(layout, m0 + i / kb, i % kb, cols)] = poison_scale;
  }
};

static_assert(check_algorithm<one_shot_fp4>());
static_assert(one_shot_fp4::region_offset(10, 1) + 0 >= one_shot_fp4::region_offset(0, 0) + one_shot_fp4::region_bytes(10));
static_assert(one_shot_fp4::payload_bytes(16, 1) == 16 + 16 + 16);

}  // namespace rocenante::algorithm

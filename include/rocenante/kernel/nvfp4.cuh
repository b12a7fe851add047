// kernel/nvfp4.cuh — ready-made __global__ kernels for NVFP4: the codec over a whole tensor (grid-stride, one
// thread per 16-element block), the standalone quantizing epilogue over rows (a warp per row), and the NVFP4
// collectives of algorithm/one_shot_fp4.hpp (one CTA per part, gridDim.x == parts, like kernel/collectives.cuh).
// Every kernel runs the same host/device functions the host executor runs, so the bytes are the host's bytes.
#pragma once

#include "../algorithm/one_shot_fp4.hpp"
#include "../device/block_collectives.hpp"
#include "../device/block_team.hpp"
#include "collectives.cuh"

namespace rocenante::kernel {

/// data/scales (linear) = NVFP4 of x[0..count) with global scale gs. Any grid; one thread per block.
template <class T>
__global__ void nvfp4_quantize(const T* x, std::uint64_t count, float gs, std::uint8_t* data, std::uint8_t* scales) {
  const std::uint64_t nb = reduce::nvfp4::blocks(count);
  for (std::uint64_t b = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; b < nb; b += std::uint64_t{gridDim.x} * blockDim.x) {
    // the bytes of reduce::nvfp4::quantize_block, with 16-byte loads and an 8-byte store for whole blocks
    float v[16];
    const int valid = algorithm::fp4_detail::load_block(x, count, b, v);
    std::uint32_t w[2];
    scales[b] = reduce::nvfp4::encode_block_words(v, gs, w, valid);
    if (valid == 16) {
      algorithm::fp4_detail::store_words(data + b * 8, w);
    } else {
      for (int j = 0; j < (valid + 1) / 2; ++j) data[b * 8 + j] = static_cast<std::uint8_t>(w[j / 4] >> (8 * (j % 4)));
    }
  }
}

/// out[0..count) = dequantized data/scales (linear). Any grid; one thread per block.
__global__ inline void nvfp4_dequantize(const std::uint8_t* data, const std::uint8_t* scales, std::uint64_t count, float gs,
                                        float* out) {
  const std::uint64_t nb = reduce::nvfp4::blocks(count);
  for (std::uint64_t b = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; b < nb; b += std::uint64_t{gridDim.x} * blockDim.x)
    reduce::nvfp4::dequantize_block(data, scales, count, b, gs, out);
}

/// The quantizing epilogue without communication: e applied to in (rows x cols), as the all-reduce applies it to
/// the sum of one rank. Any grid of whole warps; CTA c owns rows split(rows, gridDim.x, c); the last CTA zeroes the
/// swizzled padding rows. `MayNorm` = false: a leaner kernel for epilogues without RMSNorm (e.rms_norm must be
/// false; it then does nothing else differently): fewer registers, more resident threads, ~1.6x the throughput
/// (docs/nvfp4.md, section 7). `InFlight`: blocks per thread loaded together on the path without RMSNorm.
/// `MinBlocks`: CTAs per SM the compiler must leave registers for (launch bounds); the lean kernel's occupancy,
/// hence its bytes in flight, is what limits it (docs/nvfp4.md, section 7).
template <class T, bool MayNorm = true, int InFlight = MayNorm ? 2 : 1, int MinBlocks = MayNorm ? 1 : 2>
__global__ void __launch_bounds__(threads_per_block, MinBlocks) nvfp4_quantize_rows(const T* in, algorithm::nvfp4_epilogue<T> e) {
  device::block_team team{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
  const algorithm::range rows = algorithm::split(e.rows, gridDim.x, blockIdx.x);
  const std::uint64_t count = e.rows * e.cols;
  auto src = [&](std::uint64_t m, std::uint64_t k, float (&h)[16]) {
    const std::uint64_t b = (m * e.cols) / 16 + k;
    algorithm::fp4_detail::load_block(in, count, b, h);
    if (e.residual) {
      float v[16];
      algorithm::fp4_detail::load_block(e.residual, count, b, v);
      ROCENANTE_UNROLL
      for (int i = 0; i < 16; ++i) h[i] = reduce::nvfp4::add_rn(h[i], v[i]);
    }
  };
  if (!MayNorm && e.rms_norm) return;  // documented precondition; never quantize without the normalisation asked for
  algorithm::fp4_detail::quantize_rows(team, e, src, rows.begin, rows.end, blockIdx.x == gridDim.x - 1,
                                       std::bool_constant<MayNorm>{}, std::integral_constant<int, InFlight>{});
}

/// The quantizing epilogue without RMSNorm for whole blocks (cols % 16 == 0, no residual_out, no norm_out,
/// out_data set, fewer than 2^31 blocks, a scale array below 4 GiB): block b = m * kb + k is elements [16 b, 16 b + 16) and codes
/// [8 b, 8 b + 8), so the grid walks b like the 1-D codec, in 32-bit indices, in 32 registers (40 with a residual):
/// full occupancy, which is what the general kernels lack (61 registers; docs/nvfp4.md, section 7). Any grid of
/// fewer than 2^31 threads in all (so b + step never wraps); at most threads_per_block (512) threads per CTA.
/// `Ahead`: each thread loads its next block before it encodes the current one (the raw bytes in registers), so a
/// block's load latency overlaps the previous block's arithmetic; needs `in` (and `e.residual`) 16-byte aligned.
/// Without it a thread's next loads wait for its stores (the compiler must assume they may alias). `in` and
/// `e.residual` must not overlap `e.out_data` or `e.out_scales` (they are read through the read-only path).
/// Same bytes as nvfp4_quantize_rows (the same encode and the same scale offsets). Use launch_nvfp4_quantize_rows
/// to pick the kernel.
template <class T, bool Residual, bool Ahead = false>
__global__ void __launch_bounds__(threads_per_block, Ahead ? 2 : (Residual ? 3 : 4))
    nvfp4_quantize_whole_blocks(const T* in, algorithm::nvfp4_epilogue<T> e) {
  namespace nv = reduce::nvfp4;
  const std::uint32_t kb = static_cast<std::uint32_t>(e.cols / 16);
  const std::uint64_t count = e.rows * e.cols;
  const std::uint32_t nb = static_cast<std::uint32_t>(e.rows) * kb;
  const std::uint32_t step = blockDim.x * gridDim.x, first = blockIdx.x * blockDim.x + threadIdx.x;
  const bool swz = e.layout == nv::sf_layout::swizzled_128x4;
  // nv::sf_offset in 32 bits (the launcher's precondition: the scale array is below 4 GiB)
  const std::uint32_t tile_row_bytes = (kb + 3) / 4 * 512;
  auto sf_at = [&](std::uint32_t m, std::uint32_t k) -> std::uint32_t {
    if (!swz) return m * kb + k;
    return (m / 128) * tile_row_bytes + (k / 4) * 512 + (m % 32) * 16 + ((m % 128) / 32) * 4 + (k % 4);
  };
  auto finish = [&](std::uint32_t b, float (&h)[16]) {
    const std::uint32_t m = b / kb, k = b - m * kb;
    std::uint32_t w[2];
    const std::uint8_t sf = nv::encode_block_words(h, e.global_scale, w);
    algorithm::fp4_detail::store_words(e.out_data + std::uint64_t{b} * 8, w);
    e.out_scales[sf_at(m, k)] = sf;
  };
  if constexpr (Ahead) {
    constexpr int V = static_cast<int>(sizeof(T));  // 16-byte vectors per block of 16 elements
    constexpr int per = 16 / static_cast<int>(sizeof(T));
    constexpr int RV = Residual ? V : 1;
    auto load_raw = [](const T* x, std::uint32_t b, uint4* u) {
      const uint4* p = reinterpret_cast<const uint4*>(x + std::uint64_t{b} * 16);
      ROCENANTE_UNROLL
      for (int j = 0; j < V; ++j) u[j] = __ldg(p + j);
    };
    auto widen = [](const uint4* u, float (&h)[16]) {
      ROCENANTE_UNROLL
      for (int j = 0; j < V; ++j) {
        const T* t = reinterpret_cast<const T*>(&u[j]);
        ROCENANTE_UNROLL
        for (int i = 0; i < per; ++i) h[j * per + i] = nv::to_float(t[i]);
      }
    };
    uint4 cur[V], curr[RV];
    std::uint32_t b = first;
    if (b < nb) {
      load_raw(in, b, cur);
      if constexpr (Residual) load_raw(e.residual, b, curr);
    }
    for (; b < nb; b += step) {
      uint4 nxt[V], nxtr[RV];
      const bool more = step < nb - b;
      if (more) {
        load_raw(in, b + step, nxt);
        if constexpr (Residual) load_raw(e.residual, b + step, nxtr);
      }
      float h[16];
      widen(cur, h);
      if constexpr (Residual) {
        float v[16];
        widen(curr, v);
        ROCENANTE_UNROLL
        for (int i = 0; i < 16; ++i) h[i] = nv::add_rn(h[i], v[i]);
      }
      finish(b, h);
      if (more) {
        ROCENANTE_UNROLL
        for (int j = 0; j < V; ++j) cur[j] = nxt[j];
        if constexpr (Residual) {
          ROCENANTE_UNROLL
          for (int j = 0; j < V; ++j) curr[j] = nxtr[j];
        }
      }
    }
  } else {
    for (std::uint32_t b = first; b < nb; b += step) {
      float h[16];
      algorithm::fp4_detail::load_block(in, count, b, h);
      if constexpr (Residual) {
        float v[16];
        algorithm::fp4_detail::load_block(e.residual, count, b, v);
        ROCENANTE_UNROLL
        for (int i = 0; i < 16; ++i) h[i] = nv::add_rn(h[i], v[i]);
      }
      finish(b, h);
    }
  }
  if (swz) {  // padding of the swizzled array: columns kb..kpad of every row, rows rows..align128(rows): 0
    const std::uint64_t kpad = (kb + 3) / 4 * 4, prow = (e.rows + 127) / 128 * 128;
    for (std::uint64_t j = first; j < e.rows * (kpad - kb); j += step)
      e.out_scales[nv::sf_offset(e.layout, j / (kpad - kb), kb + j % (kpad - kb), e.cols)] = 0;
    for (std::uint64_t j = first; j < (prow - e.rows) * kpad; j += step)
      e.out_scales[nv::sf_offset(e.layout, e.rows + j / kpad, j % kpad, e.cols)] = 0;
  }
}

/// Launches the quantizing epilogue over rows on `stream`: nvfp4_quantize_whole_blocks where it applies,
/// otherwise nvfp4_quantize_rows (lean without RMSNorm, full with it). `per_sm`: CTAs of `threads` per SM for the
/// grid (the general kernels' rows are split over the CTAs). Returns the launch's error.
template <class T>
cudaError_t launch_nvfp4_quantize_rows(const T* in, const algorithm::nvfp4_epilogue<T>& e, cudaStream_t stream = 0,
                                       int threads = 256, int per_sm = 8) {
  if (e.rows == 0 || e.cols == 0) return cudaSuccess;  // nothing to quantize (and a grid of 0 would not launch)
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return cudaGetLastError();
  const bool whole = !e.rms_norm && e.cols % 16 == 0 && e.residual_out == nullptr && e.norm_out == nullptr &&
                     e.out_data != nullptr && e.rows * (e.cols / 16) < (std::uint64_t{1} << 31) &&
                     reduce::nvfp4::sf_bytes(e.layout, e.rows, e.cols) < (std::uint64_t{1} << 32);
  const unsigned grid = static_cast<unsigned>(sms * per_sm);
  // loads ahead: measured for bf16 only (2-byte T: 8 registers of raw bytes per block); a 4-byte T would need 16
  // (32 with a residual) under the 64-register bound, where the kernel spilled at 32 (2x slower)
  const bool ahead = sizeof(T) == 2 && reduce::detail::aligned16(in) &&
                     (e.residual == nullptr || reduce::detail::aligned16(e.residual));
  if (whole && e.residual && ahead) nvfp4_quantize_whole_blocks<T, true, true><<<grid, threads, 0, stream>>>(in, e);
  else if (whole && e.residual) nvfp4_quantize_whole_blocks<T, true><<<grid, threads, 0, stream>>>(in, e);
  else if (whole && ahead) nvfp4_quantize_whole_blocks<T, false, true><<<grid, threads, 0, stream>>>(in, e);
  else if (whole) nvfp4_quantize_whole_blocks<T, false><<<grid, threads, 0, stream>>>(in, e);
  else if (!e.rms_norm) nvfp4_quantize_rows<T, false><<<grid, threads, 0, stream>>>(in, e);
  else nvfp4_quantize_rows<T><<<static_cast<unsigned>((e.rows + threads / 32 - 1) / (threads / 32)), threads, 0, stream>>>(in, e);
  return cudaGetLastError();
}

/// NVFP4-wire all-reduce (one_shot_fp4::all_reduce), one CTA per part.
template <class R, class Handle>
__global__ void __launch_bounds__(threads_per_block, 1)
    nvfp4_all_reduce(device::context<Handle> ctx, const typename R::value_type* in, typename R::value_type* out,
                     std::uint64_t count) {
  dependent_launch_entry();
  __shared__ float scratch[threads_per_block / 32];
  device::block_team team{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
  const std::uint32_t sig = protocol::call_signature(protocol::collective::all_reduce,
                                                     static_cast<std::uint32_t>(algorithm::one_shot_fp4_id),
                                                     static_cast<std::uint32_t>(R::dtype_id),
                                                     static_cast<std::uint32_t>(R::op_id), count);
  protocol::session<device::block_team, Handle> s(team, ctx.handle, ctx.state, ctx.policy, sig, blockIdx.x, ctx.mirror);
  if (!algorithm::one_shot_fp4::all_reduce<R>(s, in, out, count, gridDim.x, scratch)) {
    algorithm::one_shot_fp4::poison_part<R>(team, out, count, blockIdx.x, gridDim.x);
    if (blockIdx.x == 0 && threadIdx.x == 0) protocol::count_failed_call(ctx.state, ctx.mirror);
  }
}

/// Quantizing all-reduce (one_shot_fp4::all_reduce_quantize), one CTA per part (rows).
template <class T, class Handle>
__global__ void __launch_bounds__(threads_per_block, 1)
    nvfp4_all_reduce_quantize(device::context<Handle> ctx, const T* in, algorithm::nvfp4_epilogue<T> e) {
  dependent_launch_entry();
  device::block_team team{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
  const std::uint32_t sig = protocol::call_signature(protocol::collective::all_reduce,
                                                     static_cast<std::uint32_t>(algorithm::one_shot_rows_id),
                                                     static_cast<std::uint32_t>(reduce::sum<T>::dtype_id),
                                                     static_cast<std::uint32_t>(reduce::reduce_op::sum), e.rows * e.cols);
  protocol::session<device::block_team, Handle> s(team, ctx.handle, ctx.state, ctx.policy, sig, blockIdx.x, ctx.mirror);
  if (!algorithm::one_shot_fp4::all_reduce_quantize<T>(s, in, e, gridDim.x)) {
    algorithm::one_shot_fp4::poison_part(team, e, blockIdx.x, gridDim.x);
    if (blockIdx.x == 0 && threadIdx.x == 0) protocol::count_failed_call(ctx.state, ctx.mirror);
  }
}

/// NVFP4 all-gather (one_shot_fp4::all_gather_nvfp4), one CTA per part (rows).
template <class Handle>
__global__ void __launch_bounds__(threads_per_block, 1) nvfp4_all_gather(device::context<Handle> ctx, algorithm::nvfp4_gather g) {
  dependent_launch_entry();
  device::block_team team{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
  const std::uint32_t sig = protocol::call_signature(protocol::collective::all_gather,
                                                     static_cast<std::uint32_t>(algorithm::one_shot_fp4_id),
                                                     static_cast<std::uint32_t>(dtype::nvfp4),
                                                     static_cast<std::uint32_t>(reduce::reduce_op::sum), g.rows * g.cols);
  protocol::session<device::block_team, Handle> s(team, ctx.handle, ctx.state, ctx.policy, sig, blockIdx.x, ctx.mirror);
  if (!algorithm::one_shot_fp4::all_gather_nvfp4(s, g, gridDim.x)) {
    algorithm::one_shot_fp4::poison_part(team, g, ctx.handle.ranks(), blockIdx.x, gridDim.x);
    if (blockIdx.x == 0 && threadIdx.x == 0) protocol::count_failed_call(ctx.state, ctx.mirror);
  }
}

}  // namespace rocenante::kernel

// gpu/nvfp4.hpp — launchers for the NVFP4 collectives (kernel/nvfp4.cuh) on a gpu::communicator: the same checks
// and part counts as host::nvfp4_communicator, launched on the caller's stream. Include from .cu files.
//
// Who calls: the rank's host thread, for every rank, in the same order with the same shapes (like
// gpu::communicator::all_reduce). A call refused here (bad shape, payload larger than the window) launches
// kernel::reject in the collective's place, so peers abort instead of waiting, and returns invalid_argument;
// `why` (optional) receives the reason. Launch path: no allocation, no device synchronisation, graph-safe.
// Co-residency: these kernels use 512 threads and at most max_ctas() CTAs per rank (one part per CTA), like the built-in
// ones; gpu::communicator's set-up check covers them only if their occupancy is not lower (docs/nvfp4.md).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "../kernel/nvfp4.cuh"
#include "communicator.hpp"

namespace rocenante::gpu {

namespace nvfp4_detail {
/// `fill`: the outputs the refused call fills with the poison value (what is safe to write; see the callers).
template <class Transport>
status refuse(communicator<Transport>& c, cudaStream_t stream, const std::string& reason, std::string* why,
              const algorithm::poison_list& fill = {}) {
  c.hold_in_capture(stream);  // a graph capturing this keeps the state alive (gpu/lifetime.hpp)
  kernel::reject<typename Transport::handle_type><<<1, kernel::threads_per_block, 0, stream>>>(c.device_context(), fill);
  (void)cudaGetLastError();
  if (why) *why = "rocenante rank " + std::to_string(c.rank()) + ": " + reason +
                  "; peers were told to abort this collective and the communicator is now poisoned";
  return status::invalid_argument;
}
inline status launched(std::string* why) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return status::ok;
  if (why) *why = std::string("kernel launch failed: ") + cudaGetErrorString(e);
  return status::internal;
}
template <class Transport>
std::string check_common(communicator<Transport>& c, const void* in, const void* out, std::uint64_t count, std::uint64_t elem) {
  if (c.check_health().state != status::ok) return "communicator is poisoned";
  if (in == nullptr || out == nullptr) return "input or output pointer is null";
  return host::capacity_refusal(count, elem, c.opts().capacity_bytes);
}
}  // namespace nvfp4_detail

/// NVFP4-wire all-reduce: out = T(sum_q decode(encode(in_q))), identical bytes on every rank (host: the same bytes).
template <class T, class Transport>
status all_reduce_fp4(communicator<Transport>& c, const T* in, T* out, std::size_t count, cudaStream_t stream,
                      std::string* why = nullptr) {
  using R = reduce::nvfp4_sum<T>;
  std::string reason = nvfp4_detail::check_common(c, in, out, count, sizeof(T));
  const std::uint32_t parts = algorithm::one_shot_fp4::parts_for(count, sizeof(T), c.opts().min_part_bytes, c.max_ctas());
  if (reason.empty() && !algorithm::one_shot_fp4::fits_window(count, parts, c.layout().source_stride))
    reason = "the NVFP4 payload does not fit the window's source region";
  // A refused call fills out when it is not null and count fits capacity (as gpu::communicator::all_reduce).
  if (!reason.empty())
    return nvfp4_detail::refuse(c, stream, reason, why,
                                out != nullptr && count != 0 && count <= c.opts().capacity_bytes / sizeof(T)
                                    ? algorithm::poison_list{{algorithm::poison_of(out, count)}}
                                    : algorithm::poison_list{});
  c.hold_in_capture(stream);
  kernel::nvfp4_all_reduce<R, typename Transport::handle_type>
      <<<parts, kernel::threads_per_block, 0, stream>>>(c.device_context(), in, out, count);
  return nvfp4_detail::launched(why);
}

/// Quantizing all-reduce (algorithm::nvfp4_epilogue), rows owned by CTAs.
template <class T, class Transport>
status all_reduce_quantize(communicator<Transport>& c, const T* in, const algorithm::nvfp4_epilogue<T>& e,
                           cudaStream_t stream, std::string* why = nullptr) {
  const void* out = e.out_data != nullptr ? static_cast<const void*>(e.out_data) : static_cast<const void*>(e.norm_out);
  std::string reason = nvfp4_detail::check_common(c, in, out, e.rows * e.cols, sizeof(T));
  if (reason.empty() && e.cols % 16 != 0) reason = "cols is not a multiple of 16";
  if (reason.empty() && e.out_data != nullptr && e.out_scales == nullptr) reason = "out_scales is null";
  if (reason.empty() && !(e.global_scale > 0.0f && e.global_scale <= 3.4028234663852886e38f))
    reason = "global_scale must be a positive finite float";
  const std::uint64_t count = e.rows * e.cols;
  if (!reason.empty())
    return nvfp4_detail::refuse(c, stream, reason, why,
                                count != 0 && count <= c.opts().capacity_bytes / sizeof(T) && e.cols % 16 == 0
                                    ? algorithm::poison_of(e)
                                    : algorithm::poison_list{});
  const std::uint32_t parts = algorithm::one_shot_fp4::row_parts_for(e.rows, e.cols * sizeof(T), c.opts().min_part_bytes,
                                                                     c.max_ctas());
  c.hold_in_capture(stream);
  kernel::nvfp4_all_reduce_quantize<T, typename Transport::handle_type>
      <<<parts, kernel::threads_per_block, 0, stream>>>(c.device_context(), in, e);
  return nvfp4_detail::launched(why);
}

/// NVFP4 all-gather (algorithm::nvfp4_gather).
template <class Transport>
status all_gather_nvfp4(communicator<Transport>& c, const algorithm::nvfp4_gather& g, cudaStream_t stream,
                        std::string* why = nullptr) {
  std::string reason = nvfp4_detail::check_common(c, g.data, g.out_data, g.rows * g.cols, 1);
  if (reason.empty() && g.cols % 16 != 0) reason = "cols is not a multiple of 16";
  if (reason.empty() && (g.scales == nullptr || g.out_scales == nullptr)) reason = "a scale pointer is null";
  const std::uint32_t parts = algorithm::one_shot_fp4::row_parts_for(g.rows, g.cols / 2, c.opts().min_part_bytes, c.max_ctas());
  if (reason.empty() && !algorithm::one_shot_fp4::gather_fits(g.rows, g.cols, parts, c.layout().source_stride))
    reason = "the NVFP4 tensor does not fit the window's source region";
  const std::uint64_t count = g.rows * g.cols;
  if (!reason.empty())
    return nvfp4_detail::refuse(c, stream, reason, why,
                                count != 0 && count <= c.opts().capacity_bytes && g.cols % 16 == 0
                                    ? algorithm::poison_of(g, c.size())
                                    : algorithm::poison_list{});
  c.hold_in_capture(stream);
  kernel::nvfp4_all_gather<typename Transport::handle_type>
      <<<parts, kernel::threads_per_block, 0, stream>>>(c.device_context(), g);
  return nvfp4_detail::launched(why);
}

}  // namespace rocenante::gpu

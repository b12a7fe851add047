// host/nvfp4.hpp — host executor for the NVFP4-aware collectives (algorithm/one_shot_fp4.hpp) on CPU threads, one
// rank per object: the same protocol, window layout and algorithm code the GPU kernels run (kernel/nvfp4.cuh).
// It also runs the plain one_shot all-reduce, so that compressed and uncompressed results come from one window.
//
// Who calls: one thread per rank; every rank constructs it (collective set-up through the bootstrap, same options,
// same checks as host::communicator) and then calls the same collectives in the same order with the same shapes.
// Errors: set-up throws rocenante::error subclasses; collectives return a status and never throw. A call refused on
// one rank (null pointer, size, cols % 16, payload larger than the window) takes its place in the sequence and
// aborts it at every peer (session::reject), as in host::communicator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "../algorithm/one_shot.hpp"
#include "../algorithm/one_shot_fp4.hpp"
#include "../algorithm/ring.hpp"
#include "../bootstrap/concepts.hpp"
#include "../core/error.hpp"
#include "../core/options.hpp"
#include "../core/status.hpp"
#include "../protocol/session.hpp"
#include "../protocol/state.hpp"
#include "../transport/concepts.hpp"
#include "communicator.hpp"
#include "setup.hpp"

namespace rocenante::host {

template <transport::transport Transport>
class nvfp4_communicator : public executor_base<Transport> {
  using base = executor_base<Transport>;
  using base::check_common;
  using base::layout_;
  using base::opts_;
  using base::overlaps;
  using base::reject_call;
  using typename base::session_t;

 public:
  template <bootstrap::bootstrap B>
  nvfp4_communicator(B& boot, const options& opts) : base(boot, opts) {}

  /// Parts a compressed all-reduce of `count` elements of T uses (the GPU executor uses the same formula).
  template <class T>
  std::uint32_t fp4_parts(std::uint64_t count) const {
    return algorithm::one_shot_fp4::parts_for(count, sizeof(T), opts_.min_part_bytes, opts_.max_parts);
  }

  /// NVFP4-wire all-reduce: out = T(sum_q decode(encode(in_q))), identical bytes on every rank. in may equal out.
  template <class T>
  status all_reduce_fp4(const T* in, T* out, std::size_t count) {
    using R = reduce::nvfp4_sum<std::remove_cv_t<T>>;
    static_assert(algorithm::one_shot_fp4::supports<R>);
    std::string why = check_common(in, out, count, sizeof(T));
    const std::uint32_t parts = fp4_parts<T>(count);
    if (why.empty() && !algorithm::one_shot_fp4::fits_window(count, parts, layout_.source_stride))
      why = "the NVFP4 payload of " + std::to_string(count) + " elements in " + std::to_string(parts) +
            " parts does not fit the window's source region; raise capacity_bytes or min_part_bytes";
    if (why.empty() && in != out && overlaps(in, count * sizeof(T), out, count * sizeof(T)))
      why = "input and output overlap without being the same buffer";
    if (!why.empty()) return reject_call(why, status::invalid_argument, this->refused_poison(out, count, count, sizeof(T)));
    const auto sig = protocol::call_signature(protocol::collective::all_reduce, static_cast<std::uint32_t>(algorithm::one_shot_fp4_id),
                                              static_cast<std::uint32_t>(R::dtype_id),
                                              static_cast<std::uint32_t>(R::op_id), count);
    return this->run_parts(sig, parts, [&](session_t& s) {
      return algorithm::one_shot_fp4::all_reduce<R>(s, in, out, count, parts, nullptr);
    }, [&] { algorithm::fill_poison(out, 0, count, 0, 1); });
  }

  /// Plain one_shot all-reduce on the same window (the uncompressed baseline).
  template <class T>
  status all_reduce(const T* in, T* out, std::size_t count) {
    using R = reduce::sum<std::remove_cv_t<T>>;
    std::string why = check_common(in, out, count, sizeof(T));
    if (why.empty() && in != out && overlaps(in, count * sizeof(T), out, count * sizeof(T)))
      why = "input and output overlap without being the same buffer";
    if (!why.empty()) return reject_call(why, status::invalid_argument, this->refused_poison(out, count, count, sizeof(T)));
    const auto sig = protocol::call_signature(protocol::collective::all_reduce, static_cast<std::uint32_t>(algorithm::one_shot::id),
                                              static_cast<std::uint32_t>(R::dtype_id),
                                              static_cast<std::uint32_t>(R::op_id), count);
    const std::uint64_t packets = protocol::ceil_div(count, reduce::lanes<R>);
    const std::uint32_t parts = algorithm::part_count(packets, protocol::ceil_div(opts_.min_part_bytes, packet_bytes), opts_.max_parts);
    return this->run_parts(
        sig, parts, [&](session_t& s) { return algorithm::one_shot::all_reduce<R>(s, in, out, count, parts); },
        [&] { algorithm::fill_poison(out, 0, count, 0, 1); });
  }

  /// Rows of the quantizing all-reduce per part (GPU: the same formula).
  template <class T>
  std::uint32_t row_parts(std::uint64_t rows, std::uint64_t cols) const {
    return algorithm::one_shot_fp4::row_parts_for(rows, cols * sizeof(T), opts_.min_part_bytes, opts_.max_parts);
  }

  /// All-reduce of rows x cols elements of T, then the NVFP4 epilogue (algorithm::nvfp4_epilogue).
  template <class T>
  status all_reduce_quantize(const T* in, const algorithm::nvfp4_epilogue<T>& e) {
    const std::uint64_t count = e.rows * e.cols;
    const void* out = e.out_data != nullptr ? static_cast<const void*>(e.out_data) : static_cast<const void*>(e.norm_out);
    std::string why = check_common(in, out, count, sizeof(T));
    if (why.empty() && (e.cols % 16 != 0)) why = "cols = " + std::to_string(e.cols) + " is not a multiple of 16";
    if (why.empty() && e.out_data != nullptr && e.out_scales == nullptr) why = "out_scales is null";
    if (why.empty() && !(e.global_scale > 0.0f && e.global_scale <= 3.4028234663852886e38f))
      why = "global_scale must be a positive finite float";
    // A refusal fills the outputs when the shape is one the call could have run (count within capacity, cols % 16).
    if (!why.empty())
      return reject_call(why, status::invalid_argument,
                         count != 0 && count <= opts_.capacity_bytes / sizeof(T) && e.cols % 16 == 0 ? algorithm::poison_of(e)
                                                                                                   : algorithm::poison_list{});
    const auto sig = protocol::call_signature(protocol::collective::all_reduce, static_cast<std::uint32_t>(algorithm::one_shot_rows_id),
                                              static_cast<std::uint32_t>(reduce::sum<T>::dtype_id),
                                              static_cast<std::uint32_t>(reduce::reduce_op::sum), count);
    const std::uint32_t parts = row_parts<T>(e.rows, e.cols);
    return this->run_parts(
        sig, parts, [&](session_t& s) { return algorithm::one_shot_fp4::all_reduce_quantize<T>(s, in, e, parts); },
        [&] { algorithm::fill_poison(algorithm::poison_of(e), 0, 1); });
  }

  /// NVFP4 all-gather (algorithm::nvfp4_gather): rows concatenated in rank order, scales in g.out_layout.
  status all_gather_nvfp4(const algorithm::nvfp4_gather& g) {
    const std::uint64_t count = g.rows * g.cols;
    std::string why = check_common(g.data, g.out_data, count, 1);  // capacity counts elements as <= 1 byte each
    if (why.empty() && (g.cols % 16 != 0)) why = "cols = " + std::to_string(g.cols) + " is not a multiple of 16";
    if (why.empty() && (g.scales == nullptr || g.out_scales == nullptr)) why = "a scale pointer is null";
    const std::uint32_t parts = algorithm::one_shot_fp4::row_parts_for(g.rows, g.cols / 2, opts_.min_part_bytes, opts_.max_parts);
    if (why.empty() && !algorithm::one_shot_fp4::gather_fits(g.rows, g.cols, parts, layout_.source_stride))
      why = "the NVFP4 tensor does not fit the window's source region; raise capacity_bytes";
    if (!why.empty())
      return reject_call(why, status::invalid_argument,
                         count != 0 && count <= opts_.capacity_bytes && g.cols % 16 == 0 ? algorithm::poison_of(g, this->size())
                                                                                         : algorithm::poison_list{});
    const auto sig = protocol::call_signature(protocol::collective::all_gather, static_cast<std::uint32_t>(algorithm::one_shot_fp4_id),
                                              static_cast<std::uint32_t>(dtype::nvfp4),
                                              static_cast<std::uint32_t>(reduce::reduce_op::sum), count);
    return this->run_parts(
        sig, parts, [&](session_t& s) { return algorithm::one_shot_fp4::all_gather_nvfp4(s, g, parts); },
        [&] { algorithm::fill_poison(algorithm::poison_of(g, this->size()), 0, 1); });
  }
};

}  // namespace rocenante::host

// device/block_collectives.hpp — the in-kernel API: a CTA of a user kernel runs one part of a collective.
//
//   Who calls: every thread of the CTA, on every rank, for every part 0..parts-1 (one CTA per part, or one CTA
//   looping over parts in order). The caller passes its thread index and thread count.
//   Result: valid in `out` for this part's elements when run() returns status::ok, identical bytes on every rank.
//   Progress: every rank's CTAs for this collective must be able to run at the same time (co-resident), and
//   each rank must issue its collectives in one order (stream order); a wait is bounded by policy.
//   Template parameters: Algorithm satisfies algorithm::algorithm; Reduction satisfies reduce::reduction;
//   Handle satisfies transport::transport_handle.
//
// The code that runs is the protocol and algorithm code the host executor runs (protocol/session.hpp,
// algorithm/*.hpp): the CTA is the team.
#pragma once

#include <cstdint>

#include "../algorithm/concepts.hpp"
#include "../algorithm/one_shot.hpp"
#include "../core/status.hpp"
#include "../protocol/flags.hpp"
#include "../protocol/session.hpp"
#include "../reduce/packet.hpp"
#include "block_team.hpp"

namespace rocenante::device {

/// Everything a CTA needs to run collectives on one rank; trivially copyable, built by the host communicator
/// (gpu::communicator::device_context()) and passed to kernels by value.
template <class Handle>
struct context {
  Handle handle;
  protocol::rank_state* state;   ///< device memory: epoch and poison word
  protocol::rank_state* mirror;  ///< host-mapped copy of the failure record (health without a device sync)
  protocol::wait_policy policy;
};

/// Epilogue: a functor called as epi(first_element, accum_packet&) on every packet of fp32 sums before the
/// single rounding (algorithm/concepts.hpp, no_epilogue): fuse a residual add, a scale or an activation into the
/// reduction's store.
template <algorithm::algorithm Algorithm, reduce::reduction Reduction, class Handle,
          class Epilogue = algorithm::no_epilogue>
class block_all_reduce {
 public:
  using value_type = typename Reduction::value_type;
  /// No shared memory is needed today; the type exists so that callers follow the CUB pattern and future
  /// versions can stage through shared memory without an API change.
  struct temp_storage {};

  ROCENANTE_DEVICE block_all_reduce(temp_storage&, int thread, int threads) : team_{thread, threads} {}

  /// Every rank must call with the same count and the same `parts` (the grid). Two calls in one kernel: put a
  /// __threadfence() in every thread between them. A one-shot call that takes the LL or Lamport path (one_shot::small_protocol_for)
  /// clears what it read with plain stores that nothing orders before the next call's stores to its peers; a
  /// kernel's end orders them, a fence does too.
  ROCENANTE_DEVICE bool run(context<Handle>& ctx, const value_type* in, value_type* out, std::uint64_t count,
                            std::uint32_t part, std::uint32_t parts, const Epilogue& epi = {}) {
    auto s = make_session(ctx, count, part);
    return Algorithm::template all_reduce<Reduction>(s, in, out, count, parts, epi);
  }

  /// run() with only the algorithm's bulk loop compiled (one_shot::all_reduce_bulk: fewer registers), for calls
  /// whose every part holds more packets than the team has threads — the same bytes as run(). Discard: drop the
  /// peers' staged lines from L2 once read (worth it only when parts are small enough to be read from L2; needs
  /// team threads in hardware lane order). Every rank must use the same variant for a call.
  template <bool Discard>
  ROCENANTE_DEVICE bool run_bulk(context<Handle>& ctx, const value_type* in, value_type* out, std::uint64_t count,
                                 std::uint32_t part, std::uint32_t parts, const Epilogue& epi = {}) {
    auto s = make_session(ctx, count, part);
    return Algorithm::template all_reduce_bulk<Reduction, Discard>(s, in, out, count, parts, epi);
  }

  /// run() with only the algorithm's decode-size code compiled (one_shot::all_reduce_small: one packet per thread,
  /// moved as packets + flag, LL lines or Lamport packets), for calls whose every part holds at most as many packets
  /// as the team has threads — the same bytes as run(). P must equal one_shot::small_protocol_for for the call
  /// (run() decides it inside). Every rank must use the same variant for a call. `gate` (algorithm::no_gate) runs in
  /// every thread after the call's plan and before its first read of the input or of the rank's state.
  template <algorithm::small_protocol P, class Gate = algorithm::no_gate>
  ROCENANTE_DEVICE bool run_small(context<Handle>& ctx, const value_type* in, value_type* out, std::uint64_t count,
                                  std::uint32_t part, std::uint32_t parts, const Epilogue& epi = {}, const Gate& gate = {}) {
    auto s = make_session(ctx, count, part);
    return Algorithm::template all_reduce_small<Reduction, P>(s, in, out, count, parts, epi, gate);
  }

  /// The in-place path of one_shot or two_shot (algorithm/one_shot.hpp, "In-place path"): `in` lies in this rank's
  /// symmetric input area, at the same offset on every rank (one_shot::inplace_offset said so on the host), and `out`
  /// elsewhere.
  ROCENANTE_DEVICE bool run_inplace(context<Handle>& ctx, const value_type* in, value_type* out, std::uint64_t count,
                                    std::uint32_t part, std::uint32_t parts, const Epilogue& epi = {}) {
    if constexpr (requires { Algorithm::inplace_id; } && algorithm::one_shot::has_inplace<Handle>) {
      const std::uint64_t off = static_cast<std::uint64_t>(reinterpret_cast<const std::byte*>(in) -
                                                           ctx.handle.input_ptr(ctx.handle.rank(), 0));
      const std::uint32_t sig = Algorithm::inplace_signature(static_cast<std::uint32_t>(Reduction::dtype_id),
                                                             static_cast<std::uint32_t>(Reduction::op_id), count, off);
      protocol::session<block_team, Handle> s(team_, ctx.handle, ctx.state, ctx.policy, sig, part, ctx.mirror);
      return Algorithm::template all_reduce_inplace<Reduction>(s, out, count, parts, off, epi);
    } else {
      return false;
    }
  }

 private:
  /// The protocol session of part `part` of an all-reduce of `count` elements (the call's signature).
  ROCENANTE_DEVICE protocol::session<block_team, Handle> make_session(context<Handle>& ctx, std::uint64_t count, std::uint32_t part) {
    const std::uint32_t sig = protocol::call_signature(protocol::collective::all_reduce,
                                                       static_cast<std::uint32_t>(Algorithm::id),
                                                       static_cast<std::uint32_t>(Reduction::dtype_id),
                                                       static_cast<std::uint32_t>(Reduction::op_id), count);
    return protocol::session<block_team, Handle>(team_, ctx.handle, ctx.state, ctx.policy, sig, part, ctx.mirror);
  }

  block_team team_;
};

template <algorithm::algorithm Algorithm, reduce::reduction Reduction, class Handle>
class block_all_gather {
 public:
  using value_type = typename Reduction::value_type;
  struct temp_storage {};
  static_assert(Algorithm::supports_all_gather, "this algorithm has no all-gather; use one_shot");

  ROCENANTE_DEVICE block_all_gather(temp_storage&, int thread, int threads) : team_{thread, threads} {}

  ROCENANTE_DEVICE bool run(context<Handle>& ctx, const value_type* in, value_type* out, std::uint64_t count,
                            std::uint32_t part, std::uint32_t parts) {
    const std::uint32_t sig = protocol::call_signature(protocol::collective::all_gather,
                                                       static_cast<std::uint32_t>(Algorithm::id),
                                                       static_cast<std::uint32_t>(Reduction::dtype_id),
                                                       static_cast<std::uint32_t>(Reduction::op_id), count);
    protocol::session<block_team, Handle> s(team_, ctx.handle, ctx.state, ctx.policy, sig, part, ctx.mirror);
    return Algorithm::template all_gather<Reduction>(s, in, out, count, parts);
  }

 private:
  block_team team_;
};

}  // namespace rocenante::device

// algorithm/one_shot.hpp — one-shot (all-to-all) all-reduce and all-gather.
//
// Schedule, 4 ranks, one part, collective s in slot s&1 (X = rank's input, F = flag):
//
//   rank 0:  put X0 -> 1,2,3 | F -> 1,2,3 | wait F from 1,2,3 | out = X0+X1+X2+X3
//   rank 1:  put X1 -> 0,2,3 | F -> 0,2,3 | wait F from 0,2,3 | out = X0+X1+X2+X3
//   rank 2:  put X2 -> 0,1,3 | F -> 0,1,3 | wait F from 0,1,3 | out = X0+X1+X2+X3
//   rank 3:  put X3 -> 0,1,2 | F -> 0,1,2 | wait F from 0,1,2 | out = X0+X1+X2+X3
//
//   window of rank r, slot s:  [source 0 | source 1 | ... | source n-1], each `source_stride` bytes;
//   rank q writes its input into source q of every peer; flag channel q of part p says it has arrived.
//
// Cost for S bytes per rank: one communication step; each rank sends (n-1)*S bytes and receives (n-1)*S;
// the local reduce reads n*S and writes S. Latency ~ launch + stage + one flag hop + reduce.
//
// Assumptions: any-to-any connectivity (a switch, NVLink, or one process); every rank calls with the same count.
// Pitfalls: bytes on the wire grow as (n-1)*S, so for large S at many ranks the ring's 2(n-1)/n*S wins;
// the own contribution is read straight from the user's input, so `in` may equal `out` (in-place) but must not
// otherwise overlap it.
//
// Posting (proxy mode: loopback_proxy, socket, ibverbs — the DGX Spark path, where a CPU proxy or the NIC moves
// the bytes). A call of at most layout.call_post_max_bytes per rank is posted once: every part stages its packets
// into source `rank` of this rank's staging slot and counts itself (rank_state::arrived); the part that counts
// last writes the call trailer {flag word, bytes} after the packets and rings one doorbell, a descriptor for every
// peer. The proxy then moves [rank * stride, + bytes + 16) to each peer with one payload write and sets one flag,
// this rank's channel of part d, per rail d — on RDMA two work requests per peer and rail. Every part of every
// peer waits for those flags (session::wait_call); the trailer settles a flag word whose bytes are still landing
// (session::wait_call). A larger call posts each part's range as soon as that part has staged (one descriptor per
// part and peer, flag channel `rank` of that part), so the proxy moves part p while part p+1 is staged.
//
//   rank 0, 4 parts:  stage p0 | stage p1 | stage p2 | stage p3 (last: trailer, doorbell) | wait F[d][q], q = 1..3
//   proxy of rank 0:                                             WRITE -> 1, F -> 1 | WRITE -> 2, F -> 2 | ...
//
// Lamport path (GPU, directly written windows, 2..lamport_max_ranks ranks, calls of at most
// options::lamport_max_bytes per rank with one packet per thread): the data is its own ready flag. A window's
// Lamport area starts all ones; no element a rank sends is all ones (an all-ones element is a NaN in fp32, fp16 and
// bf16 alike, and is sent as the same NaN with its sign bit cleared — an fp32 sum turns any NaN into the canonical
// one, so the result's bytes do not change). Each thread stores its packet into source `rank` of every peer's area
// and polls the packets of every source until no element is all ones; it then writes all ones back over what it
// read, so a packet is only ever empty or this call's (the argument of the LL path below: two slots, and the
// reader clears before its next collective can let the writer reach this slot again). No fence, no flag round trip
// and no barrier between storing and polling. The call's signature still travels: each part also writes its flag
// word (protocol::ll_word_signature) into every peer's channel `rank`, relaxed, and a reader accepts a source's
// packets only once that word is this call's — a peer in another call (another count lays its packets out
// elsewhere) is a mismatch, never a wrong sum.
//
// In-place path (directly read windows: loopback, cuda_loopback, cuda_ipc; options::symmetric_bytes). A rank whose
// input lies in its window's symmetric input area, at the same offset on every rank, and whose output lies
// elsewhere is summed without staging: each part tells every peer that its input is in place (flag channel `rank`
// at the peer), waits for the same word from every peer, reads every rank's input where it lies (rank order, fp32,
// rounded once: the bytes of the staged path), stores its result, and then tells every peer it has finished
// reading (channel n + rank) and waits for every peer's word — only then may a peer's caller overwrite its input.
// (n + 1) x S bytes per rank instead of (2n + 1) x S. The call carries its own algorithm id and its offset in its
// signature, so a rank staging and a rank reading in place, or two ranks at different offsets, fail the call with
// status::mismatch instead of reading the wrong bytes. An output inside the input (in == out) takes the staged path:
// a rank's result would overwrite an input its peers may still be reading.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../core/atomic.hpp"
#include "../core/clock.hpp"
#include "../protocol/flags.hpp"
#include "../protocol/layout.hpp"
#include "../reduce/lamport.hpp"
#include "../reduce/packet.hpp"
#include "../transport/concepts.hpp"
#include "concepts.hpp"
#include "partition.hpp"
#include "poison.hpp"

namespace rocenante::algorithm {

struct one_shot {
  static constexpr const char* name = "one_shot";
  static constexpr algo id = algo::one_shot;
  static constexpr bool supports_all_gather = true;
  template <class R>
  static constexpr bool supports = true;

  ROCENANTE_HOST_DEVICE static constexpr std::uint32_t channels(int n) { return n > 1 ? static_cast<std::uint32_t>(n) : 1u; }
  ROCENANTE_HOST_DEVICE static constexpr std::uint64_t slot_bytes(int n, std::uint64_t capacity) {
    return static_cast<std::uint64_t>(n) * protocol::align_up(capacity, packet_bytes);
  }
  ROCENANTE_HOST_DEVICE static constexpr std::uint32_t steps(int n) { return n > 1 ? 1u : 0u; }
  ROCENANTE_HOST_DEVICE static constexpr std::uint64_t wire_bytes(int n, std::uint64_t bytes) {
    return static_cast<std::uint64_t>(n - 1) * bytes;
  }

  /// Distance between two sources' regions in a slot, for a call of `count` elements: the call's packets rounded
  /// up to 256 bytes, at most the layout's source_stride (which is sized for capacity_bytes). A small call's
  /// sources then sit side by side in one or two pages instead of capacity_bytes apart, so the reduce touches one
  /// page of the window, not n. Every rank derives the same value from the count; a rank that called with
  /// another count writes elsewhere, but its flag carries a different signature and every peer fails the call
  /// before reading (protocol/flags.hpp).
  /// A proxy-mode layout leaves room for the call trailer after each source's packets ("Posting").
  template <reduce::reduction R>
  ROCENANTE_HOST_DEVICE static constexpr std::uint64_t source_stride(const protocol::window_layout& l, std::uint64_t count) {
    const std::uint64_t s = protocol::align_up(protocol::ceil_div(count, reduce::lanes<R>) * packet_bytes + l.trailer_bytes(), 256);
    return s < l.source_stride ? s : l.source_stride;
  }

  /// Whether handles of type Handle post whole calls (proxy mode: shared staging with post_call).
  template <class Handle>
  static constexpr bool posts_calls = Handle::shared_staging && requires(Handle& hh) {
    { hh.post_call(0u, 0u, std::uint64_t{0}, std::uint64_t{0}, std::uint64_t{0}, std::uint64_t{0}) } -> std::same_as<bool>;
    { hh.rails() } -> std::convertible_to<std::uint32_t>;
  };

  /// Whether a call of `bytes` bytes per rank is posted once ("Posting"): a proxy-mode handle and at most
  /// layout.call_post_max_bytes. Depends only on values every rank shares. Every part of such a call must run at
  /// the same time (the last to stage posts for all): the executors give it at most as many parts as CTAs (GPU)
  /// or one part (host executor).
  template <class Handle>
  ROCENANTE_HOST_DEVICE static constexpr bool posts_call(const protocol::window_layout& l, std::uint64_t bytes) {
    if constexpr (posts_calls<Handle>)
      return bytes <= l.call_post_max_bytes;
    else
      return false;
  }

  /// All-reduce part `s.part()` of `parts`. Every team thread of every rank calls, for every part.
  /// Result: out[i] = sum over q = 0..n-1 of in_q[i], summed in that order in fp32, rounded once; valid in
  /// `out` for this part's packets when the call returns true, identical bytes on every rank.
  /// Every path in one function: the host executor's, and the GPU kernel for calls the leaner ones below don't serve.
  template <reduce::reduction R, class Session, class Epilogue = no_epilogue>
  ROCENANTE_HOST_DEVICE static bool all_reduce(Session& s, const typename R::value_type* in,
                                               typename R::value_type* out, std::uint64_t count,
                                               std::uint32_t parts, const Epilogue& epi = {}) {
#if ROCENANTE_DEVICE_PASS
    switch (small_protocol_for<R, typename Session::handle_type>(s.handle().layout(), s.handle().ranks(), count, parts,
                                                                 s.team().size())) {
      case small_protocol::lamport: return all_reduce_small<R, small_protocol::lamport>(s, in, out, count, parts, epi);
      case small_protocol::ll: return all_reduce_small<R, small_protocol::ll>(s, in, out, count, parts, epi);
      case small_protocol::packets: break;
    }
    // At most one packet per thread in this part (decode-size messages): the decode-size code (the same bytes
    // and the same protocol, so parts and ranks may differ in which code runs a part).
    if (split(protocol::ceil_div(count, reduce::lanes<R>), parts, s.part()).size() <= static_cast<std::uint64_t>(s.team().size()))
      return all_reduce_small<R, small_protocol::packets>(s, in, out, count, parts, epi);
#endif
    if (!stage_and_exchange<R>(s, in, count, parts)) return false;
    s.trace(4);
    const range pr = split(protocol::ceil_div(count, reduce::lanes<R>), parts, s.part());
    reduce_bulk<R, false>(s, in, out, count, pr, is_plain_input<R>(in, count), epi);
    s.finish(parts);
    return true;
  }

  /// all_reduce with only its bulk loop, for calls whose every part holds more packets than the team has threads
  /// (same bytes). Why: without the other paths the kernel spills nothing (docs/results/h200-2026-12-04/s6b-2cbb7ed).
  /// Discard: drop each staged line from L2 once it is read (discard_read_lines), only for parts sized to be read
  /// from L2 (options::max_part_bytes): a line already written back costs the discard and saves nothing (s6b).
  template <reduce::reduction R, bool Discard, class Session, class Epilogue = no_epilogue>
  ROCENANTE_HOST_DEVICE static bool all_reduce_bulk(Session& s, const typename R::value_type* in,
                                                    typename R::value_type* out, std::uint64_t count,
                                                    std::uint32_t parts, const Epilogue& epi = {}) {
    if (!stage_and_exchange<R>(s, in, count, parts)) return false;
    const range pr = split(protocol::ceil_div(count, reduce::lanes<R>), parts, s.part());
    reduce_bulk<R, Discard>(s, in, out, count, pr, is_plain_input<R>(in, count), epi);
    s.finish(parts);
    return true;
  }

#if ROCENANTE_DEVICE_PASS
  /// One packet of sources 0..n-1 summed in rank order in fp32: source q's packet is `pick(q, raw)`, raw being the
  /// 16 bytes at `address_of(q)`. Sources are loaded together, one memory latency up to 8 ranks: every load of a
  /// group is issued before the first use of any, with no branch between them (a branch per source made the warp
  /// wait for each load in turn: s7b's phase trace). A slot past the last rank loads rank r's address instead: a
  /// valid address whose value is not used. Groups of 4 up to 4 ranks, else 8 (8-slot groups at 4 ranks doubled the
  /// loads: s10); a known rank count (transport::fixed_ranks): one group of exactly n sources up to 8 ranks.
  template <reduce::reduction R, class Handle, class AddressOf, class Pick>
  ROCENANTE_DEVICE ROCENANTE_FORCEINLINE static reduce::accum_packet<R> sum_sources_grouped(int n, int r, const AddressOf& address_of,
                                                                                           const Pick& pick) {
    reduce::accum_packet<R> acc{};
    auto sum_groups = [&](auto group_size) {
      constexpr int group = decltype(group_size)::value;
      ROCENANTE_UNROLL
      for (int q0 = 0; q0 < max_ranks; q0 += group) {
        if (q0 >= n) break;
        uint4 raw[group];
        ROCENANTE_UNROLL
        for (int g = 0; g < group; ++g) raw[g] = reduce::load_raw_issue(address_of(q0 + g < n ? q0 + g : r));
        // No branch here either (a `break` at the last rank let the compiler sink each load behind it): every slot
        // of the group is summed and the sum kept only for real sources (a select, so the bytes are those of summing
        // ranks 0..n-1 in order).
        ROCENANTE_UNROLL
        for (int g = 0; g < group; ++g) {
          const uint4 w = pick(q0 + g, raw[g]);
          const reduce::value_packet<R> x = *reinterpret_cast<const reduce::value_packet<R>*>(&w);
          if (q0 + g == 0) {
            acc = reduce::widen<R>(x);
          } else {
            reduce::accum_packet<R> t = acc;
            reduce::accumulate<R>(t, x);
            if (q0 + g < n) acc = t;
          }
        }
      }
    };
    constexpr int fixed = transport::fixed_ranks_of<Handle>();
    if constexpr (fixed > 0)
      sum_groups(std::integral_constant<int, (fixed < 8 ? fixed : 8)>{});
    else if (n <= 4)
      sum_groups(std::integral_constant<int, 4>{});
    else
      sum_groups(std::integral_constant<int, 8>{});
    return acc;
  }
#endif

  /// all_reduce with only its decode-size code, for calls whose every part holds at most as many packets as the team
  /// has threads (same bytes; P: the caller chose small_protocol_for, every rank alike). Why: no staging or bulk loop,
  /// the own packet kept in registers from load to sum (docs/results/h200-2026-12-04).
#if ROCENANTE_DEVICE_PASS
  /// Gate: called by every team thread between the plan and the first read of the input (algorithm::no_gate).
  template <reduce::reduction R, small_protocol P, class Session, class Epilogue = no_epilogue, class Gate = no_gate>
  ROCENANTE_DEVICE static bool all_reduce_small(Session& s, const typename R::value_type* in,
                                                typename R::value_type* out, std::uint64_t count,
                                                std::uint32_t parts, const Epilogue& epi = {}, const Gate& gate = {}) {
    using handle_t = typename Session::handle_type;
    if constexpr (P == small_protocol::ll) {
      if constexpr (has_ll<handle_t>) return all_reduce_ll<R>(s, in, out, count, parts, epi, gate);
      gate();
      return false;
    } else if constexpr (P == small_protocol::lamport) {
      if constexpr (has_lamport<handle_t> && lamport_serves<R> && transport::fixed_ranks_of<handle_t>() <= lamport_max_ranks)
        return all_reduce_lamport<R>(s, in, out, count, parts, epi, gate);
      gate();
      return false;
    }
    auto& team = s.team();
    auto& h = s.handle();
    const int n = h.ranks(), r = h.rank();
    const std::uint64_t stride = detail::held(source_stride<R>(h.layout(), count));
    const range pr = split(protocol::ceil_div(count, reduce::lanes<R>), parts, s.part());
    const std::uint64_t base = r * stride;
    const std::uint64_t i = pr.begin + team.thread();
    const bool mine = i < pr.end;
    gate();
    s.started();
    reduce::value_packet<R> own{};
    // A plain input (16-byte aligned, whole packets: one answer for the whole call) is one 16-byte load issued before
    // enter(), whose epoch and poison loads then go out while it is in flight; through load_user's branch the
    // fixed-rank kernels waited for the input first (design.md §1.4; s11-0c4216e). Any other input after enter().
    const bool plain = is_plain_input<R>(in, count);
    if (mine && plain) own = reduce::load_packet_issue<R>(in + i * reduce::lanes<R>);
    if (!s.enter()) return false;
    if (mine && !plain) own = reduce::load_user<R>(in, i, count);
    s.trace(0);
    s.trace(1);
    if (mine) put_packet<R>(s, base + i * packet_bytes, own);
    // This thread's packet in source 0 of this slot; source q is q * stride further.
    const std::byte* const src0 = detail::held(h.recv_ptr(s.slot(), i * packet_bytes));
    team.sync();
    if (!signal_and_wait(s, stride, pr, protocol::ceil_div(count, reduce::lanes<R>), parts,
                         posts_call<typename Session::handle_type>(h.layout(), count * sizeof(typename R::value_type))))
      return false;
    s.trace(4);
    if (mine) {
      // Every source's packet loaded together (sum_sources_grouped); this rank's own is the one kept in registers.
      const uint4 own_raw = *reinterpret_cast<const uint4*>(&own);
      reduce::accum_packet<R> acc = sum_sources_grouped<R, typename Session::handle_type>(
          n, r, [&](int q) { return src0 + q * stride; }, [&](int q, const uint4& raw) { return q == r ? own_raw : raw; });
      store_result<R>(out, i, count, acc, epi);
    }
    finish_traced(s, parts);
    return true;
  }
#endif

  /// Stage one packet at offset `off` of this rank's source region: into every peer's slot (directly written
  /// windows), or once into this rank's staging area (shared staging: the proxy or NIC copies it to the peers).
  template <reduce::reduction R, class Session>
  ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE static void put_packet(Session& s, std::uint64_t off, const reduce::value_packet<R>& v) {
    auto& h = s.handle();
    const int n = h.ranks(), r = h.rank();
    if constexpr (Session::handle_type::shared_staging) {
      if (n > 1) reduce::store_packet<R>(h.put_ptr(r, s.slot(), off), v);
    } else if constexpr (transport::fixed_ranks_of<typename Session::handle_type>() > 0) {
      ROCENANTE_UNROLL  // a known rank count (transport::fixed_ranks): one store per peer, no loop
      for (int q = 0; q < n; ++q)
        if (q != r) reduce::store_packet<R>(h.put_ptr(q, s.slot(), off), v);
    } else {
#if ROCENANTE_DEVICE_PASS
#pragma unroll 1  // a loop, not n-1 copies: a shorter hot path in the instruction cache (docs/performance.md)
#endif
      for (int q = 0; q < n; ++q)
        if (q != r) reduce::store_packet<R>(h.put_ptr(q, s.slot(), off), v);
    }
  }

  /// A 16-byte aligned input of whole packets (one answer for the whole call): the reduce reads it like a source
  /// region, one plain load per packet.
  template <reduce::reduction R>
  ROCENANTE_HOST_DEVICE static bool is_plain_input(const typename R::value_type* in, std::uint64_t count) {
    return reduce::detail::aligned16(in) && count % reduce::lanes<R> == 0;
  }

  /// The reduce of part `pr` when its packets outnumber the team's threads: each thread sums packets
  /// i0, i0 + team, ... in rank order (fp32), several packets and sources in flight at once.
  template <reduce::reduction R, bool Discard, class Session, class Epilogue>
  ROCENANTE_HOST_DEVICE static void reduce_bulk(Session& s, const typename R::value_type* in, typename R::value_type* out,
                                                std::uint64_t count, const range& pr, bool plain_input, const Epilogue& epi) {
    reduce_sources<R, Discard>(s, in, count, [&](const protocol::window_layout& l) { return source_stride<R>(l, count); },
                               pr, plain_input,
                               [&](std::uint64_t i, reduce::accum_packet<R>& acc) { store_result<R>(out, i, count, acc, epi); });
  }

  /// reduce_bulk's loop over any window whose source q holds packet i at q * stride + i * 16 of the slot, stride =
  /// stride_of(layout) (the own source read from `in`): emit(i, acc) receives the rank-order fp32 sum of packet i of
  /// part `pr`, once per packet.
  /// two_shot's owner reduce runs it with its own stride and an emit that also stages the result for its peers.
  /// Unroll: packets per thread in flight per source (reduce_unroll; two_shot's kernel, which holds more around
  /// this loop, takes 1 so that it spills nothing).
  template <reduce::reduction R, bool Discard, int Unroll = reduce_unroll, class Session, class StrideOf, class Emit>
  ROCENANTE_HOST_DEVICE static void reduce_sources(Session& s, const typename R::value_type* in, std::uint64_t count,
                                                   const StrideOf& stride_of, const range& pr, bool plain_input,
                                                   const Emit& emit) {
    auto& team = s.team();
    auto& h = s.handle();
    const int n = h.ranks(), r = h.rank();
    const std::uint64_t stride = stride_of(h.layout());
    const std::uint64_t step = static_cast<std::uint64_t>(team.size());
    for (std::uint64_t i0 = pr.begin + team.thread(); i0 < pr.end; i0 += Unroll * step) {
      reduce::accum_packet<R> acc[Unroll] = {};
      // Sources in groups: every load of a group is issued before the first add, so a thread keeps
      // source_group x Unroll packets in flight (one memory latency per group, not per source).
      for (int q0 = 0; q0 < n; q0 += source_group) {
        reduce::value_packet<R> v[source_group][Unroll] = {};
        if (plain_input) {  // as in the small path: every load of the group issued back to back
          ROCENANTE_UNROLL
          for (int g = 0; g < source_group; ++g) {
            const int q = q0 + g;
            const std::byte* base = q == r ? reinterpret_cast<const std::byte*>(in) : h.recv_ptr(s.slot(), q * stride);
            ROCENANTE_UNROLL
            for (int u = 0; u < Unroll; ++u) {
              const std::uint64_t i = i0 + u * step;
              if (q < n && i < pr.end) v[g][u] = reduce::load_packet_issue<R>(base + i * packet_bytes);
            }
          }
        } else {
          ROCENANTE_UNROLL
          for (int g = 0; g < source_group; ++g) {
            const int q = q0 + g;
            ROCENANTE_UNROLL
            for (int u = 0; u < Unroll; ++u) {
              const std::uint64_t i = i0 + u * step;
              if (q < n && i < pr.end)
                v[g][u] = q == r ? reduce::load_user<R>(in, i, count)
                                 : reduce::load_packet<R>(h.recv_ptr(s.slot(), q * stride + i * packet_bytes));
            }
          }
        }
        ROCENANTE_UNROLL
        for (int g = 0; g < source_group; ++g) {
          if (q0 + g >= n) break;
          ROCENANTE_UNROLL
          for (int u = 0; u < Unroll; ++u) {
            if (q0 + g == 0)
              acc[u] = reduce::widen<R>(v[g][u]);
            else
              reduce::accumulate<R>(acc[u], v[g][u]);
          }
        }
      }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
      if constexpr (Discard) discard_read_lines<R>(s, n, r, stride, pr, i0, step);
#endif
      ROCENANTE_UNROLL
      for (int u = 0; u < Unroll; ++u) {
        const std::uint64_t i = i0 + u * step;
        if (i >= pr.end) continue;
        emit(i, acc[u]);
      }
    }
  }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  /// Once a warp has read a whole 128-byte line of a peer's staged data, drop it from L2 without writing it back
  /// (PTX discard.global.L2: a weak write of an indeterminate value). It is ordered before the peer's next write
  /// into this slot exactly as the reads are (kernel end, then this rank's flag of the next collective, which the
  /// peer acquires before it stages into this slot again). Only lines inside this part (a line shared with the
  /// next part may not have been read yet), only when the part starts on a line (then the 8 packets of a line
  /// belong to 8 lanes of one warp, which __syncwarp orders), only in iterations where all 32 lanes of the warp
  /// are in the loop (the tail skips it), never in host-mapped windows. Needs team threads in hardware lane order
  /// (team thread t = threadIdx.x, as kernel::all_reduce passes them).
  template <reduce::reduction R, class Session>
  ROCENANTE_DEVICE static void discard_read_lines(Session& s, int n, int r, std::uint64_t stride, const range& pr,
                                                  std::uint64_t i0, std::uint64_t step) {
    if constexpr (Session::handle_type::shared_staging) return;  // host-mapped windows: not ours to drop
    if (pr.begin % 8 != 0 || step % 32 != 0) return;
    if (i0 - static_cast<std::uint64_t>(s.team().thread() & 31) + 32 > pr.end) return;  // the same for the warp's lanes
    __syncwarp();
    auto& h = s.handle();
    ROCENANTE_UNROLL
    for (int u = 0; u < reduce_unroll; ++u) {
      const std::uint64_t i = i0 + u * step;
      if (i % 8 != 0 || i + 8 > pr.end) continue;
      for (int q = 0; q < n; ++q)
        if (q != r) {
          const std::byte* p = h.recv_ptr(s.slot(), q * stride + i * packet_bytes);
          asm volatile("discard.global.L2 [%0], 128;" ::"l"(p) : "memory");
        }
    }
  }
#endif

  /// All-gather part `s.part()` of `parts`: out[q*count + i] = in_q[i] for every rank q, identical on every rank.
  template <reduce::reduction R, class Session>
  ROCENANTE_HOST_DEVICE static bool all_gather(Session& s, const typename R::value_type* in,
                                               typename R::value_type* out, std::uint64_t count,
                                               std::uint32_t parts) {
    if (!stage_and_exchange<R>(s, in, count, parts)) return false;
    auto& team = s.team();
    auto& h = s.handle();
    const int n = h.ranks(), r = h.rank();
    const std::uint64_t stride = source_stride<R>(h.layout(), count);
    const range pr = split(protocol::ceil_div(count, reduce::lanes<R>), parts, s.part());
    const std::uint64_t step = static_cast<std::uint64_t>(team.size());
    for (int q = 0; q < n; ++q) {
      for (std::uint64_t i0 = pr.begin + team.thread(); i0 < pr.end; i0 += unroll * step) {
        reduce::value_packet<R> v[unroll] = {};
        ROCENANTE_UNROLL
        for (int u = 0; u < unroll; ++u) {
          const std::uint64_t i = i0 + u * step;
          if (i < pr.end)
            v[u] = q == r ? reduce::load_user<R>(in, i, count)
                          : reduce::load_packet<R>(h.recv_ptr(s.slot(), q * stride + i * packet_bytes));
        }
        ROCENANTE_UNROLL
        for (int u = 0; u < unroll; ++u)
          if (i0 + u * step < pr.end) reduce::store_user<R>(out + q * count, i0 + u * step, count, v[u]);
      }
    }
    s.finish(parts);
    return true;
  }

  /// The failure path of part `part` of `parts` (a wait failed, or the call returned at entry on a poisoned rank):
  /// every team thread calls; the part's own elements of `out` get the poison value (all-gather: its elements of
  /// every rank's block of out). Parts that completed keep their result.
  template <reduce::reduction R, class Team>
  ROCENANTE_HOST_DEVICE ROCENANTE_COLD static void poison_part(Team& team, typename R::value_type* out, std::uint64_t count,
                                                              std::uint32_t part, std::uint32_t parts, int ranks,
                                                              protocol::collective c) {
    const range pr = split(protocol::ceil_div(count, reduce::lanes<R>), parts, part);
    const std::uint64_t first = pr.begin * reduce::lanes<R>, last = pr.end * reduce::lanes<R> < count ? pr.end * reduce::lanes<R> : count;
    const int blocks = c == protocol::collective::all_gather ? ranks : 1;
    for (int q = 0; q < blocks; ++q)
      fill_poison(out + q * count, first, last, static_cast<std::uint64_t>(team.thread()), static_cast<std::uint64_t>(team.size()));
  }

  /// Whether a transport handle has an LL area (directly written windows).
  template <class Handle>
  static constexpr bool has_ll = requires(Handle& hh) { hh.ll_recv_ptr(0u, std::uint64_t{0}); };

  /// Whether a call takes the LL path (GPU, directly written windows, at most ll_max_ranks ranks: config.hpp has
  /// the measurements): the input fits the layout's LL area and every thread of a part carries at most one packet.
  /// Depends only on values every rank shares (the layout, the count, the parts, the team size), never on a
  /// pointer, so every rank takes the same path.
  template <reduce::reduction R>
  ROCENANTE_HOST_DEVICE static constexpr bool uses_ll(const protocol::window_layout& l, int n, std::uint64_t count,
                                                      std::uint32_t parts, int team_size) {
    const std::uint64_t packets = protocol::ceil_div(count, reduce::lanes<R>);
    return n > 1 && n <= ll_max_ranks && l.ll_bytes != 0 && count * sizeof(typename R::value_type) <= ll_max_bytes &&
           2 * source_stride<R>(l, count) * static_cast<std::uint64_t>(n) <= l.ll_bytes &&
           protocol::ceil_div(packets, parts) <= static_cast<std::uint64_t>(team_size);
  }

  /// Whether a transport handle has a Lamport area (directly written windows).
  template <class Handle>
  static constexpr bool has_lamport = requires(Handle& hh) { hh.lamport_recv_ptr(0u, std::uint64_t{0}); };

  /// Reductions the Lamport path serves: the fp32-accumulated sums of 2- and 4-byte floats, where every all-ones
  /// element is a NaN and a NaN input gives the canonical NaN whatever its payload ("Lamport path").
  template <reduce::reduction R>
  static constexpr bool lamport_serves = R::op_id == reduce::reduce_op::sum && !R::block_scaled &&
                                         (R::dtype_id == dtype::f32 || R::dtype_id == dtype::f16 ||
                                          R::dtype_id == dtype::bf16) &&
                                         (sizeof(typename R::value_type) == 2 || sizeof(typename R::value_type) == 4);

  /// Whether a call takes the Lamport path: a reduction it serves, 2..lamport_max_ranks ranks, a layout with a
  /// Lamport area (options::lamport_max_bytes), the input within it, every thread of a part carrying at most one
  /// packet. Values every rank shares only, like uses_ll.
  template <reduce::reduction R>
  ROCENANTE_HOST_DEVICE static constexpr bool uses_lamport(const protocol::window_layout& l, int n, std::uint64_t count,
                                                           std::uint32_t parts, int team_size) {
    if constexpr (!lamport_serves<R>) {
      return false;
    } else {
      const std::uint64_t packets = protocol::ceil_div(count, reduce::lanes<R>);
      return n > 1 && n <= lamport_max_ranks && l.lamport_bytes != 0 &&
             count * sizeof(typename R::value_type) <= l.lamport_max_bytes &&
             source_stride<R>(l, count) * static_cast<std::uint64_t>(n) <= l.lamport_bytes &&
             protocol::ceil_div(packets, parts) <= static_cast<std::uint64_t>(team_size);
    }
  }

  /// The decode-size protocol of a call over handles of type Handle (the Lamport path where it serves, else LL,
  /// else packets): what all_reduce runs and what a kernel launching all_reduce_small must pass.
  template <reduce::reduction R, class Handle>
  ROCENANTE_HOST_DEVICE static constexpr small_protocol small_protocol_for(const protocol::window_layout& l, int n,
                                                                          std::uint64_t count, std::uint32_t parts,
                                                                          int team_size) {
    if constexpr (has_lamport<Handle>)
      if (uses_lamport<R>(l, n, count, parts, team_size)) return small_protocol::lamport;
    if constexpr (has_ll<Handle>)
      if (uses_ll<R>(l, n, count, parts, team_size)) return small_protocol::ll;
    return small_protocol::packets;
  }

  /// In-place path ("In-place path" above): the algorithm id its calls carry in their signature.
  static constexpr algo inplace_id = static_cast<algo>(6);
  /// What inplace_offset answers for a call the in-place path does not serve.
  static constexpr std::uint64_t no_inplace = ~std::uint64_t{0};

  /// Whether handles of type Handle let a rank read its peers' symmetric input areas in place.
  template <class Handle>
  static constexpr bool has_inplace = !Handle::shared_staging && requires(const Handle& hh) {
    { hh.input_ptr(0, std::uint64_t{0}) } -> std::same_as<const std::byte*>;
  };

  /// The offset of `in` in this rank's symmetric input area when an all-reduce of `count` elements from `in` into
  /// `out` takes the in-place path, else no_inplace: a handle that can read in place, an area, a 16-byte aligned
  /// offset, the input's whole packets inside the area, and an output that does not overlap the input. Judged on
  /// each rank from its own pointers; ranks that judge differently fail the call with status::mismatch (the
  /// signature, inplace_signature, differs).
  template <reduce::reduction R, class Handle>
  static std::uint64_t inplace_offset(const Handle& h, const typename R::value_type* in, const typename R::value_type* out,
                                      std::uint64_t count) {
    if constexpr (!has_inplace<Handle>) {
      return no_inplace;
    } else {
      const std::uint64_t area = h.layout().input_bytes;
      if (area == 0 || count == 0 || h.ranks() < 2) return no_inplace;
      const auto base = reinterpret_cast<std::uintptr_t>(h.input_ptr(h.rank(), 0));
      const auto at = reinterpret_cast<std::uintptr_t>(in);
      const std::uint64_t bytes = count * sizeof(typename R::value_type);
      const std::uint64_t span = protocol::ceil_div(count, reduce::lanes<R>) * packet_bytes;
      if (at < base || at - base > area || span > area - (at - base) || (at - base) % packet_bytes != 0) return no_inplace;
      const auto o = reinterpret_cast<std::uintptr_t>(out);
      if (o < at + bytes && at < o + bytes) return no_inplace;  // in == out, or overlapping: staged
      return at - base;
    }
  }

  /// The signature of an in-place call of algorithm id `a`: that id (each algorithm's in-place path has its own), and
  /// the offset mixed into the count's bits (two ranks at different offsets differ unless their offsets differ by a
  /// multiple of 2^21 packets and the mix of the upper bits collides: probability 2^-21).
  ROCENANTE_HOST_DEVICE static constexpr std::uint32_t inplace_call_signature(algo a, std::uint32_t dtype_id, std::uint32_t op_id,
                                                                              std::uint64_t count, std::uint64_t off) {
    return protocol::call_signature(protocol::collective::all_reduce, static_cast<std::uint32_t>(a), dtype_id, op_id,
                                    count ^ (off / packet_bytes * 0x9e3779b97f4a7c15ull));
  }
  ROCENANTE_HOST_DEVICE static constexpr std::uint32_t inplace_signature(std::uint32_t dtype_id, std::uint32_t op_id,
                                                                         std::uint64_t count, std::uint64_t off) {
    return inplace_call_signature(inplace_id, dtype_id, op_id, count, off);
  }

  /// Packet `i` of every rank's input at offset `off` of its symmetric input area, summed in rank order in fp32 (the
  /// in-place paths; any packet, the last one's lanes past `count` read as zero).
  template <reduce::reduction R, class Handle>
  ROCENANTE_HOST_DEVICE static reduce::accum_packet<R> sum_in_place(const Handle& h, std::uint64_t off, std::uint64_t i,
                                                                    std::uint64_t count) {
    using T = typename R::value_type;
    reduce::accum_packet<R> acc = reduce::widen<R>(reduce::load_user<R>(reinterpret_cast<const T*>(h.input_ptr(0, off)), i, count));
    for (int q = 1; q < h.ranks(); ++q)
      reduce::accumulate<R>(acc, reduce::load_user<R>(reinterpret_cast<const T*>(h.input_ptr(q, off)), i, count));
    return acc;
  }

  /// All-reduce part `s.part()` of `parts` on the in-place path ("In-place path"): every rank's input at offset `off`
  /// of its symmetric input area (inplace_offset), read where it lies. The session must carry inplace_signature.
  /// Same result bytes as all_reduce, on every rank.
  template <reduce::reduction R, class Session, class Epilogue = no_epilogue>
  ROCENANTE_HOST_DEVICE static bool all_reduce_inplace(Session& s, typename R::value_type* out, std::uint64_t count,
                                                       std::uint32_t parts, std::uint64_t off, const Epilogue& epi = {}) {
    using handle_t = typename Session::handle_type;
    if constexpr (!has_inplace<handle_t>) {
      return false;
    } else {
      auto& team = s.team();
      auto& h = s.handle();
      const int n = h.ranks(), r = h.rank();
      const range pr = split(protocol::ceil_div(count, reduce::lanes<R>), parts, s.part());
      if (!s.enter()) return false;
      // Start: this rank's input is in place (its writers came before this call in stream or program order).
      for (int q = team.thread(); q < n; q += team.size())
        if (q != r) (void)s.signal(q, static_cast<std::uint32_t>(r), 0, 0);
      if (!s.wait_peers(n, r, [](int q) { return static_cast<std::uint32_t>(q); })) return false;
      s.trace(4);
      const std::uint64_t step = static_cast<std::uint64_t>(team.size());
      for (std::uint64_t i = pr.begin + team.thread(); i < pr.end; i += step) {
        reduce::accum_packet<R> acc{};
#if ROCENANTE_DEVICE_PASS
        if ((i + 1) * reduce::lanes<R> <= count) {
          // Whole packet: every source's load issued before the first use (one memory latency per group).
          acc = sum_sources_grouped<R, handle_t>(
              n, r, [&](int q) { return h.input_ptr(q, off + i * packet_bytes); }, [](int, const uint4& raw) { return raw; });
          store_result<R>(out, i, count, acc, epi);
          continue;
        }
#endif
        acc = sum_in_place<R>(h, off, i, count);
        store_result<R>(out, i, count, acc, epi);
      }
      // End: every thread of this part has read what it needed of every input.
      team.sync();
      for (int q = team.thread(); q < n; q += team.size())
        if (q != r) (void)s.signal(q, static_cast<std::uint32_t>(n + r), 0, 0);
      if (!s.wait_peers(n, r, [n](int q) { return static_cast<std::uint32_t>(n + q); })) return false;
      s.finish(parts);
      return true;
    }
  }

 private:
#if ROCENANTE_DEVICE_PASS
  /// session::finish between the trace points 5 and 6 that the decode-size paths record (ROCENANTE_TRACE_PHASES).
  template <class Session>
  ROCENANTE_DEVICE static ROCENANTE_FORCEINLINE void finish_traced(Session& s, std::uint32_t parts) {
    s.trace(5);
    s.finish(parts);
    s.trace(6);
  }

  /// One LL line: 8 payload bytes, each 4-byte word followed by the call's flag — two 8-byte {data, flag} words,
  /// stored and loaded as the two 64-bit elements of one 16-byte access. Each element is an aligned 64-bit access,
  /// so its data and flag arrive together (the memory model's single-copy atomicity of an aligned 8-byte access;
  /// nothing is assumed about the two halves' order). Returned as {data0, flag, data1, flag} words.
  ROCENANTE_DEVICE static ROCENANTE_FORCEINLINE void ll_store(std::byte* p, std::uint32_t a, std::uint32_t b, std::uint32_t f) {
    const std::uint64_t lo = (std::uint64_t{f} << 32) | a, hi = (std::uint64_t{f} << 32) | b;
    asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(lo), "l"(hi) : "memory");
  }
  ROCENANTE_DEVICE static ROCENANTE_FORCEINLINE uint4 ll_load(const std::byte* p) {
    std::uint64_t lo, hi;
    asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(lo), "=l"(hi) : "l"(p) : "memory");
    return make_uint4(static_cast<std::uint32_t>(lo), static_cast<std::uint32_t>(lo >> 32), static_cast<std::uint32_t>(hi),
                      static_cast<std::uint32_t>(hi >> 32));
  }

  /// One-shot all-reduce in LL lines (decode-size messages on GPUs whose ranks store into each other's windows):
  ///
  ///   each thread: load its packet of `in` | enter | store it as two LL lines into source `rank` of every peer's
  ///   LL area (no barrier, no fence, no flag) | poll the lines of every source (the flag is inside the data) |
  ///   clear the lines it read | sum in rank order | team verdict | epilogue and store | finish
  ///
  /// Same bytes as the packet path: fp32 accumulation in rank order, rounded once. Bounded like every wait
  /// (session::inline_wait_check: time, polls, poison, abort flags from peers, mismatches). Two slots suffice for
  /// the same reason as in the packet path; a line is cleared by its reader before the reader's next collective
  /// can let the writer reach this slot again, so a line is only ever zero or this call's.
  template <reduce::reduction R, class Session, class Epilogue, class Gate = no_gate>
  ROCENANTE_DEVICE static bool all_reduce_ll(Session& s, const typename R::value_type* in, typename R::value_type* out,
                                             std::uint64_t count, std::uint32_t parts, const Epilogue& epi,
                                             const Gate& gate = {}) {
    auto& team = s.team();
    auto& h = s.handle();
    const int n = h.ranks(), r = h.rank();
    const std::uint64_t stride = 2 * source_stride<R>(h.layout(), count);  // LL bytes per source
    const range pr = split(protocol::ceil_div(count, reduce::lanes<R>), parts, s.part());
    const std::uint64_t i = pr.begin + team.thread();
    const bool mine = i < pr.end;
    gate();
    s.started();
    reduce::value_packet<R> own{};
    if (mine) own = reduce::load_user<R>(in, i, count);  // before enter: needs no sequence number
    if (!s.enter()) return false;
    s.trace(0);
    s.trace(1);
    const std::uint32_t f = s.inline_flag();
    const std::uint32_t slot = s.slot();
    const uint4 w = *reinterpret_cast<const uint4*>(&own);
    if (mine)
      for (int q = 0; q < n; ++q) {
        if (q == r) continue;
        std::byte* p = h.ll_put_ptr(q, slot, r * stride + i * 2 * packet_bytes);
        ll_store(p, w.x, w.y, f);
        ll_store(p + packet_bytes, w.z, w.w, f);
      }
    // This call's LL flag word (protocol::ll_word_signature), relaxed (nothing is ordered by it), into this rank's
    // channel of this part at every peer, where the packet path's signal writes its flag. Flag words therefore
    // never hold a word 2^32 calls old, and a peer that took the other path at this sequence (another count or
    // collective) sees a word of this sequence with another signature at once: a mismatch on both sides, not a
    // timeout.
    for (int q = team.thread(); q < n; q += team.size())
      if (q != r)
        detail::store_relaxed(h.peer_flag(q, h.layout().flag_index(slot, s.part(), static_cast<std::uint32_t>(r))),
                              s.ll_flag_word());
    s.trace(2);
    s.trace(3);
    bool ok = true;
    // A rank that starts after its peers gave up on it finds their lines complete; their abort flag (written into
    // every channel of this slot and part) says the call is over. Thread 0 reads it while the first poll is in
    // flight and acts on it after the lines (a relaxed load: no ordering the polls would wait for).
    const std::uint32_t abort_channel = static_cast<std::uint32_t>((r + 1) % n);
    std::uint64_t abort_word = protocol::flag_unset;
    if (team.thread() == 0) {
      const std::uint64_t* fw = h.local_flag(h.layout().flag_index(slot, s.part(), abort_channel));
      asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(abort_word) : "l"(fw) : "memory");
    }
    reduce::accum_packet<R> acc{};
    if (mine) {
      // Sources polled together: one memory latency per poll up to 8 ranks. The LL path serves at most
      // ll_max_ranks ranks (uses_ll), so no more registers are kept for polls than that.
      constexpr int group = ll_max_ranks < 1 ? 1 : (ll_max_ranks < 8 ? ll_max_ranks : 8);
      ROCENANTE_UNROLL
      for (int q0 = 0; q0 < ll_max_ranks; q0 += group) {
        if (q0 >= n || !ok) break;
        uint4 a[group], b[group];
        std::uint32_t pending = 0;
        ROCENANTE_UNROLL
        for (int g = 0; g < group; ++g)
          if (q0 + g < n && q0 + g != r) pending |= 1u << g;
        const std::uint64_t start = rocenante::detail::now_ns();
        std::uint64_t polls = 0;
        while (pending) {
          // Every line of the group loaded on every poll, with no branch between the loads, so that one poll
          // costs one memory latency however many sources are pending (a slot past the last rank, or this
          // rank's own, loads a line of source q0: a valid address whose value is not used).
          ROCENANTE_UNROLL
          for (int g = 0; g < group; ++g) {
            const std::byte* p = h.ll_recv_ptr(slot, (q0 + g < n ? q0 + g : q0) * stride + i * 2 * packet_bytes);
            a[g] = ll_load(p);
            b[g] = ll_load(p + packet_bytes);
          }
          int late = -1;
          std::uint32_t other = 0;
          ROCENANTE_UNROLL
          for (int g = 0; g < group; ++g)
            if (pending >> g & 1u) {
              if (a[g].y == f && a[g].w == f && b[g].y == f && b[g].w == f) {
                pending &= ~(1u << g);
              } else if (late < 0) {
                late = q0 + g;
                const std::uint32_t fl[4] = {a[g].y, a[g].w, b[g].y, b[g].w};
                for (int k = 0; k < 4; ++k)
                  if (fl[k] != 0 && fl[k] != f) other = fl[k];
              }
            }
          if (late >= 0 && !s.inline_wait_check(late, static_cast<std::uint32_t>(late), other, start, polls)) {
            ok = false;
            break;
          }
        }
        if (!ok) break;
        ROCENANTE_UNROLL
        for (int g = 0; g < group; ++g) {
          const int q = q0 + g;
          if (q >= n) break;
          reduce::value_packet<R> v = own;
          if (q != r) {
            const uint4 u = make_uint4(a[g].x, a[g].z, b[g].x, b[g].z);
            v = *reinterpret_cast<const reduce::value_packet<R>*>(&u);
            std::byte* p = h.ll_recv_ptr(slot, q * stride + i * 2 * packet_bytes);
            ll_store(p, 0, 0, 0);  // consumed: the line is zero again until this slot's next call
            ll_store(p + packet_bytes, 0, 0, 0);
          }
          if (q == 0)
            acc = reduce::widen<R>(v);
          else
            reduce::accumulate<R>(acc, v);
        }
      }
    }
    if (team.thread() == 0 && ok) ok = s.accept_abort_word(abort_channel, abort_word);
    s.trace(4);
    if (!s.agree(ok)) return false;
    if (mine) store_result<R>(out, i, count, acc, epi);
    finish_traced(s, parts);
    return true;
  }

  /// One-shot all-reduce in Lamport packets (decode-size messages on GPUs whose ranks store into each other's
  /// windows; "Lamport path" at the top of this file):
  ///
  ///   each thread: load its packet of `in` | enter | store it (no all-ones element) into source `rank` of every
  ///   peer's Lamport area, and this part's flag word into channel `rank` of every peer (no fence, no barrier) |
  ///   poll the packet of every source until none of its elements is all ones, and (threads 0..n-1) peer t's flag
  ///   word until it is this call's | write all ones over what it read | sum in rank order | team verdict |
  ///   epilogue and store | finish
  ///
  /// Same bytes as the packet path: fp32 accumulation in rank order, rounded once (the own packet enters the sum as
  /// it was sent, so every rank sums the same values). Bounded like every wait (session::inline_wait_check: time,
  /// polls, poison, abort flags from peers, a flag word of another call).
  template <reduce::reduction R, class Session, class Epilogue, class Gate = no_gate>
  ROCENANTE_DEVICE static bool all_reduce_lamport(Session& s, const typename R::value_type* in, typename R::value_type* out,
                                                  std::uint64_t count, std::uint32_t parts, const Epilogue& epi,
                                                  const Gate& gate = {}) {
    auto& team = s.team();
    auto& h = s.handle();
    const int n = h.ranks(), r = h.rank();
    const std::uint64_t stride = detail::held(source_stride<R>(h.layout(), count));
    const range pr = split(protocol::ceil_div(count, reduce::lanes<R>), parts, s.part());
    const std::uint64_t i = pr.begin + team.thread();
    const bool mine = i < pr.end;
    gate();
    s.started();
    reduce::value_packet<R> own{};
    const bool plain = is_plain_input<R>(in, count);
    if (mine && plain) own = reduce::load_packet_issue<R>(in + i * reduce::lanes<R>);
    if (!s.enter()) return false;
    if (mine && !plain) own = reduce::load_user<R>(in, i, count);
    s.trace(0);
    s.trace(1);
    const std::uint32_t slot = s.slot();
    const std::uint64_t word = s.ll_flag_word();
    uint4 sent = *reinterpret_cast<const uint4*>(&own);
    sent = make_uint4(reduce::lamport::word<R>(sent.x), reduce::lamport::word<R>(sent.y), reduce::lamport::word<R>(sent.z), reduce::lamport::word<R>(sent.w));
    if (mine) {
      if constexpr (transport::fixed_ranks_of<typename Session::handle_type>() > 0) {
        ROCENANTE_UNROLL
        for (int q = 0; q < n; ++q)
          if (q != r) reduce::lamport::store(h.lamport_put_ptr(q, slot, r * stride + i * packet_bytes), sent);
      } else {
#pragma unroll 1
        for (int q = 0; q < n; ++q)
          if (q != r) reduce::lamport::store(h.lamport_put_ptr(q, slot, r * stride + i * packet_bytes), sent);
      }
    }
    // This call's flag word into this rank's channel of this part at every peer (as the LL path writes it): the
    // reader's check that the packets it polls come from this call.
    for (int q = team.thread(); q < n; q += team.size())
      if (q != r) detail::store_relaxed(h.peer_flag(q, h.layout().flag_index(slot, s.part(), static_cast<std::uint32_t>(r))), word);
    s.trace(2);
    s.trace(3);
    // As in the LL path: a rank that starts after its peers gave up on it finds their abort flag in every channel.
    const std::uint32_t abort_channel = static_cast<std::uint32_t>((r + 1) % n);
    std::uint64_t abort_word = protocol::flag_unset;
    if (team.thread() == 0) {
      const std::uint64_t* fw = h.local_flag(h.layout().flag_index(slot, s.part(), abort_channel));
      asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(abort_word) : "l"(fw) : "memory");
    }
    // Thread t < n (t != rank) also checks peer t's flag word of this part.
    const int t = team.thread();
    bool flag_pending = t < n && t != r;
    const std::uint64_t* my_flag = h.local_flag(h.layout().flag_index(slot, s.part(), static_cast<std::uint32_t>(t < n ? t : 0)));
    bool ok = true;
    reduce::accum_packet<R> acc{};
    auto poll_and_sum = [&](auto group_size) {
      // One group of every source (n <= lamport_max_ranks <= 8), each poll loading every pending source's packet
      // and the flag word with no branch between the loads: one memory latency per poll. A slot past the last rank
      // loads source 0's packet (a valid address, value unused).
      constexpr int group = decltype(group_size)::value;
      uint4 v[group] = {};
      std::uint32_t pending = 0;
      if (mine) {
        ROCENANTE_UNROLL
        for (int g = 0; g < group; ++g)
          if (g < n && g != r) pending |= 1u << g;
      }
      const std::uint64_t start = rocenante::detail::now_ns();
      std::uint64_t polls = 0;
      while (pending != 0 || flag_pending) {
        if (mine) {
          ROCENANTE_UNROLL
          for (int g = 0; g < group; ++g)
            v[g] = reduce::lamport::load(h.lamport_recv_ptr(slot, (g < n ? g : 0) * stride + i * packet_bytes));
        }
        std::uint64_t seen = word;
        if (flag_pending) asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(seen) : "l"(my_flag) : "memory");
        int late = -1;
        ROCENANTE_UNROLL
        for (int g = 0; g < group; ++g)
          if (pending >> g & 1u) {
            if (reduce::lamport::ready<R>(v[g]))
              pending &= ~(1u << g);
            else if (late < 0)
              late = g;
          }
        if (seen == word) flag_pending = false;
        if (pending == 0 && !flag_pending) break;
        if (late < 0) late = t;  // only the flag word is missing
        if (!s.inline_wait_check(late, static_cast<std::uint32_t>(late), 0, start, polls)) {
          ok = false;
          return;
        }
      }
      if (!mine) return;
      // Rank order, no branch on the loaded values: slot r holds the packet as this rank sent it.
      ROCENANTE_UNROLL
      for (int g = 0; g < group; ++g) {
        if (g >= n) break;
        const uint4 w = g == r ? sent : v[g];
        const reduce::value_packet<R> x = *reinterpret_cast<const reduce::value_packet<R>*>(&w);
        if (g == 0)
          acc = reduce::widen<R>(x);
        else
          reduce::accumulate<R>(acc, x);
      }
      // Consumed: the packets read are empty again until this slot's next call.
      ROCENANTE_UNROLL
      for (int g = 0; g < group; ++g)
        if (g < n && g != r)
          reduce::lamport::store(h.lamport_recv_ptr(slot, g * stride + i * packet_bytes), make_uint4(~0u, ~0u, ~0u, ~0u));
    };
    constexpr int fixed = transport::fixed_ranks_of<typename Session::handle_type>();
    if constexpr (fixed > 0)
      poll_and_sum(std::integral_constant<int, fixed>{});
    else if (n <= 4)
      poll_and_sum(std::integral_constant<int, 4>{});
    else
      poll_and_sum(std::integral_constant<int, lamport_max_ranks>{});
    if (team.thread() == 0 && ok) ok = s.accept_abort_word(abort_channel, abort_word);
    s.trace(4);
    if (!s.agree(ok)) return false;
    if (mine) store_result<R>(out, i, count, acc, epi);
    finish_traced(s, parts);
    return true;
  }

#endif
  /// enter, stage this part of `in` into source `rank` of every peer's slot, signal, wait for every peer.
  template <reduce::reduction R, class Session>
  ROCENANTE_HOST_DEVICE static bool stage_and_exchange(Session& s, const typename R::value_type* in,
                                                       std::uint64_t count, std::uint32_t parts) {
    auto& team = s.team();
    auto& h = s.handle();
    const std::uint64_t stride = source_stride<R>(h.layout(), count);
    const range pr = split(protocol::ceil_div(count, reduce::lanes<R>), parts, s.part());
    const std::uint64_t base = h.rank() * stride;
    const std::uint64_t step = static_cast<std::uint64_t>(team.size());
    // The first batch of input is loaded before enter(): those loads need no sequence number, so their latency
    // overlaps the read of the epoch and the team vote.
    std::uint64_t i0 = pr.begin + team.thread();
    reduce::value_packet<R> v[unroll] = {};
    ROCENANTE_UNROLL
    for (int u = 0; u < unroll; ++u)
      if (i0 + u * step < pr.end) v[u] = reduce::load_user<R>(in, i0 + u * step, count);
    if (!s.enter()) return false;
    s.trace(0);
    s.trace(1);
    while (i0 < pr.end) {
      ROCENANTE_UNROLL
      for (int u = 0; u < unroll; ++u) {
        const std::uint64_t i = i0 + u * step;
        if (i < pr.end) put_packet<R>(s, base + i * packet_bytes, v[u]);
      }
      i0 += unroll * step;
      ROCENANTE_UNROLL
      for (int u = 0; u < unroll; ++u)
        if (i0 + u * step < pr.end) v[u] = reduce::load_user<R>(in, i0 + u * step, count);
    }
    team.sync();
    return signal_and_wait(s, stride, pr, protocol::ceil_div(count, reduce::lanes<R>), parts,
                           posts_call<typename Session::handle_type>(h.layout(), count * sizeof(typename R::value_type)));
  }

  /// After the team barrier that follows the staging of part `pr` (source `rank` of a slot whose sources are
  /// `stride` apart; the call has `packets` packets in `parts` parts): signal every peer, wait for every peer.
  /// Direct stores: one signalling thread per peer. Shared staging (proxy, NIC): one producer per part, or, for a
  /// call posted once (`whole`: posts_call), one post by the part that staged last ("Posting").
  template <class Session>
  ROCENANTE_HOST_DEVICE static bool signal_and_wait(Session& s, std::uint64_t stride, const range& pr,
                                                    std::uint64_t packets, std::uint32_t parts, bool whole) {
    using handle_t = typename Session::handle_type;
    auto& team = s.team();
    const int n = s.handle().ranks(), r = s.handle().rank();
    const std::uint64_t base = static_cast<std::uint64_t>(r) * stride;
    s.trace(2);
    if constexpr (posts_calls<handle_t>) {
      if (whole) {
        bool posted = true;
        if (team.thread() == 0 && n > 1) posted = s.post_call(base, packets * packet_bytes, parts);
        s.trace(3);
        return s.wait_call(n, r, posted, [&](int q) { return static_cast<std::uint64_t>(q) * stride + packets * packet_bytes; });
      }
    }
    const int first = handle_t::shared_staging ? (team.thread() == 0 ? 0 : n) : team.thread();
    const int every = handle_t::shared_staging ? 1 : team.size();
    for (int q = first; q < n; q += every)
      if (q != r) (void)s.signal(q, static_cast<std::uint32_t>(r), base + pr.begin * packet_bytes, pr.size() * packet_bytes);
    s.trace(3);
    return s.wait_peers(n, r, [](int q) { return static_cast<std::uint32_t>(q); });
  }
};

static_assert(check_algorithm<one_shot>());

}  // namespace rocenante::algorithm

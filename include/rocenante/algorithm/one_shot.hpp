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
#pragma once

#include <cstdint>

#include "../reduce/packet.hpp"
#include "concepts.hpp"
#include "partition.hpp"

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
  template <reduce::reduction R>
  ROCENANTE_HOST_DEVICE static constexpr std::uint64_t source_stride(const protocol::window_layout& l, std::uint64_t count) {
    const std::uint64_t s = protocol::align_up(protocol::ceil_div(count, reduce::lanes<R>) * packet_bytes, 256);
    return s < l.source_stride ? s : l.source_stride;
  }

  /// All-reduce part `s.part()` of `parts`. Every team thread of every rank calls, for every part.
  /// Result: out[i] = sum over q = 0..n-1 of in_q[i], summed in that order in fp32, rounded once; valid in
  /// `out` for this part's packets when the call returns true, identical bytes on every rank.
  template <reduce::reduction R, class Session, class Epilogue = no_epilogue>
  ROCENANTE_HOST_DEVICE static bool all_reduce(Session& s, const typename R::value_type* in,
                                               typename R::value_type* out, std::uint64_t count,
                                               std::uint32_t parts, const Epilogue& epi = {}) {
    if (!stage_and_exchange<R>(s, in, count, parts)) return false;
    s.trace(4);
    auto& team = s.team();
    auto& h = s.handle();
    const int n = h.ranks(), r = h.rank();
    const std::uint64_t stride = source_stride<R>(h.layout(), count);
    const range pr = split(protocol::ceil_div(count, reduce::lanes<R>), parts, s.part());
    const std::uint64_t step = static_cast<std::uint64_t>(team.size());
    // A 16-byte aligned input of whole packets (the same answer for every thread of the call) is read like a
    // source region: each source is then one plain load from a selected address, with no branch between the
    // loads, so all of them are in flight together (with a branch per source, load_user's, they were issued
    // one after another: ~250 ns per source in the reduce of a 48 KiB call, measured by the phase tracer).
    const bool plain_input = reduce::detail::aligned16(in) && count % reduce::lanes<R> == 0;
    if (pr.size() <= step) {
      // At most one packet per thread (decode-size messages): load the packet of every source at once, so the
      // reduce costs one memory latency instead of one per rank, then sum in rank order as below.
      const std::uint64_t i = pr.begin + team.thread();
      if (i < pr.end) {
        constexpr int group = 8;  // sources loaded together: one memory latency up to 8 ranks
        reduce::accum_packet<R> acc{};
        ROCENANTE_UNROLL
        for (int q0 = 0; q0 < max_ranks; q0 += group) {
          if (q0 >= n) break;
          reduce::value_packet<R> v[group];
          if (plain_input) {
            const std::byte* p[group];
            ROCENANTE_UNROLL
            for (int g = 0; g < group; ++g) {
              const int q = q0 + g;
              p[g] = q == r ? reinterpret_cast<const std::byte*>(in) + i * packet_bytes
                            : h.recv_ptr(s.slot(), q * stride + i * packet_bytes);
            }
            ROCENANTE_UNROLL
            for (int g = 0; g < group; ++g)
              if (q0 + g < n) v[g] = reduce::load_packet_issue<R>(p[g]);
          } else {
            ROCENANTE_UNROLL
            for (int g = 0; g < group; ++g) {
              const int q = q0 + g;
              if (q < n)
                v[g] = q == r ? reduce::load_user<R>(in, i, count)
                              : reduce::load_packet<R>(h.recv_ptr(s.slot(), q * stride + i * packet_bytes));
            }
          }
          ROCENANTE_UNROLL
          for (int g = 0; g < group; ++g) {
            if (q0 + g >= n) break;
            if (q0 + g == 0)
              acc = reduce::widen<R>(v[g]);
            else
              reduce::accumulate<R>(acc, v[g]);
          }
        }
        epi(i * reduce::lanes<R>, acc);
        reduce::store_user<R>(out, i, count, reduce::narrow<R>(acc));
      }
      s.trace(5);
      s.finish(parts);
      s.trace(6);
      return true;
    }
    for (std::uint64_t i0 = pr.begin + team.thread(); i0 < pr.end; i0 += reduce_unroll * step) {
      reduce::accum_packet<R> acc[reduce_unroll] = {};
      // Sources in groups: every load of a group is issued before the first add, so a thread keeps
      // source_group x reduce_unroll packets in flight (one memory latency per group, not per source).
      for (int q0 = 0; q0 < n; q0 += source_group) {
        reduce::value_packet<R> v[source_group][reduce_unroll] = {};
        if (plain_input) {  // as in the small path: every load of the group issued back to back
          ROCENANTE_UNROLL
          for (int g = 0; g < source_group; ++g) {
            const int q = q0 + g;
            const std::byte* base = q == r ? reinterpret_cast<const std::byte*>(in) : h.recv_ptr(s.slot(), q * stride);
            ROCENANTE_UNROLL
            for (int u = 0; u < reduce_unroll; ++u) {
              const std::uint64_t i = i0 + u * step;
              if (q < n && i < pr.end) v[g][u] = reduce::load_packet_issue<R>(base + i * packet_bytes);
            }
          }
        } else {
          ROCENANTE_UNROLL
          for (int g = 0; g < source_group; ++g) {
            const int q = q0 + g;
            ROCENANTE_UNROLL
            for (int u = 0; u < reduce_unroll; ++u) {
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
          for (int u = 0; u < reduce_unroll; ++u) {
            if (q0 + g == 0)
              acc[u] = reduce::widen<R>(v[g][u]);
            else
              reduce::accumulate<R>(acc[u], v[g][u]);
          }
        }
      }
      ROCENANTE_UNROLL
      for (int u = 0; u < reduce_unroll; ++u) {
        const std::uint64_t i = i0 + u * step;
        if (i >= pr.end) continue;
        epi(i * reduce::lanes<R>, acc[u]);
        reduce::store_user<R>(out, i, count, reduce::narrow<R>(acc[u]));
      }
    }
    s.finish(parts);
    return true;
  }

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

 private:
  /// enter, stage this part of `in` into source `rank` of every peer's slot, signal, wait for every peer.
  template <reduce::reduction R, class Session>
  ROCENANTE_HOST_DEVICE static bool stage_and_exchange(Session& s, const typename R::value_type* in,
                                                       std::uint64_t count, std::uint32_t parts) {
    auto& team = s.team();
    auto& h = s.handle();
    using handle_t = typename Session::handle_type;
    const int n = h.ranks(), r = h.rank();
    const std::uint64_t stride = source_stride<R>(h.layout(), count);
    const range pr = split(protocol::ceil_div(count, reduce::lanes<R>), parts, s.part());
    const std::uint64_t base = r * stride;
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
        if (i >= pr.end) continue;
        if constexpr (handle_t::shared_staging) {
          if (n > 1) reduce::store_packet<R>(h.put_ptr(r, s.slot(), base + i * packet_bytes), v[u]);
        } else {
          for (int q = 0; q < n; ++q)
            if (q != r) reduce::store_packet<R>(h.put_ptr(q, s.slot(), base + i * packet_bytes), v[u]);
        }
      }
      i0 += unroll * step;
      ROCENANTE_UNROLL
      for (int u = 0; u < unroll; ++u)
        if (i0 + u * step < pr.end) v[u] = reduce::load_user<R>(in, i0 + u * step, count);
    }
    team.sync();
    s.trace(2);
    // Direct stores: one signalling thread per peer. Shared staging (proxy, NIC): one producer per part.
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

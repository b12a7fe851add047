// algorithm/two_shot.hpp — two-shot all-reduce: reduce-scatter then all-gather in one kernel, two communication
// steps, every rank talking to every peer. Chunk c (1/n of the packets) is owned by rank c: every rank sends its
// chunk c to rank c, the owner sums the n contributions, and sends the result to every peer.
//
// Schedule, 4 ranks, chunks C0..C3 of K packets (Xq.c = chunk c of rank q's input, Sc = X0.c+X1.c+X2.c+X3.c):
//
//   step          rank 0                 rank 1                 rank 2                 rank 3
//   RS (ch. q)    X0.1->1 X0.2->2 X0.3->3 X1.0->0 X1.2->2 X1.3->3 X2.0->0 X2.1->1 X2.3->3 X3.0->0 X3.1->1 X3.2->2
//                 wait 1,2,3             wait 0,2,3             wait 0,1,3             wait 0,1,2
//   own chunk     S0, rounded once       S1                     S2                     S3
//   AG (ch. n+q)  S0 -> 1,2,3            S1 -> 0,2,3            S2 -> 0,1,3            S3 -> 0,1,2
//                 wait 1,2,3; out = S0 S1 S2 S3 (the owners' bits) on every rank
//
// Chunk c is summed by its owner in rank order 0, 1, ..., n-1 in fp32 (the owner's own contribution read from its
// input), the epilogue applied, rounded once to T; every other rank copies the owner's bits, so every rank ends
// with identical bytes. The reduce-scatter carries the inputs themselves (T, not fp32): no partial sum exists
// before the owner's, so nothing is rounded on the way.
//
// Window of rank x, slot s: one_shot's layout with stride = n*K*16 ([source 0 | ... | source n-1], packet i of
// source q at q*stride + i*16). RS: rank q writes the packets of chunk x into source q of rank x. AG: owner c
// writes its result, the packets of chunk c, into source c of every peer. At rank x, source q therefore holds
// chunk x (RS) and chunk q (AG): disjoint packets. Flag channel q of part p: q's RS packets of part p arrived;
// channel n+q: q's result packets of part p arrived. Part p handles sub-range p of every chunk
// (partition.hpp, chunk_part) and waits only for part p of its peers: no grid-wide barrier.
//
// Posting (shared staging: loopback_proxy, socket, ibverbs). Rank r stages every chunk into source r of its staging
// area — chunk c != r in RS, its result chunk r in AG — and thread 0 of each part posts its range per peer: n-1
// descriptors in RS (the part's range of chunk c to rank c) and n-1 in AG (the part's range of chunk r to every
// peer), 2(n-1) per part. It is never posted once per call (options::call_post_max_bytes does not apply).
//
// Cost for S bytes per rank: 2 steps; each rank sends (n-1)*S/n in RS and (n-1)*S/n in AG, 2(n-1)/n*S in all
// (one_shot: (n-1)*S); the owner's reduce reads S and writes S/n. Latency ~ launch + stage + 2 flag hops + reduce.
// Assumptions: any-to-any connectivity (a switch, NVLink, or one process); every rank calls with the same count.
// In-place path (directly read windows, options::symmetric_bytes; one_shot.hpp's "In-place path" for the rules on
// the input's place): no reduce-scatter copy. Each part tells every peer its input is in place (channel q), the owner
// of chunk c reads chunk c of every rank's input where it lies and sums it in rank order (the same bytes), stores
// the result into `out` and into source c of its own window, and tells every peer (channel n+q); every rank then
// copies the other owners' results out of their windows. No end barrier: once a rank has every owner's word, every
// peer has finished reading its input, and an owner's window region is written again only two calls later (two
// slots), after every peer has started the call in between. Per rank it reads S and n-1 chunks and writes S + S/n
// (the staged path: about 4S).
//
// Pitfalls: two flag hops where one_shot has one, so one_shot wins for small messages; `in` may equal `out`
// (in-place: a part reads the input packets it overwrites before it writes them) but must not otherwise overlap it;
// a reduction that is lossy per hop (NVFP4) is refused at compile time: the owner's sum would be quantized again
// for the all-gather.
#pragma once

#include <cstdint>

#include "../reduce/packet.hpp"
#include "concepts.hpp"
#include "one_shot.hpp"
#include "partition.hpp"
#include "poison.hpp"

namespace rocenante::algorithm {

struct two_shot {
  static constexpr const char* name = "two_shot";
  static constexpr algo id = algo::two_shot;
  static constexpr bool supports_all_gather = false;
  template <class R>
  static constexpr bool supports = !R::lossy_per_hop;

  /// Flag channel of peer q's reduce-scatter packets, and of its all-gathered result (algorithm::writes_channel).
  ROCENANTE_HOST_DEVICE static constexpr std::uint32_t rs_channel(int q) { return static_cast<std::uint32_t>(q); }
  ROCENANTE_HOST_DEVICE static constexpr std::uint32_t ag_channel(int n, int q) { return static_cast<std::uint32_t>(n + q); }

  ROCENANTE_HOST_DEVICE static constexpr std::uint32_t channels(int n) { return n > 1 ? 2u * static_cast<std::uint32_t>(n) : 1u; }
  /// Distance between two sources' regions for a call of `packets` packets at n ranks: n chunks of K packets.
  ROCENANTE_HOST_DEVICE static constexpr std::uint64_t source_stride(int n, std::uint64_t packets) {
    return static_cast<std::uint64_t>(n) * chunk_packets(n, packets) * packet_bytes;
  }
  ROCENANTE_HOST_DEVICE static constexpr std::uint64_t slot_bytes(int n, std::uint64_t capacity) {
    return static_cast<std::uint64_t>(n) * source_stride(n, protocol::ceil_div(capacity, packet_bytes));
  }
  ROCENANTE_HOST_DEVICE static constexpr std::uint32_t steps(int n) { return n > 1 ? 2u : 0u; }
  ROCENANTE_HOST_DEVICE static constexpr std::uint64_t wire_bytes(int n, std::uint64_t bytes) {
    return n > 1 ? 2u * static_cast<std::uint64_t>(n - 1) * protocol::ceil_div(bytes, static_cast<std::uint64_t>(n)) : 0;
  }

  /// All-reduce part `s.part()` of `parts`. Every team thread of every rank calls, for every part.
  /// Result: out[i] = sum over q = 0..n-1 of in_q[i] in that order in fp32, epilogue, rounded once by the owner of
  /// i's chunk; valid in `out` for this part's packets of every chunk when the call returns true, identical bytes on
  /// every rank.
  template <reduce::reduction R, class Session, class Epilogue = no_epilogue>
  ROCENANTE_HOST_DEVICE static bool all_reduce(Session& s, const typename R::value_type* in,
                                               typename R::value_type* out, std::uint64_t count,
                                               std::uint32_t parts, const Epilogue& epi = {}) {
    static_assert(supports<R>, "two_shot sends the owner's rounded sum in a second hop: a reduction that is lossy per "
                               "hop (R::lossy_per_hop, e.g. NVFP4 on the wire) would be quantized twice; use one_shot_fp4");
    using V = reduce::value_packet<R>;
    if (!s.enter()) return false;
    auto& team = s.team();
    auto& h = s.handle();
    const int n = h.ranks(), r = h.rank();
    const std::uint32_t slot = s.slot();
    const std::uint64_t packets = protocol::ceil_div(count, reduce::lanes<R>);
    const std::uint64_t k = chunk_packets(n, packets);
    const std::uint64_t stride = source_stride(n, packets);
    const std::uint64_t base = static_cast<std::uint64_t>(r) * stride;
    const range sub = split(k, parts, s.part());
    const std::uint64_t t0 = static_cast<std::uint64_t>(team.thread()), step = static_cast<std::uint64_t>(team.size());

    // Reduce-scatter: this part's packets of chunk c into source r of rank c (shared staging: of this rank's
    // staging area, the same offsets, posted to rank c only).
    for (int c = 0; c < n; ++c) {
      if (c == r) continue;
      const range pr = chunk_part(c, k, packets, sub);
      for (std::uint64_t i0 = pr.begin + t0; i0 < pr.end; i0 += unroll * step) {
        V v[unroll];
        ROCENANTE_UNROLL
        for (int u = 0; u < unroll; ++u)
          if (i0 + u * step < pr.end) v[u] = reduce::load_user<R>(in, i0 + u * step, count);
        ROCENANTE_UNROLL
        for (int u = 0; u < unroll; ++u)
          if (i0 + u * step < pr.end) reduce::store_packet<R>(h.put_ptr(c, slot, base + (i0 + u * step) * packet_bytes), v[u]);
      }
    }
    team.sync();
    signal_peers(s, [&](int q) { return chunk_part(q, k, packets, sub); }, base, rs_channel(r));
    if (!s.wait_peers(n, r, [](int q) { return rs_channel(q); })) return false;

    // The owned chunk: every rank's contribution in rank order (one_shot's reduce over this window's stride), then
    // the epilogue and the single rounding; the bits go to `out` and into source r of every peer.
    const range own = chunk_part(r, k, packets, sub);
    one_shot::reduce_sources<R, false, 1>(
        s, in, count, [stride](const protocol::window_layout&) { return stride; }, own, one_shot::is_plain_input<R>(in, count),
        [&](std::uint64_t i, reduce::accum_packet<R>& acc) {
          epi(i * reduce::lanes<R>, acc);
          const V v = reduce::narrow<R>(acc);
          reduce::store_user<R>(out, i, count, v);
          one_shot::put_packet<R>(s, base + i * packet_bytes, v);
        });
    team.sync();
    signal_peers(s, [&](int) { return own; }, base, ag_channel(n, r));
    // Hop 1: an owner's result exists only after its own reduce-scatter wait, so a rank that died before it is
    // reported by the owner's wait first (session::wait_one), not blamed on the owner.
    if (!s.wait_peers(n, r, [n](int q) { return ag_channel(n, q); }, 1u)) return false;

    // All-gather: copy every other owner's bits.
    for (int c = 0; c < n; ++c) {
      if (c == r) continue;
      const range pr = chunk_part(c, k, packets, sub);
      const std::uint64_t src = static_cast<std::uint64_t>(c) * stride;
      for (std::uint64_t i0 = pr.begin + t0; i0 < pr.end; i0 += unroll * step) {
        V v[unroll];
        ROCENANTE_UNROLL
        for (int u = 0; u < unroll; ++u)
          if (i0 + u * step < pr.end) v[u] = reduce::load_packet<R>(h.recv_ptr(slot, src + (i0 + u * step) * packet_bytes));
        ROCENANTE_UNROLL
        for (int u = 0; u < unroll; ++u)
          if (i0 + u * step < pr.end) reduce::store_user<R>(out, i0 + u * step, count, v[u]);
      }
    }
    s.finish(parts);
    return true;
  }

  /// In-place path (file header): the algorithm id its calls carry in their signature.
  static constexpr algo inplace_id = static_cast<algo>(7);
  /// The signature of an in-place two_shot call (one_shot::inplace_call_signature with this algorithm's id).
  ROCENANTE_HOST_DEVICE static constexpr std::uint32_t inplace_signature(std::uint32_t dtype_id, std::uint32_t op_id,
                                                                         std::uint64_t count, std::uint64_t off) {
    return one_shot::inplace_call_signature(inplace_id, dtype_id, op_id, count, off);
  }

  /// All-reduce part `s.part()` of `parts` on the in-place path (file header): every rank's input at offset `off`
  /// of its symmetric input area (one_shot::inplace_offset). The session must carry inplace_signature. The same
  /// bytes as all_reduce, on every rank.
  template <reduce::reduction R, class Session, class Epilogue = no_epilogue>
  ROCENANTE_HOST_DEVICE static bool all_reduce_inplace(Session& s, typename R::value_type* out, std::uint64_t count,
                                                       std::uint32_t parts, std::uint64_t off, const Epilogue& epi = {}) {
    using handle_t = typename Session::handle_type;
    if constexpr (!one_shot::has_inplace<handle_t>) {
      return false;
    } else {
      using V = reduce::value_packet<R>;
      if (!s.enter()) return false;
      auto& team = s.team();
      auto& h = s.handle();
      const int n = h.ranks(), r = h.rank();
      const std::uint32_t slot = s.slot();
      const std::uint64_t packets = protocol::ceil_div(count, reduce::lanes<R>);
      const std::uint64_t k = chunk_packets(n, packets);
      const std::uint64_t stride = source_stride(n, packets);
      const range sub = split(k, parts, s.part());
      const std::uint64_t t0 = static_cast<std::uint64_t>(team.thread()), step = static_cast<std::uint64_t>(team.size());
      // Start: this rank's input is in place.
      for (int q = team.thread(); q < n; q += team.size())
        if (q != r) (void)s.signal(q, rs_channel(r), 0, 0);
      if (!s.wait_peers(n, r, [](int q) { return rs_channel(q); })) return false;
      // The owned chunk, read from every rank's input where it lies, in rank order; its bits to `out` and to source r
      // of this rank's own window, where the peers copy them from.
      const range own = chunk_part(r, k, packets, sub);
      for (std::uint64_t i = own.begin + t0; i < own.end; i += step) {
        reduce::accum_packet<R> acc = one_shot::sum_in_place<R>(h, off, i, count);
        epi(i * reduce::lanes<R>, acc);
        const V v = reduce::narrow<R>(acc);
        reduce::store_user<R>(out, i, count, v);
        reduce::store_packet<R>(h.put_ptr(r, slot, static_cast<std::uint64_t>(r) * stride + i * packet_bytes), v);
      }
      team.sync();
      for (int q = team.thread(); q < n; q += team.size())
        if (q != r) (void)s.signal(q, ag_channel(n, r), 0, 0);
      if (!s.wait_peers(n, r, [n](int q) { return ag_channel(n, q); }, 1u)) return false;
      // Every other owner's bits, read from its window.
      for (int c = 0; c < n; ++c) {
        if (c == r) continue;
        const range pr = chunk_part(c, k, packets, sub);
        const std::uint64_t src = static_cast<std::uint64_t>(c) * stride;
        for (std::uint64_t i = pr.begin + t0; i < pr.end; i += step)
          reduce::store_user<R>(out, i, count, reduce::load_packet<R>(h.put_ptr(c, slot, src + i * packet_bytes)));
      }
      s.finish(parts);
      return true;
    }
  }

  /// The failure path of part `part` of `parts`: every team thread calls; the part's packets of every chunk (the
  /// elements this part would have written) get the poison value.
  template <reduce::reduction R, class Team>
  ROCENANTE_HOST_DEVICE ROCENANTE_COLD static void poison_part(Team& team, typename R::value_type* out, std::uint64_t count,
                                                              std::uint32_t part, std::uint32_t parts, int ranks,
                                                              protocol::collective) {
    fill_poison_chunked<typename R::value_type, reduce::lanes<R>>(team, out, count, part, parts, ranks);
  }

 private:
  /// After the team barrier that follows the staging: peer q gets packets range_of(q) of source `rank` (at `base`
  /// + 16 per packet), then flag `channel` of this part. Direct windows: one signalling thread per peer; shared
  /// staging: thread 0 posts every descriptor (one producer per part queue). A failed post poisons the rank, and
  /// the wait that follows ends at once.
  template <class Session, class RangeOf>
  ROCENANTE_HOST_DEVICE static void signal_peers(Session& s, const RangeOf& range_of, std::uint64_t base,
                                                 std::uint32_t channel) {
    auto& team = s.team();
    const int n = s.handle().ranks(), r = s.handle().rank();
    const int first = Session::handle_type::shared_staging ? (team.thread() == 0 ? 0 : n) : team.thread();
    const int every = Session::handle_type::shared_staging ? 1 : team.size();
    for (int q = first; q < n; q += every) {
      if (q == r) continue;
      const range pr = range_of(q);
      (void)s.signal(q, channel, base + pr.begin * packet_bytes, pr.size() * packet_bytes);
    }
  }
};

static_assert(check_algorithm<two_shot>());
static_assert(two_shot::source_stride(4, 9) == 4 * 3 * 16 && two_shot::slot_bytes(4, 9 * 16) == 4 * 4 * 3 * 16);
static_assert(two_shot::wire_bytes(4, 4096) == 6 * 1024 && two_shot::wire_bytes(1, 4096) == 0);

}  // namespace rocenante::algorithm

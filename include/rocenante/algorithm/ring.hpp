// algorithm/ring.hpp — ring all-reduce: reduce-scatter then all-gather, 2(n-1) steps, each rank talking only
// to its ring neighbours (prev = r-1, next = r+1 mod n). Serves physical rings (switchless DGX Spark clusters)
// and large messages.
//
// Schedule, 4 ranks, chunks C0..C3 of K packets (partial sums travel in fp32; Pc..d = sum of ranks c..d):
//
//   step  rank 0            rank 1            rank 2            rank 3             (-> next)
//   RS 0  send C0=X0        send C1=X1        send C2=X2        send C3=X3
//   RS 1  send C3=P3..0     send C0=P0..1     send C1=P1..2     send C2=P2..3
//   RS 2  send C2=P2..0     send C3=P3..1     send C0=P0..2     send C1=P1..3
//         own  C1=P1..0     own  C2=P2..1     own  C3=P3..2     own  C0=P0..3     (rounded once, to T)
//   AG 0  send C1           send C2           send C3           send C0
//   AG 1  send C0           send C1           send C2           send C3
//   AG 2  send C3           send C0           send C1           send C2
//
// Rank r owns chunk (r+1) mod n; chunk c is summed in the order c, c+1, ..., c+n-1 (mod n) and rounded once by
// its owner; the all-gather copies the owner's bits, so every rank ends with identical bytes.
//
// Window of rank r, slot s: RS step k at k*K*A (A = fp32 packet bytes: 16 for fp32, 32 for 16-bit types),
// AG step k at (n-1)*K*A + k*K*16; flag channel k for RS step k, (n-1)+k for AG step k.
//
// Cost for S bytes per rank: 2(n-1) steps; sends (n-1)/n*S*(4/sizeof(T)) in RS plus (n-1)/n*S in AG.
// Assumptions: only ring neighbours need to be connected. Partials travel in fp32 so that the result is
// rounded once (costs 2x the RS bytes for 16-bit types, bought for accuracy).
// Pitfalls: latency grows with 2(n-1) flag hops, so one-shot wins for small messages; a reduction that is
// lossy per hop (NVFP4) is refused at compile time.
#pragma once

#include <cstdint>

#include "../reduce/packet.hpp"
#include "concepts.hpp"
#include "partition.hpp"
#include "poison.hpp"

namespace rocenante::algorithm {

struct ring {
  static constexpr const char* name = "ring";
  static constexpr algo id = algo::ring;
  static constexpr bool supports_all_gather = false;
  template <class R>
  static constexpr bool supports = !R::lossy_per_hop;

  static constexpr std::uint64_t max_accum_packet_bytes = 32;  // 8 lanes of fp32 for 16-bit types

  ROCENANTE_HOST_DEVICE static constexpr std::uint64_t chunk_packets(int n, std::uint64_t packets) {
    return algorithm::chunk_packets(n, packets);
  }
  ROCENANTE_HOST_DEVICE static constexpr std::uint32_t channels(int n) {
    return n > 1 ? 2u * static_cast<std::uint32_t>(n - 1) : 1u;
  }
  ROCENANTE_HOST_DEVICE static constexpr std::uint64_t slot_bytes(int n, std::uint64_t capacity) {
    const std::uint64_t k = chunk_packets(n, protocol::ceil_div(capacity, packet_bytes));
    return static_cast<std::uint64_t>(n > 1 ? n - 1 : 0) * k * (max_accum_packet_bytes + packet_bytes);
  }
  ROCENANTE_HOST_DEVICE static constexpr std::uint32_t steps(int n) { return n > 1 ? 2u * static_cast<std::uint32_t>(n - 1) : 0u; }
  /// Bytes one rank sends for an all-reduce of `bytes` bytes of elements of `elem_bytes` bytes each: the
  /// reduce-scatter carries fp32 partials (4/elem_bytes times the input bytes), the all-gather the elements.
  ROCENANTE_HOST_DEVICE static constexpr std::uint64_t wire_bytes(int n, std::uint64_t bytes, std::uint64_t elem_bytes = 4) {
    const std::uint64_t chunk = n > 1 ? protocol::ceil_div(bytes, static_cast<std::uint64_t>(n)) : 0;
    return n > 1 ? static_cast<std::uint64_t>(n - 1) * (chunk * 4 / elem_bytes + chunk) : 0;
  }
  /// Chunk sent in reduce-scatter step k by rank r, and the one received.
  ROCENANTE_HOST_DEVICE static constexpr int rs_send_chunk(int n, int r, int k) { return ((r - k) % n + n) % n; }
  ROCENANTE_HOST_DEVICE static constexpr int rs_recv_chunk(int n, int r, int k) { return ((r - k - 1) % n + n) % n; }
  ROCENANTE_HOST_DEVICE static constexpr int owned_chunk(int n, int r) { return (r + 1) % n; }
  /// Chunk sent in all-gather step k by rank r, and the one received.
  ROCENANTE_HOST_DEVICE static constexpr int ag_send_chunk(int n, int r, int k) { return ((r + 1 - k) % n + n) % n; }
  ROCENANTE_HOST_DEVICE static constexpr int ag_recv_chunk(int n, int r, int k) { return ((r - k) % n + n) % n; }

  template <reduce::reduction R, class Session, class Epilogue = no_epilogue>
  ROCENANTE_HOST_DEVICE static bool all_reduce(Session& s, const typename R::value_type* in,
                                               typename R::value_type* out, std::uint64_t count,
                                               std::uint32_t parts, const Epilogue& epi = {}) {
    static_assert(supports<R>, "ring forwards partial sums at every hop: a reduction that is lossy per hop "
                               "(R::lossy_per_hop, e.g. NVFP4 on the wire) would be requantized n-1 times; use one_shot");
    using A = reduce::accum_packet<R>;
    constexpr std::uint64_t abytes = sizeof(A);
    if (!s.enter()) return false;
    auto& team = s.team();
    auto& h = s.handle();
    const int n = h.ranks(), r = h.rank();
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    const std::uint64_t packets = protocol::ceil_div(count, reduce::lanes<R>);
    const std::uint64_t k = chunk_packets(n, packets);
    const range sub = split(k, parts, s.part());  // this part's packets within every chunk
    const std::uint32_t slot = s.slot();
    const std::uint64_t ag_base = static_cast<std::uint64_t>(n - 1) * k * abytes;
    auto part_of = [&](int c) { return chunk_part(c, k, packets, sub); };  // this part's packets of chunk c

    if (n == 1) {
      for (std::uint64_t i = sub.begin + team.thread(); i < sub.end && i < packets; i += team.size()) {
        A acc = reduce::widen<R>(reduce::load_user<R>(in, i, count));
        store_result<R>(out, i, count, acc, epi);
      }
      s.finish(parts);
      return true;
    }

    // Reduce-scatter: step j sends chunk rs_send_chunk(j) = (partial received in step j-1) + own input.
    for (int j = 0; j < n - 1; ++j) {
      const int c = rs_send_chunk(n, r, j);
      const range pr = part_of(c);
      const std::uint64_t first = static_cast<std::uint64_t>(c) * k;
      const std::uint64_t off = static_cast<std::uint64_t>(j) * k * abytes;
      for (std::uint64_t i = pr.begin + team.thread(); i < pr.end; i += team.size()) {
        A acc;
        if (j == 0) {
          acc = reduce::widen<R>(reduce::load_user<R>(in, i, count));
        } else {
          acc = reduce::load_accum<R>(h.recv_ptr(slot, off - k * abytes + (i - first) * abytes));
          reduce::accumulate<R>(acc, reduce::load_user<R>(in, i, count));
        }
        reduce::store_accum<R>(h.put_ptr(next, slot, off + (i - first) * abytes), acc);
      }
      if (!exchange(s, next, prev, static_cast<std::uint32_t>(j), off + (pr.begin - first) * abytes,
                    pr.size() * abytes))
        return false;
    }
    // Owned chunk: last partial + own input, rounded once; stored and sent as AG step 0.
    for (int j = 0; j < n - 1; ++j) {
      const int c = ag_send_chunk(n, r, j);
      const range pr = part_of(c);
      const std::uint64_t first = static_cast<std::uint64_t>(c) * k;
      const std::uint64_t off = ag_base + static_cast<std::uint64_t>(j) * k * packet_bytes;
      for (std::uint64_t i = pr.begin + team.thread(); i < pr.end; i += team.size()) {
        reduce::value_packet<R> v;
        if (j == 0) {
          A acc = reduce::load_accum<R>(h.recv_ptr(slot, static_cast<std::uint64_t>(n - 2) * k * abytes + (i - first) * abytes));
          reduce::accumulate<R>(acc, reduce::load_user<R>(in, i, count));
          epi(i * reduce::lanes<R>, acc);
          v = reduce::narrow<R>(acc);
          reduce::store_user<R>(out, i, count, v);
        } else {
          v = reduce::load_packet<R>(h.recv_ptr(slot, off - k * packet_bytes + (i - first) * packet_bytes));
        }
        reduce::store_packet<R>(h.put_ptr(next, slot, off + (i - first) * packet_bytes), v);
      }
      if (!exchange(s, next, prev, static_cast<std::uint32_t>(n - 1 + j), off + (pr.begin - first) * packet_bytes,
                    pr.size() * packet_bytes))
        return false;
      // The chunk received in this step is final: copy it out.
      const int cr = ag_recv_chunk(n, r, j);
      const range rr = part_of(cr);
      const std::uint64_t rfirst = static_cast<std::uint64_t>(cr) * k;
      for (std::uint64_t i = rr.begin + team.thread(); i < rr.end; i += team.size())
        reduce::store_user<R>(out, i, count, reduce::load_packet<R>(h.recv_ptr(slot, off + (i - rfirst) * packet_bytes)));
    }
    s.finish(parts);
    return true;
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
  template <class Session>
  ROCENANTE_HOST_DEVICE static bool exchange(Session& s, int next, int prev, std::uint32_t channel, std::uint64_t off,
                                             std::uint64_t bytes) {
    s.team().sync();
    if (s.team().thread() == 0) (void)s.signal(next, channel, off, bytes);
    return s.wait_peer(prev, channel);
  }
};

static_assert(check_algorithm<ring>());
static_assert(ring::rs_send_chunk(4, 0, 0) == 0 && ring::rs_send_chunk(4, 0, 1) == 3 && ring::owned_chunk(4, 0) == 1);
static_assert(ring::ag_send_chunk(4, 0, 0) == 1 && ring::ag_recv_chunk(4, 0, 0) == 0 && ring::ag_recv_chunk(4, 0, 2) == 2);

}  // namespace rocenante::algorithm

// algorithm/concepts.hpp — AXIS: the algorithm, a tag type carrying its schedule math and its tuning values.
//
//   Requires of an algorithm A:
//     A::name                          printable name ("one_shot", "two_shot", "ring")
//     A::id                            small integer (travels in the flag's call signature)
//     A::channels(n)                   flag channels per (slot, part) at n ranks
//     A::slot_bytes(n, capacity)       payload bytes per slot it needs at n ranks for inputs up to `capacity`
//     A::steps(n)                      communication steps (one_shot: 1; two_shot: 2; ring: 2(n-1))
//     A::wire_bytes(n, bytes)          bytes one rank sends for an all-reduce of `bytes` bytes
//     A::supports_all_gather           whether A implements all_gather
//     A::template supports<R>          whether A can reduce with reduction R (compile-time refusal otherwise)
//   and the collectives, called by every thread of a team, on every rank, for every part:
//     A::template all_reduce<R>(session, in, out, count, parts) -> bool
//     A::template all_gather<R>(session, in, out, count, parts) -> bool   (when supports_all_gather)
//
// Summation order is part of an algorithm's contract, because it decides the bits of the result:
//   one_shot  every rank sums inputs in rank order 0, 1, ..., n-1
//   two_shot  chunk c is summed in rank order 0, 1, ..., n-1, once, by its owner (rank c), and the owner's bits are
//             copied to every rank: the same bits as one_shot (also with an epilogue that depends only on the
//             element index and the sum)
//   ring      chunk c is summed in ring order c, c+1, ..., c+n-1 (mod n), once, by its owner, and the owner's
//             bits are copied to every rank
// With each of them every rank ends with the same bytes.
#pragma once

#include <concepts>
#include <cstdint>

#include "../config.hpp"
#include "../reduce/packet.hpp"

namespace rocenante::algorithm {

/// Ids 3 and 4 are the NVFP4 collectives' (algorithm/one_shot_fp4.hpp); the field on the wire has 3 bits.
enum class algo : std::uint8_t { one_shot = 1, ring = 2, two_shot = 5 };

/// Whether peer `q` writes flag channel `ch` of rank `self` in a call of algorithm id `a` at n ranks: what a
/// transport that learns q is gone aborts on the waiters' behalf (transport/socket.hpp). ring: only the
/// predecessor writes, on every channel (one per step); two_shot: channels q (reduce-scatter) and n+q (all-gather);
/// one_shot, the all-gathers and the NVFP4 collectives: channel q.
ROCENANTE_HOST_DEVICE constexpr bool writes_channel(std::uint32_t a, int n, int self, int q, std::uint32_t ch) {
  if (a == static_cast<std::uint32_t>(algo::ring)) return q == (self + n - 1) % n;
  if (a == static_cast<std::uint32_t>(algo::two_shot)) return ch == static_cast<std::uint32_t>(q) || ch == static_cast<std::uint32_t>(n + q);
  return ch == static_cast<std::uint32_t>(q);
}

/// The default epilogue: store the rounded sum as it is.
struct no_epilogue {
  template <class AccumPacket>
  ROCENANTE_HOST_DEVICE constexpr void operator()(std::uint64_t, AccumPacket&) const {}
};

/// The default gate of the decode-size code (one_shot::all_reduce_small): nothing. A gate is called by every team
/// thread once the call's plan (its range of packets, strides, addresses) is computed and before the call's first
/// read of memory that earlier work may have written (the input, the rank's epoch). The ready-made kernels pass one
/// that waits there for their stream predecessor (programmatic dependent launch, kernel/collectives.cuh), so that
/// a kernel launched early computes its plan while the kernel before it finishes.
struct no_gate {
  ROCENANTE_HOST_DEVICE constexpr void operator()() const {}
};

/// How a decode-size one-shot all-reduce (one packet per thread) moves its packets on directly written windows
/// (algorithm/one_shot.hpp): packets then a flag per peer, LL lines (each 8 payload bytes beside the call's flag),
/// or Lamport packets (the data is its own flag). Chosen from values every rank shares (one_shot::small_protocol_for).
enum class small_protocol : int { packets = 0, ll = 1, lamport = 2 };

/// An epilogue sees every packet of fp32 sums once, before the single rounding to the element type, with the
/// index of its first element: `epi(first_element, acc)` may change acc.v[0..lanes) (e.g. add a residual, scale,
/// apply an activation). It runs where the final sum is formed (every rank in one_shot, the chunk's owner in
/// ring), so every rank still ends with identical bytes, provided the epilogue is a pure function of its
/// arguments and of data identical on every rank. Lanes past `count` are computed and then discarded.
/// Where every all-reduce forms packet `i` of its result: `epi` on the packet's fp32 sums `acc` (which it may
/// change), then the single rounding to the element type, stored to `out` (`count` elements).
template <reduce::reduction R, class Epilogue>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void store_result(typename R::value_type* out, std::uint64_t i,
                                                              std::uint64_t count, reduce::accum_packet<R>& acc,
                                                              const Epilogue& epi) {
  epi(i * reduce::lanes<R>, acc);
  reduce::store_user<R>(out, i, count, reduce::narrow<R>(acc));
}

template <class A>
concept algorithm = requires(int n, std::uint64_t bytes) {
  { A::name } -> std::convertible_to<const char*>;
  { A::id } -> std::convertible_to<algo>;
  { A::channels(n) } -> std::convertible_to<std::uint32_t>;
  { A::slot_bytes(n, bytes) } -> std::convertible_to<std::uint64_t>;
  { A::steps(n) } -> std::convertible_to<std::uint32_t>;
  { A::wire_bytes(n, bytes) } -> std::convertible_to<std::uint64_t>;
  { A::supports_all_gather } -> std::convertible_to<bool>;
};

template <class A>
constexpr bool check_algorithm() {
  static_assert(requires { { A::name } -> std::convertible_to<const char*>; },
                "algorithm is missing `static constexpr const char* name`");
  static_assert(requires { { A::id } -> std::convertible_to<algo>; }, "algorithm is missing `static constexpr algo id`");
  static_assert(requires(int n, std::uint64_t b) {
                  { A::channels(n) } -> std::convertible_to<std::uint32_t>;
                  { A::slot_bytes(n, b) } -> std::convertible_to<std::uint64_t>;
                },
                "algorithm is missing the layout math `channels(n)` and `slot_bytes(n, capacity)`");
  static_assert(algorithm<A>, "algorithm is missing `steps(n)`, `wire_bytes(n, bytes)` or `supports_all_gather`");
  return true;
}

}  // namespace rocenante::algorithm

// reduce/packet.hpp — 16-byte packets of elements and their fp32 accumulators, with the loads and stores
// every algorithm uses. Slot memory is always 16-byte aligned and padded to whole packets; user buffers are
// not: `load_user` / `store_user` handle any alignment and a partial last packet (count not a multiple of
// the packet), so a misaligned pointer or an odd count is served, never declined (hazards H7, H16, H17).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "concepts.hpp"

namespace rocenante::reduce {

template <reduction R>
inline constexpr int lanes = packet_bytes / static_cast<int>(sizeof(typename R::value_type));

/// One packet of elements as stored in memory.
template <reduction R>
struct alignas(packet_bytes) value_packet {
  typename R::value_type v[lanes<R>];
};

/// The same elements widened to the accumulator; what ring algorithms carry between hops.
template <reduction R>
struct accum_packet {
  typename R::accum_type v[lanes<R>];
};

template <reduction R>
inline constexpr std::size_t accum_packet_bytes = sizeof(accum_packet<R>);

namespace detail {
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & (packet_bytes - 1)) == 0;
}
}  // namespace detail

/// Load a packet from 16-byte aligned memory (slot memory).
template <reduction R>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE value_packet<R> load_packet(const void* p) {
  value_packet<R> out;
#if ROCENANTE_DEVICE_PASS
  *reinterpret_cast<uint4*>(&out) = *reinterpret_cast<const uint4*>(p);
#else
  std::memcpy(&out, p, sizeof(out));
#endif
  return out;
}

/// load_packet as one `ld.global.v4` that the compiler keeps in program order with the other loads issued this
/// way: a run of them is in flight together (one memory latency), however the uses are scheduled.
#if ROCENANTE_DEVICE_PASS
/// One 16-byte load issued now, its bits kept as four words until used (unpacking into elements at once would
/// make the thread wait for the load there; see one_shot::all_reduce_small).
ROCENANTE_DEVICE ROCENANTE_FORCEINLINE uint4 load_raw_issue(const void* p) {
  uint4 u;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "l"(p) : "memory");
  return u;
}
#endif

template <reduction R>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE value_packet<R> load_packet_issue(const void* p) {
#if ROCENANTE_DEVICE_PASS
  uint4 u;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "l"(p) : "memory");
  value_packet<R> out;
  *reinterpret_cast<uint4*>(&out) = u;
  return out;
#else
  return load_packet<R>(p);
#endif
}

template <reduction R>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void store_packet(void* p, const value_packet<R>& v) {
#if ROCENANTE_DEVICE_PASS
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&v);
#else
  std::memcpy(p, &v, sizeof(v));
#endif
}

template <reduction R>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE accum_packet<R> load_accum(const void* p) {
  accum_packet<R> out;
#if ROCENANTE_DEVICE_PASS
  constexpr int words = sizeof(out) / sizeof(uint4);
  for (int i = 0; i < words; ++i) reinterpret_cast<uint4*>(&out)[i] = reinterpret_cast<const uint4*>(p)[i];
#else
  std::memcpy(&out, p, sizeof(out));
#endif
  return out;
}

template <reduction R>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void store_accum(void* p, const accum_packet<R>& v) {
#if ROCENANTE_DEVICE_PASS
  constexpr int words = sizeof(v) / sizeof(uint4);
  for (int i = 0; i < words; ++i) reinterpret_cast<uint4*>(p)[i] = reinterpret_cast<const uint4*>(&v)[i];
#else
  std::memcpy(p, &v, sizeof(v));
#endif
}

#if ROCENANTE_DEVICE_PASS
namespace detail {
/// The first `bytes` (0..16) bytes at `s`, any alignment, as one 16-byte word (zero above), byte by byte into four
/// words with constant indices: the packet stays in registers (a byte array written through a pointer would live
/// in local memory, and every load of the caller's loop would then wait for it). Cold (config.hpp).
ROCENANTE_DEVICE ROCENANTE_COLD uint4 load_bytes(const unsigned char* s, int bytes) {
  uint4 w;
  unsigned int* wp[4] = {&w.x, &w.y, &w.z, &w.w};
  ROCENANTE_UNROLL
  for (int k = 0; k < 4; ++k) {
    unsigned int x = 0;
    ROCENANTE_UNROLL
    for (int b = 0; b < 4; ++b)
      if (4 * k + b < bytes) x |= static_cast<unsigned int>(s[4 * k + b]) << (8 * b);
    *wp[k] = x;
  }
  return w;
}

/// The first `bytes` (0..16) bytes of `w` to `d`, any alignment. Cold (config.hpp).
ROCENANTE_DEVICE ROCENANTE_COLD void store_bytes(unsigned char* d, uint4 w, int bytes) {
  const unsigned int ws[4] = {w.x, w.y, w.z, w.w};
  ROCENANTE_UNROLL  // constant indices: the packet stays in registers
  for (int i = 0; i < packet_bytes; ++i)
    if (i < bytes) d[i] = static_cast<unsigned char>(ws[i / 4] >> (8 * (i % 4)));
}
}  // namespace detail
#endif

/// Number of elements of packet `packet` that lie below `count`.
template <reduction R>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE int valid_lanes(std::size_t packet, std::size_t count) {
  const std::size_t first = packet * lanes<R>;
  return count >= first + lanes<R> ? lanes<R> : static_cast<int>(count - first);
}

/// Load packet `packet` of a user buffer of `count` elements at any alignment. Lanes past `count` read as
/// zero bits and are never stored back.
template <reduction R>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE value_packet<R> load_user(const typename R::value_type* base,
                                                                      std::size_t packet, std::size_t count) {
  const auto* src = base + packet * lanes<R>;
  const int n = valid_lanes<R>(packet, count);
#if ROCENANTE_DEVICE_PASS
  if (n == lanes<R> && detail::aligned16(src)) return load_packet<R>(src);
  const uint4 w = detail::load_bytes(reinterpret_cast<const unsigned char*>(src), n * static_cast<int>(sizeof(typename R::value_type)));
  value_packet<R> out;
  *reinterpret_cast<uint4*>(&out) = w;
  return out;
#else
  value_packet<R> out;
  std::memset(&out, 0, sizeof(out));
  std::memcpy(&out, src, static_cast<std::size_t>(n) * sizeof(typename R::value_type));
  return out;
#endif
}

template <reduction R>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void store_user(typename R::value_type* base, std::size_t packet,
                                                            std::size_t count, const value_packet<R>& v) {
  auto* dst = base + packet * lanes<R>;
  const int n = valid_lanes<R>(packet, count);
#if ROCENANTE_DEVICE_PASS
  if (n == lanes<R> && detail::aligned16(dst)) return store_packet<R>(dst, v);
  detail::store_bytes(reinterpret_cast<unsigned char*>(dst), *reinterpret_cast<const uint4*>(&v),
                      n * static_cast<int>(sizeof(typename R::value_type)));
#else
  std::memcpy(static_cast<void*>(dst), &v, static_cast<std::size_t>(n) * sizeof(typename R::value_type));
#endif
}

template <reduction R>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE accum_packet<R> widen(const value_packet<R>& v) {
  accum_packet<R> a;
ROCENANTE_UNROLL
  for (int i = 0; i < lanes<R>; ++i) a.v[i] = R::to_accum(v.v[i]);
  return a;
}

template <reduction R>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void accumulate(accum_packet<R>& acc, const value_packet<R>& v) {
ROCENANTE_UNROLL
  for (int i = 0; i < lanes<R>; ++i) acc.v[i] = R::combine(acc.v[i], R::to_accum(v.v[i]));
}

template <reduction R>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void accumulate(accum_packet<R>& acc, const accum_packet<R>& v) {
ROCENANTE_UNROLL
  for (int i = 0; i < lanes<R>; ++i) acc.v[i] = R::combine(acc.v[i], v.v[i]);
}

/// The single rounding of a sum back to the element type.
template <reduction R>
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE value_packet<R> narrow(const accum_packet<R>& a) {
  value_packet<R> v;
ROCENANTE_UNROLL
  for (int i = 0; i < lanes<R>; ++i) v.v[i] = R::from_accum(a.v[i]);
  return v;
}

}  // namespace rocenante::reduce

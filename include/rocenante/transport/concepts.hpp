// transport/concepts.hpp — AXIS: the transport, which moves payload and flags into peers' windows.
//
// A transport is a host object (set-up: allocation, registration, connection through the bootstrap) that hands
// out a trivially copyable *handle*. The handle is what the protocol uses, on the host or inside a GPU kernel;
// device code never sees verbs or NCCL headers (MSCCL++ style).
//
//   Requires of a transport T (host object):
//     T::name                       printable name ("loopback", "loopback_proxy", "ibverbs")
//     typename T::handle_type       satisfies transport_handle
//     t.handle()                    the handle for this rank
//
//   Requires of a handle H:
//     std::is_trivially_copyable_v<H>            (passed by value to kernels)
//     H::shared_staging             true when put_ptr() is the same local staging buffer for every peer and
//                                   signal() moves the bytes (a proxy or a NIC does); false when put_ptr() is the
//                                   peer's own window (direct stores) and signal() only publishes the flag
//     h.rank(), h.ranks()
//     h.scope()                     memory_scope of the flags: device when every writer is on this GPU,
//                                   system when another GPU, a CPU proxy or a NIC writes them
//     h.layout()                    the window_layout every rank shares
//     h.put_ptr(peer, slot, off)    where to write bytes destined for offset `off` of `peer`'s slot `slot`
//     h.recv_ptr(slot, off)         this rank's own received bytes at (slot, off); a slot is contiguous:
//                                   recv_ptr(slot, off) + k == recv_ptr(slot, off + k)
//     h.local_flag(index)           this rank's own flag word `index` (what it waits on)
//     h.signal(peer, slot, off, bytes, index, value)
//                                   make bytes [off, off+bytes) of slot `slot` visible at `peer`, then set the
//                                   peer's flag `index` to `value`. Ordering guarantee: a peer that reads
//                                   `value` with an acquire load also sees the bytes. The caller must have
//                                   finished writing the bytes (team barrier) before calling.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "../core/atomic.hpp"
#include "../protocol/layout.hpp"

namespace rocenante::transport {

template <class H>
concept transport_handle =
    std::is_trivially_copyable_v<H> &&
    requires(H h, const H ch, int peer, std::uint32_t slot, std::uint64_t off, std::uint64_t index,
             std::uint64_t value) {
      { H::shared_staging } -> std::convertible_to<bool>;
      { ch.rank() } -> std::convertible_to<int>;
      { ch.ranks() } -> std::convertible_to<int>;
      { ch.scope() } -> std::convertible_to<memory_scope>;
      { ch.layout() } -> std::convertible_to<const protocol::window_layout&>;
      { h.put_ptr(peer, slot, off) } -> std::same_as<std::byte*>;
      { ch.recv_ptr(slot, off) } -> std::same_as<const std::byte*>;
      { h.local_flag(index) } -> std::same_as<std::uint64_t*>;
      h.signal(peer, slot, off, off, index, value);
    };

/// Handle H with its rank count made the compile-time constant N: the same object (no members of its own), whose
/// ranks() is N. Code built over it (protocol/, algorithm/) sees every loop over ranks with a known trip count —
/// unrolled, no per-peer bounds checks, loads for sources past the last rank dropped — and is otherwise the code
/// built over H: the same bytes on the wire and in the result. Build one only from a handle whose ranks() is N
/// (with_fixed_ranks checks). gpu::communicator launches its decode-size kernels over it at the rank counts that
/// kernel::all_reduce_variants names (kernel/collectives.cuh).
template <class H, int N>
struct fixed_ranks : H {
  static_assert(N >= 1, "a fixed rank count is at least 1");
  static constexpr int fixed_rank_count = N;
  ROCENANTE_HOST_DEVICE static constexpr int ranks() { return N; }
};

/// N for fixed_ranks<H, N>, 0 for a handle whose rank count is a run-time value.
template <class H>
ROCENANTE_HOST_DEVICE constexpr int fixed_ranks_of() {
  if constexpr (requires { H::fixed_rank_count; })
    return H::fixed_rank_count;
  else
    return 0;
}

/// `h` as fixed_ranks<H, N>; throws std::invalid_argument when h.ranks() != N (host code).
template <int N, class H>
fixed_ranks<H, N> with_fixed_ranks(const H& h) {
  if (h.ranks() != N)
    throw std::invalid_argument("fixed_ranks: the handle has " + std::to_string(h.ranks()) + " ranks, not " + std::to_string(N));
  return fixed_ranks<H, N>{h};
}

template <class T>
concept transport = requires(T& t) {
  { T::name } -> std::convertible_to<const char*>;
  typename T::handle_type;
  { t.handle() } -> std::same_as<typename T::handle_type>;
} && transport_handle<typename T::handle_type>;

template <class T>
constexpr bool check_transport() {
  static_assert(requires { { T::name } -> std::convertible_to<const char*>; },
                "transport is missing `static constexpr const char* name`");
  static_assert(requires { typename T::handle_type; }, "transport is missing `using handle_type = ...`");
  static_assert(requires(T& t) { { t.handle() } -> std::same_as<typename T::handle_type>; },
                "transport is missing `handle_type handle()`");
  static_assert(std::is_trivially_copyable_v<typename T::handle_type>,
                "a transport's handle must be trivially copyable: it is passed by value into GPU kernels");
  static_assert(transport_handle<typename T::handle_type>,
                "transport handle must provide shared_staging, rank(), ranks(), scope(), layout(), put_ptr(peer, slot, off), "
                "recv_ptr(slot, off), local_flag(index) and signal(peer, slot, off, bytes, index, value)");
  return true;
}

}  // namespace rocenante::transport

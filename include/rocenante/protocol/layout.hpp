// protocol/layout.hpp — the memory layout of one rank's window: the memory its peers write into.
//
//   offset 0                 flags   [slot 0..1][part 0..max_parts-1][channel 0..channels-1]  uint64 each
//   data_offset(0)           slot 0  slot_bytes of payload, 16-byte packets
//   data_offset(1)           slot 1  slot_bytes of payload
//   ll_offset(0), (1)        LL area of each slot, ll_bytes: one-shot lines with the flag inside (config.hpp)
//   lamport_offset(0), (1)   Lamport area of each slot, lamport_bytes: one-shot packets that are their own flag
//   input_offset()           symmetric input area, input_bytes: the caller's own input, read by peers in place
//                            (options::symmetric_bytes; algorithm/one_shot.hpp, "In-place path")
//
// A window starts with its flags (flag_unset) and its Lamport areas (empty) all ones and the rest zero
// (window_layout::ones_ranges).
// Every transport uses this layout, so a peer's payload for (slot, offset) lands at the same offset in every
// window (symmetric memory: an RDMA write or a proxy copy needs no address translation beyond the base).
// All arithmetic is checked: a configuration whose window would overflow 64 bits is refused before any
// memory is allocated (hazard H21).
#pragma once

#include <cstdint>

#include "../config.hpp"

namespace rocenante::protocol {

ROCENANTE_HOST_DEVICE constexpr std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }
ROCENANTE_HOST_DEVICE constexpr std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

/// Size of the call trailer a proxy-mode rank writes after its staged bytes when it posts a whole call: the call's
/// flag word and its byte count, one packet (algorithm/one_shot.hpp, "Posting").
inline constexpr std::uint64_t call_trailer_bytes = 16;

struct window_layout {
  std::uint32_t ranks = 0;
  std::uint32_t max_parts = 0;       ///< most parts (CTAs on a GPU) one collective is split into
  std::uint32_t channels = 0;        ///< flag channels per (slot, part): the most any enabled algorithm uses
  std::uint64_t capacity_bytes = 0;  ///< largest input of one rank to one collective
  std::uint64_t source_stride = 0;   ///< capacity rounded up to a packet: one source's region in one-shot
  std::uint64_t slot_bytes = 0;      ///< payload bytes per slot (the most any enabled algorithm needs)
  std::uint64_t ll_bytes = 0;        ///< LL area per slot (0: none); zero when unused, written only as LL lines
  /// Lamport area per slot (0: none; algorithm/one_shot.hpp, "Lamport path"): all ones when unused, written only
  /// as packets in which no element is all ones.
  std::uint64_t lamport_bytes = 0;
  /// Largest input of one rank (bytes) that takes the Lamport path (options::lamport_max_bytes; 0 with no area).
  std::uint64_t lamport_max_bytes = 0;
  /// Proxy-mode layouts (shared staging): calls of at most this many bytes per rank are posted once per call, with a
  /// call trailer after each source's bytes (algorithm/one_shot.hpp, "Posting"); 0: every call posts per part, no
  /// trailer (direct windows always).
  std::uint64_t call_post_max_bytes = 0;
  /// Symmetric input area (0: none): bytes at the same offset of every rank's window that a rank fills with its own
  /// input and its peers read in place (options::symmetric_bytes; directly read windows only).
  std::uint64_t input_bytes = 0;

  ROCENANTE_HOST_DEVICE constexpr std::uint64_t flag_count() const {
    return std::uint64_t{slot_count} * max_parts * channels;
  }
  ROCENANTE_HOST_DEVICE constexpr std::uint64_t flag_index(std::uint32_t slot, std::uint32_t part,
                                                           std::uint32_t channel) const {
    return (std::uint64_t{slot} * max_parts + part) * channels + channel;
  }
  /// Flags are padded to 4 KiB so that payload starts on its own page (and its own cache lines).
  ROCENANTE_HOST_DEVICE constexpr std::uint64_t flags_bytes() const { return align_up(flag_count() * 8, 4096); }
  ROCENANTE_HOST_DEVICE constexpr std::uint64_t data_offset(std::uint32_t slot) const {
    return flags_bytes() + std::uint64_t{slot} * slot_bytes;
  }
  ROCENANTE_HOST_DEVICE constexpr std::uint64_t ll_offset(std::uint32_t slot) const {
    return flags_bytes() + slot_count * slot_bytes + std::uint64_t{slot} * ll_bytes;
  }
  ROCENANTE_HOST_DEVICE constexpr std::uint64_t lamport_offset(std::uint32_t slot) const {
    return flags_bytes() + slot_count * (slot_bytes + ll_bytes) + std::uint64_t{slot} * lamport_bytes;
  }
  ROCENANTE_HOST_DEVICE constexpr std::uint64_t input_offset() const {
    return flags_bytes() + slot_count * (slot_bytes + ll_bytes + lamport_bytes);
  }
  ROCENANTE_HOST_DEVICE constexpr std::uint64_t total_bytes() const { return input_offset() + input_bytes; }
  /// The two ranges of a new window that start as all ones, {offset, bytes} each: the flags (flag_unset) and the
  /// Lamport areas (empty); everything else starts zero.
  struct range_bytes {
    std::uint64_t offset, bytes;
  };
  constexpr range_bytes ones_ranges(int k) const {
    return k == 0 ? range_bytes{0, flags_bytes()} : range_bytes{lamport_offset(0), slot_count * lamport_bytes};
  }
  /// Bytes after a source's packets for the call trailer (0 where calls are never posted once per call).
  ROCENANTE_HOST_DEVICE constexpr std::uint64_t trailer_bytes() const { return call_post_max_bytes != 0 ? call_trailer_bytes : 0; }
};

/// Multiply-add with overflow detection, for layout arithmetic on untrusted configuration values.
ROCENANTE_HOST_DEVICE constexpr bool checked_mul(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  if (a != 0 && b > ~std::uint64_t{0} / a) return false;
  out = a * b;
  return true;
}

}  // namespace rocenante::protocol

// protocol/flags.hpp — the 64-bit flag word a rank writes into a peer's window after the payload.
//
//   bits 0..31   sequence number of the collective (free-running, wraps at 2^32; compared for equality only)
//   bits 32..63  call signature: 8-bit tag (collective, algorithm, dtype), 3-bit reduction operator and 21 bits
//                from the element count
//
// A waiter accepts only the exact word it expects. A word with the right sequence but another signature means
// the peer entered a different collective (other count, type, operator or algorithm) and fails the call with
// status::mismatch on both sides, instead of mixing bytes (hazard H17). Windows start filled with `flag_unset`, whose tag
// byte (0xff) no call produces, so a fresh window never satisfies a wait — also when the first sequence is 0.
// A word left in a window from 2^32 calls ago would look current: session::finish clears unused words at the
// sequence wrap points (session.hpp, scrub_point).
#pragma once

#include <cstddef>
#include <cstdint>

#include "../config.hpp"

namespace rocenante::protocol {

enum class collective : std::uint8_t { all_reduce = 1, all_gather = 2 };

inline constexpr std::uint64_t flag_unset = ~std::uint64_t{0};

/// 8-bit tag: collective (2 bits) | algorithm id (3 bits) | dtype id (3 bits). Never 0xff.
ROCENANTE_HOST_DEVICE constexpr std::uint32_t call_tag(collective c, std::uint32_t algorithm_id,
                                                       std::uint32_t dtype_id) {
  return ((static_cast<std::uint32_t>(c) & 0x3u) << 6) | ((algorithm_id & 0x7u) << 3) | (dtype_id & 0x7u);
}

/// Bits of the count carried in a signature (exact below 2^count_field_bits elements).
inline constexpr std::uint32_t count_field_bits = 21;
inline constexpr std::uint32_t count_field_mask = (1u << count_field_bits) - 1u;
/// Bits of the reduction operator id (reduce::reduce_op; 0 = sum and every all-gather).
inline constexpr std::uint32_t op_field_bits = 3;

/// 21 bits that identify a count: exact for counts below 2^21 elements; above that the upper bits are mixed
/// in (murmur3 finaliser) so that counts differing only above bit 21 still differ here with probability
/// 1 - 2^-21.
ROCENANTE_HOST_DEVICE constexpr std::uint32_t count_bits(std::uint64_t count) {
  std::uint64_t upper = count >> count_field_bits;
  std::uint32_t hi = static_cast<std::uint32_t>(upper) ^ static_cast<std::uint32_t>(upper >> 32);
  hi ^= hi >> 16;
  hi *= 0x85ebca6bu;
  hi ^= hi >> 13;
  hi *= 0xc2b2ae35u;
  hi ^= hi >> 16;
  return (static_cast<std::uint32_t>(count) ^ (upper != 0 ? hi : 0u)) & count_field_mask;
}

/// The signature of a call: tag (bits 24..31) | operator id (21..23) | count_bits (0..20). Every rank computes
/// it from its own arguments; two ranks whose calls differ in any of these fail with status::mismatch.
ROCENANTE_HOST_DEVICE constexpr std::uint32_t call_signature(collective c, std::uint32_t algorithm_id,
                                                             std::uint32_t dtype_id, std::uint32_t op_id,
                                                             std::uint64_t count) {
  return (call_tag(c, algorithm_id, dtype_id) << 24) | ((op_id & 0x7u) << count_field_bits) | count_bits(count);
}

/// The fields of a signature, for messages (host/setup.hpp describe_failure).
ROCENANTE_HOST_DEVICE constexpr std::uint32_t signature_collective(std::uint32_t sig) { return (sig >> 30) & 0x3u; }
ROCENANTE_HOST_DEVICE constexpr std::uint32_t signature_algorithm(std::uint32_t sig) { return (sig >> 27) & 0x7u; }
ROCENANTE_HOST_DEVICE constexpr std::uint32_t signature_dtype(std::uint32_t sig) { return (sig >> 24) & 0x7u; }
ROCENANTE_HOST_DEVICE constexpr std::uint32_t signature_op(std::uint32_t sig) { return (sig >> count_field_bits) & 0x7u; }
ROCENANTE_HOST_DEVICE constexpr std::uint32_t signature_count(std::uint32_t sig) { return sig & count_field_mask; }

ROCENANTE_HOST_DEVICE constexpr std::uint64_t make_flag(std::uint32_t seq, std::uint32_t signature) {
  return (static_cast<std::uint64_t>(signature) << 32) | seq;
}
ROCENANTE_HOST_DEVICE constexpr std::uint32_t flag_seq(std::uint64_t f) { return static_cast<std::uint32_t>(f); }
ROCENANTE_HOST_DEVICE constexpr std::uint32_t flag_signature(std::uint64_t f) {
  return static_cast<std::uint32_t>(f >> 32);
}

/// Signature of the abort flag a rank publishes when it refuses a collective its peers may have entered, or when
/// one of its waits failed (session::abort_peers): tag 0xfe, which no call produces (collective ids stay below
/// 3), then the failure kind (8 bits), the rank the failure points at (8 bits) and the rank that detected it
/// (8 bits; max_ranks <= 256). Every rank that relays an abort keeps all three, so all ranks report the same
/// culprit however the news reached them, and a rank named as the culprit of a mismatch can name the rank that
/// saw it instead of blaming itself.
/// A reporter of -1 (a transport that writes the abort into its own rank's window) is carried as "unknown".
ROCENANTE_HOST_DEVICE constexpr std::uint32_t abort_signature(std::uint32_t kind, int suspect, int reporter = -1) {
  return (0xfeu << 24) | ((kind & 0xffu) << 16) | ((static_cast<std::uint32_t>(suspect) & 0xffu) << 8) |
         (static_cast<std::uint32_t>(reporter) & 0xffu);
}
ROCENANTE_HOST_DEVICE constexpr bool is_abort(std::uint32_t signature) { return (signature >> 24) == 0xfeu; }
ROCENANTE_HOST_DEVICE constexpr std::uint32_t abort_kind(std::uint32_t signature) { return (signature >> 16) & 0xffu; }
ROCENANTE_HOST_DEVICE constexpr int abort_rank(std::uint32_t signature) { return static_cast<int>((signature >> 8) & 0xffu); }
/// The rank that detected the failure, or -1 when unknown.
ROCENANTE_HOST_DEVICE constexpr int abort_reporter(std::uint32_t signature) {
  return (signature & 0xffu) == 0xffu ? -1 : static_cast<int>(signature & 0xffu);
}
static_assert(max_ranks < 256, "abort flags carry ranks in 8 bits (0xff: unknown reporter)");

/// Signature of the flag word an LL call writes (the one-shot all-reduce's LL path, algorithm/one_shot.hpp, which
/// carries its data-ready flag inside the data): the call's signature with tag bits 7..6 set, a tag no call
/// produces (collective ids are 1 and 2). A waiter on the packet path therefore never takes it for a data-ready
/// flag — a peer that took the other path at this sequence is a mismatch, never data read too early — and an LL
/// waiter compares it like any flag: this sequence with another signature is a mismatch.
ROCENANTE_HOST_DEVICE constexpr std::uint32_t ll_word_signature(std::uint32_t signature) { return signature | 0xc0000000u; }

static_assert(call_tag(collective::all_gather, 7, 7) < 0xc0u, "no call may produce the unset or abort tags");
static_assert((ll_word_signature(call_signature(collective::all_reduce, 1, 7, 7, 0)) >> 24) == 0xcfu,
              "the one-shot all-reduce's LL word tags (0xc8..0xcf) are neither a call's, nor abort, nor unset");
static_assert(make_flag(0u, call_signature(collective::all_reduce, 0, 1, 0, 0)) != flag_unset);
static_assert(call_signature(collective::all_reduce, 1, 3, 1, 5) != call_signature(collective::all_reduce, 1, 3, 0, 5),
              "the operator is part of the signature");
static_assert(signature_op(call_signature(collective::all_gather, 2, 3, 5, 0x1fffff)) == 5 &&
              signature_count(call_signature(collective::all_gather, 2, 3, 5, 0x1fffff)) == 0x1fffff &&
              signature_algorithm(call_signature(collective::all_gather, 2, 3, 5, 7)) == 2 &&
              signature_dtype(call_signature(collective::all_gather, 2, 3, 5, 7)) == 3 &&
              signature_collective(call_signature(collective::all_gather, 2, 3, 5, 7)) == 2);

}  // namespace rocenante::protocol

// protocol/state.hpp — the per-rank epoch and health record. It lives where the code that runs the protocol
// lives (host memory for the host executor, device memory for GPU kernels) and is what makes a CUDA graph
// replay correct: the sequence number is read from here at every launch, never baked into a launch.
#pragma once

#include <cstdint>

#include "../config.hpp"
#include "../core/atomic.hpp"

namespace rocenante::protocol {

enum class failure_kind : std::uint32_t {
  none = 0,
  timeout = 1,   ///< a peer's flag did not arrive within the time or poll budget
  mismatch = 2,  ///< a peer's flag carried the right sequence but another call signature
  peer_rejected = 3,  ///< a peer refused this collective (bad input there) and published an abort flag
  rejected = 4,       ///< this rank refused a call after its peers may have entered it (bad input here)
  proxy_stalled = 5,  ///< the proxy (or NIC) did not drain this rank's post queue within the timeout
};

/// What went wrong, written once by the first thread that detects a failure. Plain data; read on the host.
struct failure_record {
  std::uint32_t kind;      ///< failure_kind
  std::int32_t peer;       ///< the rank that was waited for
  std::uint32_t seq;       ///< sequence number of the failed collective
  std::uint32_t slot;      ///< slot (seq & 1)
  std::uint32_t part;      ///< part (CTA) that waited
  std::uint32_t channel;   ///< flag channel that was waited on
  std::uint64_t expected;  ///< flag word waited for
  std::uint64_t observed;  ///< flag word seen last
  std::uint64_t waited_ns; ///< how long the wait lasted
  std::uint32_t relayed;   ///< 1 when this rank learned of the failure from a peer's abort flag
  std::int32_t reporter;   ///< the rank that detected the failure (this rank, unless relayed)
};

/// poison values
inline constexpr std::uint32_t healthy = 0;
inline constexpr std::uint32_t poisoning = 1;  ///< a failure is being recorded
inline constexpr std::uint32_t poisoned = 2;   ///< failure record complete and visible

/// The epoch is kept per part: part p of a collective reads seq[p] at entry and, when it finishes, writes the
/// next sequence into every entry it is responsible for (p, p + parts, p + 2 parts, ... below max_parts), so
/// every entry advances exactly once per collective whatever the part count of the next one. Plain stores,
/// no counter and no atomic read-modify-write: a CTA can exit without waiting for a round trip to L2 (the
/// next collective on the stream starts after this kernel completes, which makes the stores visible; the host
/// executor runs parts in order on one thread). A collective whose parts disagree on seq is impossible for the
/// same reason. seq[0] is the rank's "next sequence" reported to users.
struct rank_state {
  std::uint32_t poison;      ///< healthy / poisoning / poisoned
  std::uint32_t part0_failed;  ///< 1 once part 0 has ended a call unfinished (count_failed_call)
  /// Parts of the call in progress that have staged, for a call posted once (session::post_call): the last part to
  /// arrive posts the call and sets it back to 0, so it is 0 between calls whatever their part counts. Only a call
  /// that fails half-way leaves it elsewhere, and the rank is poisoned then (every later call is a no-op).
  std::uint32_t arrived;
  std::uint32_t pad_;
  std::uint64_t failures;    ///< collectives of this rank that did not complete (failures(); mirrored to the host)
  failure_record failure;
  std::uint32_t seq[max_parts_limit];  ///< sequence number of the next collective, per part
#ifdef ROCENANTE_TRACE_PHASES
  /// Phase timestamps of part 0, thread 0 (benchmarks/gpu/trace_phases.cu; never in a normal build):
  /// [seq % trace_slots][point] = SM cycle counter, trace_ns = %globaltimer at the same points.
  static constexpr int trace_slots = 64, trace_points = 8;
  std::uint64_t trace[trace_slots][trace_points];
  std::uint64_t trace_ns[trace_slots][trace_points];
  /// The cross-rank timeline of a call in proxy mode (shared-staging handles only, so that the direct paths' phase
  /// trace costs what it did): part 0's phases cannot say when the part that staged last rang the doorbell, nor when
  /// each peer's flag came back, and in a call posted once those decide its length. %globaltimer ns, comparable across
  /// ranks that share one GPU; the proxy's host stamps (transport::proxy_timeline) are mapped onto the same clock by
  /// the tool. Parts from timeline_parts on are not stamped.
  static constexpr int timeline_parts = 16;
  struct part_stamps {
    std::uint64_t enter;              ///< enter() began (this part's trace point 0)
    std::uint64_t staged;             ///< thread 0 past the team barrier that ends staging (trace point 2)
    std::uint64_t counted;            ///< posted once: this part's count (post_call's system-scope add) returned
    std::uint64_t posted[max_ranks];  ///< posted per part: the descriptor for peer q published (its stamp stored)
    std::uint64_t seen[max_ranks];    ///< the thread that waited for peer q saw q's flag (every rail of it)
  };
  struct call_stamps {
    std::uint64_t doorbell;    ///< posted once: the last part's descriptor published, after the trailer
    std::uint32_t last_part;   ///< posted once: the part that counted last and rang the doorbell
    std::uint32_t posted_once; ///< 1 when the call was posted once
  };
  part_stamps timeline[trace_slots][timeline_parts];
  call_stamps call[trace_slots];
#endif
};

ROCENANTE_HOST_DEVICE inline void init_state(rank_state& s, std::uint32_t first_seq) {
  s = rank_state{};
  for (std::uint32_t p = 0; p < max_parts_limit; ++p) s.seq[p] = first_seq;
}

/// The rank's own state is touched only by the code that runs this rank (device scope); the mirror is read by
/// the host (system scope).
inline constexpr cuda::thread_scope state_scope = cuda::thread_scope_device;

/// Kind a relayed abort is recorded as: a refusal there is a peer_rejected here; timeouts and mismatches keep
/// their kind (with the culprit they named).
ROCENANTE_HOST_DEVICE constexpr failure_kind relayed_kind(std::uint32_t k) {
  switch (static_cast<failure_kind>(k)) {
    case failure_kind::rejected:
    case failure_kind::peer_rejected: return failure_kind::peer_rejected;
    case failure_kind::mismatch: return failure_kind::mismatch;
    default: return failure_kind::timeout;
  }
}

ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE bool is_poisoned(rank_state* s) {
  return detail::load_acquire<std::uint32_t, state_scope>(&s->poison) != healthy;
}

/// Adds one failed collective to the count, and to the mirror when there is one. One thread per failed collective
/// calls it (never two at once: calls of a rank run in order), so a load and a store suffice.
ROCENANTE_HOST_DEVICE ROCENANTE_COLD void count_failure(rank_state* s, rank_state* mirror) {
  const std::uint64_t v = detail::load_relaxed<std::uint64_t>(&s->failures) + 1;
  detail::store_release<std::uint64_t>(&s->failures, v);
  if (mirror != nullptr) detail::store_release<std::uint64_t>(&mirror->failures, v);
}

/// Record a failure and poison the rank. Only the first caller's record is kept; later callers return false.
/// `mirror`, when not null, receives a copy of the record and the poison word: GPU communicators keep their
/// state in device memory (fast to poll) and a mirror in host-mapped memory, so that the host can read the
/// health of a rank without synchronizing the device (hazard H13).
ROCENANTE_HOST_DEVICE ROCENANTE_COLD bool poison(rank_state* s, const failure_record& rec, rank_state* mirror = nullptr) {
  if (!detail::compare_exchange<std::uint32_t, state_scope>(&s->poison, healthy, poisoning)) return false;
  s->failure = rec;
  detail::store_release<std::uint32_t, state_scope>(&s->poison, poisoned);
  if (mirror != nullptr) {
    mirror->failure = rec;
    detail::store_release(&mirror->poison, poisoned);
  }
  count_failure(s, mirror);  // the collective that poisoned the rank, counted by the one thread that poisoned it
  return true;
}

/// Collectives of this rank that did not complete (failed, timed out, refused, or called on a poisoned rank).
/// Any thread may read it (relaxed); a kernel of a captured graph reads it from device::context::state, the host
/// from the mirror (gpu::communicator::failures()) or from the host executor's state.
ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE std::uint64_t failures(rank_state* s) {
  return detail::load_relaxed<std::uint64_t>(&s->failures);
}

/// Thread 0 of part 0 calls it after a call of this rank ended unfinished — a wait failed, or the call returned at
/// entry on a poisoned rank — and counts the call unless it is the one that poisoned the rank (poison() counted
/// that one, in whichever part failed first). Part 0's first unfinished call is the poisoning one exactly when
/// part 0 had not finished it: its epoch entry seq[0] still holds the failed sequence. Later calls always count.
/// Parts other than 0 never count: every part of a call on a poisoned rank returns at entry, part 0 included.
ROCENANTE_HOST_DEVICE ROCENANTE_COLD void count_failed_call(rank_state* s, rank_state* mirror) {
  std::uint32_t p = detail::load_acquire<std::uint32_t, state_scope>(&s->poison);
  for (int spins = 0; p == poisoning && spins < (1 << 20); ++spins)  // another part is writing the record
    p = detail::load_acquire<std::uint32_t, state_scope>(&s->poison);
  if (p != poisoned) return;
  if (s->part0_failed == 0) {
    s->part0_failed = 1;
    if (detail::load_relaxed<std::uint32_t, state_scope>(&s->seq[0]) == s->failure.seq) return;
  }
  count_failure(s, mirror);
}

}  // namespace rocenante::protocol

// protocol/session.hpp — the collective protocol, written once for host and device:
//
//   enter    the team votes on the poison word; a poisoned rank does nothing (every later call is a no-op)
//   stage    (the algorithm writes payload through the transport handle's put_ptr)
//   signal   after a team barrier, publish flag = (seq, call signature) in each peer's window
//   wait     poll own flags, bounded by time (ns clock) and by a poll budget, whichever ends first
//   reduce   (the algorithm sums the received packets in a fixed order)
//   finish   the last part to finish advances the epoch (seq += 1); a failed part never does
//
// One `session` object serves one part (one CTA / one host loop iteration) of one collective.
//
// Memory ordering: payload stores by any team thread -> team.sync() -> release store of the flag by the
// signalling thread (cumulative through the barrier) -> peer's acquire load of the flag -> peer's team.all()
// barrier -> peer's loads of the payload. See docs/design.md, "Memory ordering".
//
// Why two slots suffice: a rank starts collective s+2 (same slot as s) only after it received every peer's flag
// of s+1, and a peer signals s+1 only after its own part of s has finished reading slot s & 1. Parts never
// overlap between collectives of one rank: each rank runs its collectives in order (one stream / one thread).
#pragma once

#include <cstdint>

#include "../config.hpp"
#include "../core/atomic.hpp"
#include "../core/clock.hpp"
#include "flags.hpp"
#include "state.hpp"
#include "team.hpp"

namespace rocenante::protocol {

/// How long a wait may last. Both bounds apply; the first to run out ends the wait (HAZARDS #11: a poll count
/// alone is not a time bound under memory contention).
struct wait_policy {
  std::uint64_t timeout_ns = 10'000'000'000ull;  ///< 0 = no time bound (not recommended)
  std::uint64_t max_polls = 0;                   ///< 0 = no poll budget
};

enum class outcome : std::uint32_t { ok = 0, poisoned, failed };

template <team Team, class Handle>
class session {
 public:
  using handle_type = Handle;
  using team_type = Team;

  ROCENANTE_HOST_DEVICE session(Team& team, Handle& handle, rank_state* state, wait_policy policy,
                                std::uint32_t signature, std::uint32_t part, rank_state* mirror = nullptr)
      : team_(team), h_(handle), state_(state), mirror_(mirror), policy_(policy), signature_(signature), part_(part) {}

  /// Every team thread calls. Returns false when the rank is poisoned; the caller returns at once.
  ROCENANTE_HOST_DEVICE bool enter() {
    bool healthy_now = true;
    if (team_.thread() == 0) healthy_now = !is_poisoned(state_);
    // Every thread reads seq; it cannot change until this part finishes (only the last part advances it).
    seq_ = detail::load_relaxed(&state_->seq);
    return team_.all(healthy_now);
  }

  ROCENANTE_HOST_DEVICE std::uint32_t seq() const { return seq_; }
  ROCENANTE_HOST_DEVICE std::uint32_t slot() const { return seq_ & 1u; }
  ROCENANTE_HOST_DEVICE std::uint32_t part() const { return part_; }
  ROCENANTE_HOST_DEVICE std::uint64_t flag_value() const { return make_flag(seq_, signature_); }
  ROCENANTE_HOST_DEVICE Team& team() { return team_; }
  ROCENANTE_HOST_DEVICE Handle& handle() { return h_; }

  /// One thread calls, after a team barrier that follows the staging of [off, off+bytes).
  ROCENANTE_HOST_DEVICE void signal(int peer, std::uint32_t channel, std::uint64_t off, std::uint64_t bytes) {
    const std::uint64_t index = h_.layout().flag_index(slot(), part_, channel);
    h_.signal(peer, slot(), off, bytes, index, flag_value());
  }

  /// Wait for `peer`'s flag on `channel` of this part. One thread calls; returns false on failure (after
  /// recording it and poisoning the rank) or when another part poisoned the rank meanwhile.
  ROCENANTE_HOST_DEVICE bool wait_one(int peer, std::uint32_t channel) {
    const std::uint64_t index = h_.layout().flag_index(slot(), part_, channel);
    std::uint64_t* flag = h_.local_flag(index);
    const std::uint64_t expected = flag_value();
    const std::uint64_t start = detail::now_ns();
    std::uint64_t polls = 0;
    for (;;) {
      const std::uint64_t seen = detail::load_acquire(flag);
      if (seen == expected) return true;
      ++polls;
      const bool mismatch = flag_seq(seen) == seq_ && seen != flag_unset;
      if (mismatch) return fail(failure_kind::mismatch, peer, channel, expected, seen, detail::now_ns() - start);
      if ((polls & 15u) == 0) {
        if (is_poisoned(state_)) return false;
        const std::uint64_t waited = detail::now_ns() - start;
        const bool out_of_time = policy_.timeout_ns != 0 && waited >= policy_.timeout_ns;
        const bool out_of_polls = policy_.max_polls != 0 && polls >= policy_.max_polls;
        if (out_of_time || out_of_polls) return fail(failure_kind::timeout, peer, channel, expected, seen, waited);
      }
      detail::relax(polls);
    }
  }

  /// Every team thread calls: wait for the flags of every peer in [0, ranks) except `self`, where
  /// channel_of(q) names peer q's channel. Peers are spread over the team's threads (one poller per peer when
  /// the team is large enough). Returns the team-wide verdict; on success, the payload is visible to every
  /// team thread.
  template <class ChannelOf>
  ROCENANTE_HOST_DEVICE bool wait_peers(int ranks, int self, ChannelOf channel_of) {
    bool ok = true;
    for (int q = team_.thread(); q < ranks; q += team_.size()) {
      if (q == self) continue;
      ok = ok && wait_one(q, channel_of(q));
    }
    return team_.all(ok);
  }

  /// Every team thread calls: wait for one peer on one channel (ring steps).
  ROCENANTE_HOST_DEVICE bool wait_peer(int peer, std::uint32_t channel) {
    bool ok = true;
    if (team_.thread() == 0) ok = wait_one(peer, channel);
    return team_.all(ok);
  }

  /// Every team thread calls, after its last access to slot memory of this collective. The last of `parts`
  /// parts to finish advances the epoch. Parts counted with their own counter, reset to zero by the last
  /// arrival — never a modulo of a free-running counter (HAZARDS #2, #3).
  ROCENANTE_HOST_DEVICE void finish(std::uint32_t parts) {
    team_.sync();
    if (team_.thread() == 0) {
      const std::uint32_t done = detail::fetch_add_acq_rel(&state_->parts_done, 1u) + 1u;
      if (done == parts) {
        detail::store_relaxed(&state_->parts_done, 0u);
        detail::store_release(&state_->seq, seq_ + 1u);  // wraps at 2^32 by design
      }
    }
  }

 private:
  ROCENANTE_HOST_DEVICE bool fail(failure_kind kind, int peer, std::uint32_t channel, std::uint64_t expected,
                                  std::uint64_t seen, std::uint64_t waited) {
    failure_record rec{};
    rec.kind = static_cast<std::uint32_t>(kind);
    rec.peer = peer;
    rec.seq = seq_;
    rec.slot = slot();
    rec.part = part_;
    rec.channel = channel;
    rec.expected = expected;
    rec.observed = seen;
    rec.waited_ns = waited;
    poison(state_, rec, mirror_);
    return false;
  }

  Team& team_;
  Handle& h_;
  rank_state* state_;
  rank_state* mirror_;
  wait_policy policy_;
  std::uint32_t signature_;
  std::uint32_t part_;
  std::uint32_t seq_ = 0;
};

}  // namespace rocenante::protocol

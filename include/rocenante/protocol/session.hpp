// protocol/session.hpp — the collective protocol, written once for host and device:
//
//   enter    the team votes on the poison word; a poisoned rank does nothing (every later call is a no-op)
//   stage    (the algorithm writes payload through the transport handle's put_ptr)
//   signal   after a team barrier, publish flag = (seq, call signature) in each peer's window
//   wait     poll own flags, bounded by time (ns clock) and by a poll budget, whichever ends first
//   reduce   (the algorithm sums the received packets in a fixed order)
//   finish   each part advances its entries of the per-part epoch (seq += 1); a failed part never does
//
// One `session` object serves one part (one CTA / one host loop iteration) of one collective.
//
// Memory ordering: payload stores by any team thread -> team.sync() -> release store of the flag by the
// signalling thread (cumulative through the barrier) -> peer's acquire load of the flag -> peer's team.all()
// barrier -> peer's loads of the payload. See docs/design.md, "Memory ordering".
//
// Why two slots suffice (one_shot): a rank starts collective s+2 (same slot as s) only after it received every
// peer's flag of s+1, and a peer signals s+1 only after it has finished s, reading of slot s & 1 included: each
// rank runs its collectives in order (one stream / one thread), so no part of s+1 starts before every part of s
// has finished. two_shot receives from every peer in its second step, so the same argument holds. Ring receives
// flags only from its previous neighbour; there the argument runs through the last all-gather step, which carries
// the chunk the next rank owns (docs/design.md, "Why two slots suffice").
#pragma once

#include <cstdint>
#include <type_traits>

#include "../config.hpp"
#include "../core/atomic.hpp"
#include "../core/clock.hpp"
#include "flags.hpp"
#include "layout.hpp"
#include "state.hpp"
#include "team.hpp"

namespace rocenante::protocol {

/// How long a wait may last. Both bounds apply; the first to run out ends the wait (hazard H11: a poll count
/// alone is not a time bound under memory contention).
struct wait_policy {
  std::uint64_t timeout_ns = 10'000'000'000ull;  ///< 0 = no time bound (not recommended)
  std::uint64_t max_polls = 0;                   ///< 0 = no poll budget
};

enum class outcome : std::uint32_t { ok = 0, poisoned, failed };

/// Extra time per hop of a chained wait (see session::wait_one): a quarter of the timeout, at most 250 ms. It
/// must exceed the scheduling jitter between ranks (a rank descheduled for tens of milliseconds on a loaded
/// host), or a downstream wait can expire before the upstream one and blame a live rank. It costs nothing in the
/// common case: when a rank dies between collectives its successor's wait is at hop 0 and expires at the
/// timeout, and its abort flag ends every other wait at once. Only a death in the middle of a ring collective,
/// at step j, is reported at timeout + j x hop_grace.
ROCENANTE_HOST_DEVICE constexpr std::uint64_t hop_grace(std::uint64_t timeout_ns) {
  const std::uint64_t g = timeout_ns >> 2;
  return g < 250'000'000ull ? g : 250'000'000ull;
}

template <team Team, class Handle>
class session {
  /// CTAs of one collective run at the same time; the host executor runs its parts in order on one thread.
  static constexpr bool parts_run_concurrently = ROCENANTE_DEVICE_PASS != 0;

 public:
  using handle_type = Handle;
  using team_type = Team;

  ROCENANTE_HOST_DEVICE session(Team& team, Handle& handle, rank_state* state, wait_policy policy,
                                std::uint32_t signature, std::uint32_t part, rank_state* mirror = nullptr)
      : team_(team),
        h_(handle),
        state_(state),
        mirror_(mirror),
        policy_(policy),
        signature_(detail::held(signature)),  // computed once, before the call's first wait (config.hpp)
        part_(part) {}

  /// Every team thread calls. Returns false when the rank is poisoned; the caller returns at once.
  /// Both words are read with relaxed loads issued together (one memory latency, not two): the previous
  /// collective of this rank completed before this one started (stream order), so its writes are visible; a
  /// poisoning in progress in another part of this collective is caught by the waits.
  ROCENANTE_HOST_DEVICE bool enter() {
#if defined(ROCENANTE_TRACE_PHASES) && ROCENANTE_DEVICE_PASS
    t0_clk_ = clock64();
    t0_ns_ = detail::now_ns();
#endif
    bool healthy_now = true;
    // Every thread reads seq; it cannot change until this part finishes.
    seq_ = detail::load_relaxed<std::uint32_t, state_scope>(&state_->seq[part_]);
    if (team_.thread() == 0)
      healthy_now = detail::load_relaxed<std::uint32_t, state_scope>(&state_->poison) == healthy;
    return team_.all(healthy_now);
  }

  /// Trace point 7: the call's start, after its gate (one_shot::all_reduce_small: where a kernel's wait for its
  /// stream predecessor returns), recorded with point 0; compiled only with ROCENANTE_TRACE_PHASES.
  ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void started() {
#if defined(ROCENANTE_TRACE_PHASES) && ROCENANTE_DEVICE_PASS
    ts_clk_ = clock64();
    ts_ns_ = detail::now_ns();
#endif
  }

  /// Phase timestamp `point` (0..7) of this collective, by thread 0 of part 0; compiled only with
  /// ROCENANTE_TRACE_PHASES (benchmarks/gpu/trace_phases.cu), otherwise nothing.
  ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void trace([[maybe_unused]] int point) {
#if defined(ROCENANTE_TRACE_PHASES) && ROCENANTE_DEVICE_PASS
    if (part_ == 0 && team_.thread() == 0) {
      const int slot = static_cast<int>(seq_ % rank_state::trace_slots);
      state_->trace[slot][point] = point == 0 ? t0_clk_ : clock64();
      state_->trace_ns[slot][point] = point == 0 ? t0_ns_ : detail::now_ns();
      if (point == 0) {
        state_->trace[slot][7] = ts_clk_;
        state_->trace_ns[slot][7] = ts_ns_;
      }
    }
    // Every part's end of staging (point 2 comes right after the team barrier that follows it), for the proxy-mode
    // timeline: the part that stages last decides when a call posted once can ring its doorbell.
    if constexpr (Handle::shared_staging)
      if (point == 2 && team_.thread() == 0)
        if (rank_state::part_stamps* p = stamps()) {
          p->enter = t0_ns_;
          p->staged = detail::now_ns();
        }
#endif
  }

  ROCENANTE_HOST_DEVICE std::uint32_t seq() const { return seq_; }
  ROCENANTE_HOST_DEVICE std::uint32_t slot() const { return seq_ & 1u; }
  ROCENANTE_HOST_DEVICE std::uint32_t part() const { return part_; }
  ROCENANTE_HOST_DEVICE std::uint64_t flag_value() const { return make_flag(seq_, signature_); }
  ROCENANTE_HOST_DEVICE Team& team() { return team_; }
  ROCENANTE_HOST_DEVICE Handle& handle() { return h_; }

  /// One thread calls, after a team barrier that follows the staging of [off, off+bytes). With a
  /// shared_staging handle (proxy, NIC) one thread per part posts every signal of the part (single producer).
  /// A handle whose signal() can fail (a full post queue that the proxy did not drain in time) poisons the rank;
  /// the wait that follows then ends at once.
  ROCENANTE_HOST_DEVICE bool signal(int peer, std::uint32_t channel, std::uint64_t off, std::uint64_t bytes) {
    const std::uint64_t index = h_.layout().flag_index(slot(), part_, channel);
    if constexpr (std::is_same_v<decltype(h_.signal(peer, slot(), off, bytes, index, flag_value())), bool>) {
      if (!h_.signal(peer, slot(), off, bytes, index, flag_value()))
        return fail(failure_kind::proxy_stalled, peer, channel, flag_value(), 0, policy_.timeout_ns);
    } else {
      h_.signal(peer, slot(), off, bytes, index, flag_value());
    }
    timeline_posted(peer);
    return true;
  }

  /// Wait for `peer`'s flag on `channel` of this part. One thread calls; returns false on failure (after
  /// recording it and poisoning the rank) or when another part poisoned the rank meanwhile.
  ///
  /// `hop` is the step of a chained wait (ring step j waits for a flag that exists only after every earlier
  /// step succeeded somewhere upstream). When a ring rank dies, every survivor's wait started at about the same
  /// moment; without a tie-break the downstream ranks time out together with the dead rank's neighbour and blame
  /// their own (alive) predecessors. Each hop therefore adds hop_grace(timeout) to the bound, so the wait
  /// closest to the dead rank expires first and its abort flag — naming the dead rank — reaches everyone else
  /// before their own deadlines.
  ROCENANTE_HOST_DEVICE bool wait_one(int peer, std::uint32_t channel, std::uint32_t hop = 0) {
    return wait_word(peer, channel, h_.layout().flag_index(slot(), part_, channel), hop,
                     [](std::uint64_t) { return foreign_word::mismatch; });
  }

  /// What a word of this sequence that is neither the awaited one nor an abort means to a wait (wait_word).
  enum class foreign_word {
    landing,   ///< a write of the awaited word still landing: keep waiting
    mismatch,  ///< a peer in another call
    arrived,   ///< the awaited word arrived and was cleared since (wait_call: cleared_after_seen)
  };

  /// wait_one for flag word `index`. `judge(seen)` says what a word of this sequence that is neither the awaited one
  /// nor an abort means (foreign_word).
  template <class Judge>
  ROCENANTE_HOST_DEVICE bool wait_word(int peer, std::uint32_t channel, std::uint64_t index, std::uint32_t hop,
                                       const Judge& judge) {
    std::uint64_t* flag = h_.local_flag(index);
    const std::uint64_t expected = flag_value();
    const std::uint64_t start = detail::now_ns();
    std::uint64_t polls = 0;
    for (;;) {
      const std::uint64_t seen = detail::load_acquire(flag, h_.scope());
      if (seen == expected) return true;
      ++polls;
      if (flag_seq(seen) == seq_ && seen != flag_unset) {
        const foreign_word v = is_abort(flag_signature(seen)) ? foreign_word::mismatch : judge(seen);
        if (v == foreign_word::arrived) return true;
        if (v == foreign_word::mismatch) return fail_on_foreign_word(peer, channel, expected, seen, detail::now_ns() - start);
      }
      if ((polls & 15u) == 0) {
        if (is_poisoned(state_)) return false;
        const std::uint64_t waited = detail::now_ns() - start;
        const bool out_of_time =
            policy_.timeout_ns != 0 && waited >= policy_.timeout_ns + std::uint64_t{hop} * hop_grace(policy_.timeout_ns);
        const bool out_of_polls = policy_.max_polls != 0 && polls >= policy_.max_polls;
        if (out_of_time || out_of_polls) return fail(failure_kind::timeout, peer, channel, expected, seen, waited);
      }
      detail::relax(polls);
    }
  }

  /// The 32-bit flag of this call inside LL lines (algorithm/one_shot.hpp): x = (seq * 0x9E3779B1) ^ signature,
  /// which differs between two signatures at one sequence and between sequences s and s + 2 of one signature; never
  /// zero (the value of an unwritten or consumed line): x = 0 becomes 1 << 20, which is x only for a signature whose
  /// count has bit 20 set — never an LL call (at most 64 KiB), so no LL call of another signature shares it.
  ROCENANTE_HOST_DEVICE std::uint32_t inline_flag() const {
    const std::uint32_t x = (seq_ * inline_mul) ^ signature_;
    return x != 0 ? x : inline_zero;
  }

  /// The signature of the call that wrote LL flag `f` at this sequence (for a mismatch's record; the inverse of
  /// inline_flag, exact but for its zero substitute).
  ROCENANTE_HOST_DEVICE std::uint32_t inline_signature(std::uint32_t f) const { return f ^ (seq_ * inline_mul); }

  /// The flag word an LL call writes into its peers' flag channels (protocol::ll_word_signature).
  ROCENANTE_HOST_DEVICE std::uint64_t ll_flag_word() const { return make_flag(seq_, ll_word_signature(signature_)); }

  /// The bound of an LL wait (flag inside the data): the caller polls its lines and calls this after every poll
  /// that found a line of `peer` not ready, with `other` = a nonzero flag word of that line that is not
  /// inline_flag() (0 if none). Every 16th call it checks: the poison word, this part's flag word of `channel` —
  /// a peer's abort of this sequence, or a word of this sequence with another signature (the peer took the
  /// packet path, or the LL path with another call: a mismatch) —, a line of another call (mismatch), time and
  /// poll budget. Every call on either path writes its flag words (the LL path with a relaxed store), so a word
  /// of this sequence number is this call's, never one 2^32 sequences old. Returns false after recording a
  /// failure; true: poll again.
  ROCENANTE_HOST_DEVICE bool inline_wait_check(int peer, std::uint32_t channel, std::uint32_t other, std::uint64_t start,
                                               std::uint64_t& polls) {
    if ((++polls & 15u) != 0) {
      detail::relax(polls);
      return true;
    }
    if (is_poisoned(state_)) return false;
    const std::uint64_t expected = ll_flag_word();
    const std::uint64_t seen = detail::load_acquire(h_.local_flag(h_.layout().flag_index(slot(), part_, channel)), h_.scope());
    const std::uint64_t waited = detail::now_ns() - start;
    if (flag_seq(seen) == seq_ && seen != flag_unset && seen != expected)
      return fail_on_foreign_word(peer, channel, expected, seen, waited);
    if (other != 0)  // recorded as flag words, so that the message can name both calls
      return fail(failure_kind::mismatch, peer, channel, flag_value(), make_flag(seq_, inline_signature(other)), waited);
    const bool out_of_time = policy_.timeout_ns != 0 && waited >= policy_.timeout_ns;
    const bool out_of_polls = policy_.max_polls != 0 && polls >= policy_.max_polls;
    if (out_of_time || out_of_polls) return fail(failure_kind::timeout, peer, channel, inline_flag(), other, waited);
    detail::relax(polls);
    return true;
  }

  /// `seen` = this part's flag of `channel` as loaded by the caller: false (recorded as relayed) when it is a
  /// peer's abort of this sequence.
  ROCENANTE_HOST_DEVICE bool accept_abort_word(std::uint32_t channel, std::uint64_t seen) {
    if (flag_seq(seen) != seq_ || seen == flag_unset) return true;
    const std::uint32_t sig = flag_signature(seen);
    if (!is_abort(sig)) return true;
    return fail(relayed_kind(abort_kind(sig)), abort_rank(sig), channel, flag_value(), seen, 0, true, abort_reporter(sig));
  }

  /// Every team thread calls with its own verdict; the team-wide verdict (on failure the team tells every peer
  /// to abort this sequence, as after a failed wait_peers).
  ROCENANTE_HOST_DEVICE bool agree(bool ok) { return settle(ok); }

  /// Every team thread calls: wait for the flags of every peer in [0, ranks) except `self`, where
  /// channel_of(q) names peer q's channel. Peers are spread over the team's threads (one poller per peer when
  /// the team is large enough). `hop` as in wait_one (two_shot's second step: 1). Returns the team-wide verdict;
  /// on success, the payload is visible to every team thread.
  template <class ChannelOf>
  ROCENANTE_HOST_DEVICE bool wait_peers(int ranks, int self, ChannelOf channel_of, std::uint32_t hop = 0) {
    bool ok = true;
    for (int q = team_.thread(); q < ranks; q += team_.size()) {
      if (q == self) continue;
      ok = ok && wait_one(q, channel_of(q), hop);
      timeline_seen(q, ok);
    }
    return settle(ok);
  }

  /// Thread 0 of each part calls, after the team barrier that follows the part's staging, for a call posted once
  /// (algorithm/one_shot.hpp, "Posting"): counts the part as staged; the part that arrives last writes the call
  /// trailer — this call's flag word and `bytes` — at [off + bytes, +16) of this rank's staging slot and posts the
  /// whole call on its own queue: [off, off + bytes + 16) to every peer, then this rank's channel of parts
  /// 0 .. rails-1 at each. The count is reset by the last part, so it is 0 between calls whatever their part counts
  /// (no modulo of a free-running counter). Memory ordering: each part's staged stores -> its team barrier ->
  /// thread 0's acq_rel add (system scope) -> the last part's acq_rel add -> the trailer stores and the release
  /// store of the descriptor's stamp (same thread) -> the proxy's acquire of the stamp. False: the proxy did not
  /// make room within the timeout (the rank is poisoned).
  ROCENANTE_HOST_DEVICE bool post_call(std::uint64_t off, std::uint64_t bytes, std::uint32_t parts) {
    const std::uint32_t before = detail::fetch_add_acq_rel<std::uint32_t>(&state_->arrived, 1u);
    timeline_counted();
    if (before + 1u < parts) return true;
    detail::store_relaxed<std::uint32_t>(&state_->arrived, 0u);
    auto* trailer = reinterpret_cast<std::uint64_t*>(h_.put_ptr(h_.rank(), slot(), off + bytes));
    trailer[0] = flag_value();
    trailer[1] = bytes;
    const std::uint64_t index = h_.layout().flag_index(slot(), 0, static_cast<std::uint32_t>(h_.rank()));
    if (!h_.post_call(part_, slot(), off, bytes + call_trailer_bytes, index, flag_value()))
      return fail(failure_kind::proxy_stalled, (h_.rank() + 1) % h_.ranks(), static_cast<std::uint32_t>(h_.rank()),
                  flag_value(), 0, policy_.timeout_ns);
    timeline_doorbell();
    return true;
  }

  /// Every team thread calls, for a call posted once, with `posted_ok` = its own post_call verdict (true where it
  /// did not call): wait for every peer q != self, whose call is complete when its flags of channel q in parts
  /// 0 .. rails-1 are set (one per rail: handle.rails()); peers are spread over the team's threads. `trailer_at(q)`
  /// is the offset in this slot of q's call trailer. The last rail is waited for first: its write carries the
  /// trailer, which settles a word of this sequence with another signature — a flag write still landing (an RDMA
  /// WRITE may place the word's bytes in any order; the trailer, placed before any of them, holds this call's
  /// word) or a peer in another call (a mismatch). Once it is settled, such a word on another rail can only be a
  /// write still landing. Returns the team-wide verdict; on success every peer's payload is visible to every
  /// team thread.
  ///
  /// At a scrub point a rail word may also hold the word this rank's own finish clears it with (scrubbed_word): every
  /// part waits on the rail words, but their own part clears them as soon as its own wait is done, so a part still
  /// polling (a CTA scheduled after another had finished, or one whose poll just missed the flag) can find the
  /// cleared word where the flag was. Taken for a write still landing, it kept that part waiting until the timeout,
  /// and the rank's peers in its next call with it. Only that finish writes the word, after the clearing part saw
  /// this call's flag in it, and it clears with release stores: the word means the flag arrived, and what the
  /// clearing part saw (the flag's payload) is visible to the part that reads it (cleared_after_seen).
  template <class TrailerAt>
  ROCENANTE_HOST_DEVICE bool wait_call(int ranks, int self, bool posted_ok, const TrailerAt& trailer_at) {
    bool ok = posted_ok;
    const std::uint32_t rails = h_.rails();
    const auto& l = h_.layout();
    const std::uint64_t expected = flag_value();
    for (int q = team_.thread(); ok && q < ranks; q += team_.size()) {
      if (q == self) continue;
      const std::uint32_t ch = static_cast<std::uint32_t>(q);
      const std::uint64_t at = trailer_at(q);
      ok = wait_word(q, ch, l.flag_index(slot(), rails - 1, ch), 0, [&](std::uint64_t seen) {
        if (cleared_after_seen(seen)) return foreign_word::arrived;
        auto* word = reinterpret_cast<std::uint64_t*>(const_cast<std::byte*>(h_.recv_ptr(slot(), at)));
        return detail::load_acquire(word, h_.scope()) == expected ? foreign_word::landing : foreign_word::mismatch;
      });
      for (std::uint32_t d = 0; ok && d + 1 < rails; ++d)
        ok = wait_word(q, ch, l.flag_index(slot(), d, ch), 0, [&](std::uint64_t seen) {
          return cleared_after_seen(seen) ? foreign_word::arrived : foreign_word::landing;
        });
      timeline_seen(q, ok);
    }
    return settle(ok);
  }

  /// Every team thread calls: wait for one peer on one channel (ring steps).
  ROCENANTE_HOST_DEVICE bool wait_peer(int peer, std::uint32_t channel) {
    bool ok = true;
    if (team_.thread() == 0) ok = wait_one(peer, channel, channel);
    return settle(ok);
  }

  /// Every team thread calls, after its last access to slot memory of this collective. The part advances the
  /// epoch entries it is responsible for (rank_state::seq): p, p + parts, ... below the layout's max_parts.
  /// A failed part never calls finish (the rank is poisoned and every later call is a no-op).
  /// The barrier comes after the stores: a team that runs this part again in the same kernel (two calls of the
  /// in-kernel API) must read the advanced entry in every thread's enter(), not the old one in some.
  ///
  /// At the scrub points (scrub_point) the part first clears, in this rank's window, the flag words of this slot
  /// in the parts it is responsible for (every channel): a word a call did not use keeps its value, and 2^32 calls
  /// later the same sequence number comes back (flag_seq is 32 bits), so a word from then would be taken for
  /// this call's — a stale flag accepted, or a false mismatch. Clearing every word of each slot once per 2^31
  /// calls rules it out; docs/design.md ("Sequence wrap") has the argument that nothing live is cleared, and why
  /// a part of a call posted once may still be polling a rail word another part clears (wait_call).
  ROCENANTE_HOST_DEVICE void finish(std::uint32_t parts) {
    const std::uint32_t limit = h_.layout().max_parts;
    if (scrub_point(seq_)) [[unlikely]]
      scrub(parts);
    for (std::uint32_t p = part_ + static_cast<std::uint32_t>(team_.thread()) * parts; p < limit;
         p += static_cast<std::uint32_t>(team_.size()) * parts)
      detail::store_relaxed<std::uint32_t, state_scope>(&state_->seq[p], seq_ + 1u);  // wraps at 2^32 by design
    team_.sync();
  }

  /// Whether the call at `seq` clears its slot's unused flag words (session::finish): twice every 2^31 calls,
  /// once per slot (sequences 0, 1, 2^31 and 2^31 + 1 modulo 2^32).
  ROCENANTE_HOST_DEVICE static constexpr bool scrub_point(std::uint32_t seq) { return (seq & 0x7ffffffeu) == 0; }

  /// A rank that rejects a call (bad input seen only here, or any local refusal) still takes its place in the
  /// sequence, so that its peers — which may already be inside this collective — fail at once instead of
  /// pairing their call with this rank's next one (hazards H7, H17): every team thread calls; the team publishes
  /// the abort flag (abort_peers) and the rank is poisoned with `rec`.
  ROCENANTE_HOST_DEVICE void reject(failure_record rec) {
    abort_peers(rec.kind, rec.peer, h_.rank(), /*all_parts=*/true);
    if (team_.thread() == 0) {
      rec.seq = seq_;
      rec.slot = slot();
      rec.reporter = h_.rank();
      poison(state_, rec, mirror_);
    }
  }

  /// Every team thread calls: write the abort flag (seq, abort_signature(kind, suspect, reporter)) into every channel of
  /// this sequence's slot at every peer — of every part when `all_parts`, else of this part only. Used when this
  /// rank refuses a call and when one of its waits failed, so that a failure reaches every rank at once — in a
  /// ring, a rank waits only for its neighbour, and without this a failure would travel one timeout per hop.
  /// The slot's flags at a peer belong to this sequence (the two-slot argument), so nothing live is overwritten;
  /// a peer that already finished this sequence ignores them (it waits for other sequence numbers).
  ///
  /// A shared_staging handle (proxy, NIC) has one post queue per part with a single producer, the part's thread
  /// 0. Parts that run concurrently (CTAs) therefore abort only their own part's flags: every part that fails
  /// settles and aborts its own, and a part still waiting sees the poison word and fails at its next check.
  /// The host executor runs parts one after another on one thread, and the reject kernel runs alone on its
  /// stream, so those write every part. The first post that fails (a full queue behind a stalled proxy) ends the
  /// loop: each further post would wait out the same timeout.
  ROCENANTE_HOST_DEVICE void abort_peers(std::uint32_t kind, int suspect, int reporter,
                                         bool all_parts = !parts_run_concurrently) {
    const auto& l = h_.layout();
    const std::uint64_t value = make_flag(seq_, abort_signature(kind, suspect, reporter));
    const bool own_only = Handle::shared_staging && !all_parts;
    const std::uint64_t parts_here = own_only ? 1 : std::uint64_t{l.max_parts};
    const std::uint64_t per_peer = parts_here * l.channels;
    const int ranks = h_.ranks(), self = h_.rank();
    // A shared_staging handle has one producer per part queue: thread 0 posts everything.
    const std::uint64_t first = Handle::shared_staging ? (team_.thread() == 0 ? 0 : ~std::uint64_t{0}) : team_.thread();
    const std::uint64_t stride = Handle::shared_staging ? 1 : static_cast<std::uint64_t>(team_.size());
    for (std::uint64_t w = first; w < per_peer * ranks; w += stride) {
      const int peer = static_cast<int>(w / per_peer);
      if (peer == self) continue;
      const std::uint32_t part = own_only ? part_ : static_cast<std::uint32_t>((w % per_peer) / l.channels);
      const std::uint32_t channel = static_cast<std::uint32_t>(w % l.channels);
      if constexpr (std::is_same_v<decltype(h_.signal(peer, slot(), 0, 0, 0, value)), bool>) {
        if (!h_.signal(peer, slot(), 0, 0, l.flag_index(slot(), part, channel), value)) break;
      } else {
        h_.signal(peer, slot(), 0, 0, l.flag_index(slot(), part, channel), value);
      }
    }
    // A peer waiting for a call this rank posts once waits on this rank's channel of parts 0 .. rails-1 (wait_call),
    // which a part aborting only its own words does not reach: it aborts those too, on its own queue.
    if constexpr (requires { h_.post_on(0u, 0u, 0u, 0ull, 0ull, 0ull, 0ull); }) {
      if (own_only && team_.thread() == 0) {
        const std::uint32_t self_ch = static_cast<std::uint32_t>(self);
        bool posted = true;  // a stalled proxy: each further post would wait out the same timeout
        for (int peer = 0; posted && peer < ranks; ++peer)
          for (std::uint32_t d = 0; posted && peer != self && d < h_.rails(); ++d)
            if (d != part_)
              posted = h_.post_on(part_, static_cast<std::uint32_t>(peer), slot(), 0, 0, l.flag_index(slot(), d, self_ch), value);
      }
    }
    team_.sync();
  }

 private:
  /// Stamps of the proxy-mode timeline (rank_state::timeline), each by the thread that took the step: the part's
  /// count and the doorbell (post_call), a descriptor published (signal), a peer's flag seen (wait_call,
  /// wait_peers). Only with ROCENANTE_TRACE_PHASES and a shared-staging handle; otherwise nothing at all, so that a
  /// normal build's kernels stay as they are (tests/gpu/kernel_frames.sh). Each body sits behind `if constexpr`, not
  /// only stamps()'s null: the dead stamps of a direct handle, folded away only after inlining, still moved the trace
  /// build's direct kernels by a few registers (one from 72 to 80 bytes of stack).
  ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void timeline_counted() {
#if defined(ROCENANTE_TRACE_PHASES) && ROCENANTE_DEVICE_PASS
    if constexpr (Handle::shared_staging)
      if (rank_state::part_stamps* p = stamps()) p->counted = detail::now_ns();
#endif
  }
  ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void timeline_doorbell() {
#if defined(ROCENANTE_TRACE_PHASES) && ROCENANTE_DEVICE_PASS
    if constexpr (Handle::shared_staging) {
      rank_state::call_stamps& c = state_->call[seq_ % rank_state::trace_slots];
      c.doorbell = detail::now_ns();
      c.last_part = part_;
      c.posted_once = 1;
    }
#endif
  }
  ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void timeline_posted([[maybe_unused]] int peer) {
#if defined(ROCENANTE_TRACE_PHASES) && ROCENANTE_DEVICE_PASS
    if constexpr (Handle::shared_staging)
      if (rank_state::part_stamps* p = stamps()) p->posted[peer] = detail::now_ns();
#endif
  }
  ROCENANTE_HOST_DEVICE ROCENANTE_FORCEINLINE void timeline_seen([[maybe_unused]] int peer, [[maybe_unused]] bool ok) {
#if defined(ROCENANTE_TRACE_PHASES) && ROCENANTE_DEVICE_PASS
    if constexpr (Handle::shared_staging)
      if (ok)
        if (rank_state::part_stamps* p = stamps()) p->seen[peer] = detail::now_ns();
#endif
  }
#if defined(ROCENANTE_TRACE_PHASES) && ROCENANTE_DEVICE_PASS
  /// This part's timeline entry of this call (shared-staging handles only); null for parts from timeline_parts on.
  ROCENANTE_DEVICE ROCENANTE_FORCEINLINE rank_state::part_stamps* stamps() {
    return part_ < rank_state::timeline_parts ? &state_->timeline[seq_ % rank_state::trace_slots][part_] : nullptr;
  }
#endif

  /// `seen`, a word of this sequence in the flag being waited for that is not the awaited one: a peer's abort
  /// (recorded as relayed, naming the rank the abort names) or a peer in another call (mismatch). Returns false.
  ROCENANTE_HOST_DEVICE bool fail_on_foreign_word(int peer, std::uint32_t channel, std::uint64_t expected, std::uint64_t seen,
                                                  std::uint64_t waited) {
    const std::uint32_t sig = flag_signature(seen);
    if (is_abort(sig))
      return fail(relayed_kind(abort_kind(sig)), abort_rank(sig), channel, expected, seen, waited, true, abort_reporter(sig));
    return fail(failure_kind::mismatch, peer, channel, expected, seen, waited);
  }

  /// The team's verdict on a wait; on failure the team tells every peer to abort this sequence.
  ROCENANTE_HOST_DEVICE bool settle(bool ok) {
    if (team_.all(ok)) return true;
    // The failure record was completed before the barrier by the thread that failed (or by another part, which
    // may still be writing it: wait for it briefly, it is a handful of stores).
    std::uint32_t p = detail::load_acquire<std::uint32_t, state_scope>(&state_->poison);
    for (int spins = 0; p == poisoning && spins < (1 << 20); ++spins)
      p = detail::load_acquire<std::uint32_t, state_scope>(&state_->poison);
    const bool known = p == poisoned;
    abort_peers(known ? state_->failure.kind : static_cast<std::uint32_t>(failure_kind::timeout),
                known ? state_->failure.peer : h_.rank(), known ? state_->failure.reporter : h_.rank());
    return false;
  }

  /// Part p clears this slot's flag words of parts p, p + parts, ... (every channel) in this rank's window.
  /// Nothing of an earlier call is still in flight into them, and peers write this slot again only at the next
  /// call but one, after this rank's next flags (docs/design.md, "Sequence wrap", has the argument). Release stores
  /// where calls are posted once (shared staging): another part of such a call may read a cleared rail word instead
  /// of the flag it held, and takes it as that flag (wait_call), so what this part saw before clearing must be
  /// visible with it. Relaxed for direct windows, which never take a cleared word for a flag: there release stores
  /// (or one release fence) grew the all-purpose one_shot kernel's stack frame from 64 to 120 bytes
  /// (tests/gpu/kernel_frames.sh).
  /// Inline (behind [[unlikely]]), not ROCENANTE_COLD: an out-of-line member takes the session's address and with
  /// it the handle's, a kernel parameter, which the compiler then copies to local memory at every kernel's entry
  /// (docs/design.md §1.4, "Cold paths take values"; tests/gpu/kernel_frames.sh).
  ROCENANTE_HOST_DEVICE void scrub(std::uint32_t parts) {
    const auto& l = h_.layout();
    const std::uint64_t per_part = l.channels;
    const std::uint64_t mine = (l.max_parts - part_ + parts - 1) / parts;  // parts p, p + parts, ... below max_parts
    const std::uint64_t scrubbed = scrubbed_word();
    for (std::uint64_t w = static_cast<std::uint64_t>(team_.thread()); w < mine * per_part;
         w += static_cast<std::uint64_t>(team_.size())) {
      const std::uint32_t part = part_ + static_cast<std::uint32_t>(w / per_part) * parts;
      const std::uint32_t channel = static_cast<std::uint32_t>(w % per_part);
      std::uint64_t* word = h_.local_flag(l.flag_index(slot(), part, channel));
      if constexpr (Handle::shared_staging)  // only they post calls once
        detail::store_release(word, scrubbed, h_.scope());
      else
        detail::store_relaxed(word, scrubbed);
    }
  }

  /// What scrub writes: this sequence with the unset tag. No call's word, and its low half is a finished sequence,
  /// so a flag written later in two halves (ibverbs) never pairs a new half with a current-looking old one.
  ROCENANTE_HOST_DEVICE std::uint64_t scrubbed_word() const { return make_flag(seq_, flag_signature(flag_unset)); }

  /// Whether `seen`, a word of this sequence in a rail word being waited for (wait_call), is the word this rank's
  /// finish of this call clears it with: at a scrub point only that finish writes it (never flag_unset: no scrub
  /// point is 0xffffffff), and the part that clears a rail word has waited for this call's flag there first.
  ROCENANTE_HOST_DEVICE bool cleared_after_seen(std::uint64_t seen) const {
    return scrub_point(seq_) && seen == scrubbed_word();
  }

  /// `relayed`: learned from a peer's abort flag, whose detector is `reporter` (-1: unknown); else this rank
  /// detected the failure.
  ROCENANTE_HOST_DEVICE bool fail(failure_kind kind, int peer, std::uint32_t channel, std::uint64_t expected,
                                  std::uint64_t seen, std::uint64_t waited, bool relayed = false, int reporter = -1) {
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
    rec.relayed = relayed ? 1u : 0u;
    rec.reporter = relayed ? reporter : h_.rank();
    poison(state_, rec, mirror_);
    return false;
  }

  static constexpr std::uint32_t inline_mul = 0x9E3779B1u;
  static constexpr std::uint32_t inline_zero = 1u << 20;
  static_assert(inline_zero <= count_field_mask && (ll_max_bytes >> 1) < inline_zero,
                "inline_zero must be a count bit that no LL call sets");

  Team& team_;
  Handle& h_;
  rank_state* state_;
  rank_state* mirror_;
  wait_policy policy_;
  std::uint32_t signature_;
  std::uint32_t part_;
  std::uint32_t seq_ = 0;
#if defined(ROCENANTE_TRACE_PHASES) && ROCENANTE_DEVICE_PASS
  std::uint64_t t0_clk_ = 0, t0_ns_ = 0;  ///< when enter() began (trace point 0)
  std::uint64_t ts_clk_ = 0, ts_ns_ = 0;  ///< started() (trace point 7; 0 where the code never calls it)
#endif
};

}  // namespace rocenante::protocol

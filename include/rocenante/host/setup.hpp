// host/setup.hpp — set-up steps shared by every communicator: option validation, window layout with checked
// arithmetic, the configuration agreement between ranks, and failure messages.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "../bootstrap/concepts.hpp"
#include "../bootstrap/vote.hpp"
#include "../config.hpp"
#include "../core/error.hpp"
#include "../core/options.hpp"
#include "../protocol/layout.hpp"
#include "../core/status.hpp"
#include "../protocol/flags.hpp"
#include "../protocol/state.hpp"
#include "../reduce/concepts.hpp"

namespace rocenante::host {

/// Window layout able to serve every algorithm in Algos at `ranks` ranks with `opts`; `with_ll`: an LL area per
/// slot (GPU communicators whose ranks store into each other's windows); `posted`: a proxy-mode transport (shared
/// staging), whose calls up to options::call_post_max_bytes are posted once per call with a trailer after each
/// source. Throws config_error for values out of range or a window whose size would overflow.
template <class... Algos>
protocol::window_layout make_layout(int ranks, const options& opts, bool with_ll = false, bool posted = false) {
  if (ranks < 1 || ranks > max_ranks)
    throw config_error("ranks = " + std::to_string(ranks) + " is outside [1, " + std::to_string(max_ranks) + "]");
  if (opts.capacity_bytes == 0) throw config_error("options::capacity_bytes is 0; give the largest input in bytes");
  if (opts.capacity_bytes > (std::uint64_t{1} << 40))
    throw config_error("options::capacity_bytes = " + std::to_string(opts.capacity_bytes) + " is above 1 TiB");
  if (opts.max_parts == 0 || opts.max_parts > max_parts_limit)
    throw config_error("options::max_parts = " + std::to_string(opts.max_parts) + " is outside [1, " +
                       std::to_string(max_parts_limit) + "]");
  if (opts.max_ctas > opts.max_parts)
    throw config_error("options::max_ctas = " + std::to_string(opts.max_ctas) + " is above max_parts = " +
                       std::to_string(opts.max_parts) + " (0 means max_parts)");
  protocol::window_layout l;
  l.ranks = static_cast<std::uint32_t>(ranks);
  l.max_parts = opts.max_parts;
  l.capacity_bytes = opts.capacity_bytes;
  l.call_post_max_bytes = posted ? opts.call_post_max_bytes : 0;
  l.source_stride = protocol::align_up(opts.capacity_bytes, packet_bytes) + l.trailer_bytes();
  std::uint32_t channels = 1;
  std::uint64_t slot = 0;
  ((channels = channels > Algos::channels(ranks) ? channels : Algos::channels(ranks)), ...);
  ((slot = slot > Algos::slot_bytes(ranks, opts.capacity_bytes) ? slot : Algos::slot_bytes(ranks, opts.capacity_bytes)), ...);
  // one source region per rank, each with room for the call trailer
  if (const std::uint64_t sources = std::uint64_t(ranks) * l.source_stride; sources > slot) slot = sources;
  l.channels = channels;
  l.slot_bytes = protocol::align_up(slot, 4096);
  // LL area (one-shot lines with the flag inside, config.hpp): 2 x ranks x the largest LL input, per slot
  const std::uint64_t ll_in = opts.capacity_bytes < ll_max_bytes ? opts.capacity_bytes : ll_max_bytes;
  l.ll_bytes = with_ll && ranks > 1 && ranks <= ll_max_ranks ? protocol::align_up(2 * std::uint64_t(ranks) * protocol::align_up(ll_in, 256), 4096) : 0;
  // Lamport area (one-shot packets that are their own flag, options::lamport_max_bytes): ranks x the largest such
  // input per slot, on the same windows as the LL area
  if (opts.lamport_max_bytes > ll_max_bytes)
    throw config_error("options::lamport_max_bytes = " + std::to_string(opts.lamport_max_bytes) + " is above " +
                       std::to_string(ll_max_bytes) + " (a decode-size path: one packet per thread)");
  const std::uint64_t lamport_in = opts.capacity_bytes < opts.lamport_max_bytes ? opts.capacity_bytes : opts.lamport_max_bytes;
  if (with_ll && ranks > 1 && ranks <= lamport_max_ranks && lamport_in != 0) {
    l.lamport_max_bytes = lamport_in;
    l.lamport_bytes = protocol::align_up(std::uint64_t(ranks) * protocol::align_up(lamport_in, 256), 4096);
  }
  // Symmetric input area (options::symmetric_bytes): windows that peers read directly only; its in-place calls flag
  // their start and their end on channels q and n + q (as two_shot does).
  if (opts.symmetric_bytes > (std::uint64_t{1} << 40))
    throw config_error("options::symmetric_bytes = " + std::to_string(opts.symmetric_bytes) + " is above 1 TiB");
  if (!posted && ranks > 1 && opts.symmetric_bytes != 0) {
    l.input_bytes = protocol::align_up(opts.symmetric_bytes, 4096);
    if (l.channels < 2u * static_cast<std::uint32_t>(ranks)) l.channels = 2u * static_cast<std::uint32_t>(ranks);
  }
  std::uint64_t total = 0;
  if (!protocol::checked_mul(l.slot_bytes + l.ll_bytes + l.lamport_bytes, slot_count, total) || total > (std::uint64_t{1} << 42) ||
      total + l.input_bytes > (std::uint64_t{1} << 42))
    throw config_error("window of " + std::to_string(ranks) + " ranks x " + std::to_string(opts.capacity_bytes) +
                       " bytes is too large; lower capacity_bytes");
  return l;
}

/// The values every rank must agree on, in the order they are checked.
struct agreed_config {
  std::uint64_t version, ranks, capacity_bytes, max_parts, min_part_bytes, max_ctas, max_part_bytes, timeout_ns,
      max_polls, first_sequence, call_post_max_bytes, lamport_max_bytes, symmetric_bytes, transport;
  static constexpr std::array<const char*, 14> names = {"version",        "ranks",          "capacity_bytes",
                                                        "max_parts",      "min_part_bytes", "max_ctas",
                                                        "max_part_bytes", "timeout_ns",     "max_polls",
                                                        "first_sequence", "call_post_max_bytes", "lamport_max_bytes",
                                                        "symmetric_bytes", "transport"};
  std::array<std::uint64_t, 14> values() const {
    return {version,   ranks,          capacity_bytes, max_parts,           min_part_bytes, max_ctas,
            max_part_bytes, timeout_ns, max_polls,     first_sequence, call_post_max_bytes, lamport_max_bytes,
            symmetric_bytes, transport};
  }
};

inline std::uint64_t name_hash(const char* s) {
  std::uint64_t h = 1469598103934665603ull;
  for (; *s; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 1099511628211ull;
  return h;
}

/// Exchange the configuration and compare (a set-up vote: bootstrap/vote.hpp). Every rank sees the same table, so
/// every rank throws the same config_mismatch_error (naming the first differing field and the ranks that differ),
/// or none does.
inline void agree_on_config(bootstrap::bootstrap_ref boot, const options& o, const char* transport_name) {
  agreed_config mine{version,       static_cast<std::uint64_t>(boot.size()),
                     o.capacity_bytes, o.max_parts,
                     o.min_part_bytes, o.max_ctas,
                     o.max_part_bytes, o.timeout_ns,
                     o.max_polls,     o.first_sequence,
                     o.call_post_max_bytes, o.lamport_max_bytes,
                     o.symmetric_bytes, name_hash(transport_name)};
  const std::vector<agreed_config> all = setup::vote(boot, "agree on options", mine, [] {});
  for (std::size_t f = 0; f < agreed_config::names.size(); ++f) {
    const std::uint64_t v0 = all[0].values()[f];
    for (int q = 1; q < boot.size(); ++q) {
      const std::uint64_t vq = all[q].values()[f];
      if (vq == v0) continue;
      const std::string field = agreed_config::names[f];
      throw config_mismatch_error(field, "configuration differs between ranks: field '" + field + "' is " +
                                             std::to_string(v0) + " on rank 0 but " + std::to_string(vq) + " on rank " +
                                             std::to_string(q) +
                                             "; every rank must pass the same options and library version");
    }
  }
}

/// Set-up order: first agree (raw options exchanged, so a bad value on one rank is reported by every rank as a
/// mismatch naming the field, instead of one rank throwing and the others waiting), then validate and lay out.
template <class... Algos>
protocol::window_layout agree_and_layout(bootstrap::bootstrap_ref boot, const options& o, const char* transport_name,
                                         bool with_ll = false, bool posted = false) {
  agree_on_config(boot, o, transport_name);
  return make_layout<Algos...>(boot.size(), o, with_ll, posted);
}

/// Whether algorithm A fits a window laid out for another list of algorithms (rank-invariant check).
template <class A>
bool fits(const protocol::window_layout& l) {
  const int n = static_cast<int>(l.ranks);
  return A::channels(n) <= l.channels && A::slot_bytes(n, l.capacity_bytes) <= l.slot_bytes;
}

/// A call signature in words: "all_reduce(one_shot, bfloat16, sum, count 1024)". The count is exact below
/// 2^21 elements (protocol::count_bits).
inline std::string describe_call(std::uint32_t sig) {
  const std::uint32_t c = protocol::signature_collective(sig), a = protocol::signature_algorithm(sig);
  // An LL word (protocol::ll_word_signature) sets both collective bits; only the one-shot all-reduce writes one.
  const char* coll = c == 1 ? "all_reduce" : c == 2 ? "all_gather" : c == 3 ? "all_reduce[LL]" : "unknown collective";
  static constexpr const char* algos[8] = {"algorithm 0", "one_shot", "ring", "one_shot_fp4",
                                           "one_shot_rows", "two_shot", "algorithm 6", "algorithm 7"};
  const dtype d = static_cast<dtype>(protocol::signature_dtype(sig));
  std::string out = std::string(coll) + "(" + algos[a] + ", " + to_string(d);
  if (c != 2) out += std::string(", ") + reduce::to_string(static_cast<reduce::reduce_op>(protocol::signature_op(sig)));
  return out + ", count " + std::to_string(protocol::signature_count(sig)) + ")";
}

inline std::string describe_failure(int rank, const protocol::failure_record& f) {
  char buf[1024];
  const char* how = f.relayed ? " (relayed by a peer's abort flag)" : "";
  if (f.kind == static_cast<std::uint32_t>(protocol::failure_kind::rejected)) {
    std::snprintf(buf, sizeof buf,
                  "rank %d: refused its call at sequence %u (bad input on this rank: see the status and last_error() "
                  "of that call); its peers were told to abort the collective; the communicator is poisoned and "
                  "every later call returns status::poisoned",
                  rank, f.seq);
  } else if (f.kind == static_cast<std::uint32_t>(protocol::failure_kind::proxy_stalled)) {
    std::snprintf(buf, sizeof buf,
                  "rank %d: its proxy did not drain the post queue within %.3f ms at sequence %u (part %u, posting to "
                  "rank %d); the proxy thread is stopped or starved; the communicator is poisoned and every later "
                  "call returns status::poisoned",
                  rank, static_cast<double>(f.waited_ns) / 1e6, f.seq, f.part, f.peer);
  } else if (f.kind == static_cast<std::uint32_t>(protocol::failure_kind::peer_rejected)) {
    std::snprintf(buf, sizeof buf,
                  "rank %d: rank %d refused the collective at sequence %u (bad input on rank %d: see its error)%s; the "
                  "communicator is poisoned and every later call returns status::poisoned",
                  rank, f.peer, f.seq, f.peer, how);
  } else if (f.kind == static_cast<std::uint32_t>(protocol::failure_kind::mismatch)) {
    const std::string mine = describe_call(protocol::flag_signature(f.expected));
    const char* fix = "every rank must make the same calls in the same order, with the same collective, algorithm, "
                      "dtype, operator and count (a count of 2^21 elements or more shows as a 21-bit hash); the "
                      "communicator is poisoned and every later call returns status::poisoned";
    if (!f.relayed) {
      const std::string theirs = describe_call(protocol::flag_signature(f.observed));
      std::snprintf(buf, sizeof buf,
                    "rank %d: rank %d entered a different collective at sequence %u (slot %u, part %u, channel %u): "
                    "this rank called %s, rank %d called %s; %s",
                    rank, f.peer, f.seq, f.slot, f.part, f.channel, mine.c_str(), f.peer, theirs.c_str(), fix);
    } else {
      // The abort names the rank whose word was foreign (peer) and the rank that saw it (reporter). Named as the
      // culprit itself, this rank names the reporter: its call is the one that differs from this rank's.
      const auto name = [&](int q, const char* unknown) { return q >= 0 ? "rank " + std::to_string(q) : std::string(unknown); };
      const bool named = f.peer == rank;
      const std::string who = named ? name(f.reporter, "a peer") : name(f.peer, "a peer");
      const std::string than = named ? std::string("this rank") : name(f.reporter, "its peers");
      const std::string detail = name(f.reporter, "the detecting rank") + "'s error names both calls";
      std::snprintf(buf, sizeof buf,
                    "rank %d: %s entered a different collective at sequence %u than %s (relayed by a peer's abort "
                    "flag; %s): this rank called %s; %s",
                    rank, who.c_str(), f.seq, than.c_str(), detail.c_str(), mine.c_str(), fix);
    }
  } else if (f.relayed && f.peer == rank) {
    std::snprintf(buf, sizeof buf,
                  "rank %d: its peers timed out waiting for it at sequence %u and aborted the collective (this rank "
                  "was stalled or late); the communicator is poisoned and every later call returns status::poisoned",
                  rank, f.seq);
  } else if (f.relayed && f.reporter < 0) {
    // An abort word without a detecting rank is written by a transport into its own rank's flags (and relayed
    // with the reporter kept): a connection to the peer ended or a write to it failed. Nobody waited out a timeout.
    std::snprintf(buf, sizeof buf,
                  "rank %d: rank %d missed sequence %u (a transport saw its connection to rank %d end or fail and "
                  "aborted the wait; the transport's message, below or in the log of the rank that saw it, says "
                  "how); rank %d is dead, or closed its communicator; the communicator is poisoned and every later "
                  "call returns status::poisoned",
                  rank, f.peer, f.seq, f.peer, f.peer);
  } else if (f.relayed) {
    std::snprintf(buf, sizeof buf,
                  "rank %d: rank %d missed sequence %u (a peer's wait for it timed out; relayed by a peer's abort "
                  "flag); rank %d is dead, stalled or called a different collective; the communicator is poisoned "
                  "and every later call returns status::poisoned",
                  rank, f.peer, f.seq, f.peer);
  } else {
    std::snprintf(buf, sizeof buf,
                  "rank %d: timed out after %.3f ms waiting for rank %d at sequence %u (slot %u, part %u, channel %u; "
                  "flag 0x%016llx expected, 0x%016llx seen); rank %d is dead, stalled or called a different "
                  "collective; the communicator is poisoned and every later call returns status::poisoned",
                  rank, static_cast<double>(f.waited_ns) / 1e6, f.peer, f.seq, f.slot, f.part, f.channel,
                  static_cast<unsigned long long>(f.expected), static_cast<unsigned long long>(f.observed), f.peer);
  }
  return buf;
}

/// Status a failure record maps to.
inline status failure_status(const protocol::failure_record& f) {
  switch (static_cast<protocol::failure_kind>(f.kind)) {
    case protocol::failure_kind::timeout:
    case protocol::failure_kind::proxy_stalled: return status::timeout;
    case protocol::failure_kind::rejected: return status::invalid_argument;
    default: return status::mismatch;
  }
}

}  // namespace rocenante::host

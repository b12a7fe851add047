// transport/card.hpp — what the connection cards of the transports that connect processes (ibverbs, socket) have
// in common. Each transport's card is its own fixed-size struct, exchanged with a bootstrap all_gather; every one
// has the fields magic, version, size (sizeof the sender's card), rank and ok, and an `error` text. These helpers
// fill, exchange and check those fields once; a card's layout (and so what travels) is the transport's. The
// exchange is a set-up vote (bootstrap/vote.hpp), which carries each rank's outcome beside its card, so `ok` stays 1
// in every card a transport receives. copy_text serves every fixed-size text field of a card. Host only.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../bootstrap/concepts.hpp"
#include "../bootstrap/vote.hpp"
#include "../core/error.hpp"

namespace rocenante::transport {

/// `s` into the text field `dst` of `cap` bytes: truncated to cap - 1 bytes, always NUL-terminated.
inline void copy_text(char* dst, std::size_t cap, const std::string& s) {
  const std::size_t n = s.size() < cap - 1 ? s.size() : cap - 1;
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

/// The common fields of this rank's card: `magic`, `version`, its size, `rank`, ok = 1.
template <class Card>
void stamp_card(Card& c, std::uint32_t magic, std::uint32_t version, int rank) {
  c.magic = magic;
  c.version = version;
  c.size = sizeof(Card);
  c.rank = rank;
  c.ok = 1;
}

/// Collective: every rank calls. Runs this rank's local set-up `set_up()` (which fills `mine`) and gathers every
/// rank's card through setup::vote (bootstrap/vote.hpp): when set_up() threw on any rank, every rank throws the same
/// error naming that rank and its reason, so no rank is left waiting. Returns the cards in rank order.
template <class Card, class SetUp>
std::vector<Card> exchange_cards(bootstrap::bootstrap_ref boot, Card& mine, SetUp&& set_up,
                                 std::string_view step = "connection cards") {
  return setup::vote(boot, step, mine, std::forward<SetUp>(set_up));
}

/// Why `c` is not a card of this build from rank `expected_rank` (magic, size, version or rank differ); empty when
/// it is. `kind` goes before "connection card" in the message ("" or "socket "). The transport checks the rest.
template <class Card>
std::string check_card_header(const Card& c, int expected_rank, std::uint32_t magic, std::uint32_t version,
                              const std::string& kind) {
  const std::string who = "rank " + std::to_string(expected_rank);
  if (c.magic != magic)
    return who + " sent a " + kind + "connection card with a bad magic number (not RoCEnante, or corrupt)";
  if (c.size != sizeof(Card))
    return who + " sent a " + kind + "connection card of " + std::to_string(c.size) + " bytes, this rank expects " +
           std::to_string(sizeof(Card)) + " (different RoCEnante builds)";
  if (c.version != version)
    return who + " speaks " + kind + "connection-card version " + std::to_string(c.version) + ", this rank " +
           std::to_string(version) + " (different RoCEnante versions)";
  if (c.rank != expected_rank) return who + "'s " + kind + "card claims rank " + std::to_string(c.rank);
  return "";
}

/// The first problem with every rank's card (`all`, in rank order): what `validate(card, rank)` says, else a rank
/// whose card says its set-up failed (ok == 0: its `error` text; exchange_cards never hands out such a card). Empty
/// when there is none.
template <class Card, class Validate>
std::string first_card_problem(const std::vector<Card>& all, Validate&& validate) {
  for (std::size_t q = 0; q < all.size(); ++q) {
    const Card& c = all[q];
    if (std::string why = validate(c, static_cast<int>(q)); !why.empty()) return why;
    if (c.ok == 0)
      return "set-up failed on rank " + std::to_string(q) + ": " +
             std::string(c.error, strnlen(c.error, sizeof c.error));
  }
  return "";
}

}  // namespace rocenante::transport

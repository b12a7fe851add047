// bootstrap/vote.hpp — try, then vote: how every local step of collective set-up ends, written once.
//
// A rank's set-up alternates local work (allocate a window, bind a socket, open a device, import a peer's memory)
// with exchanges through the bootstrap. If a local step throws on one rank and that rank leaves set-up while its
// peers wait in the next exchange, the peers see a bootstrap error (a missing rank, an exchange of another size,
// or a step mismatch that breaks bootstrap::tcp for good) instead of the reason, and ranks that choose a transport
// together can no longer move to the next candidate together. So every local step runs through vote():
//
//   1. the rank runs its local work, catching what it throws (a rocenante::error or any std::exception);
//   2. every rank, failed or not, contributes one ballot to one all_gather: its outcome (ok, or the reason) and
//      the step's payload (a card: addresses, keys, sizes);
//   3. every rank reads the same ballots: when all are ok each returns the payloads in rank order; when any
//      failed, every rank throws the same exception, naming the step and each failing rank with its reason.
//
// The exception is voted<config_error> when the first failing rank's error was a config_error, voted<transport_error>
// otherwise (a CUDA call that failed on one rank included); catch vote_failure for the step and the per-rank
// failures (the start-up selection records them in its table). A vote inside a step's local work (a transport's
// own votes inside a communicator's step) that failed has already failed every rank the same way: the outer vote
// sees every rank fail with it and rethrows it unchanged, so the step named is the innermost. A bootstrap_error
// is not voted on: the bootstrap that would carry the vote has failed, and it reports that to every rank itself.
//
// Set-up only; never on the launch path. Every wait is the bootstrap's (bounded by its timeout).
//
// Test builds (ROCENANTE_TEST_FAULTS defined, as the project's tests are compiled; never a program of a user):
// every vote is also a fault point. A fault plan (testing::set_faults, or the environment variable
// ROCENANTE_TEST_FAULT read once per process, for tests whose ranks are processes) makes a chosen rank's local work
// at a chosen step fail once it has run, so that tests can show that a failure at each step on one rank lands every
// rank on the same outcome. The plan can also cut pairs of ranks (fault_cuts: the start-up selection's connectivity
// report). Elsewhere the fault points compile to nothing.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(ROCENANTE_TEST_FAULTS)
#include <cstdlib>
#include <map>
#include <mutex>
#endif

#include "../core/error.hpp"
#include "concepts.hpp"

namespace rocenante::setup {

/// One rank's failure at a step, as every rank received it.
struct failure {
  int rank = -1;
  std::string why;
  bool operator==(const failure&) const = default;
};

/// "rank 1: why" or "ranks 0, 2: why; rank 3: another why": failures grouped by identical reason, in rank order of
/// each group's first rank.
inline std::string describe(const std::vector<failure>& fs) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (const failure& f : fs) {
    auto it = groups.begin();
    while (it != groups.end() && it->first != f.why) ++it;
    if (it == groups.end()) groups.push_back({f.why, {f.rank}});
    else it->second.push_back(f.rank);
  }
  std::string s;
  for (const auto& g : groups) {
    s += s.empty() ? "" : "; ";
    s += g.second.size() == 1 ? "rank " : "ranks ";
    for (std::size_t i = 0; i < g.second.size(); ++i) s += (i ? ", " : "") + std::to_string(g.second[i]);
    s += ": " + g.first;
  }
  return s;
}

/// What every rank throws when a step failed on some rank (mixed into the error class: voted<Base>): the step and
/// every failing rank with its reason, identical on every rank.
class vote_failure {
 public:
  vote_failure(std::string step, std::vector<failure> fs) : step_(std::move(step)), failures_(std::move(fs)) {}
  virtual ~vote_failure() = default;
  const std::string& step() const noexcept { return step_; }
  const std::vector<failure>& failures() const noexcept { return failures_; }

 private:
  std::string step_;
  std::vector<failure> failures_;
};

template <class Base>
class voted final : public Base, public vote_failure {
 public:
  voted(std::string step, std::vector<failure> fs)
      : Base("set-up step '" + step + "' failed on " + describe(fs)), vote_failure(std::move(step), std::move(fs)) {}
};

/// The class a failed step is reported as, on every rank.
enum class error_kind : std::uint8_t { transport = 0, config = 1 };

/// Throws, on this rank, what every rank throws for a step that failed with `fs`. For failures every rank found
/// alike from exchanged data (a rank on another host), so that they read as a vote's.
[[noreturn]] inline void fail_together(error_kind k, std::string step, std::vector<failure> fs) {
  if (k == error_kind::config) throw voted<config_error>(std::move(step), std::move(fs));
  throw voted<transport_error>(std::move(step), std::move(fs));
}

#if defined(ROCENANTE_TEST_FAULTS)
namespace testing {

namespace detail {
struct fault {
  int rank = -1;
  std::string step;
  int nth = 1;
};
struct fault_state {
  std::mutex mu;
  bool loaded = false;
  std::vector<fault> faults;
  std::vector<std::pair<int, int>> cuts;
  std::map<std::pair<int, std::string>, int> arrivals;  ///< [rank, step] -> times reached
  std::map<int, std::vector<std::string>> seen;         ///< rank -> steps reached, in order
};
inline fault_state& state() {
  static fault_state s;
  return s;
}
inline std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}
inline int number(const std::string& s, const std::string& spec) {
  std::size_t used = 0;
  int v = -1;
  try {
    v = std::stoi(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() || v < 0)
    throw config_error("ROCENANTE_TEST_FAULT='" + spec + "': '" + s + "' is not a rank or a count");
  return v;
}
/// Replaces the plan of `s` (its lock held) with `spec`.
inline void parse(fault_state& s, const std::string& spec) {
  s.faults.clear();
  s.cuts.clear();
  std::size_t at = 0;
  while (at <= spec.size()) {
    std::size_t end = spec.find(';', at);
    if (end == std::string::npos) end = spec.size();
    const std::string item = trim(spec.substr(at, end - at));
    at = end + 1;
    if (item.empty()) continue;
    if (item.rfind("cut ", 0) == 0) {
      const std::string pair = trim(item.substr(4));
      const std::size_t dash = pair.find('-');
      if (dash == std::string::npos)
        throw config_error("ROCENANTE_TEST_FAULT='" + spec + "': '" + item + "' is not 'cut A-B'");
      s.cuts.emplace_back(number(trim(pair.substr(0, dash)), spec), number(trim(pair.substr(dash + 1)), spec));
      continue;
    }
    const std::size_t sign = item.find('@');
    if (sign == std::string::npos)
      throw config_error("ROCENANTE_TEST_FAULT='" + spec + "': '" + item + "' is not RANK@STEP[#N] or 'cut A-B'");
    fault f;
    f.rank = number(trim(item.substr(0, sign)), spec);
    f.step = trim(item.substr(sign + 1));
    if (const std::size_t hash = f.step.rfind('#'); hash != std::string::npos) {
      f.nth = number(trim(f.step.substr(hash + 1)), spec);
      f.step = trim(f.step.substr(0, hash));
    }
    s.faults.push_back(std::move(f));
  }
}
inline void load(fault_state& s) {
  if (s.loaded) return;
  s.loaded = true;
  if (const char* v = std::getenv("ROCENANTE_TEST_FAULT"); v != nullptr && *v) parse(s, v);
}
}  // namespace detail

/// Replaces this process's fault plan and forgets which steps were reached. `spec`: items separated by ';' —
/// "R@STEP" makes rank R's local work fail the first time it reaches the set-up step named STEP, "R@STEP#N" the
/// N-th time; "cut A-B" makes ranks A and B report each other unreachable (fault_cuts). "" clears the plan.
/// Throws config_error for a malformed spec. Call it while no set-up runs.
inline void set_faults(const std::string& spec) {
  auto& s = detail::state();
  std::lock_guard lock(s.mu);
  s.loaded = true;
  detail::parse(s, spec);
  s.arrivals.clear();
  s.seen.clear();
}

/// The set-up steps rank `rank` reached in this process since the plan was last set, in order (a name once per
/// arrival).
inline std::vector<std::string> steps_seen(int rank) {
  auto& s = detail::state();
  std::lock_guard lock(s.mu);
  auto it = s.seen.find(rank);
  return it == s.seen.end() ? std::vector<std::string>{} : it->second;
}

}  // namespace testing
#endif

/// Records, in a test build, that `rank` reached `step`, and says whether its fault plan fails it at this arrival;
/// elsewhere false.
inline bool fault_due([[maybe_unused]] int rank, [[maybe_unused]] std::string_view step) {
#if defined(ROCENANTE_TEST_FAULTS)
  auto& s = testing::detail::state();
  std::lock_guard lock(s.mu);
  testing::detail::load(s);
  const std::string name(step);
  s.seen[rank].push_back(name);
  const int n = ++s.arrivals[{rank, name}];
  for (const auto& f : s.faults)
    if (f.rank == rank && f.step == name && f.nth == n) return true;
#endif
  return false;
}

/// The error a fault of the plan raises.
inline transport_error injected_fault(std::string_view step) {
  return transport_error("fault injected by the test's fault plan at step '" + std::string(step) + "'");
}

/// Throws the injected fault when the test build's fault plan fails `rank` at this arrival at `step`; elsewhere does
/// nothing. The selection's probes call it per candidate.
inline void fault_point(int rank, std::string_view step) {
  if (fault_due(rank, step)) throw injected_fault(step);
}

/// Whether a test build's fault plan cuts ranks `a` and `b` apart (either order); false elsewhere.
inline bool fault_cuts([[maybe_unused]] int a, [[maybe_unused]] int b) {
#if defined(ROCENANTE_TEST_FAULTS)
  auto& s = testing::detail::state();
  std::lock_guard lock(s.mu);
  testing::detail::load(s);
  for (const auto& c : s.cuts)
    if ((c.first == a && c.second == b) || (c.first == b && c.second == a)) return true;
#endif
  return false;
}

namespace detail {

inline constexpr std::uint32_t ballot_magic = 0x52435654;  // "RCVT"

/// FNV-1a of a step's name: ranks at different steps (a set-up that skipped a vote on some rank) are told apart.
inline std::uint32_t step_hash(std::string_view step) {
  std::uint32_t h = 2166136261u;
  for (char c : step) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  return h;
}

/// One rank's outcome of a step: the head of every ballot. Fixed size and trivially copyable.
struct outcome {
  std::uint32_t magic;
  std::int32_t rank;
  std::uint32_t step;    ///< step_hash of the step's name
  std::uint8_t ok;
  std::uint8_t kind;     ///< error_kind of the failure
  std::uint8_t nested;   ///< the failure is a vote's that every rank already threw
  std::uint8_t pad;
  char why[496];         ///< the reason, NUL-terminated (truncated)

  void fail(error_kind k, bool from_vote, const char* what) {
    ok = 0;
    kind = static_cast<std::uint8_t>(k);
    nested = from_vote ? 1 : 0;
    const std::size_t n = std::min(std::strlen(what), sizeof why - 1);
    std::memcpy(why, what, n);
    why[n] = '\0';
  }
  std::string text() const { return std::string(why, strnlen(why, sizeof why)); }
};
static_assert(sizeof(outcome) == 512 && std::is_trivially_copyable_v<outcome>);

struct nothing {};

template <class Payload>
struct ballot {
  outcome head;
  Payload payload;
};

}  // namespace detail

/// Collective: every rank of `boot` calls with the same `step`. Runs `local()` (which fills `mine`, the payload
/// this rank contributes), then exchanges every rank's outcome and payload in one all_gather. Returns every rank's
/// payload in rank order when `local()` succeeded on every rank; otherwise every rank throws the same
/// voted<config_error> or voted<transport_error> (see the file comment). Rethrows a bootstrap_error of `local()`
/// at once.
template <class Payload, class Local>
std::vector<Payload> vote(bootstrap::bootstrap_ref boot, std::string_view step, Payload& mine, Local&& local) {
  static_assert(std::is_trivially_copyable_v<Payload>, "a vote's payload travels as bytes: make it trivially copyable");
  const int me = boot.rank(), n = boot.size();
  detail::ballot<Payload> b{};
  b.head.magic = detail::ballot_magic;
  b.head.rank = me;
  b.head.step = detail::step_hash(step);
  b.head.ok = 1;
  std::exception_ptr agreed;  // a failure every rank already threw (an inner vote's)
  // A planned fault fails the step after its local work, as its last action failing would: the work may itself take
  // part in collective steps (a transport built inside the step), which the peers need this rank to join.
  const bool fault = fault_due(me, step);
  try {
    local();
    if (fault) throw injected_fault(step);
  } catch (const bootstrap_error&) {
    throw;
  } catch (const vote_failure& f) {
    agreed = std::current_exception();
    const bool config = dynamic_cast<const config_error*>(&f) != nullptr;
    const auto* e = dynamic_cast<const std::exception*>(&f);
    b.head.fail(config ? error_kind::config : error_kind::transport, true, e != nullptr ? e->what() : f.step().c_str());
  } catch (const config_error& e) {
    b.head.fail(error_kind::config, false, e.what());
  } catch (const std::exception& e) {
    b.head.fail(error_kind::transport, false, e.what());
  }
  std::memcpy(&b.payload, &mine, sizeof(Payload));
  std::vector<detail::ballot<Payload>> all(static_cast<std::size_t>(n));
  boot.all_gather(&b, all.data(), sizeof b);
  for (int q = 0; q < n; ++q)
    if (all[q].head.magic != detail::ballot_magic || all[q].head.rank != q || all[q].head.step != b.head.step)
      throw bootstrap_error("set-up out of step: rank " + std::to_string(q) + " was not at step '" + std::string(step) +
                            "' when rank " + std::to_string(me) +
                            " was (ranks run different RoCEnante builds, or a set-up path skipped a step: report it)");
  std::vector<failure> fs;
  bool all_agreed = true;
  error_kind kind = error_kind::transport;
  for (int q = 0; q < n; ++q) {
    if (all[q].head.ok) continue;
    if (fs.empty()) kind = static_cast<error_kind>(all[q].head.kind);
    all_agreed = all_agreed && all[q].head.nested;
    fs.push_back({q, all[q].head.text()});
  }
  if (fs.empty()) {
    std::vector<Payload> out(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) std::memcpy(&out[q], &all[q].payload, sizeof(Payload));
    return out;
  }
  if (all_agreed && agreed) std::rethrow_exception(agreed);
  fail_together(kind, std::string(step), std::move(fs));
}

/// A step with nothing to exchange but its outcome.
template <class Local>
void vote(bootstrap::bootstrap_ref boot, std::string_view step, Local&& local) {
  detail::nothing none{};
  (void)vote(boot, step, none, std::forward<Local>(local));
}

}  // namespace rocenante::setup

// core/capabilities.hpp — what a communicator guarantees beyond a correct result, so that an engine can ask instead
// of assuming: the library's own protocol gives every guarantee on every transport; the NCCL fallback
// (transport/nccl.hpp) forwards whole collectives to NCCL and gives none of them. docs/api.md §1.2 lists the
// differences. Every rank of a communicator gets the same answer (it depends only on the transport chosen).
#pragma once

#include <string>

namespace rocenante {

struct capabilities {
  /// A call that does not complete (failed, timed out, refused, or made on a poisoned communicator) fills its
  /// output with the poison value, NaN (docs/api.md §1.1).
  bool poison_fill = false;
  /// failures() counts every call of this rank that did not complete.
  bool counts_failures = false;
  /// A call refused on one rank (bad input, reject()) fails at once on its peers, which are told to abort it,
  /// instead of leaving them waiting.
  bool aborts_peers = false;
  /// Every wait for a peer inside a call ends within options::timeout_ns: a dead or stalled peer poisons the
  /// communicator instead of hanging the call.
  bool bounded_waits = false;

  /// Every guarantee: the library's protocol over any of its transports.
  static constexpr capabilities protocol() { return {true, true, true, true}; }

  bool all() const { return poison_fill && counts_failures && aborts_peers && bounded_waits; }
  /// The guarantees missing, in words ("NaN fill, failures() count, ..."); empty when none is.
  std::string missing() const {
    std::string s;
    auto add = [&](bool has, const char* what) {
      if (!has) s += (s.empty() ? "" : ", ") + std::string(what);
    };
    add(poison_fill, "NaN fill of a call that does not complete");
    add(counts_failures, "failures() counting every such call");
    add(aborts_peers, "aborting the peers of a refused call");
    add(bounded_waits, "waits bounded by options::timeout_ns");
    return s;
  }
  bool operator==(const capabilities&) const = default;
};

}  // namespace rocenante

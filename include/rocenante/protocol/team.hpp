// protocol/team.hpp — the group of threads that runs one part of a collective together.
//
// The protocol and the algorithms are written against this concept, so the same code runs on one CPU thread
// (the host executor) and on a CTA of a GPU kernel (device/block_team.hpp). Thread ids are passed in, never read
// from built-ins (CUB / CuTe style), so user kernels can dedicate any subset of their threads.
//
//   Requires:
//     t.thread()   this thread's index in the team, 0..size()-1 (thread 0 is the leader)
//     t.size()     number of threads in the team
//     t.sync()     barrier: memory operations before it, by any team thread, happen before those after it
//     t.all(b)     barrier that also returns the logical AND of `b` over the team (every thread gets it)
#pragma once

#include <concepts>

#include "../config.hpp"

namespace rocenante::protocol {

template <class T>
concept team = requires(T& t, bool b) {
  { t.thread() } -> std::convertible_to<int>;
  { t.size() } -> std::convertible_to<int>;
  t.sync();
  { t.all(b) } -> std::same_as<bool>;
};

/// A team of one: the calling CPU thread (host executor).
struct host_team {
  ROCENANTE_HOST_DEVICE constexpr int thread() const { return 0; }
  ROCENANTE_HOST_DEVICE constexpr int size() const { return 1; }
  ROCENANTE_HOST_DEVICE constexpr void sync() const {}
  ROCENANTE_HOST_DEVICE constexpr bool all(bool b) const { return b; }
};
static_assert(team<host_team>);

}  // namespace rocenante::protocol

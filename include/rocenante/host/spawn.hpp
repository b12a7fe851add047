// host/spawn.hpp — run a function once per rank, each rank on its own thread with an in-process bootstrap.
// The quickest way to get a world of n ranks in one process (tests, examples, rocenante-perf --ranks).
#pragma once

#include <exception>
#include <thread>
#include <vector>

#include "../bootstrap/in_process.hpp"

namespace rocenante::host {

/// Calls fn(bootstrap::in_process& boot) on `ranks` threads and joins them. Rethrows the first exception
/// (lowest rank) after every thread has finished.
template <class F>
void spawn_ranks(int ranks, F&& fn, std::chrono::milliseconds bootstrap_timeout = std::chrono::seconds(60)) {
  bootstrap::in_process_world world(ranks, bootstrap_timeout);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        bootstrap::in_process boot(world, r);
        fn(boot);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace rocenante::host

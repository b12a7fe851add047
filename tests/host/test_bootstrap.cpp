// tests/host/test_bootstrap.cpp — the in-process bootstrap (all-gather in rank order, repeated exchanges, a
// missing rank reported by name within the timeout, a broken world failing fast), the callback adapter an
// engine plugs its own process group into, bootstrap_ref, and spawn_ranks' error propagation.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "common.hpp"

using namespace rtest;

TEST_SUITE("host.bootstrap") {
  TEST_CASE("in_process all_gather delivers every rank's bytes in rank order, exchange after exchange") {
    constexpr int n = 5;
    constexpr int rounds = 50;
    std::vector<std::string> wrong(n);
    host::spawn_ranks(n, [&](bootstrap::in_process& b) {
      const int r = b.rank();
      if (b.size() != n) wrong[r] = "size";
      for (int round = 0; round < rounds; ++round) {
        const std::size_t bytes = 1 + static_cast<std::size_t>(round) * 7;  // same on every rank per round
        std::vector<unsigned char> mine(bytes), all(bytes * n, 0);
        for (std::size_t i = 0; i < bytes; ++i) mine[i] = static_cast<unsigned char>(r * 31 + round + i);
        b.all_gather(mine.data(), all.data(), bytes);
        for (int q = 0; q < n; ++q)
          for (std::size_t i = 0; i < bytes; ++i)
            if (all[q * bytes + i] != static_cast<unsigned char>(q * 31 + round + i))
              wrong[r] = "round " + std::to_string(round) + " rank " + std::to_string(q) + " byte " + std::to_string(i);
        if (round % 10 == 0) b.barrier();
      }
    });
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(wrong[r].empty());
    }
  }

  TEST_CASE("a rank that never arrives makes every waiting rank throw bootstrap_error naming it, within the timeout") {
    constexpr int n = 4;
    const auto timeout = std::chrono::milliseconds(400);
    bootstrap::in_process_world world(n, timeout);
    std::vector<std::string> what(n);
    std::vector<double> seconds(n, -1);
    std::vector<std::thread> threads;
    for (int r = 0; r < n - 1; ++r)  // rank 3 never calls
      threads.emplace_back([&, r] {
        bootstrap::in_process b(world, r);
        int mine = r, all[n] = {};
        stopwatch t;
        try {
          b.all_gather(&mine, all, sizeof mine);
        } catch (const bootstrap_error& e) {
          what[r] = e.what();
        }
        seconds[r] = t.seconds();
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n - 1; ++r) {
      CAPTURE(r);
      INFO(what[r]);
      CHECK(contains(what[r], "rank(s) 3 "));
      CHECK(seconds[r] >= 0.0);
      CHECK(seconds[r] < 0.4 + 1.0);
    }
    // The world stays broken: the latecomer and any later exchange fail at once instead of waiting again.
    bootstrap::in_process late(world, 3);
    int mine = 3, all[n] = {};
    stopwatch t;
    CHECK_THROWS_AS(late.all_gather(&mine, all, sizeof mine), bootstrap_error);
    CHECK(t.seconds() < 0.2);
  }

  TEST_CASE("ranks that exchange different sizes all throw bootstrap_error instead of mixing bytes") {
    bootstrap::in_process_world world(2, std::chrono::seconds(10));
    std::vector<int> threw(2, 0);  // not vector<bool>: its bits share words, and two threads write them
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        bootstrap::in_process b(world, r);
        std::uint64_t mine[2] = {1, 2}, all[4] = {};
        try {
          b.all_gather(mine, all, r == 0 ? 16 : 8);
        } catch (const bootstrap_error&) {
          threw[r] = 1;
        }
      });
    for (auto& t : threads) t.join();
    CHECK(threw[0]);
    CHECK(threw[1]);
  }

  TEST_CASE("in_process refuses a world of no ranks and a rank outside the world") {
    CHECK_THROWS_AS(bootstrap::in_process_world(0), config_error);
    bootstrap::in_process_world world(2);
    CHECK_THROWS_AS(bootstrap::in_process(world, 2), config_error);
    CHECK_THROWS_AS(bootstrap::in_process(world, -1), config_error);
  }

  TEST_CASE("bootstrap::callback over an in_process world sets up a communicator that sums correctly") {
    constexpr int n = 3;
    std::vector<status> st(n, status::internal);
    std::vector<std::vector<float>> out(n);
    std::vector<int> gathers(n, 0);
    host::spawn_ranks(n, [&](bootstrap::in_process& inner) {
      const int r = inner.rank();
      // An engine's process group, seen only through two callables. No barrier given: the adapter's default
      // (a one-byte all-gather) is used.
      bootstrap::callback cb(r, n, [&inner, &gathers, r](const void* s, void* d, std::size_t bytes) {
        ++gathers[r];
        inner.all_gather(s, d, bytes);
      });
      CHECK(bootstrap::bootstrap_ref(cb).rank() == r);
      comm_t comm(cb, options{});
      CHECK(comm.rank() == r);
      CHECK(comm.size() == n);
      std::vector<float> in(1000, static_cast<float>(r + 1));
      out[r].assign(1000, -1);
      st[r] = comm.all_reduce<algorithm::ring>(in.data(), out[r].data(), in.size());
    });
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(st[r] == status::ok);
      CHECK(std::all_of(out[r].begin(), out[r].end(), [](float v) { return v == 6.0f; }));
      CHECK(gathers[r] >= 2);  // configuration, window addresses (and the barrier) went through the callable
    }
  }

  TEST_CASE("bootstrap::callback uses the barrier it is given") {
    std::atomic<int> barriers{0};
    host::spawn_ranks(2, [&](bootstrap::in_process& inner) {
      bootstrap::callback cb(
          inner.rank(), inner.size(), [&inner](const void* s, void* d, std::size_t bytes) { inner.all_gather(s, d, bytes); },
          [&inner, &barriers] {
            ++barriers;
            inner.barrier();
          });
      bootstrap::bootstrap_ref ref(cb);
      ref.barrier();
      CHECK(ref.size() == 2);
    });
    CHECK(barriers.load() == 2);
  }

  TEST_CASE("spawn_ranks rethrows the lowest rank's exception after every rank has finished") {
    std::atomic<int> finished{0};
    try {
      host::spawn_ranks(3, [&](bootstrap::in_process& b) {
        ++finished;
        if (b.rank() >= 1) throw std::runtime_error("rank " + std::to_string(b.rank()));
      });
      FAIL("no exception");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "rank 1");
    }
    CHECK(finished.load() == 3);
  }

  TEST_CASE("the loopback transport refuses more ranks than a handle holds") {
    std::vector<std::string> what(max_ranks + 1);
    host::spawn_ranks(max_ranks + 1, [&](bootstrap::in_process& b) {
      try {
        comm_t comm(b, options{});
      } catch (const error& e) {
        what[b.rank()] = e.what();
      }
    });
    for (const auto& w : what) CHECK(contains(w, "ranks"));
  }
}

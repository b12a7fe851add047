// tests/host/test_vote.cpp — the set-up vote (bootstrap/vote.hpp), on CPU threads: a step that fails on one rank
// fails every rank with the same error, naming the rank, the step and the reason; a failure inside a nested step is
// reported once, unchanged; the test build's fault plan (what every fault-injection test relies on) fires where it
// says and nowhere else.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include <rocenante/bootstrap/vote.hpp>
#include <rocenante/host/spawn.hpp>
#include <rocenante/rocenante.hpp>

using namespace rocenante;

namespace {

/// Sets the process's fault plan for the life of the object.
struct fault_plan {
  explicit fault_plan(const std::string& spec) { setup::testing::set_faults(spec); }
  ~fault_plan() { setup::testing::set_faults(""); }
};

/// What a rank saw of a step: its error's text and class, and the vote's record.
struct seen {
  std::string what;
  bool config = false, transport = false, bootstrap = false, voted = false;
  std::string step;
  std::vector<setup::failure> failures;
};

template <class Body>
std::vector<seen> on_ranks(int n, Body&& body) {
  std::vector<seen> out(static_cast<std::size_t>(n));
  host::spawn_ranks(n, [&](bootstrap::in_process& boot) {
    seen& s = out[boot.rank()];
    try {
      body(boot);
    } catch (const error& e) {
      s.what = e.what();
      s.config = dynamic_cast<const config_error*>(&e) != nullptr;
      s.transport = dynamic_cast<const transport_error*>(&e) != nullptr;
      s.bootstrap = dynamic_cast<const bootstrap_error*>(&e) != nullptr;
      if (const auto* v = dynamic_cast<const setup::vote_failure*>(&e)) {
        s.voted = true;
        s.step = v->step();
        s.failures = v->failures();
      }
    }
  });
  return out;
}

}  // namespace

TEST_SUITE("host.setup.vote") {
  TEST_CASE("every rank ok: each gets every rank's payload in rank order") {
    std::vector<std::vector<int>> got(3);
    host::spawn_ranks(3, [&](bootstrap::in_process& boot) {
      int mine = 0;
      const std::vector<int> all = setup::vote(boot, "numbers", mine, [&] { mine = 10 + boot.rank(); });
      got[boot.rank()] = all;
    });
    for (const auto& g : got) CHECK(g == std::vector<int>{10, 11, 12});
  }

  TEST_CASE("a local step that throws on one rank fails every rank with the same error, naming the rank and step") {
    const auto rs = on_ranks(4, [](bootstrap::in_process& boot) {
      setup::vote(boot, "open the window", [&] {
        if (boot.rank() == 2) throw transport_error("window: out of memory");
      });
    });
    for (const seen& s : rs) {
      CHECK(s.what == "set-up step 'open the window' failed on rank 2: window: out of memory");
      CHECK(s.transport);
      CHECK_FALSE(s.config);
      CHECK(s.voted);
      CHECK(s.step == "open the window");
      CHECK(s.failures == std::vector<setup::failure>{{2, "window: out of memory"}});
    }
  }

  TEST_CASE("a config_error keeps its class on every rank; any other exception is a transport_error") {
    const auto rs = on_ranks(2, [](bootstrap::in_process& boot) {
      setup::vote(boot, "check", [&] {
        if (boot.rank() == 1) throw config_error("bad option");
      });
    });
    for (const seen& s : rs) {
      CHECK(s.config);
      CHECK(s.what == "set-up step 'check' failed on rank 1: bad option");
    }
    const auto rs2 = on_ranks(2, [](bootstrap::in_process& boot) {
      setup::vote(boot, "allocate", [&] {
        if (boot.rank() == 0) throw std::length_error("vector too long");
      });
    });
    for (const seen& s : rs2) {
      CHECK(s.transport);
      CHECK(s.what == "set-up step 'allocate' failed on rank 0: vector too long");
    }
  }

  TEST_CASE("several failing ranks are grouped by reason, in rank order") {
    const auto rs = on_ranks(4, [](bootstrap::in_process& boot) {
      setup::vote(boot, "probe", [&] {
        if (boot.rank() == 0 || boot.rank() == 3) throw transport_error("no device");
        if (boot.rank() == 2) throw transport_error("port down");
      });
    });
    for (const seen& s : rs) CHECK(s.what == "set-up step 'probe' failed on ranks 0, 3: no device; rank 2: port down");
  }

  TEST_CASE("a nested vote's failure is reported once, unchanged, by the enclosing step") {
    const auto rs = on_ranks(3, [](bootstrap::in_process& boot) {
      setup::vote(boot, "build the transport", [&] {
        setup::vote(boot, "exchange keys", [&] {
          if (boot.rank() == 1) throw transport_error("key file missing");
        });
      });
    });
    for (const seen& s : rs) {
      CHECK(s.what == "set-up step 'exchange keys' failed on rank 1: key file missing");
      CHECK(s.step == "exchange keys");
      CHECK(s.failures.size() == 1);
    }
  }

  TEST_CASE("a rank that fails after the last nested vote is caught by the enclosing step, not left behind") {
    const auto rs = on_ranks(3, [](bootstrap::in_process& boot) {
      setup::vote(boot, "build the transport", [&] {
        int mine = boot.rank();
        (void)setup::vote(boot, "exchange keys", mine, [] {});
        if (boot.rank() == 0) throw transport_error("starting the proxy thread failed");
      });
      setup::vote(boot, "next step", [] {});  // never reached: every rank failed together above
    });
    for (const seen& s : rs)
      CHECK(s.what == "set-up step 'build the transport' failed on rank 0: starting the proxy thread failed");
  }

  TEST_CASE("a long reason is truncated, not overflowed, and identical on every rank") {
    const auto rs = on_ranks(2, [](bootstrap::in_process& boot) {
      setup::vote(boot, "long", [&] {
        if (boot.rank() == 0) throw transport_error(std::string(2000, 'x'));
      });
    });
    CHECK(rs[0].what == rs[1].what);
    CHECK(rs[0].failures.at(0).why.size() == sizeof(setup::detail::outcome::why) - 1);
  }

  TEST_CASE("ranks at different steps are told apart instead of mixing their payloads") {
    const auto rs = on_ranks(2, [](bootstrap::in_process& boot) {
      setup::vote(boot, boot.rank() == 0 ? "step A" : "step B", [] {});
    });
    for (const seen& s : rs) {
      CHECK(s.bootstrap);
      CHECK(s.what.find("set-up out of step") == 0);
    }
  }

  TEST_CASE("fail_together reads as a vote's failure") {
    try {
      setup::fail_together(setup::error_kind::config, "placement", {{3, "runs elsewhere"}});
      FAIL("fail_together returned");
    } catch (const config_error& e) {
      CHECK(std::string(e.what()) == "set-up step 'placement' failed on rank 3: runs elsewhere");
      CHECK(dynamic_cast<const setup::vote_failure*>(&e) != nullptr);
    }
  }
}

TEST_SUITE("host.setup.faults") {
  TEST_CASE("a fault plan fails the named rank at the named arrival, and records every step reached") {
    fault_plan plan("1@connect#2");
    std::atomic<int> passed_first{0};
    const auto rs = on_ranks(3, [&](bootstrap::in_process& boot) {
      setup::vote(boot, "connect", [] {});
      ++passed_first;
      setup::vote(boot, "connect", [] {});
    });
    CHECK(passed_first.load() == 3);
    for (const seen& s : rs)
      CHECK(s.what == "set-up step 'connect' failed on rank 1: fault injected by the test's fault plan at step 'connect'");
    CHECK(setup::testing::steps_seen(1) == std::vector<std::string>{"connect", "connect"});
    CHECK(setup::testing::steps_seen(0) == std::vector<std::string>{"connect", "connect"});
  }

  TEST_CASE("a fault fires once: the same step reached again afterwards passes") {
    fault_plan plan("0@step");
    const auto first = on_ranks(2, [](bootstrap::in_process& boot) { setup::vote(boot, "step", [] {}); });
    CHECK(first[0].voted);
    const auto second = on_ranks(2, [](bootstrap::in_process& boot) { setup::vote(boot, "step", [] {}); });
    CHECK(second[0].what.empty());
    CHECK(second[1].what.empty());
  }

  TEST_CASE("cuts are symmetric, and a malformed plan is a config_error naming it") {
    fault_plan plan("cut 0-2; 3@x");
    CHECK(setup::fault_cuts(0, 2));
    CHECK(setup::fault_cuts(2, 0));
    CHECK_FALSE(setup::fault_cuts(0, 1));
    CHECK_THROWS_WITH_AS(setup::testing::set_faults("1@x#y"), "ROCENANTE_TEST_FAULT='1@x#y': 'y' is not a rank or a count",
                         config_error);
    CHECK_THROWS_WITH_AS(setup::testing::set_faults("oops"),
                         "ROCENANTE_TEST_FAULT='oops': 'oops' is not RANK@STEP[#N] or 'cut A-B'", config_error);
  }
}

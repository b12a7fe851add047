// tests/host/test_lifetime.cpp — the host-testable part of what keeps a CUDA graph from running against a destroyed
// communicator (gpu/lifetime.hpp): the retired state makes every call return at entry and count itself, without
// touching a window, and memory handed back on another thread is freed exactly once. The graph replay itself runs
// in tests/gpu (gpu.graph: "a graph replayed after its communicator was destroyed and rebuilt").
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include <rocenante/gpu/lifetime.hpp>
#include <rocenante/protocol/session.hpp>
#include <rocenante/protocol/team.hpp>
#include <rocenante/transport/loopback.hpp>

using namespace rocenante;

namespace {

/// A session over `state` whose handle names no window: a call that reached a window would crash.
bool enters(protocol::rank_state& state) {
  protocol::host_team team;
  transport::direct_handle nowhere{};
  protocol::session<protocol::host_team, transport::direct_handle> s(team, nowhere, &state, protocol::wait_policy{}, 0, 0);
  return s.enter();
}

}  // namespace

TEST_SUITE("host.gpu_lifetime") {
  TEST_CASE("a retired state refuses every call at entry and counts each one, keeping the earlier count") {
    protocol::rank_state state{}, mirror{};
    protocol::init_state(state, 1);
    protocol::init_state(mirror, 1);
    state.failures = mirror.failures = 5;  // calls that failed while the communicator lived
    REQUIRE(enters(state));
    gpu::lifetime::retire(state, 3);
    CHECK(protocol::is_poisoned(&state));
    CHECK(state.poison == protocol::poisoned);
    CHECK(state.failure.reporter == 3);
    for (std::uint64_t call = 1; call <= 3; ++call) {
      CHECK_FALSE(enters(state));
      protocol::count_failed_call(&state, &mirror);  // what part 0 of a refused kernel does
      CHECK(protocol::failures(&state) == 5 + call);
      CHECK(mirror.failures == 5 + call);
    }
  }

  TEST_CASE("unlike a rank poisoned by a failure, whose first unfinished call was counted when it failed") {
    protocol::rank_state state{};
    protocol::init_state(state, 7);
    protocol::failure_record rec{};
    rec.kind = static_cast<std::uint32_t>(protocol::failure_kind::timeout);
    rec.seq = 7;
    REQUIRE(protocol::poison(&state, rec));
    CHECK(protocol::failures(&state) == 1);
    protocol::count_failed_call(&state, nullptr);  // part 0 ending the call that failed: already counted
    CHECK(protocol::failures(&state) == 1);
    protocol::rank_state retired = state;
    gpu::lifetime::retire(retired, 0);
    protocol::count_failed_call(&retired, nullptr);  // a replay after destruction is a new call: counted
    CHECK(protocol::failures(&retired) == 2);
  }

  TEST_CASE("memory handed back on other threads is freed exactly once, on the thread that drains") {
    gpu::lifetime::deferred_frees list;
    std::vector<protocol::rank_state> states(64);
    std::vector<std::thread> givers;
    for (int t = 0; t < 4; ++t)
      givers.emplace_back([&, t] {
        for (int i = t; i < 64; i += 4) list.add({&states[i], nullptr});
      });
    for (auto& g : givers) g.join();
    CHECK(list.pending() == 64);
    std::set<protocol::rank_state*> freed;
    int calls = 0;
    list.drain([&](const gpu::lifetime::state_memory& m) {
      ++calls;
      freed.insert(m.state);
    });
    CHECK(calls == 64);
    CHECK(freed.size() == 64);
    CHECK(list.pending() == 0);
    list.drain([&](const gpu::lifetime::state_memory&) { ++calls; });
    CHECK(calls == 64);
  }
}

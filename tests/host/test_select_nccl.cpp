// tests/host/test_select_nccl.cpp — the NCCL transport's set-up and launch path on CPU threads without a GPU: a
// binary starts without libnccl and every rank reports "NCCL unavailable", naming the rank; a rank that cannot use
// NCCL keeps every peer out of NCCL's init; an init that never finishes is aborted within options::timeout_ns on
// every rank; a fault at each set-up step on one rank fails every rank alike; NCCL's results become the library's
// statuses, counted. The entry points are plain functions standing in for libnccl's, so that no GPU is needed
// (they never touch the stream or the buffers); the real library runs in tests/gpu.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include <rocenante/host/spawn.hpp>
#include <rocenante/transport/nccl.hpp>

using namespace rocenante;
namespace api = transport::nccl_api;

namespace {

/// What the stand-in library does, set by each test before its ranks start.
struct behaviour {
  api::result_t init_result = api::success;     ///< what ncclCommInitRankConfig returns
  api::result_t async_state = api::success;     ///< what ncclCommGetAsyncError reports
  int async_in_progress_polls = 0;              ///< polls that report ncclInProgress before async_state
  api::result_t call_result = api::success;     ///< what ncclAllReduce / ncclAllGather return
  int fail_init_rank = -1;                      ///< this rank's init returns ncclSystemError
};
behaviour how;
std::atomic<int> init_calls{0}, config_init_calls{0}, unique_id_calls{0}, aborts{0}, destroys{0}, polls{0};
std::atomic<int> blocking_seen{-1};

api::comm_t fake_comm(int rank) { return reinterpret_cast<api::comm_t>(static_cast<std::uintptr_t>(0x1000 + rank)); }

api::result_t stub_unique_id(api::unique_id* id) {
  ++unique_id_calls;
  std::memset(id, 7, sizeof *id);
  return api::success;
}
api::result_t stub_init(api::comm_t* c, int, api::unique_id, int rank) {
  ++init_calls;
  *c = fake_comm(rank);
  return api::success;
}
api::result_t stub_init_config(api::comm_t* c, int, api::unique_id, int rank, api::config_v21400* cfg) {
  ++config_init_calls;
  blocking_seen = cfg->blocking;
  *c = fake_comm(rank);
  if (rank == how.fail_init_rank) return 2;  // ncclSystemError
  return how.init_result;
}
api::result_t stub_async(api::comm_t, api::result_t* state) {
  const int n = ++polls;
  *state = n <= how.async_in_progress_polls ? api::in_progress : how.async_state;
  return api::success;
}
api::result_t stub_abort(api::comm_t) {
  ++aborts;
  return api::success;
}
api::result_t stub_destroy(api::comm_t) {
  ++destroys;
  return api::success;
}
api::result_t stub_all_reduce(const void*, void*, std::size_t, int, int, api::comm_t, cudaStream_t) { return how.call_result; }
api::result_t stub_all_gather(const void*, void*, std::size_t, int, api::comm_t, cudaStream_t) { return how.call_result; }
const char* stub_error_string(api::result_t r) {
  switch (r) {
    case 2: return "unhandled system error";
    case 4: return "invalid argument";
    default: return "stub";
  }
}

/// A loaded libnccl as far as these tests go.
api::library fake_library(bool nonblocking = true) {
  api::library l;
  l.ok = true;
  l.version = 22809;
  l.get_unique_id = stub_unique_id;
  l.comm_init_rank = stub_init;
  l.comm_init_rank_config = nonblocking ? stub_init_config : nullptr;
  l.comm_get_async_error = stub_async;
  l.comm_abort = stub_abort;
  l.comm_destroy = stub_destroy;
  l.all_reduce = stub_all_reduce;
  l.all_gather = stub_all_gather;
  l.get_error_string = stub_error_string;
  return l;
}

void reset(behaviour b = {}) {
  how = b;
  init_calls = config_init_calls = unique_id_calls = aborts = destroys = polls = 0;
  blocking_seen = -1;
  setup::testing::set_faults("");
}

/// Builds transport::nccl on `n` thread ranks (rank r uses libs[r], else libs[0]) and returns each rank's error
/// ("" when set-up succeeded; the object is destroyed at once).
std::vector<std::string> build_on(int n, const std::vector<const api::library*>& libs, options o = {}) {
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  host::spawn_ranks(n, [&](bootstrap::in_process& boot) {
    const api::library& l = *libs[static_cast<std::size_t>(boot.rank()) < libs.size() ? boot.rank() : 0];
    try {
      transport::nccl t(bootstrap::bootstrap_ref(boot), l, o);
    } catch (const transport_error& e) {
      errors[boot.rank()] = e.what();
    }
  });
  return errors;
}

/// One rank over library `l`, with options::timeout_ns `timeout_ns`.
struct world_of_one {
  bootstrap::in_process_world world{1};
  bootstrap::in_process boot{world, 0};
  transport::nccl t;
  world_of_one(const api::library& l, std::uint64_t timeout_ns)
      : t(bootstrap::bootstrap_ref(boot), l, [&] {
          options o;
          o.timeout_ns = timeout_ns;
          return o;
        }()) {}
};

}  // namespace

TEST_SUITE("host.select.nccl") {
  TEST_CASE("without libnccl every rank throws 'NCCL unavailable' naming the ranks, and nothing hangs") {
    reset();
    const api::library missing = api::load("/nonexistent/libnccl.so.2");
    REQUIRE_FALSE(missing.ok);
    CHECK(missing.why.find("NCCL unavailable: cannot load /nonexistent/libnccl.so.2") == 0);
    const auto errors = build_on(3, {&missing});
    for (const auto& e : errors) CHECK(e == "set-up step 'nccl: library' failed on ranks 0, 1, 2: " + missing.why);
  }

  TEST_CASE("one rank without NCCL keeps every peer out of NCCL's init") {
    reset();
    const api::library fake = fake_library(), missing = api::load("/nonexistent/libnccl.so.2");
    const auto errors = build_on(3, {&fake, &missing, &fake});
    CHECK(init_calls.load() + config_init_calls.load() == 0);
    CHECK(unique_id_calls.load() == 1);  // rank 0 made the id; nobody used it
    for (const auto& e : errors) CHECK(e == "set-up step 'nccl: library' failed on rank 1: " + missing.why);
  }

  TEST_CASE("NCCL's init is non-blocking and polled: it succeeds on every rank, and the destructor destroys") {
    reset({.async_in_progress_polls = 5});
    const api::library fake = fake_library();
    how.init_result = api::in_progress;
    const auto errors = build_on(3, {&fake});
    for (const auto& e : errors) CHECK(e.empty());
    CHECK(config_init_calls.load() == 3);
    CHECK(blocking_seen.load() == 0);
    CHECK(polls.load() >= 5 + 3);  // polled through NCCL's ncclInProgress until it finished
    CHECK(destroys.load() == 3);
    CHECK(aborts.load() == 0);
  }

  TEST_CASE("an init that never finishes is aborted on every rank within the timeout, with the same error") {
    reset({.init_result = api::in_progress, .async_state = api::in_progress, .async_in_progress_polls = 1 << 30});
    const api::library fake = fake_library();
    options o;
    o.timeout_ns = 300'000'000;
    const auto t0 = std::chrono::steady_clock::now();
    const auto errors = build_on(3, {&fake}, o);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(s < 3.0);
    CHECK(aborts.load() == 3);
    for (const auto& e : errors)
      CHECK(e == "set-up step 'nccl: init' failed on ranks 0, 1, 2: ncclCommInitRankConfig did not finish within 300 ms "
                 "(options::timeout_ns): a peer never joined or cannot be reached; NCCL's init was aborted");
  }

  TEST_CASE("NCCL's init failing on one rank fails every rank, and the ranks whose init finished abort it") {
    reset({.fail_init_rank = 2});
    const api::library fake = fake_library();
    const auto errors = build_on(3, {&fake});
    for (const auto& e : errors)
      CHECK(e == "set-up step 'nccl: init' failed on rank 2: ncclCommInitRankConfig failed: unhandled system error");
    CHECK(aborts.load() == 3);  // rank 2 aborts its failed init, ranks 0 and 1 the finished ones
    CHECK(destroys.load() == 0);
  }

  TEST_CASE("a fault at each set-up step on one rank fails every rank alike, leaving no rank inside NCCL") {
    const api::library fake = fake_library();
    for (const char* step : {"nccl: library", "nccl: init"}) {
      CAPTURE(step);
      reset();
      setup::testing::set_faults(std::string("1@") + step);
      const auto errors = build_on(3, {&fake});
      setup::testing::set_faults("");
      for (const auto& e : errors)
        CHECK(e == std::string("set-up step '") + step + "' failed on rank 1: fault injected by the test's fault plan at step '" +
                     step + "'");
      CHECK(destroys.load() == 0);
      CHECK(aborts.load() == config_init_calls.load());  // every init that ran was aborted
    }
  }

  TEST_CASE("NCCL before 2.14 (no ncclCommInitRankConfig): the blocking init serves") {
    reset();
    const api::library old = fake_library(false);
    const auto errors = build_on(2, {&old});
    for (const auto& e : errors) CHECK(e.empty());
    CHECK(init_calls.load() == 2);
    CHECK(config_init_calls.load() == 0);
  }

  TEST_CASE("launch path: NCCL's results become the library's statuses; every call that fails is counted") {
    reset();
    const api::library fake = fake_library();
    world_of_one w(fake, 200'000'000);
    transport::nccl& t = w.t;
    CHECK(t.capabilities() == capabilities{});
    CHECK(t.capabilities().missing() ==
          "NaN fill of a call that does not complete, failures() counting every such call, aborting the peers of a "
          "refused call, waits bounded by options::timeout_ns");
    float x[4] = {};
    how.call_result = api::in_progress;  // a non-blocking enqueue: polled until NCCL reports it done
    how.async_in_progress_polls = polls.load() + 3;
    CHECK(t.all_reduce(x, x, 4, nullptr) == status::ok);
    CHECK(t.failures() == 0);
    how.call_result = 4;  // ncclInvalidArgument
    CHECK(t.all_gather(x, x, 4, nullptr) == status::invalid_argument);
    CHECK(t.last_error().find("rocenante rank 0: ncclAllGather failed: invalid argument; the NCCL transport is poisoned") == 0);
    CHECK(t.failures() == 1);
    CHECK(t.check_health().state == status::poisoned);
    how.call_result = api::success;
    CHECK(t.all_reduce(x, x, 4, nullptr) == status::poisoned);  // fail-stop
    CHECK(t.failures() == 2);
  }

  TEST_CASE("launch path: an enqueue that stays in progress past the timeout is a timeout, and poisons") {
    reset();
    const api::library fake = fake_library();
    world_of_one w(fake, 100'000'000);
    transport::nccl& t = w.t;
    how.call_result = api::in_progress;
    how.async_state = api::in_progress;
    how.async_in_progress_polls = 1 << 30;
    float x[4] = {};
    CHECK(t.all_reduce(x, x, 4, nullptr) == status::timeout);
    CHECK(t.last_error().find("ncclAllReduce was not enqueued within 100 ms") != std::string::npos);
    CHECK(t.failures() == 1);
    CHECK(t.reject("dtype not supported", nullptr) == status::invalid_argument);
    CHECK(t.failures() == 2);
  }
}

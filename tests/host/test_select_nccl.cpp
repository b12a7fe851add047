// tests/host/test_select_nccl.cpp — the NCCL transport's set-up vote, on CPU threads without a GPU: a binary
// starts without libnccl and every rank reports "NCCL unavailable", naming the rank; a rank that cannot use NCCL
// keeps every peer out of ncclCommInitRank (where NCCL would wait for it). The entry points of the second case are
// plain functions standing in for libnccl's, so that no GPU is needed; the real library runs in tests/gpu.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <atomic>
#include <string>
#include <vector>

#include <rocenante/host/spawn.hpp>
#include <rocenante/transport/nccl.hpp>

using namespace rocenante;
namespace api = transport::nccl_api;

namespace {
std::atomic<int> init_calls{0}, unique_id_calls{0};
api::result_t stub_unique_id(api::unique_id* id) {
  ++unique_id_calls;
  std::memset(id, 7, sizeof *id);
  return api::success;
}
api::result_t stub_init(api::comm_t* c, int, api::unique_id, int) {
  ++init_calls;
  *c = nullptr;
  return api::success;
}
const char* stub_error_string(api::result_t) { return "stub"; }
}  // namespace

TEST_SUITE("host.select.nccl") {
  TEST_CASE("without libnccl every rank throws 'NCCL unavailable' naming the rank, and nothing hangs") {
    const api::library missing = api::load("/nonexistent/libnccl.so.2");
    REQUIRE_FALSE(missing.ok);
    CHECK(missing.why.find("NCCL unavailable: cannot load /nonexistent/libnccl.so.2") == 0);
    std::vector<std::string> errors(3);
    host::spawn_ranks(3, [&](bootstrap::in_process& boot) {
      try {
        transport::nccl t(bootstrap::bootstrap_ref(boot), missing);
      } catch (const transport_error& e) {
        errors[boot.rank()] = e.what();
      }
    });
    for (int r = 0; r < 3; ++r)
      CHECK(errors[r] == "NCCL unavailable on rank 0 (before ncclCommInitRank, seen by rank " + std::to_string(r) +
                             "): " + missing.why);
  }

  TEST_CASE("one rank without NCCL keeps every peer out of ncclCommInitRank") {
    api::library fake;  // stands in for a loaded libnccl on ranks 0 and 2
    fake.ok = true;
    fake.get_unique_id = stub_unique_id;
    fake.comm_init_rank = stub_init;
    fake.get_error_string = stub_error_string;
    const api::library missing = api::load("/nonexistent/libnccl.so.2");
    std::vector<std::string> errors(3);
    host::spawn_ranks(3, [&](bootstrap::in_process& boot) {
      try {
        transport::nccl t(bootstrap::bootstrap_ref(boot), boot.rank() == 1 ? missing : fake);
      } catch (const transport_error& e) {
        errors[boot.rank()] = e.what();
      }
    });
    CHECK(init_calls.load() == 0);
    CHECK(unique_id_calls.load() == 1);  // rank 0 made the id; nobody used it
    for (int r = 0; r < 3; ++r)
      CHECK(errors[r].find("NCCL unavailable on rank 1 (before ncclCommInitRank, seen by rank " + std::to_string(r)) == 0);
  }
}

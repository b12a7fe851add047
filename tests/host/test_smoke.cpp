// Smoke test: 4 in-process ranks, one all-reduce of each algorithm.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <rocenante/rocenante.hpp>

using namespace rocenante;

TEST_CASE("four in-process ranks sum 1+2+3+4 with every algorithm") {
  host::spawn_ranks(4, [](bootstrap::in_process& b) {
    host::communicator<transport::loopback> comm(b, options{});
    std::vector<float> in(1000, float(b.rank() + 1)), out(1000, -1.0f);
    REQUIRE(comm.all_reduce(in.data(), out.data(), in.size()) == status::ok);
    for (float v : out) REQUIRE(v == 10.0f);
    REQUIRE(comm.all_reduce<algorithm::ring>(in.data(), out.data(), in.size()) == status::ok);
    for (float v : out) REQUIRE(v == 10.0f);
    std::fill(out.begin(), out.end(), -1.0f);
    REQUIRE(comm.all_reduce<algorithm::two_shot>(in.data(), out.data(), in.size()) == status::ok);
    for (float v : out) REQUIRE(v == 10.0f);
  });
}

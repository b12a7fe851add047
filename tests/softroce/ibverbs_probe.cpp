// tests/softroce/ibverbs_probe.cpp — one process, no MPI: what a binary built with RDMA support does on a machine
// that may have no RDMA at all.
//
//   ibverbs_probe comm   build a one-rank host::communicator<transport::ibverbs> (bootstrap::callback) and run an
//                        all-reduce. Exit 0: RDMA set-up worked and the sum is right. Exit 3: set-up refused with a
//                        transport_error (printed: "ibverbs unavailable: ...", or a device/port/GID error naming
//                        the device). Any other outcome (a crash, a wrong sum) is a failure.
//   ibverbs_probe avail  transport::ib::probe(): exit 0 when RDMA is usable here, 3 when not (reason printed).
//   ibverbs_probe cards  connection-card validation: bad magic, size, version, rank, device count and window size
//                        are each refused with a message naming the rank (exit 0 when all are).
//
// Examples: ROCENANTE_IBVERBS_LIB=/nonexistent ibverbs_probe comm   -> "ibverbs unavailable: cannot load ..."
//           ROCENANTE_IB_HCA=rxe0 ROCENANTE_IB_GID_INDEX=7 ibverbs_probe comm (in the VM) -> error naming rxe0
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <rocenante/rocenante.hpp>
#include <rocenante/transport/ibverbs/ibverbs.hpp>

using namespace rocenante;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "comm";
  if (mode == "avail") {
    const transport::ib::availability a = transport::ib::probe();
    if (!a.available) {
      std::printf("%s\n", a.why.c_str());
      return 3;
    }
    std::string names;
    for (const auto& d : a.devices) names += (names.empty() ? "" : " ") + d;
    std::printf("ibverbs available: %s\n", names.c_str());
    return 0;
  }
  if (mode == "cards") {  // connection-card validation (HAZARDS #8): every corruption is refused, naming the rank
    using transport::ib::card;
    card good{.magic = transport::ib::card_magic, .version = transport::ib::card_version, .size = sizeof(card),
              .rank = 2, .devices = 1, .ok = 1, .window_bytes = 8192, .rails = 1, .pad = 0, .rail_dev = {}, .error = {},
              .dev = {}};
    std::memset(good.rail_dev, transport::ib::no_route, sizeof good.rail_dev);
    good.rail_dev[0][0] = 0;
    // each corruption of a good card, and a part of the refusal it must get ("": accepted)
    const std::pair<void (*)(card&), const char*> cases[] = {
        {[](card&) {}, ""},
        {[](card& c) { c.magic ^= 1; }, "bad magic"},
        {[](card& c) { c.size -= 8; }, "connection card of"},
        {[](card& c) { c.version += 1; }, "connection-card version"},
        {[](card& c) { c.rank = 3; }, "claims rank 3"},
        {[](card& c) { c.rails = 2; }, "stripes a call over 2 RDMA device(s), this rank over 1"},
        {[](card& c) { c.rail_dev[1][0] = 1; }, "route to rank 1 names device 1 of its 1"},
        {[](card& c) { c.devices = 5; }, "names 5 RDMA devices"},
        {[](card& c) { c.window_bytes = 4096; }, "window is 4096 bytes"},
    };
    int bad = 0;
    for (const auto& [corrupt, want] : cases) {
      card c = good;
      corrupt(c);
      const std::string got = transport::ib::validate_card(c, 2, 1, 8192);
      const bool pass = want[0] == '\0' ? got.empty() : got.find(want) != std::string::npos && got.find("rank 2") != std::string::npos;
      std::printf("%s %s -> \"%s\"\n", pass ? "PASS" : "FAIL", want[0] ? want : "(accepted)", got.c_str());
      bad += pass ? 0 : 1;
    }
    return bad ? 1 : 0;
  }
  if (mode != "comm") {
    std::fprintf(stderr, "usage: ibverbs_probe comm | avail | cards\n");
    return 2;
  }
  bootstrap::callback boot(0, 1, [](const void* s, void* r, std::size_t n) { std::memcpy(r, s, n); });
  options o;
  o.capacity_bytes = 4096;
  o.timeout_ns = 5'000'000'000ull;
  try {
    host::communicator<transport::ibverbs> comm(boot, o);
    std::vector<float> in(256, 2.5f), out(256, 0.0f);
    const status s = comm.all_reduce(in.data(), out.data(), in.size());
    if (s != status::ok || out[0] != 2.5f || out[255] != 2.5f) {
      std::printf("FAIL: one-rank all-reduce over ibverbs returned %s, out[0] = %g: %s\n", to_string(s), out[0],
                  comm.last_error().c_str());
      return 1;
    }
    std::printf("ibverbs set-up ok on %s; one-rank all-reduce correct\n", comm.transport().describe().c_str());
    return 0;
  } catch (const transport_error& e) {
    std::printf("transport_error: %s\n", e.what());
    return 3;
  } catch (const config_error& e) {
    std::printf("config_error: %s\n", e.what());
    return 4;
  }
}

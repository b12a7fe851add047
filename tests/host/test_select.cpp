// tests/host/test_select.cpp — start-up transport selection (host/select.hpp), environment parsing
// (core/env.hpp), the auto algorithm table (algorithm/auto.hpp) and the connectivity rule, on CPU threads.
// No RDMA device and no GPU are needed; where this machine has RDMA devices the "no devices" cases say so and
// check only what holds either way.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <rocenante/gpu/candidates.hpp>
#include <rocenante/host/select.hpp>
#include <rocenante/rocenante.hpp>

using namespace rocenante;
using host::transport_kind;

namespace {

/// Captures log lines for the duration of a test.
struct captured_log {
  std::mutex mu;
  std::vector<std::string> lines;
  captured_log() {
    set_log_sink([this](const std::string& l) {
      std::lock_guard lock(mu);
      lines.push_back(l);
    });
  }
  ~captured_log() { set_log_sink({}); }
  std::vector<std::string> with(const std::string& needle) {
    std::lock_guard lock(mu);
    std::vector<std::string> r;
    for (const auto& l : lines)
      if (l.find(needle) != std::string::npos) r.push_back(l);
    return r;
  }
};

env::settings settings_from(std::map<std::string, std::string> m) {
  return env::settings::read([m](const char* name) -> const char* {
    auto it = m.find(name);
    return it == m.end() ? nullptr : it->second.c_str();
  });
}

std::string config_error_of(std::map<std::string, std::string> m) {
  try {
    settings_from(std::move(m));
  } catch (const config_error& e) {
    return e.what();
  }
  return "(no error)";
}

/// Settings as if only `transport` (and INFO logging) were set, whatever this process's environment holds.
host::select_config config(env::transport_choice t, env::algo_choice a = env::algo_choice::automatic) {
  host::select_config c;
  env::settings s;
  s.transport = t;
  s.algo = a;
  s.debug = log_level::info;
  c.settings = s;
  return c;
}

/// Sets the process's fault plan (bootstrap/vote.hpp) for the life of the object.
struct fault_plan {
  explicit fault_plan(const std::string& spec) { setup::testing::set_faults(spec); }
  ~fault_plan() { setup::testing::set_faults(""); }
};

bool this_machine_has_rdma() {
#if ROCENANTE_HAS_IBVERBS
  return transport::ib::probe().available;
#else
  return false;
#endif
}

}  // namespace

TEST_SUITE("host.select.env") {
  TEST_CASE("unset variables give the documented defaults") {
    const env::settings s = settings_from({});
    CHECK(s.transport == env::transport_choice::automatic);
    CHECK(s.algo == env::algo_choice::automatic);
    CHECK(s.ib_hca.empty());
    CHECK(s.ib_gid_index == -1);
    CHECK_FALSE(s.timeout_ms.has_value());
    CHECK(s.debug == log_level::warn);
    CHECK(s.socket_if.empty());
    options o;
    CHECK(s.apply(o).timeout_ns == o.timeout_ns);
  }

  TEST_CASE("every accepted value parses, keywords case-insensitively") {
    const env::settings s = settings_from({{"ROCENANTE_TRANSPORT", "IBVerbs"},
                                           {"ROCENANTE_ALGO", "Ring"},
                                           {"ROCENANTE_IB_HCA", "mlx5_0:1, mlx5_1:2,,"},
                                           {"ROCENANTE_IB_GID_INDEX", "3"},
                                           {"ROCENANTE_TIMEOUT_MS", "250"},
                                           {"ROCENANTE_DEBUG", "info"}});
    CHECK(s.transport == env::transport_choice::ibverbs);
    CHECK(s.algo == env::algo_choice::ring);
    REQUIRE(s.ib_hca.size() == 2);
    CHECK(s.ib_hca[0] == env::ib_device_name{"mlx5_0", 1});
    CHECK(s.ib_hca[1] == env::ib_device_name{"mlx5_1", 2});
    CHECK(s.ib_gid_index == 3);
    CHECK(s.debug == log_level::info);
    CHECK(s.apply(options{}).timeout_ns == 250'000'000ull);
    CHECK(settings_from({{"ROCENANTE_TRANSPORT", "nccl"}}).transport == env::transport_choice::nccl);
    CHECK(settings_from({{"ROCENANTE_TRANSPORT", "LOOPBACK"}}).transport == env::transport_choice::loopback);
    CHECK(settings_from({{"ROCENANTE_TRANSPORT", "Socket"}}).transport == env::transport_choice::socket);
    CHECK(settings_from({{"ROCENANTE_ALGO", "one_shot"}}).algo == env::algo_choice::one_shot);
    CHECK(settings_from({{"ROCENANTE_ALGO", "Two_Shot"}}).algo == env::algo_choice::two_shot);
    CHECK(settings_from({{"ROCENANTE_DEBUG", "NONE"}}).debug == log_level::none);
    CHECK(settings_from({{"ROCENANTE_TRANSPORT", "  "}}).transport == env::transport_choice::automatic);
  }

  TEST_CASE("a bad value is an error naming the variable, the value and the accepted values") {
    CHECK(config_error_of({{"ROCENANTE_TRANSPORT", "tcp"}}) ==
          "ROCENANTE_TRANSPORT='tcp' is not one of auto, ibverbs, cuda_ipc, socket, nccl, loopback");
    CHECK(config_error_of({{"ROCENANTE_ALGO", "tree"}}) ==
          "ROCENANTE_ALGO='tree' is not one of auto, one_shot, two_shot, ring");
    CHECK(config_error_of({{"ROCENANTE_DEBUG", "TRACE"}}) == "ROCENANTE_DEBUG='TRACE' is not one of NONE, WARN, INFO");
    CHECK(config_error_of({{"ROCENANTE_IB_GID_INDEX", "3x"}}) ==
          "ROCENANTE_IB_GID_INDEX='3x' is not an integer in [0, 65535]");
    CHECK(config_error_of({{"ROCENANTE_IB_GID_INDEX", "-1"}}) ==
          "ROCENANTE_IB_GID_INDEX='-1' is not an integer in [0, 65535]");
    CHECK(config_error_of({{"ROCENANTE_TIMEOUT_MS", "0"}}) ==
          "ROCENANTE_TIMEOUT_MS='0' is not an integer in [1, 3600000]");
    CHECK(config_error_of({{"ROCENANTE_TIMEOUT_MS", "99999999999999999999999"}}) ==
          "ROCENANTE_TIMEOUT_MS='99999999999999999999999' is not an integer in [1, 3600000]");
    CHECK(config_error_of({{"ROCENANTE_IB_HCA", "mlx5_0:0"}}) == "ROCENANTE_IB_HCA port='0' is not an integer in [1, 255]");
    CHECK(config_error_of({{"ROCENANTE_IB_HCA", "a,b,c,d,e"}}) ==
          "ROCENANTE_IB_HCA names 5 devices; at most 4 are supported");
  }

  TEST_CASE("ROCENANTE_SOCKET_IFNAME parses as NCCL_SOCKET_IFNAME: prefixes, '=' exact, '^' exclude") {
    const env::socket_ifname p = settings_from({{"ROCENANTE_SOCKET_IFNAME", " eth, ib0 ,,"}}).socket_if;
    CHECK(p.names == std::vector<std::string>{"eth", "ib0"});
    CHECK_FALSE(p.exclude);
    CHECK_FALSE(p.exact);
    CHECK(p.matches("eth0"));
    CHECK(p.matches("ib0"));
    CHECK_FALSE(p.matches("ib1"));
    CHECK_FALSE(p.matches("lo"));
    const env::socket_ifname x = env::parse_socket_ifname("^=docker0,lo");
    CHECK(x.exclude);
    CHECK(x.exact);
    CHECK(x.matches("docker1"));
    CHECK_FALSE(x.matches("docker0"));
    CHECK_FALSE(x.matches("lo"));
    CHECK(x.text() == "^=docker0,lo");
    const env::socket_ifname e = env::parse_socket_ifname("=eth0");
    CHECK(e.matches("eth0"));
    CHECK_FALSE(e.matches("eth01"));
    CHECK(env::socket_ifname_from_env([](const char*) -> const char* { return "  "; }).empty());
  }

  TEST_CASE("a bad ROCENANTE_SOCKET_IFNAME is an error naming the variable and the grammar") {
    const std::string tail =
        " (accepted: interface name prefixes, comma separated, e.g. eth,ib; '=' first for exact names; '^' first to "
        "exclude)";
    CHECK(config_error_of({{"ROCENANTE_SOCKET_IFNAME", "^"}}) == "ROCENANTE_SOCKET_IFNAME='^' names no interface" + tail);
    CHECK(config_error_of({{"ROCENANTE_SOCKET_IFNAME", "=,"}}) == "ROCENANTE_SOCKET_IFNAME='=,' names no interface" + tail);
    CHECK(config_error_of({{"ROCENANTE_SOCKET_IFNAME", "eth0:1"}}) ==
          "ROCENANTE_SOCKET_IFNAME='eth0:1' has the character ':' inside an interface name" + tail);
    CHECK(config_error_of({{"ROCENANTE_SOCKET_IFNAME", "eth0,^lo"}}) ==
          "ROCENANTE_SOCKET_IFNAME='eth0,^lo' has the character '^' inside an interface name" + tail);
    CHECK(config_error_of({{"ROCENANTE_SOCKET_IFNAME", "a-very-long-interface"}}) ==
          "ROCENANTE_SOCKET_IFNAME='a-very-long-interface' names an interface longer than 15 characters "
          "('a-very-long-interface')" + tail);
  }

#if ROCENANTE_HAS_IBVERBS
  TEST_CASE("ROCENANTE_IB_HCA and ROCENANTE_IB_GID_INDEX parse as the ibverbs transport parses them") {
    CHECK(env::max_ib_devices == transport::ib::max_devices);
    ::setenv("ROCENANTE_IB_HCA", "rxe0:1, rxe1:2", 1);
    ::setenv("ROCENANTE_IB_GID_INDEX", "7", 1);
    const auto ib = transport::ib::ib_config::from_env();
    const env::settings s = env::settings::read();
    ::unsetenv("ROCENANTE_IB_HCA");
    ::unsetenv("ROCENANTE_IB_GID_INDEX");
    REQUIRE(ib.hca.size() == s.ib_hca.size());
    for (std::size_t i = 0; i < ib.hca.size(); ++i) {
      CHECK(ib.hca[i] == s.ib_hca[i].name);
      CHECK(ib.ports[i] == s.ib_hca[i].port);
    }
    CHECK(ib.gid_index == s.ib_gid_index);
  }
#endif
}

TEST_SUITE("host.select.auto") {
  TEST_CASE("the H200 single-GPU table's thresholds are those of the receipts") {
    using algorithm::algo;
    using algorithm::choose;
    // 2 ranks: one_shot up to 256 KiB, ring from 512 KiB (perf-cuda_loopback-r2-graph.json).
    CHECK(choose(8, 2) == algo::one_shot);
    CHECK(choose(256 * 1024, 2) == algo::one_shot);
    CHECK(choose(512 * 1024, 2) == algo::ring);
    // 4 and 8 ranks: one_shot up to 512 KiB, ring from 1 MiB (r4, r8 receipts).
    CHECK(choose(512 * 1024, 4) == algo::one_shot);
    CHECK(choose(1 << 20, 4) == algo::ring);
    CHECK(choose(512 * 1024, 8) == algo::one_shot);
    CHECK(choose(1 << 20, 8) == algo::ring);
    CHECK(choose(64u << 20, 8) == algo::ring);
    // Unmeasured rank counts take the row below; one rank never exchanges anything.
    CHECK(choose(300 * 1024, 3) == algo::ring);
    CHECK(choose(300 * 1024, 5) == algo::one_shot);
    CHECK(choose(1 << 20, 16) == algo::ring);
    CHECK(choose(1ull << 40, 1) == algo::one_shot);
    CHECK(algorithm::one_shot_limit(4) == 512 * 1024);
    // two_shot is not measured: no row picks it, at any size or rank count.
    for (int n = 1; n <= max_ranks; ++n) {
      CAPTURE(n);
      CHECK(algorithm::two_shot_limit(n) == 0);
      for (std::uint64_t bytes = 1; bytes <= (std::uint64_t{1} << 30); bytes *= 2) CHECK(choose(bytes, n) != algo::two_shot);
    }
  }

  TEST_CASE("host::communicator accepts auto: the result is that of the algorithm the table names") {
    host::spawn_ranks(2, [](bootstrap::in_process& boot) {
      options o;
      o.capacity_bytes = 1 << 20;
      host::communicator<transport::loopback> comm(boot, o);
      for (std::size_t count : {std::size_t{1000}, std::size_t{200'000}}) {  // 4 KB: one_shot; 800 KB: ring
        std::vector<float> in(count), out(count, -1.0f), ref(count, -1.0f);
        for (std::size_t i = 0; i < count; ++i) in[i] = static_cast<float>(boot.rank() * 1000 + i % 13) * 0.5f;
        REQUIRE(comm.all_reduce(in.data(), out.data(), count, algorithm::automatic{}) == status::ok);
        const auto a = algorithm::choose(count * sizeof(float), 2);
        const status s = a == algorithm::algo::ring ? comm.all_reduce<algorithm::ring>(in.data(), ref.data(), count)
                                                    : comm.all_reduce<algorithm::one_shot>(in.data(), ref.data(), count);
        REQUIRE(s == status::ok);
        CHECK(std::memcmp(out.data(), ref.data(), count * sizeof(float)) == 0);
        std::fill(out.begin(), out.end(), -1.0f);
        REQUIRE(comm.all_reduce(in.data(), out.data(), count, dtype::f32, algorithm::automatic{}) == status::ok);
        CHECK(std::memcmp(out.data(), ref.data(), count * sizeof(float)) == 0);
      }
    });
  }
}

TEST_SUITE("host.select.connectivity") {
  TEST_CASE("neighbours only: one_shot is refused with the failing pairs, ring is allowed") {
    host::connectivity_report r = host::connectivity_report::full(4);
    auto cut = [&](int a, int b) { r.reach[a * 4 + b] = 0; };
    cut(0, 2);  // one direction is enough to break a pair
    cut(3, 1);
    CHECK(r.failed_pairs() == std::vector<std::pair<int, int>>{{0, 2}, {1, 3}});
    CHECK_FALSE(r.any_to_any());
    CHECK(r.neighbours());
    CHECK(r.allows(algorithm::algo::ring));
    CHECK_FALSE(r.allows(algorithm::algo::one_shot));
    CHECK(r.describe() == "pairs that failed: 0-2, 1-3");
    CHECK(r.refusal(algorithm::algo::one_shot).find("one_shot needs every pair of ranks connected") == 0);
    CHECK(r.refusal(algorithm::algo::one_shot).find("0-2, 1-3") != std::string::npos);
    CHECK(r.refusal(algorithm::algo::ring).empty());
    cut(1, 2);
    CHECK_FALSE(r.neighbours());
    CHECK_FALSE(r.allows(algorithm::algo::ring));
  }

  TEST_CASE("a communicator whose start-up found only neighbours runs ring and refuses one_shot on every rank") {
    captured_log log;
    fault_plan cut("cut 0-2; cut 1-3");  // a ring of 4
    host::spawn_ranks(4, [](bootstrap::in_process& boot) {
      host::select_config c = config(env::transport_choice::loopback);
      options o;
      o.capacity_bytes = 64 * 1024;
      host::selected_communicator comm(boot, o, c);
      CHECK(comm.transport() == transport_kind::loopback);
      CHECK(comm.selected().connectivity.describe() == "pairs that failed: 0-2, 1-3");
      std::vector<float> in(100, 1.0f), out(100, 0.0f);
      CHECK(comm.algorithm_for(400) == algorithm::algo::ring);
      REQUIRE(comm.all_reduce(in.data(), out.data(), in.size()) == status::ok);  // auto: ring
      CHECK(out[99] == 4.0f);
      CHECK(comm.all_reduce(in.data(), out.data(), in.size(), algorithm::one_shot{}) == status::not_supported);
      CHECK(comm.last_error().find("one_shot needs every pair of ranks connected") != std::string::npos);
      CHECK(comm.all_gather(in.data(), out.data(), 10) == status::not_supported);
      // The refusal consumed no sequence: the communicator is healthy and the next call works.
      CHECK(comm.check_health().ok());
      REQUIRE(comm.all_reduce(in.data(), out.data(), in.size(), algorithm::ring{}) == status::ok);
      CHECK(out[0] == 4.0f);
    });
    const auto lines = log.with("ring only: one_shot refused by connectivity");
    CHECK(lines.size() == 4);  // once per rank
  }

  TEST_CASE("ring neighbours that cannot reach each other make the transport unusable on every rank") {
    std::vector<std::string> errors(3);
    fault_plan cut("cut 1-2");
    host::spawn_ranks(3, [&](bootstrap::in_process& boot) {
      host::select_config c = config(env::transport_choice::loopback);
      try {
        host::selected_communicator comm(boot, options{}, c);
      } catch (const transport_error& e) {
        errors[boot.rank()] = e.what();
      }
    });
    for (const auto& e : errors)
      CHECK(e == "loopback was forced (ROCENANTE_TRANSPORT) and failed at start-up: ranks 0, 1, 2: ring neighbours do "
                 "not connect: pairs that failed: 1-2");
  }

  TEST_CASE("ROCENANTE_ALGO=one_shot or two_shot with only neighbours reachable fails set-up with a clear error") {
    for (env::algo_choice a : {env::algo_choice::one_shot, env::algo_choice::two_shot}) {
      const std::string name = env::to_string(a);
      CAPTURE(name);
      std::string what;
      fault_plan cut("cut 0-2; cut 1-3");
      try {
        host::spawn_ranks(4, [a](bootstrap::in_process& boot) {
          host::select_config c = config(env::transport_choice::loopback, a);
          host::selected_communicator comm(boot, options{}, c);
        });
      } catch (const config_error& e) {
        what = e.what();
      }
      CHECK(what.find("ROCENANTE_ALGO=" + name + " refused on transport loopback: " + name + " needs every pair") !=
            std::string::npos);
      CHECK(what.find("0-2, 1-3") != std::string::npos);
    }
  }

  TEST_CASE("ROCENANTE_ALGO=two_shot: calls that name no algorithm run two_shot, its self-test counted") {
    std::vector<int> failures(3, 0);
    host::spawn_ranks(3, [&](bootstrap::in_process& boot) {
      host::select_config c = config(env::transport_choice::loopback, env::algo_choice::two_shot);
      host::selected_communicator comm(boot, options{}, c);
      int& bad = failures[boot.rank()];
      bad += comm.algorithm_for(8) != algorithm::algo::two_shot;
      bad += comm.algorithm_for(std::uint64_t{64} << 20) != algorithm::algo::two_shot;
      // the start-up collectives: one_shot, two_shot and ring (every pair connects, 3 ranks)
      bad += comm.first_call_sequence() != options{}.first_sequence + 3;
      std::vector<float> in(1001, float(boot.rank() + 1)), out(1001, -1.0f);
      bad += comm.all_reduce(in.data(), out.data(), in.size()) != status::ok;
      bad += std::count_if(out.begin(), out.end(), [](float v) { return v != 6.0f; }) != 0;
      bad += comm.get<host::selected_communicator::loopback_comm>()->next_sequence() != options{}.first_sequence + 4;
    });
    CHECK(failures == std::vector<int>(3, 0));
  }
}

TEST_SUITE("host.select.vote") {
  TEST_CASE("without RDMA devices and without a GPU: auto runs on loopback and the log says why") {
    captured_log log;
    host::spawn_ranks(3, [](bootstrap::in_process& boot) {
      host::selected_communicator comm(boot, options{}, config(env::transport_choice::automatic));
      if (!this_machine_has_rdma()) {
        CHECK(comm.transport() == transport_kind::loopback);
        CHECK(comm.selected().fell_back);
        CHECK(comm.selected().failing_ranks() == std::vector<int>{0, 1, 2});
        CHECK(comm.selected().reason.find("ibverbs unusable: ranks 0, 1, 2: ") == 0);
      }
      std::vector<__nv_bfloat16> in(50, __float2bfloat16(1.5f)), out(50);
      REQUIRE(comm.all_reduce(in.data(), out.data(), in.size()) == status::ok);
      CHECK(__bfloat162float(out[49]) == 4.5f);
    });
    if (!this_machine_has_rdma()) {
      const auto lines = log.with("ROCENANTE INFO transport loopback (ROCENANTE_TRANSPORT=auto");
      REQUIRE(lines.size() == 3);
      MESSAGE(lines[0]);
      CHECK(lines[0].find("ibverbs unusable") != std::string::npos);
#if ROCENANTE_HAS_IBVERBS
      CHECK(lines[0].find("ibverbs unavailable") != std::string::npos);
#else
      CHECK(lines[0].find("not built") != std::string::npos);
#endif
      CHECK(lines[0].find("every rank falls back to loopback together") != std::string::npos);
      CHECK(log.with("[rank 1] ROCENANTE INFO").size() == 1);  // once per rank
    } else {
      MESSAGE("this machine has RDMA devices: the no-device log is not checked here");
    }
  }

  TEST_CASE("forced ibverbs without RDMA devices fails on every rank with a clear error") {
    if (this_machine_has_rdma()) {
      MESSAGE("skipped: this machine has RDMA devices");
      return;
    }
    std::vector<std::string> errors(2);
    host::spawn_ranks(2, [&](bootstrap::in_process& boot) {
      try {
        host::selected_communicator comm(boot, options{}, config(env::transport_choice::ibverbs));
      } catch (const transport_error& e) {
        errors[boot.rank()] = e.what();
      }
    });
    for (const auto& e : errors) {
      CHECK(e.find("no transport usable by every rank (ROCENANTE_TRANSPORT=ibverbs): ibverbs unusable: ranks 0, 1:") == 0);
      CHECK(e.find("the transport was forced, so there is no fallback") != std::string::npos);
    }
    CHECK(errors[0] == errors[1]);
  }

  TEST_CASE("one rank's failed probe makes every rank fall back, and the log names that rank and its reason") {
    if (this_machine_has_rdma()) {
      MESSAGE("skipped: this machine has RDMA devices (ibverbs would be chosen before loopback)");
      return;
    }
    captured_log log;
    fault_plan plan("2@probe loopback");  // rank 2's loopback probe fails; no fake device: only that verdict
    std::vector<host::selection> seen(4);
    host::spawn_ranks(4, [&](bootstrap::in_process& boot) {
      host::selected_communicator comm(boot, options{}, config(env::transport_choice::automatic));
      seen[boot.rank()] = comm.selected();
      CHECK(comm.transport() == transport_kind::socket);
      std::vector<float> in(10, 1.0f), out(10);
      REQUIRE(comm.all_reduce(in.data(), out.data(), in.size()) == status::ok);
      CHECK(out[0] == 4.0f);
    });
    for (const auto& s : seen) {
      CHECK(s.preferred == transport_kind::ibverbs);
      CHECK(s.chosen == transport_kind::socket);
      CHECK(s.fell_back);
      CHECK(s.split);
      CHECK(s.reason.find("; then loopback unusable: rank 2: fault injected by the test's fault plan at step 'probe "
                          "loopback'; every rank falls back to socket together") != std::string::npos);
      CHECK(s.reason == seen[0].reason);
    }
    // Ranks 0, 1 and 3 could have used loopback: the fallback is a warning, once per rank, naming rank 2.
    const auto lines = log.with("ROCENANTE WARN transport socket");
    REQUIRE(lines.size() == 4);
    CHECK(lines[0].find("loopback unusable: rank 2: fault injected") != std::string::npos);
    MESSAGE(lines[0]);
  }

  TEST_CASE("ranks asking for different transports fail set-up on every rank, naming the variable") {
    std::vector<std::string> errors(2);
    host::spawn_ranks(2, [&](bootstrap::in_process& boot) {
      try {
        host::selected_communicator comm(
            boot, options{},
            config(boot.rank() == 0 ? env::transport_choice::loopback : env::transport_choice::automatic));
      } catch (const config_mismatch_error& e) {
        errors[boot.rank()] = e.what();
        CHECK(e.field() == "ROCENANTE_TRANSPORT");
      }
    });
    CHECK(errors[0] == "transport selection: ROCENANTE_TRANSPORT is loopback on rank 0 but auto on rank 1; every rank "
                       "must ask for the same transport");
    CHECK(errors[1] == errors[0]);
  }

  TEST_CASE("a bad environment on one rank fails set-up on every rank, naming the rank and the variable") {
    std::vector<std::string> errors(3);
    ::setenv("ROCENANTE_ALGO", "tree", 1);  // before the threads start; only rank 1 reads the environment
    host::spawn_ranks(3, [&](bootstrap::in_process& boot) {
      host::select_config c = config(env::transport_choice::loopback);
      if (boot.rank() == 1) c.settings.reset();  // the real path: read at set-up, exchanged before anyone throws
      try {
        host::selected_communicator comm(boot, options{}, c);
      } catch (const config_error& e) {
        errors[boot.rank()] = e.what();
      }
    });
    ::unsetenv("ROCENANTE_ALGO");
    for (int r = 0; r < 3; ++r)
      CHECK(errors[r] == "set-up step 'transport probes' failed on rank 1: ROCENANTE_ALGO='tree' is not one of auto, "
                         "one_shot, two_shot, ring (docs/environment.md lists the accepted values)");
  }

  TEST_CASE("ROCENANTE_TIMEOUT_MS reaches the communicator's options") {
    host::spawn_ranks(2, [](bootstrap::in_process& boot) {
      host::select_config c = config(env::transport_choice::loopback);
      c.settings->timeout_ms = 250;
      host::selected_communicator comm(boot, options{}, c);
      auto* inner = comm.get<host::selected_communicator::loopback_comm>();
      REQUIRE(inner != nullptr);
      CHECK(inner->opts().timeout_ns == 250'000'000ull);
      CHECK(comm.selected().reason == "loopback usable on every rank (rank 0: in-process windows)");
      CHECK_FALSE(comm.selected().fell_back);
    });
  }

  TEST_CASE("nccl asked of the host executor is refused with the reason") {
    std::string what;
    try {
      host::spawn_ranks(1, [](bootstrap::in_process& boot) {
        host::selected_communicator comm(boot, options{}, config(env::transport_choice::nccl));
      });
    } catch (const transport_error& e) {
      what = e.what();
    }
    CHECK(what.find("nccl unusable: rank 0: nccl runs with the GPU executor only") != std::string::npos);
    CHECK(what.find("the host executor has ibverbs, socket and loopback") != std::string::npos);
  }

  TEST_CASE("loopback across processes is refused by the vote (process tokens differ)") {
    // Two ranks in one process cannot differ in pid; the table is built by hand as the exchange would build it.
    host::vote_table t;
    t.ranks = 2;
    t.requested = env::transport_choice::automatic;
    t.order = {transport_kind::ibverbs, transport_kind::loopback};
    t.v.resize(2);
    for (int q = 0; q < 2; ++q)
      for (int k = 0; k < host::transport_kinds; ++k)
        t.v[q][k] = host::verdict::make(static_cast<transport_kind>(k), q, host::probe_code::not_probed);
    t.fail(transport_kind::ibverbs, 0, host::probe_code::no_devices, "ibverbs unavailable: no devices");
    t.fail(transport_kind::ibverbs, 1, host::probe_code::no_devices, "ibverbs unavailable: no devices");
    t.fail(transport_kind::loopback, 0, host::probe_code::ok, "");
    t.fail(transport_kind::loopback, 1, host::probe_code::other_process, "runs in another process");
    std::string what;
    try {
      (void)host::decide(t);
    } catch (const transport_error& e) {
      what = e.what();
    }
    CHECK(what == "no transport usable by every rank (ROCENANTE_TRANSPORT=auto): ibverbs unusable: ranks 0, 1: ibverbs "
                  "unavailable: no devices; then loopback unusable: rank 1: runs in another process");
  }

  TEST_CASE("the verdict is a fixed 256-byte record and long reasons are truncated, not overflowed") {
    const host::verdict v = host::verdict::make(transport_kind::ibverbs, 3, host::probe_code::device_unusable,
                                                std::string(500, 'x'));
    CHECK(sizeof v == 256);
    CHECK(v.text().size() == sizeof v.reason - 1);
    CHECK_FALSE(v.usable());
    CHECK(v.rank == 3);
  }
}

namespace {

/// What one rank ended with: the transport chosen and why, its decision's log line without the per-rank prefix,
/// or the error set-up threw (and whether it was a transport_error).
struct ending {
  std::string chosen, reason, log, error;
  bool transport_error = false;
  bool operator==(const ending&) const = default;
};

/// Runs `make(boot, options)` on `n` thread ranks — a selected communicator's construction that returns the
/// selection — and gathers each rank's ending. A rank that got a communicator also runs one all-reduce on it.
template <class Make>
std::vector<ending> endings(int n, Make&& make) {
  captured_log log;
  std::vector<ending> out(static_cast<std::size_t>(n));
  host::spawn_ranks(n, [&](bootstrap::in_process& boot) {
    ending& e = out[boot.rank()];
    options o;
    o.capacity_bytes = 64 * 1024;
    o.timeout_ns = 5'000'000'000ull;
    try {
      const host::selection sel = make(boot, o);
      e.chosen = host::to_string(sel.chosen);
      e.reason = sel.reason;
    } catch (const error& x) {
      e.error = x.what();
      e.transport_error = dynamic_cast<const transport_error*>(&x) != nullptr;
    }
  });
  for (int r = 0; r < n; ++r) {
    const auto lines = log.with("[rank " + std::to_string(r) + "] ROCENANTE ");
    if (lines.size() == 1) out[r].log = lines[0].substr(lines[0].find("] ROCENANTE ") + 12);
    else if (!lines.empty()) out[r].log = std::to_string(lines.size()) + " lines";
  }
  return out;
}

/// The host executor's selection on thread ranks, with one all-reduce checked on what was chosen.
std::vector<ending> host_endings(int n, const host::select_config& cfg) {
  return endings(n, [&](bootstrap::in_process& boot, const options& o) {
    host::selected_communicator comm(boot, o, cfg);
    std::vector<float> in(100, 1.0f), out(100, 0.0f);
    if (comm.all_reduce(in.data(), out.data(), in.size()) != status::ok || out[99] != static_cast<float>(boot.size()))
      throw transport_error("the all-reduce on the chosen transport failed: " + comm.last_error());
    return comm.selected();
  });
}

/// Every step rank `rank` reached, as fault-plan items "RANK@STEP#N" (N: the arrival at that step).
std::vector<std::pair<std::string, std::string>> fault_items(int rank, const std::vector<std::string>& steps) {
  std::vector<std::pair<std::string, std::string>> out;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto nth = std::count(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(i) + 1, steps[i]);
    out.push_back({steps[i], std::to_string(rank) + "@" + steps[i] + "#" + std::to_string(nth)});
  }
  return out;
}

/// A stand-in for the GPU executor's selection, for its decision logic on CPU threads: the GPU candidates, with
/// host communicators standing in for their builds — cuda_ipc by loopback (the same set-up votes as any direct
/// transport: options, windows), socket by socket; ibverbs and nccl cannot be built here.
class gpu_logic : public host::selected_base<host::communicator<transport::loopback>, host::communicator<transport::socket>> {
 public:
  gpu_logic(bootstrap::bootstrap_ref b, const options& o, const host::select_config& cfg) {
    select_and_build<gpu::gpu_candidates>(*this, b, o, cfg);
  }

 private:
  friend host::selected_base<host::communicator<transport::loopback>, host::communicator<transport::socket>>;
  void build(bootstrap::bootstrap_ref b, transport_kind k, const options& o) {
    if (k == transport_kind::cuda_ipc) comm_ = std::make_unique<host::communicator<transport::loopback>>(b, o);
    else if (k == transport_kind::socket) comm_ = std::make_unique<host::communicator<transport::socket>>(b, o);
    else throw transport_error(std::string(host::to_string(k)) + " has no stand-in on CPU threads");
  }
  std::string self_test(const host::connectivity_report&, const options&) {
    const std::size_t count = host::self_test_count(size_);
    std::vector<float> in(count), out(count, -1.0f);
    for (std::size_t i = 0; i < count; ++i) in[i] = host::self_test_value(rank_, i);
    const status st = pass([&](auto& c) { return c.all_reduce(in.data(), out.data(), count); });
    return host::self_test_check(algorithm::algo::one_shot, st, last_error_, out.data(), count, size_);
  }
};

}  // namespace

TEST_SUITE("host.select.faults") {
  // A fault injected at each set-up step on one rank (the test build's fault plan, bootstrap/vote.hpp): every rank
  // must end the same way — the same transport chosen with the same reason and log line, or the same error — and
  // never with a bootstrap error from ranks left at different steps.

  TEST_CASE("auto on thread ranks: a fault at each step of loopback's set-up on rank 1 moves every rank to socket") {
    if (this_machine_has_rdma()) {
      MESSAGE("skipped: this machine has RDMA devices (ibverbs would be chosen before loopback)");
      return;
    }
    const host::select_config cfg = config(env::transport_choice::automatic);
    std::vector<std::string> steps;
    {
      fault_plan clean("");
      const auto rs = host_endings(3, cfg);
      for (const auto& e : rs) CHECK(e.chosen == "loopback");
      steps = setup::testing::steps_seen(1);
    }
    CHECK(steps == std::vector<std::string>{"transport probes", "probe ibverbs", "probe loopback", "probe socket",
                                            "build loopback", "agree on options", "loopback: windows",
                                            "connectivity of loopback", "self-test on loopback"});
    for (const auto& [step, item] : fault_items(1, steps)) {
      CAPTURE(item);
      fault_plan plan(item);
      const auto rs = host_endings(3, cfg);
      for (const auto& e : rs) CHECK(e == rs[0]);  // the same ending on every rank, log line included
      const ending& e = rs[0];
      if (step == "transport probes") {
        CHECK(e.transport_error);
        CHECK(e.error == "set-up step 'transport probes' failed on rank 1: fault injected by the test's fault plan at "
                         "step 'transport probes'");
      } else if (step == "probe ibverbs" || step == "probe socket") {
        CHECK(e.chosen == "loopback");  // a candidate loopback does not need
      } else {
        CHECK(e.chosen == "socket");
        CHECK(e.reason.find("; then loopback unusable: rank 1: ") != std::string::npos);
        CHECK(e.reason.find("'" + step + "'") != std::string::npos);
        CHECK(e.reason.find("every rank falls back to socket together") != std::string::npos);
        CHECK(e.log.find("WARN transport socket (ROCENANTE_TRANSPORT=auto") == 0);
      }
    }
  }

  TEST_CASE("forced socket: a fault at each step on rank 1 fails every rank with the same error, naming rank and step") {
    const host::select_config cfg = config(env::transport_choice::socket);
    std::vector<std::string> steps;
    {
      fault_plan clean("");
      for (const auto& e : host_endings(3, cfg)) CHECK(e.chosen == "socket");
      steps = setup::testing::steps_seen(1);
    }
    CHECK(steps == std::vector<std::string>{"transport probes", "probe socket", "build socket", "agree on options",
                                            "connection cards", "connectivity of socket", "self-test on socket"});
    for (const auto& [step, item] : fault_items(1, steps)) {
      CAPTURE(item);
      fault_plan plan(item);
      const auto rs = host_endings(3, cfg);
      for (const auto& e : rs) CHECK(e == rs[0]);
      CHECK(rs[0].transport_error);
      CHECK(rs[0].chosen.empty());
      CHECK(rs[0].error.find("rank 1") != std::string::npos);
      CHECK(rs[0].error.find("'" + step + "'") != std::string::npos);
      if (step != "transport probes")
        CHECK(rs[0].error.find(step == "probe socket" ? "no transport usable by every rank (ROCENANTE_TRANSPORT=socket)"
                                                      : "socket was forced (ROCENANTE_TRANSPORT) and failed at start-up") == 0);
    }
  }

  TEST_CASE("a fault on two ranks at once names both, and every rank still falls back together") {
    if (this_machine_has_rdma()) {
      MESSAGE("skipped: this machine has RDMA devices");
      return;
    }
    fault_plan plan("0@loopback: windows; 2@loopback: windows");
    const auto rs = host_endings(4, config(env::transport_choice::automatic));
    for (const auto& e : rs) CHECK(e == rs[0]);
    CHECK(rs[0].chosen == "socket");
    CHECK(rs[0].reason.find("loopback unusable: ranks 0, 2: step 'loopback: windows': fault injected") != std::string::npos);
  }
}

TEST_SUITE("host.select.gpu_logic") {
  TEST_CASE("the GPU executor's candidates: cuda_ipc, ibverbs, socket, nccl; loopback is refused with the reason") {
    CHECK(gpu::gpu_candidates::order(env::transport_choice::automatic) ==
          std::vector<transport_kind>{transport_kind::cuda_ipc, transport_kind::ibverbs, transport_kind::socket,
                                      transport_kind::nccl});
    CHECK(gpu::gpu_candidates::needs(transport_kind::cuda_ipc) == host::placement::one_host);
    CHECK(gpu::gpu_candidates::needs(transport_kind::nccl) == host::placement::anywhere);
    const host::verdict v = gpu::gpu_candidates::probe(transport_kind::loopback, 0, env::settings{});
    CHECK(v.code_value() == host::probe_code::wrong_executor);
    const host::verdict nccl =
        gpu::gpu_candidates::probe_nccl(3, transport::nccl_api::load("/nonexistent/libnccl.so.2"));
    CHECK(nccl.code_value() == host::probe_code::library_missing);
    CHECK(nccl.rank == 3);
    CHECK(nccl.text().find("NCCL unavailable: cannot load /nonexistent/libnccl.so.2") == 0);
  }

  TEST_CASE("the GPU vote on thread ranks: cuda_ipc is usable (one host) and preferred, nccl as its library allows") {
    std::vector<host::selection> seen(3);
    host::spawn_ranks(3, [&](bootstrap::in_process& boot) {
      host::vote_table t = host::vote_probes<gpu::gpu_candidates>(boot, config(env::transport_choice::automatic));
      seen[boot.rank()] = host::decide(t);
      CHECK(t.order.size() == 4);
      CHECK(t.v[2][static_cast<int>(transport_kind::nccl)].usable() == transport::nccl_api::instance().ok);
    });
    for (const auto& s : seen) {
      CHECK(s.chosen == transport_kind::cuda_ipc);
      CHECK(s.reason == "cuda_ipc usable on every rank (rank 0: GPU windows mapped between the processes of one node)");
    }
  }

  TEST_CASE("the GPU decision with stand-in builds: a fault at each step of cuda_ipc's on rank 1 lands every rank on socket") {
    if (this_machine_has_rdma()) {
      MESSAGE("skipped: this machine has RDMA devices (ibverbs would come before socket)");
      return;
    }
    const host::select_config cfg = config(env::transport_choice::automatic);
    auto run = [&] {
      return endings(3, [&](bootstrap::in_process& boot, const options& o) { return gpu_logic(boot, o, cfg).selected(); });
    };
    std::vector<std::string> steps;
    {
      fault_plan clean("");
      for (const auto& e : run()) CHECK(e.chosen == "cuda_ipc");
      steps = setup::testing::steps_seen(1);
    }
    const auto build = std::find(steps.begin(), steps.end(), "build cuda_ipc");
    REQUIRE(build != steps.end());
    const std::vector<std::string> attempt(build, steps.end());
    CHECK(attempt == std::vector<std::string>{"build cuda_ipc", "agree on options", "loopback: windows",
                                              "connectivity of cuda_ipc", "self-test on cuda_ipc"});
    for (const auto& [step, item] : fault_items(1, steps)) {
      if (std::find(attempt.begin(), attempt.end(), step) == attempt.end() && step != "probe cuda_ipc") continue;
      CAPTURE(item);
      fault_plan plan(item);
      const auto rs = run();
      for (const auto& e : rs) CHECK(e == rs[0]);
      CHECK(rs[0].chosen == "socket");
      CHECK(rs[0].reason.find("cuda_ipc unusable: rank 1: ") == 0);
      CHECK(rs[0].log.find("WARN transport socket") == 0);
    }
    // cuda_ipc and then socket failing on rank 1: every rank goes on to nccl, which this stand-in cannot build (or
    // whose library this machine lacks): every rank fails alike.
    fault_plan plan("1@build cuda_ipc; 1@connection cards");
    const auto rs = run();
    for (const auto& e : rs) CHECK(e == rs[0]);
    CHECK(rs[0].transport_error);
    CHECK(rs[0].error.find("socket unusable: rank 1: step 'connection cards'") != std::string::npos);
    CHECK(rs[0].error.find("nccl") != std::string::npos);
  }
}

#if ROCENANTE_HAS_IBVERBS
TEST_SUITE("host.ibverbs_ordering") {
  // The ibverbs transport's flags are read with no completion at the responder: a payload must be placed before
  // its flag. ib::ordering_violation is what set-up checks (the constants at compile time, each created queue
  // pair's type at start-up); here every way to break the order is refused with a message naming the cause.
  TEST_CASE("the transport's own verbs set-up keeps RDMA writes in order") {
    CHECK(transport::ib::ordering_violation(transport::ib::ordering) == nullptr);
    CHECK((transport::ib::ordering.window_access & IBV_ACCESS_RELAXED_ORDERING) == 0);
    CHECK(transport::ib::ordering.qp_type == IBV_QPT_RC);
  }

  TEST_CASE("relaxed ordering on the window, a queue pair that is not RC, or several per route are refused") {
    using transport::ib::ordering_setup;
    const int strict = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    const auto why = [](ordering_setup s) {
      const char* w = transport::ib::ordering_violation(s);
      return std::string(w ? w : "");
    };
    const auto contains = [](const std::string& s, const char* part) { return s.find(part) != std::string::npos; };
    CHECK(contains(why({strict | IBV_ACCESS_RELAXED_ORDERING, IBV_QPT_RC, 1}), "IBV_ACCESS_RELAXED_ORDERING"));
    CHECK(contains(why({IBV_ACCESS_LOCAL_WRITE, IBV_QPT_RC, 1}), "without IBV_ACCESS_REMOTE_WRITE"));
    CHECK(contains(why({strict, IBV_QPT_UC, 1}), "not IBV_QPT_RC"));
    CHECK(contains(why({strict, IBV_QPT_UD, 1}), "not IBV_QPT_RC"));
    CHECK(contains(why({strict, IBV_QPT_RC, 2}), "must share one"));
    CHECK(why({strict, IBV_QPT_RC, 1}).empty());
  }
}
#endif

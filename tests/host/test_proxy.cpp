// tests/host/test_proxy.cpp — proxy mode on the host executor (transport::loopback_proxy): the collective only
// stages bytes and posts descriptors; one CPU proxy thread per rank moves them and sets the peers' flags.
// Same reference agreement as the loopback suites (two_shot too, which always posts per part), a proxy paused
// across two doorbells (HAZARDS #1: it must post every pending sequence when it resumes), a dead rank, and mixed
// back-to-back collectives (fewer than the loopback stress: proxy mode costs ~5 ms a collective when 3 ranks and 3
// proxy threads share 2 cores); and calls whose parts run at the same time, one thread per part, as a GPU kernel's
// CTAs do (concurrent_parts_rank): a call posted once at the sequences where finish clears flag words, and thousands
// of calls posted once, per part and mixed.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "reference_case.hpp"

using namespace rtest;
using proxy_comm = host::communicator<transport::loopback_proxy>;

namespace {
/// `n` ranks make `calls` all-reduces of algorithm A of 4096 floats (rank r contributes r + 1); per rank, its proxy's
/// counters over those calls (posts, calls, writes) and in `res` its status (internal: a wrong sum).
template <class A>
std::vector<transport::proxy_stats> proxy_counts(int n, int calls, const options& o, std::vector<status>& res) {
  std::vector<transport::proxy_stats> st(n);
  res.assign(n, status::ok);
  host::spawn_ranks(n, [&](bootstrap::in_process& boot) {
    proxy_comm comm(boot, o);
    std::vector<float> in(4096, float(boot.rank() + 1)), out(4096);
    const float sum = float(n * (n + 1) / 2);
    const transport::proxy_stats before = comm.transport().stats();
    for (int i = 0; i < calls; ++i)
      if (status s = comm.template all_reduce<A>(in.data(), out.data(), in.size()); s != status::ok)
        res[boot.rank()] = s;
      else if (out[0] != sum || out[4095] != sum)
        res[boot.rank()] = status::internal;
    boot.barrier();  // every peer's posts of the last call were taken before its flags let this rank finish
    transport::proxy_stats after = comm.transport().stats();
    after.posts -= before.posts;
    after.calls -= before.calls;
    after.writes -= before.writes;
    st[boot.rank()] = after;
  });
  return st;
}

/// One rank in the GPU executor's shape, on the host: its parts of a call run at the same time, one thread per part,
/// as the CTAs of one kernel do (the host executor runs parts one after another, and a call posted once in one part).
/// The code each part runs is the executors' (one_shot::all_reduce over a session of its own); the threads are
/// joined before the next call, as a kernel ends before the next one on its stream starts.
struct concurrent_parts_rank {
  protocol::window_layout layout;
  transport::loopback_proxy proxy;
  protocol::rank_state state{};
  protocol::wait_policy policy{};

  concurrent_parts_rank(bootstrap::in_process& boot, const options& o)
      : layout(host::make_layout<one_shot, ring, algorithm::two_shot>(boot.size(), o, false, true)),
        // the proxy yields early: 4 ranks' parts and proxies share 2 cores in CI
        proxy(bootstrap::bootstrap_ref(boot), layout, o, transport::idle_policy{transport::idle_policy::yield, 64, 50}) {
    protocol::init_state(state, o.first_sequence);
    policy = {o.timeout_ns, o.max_polls};
  }

  /// An all-reduce of `count` floats in `parts` parts. `late`: every part but part 0 starts only once part 0 has
  /// returned (CTAs of one kernel scheduled one after another). True when every part returned true.
  bool all_reduce(const float* in, float* out, std::uint64_t count, std::uint32_t parts, bool late = false) {
    using R = reduce::sum<float>;
    const std::uint32_t sig = protocol::call_signature(protocol::collective::all_reduce,
                                                       static_cast<std::uint32_t>(one_shot::id),
                                                       static_cast<std::uint32_t>(R::dtype_id),
                                                       static_cast<std::uint32_t>(R::op_id), count);
    auto handle = proxy.handle();
    std::vector<char> ok(parts, 0);
    auto part = [&](std::uint32_t p) {
      protocol::host_team team;
      auto h = handle;
      protocol::session<protocol::host_team, transport::proxy_handle> s(team, h, &state, policy, sig, p);
      ok[p] = one_shot::all_reduce<R>(s, in, out, count, parts);
    };
    std::vector<std::thread> others;
    if (late) {
      part(0);
      for (std::uint32_t p = 1; p < parts; ++p) others.emplace_back(part, p);
    } else {
      for (std::uint32_t p = 1; p < parts; ++p) others.emplace_back(part, p);
      part(0);
    }
    for (auto& t : others) t.join();
    return std::all_of(ok.begin(), ok.end(), [](char c) { return c != 0; });
  }
};
}  // namespace

TEST_SUITE("host.proxy") {
  /// reference_options with calls posted once (the default threshold is above the 64 KiB capacity) or per part.
  options posting(bool multi_part, bool per_part) {
    options o = reference_options(multi_part);
    if (per_part) o.call_post_max_bytes = 0;
    return o;
  }

  TEST_CASE("describe_queues tells a descriptor never posted from one published and not consumed") {
    std::vector<transport::post_queue> q(4);
    for (auto& e : q) std::memset(static_cast<void*>(&e), 0, sizeof e);
    CHECK(transport::describe_queues(q.data(), 4) == "no descriptor ever posted");
    // queue 1: two consumed, the second a whole call's flag; queue 3: ticket 0 published, not consumed
    q[1].consumed = 2;
    q[1].entries[1] = transport::post{2, 0, 64, 7, 0x4b00600000000002ull, transport::all_peers, 0};
    q[3].entries[0].stamp = 1;
    const std::string s = transport::describe_queues(q.data(), 4);
    MESSAGE(s);
    CHECK(s.find("queue 0") == std::string::npos);
    CHECK(s.find("queue 1: consumed 2 (last: peer all, flag 7 = 0x4b00600000000002)") != std::string::npos);
    CHECK(s.find("queue 3: consumed 0, next published, not consumed") != std::string::npos);
  }

  TEST_CASE("one_shot and ring over the proxy match the float64 reference, bit for bit their documented order, "
            "calls posted once and per part") {
    for (bool per_part : {false, true})
      for (int n : {2, 3, 4}) {
        CAPTURE(per_part);
        CAPTURE(n);
        check_all_reduce_against_reference<one_shot, float, transport::loopback_proxy>(n, posting(n != 3, per_part),
                                                                                       300 + n);
        check_all_reduce_against_reference<ring, __nv_bfloat16, transport::loopback_proxy>(n, posting(n == 3, per_part),
                                                                                            310 + n);
      }
  }

  TEST_CASE("two_shot over the proxy matches the float64 reference, bit for bit rank order, with either posting "
            "threshold (two_shot always posts per part)") {
    for (bool per_part : {false, true})
      for (int n : {2, 3, 5}) {
        CAPTURE(per_part);
        CAPTURE(n);
        check_all_reduce_against_reference<algorithm::two_shot, __half, transport::loopback_proxy>(n, posting(n != 3, per_part),
                                                                                                  340 + n);
      }
  }

  TEST_CASE("a two_shot call posts 2 (n - 1) descriptors per part, each one payload write and one flag write") {
    constexpr int n = 4, calls = 12;
    std::vector<status> res;
    // below call_post_max_bytes: two_shot still posts per part
    const auto st = proxy_counts<algorithm::two_shot>(n, calls, posting(true, false), res);
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(res[r] == status::ok);
      CHECK(st[r].posts == std::uint64_t{calls} * 3 * 2 * (n - 1));  // 3 parts of 1024 packets at min_part_bytes 16
      CHECK(st[r].calls == 0);
      CHECK(st[r].writes == 2 * st[r].posts);
    }
  }

  TEST_CASE("all-gather over the proxy concatenates exactly, at 2 and 8 ranks, calls posted once and per part") {
    for (bool per_part : {false, true}) {
      CAPTURE(per_part);
      check_all_gather<__nv_bfloat16, transport::loopback_proxy>(2, posting(true, per_part), 320);
      check_all_gather<__nv_bfloat16, transport::loopback_proxy>(8, posting(false, per_part), 321);
    }
  }

  TEST_CASE("a call posted once is one doorbell and 2 (n - 1) writes per rank; per part, a descriptor per part and peer") {
    // 4 ranks, 12 one-shot calls of 4096 floats (16 KiB), 3 parts when posted per part: the proxy's own counters.
    constexpr int n = 4, calls = 12;
    for (bool per_part : {false, true}) {
      CAPTURE(per_part);
      std::vector<status> res;
      const auto st = proxy_counts<one_shot>(n, calls, posting(true, per_part), res);
      for (int r = 0; r < n; ++r) {
        CAPTURE(r);
        CHECK(res[r] == status::ok);
        if (!per_part) {
          CHECK(st[r].posts == calls);
          CHECK(st[r].calls == calls);
          CHECK(st[r].writes == std::uint64_t{calls} * 2 * (n - 1));
        } else {
          CHECK(st[r].posts == std::uint64_t{calls} * 3 * (n - 1));
          CHECK(st[r].calls == 0);
          CHECK(st[r].writes == std::uint64_t{calls} * 3 * 2 * (n - 1));
        }
      }
    }
  }

  TEST_CASE("copy engines (one per peer, ROCENANTE_PROXY_COPY_ENGINES): the same bytes, posted once and per part") {
    struct engines_env {
      engines_env(const char* v) { ::setenv("ROCENANTE_PROXY_COPY_ENGINES", v, 1); }
      ~engines_env() { ::unsetenv("ROCENANTE_PROXY_COPY_ENGINES"); }
    };
    for (bool per_part : {false, true}) {
      CAPTURE(per_part);
      {
        engines_env e("2");
        check_all_reduce_against_reference<one_shot, float, transport::loopback_proxy>(3, posting(true, per_part), 330);
        check_all_reduce_against_reference<ring, __nv_bfloat16, transport::loopback_proxy>(3, posting(true, per_part), 331);
      }
      {
        engines_env e("1");  // two peers share one engine: their writes still in order
        check_all_gather<__nv_bfloat16, transport::loopback_proxy>(3, posting(false, per_part), 332);
      }
    }
    engines_env e("3");  // more engines than peers: refused at set-up, naming the variable
    std::vector<std::string> why(3);
    host::spawn_ranks(3, [&](bootstrap::in_process& boot) {
      try {
        proxy_comm comm(boot, reference_options(false));
      } catch (const config_error& err) {
        why[boot.rank()] = err.what();
      }
    });
    for (const auto& w : why) CHECK(contains(w, "ROCENANTE_PROXY_COPY_ENGINES='3'"));
  }

  TEST_CASE("calls posted once that differ in count or dtype fail on every rank as a mismatch, at once") {
    constexpr int n = 3;
    for (int variant : {0, 1}) {  // 0: rank 2 calls with 16 more elements; 1: rank 2 reduces int32-sized halves
      CAPTURE(variant);
      options o = reference_options(false);
      o.timeout_ns = 5'000'000'000ull;
      std::vector<status> st(n, status::internal);
      std::vector<double> seconds(n, 0);
      std::vector<std::string> msg(n);
      host::spawn_ranks(n, [&](bootstrap::in_process& boot) {
        proxy_comm comm(boot, o);
        const int r = boot.rank();
        std::vector<float> in(2048, 1.0f), out(2048);
        std::vector<__half> hin(4096, __float2half(1.0f)), hout(4096);
        stopwatch t;
        if (r == 2 && variant == 0)
          st[r] = comm.all_reduce(in.data(), out.data(), 1040);
        else if (r == 2)
          st[r] = comm.all_reduce(hin.data(), hout.data(), 2048);  // the same bytes, another dtype
        else
          st[r] = comm.all_reduce(in.data(), out.data(), 1024);
        seconds[r] = t.seconds();
        msg[r] = comm.last_error();
      });
      for (int r = 0; r < n; ++r) {
        CAPTURE(r);
        INFO(msg[r]);
        CHECK(st[r] == status::mismatch);
        CHECK(seconds[r] < 2.5);  // well inside the 5 s bound: the trailer settles it, no timeout
      }
    }
  }

  TEST_CASE("a proxy paused across two doorbells posts both sequences when it resumes, and both collectives are "
            "right") {
    // Rank 0's proxy stops before rank 0 enters collective A. A completes on rank 0 (its peers' proxies run), so
    // rank 0 enters B while A and B are both queued behind its stopped proxy; its peers still wait in A. When
    // the proxy resumes it must post A's descriptors and then B's (HAZARDS #1: never only the newest).
    constexpr int n = 3;
    constexpr std::size_t count = 1000;
    options o = reference_options(true);
    o.timeout_ns = 20'000'000'000ull;
    std::vector<status> a(n, status::internal), b(n, status::internal);
    std::vector<std::vector<float>> out_a(n), out_b(n);
    host::spawn_ranks(n, [&](bootstrap::in_process& boot) {
      proxy_comm comm(boot, o);
      const int r = boot.rank();
      std::vector<float> in_a(count), in_b(count);
      for (std::size_t i = 0; i < count; ++i) {
        in_a[i] = static_cast<float>(r + 1);
        in_b[i] = static_cast<float>(10 * (r + 1));
      }
      out_a[r].assign(count, -1.0f);
      out_b[r].assign(count, -1.0f);
      boot.barrier();
      std::optional<paused_proxy> paused;  // rank 0's proxy, for 200 ms
      if (r == 0) paused.emplace(comm.transport(), std::chrono::milliseconds(200));
      a[r] = comm.all_reduce(in_a.data(), out_a[r].data(), count);
      b[r] = comm.all_reduce<ring>(in_b.data(), out_b[r].data(), count);
      paused.reset();
    });
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(a[r] == status::ok);
      CHECK(b[r] == status::ok);
      CHECK(std::all_of(out_a[r].begin(), out_a[r].end(), [](float v) { return v == 6.0f; }));
      CHECK(std::all_of(out_b[r].begin(), out_b[r].end(), [](float v) { return v == 60.0f; }));
    }
  }

  TEST_CASE("a rank that leaves is reported by the others within the bound, and every proxy stops (one_shot, two_shot)") {
    for (algorithm::algo a : {algorithm::algo::one_shot, algorithm::algo::two_shot}) {
      CAPTURE(static_cast<int>(a));
      options o = reference_options(false);
      o.timeout_ns = 500'000'000ull;
      std::vector<status> st(4, status::internal);
      std::vector<host::health> h(4);
      std::vector<double> seconds(4, 0);
      stopwatch total;
      host::spawn_ranks(4, [&](bootstrap::in_process& boot) {
        proxy_comm comm(boot, o);
        const int r = boot.rank();
        std::vector<float> in(500, 1.0f), out(500);
        for (int i = 0; i < 3; ++i)
          if (comm.all_reduce(in.data(), out.data(), in.size(), dtype::f32, a) != status::ok) return;
        if (r == 3) return;  // its proxy is stopped and joined by the destructor, after a final drain
        stopwatch t;
        st[r] = comm.all_reduce(in.data(), out.data(), in.size(), dtype::f32, a);
        seconds[r] = t.seconds();
        h[r] = comm.check_health();
      });
      for (int r = 0; r < 3; ++r) {
        CAPTURE(r);
        INFO(h[r].message);
        CHECK(st[r] == status::timeout);
        CHECK(seconds[r] < 0.5 + 1.0);
        CHECK(h[r].failure.peer == 3);
        CHECK(contains(h[r].message, "rank 3"));
      }
      CHECK(total.seconds() < 10.0);  // teardown (proxy threads joined) returned
    }
  }

  TEST_CASE("a call posted once whose parts run at the same time completes at the sequences where finish clears its "
            "slot's flags, also when a part starts after another part of its rank has finished") {
    // Every part of a call posted once waits on the rail words (part 0 of each peer's channel); at a sequence where
    // session::finish clears the slot's unused flag words (scrub_point: 0, 1, 2^31, 2^31 + 1; 1 is the default first
    // sequence), part 0 clears them once its own wait is done. Here rank 0's part 1 runs only after its part 0 has
    // returned, so it finds the cleared word where its peers' flags were.
    constexpr int n = 3;
    constexpr std::uint32_t parts = 2;
    constexpr std::size_t count = 4096;  // 16 KiB: below call_post_max_bytes, posted once
    for (std::uint32_t first : {1u, 0x80000000u}) {
      CAPTURE(first);
      options o = reference_options(true);
      o.max_parts = parts;
      o.first_sequence = first;
      o.timeout_ns = 5'000'000'000ull;
      std::vector<int> good(n, 0);
      std::vector<std::string> why(n);
      stopwatch total;
      host::spawn_ranks(n, [&](bootstrap::in_process& boot) {
        concurrent_parts_rank rank(boot, o);
        const int r = boot.rank();
        std::vector<float> in(count), out(count);
        for (int call = 0; call < 2; ++call) {
          for (std::size_t i = 0; i < count; ++i) in[i] = small_int<float>(call, r, i);
          std::fill(out.begin(), out.end(), -100.0f);
          if (!rank.all_reduce(in.data(), out.data(), count, parts, r == 0)) {
            why[r] = "call " + std::to_string(call) + ": " + host::describe_failure(r, rank.state.failure);
            break;
          }
          bool exact = true;
          for (std::size_t i = 0; i < count && exact; ++i) {
            float want = 0;
            for (int q = 0; q < n; ++q) want += small_int<float>(call, q, i);
            exact = out[i] == want;
          }
          if (!exact) {
            why[r] = "call " + std::to_string(call) + ": an element differs from the exact sum";
            break;
          }
          ++good[r];
        }
        boot.barrier();  // no proxy stops while a peer may still wait for its posts
      });
      for (int r = 0; r < n; ++r) {
        CAPTURE(r);
        INFO(why[r]);
        CHECK(good[r] == 2);
      }
      CHECK(total.seconds() < 4.0);  // no wait ran into the 5 s bound
    }
  }

  TEST_CASE("thousands of back-to-back calls with parts running at the same time, posted once, per part and mixed, "
            "8-64 KiB, every post queue wrapping, are each exact") {
    // 4 ranks of 4 parts, one thread per part (concurrent_parts_rank). call_post_max_bytes 0: every call posts per
    // part (3 descriptors per part and call: each queue wraps every ~21 calls); 1 MiB: every call is posted once by
    // the part that stages last (one descriptor on that part's queue); 32 KiB: the two designs alternate call by call
    // on the same queues and flag words. First sequences 1 and 2^32 - 2 put the calls that clear a slot's flags (0,
    // 1) at the start and in the middle.
    constexpr int n = 4;
    constexpr std::uint32_t parts = 4;
    constexpr int calls = 500;
    stopwatch total;
    for (std::uint64_t post_max : {std::uint64_t{0}, std::uint64_t{32} << 10, std::uint64_t{1} << 20})
      for (std::uint32_t first : {1u, 0xfffffffeu}) {
        CAPTURE(post_max);
        CAPTURE(first);
        options o = reference_options(true);
        o.max_parts = parts;
        o.call_post_max_bytes = post_max;
        o.first_sequence = first;
        o.timeout_ns = 20'000'000'000ull;
        std::vector<std::string> err(n);
        std::vector<transport::proxy_stats> st(n);
        host::spawn_ranks(n, [&](bootstrap::in_process& boot) {
          concurrent_parts_rank rank(boot, o);
          const int r = boot.rank();
          std::mt19937 gen(7);  // the same sizes on every rank
          std::vector<float> in(16384), out(16384);
          for (int call = 0; call < calls && err[r].empty(); ++call) {
            const std::size_t count = 2048 + gen() % (16384 - 2048 + 1);  // 8-64 KiB
            for (std::size_t i = 0; i < count; ++i) in[i] = small_int<float>(call, r, i);
            if (!rank.all_reduce(in.data(), out.data(), count, parts)) {
              err[r] = "call " + std::to_string(call) + ": " + host::describe_failure(r, rank.state.failure);
              break;
            }
            for (std::size_t i = 0; i < count && err[r].empty(); ++i) {
              float want = 0;
              for (int q = 0; q < n; ++q) want += small_int<float>(call, q, i);
              if (out[i] != want) err[r] = "call " + std::to_string(call) + ": element " + std::to_string(i) + " wrong";
            }
          }
          boot.barrier();
          st[r] = rank.proxy.stats();
        });
        for (int r = 0; r < n; ++r) {
          CAPTURE(r);
          INFO(err[r]);
          CHECK(err[r].empty());
          if (post_max == 0) CHECK(st[r].calls == 0);
          if (post_max == (std::uint64_t{1} << 20)) CHECK(st[r].calls == std::uint64_t{calls});
          if (post_max == (std::uint64_t{32} << 10)) CHECK((st[r].calls > 0 && st[r].calls < std::uint64_t{calls}));
        }
      }
    MESSAGE("6 x " << calls << " calls of 4 ranks x 4 parts: " << total.seconds() << " s");
  }

  TEST_CASE("five hundred mixed collectives over the proxy are each exact") {
    constexpr int n = 3, iterations = 500;  // ~5 ms each on 2 cores: 3 ranks + 3 proxy threads oversubscribe them
    options o = reference_options(true);
    o.capacity_bytes = 8 * 1024;
    std::vector<std::string> err(n);
    host::spawn_ranks(n, [&](bootstrap::in_process& boot) {
      proxy_comm comm(boot, o);
      const int r = boot.rank();
      std::mt19937 gen(99);  // the same call sequence on every rank
      std::vector<__nv_bfloat16> in(2048), out(3 * 2048);
      for (int it = 0; it < iterations && err[r].empty(); ++it) {
        const unsigned what = gen() % 4;
        const std::size_t count = 1 + gen() % 2048;
        for (std::size_t i = 0; i < count; ++i) in[i] = small_int<__nv_bfloat16>(it, r, i);
        const status s = what == 0   ? comm.all_reduce<one_shot>(in.data(), out.data(), count)
                         : what == 1 ? comm.all_reduce<ring>(in.data(), out.data(), count)
                         : what == 3 ? comm.all_reduce<algorithm::two_shot>(in.data(), out.data(), count)
                                     : comm.all_gather(in.data(), out.data(), count);
        if (s != status::ok) {
          err[r] = "call " + std::to_string(it) + ": " + to_string(s) + ": " + comm.last_error();
          break;
        }
        for (std::size_t i = 0; i < count && err[r].empty(); ++i) {
          if (what == 2) {
            for (int q = 0; q < n; ++q)
              if (!same_bits(out[q * count + i], small_int<__nv_bfloat16>(it, q, i)))
                err[r] = "call " + std::to_string(it) + ": gathered element wrong";
          } else {
            float expect = 0;
            for (int q = 0; q < n; ++q) expect += to_float(small_int<__nv_bfloat16>(it, q, i));
            if (to_float(out[i]) != expect) err[r] = "call " + std::to_string(it) + ": element wrong";
          }
        }
      }
    });
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(err[r].empty());
    }
  }
}

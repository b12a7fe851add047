// tests/host/test_two_shot.cpp — two_shot all-reduce against the float64 reference, bit for bit the rank-order fp32
// sum its owners form (algorithm/two_shot.hpp), for fp32, fp16 and bf16: the acceptance counts at 2, 3, 4 and 8
// ranks in one and three parts; counts that divide neither by the rank count nor by the packet (1, n-1, n packets
// +- 1 element, odd, above 1 MiB) at every rank count 2..8; one rank and sixteen. Every case also runs in place and
// checks identical bytes on every rank. Then, on the algorithm itself (sessions over loopback windows): the
// epilogue, applied once by the owner, and a rank stalled between its reduce-scatter and its all-gather, named by
// every other rank within the bound.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <atomic>
#include <cmath>
#include <thread>

#include "reference_case.hpp"

using namespace rtest;
using algorithm::two_shot;

// Case ids per dtype d (fp32 0, fp16 1, bf16 2): 201 + 2d one part, 202 + 2d three parts, 211 + d awkward counts.
TEST_SUITE("host.two_shot.dtypes") {
  TEST_CASE_TEMPLATE("sum matches the float64 reference and the rank-order fp32 sum on every rank, in one part", T, float,
                     __half, __nv_bfloat16) {
    all_reduce_cases<two_shot, T>(false, 201 + 2 * dtype_index<T>);
  }
  TEST_CASE_TEMPLATE("sum matches the float64 reference and the rank-order fp32 sum on every rank, split in three parts",
                     T, float, __half, __nv_bfloat16) {
    all_reduce_cases<two_shot, T>(true, 202 + 2 * dtype_index<T>);
  }
  TEST_CASE_TEMPLATE("counts that divide by neither the rank count nor the packet, up to above 1 MiB, at 2 to 8 ranks", T,
                     float, __half, __nv_bfloat16) {
    constexpr std::size_t lanes = packet_bytes / sizeof(T);
    const std::size_t mib = (std::size_t{1} << 20) / sizeof(T);
    for (int n = 2; n <= 8; ++n) {
      CAPTURE(n);
      options o = reference_options(n % 2 == 1);
      o.capacity_bytes = (mib + 64) * sizeof(T);
      if (n == 8) o.max_parts = 8;  // more parts than some chunks have packets: empty ranges are posted and waited for
      std::vector<std::size_t> counts = {1, n * lanes - 1, n * lanes + 1, 12345};
      if (n > 2) counts.push_back(static_cast<std::size_t>(n - 1));
      if (n == 3 || n == 5 || n == 8) counts.push_back(mib + 3);  // 1 MiB + 3 elements: a large call, not every n (CI time)
      check_all_reduce_against_reference<two_shot, T>(n, o, (211 + dtype_index<T>) * 16 + n, counts);
    }
  }
}

TEST_SUITE("host.two_shot.ranks") {
  TEST_CASE("a single rank copies its input") {
    check_all_reduce_against_reference<two_shot, float>(1, reference_options(true), 220);
  }
  TEST_CASE("sixteen ranks, the most a communicator holds, agree with the reference") {
    options o = reference_options(true);
    o.capacity_bytes = 16 * 1024;
    check_all_reduce_against_reference<two_shot, __nv_bfloat16>(max_ranks, o, 221);
  }
  TEST_CASE("two_shot gives one_shot's bytes: the same call through both, byte for byte") {
    constexpr int n = 5;
    constexpr std::size_t count = 3001;
    std::vector<std::vector<__nv_bfloat16>> a(n), b(n);
    std::vector<status> st(n, status::internal);
    host::spawn_ranks(n, [&](bootstrap::in_process& boot) {
      comm_t comm(boot, reference_options(true));
      const int r = boot.rank();
      const auto in = random_input<__nv_bfloat16>(count, seed_for(r, 222));
      a[r].resize(count);
      b[r].resize(count);
      const status s1 = comm.all_reduce<one_shot>(in.data(), a[r].data(), count);
      const status s2 = comm.all_reduce<two_shot>(in.data(), b[r].data(), count);
      st[r] = s1 != status::ok ? s1 : s2;
    });
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(st[r] == status::ok);
      CHECK(std::memcmp(a[r].data(), b[r].data(), count * sizeof(__nv_bfloat16)) == 0);
    }
  }
}

namespace {

/// Runs two_shot::all_reduce<sum<T>> on `n` ranks as threads, each over its own loopback window and protocol state
/// (the code the executors run, called directly, so that an epilogue can be given), every part in order. Returns
/// each rank's verdict; `failure[r]` is rank r's failure record when it failed, `seconds[r]` how long its call took.
template <class T, class Epilogue>
std::vector<bool> run_two_shot(int n, const options& o, const std::vector<std::vector<T>>& in, std::vector<std::vector<T>>& out,
                               std::uint32_t parts, const Epilogue& epi, std::vector<protocol::failure_record>& failure,
                               std::vector<double>& seconds) {
  using R = reduce::sum<T>;
  std::vector<char> ok(n, 0);
  failure.assign(n, protocol::failure_record{});
  seconds.assign(n, 0.0);
  host::spawn_ranks(n, [&](bootstrap::in_process& boot) {
    const int r = boot.rank();
    const protocol::window_layout layout = host::make_layout<one_shot, ring, two_shot>(n, o);
    transport::loopback t(bootstrap::bootstrap_ref(boot), layout, o);
    auto h = t.handle();
    protocol::rank_state state{};
    protocol::init_state(state, o.first_sequence);
    protocol::host_team team;
    const protocol::wait_policy policy{o.timeout_ns, o.max_polls};
    const std::uint64_t count = in[r].size();
    const std::uint32_t sig = protocol::call_signature(protocol::collective::all_reduce, static_cast<std::uint32_t>(two_shot::id),
                                                       static_cast<std::uint32_t>(R::dtype_id),
                                                       static_cast<std::uint32_t>(R::op_id), count);
    stopwatch clock;
    bool good = true;
    for (std::uint32_t p = 0; good && p < parts; ++p) {
      protocol::session<protocol::host_team, transport::direct_handle> s(team, h, &state, policy, sig, p);
      good = two_shot::all_reduce<R>(s, in[r].data(), out[r].data(), count, parts, epi);
    }
    seconds[r] = clock.seconds();
    ok[r] = good;
    if (!good) failure[r] = state.failure;
    boot.barrier();  // no rank tears its window down while a peer may still write into it
  });
  return {ok.begin(), ok.end()};
}

/// out = 0.5 * sum + residual[i]: where the sum is formed, once, before the rounding; lanes past `count` untouched.
struct half_plus_residual {
  const float* residual;
  std::uint64_t count;
  template <class Acc>
  void operator()(std::uint64_t first, Acc& acc) const {
    for (std::size_t l = 0; l < sizeof(acc.v) / sizeof(acc.v[0]); ++l)
      if (first + l < count) acc.v[l] = acc.v[l] * 0.5f + residual[first + l];
  }
};

/// Sleeps `seconds` once, at the packet whose first element is `first` (in the owner's reduce, between its
/// reduce-scatter wait and its all-gather: only the owner of that packet's chunk sees it): a rank stalled mid-call.
struct stall_at {
  std::uint64_t first;
  double seconds;
  std::atomic<bool>* done;
  template <class Acc>
  void operator()(std::uint64_t f, Acc&) const {
    if (f == first && !done->exchange(true)) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }
};

}  // namespace

TEST_SUITE("host.two_shot.epilogue") {
  TEST_CASE_TEMPLATE("the epilogue runs once per element on its owner, before the single rounding; every rank gets the "
                     "owner's bytes",
                     T, float, __half, __nv_bfloat16) {
    for (int n : {3, 4}) {
      CAPTURE(n);
      const std::size_t count = 4096 + 5;
      std::vector<std::vector<T>> in(n), out(n);
      std::mt19937 gen(7);
      std::vector<float> residual(count);
      for (auto& x : residual) x = static_cast<float>(static_cast<int>(gen() % 17) - 8) * 0.25f;
      for (int r = 0; r < n; ++r) {
        in[r] = random_input<T>(count, seed_for(r, 230 + n));
        out[r].assign(count + guard_elems, T{});
        poison(out[r]);
      }
      options o = reference_options(true);
      std::vector<protocol::failure_record> failure;
      std::vector<double> seconds;
      const auto ok = run_two_shot<T>(n, o, in, out, 3, half_plus_residual{residual.data(), count}, failure, seconds);
      std::vector<const std::vector<T>*> inputs;
      for (int r = 0; r < n; ++r) inputs.push_back(&in[r]);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < count; ++i) {
        float acc = to_float(in[0][i]);
        for (int q = 1; q < n; ++q) acc = acc + to_float(in[q][i]);
        const T model = from_float<T>(acc * 0.5f + residual[i]);
        if (!same_bits(out[0][i], model)) ++wrong;
      }
      CHECK(wrong == 0);
      for (int r = 0; r < n; ++r) {
        CAPTURE(r);
        CHECK(ok[r]);
        CHECK(std::memcmp(out[r].data(), out[0].data(), count * sizeof(T)) == 0);
        CHECK(std::all_of(out[r].begin() + count, out[r].end(), is_poison<T>));
      }
    }
  }
}

TEST_SUITE("host.two_shot.failure") {
  TEST_CASE("a rank stalled between its reduce-scatter and its all-gather is named by every other rank within the bound") {
    // Every reduce-scatter completes; rank 3 then stalls in its owner's reduce, so nobody gets its chunk. The others
    // wait for it in the all-gather (hop 1: timeout + hop_grace) and must name rank 3, never a live owner; rank 3,
    // late, finds their aborts.
    constexpr int n = 4;
    constexpr double timeout_s = 0.5;
    options o = reference_options(false);
    o.timeout_ns = static_cast<std::uint64_t>(timeout_s * 1e9);
    constexpr std::size_t count = 1000;  // 250 packets of 4 floats, chunks of 63 packets: rank 3 owns 189..249
    std::vector<std::vector<float>> in(n, std::vector<float>(count, 1.0f)), out(n, std::vector<float>(count));
    std::atomic<bool> done{false};
    std::vector<protocol::failure_record> failure;
    std::vector<double> seconds;
    const std::uint64_t rank3_first = 3 * algorithm::chunk_packets(n, count / 4) * 4;
    const auto ok = run_two_shot<float>(n, o, in, out, 1, stall_at{rank3_first, 3 * timeout_s, &done}, failure, seconds);
    CHECK(done.load());
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      CAPTURE(seconds[r]);
      CHECK_FALSE(ok[r]);
      CHECK(failure[r].peer == 3);
      CHECK(failure[r].kind == static_cast<std::uint32_t>(protocol::failure_kind::timeout));
      if (r != 3 && failure[r].relayed == 0u) CHECK(failure[r].channel == two_shot::ag_channel(n, 3));
      if (r != 3) CHECK(seconds[r] < timeout_s + protocol::hop_grace(o.timeout_ns) / 1e9 + 1.0);
      if (r == 3) CHECK(failure[r].relayed == 1u);  // told by its peers' aborts once its stall ends
      if (r == 3) CHECK(seconds[r] < 3 * timeout_s + 1.0);
    }
  }
}

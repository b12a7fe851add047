// GPU suite: the fused kernels on one GPU with several ranks (one thread and one stream per rank), checked
// bit for bit against a CPU reference that implements each algorithm's summation-order contract
// (algorithm/concepts.hpp), plus graph replay, sequence wrap, stream alternation and a rank that never launches.
//
// Harness rule for in-process ranks sharing a GPU: between set-up and teardown a rank's thread never calls a
// device-synchronising CUDA API (cudaMalloc/cudaFree/cudaMemcpy/cudaMemset on the legacy stream, pageable
// copies): such a call waits for the peers' kernels, which wait for this rank — a deadlock until the timeout.
// Buffers are allocated before a barrier, host buffers are pinned, and every copy is async on the rank's stream.
#include "gpu_main.hpp"

#include <rocenante/gpu/communicator.hpp>
#include <rocenante/host/spawn.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <span>
#include <thread>
#include <vector>

#include "../host/typed_cases.hpp"

using namespace rocenante;
using gtest::dev_buf;
using gtest::gpu_rank;
using gtest::pinned;
using rtest::from_float;

namespace {

/// Deterministic input of rank `rank` for case `seed`: random values in [-1, 1) rounded to T.
template <class T>
std::vector<T> make_input(std::size_t count, int rank, std::uint64_t seed) {
  std::mt19937_64 g(seed * 1315423911ull + static_cast<std::uint64_t>(rank) * 2654435761ull + 7);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<T> v(count);
  for (auto& x : v) x = from_float<T>(d(g));
  return v;
}

/// The summation-order contract, written independently of the library's algorithm code.
template <class T>
std::vector<T> reference(algorithm::algo a, bool gather, const std::vector<std::vector<T>>& in) {
  using R = reduce::sum<T>;
  const int n = static_cast<int>(in.size());
  const std::size_t count = in[0].size();
  std::vector<T> out(gather ? count * n : count);
  if (gather) {
    for (int q = 0; q < n; ++q) std::memcpy(out.data() + q * count, in[q].data(), count * sizeof(T));
    return out;
  }
  const std::size_t lanes = 16 / sizeof(T);
  const std::size_t packets = (count + lanes - 1) / lanes;
  const std::size_t k = (packets + n - 1) / n;
  for (std::size_t i = 0; i < count; ++i) {
    const int first = a == algorithm::algo::ring ? static_cast<int>((i / lanes) / k) : 0;
    float acc = R::to_accum(in[first][i]);
    for (int j = 1; j < n; ++j) acc = acc + R::to_accum(in[(first + j) % n][i]);
    out[i] = R::from_accum(acc);
  }
  return out;
}

/// ROCENANTE_TEST_NO_LAUNCH_BARRIER=1: the eager multi-launch cases skip their host barrier between launches.
inline bool no_launch_barrier() {
  const char* e = std::getenv("ROCENANTE_TEST_NO_LAUNCH_BARRIER");
  return e != nullptr && e[0] == '1';
}

/// Run collective (algorithm a, gather or not) of `count` elements on `comm`; return the output bytes.
template <class T, class Comm>
status run_one(Comm& comm, algorithm::algo a, bool gather, const T* in, T* out, std::size_t count, cudaStream_t s) {
  if (gather) return comm.all_gather(in, out, count, s);
  return host::with_algorithm(a, [&](auto tag) { return comm.all_reduce(in, out, count, s, tag); });
}

inline void no_tweak(options&) {}

inline std::string algo_name(algorithm::algo a) {
  return a == algorithm::algo::ring ? "ring" : a == algorithm::algo::two_shot ? "two_shot" : "one_shot";
}

/// Kernel variants (kernel::reduce_path) the one-shot all-reduces of sweep() launched, as rank 0's communicator
/// chose them (gpu::communicator::path_for): a test case REQUIREs the variants it means to cover.
inline std::set<kernel::reduce_path> paths_seen;

/// Element offsets of a rank's input and output from cudaMalloc's alignment: none by default.
inline std::size_t no_shift(int, bool) { return 0; }

/// Misaligned buffers, a different offset on each rank (alignment is a rank-local property: a path chosen by it
/// would differ between ranks, HAZARDS #7): rank r's input r % 3 elements and its output (r + 1) % 4 elements past
/// a 256-byte boundary, so that some ranks are aligned where others are not.
inline std::size_t rank_shift(int rank, bool out) { return static_cast<std::size_t>(out ? (rank + 1) % 4 : rank % 3); }

/// Input and output both misaligned (one rank: the sanitizer subset).
inline std::size_t all_shift(int, bool out) { return out ? 3 : 1; }

template <class T, class Transport = transport::cuda_loopback>
void sweep(int n, const std::vector<std::size_t>& byte_sizes, void (*tweak)(options&) = no_tweak,
           std::size_t (*shift)(int rank, bool out) = no_shift, bool in_place = false) {
  options o = gpu::default_options();
  o.capacity_bytes = 0;
  for (std::size_t b : byte_sizes) o.capacity_bytes = b > o.capacity_bytes ? b : o.capacity_bytes;
  o.timeout_ns = 5'000'000'000ull;
  tweak(o);
  struct variant {
    algorithm::algo a;
    bool gather;
  };
  const variant variants[] = {{algorithm::algo::one_shot, false},
                              {algorithm::algo::two_shot, false},
                              {algorithm::algo::ring, false},
                              {algorithm::algo::one_shot, true}};
  std::vector<std::vector<T>> inputs(n), outputs(n);
  std::mutex mu;
  int failures = 0;
  std::size_t max_bytes = 0;
  for (std::size_t b : byte_sizes) max_bytes = b > max_bytes ? b : max_bytes;
  host::spawn_ranks(n, [&](bootstrap::in_process& b) {
    const int r = b.rank();
    gpu::communicator<Transport> comm(b, o);
    gpu_rank gr;
    const std::size_t max_count = max_bytes / sizeof(T);
    dev_buf<T> din(max_count), dout(max_count * n);  // 64 bytes of slack each: room for the shifts
    pinned<T> hin(max_count), hout(max_count * n);
    T* const in_p = din.p + shift(r, false);
    T* const out_p = in_place ? in_p : dout.p + shift(r, true);  // in place: all-reduces only (below)
    b.barrier();  // no device-synchronising call from here on
    std::uint64_t seed = 1;
    for (std::size_t bytes : byte_sizes) {
      const std::size_t count = bytes / sizeof(T);
      for (const variant& v : variants) {
        if (in_place && v.gather) continue;
        ++seed;
        inputs[r] = make_input<T>(count, r, seed);
        const std::size_t out_count = v.gather ? count * n : count;
        std::memcpy(hin.data(), inputs[r].data(), count * sizeof(T));
        cudaMemcpyAsync(in_p, hin.data(), count * sizeof(T), cudaMemcpyHostToDevice, gr.stream);
        if (!in_place) cudaMemsetAsync(out_p, 0xff, out_count * sizeof(T), gr.stream);  // poison: every element must be written
        const status st = run_one<T>(comm, v.a, v.gather, in_p, out_p, count, gr.stream);
        if (r == 0 && v.a == algorithm::algo::one_shot && !v.gather) {
          std::lock_guard lock(mu);
          paths_seen.insert(comm.template path_for<T, algorithm::one_shot>(count));
        }
        cudaMemcpyAsync(hout.data(), out_p, out_count * sizeof(T), cudaMemcpyDeviceToHost, gr.stream);
        const cudaError_t e = cudaStreamSynchronize(gr.stream);
        outputs[r].assign(hout.data(), hout.data() + out_count);
        b.barrier();
        if (r == 0) {
          const auto ref = reference<T>(v.a, v.gather, inputs);
          for (int q = 0; q < n; ++q) {
            const bool same = std::memcmp(outputs[q].data(), ref.data(), out_count * sizeof(T)) == 0;
            if (!same) {
              std::lock_guard lock(mu);
              ++failures;
              MESSAGE("mismatch: ranks=" << n << " type=" << std::string(reduce::sum<T>::name) << " bytes=" << bytes
                                         << " algo=" << algo_name(v.a)
                                         << std::string(v.gather ? " all_gather" : " all_reduce") << " rank=" << q);
            }
          }
        }
        if (st != status::ok || e != cudaSuccess) {
          std::lock_guard lock(mu);
          ++failures;
          MESSAGE("rank " << r << " status " << std::string(to_string(st)) << " cuda " << std::string(cudaGetErrorString(e))
                          << " " << comm.last_error() << " " << comm.check_health().message);
        }
        b.barrier();
      }
    }
  });
  CHECK(failures == 0);
}

/// Runs `sweeps()` and CHECKs that its one-shot all-reduces launched every kernel variant the communicator picks by
/// size: the decode-size kernels (packets + flag at 4 and 8 ranks, LL at 2) and the bulk-only kernel (parts of more
/// packets than a CTA has threads). The all-purpose kernel serves the in-kernel API (examples/01_user_kernel.cu
/// runs it).
template <class Sweeps>
void covers_sweep_paths(Sweeps sweeps) {
  paths_seen.clear();
  sweeps();
  for (auto p : {kernel::reduce_path::small, kernel::reduce_path::small_ll, kernel::reduce_path::bulk}) {
    CAPTURE(static_cast<int>(p));
    CHECK(paths_seen.count(p) == 1);
  }
}

const std::vector<std::size_t> sizes_f32 = {16, 28, 48, 1004, 49152, (1u << 20) + 4, 64u << 20};
const std::vector<std::size_t> sizes_16 = {16, 26, 48, 1002, 49152, (1u << 20) + 2, 64u << 20};

/// The Lamport path on (options::lamport_max_bytes): one-shot all-reduces of at most 64 KiB per rank at 2..8 ranks.
void lamport_on(options& o) { o.lamport_max_bytes = 64 * 1024; }

}  // namespace

TEST_SUITE("gpu.collectives") {
  TEST_CASE("one rank: every collective reproduces its input exactly (the sanitizer subset)") {
    // compute-sanitizer serialises kernels, so ranks that wait on each other cannot run under it; one rank runs
    // every code path but the waits.
    sweep<float>(1, {16, 28, 49152, (1u << 20) + 4});
    sweep<__half>(1, {26, 49152});
    sweep<__nv_bfloat16>(1, {26, 49152, (1u << 20) + 2});
    // Misaligned input and output: the byte-wise loads and stores of a partial or misaligned packet
    // (reduce::load_user / store_user) under the sanitizer too.
    sweep<__nv_bfloat16>(1, {26, 49152, (1u << 20) + 2}, no_tweak, all_shift);
  }
  TEST_CASE_TEMPLATE("every algorithm matches the CPU reference bit for bit and is identical on every rank", T, float,
                     __half, __nv_bfloat16) {
    covers_sweep_paths([] {
      for (int n : {2, 4, 8}) sweep<T>(n, std::is_same_v<T, float> ? sizes_f32 : sizes_16);
    });
  }
  TEST_CASE("misaligned inputs and outputs, a different offset on each rank, are served by every kernel and match the reference") {
    // Never declined, never a rank-dependent path: each kernel loads and stores a misaligned packet byte by byte.
    covers_sweep_paths([] {
      for (int n : {2, 4}) sweep<__nv_bfloat16>(n, {26, 49152, (1u << 20) + 2}, no_tweak, rank_shift);
      for (int n : {2, 4}) sweep<float>(n, {28, 49152, (1u << 20) + 4}, no_tweak, rank_shift);
    });
  }
  TEST_CASE_TEMPLATE("the Lamport path matches the CPU reference bit for bit and is identical on every rank, "
                     "beside every other algorithm on one communicator", T, float, __half, __nv_bfloat16) {
    paths_seen.clear();
    for (int n : {2, 4, 8}) sweep<T>(n, std::is_same_v<T, float> ? sizes_f32 : sizes_16, lamport_on);
    CHECK(paths_seen.count(kernel::reduce_path::small_lamport) == 1);
    CHECK(paths_seen.count(kernel::reduce_path::small_ll) == 0);  // the Lamport path takes the LL path's calls
  }
  TEST_CASE("the Lamport path: misaligned buffers (a different offset on each rank) and in place") {
    paths_seen.clear();
    for (int n : {2, 4}) sweep<__nv_bfloat16>(n, {26, 1002, 49152}, lamport_on, rank_shift);
    for (int n : {2, 4, 8}) sweep<__nv_bfloat16>(n, {26, 1002, 49152}, lamport_on, no_shift, true);
    for (int n : {3, 4}) sweep<float>(n, {28, 1004, 49152}, lamport_on, rank_shift, true);
    CHECK(paths_seen.count(kernel::reduce_path::small_lamport) == 1);
  }
  TEST_CASE("in-place all-reduces (output = input) match the reference on every kernel, aligned and misaligned") {
    // The own contribution is read from the input while the output is written: one_shot reads a packet before
    // storing it; ring stores into chunks it has finished reading; two_shot reads every packet of a part (sent in
    // its reduce-scatter, summed by the owner) before that part writes it (algorithm/one_shot.hpp, ring.hpp,
    // two_shot.hpp).
    covers_sweep_paths([] {
      for (int n : {2, 4, 8}) sweep<__nv_bfloat16>(n, sizes_16, no_tweak, no_shift, true);
      for (int n : {2, 4}) sweep<float>(n, {28, 49152, (1u << 20) + 4}, no_tweak, rank_shift, true);
    });
  }
}

namespace {
/// Inputs holding all-ones elements (the Lamport area's empty value, a NaN in every float type: on every rank, on
/// one rank, on a rank that changes with the element), -0.0 on every rank, and random values: the Lamport path's
/// result has the packet path's bytes (a communicator without the Lamport area, same inputs), on every rank.
template <class T>
void lamport_special_values(int n, std::size_t count) {
  using bits_t = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint16_t>;
  const bits_t ones = static_cast<bits_t>(~bits_t{0});
  const bits_t neg_zero = static_cast<bits_t>(bits_t{1} << (8 * sizeof(T) - 1));
  options plain = gpu::default_options();
  plain.capacity_bytes = count * sizeof(T);
  plain.timeout_ns = 5'000'000'000ull;
  options lamport = plain;
  lamport_on(lamport);
  std::vector<std::vector<bits_t>> got_plain(n), got_lamport(n);
  std::atomic<int> bad{0};
  host::spawn_ranks(n, [&](bootstrap::in_process& b) {
    const int r = b.rank();
    gpu::communicator<> packets(b, plain), lamport_comm(b, lamport);
    if (lamport_comm.template path_for<T>(count) != kernel::reduce_path::small_lamport) ++bad;  // the premise
    if (packets.template path_for<T>(count) == kernel::reduce_path::small_lamport) ++bad;
    gpu_rank gr;
    dev_buf<T> din(count), d1(count), d2(count);
    pinned<T> h(count), g1(count), g2(count);
    const std::vector<T> random = make_input<T>(count, r, 99);
    for (std::size_t i = 0; i < count; ++i) {
      bits_t v;
      std::memcpy(&v, &random[i], sizeof v);
      if (i % 5 == 0) v = ones;                                        // every rank
      if (i % 5 == 1) v = neg_zero;                                    // every rank: the sum is -0.0
      if (i % 5 == 2 && r == 0) v = ones;                              // the first rank only
      if (i % 5 == 3 && static_cast<int>(i / 5 % n) == r) v = ones;    // one rank, a different one along the input
      std::memcpy(static_cast<void*>(&h[i]), &v, sizeof v);
    }
    b.barrier();  // no device-synchronising call from here on
    cudaMemcpyAsync(din.p, h.data(), count * sizeof(T), cudaMemcpyHostToDevice, gr.stream);
    if (packets.all_reduce(din.p, d1.p, count, gr.stream) != status::ok) ++bad;
    if (lamport_comm.all_reduce(din.p, d2.p, count, gr.stream) != status::ok) ++bad;
    cudaMemcpyAsync(g1.data(), d1.p, count * sizeof(T), cudaMemcpyDeviceToHost, gr.stream);
    cudaMemcpyAsync(g2.data(), d2.p, count * sizeof(T), cudaMemcpyDeviceToHost, gr.stream);
    if (cudaStreamSynchronize(gr.stream) != cudaSuccess) ++bad;
    got_plain[r].resize(count);
    got_lamport[r].resize(count);
    std::memcpy(got_plain[r].data(), g1.data(), count * sizeof(T));
    std::memcpy(got_lamport[r].data(), g2.data(), count * sizeof(T));
    b.barrier();
  });
  CHECK(bad.load() == 0);
  for (int q = 0; q < n; ++q) {
    CAPTURE(q);
    CHECK(got_lamport[q] == got_plain[0]);
    CHECK(got_plain[q] == got_plain[0]);
  }
  const float x = rtest::to_float(reinterpret_cast<const T*>(got_lamport[0].data())[0]);
  CHECK(x != x);                           // all ones on every rank: NaN
  CHECK(got_lamport[0][1] == neg_zero);    // -0.0 on every rank: -0.0
}

/// More parts than CTAs: 3 CTAs per rank loop over parts of at most 16 KiB (65 of them at 1 MiB + 2 bytes; each
/// more than one packet per thread, so the bulk loop runs).
void looped_parts(options& o) {
  o.max_parts = 300;
  o.max_ctas = 3;
  o.max_part_bytes = 16384;
}

/// The split gpu::communicator makes with looped_parts for `bytes` of input (algorithm::plan_split, as split_for).
inline algorithm::launch_split looped_split(std::uint64_t bytes) {
  options o = gpu::default_options();
  looped_parts(o);
  return algorithm::plan_split(protocol::ceil_div(bytes, packet_bytes), protocol::ceil_div(o.min_part_bytes, packet_bytes),
                               o.max_part_bytes / packet_bytes, o.max_parts, o.max_ctas);
}
}  // namespace

TEST_SUITE("gpu.collectives") {
  TEST_CASE("CTAs looping over more parts than CTAs match the CPU reference bit for bit (direct and proxy mode)") {
    const std::vector<std::size_t> s16 = {26, 1002, 49152, (1u << 20) + 2, 4u << 20};
    const std::vector<std::size_t> s32 = {28, 1004, 49152, (1u << 20) + 4, 4u << 20};
    // The premise: the two largest sizes loop (more parts than CTAs), and their parts hold more packets than a
    // CTA has threads (the bulk-only kernel, dropping read lines from L2 on direct windows: kernel::reduce_path).
    for (std::uint64_t bytes : {std::uint64_t{(1u << 20) + 2}, std::uint64_t{4u << 20}}) {
      const auto sp = looped_split(bytes);
      CAPTURE(bytes);
      REQUIRE(sp.ctas == 3);
      REQUIRE(sp.parts > sp.ctas);
      REQUIRE(protocol::ceil_div(bytes, packet_bytes) / sp.parts > std::uint64_t{kernel::threads_per_block});
    }
    for (int n : {2, 4}) {
      sweep<__nv_bfloat16>(n, s16, looped_parts);
      sweep<float>(n, s32, looped_parts);
      sweep<__half, transport::cuda_loopback_proxy>(n, s16, looped_parts);
    }
  }
}

TEST_SUITE("gpu.proxy") {
  TEST_CASE("proxy mode (host-mapped windows, CPU proxy) matches the CPU reference bit for bit: every dtype") {
    const std::vector<std::size_t> small16 = {16, 26, 48, 1002, 49152, (1u << 20) + 2};
    const std::vector<std::size_t> small32 = {16, 28, 48, 1004, 49152, (1u << 20) + 4};
    for (int n : {2, 4}) {
      sweep<float, transport::cuda_loopback_proxy>(n, small32);
      sweep<__half, transport::cuda_loopback_proxy>(n, small16);
      sweep<__nv_bfloat16, transport::cuda_loopback_proxy>(n, small16);
      // every call posted per part (each CTA posts its own range as soon as it has staged)
      sweep<__nv_bfloat16, transport::cuda_loopback_proxy>(n, small16, [](options& o) { o.call_post_max_bytes = 0; });
    }
  }

  TEST_CASE("proxy mode: a decode-size call is one doorbell and 2 (n - 1) writes per rank, eagerly and in a graph, "
            "and exact") {
    constexpr int n = 4, eager = 20, captured = 10, replays = 5;
    constexpr std::size_t count = 24576;  // 48 KiB of bf16: 16 CTAs, every one of them staging before the doorbell
    options o = gpu::default_options();
    o.capacity_bytes = count * 2;
    o.timeout_ns = 5'000'000'000ull;
    std::atomic<int> bad{0};
    std::vector<transport::proxy_stats> st(n);
    std::vector<std::uint32_t> parts(n);
    host::spawn_ranks(n, [&](bootstrap::in_process& b) {
      gpu::communicator<transport::cuda_loopback_proxy> comm(b, o);
      gpu_rank gr;
      dev_buf<__nv_bfloat16> din(count), dout(count);
      pinned<__nv_bfloat16> h(count), g(count);
      for (std::size_t i = 0; i < count; ++i) h[i] = __float2bfloat16(float(b.rank() + 1) + float(i % 5));
      cudaMemcpy(din.p, h.data(), count * 2, cudaMemcpyHostToDevice);
      cudaDeviceSynchronize();
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      cudaStreamBeginCapture(gr.stream, cudaStreamCaptureModeThreadLocal);
      for (int i = 0; i < captured; ++i)
        if (comm.all_reduce(din.p, dout.p, count, gr.stream) != status::ok) ++bad;
      cudaStreamEndCapture(gr.stream, &graph);
      if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) ++bad;
      b.barrier();  // no device-synchronising call from here on
      const transport::proxy_stats before = comm.transport().stats();
      for (int i = 0; i < eager; ++i)
        if (comm.all_reduce(din.p, dout.p, count, gr.stream) != status::ok) ++bad;
      for (int i = 0; i < replays; ++i) cudaGraphLaunch(exec, gr.stream);
      cudaMemcpyAsync(g.data(), dout.p, count * 2, cudaMemcpyDeviceToHost, gr.stream);
      if (cudaStreamSynchronize(gr.stream) != cudaSuccess) ++bad;
      b.barrier();  // every peer finished: this rank's proxy has taken every descriptor of this rank
      transport::proxy_stats after = comm.transport().stats();
      after.posts -= before.posts;
      after.calls -= before.calls;
      after.writes -= before.writes;
      st[b.rank()] = after;
      parts[b.rank()] = comm.parts_for<__nv_bfloat16>(count);
      for (std::size_t i = 0; i < count; ++i)
        if (__bfloat162float(g[i]) != 10.0f + 4.0f * float(i % 5)) {
          ++bad;
          break;
        }
      if (!comm.check_health().ok()) {
        MESSAGE(comm.check_health().message);
        ++bad;
      }
      b.barrier();
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    });
    CHECK(bad.load() == 0);
    constexpr std::uint64_t calls = eager + captured * replays;
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(parts[r] == 16);
      CHECK(st[r].posts == calls);
      CHECK(st[r].calls == calls);
      CHECK(st[r].writes == calls * 2 * (n - 1));
    }
  }

  TEST_CASE("a proxy stopped across two doorbells posts both when resumed and both collectives are correct") {
    const int n = 4;
    options o = gpu::default_options();
    o.capacity_bytes = 1 << 20;
    o.timeout_ns = 5'000'000'000ull;
    // ROCENANTE_TEST_MAX_PARTS: fewer CTAs per rank, to tell whether the intermittent stall depends on residency
    if (const char* e = std::getenv("ROCENANTE_TEST_MAX_PARTS")) {
      char* end = nullptr;
      const unsigned long v = std::strtoul(e, &end, 10);
      REQUIRE_MESSAGE((end != e && *end == '\0' && v >= 1 && v <= max_parts_limit), "ROCENANTE_TEST_MAX_PARTS=" << e << " is not a count in [1, " << max_parts_limit << "]");
      o.max_parts = static_cast<std::uint32_t>(v);
    }
    std::atomic<int> bad{0};
    host::spawn_ranks(n, [&](bootstrap::in_process& b) {
      gpu::communicator<transport::cuda_loopback_proxy> comm(b, o);
      gpu_rank gr;
      const std::size_t count = 50000;
      dev_buf<float> din(count), d1(count), d2(count);
      pinned<float> h(count), g1(count), g2(count);
      for (std::size_t i = 0; i < count; ++i) h[i] = float(b.rank() + 1) + float(i % 3);
      cudaMemcpy(din.p, h.data(), count * 4, cudaMemcpyHostToDevice);
      cudaDeviceSynchronize();
      if (b.rank() == 0) comm.transport().pause();
      b.barrier();
      // Rank 0 rings two doorbells while its proxy is stopped: its first collective completes (the peers'
      // proxies deliver to it), its second is posted behind the first.
      const auto t_launch = std::chrono::steady_clock::now();
      if (comm.all_reduce(din.p, d1.p, count, gr.stream) != status::ok) ++bad;
      // Every rank submits its first collective before any rank submits its second (docs/api.md, harness rule):
      // streams share the GPU's hardware queues, and a rank's second collective queued ahead of a peer's first
      // would hold it back until the timeout. ROCENANTE_TEST_NO_LAUNCH_BARRIER=1 leaves the barrier out (the
      // experiment of docs/results/h200-2026-12-04/README.md).
      if (!no_launch_barrier()) b.barrier();
      if (comm.all_reduce<algorithm::ring>(din.p, d2.p, count, gr.stream) != status::ok) ++bad;
      const double launch_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_launch).count();
      if (b.rank() == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        const auto posted = comm.transport().stats().posts;
        if (posted != 0) ++bad;  // nothing may have been posted while paused
        comm.transport().resume();
      }
      cudaMemcpyAsync(g1.data(), d1.p, count * 4, cudaMemcpyDeviceToHost, gr.stream);
      cudaMemcpyAsync(g2.data(), d2.p, count * 4, cudaMemcpyDeviceToHost, gr.stream);
      cudaStreamSynchronize(gr.stream);
      int mine = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const float want = 10.0f + 4.0f * float(i % 3);
        mine += g1[i] != want;
        mine += g2[i] != want;
      }
      if (!comm.check_health().ok()) {
        MESSAGE(comm.check_health().message);
        ++mine;
      }
      bad += mine;
      b.barrier();
      if (mine) {  // where the descriptors were: the proxy's counters, each part queue's consumed count and stamps
        const auto st = comm.transport().stats();
        protocol::rank_state rs{};
        cudaMemcpy(&rs, comm.device_context().state, sizeof rs, cudaMemcpyDeviceToHost);
        std::string d = "rank " + std::to_string(b.rank()) + " diagnostics: both launches took " +
                        std::to_string(launch_ms) + " ms; posts " + std::to_string(st.posts) +
                        ", drains " + std::to_string(st.drains) + ", idle polls " + std::to_string(st.idle_polls) +
                        ", parts used " + std::to_string(comm.parts_for<float>(count)) + "; per part: consumed/stamps[0..7]/seq";
        for (std::uint32_t p = 0; p < comm.layout().max_parts; ++p) {
          const auto& q = comm.transport().queues()[p];
          d += "\n  part " + std::to_string(p) + ": " + std::to_string(q.consumed) + " /";
          // append(), not " " + std::to_string(...): GCC 12 warns (-Wrestrict) on that operator+ inlined in this loop
          for (int j = 0; j < 8; ++j) d.append(" ").append(std::to_string(q.entries[j].stamp));
          d.append(" / ").append(std::to_string(rs.seq[p]));
        }
        MESSAGE(d);
      }
      b.barrier();
    });
    CHECK(bad.load() == 0);
  }
}

namespace {
/// A user epilogue fused into the reduction's store: out = (sum + residual) * scale, in fp32, rounded once.
struct residual_scale {
  const __nv_bfloat16* residual;
  float scale;
  std::uint64_t count;
  template <class Acc>
  __host__ __device__ void operator()(std::uint64_t first, Acc& acc) const {
    for (int l = 0; l < 8; ++l)
      if (first + l < count) acc.v[l] = (acc.v[l] + __bfloat162float(residual[first + l])) * scale;
  }
};
}  // namespace

TEST_SUITE("gpu.epilogue") {
  TEST_CASE("a user epilogue (residual add and scale) fused into the store matches the reference on every rank") {
    using T = __nv_bfloat16;
    const int n = 4;
    const std::size_t count = 70000 + 5;
    options o = gpu::default_options();
    o.capacity_bytes = 1 << 20;
    std::vector<std::vector<T>> inputs(n), outputs(n);
    const auto residual = make_input<T>(count, 99, 7);
    std::atomic<int> bad{0};
    for (auto algo : {algorithm::algo::one_shot, algorithm::algo::two_shot, algorithm::algo::ring}) {
      host::spawn_ranks(n, [&](bootstrap::in_process& b) {
        const int r = b.rank();
        gpu::communicator<> comm(b, o);
        gpu_rank gr;
        inputs[r] = make_input<T>(count, r, 11);
        dev_buf<T> din(count), dout(count), dres(count);
        cudaMemcpy(din.p, inputs[r].data(), count * sizeof(T), cudaMemcpyHostToDevice);
        cudaMemcpy(dres.p, residual.data(), count * sizeof(T), cudaMemcpyHostToDevice);
        cudaDeviceSynchronize();
        pinned<T> hout(count);
        b.barrier();
        const residual_scale epi{dres.p, 0.5f, count};
        const status st =
            host::with_algorithm(algo, [&](auto tag) { return comm.all_reduce(din.p, dout.p, count, gr.stream, tag, epi); });
        if (st != status::ok) ++bad;
        cudaMemcpyAsync(hout.data(), dout.p, count * sizeof(T), cudaMemcpyDeviceToHost, gr.stream);
        cudaStreamSynchronize(gr.stream);
        outputs[r].assign(hout.data(), hout.data() + count);
        b.barrier();
      });
      // reference: the algorithm's summation order, then (sum + residual) * 0.5 in fp32, rounded once
      using R = reduce::sum<T>;
      const std::size_t lanes = 8, packets = (count + lanes - 1) / lanes, k = (packets + n - 1) / n;
      for (std::size_t i = 0; i < count; ++i) {
        const int first = algo == algorithm::algo::ring ? static_cast<int>((i / lanes) / k) : 0;
        float acc = R::to_accum(inputs[first][i]);
        for (int j = 1; j < n; ++j) acc = acc + R::to_accum(inputs[(first + j) % n][i]);
        const T want = R::from_accum((acc + R::to_accum(residual[i])) * 0.5f);
        for (int q = 0; q < n; ++q)
          if (std::memcmp(&outputs[q][i], &want, sizeof(T)) != 0) ++bad;
      }
    }
    CHECK(bad.load() == 0);
  }
}

namespace {
/// One rank's four collectives of T captured in one graph, in this order: a one_shot all-reduce of count[0], an
/// all-gather of count[1], an all-reduce of count[2] with algorithm `third` (ring unless set) and a one_shot
/// all-reduce of count[3] (different sizes: different CTA counts). Device inputs and outputs and their pinned host copies are allocated at construction,
/// before the rank's barrier; the graph objects are destroyed with it.
template <class T>
struct four_collectives {
  int n;
  std::size_t count[4];
  std::vector<dev_buf<T>> in, out;
  std::vector<pinned<T>> host_in, host_out;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  algorithm::algo third = algorithm::algo::ring;

  four_collectives(int ranks, std::size_t c0, std::size_t c1, std::size_t c2, std::size_t c3) : n(ranks), count{c0, c1, c2, c3} {
    for (int k = 0; k < 4; ++k) {
      in.emplace_back(count[k]);
      out.emplace_back(out_count(k));
      host_in.emplace_back(count[k]);
      host_out.emplace_back(out_count(k));
    }
  }
  ~four_collectives() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
  std::size_t out_count(int k) const { return k == 1 ? count[1] * n : count[k]; }

  /// Captures the four collectives, then `more(stream)`, from `stream` into the graph and instantiates it.
  template <class Comm, class More>
  void capture(Comm& comm, cudaStream_t stream, More more) {
    CUDA_REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    REQUIRE(comm.all_reduce(in[0].p, out[0].p, count[0], stream) == status::ok);
    REQUIRE(comm.all_gather(in[1].p, out[1].p, count[1], stream) == status::ok);
    REQUIRE(host::with_algorithm(third, [&](auto tag) { return comm.all_reduce(in[2].p, out[2].p, count[2], stream, tag); }) ==
            status::ok);
    REQUIRE(comm.all_reduce(in[3].p, out[3].p, count[3], stream) == status::ok);
    more(stream);
    CUDA_REQUIRE(cudaStreamEndCapture(stream, &graph));
    CUDA_REQUIRE(cudaGraphInstantiate(&exec, graph, 0));
  }
  /// Fills input k with fill(k, i) for every element i.
  template <class Fill>
  void fill_inputs(Fill fill) {
    for (int k = 0; k < 4; ++k)
      for (std::size_t i = 0; i < count[k]; ++i) host_in[k][i] = fill(k, i);
  }
  void upload(cudaStream_t s) {
    for (int k = 0; k < 4; ++k) cudaMemcpyAsync(in[k].p, host_in[k].data(), count[k] * sizeof(T), cudaMemcpyHostToDevice, s);
  }
  void download(cudaStream_t s) {
    for (int k = 0; k < 4; ++k) cudaMemcpyAsync(host_out[k].data(), out[k].p, out_count(k) * sizeof(T), cudaMemcpyDeviceToHost, s);
  }
};
}  // namespace

/// Lets the kernel after it launch at once (programmatic dependent launch), waits `hold_ns`, then writes
/// in[i] = value + i % 7: a collective that read its input before its wait for this kernel would see the old values.
__global__ void produce_late(__nv_bfloat16* in, std::size_t count, float value, unsigned long long hold_ns) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); while (t - t0 < hold_ns);
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x)
    in[i] = __float2bfloat16(value + float(i % 7));
}

TEST_SUITE("gpu.graph") {
  TEST_CASE("programmatic launch: a decode-size all-reduce reads the input its predecessor wrote late") {
    // Each pair in the graph: a kernel that lets the next one launch early and writes the input only after 20 us,
    // then the all-reduce of that input (the decode-size kernel, whose wait for its predecessor comes after its
    // plan: kernel::dependency_gate). Every pair writes other values into the same buffer, so an all-reduce that
    // read its input (or its epoch) before that wait returns a sum of the previous pair's values.
    for (const int n : {2, 4}) {  // 2 ranks: the LL path; 4: packets + flag
      CAPTURE(n);
      options o = gpu::default_options();
      o.capacity_bytes = 1 << 20;
      o.timeout_ns = 5'000'000'000ull;
      using T = __nv_bfloat16;
      constexpr std::size_t count = 4096;  // 8 KiB
      constexpr int pairs = 8, replays = 50;
      std::atomic<int> failures{0};
      host::spawn_ranks(n, [&](bootstrap::in_process& b) {
        const int r = b.rank();
        gpu::communicator<> comm(b, o);
        comm.set_programmatic_launch(true);
        REQUIRE(comm.path_for<T>(count) >= kernel::reduce_path::small);  // the kernel under test
        gpu_rank gr;
        dev_buf<T> in(count);
        std::vector<std::unique_ptr<dev_buf<T>>> out;
        for (int k = 0; k < pairs; ++k) out.push_back(std::make_unique<dev_buf<T>>(count));
        cudaGraph_t graph;
        CUDA_REQUIRE(cudaStreamBeginCapture(gr.stream, cudaStreamCaptureModeThreadLocal));
        for (int k = 0; k < pairs; ++k) {
          produce_late<<<1, 256, 0, gr.stream>>>(in.p, count, float((r + 1) * (k + 1)), 20'000);
          REQUIRE(comm.all_reduce(in.p, out[k]->p, count, gr.stream) == status::ok);
        }
        CUDA_REQUIRE(cudaStreamEndCapture(gr.stream, &graph));
        cudaGraphExec_t exec;
        CUDA_REQUIRE(cudaGraphInstantiate(&exec, graph, 0));
        pinned<T> got(count);
        b.barrier();
        int bad = 0;
        for (int rep = 0; rep < replays && bad == 0; ++rep) {
          cudaMemsetAsync(in.p, 0, count * sizeof(T), gr.stream);
          cudaGraphLaunch(exec, gr.stream);
          for (int k = 0; k < pairs && bad == 0; ++k) {
            cudaMemcpyAsync(got.data(), out[k]->p, count * sizeof(T), cudaMemcpyDeviceToHost, gr.stream);
            if (cudaStreamSynchronize(gr.stream) != cudaSuccess) { ++bad; break; }
            for (std::size_t i = 0; i < count; ++i) {
              float want = 0;
              for (int q = 0; q < n; ++q) want += float((q + 1) * (k + 1)) + float(i % 7);
              bad += __bfloat162float(got[i]) != want;
            }
            if (bad) MESSAGE("rank " << r << " replay " << rep << " pair " << k << ": " << bad << " wrong; " << comm.check_health().message);
          }
        }
        failures += bad;
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        CHECK(comm.check_health().ok());
      });
      CHECK(failures.load() == 0);
    }
  }

  TEST_CASE("1000 graph replays mixing all-reduce (one_shot, and ring or two_shot) and all-gather of different sizes "
            "and grid sizes stay correct") {
   for (const bool pdl : {false, true})
   for (const algorithm::algo third : {algorithm::algo::ring, algorithm::algo::two_shot})
   for (const bool lamport : {false, true}) {
    if (lamport && third == algorithm::algo::ring) continue;  // the Lamport path beside two_shot only: fewer runs
    CAPTURE(pdl);  // also with programmatic dependent launch (opt-in): edges between the captured kernels
    CAPTURE(algo_name(third));
    CAPTURE(lamport);  // the 1000-element one_shot all-reduce on the Lamport path
    const int n = 4;
    options o = gpu::default_options();
    o.capacity_bytes = 1 << 20;
    o.timeout_ns = 5'000'000'000ull;
    if (lamport) lamport_on(o);
    using T = __nv_bfloat16;
    std::atomic<int> failures{0};
    host::spawn_ranks(n, [&](bootstrap::in_process& b) {
      const int r = b.rank();
      gpu::communicator<> comm(b, o);
      comm.set_programmatic_launch(pdl);
      gpu_rank gr;
      four_collectives<T> f(n, 1000, 8192, 40000 + 3, 300);  // counts for different CTA counts: 1, 4 and 16 parts
      f.third = third;
      f.capture(comm, gr.stream, [](cudaStream_t) {});
      b.barrier();  // no device-synchronising call from here on
      // small integers: every sum is exact, so the expected value is known in closed form
      auto val = [](int rank, int rep, std::size_t i) { return float((rank + 1) * (rep % 5 + 1) + int(i % 7)); };
      auto total = [&](int rep, std::size_t i) { float s = 0; for (int q = 0; q < n; ++q) s += val(q, rep, i); return s; };
      int bad = 0;
      for (int rep = 0; rep < 1000; ++rep) {
        // collective k of replay rep takes the values of rep + k
        f.fill_inputs([&](int k, std::size_t i) { return from_float<T>(val(r, rep + k, i)); });
        f.upload(gr.stream);
        cudaGraphLaunch(f.exec, gr.stream);
        f.download(gr.stream);
        if (cudaStreamSynchronize(gr.stream) != cudaSuccess) { ++bad; break; }
        for (int k : {0, 2, 3})
          for (std::size_t i = 0; i < f.count[k]; ++i) bad += __bfloat162float(f.host_out[k][i]) != total(rep + k, i);
        for (int q = 0; q < n; ++q)
          for (std::size_t i = 0; i < f.count[1]; ++i) bad += __bfloat162float(f.host_out[1][q * f.count[1] + i]) != val(q, rep + 1, i);
        if (bad) { MESSAGE("rank " << r << " replay " << rep << ": " << bad << " wrong; " << comm.check_health().message); break; }
      }
      failures += bad;
      CHECK(comm.check_health().ok());
    });
    CHECK(failures.load() == 0);
   }
  }
}

/// Copies this rank's failure count, as a kernel of a captured graph sees it, to `out`.
__global__ void read_failures(protocol::rank_state* state, std::uint64_t* out) { *out = protocol::failures(state); }

TEST_SUITE("gpu.graph") {
  TEST_CASE("graph replay after a peer stops: every survivor's outputs are NaN, never the previous values; the "
            "failure count rises by one per collective, also inside the graph; check_health names the rank") {
   for (const algorithm::algo third : {algorithm::algo::ring, algorithm::algo::two_shot}) {
    CAPTURE(algo_name(third));
    const int n = 4, dead = n - 1;
    options o = gpu::default_options();
    o.capacity_bytes = 1 << 20;
    o.timeout_ns = 300'000'000ull;  // 300 ms
    using T = __nv_bfloat16;
    const std::uint16_t nan_bits = 0x7fc0;
    std::atomic<int> bad{0};
    host::spawn_ranks(n, [&](bootstrap::in_process& b) {
      const int r = b.rank();
      gpu::communicator<> comm(b, o);
      gpu_rank gr;
      // decode-size (small kernel), all-gather, ring or two_shot, and a bulk one-shot: every kernel variant's failure
      // path
      four_collectives<T> f(n, 1000, 2048, 40000 + 3, 100000);
      f.third = third;
      dev_buf<std::uint64_t> in_graph(1);
      pinned<std::uint64_t> seen(1);
      f.fill_inputs([&](int, std::size_t) { return from_float<T>(float(r + 1)); });
      f.upload(gr.stream);
      cudaStreamSynchronize(gr.stream);
      cudaDeviceSynchronize();
      b.barrier();  // every rank's set-up copies done before any rank captures
      f.capture(comm, gr.stream, [&](cudaStream_t s) { read_failures<<<1, 1, 0, s>>>(comm.device_context().state, in_graph.p); });
      b.barrier();  // no device-synchronising call from here on
      auto replay = [&] {
        cudaGraphLaunch(f.exec, gr.stream);
        f.download(gr.stream);
        cudaMemcpyAsync(seen.data(), in_graph.p, sizeof(std::uint64_t), cudaMemcpyDeviceToHost, gr.stream);
        return cudaStreamSynchronize(gr.stream) == cudaSuccess;
      };
      auto count_nan = [&](int k) {
        std::size_t nan = 0;
        for (std::size_t i = 0; i < f.out_count(k); ++i) {
          std::uint16_t u;
          std::memcpy(&u, &f.host_out[k][i], 2);
          nan += u == nan_bits;
        }
        return nan;
      };
      const std::size_t c1 = f.count[0], c2 = f.count[1], c3 = f.count[2], c4 = f.count[3];
      // Three good replays on every rank: the outputs then hold valid sums (the "previous values").
      const float total = float(n * (n + 1) / 2);
      for (int rep = 0; rep < 3; ++rep) {
        if (!replay()) ++bad;
        if (__bfloat162float(f.host_out[0][0]) != total || __bfloat162float(f.host_out[2][c3 - 1]) != total ||
            __bfloat162float(f.host_out[3][c4 / 2]) != total || __bfloat162float(f.host_out[1][(n - 1) * c2]) != float(n))
          ++bad;
      }
      if (comm.failures() != 0 || seen[0] != 0) ++bad;
      b.barrier();
      if (r != dead) {
        for (int rep = 1; rep <= 2; ++rep) {
          if (!replay()) ++bad;  // the kernels end by themselves (bounded waits), poisoned or not
          const std::size_t nan = count_nan(0) + count_nan(1) + count_nan(2) + count_nan(3);
          const std::size_t all = c1 + c2 * n + c3 + c4;
          const std::uint64_t failed = comm.failures();
          MESSAGE("rank " << r << " replay " << rep << " after the peer stopped: " << nan << " of " << all
                          << " outputs NaN, failures " << failed << " (in the graph: " << seen[0] << ")");
          if (nan != all) ++bad;
          if (failed != std::uint64_t(4 * rep) || seen[0] != failed) ++bad;  // four collectives per replay
        }
        const host::health h = comm.check_health();
        if (h.ok() || h.failure.peer != dead || h.message.find("rank " + std::to_string(dead)) == std::string::npos) ++bad;
        // An eager call on the poisoned communicator is refused, and still fills its output and counts.
        cudaMemsetAsync(f.out[0].p, 0, c1 * sizeof(T), gr.stream);
        if (comm.all_reduce(f.in[0].p, f.out[0].p, c1, gr.stream) != status::poisoned) ++bad;
        cudaMemcpyAsync(f.host_out[0].data(), f.out[0].p, c1 * sizeof(T), cudaMemcpyDeviceToHost, gr.stream);
        if (cudaStreamSynchronize(gr.stream) != cudaSuccess) ++bad;
        if (count_nan(0) != c1 || comm.failures() != 9) ++bad;
      }
      b.barrier();
    });
    CHECK(bad.load() == 0);
   }
  }
}

TEST_SUITE("gpu.graph") {
  TEST_CASE("a graph replayed after its communicator was destroyed and rebuilt is refused at entry: all NaN, counted in "
            "the old state, no wait for a peer; the old state is never the new one's; the rebuilt communicator works") {
    const int n = 2;
    options o = gpu::default_options();
    o.capacity_bytes = 1 << 20;
    o.timeout_ns = 2'000'000'000ull;  // a replay that waited for a peer would take this long
    const std::size_t count = 4096;
    const std::uint32_t nan_bits = 0x7fc00000;
    std::atomic<int> bad{0};
    host::spawn_ranks(n, [&](bootstrap::in_process& b) {
      const int r = b.rank();
      gpu_rank gr;
      dev_buf<float> din(count), dout(count);
      pinned<float> hin(count), hout(count);
      pinned<std::uint64_t> old_failures(1);
      for (std::size_t i = 0; i < count; ++i) hin[i] = float(r + 1);
      cudaMemcpy(din.p, hin.p, count * sizeof(float), cudaMemcpyHostToDevice);
      auto download = [&] {
        cudaMemcpyAsync(hout.p, dout.p, count * sizeof(float), cudaMemcpyDeviceToHost, gr.stream);
        return cudaStreamSynchronize(gr.stream) == cudaSuccess;
      };
      auto all_nan = [&] {
        for (std::size_t i = 0; i < count; ++i) {
          std::uint32_t u;
          std::memcpy(&u, &hout[i], 4);
          if (u != nan_bits) return false;
        }
        return true;
      };
      cudaGraph_t graph{};
      cudaGraphExec_t exec{};
      protocol::rank_state* old_state = nullptr;
      {
        gpu::communicator<> comm(b, o);
        cudaDeviceSynchronize();
        b.barrier();  // no device-synchronising call until every rank has replayed
        cudaStreamBeginCapture(gr.stream, cudaStreamCaptureModeThreadLocal);
        const status st = comm.all_reduce(din.p, dout.p, count, gr.stream);
        cudaStreamEndCapture(gr.stream, &graph);
        if (st != status::ok || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) ++bad;
        cudaGraphLaunch(exec, gr.stream);
        if (!download() || hout[0] != 3.0f || hout[count - 1] != 3.0f) ++bad;
        old_state = comm.device_context().state;
        b.barrier();  // every rank's replay done before any rank destroys its communicator
      }
      b.barrier();
      gpu::communicator<> rebuilt(b, o);
      // The old graph holds the old state: the allocator cannot have given it to the rebuilt communicator.
      if (rebuilt.device_context().state == old_state) ++bad;
      cudaDeviceSynchronize();
      b.barrier();
      for (std::uint64_t rep = 1; rep <= 2; ++rep) {
        cudaMemsetAsync(dout.p, 0, count * sizeof(float), gr.stream);
        const auto t0 = std::chrono::steady_clock::now();
        cudaGraphLaunch(exec, gr.stream);
        const bool ran = download();
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        cudaMemcpyAsync(old_failures.p, &old_state->failures, sizeof(std::uint64_t), cudaMemcpyDeviceToHost, gr.stream);
        cudaStreamSynchronize(gr.stream);
        MESSAGE("rank " << r << " replay " << rep << " of the destroyed communicator's graph: " << ms << " ms, output "
                        << (all_nan() ? "all NaN" : "NOT all NaN") << ", old failures " << old_failures[0]);
        if (!ran || !all_nan() || old_failures[0] != rep || ms > 1000.0) ++bad;
      }
      // The rebuilt communicator is untouched by the refused replays and works.
      if (rebuilt.failures() != 0 || !rebuilt.check_health().ok()) ++bad;
      b.barrier();
      cudaMemsetAsync(dout.p, 0, count * sizeof(float), gr.stream);
      if (rebuilt.all_reduce(din.p, dout.p, count, gr.stream) != status::ok) ++bad;
      if (!download() || hout[0] != 3.0f || hout[count - 1] != 3.0f) ++bad;
      b.barrier();
      // Without its graph the old state is handed back (CUDA's thread) and freed by a later set-up or teardown.
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaDeviceSynchronize();
      b.barrier();
      if (r == 0) {
        const auto t0 = std::chrono::steady_clock::now();
        while (gpu::lifetime::graveyard().pending() < std::size_t(n) &&
               std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        MESSAGE("old states handed back: " << gpu::lifetime::graveyard().pending() << " of " << n);
        if (gpu::lifetime::graveyard().pending() != std::size_t(n)) ++bad;
      }
      b.barrier();
    });
    // The rebuilt communicators' teardown freed what the graphs had held.
    CHECK(gpu::lifetime::graveyard().pending() == 0);
    CHECK(bad.load() == 0);
  }

  TEST_CASE("a communicator none of whose kernels was captured frees its state at once") {
    options o = gpu::default_options();
    o.capacity_bytes = 1 << 16;
    std::atomic<int> bad{0};
    host::spawn_ranks(1, [&](bootstrap::in_process& b) {
      gpu::communicator<> comm(b, o);
      gpu_rank gr;
      dev_buf<float> d(256);
      cudaMemset(d.p, 0, 1024);
      if (comm.all_reduce(d.p, d.p, 256, gr.stream) != status::ok || cudaStreamSynchronize(gr.stream) != cudaSuccess) ++bad;
    });
    CHECK(gpu::lifetime::graveyard().pending() == 0);
    CHECK(bad.load() == 0);
  }
}

/// The last rank never launches: every other rank reports it by name within the timeout + 1 s without a device
/// synchronize, its kernel ends by itself, and later calls are no-ops. At 2 ranks a call of at most 64 KiB takes
/// the LL path (one_shot::uses_ll), whose waits are the inline checks, not wait_one.
template <class Transport>
void never_launches(std::size_t count, int n = 4, algorithm::algo a = algorithm::algo::one_shot,
                    void (*tweak)(options&) = no_tweak) {
  const int dead = n - 1;
  options o = gpu::default_options();
  o.capacity_bytes = 1 << 20;
  o.timeout_ns = 300'000'000ull;  // 300 ms
  tweak(o);
  std::atomic<int> bad{0};
  host::spawn_ranks(n, [&](bootstrap::in_process& b) {
    gpu::communicator<Transport> comm(b, o);
    gpu_rank gr;
    dev_buf<float> din(count), dout(count);
    cudaMemset(din.p, 0, count * 4);
    cudaDeviceSynchronize();
    b.barrier();  // no device-synchronising call from here on
    if (b.rank() != dead) {
      const auto t0 = std::chrono::steady_clock::now();
      auto call = [&] { return host::with_algorithm(a, [&](auto tag) { return comm.all_reduce(din.p, dout.p, count, gr.stream, tag); }); };
      if (call() != status::ok) ++bad;
      // Health is polled while the kernel may still run: no device synchronize.
      host::health h;
      while ((h = comm.check_health()).ok() && std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1300))
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      MESSAGE("rank " << b.rank() << " saw the failure after " << ms << " ms (timeout 300 ms): " << h.message);
      if (h.ok() || h.failure.peer != dead || h.message.find("rank " + std::to_string(dead)) == std::string::npos) ++bad;
      if (ms > 300 + 1000) ++bad;
      if (cudaStreamSynchronize(gr.stream) != cudaSuccess) ++bad;  // the kernel ended by itself
      const auto t1 = std::chrono::steady_clock::now();
      if (call() != status::poisoned) ++bad;
      if (std::chrono::steady_clock::now() - t1 > std::chrono::milliseconds(50)) ++bad;
    }
    b.barrier();
  });
CHECK(bad.load() == 0);
}


/// Whether a 2-rank all-reduce of `count` floats takes the LL path with the options these tests use (1 MiB
/// capacity), split as gpu::communicator::parts_for splits it: the premise of the 2-rank failure cases.
inline bool takes_ll_path(std::uint64_t count) {
  options o = gpu::default_options();
  o.capacity_bytes = 1 << 20;
  const std::uint64_t packets = protocol::ceil_div(count, reduce::lanes<reduce::sum<float>>);
  const std::uint32_t parts = algorithm::part_count(packets, protocol::ceil_div(o.min_part_bytes, packet_bytes), o.max_parts);
  return algorithm::one_shot::uses_ll<reduce::sum<float>>(
      host::make_layout<algorithm::one_shot, algorithm::ring, algorithm::two_shot>(2, o, true), 2,
                                                          count, parts, kernel::threads_per_block);
}

/// Whether an all-reduce of `count` floats at `n` ranks takes the Lamport path with lamport_on and the options these
/// tests use (1 MiB capacity), split as gpu::communicator::parts_for splits it.
inline bool takes_lamport_path(std::uint64_t count, int n) {
  options o = gpu::default_options();
  o.capacity_bytes = 1 << 20;
  lamport_on(o);
  const std::uint64_t packets = protocol::ceil_div(count, reduce::lanes<reduce::sum<float>>);
  const std::uint32_t parts = algorithm::part_count(packets, protocol::ceil_div(o.min_part_bytes, packet_bytes), o.max_parts);
  return algorithm::one_shot::uses_lamport<reduce::sum<float>>(
      host::make_layout<algorithm::one_shot, algorithm::ring, algorithm::two_shot>(n, o, true), n, count, parts,
      kernel::threads_per_block);
}

/// Rank 0 calls with `ca` floats, every other rank with `cb` (cb >= ca): all must report a mismatch well before the
/// timeout, and every later call is poisoned.
inline void different_counts(std::size_t ca, std::size_t cb, void (*tweak)(options&) = no_tweak, int n = 2) {
  options o = gpu::default_options();
  o.capacity_bytes = 1 << 20;
  o.timeout_ns = 5'000'000'000ull;
  tweak(o);
  std::atomic<int> bad{0};
  host::spawn_ranks(n, [&](bootstrap::in_process& b) {
    gpu::communicator<> comm(b, o);
    gpu_rank gr;
    dev_buf<float> din(cb), dout(cb);
    cudaMemset(din.p, 0, cb * 4);
    cudaDeviceSynchronize();
    b.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    const std::size_t count = b.rank() == 0 ? ca : cb;
    const status st = comm.all_reduce(din.p, dout.p, count, gr.stream);
    cudaStreamSynchronize(gr.stream);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const auto h = comm.check_health();
    MESSAGE("rank " << b.rank() << ": launch " << std::string(to_string(st)) << ", health after " << ms << " ms: " << h.message);
    if (st != status::ok) ++bad;  // the launch itself is valid; the peer's call differs
    if (h.ok() || h.state != status::mismatch) ++bad;
    if (ms > 1000) ++bad;  // far below the 5 s timeout: the peer's lines or flag word carry another call's signature
    if (comm.all_reduce(din.p, dout.p, count, gr.stream) != status::poisoned) ++bad;
  });
  CHECK(bad.load() == 0);
}

/// Rank `refuser` passes a null output; every other rank must fail at once (mismatch, naming it), not at the
/// timeout, and every later call is poisoned.
inline void refuses_input(int n, int refuser, void (*tweak)(options&) = no_tweak) {
  options o = gpu::default_options();
  o.capacity_bytes = 1 << 20;
  o.timeout_ns = 5'000'000'000ull;
  tweak(o);
  std::atomic<int> bad{0};
  host::spawn_ranks(n, [&](bootstrap::in_process& b) {
    gpu::communicator<> comm(b, o);
    gpu_rank gr;
    dev_buf<float> din(4096), dout(4096);
    cudaMemset(din.p, 0, 4096 * 4);
    cudaDeviceSynchronize();
    b.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    const status st = comm.all_reduce(din.p, b.rank() == refuser ? nullptr : dout.p, 4096, gr.stream);
    cudaStreamSynchronize(gr.stream);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const auto h = comm.check_health();
    MESSAGE("rank " << b.rank() << ": " << std::string(to_string(st)) << " after " << ms << " ms: " << h.message);
    if (b.rank() == refuser) {
      if (st != status::invalid_argument) ++bad;
    } else {
      if (h.ok() || h.failure.peer != refuser || h.state != status::mismatch) ++bad;
    }
    if (ms > 1000) ++bad;  // far below the 5 s timeout
    if (comm.all_reduce(din.p, dout.p, 4096, gr.stream) != status::poisoned) ++bad;
  });
  CHECK(bad.load() == 0);
}

TEST_SUITE("gpu.protocol") {
  TEST_CASE("sequence numbers wrap through 2^31 and 2^32 without a wrong result") {
    for (std::uint32_t first : {0x7ffffffdu, 0xfffffffdu}) {
      options o = gpu::default_options();
      o.capacity_bytes = 1 << 20;
      o.first_sequence = first;
      std::atomic<int> bad{0};
      host::spawn_ranks(4, [&](bootstrap::in_process& b) {
        gpu::communicator<> comm(b, o);
        gpu_rank gr;
        const std::size_t count = 5000;
        dev_buf<float> din(count), dout(count);
        pinned<float> h(count), g(count);
        for (std::size_t i = 0; i < count; ++i) h[i] = float(b.rank() + 1);
        b.barrier();  // no device-synchronising call from here on
        cudaMemcpyAsync(din.p, h.data(), count * 4, cudaMemcpyHostToDevice, gr.stream);
        for (int i = 0; i < 8; ++i) {
          cudaMemsetAsync(dout.p, 0, count * 4, gr.stream);
          const algorithm::algo a = i % 3 == 1 ? algorithm::algo::ring : i % 3 == 2 ? algorithm::algo::two_shot : algorithm::algo::one_shot;
          const status st = host::with_algorithm(a, [&](auto tag) { return comm.all_reduce(din.p, dout.p, count, gr.stream, tag); });
          cudaMemcpyAsync(g.data(), dout.p, count * 4, cudaMemcpyDeviceToHost, gr.stream);
          cudaStreamSynchronize(gr.stream);
          if (st != status::ok) ++bad;
          for (std::size_t j = 0; j < count; ++j) bad += g[j] != 10.0f;
        }
        if (!comm.check_health().ok()) ++bad;
      });
      CHECK(bad.load() == 0);
    }
  }

  TEST_CASE("collectives alternating between two eagerly launched streams ordered by events stay correct") {
    options o = gpu::default_options();
    o.capacity_bytes = 1 << 20;
    std::atomic<int> bad{0};
    host::spawn_ranks(4, [&](bootstrap::in_process& b) {
      gpu::communicator<> comm(b, o);
      // ROCENANTE_TEST_PDL=1 turns programmatic launch on: when every launch carried the attribute, this case gave
      // wrong results on the H200 (docs/results/h200-2026-12-03/); now a launch on another stream than the rank's
      // previous one goes without it (set_programmatic_launch), and this case checks that rule.
      if (const char* e = std::getenv("ROCENANTE_TEST_PDL")) comm.set_programmatic_launch(e[0] == '1');
      gpu_rank s0, s1;
      cudaEvent_t ev;
      cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
      const std::size_t count = 20000;
      dev_buf<float> din(count), dout(count);
      pinned<float> h(count), g(count);
      for (std::size_t i = 0; i < count; ++i) h[i] = float(b.rank() + 1);
      cudaMemcpy(din.p, h.data(), count * 4, cudaMemcpyHostToDevice);
      b.barrier();  // no device-synchronising call from here on
      for (int i = 0; i < 200; ++i) {
        cudaStream_t s = (i & 1) ? s1.stream : s0.stream, other = (i & 1) ? s0.stream : s1.stream;
        cudaEventRecord(ev, other);
        cudaStreamWaitEvent(s, ev, 0);
        if (comm.all_reduce(din.p, dout.p, i % 3 ? count : count / 7, s) != status::ok) ++bad;
        if (!no_launch_barrier()) b.barrier();  // collective i on every rank before i + 1 anywhere (docs/api.md)
      }
      cudaMemcpyAsync(g.data(), dout.p, count * 4, cudaMemcpyDeviceToHost, s1.stream);  // i=199 ran on s1
      cudaStreamSynchronize(s1.stream);
      for (std::size_t i = 0; i < count; ++i) bad += g[i] != 10.0f;  // last call (i=199) used the full count
      const auto health = comm.check_health();
      if (!health.ok()) {
        ++bad;
        MESSAGE("rank " << b.rank() << ": " << health.message);
      }
      cudaEventDestroy(ev);
    });
    CHECK(bad.load() == 0);
  }

  TEST_CASE("a graph that forks a collective onto a second stream and joins it back stays exact, programmatic launch on and off") {
    // Each rank captures, from stream a: fork to b (event), all-reduce on b, join back to a, all-reduce on a reading
    // the first's output, fork again, all-reduce on b reading the second's. Inputs change before every replay (a copy
    // outside the graph), so a collective that ran ahead of its predecessor across a fork or join edge would read the
    // previous replay's values and be caught: out3 = 4 x 4 x sum over ranks of (k + rank + 1) on replay k.
    for (const bool pdl : {true, false}) {
      CAPTURE(pdl);
      options o = gpu::default_options();
      o.capacity_bytes = 1 << 20;
      std::atomic<int> bad{0};
      host::spawn_ranks(4, [&](bootstrap::in_process& b) {
        gpu::communicator<> comm(b, o);
        comm.set_programmatic_launch(pdl);
        gpu_rank a, c;
        cudaEvent_t fork1, join1, fork2, join2;
        for (cudaEvent_t* e : {&fork1, &join1, &fork2, &join2}) cudaEventCreateWithFlags(e, cudaEventDisableTiming);
        const std::size_t count = 12288;  // 48 KiB of fp32: the decode-size kernel
        dev_buf<float> in(count), out1(count), out2(count), out3(count);
        pinned<float> h(count), g(count);
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        b.barrier();
        CUDA_REQUIRE(cudaStreamBeginCapture(a.stream, cudaStreamCaptureModeThreadLocal));
        cudaEventRecord(fork1, a.stream);
        cudaStreamWaitEvent(c.stream, fork1, 0);
        if (comm.all_reduce(in.p, out1.p, count, c.stream) != status::ok) ++bad;
        cudaEventRecord(join1, c.stream);
        cudaStreamWaitEvent(a.stream, join1, 0);
        if (comm.all_reduce(out1.p, out2.p, count, a.stream) != status::ok) ++bad;
        cudaEventRecord(fork2, a.stream);
        cudaStreamWaitEvent(c.stream, fork2, 0);
        if (comm.all_reduce(out2.p, out3.p, count, c.stream) != status::ok) ++bad;
        cudaEventRecord(join2, c.stream);
        cudaStreamWaitEvent(a.stream, join2, 0);
        CUDA_REQUIRE(cudaStreamEndCapture(a.stream, &graph));
        CUDA_REQUIRE(cudaGraphInstantiate(&exec, graph, 0));
        for (int k = 0; k < 50; ++k) {
          for (std::size_t i = 0; i < count; ++i) h[i] = float(k + b.rank() + 1);
          cudaMemcpyAsync(in.p, h.data(), count * 4, cudaMemcpyHostToDevice, a.stream);
          b.barrier();  // replay k on every rank before k + 1 anywhere (docs/api.md: ranks sharing one GPU)
          CUDA_REQUIRE(cudaGraphLaunch(exec, a.stream));
          cudaMemcpyAsync(g.data(), out3.p, count * 4, cudaMemcpyDeviceToHost, a.stream);
          cudaStreamSynchronize(a.stream);
          const float want = 16.0f * float(4 * k + 10);
          for (std::size_t i = 0; i < count; ++i) bad += g[i] != want;
        }
        const auto health = comm.check_health();
        if (!health.ok()) {
          ++bad;
          MESSAGE("rank " << b.rank() << ": " << health.message);
        }
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        for (cudaEvent_t e : {fork1, join1, fork2, join2}) cudaEventDestroy(e);
      });
      CHECK(bad.load() == 0);
    }
  }

  TEST_CASE("a rank that never launches is reported by every other rank, which becomes a no-op, and teardown returns") {
    never_launches<transport::cuda_loopback>(4096);
  }
  TEST_CASE("proxy mode, many parts: a rank that never launches is reported by every other rank (each CTA aborts its own part)") {
    never_launches<transport::cuda_loopback_proxy>(65536);  // 256 KiB: 16 parts, each with its own post queue
  }
  TEST_CASE("two_shot: a rank that never launches is reported by every other rank, direct and proxy mode (16 parts)") {
    never_launches<transport::cuda_loopback>(65536, 4, algorithm::algo::two_shot);
    never_launches<transport::cuda_loopback_proxy>(65536, 4, algorithm::algo::two_shot);
  }
  TEST_CASE("2 ranks (LL path): a rank that never launches is reported by its peer, which becomes a no-op") {
    REQUIRE(takes_ll_path(4096));
    never_launches<transport::cuda_loopback>(4096, 2);
  }
  TEST_CASE("a rank that refuses its input makes every peer fail at once instead of pairing with its next call") {
    refuses_input(4, 2);
  }
  TEST_CASE("2 ranks (LL path): a rank that refuses its input makes its peer fail at once") {
    REQUIRE(takes_ll_path(4096));
    refuses_input(2, 1);
  }
  TEST_CASE("2 ranks (LL path): calls with different counts (1002 and 1003 floats) fail on both ranks as a mismatch") {
    REQUIRE(takes_ll_path(1002));
    REQUIRE(takes_ll_path(1003));
    different_counts(1002, 1003);
  }
  TEST_CASE("2 ranks, one call on the LL path (16384 floats) and one on the packet path (16385): a mismatch on both") {
    REQUIRE(takes_ll_path(16384));
    REQUIRE_FALSE(takes_ll_path(16385));
    different_counts(16384, 16385);
  }

  TEST_CASE("the Lamport path: a rank that never launches is reported by every other rank (2 and 4 ranks)") {
    REQUIRE(takes_lamport_path(4096, 2));
    REQUIRE(takes_lamport_path(4096, 4));
    never_launches<transport::cuda_loopback>(4096, 2, algorithm::algo::one_shot, lamport_on);
    never_launches<transport::cuda_loopback>(4096, 4, algorithm::algo::one_shot, lamport_on);
  }
  TEST_CASE("the Lamport path: a rank that refuses its input makes every peer fail at once") {
    REQUIRE(takes_lamport_path(4096, 4));
    refuses_input(4, 2, lamport_on);
  }
  TEST_CASE("the Lamport path: calls with different counts fail on every rank as a mismatch, never a wrong sum") {
    // 1002 and 1003 floats: both Lamport calls, whose sources lie at different strides
    REQUIRE(takes_lamport_path(1002, 4));
    REQUIRE(takes_lamport_path(1003, 4));
    different_counts(1002, 1003, lamport_on, 4);
    // 16384 floats (64 KiB) on the Lamport path, 16385 on the packet path
    REQUIRE(takes_lamport_path(16384, 2));
    REQUIRE_FALSE(takes_lamport_path(16385, 2));
    different_counts(16384, 16385, lamport_on);
  }

  TEST_CASE_TEMPLATE("in-place path: an input in the symmetric area, read where it lies, gives the staged path's bytes on "
                     "every rank (one_shot eagerly and in 20 graph replays, two_shot eagerly); a rank that never calls "
                     "is reported, bounded", T, float,
                     __half, __nv_bfloat16) {
    for (int n : {2, 4, 8}) {
      for (std::size_t bytes : {std::size_t{16}, std::size_t{49152}, std::size_t{262144} + 32, std::size_t{4} << 20}) {
        const std::size_t count = bytes / sizeof(T);
        CAPTURE(n);
        CAPTURE(bytes);
        options o = gpu::default_options();
        o.capacity_bytes = std::size_t{4} << 20;
        o.symmetric_bytes = (std::size_t{4} << 20) + 4096;
        o.timeout_ns = 5'000'000'000ull;
        const std::size_t off = n == 4 ? 4096 : 0;
        std::vector<std::vector<T>> in(n);
        for (int r = 0; r < n; ++r) in[r] = make_input<T>(count, r, 900 + n);
        const std::vector<T> want = reference<T>(algorithm::algo::one_shot, false, in);
        std::vector<std::vector<T>> eager(n), replayed(n), staged(n), two(n);
        std::vector<std::size_t> area(n, 0);
        gtest::rank_errors errs;
        host::spawn_ranks(n, [&](bootstrap::in_process& b) {
          const int r = b.rank();
          gpu::communicator<transport::cuda_loopback> comm(b, o);
          gpu_rank gr;
          const std::span<std::byte> sym = comm.symmetric_input();
          area[r] = sym.size();
          T* sin = reinterpret_cast<T*>(sym.data() + off);
          dev_buf<T> din(count), dout(count), dstaged(count);
          CUDA_REQUIRE(cudaMemcpy(din.p, in[r].data(), count * sizeof(T), cudaMemcpyHostToDevice));
          CUDA_REQUIRE(cudaMemcpy(sin, in[r].data(), count * sizeof(T), cudaMemcpyHostToDevice));
          b.barrier();
          status st = comm.all_reduce(din.p, dstaged.p, count, gr.stream);
          if (st == status::ok) st = comm.all_reduce(static_cast<const T*>(sin), dout.p, count, gr.stream);
          staged[r].resize(count);
          eager[r].resize(count);
          two[r].resize(count);
          CUDA_REQUIRE(cudaMemcpyAsync(staged[r].data(), dstaged.p, count * sizeof(T), cudaMemcpyDeviceToHost, gr.stream));
          CUDA_REQUIRE(cudaMemcpyAsync(eager[r].data(), dout.p, count * sizeof(T), cudaMemcpyDeviceToHost, gr.stream));
          // two_shot's in-place path: the owners read their chunks of every input where it lies (the same bytes)
          if (st == status::ok)
            st = comm.all_reduce(static_cast<const T*>(sin), dstaged.p, count, gr.stream, algorithm::two_shot{});
          CUDA_REQUIRE(cudaMemcpyAsync(two[r].data(), dstaged.p, count * sizeof(T), cudaMemcpyDeviceToHost, gr.stream));
          errs.finish(r, comm, gr.stream, st, "eager");
          // a graph holding the in-place call, replayed with the input rewritten in place before each replay
          cudaGraph_t graph = nullptr;
          cudaGraphExec_t exec = nullptr;
          CUDA_REQUIRE(cudaStreamBeginCapture(gr.stream, cudaStreamCaptureModeThreadLocal));
          status gst = comm.all_reduce(static_cast<const T*>(sin), dout.p, count, gr.stream);
          CUDA_REQUIRE(cudaStreamEndCapture(gr.stream, &graph));
          CUDA_REQUIRE(cudaGraphInstantiate(&exec, graph, 0));
          replayed[r].resize(count);
          for (int k = 0; k < 20; ++k) {
            CUDA_REQUIRE(cudaMemsetAsync(dout.p, 0xff, count * sizeof(T), gr.stream));
            CUDA_REQUIRE(cudaMemcpyAsync(sin, din.p, count * sizeof(T), cudaMemcpyDeviceToDevice, gr.stream));
            b.barrier();  // replay k on every rank before k + 1 anywhere (ranks sharing one GPU)
            CUDA_REQUIRE(cudaGraphLaunch(exec, gr.stream));
            CUDA_REQUIRE(cudaStreamSynchronize(gr.stream));
          }
          CUDA_REQUIRE(cudaMemcpyAsync(replayed[r].data(), dout.p, count * sizeof(T), cudaMemcpyDeviceToHost, gr.stream));
          errs.finish(r, comm, gr.stream, gst, "graph");
          cudaGraphExecDestroy(exec);
          cudaGraphDestroy(graph);
          b.barrier();
        });
        errs.report();
        for (int r = 0; r < n; ++r) {
          CAPTURE(r);
          CHECK(area[r] == o.symmetric_bytes);
          CHECK(std::memcmp(staged[r].data(), want.data(), count * sizeof(T)) == 0);
          CHECK(std::memcmp(eager[r].data(), want.data(), count * sizeof(T)) == 0);
          CHECK(std::memcmp(two[r].data(), want.data(), count * sizeof(T)) == 0);
          CHECK(std::memcmp(replayed[r].data(), want.data(), count * sizeof(T)) == 0);
        }
      }
    }
    // A rank that never calls: every other rank's in-place call fails within its timeout, its output all NaN.
    constexpr int n = 4;
    constexpr std::size_t count = 65536;
    options o = gpu::default_options();
    o.symmetric_bytes = count * sizeof(T);
    o.timeout_ns = 300'000'000ull;
    std::vector<int> failed(n, 0), nan_out(n, 0);
    host::spawn_ranks(n, [&](bootstrap::in_process& b) {
      const int r = b.rank();
      gpu::communicator<transport::cuda_loopback> comm(b, o);
      gpu_rank gr;
      dev_buf<T> dout(count);
      std::vector<T> h(count);
      b.barrier();
      if (r != 1) {
        (void)comm.all_reduce(reinterpret_cast<const T*>(comm.symmetric_input().data()), dout.p, count, gr.stream);
        CUDA_REQUIRE(cudaMemcpyAsync(h.data(), dout.p, count * sizeof(T), cudaMemcpyDeviceToHost, gr.stream));
        CUDA_REQUIRE(cudaStreamSynchronize(gr.stream));
        failed[r] = !comm.check_health().ok();
        nan_out[r] = std::all_of(h.begin(), h.end(), [](T v) { return std::isnan(rtest::to_float(v)); });
      }
      b.barrier();
    });
    for (int r = 0; r < n; ++r) {
      if (r == 1) continue;
      CAPTURE(r);
      CHECK(failed[r] == 1);
      CHECK(nan_out[r] == 1);
    }
  }

  TEST_CASE("a configuration that could deadlock by exceeding co-residency is refused at set-up") {
    options o = gpu::default_options();
    o.capacity_bytes = 1 << 16;
    o.max_parts = 1024;
    std::atomic<int> refused{0};
    host::spawn_ranks(2, [&](bootstrap::in_process& b) {
      try {
        gpu::communicator<> comm(b, o);
      } catch (const config_error& e) {
        if (std::string(e.what()).find("deadlock") != std::string::npos) ++refused;
      }
    });
    CHECK(refused.load() == 2);
  }
}

TEST_SUITE("gpu.collectives") {
  TEST_CASE_TEMPLATE("the Lamport path: all-ones elements (its empty value, a NaN) and -0.0 in the input give the "
                     "packet path's bytes on every rank", T, float, __half, __nv_bfloat16) {
    for (int n : {2, 4, 8}) {
      CAPTURE(n);
      lamport_special_values<T>(n, 16 / sizeof(T) * 1000 + 3);  // a partial last packet
    }
  }
}

// GPU suite, NVFP4: the GPU codec bit for bit against the host codec on 10^8 elements, and the NVFP4
// collectives (compressed all-reduce, quantizing epilogue with residual + RMSNorm, NVFP4 all-gather) byte for byte
// against the host executor (host::nvfp4_communicator on CPU threads, which the host suite checks against models
// and a float64 reference), with several ranks on one GPU, direct (cuda_loopback) and proxy (cuda_loopback_proxy).
//
// Run (H200, about 20-40 s, most of it the host side of the 10^8 comparison):
//   build/tests/gpu/test_gpu_nvfp4            (or: meson test -C build --suite gpu nvfp4)
// Every failure prints what differed: first mismatching index, both values, rank, shape, transport.
//
// Harness rule (docs/design.md): between set-up and teardown a rank's thread makes no device-synchronising call;
// buffers are allocated before a barrier, host buffers are pinned, copies are async on the rank's stream.
#include "gpu_main.hpp"

#include <rocenante/gpu/nvfp4.hpp>
#include <rocenante/host/nvfp4.hpp>
#include <rocenante/host/spawn.hpp>
#include <rocenante/transport/loopback.hpp>

#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace rocenante;

// Ranks sharing a GPU spin inside their kernels waiting for each other; under CUDA's lazy module loading a kernel's
// first launch may wait for the device to go idle, i.e. for those spinning peers (docs/api.md). Load every module
// when the context is created: set before main, hence before the first CUDA call.
static const bool eager_module_loading = [] { return setenv("CUDA_MODULE_LOADING", "EAGER", 1) == 0; }();
namespace fp4 = rocenante::reduce::nvfp4;
using bf16 = __nv_bfloat16;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// float view of any element type, for messages
template <class T>
float nv_float(T v) {
  return fp4::to_float(v);
}

/// First index where two byte arrays differ, or -1.
long long first_diff(const void* a, const void* b, std::size_t bytes) {
  if (std::memcmp(a, b, bytes) == 0) return -1;
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  for (std::size_t i = 0; i < bytes; ++i)
    if (x[i] != y[i]) return static_cast<long long>(i);
  return -1;
}

/// Inputs that stress the codec: per 4096-element chunk a scale 2^e, e uniform in [-spread, spread], Gaussian
/// values, and sprinkled specials (all-zero blocks, NaN, +-Inf, subnormals, -0, exact E2M1 midpoints; with `huge`
/// also +-3.4e38). With a tensor scale from the finite amax, spread 8 keeps nearly every block's scale inside E4M3's
/// range (normal and subnormal scales); a wide spread with huge values drives most blocks to scale 0 or saturation.
std::vector<float> codec_input(std::size_t count, std::uint32_t seed, int spread, bool huge) {
  std::vector<float> x(count);
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-spread, spread);
  float sigma = 1.0f;
  for (std::size_t i = 0; i < count; ++i) {
    if (i % 4096 == 0) sigma = std::ldexp(1.0f, ex(g));
    x[i] = nd(g) * sigma;
  }
  std::uniform_int_distribution<std::size_t> at(0, count - 1);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), huge ? 3.4e38f : 0.75f, huge ? -3.4e38f : -1.25f,
                            1e-40f, -0.0f, 0.25f, 2.5f, 5.0f};
  for (int k = 0; k < 2000; ++k) x[at(g)] = specials[k % 10];
  for (int k = 0; k < 2000; ++k) {  // all-zero blocks
    const std::size_t b = at(g) / 16 * 16;
    for (std::size_t i = b; i < b + 16 && i < count; ++i) x[i] = 0.0f;
  }
  return x;
}

template <class T>
void check_codec(const std::vector<T>& x, float gs, const char* what, double min_live_blocks = 0.0) {
  const std::size_t count = x.size();
  const std::size_t db = fp4::data_bytes(count), sb = fp4::blocks(count);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::uint8_t> hd(db), hs(sb);
  fp4::quantize(x.data(), count, gs, hd.data(), hs.data());
  std::vector<float> hx(count);
  fp4::dequantize(hd.data(), hs.data(), count, gs, hx.data());
  const double host_s = seconds_since(t0);

  T* dx = nullptr;
  std::uint8_t *dd = nullptr, *ds = nullptr;
  float* dy = nullptr;
  CUDA_REQUIRE(cudaMalloc(&dx, count * sizeof(T)));
  CUDA_REQUIRE(cudaMalloc(&dd, db));
  CUDA_REQUIRE(cudaMalloc(&ds, sb));
  CUDA_REQUIRE(cudaMalloc(&dy, count * sizeof(float)));
  CUDA_REQUIRE(cudaMemcpy(dx, x.data(), count * sizeof(T), cudaMemcpyHostToDevice));
  CUDA_REQUIRE(cudaMemset(dd, 0xcd, db));
  CUDA_REQUIRE(cudaMemset(ds, 0xcd, sb));
  kernel::nvfp4_quantize<T><<<1024, 256>>>(dx, count, gs, dd, ds);
  CUDA_REQUIRE(cudaGetLastError());
  // decode the host's encoding on the GPU, so that a decode mismatch is not hidden behind an encode mismatch
  std::uint8_t *hd_dev = nullptr, *hs_dev = nullptr;
  CUDA_REQUIRE(cudaMalloc(&hd_dev, db));
  CUDA_REQUIRE(cudaMalloc(&hs_dev, sb));
  CUDA_REQUIRE(cudaMemcpy(hd_dev, hd.data(), db, cudaMemcpyHostToDevice));
  CUDA_REQUIRE(cudaMemcpy(hs_dev, hs.data(), sb, cudaMemcpyHostToDevice));
  kernel::nvfp4_dequantize<<<1024, 256>>>(hd_dev, hs_dev, count, gs, dy);
  CUDA_REQUIRE(cudaGetLastError());
  CUDA_REQUIRE(cudaDeviceSynchronize());
  std::vector<std::uint8_t> gd(db), gsf(sb);
  std::vector<float> gx(count);
  CUDA_REQUIRE(cudaMemcpy(gd.data(), dd, db, cudaMemcpyDeviceToHost));
  CUDA_REQUIRE(cudaMemcpy(gsf.data(), ds, sb, cudaMemcpyDeviceToHost));
  CUDA_REQUIRE(cudaMemcpy(gx.data(), dy, count * sizeof(float), cudaMemcpyDeviceToHost));
  cudaFree(dx), cudaFree(dd), cudaFree(ds), cudaFree(dy), cudaFree(hd_dev), cudaFree(hs_dev);

  std::size_t zero = 0, nan = 0, sat = 0;
  for (std::uint8_t b : hs) zero += b == 0, nan += b == fp4::nan_scale, sat += b == 0x7e;
  const double live = double(sb - zero - nan) / double(sb);
  MESSAGE(what << ": " << count << " elements, gs " << gs << ", host codec took " << host_s << " s; blocks: " << sb
               << ", scale 0: " << zero << ", NaN: " << nan << ", 448: " << sat << ", other: " << (sb - zero - nan - sat));
  CHECK_MESSAGE(live >= min_live_blocks, what << ": only " << live * 100 << "% of blocks have a non-zero finite scale");
  const long long d1 = first_diff(gd.data(), hd.data(), db);
  CHECK_MESSAGE(d1 < 0, what << ": packed codes differ first at byte " << d1 << " (element " << 2 * d1 << ", x = "
                             << (d1 >= 0 ? nv_float(x[2 * d1]) : 0.0f) << "): GPU 0x" << std::hex
                             << (d1 >= 0 ? int(gd[d1]) : 0) << " host 0x" << (d1 >= 0 ? int(hd[d1]) : 0));
  const long long d2 = first_diff(gsf.data(), hs.data(), sb);
  CHECK_MESSAGE(d2 < 0, what << ": scales differ first at block " << d2 << ": GPU 0x" << std::hex
                             << (d2 >= 0 ? int(gsf[d2]) : 0) << " host 0x" << (d2 >= 0 ? int(hs[d2]) : 0));
  std::size_t bad = 0, first = count;
  for (std::size_t i = 0; i < count; ++i) {
    const bool same = std::memcmp(&gx[i], &hx[i], 4) == 0 || (std::isnan(gx[i]) && std::isnan(hx[i]));
    if (!same && bad++ == 0) first = i;
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " decoded values differ, first at " << first << ": GPU "
                               << (bad ? gx[first] : 0.0f) << " host " << (bad ? hx[first] : 0.0f));
}

}  // namespace

TEST_SUITE("gpu.nvfp4.codec") {
  TEST_CASE("GPU quantize and dequantize are bit-identical to the host codec on 10^8 random elements") {
    const std::size_t count = 100'000'000;
    const auto x = codec_input(count, 2026, 8, false);
    check_codec(x, fp4::global_scale_for(fp4::amax_finite(x.data(), count)), "fp32 x 1e8, tensor scale", 0.9);
  }
  TEST_CASE("bf16 input, saturating and tiny global scales, counts not a multiple of 16") {
    auto xf = codec_input(10'000'003, 7, 30, true);
    std::vector<bf16> x(xf.size());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = __float2bfloat16_rn(xf[i]);
    check_codec(x, fp4::global_scale_for(fp4::amax_finite(x.data(), x.size())), "bf16 x 1e7+3, wide range, tensor scale");
    check_codec(x, 1.0f, "bf16 x 1e7+3, wide range, gs 1 (zero, subnormal, normal and saturated scales)", 0.2);
    check_codec(x, 1e30f, "bf16 x 1e7+3, gs 1e30 (saturates)");
    check_codec(x, 1e-30f, "bf16 x 1e7+3, gs 1e-30 (underflows)");
    std::vector<float> small(xf.begin(), xf.begin() + 1001);
    check_codec(small, 3.0f, "fp32 x 1001, gs 3");
  }
}

// --- collectives: GPU ranks vs the host executor ------------------------------------------------------------------

namespace {

using dev_bytes = gtest::dev_buf<std::uint8_t>;

options nvfp4_options(std::size_t capacity) {
  options o = gpu::default_options();
  o.capacity_bytes = capacity;
  o.timeout_ns = 5'000'000'000ull;
  return o;
}

std::vector<bf16> random_bf16(std::size_t n, std::uint32_t seed, float sigma) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<bf16> v(n);
  for (auto& x : v) x = __float2bfloat16_rn(d(g));
  return v;
}

/// Inputs of an epilogue case: n ranks' activations (rows x cols = `count`), a residual, and an RMSNorm weight near 1.
struct epi_inputs {
  std::vector<std::vector<bf16>> in;
  std::vector<bf16> res, w;
};
epi_inputs make_epi_inputs(int n, std::size_t count, std::size_t cols, std::uint32_t seed) {
  epi_inputs x{std::vector<std::vector<bf16>>(n), random_bf16(count, seed + 100, 0.5f), random_bf16(cols, seed + 101, 0.2f)};
  for (int r = 0; r < n; ++r) x.in[r] = random_bf16(count, seed + r, 1.0f);
  for (auto& v : x.w) v = __float2bfloat16_rn(1.0f + __bfloat162float(v));
  return x;
}

template <class T>
T* as(void* p) {
  return static_cast<T*>(p);
}

/// Runs `call(comm, rank)` on n ranks of the host executor (CPU threads): the reference the GPU ranks must match.
template <class Call>
void on_host_ranks(int n, const options& o, Call call) {
  host::spawn_ranks(n, [&](bootstrap::in_process& b) {
    host::nvfp4_communicator<transport::loopback> comm(b, o);
    if (call(comm, b.rank()) != status::ok) FAIL("host executor failed: " << comm.last_error());
  });
}

/// One device buffer of a GPU rank: an input (`bytes` copied up from `input`) or an output (filled with `poison`,
/// copied back after the collective).
struct rank_buffer {
  const void* input;  ///< nullptr: an output
  std::size_t bytes;
  unsigned char poison;
};
template <class T>
rank_buffer input_of(const std::vector<T>& v) {
  return {v.data(), v.size() * sizeof(T), 0};
}
rank_buffer output_of(std::size_t bytes, unsigned char poison) { return {nullptr, bytes, poison}; }

/// One collective on n GPU ranks (threads sharing this GPU) over Transport. Rank r's device buffers are
/// `buffers(r)`; `call(comm, dev, stream, &why)` launches the collective on them (dev[k]: buffer k) and returns its
/// status. Keeps the harness rule: buffers allocated and inputs staged in pinned memory before a barrier, every
/// copy async on the rank's stream after it. Returns, per rank, the bytes of each output buffer in order; a rank's
/// failure (status, CUDA error, health) is a test failure.
template <class Transport, class Buffers, class Call>
std::vector<std::vector<std::vector<std::uint8_t>>> on_gpu_ranks(int n, const options& o, Buffers buffers, Call call) {
  std::vector<std::vector<std::vector<std::uint8_t>>> outputs(n);
  gtest::rank_errors errors;
  host::spawn_ranks(n, [&](bootstrap::in_process& b) {
    const int r = b.rank();
    gpu::communicator<Transport> comm(b, o);
    gtest::gpu_rank g;
    const std::vector<rank_buffer> spec = buffers(r);
    std::vector<std::unique_ptr<dev_bytes>> dev;
    std::vector<std::unique_ptr<gtest::pinned<std::uint8_t>>> host;
    std::vector<void*> d;
    for (const rank_buffer& x : spec) {
      dev.push_back(std::make_unique<dev_bytes>(x.bytes));
      host.push_back(std::make_unique<gtest::pinned<std::uint8_t>>(x.bytes));
      if (x.input) std::memcpy(host.back()->p, x.input, x.bytes);
      d.push_back(dev.back()->p);
    }
    cudaDeviceSynchronize();
    b.barrier();  // no device-synchronising call from here on
    for (std::size_t k = 0; k < spec.size(); ++k)
      if (spec[k].input) cudaMemcpyAsync(d[k], host[k]->p, spec[k].bytes, cudaMemcpyHostToDevice, g.stream);
      else cudaMemsetAsync(d[k], spec[k].poison, spec[k].bytes, g.stream);
    std::string why;
    const status s = call(comm, d.data(), g.stream, &why);
    for (std::size_t k = 0; k < spec.size(); ++k)
      if (!spec[k].input) cudaMemcpyAsync(host[k]->p, d[k], spec[k].bytes, cudaMemcpyDeviceToHost, g.stream);
    errors.finish(r, comm, g.stream, s, why);
    for (std::size_t k = 0; k < spec.size(); ++k)
      if (!spec[k].input) outputs[r].emplace_back(host[k]->p, host[k]->p + spec[k].bytes);
    b.barrier();
  });
  errors.report();
  return outputs;
}

/// CHECKs that a GPU rank's output holds the host executor's `bytes` bytes at `want`.
void check_bytes(const std::vector<std::uint8_t>& got, const void* want, std::size_t bytes, const std::string& what) {
  const long long d = first_diff(got.data(), want, bytes);
  CHECK_MESSAGE(d < 0, what << " differs from the host executor first at byte " << d);
}

/// One compressed all-reduce of `count` bf16 per rank on the GPU (Transport) and on the host executor: every GPU
/// rank's output must equal the host's rank-0 output byte for byte.
template <class Transport>
void wire_case(int n, std::size_t count, std::uint32_t seed) {
  const options o = nvfp4_options(std::max<std::size_t>(count * 2, 4096));
  std::vector<std::vector<bf16>> in(n), host_out(n, std::vector<bf16>(count));
  for (int r = 0; r < n; ++r) in[r] = random_bf16(count, seed + r, 1.0f + r);
  on_host_ranks(n, o, [&](auto& c, int r) { return c.all_reduce_fp4(in[r].data(), host_out[r].data(), count); });
  const auto got = on_gpu_ranks<Transport>(
      n, o, [&](int r) { return std::vector{input_of(in[r]), output_of(count * 2, 0xff)}; },
      [&](auto& comm, void* const* d, cudaStream_t st, std::string* why) {
        return gpu::all_reduce_fp4(comm, as<bf16>(d[0]), as<bf16>(d[1]), count, st, why);
      });
  for (int r = 0; r < n; ++r) {
    const auto* gpu_out = reinterpret_cast<const bf16*>(got[r][0].data());
    const long long d = first_diff(gpu_out, host_out[0].data(), count * 2);
    CHECK_MESSAGE(d < 0, Transport::name << " n=" << n << " count=" << count << ": GPU rank " << r
                                         << " differs from the host executor first at element " << d / 2 << ": GPU "
                                         << (d >= 0 ? __bfloat162float(gpu_out[d / 2]) : 0.f) << " host "
                                         << (d >= 0 ? __bfloat162float(host_out[0][d / 2]) : 0.f));
  }
}

struct epi_shape {
  std::size_t rows, cols;
  bool residual, residual_out, norm, weight;
  fp4::sf_layout layout;
};

/// The quantizing all-reduce on the GPU vs the host executor, and the standalone epilogue kernel (n = 1) vs the
/// host executor at one rank.
template <class Transport>
void epilogue_case(int n, const epi_shape& c, std::uint32_t seed) {
  const std::size_t count = c.rows * c.cols, sfb = fp4::sf_bytes(c.layout, c.rows, c.cols);
  const options o = nvfp4_options(count * 2);
  const epi_inputs inputs = make_epi_inputs(n, count, c.cols, seed);
  const std::vector<std::vector<bf16>>& in = inputs.in;
  const std::vector<bf16> &res = inputs.res, &w = inputs.w;
  const float gs = 448.0f * 6.0f / (c.norm ? 8.0f : 6.0f * std::sqrt(float(n)));
  auto make_epi = [&](bf16* rout, std::uint8_t* data, std::uint8_t* sc, const bf16* resp, const bf16* wp) {
    return algorithm::nvfp4_epilogue<bf16>{.rows = c.rows, .cols = c.cols, .residual = c.residual ? resp : nullptr,
                                           .residual_out = c.residual_out ? rout : nullptr, .rms_norm = c.norm,
                                           .weight = c.weight ? wp : nullptr, .epsilon = 1e-6f, .global_scale = gs,
                                           .out_data = data, .out_scales = sc, .layout = c.layout};
  };
  struct outputs {
    std::vector<std::uint8_t> data, sc;
    std::vector<bf16> rout;
  };
  std::vector<outputs> host_out(n, outputs{std::vector<std::uint8_t>(count / 2, 0xcd), std::vector<std::uint8_t>(sfb, 0xcd),
                                           std::vector<bf16>(count)});
  on_host_ranks(n, o, [&](auto& comm, int r) {
    auto& ho = host_out[r];
    return comm.all_reduce_quantize(in[r].data(), make_epi(ho.rout.data(), ho.data.data(), ho.sc.data(), res.data(), w.data()));
  });
  // device buffers: in, res, w; outputs 0: residual out, 1: codes, 2: scales
  const auto got = on_gpu_ranks<Transport>(
      n, o,
      [&](int r) {
        return std::vector{input_of(in[r]), input_of(res), input_of(w), output_of(count * 2, 0),
                           output_of(count / 2, 0xcd), output_of(sfb, 0xcd)};
      },
      [&](auto& comm, void* const* d, cudaStream_t st, std::string* why) {
        const auto e = make_epi(as<bf16>(d[3]), as<std::uint8_t>(d[4]), as<std::uint8_t>(d[5]), as<bf16>(d[1]), as<bf16>(d[2]));
        return gpu::all_reduce_quantize(comm, as<bf16>(d[0]), e, st, why);
      });
  const std::string where = std::string(Transport::name) + " n=" + std::to_string(n) + " rows=" + std::to_string(c.rows) +
                            " cols=" + std::to_string(c.cols) + (c.norm ? " rmsnorm" : "") + (c.residual ? " residual" : "") +
                            (c.layout == fp4::sf_layout::swizzled_128x4 ? " swizzled" : " linear");
  for (int r = 0; r < n; ++r) {
    const std::string rank = where + ": rank " + std::to_string(r);
    check_bytes(got[r][1], host_out[0].data.data(), count / 2, rank + " codes");
    check_bytes(got[r][2], host_out[0].sc.data(), sfb, rank + " scales");
    if (c.residual_out) check_bytes(got[r][0], host_out[0].rout.data(), count * 2, rank + " residual output");
  }
  if (n == 1) {  // the standalone kernels the benchmark measures: many CTAs, same bytes
    gtest::dev_buf<bf16> din(count), dres(count), dw(c.cols), drout(count);
    dev_bytes dd(count / 2), ds(sfb);
    CUDA_REQUIRE(cudaMemcpy(din.p, in[0].data(), count * 2, cudaMemcpyHostToDevice));
    CUDA_REQUIRE(cudaMemcpy(dres.p, res.data(), count * 2, cudaMemcpyHostToDevice));
    CUDA_REQUIRE(cudaMemcpy(dw.p, w.data(), c.cols * 2, cudaMemcpyHostToDevice));
    const auto e = make_epi(drout.p, dd.p, ds.p, dres.p, dw.p);
    std::vector<std::uint8_t> d(count / 2), s(sfb);
    // `launch()` starts a kernel writing dd and ds (poisoned first) and returns its launch error
    auto check_kernel = [&](const std::string& label, auto launch) {
      CUDA_REQUIRE(cudaMemset(dd.p, 0xcd, count / 2));
      CUDA_REQUIRE(cudaMemset(ds.p, 0xcd, sfb));
      CUDA_REQUIRE(launch());
      CUDA_REQUIRE(cudaDeviceSynchronize());
      CUDA_REQUIRE(cudaMemcpy(d.data(), dd.p, count / 2, cudaMemcpyDeviceToHost));
      CUDA_REQUIRE(cudaMemcpy(s.data(), ds.p, sfb, cudaMemcpyDeviceToHost));
      CHECK_MESSAGE(first_diff(d.data(), host_out[0].data.data(), count / 2) < 0, where << ": " << label << " codes differ");
      CHECK_MESSAGE(first_diff(s.data(), host_out[0].sc.data(), sfb) < 0, where << ": " << label << " scales differ");
    };
    check_kernel("standalone kernel", [&] {
      kernel::nvfp4_quantize_rows<bf16><<<264, 256>>>(din.p, e);
      return cudaGetLastError();
    });
    // the lean kernel (no RMSNorm path) as the benchmark's plain variants launch it: 1, 2 and 4 blocks in flight
    // per thread, grids that leave remainders
    auto lean = [&](auto kernel_fn, int in_flight, int grid) {
      check_kernel("lean kernel (" + std::to_string(in_flight) + " in flight, grid " + std::to_string(grid) + ")", [&] {
        kernel_fn<<<grid, 256>>>(din.p, e);
        return cudaGetLastError();
      });
    };
    if (!c.norm) {
      lean(kernel::nvfp4_quantize_rows<bf16, false, 1>, 1, 528);
      lean(kernel::nvfp4_quantize_rows<bf16, false, 2>, 2, 263);
      lean(kernel::nvfp4_quantize_rows<bf16, false, 4>, 4, 1056);
      lean(kernel::nvfp4_quantize_rows<bf16, false, 4>, 4, 7);
      if (c.cols % 16 == 0) {  // the whole-blocks kernel (launch_nvfp4_quantize_rows' choice without residual_out)
        auto e2 = e;
        e2.residual_out = nullptr;
        e2.norm_out = nullptr;
        // grids: more threads than blocks, a few threads looping over many blocks, a thread per block and more
        for (int ahead : {0, 1})
          for (int grid : {1056, 5, 1})
            check_kernel("whole-blocks kernel (ahead " + std::to_string(ahead) + ", grid " + std::to_string(grid) + ")", [&] {
              if (e2.residual && ahead) kernel::nvfp4_quantize_whole_blocks<bf16, true, true><<<grid, 256>>>(din.p, e2);
              else if (e2.residual) kernel::nvfp4_quantize_whole_blocks<bf16, true><<<grid, 256>>>(din.p, e2);
              else if (ahead) kernel::nvfp4_quantize_whole_blocks<bf16, false, true><<<grid, 256>>>(din.p, e2);
              else kernel::nvfp4_quantize_whole_blocks<bf16, false><<<grid, 256>>>(din.p, e2);
              return cudaGetLastError();
            });
        // the launcher with the case's own epilogue
        check_kernel("launcher", [&] { return kernel::launch_nvfp4_quantize_rows(din.p, e); });
        if (!e.residual_out && !e.norm_out) {  // the launcher with an input 2 bytes off 16-byte alignment: no loads ahead
          dev_bytes dmis(count * 2 + 16);
          bf16* mis = dmis.as<bf16>() + 1;
          CUDA_REQUIRE(cudaMemcpy(mis, din.p, count * 2, cudaMemcpyDeviceToDevice));
          check_kernel("launcher (misaligned input)",
                       [&] { return kernel::launch_nvfp4_quantize_rows(static_cast<const bf16*>(mis), e); });
        }
      }
    }
  }
}

template <class Transport>
void gather_case(int n, std::size_t rows, std::size_t cols, fp4::sf_layout in_l, fp4::sf_layout out_l, std::uint32_t seed) {
  const std::size_t kb = cols / 16, db = rows * cols / 2, sfi = fp4::sf_bytes(in_l, rows, cols);
  const std::size_t odb = n * db, osf = fp4::sf_bytes(out_l, n * rows, cols);
  const options o = nvfp4_options(rows * cols);
  std::vector<std::vector<std::uint8_t>> data(n), sc(n), host_d(n, std::vector<std::uint8_t>(odb, 0xcd)),
      host_s(n, std::vector<std::uint8_t>(osf, 0xcd));
  for (int q = 0; q < n; ++q) {
    std::mt19937 g(seed + q);
    std::normal_distribution<float> nd;
    std::vector<float> x(rows * cols);
    for (auto& v : x) v = nd(g);
    data[q].resize(db);
    std::vector<std::uint8_t> lin(rows * kb);
    fp4::quantize(x.data(), x.size(), 500.0f, data[q].data(), lin.data());
    sc[q].assign(sfi, 0);
    for (std::size_t m = 0; m < rows; ++m)
      for (std::size_t k = 0; k < kb; ++k) sc[q][fp4::sf_offset(in_l, m, k, cols)] = lin[m * kb + k];
  }
  auto make = [&](const std::uint8_t* d, const std::uint8_t* s, std::uint8_t* od, std::uint8_t* os) {
    return algorithm::nvfp4_gather{.data = d, .scales = s, .in_layout = in_l, .rows = rows, .cols = cols,
                                   .out_data = od, .out_scales = os, .out_layout = out_l};
  };
  on_host_ranks(n, o, [&](auto& comm, int r) {
    return comm.all_gather_nvfp4(make(data[r].data(), sc[r].data(), host_d[r].data(), host_s[r].data()));
  });
  const auto got = on_gpu_ranks<Transport>(
      n, o, [&](int r) { return std::vector{input_of(data[r]), input_of(sc[r]), output_of(odb, 0xcd), output_of(osf, 0xcd)}; },
      [&](auto& comm, void* const* d, cudaStream_t st, std::string* why) {
        return gpu::all_gather_nvfp4(
            comm, make(as<std::uint8_t>(d[0]), as<std::uint8_t>(d[1]), as<std::uint8_t>(d[2]), as<std::uint8_t>(d[3])), st, why);
      });
  for (int r = 0; r < n; ++r) {
    const std::string rank = std::string(Transport::name) + " all-gather n=" + std::to_string(n) + ": rank " + std::to_string(r);
    check_bytes(got[r][0], host_d[0].data(), odb, rank + " codes");
    check_bytes(got[r][1], host_s[0].data(), osf, rank + " scales");
  }
}

/// Fused all-reduce + residual + RMSNorm with a bf16 output (norm_out, no NVFP4): GPU ranks vs the host executor.
template <class Transport>
void norm_case(int n, std::size_t rows, std::size_t cols, std::uint32_t seed) {
  const std::size_t count = rows * cols;
  const options o = nvfp4_options(count * 2);
  const epi_inputs inputs = make_epi_inputs(n, count, cols, seed);
  const std::vector<std::vector<bf16>>& in = inputs.in;
  const std::vector<bf16> &res = inputs.res, &w = inputs.w;
  auto make_epi = [&](bf16* y, bf16* rout, const bf16* resp, const bf16* wp) {
    return algorithm::nvfp4_epilogue<bf16>{.rows = rows, .cols = cols, .residual = resp, .residual_out = rout,
                                           .rms_norm = true, .weight = wp, .epsilon = 1e-6f, .norm_out = y};
  };
  std::vector<std::vector<bf16>> hy(n, std::vector<bf16>(count)), hr(n, std::vector<bf16>(count));
  on_host_ranks(n, o, [&](auto& comm, int r) {
    return comm.all_reduce_quantize(in[r].data(), make_epi(hy[r].data(), hr[r].data(), res.data(), w.data()));
  });
  // device buffers: in, res, w; outputs 0: normalised output, 1: residual output
  const auto got = on_gpu_ranks<Transport>(
      n, o,
      [&](int r) {
        return std::vector{input_of(in[r]), input_of(res), input_of(w), output_of(count * 2, 0xcd), output_of(count * 2, 0xcd)};
      },
      [&](auto& comm, void* const* d, cudaStream_t st, std::string* why) {
        return gpu::all_reduce_quantize(comm, as<bf16>(d[0]), make_epi(as<bf16>(d[3]), as<bf16>(d[4]), as<bf16>(d[1]), as<bf16>(d[2])),
                                        st, why);
      });
  for (int r = 0; r < n; ++r) {
    const std::string rank = std::string(Transport::name) + " n=" + std::to_string(n) + " rows=" + std::to_string(rows) +
                             " cols=" + std::to_string(cols) + ": rank " + std::to_string(r);
    check_bytes(got[r][0], hy[0].data(), count * 2, rank + " normalised output");
    check_bytes(got[r][1], hr[0].data(), count * 2, rank + " residual output");
  }
}

}  // namespace

TEST_SUITE("gpu.nvfp4.collectives") {
  TEST_CASE("NVFP4-wire all-reduce: every GPU rank returns the host executor's bytes (direct and proxy mode)") {
    for (int n : {2, 4})
      for (std::size_t count : {1ul, 17ul, 4099ul, 24576ul, (1ul << 20) + 5}) {
        wire_case<transport::cuda_loopback>(n, count, 10 + n);
        wire_case<transport::cuda_loopback_proxy>(n, count, 20 + n);
      }
  }
  TEST_CASE("quantizing epilogue (sum, residual, RMSNorm, NVFP4, both scale layouts) equals the host executor") {
    for (int n : {1, 2, 4}) {
      epilogue_case<transport::cuda_loopback>(n, {130, 2048, true, true, true, true, fp4::sf_layout::swizzled_128x4}, 30 + n);
      epilogue_case<transport::cuda_loopback>(n, {300, 4096, true, true, false, false, fp4::sf_layout::linear}, 40 + n);
      epilogue_case<transport::cuda_loopback>(n, {7, 80, false, false, true, false, fp4::sf_layout::swizzled_128x4}, 50 + n);
    }
    // shapes the launcher gives the whole-blocks kernel (swizzled, with and without a residual, rows not a
    // multiple of 128: both padding loops)
    for (int n : {1, 2}) {
      epilogue_case<transport::cuda_loopback>(n, {256, 2048, false, false, false, false, fp4::sf_layout::swizzled_128x4}, 70 + n);
      epilogue_case<transport::cuda_loopback>(n, {130, 80, true, false, false, false, fp4::sf_layout::swizzled_128x4}, 80 + n);
    }
    epilogue_case<transport::cuda_loopback_proxy>(2, {64, 1024, true, true, true, true, fp4::sf_layout::swizzled_128x4}, 60);
  }
  TEST_CASE("fused all-reduce + residual + RMSNorm with bf16 output (norm_out) equals the host executor on every rank") {
    for (int n : {2, 4, 8}) norm_case<transport::cuda_loopback>(n, 64, 4096, 110 + n);
    norm_case<transport::cuda_loopback>(4, 3, 1024, 120);
    norm_case<transport::cuda_loopback_proxy>(4, 32, 2048, 130);
  }
  TEST_CASE("NVFP4 all-gather: rows concatenated and scales re-laid out exactly as on the host") {
    for (int n : {2, 4}) {
      gather_case<transport::cuda_loopback>(n, 300, 4096, fp4::sf_layout::linear, fp4::sf_layout::swizzled_128x4, 70 + n);
      gather_case<transport::cuda_loopback>(n, 45, 96, fp4::sf_layout::swizzled_128x4, fp4::sf_layout::linear, 80 + n);
    }
    gather_case<transport::cuda_loopback_proxy>(2, 64, 512, fp4::sf_layout::linear, fp4::sf_layout::swizzled_128x4, 90);
  }
}

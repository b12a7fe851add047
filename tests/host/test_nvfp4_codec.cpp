// tests/host/test_nvfp4_codec.cpp — the NVFP4 codec (reduce/nvfp4.hpp) against a scalar reference written from
// the format definition (REFERENCE.md, NVFP4): E2M1 = {0, 0.5, 1, 1.5, 2, 3, 4, 6} x sign, round to nearest with
// ties to the even code, saturating; E4M3 = bias 7, 3 mantissa bits, subnormals down to 2^-9, max 448, NaN 0x7f,
// round to nearest even, saturating. The reference uses neither cuda_fp4.h nor cuda_fp8.h.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <rocenante/reduce/nvfp4.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <vector>

namespace fp4 = rocenante::reduce::nvfp4;

namespace {

// --- scalar reference ------------------------------------------------------------------------------------------

const double e2m1_grid[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

/// E2M1 code of v: nearest grid value, ties to the even code, |v| > 6 -> 6, sign bit kept (also for zero).
std::uint8_t ref_e2m1(double v) {
  const std::uint8_t sign = std::signbit(v) ? 8 : 0;
  const double a = std::fabs(v);
  if (a >= 6.0) return sign | 7;
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const double d = std::fabs(a - e2m1_grid[c]), db = std::fabs(a - e2m1_grid[best]);
    if (d < db || (d == db && (c % 2 == 0) && (best % 2 == 1))) best = c;
  }
  return sign | static_cast<std::uint8_t>(best);
}

double ref_e2m1_value(std::uint8_t code) { return (code & 8 ? -1.0 : 1.0) * e2m1_grid[code & 7]; }

double ref_e4m3_value(std::uint8_t code) {
  const int s = code >> 7, e = (code >> 3) & 0xf, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

/// E4M3 code of v >= 0 (NaN -> 0x7f, > 448 -> 448): nearest of the 127 finite non-negative values, ties to even.
std::uint8_t ref_e4m3(double v) {
  if (std::isnan(v)) return 0x7f;
  if (v >= 448.0) return 0x7e;
  std::uint8_t best = 0;
  for (int c = 1; c <= 0x7e; ++c) {
    const double d = std::fabs(v - ref_e4m3_value(static_cast<std::uint8_t>(c)));
    const double db = std::fabs(v - ref_e4m3_value(best));
    if (d < db || (d == db && (c % 2 == 0))) best = static_cast<std::uint8_t>(c);
  }
  return best;
}

struct ref_block {
  std::uint8_t sf;
  std::uint8_t codes[16];
};

/// The recipe, step by step in float as the format definition writes it.
ref_block ref_encode(const float* x, int valid, float gs) {
  float amax = 0.0f;
  bool nan = false;
  for (int i = 0; i < valid; ++i) {
    if (std::isnan(x[i])) nan = true;
    amax = std::max(amax, std::fabs(x[i]));
  }
  ref_block b{};
  const float target = (gs * amax) / 6.0f;
  b.sf = nan ? 0x7f : ref_e4m3(target);
  const double s = ref_e4m3_value(b.sf);
  if (nan || s == 0.0) return b;
  const float m = gs / static_cast<float>(s);
  for (int i = 0; i < valid; ++i) b.codes[i] = ref_e2m1(static_cast<double>(x[i] * m));
  return b;
}

std::uint8_t code_at(const std::vector<std::uint8_t>& data, std::size_t i) {
  return i % 2 ? data[i / 2] >> 4 : data[i / 2] & 0xf;
}

/// Quantize with the library and compare every code and scale with the reference; also the decode.
void check_against_reference(const std::vector<float>& x, float gs) {
  const std::size_t count = x.size();
  std::vector<std::uint8_t> data(fp4::data_bytes(count), 0xaa), scales(fp4::blocks(count), 0xaa);
  fp4::quantize(x.data(), count, gs, data.data(), scales.data());
  std::vector<float> back(count, -1.0f);
  fp4::dequantize(data.data(), scales.data(), count, gs, back.data());
  int bad = 0;
  for (std::size_t b = 0; b < fp4::blocks(count); ++b) {
    const int valid = static_cast<int>(std::min<std::size_t>(16, count - b * 16));
    const ref_block r = ref_encode(x.data() + b * 16, valid, gs);
    if (scales[b] != r.sf && bad++ < 5) FAIL_CHECK("block " << b << ": scale 0x" << std::hex << int(scales[b]) << " != reference 0x" << int(r.sf));
    for (int i = 0; i < valid; ++i) {
      const std::size_t e = b * 16 + i;
      const std::uint8_t c = code_at(data, e);
      if (c != r.codes[i] && bad++ < 5)
        FAIL_CHECK("element " << e << " x=" << x[e] << " gs=" << gs << ": code " << int(c) << " != reference " << int(r.codes[i]));
      const double d = ref_e4m3_value(r.sf) / gs;  // reference decode: (e2m1 * sf) / gs, within one rounding
      const double want = ref_e2m1_value(r.codes[i]) * static_cast<float>(ref_e4m3_value(r.sf) / gs);
      if (std::isnan(d)) {
        if (!std::isnan(back[e]) && bad++ < 5) FAIL_CHECK("element " << e << " in a NaN block decoded to " << back[e]);
      } else if (static_cast<float>(want) != back[e] && bad++ < 5) {
        FAIL_CHECK("element " << e << ": decoded " << back[e] << " != " << want);
      }
    }
  }
  if (count % 2) CHECK((data.back() >> 4) == 0);
  CHECK(bad == 0);
}

std::vector<float> gaussian(std::size_t n, std::uint32_t seed, float sigma = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

}  // namespace

TEST_SUITE("host.nvfp4.codec") {
  TEST_CASE("E2M1 and E4M3 decode every code to the value the format defines") {
    for (int c = 0; c < 16; ++c) CHECK(fp4::e2m1_to_float(static_cast<std::uint8_t>(c)) == ref_e2m1_value(static_cast<std::uint8_t>(c)));
    for (int c = 0; c < 256; ++c) {
      const double want = ref_e4m3_value(static_cast<std::uint8_t>(c));
      const float got = fp4::e4m3_to_float(static_cast<std::uint8_t>(c));
      if (std::isnan(want)) CHECK(std::isnan(got));
      else CHECK(got == want);
    }
  }

  TEST_CASE("E2M1 and E4M3 rounding match the reference on grid points, midpoints and random values") {
    std::vector<float> probes;
    for (int c = 0; c < 8; ++c) {
      const float g = static_cast<float>(e2m1_grid[c]);
      probes.insert(probes.end(), {g, -g, std::nextafter(g, 10.0f), std::nextafter(g, -10.0f)});
      if (c < 7) {
        const float mid = static_cast<float>((e2m1_grid[c] + e2m1_grid[c + 1]) / 2);
        probes.insert(probes.end(), {mid, -mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 10.0f)});
      }
    }
    probes.insert(probes.end(), {7.0f, -100.0f, 1e30f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), 1e-30f, -1e-30f});
    std::mt19937 g(7);
    std::uniform_real_distribution<float> u(-7.0f, 7.0f);
    for (int i = 0; i < 20000; ++i) probes.push_back(u(g));
    int bad = 0;
    for (float p : probes)
      if (fp4::e2m1(p) != ref_e2m1(p) && bad++ < 5) FAIL_CHECK("e2m1(" << p << ") = " << int(fp4::e2m1(p)) << ", reference " << int(ref_e2m1(p)));
    CHECK(bad == 0);
    std::vector<float> sp;
    for (int c = 0; c <= 0x7e; ++c) {
      const float v = static_cast<float>(ref_e4m3_value(static_cast<std::uint8_t>(c)));
      sp.insert(sp.end(), {v, std::nextafter(v, 0.0f), std::nextafter(v, 1000.0f)});
      if (c < 0x7e) sp.push_back(static_cast<float>((ref_e4m3_value(static_cast<std::uint8_t>(c)) + ref_e4m3_value(static_cast<std::uint8_t>(c + 1))) / 2));
    }
    sp.insert(sp.end(), {464.0f, 500.0f, 1e38f, std::numeric_limits<float>::infinity(), 1e-5f, 0.0f});
    std::uniform_real_distribution<float> u2(0.0f, 460.0f);
    for (int i = 0; i < 20000; ++i) sp.push_back(u2(g));
    for (float p : sp)
      if (fp4::e4m3(p) != ref_e4m3(p) && bad++ < 5) FAIL_CHECK("e4m3(" << p << ") = " << int(fp4::e4m3(p)) << ", reference " << int(ref_e4m3(p)));
    CHECK(bad == 0);
    CHECK(fp4::e4m3(std::numeric_limits<float>::quiet_NaN()) == 0x7f);
  }

  TEST_CASE("the sm_90 device conversions (comparisons, rounding additions, bits) equal CUDA's conversions for every step of E2M1") {
    // Both roundings are monotone step functions of |x| with the sign bit kept; equal at every step (the grid
    // midpoints), at the float neighbours of every step and of every grid value, and at the extremes, they are
    // equal everywhere. NaN is excluded: the codec never converts one (a NaN block is written as scale 0x7f).
    std::vector<float> probes = {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-30f, -1e-30f, 6.0f, 7.0f, 1e30f, 3.4028235e38f,
                                 std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
    for (double p : {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0}) {
      for (float s : {1.0f, -1.0f}) {
        float v = static_cast<float>(p) * s;
        probes.push_back(v);
        float up = v, down = v;
        for (int k = 0; k < 4; ++k) {
          up = std::nextafter(up, 100.0f * s);
          down = std::nextafter(down, 0.0f);
          probes.push_back(up);
          probes.push_back(down);
        }
      }
    }
    std::mt19937 g(3);
    std::uniform_real_distribution<float> u(-8.0f, 8.0f);
    for (int i = 0; i < 1000000; ++i) probes.push_back(u(g));
    int bad = 0;
    for (float p : probes) {
      const auto cuda = static_cast<std::uint8_t>(__nv_cvt_float_to_fp4(p, __NV_E2M1, cudaRoundNearest) & 0xf);
      if (fp4::detail::e2m1_by_compare(p) != cuda && bad++ < 5)
        FAIL_CHECK("x = " << p << ": compare " << int(fp4::detail::e2m1_by_compare(p)) << " CUDA " << int(cuda));
      // the magnitude by rounding additions (the sm_90 encoder's whole-block path), sign kept apart
      std::uint32_t pb;
      std::memcpy(&pb, &p, 4);
      const std::uint32_t by_add = fp4::detail::e2m1_magnitude(p) | ((pb >> 28) & 8u);
      if (by_add != cuda && bad++ < 5) FAIL_CHECK("x = " << p << ": by addition " << by_add << " CUDA " << int(cuda));
    }
    CHECK(bad == 0);
    // and every 61st non-negative float up to 8 (about 18 million), against the comparisons
    int bad_sweep = 0;
    for (std::uint32_t b = 0; b <= 0x41000000u; b += 61) {
      float x;
      std::memcpy(&x, &b, 4);
      if (fp4::detail::e2m1_magnitude(x) != fp4::detail::e2m1_by_compare(x) && bad_sweep++ < 5)
        FAIL_CHECK("x = " << x << " (bits " << b << "): by addition " << fp4::detail::e2m1_magnitude(x) << ", compare "
                          << int(fp4::detail::e2m1_by_compare(x)));
    }
    CHECK(bad_sweep == 0);
    for (int c = 0; c < 16; ++c) {
      const __half_raw h = __nv_cvt_fp4_to_halfraw(static_cast<__nv_fp4_storage_t>(c), __NV_E2M1);
      const float cuda = __half2float(__half(h));
      const float mine = fp4::detail::e2m1_by_bits(static_cast<std::uint8_t>(c));
      CHECK(std::memcmp(&cuda, &mine, 4) == 0);
    }
  }

  TEST_CASE("random Gaussian, uniform and wide-range inputs quantize bit-exactly like the reference") {
    for (std::size_t count : {16ul, 4096ul, 4099ul, 65536ul}) {
      CAPTURE(count);
      const auto x = gaussian(count, static_cast<std::uint32_t>(count));
      check_against_reference(x, fp4::global_scale_for(fp4::amax_finite(x.data(), count)));
      check_against_reference(x, 1.0f);
      check_against_reference(x, 37.5f);
    }
    std::mt19937 g(11);
    std::uniform_real_distribution<float> ex(-20.0f, 20.0f);
    std::vector<float> wide(8192);
    for (auto& v : wide) v = (g() & 1 ? 1.0f : -1.0f) * std::exp2(ex(g));
    check_against_reference(wide, fp4::global_scale_for(fp4::amax_finite(wide.data(), wide.size())));
    check_against_reference(wide, 3e-3f);
  }

  TEST_CASE("counts not a multiple of 16 quantize their partial last block and leave padding nibbles zero") {
    for (std::size_t count = 1; count <= 70; ++count) {
      CAPTURE(count);
      const auto x = gaussian(count, 100 + static_cast<std::uint32_t>(count), 3.0f);
      check_against_reference(x, fp4::global_scale_for(fp4::amax_finite(x.data(), count)));
      std::vector<std::uint8_t> data(fp4::data_bytes(count) + 1, 0x5a), sc(fp4::blocks(count) + 1, 0x5a);
      fp4::quantize(x.data(), count, 1.0f, data.data(), sc.data());
      CHECK(data.back() == 0x5a);  // nothing written past data_bytes(count)
      CHECK(sc.back() == 0x5a);
    }
  }

  TEST_CASE("an all-zero block gets scale 0 and codes 0 and decodes to 0, beside non-zero blocks") {
    auto x = gaussian(64, 5);
    for (int i = 16; i < 32; ++i) x[i] = 0.0f;
    for (int i = 48; i < 64; ++i) x[i] = 1e-30f;  // underflows the E4M3 scale at gs = 1: treated like zero
    std::vector<std::uint8_t> data(32), sc(4);
    fp4::quantize(x.data(), 64, 1.0f, data.data(), sc.data());
    CHECK(sc[1] == 0);
    CHECK(sc[3] == 0);
    for (int j = 8; j < 16; ++j) CHECK(data[j] == 0);
    std::vector<float> back(64);
    fp4::dequantize(data.data(), sc.data(), 64, 1.0f, back.data());
    for (int i = 16; i < 32; ++i) CHECK(back[i] == 0.0f);
    check_against_reference(x, 1.0f);
  }

  TEST_CASE("values beyond 6 x scale saturate to code +-6 and decode to +-6*448/gs") {
    std::vector<float> x(32);
    for (int i = 0; i < 32; ++i) x[i] = (i % 2 ? -1.0f : 1.0f) * (1000.0f + i);
    const float gs = 10.0f;  // gs * amax / 6 ~ 1700 > 448: the scale saturates at 448
    std::vector<std::uint8_t> data(16), sc(2);
    fp4::quantize(x.data(), 32, gs, data.data(), sc.data());
    CHECK(sc[0] == 0x7e);
    CHECK(sc[1] == 0x7e);
    for (int i = 0; i < 32; ++i) CHECK(code_at(data, i) == (i % 2 ? 0xf : 0x7));
    std::vector<float> back(32);
    fp4::dequantize(data.data(), sc.data(), 32, gs, back.data());
    for (int i = 0; i < 32; ++i) CHECK(back[i] == (i % 2 ? -1.0f : 1.0f) * 6.0f * (448.0f / gs));
    check_against_reference(x, gs);
  }

  TEST_CASE("NaN poisons its block (scale 0x7f, decodes NaN); Inf saturates; other blocks are untouched") {
    auto x = gaussian(48, 9);
    x[3] = std::numeric_limits<float>::quiet_NaN();
    x[20] = std::numeric_limits<float>::infinity();
    x[21] = -2.0f;
    const float gs = fp4::global_scale_for(fp4::amax_finite(x.data(), x.size()));
    CHECK(std::isfinite(gs));
    std::vector<std::uint8_t> data(24), sc(3);
    fp4::quantize(x.data(), 48, gs, data.data(), sc.data());
    CHECK(sc[0] == fp4::nan_scale);
    for (int j = 0; j < 8; ++j) CHECK(data[j] == 0);
    CHECK(sc[1] == 0x7e);
    CHECK(code_at(data, 20) == 0x7);
    std::vector<float> back(48);
    fp4::dequantize(data.data(), sc.data(), 48, gs, back.data());
    for (int i = 0; i < 16; ++i) CHECK(std::isnan(back[i]));
    CHECK(back[20] == 6.0f * (448.0f / gs));
    for (int i = 32; i < 48; ++i) CHECK(std::isfinite(back[i]));
    check_against_reference(x, gs);
    // a NaN global-scale input (amax) never yields a NaN or zero global scale
    CHECK(fp4::global_scale_for(std::numeric_limits<float>::quiet_NaN()) == 1.0f);
    CHECK(fp4::global_scale_for(0.0f) == 1.0f);
    CHECK(fp4::global_scale_for(std::numeric_limits<float>::infinity()) == 1.0f);
    CHECK(std::isfinite(fp4::global_scale_for(1e-44f)));
  }

  TEST_CASE("quantize then dequantize stays within half an E2M1 step of each block's scale") {
    const auto x = gaussian(1 << 14, 21);
    const float gs = fp4::global_scale_for(fp4::amax_finite(x.data(), x.size()));
    std::vector<std::uint8_t> data(fp4::data_bytes(x.size())), sc(fp4::blocks(x.size()));
    fp4::quantize(x.data(), x.size(), gs, data.data(), sc.data());
    std::vector<float> back(x.size());
    fp4::dequantize(data.data(), sc.data(), x.size(), gs, back.data());
    for (std::size_t b = 0; b < sc.size(); ++b) {
      const double d = fp4::e4m3_to_float(sc[b]) / gs;
      for (int i = 0; i < 16; ++i) {
        const double err = std::fabs(back[b * 16 + i] - x[b * 16 + i]);
        // largest gap on the E2M1 grid is 2 (between 4 and 6): half of it, times the block factor, plus rounding
        if (err > 1.0 * d * 1.0001 + 1e-30) FAIL("block " << b << " element " << i << " error " << err << " > " << d);
      }
    }
  }
}

TEST_SUITE("host.nvfp4.layout") {
  TEST_CASE("the swizzled 128x4 offsets follow the cuBLAS formula and are a permutation of the padded array") {
    for (std::uint64_t rows : {1ull, 5ull, 128ull, 130ull, 300ull}) {
      for (std::uint64_t cols : {16ull, 64ull, 80ull, 256ull, 1040ull}) {
        CAPTURE(rows);
        CAPTURE(cols);
        const std::uint64_t kb = (cols + 15) / 16, kt = (kb + 3) / 4;
        const std::uint64_t size = fp4::sf_bytes(fp4::sf_layout::swizzled_128x4, rows, cols);
        CHECK(size == ((rows + 127) / 128) * 128 * kt * 4);
        std::set<std::uint64_t> seen;
        const std::uint64_t prow = (rows + 127) / 128 * 128;
        for (std::uint64_t m = 0; m < prow; ++m)
          for (std::uint64_t k = 0; k < kt * 4; ++k) {
            // written out from the documented layout: 128x4 tiles of 512 bytes, tiles row-major over
            // (row tile, k tile); inside a tile, [m%32][(m%128)/32][k%4]
            const std::uint64_t tile = (m / 128) * kt + k / 4;
            const std::uint64_t inner = ((m % 32) * 4 + (m % 128) / 32) * 4 + k % 4;
            const std::uint64_t off = fp4::sf_offset(fp4::sf_layout::swizzled_128x4, m, k, cols);
            if (off != tile * 512 + inner) FAIL("offset(" << m << "," << k << ") = " << off);
            seen.insert(off);
          }
        CHECK(seen.size() == size);
        CHECK(*seen.rbegin() == size - 1);
      }
    }
    CHECK(fp4::sf_offset(fp4::sf_layout::linear, 3, 2, 64) == 3 * 4 + 2);
    CHECK(fp4::sf_bytes(fp4::sf_layout::linear, 3, 64) == 12);
  }
}

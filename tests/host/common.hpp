// tests/host/common.hpp — helpers shared by the host test programs: element traits and conversions, seeded
// inputs exactly representable in T, the float64 reference with its tolerance, the bit-exact model of each
// algorithm's documented summation order, output poisoning, and a stopwatch. Included by one .cpp per program.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <rocenante/rocenante.hpp>

namespace rtest {

using namespace rocenante;
using algorithm::one_shot;
using algorithm::ring;
/// The host executor over the in-process transport: the communicator most host tests build.
using comm_t = host::communicator<transport::loopback>;

// --- element types ------------------------------------------------------------------------------------------

/// Binary format of T: precision p (significand bits, implicit bit included) and smallest normal exponent.
template <class T>
struct format;
template <>
struct format<float> {
  static constexpr int precision = 24, min_exponent = -126;
  static constexpr const char* name = "fp32";
};
template <>
struct format<__half> {
  static constexpr int precision = 11, min_exponent = -14;
  static constexpr const char* name = "fp16";
};
template <>
struct format<__nv_bfloat16> {
  static constexpr int precision = 8, min_exponent = -126;
  static constexpr const char* name = "bf16";
};

template <class T>
using sum_of = reduce::sum<T>;

template <class T>
float to_float(T v) {
  return sum_of<T>::to_accum(v);
}
/// Round-to-nearest-even conversion, the one the library uses for its single rounding.
template <class T>
T from_float(float f) {
  return sum_of<T>::from_accum(f);
}

/// Unit in the last place of T at magnitude |x| (subnormal spacing below the smallest normal).
template <class T>
double ulp(double x) {
  x = std::fabs(x);
  int e = format<T>::min_exponent;
  if (x != 0.0) {
    int fe = 0;
    std::frexp(x, &fe);  // x = m * 2^fe, m in [0.5, 1): x in [2^(fe-1), 2^fe)
    e = std::max(fe - 1, format<T>::min_exponent);
  }
  return std::ldexp(1.0, e - format<T>::precision + 1);
}

// --- inputs -------------------------------------------------------------------------------------------------

/// Seed for rank `rank` of case `case_id`: every rank draws its own stream, every run draws the same numbers.
inline std::uint32_t seed_for(int rank, std::uint64_t case_id) {
  std::seed_seq s{static_cast<std::uint32_t>(rank), static_cast<std::uint32_t>(case_id),
                  static_cast<std::uint32_t>(case_id >> 32), 0x5eedu};
  std::uint32_t out = 0;
  s.generate(&out, &out + 1);
  return out;
}

/// `count` values uniform in [-4, 4), each rounded to T once, so every value is exactly representable in T
/// and its float64 widening is exact. Mixed signs and full significands: fp sums are not exact, cancellation
/// happens.
template <class T>
std::vector<T> random_input(std::size_t count, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<T> v(count);
  for (auto& x : v) x = from_float<T>(dist(gen));
  return v;
}

/// Small integers in [-4, 4]: sums of up to 16 of them are exact in fp32, fp16 and bf16.
template <class T>
T small_int(std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  const std::uint64_t h = (a * 0x9e3779b97f4a7c15ull) ^ (b * 0xc2b2ae3d27d4eb4full) ^ (c * 0x165667b19e3779f9ull);
  return from_float<T>(static_cast<float>(static_cast<int>((h >> 29) % 9) - 4));
}

// --- outputs ------------------------------------------------------------------------------------------------

/// Elements past `count` in every output buffer; they must keep the poison pattern.
inline constexpr std::size_t guard_elems = 24;

/// Fill with 0xff bytes: NaN in fp32, fp16 and bf16, so an element the collective forgets to write fails the
/// tolerance check (NaN compares false) and the bit-exact check.
template <class T>
void poison(std::vector<T>& v) {
  std::memset(static_cast<void*>(v.data()), 0xff, v.size() * sizeof(T));
}
template <class T>
bool is_poison(const T& v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  return std::all_of(b, b + sizeof(T), [](unsigned char c) { return c == 0xff; });
}
template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// --- references ---------------------------------------------------------------------------------------------

/// Float64 reference and its tolerance for out[i] = sum over ranks of in_q[i].
///
/// Tolerance (per dtype T with precision p_T, u = 2^-24 the fp32 unit roundoff):
///   the inputs are exactly representable in T, hence in fp32; the library sums the n inputs in fp32 (n-1
///   roundings: |s32 - ref| <= (n-1) u S <= n u S with S = sum |x_i|) and rounds once to T (error at most
///   0.5 ulp_T(s32)). So
///       |out - ref| <= 0.5 ulp_T(|ref| + n u S) + n u S
///   where ulp_T is taken at |ref| + n u S, the largest magnitude s32 can have, so that a sum crossing a
///   binade boundary is covered. fp32: ulp = 2^-23 |x|; fp16: 2^-10 |x|; bf16: 2^-7 |x| (above the subnormals).
struct reference {
  double value;
  double tolerance;
};

template <class T>
reference reference_sum(const std::vector<const std::vector<T>*>& inputs, std::size_t i) {
  double ref = 0.0, mag = 0.0;
  for (const auto* in : inputs) {
    const double x = to_float((*in)[i]);
    ref += x;  // rounding error of the float64 sum <= n 2^-53 S: negligible next to the tolerance below
    mag += std::fabs(x);
  }
  const double n = static_cast<double>(inputs.size());
  const double fp32_bound = n * std::ldexp(1.0, -24) * mag;
  return {ref, 0.5 * ulp<T>(std::fabs(ref) + fp32_bound) + fp32_bound};
}

/// The bits the design promises (algorithm/concepts.hpp): fp32 sum in a fixed order, rounded once to T.
/// `first` is the rank the order starts at: one_shot sums 0, 1, ..., n-1 (first = 0); ring sums chunk c in the
/// order c, c+1, ..., c+n-1 mod n (first = c).
template <class T>
T model_sum(const std::vector<const std::vector<T>*>& inputs, std::size_t i, int first) {
  const int n = static_cast<int>(inputs.size());
  float acc = to_float((*inputs[first])[i]);
  for (int k = 1; k < n; ++k) acc = acc + to_float((*inputs[(first + k) % n])[i]);
  return from_float<T>(acc);
}

/// Rank the ring's summation order starts at for element i: the chunk of i's packet.
template <class T>
int ring_first_rank(int n, std::size_t count, std::size_t i) {
  constexpr std::size_t lanes = packet_bytes / sizeof(T);
  const std::uint64_t packets = (count + lanes - 1) / lanes;
  const std::uint64_t k = algorithm::ring::chunk_packets(n, packets);
  return static_cast<int>((i / lanes) / k);
}

// --- time ---------------------------------------------------------------------------------------------------

struct stopwatch {
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
};

/// Pauses a proxy transport (its pause() / resume(): posts wait behind the stopped proxy) and resumes it from another
/// thread after `delay`; the destructor joins that thread.
class paused_proxy {
 public:
  template <class Transport>
  paused_proxy(Transport& t, std::chrono::milliseconds delay) {
    t.pause();
    resumer_ = std::thread([&t, delay] {
      std::this_thread::sleep_for(delay);
      t.resume();
    });
  }
  ~paused_proxy() { resumer_.join(); }
  paused_proxy(const paused_proxy&) = delete;
  paused_proxy& operator=(const paused_proxy&) = delete;

 private:
  std::thread resumer_;
};

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace rtest

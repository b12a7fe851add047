// core/sha256.hpp — SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), private to the library: the bootstrap's
// challenge and response (bootstrap/trust.hpp) prove that a rank knows ROCENANTE_BOOTSTRAP_SECRET without sending
// it, and job identities are compared as digests. Written here so that a header-only library needs no crypto
// library at link time; set-up hashes a few hundred bytes per rank, so it is plain and unrolled nowhere. Checked
// against the FIPS 180-4 examples and RFC 4231's HMAC cases (tests/host/test_trust.cpp). Host only.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rocenante::detail {

using digest = std::array<std::uint8_t, 32>;

/// Incremental SHA-256: update() any number of times, then finish() once.
class sha256 {
 public:
  sha256() = default;

  sha256& update(const void* data, std::size_t n) {
    const auto* p = static_cast<const std::uint8_t*>(data);
    bits_ += static_cast<std::uint64_t>(n) * 8;
    while (n > 0) {
      const std::size_t take = std::min<std::size_t>(n, 64 - used_);
      for (std::size_t i = 0; i < take; ++i) block_[used_ + i] = p[i];
      used_ += take;
      p += take;
      n -= take;
      if (used_ == 64) {
        compress();
        used_ = 0;
      }
    }
    return *this;
  }
  sha256& update(std::string_view s) { return update(s.data(), s.size()); }

  digest finish() {
    const std::uint64_t bits = bits_;
    const std::uint8_t one = 0x80, zero = 0;
    update(&one, 1);
    while (used_ != 56) update(&zero, 1);
    std::uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<std::uint8_t>(bits >> (56 - 8 * i));
    update(len, 8);
    digest d{};
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 4; ++j) d[static_cast<std::size_t>(4 * i + j)] = static_cast<std::uint8_t>(h_[i] >> (24 - 8 * j));
    return d;
  }

 private:
  static constexpr std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

  void compress() {
    static constexpr std::uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
    std::uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = static_cast<std::uint32_t>(block_[4 * i]) << 24 | static_cast<std::uint32_t>(block_[4 * i + 1]) << 16 |
             static_cast<std::uint32_t>(block_[4 * i + 2]) << 8 | block_[4 * i + 3];
    for (int i = 16; i < 64; ++i) {
      const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int i = 0; i < 64; ++i) {
      const std::uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h_[0] += a, h_[1] += b, h_[2] += c, h_[3] += d, h_[4] += e, h_[5] += f, h_[6] += g, h_[7] += h;
  }

  std::uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::uint8_t block_[64] = {};
  std::size_t used_ = 0;
  std::uint64_t bits_ = 0;
};

inline digest sha256_of(std::string_view s) { return sha256().update(s).finish(); }

/// HMAC-SHA-256 of `message` under `key` (RFC 2104; keys longer than the 64-byte block are hashed first).
inline digest hmac_sha256(std::string_view key, const void* message, std::size_t n) {
  std::uint8_t k[64] = {};
  if (key.size() > 64) {
    const digest kd = sha256_of(key);
    for (std::size_t i = 0; i < kd.size(); ++i) k[i] = kd[i];
  } else {
    for (std::size_t i = 0; i < key.size(); ++i) k[i] = static_cast<std::uint8_t>(key[i]);
  }
  std::uint8_t ipad[64], opad[64];
  for (int i = 0; i < 64; ++i) {
    ipad[i] = static_cast<std::uint8_t>(k[i] ^ 0x36);
    opad[i] = static_cast<std::uint8_t>(k[i] ^ 0x5c);
  }
  const digest inner = sha256().update(ipad, 64).update(message, n).finish();
  return sha256().update(opad, 64).update(inner.data(), inner.size()).finish();
}
inline digest hmac_sha256(std::string_view key, std::string_view message) {
  return hmac_sha256(key, message.data(), message.size());
}

/// Equality that takes the same time wherever the first difference is (a proof is never compared byte by byte
/// with an early exit, which would tell a guesser how many leading bytes were right).
inline bool same_digest(const digest& a, const digest& b) {
  std::uint8_t diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff = static_cast<std::uint8_t>(diff | (a[i] ^ b[i]));
  return diff == 0;
}

inline std::string hex(const std::uint8_t* p, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}
inline std::string hex(const digest& d) { return hex(d.data(), d.size()); }

}  // namespace rocenante::detail

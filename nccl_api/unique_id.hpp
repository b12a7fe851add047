// nccl_api/unique_id.hpp — the 128 bytes of an ncclUniqueId made by the NCCL-API layer (librocenante_nccl.so):
// what every rank needs to join rank 0's bootstrap::tcp (bootstrap/tcp.hpp), and a mark that tells this layer's
// ids from anything else.
//
//   bytes   0..7    mark "RoCEnant" (a real NCCL id starts with 8 random bytes: a real id handed to this layer is
//                   refused, not misread)
//           8       layout version (1)
//           9       address family: 4 (IPv4) or 6 (IPv6)
//          10..11   rank 0's port, big-endian
//          12..27   rank 0's address (IPv4: the first 4 bytes)
//          28..43   job id: 16 random bytes; every hello of the bootstrap names it (bootstrap/trust.hpp), so two
//                   communicators never mix even on one port
//          44..75   secret: 32 random bytes; the bootstrap's HMAC handshake proves that a joining process holds
//                   the id (ROCENANTE_BOOTSTRAP_SECRET's mechanism); it never travels on the bootstrap's wire
//          76..79   pid of the process that made the id (messages only)
//          80..87   host token of that process (core/identity.hpp; messages only)
//          88..119  zero
//         120..127  the first 8 bytes of SHA-256 over bytes 0..119: a corrupted or truncated id is refused
//
// The random bytes come from the kernel (getrandom). Pure data: encode, decode, describe; no sockets (the layer
// chooses the address and port, nccl_api/layer.cpp). Host only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include <rocenante/core/sha256.hpp>

namespace rocenante::nccl_layer {

inline constexpr std::size_t id_bytes = 128;
inline constexpr std::array<std::uint8_t, 8> id_mark = {'R', 'o', 'C', 'E', 'n', 'a', 'n', 't'};
inline constexpr std::uint8_t id_version = 1;

/// What an id carries.
struct id_fields {
  int family = 4;                          ///< 4 or 6
  std::array<std::uint8_t, 16> addr{};     ///< IPv4: first 4 bytes, network order
  std::uint16_t port = 0;
  std::array<std::uint8_t, 16> job{};
  std::array<std::uint8_t, 32> secret{};
  std::uint32_t pid = 0;
  std::uint64_t host = 0;

  /// "10.0.0.1" or "fd00::1" (no brackets: bootstrap::tcp_config::host's form).
  std::string address_text() const {
    char buf[INET6_ADDRSTRLEN] = {};
    ::inet_ntop(family == 6 ? AF_INET6 : AF_INET, addr.data(), buf, sizeof buf);
    return buf;
  }
  /// "10.0.0.1:41234", "[fd00::1]:41234".
  std::string endpoint_text() const {
    return (family == 6 ? "[" + address_text() + "]" : address_text()) + ":" + std::to_string(port);
  }
  /// The job identity the bootstrap's hellos carry.
  std::string job_text() const { return "nccl-layer:" + detail::hex(job.data(), job.size()); }
  /// The bootstrap's secret: 64 hex characters.
  std::string secret_text() const { return detail::hex(secret.data(), secret.size()); }
};

using id_bytes_t = std::array<std::uint8_t, id_bytes>;

inline std::array<std::uint8_t, 8> id_check(const std::uint8_t* b) {
  const detail::digest d = detail::sha256().update(b, 120).finish();
  std::array<std::uint8_t, 8> c{};
  std::memcpy(c.data(), d.data(), c.size());
  return c;
}

inline id_bytes_t encode(const id_fields& f) {
  id_bytes_t b{};
  std::memcpy(b.data(), id_mark.data(), id_mark.size());
  b[8] = id_version;
  b[9] = static_cast<std::uint8_t>(f.family);
  b[10] = static_cast<std::uint8_t>(f.port >> 8);
  b[11] = static_cast<std::uint8_t>(f.port & 0xff);
  std::memcpy(b.data() + 12, f.addr.data(), 16);
  std::memcpy(b.data() + 28, f.job.data(), 16);
  std::memcpy(b.data() + 44, f.secret.data(), 32);
  for (int i = 0; i < 4; ++i) b[76 + i] = static_cast<std::uint8_t>(f.pid >> (8 * i));
  for (int i = 0; i < 8; ++i) b[80 + i] = static_cast<std::uint8_t>(f.host >> (8 * i));
  const auto c = id_check(b.data());
  std::memcpy(b.data() + 120, c.data(), c.size());
  return b;
}

/// Whether `b` starts with this layer's mark (it may still be refused by decode: another version, corrupted).
inline bool has_mark(const void* b) { return std::memcmp(b, id_mark.data(), id_mark.size()) == 0; }

/// The decoded id, or why these bytes are not one this layer can use.
struct decoded_id {
  std::optional<id_fields> fields;
  std::string why;  ///< when !fields
};

inline decoded_id decode(const void* bytes) {
  const auto* b = static_cast<const std::uint8_t*>(bytes);
  decoded_id r;
  if (!has_mark(b)) {
    r.why = "this ncclUniqueId was not made by the RoCEnante NCCL layer (its first 8 bytes are not the layer's mark "
            "'RoCEnant'): a real NCCL's ncclGetUniqueId made it, or the 128 bytes did not arrive intact. Every rank "
            "must load the same library for ncclGetUniqueId and ncclCommInitRank (LD_PRELOAD, VLLM_NCCL_SO_PATH) "
            "with the same ROCENANTE_NCCL_DISABLE";
    return r;
  }
  if (b[8] != id_version) {
    r.why = "this ncclUniqueId was made by another version of the RoCEnante NCCL layer (id layout " +
            std::to_string(b[8]) + ", this library reads " + std::to_string(id_version) + "): deploy one build";
    return r;
  }
  if (id_check(b) != [&] {
        std::array<std::uint8_t, 8> c{};
        std::memcpy(c.data(), b + 120, c.size());
        return c;
      }()) {
    r.why = "this ncclUniqueId is corrupted (its checksum does not match its bytes): pass all 128 bytes unchanged";
    return r;
  }
  id_fields f;
  f.family = b[9];
  f.port = static_cast<std::uint16_t>((b[10] << 8) | b[11]);
  if ((f.family != 4 && f.family != 6) || f.port == 0) {
    r.why = "this ncclUniqueId names no usable address (family " + std::to_string(f.family) + ", port " +
            std::to_string(f.port) + ")";
    return r;
  }
  std::memcpy(f.addr.data(), b + 12, 16);
  std::memcpy(f.job.data(), b + 28, 16);
  std::memcpy(f.secret.data(), b + 44, 32);
  for (int i = 0; i < 4; ++i) f.pid |= std::uint32_t{b[76 + i]} << (8 * i);
  for (int i = 0; i < 8; ++i) f.host |= std::uint64_t{b[80 + i]} << (8 * i);
  r.fields = f;
  return r;
}

/// Parses a numeric IPv4 or IPv6 address ("10.0.0.1", "fd00::1", "[fd00::1]") into `f`'s family and address.
inline bool parse_address(std::string text, id_fields& f) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') text = text.substr(1, text.size() - 2);
  std::array<std::uint8_t, 16> a{};
  if (::inet_pton(AF_INET, text.c_str(), a.data()) == 1) {
    f.family = 4;
    f.addr = a;
    return true;
  }
  if (::inet_pton(AF_INET6, text.c_str(), a.data()) == 1) {
    f.family = 6;
    f.addr = a;
    return true;
  }
  return false;
}

}  // namespace rocenante::nccl_layer

// core/env.hpp — the environment variables an operator reaches for, read in one place, NCCL style
// (docs/environment.md has the table):
//
//   ROCENANTE_TRANSPORT     auto | ibverbs | cuda_ipc | socket | nccl | loopback  (default auto)
//   ROCENANTE_ALGO          auto | one_shot | two_shot | ring       (default auto)
//   ROCENANTE_IB_HCA        RDMA devices, comma separated, each optionally ":port"  (read by the ibverbs
//   ROCENANTE_IB_GID_INDEX  GID table index                          transport too: same grammar and ranges)
//   ROCENANTE_TIMEOUT_MS    bound on every wait for a peer, in ms (overrides options::timeout_ns)
//   ROCENANTE_SOCKET_IFNAME interfaces the socket transport may use, NCCL_SOCKET_IFNAME's grammar: a comma
//                           separated list of name prefixes ("eth,ib"); "=" before the list: exact names;
//                           "^" before it: every interface but these ("^docker,lo"). Read by the socket
//                           transport too (transport/socket.hpp), with this parser.
//   ROCENANTE_DEBUG         NONE | WARN | INFO                      (default WARN)
//
// Keywords are case-insensitive (as NCCL's). A bad value throws config_error naming the variable, the value and
// the accepted values. Set-up code (host/select.hpp) reads them on every rank and exchanges the outcome, so a
// bad value on one rank fails set-up on every rank instead of leaving the others waiting (hazard H8);
// bootstrap::tcp::from_env reads them too, before it connects, and tells rank 0 about a bad one.
// The other ROCENANTE_IB_* variables belong to the ibverbs transport alone (transport/ibverbs/device.hpp).
// Host only.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "error.hpp"
#include "log.hpp"
#include "options.hpp"

namespace rocenante::env {

/// ROCENANTE_TRANSPORT: which transport set-up should use. `automatic` prefers RDMA and falls back, together on
/// every rank; any other value is forced (its failure is an error, never a fallback).
enum class transport_choice : std::uint8_t { automatic = 0, ibverbs = 1, nccl = 2, loopback = 3, socket = 4, cuda_ipc = 5 };
/// ROCENANTE_ALGO: the algorithm of calls that do not name one. `automatic`: algorithm/auto.hpp's table.
enum class algo_choice : std::uint8_t { automatic = 0, one_shot = 1, ring = 2, two_shot = 3 };

/// The keywords of ROCENANTE_TRANSPORT and ROCENANTE_ALGO (case-insensitive), in the order error messages list them.
inline constexpr rocenante::detail::keyword<transport_choice> transport_keywords[] = {
    {"auto", transport_choice::automatic}, {"ibverbs", transport_choice::ibverbs},
    {"cuda_ipc", transport_choice::cuda_ipc}, {"socket", transport_choice::socket},
    {"nccl", transport_choice::nccl},         {"loopback", transport_choice::loopback}};
inline constexpr rocenante::detail::keyword<algo_choice> algo_keywords[] = {
    {"auto", algo_choice::automatic}, {"one_shot", algo_choice::one_shot}, {"two_shot", algo_choice::two_shot},
    {"ring", algo_choice::ring}};

inline const char* to_string(transport_choice t) { return rocenante::detail::keyword_text(transport_keywords, t); }
inline const char* to_string(algo_choice a) { return rocenante::detail::keyword_text(algo_keywords, a); }

/// Most devices ROCENANTE_IB_HCA may name (the ibverbs transport's ib::max_devices; a host test checks both agree).
inline constexpr int max_ib_devices = 4;

/// Where variables come from: getenv by default; tests pass a lookup over a map.
using lookup = std::function<const char*(const char*)>;

namespace detail {
inline std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}
/// Integer in [lo, hi], decimal, nothing else; the message has the shape the ibverbs transport uses.
inline std::int64_t parse_int(const char* what, const std::string& v, std::int64_t lo, std::int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE || x < lo || x > hi)
    throw config_error(std::string(what) + "='" + v + "' is not an integer in [" + std::to_string(lo) + ", " +
                       std::to_string(hi) + "]");
  return x;
}
}  // namespace detail

/// One RDMA device named by ROCENANTE_IB_HCA.
struct ib_device_name {
  std::string name;
  int port = 1;
  bool operator==(const ib_device_name&) const = default;
};

/// Parses ROCENANTE_IB_HCA ("mlx5_0:1,mlx5_1"): the grammar of ib::ib_config::from_env (spaces ignored, empty
/// items skipped, port 1..255, at most max_ib_devices devices).
inline std::vector<ib_device_name> parse_ib_hca(const std::string& all) {
  std::vector<ib_device_name> out;
  std::string item;
  for (std::size_t i = 0; i <= all.size(); ++i) {
    if (i == all.size() || all[i] == ',') {
      if (!item.empty()) {
        ib_device_name d;
        if (const auto colon = item.find(':'); colon != std::string::npos) {
          d.port = static_cast<int>(detail::parse_int("ROCENANTE_IB_HCA port", item.substr(colon + 1), 1, 255));
          item = item.substr(0, colon);
        }
        d.name = item;
        out.push_back(d);
      }
      item.clear();
    } else if (all[i] != ' ') {
      item += all[i];
    }
  }
  if (out.size() > static_cast<std::size_t>(max_ib_devices))
    throw config_error("ROCENANTE_IB_HCA names " + std::to_string(out.size()) + " devices; at most " +
                       std::to_string(max_ib_devices) + " are supported");
  return out;
}

/// ROCENANTE_SOCKET_IFNAME, parsed: which network interfaces the socket transport may take its address from.
/// Empty (`names` empty): the transport's default (transport/socket.hpp).
struct socket_ifname {
  bool exclude = false;  ///< "^...": every interface except the listed ones
  bool exact = false;    ///< "=...": names, not prefixes
  std::vector<std::string> names;
  bool operator==(const socket_ifname&) const = default;

  bool empty() const { return names.empty(); }
  bool matches(const std::string& ifname) const {
    bool listed = false;
    for (const auto& n : names)
      if (exact ? ifname == n : ifname.compare(0, n.size(), n) == 0) listed = true;
    return exclude ? !listed : listed;
  }
  /// The value as it would be written: "^=eth0,eth1".
  std::string text() const {
    std::string s = std::string(exclude ? "^" : "") + (exact ? "=" : "");
    for (std::size_t i = 0; i < names.size(); ++i) s += (i ? "," : "") + names[i];
    return s;
  }
};

/// Parses ROCENANTE_SOCKET_IFNAME ("eth,ib", "=eth0", "^docker,lo", "^=eth1"): optional '^', optional '=', then
/// interface names (prefixes unless '='), comma separated, spaces ignored, empty items skipped. A name has at most
/// 15 characters (IFNAMSIZ - 1) and no '/', ':' or whitespace; at least one name. Throws config_error naming the
/// variable otherwise.
inline socket_ifname parse_socket_ifname(const std::string& all) {
  auto bad = [&](const std::string& why) {
    return config_error("ROCENANTE_SOCKET_IFNAME='" + all + "' " + why +
                        " (accepted: interface name prefixes, comma separated, e.g. eth,ib; '=' first for exact "
                        "names; '^' first to exclude)");
  };
  socket_ifname r;
  std::size_t i = 0;
  while (i < all.size() && all[i] == ' ') ++i;
  if (i < all.size() && all[i] == '^') r.exclude = true, ++i;
  if (i < all.size() && all[i] == '=') r.exact = true, ++i;
  std::string item;
  for (; i <= all.size(); ++i) {
    if (i == all.size() || all[i] == ',') {
      if (!item.empty()) {
        if (item.size() > 15) throw bad("names an interface longer than 15 characters ('" + item + "')");
        r.names.push_back(item);
      }
      item.clear();
    } else if (all[i] == ' ') {
      continue;
    } else if (all[i] == '/' || all[i] == ':' || all[i] == '\t' || all[i] == '^' || all[i] == '=') {
      throw bad("has the character '" + std::string(1, all[i]) + "' inside an interface name");
    } else {
      item += all[i];
    }
  }
  if (r.names.empty()) throw bad("names no interface");
  return r;
}

/// ROCENANTE_SOCKET_IFNAME from the environment (getenv, or `get`); unset or empty: the default (empty).
inline socket_ifname socket_ifname_from_env(const lookup& get = {}) {
  const char* v = get ? get("ROCENANTE_SOCKET_IFNAME") : std::getenv("ROCENANTE_SOCKET_IFNAME");
  if (v == nullptr || detail::trim(v).empty()) return {};
  return parse_socket_ifname(detail::trim(v));
}

/// Every variable of this header, parsed and checked.
struct settings {
  transport_choice transport = transport_choice::automatic;
  algo_choice algo = algo_choice::automatic;
  std::vector<ib_device_name> ib_hca;      ///< empty: the ibverbs transport picks the first ACTIVE device
  int ib_gid_index = -1;                   ///< -1: the first RoCE v2 IPv4 GID
  std::optional<std::uint64_t> timeout_ms; ///< unset: options::timeout_ns as the caller gave it
  log_level debug = log_level::warn;
  socket_ifname socket_if;                 ///< ROCENANTE_SOCKET_IFNAME; empty: the socket transport's default

  /// Reads the variables through `get` (default: getenv). Throws config_error for a bad value.
  static settings read(const lookup& get = {}) {
    auto fetch = [&](const char* name) -> std::optional<std::string> {
      const char* v = get ? get(name) : std::getenv(name);
      if (v == nullptr) return std::nullopt;
      const std::string t = detail::trim(v);
      if (t.empty()) return std::nullopt;  // set but empty: as unset (NCCL does the same)
      return t;
    };
    settings s;
    if (auto v = fetch("ROCENANTE_TRANSPORT"))
      s.transport = rocenante::detail::parse_keyword(transport_keywords, "ROCENANTE_TRANSPORT", *v);
    if (auto v = fetch("ROCENANTE_ALGO"))
      s.algo = rocenante::detail::parse_keyword(algo_keywords, "ROCENANTE_ALGO", *v);
    if (auto v = fetch("ROCENANTE_IB_HCA")) s.ib_hca = parse_ib_hca(*v);
    if (auto v = fetch("ROCENANTE_IB_GID_INDEX"))
      s.ib_gid_index = static_cast<int>(detail::parse_int("ROCENANTE_IB_GID_INDEX", *v, 0, 65535));
    if (auto v = fetch("ROCENANTE_TIMEOUT_MS"))
      s.timeout_ms = static_cast<std::uint64_t>(detail::parse_int("ROCENANTE_TIMEOUT_MS", *v, 1, 3'600'000));
    if (auto v = fetch("ROCENANTE_SOCKET_IFNAME")) s.socket_if = parse_socket_ifname(*v);
    if (auto v = fetch("ROCENANTE_DEBUG"))
      s.debug = rocenante::detail::parse_keyword(log_level_keywords, "ROCENANTE_DEBUG", *v);
    return s;
  }

  /// The options with the environment's overrides applied (ROCENANTE_TIMEOUT_MS -> timeout_ns).
  options apply(options o) const {
    if (timeout_ms) o.timeout_ns = *timeout_ms * 1'000'000ull;
    return o;
  }
};

}  // namespace rocenante::env

// transport/ibverbs/device.hpp — RDMA device discovery and checks for the ibverbs transport: configuration from
// the environment, opening the devices named by ROCENANTE_IB_HCA, the port state, the active MTU and the GID
// (hazard H19). Every failure is a transport_error whose message names the device and says what to do.
//
// Environment (docs/operations.md has the full table):
//   ROCENANTE_IB_HCA         devices, comma separated, each optionally ":port" (default: the first device with
//                            an ACTIVE port). Several devices: every call to a peer is striped over them (rails).
//   ROCENANTE_IB_ROUTES      per-peer routes, "PEER=DEV[,DEV...][;PEER=DEV...]": peer PEER is reached over the
//                            devices named (each in ROCENANTE_IB_HCA), one rail each; a peer not named has no route
//                            (unreachable: ring only). Every route the same number of devices. Unset: every peer
//                            over every device. A switchless ring of DGX Sparks: each neighbour over its own port.
//   ROCENANTE_IB_GID_INDEX   GID table index (default: the first RoCE v2 IPv4 GID); checked non-zero
//   ROCENANTE_IB_TIMEOUT     local ACK timeout exponent, 4.096 us x 2^t (default 14: 67 ms)
//   ROCENANTE_IB_RETRY_CNT   transport retries before IBV_WC_RETRY_EXC_ERR (default 6; rxe treats 7 as forever)
//   ROCENANTE_IB_TC          traffic class of the GRH (default 0)       ROCENANTE_IB_SL   service level (0)
//   ROCENANTE_IB_SEND_DEPTH  send credits (outstanding work requests) per queue pair (default 128)
//   ROCENANTE_IB_IDLE        proxy idle policy: spin | yield | sleep (default yield)
//   ROCENANTE_IB_SPIN_POLLS  empty polls before the idle policy applies (default 20000)
//   ROCENANTE_IB_SLEEP_US    sleep length for ROCENANTE_IB_IDLE=sleep (default 50)
#pragma once

#include <arpa/inet.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../../core/error.hpp"
#include "../proxy.hpp"
#include "verbs_api.hpp"

namespace rocenante::transport::ib {

/// Most RDMA devices one rank stripes over (a DGX Spark port is two PCIe functions; 4 leaves room).
inline constexpr int max_devices = 4;

/// Configuration of the ibverbs transport. `from_env()` reads the ROCENANTE_IB_* variables.
struct ib_config {
  std::vector<std::string> hca;  ///< device names; empty: the first device with an ACTIVE port
  std::vector<int> ports;        ///< port per device (default 1)
  int gid_index = -1;            ///< -1: first RoCE v2 IPv4 GID
  int timeout = 14;              ///< ACK timeout exponent: 4.096 us x 2^timeout per try
  int retry_cnt = 6;             ///< tries after the first; rxe treats 7 as infinite, so keep <= 6
  int traffic_class = 0;
  int service_level = 0;
  int send_depth = 128;          ///< outstanding work requests per queue pair (send credits)
  idle_policy idle{};
  /// Per-peer routes (ROCENANTE_IB_ROUTES): {peer, device names}. Empty: every peer over every device.
  std::vector<std::pair<int, std::vector<std::string>>> routes;

  static ib_config from_env() {
    ib_config c;
    if (const char* s = std::getenv("ROCENANTE_IB_HCA"); s && *s) {
      std::string all = s, item;
      for (std::size_t i = 0; i <= all.size(); ++i) {
        if (i == all.size() || all[i] == ',') {
          if (!item.empty()) {
            int port = 1;
            if (const auto colon = item.find(':'); colon != std::string::npos) {
              port = parse_int("ROCENANTE_IB_HCA port", item.substr(colon + 1), 1, 255);
              item = item.substr(0, colon);
            }
            c.hca.push_back(item);
            c.ports.push_back(port);
          }
          item.clear();
        } else if (all[i] != ' ') {
          item += all[i];
        }
      }
      if (c.hca.size() > static_cast<std::size_t>(max_devices))
        throw config_error("ROCENANTE_IB_HCA names " + std::to_string(c.hca.size()) + " devices; at most " +
                           std::to_string(max_devices) + " are supported");
    }
    c.gid_index = env_int("ROCENANTE_IB_GID_INDEX", c.gid_index, 0, 65535);
    c.timeout = env_int("ROCENANTE_IB_TIMEOUT", c.timeout, 1, 31);
    c.retry_cnt = env_int("ROCENANTE_IB_RETRY_CNT", c.retry_cnt, 0, 7);
    c.traffic_class = env_int("ROCENANTE_IB_TC", c.traffic_class, 0, 255);
    c.service_level = env_int("ROCENANTE_IB_SL", c.service_level, 0, 15);
    c.send_depth = env_int("ROCENANTE_IB_SEND_DEPTH", c.send_depth, 4, 8192);
    if (const char* s = std::getenv("ROCENANTE_IB_IDLE"); s && *s) {
      const std::string v = s;
      if (v == "spin") c.idle.kind = idle_policy::spin;
      else if (v == "yield") c.idle.kind = idle_policy::yield;
      else if (v == "sleep") c.idle.kind = idle_policy::sleep;
      else throw config_error("ROCENANTE_IB_IDLE=" + v + " is not one of spin, yield, sleep");
    }
    c.idle.spin_polls = static_cast<std::uint32_t>(env_int("ROCENANTE_IB_SPIN_POLLS", static_cast<int>(c.idle.spin_polls), 0, 1 << 30));
    c.idle.sleep_us = static_cast<std::uint32_t>(env_int("ROCENANTE_IB_SLEEP_US", static_cast<int>(c.idle.sleep_us), 1, 1'000'000));
    if (const char* s = std::getenv("ROCENANTE_IB_ROUTES"); s && *s) c.routes = parse_routes(s);
    return c;
  }

  /// "1=mlx5_0,mlx5_1; 2=mlx5_2" -> {{1, {mlx5_0, mlx5_1}}, {2, {mlx5_2}}} (spaces ignored). Which names and peers
  /// exist is checked at set-up, where the devices and the world are known.
  static std::vector<std::pair<int, std::vector<std::string>>> parse_routes(const std::string& text) {
    std::vector<std::pair<int, std::vector<std::string>>> out;
    std::string all;
    for (char ch : text)
      if (ch != ' ') all += ch;
    std::size_t at = 0;
    while (at <= all.size()) {
      std::size_t end = all.find(';', at);
      if (end == std::string::npos) end = all.size();
      const std::string item = all.substr(at, end - at);
      at = end + 1;
      if (item.empty()) continue;
      const std::size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
        throw config_error("ROCENANTE_IB_ROUTES: '" + item + "' is not PEER=DEV[,DEV...] (e.g. '1=mlx5_0,mlx5_1;2=mlx5_2,mlx5_3')");
      std::pair<int, std::vector<std::string>> r{parse_int("ROCENANTE_IB_ROUTES peer", item.substr(0, eq), 0, 65535), {}};
      std::string dev;
      for (std::size_t i = eq + 1; i <= item.size(); ++i) {
        if (i == item.size() || item[i] == ',') {
          if (dev.empty()) throw config_error("ROCENANTE_IB_ROUTES: an empty device name in '" + item + "'");
          r.second.push_back(dev);
          dev.clear();
        } else {
          dev += item[i];
        }
      }
      for (const auto& o : out)
        if (o.first == r.first) throw config_error("ROCENANTE_IB_ROUTES names peer " + std::to_string(r.first) + " twice");
      out.push_back(std::move(r));
    }
    return out;
  }

  static int parse_int(const char* what, const std::string& v, int lo, int hi) {
    char* end = nullptr;
    const long x = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || x < lo || x > hi)
      throw config_error(std::string(what) + "='" + v + "' is not an integer in [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "]");
    return static_cast<int>(x);
  }
  static int env_int(const char* name, int dflt, int lo, int hi) {
    const char* s = std::getenv(name);
    return s && *s ? parse_int(name, s, lo, hi) : dflt;
  }
};

/// Whether RDMA can be used in this process, and why not: libibverbs loads and at least one device exists.
/// Never throws. (Set-up of a communicator checks much more: port state, GID, connection.)
struct availability {
  bool available = false;
  std::string why;                   ///< empty when available
  std::vector<std::string> devices;  ///< device names found
};

/// Why ibv_get_device_list returned nothing, in words.
inline std::string no_device_list(int err) {
  return std::string("ibverbs unavailable: ibv_get_device_list failed (") + std::strerror(err) +
         (err == ENOSYS ? "): this kernel has no RDMA support (ib_uverbs not loaded, or no InfiniBand core)" : ")");
}

inline availability probe() {
  availability a;
  const verbs_load& v = verbs();
  if (!v.ok) {
    a.why = "ibverbs unavailable: " + v.why;
    return a;
  }
  int n = 0;
  ibv_device** list = v.api.get_device_list(&n);
  if (list == nullptr) {
    a.why = no_device_list(errno);
    return a;
  }
  for (int i = 0; i < n; ++i) a.devices.emplace_back(v.api.get_device_name(list[i]));
  v.api.free_device_list(list);
  if (a.devices.empty()) {
    a.why = "ibverbs unavailable: libibverbs loaded but no RDMA devices were found (no driver loaded, or no "
            "provider library for the device: install ibverbs-providers)";
    return a;
  }
  a.available = true;
  return a;
}

inline const char* port_state_name(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_NOP: return "NOP";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return "unknown";
  }
}

inline int mtu_bytes(ibv_mtu m) { return 128 << static_cast<int>(m); }  // IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5

inline std::string format_gid(const ibv_gid& g) {
  const std::uint8_t* r = g.raw;
  static const std::uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  char buf[64];
  if (std::memcmp(r, v4_prefix, 12) == 0) {
    std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", r[12], r[13], r[14], r[15]);
  } else {
    char tmp[INET6_ADDRSTRLEN];
    ::inet_ntop(AF_INET6, r, tmp, sizeof tmp);
    std::snprintf(buf, sizeof buf, "%s", tmp);
  }
  return buf;
}

inline bool gid_is_zero(const ibv_gid& g) {
  for (std::uint8_t b : g.raw)
    if (b != 0) return false;
  return true;
}
inline bool gid_is_ipv4(const ibv_gid& g) {
  static const std::uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(g.raw, v4_prefix, 12) == 0 && !(g.raw[12] == 0 && g.raw[13] == 0 && g.raw[14] == 0 && g.raw[15] == 0);
}

/// One opened device: context, port, the chosen GID, and the port's active MTU.
struct device_info {
  std::string name;
  int port = 1;
  ibv_context* ctx = nullptr;
  int gid_index = -1;
  ibv_gid gid{};
  ibv_mtu active_mtu = IBV_MTU_1024;
  std::string gid_text;
};

/// GID type of entry `i`: "RoCE v2", "RoCE v1", "IB" or "" when unknown.
inline std::string gid_type(const verbs_api& api, const device_info& d, int i) {
  if (api.query_gid_ex != nullptr) {
    ibv_gid_entry e{};
    if (api.query_gid_ex(d.ctx, static_cast<std::uint32_t>(d.port), static_cast<std::uint32_t>(i), &e, 0, sizeof e) == 0)
      return e.gid_type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? "RoCE v1" : "IB";
  }
  const std::string path = "/sys/class/infiniband/" + d.name + "/ports/" + std::to_string(d.port) +
                           "/gid_attrs/types/" + std::to_string(i);
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[64] = {};
    const bool got = std::fgets(buf, sizeof buf, f) != nullptr;
    std::fclose(f);
    if (got) {
      std::string t = buf;
      while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
      if (t == "RoCE v2" || t == "RoCE V2") return "RoCE v2";
      return t;
    }
  }
  return "";
}

/// Opens device `name` and checks it (hazard H19): the port is ACTIVE, its link layer is Ethernet (RoCE), and the
/// GID (explicit `gid_index`, or the first RoCE v2 IPv4 one) is non-zero. Throws transport_error naming the device.
inline device_info open_device(const std::string& name, int port, int gid_index) {
  const verbs_load& v = verbs();
  if (!v.ok) throw transport_error("ibverbs unavailable: " + v.why);
  const verbs_api& api = v.api;
  int n = 0;
  ibv_device** list = api.get_device_list(&n);
  if (list == nullptr) throw transport_error(no_device_list(errno));
  ibv_device* dev = nullptr;
  std::string names;
  for (int i = 0; i < n; ++i) {
    const std::string nm = api.get_device_name(list[i]);
    names += (names.empty() ? "" : ", ") + nm;
    if (nm == name) dev = list[i];
  }
  device_info d;
  d.name = name;
  d.port = port;
  if (dev != nullptr) d.ctx = api.open_device(dev);
  api.free_device_list(list);
  if (dev == nullptr)
    throw transport_error("RDMA device " + name + " not found (devices present: " + (names.empty() ? "none" : names) +
                          "); set ROCENANTE_IB_HCA to one of them");
  if (d.ctx == nullptr)
    throw transport_error("RDMA device " + name + ": ibv_open_device failed (" + std::strerror(errno) +
                          "); check permissions on /dev/infiniband/uverbs*");
  auto fail = [&](const std::string& why) {
    api.close_device(d.ctx);
    throw transport_error("RDMA device " + name + " port " + std::to_string(port) + ": " + why);
  };
  ibv_port_attr pa{};
  if (api.query_port(d.ctx, static_cast<std::uint8_t>(port), &pa) != 0)
    fail(std::string("ibv_query_port failed (") + std::strerror(errno) + "); does the device have this port?");
  if (pa.state != IBV_PORT_ACTIVE)
    fail(std::string("port is ") + port_state_name(pa.state) +
         ", not ACTIVE; bring the link up (ip link set <netdev> up; check the cable and the switch port) or choose "
         "another device with ROCENANTE_IB_HCA");
  if (pa.link_layer != IBV_LINK_LAYER_ETHERNET)
    fail("link layer is not Ethernet; this transport addresses peers by GID over RoCE v2 only");
  d.active_mtu = pa.active_mtu;
  if (gid_index >= 0) {
    if (gid_index >= pa.gid_tbl_len)
      fail("GID index " + std::to_string(gid_index) + " is outside the GID table (" + std::to_string(pa.gid_tbl_len) +
           " entries); set ROCENANTE_IB_GID_INDEX to a valid index (show_gids lists them)");
    if (api.query_gid(d.ctx, static_cast<std::uint8_t>(port), gid_index, &d.gid) != 0 || gid_is_zero(d.gid))
      fail("GID index " + std::to_string(gid_index) +
           " has no address (all zero): the interface has no IP address for this entry; assign one, or set "
           "ROCENANTE_IB_GID_INDEX to a populated RoCE v2 IPv4 entry (show_gids lists them), or leave it unset");
    d.gid_index = gid_index;
  } else {
    std::string seen;
    for (int i = 0; i < pa.gid_tbl_len && i < 256; ++i) {
      ibv_gid g{};
      if (api.query_gid(d.ctx, static_cast<std::uint8_t>(port), i, &g) != 0 || gid_is_zero(g)) continue;
      const std::string t = gid_type(api, d, i);
      seen += (seen.empty() ? "" : "; ") + std::to_string(i) + ": " + format_gid(g) + " " + (t.empty() ? "?" : t);
      if (gid_is_ipv4(g) && t == "RoCE v2") {
        d.gid_index = i;
        d.gid = g;
        break;
      }
    }
    if (d.gid_index < 0)
      fail("no RoCE v2 IPv4 GID (GIDs: " + (seen.empty() ? std::string("none") : seen) +
           "); assign an IPv4 address to the device's network interface, or set ROCENANTE_IB_GID_INDEX");
  }
  d.gid_text = format_gid(d.gid);
  return d;
}

/// The first device with an ACTIVE port 1, for ROCENANTE_IB_HCA unset. Throws when there is none.
inline std::string default_device() {
  const verbs_load& v = verbs();
  if (!v.ok) throw transport_error("ibverbs unavailable: " + v.why);
  int n = 0;
  ibv_device** list = v.api.get_device_list(&n);
  if (list == nullptr) throw transport_error(no_device_list(errno));
  std::string found, seen;
  for (int i = 0; i < n && found.empty(); ++i) {
    const std::string nm = v.api.get_device_name(list[i]);
    ibv_context* c = v.api.open_device(list[i]);
    if (c == nullptr) continue;
    ibv_port_attr pa{};
    const bool ok = v.api.query_port(c, 1, &pa) == 0;
    seen += (seen.empty() ? "" : ", ") + nm + " " + (ok ? port_state_name(pa.state) : "?");
    if (ok && pa.state == IBV_PORT_ACTIVE) found = nm;
    v.api.close_device(c);
  }
  v.api.free_device_list(list);
  if (found.empty())
    throw transport_error(n == 0 ? std::string("ibverbs unavailable: no RDMA devices found")
                                 : "no RDMA device has an ACTIVE port 1 (" + seen + "); bring a link up or set ROCENANTE_IB_HCA");
  return found;
}

}  // namespace rocenante::transport::ib

// transport/socket/net.hpp — the POSIX pieces of the socket transport (transport/socket.hpp): an owned file
// descriptor, the choice of the interface address (ROCENANTE_SOCKET_IFNAME, NCCL_SOCKET_IFNAME's grammar), the
// network-namespace token that says when two ranks reach each other over 127.0.0.1, the connection card and the
// hello of a new connection, and bounded connect / accept / exact-size reads. IPv4 only. Host only.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../core/clock.hpp"
#include "../../core/env.hpp"
#include "../../core/error.hpp"
#include "../card.hpp"

#if defined(__SANITIZE_THREAD__)
#define ROCENANTE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ROCENANTE_TSAN 1
#endif
#endif
#ifdef ROCENANTE_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace rocenante::transport::sock {

/// ThreadSanitizer cannot see causality that travels through the kernel: a frame that one thread sends and another
/// receives orders them, but TSan sees two unrelated threads. Under TSan only, every send releases (after reading
/// its payload: socket.hpp's post_one sends a copy in TSan builds) and every completed receive acquires one
/// process-wide token, so the chain the socket transport relies on (a rank reuses a staging slot only after
/// peers' frames that causally follow its sends of that slot arrived; see transport/socket.hpp) is visible to it.
/// An access that really runs ahead of the read it depends on still has no happens-before and is still reported.
/// Nothing at all in other builds.
inline char kernel_token = 0;  ///< the address the annotations use (never read or written)
inline void kernel_release() {
#ifdef ROCENANTE_TSAN
  __tsan_release(&kernel_token);
#endif
}
inline void kernel_acquire() {
#ifdef ROCENANTE_TSAN
  __tsan_acquire(&kernel_token);
#endif
}

/// An owned file descriptor; closes on destruction.
class fd {
 public:
  fd() = default;
  explicit fd(int f) : f_(f) {}
  fd(fd&& o) noexcept : f_(std::exchange(o.f_, -1)) {}
  fd& operator=(fd&& o) noexcept {
    if (this != &o) {
      reset();
      f_ = std::exchange(o.f_, -1);
    }
    return *this;
  }
  fd(const fd&) = delete;
  fd& operator=(const fd&) = delete;
  ~fd() { reset(); }
  int get() const { return f_; }
  explicit operator bool() const { return f_ >= 0; }
  void reset() {
    if (f_ >= 0) ::close(f_);
    f_ = -1;
  }

 private:
  int f_ = -1;
};

inline std::string errno_text(int e) { return std::string(std::strerror(e)); }

inline std::string ip_text(std::uint32_t addr_be) {
  char buf[INET_ADDRSTRLEN] = {};
  in_addr a{};
  a.s_addr = addr_be;
  ::inet_ntop(AF_INET, &a, buf, sizeof buf);
  return buf;
}

/// One IPv4 address of an interface that is UP.
struct interface_address {
  std::string name;
  std::uint32_t addr_be = 0;  ///< network byte order
  bool loopback = false;
};

inline std::vector<interface_address> interfaces() {
  std::vector<interface_address> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    interface_address a;
    a.name = i->ifa_name;
    a.addr_be = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    a.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(a);
  }
  ::freeifaddrs(list);
  return out;
}

inline std::string describe_interfaces(const std::vector<interface_address>& all) {
  std::string s;
  for (const auto& a : all) s += (s.empty() ? "" : ", ") + a.name + " " + ip_text(a.addr_be);
  return s.empty() ? "none" : s;
}

/// Where this rank listens and what it publishes.
///   ROCENANTE_SOCKET_IFNAME set: the first UP IPv4 interface it matches; the rank listens on that address only
///     and every peer connects to it (also peers on the same host).
///   unset (the default): the rank listens on every address (0.0.0.0). A peer in the same network namespace (same
///     host, same namespace: the token below) connects to 127.0.0.1; any other peer connects to this rank's first
///     UP, non-loopback IPv4 interface whose name does not start with "docker" (NCCL's default exclusions), when
///     there is one.
struct address_choice {
  bool any = false;            ///< default mode: listen on 0.0.0.0
  std::uint32_t addr_be = 0;   ///< the address peers elsewhere connect to (0: none)
  std::string ifname;          ///< its interface
  std::string text() const {
    std::string s = any ? "listening on every address, 127.0.0.1 within a host" : "listening on " + ifname;
    if (addr_be) s += any ? ", " + ifname + " " + ip_text(addr_be) + " across hosts" : " " + ip_text(addr_be);
    else if (any) s += "; no non-loopback IPv4 interface for peers on other hosts";
    return s;
  }
};

/// Throws transport_error when ROCENANTE_SOCKET_IFNAME matches no UP IPv4 interface (naming the variable and the
/// interfaces present).
inline address_choice choose_address(const env::socket_ifname& want) {
  const auto all = interfaces();
  address_choice c;
  if (want.empty()) {
    c.any = true;
    for (const auto& a : all)
      if (!a.loopback && a.name.compare(0, 6, "docker") != 0) {
        c.addr_be = a.addr_be;
        c.ifname = a.name;
        break;
      }
    return c;
  }
  for (const auto& a : all)
    if (want.matches(a.name)) {
      c.addr_be = a.addr_be;
      c.ifname = a.name;
      return c;
    }
  throw transport_error("socket: ROCENANTE_SOCKET_IFNAME='" + want.text() +
                        "' matches no UP interface with an IPv4 address (interfaces: " + describe_interfaces(all) + ")");
}

/// Equal on two ranks exactly when they run in one network namespace of one kernel: then 127.0.0.1 reaches the
/// peer. Hash of the host name, the kernel's boot id and the namespace's inode.
inline std::uint64_t netns_token() {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  };
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  mix(host);
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(boot, id);
  mix(id);
  char ns[128] = {};
  const ssize_t k = ::readlink("/proc/self/ns/net", ns, sizeof ns - 1);
  mix(k > 0 ? std::string(ns, static_cast<std::size_t>(k)) : std::string());
  return h;
}

inline constexpr std::uint32_t card_magic = 0x52435354;   // "RCST"
inline constexpr std::uint32_t card_version = 1;
inline constexpr std::uint32_t hello_magic = 0x5243484c;  // "RCHL"
inline constexpr std::uint32_t frame_magic = 0x52434652;  // "RCFR"

/// A rank's connection card, exchanged with one bootstrap all_gather.
struct card {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint32_t size;  ///< sizeof(card) on the sender
  std::int32_t rank;
  std::uint32_t ok;    ///< 0: set-up failed on this rank; `error` says why
  std::uint32_t any;   ///< 1: listens on every address (127.0.0.1 reaches it from its own namespace)
  std::uint32_t addr;  ///< IPv4, network order: where peers in other namespaces connect (0: nowhere)
  std::uint16_t port;  ///< network order
  std::uint16_t pad;
  std::uint64_t window_bytes;
  std::uint64_t netns;  ///< netns_token()
  std::uint64_t nonce;  ///< random; a connection to this rank must present it in its hello
  char ifname[16];
  char error[256];
};

/// First bytes on every connection, from the connecting rank: who it is and the nonce of the rank it meant.
struct hello {
  std::uint32_t magic;
  std::int32_t rank;
  std::uint64_t nonce;
};
static_assert(sizeof(hello) == 16);

/// Checks a peer's card. Returns an empty string when it is acceptable, else why not.
inline std::string validate_card(const card& c, int expected_rank, std::uint64_t window_bytes) {
  if (std::string why = check_card_header(c, expected_rank, card_magic, card_version, "socket "); !why.empty())
    return why;
  if (c.ok == 0) return "";  // reported separately, with the peer's own message
  const std::string who = "rank " + std::to_string(expected_rank);
  if (c.window_bytes != window_bytes)
    return who + "'s window is " + std::to_string(c.window_bytes) + " bytes, this rank's " + std::to_string(window_bytes);
  if (c.port == 0) return who + "'s socket card has no port";
  return "";
}

inline bool set_nonblocking(int f) {
  const int fl = ::fcntl(f, F_GETFL, 0);
  return fl >= 0 && ::fcntl(f, F_SETFL, fl | O_NONBLOCK) == 0;
}

inline void set_nodelay(int f) {
  const int one = 1;
  ::setsockopt(f, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/// Milliseconds left until `deadline_ns` (detail::now_ns clock), for poll(); at least 0, at most 100 ms so that
/// callers re-check their own conditions.
inline int poll_ms(std::uint64_t deadline_ns) {
  const std::uint64_t now = detail::now_ns();
  if (now >= deadline_ns) return 0;
  const std::uint64_t ms = (deadline_ns - now + 999'999) / 1'000'000;
  return static_cast<int>(ms < 100 ? ms : 100);
}

/// Moves exactly `n` bytes through non-blocking `f` before `deadline_ns`: sends them (`Send`) or receives them.
/// Empty string on success, else why not.
template <bool Send>
std::string transfer_exact(int f, std::conditional_t<Send, const char*, char*> buf, std::size_t n,
                           std::uint64_t deadline_ns) {
  std::size_t done = 0;
  while (done < n) {
    ssize_t k;
    if constexpr (Send) k = ::send(f, buf + done, n - done, MSG_NOSIGNAL);
    else k = ::recv(f, buf + done, n - done, 0);
    if (k > 0 || (Send && k == 0)) {
      done += static_cast<std::size_t>(k);
      continue;
    }
    if (k == 0)
      return "the connection was closed after " + std::to_string(done) + " of " + std::to_string(n) + " bytes";
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return (Send ? "send failed (" : "recv failed (") + errno_text(errno) + ")";
    if (detail::now_ns() >= deadline_ns)
      return Send ? "the peer did not take the bytes before the deadline" : "nothing arrived before the deadline";
    pollfd p{f, static_cast<short>(Send ? POLLOUT : POLLIN), 0};
    ::poll(&p, 1, poll_ms(deadline_ns));
  }
  return {};
}

/// Reads exactly `n` bytes from non-blocking `f` before `deadline_ns`. Empty string on success, else why not.
inline std::string read_exact(int f, void* buf, std::size_t n, std::uint64_t deadline_ns) {
  return transfer_exact<false>(f, static_cast<char*>(buf), n, deadline_ns);
}

/// Writes exactly `n` bytes to non-blocking `f` before `deadline_ns`. Empty string on success, else why not.
inline std::string write_exact(int f, const void* buf, std::size_t n, std::uint64_t deadline_ns) {
  return transfer_exact<true>(f, static_cast<const char*>(buf), n, deadline_ns);
}

}  // namespace rocenante::transport::sock

// bootstrap/tcp.hpp — a store bootstrap over TCP for ranks that are processes started by any launcher (torchrun,
// Slurm's srun, mpirun without linking MPI, a shell loop): rank 0 listens on a known address, every other rank
// connects to it, and set-up exchanges go through rank 0 (a star, in the style of NCCL's unique-id bootstrap and
// torch's TCPStore). Set-up only; collectives never use it.
//
// Who calls: every rank constructs one `tcp` with the same host, port and size and its own rank; every rank then
// makes the same set-up calls in the same order (the bootstrap concept, bootstrap/concepts.hpp). One `tcp` can
// serve several communicators' set-ups in turn (a rebuild after a failure may also make a new one on the same
// port: rank 0 listens with SO_REUSEADDR).
//
// Who may join (bootstrap/trust.hpp; docs/operations.md "Security"): rank 0 listens on the address it was given
// (every address only when that address is a wildcard, 0.0.0.0 or ::, or a name this host maps to loopback
// alone). Every hello carries the job's identity; with ROCENANTE_BOOTSTRAP_SECRET both sides prove they know the
// secret (HMAC-SHA-256 challenge and response; the secret never travels); a peer on this host must run as this
// process's user. A process that fails any of these is refused and told why, is named in rank 0's WARN log and in
// refusals(), and never takes a rank; the job goes on waiting for its own ranks. The other side does the same:
// a rank refuses a "rank 0" of another job, without the secret, or of another user.
//
// Failures travel (nothing waits for a process that already knows it failed):
//   - a rank whose own configuration is bad (a variable of bootstrap::tcp::from_env, or of core/env.hpp) still
//     tells rank 0 why before it throws, when rank 0's address could be read; rank 0 as the failing process
//     answers every rank that connects with its error instead. Every rank then throws config_error naming the
//     failing rank and the value;
//   - a hello that disagrees with rank 0 (another world size, a rank out of range, a rank taken twice) fails the
//     job: rank 0 answers every connected rank at once, and every rank that still connects while ranks keep
//     arriving (until none has come for linger_quiet, at most linger_cap), with the same error.
//
// Bounds (nothing waits forever):
//   - connecting: every rank retries its connection to rank 0 until `timeout`; rank 0 accepts until every rank
//     has said hello or `timeout` ran out, then names the ranks that never connected (and the processes it
//     refused meanwhile), and every connected rank throws the same bootstrap_error (rank 0 sends it to them);
//     one connection's handshake takes at most 5 s of rank 0's time;
//   - each exchange (all_gather, barrier): rank 0 waits at most `timeout` for every rank's contribution, names the
//     ranks whose contribution is missing or whose connection closed (a dead process), and sends the error to the
//     others; a rank waiting for rank 0's answer gives up after the same bound plus a grace period, naming rank 0.
// A rank that entered a different set-up step (another size at the same step) fails every rank, naming both.
//
// Wire (host byte order: every rank is one build on one kind of machine; the hello carries a magic and version):
//   hello     {magic, version, rank, size, flags, pid, nonce, job digest, job text, host}  rank q -> rank 0, once
//   reply     {magic, code, length} + length bytes                    rank 0 -> rank q: code 0 and a challenge
//             {flags, pid, nonce, proof, job digest, job text}, or a refusal / error text (codes below)
//   answer    {magic, code, proof, length} + length bytes of text     rank q -> rank 0: join (0), report this
//                                                                     rank's failure (1), or refuse rank 0 (2)
//   ack       reply: code 0 welcome (every rank joined), else the error
//   part      {magic, step, bytes} + bytes                            rank q -> rank 0, per exchange
//   result    reply: every contribution in rank order (code 0), or the error text (code 1)
// Reply codes: 0 ok, 1 the job failed (bootstrap_error), 2 a rank's configuration failed (config_error), 3 this
// process was refused (bootstrap_error; the job goes on). The first 16 bytes of a hello are {magic, version,
// rank, size} in every version, so a rank of another build is refused with a message, not a timeout.
// IPv4 and IPv6 (host names are resolved with getaddrinfo, AF_UNSPEC; "[::1]:29600" in ROCENANTE_BOOTSTRAP).
// Host only.
#pragma once

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../core/clock.hpp"
#include "../core/env.hpp"
#include "../core/error.hpp"
#include "../core/log.hpp"
#include "../transport/socket/net.hpp"
#include "concepts.hpp"
#include "trust.hpp"

namespace rocenante::bootstrap {

/// Where rank 0 listens, who this rank is, which job it belongs to, and the bound on every wait.
struct tcp_config {
  std::string host;      ///< rank 0's address: a name, an IPv4 or an IPv6 address (no brackets); rank 0 listens
                         ///< on it (on every address when it is a wildcard, 0.0.0.0 or ::)
  std::uint16_t port = 0;
  int rank = -1;
  int size = 0;
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};  ///< connect, and each exchange
  int local_rank = -1;   ///< this rank's index among the ranks of its node, when the launcher says (-1: unknown)
  std::string source;    ///< which variables the values came from (for messages), e.g. "torchrun (RANK, WORLD_SIZE)"
  std::string job;       ///< the job's identity (bootstrap/trust.hpp); empty: "port P", which cannot tell jobs apart
  std::string job_source;  ///< where `job` came from, for messages
  std::string secret;    ///< ROCENANTE_BOOTSTRAP_SECRET; empty: none (whoever reaches the port may try to join)
  log_level debug = log_level::warn;  ///< refusals are logged at WARN, the listening address at INFO
};

namespace tcp_detail {

inline constexpr std::uint32_t magic = 0x52434253;  // "RCBS"
inline constexpr std::uint32_t version = 2;

enum code : std::uint32_t { ok = 0, job_failed = 1, config_failed = 2, refused = 3 };
enum answer_code : std::uint32_t { join = 0, report = 1, refuse = 2 };
inline constexpr std::uint32_t has_secret = 1;  ///< hello and challenge flag

struct hello {
  std::uint32_t magic, version;
  std::int32_t rank, size;  // the same 16 bytes as version 1's hello
  std::uint32_t flags, pid;
  trust::nonce nonce;
  detail::digest job;
  char job_text[96];
  char host[64];
};
struct reply {  // challenge header, ack and result
  std::uint32_t magic, code;
  std::uint64_t length;
};
struct challenge {
  std::uint32_t flags, pid;
  trust::nonce nonce;
  detail::digest proof;
  detail::digest job;
  char job_text[96];
};
struct answer {
  std::uint32_t magic, code;
  detail::digest proof;
  std::uint64_t length;
};
struct part {
  std::uint32_t magic, step;
  std::uint64_t bytes;
};

inline constexpr char root_role[] = "rocenante bootstrap v2: rank 0";
inline constexpr char rank_role[] = "rocenante bootstrap v2: rank";
inline constexpr std::uint64_t max_text = 1 << 16;

inline std::string ms_text(std::chrono::milliseconds t) { return std::to_string(t.count()) + " ms"; }

template <std::size_t N>
void put(char (&dst)[N], const std::string& s) {
  std::memset(dst, 0, N);
  std::memcpy(dst, s.data(), std::min(s.size(), N - 1));
}
template <std::size_t N>
std::string got(const char (&src)[N]) {
  return std::string(src, strnlen(src, N));
}

/// "host:port", "[::1]:port" for an IPv6 address.
inline std::string address_text(const std::string& host, std::uint16_t port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

/// An IPv6 address may be given in brackets ("[::1]"), as in a URL; getaddrinfo wants it without.
inline std::string unbracket(const std::string& h) {
  return h.size() >= 2 && h.front() == '[' && h.back() == ']' ? h.substr(1, h.size() - 2) : h;
}

/// Splits ROCENANTE_BOOTSTRAP's "host:port" ("[v6 address]:port" for IPv6). Throws config_error naming the value.
inline std::pair<std::string, std::string> split_host_port(const std::string& b) {
  const std::string shape = " (rank 0's address and a free port, e.g. node0:29600, 10.0.0.1:29600 or [fd00::1]:29600)";
  if (!b.empty() && b.front() == '[') {
    const auto close = b.find(']');
    if (close == std::string::npos || close + 1 >= b.size() || b[close + 1] != ':' || close == 1)
      throw config_error("ROCENANTE_BOOTSTRAP='" + b + "' is not [address]:port" + shape);
    return {b.substr(1, close - 1), b.substr(close + 2)};
  }
  const auto colon = b.rfind(':');
  if (colon == std::string::npos || colon == 0) throw config_error("ROCENANTE_BOOTSTRAP='" + b + "' is not host:port" + shape);
  if (b.find(':') != colon)
    throw config_error("ROCENANTE_BOOTSTRAP='" + b + "' has several ':': write an IPv6 address in brackets, e.g. [" +
                       b.substr(0, colon) + "]:" + b.substr(colon + 1));
  return {b.substr(0, colon), b.substr(colon + 1)};
}

/// One address getaddrinfo gave.
struct endpoint {
  sockaddr_storage addr{};
  socklen_t len = 0;
  bool loopback() const {
    if (addr.ss_family == AF_INET)
      return (ntohl(reinterpret_cast<const sockaddr_in&>(addr).sin_addr.s_addr) >> 24) == 127;
    return addr.ss_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6&>(addr).sin6_addr);
  }
  bool wildcard() const {
    if (addr.ss_family == AF_INET) return reinterpret_cast<const sockaddr_in&>(addr).sin_addr.s_addr == htonl(INADDR_ANY);
    return addr.ss_family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6&>(addr).sin6_addr);
  }
};

inline std::string endpoint_text(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    ::inet_ntop(AF_INET, &v4.sin_addr, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(ntohs(v4.sin_port));
  }
  if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, buf, sizeof buf);
    return "[" + std::string(buf) + "]:" + std::to_string(ntohs(v6.sin6_port));
  }
  return "(an address of family " + std::to_string(a.ss_family) + ")";
}

/// The addresses of `host` (IPv4 and IPv6, in getaddrinfo's order) with `port`; throws bootstrap_error naming the
/// host and `what` when there are none.
inline std::vector<endpoint> resolve(const std::string& host, std::uint16_t port, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr)
    throw bootstrap_error("bootstrap::tcp: cannot resolve rank 0's address '" + host + "' (" + what + "): " +
                          ::gai_strerror(rc));
  std::vector<endpoint> out;
  for (addrinfo* i = res; i; i = i->ai_next) {
    if ((i->ai_family != AF_INET && i->ai_family != AF_INET6) || i->ai_addrlen > sizeof(sockaddr_storage)) continue;
    endpoint e;
    std::memcpy(&e.addr, i->ai_addr, i->ai_addrlen);
    e.len = static_cast<socklen_t>(i->ai_addrlen);
    const bool seen = std::any_of(out.begin(), out.end(), [&](const endpoint& o) {
      return o.len == e.len && std::memcmp(&o.addr, &e.addr, e.len) == 0;
    });
    if (!seen) out.push_back(e);
  }
  ::freeaddrinfo(res);
  if (out.empty()) throw bootstrap_error("bootstrap::tcp: rank 0's address '" + host + "' (" + what + ") has no IPv4 or IPv6 address");
  return out;
}

/// Fills `c` from the environment as far as it gets, and throws config_error at the first bad or missing value.
/// The order matters: what a failing process needs to reach rank 0 and be believed (the address, the job, the
/// secret) comes first, then what names it (rank and size), then the rest; a failure report waits at most
/// linger_cap whatever the bound. Documented at tcp_config_from_env.
inline void read_env(const env::lookup& get, tcp_config& c) {
  auto fetch = [&](const char* name) -> std::string {
    const char* v = get ? get(name) : std::getenv(name);
    return v ? env::detail::trim(v) : std::string();
  };
  if (const std::string b = fetch("ROCENANTE_BOOTSTRAP"); !b.empty()) {
    auto [h, p] = split_host_port(b);
    c.port = static_cast<std::uint16_t>(env::detail::parse_int("ROCENANTE_BOOTSTRAP port", p, 1, 65535));
    c.host = h;
    c.source = "ROCENANTE_BOOTSTRAP";
  } else {
    const std::string addr = fetch("MASTER_ADDR"), port = fetch("MASTER_PORT");
    if (addr.empty() || port.empty())
      throw config_error(std::string("bootstrap::tcp: ") + (addr.empty() ? "MASTER_ADDR" : "MASTER_PORT") +
                         " is not set: set ROCENANTE_BOOTSTRAP=host:port (rank 0's host and a free port) on every rank, "
                         "or MASTER_ADDR and MASTER_PORT as torchrun does (the bootstrap listens on MASTER_PORT + 1)");
    std::int64_t p = 0;
    try {
      p = env::detail::parse_int("MASTER_PORT", port, 1, 65534);
    } catch (const config_error& e) {
      throw config_error(std::string(e.what()) + ": the bootstrap listens on MASTER_PORT + 1 (torchrun's agent keeps "
                         "MASTER_PORT itself), so 65535 is excluded; or set ROCENANTE_BOOTSTRAP=host:port");
    }
    c.host = unbracket(addr);
    c.port = static_cast<std::uint16_t>(p + 1);
    c.source = "MASTER_ADDR, MASTER_PORT + 1";
  }
  if (const std::string v = fetch("ROCENANTE_DEBUG"); !v.empty()) {
    try {
      c.debug = rocenante::detail::parse_keyword(log_level_keywords, "ROCENANTE_DEBUG", v);
    } catch (const config_error&) {  // env::settings reports it (tcp::from_env); here it only sets the log level
    }
  }
  const job_identity j = job_from_env(get, c.port);
  c.job = j.id;
  c.job_source = j.source;
  c.secret = secret_from_env(get);
  struct pair {
    const char *rank, *size, *who;
  };
  static constexpr pair pairs[] = {{"ROCENANTE_RANK", "ROCENANTE_WORLD_SIZE", "ROCENANTE_RANK"},
                                   {"RANK", "WORLD_SIZE", "torchrun"},
                                   {"SLURM_PROCID", "SLURM_NTASKS", "srun"},
                                   {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI"},
                                   {"PMI_RANK", "PMI_SIZE", "MPICH"}};
  bool found = false;
  for (const pair& p : pairs) {
    const std::string r = fetch(p.rank), s = fetch(p.size);
    if (r.empty() && s.empty()) continue;
    if (r.empty() || s.empty())
      throw config_error(std::string("bootstrap::tcp: ") + (r.empty() ? p.rank : p.size) + " is not set but " +
                         (r.empty() ? p.size : p.rank) + " is: set both");
    c.size = static_cast<int>(env::detail::parse_int(p.size, s, 1, 1 << 20));
    c.rank = static_cast<int>(env::detail::parse_int(p.rank, r, 0, c.size - 1));
    c.source += std::string("; rank and size from ") + p.rank + " / " + p.size;
    found = true;
    break;
  }
  if (!found)
    throw config_error("bootstrap::tcp: no rank given: set ROCENANTE_RANK and ROCENANTE_WORLD_SIZE, or start the "
                       "ranks with torchrun (RANK, WORLD_SIZE), srun (SLURM_PROCID, SLURM_NTASKS) or mpirun");
  for (const char* name : {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"})
    if (const std::string v = fetch(name); !v.empty()) {
      c.local_rank = static_cast<int>(env::detail::parse_int(name, v, 0, 1 << 20));
      break;
    }
  if (const std::string v = fetch("ROCENANTE_BOOTSTRAP_TIMEOUT_MS"); !v.empty())
    c.timeout = std::chrono::milliseconds(env::detail::parse_int("ROCENANTE_BOOTSTRAP_TIMEOUT_MS", v, 1, 86'400'000));
}

}  // namespace tcp_detail

/// Reads the launcher's variables (getenv, or `get`). Throws config_error naming the variable when one is
/// missing or malformed.
///   rank 0's address  ROCENANTE_BOOTSTRAP=host:port ([address]:port for IPv6); else MASTER_ADDR and
///                     MASTER_PORT + 1 (torchrun's agent keeps its own store on MASTER_PORT itself while the
///                     workers run, hence MASTER_PORT <= 65534)
///   job               ROCENANTE_JOB_ID, else the launcher's run id (bootstrap/trust.hpp's job_from_env)
///   secret            ROCENANTE_BOOTSTRAP_SECRET (optional; at least 16 characters)
///   rank, size        the first pair that is set, in this order: ROCENANTE_RANK / ROCENANTE_WORLD_SIZE,
///                     RANK / WORLD_SIZE (torchrun), SLURM_PROCID / SLURM_NTASKS (srun),
///                     OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE (Open MPI's mpirun), PMI_RANK / PMI_SIZE (MPICH)
///   local rank        LOCAL_RANK, SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID (optional)
///   timeout           ROCENANTE_BOOTSTRAP_TIMEOUT_MS (default 120000)
/// Parsing only: a process that uses this and then fails tells nobody; tcp::from_env tells rank 0.
inline tcp_config tcp_config_from_env(const env::lookup& get = {}) {
  tcp_config c;
  tcp_detail::read_env(get, c);
  return c;
}

class tcp {
 public:
  /// Collective: every rank calls. Rank 0 listens on `c.host:c.port` and waits for every other rank's hello;
  /// the others connect to it, retrying until `c.timeout`. Throws bootstrap_error naming the ranks that did not
  /// connect, the process that refused this one or the rank whose hello disagreed; config_error for bad values
  /// (told to rank 0 first, when rank 0's address is known) or for another rank's failed configuration.
  explicit tcp(const tcp_config& c) : cfg_(with_job(c)) {
    std::string bad;
    if (c.size < 1) bad = "bootstrap::tcp: size " + std::to_string(c.size) + " is below 1";
    else if (c.rank < 0 || c.rank >= c.size)
      bad = "bootstrap::tcp: rank " + std::to_string(c.rank) + " is outside [0, " + std::to_string(c.size) + ")";
    else if (c.size > 1 && c.port == 0) bad = "bootstrap::tcp: port 0: give rank 0's listening port";
    if (!bad.empty()) {
      report_failure(c, bad);
      throw config_error(bad);
    }
    if (c.size == 1) return;
    if (c.rank == 0) serve({});
    else join({});
  }

  /// Uses the launcher's variables (tcp_config_from_env; `timeout`, when given, replaces the bootstrap's bound)
  /// and checks the library's own (env::settings), so that a bad value anywhere fails here. When one is bad, this
  /// process first tells rank 0 why (report_failure), so that every rank fails within seconds naming it, then
  /// throws the config_error.
  static tcp from_env(std::optional<std::chrono::milliseconds> timeout = {}, const env::lookup& get = {}) {
    tcp_config c;
    try {
      tcp_detail::read_env(get, c);
      if (timeout) c.timeout = *timeout;
      (void)env::settings::read(get);
    } catch (const config_error& e) {
      if (timeout) c.timeout = *timeout;
      report_failure(c, e.what());
      throw;
    }
    return tcp(c);
  }

  /// Tells the job that this process failed its configuration with `why`, using what `partial` holds (rank 0's
  /// address and port at least; the rank and size when known): a rank connects to rank 0 and reports it; rank 0
  /// listens and answers every rank that connects with it. Bounded by min(timeout, linger_cap); never throws;
  /// does nothing without an address or in a world of one.
  static void report_failure(const tcp_config& partial, const std::string& why) noexcept {
    if (partial.host.empty() || partial.port == 0 || partial.size == 1) return;
    try {
      tcp t(partial, why, reporting{});
    } catch (...) {  // the caller throws its own error next; this report was a courtesy to the others
    }
  }

  tcp(tcp&&) = default;
  tcp& operator=(tcp&&) = default;
  tcp(const tcp&) = delete;
  tcp& operator=(const tcp&) = delete;

  int rank() const { return cfg_.rank; }
  int size() const { return cfg_.size; }
  int local_rank() const { return cfg_.local_rank; }
  const tcp_config& config() const { return cfg_; }
  /// Rank 0: each process refused while the ranks joined (who it said it was, where from, why). Empty elsewhere.
  const std::vector<std::string>& refusals() const { return refused_; }

  /// Every rank calls with the same `bytes`; recv receives size()*bytes bytes in rank order.
  void all_gather(const void* send, void* recv, std::size_t bytes) {
    auto* out = static_cast<std::byte*>(recv);
    const std::uint32_t step = step_++;
    if (!broken_.empty()) throw bootstrap_error(broken_);
    if (cfg_.size == 1) {
      std::memcpy(out, send, bytes);
      return;
    }
    if (cfg_.rank == 0) gather_at_root(send, out, bytes, step);
    else gather_at_leaf(send, out, bytes, step);
  }
  void barrier() {
    std::byte b{};
    std::vector<std::byte> all(static_cast<std::size_t>(cfg_.size));
    all_gather(&b, all.data(), 1);
  }

  /// After a disagreement or a failed configuration, how long rank 0 goes on answering newcomers with the error:
  /// until no rank has arrived for linger_quiet, at most linger_cap (and never beyond the timeout). A failing
  /// rank tries to reach rank 0 for at most linger_cap too.
  static constexpr std::uint64_t linger_quiet_ns = 2'000'000'000ull;
  static constexpr std::uint64_t linger_cap_ns = 10'000'000'000ull;

 private:
  using fd = transport::sock::fd;
  struct reporting {};

  /// The failure report (report_failure): `partial` may lack the rank (-1) and the size (0).
  tcp(const tcp_config& partial, const std::string& failure, reporting) : cfg_(with_job(partial)) {
    if (cfg_.rank == 0) serve(failure);
    else join(failure);
  }

  static tcp_config with_job(tcp_config c) {
    if (c.job.empty()) {
      c.job = "port " + std::to_string(c.port);
      c.job_source = "no job id given: the port alone";
    }
    return c;
  }

  std::uint64_t deadline() const {
    return detail::now_ns() + static_cast<std::uint64_t>(cfg_.timeout.count()) * 1'000'000ull;
  }
  std::uint64_t linger_deadline() const {
    return detail::now_ns() + std::min<std::uint64_t>(linger_cap_ns, static_cast<std::uint64_t>(cfg_.timeout.count()) * 1'000'000ull);
  }
  std::string where() const { return tcp_detail::address_text(cfg_.host, cfg_.port); }
  std::string me() const {
    return "bootstrap::tcp (rank " + (cfg_.rank >= 0 ? std::to_string(cfg_.rank) : std::string("?")) + "): ";
  }
  std::string job_text() const { return "'" + cfg_.job + "' (" + cfg_.job_source + ")"; }
  detail::digest job_digest() const { return detail::sha256_of(cfg_.job); }
  bool has_secret() const { return !cfg_.secret.empty(); }

  [[noreturn]] void fail(const std::string& why, std::uint32_t code = tcp_detail::job_failed) {
    broken_ = why;
    if (code == tcp_detail::config_failed) throw config_error(why);
    throw bootstrap_error(why);
  }

  static void send_reply(int f, std::uint32_t code, const std::string& text, std::uint64_t end) {
    const tcp_detail::reply r{tcp_detail::magic, code, text.size()};
    if (transport::sock::write_exact(f, &r, sizeof r, end).empty() && !text.empty())
      (void)transport::sock::write_exact(f, text.data(), text.size(), end);
  }

  /// Reads `n` bytes of text (at most max_text) within 1 s, or says why it could not.
  std::string read_text(int f, std::uint64_t n) const {
    std::string s(static_cast<std::size_t>(std::min<std::uint64_t>(n, tcp_detail::max_text)), '\0');
    if (!transport::sock::read_exact(f, s.data(), s.size(), detail::now_ns() + 1'000'000'000ull).empty())
      return me() + "rank 0 reported an error and closed";
    return s;
  }

  // ---- rank 0 -----------------------------------------------------------------------------------------------

  /// Binds the listening socket to cfg_.host (every address of its family only for a wildcard, or for a name that
  /// this host maps to loopback alone, such as a host name that /etc/hosts maps to 127.0.1.1: other hosts reach
  /// that name at another address, which rank 0 cannot know).
  fd listen_socket() {
    namespace sock = transport::sock;
    std::vector<tcp_detail::endpoint> eps;
    try {
      eps = tcp_detail::resolve(cfg_.host, cfg_.port, cfg_.source);
    } catch (const bootstrap_error& e) {
      fail(me() + e.what() + "; rank 0 listens on the address it is given");
    }
    in6_addr probe6{};
    in_addr probe4{};
    const bool numeric = ::inet_pton(AF_INET, cfg_.host.c_str(), &probe4) == 1 ||
                         ::inet_pton(AF_INET6, cfg_.host.c_str(), &probe6) == 1;
    const bool only_loopback =
        std::all_of(eps.begin(), eps.end(), [](const tcp_detail::endpoint& e) { return e.loopback(); });
    const bool loopback_name = cfg_.host.rfind("localhost", 0) == 0 || cfg_.host.rfind("ip6-localhost", 0) == 0 ||
                               cfg_.host.rfind("ip6-loopback", 0) == 0;
    if (!numeric && only_loopback && !loopback_name) {
      tcp_detail::endpoint any;
      any.addr.ss_family = eps[0].addr.ss_family;
      if (any.addr.ss_family == AF_INET) {
        auto& a = reinterpret_cast<sockaddr_in&>(any.addr);
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        a.sin_port = htons(cfg_.port);
        any.len = sizeof(sockaddr_in);
      } else {
        auto& a = reinterpret_cast<sockaddr_in6&>(any.addr);
        a.sin6_addr = in6addr_any;
        a.sin6_port = htons(cfg_.port);
        any.len = sizeof(sockaddr_in6);
      }
      log_line(log_level::info, cfg_.debug, 0,
               "bootstrap::tcp: '" + cfg_.host + "' is a loopback address on this host (" + tcp_detail::endpoint_text(eps[0].addr) +
                   ") but other hosts may reach it at another: listening on every address of port " + std::to_string(cfg_.port) +
                   "; give rank 0's address as an IP address to listen on that one alone");
      eps.assign(1, any);
    }
    std::string errors;
    int last_errno = 0;
    for (const tcp_detail::endpoint& e : eps) {
      fd l(::socket(e.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (!l) {
        last_errno = errno;
        errors += (errors.empty() ? "" : "; ") + tcp_detail::endpoint_text(e.addr) + ": socket() failed (" + sock::errno_text(errno) + ")";
        continue;
      }
      const int one = 1, zero = 0;
      ::setsockopt(l.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (e.addr.ss_family == AF_INET6 && e.wildcard())  // "::" was chosen: IPv4 peers too
        ::setsockopt(l.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      if (::bind(l.get(), reinterpret_cast<const sockaddr*>(&e.addr), e.len) == 0 && ::listen(l.get(), 128) == 0) {
        listening_ = tcp_detail::endpoint_text(e.addr);
        log_line(log_level::info, cfg_.debug, 0, "bootstrap::tcp: rank 0 listens on " + listening_ + " (job " + job_text() + ")");
        return l;
      }
      last_errno = errno;
      errors += (errors.empty() ? "" : "; ") + tcp_detail::endpoint_text(e.addr) + ": " + sock::errno_text(errno);
      if (errno == EADDRINUSE) {
        std::optional<uid_t> holder = trust::listener_uid(e.addr);
        if (!holder) {  // a listener on every address holds this one too
          sockaddr_storage any = e.addr;
          if (any.ss_family == AF_INET) reinterpret_cast<sockaddr_in&>(any).sin_addr.s_addr = htonl(INADDR_ANY);
          else reinterpret_cast<sockaddr_in6&>(any).sin6_addr = in6addr_any;
          holder = trust::listener_uid(any);
        }
        if (holder) errors += " (held by a process of uid " + std::to_string(*holder) + ")";
      }
    }
    std::string advice;
    if (last_errno == EADDRINUSE) advice = ": is another job or an earlier run still using it? Choose another port";
    else if (last_errno == EADDRNOTAVAIL)
      advice = ": this host has no such address; is this process rank 0, on the host that address names?";
    fail(me() + "cannot listen on " + where() + " (" + errors + "; from " + cfg_.source + ")" + advice);
  }

  /// What rank 0 made of one connection.
  struct admission {
    enum class kind { dropped, refused, report, joined, bad } k = kind::dropped;
    int rank = -1, size = 0;
    std::string text;  ///< report: the failing rank's error; bad: why the job fails
    std::string who;   ///< the process as it described itself, and where it connected from
  };

  /// Refuses the process on `f` (it is told `told`), records it with `noted` and logs it.
  admission refuse(int f, admission a, const std::string& told, const std::string& noted, std::uint64_t by) {
    send_reply(f, tcp_detail::refused, "bootstrap::tcp: refused by rank 0 at " + listening_ + ": " + told, by);
    const std::string line = "refused " + a.who + ": " + noted;
    refused_.push_back(line);
    log_line(log_level::warn, cfg_.debug, 0, "bootstrap::tcp: " + line);
    a.k = admission::kind::refused;
    return a;
  }

  /// The handshake with one connecting process (bounded by `by`): its hello, the checks of bootstrap/trust.hpp,
  /// the challenge and its answer. Checks the world size and rank of a process of this job.
  admission admit(int f, std::uint64_t by) {
    namespace sock = transport::sock;
    admission a;
    tcp_detail::hello h{};
    if (!sock::read_exact(f, &h, 8, by).empty() || h.magic != tcp_detail::magic) return a;  // not a RoCEnante rank
    sockaddr_storage from{};
    socklen_t fl = sizeof from;
    ::getpeername(f, reinterpret_cast<sockaddr*>(&from), &fl);
    const std::string at = tcp_detail::endpoint_text(from);
    if (h.version != tcp_detail::version) {
      (void)sock::read_exact(f, &h.rank, 8, std::min<std::uint64_t>(by, detail::now_ns() + 1'000'000'000ull));
      a.who = "a process at " + at + " claiming rank " + std::to_string(h.rank);
      return refuse(f, a, "rank " + std::to_string(h.rank) + " runs bootstrap version " + std::to_string(h.version) +
                              ", rank 0 " + std::to_string(tcp_detail::version) + ": deploy one build",
                    "it runs bootstrap version " + std::to_string(h.version) + ", this rank 0 " +
                        std::to_string(tcp_detail::version) + " (another build)", by);
    }
    if (!sock::read_exact(f, reinterpret_cast<char*>(&h) + 8, sizeof h - 8, by).empty()) return a;
    a.rank = h.rank;
    a.size = h.size;
    a.who = "pid " + std::to_string(h.pid) + " on host '" + tcp_detail::got(h.host) + "' at " + at +
            (h.rank >= 0 ? " claiming rank " + std::to_string(h.rank) : std::string(" claiming no rank")) +
            (h.size >= 1 ? (h.rank >= 0 ? " of " : " (a world of ") + std::to_string(h.size) + (h.rank >= 0 ? "" : ")") : std::string()) + " (job '" + tcp_detail::got(h.job_text) + "')";
    if (!detail::same_digest(h.job, job_digest()))
      return refuse(f, a, "another job (id '" + cfg_.job + "') is using this port; this process belongs to job '" +
                              tcp_detail::got(h.job_text) + "'. Give each job its own port (ROCENANTE_BOOTSTRAP or "
                              "MASTER_PORT), or, if they are one job, the same ROCENANTE_JOB_ID to every rank",
                    "its job is not this job", by);
    if (const std::optional<uid_t> uid = trust::local_peer_uid(f); uid && *uid != ::geteuid())
      return refuse(f, a, "this process runs as uid " + std::to_string(*uid) + " and this job's rank 0 as uid " +
                              std::to_string(::geteuid()) + ": only processes of the job's user may join",
                    "it runs as uid " + std::to_string(*uid) + ", this job as uid " + std::to_string(::geteuid()), by);
    const bool theirs = (h.flags & tcp_detail::has_secret) != 0;
    if (has_secret() && !theirs)
      return refuse(f, a, "this job requires ROCENANTE_BOOTSTRAP_SECRET and this process has none: give every rank the "
                          "job's secret", "it has no ROCENANTE_BOOTSTRAP_SECRET", by);
    if (!has_secret() && theirs)
      return refuse(f, a, "this process has ROCENANTE_BOOTSTRAP_SECRET but this job's rank 0 has none: set it on every "
                          "rank or on none", "it has a ROCENANTE_BOOTSTRAP_SECRET and this rank 0 has none", by);
    tcp_detail::challenge ch{};
    ch.flags = has_secret() ? tcp_detail::has_secret : 0;
    ch.pid = static_cast<std::uint32_t>(::getpid());
    ch.nonce = trust::fresh_nonce();
    ch.job = job_digest();
    if (has_secret()) ch.proof = trust::proof(cfg_.secret, tcp_detail::root_role, h.nonce, ch.nonce, ch.job, h.rank, h.size, 0);
    tcp_detail::put(ch.job_text, cfg_.job);
    const tcp_detail::reply r{tcp_detail::magic, tcp_detail::ok, sizeof ch};
    tcp_detail::answer ans{};
    std::string w = sock::write_exact(f, &r, sizeof r, by);
    if (w.empty()) w = sock::write_exact(f, &ch, sizeof ch, by);
    if (w.empty()) w = sock::read_exact(f, &ans, sizeof ans, by);
    if (!w.empty() || ans.magic != tcp_detail::magic) return a;
    std::string text(static_cast<std::size_t>(std::min<std::uint64_t>(ans.length, tcp_detail::max_text)), '\0');
    if (!sock::read_exact(f, text.data(), text.size(), by).empty()) return a;
    if (ans.code == tcp_detail::refuse) {
      const std::string line = "refused by " + a.who + ": " + text;
      refused_.push_back(line);
      log_line(log_level::warn, cfg_.debug, 0, "bootstrap::tcp: " + line);
      a.k = admission::kind::refused;
      return a;
    }
    if (has_secret() &&
        !detail::same_digest(ans.proof, trust::proof(cfg_.secret, tcp_detail::rank_role, ch.nonce, h.nonce, job_digest(),
                                                     h.rank, h.size, ans.code)))
      return refuse(f, a, "its proof of ROCENANTE_BOOTSTRAP_SECRET is wrong: give every rank the job's secret",
                    "wrong ROCENANTE_BOOTSTRAP_SECRET", by);
    if (ans.code == tcp_detail::report) {
      a.k = admission::kind::report;
      a.text = text;
      return a;
    }
    a.k = admission::kind::bad;
    if (h.size != cfg_.size)
      a.text = "rank " + std::to_string(h.rank) + " was started with a world of " + std::to_string(h.size) +
               " ranks, rank 0 with " + std::to_string(cfg_.size) + "; every rank must be given the same size";
    else if (h.rank <= 0 || h.rank >= cfg_.size)
      a.text = "a process connected as rank " + std::to_string(h.rank) + ", outside [1, " + std::to_string(cfg_.size) + ")";
    else if (peers_[static_cast<std::size_t>(h.rank)])
      a.text = "two processes connected as rank " + std::to_string(h.rank) + "; every rank must be given its own rank";
    else
      a.k = admission::kind::joined;
    return a;
  }

  /// Accepts the ranks (own_failure non-empty: this rank 0's configuration failed; it only tells the others).
  void serve(const std::string& own_failure) {
    namespace sock = transport::sock;
    fd l = listen_socket();
    const int n = std::max(cfg_.size, 1);
    peers_.resize(static_cast<std::size_t>(n));
    std::vector<char> accounted(static_cast<std::size_t>(n), 0);  // joined, reported or told the error
    accounted[0] = cfg_.size >= 1;  // a size this rank 0 could not read: only the linger bounds the wait
    const std::uint64_t end = deadline();
    std::string trouble;  // the job fails: set once, sent to every rank that is or will be connected
    std::uint32_t trouble_code = tcp_detail::ok;
    std::uint64_t cap = end, stop_by = end;
    const std::string prefix = "bootstrap::tcp (rank 0, " + listening_ + "): ";
    auto set_trouble = [&](std::uint32_t code, const std::string& why) {
      if (!trouble.empty()) return;
      trouble = prefix + why;
      trouble_code = code;
      for (int q = 1; q < n; ++q)
        if (peers_[q]) {
          send_reply(peers_[q].get(), code, trouble, detail::now_ns() + 1'000'000'000ull);
          peers_[q].reset();
        }
      cap = std::min(end, linger_deadline());
      stop_by = std::min(cap, detail::now_ns() + linger_quiet_ns);
    };
    if (!own_failure.empty())
      set_trouble(tcp_detail::config_failed, "rank 0 failed its own configuration: " + own_failure +
                                                 " (docs/environment.md lists the accepted values)");
    auto all_accounted = [&] { return std::all_of(accounted.begin(), accounted.end(), [](char c) { return c != 0; }); };
    while (detail::now_ns() < stop_by && !all_accounted()) {
      pollfd p{l.get(), POLLIN, 0};
      ::poll(&p, 1, sock::poll_ms(stop_by));
      for (;;) {
        fd c(::accept4(l.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!c) break;
        // One connection's handshake takes at most 5 s of rank 0's time: a peer that says nothing is dropped.
        const std::uint64_t by = std::min<std::uint64_t>(end, detail::now_ns() + 5'000'000'000ull);
        admission a = admit(c.get(), by);
        const bool ours = a.k == admission::kind::joined || a.k == admission::kind::report || a.k == admission::kind::bad;
        if (!ours) continue;
        if (a.rank >= 1 && a.rank < n) accounted[static_cast<std::size_t>(a.rank)] = 1;
        if (a.k == admission::kind::report)
          set_trouble(tcp_detail::config_failed,
                      (a.rank >= 0 ? "rank " + std::to_string(a.rank) : std::string("a process that could not read its rank")) +
                          " failed its own configuration and exited: " + a.text + " (" + a.who + ")");
        else if (a.k == admission::kind::bad)
          set_trouble(tcp_detail::job_failed, a.text);
        if (!trouble.empty()) {
          send_reply(c.get(), trouble_code, trouble, detail::now_ns() + 1'000'000'000ull);
          stop_by = std::min(cap, detail::now_ns() + linger_quiet_ns);  // ranks are still arriving
          continue;
        }
        sock::set_nodelay(c.get());
        peers_[static_cast<std::size_t>(a.rank)] = std::move(c);
      }
    }
    if (!trouble.empty()) fail(trouble, trouble_code);
    std::string missing;
    for (int q = 1; q < n; ++q)
      if (!peers_[q]) missing += (missing.empty() ? "" : ", ") + std::to_string(q);
    std::string why;
    if (!missing.empty()) {
      why = prefix + "rank(s) " + missing + " did not connect within " + tcp_detail::ms_text(cfg_.timeout) + " (" +
            cfg_.source + "); were they started, with the same address, port and size?";
      if (!refused_.empty()) {
        why += " Refused meanwhile:";
        for (const auto& r : refused_) why += " " + r + ";";
      }
    }
    for (int q = 1; q < n; ++q)
      if (peers_[q]) send_reply(peers_[q].get(), why.empty() ? tcp_detail::ok : tcp_detail::job_failed, why, deadline());
    if (!why.empty()) fail(why);
  }

  void gather_at_root(const void* send, std::byte* out, std::size_t bytes, std::uint32_t step) {
    namespace sock = transport::sock;
    const std::uint64_t end = deadline();
    std::memcpy(out, send, bytes);
    std::string missing, why;
    for (int q = 1; q < cfg_.size && why.empty(); ++q) {
      tcp_detail::part h{};
      std::string r = sock::read_exact(peers_[q].get(), &h, sizeof h, missing.empty() ? end : detail::now_ns());
      if (!r.empty()) {
        if (r.find("closed") != std::string::npos || r.find("failed") != std::string::npos)
          why = "rank " + std::to_string(q) + " closed its bootstrap connection (" + r + "): the process exited or crashed";
        else
          missing += (missing.empty() ? "" : ", ") + std::to_string(q);
        continue;
      }
      if (h.magic != tcp_detail::magic || h.step != step || h.bytes != bytes) {
        why = "rank " + std::to_string(q) + " entered set-up exchange " + std::to_string(h.step) + " with " +
              std::to_string(h.bytes) + " bytes, rank 0 exchange " + std::to_string(step) + " with " +
              std::to_string(bytes) + " bytes: the ranks' set-up calls are out of order (different options, "
              "transports or communicator counts)";
        break;
      }
      if (!missing.empty()) continue;  // failing anyway: only find who else is missing
      r = sock::read_exact(peers_[q].get(), out + static_cast<std::size_t>(q) * bytes, bytes, end);
      if (!r.empty()) why = "rank " + std::to_string(q) + "'s set-up data did not arrive (" + r + ")";
    }
    if (why.empty() && !missing.empty())
      why = "rank(s) " + missing + " did not enter set-up exchange " + std::to_string(step) + " within " +
            tcp_detail::ms_text(cfg_.timeout) + ": dead, stalled, or making different set-up calls";
    if (!why.empty()) why = "bootstrap::tcp (rank 0): " + why;
    const std::uint64_t send_end = deadline();
    for (int q = 1; q < cfg_.size; ++q) {
      if (!why.empty()) {
        send_reply(peers_[q].get(), tcp_detail::job_failed, why,
                   std::min<std::uint64_t>(send_end, detail::now_ns() + 1'000'000'000ull));
        continue;
      }
      const tcp_detail::reply r{tcp_detail::magic, 0, std::uint64_t{bytes} * static_cast<std::uint64_t>(cfg_.size)};
      std::string w = sock::write_exact(peers_[q].get(), &r, sizeof r, send_end);
      if (w.empty()) w = sock::write_exact(peers_[q].get(), out, bytes * static_cast<std::size_t>(cfg_.size), send_end);
      if (!w.empty()) why = "bootstrap::tcp (rank 0): sending the result of exchange " + std::to_string(step) +
                            " to rank " + std::to_string(q) + " failed (" + w + ")";
    }
    if (!why.empty()) fail(why);
  }

  // ---- ranks 1.. --------------------------------------------------------------------------------------------

  /// One connection attempt to `e` within `end` (at most 1 s); an invalid fd and `last` set when it failed.
  static fd connect_once(const tcp_detail::endpoint& e, std::uint64_t end, std::string& last) {
    namespace sock = transport::sock;
    fd f(::socket(e.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!f) {
      last = "socket() failed (" + sock::errno_text(errno) + ")";
      return f;
    }
    int err = 0;
    if (::connect(f.get(), reinterpret_cast<const sockaddr*>(&e.addr), e.len) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{f.get(), POLLOUT, 0};
        const std::uint64_t by = std::min<std::uint64_t>(end, detail::now_ns() + 1'000'000'000ull);
        while (p.revents == 0 && detail::now_ns() < by) ::poll(&p, 1, sock::poll_ms(by));
        socklen_t len = sizeof err;
        err = p.revents == 0 ? ETIMEDOUT : 0;
        if (p.revents != 0) ::getsockopt(f.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      }
    }
    if (err != 0) {
      last = tcp_detail::endpoint_text(e.addr) + ": " + sock::errno_text(err);
      f.reset();
    }
    return f;
  }

  /// The handshake on connected `f` (failure non-empty: report it instead of joining). Returns false when the
  /// connection closed before rank 0 answered (retry); throws when this rank is refused, refuses rank 0, or the
  /// job failed; returns true when joined (root_ set) or the failure was reported.
  bool handshake(fd& f, const tcp_detail::endpoint& e, const std::string& failure, std::string& last) {
    namespace sock = transport::sock;
    const std::string at = tcp_detail::endpoint_text(e.addr);
    tcp_detail::hello h{};
    h.magic = tcp_detail::magic;
    h.version = tcp_detail::version;
    h.rank = cfg_.rank;
    h.size = cfg_.size;
    h.flags = has_secret() ? tcp_detail::has_secret : 0;
    h.pid = static_cast<std::uint32_t>(::getpid());
    h.nonce = trust::fresh_nonce();
    h.job = job_digest();
    tcp_detail::put(h.job_text, cfg_.job);
    char host[64] = {};
    ::gethostname(host, sizeof host - 1);
    tcp_detail::put(h.host, host);
    tcp_detail::reply r{};
    // rank 0 admits one connection at a time, each within 5 s, and answers when every rank has joined or it gives
    // up: wait for its own bound and a grace (a failure report waits no longer than its linger)
    const std::uint64_t answer_by = failure.empty() ? deadline() + grace_ns : linger_deadline();
    std::string w = sock::write_exact(f.get(), &h, sizeof h, deadline());
    if (w.empty()) w = sock::read_exact(f.get(), &r, sizeof r, answer_by);
    if (!w.empty()) {
      last = at + ": " + w;
      return false;
    }
    if (r.magic != tcp_detail::magic)
      fail(me() + at + " answered, but not as a RoCEnante rank 0 (another service on this port?)");
    if (r.code != tcp_detail::ok) {
      const std::string text = read_text(f.get(), r.length);
      fail(text + " (seen by rank " + std::to_string(cfg_.rank) + ")", r.code);
    }
    if (r.length != sizeof(tcp_detail::challenge))
      fail(me() + "rank 0 at " + at + " speaks another bootstrap version (a challenge of " + std::to_string(r.length) +
           " bytes): deploy one build");
    tcp_detail::challenge ch{};
    w = sock::read_exact(f.get(), &ch, sizeof ch, deadline());
    if (!w.empty()) {
      last = at + ": " + w;
      return false;
    }
    std::string refusal;
    const bool theirs = (ch.flags & tcp_detail::has_secret) != 0;
    if (!detail::same_digest(ch.job, job_digest()))
      refusal = "the process listening at " + at + " is rank 0 of another job (id '" + tcp_detail::got(ch.job_text) +
                "'); this rank's job is " + job_text() + ": another job is using this port";
    else if (has_secret() && !theirs)
      refusal = "the process listening at " + at + " has no ROCENANTE_BOOTSTRAP_SECRET and this rank has one";
    else if (!has_secret() && theirs)
      refusal = "the process listening at " + at + " requires ROCENANTE_BOOTSTRAP_SECRET and this rank has none";
    else if (has_secret() &&
             !detail::same_digest(ch.proof, trust::proof(cfg_.secret, tcp_detail::root_role, h.nonce, ch.nonce, h.job,
                                                         h.rank, h.size, 0)))
      refusal = "the process listening at " + at + " (pid " + std::to_string(ch.pid) +
                ") did not prove it knows ROCENANTE_BOOTSTRAP_SECRET: rank 0 of a job with another secret, or an "
                "impostor that took the port";
    else if (const std::optional<uid_t> uid = trust::local_peer_uid(f.get()); uid && *uid != ::geteuid())
      refusal = "the process listening at " + at + " (pid " + std::to_string(ch.pid) + ") runs as uid " +
                std::to_string(*uid) + " and this rank as uid " + std::to_string(::geteuid()) +
                ": another user's process holds rank 0's port";
    const std::uint32_t code = !refusal.empty() ? tcp_detail::refuse : !failure.empty() ? tcp_detail::report : tcp_detail::join;
    const std::string& text = !refusal.empty() ? refusal : failure;
    tcp_detail::answer ans{};
    ans.magic = tcp_detail::magic;
    ans.code = code;
    if (has_secret() && refusal.empty())
      ans.proof = trust::proof(cfg_.secret, tcp_detail::rank_role, ch.nonce, h.nonce, h.job, h.rank, h.size, code);
    ans.length = std::min<std::uint64_t>(text.size(), tcp_detail::max_text);
    w = sock::write_exact(f.get(), &ans, sizeof ans, deadline());
    if (w.empty()) w = sock::write_exact(f.get(), text.data(), static_cast<std::size_t>(ans.length), deadline());
    if (!refusal.empty()) fail(me() + "refused to join: " + refusal + "; this rank's job is " + job_text());
    if (!w.empty()) {
      last = at + ": " + w;
      return false;
    }
    w = sock::read_exact(f.get(), &r, sizeof r, failure.empty() ? deadline() + grace_ns : linger_deadline());
    if (!failure.empty()) return true;  // told; whatever rank 0 answers, this process throws its own error
    if (!w.empty()) {
      last = at + ": " + w;
      if (w.find("closed") == std::string::npos)  // rank 0 took the hello but never answered: its bound ran out
        fail(me() + "rank 0 at " + at + " took this rank's hello but did not answer within " +
             tcp_detail::ms_text(cfg_.timeout) + " (" + w + ")");
      return false;
    }
    if (r.magic != tcp_detail::magic) fail(me() + "a corrupt answer from rank 0 at " + at);
    if (r.code != tcp_detail::ok) fail(read_text(f.get(), r.length) + " (reported to rank " + std::to_string(cfg_.rank) + ")", r.code);
    sock::set_nodelay(f.get());
    root_ = std::move(f);
    return true;
  }

  /// Joins rank 0 (failure non-empty: reports it, for at most linger_cap).
  void join(const std::string& failure) {
    const std::vector<tcp_detail::endpoint> eps = [&] {
      try {
        return tcp_detail::resolve(cfg_.host, cfg_.port, cfg_.source);
      } catch (const bootstrap_error& e) {
        fail(e.what());
      }
    }();
    const std::uint64_t end = failure.empty() ? deadline() : linger_deadline();
    std::string last = "no attempt";
    while (detail::now_ns() < end) {
      for (const tcp_detail::endpoint& e : eps) {
        fd f = connect_once(e, end, last);
        if (f && handshake(f, e, failure, last)) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 0 may not be listening yet
    }
    if (!failure.empty()) return;
    fail(me() + "could not join rank 0 at " + where() + " within " + tcp_detail::ms_text(cfg_.timeout) + " (" + last +
         "; " + cfg_.source + "): is rank 0 running, and are the address and port right?");
  }

  void gather_at_leaf(const void* send, std::byte* out, std::size_t bytes, std::uint32_t step) {
    namespace sock = transport::sock;
    const std::string me = this->me();
    const tcp_detail::part h{tcp_detail::magic, step, bytes};
    std::string w = sock::write_exact(root_.get(), &h, sizeof h, deadline());
    if (w.empty()) w = sock::write_exact(root_.get(), send, bytes, deadline());
    if (!w.empty()) fail(me + "sending set-up exchange " + std::to_string(step) + " to rank 0 failed (" + w + "): rank 0 died?");
    tcp_detail::reply r{};
    w = sock::read_exact(root_.get(), &r, sizeof r, deadline() + grace_ns);
    if (!w.empty())
      fail(me + "no answer from rank 0 (" + where() + ") for set-up exchange " + std::to_string(step) + " (" + w +
           "): rank 0 is dead or stalled");
    if (r.magic != tcp_detail::magic) fail(me + "a corrupt answer from rank 0");
    if (r.code != 0) fail(read_text(root_.get(), r.length) + " (reported to rank " + std::to_string(cfg_.rank) + ")");
    if (r.length != std::uint64_t{bytes} * static_cast<std::uint64_t>(cfg_.size))
      fail(me + "rank 0 answered with " + std::to_string(r.length) + " bytes, expected " +
           std::to_string(bytes * static_cast<std::size_t>(cfg_.size)));
    w = sock::read_exact(root_.get(), out, bytes * static_cast<std::size_t>(cfg_.size), deadline());
    if (!w.empty()) fail(me + "the answer of rank 0 broke off (" + w + ")");
  }

  static constexpr std::uint64_t grace_ns = 5'000'000'000ull;  ///< beyond rank 0's own bound, before blaming it

  tcp_config cfg_;
  std::vector<fd> peers_;  ///< rank 0: connection of each rank (index 0 unused)
  fd root_;                ///< other ranks: connection to rank 0
  std::uint32_t step_ = 0;
  std::string broken_;     ///< after a failure every later call throws the same error
  std::string listening_;  ///< rank 0: the address it listens on
  std::vector<std::string> refused_;  ///< rank 0: the processes refused while the ranks joined
};
static_assert(bootstrap<tcp>);

}  // namespace rocenante::bootstrap

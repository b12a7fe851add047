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
// Bounds (nothing waits forever):
//   - connecting: every rank retries its connection to rank 0 until `timeout`; rank 0 accepts until every rank
//     has said hello or `timeout` ran out, then names the ranks that never connected, and every connected rank
//     throws the same bootstrap_error (rank 0 sends it to them);
//   - each exchange (all_gather, barrier): rank 0 waits at most `timeout` for every rank's contribution, names the
//     ranks whose contribution is missing or whose connection closed (a dead process), and sends the error to the
//     others; a rank waiting for rank 0's answer gives up after the same bound plus a grace period, naming rank 0.
// A rank that entered a different set-up step (another size at the same step) fails every rank, naming both.
//
// Wire (host byte order: every rank is one build on one kind of machine; the hello carries a magic and version):
//   hello  {magic, version, rank, size}                     rank q -> rank 0, once
//   ack    {magic, code, length} + length bytes of text     rank 0 -> rank q (code 0: welcome; else the error)
//   part   {magic, step, bytes} + bytes                     rank q -> rank 0, per exchange
//   result {magic, code, length} + length bytes             rank 0 -> rank q: every contribution in rank order
//                                                           (code 0), or the error text (code 1)
// IPv4 (host names are resolved with getaddrinfo). Host only.
#pragma once

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../core/clock.hpp"
#include "../core/env.hpp"
#include "../core/error.hpp"
#include "../transport/socket/net.hpp"
#include "concepts.hpp"

namespace rocenante::bootstrap {

/// Where rank 0 listens, who this rank is, and the bound on every wait.
struct tcp_config {
  std::string host;      ///< rank 0's address (name or IPv4); rank 0 itself listens on every address
  std::uint16_t port = 0;
  int rank = -1;
  int size = 0;
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};  ///< connect, and each exchange
  int local_rank = -1;   ///< this rank's index among the ranks of its node, when the launcher says (-1: unknown)
  std::string source;    ///< which variables the values came from (for messages), e.g. "torchrun (RANK, WORLD_SIZE)"
};

namespace tcp_detail {

inline constexpr std::uint32_t magic = 0x52434253;  // "RCBS"
inline constexpr std::uint32_t version = 1;

struct hello {
  std::uint32_t magic, version;
  std::int32_t rank, size;
};
struct reply {  // ack and result
  std::uint32_t magic, code;
  std::uint64_t length;
};
struct part {
  std::uint32_t magic, step;
  std::uint64_t bytes;
};

inline std::string ms_text(std::chrono::milliseconds t) { return std::to_string(t.count()) + " ms"; }

/// IPv4 address of `host` in network byte order; throws bootstrap_error naming the host and `what`.
inline std::uint32_t resolve(const std::string& host, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr)
    throw bootstrap_error("bootstrap::tcp: cannot resolve rank 0's address '" + host + "' (" + what + "): " +
                          ::gai_strerror(rc));
  const std::uint32_t a = reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr.s_addr;
  ::freeaddrinfo(res);
  return a;
}

}  // namespace tcp_detail

/// Reads the launcher's variables (getenv, or `get`). Throws config_error naming the variable when one is
/// missing or malformed.
///   rank 0's address  ROCENANTE_BOOTSTRAP=host:port; else MASTER_ADDR and MASTER_PORT + 1 (torchrun's agent
///                     keeps its own store on MASTER_PORT itself while the workers run)
///   rank, size        the first pair that is set, in this order: ROCENANTE_RANK / ROCENANTE_WORLD_SIZE,
///                     RANK / WORLD_SIZE (torchrun), SLURM_PROCID / SLURM_NTASKS (srun),
///                     OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE (Open MPI's mpirun), PMI_RANK / PMI_SIZE (MPICH)
///   local rank        LOCAL_RANK, SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID (optional)
///   timeout           ROCENANTE_BOOTSTRAP_TIMEOUT_MS (default 120000)
inline tcp_config tcp_config_from_env(const env::lookup& get = {}) {
  auto fetch = [&](const char* name) -> std::string {
    const char* v = get ? get(name) : std::getenv(name);
    return v ? env::detail::trim(v) : std::string();
  };
  tcp_config c;
  if (const std::string b = fetch("ROCENANTE_BOOTSTRAP"); !b.empty()) {
    const auto colon = b.rfind(':');
    if (colon == std::string::npos || colon == 0)
      throw config_error("ROCENANTE_BOOTSTRAP='" + b + "' is not host:port (rank 0's address and a free port, e.g. "
                         "node0:29600)");
    c.host = b.substr(0, colon);
    c.port = static_cast<std::uint16_t>(env::detail::parse_int("ROCENANTE_BOOTSTRAP port", b.substr(colon + 1), 1, 65535));
    c.source = "ROCENANTE_BOOTSTRAP";
  } else {
    const std::string addr = fetch("MASTER_ADDR"), port = fetch("MASTER_PORT");
    if (addr.empty() || port.empty())
      throw config_error(std::string("bootstrap::tcp: ") + (addr.empty() ? "MASTER_ADDR" : "MASTER_PORT") +
                         " is not set: set ROCENANTE_BOOTSTRAP=host:port (rank 0's host and a free port) on every rank, "
                         "or MASTER_ADDR and MASTER_PORT as torchrun does (the bootstrap listens on MASTER_PORT + 1)");
    c.host = addr;
    c.port = static_cast<std::uint16_t>(env::detail::parse_int("MASTER_PORT", port, 1, 65534) + 1);
    c.source = "MASTER_ADDR, MASTER_PORT + 1";
  }
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
  return c;
}

class tcp {
 public:
  /// Collective: every rank calls. Rank 0 listens on `c.port` (every address) and waits for every other rank's
  /// hello; the others connect to `c.host:c.port`, retrying until `c.timeout`. Throws bootstrap_error naming the
  /// ranks that did not connect, or config_error for bad values.
  explicit tcp(const tcp_config& c) : cfg_(c) {
    if (c.size < 1) throw config_error("bootstrap::tcp: size " + std::to_string(c.size) + " is below 1");
    if (c.rank < 0 || c.rank >= c.size)
      throw config_error("bootstrap::tcp: rank " + std::to_string(c.rank) + " is outside [0, " + std::to_string(c.size) + ")");
    if (c.size > 1 && c.port == 0) throw config_error("bootstrap::tcp: port 0: give rank 0's listening port");
    if (c.size == 1) return;
    if (c.rank == 0) serve_hellos();
    else connect_to_root();
  }
  /// Uses the launcher's variables (tcp_config_from_env).
  static tcp from_env() { return tcp(tcp_config_from_env()); }

  tcp(tcp&&) = default;
  tcp& operator=(tcp&&) = default;
  tcp(const tcp&) = delete;
  tcp& operator=(const tcp&) = delete;

  int rank() const { return cfg_.rank; }
  int size() const { return cfg_.size; }
  int local_rank() const { return cfg_.local_rank; }
  const tcp_config& config() const { return cfg_; }

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

 private:
  using fd = transport::sock::fd;

  std::uint64_t deadline() const {
    return detail::now_ns() + static_cast<std::uint64_t>(cfg_.timeout.count()) * 1'000'000ull;
  }
  std::string where() const { return cfg_.host + ":" + std::to_string(cfg_.port); }

  [[noreturn]] void fail(const std::string& why) {
    broken_ = why;
    throw bootstrap_error(why);
  }

  // ---- rank 0 -----------------------------------------------------------------------------------------------

  void serve_hellos() {
    namespace sock = transport::sock;
    fd l(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!l) fail("bootstrap::tcp (rank 0): socket() failed (" + sock::errno_text(errno) + ")");
    const int one = 1;
    ::setsockopt(l.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(cfg_.port);
    if (::bind(l.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0)
      fail("bootstrap::tcp (rank 0): cannot listen on port " + std::to_string(cfg_.port) + " (" + sock::errno_text(errno) +
           "; from " + cfg_.source + "): is another job or an earlier run still using it? Choose another port");
    if (::listen(l.get(), 128) != 0) fail("bootstrap::tcp (rank 0): listen failed (" + sock::errno_text(errno) + ")");
    peers_.resize(static_cast<std::size_t>(cfg_.size));
    const std::uint64_t end = deadline();
    int joined = 0;
    std::string trouble;  // the first bad hello (a rank of another job, or a size that differs)
    while (joined < cfg_.size - 1 && detail::now_ns() < end) {
      pollfd p{l.get(), POLLIN, 0};
      ::poll(&p, 1, sock::poll_ms(end));
      for (;;) {
        fd c(::accept4(l.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!c) break;
        tcp_detail::hello h{};
        // A peer that connected but sends nothing for 5 s is not one of ours (or is wedged): drop it.
        const std::uint64_t hello_by = std::min<std::uint64_t>(end, detail::now_ns() + 5'000'000'000ull);
        if (!sock::read_exact(c.get(), &h, sizeof h, hello_by).empty() || h.magic != tcp_detail::magic) continue;
        std::string bad;
        if (h.version != tcp_detail::version)
          bad = "rank " + std::to_string(h.rank) + " runs bootstrap version " + std::to_string(h.version) + ", rank 0 " +
                std::to_string(tcp_detail::version) + ": deploy one build";
        else if (h.size != cfg_.size)
          bad = "rank " + std::to_string(h.rank) + " was started with a world of " + std::to_string(h.size) +
                " ranks, rank 0 with " + std::to_string(cfg_.size) + "; every rank must be given the same size";
        else if (h.rank <= 0 || h.rank >= cfg_.size)
          bad = "a process connected as rank " + std::to_string(h.rank) + ", outside [1, " + std::to_string(cfg_.size) + ")";
        else if (peers_[h.rank])
          bad = "two processes connected as rank " + std::to_string(h.rank) + "; every rank must be given its own rank";
        if (!bad.empty()) {
          send_reply(c.get(), 1, bad, end);
          if (trouble.empty()) trouble = bad;
          continue;
        }
        sock::set_nodelay(c.get());
        peers_[h.rank] = std::move(c);
        ++joined;
      }
      if (!trouble.empty()) break;
    }
    std::string missing;
    for (int q = 1; q < cfg_.size; ++q)
      if (!peers_[q]) missing += (missing.empty() ? "" : ", ") + std::to_string(q);
    std::string why;
    if (!trouble.empty()) why = "bootstrap::tcp (rank 0, port " + std::to_string(cfg_.port) + "): " + trouble;
    else if (!missing.empty())
      why = "bootstrap::tcp (rank 0, port " + std::to_string(cfg_.port) + "): rank(s) " + missing +
            " did not connect within " + tcp_detail::ms_text(cfg_.timeout) + " (" + cfg_.source +
            "); were they started, with the same address, port and size?";
    for (int q = 1; q < cfg_.size; ++q)
      if (peers_[q]) send_reply(peers_[q].get(), why.empty() ? 0 : 1, why, deadline());
    if (!why.empty()) fail(why);
  }

  void send_reply(int f, std::uint32_t code, const std::string& text, std::uint64_t end) {
    const tcp_detail::reply r{tcp_detail::magic, code, text.size()};
    if (transport::sock::write_exact(f, &r, sizeof r, end).empty() && !text.empty())
      (void)transport::sock::write_exact(f, text.data(), text.size(), end);
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
        send_reply(peers_[q].get(), 1, why, std::min<std::uint64_t>(send_end, detail::now_ns() + 1'000'000'000ull));
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

  void connect_to_root() {
    namespace sock = transport::sock;
    const std::uint32_t ip = tcp_detail::resolve(cfg_.host, cfg_.source);
    const std::uint64_t end = deadline();
    std::string last = "no attempt";
    while (detail::now_ns() < end) {
      fd f(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (!f) fail("bootstrap::tcp (rank " + std::to_string(cfg_.rank) + "): socket() failed (" + sock::errno_text(errno) + ")");
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = ip;
      a.sin_port = htons(cfg_.port);
      int err = 0;
      if (::connect(f.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
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
      if (err == 0) {
        sock::set_nodelay(f.get());
        const tcp_detail::hello h{tcp_detail::magic, tcp_detail::version, cfg_.rank, cfg_.size};
        tcp_detail::reply r{};
        std::string w = sock::write_exact(f.get(), &h, sizeof h, end);
        // rank 0 answers once every rank has joined, or when it gives up: wait for its own bound and a grace
        if (w.empty()) w = sock::read_exact(f.get(), &r, sizeof r, deadline() + grace_ns);
        if (w.empty()) {
          if (r.magic != tcp_detail::magic)
            fail("bootstrap::tcp (rank " + std::to_string(cfg_.rank) + "): " + where() +
                 " answered, but not as a RoCEnante rank 0 (another service on this port?)");
          if (r.code != 0) fail(read_text(f.get(), r.length));
          root_ = std::move(f);
          return;
        }
        last = w;
        if (w.find("closed") == std::string::npos) break;  // rank 0 accepted but never answered: its own bound ran out
      } else {
        last = sock::errno_text(err);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 0 may not be listening yet
    }
    fail("bootstrap::tcp (rank " + std::to_string(cfg_.rank) + "): could not join rank 0 at " + where() + " within " +
         tcp_detail::ms_text(cfg_.timeout) + " (" + last + "; " + cfg_.source +
         "): is rank 0 running, and are the address and port right?");
  }

  std::string read_text(int f, std::uint64_t n) {
    std::string s(static_cast<std::size_t>(std::min<std::uint64_t>(n, 1 << 16)), '\0');
    if (!transport::sock::read_exact(f, s.data(), s.size(), detail::now_ns() + 1'000'000'000ull).empty())
      return "bootstrap::tcp (rank " + std::to_string(cfg_.rank) + "): rank 0 reported an error and closed";
    return s;
  }

  void gather_at_leaf(const void* send, std::byte* out, std::size_t bytes, std::uint32_t step) {
    namespace sock = transport::sock;
    const std::string me = "bootstrap::tcp (rank " + std::to_string(cfg_.rank) + "): ";
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
};
static_assert(bootstrap<tcp>);

}  // namespace rocenante::bootstrap

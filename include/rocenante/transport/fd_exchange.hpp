// transport/fd_exchange.hpp — file descriptors passed between the processes of one job on one host, as
// transport/cuda_ipc.hpp passes its VMM windows (a descriptor grants read and write access to a rank's GPU memory,
// so who may hand one over, and to whom, matters). File descriptors cannot travel in a bootstrap's bytes: each
// rank binds an abstract Unix datagram socket whose name comes from a nonce of rank 0 and the rank, and sends its
// descriptor to every peer's socket (SCM_RIGHTS).
//
// Who may take part (docs/operations.md "Security"): abstract names are visible to every process of the network
// namespace (/proc/net/unix), so the names alone protect nothing. Each datagram carries the job's token (a random
// value of rank 0 that travels only through the job's bootstrap, never in a socket name) and the sender's rank;
// each receiving socket has SO_PASSCRED, so the kernel attaches the sender's pid and uid (SCM_CREDENTIALS), which a
// process cannot forge without CAP_SETUID. A datagram from another user, without the token, of another build, or
// for a rank already served is refused: the receiver records it (refusals(), and the timeout message if the real
// rank never sends), answers the sender with a refusal datagram naming the reason, closes any descriptor it
// carried, and goes on waiting for the real rank. Descriptors are sent only after every rank has voted, through
// the bootstrap, that its socket is bound and ready to check credentials: a rank whose bind failed fails every rank
// before any descriptor leaves any process.
//
// Who calls: cuda_ipc's set-up (exchange()), and tests/host/test_trust.cpp, which also drives the steps one by one.
// Every wait is bounded by the caller's deadline. Host only.
#pragma once

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../bootstrap/concepts.hpp"
#include "../bootstrap/vote.hpp"
#include "../core/clock.hpp"
#include "../core/error.hpp"
#include "socket/net.hpp"

namespace rocenante::transport::fdx {

inline constexpr std::uint32_t magic = 0x52434644;  // "RCFD"
inline constexpr std::uint32_t version = 1;
enum kind : std::uint32_t { descriptor = 0, refusal = 1 };

/// The payload of every datagram; a descriptor rides beside it (SCM_RIGHTS).
struct datagram {
  std::uint32_t magic, version;
  std::uint64_t token;  ///< the job's token (exchange()'s `token`)
  std::int32_t who;     ///< the sender's rank
  std::uint32_t kind;
  char text[200];       ///< a refusal: why
};

/// 8 bytes from the kernel's random source (a job token). Throws transport_error when it cannot give them.
inline std::uint64_t random_u64() {
  std::uint64_t v = 0;
  std::size_t got = 0;
  while (got < sizeof v) {
    const ssize_t k = ::getrandom(reinterpret_cast<char*>(&v) + got, sizeof v - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) throw transport_error(std::string("getrandom failed (") + std::strerror(errno) + ")");
    got += static_cast<std::size_t>(k);
  }
  return v;
}

/// The abstract socket name of `rank` in the exchange named by `prefix` and `nonce`.
inline std::string socket_name(const std::string& prefix, std::uint64_t nonce, int rank) {
  return prefix + "-" + std::to_string(nonce) + "-" + std::to_string(rank);
}

/// Fills `a` with the abstract address of `name` (leading NUL); returns its length.
inline socklen_t abstract_address(const std::string& name, sockaddr_un& a) {
  a = sockaddr_un{};
  a.sun_family = AF_UNIX;
  const std::size_t n = std::min(name.size(), sizeof a.sun_path - 1);
  std::memcpy(a.sun_path + 1, name.data(), n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

/// Sends `d` (and `fd` when >= 0) from socket `s` to address `to` within `deadline`; empty on success, else why not.
inline std::string send_datagram(int s, const sockaddr_un& to, socklen_t tl, const datagram& d, int fd,
                                 std::uint64_t deadline) {
  iovec iov{const_cast<datagram*>(&d), sizeof d};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_name = const_cast<sockaddr_un*>(&to);
  m.msg_namelen = tl;
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (fd >= 0) {
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  for (;;) {
    if (::sendmsg(s, &m, MSG_NOSIGNAL) >= 0) return {};
    if (errno == EINTR) continue;
    if ((errno != EAGAIN && errno != ENOBUFS) || detail::now_ns() >= deadline) return sock::errno_text(errno);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

/// One rank's end of the exchange: its bound socket, the descriptors received and the datagrams refused.
class endpoint {
 public:
  /// Creates the socket (SO_PASSCRED on, so that every datagram that reaches it carries the sender's credentials)
  /// and binds `prefix`'s name for `rank`. A failure does not throw: bind_error() says why, for the vote.
  endpoint(std::string label, std::string prefix, std::uint64_t nonce, std::uint64_t token, int rank, int ranks)
      : label_(std::move(label)), prefix_(std::move(prefix)), nonce_(nonce), token_(token), me_(rank), n_(ranks),
        fds_(static_cast<std::size_t>(ranks), -1) {
    s_ = sock::fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!s_) {
      bind_error_ = "socket(AF_UNIX) failed (" + sock::errno_text(errno) + ")";
      return;
    }
    const int one = 1;
    if (::setsockopt(s_.get(), SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0) {
      bind_error_ = "SO_PASSCRED failed (" + sock::errno_text(errno) + ")";
      return;
    }
    sockaddr_un a{};
    const socklen_t len = abstract_address(socket_name(prefix_, nonce_, me_), a);
    if (::bind(s_.get(), reinterpret_cast<const sockaddr*>(&a), len) != 0)
      bind_error_ = "binding the Unix socket @" + socket_name(prefix_, nonce_, me_) + " failed (" + sock::errno_text(errno) +
                    (errno == EADDRINUSE ? "; another process holds the name" : "") + ")";
  }
  endpoint(const endpoint&) = delete;
  endpoint& operator=(const endpoint&) = delete;
  ~endpoint() {
    for (int f : fds_)
      if (f >= 0) ::close(f);
  }

  const std::string& bind_error() const { return bind_error_; }
  /// Every datagram refused so far: who sent it (pid and uid as the kernel reports them, the rank it claimed) and why.
  const std::vector<std::string>& refusals() const { return refused_; }

  /// Sends descriptor `fd` (kept open: the caller still owns it) to `peer`. Throws transport_error.
  void send(int peer, int fd, std::uint64_t deadline) {
    datagram d{};
    d.magic = magic;
    d.version = version;
    d.token = token_;
    d.who = me_;
    d.kind = descriptor;
    sockaddr_un to{};
    const socklen_t tl = abstract_address(socket_name(prefix_, nonce_, peer), to);
    if (const std::string w = send_datagram(s_.get(), to, tl, d, fd, deadline); !w.empty())
      throw transport_error(label_ + ": sending the descriptor to rank " + std::to_string(peer) + " failed (" + w +
                            "); ranks in different network namespaces (containers) cannot exchange them");
  }

  /// Receives one descriptor from every other rank, refusing every datagram that is not one (see the header).
  /// Returns them indexed by rank (this rank's entry -1); the caller owns them. Throws transport_error naming the
  /// ranks missing at `deadline` and the refusals, or a peer's refusal of this rank's descriptor.
  std::vector<int> receive(std::uint64_t deadline) {
    for (int got = 0; got < n_ - 1;) {
      datagram d{};
      iovec iov{&d, sizeof d};
      sockaddr_un from{};
      // Room for the credentials and for more descriptors than a rank sends: what a stray datagram carries beyond
      // the room is closed by the kernel, what fits is closed below.
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(16 * sizeof(int))] = {};
      msghdr m{};
      m.msg_name = &from;
      m.msg_namelen = sizeof from;
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      m.msg_control = control;
      m.msg_controllen = sizeof control;
      const ssize_t k = ::recvmsg(s_.get(), &m, MSG_CMSG_CLOEXEC);
      if (k < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN || detail::now_ns() >= deadline) {
          std::string missing;
          for (int q = 0; q < n_; ++q)
            if (q != me_ && fds_[q] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(q);
          std::string why = label_ + ": no descriptor from rank(s) " + missing +
                            " before the timeout; ranks in different network namespaces (containers) cannot exchange them";
          for (const std::string& r : refused_) why += "; refused meanwhile: " + r;
          throw transport_error(why);
        }
        pollfd p{s_.get(), POLLIN, 0};
        ::poll(&p, 1, sock::poll_ms(deadline));
        continue;
      }
      std::vector<int> carried;
      const ucred* cred = nullptr;
      for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET) continue;
        if (c->cmsg_type == SCM_RIGHTS) {
          const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
          for (std::size_t i = 0; i < count; ++i) {
            int f = -1;
            std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
            carried.push_back(f);
          }
        } else if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof(ucred))) {
          cred = reinterpret_cast<const ucred*>(CMSG_DATA(c));
        }
      }
      const bool whole = static_cast<std::size_t>(k) == sizeof d && d.magic == magic;
      std::string who = (cred ? "pid " + std::to_string(cred->pid) + ", uid " + std::to_string(cred->uid)
                              : std::string("a process without credentials")) +
                        (whole ? ", claiming rank " + std::to_string(d.who) : std::string());
      std::string refuse_why;
      if (!cred) refuse_why = "its datagram carried no credentials";
      else if (cred->uid != ::geteuid())
        refuse_why = "it runs as uid " + std::to_string(cred->uid) + " and this job as uid " + std::to_string(::geteuid()) +
                     ": only the job's user may send descriptors";
      else if (!whole) refuse_why = "it is not a RoCEnante descriptor datagram";
      else if (d.version != version)
        refuse_why = "it speaks descriptor exchange version " + std::to_string(d.version) + ", this rank " +
                     std::to_string(version) + ": deploy one build";
      else if (d.token != token_) refuse_why = "it does not carry this job's token: it belongs to another job";
      else if (d.who < 0 || d.who >= n_ || d.who == me_) refuse_why = "rank " + std::to_string(d.who) + " is not a peer of this rank";
      else if (d.kind == refusal) {
        for (int f : carried) ::close(f);
        throw transport_error(label_ + ": rank " + std::to_string(d.who) + " (" + who + ") refused this rank's descriptor: " +
                              std::string(d.text, strnlen(d.text, sizeof d.text)));
      } else if (fds_[d.who] >= 0) refuse_why = "rank " + std::to_string(d.who) + " already sent its descriptor";
      else if (carried.size() != 1) refuse_why = "it carried " + std::to_string(carried.size()) + " descriptors, not one";
      if (!refuse_why.empty()) {
        for (int f : carried) ::close(f);
        refused_.push_back(who + ": " + refuse_why);
        if (m.msg_namelen > sizeof(sa_family_t)) {  // the sender has an address: tell it
          datagram no{};
          no.magic = magic;
          no.version = version;
          no.token = whole ? d.token : 0;
          no.who = me_;
          no.kind = refusal;
          std::snprintf(no.text, sizeof no.text, "%s", refuse_why.c_str());
          (void)send_datagram(s_.get(), from, m.msg_namelen, no, -1, detail::now_ns() + 100'000'000ull);
        }
        continue;
      }
      fds_[d.who] = carried[0];
      ++got;
    }
    std::vector<int> out = fds_;
    for (int& f : fds_) f = -1;
    return out;
  }

 private:
  std::string label_, prefix_;
  std::uint64_t nonce_ = 0, token_ = 0;
  int me_ = 0, n_ = 0;
  sock::fd s_;
  std::string bind_error_;
  std::vector<int> fds_;  ///< [rank] descriptors received and not yet handed out
  std::vector<std::string> refused_;
};

/// The vote that must pass before any descriptor is sent: every rank says, through `boot`, whether its endpoint is
/// bound (setup::vote, step "<label>: descriptor sockets"). Throws transport_error on every rank alike, naming each
/// rank that is not, when any is not.
inline void vote_ready(bootstrap::bootstrap_ref boot, const endpoint& e, const std::string& label) {
  setup::vote(boot, label + ": descriptor sockets", [&] {
    if (!e.bind_error().empty())
      throw transport_error("its descriptor socket did not open, so no rank sends a descriptor: " + e.bind_error());
  });
}

/// Collective: every rank of `boot` (all on one host, in one network namespace) calls with the same label, prefix,
/// nonce and token. Binds, votes, sends `fd_out` to every peer and receives every peer's. Returns the received
/// descriptors indexed by rank (this rank's entry -1; the caller owns them); `refusals`, when given, receives the
/// datagrams refused. Throws transport_error (a failed bind anywhere fails every rank before anything is sent).
inline std::vector<int> exchange(bootstrap::bootstrap_ref boot, const std::string& label, const std::string& prefix,
                                 std::uint64_t nonce, std::uint64_t token, int fd_out, std::uint64_t deadline,
                                 std::vector<std::string>* refusals = nullptr) {
  endpoint e(label, prefix, nonce, token, boot.rank(), boot.size());
  vote_ready(boot, e, label);
  for (int q = 0; q < boot.size(); ++q)
    if (q != boot.rank()) e.send(q, fd_out, deadline);
  std::vector<int> fds;
  try {
    fds = e.receive(deadline);
  } catch (...) {
    if (refusals) *refusals = e.refusals();
    throw;
  }
  if (refusals) *refusals = e.refusals();
  return fds;
}

}  // namespace rocenante::transport::fdx

// bootstrap/trust.hpp — who may take part in one job's set-up (docs/operations.md, "Security"):
//
//   job identity  every hello of bootstrap::tcp carries the job's identity: ROCENANTE_JOB_ID, else the launcher's
//                 run id (TORCHELASTIC_RUN_ID, SLURM_JOB_ID with SLURM_STEP_ID, PMIX_NAMESPACE), else only the
//                 port (no id given: jobs on one port cannot be told apart, and a process of another job that
//                 reaches the port is refused only when it asks for another world size). A process of another
//                 job is refused, and told "another job (id ...) is using this port"; it never takes a rank.
//   secret        ROCENANTE_BOOTSTRAP_SECRET, when set: rank 0 and every rank prove to each other that they know
//                 it (HMAC-SHA-256 over both sides' random nonces, core/sha256.hpp); it never travels. A wrong or
//                 missing secret is refused on both sides. It authenticates the hello, it does not encrypt or
//                 sign the set-up bytes that follow.
//   same user     a peer on this host (its socket is in this network namespace's /proc/net/tcp or tcp6) must run
//                 as this process's user: rank 0 refuses another user's rank, a rank refuses another user's
//                 "rank 0" (a process that took the port first). Peers on other hosts are not checked this way.
//
// Who calls: bootstrap/tcp.hpp (the handshake) and its tests. Host only.
#pragma once

#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "../core/env.hpp"
#include "../core/error.hpp"
#include "../core/sha256.hpp"

namespace rocenante::bootstrap {

/// Which job a process belongs to, as its hello says.
struct job_identity {
  std::string id;      ///< compared between processes (as its SHA-256), e.g. "slurm:4242.0"
  std::string source;  ///< where it came from, for messages, e.g. "SLURM_JOB_ID.SLURM_STEP_ID"
};

/// Shortest ROCENANTE_BOOTSTRAP_SECRET accepted: the handshake can be replayed offline against guesses, so a
/// short secret would fall to a dictionary.
inline constexpr std::size_t min_secret_chars = 16;

/// The job identity from the environment (getenv, or `get`), first that is set: ROCENANTE_JOB_ID;
/// TORCHELASTIC_RUN_ID (unless torchrun's placeholder "none"); SLURM_JOB_ID, with ".SLURM_STEP_ID" when set;
/// PMIX_NAMESPACE (Open MPI 5, srun --mpi=pmix); else "port P" (`port`: the bootstrap's). Throws config_error for
/// a ROCENANTE_JOB_ID longer than 200 characters.
inline job_identity job_from_env(const env::lookup& get, std::uint16_t port) {
  auto fetch = [&](const char* name) -> std::string {
    const char* v = get ? get(name) : std::getenv(name);
    return v ? env::detail::trim(v) : std::string();
  };
  if (const std::string v = fetch("ROCENANTE_JOB_ID"); !v.empty()) {
    if (v.size() > 200)
      throw config_error("ROCENANTE_JOB_ID has " + std::to_string(v.size()) +
                         " characters; at most 200 (any text that is the same on every rank of one job)");
    return {v, "ROCENANTE_JOB_ID"};
  }
  if (const std::string v = fetch("TORCHELASTIC_RUN_ID"); !v.empty() && v != "none")
    return {"torchelastic:" + v, "TORCHELASTIC_RUN_ID"};
  if (const std::string v = fetch("SLURM_JOB_ID"); !v.empty()) {
    const std::string step = fetch("SLURM_STEP_ID");
    return {"slurm:" + v + (step.empty() ? "" : "." + step), step.empty() ? "SLURM_JOB_ID" : "SLURM_JOB_ID.SLURM_STEP_ID"};
  }
  if (const std::string v = fetch("PMIX_NAMESPACE"); !v.empty()) return {"pmix:" + v, "PMIX_NAMESPACE"};
  return {"port " + std::to_string(port), "no job id given (ROCENANTE_JOB_ID, a launcher's run id): the port alone"};
}

/// ROCENANTE_BOOTSTRAP_SECRET (empty: none). Throws config_error, without echoing the value, when it is shorter
/// than min_secret_chars.
inline std::string secret_from_env(const env::lookup& get) {
  const char* v = get ? get("ROCENANTE_BOOTSTRAP_SECRET") : std::getenv("ROCENANTE_BOOTSTRAP_SECRET");
  if (v == nullptr || *v == '\0') return {};
  const std::string s = v;
  if (s.size() < min_secret_chars)
    throw config_error("ROCENANTE_BOOTSTRAP_SECRET has " + std::to_string(s.size()) + " characters; at least " +
                       std::to_string(min_secret_chars) + " are needed (e.g. the output of `openssl rand -hex 16`, "
                       "the same on every rank)");
  return s;
}

namespace trust {

using nonce = std::array<std::uint8_t, 16>;

/// 16 bytes from the kernel's random source. Throws bootstrap_error when it cannot give them.
inline nonce fresh_nonce() {
  nonce n{};
  std::size_t got = 0;
  while (got < n.size()) {
    const ssize_t k = ::getrandom(n.data() + got, n.size() - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) throw bootstrap_error(std::string("bootstrap: getrandom failed (") + std::strerror(errno) + ")");
    got += static_cast<std::size_t>(k);
  }
  return n;
}

/// The proof one side of the handshake sends: HMAC-SHA-256 under the secret of a role label, both nonces (the
/// prover's peer's first, so each proof answers the other side's fresh challenge), the job's digest, the rank
/// and size the joining process claims, and `code` (what the joining process asks for: join, or report a failure).
inline detail::digest proof(const std::string& secret, const char* role, const nonce& theirs, const nonce& mine,
                            const detail::digest& job, std::int32_t rank, std::int32_t size, std::uint32_t code) {
  std::string m = role;
  m.append(reinterpret_cast<const char*>(theirs.data()), theirs.size());
  m.append(reinterpret_cast<const char*>(mine.data()), mine.size());
  m.append(reinterpret_cast<const char*>(job.data()), job.size());
  m.append(reinterpret_cast<const char*>(&rank), sizeof rank);
  m.append(reinterpret_cast<const char*>(&size), sizeof size);
  m.append(reinterpret_cast<const char*>(&code), sizeof code);
  return detail::hmac_sha256(secret, m);
}

/// An address as /proc/net/tcp (IPv4) or /proc/net/tcp6 prints it: the raw 32-bit words of the address in hex,
/// then the port. An IPv4 address also has its IPv4-mapped IPv6 form (a dual-stack socket lists it in tcp6).
struct proc_address {
  std::string v4, v6;  ///< empty when the address has no such form
};

inline proc_address proc_form(const sockaddr_storage& s) {
  auto word = [](const void* p) {
    std::uint32_t w;
    std::memcpy(&w, p, 4);
    char b[9];
    std::snprintf(b, sizeof b, "%08X", w);
    return std::string(b);
  };
  auto port = [](std::uint16_t be) {
    char b[6];
    std::snprintf(b, sizeof b, "%04X", ntohs(be));
    return std::string(b);
  };
  proc_address r;
  if (s.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(s);
    r.v4 = word(&a.sin_addr) + ":" + port(a.sin_port);
    const std::uint32_t ffff = htonl(0xffff);
    r.v6 = "0000000000000000" + word(&ffff) + word(&a.sin_addr) + ":" + port(a.sin_port);
  } else if (s.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(s);
    const std::uint8_t* b = a.sin6_addr.s6_addr;
    r.v6 = word(b) + word(b + 4) + word(b + 8) + word(b + 12) + ":" + port(a.sin6_port);
    if (IN6_IS_ADDR_V4MAPPED(&a.sin6_addr)) r.v4 = word(b + 12) + ":" + port(a.sin6_port);
  }
  return r;
}

/// The uid column of the first line of /proc/net/tcp or tcp6 whose local address is `local` and, unless
/// `remote` is empty, whose remote address is `remote` (and, with `listening`, whose state is LISTEN).
inline std::optional<uid_t> proc_tcp_uid(const proc_address& local, const proc_address& remote, bool listening) {
  for (const char* file : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    const bool v6 = file[13] == '6';
    const std::string& l = v6 ? local.v6 : local.v4;
    const std::string& r = v6 ? remote.v6 : remote.v4;
    if (l.empty()) continue;
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, loc, rem, state, queues, timer, retr;
      unsigned long uid = 0;
      if (!(f >> slot >> loc >> rem >> state >> queues >> timer >> retr >> uid)) continue;
      if (loc != l) continue;
      if (listening ? state != "0A" : rem != r) continue;
      return static_cast<uid_t>(uid);
    }
  }
  return std::nullopt;
}

/// The uid of the process at the other end of connected TCP socket `f` when that end is a socket of this host's
/// network namespace (its entry is in this namespace's /proc/net/tcp), else nullopt (another host, another
/// namespace, or the entry could not be read).
inline std::optional<uid_t> local_peer_uid(int f) {
  sockaddr_storage mine{}, peer{};
  socklen_t ml = sizeof mine, pl = sizeof peer;
  if (::getsockname(f, reinterpret_cast<sockaddr*>(&mine), &ml) != 0 ||
      ::getpeername(f, reinterpret_cast<sockaddr*>(&peer), &pl) != 0)
    return std::nullopt;
  // The peer's own socket has the peer's address as its local one and ours as its remote one.
  return proc_tcp_uid(proc_form(peer), proc_form(mine), false);
}

/// The uid of the socket listening at `a` (to name who holds a port that cannot be bound), else nullopt.
inline std::optional<uid_t> listener_uid(const sockaddr_storage& a) {
  return proc_tcp_uid(proc_form(a), {}, true);
}

}  // namespace trust
}  // namespace rocenante::bootstrap

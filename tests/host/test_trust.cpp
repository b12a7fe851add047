// tests/host/test_trust.cpp — who may take part in a job's set-up (bootstrap/trust.hpp, bootstrap/tcp.hpp,
// transport/fd_exchange.hpp; docs/operations.md "Security"). SHA-256 and HMAC-SHA-256 against the FIPS 180-4 and
// RFC 4231 examples; the job identity, the secret and the address grammar (IPv6 too) from the environment; then
// real processes (this program re-executes itself, tests/host/processes.hpp): a process of another job, with a
// wrong or missing secret, with a forged proof, or of another user (setuid when the test runs as root) is refused on
// both sides and named, and never takes a rank; an impostor rank 0 of another user is refused by the real ranks; two
// jobs on one port are refused apart; rank 0 listens on the address it was given, IPv6 included; descriptors passed
// between processes (cuda_ipc's mechanism, with memfds in place of GPU memory) reach only the job's ranks, refuse
// another user's, a forged credential's and another job's datagrams, and leave no process when a rank cannot bind.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <grp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <rocenante/bootstrap/tcp.hpp>
#include <rocenante/core/sha256.hpp>
#include <rocenante/transport/fd_exchange.hpp>

#include "processes.hpp"

using namespace rocenante;
using namespace rtest;

namespace {

constexpr uid_t nobody = 65534;

// ---- the processes ----------------------------------------------------------------------------------------------

/// In a rank process (no doctest context there): print what failed and exit 71.
void must(bool ok, const char* what) {
  if (ok) return;
  std::printf("failed=%s (%s)\n", what, std::strerror(errno));
  std::exit(71);
}

/// Becomes uid/gid 65534 (the parent runs as root): "another user's process".
void become_nobody() {
  if (::setgroups(0, nullptr) != 0 || ::setgid(nobody) != 0 || ::setuid(nobody) != 0) {
    std::printf("setuid_failed=%s\n", std::strerror(errno));
    std::exit(70);
  }
}
void maybe_become_nobody() {
  if (std::getenv("TEST_SETUID")) become_nobody();
}

void maybe_delay() {
  if (const char* d = std::getenv("TEST_DELAY_MS")) std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(d)));
}

/// Joins the job (bootstrap::tcp::from_env) and exchanges every rank's pid: what each rank then holds is exactly its
/// job's processes, none of another. Prints pid=, pids= (in rank order), refusals= (rank 0), or error=.
int rank_join() {
  maybe_become_nobody();
  maybe_delay();
  std::printf("pid=%d\n", static_cast<int>(::getpid()));
  try {
    bootstrap::tcp boot = bootstrap::tcp::from_env();
    const std::int32_t mine = ::getpid();
    std::vector<std::int32_t> all(static_cast<std::size_t>(boot.size()));
    boot.all_gather(&mine, all.data(), sizeof mine);
    std::string pids;
    for (auto p : all) pids += (pids.empty() ? "" : ",") + std::to_string(p);
    std::printf("pids=%s\n", pids.c_str());
    std::string refused;
    for (const auto& r : boot.refusals()) refused += r + " | ";
    std::printf("refusals=%s\n", refused.c_str());
    boot.barrier();
  } catch (const error& e) {
    std::printf("error=%s\n", e.what());
    return 3;
  }
  return 0;
}

/// A forger: speaks the hello of this build with the secret flag and a made-up proof (it never checks rank 0's).
/// Prints told= (rank 0's answer).
int rank_forger() {
  maybe_delay();
  std::printf("pid=%d\n", static_cast<int>(::getpid()));
  const bootstrap::tcp_config c = bootstrap::tcp_config_from_env();
  const auto eps = bootstrap::tcp_detail::resolve(c.host, c.port, "test");
  namespace sock = transport::sock;
  const std::uint64_t end = detail::now_ns() + 10'000'000'000ull;
  while (detail::now_ns() < end) {
    sock::fd f(::socket(eps[0].addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(f.get(), reinterpret_cast<const sockaddr*>(&eps[0].addr), eps[0].len) != 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    sock::set_nonblocking(f.get());
    bootstrap::tcp_detail::hello h{};
    h.magic = bootstrap::tcp_detail::magic;
    h.version = bootstrap::tcp_detail::version;
    h.rank = c.rank;
    h.size = c.size;
    h.flags = bootstrap::tcp_detail::has_secret;
    h.pid = static_cast<std::uint32_t>(::getpid());
    h.job = detail::sha256_of(c.job);
    bootstrap::tcp_detail::put(h.job_text, c.job);
    bootstrap::tcp_detail::reply r{};
    bootstrap::tcp_detail::challenge ch{};
    if (!sock::write_exact(f.get(), &h, sizeof h, end).empty() || !sock::read_exact(f.get(), &r, sizeof r, end).empty() ||
        r.code != 0 || !sock::read_exact(f.get(), &ch, sizeof ch, end).empty()) {
      std::printf("told=(no challenge)\n");
      return 1;
    }
    bootstrap::tcp_detail::answer a{};
    a.magic = bootstrap::tcp_detail::magic;
    a.code = bootstrap::tcp_detail::join;
    for (auto& b : a.proof) b = 0x5a;  // not the HMAC of anything
    (void)sock::write_exact(f.get(), &a, sizeof a, end);
    if (!sock::read_exact(f.get(), &r, sizeof r, end).empty()) {
      std::printf("told=(closed)\n");
      return 1;
    }
    std::string text(static_cast<std::size_t>(std::min<std::uint64_t>(r.length, 4096)), '\0');
    (void)sock::read_exact(f.get(), text.data(), text.size(), end);
    std::printf("code=%u\ntold=%s\n", r.code, text.c_str());
    return 0;
  }
  std::printf("told=(rank 0 never listened)\n");
  return 1;
}

/// An impostor rank 0 of another user (uid 65534): it takes the port first and answers every hello with a
/// challenge, as a process that wants the ranks' data would (it does not refuse anyone). Prints answer_code= and
/// told= for each rank that talked to it, until TEST_LINGER_MS passed.
int rank_impostor() {
  become_nobody();
  std::printf("pid=%d\n", static_cast<int>(::getpid()));
  const bootstrap::tcp_config c = bootstrap::tcp_config_from_env();
  const auto eps = bootstrap::tcp_detail::resolve(c.host, c.port, "test");
  namespace sock = transport::sock;
  sock::fd l(::socket(eps[0].addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int one = 1;
  ::setsockopt(l.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(l.get(), reinterpret_cast<const sockaddr*>(&eps[0].addr), eps[0].len) != 0 || ::listen(l.get(), 16) != 0) {
    std::printf("listen_failed=%s\n", std::strerror(errno));
    return 1;
  }
  std::printf("listening=1\n");
  const std::uint64_t end = detail::now_ns() + 1'000'000ull * static_cast<std::uint64_t>(std::atoi(std::getenv("TEST_LINGER_MS")));
  sock::set_nonblocking(l.get());
  while (detail::now_ns() < end) {
    sock::fd f(::accept4(l.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!f) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    const std::uint64_t by = detail::now_ns() + 3'000'000'000ull;
    bootstrap::tcp_detail::hello h{};
    if (!sock::read_exact(f.get(), &h, sizeof h, by).empty()) continue;
    bootstrap::tcp_detail::challenge ch{};
    ch.pid = static_cast<std::uint32_t>(::getpid());
    ch.job = h.job;  // it copies the job's identity from the hello
    const bootstrap::tcp_detail::reply r{bootstrap::tcp_detail::magic, 0, sizeof ch};
    bootstrap::tcp_detail::answer a{};
    if (!sock::write_exact(f.get(), &r, sizeof r, by).empty() || !sock::write_exact(f.get(), &ch, sizeof ch, by).empty() ||
        !sock::read_exact(f.get(), &a, sizeof a, by).empty())
      continue;
    std::string text(static_cast<std::size_t>(std::min<std::uint64_t>(a.length, 4096)), '\0');
    (void)sock::read_exact(f.get(), text.data(), text.size(), by);
    std::printf("answer_code=%u\ntold=%s\n", a.code, text.c_str());
  }
  return 0;
}

// -- descriptors ----------------------------------------------------------------------------------------------------

std::string dir_of() { return std::getenv("TEST_DIR"); }
bool exists(const std::string& p) { return ::access(p.c_str(), F_OK) == 0; }
void touch(const std::string& p) { std::ofstream(p) << "1\n"; }
bool wait_for(const std::function<bool()>& ready, int ms) {
  for (int i = 0; i < ms / 10; ++i) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return ready();
}

/// A memfd holding `text`: the stand-in for a window's descriptor.
int memfd_with(const std::string& text) {
  const int f = ::memfd_create("rocenante-test", MFD_CLOEXEC);
  must(f >= 0, "memfd_create");
  must(::write(f, text.data(), text.size()) == static_cast<ssize_t>(text.size()), "writing the memfd");
  return f;
}
std::string memfd_text(int f) {
  char buf[128] = {};
  const ssize_t k = ::pread(f, buf, sizeof buf - 1, 0);
  return k > 0 ? std::string(buf, static_cast<std::size_t>(k)) : std::string("(unreadable)");
}

constexpr char prefix[] = "rocenante-test";

/// A rank of the descriptor exchange. Rank 0's nonce and token travel through the bootstrap (and, for the test's
/// foreign processes, into TEST_DIR/token, as if leaked). TEST_FOREIGN=k: after the vote, wait for k foreign
/// processes to have sent their datagrams before sending. TEST_SQUAT: rank 2 holds rank 1's socket name first.
/// Prints got=<each peer's memfd text>, refusals=, squat_received=, or error=.
int rank_fds() {
  bootstrap::tcp boot = bootstrap::tcp::from_env();
  const int me = boot.rank(), n = boot.size();
  std::uint64_t mine[2] = {transport::fdx::random_u64(), transport::fdx::random_u64()};
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(n));
  boot.all_gather(mine, all.data(), sizeof mine);
  const std::uint64_t nonce = all[0], token = all[1];
  const std::string dir = dir_of();
  if (me == 0) std::ofstream(dir + "/token") << nonce << " " << token << "\n";
  const int fd_out = memfd_with("rank " + std::to_string(me) + " pid " + std::to_string(::getpid()));
  transport::sock::fd squat;
  if (std::getenv("TEST_SQUAT") && me == 2) {
    squat = transport::sock::fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    sockaddr_un a{};
    const socklen_t len = transport::fdx::abstract_address(transport::fdx::socket_name(prefix, nonce, 1), a);
    must(::bind(squat.get(), reinterpret_cast<const sockaddr*>(&a), len) == 0, "binding the squatter");
  }
  boot.barrier();  // the squatter holds the name before rank 1 binds
  const std::uint64_t deadline = detail::now_ns() + 10'000'000'000ull;
  std::vector<std::string> refusals;
  try {
    std::vector<int> fds;
    if (const char* k = std::getenv("TEST_FOREIGN")) {
      transport::fdx::endpoint e("fd test", prefix, nonce, token, me, n);
      transport::fdx::vote_ready(boot, e, "fd test");
      touch(dir + "/bound-" + std::to_string(me));
      const int foreign = std::atoi(k);
      const bool came = wait_for([&] {
        for (int i = 0; i < foreign; ++i)
          if (!exists(dir + "/foreign-sent-" + std::to_string(i))) return false;
        return true;
      }, 10000);
      std::printf("foreign_done=%d\n", came ? 1 : 0);
      for (int q = 0; q < n; ++q)
        if (q != me) e.send(q, fd_out, deadline);
      try {
        fds = e.receive(deadline);
      } catch (...) {
        refusals = e.refusals();
        throw;
      }
      refusals = e.refusals();
    } else {
      fds = transport::fdx::exchange(boot, "fd test", prefix, nonce, token, fd_out, deadline, &refusals);
    }
    std::string got;
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      got += (got.empty() ? "" : ";") + memfd_text(fds[q]);
      ::close(fds[q]);
    }
    std::printf("got=%s\n", got.c_str());
  } catch (const error& e) {
    std::printf("error=%s\n", e.what());
  }
  std::string r;
  for (const auto& x : refusals) r += x + " | ";
  std::printf("refusals=%s\n", r.c_str());
  if (squat) {
    char b[512];
    const ssize_t k = ::recv(squat.get(), b, sizeof b, 0);
    std::printf("squat_received=%d\n", k >= 0 ? 1 : 0);
  }
  ::close(fd_out);
  return 0;
}

/// A foreign process of the descriptor exchange (TEST_FOREIGN_KIND: "token" = same user, a wrong token;
/// "setuid" = uid 65534 with the job's token, as if it had leaked; "forged" = root sending SCM_CREDENTIALS that
/// claim uid 65534, with the job's token). It waits until every rank is bound, then sends each rank a datagram
/// claiming to be a peer, with a memfd reading "FOREIGN", and prints what each rank answered (told=).
int rank_foreign_fds() {
  const std::string kind = std::getenv("TEST_FOREIGN_KIND");
  const int index = std::atoi(std::getenv("TEST_FOREIGN_INDEX"));
  const int ranks = std::atoi(std::getenv("TEST_RANKS"));
  const std::string dir = dir_of();
  if (kind == "setuid") become_nobody();
  std::printf("pid=%d\n", static_cast<int>(::getpid()));
  const bool ready = wait_for([&] {
    if (!exists(dir + "/token")) return false;
    for (int r = 0; r < ranks; ++r)
      if (!exists(dir + "/bound-" + std::to_string(r))) return false;
    return true;
  }, 10000);
  if (!ready) {
    std::printf("told=(the ranks never bound)\n");
    touch(dir + "/foreign-sent-" + std::to_string(index));
    return 1;
  }
  std::uint64_t nonce = 0, token = 0;
  std::ifstream(dir + "/token") >> nonce >> token;
  if (kind == "token") token ^= 0x1;
  transport::sock::fd s(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_un me{};
  const socklen_t ml = transport::fdx::abstract_address("rocenante-test-foreign-" + std::to_string(::getpid()), me);
  must(::bind(s.get(), reinterpret_cast<const sockaddr*>(&me), ml) == 0, "binding the foreign socket");
  const int bait = memfd_with("FOREIGN");
  for (int r = 0; r < ranks; ++r) {
    transport::fdx::datagram d{};
    d.magic = transport::fdx::magic;
    d.version = transport::fdx::version;
    d.token = token;
    d.who = r == 0 ? 1 : 0;  // claims to be a real peer of rank r
    d.kind = transport::fdx::descriptor;
    sockaddr_un to{};
    const socklen_t tl = transport::fdx::abstract_address(transport::fdx::socket_name(prefix, nonce, r), to);
    if (kind != "forged") {
      const std::string w = transport::fdx::send_datagram(s.get(), to, tl, d, bait, detail::now_ns() + 1'000'000'000ull);
      if (!w.empty()) std::printf("send_failed=%s\n", w.c_str());
      continue;
    }
    // root may claim another uid in SCM_CREDENTIALS (CAP_SETUID); the receiver sees what the kernel passes on
    iovec iov{&d, sizeof d};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(ucred))] = {};
    msghdr m{};
    m.msg_name = &to;
    m.msg_namelen = tl;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &bait, sizeof bait);
    c = CMSG_NXTHDR(&m, c);
    const ucred forged{::getpid(), nobody, nobody};
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_CREDENTIALS;
    c->cmsg_len = CMSG_LEN(sizeof(ucred));
    std::memcpy(CMSG_DATA(c), &forged, sizeof forged);
    if (::sendmsg(s.get(), &m, MSG_NOSIGNAL) < 0) std::printf("send_failed=%s\n", std::strerror(errno));
  }
  touch(dir + "/foreign-sent-" + std::to_string(index));  // the ranks send theirs after this: ours arrive first
  int answers = 0;
  wait_for([&] {
    transport::fdx::datagram d{};
    while (::recv(s.get(), &d, sizeof d, 0) == static_cast<ssize_t>(sizeof d)) {
      std::printf("told=rank %d: %s\n", d.who, std::string(d.text, strnlen(d.text, sizeof d.text)).c_str());
      ++answers;
    }
    return answers == ranks;
  }, 5000);
  std::printf("answers=%d\n", answers);
  ::close(bait);
  return 0;
}

// ---- the parent's helpers -----------------------------------------------------------------------------------------

using vars_of = std::map<std::string, std::string>;

/// run_world gives each process ROCENANTE_WORLD_SIZE = its number of processes; these worlds hold fewer ranks than
/// processes (the others are foreign), so each process's variables say the job's size.
std::function<vars_of(int)> sized(int size, std::function<vars_of(int)> per_rank) {
  return [size, per_rank](int r) {
    vars_of v = per_rank(r);
    v.emplace("ROCENANTE_WORLD_SIZE", std::to_string(size));
    return v;
  };
}

env::lookup vars(std::map<std::string, std::string> m) {
  auto held = std::make_shared<std::map<std::string, std::string>>(std::move(m));
  return [held](const char* k) -> const char* {
    auto it = held->find(k);
    return it == held->end() ? nullptr : it->second.c_str();
  };
}

std::string config_error_of(std::map<std::string, std::string> m) {
  try {
    (void)bootstrap::tcp_config_from_env(vars(std::move(m)));
  } catch (const config_error& e) {
    return e.what();
  }
  return "(no error)";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// Where rank 0 of a world of two listens when given `host` ("127.0.0.1", "every address", or empty: not seen in
/// /proc/net/tcp within 2 s), read while it waits for rank 1 (a thread of this process); `log` receives the INFO lines.
std::string listening_address(const std::string& host, std::string* log) {
  bootstrap::tcp_config c;
  c.host = host;
  c.port = free_port();
  c.size = 2;
  c.timeout = std::chrono::milliseconds(5000);
  c.debug = log_level::info;
  if (log) set_log_sink([log](const std::string& line) { *log += line + "\n"; });
  auto at = [&](std::uint32_t addr) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(c.port);
    a.sin_addr.s_addr = htonl(addr);
    sockaddr_storage s{};
    std::memcpy(&s, &a, sizeof a);
    return s;
  };
  std::string bound;
  bootstrap::tcp_config l = c;  // copied before the thread starts: rank 0's config changes below
  l.rank = 1;
  std::thread leaf([&bound, &at, l] {
    for (int i = 0; i < 200 && bound.empty(); ++i) {
      if (bootstrap::trust::listener_uid(at(INADDR_LOOPBACK))) bound = "127.0.0.1";
      else if (bootstrap::trust::listener_uid(at(INADDR_ANY))) bound = "every address";
      else std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    bootstrap::tcp boot(l);
    boot.barrier();
  });
  c.rank = 0;
  bootstrap::tcp boot(c);
  boot.barrier();
  leaf.join();
  if (log) set_log_sink({});
  return bound;
}

std::string temp_dir() {
  char t[] = "/tmp/rocenante-trust-XXXXXX";
  REQUIRE(::mkdtemp(t) != nullptr);
  ::chmod(t, 0777);  // the process that becomes uid 65534 reads and writes here too
  return t;
}
void remove_dir(const std::string& d) {
  const std::string cmd = "rm -rf '" + d + "'";
  CHECK(std::system(cmd.c_str()) == 0);
}

constexpr char secret_a[] = "0123456789abcdef-job-a";
constexpr char secret_b[] = "fedcba9876543210-job-b";

}  // namespace

TEST_SUITE("host.trust.crypto") {
  TEST_CASE("SHA-256: the FIPS 180-4 examples (one block, two blocks, a million 'a') and an empty message") {
    CHECK(detail::hex(detail::sha256_of("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(detail::hex(detail::sha256_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    CHECK(detail::hex(detail::sha256_of("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    detail::sha256 h;
    const std::string thousand(1000, 'a');
    for (int i = 0; i < 1000; ++i) h.update(thousand);  // pieces that straddle block boundaries
    CHECK(detail::hex(h.finish()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }

  TEST_CASE("HMAC-SHA-256: RFC 4231 test cases 1, 2 and 6 (a key longer than the block)") {
    CHECK(detail::hex(detail::hmac_sha256(std::string(20, '\x0b'), "Hi There")) ==
          "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    CHECK(detail::hex(detail::hmac_sha256("Jefe", "what do ya want for nothing?")) ==
          "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    CHECK(detail::hex(detail::hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")) ==
          "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    const detail::digest a = detail::sha256_of("x"), b = detail::sha256_of("y");
    CHECK(detail::same_digest(a, a));
    CHECK_FALSE(detail::same_digest(a, b));
  }
}

TEST_SUITE("host.trust.config") {
  TEST_CASE("job identity: ROCENANTE_JOB_ID, then torchrun's, Slurm's (with the step) and PMIx's run ids, else the port") {
    const auto job = [](vars_of m) { return bootstrap::job_from_env(vars(std::move(m)), 29501); };
    CHECK(job({{"ROCENANTE_JOB_ID", "mine"}, {"SLURM_JOB_ID", "7"}}).id == "mine");
    CHECK(job({{"TORCHELASTIC_RUN_ID", "abc"}, {"SLURM_JOB_ID", "7"}}).id == "torchelastic:abc");
    CHECK(job({{"TORCHELASTIC_RUN_ID", "none"}, {"SLURM_JOB_ID", "7"}, {"SLURM_STEP_ID", "2"}}).id == "slurm:7.2");
    CHECK(job({{"SLURM_JOB_ID", "7"}}).id == "slurm:7");
    CHECK(job({{"PMIX_NAMESPACE", "prterun-node0-123@1"}}).id == "pmix:prterun-node0-123@1");
    const auto none = job({});
    CHECK(none.id == "port 29501");
    CHECK(has(none.source, "no job id given"));
    CHECK_THROWS_WITH_AS(job({{"ROCENANTE_JOB_ID", std::string(201, 'j')}}), doctest::Contains("at most 200"), config_error);
    const auto c = bootstrap::tcp_config_from_env(vars({{"ROCENANTE_BOOTSTRAP", "h:1"}, {"ROCENANTE_RANK", "0"},
                                                        {"ROCENANTE_WORLD_SIZE", "2"}, {"SLURM_JOB_ID", "9"}}));
    CHECK(c.job == "slurm:9");
    CHECK(c.job_source == "SLURM_JOB_ID");
  }

  TEST_CASE("ROCENANTE_BOOTSTRAP_SECRET: read as given; shorter than 16 characters refused without echoing it") {
    const vars_of base{{"ROCENANTE_BOOTSTRAP", "h:1"}, {"ROCENANTE_RANK", "0"}, {"ROCENANTE_WORLD_SIZE", "2"}};
    vars_of good = base;
    good["ROCENANTE_BOOTSTRAP_SECRET"] = secret_a;
    CHECK(bootstrap::tcp_config_from_env(vars(good)).secret == secret_a);
    CHECK(bootstrap::tcp_config_from_env(vars(base)).secret.empty());
    vars_of bad = base;
    bad["ROCENANTE_BOOTSTRAP_SECRET"] = "hunter2";
    const std::string e = config_error_of(bad);
    CHECK(has(e, "ROCENANTE_BOOTSTRAP_SECRET has 7 characters; at least 16"));
    CHECK_FALSE(has(e, "hunter2"));
  }

  TEST_CASE("addresses: [IPv6]:port, an IPv6 MASTER_ADDR with or without brackets, host names; bad shapes named") {
    const vars_of rank{{"ROCENANTE_RANK", "0"}, {"ROCENANTE_WORLD_SIZE", "2"}};
    auto with = [&](vars_of m) {
      for (auto& kv : rank) m.insert(kv);
      return bootstrap::tcp_config_from_env(vars(m));
    };
    CHECK(with({{"ROCENANTE_BOOTSTRAP", "[::1]:29600"}}).host == "::1");
    CHECK(with({{"ROCENANTE_BOOTSTRAP", "[::1]:29600"}}).port == 29600);
    CHECK(with({{"ROCENANTE_BOOTSTRAP", "[fd00::5:1]:7"}}).host == "fd00::5:1");
    CHECK(with({{"ROCENANTE_BOOTSTRAP", "node0.cluster:29600"}}).host == "node0.cluster");
    CHECK(with({{"MASTER_ADDR", "[::1]"}, {"MASTER_PORT", "29500"}}).host == "::1");
    CHECK(with({{"MASTER_ADDR", "::1"}, {"MASTER_PORT", "29500"}}).port == 29501);
    CHECK(bootstrap::tcp_detail::address_text("::1", 29600) == "[::1]:29600");
    auto err = [&](vars_of m) {
      for (auto& kv : rank) m.insert(kv);
      return config_error_of(m);
    };
    CHECK(has(err({{"ROCENANTE_BOOTSTRAP", "::1:29600"}}), "write an IPv6 address in brackets, e.g. [::1]:29600"));
    CHECK(has(err({{"ROCENANTE_BOOTSTRAP", "[::1]29600"}}), "is not [address]:port"));
    CHECK(has(err({{"ROCENANTE_BOOTSTRAP", "[::1]:"}}), "ROCENANTE_BOOTSTRAP port=''"));
    const std::string port = err({{"MASTER_ADDR", "node0"}, {"MASTER_PORT", "65535"}});
    CHECK(has(port, "MASTER_PORT='65535' is not an integer in [1, 65534]"));
    CHECK(has(port, "listens on MASTER_PORT + 1"));
  }
}

TEST_SUITE("host.trust.processes") {
  TEST_CASE("a process of another job (job id B) claiming rank 1 is refused on both sides and named; the job's own rank 1 joins") {
    const auto rs = run_world("join", 3, 3, {{"ROCENANTE_BOOTSTRAP_TIMEOUT_MS", "20000"}},
                              sized(2, [](int r) -> vars_of {
                                if (r == 2) return {{"ROCENANTE_RANK", "1"}, {"ROCENANTE_JOB_ID", "job-B"}};
                                if (r == 1) return {{"ROCENANTE_JOB_ID", "job-A"}, {"TEST_DELAY_MS", "1500"}};
                                return {{"ROCENANTE_JOB_ID", "job-A"}};
                              }));
    INFO(all_output(rs));
    REQUIRE(rs.size() == 3);
    CHECK(rs[0].exit_code == 0);
    CHECK(rs[1].exit_code == 0);
    const std::string real = rs[0].value("pid") + "," + rs[1].value("pid");
    CHECK(rs[0].value("pids") == real);  // never mixed: the job holds its own two processes
    CHECK(rs[1].value("pids") == real);
    CHECK(rs[2].exit_code == 3);
    CHECK(has(rs[2].value("error"), "another job (id 'job-A') is using this port; this process belongs to job 'job-B'"));
    const std::string refused = rs[0].value("refusals");
    CHECK(has(refused, "pid " + rs[2].value("pid")));
    CHECK(has(refused, "claiming rank 1 of 2 (job 'job-B'): its job is not this job"));
    CHECK(has(rs[0].out, "ROCENANTE WARN bootstrap::tcp: refused pid " + rs[2].value("pid")));  // in rank 0's log
  }

  TEST_CASE("ROCENANTE_BOOTSTRAP_SECRET: a wrong secret, no secret, or a forged proof cannot take a rank; each is named") {
    const auto rs = run_world("join", 5, 5, {{"ROCENANTE_BOOTSTRAP_TIMEOUT_MS", "20000"},
                                             {"ROCENANTE_JOB_ID", "job-S"}},
                              sized(2, [](int r) -> vars_of {
                                vars_of v{{"ROCENANTE_BOOTSTRAP_SECRET", secret_a}};
                                if (r == 1) v["TEST_DELAY_MS"] = "2500";  // the real rank 1, after the impostors
                                if (r >= 2) v["ROCENANTE_RANK"] = "1";
                                if (r == 2) v["ROCENANTE_BOOTSTRAP_SECRET"] = secret_b;
                                if (r == 3) v["ROCENANTE_BOOTSTRAP_SECRET"] = "";
                                if (r == 4) v["TEST_SCENARIO_FORGER"] = "1";
                                return v;
                              }));
    INFO(all_output(rs));
    REQUIRE(rs.size() == 5);
    CHECK(rs[0].exit_code == 0);
    CHECK(rs[1].exit_code == 0);
    const std::string real = rs[0].value("pid") + "," + rs[1].value("pid");
    CHECK(rs[0].value("pids") == real);
    CHECK(rs[1].value("pids") == real);
    // wrong secret: it cannot verify rank 0's proof, refuses it, and rank 0 records the refusal
    CHECK(rs[2].exit_code == 3);
    CHECK(has(rs[2].value("error"), "did not prove it knows ROCENANTE_BOOTSTRAP_SECRET"));
    // no secret: refused by rank 0 before any challenge
    CHECK(rs[3].exit_code == 3);
    CHECK(has(rs[3].value("error"), "this job requires ROCENANTE_BOOTSTRAP_SECRET and this process has none"));
    // a forged proof: rank 0's own check
    CHECK(rs[4].value("code") == "3");
    CHECK(has(rs[4].value("told"), "its proof of ROCENANTE_BOOTSTRAP_SECRET is wrong"));
    const std::string refused = rs[0].value("refusals");
    CHECK(has(refused, "refused by pid " + rs[2].value("pid")));
    CHECK(has(refused, "pid " + rs[3].value("pid")));
    CHECK(has(refused, "it has no ROCENANTE_BOOTSTRAP_SECRET"));
    CHECK(has(refused, "pid " + rs[4].value("pid")));
    CHECK(has(refused, "wrong ROCENANTE_BOOTSTRAP_SECRET"));
    // the secret never travels: no process printed it, and it is not in any message
    for (const auto& r : rs) CHECK_FALSE(has(r.out, secret_a));
  }

  TEST_CASE("another user's process (uid 65534) with the job's id and secret cannot join, and is named with its uid") {
    if (::geteuid() != 0) {
      MESSAGE("skipped: creating another user's process needs root (CI runs as root)");
      return;
    }
    const auto rs = run_world("join", 3, 3, {{"ROCENANTE_BOOTSTRAP_TIMEOUT_MS", "20000"},
                                             {"ROCENANTE_JOB_ID", "job-U"}, {"ROCENANTE_BOOTSTRAP_SECRET", secret_a}},
                              sized(2, [](int r) -> vars_of {
                                if (r == 1) return {{"TEST_DELAY_MS", "1500"}};
                                if (r == 2) return {{"ROCENANTE_RANK", "1"}, {"TEST_SETUID", "1"}};
                                return {};
                              }));
    INFO(all_output(rs));
    REQUIRE(rs.size() == 3);
    CHECK(rs[0].exit_code == 0);
    CHECK(rs[1].exit_code == 0);
    CHECK(rs[0].value("pids") == rs[0].value("pid") + "," + rs[1].value("pid"));
    CHECK(rs[2].exit_code == 3);
    CHECK(has(rs[2].value("error"), "this process runs as uid 65534 and this job's rank 0 as uid 0"));
    CHECK(has(rs[0].value("refusals"), "pid " + rs[2].value("pid")));
    CHECK(has(rs[0].value("refusals"), "it runs as uid 65534, this job as uid 0"));
  }

  TEST_CASE("an impostor rank 0 of another user holds the port first: the job's ranks refuse it, name it, and fail fast") {
    if (::geteuid() != 0) {
      MESSAGE("skipped: creating another user's process needs root (CI runs as root)");
      return;
    }
    // run_world's rank 0 is the impostor (uid 65534); its ranks 1 and 2 are the job's rank 0 and 1
    const auto rs = run_world("join", 3, 3, {{"ROCENANTE_BOOTSTRAP_TIMEOUT_MS", "4000"},
                                             {"ROCENANTE_JOB_ID", "job-I"}},
                              sized(2, [](int r) -> vars_of {
                                if (r == 0) return {{"TEST_SCENARIO_IMPOSTOR", "1"}, {"TEST_LINGER_MS", "3000"}};
                                if (r == 1) return {{"ROCENANTE_RANK", "0"}, {"TEST_DELAY_MS", "500"}};
                                return {{"ROCENANTE_RANK", "1"}, {"TEST_DELAY_MS", "500"}};
                              }));
    INFO(all_output(rs));
    REQUIRE(rs.size() == 3);
    CHECK(rs[1].exit_code == 3);  // the job's rank 0 cannot bind, and says who holds the port
    CHECK(has(rs[1].value("error"), "held by a process of uid 65534"));
    CHECK(rs[2].exit_code == 3);  // the job's rank 1 refuses the impostor at once
    CHECK(has(rs[2].value("error"), "runs as uid 65534 and this rank as uid 0: another user's process holds rank 0's port"));
    CHECK(has(rs[2].value("error"), "pid " + rs[0].value("pid")));
    CHECK(rs[2].seconds < 3.0);
    CHECK(rs[0].value("listening") == "1");
    CHECK(rs[0].value("answer_code") == "2");  // the impostor was refused, and told why
    CHECK(has(rs[0].value("told"), "another user's process holds rank 0's port"));
  }

  TEST_CASE("two jobs given one port are refused apart: job A runs, job B's rank 0 cannot listen and its rank 1 is told") {
    const auto rs = run_world("join", 4, 4, {{"ROCENANTE_BOOTSTRAP_TIMEOUT_MS", "20000"}},
                              sized(2, [](int r) -> vars_of {
                                if (r == 0) return {{"ROCENANTE_JOB_ID", "job-A"}};
                                if (r == 1) return {{"ROCENANTE_JOB_ID", "job-A"}, {"TEST_DELAY_MS", "2500"}};
                                return {{"ROCENANTE_JOB_ID", "job-B"}, {"ROCENANTE_RANK", r == 2 ? "0" : "1"},
                                        {"TEST_DELAY_MS", "500"}};
                              }));
    INFO(all_output(rs));
    REQUIRE(rs.size() == 4);
    CHECK(rs[0].exit_code == 0);
    CHECK(rs[1].exit_code == 0);
    CHECK(rs[0].value("pids") == rs[0].value("pid") + "," + rs[1].value("pid"));
    CHECK(rs[2].exit_code == 3);
    CHECK(has(rs[2].value("error"), "cannot listen on 127.0.0.1:"));
    CHECK(has(rs[2].value("error"), "is another job or an earlier run still using it?"));
    CHECK(rs[3].exit_code == 3);
    CHECK(has(rs[3].value("error"), "another job (id 'job-A') is using this port; this process belongs to job 'job-B'"));
    CHECK(rs[3].seconds < 2.5);  // told before job A's rank 1 even arrived
    CHECK(has(rs[0].value("refusals"), "pid " + rs[3].value("pid")));
  }

  TEST_CASE("rank 0 listens on the address it was given, not on every address; IPv6 [::1] works") {
    SUBCASE("IPv4 127.0.0.1 and localhost: the listening socket is bound to 127.0.0.1 alone") {
      for (const char* host : {"127.0.0.1", "localhost"}) {
        CAPTURE(host);
        CHECK(listening_address(host, {}) == "127.0.0.1");
      }
    }
    SUBCASE("a host name this host maps to loopback alone: every address, said at INFO (other hosts reach it elsewhere)") {
      char name[256] = {};
      REQUIRE(::gethostname(name, sizeof name - 1) == 0);
      const auto eps = bootstrap::tcp_detail::resolve(name, 1, "test");
      const bool only_loopback = std::all_of(eps.begin(), eps.end(), [](const auto& e) { return e.loopback(); });
      if (!only_loopback || eps[0].addr.ss_family != AF_INET) {
        MESSAGE("skipped: this host's name resolves to a non-loopback or an IPv6 address here");
        return;
      }
      std::string logged;
      CHECK(listening_address(name, &logged) == "every address");
      CHECK(has(logged, "is a loopback address on this host"));
      CHECK(has(logged, "listening on every address of port"));
    }
    SUBCASE("IPv6 ::1: two processes join and exchange") {
      transport::sock::fd probe(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_loopback;
      if (!probe || ::bind(probe.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
        MESSAGE("skipped: this machine has no IPv6 loopback");
        return;
      }
      probe.reset();
      const auto rs = run_world("join", 2, 2, {{"ROCENANTE_BOOTSTRAP", "[::1]:" + std::to_string(free_port())},
                                               {"ROCENANTE_BOOTSTRAP_TIMEOUT_MS", "10000"}});
      INFO(all_output(rs));
      REQUIRE(rs.size() == 2);
      for (const auto& r : rs) {
        CHECK(r.exit_code == 0);
        CHECK(r.value("pids") == rs[0].value("pid") + "," + rs[1].value("pid"));
      }
    }
  }
}

TEST_SUITE("host.trust.descriptors") {
  TEST_CASE("descriptors between 3 processes: every rank receives exactly its peers' (memfds standing in for windows)") {
    const std::string dir = temp_dir();
    const auto rs = run_world("fds", 3, 3, {{"TEST_DIR", dir}});
    INFO(all_output(rs));
    REQUIRE(rs.size() == 3);
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      CHECK(rs[r].exit_code == 0);
      const std::string got = rs[r].value("got");
      for (int q = 0; q < 3; ++q)
        if (q != r) CHECK(has(got, "rank " + std::to_string(q) + " pid "));
      CHECK(rs[r].value("refusals").empty());
    }
    remove_dir(dir);
  }

  TEST_CASE("a datagram of another job, of another user, or with forged credentials is refused, named and answered") {
    const bool root = ::geteuid() == 0;
    const std::vector<std::string> kinds = root ? std::vector<std::string>{"token", "setuid", "forged"}
                                                : std::vector<std::string>{"token"};
    if (!root) MESSAGE("another user's process and forged credentials need root (CI runs as root): only the wrong token runs");
    const std::string dir = temp_dir();
    const int ranks = 3, foreign = static_cast<int>(kinds.size());
    const auto rs = run_world("fds", ranks + foreign, ranks + foreign,
                              {{"TEST_DIR", dir}, {"TEST_FOREIGN", std::to_string(foreign)}, {"TEST_RANKS", std::to_string(ranks)}},
                              [&](int r) -> vars_of {
                                if (r < ranks) return {{"ROCENANTE_WORLD_SIZE", std::to_string(ranks)}};
                                return {{"TEST_SCENARIO_FOREIGN_FDS", "1"}, {"TEST_FOREIGN_KIND", kinds[r - ranks]},
                                        {"TEST_FOREIGN_INDEX", std::to_string(r - ranks)}};
                              });
    INFO(all_output(rs));
    REQUIRE(rs.size() == static_cast<std::size_t>(ranks + foreign));
    for (int r = 0; r < ranks; ++r) {
      CAPTURE(r);
      CHECK(rs[r].exit_code == 0);
      CHECK(rs[r].value("foreign_done") == "1");
      const std::string got = rs[r].value("got");
      CHECK_FALSE(has(got, "FOREIGN"));  // no foreign descriptor was taken for a rank's window
      for (int q = 0; q < ranks; ++q)
        if (q != r) CHECK(has(got, "rank " + std::to_string(q) + " pid "));
      const std::string refused = rs[r].value("refusals");
      for (int i = 0; i < foreign; ++i) {
        const std::string& kind = kinds[static_cast<std::size_t>(i)];
        CAPTURE(kind);
        const std::string pid = rs[ranks + i].value("pid");
        if (kind == "token") CHECK(has(refused, "pid " + pid + ", uid 0"));
        if (kind == "token") CHECK(has(refused, "it does not carry this job's token"));
        if (kind != "token") CHECK(has(refused, "pid " + pid + ", uid 65534"));
      }
      if (root) CHECK(has(refused, "it runs as uid 65534 and this job as uid 0: only the job's user may send descriptors"));
    }
    for (int i = 0; i < foreign; ++i) {
      CAPTURE(kinds[static_cast<std::size_t>(i)]);
      const auto& f = rs[ranks + i];
      CHECK(f.exit_code == 0);
      CHECK(f.value("answers") == std::to_string(ranks));  // every rank told it why
      CHECK(has(f.out, kinds[static_cast<std::size_t>(i)] == "token" ? "told=rank 0: it does not carry this job's token"
                                                                      : "told=rank 0: it runs as uid 65534"));
    }
    remove_dir(dir);
  }

  TEST_CASE("a rank that cannot bind its socket fails every rank before any descriptor is sent") {
    const std::string dir = temp_dir();
    const auto rs = run_world("fds", 3, 3, {{"TEST_DIR", dir}, {"TEST_SQUAT", "1"}});
    INFO(all_output(rs));
    REQUIRE(rs.size() == 3);
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      CHECK(has(rs[r].value("error"), "set-up step 'fd test: descriptor sockets' failed on rank 1: its descriptor socket did "
                                      "not open, so no rank sends a descriptor: "));
      CHECK(has(rs[r].value("error"), "another process holds the name"));
      CHECK(rs[r].value("got").empty());
    }
    CHECK(rs[2].value("squat_received") == "0");  // nothing reached the name rank 1 should have had
    remove_dir(dir);
  }
}

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--rank") {
    std::string scenario = argv[2];
    if (std::getenv("TEST_SCENARIO_FORGER")) scenario = "forger";
    if (std::getenv("TEST_SCENARIO_FOREIGN_FDS")) scenario = "foreign_fds";
    if (std::getenv("TEST_SCENARIO_IMPOSTOR")) scenario = "impostor";
    return run_scenario(scenario, {{"join", rank_join},
                                   {"forger", rank_forger},
                                   {"fds", rank_fds},
                                   {"foreign_fds", rank_foreign_fds},
                                   {"impostor", rank_impostor}});
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}

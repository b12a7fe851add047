// nccl_api/layer.cpp — NCCL's C ABI (every function nccl.h declares, under its nccl* and pnccl* names, as libnccl
// exports them) over the library's collectives and the real NCCL. docs/nccl.md is the user's guide.
//
//   ncclGetUniqueId            128 bytes naming rank 0's address and a fresh port, a random job id and secret
//                              (nccl_api/unique_id.hpp); with ROCENANTE_NCCL_DISABLE=1, the real NCCL's id
//   ncclCommInitRank*, InitAll a bootstrap::tcp from the id (InitAll: an in-process world, one thread per device),
//   ncclCommSplit              then the layer's set-up votes: settings, the library communicator (GPU selection as
//                              gpu::selected_communicator makes it); a split runs over the parent's bootstrap
//   ncclAllReduce, AllGather   served by the library when nccl_api/decision.hpp says so (the same on every rank),
//                              else forwarded
//   everything else            forwarded to the real libnccl (nccl_api/real_nccl.hpp), whose communicator is created
//                              through the bootstrap on the first forwarded call
//   groups                     thread-local, as NCCL's: at ncclGroupEnd the deferred inits and splits run (each on a
//                              thread when there are several), then the served calls in issue order, then the
//                              forwarded calls as one NCCL group
//   errors                     the library's failures (a peer that died or stalled, a refused call) poison its
//                              communicator: ncclCommGetAsyncError and every later served call report
//                              ncclRemoteError (or the error that fits); ncclGetLastError says what happened
//
// A communicator handle this layer did not make (a real NCCL communicator: with ROCENANTE_NCCL_DISABLE=1 every one,
// or one the real library's own internal calls pass) goes to the real library unchanged.
//
// Who calls: applications, as they call NCCL: any thread, one thread at a time per communicator, collectives in the
// same order on every rank. ncclCommGetAsyncError may run on another thread meanwhile (PyTorch's watchdog).
#include "layer.hpp"

#include <dlfcn.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <rocenante/bootstrap/trust.hpp>
#include <rocenante/bootstrap/vote.hpp>
#include <rocenante/core/env.hpp>
#include <rocenante/core/identity.hpp>
#include <rocenante/core/log.hpp>
#include <rocenante/transport/socket/net.hpp>

#include "real_nccl.hpp"
#include "unique_id.hpp"

// The decision reads NCCL's enum values as plain ints: they must be nccl.h's.
static_assert(ncclInt8 == rocenante::nccl_layer::nccl_values::int8 && ncclUint8 == rocenante::nccl_layer::nccl_values::uint8 &&
              ncclInt32 == rocenante::nccl_layer::nccl_values::int32 && ncclUint32 == rocenante::nccl_layer::nccl_values::uint32 &&
              ncclInt64 == rocenante::nccl_layer::nccl_values::int64 && ncclUint64 == rocenante::nccl_layer::nccl_values::uint64 &&
              ncclFloat16 == rocenante::nccl_layer::nccl_values::float16 && ncclFloat32 == rocenante::nccl_layer::nccl_values::float32 &&
              ncclFloat64 == rocenante::nccl_layer::nccl_values::float64 && ncclBfloat16 == rocenante::nccl_layer::nccl_values::bfloat16 &&
              ncclFloat8e4m3 == rocenante::nccl_layer::nccl_values::float8e4m3 && ncclFloat8e5m2 == rocenante::nccl_layer::nccl_values::float8e5m2,
              "NCCL datatype values");
static_assert(ncclSum == rocenante::nccl_layer::nccl_values::sum && ncclAvg == rocenante::nccl_layer::nccl_values::avg &&
              ncclNumOps == rocenante::nccl_layer::nccl_values::num_ops, "NCCL reduction values");
static_assert(sizeof(ncclUniqueId) == rocenante::nccl_layer::id_bytes);

namespace rocenante::nccl_layer {

ncclConfig_t* config_copy::get() {
  if (bytes.empty()) return nullptr;
  auto* cfg = reinterpret_cast<ncclConfig_t*>(bytes.data());
  // The strings live in this copy; the user's may be gone.
  if (has_net_name) {
    const char* p = net_name.c_str();
    std::memcpy(bytes.data() + offsetof(ncclConfig_t, netName), &p, sizeof p);
  }
  if (has_comm_name) {
    const char* p = comm_name.c_str();
    std::memcpy(bytes.data() + offsetof(ncclConfig_t, commName), &p, sizeof p);
  }
  return cfg;
}

namespace {

// ---- environment -------------------------------------------------------------------------------------------------

const char* env_value(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

/// ROCENANTE_NCCL_MAX_BYTES: bytes, with an optional K, M or G (KiB, MiB, GiB). The default is a placeholder until
/// the crossover with NCCL is measured (docs/nccl.md names the command).
inline constexpr std::uint64_t default_max_bytes = std::uint64_t{1} << 20;

std::uint64_t read_max_bytes() {
  const char* v = env_value("ROCENANTE_NCCL_MAX_BYTES");
  if (v == nullptr) return default_max_bytes;
  std::string s = env::detail::trim(v);
  std::uint64_t unit = 1;
  if (!s.empty()) {
    const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(s.back())));
    if (u == 'K' || u == 'M' || u == 'G') {
      unit = u == 'K' ? 1024 : u == 'M' ? 1024 * 1024 : 1024ull * 1024 * 1024;
      s.pop_back();
    }
  }
  try {
    return static_cast<std::uint64_t>(env::detail::parse_int("ROCENANTE_NCCL_MAX_BYTES", s, 0, (std::int64_t{1} << 40) / static_cast<std::int64_t>(unit))) * unit;
  } catch (const config_error&) {
    throw config_error("ROCENANTE_NCCL_MAX_BYTES='" + std::string(v) +
                       "' is not a byte count (an integer, optionally followed by K, M or G; at most 1 TiB)");
  }
}

/// What the process reads once: ROCENANTE_NCCL_DISABLE and the log level.
struct process_settings {
  bool disabled = false;
  std::string bad;  ///< a malformed ROCENANTE_NCCL_DISABLE: every communicator's set-up fails with it
  log_level level = log_level::warn;
};

const process_settings& proc() {
  static const process_settings p = [] {
    process_settings s;
    if (const char* v = env_value("ROCENANTE_NCCL_DISABLE")) {
      const std::string t = env::detail::trim(v);
      if (t == "1") s.disabled = true;
      else if (t != "0")
        s.bad = "ROCENANTE_NCCL_DISABLE='" + t + "' is not 0 or 1 (1: forward every NCCL call to the real NCCL)";
    }
    // ROCENANTE_DEBUG (the library's level; a bad value is reported by the set-up's settings vote), or NCCL_DEBUG
    // (INFO and TRACE show the start-up line, WARN the warnings), whichever says more.
    if (const char* v = env_value("ROCENANTE_DEBUG")) {
      try {
        s.level = rocenante::detail::parse_keyword(log_level_keywords, "ROCENANTE_DEBUG", v);
      } catch (const config_error&) {
      }
    }
    if (const char* v = env_value("NCCL_DEBUG")) {
      std::string t = v;
      for (char& ch : t) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      if ((t == "INFO" || t == "TRACE") && s.level < log_level::info) s.level = log_level::info;
    }
    return s;
  }();
  return p;
}

std::chrono::milliseconds bootstrap_timeout() {
  if (const char* v = env_value("ROCENANTE_BOOTSTRAP_TIMEOUT_MS"))
    return std::chrono::milliseconds(env::detail::parse_int("ROCENANTE_BOOTSTRAP_TIMEOUT_MS", env::detail::trim(v), 1, 86'400'000));
  return std::chrono::seconds(120);
}

void log_warn(int rank, const std::string& msg) { log_line(log_level::warn, proc().level, rank, "NCCL layer: " + msg); }
void log_info(int rank, const std::string& msg) { log_line(log_level::info, proc().level, rank, "NCCL layer: " + msg); }

// ---- the last error (ncclGetLastError: one per process, as NCCL's) ----------------------------------------------

std::mutex& error_mu() {
  static std::mutex m;
  return m;
}
std::string& error_text() {
  static std::string s;
  return s;
}

/// Records `why` as the last error and returns `r` (for `return fail(r, ...)`).
ncclResult_t fail(ncclResult_t r, const std::string& why) {
  std::lock_guard lock(error_mu());
  error_text() = "NCCL layer: " + why;
  return r;
}

// ---- the real library ---------------------------------------------------------------------------------------------

/// A function of the real library by its nccl.h name, typed by its declaration (one lookup per call site).
#define ROCENANTE_REAL(fn)                                                                                   \
  ([]() {                                                                                                    \
    static const auto p = reinterpret_cast<decltype(&::fn)>(::rocenante::nccl_layer::real::get().symbol(#fn)); \
    return p;                                                                                                \
  }())

ncclResult_t no_real(const char* fn) {
  const real::library& l = real::get();
  if (!l.ok) return fail(ncclSystemError, std::string(fn) + " needs the real NCCL, and " + l.why);
  return fail(ncclInvalidUsage, std::string(fn) + ": the real NCCL (" + l.path + ", " + l.version_text() +
                                    ") has no such function (an older NCCL than this layer's nccl.h)");
}

/// Calls the real `fn` with `args` (the caller's arguments, unchanged), or fails naming what is missing.
template <class Fn, class... Args>
ncclResult_t call_real(Fn fn, const char* name, Args... args) {
  if (fn == nullptr) return no_real(name);
  const ncclResult_t r = fn(args...);
  if (r != ncclSuccess && r != ncclInProgress) {
    std::string last;
    if (auto gl = ROCENANTE_REAL(ncclGetLastError)) {
      const char* t = gl(nullptr);
      if (t != nullptr) last = t;
    }
    (void)fail(r, std::string(name) + " forwarded to NCCL " + real::get().version_text() + " failed" +
                      (last.empty() ? std::string() : ": " + last));
  }
  return r;
}

#define ROCENANTE_PASS(fn, ...) call_real(ROCENANTE_REAL(fn), #fn __VA_OPT__(, ) __VA_ARGS__)

// ---- communicators ------------------------------------------------------------------------------------------------

/// This layer's communicator behind `c`, or nullptr for a handle it did not make.
ncclComm* ours(ncclComm_t c) { return c != nullptr && c->magic == comm_magic ? c : nullptr; }

comm_state state_of(const ncclComm* c) { return static_cast<comm_state>(c->state.load(std::memory_order_acquire)); }

/// ncclInvalidUsage unless `c` finished its set-up.
ncclResult_t ready(const ncclComm* c, const char* fn) {
  switch (state_of(c)) {
    case comm_state::ready: return ncclSuccess;
    case comm_state::initializing:
      return fail(ncclInvalidUsage, std::string(fn) + " on a communicator whose initialisation has not finished "
                                                      "(its ncclGroupEnd has not run yet)");
    case comm_state::failed: break;
  }
  return fail(c->init_result == ncclSuccess ? ncclInvalidUsage : c->init_result,
              std::string(fn) + " on a communicator whose initialisation failed: " + c->init_error);
}

/// Makes `device` current for a scope and restores the caller's device after it.
class device_guard {
 public:
  explicit device_guard(int device) {
    prev_ = platform::current_device(nullptr);
    if (device >= 0 && prev_ != device) changed_ = platform::set_device(device, nullptr);
  }
  ~device_guard() {
    if (changed_ && prev_ >= 0) (void)platform::set_device(prev_, nullptr);
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int prev_ = -1;
  bool changed_ = false;
};

/// Relaxed stream-capture mode on this thread for a scope (engine.hpp: platform::relax_capture).
class relaxed_capture {
 public:
  relaxed_capture() : prev_(platform::relax_capture()) {}
  ~relaxed_capture() { platform::restore_capture(prev_); }
  relaxed_capture(const relaxed_capture&) = delete;
  relaxed_capture& operator=(const relaxed_capture&) = delete;

 private:
  int prev_;
};

/// Copies the user's config as NCCL would read it (its `size` bytes; the fields of NCCL's later versions take their
/// defaults there). Fails as NCCL does for a config not made with NCCL_CONFIG_INITIALIZER.
ncclResult_t copy_config(const ncclConfig_t* user, config_copy& out) {
  out = config_copy{};
  if (user == nullptr) return ncclSuccess;
  constexpr std::size_t least = offsetof(ncclConfig_t, blocking) + sizeof(int);
  if (user->magic != 0xcafebeef || user->size < least || user->size > 65536)
    return fail(ncclInvalidArgument, "the ncclConfig_t was not initialised with NCCL_CONFIG_INITIALIZER (magic " +
                                         std::to_string(user->magic) + ", size " + std::to_string(user->size) + ")");
  out.bytes.assign(reinterpret_cast<const unsigned char*>(user), reinterpret_cast<const unsigned char*>(user) + user->size);
  out.blocking = user->blocking != 0;  // NCCL_CONFIG_UNDEF_INT: blocking, NCCL's default
  auto string_at = [&](std::size_t off, std::string& s, bool& has) {
    if (user->size < off + sizeof(const char*)) return;
    const char* p = nullptr;
    std::memcpy(&p, out.bytes.data() + off, sizeof p);
    if (p != nullptr) {
      s = p;
      has = true;
    }
  };
  string_at(offsetof(ncclConfig_t, netName), out.net_name, out.has_net_name);
  string_at(offsetof(ncclConfig_t, commName), out.comm_name, out.has_comm_name);
  return ncclSuccess;
}

// ---- ids ----------------------------------------------------------------------------------------------------------

/// Where rank 0 of a communicator made from this process's id listens: ROCENANTE_NCCL_ADDR (an IPv4 or IPv6
/// address), else the interface ROCENANTE_SOCKET_IFNAME or NCCL_SOCKET_IFNAME names (IPv4, NCCL's grammar), else the
/// first UP IPv4 interface that is not loopback and not docker*, else the first global IPv6 address, else loopback.
id_fields choose_address() {
  id_fields f;
  if (const char* a = env_value("ROCENANTE_NCCL_ADDR")) {
    if (!parse_address(env::detail::trim(a), f))
      throw config_error("ROCENANTE_NCCL_ADDR='" + std::string(a) + "' is not a numeric IPv4 or IPv6 address");
    return f;
  }
  const char* ifname_var = env_value("ROCENANTE_SOCKET_IFNAME") ? "ROCENANTE_SOCKET_IFNAME"
                           : env_value("NCCL_SOCKET_IFNAME")    ? "NCCL_SOCKET_IFNAME"
                                                                : nullptr;
  const auto v4 = transport::sock::interfaces();
  if (ifname_var != nullptr) {
    env::socket_ifname want;
    try {
      want = env::parse_socket_ifname(env::detail::trim(env_value(ifname_var)));
    } catch (const config_error& e) {
      throw config_error(std::string(ifname_var) + ": " + e.what());
    }
    for (const auto& i : v4)
      if (want.matches(i.name)) {
        f.family = 4;
        std::memcpy(f.addr.data(), &i.addr_be, 4);
        return f;
      }
    throw config_error(std::string(ifname_var) + "='" + want.text() + "' matches no UP interface with an IPv4 address (" +
                       transport::sock::describe_interfaces(v4) + "); or set ROCENANTE_NCCL_ADDR");
  }
  for (const auto& i : v4)
    if (!i.loopback && i.name.compare(0, 6, "docker") != 0) {
      f.family = 4;
      std::memcpy(f.addr.data(), &i.addr_be, 4);
      return f;
    }
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET6 || !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK))
        continue;
      const auto& a = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr;
      if (IN6_IS_ADDR_LINKLOCAL(&a) || IN6_IS_ADDR_LOOPBACK(&a)) continue;
      f.family = 6;
      std::memcpy(f.addr.data(), &a, 16);
      ::freeifaddrs(list);
      return f;
    }
    ::freeifaddrs(list);
  }
  f.family = 4;
  const std::uint32_t lo = htonl(INADDR_LOOPBACK);
  std::memcpy(f.addr.data(), &lo, 4);
  return f;
}

/// A port free on `f`'s address now (the kernel's choice); rank 0 binds it again when it initialises.
std::uint16_t free_port(const id_fields& f) {
  sockaddr_storage s{};
  socklen_t len = 0;
  if (f.family == 6) {
    auto& a = reinterpret_cast<sockaddr_in6&>(s);
    a.sin6_family = AF_INET6;
    std::memcpy(&a.sin6_addr, f.addr.data(), 16);
    len = sizeof a;
  } else {
    auto& a = reinterpret_cast<sockaddr_in&>(s);
    a.sin_family = AF_INET;
    std::memcpy(&a.sin_addr, f.addr.data(), 4);
    len = sizeof a;
  }
  transport::sock::fd sock(::socket(s.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock || ::bind(sock.get(), reinterpret_cast<sockaddr*>(&s), len) != 0 ||
      ::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&s), &len) != 0)
    throw transport_error("cannot bind a port on " + f.address_text() + " (" + transport::sock::errno_text(errno) +
                          "): set ROCENANTE_NCCL_ADDR or ROCENANTE_SOCKET_IFNAME to an address of this host");
  return ntohs(f.family == 6 ? reinterpret_cast<sockaddr_in6&>(s).sin6_port : reinterpret_cast<sockaddr_in&>(s).sin_port);
}

id_fields make_id() {
  id_fields f = choose_address();
  f.port = free_port(f);
  const auto a = bootstrap::trust::fresh_nonce(), b = bootstrap::trust::fresh_nonce(), c = bootstrap::trust::fresh_nonce();
  std::memcpy(f.job.data(), a.data(), 16);
  std::memcpy(f.secret.data(), b.data(), 16);
  std::memcpy(f.secret.data() + 16, c.data(), 16);
  f.pid = static_cast<std::uint32_t>(::getpid());
  f.host = identity::host();
  return f;
}

// ---- set-up -------------------------------------------------------------------------------------------------------

/// Maps a set-up failure to NCCL's result: a configuration problem is ncclInvalidUsage (ncclInvalidArgument for a
/// bad argument), a dead or unreachable peer ncclRemoteError, anything else ncclSystemError.
ncclResult_t setup_result(const std::exception& e) {
  if (dynamic_cast<const bootstrap_error*>(&e) != nullptr) return ncclRemoteError;
  if (dynamic_cast<const config_error*>(&e) != nullptr) return ncclInvalidUsage;
  return ncclSystemError;
}

/// Every rank's card in the layer's first vote (fixed size, trivially copyable).
struct settings_card {
  std::uint32_t magic, version;
  std::uint64_t max_bytes;
  std::uint8_t transport_choice, pad[7];
  gpu::device_identity where;
};
inline constexpr std::uint32_t settings_magic = 0x52434e4c;  // "RCNL"
inline constexpr std::uint32_t settings_version = 1;

std::string bytes_text(std::uint64_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " bytes";
}

/// The communicator's start-up line: what is served where.
std::string describe(const ncclComm* c) {
  const real::library& l = real::get();
  std::string s = "communicator " + std::to_string(c->size) + " ranks, rank " + std::to_string(c->rank) + ", " +
                  platform::name() + " device " + std::to_string(c->device) + ": ";
  if (c->policy.serves)
    s += "served here: all_reduce (ncclSum) and all_gather of float32, float16, bfloat16 up to " +
         bytes_text(c->policy.max_bytes) + " per rank, over " + c->eng->transport() + " [" + c->eng->decision() + "]";
  else
    s += "served here: nothing (" + c->served_why + ")";
  s += "; forwarded to NCCL: everything else, ";
  if (!c->real_possible)
    s += "but NCCL cannot be created for this communicator (" + c->real_impossible + "): a forwarded call fails";
  else if (!l.ok)
    s += "but " + l.why;
  else
    s += "by " + l.path + " (NCCL " + l.version_text() + ", " + l.source + "), its communicator created at the first "
         "forwarded call";
  return s;
}

/// The layer's set-up of `c` over its bootstrap, collective: settings (voted and compared), where every rank runs,
/// the library communicator (voted: every rank has one, or none serves anything). Throws rocenante::error.
void setup_common(ncclComm* c) {
  bootstrap::bootstrap_ref b = c->boot.ref();
  settings_card mine{};
  mine.magic = settings_magic;
  mine.version = settings_version;
  const std::vector<settings_card> all = setup::vote(b, "nccl layer: settings", mine, [&] {
    if (!proc().bad.empty()) throw config_error(proc().bad);
    mine.max_bytes = read_max_bytes();
    const env::settings s = env::settings::read();  // every ROCENANTE_* variable checked here, on every rank
    mine.transport_choice = static_cast<std::uint8_t>(s.transport);
    mine.where = platform::identity(c->device);
  });
  for (int q = 1; q < c->size; ++q) {
    if (all[q].magic != settings_magic || all[q].version != settings_version)
      throw config_mismatch_error("version", "NCCL layer: rank " + std::to_string(q) +
                                                 " runs another version of the layer; deploy one build");
    if (all[q].max_bytes != all[0].max_bytes)
      throw config_mismatch_error("ROCENANTE_NCCL_MAX_BYTES",
                                  "NCCL layer: ROCENANTE_NCCL_MAX_BYTES is " + std::to_string(all[0].max_bytes) +
                                      " bytes on rank 0 but " + std::to_string(all[q].max_bytes) + " on rank " +
                                      std::to_string(q) + "; every rank must serve the same calls: set it alike");
    if (all[q].transport_choice != all[0].transport_choice)
      throw config_mismatch_error("ROCENANTE_TRANSPORT", "NCCL layer: ROCENANTE_TRANSPORT differs between rank 0 and rank " +
                                                             std::to_string(q) + "; set it alike on every rank");
  }
  for (int q = 0; q < c->size && c->real_possible; ++q)
    for (int r = q + 1; r < c->size; ++r)
      if (all[q].where.same_gpu(all[r].where)) {
        c->real_possible = false;
        c->real_impossible = "ranks " + std::to_string(q) + " and " + std::to_string(r) + " share one GPU (" +
                             all[q].where.text() + "), and NCCL puts at most one rank on a GPU";
        break;
      }

  c->policy.max_bytes = all[0].max_bytes;
  std::string why;
  if (all[0].max_bytes == 0) {
    c->served_why = "ROCENANTE_NCCL_MAX_BYTES=0";
  } else if (static_cast<env::transport_choice>(all[0].transport_choice) == env::transport_choice::nccl) {
    c->served_why = "ROCENANTE_TRANSPORT=nccl asks for NCCL";
  } else {
    try {
      device_guard g(c->device);
      c->eng = make_engine(b, engine_settings{all[0].max_bytes});
      // Rank-invariant refusals (connectivity: the same table on every rank) that would refuse every call.
      if (std::string r = c->eng->refusal(1, dtype::f32, protocol::collective::all_reduce); !r.empty())
        throw transport_error("the library communicator refuses all-reduce: " + r);
      if (std::string r = c->eng->refusal(1, dtype::f32, protocol::collective::all_gather); !r.empty())
        throw transport_error("the library communicator refuses all-gather: " + r);
      std::string w;
      c->scratch = platform::alloc(all[0].max_bytes, &w);
      if (c->scratch == nullptr) throw transport_error("scratch memory of " + bytes_text(all[0].max_bytes) + ": " + w);
    } catch (const bootstrap_error&) {
      throw;
    } catch (const std::exception& e) {
      why = e.what();
      if (c->eng) {
        device_guard g(c->device);
        c->eng.reset();
      }
    }
    try {
      // Every rank has a library communicator, or none serves anything: a rank must never serve a call that a
      // peer forwards.
      setup::vote(b, "nccl layer: library communicator", [&] {
        if (!c->eng) throw transport_error(why);
      });
    } catch (const setup::vote_failure& f) {
      const auto* e = dynamic_cast<const std::exception*>(&f);
      c->served_why = e != nullptr ? e->what() : f.step();
      device_guard g(c->device);
      c->eng.reset();
      if (c->scratch != nullptr) platform::release(c->scratch);
      c->scratch = nullptr;
    }
  }
  c->policy.serves = c->eng != nullptr;
  c->info = describe(c);
  const bool fell_back = !c->policy.serves && all[0].max_bytes != 0 &&
                         static_cast<env::transport_choice>(all[0].transport_choice) != env::transport_choice::nccl;
  if (fell_back) log_warn(c->rank, c->info);
  else log_info(c->rank, c->info);
}

/// Marks `c` ready, or failed with `e`'s result and message.
void finish_state(ncclComm* c, ncclResult_t r, const std::string& why) {
  c->init_result = r;
  c->init_error = why;
  c->state.store(static_cast<int>(r == ncclSuccess ? comm_state::ready : comm_state::failed), std::memory_order_release);
}

/// Collective over the ranks holding `id`: builds `c` (allocated, rank, size and device set) from it.
ncclResult_t init_from_id(ncclComm* c, const id_fields& id, const config_copy& cfg) {
  try {
    c->config = cfg;
    bootstrap::tcp_config t;
    t.host = id.address_text();
    t.port = id.port;
    t.rank = c->rank;
    t.size = c->size;
    t.timeout = bootstrap_timeout();
    t.job = id.job_text();
    t.job_source = "the ncclUniqueId";
    t.secret = id.secret_text();
    t.debug = proc().level;
    t.source = "the ncclUniqueId (rank 0 at " + id.endpoint_text() + ")";
    c->boot.tcp = std::make_unique<bootstrap::tcp>(t);
    setup_common(c);
    finish_state(c, ncclSuccess, {});
    return ncclSuccess;
  } catch (const std::exception& e) {
    const std::string why = std::string("ncclCommInitRank (rank ") + std::to_string(c->rank) + " of " +
                            std::to_string(c->size) + "): " + e.what();
    finish_state(c, setup_result(e), why);
    log_warn(c->rank, why);
    return fail(c->init_result, why);
  }
}

/// Collective over the ranks of `world` (threads of this process).
ncclResult_t init_in_process(ncclComm* c, std::shared_ptr<bootstrap::in_process_world> world, const config_copy& cfg) {
  try {
    c->config = cfg;
    c->boot.world = std::move(world);
    c->boot.local = std::make_unique<bootstrap::in_process>(*c->boot.world, c->rank);
    setup_common(c);
    finish_state(c, ncclSuccess, {});
    return ncclSuccess;
  } catch (const std::exception& e) {
    const std::string why = "communicator set-up (rank " + std::to_string(c->rank) + " of " + std::to_string(c->size) +
                            " in this process): " + e.what();
    finish_state(c, setup_result(e), why);
    log_warn(c->rank, why);
    return fail(c->init_result, why);
  }
}

/// Frees `c` and everything it holds; the real communicator is destroyed or aborted first.
ncclResult_t teardown(ncclComm* c, bool abort) {
  ncclResult_t r = ncclSuccess;
  if (ncclComm_t real = c->real.exchange(nullptr)) {
    r = abort ? ROCENANTE_PASS(ncclCommAbort, real) : ROCENANTE_PASS(ncclCommDestroy, real);
  }
  {
    std::lock_guard lock(c->extras_mu);
    for (registration* g : c->regs) {
      g->magic = 0;
      delete g;
    }
    c->regs.clear();
  }
  {
    device_guard g(c->device);
    c->eng.reset();  // returns even when a peer is dead: every wait of the library is bounded
    if (c->scratch != nullptr) platform::release(c->scratch);
  }
  c->scratch = nullptr;
  c->boot.tcp.reset();
  c->boot.local.reset();
  c->boot.world.reset();
  c->magic = 0;
  delete c;
  return r;
}

// ---- the real communicator ----------------------------------------------------------------------------------------

struct real_id_card {
  ncclUniqueId id;
};

/// Collective over `m`'s ranks: the real NCCL communicator, from an id rank 0 gets from the real library and
/// spreads through the bootstrap. Two votes, so that a rank that cannot load NCCL (or ranks that share a GPU) keeps
/// every rank out of NCCL's init, and a rank whose init failed makes every rank abort its own. The failure is
/// recorded (real_failed) and never retried: every rank recorded the same one.
void create_real(ncclComm* m) {
  device_guard g(m->device);
  relaxed_capture rc;
  std::lock_guard lock(m->boot.mu);
  bootstrap::bootstrap_ref b = m->boot.ref();
  ncclComm_t made = nullptr;
  try {
    real_id_card mine{};
    const auto ids = setup::vote(b, "nccl layer: NCCL library", mine, [&] {
      if (!m->real_possible) throw config_error(m->real_impossible);
      const real::library& l = real::get();
      if (!l.ok) throw transport_error(l.why);
      if (m->rank == 0) {
        auto get_id = ROCENANTE_REAL(ncclGetUniqueId);
        if (get_id == nullptr || get_id(&mine.id) != ncclSuccess)
          throw transport_error("the real ncclGetUniqueId failed");
      }
    });
    setup::vote(b, "nccl layer: NCCL init", [&] {
      ncclResult_t r = ncclSuccess;
      ncclConfig_t* cfg = m->config.get();
      if (auto init_config = ROCENANTE_REAL(ncclCommInitRankConfig))
        r = init_config(&made, m->size, ids[0].id, m->rank, cfg);
      else if (auto init = ROCENANTE_REAL(ncclCommInitRank))
        r = init(&made, m->size, ids[0].id, m->rank);
      else
        throw transport_error("the real NCCL has neither ncclCommInitRankConfig nor ncclCommInitRank");
      // A non-blocking config (the user's) returns ncclInProgress: wait for it here, bounded by the bootstrap's
      // timeout, as NCCL's blocking init would have waited.
      const auto until = std::chrono::steady_clock::now() + bootstrap_timeout();
      auto async = ROCENANTE_REAL(ncclCommGetAsyncError);
      while (r == ncclInProgress && made != nullptr && async != nullptr) {
        ncclResult_t state = ncclInProgress;
        if (async(made, &state) != ncclSuccess) break;
        r = state;
        if (r == ncclInProgress && std::chrono::steady_clock::now() > until) break;
        if (r == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      if (r != ncclSuccess) {
        std::string last;
        if (auto gl = ROCENANTE_REAL(ncclGetLastError))
          if (const char* t = gl(made)) last = t;
        if (made != nullptr) (void)ROCENANTE_REAL(ncclCommAbort)(made);
        made = nullptr;
        throw transport_error(r == ncclInProgress ? std::string("NCCL's init did not finish within the bootstrap's timeout")
                                                  : "NCCL's init failed (" + std::to_string(static_cast<int>(r)) + ")" +
                                                        (last.empty() ? "" : ": " + last));
      }
    });
  } catch (const std::exception& e) {
    if (made != nullptr) (void)ROCENANTE_REAL(ncclCommAbort)(made);
    m->real_failed = true;
    m->real_result = setup_result(e);
    m->real_error = std::string("NCCL could not be created for this communicator: ") + e.what();
    log_warn(m->rank, m->real_error);
    return;
  }
  // What was registered before NCCL existed is registered now (a local call of NCCL's).
  {
    std::lock_guard extras(m->extras_mu);
    for (registration* r : m->regs)
      if (auto reg = ROCENANTE_REAL(ncclCommRegister); reg != nullptr && reg(made, r->buff, r->size, &r->real_handle) != ncclSuccess)
        log_warn(m->rank, "ncclCommRegister of a buffer registered before NCCL existed failed in NCCL; it runs unregistered");
  }
  log_info(m->rank, "NCCL communicator created for forwarded calls (NCCL " + real::get().version_text() + ")");
  m->real.store(made, std::memory_order_release);
}

/// The real communicator of `c`, created on the first call that needs it. Collective: called at a forwarded call,
/// which every rank makes in the same order. A thread that drives several ranks does so in a group (as NCCL requires),
/// and ncclGroupEnd creates their communicators concurrently, one thread each.
ncclResult_t ensure_real(ncclComm* c) {
  if (c->real.load(std::memory_order_acquire) != nullptr) return ncclSuccess;
  {
    std::lock_guard lock(c->real_mu);
    if (c->real.load(std::memory_order_acquire) == nullptr && !c->real_failed) create_real(c);
  }
  if (c->real_failed) return fail(c->real_result, c->real_error);
  return ncclSuccess;
}

/// The real operator for `op` on `c` (a PreMulSum made here is created in NCCL now); NCCL's own values unchanged.
ncclResult_t real_op(ncclComm* c, ncclRedOp_t op, ncclRedOp_t& out) {
  out = op;
  if (static_cast<int>(op) < static_cast<int>(ncclNumOps)) return ncclSuccess;
  std::lock_guard lock(c->extras_mu);
  auto it = c->ops.find(static_cast<int>(op));
  if (it == c->ops.end()) return ncclSuccess;  // not ours: NCCL judges it
  premul_op& p = it->second;
  if (!p.created) {
    void* scalar = p.residence == ncclScalarHostImmediate ? static_cast<void*>(p.value) : p.scalar;
    const ncclResult_t r = ROCENANTE_PASS(ncclRedOpCreatePreMulSum, &p.real_op, scalar, p.datatype, p.residence,
                                          c->real.load(std::memory_order_acquire));
    if (r != ncclSuccess) return r;
    p.created = true;
  }
  out = p.real_op;
  return ncclSuccess;
}

// ---- served calls -------------------------------------------------------------------------------------------------

/// NCCL's result for a status of the library (the health says who failed: a peer's failure is ncclRemoteError).
ncclResult_t result_of(status s, const host::health& h) {
  switch (s) {
    case status::ok: return ncclSuccess;
    case status::invalid_argument: return ncclInvalidArgument;
    case status::mismatch: return ncclInvalidUsage;
    case status::not_supported: return ncclInvalidUsage;
    case status::internal: return ncclUnhandledCudaError;
    case status::timeout: return ncclRemoteError;
    case status::poisoned: {
      const auto k = static_cast<protocol::failure_kind>(h.failure.kind);
      if (k == protocol::failure_kind::rejected) return ncclInvalidArgument;
      return h.state == status::internal ? ncclUnhandledCudaError : ncclRemoteError;
    }
  }
  return ncclSystemError;
}

ncclResult_t served_failure(ncclComm* c, status s, const char* fn) {
  const host::health h = c->eng->check_health();
  const ncclResult_t r = result_of(s, h);
  std::string why = std::string(fn) + " served by the library failed (" + to_string(s) + "): " + c->eng->last_error();
  if (!h.ok() && c->eng->last_error().find(h.message) == std::string::npos) why += " [" + h.message + "]";
  why += "; the library communicator is poisoned: every later served call fails (fail-stop); rebuild the "
         "communicator (ncclCommAbort, then a new one)";
  if (!c->failure_logged.exchange(true)) log_warn(c->rank, why);
  return fail(r, why);
}

struct served_call {
  ncclComm* comm;
  collective_kind kind;
  const void* in;
  void* out;
  std::size_t count;
  dtype type;
  cudaStream_t stream;
};

/// Runs a served call on the caller's stream. An all-gather whose input lies inside its output (NCCL's in-place
/// form: sendbuff == recvbuff + rank * count), and an all-reduce whose buffers overlap without being equal, read
/// their input from the scratch copy instead: the library's kernels need an input the output does not cover. The
/// copy is on the same stream, so it is captured with the call.
ncclResult_t serve(const served_call& s) {
  ncclComm* c = s.comm;
  device_guard g(c->device);
  const std::size_t elem = host::element_bytes(s.type);
  const std::size_t in_bytes = s.count * elem;
  const std::size_t out_bytes = s.kind == collective_kind::all_gather ? in_bytes * static_cast<std::size_t>(c->size) : in_bytes;
  const auto* ib = static_cast<const unsigned char*>(s.in);
  const auto* ob = static_cast<const unsigned char*>(s.out);
  const void* in = s.in;
  const bool overlap = ib != nullptr && ob != nullptr && ib < ob + out_bytes && ob < ib + in_bytes;
  if (overlap && !(s.kind == collective_kind::all_reduce && ib == ob)) {
    if (!platform::copy_async(c->scratch, s.in, in_bytes, s.stream))
      return fail(ncclUnhandledCudaError, "staging the input of an in-place call on its stream failed");
    in = c->scratch;
  }
  const status st = s.kind == collective_kind::all_reduce ? c->eng->all_reduce(in, s.out, s.count, s.type, s.stream)
                                                          : c->eng->all_gather(in, s.out, s.count, s.type, s.stream);
  if (st == status::ok) return ncclSuccess;
  return served_failure(c, st, s.kind == collective_kind::all_reduce ? "ncclAllReduce" : "ncclAllGather");
}

// ---- groups -------------------------------------------------------------------------------------------------------

struct pending_init {
  ncclComm* comm;
  id_fields id;
  config_copy config;
};
struct pending_split {
  ncclComm* parent;
  int color, key;
  ncclComm* child;  ///< allocated at the call (nullptr for NCCL_SPLIT_NOCOLOR)
  ncclComm_t* out;
  bool has_config;
  config_copy config;
};
struct pending_forward {
  ncclComm_t comm;  ///< this layer's or a real one
  const char* name;
  std::function<ncclResult_t(ncclComm_t)> prepare;  ///< before NCCL's group (operators); may be empty
  std::function<ncclResult_t(ncclComm_t)> call;
};
struct group_state {
  int depth = 0;
  std::vector<pending_init> inits;
  std::vector<pending_split> splits;
  std::vector<served_call> served;
  std::vector<pending_forward> forwarded;
};
thread_local group_state tls_group;

bool in_group() { return tls_group.depth > 0; }

ncclResult_t run_split(pending_split& s);

/// Runs `jobs` (each returning a result), concurrently when there are several; the first failure.
ncclResult_t run_all(std::vector<std::function<ncclResult_t()>>& jobs) {
  if (jobs.empty()) return ncclSuccess;
  std::vector<ncclResult_t> rs(jobs.size(), ncclSuccess);
  if (jobs.size() == 1) {
    rs[0] = jobs[0]();
  } else {
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < jobs.size(); ++i) threads.emplace_back([&, i] { rs[i] = jobs[i](); });
    for (auto& t : threads) t.join();
  }
  for (ncclResult_t r : rs)
    if (r != ncclSuccess) return r;
  return ncclSuccess;
}

/// A forwarded call, now or (inside a group) at ncclGroupEnd.
ncclResult_t forward(ncclComm_t comm, const char* name, std::function<ncclResult_t(ncclComm_t)> call,
                     std::function<ncclResult_t(ncclComm_t)> prepare = {}) {
  ncclComm* c = ours(comm);
  if (c != nullptr)
    if (const ncclResult_t r = ready(c, name); r != ncclSuccess) return r;
  if (in_group()) {
    tls_group.forwarded.push_back({comm, name, std::move(prepare), std::move(call)});
    return ncclSuccess;
  }
  if (c == nullptr) return call(comm);  // a real communicator: unchanged
  if (const ncclResult_t r = ensure_real(c); r != ncclSuccess) return r;
  const ncclComm_t real = c->real.load(std::memory_order_acquire);
  if (prepare)
    if (const ncclResult_t r = prepare(real); r != ncclSuccess) return r;
  return call(real);
}

ncclResult_t group_end(ncclSimInfo_t* simulate) {
  group_state& g = tls_group;
  if (g.depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--g.depth > 0) return ncclSuccess;
  group_state work = std::move(g);
  g = group_state{};
  ncclResult_t first = ncclSuccess;
  auto note = [&](ncclResult_t r) {
    if (first == ncclSuccess && r != ncclSuccess) first = r;
  };
  if (simulate != nullptr) {
    if (!work.inits.empty() || !work.splits.empty())
      return fail(ncclInvalidUsage, "ncclGroupSimulateEnd of a group that creates communicators");
    // Only NCCL's part can be simulated, and only where its communicators exist (creating one is collective).
    std::vector<pending_forward*> sim;
    for (auto& f : work.forwarded) {
      ncclComm* c = ours(f.comm);
      if (c != nullptr && c->real.load(std::memory_order_acquire) == nullptr) return ncclSuccess;
      sim.push_back(&f);
    }
    if (sim.empty()) return ncclSuccess;
    note(ROCENANTE_PASS(ncclGroupStart));
    for (pending_forward* f : sim) {
      ncclComm* c = ours(f->comm);
      const ncclComm_t real = c != nullptr ? c->real.load(std::memory_order_acquire) : f->comm;
      if (f->prepare) note(f->prepare(real));
      note(f->call(real));
    }
    const ncclResult_t r = ROCENANTE_PASS(ncclGroupSimulateEnd, simulate);
    return first != ncclSuccess ? first : r;
  }

  // 1. communicators created in this group: each set-up on its own thread (one thread may create several ranks)
  std::vector<std::function<ncclResult_t()>> jobs;
  for (auto& i : work.inits)
    jobs.emplace_back([&i] {
      // The device current at the ncclCommInitRank call (a group may create ranks of several devices), restored
      // afterwards on the thread that called ncclGroupEnd.
      device_guard g(i.comm->device);
      if (platform::current_device(nullptr) != i.comm->device) {
        finish_state(i.comm, ncclInvalidUsage, "cannot make device " + std::to_string(i.comm->device) + " current");
        return fail(ncclInvalidUsage, i.comm->init_error);
      }
      return init_from_id(i.comm, i.id, i.config);
    });
  for (auto& s : work.splits) jobs.emplace_back([&s] { return run_split(s); });
  note(run_all(jobs));

  // 2. served calls, in issue order, each launched on its own stream
  for (const served_call& s : work.served) {
    if (const ncclResult_t r = ready(s.comm, "a served call"); r != ncclSuccess) {
      note(r);
      continue;
    }
    note(serve(s));
  }

  // 3. forwarded calls: the real communicators they need (created together: collective), then one NCCL group
  if (!work.forwarded.empty()) {
    std::vector<ncclComm*> need;
    for (auto& f : work.forwarded)
      if (ncclComm* c = ours(f.comm); c != nullptr && c->real.load(std::memory_order_acquire) == nullptr &&
                                      std::find(need.begin(), need.end(), c) == need.end())
        need.push_back(c);
    std::vector<std::function<ncclResult_t()>> makes;
    for (ncclComm* c : need) makes.emplace_back([c] { return ensure_real(c); });
    const ncclResult_t made = run_all(makes);
    note(made);
    std::vector<std::pair<pending_forward*, ncclComm_t>> go;
    for (auto& f : work.forwarded) {
      ncclComm* c = ours(f.comm);
      const ncclComm_t real = c != nullptr ? c->real.load(std::memory_order_acquire) : f.comm;
      if (real == nullptr) continue;  // its communicator's creation failed: reported above
      if (f.prepare) {
        const ncclResult_t r = f.prepare(real);
        note(r);
        if (r != ncclSuccess) continue;
      }
      go.emplace_back(&f, real);
    }
    if (!go.empty()) {
      note(ROCENANTE_PASS(ncclGroupStart));
      for (auto& [f, real] : go) note(f->call(real));
      note(ROCENANTE_PASS(ncclGroupEnd));
    }
  }
  return first;
}

// ---- split --------------------------------------------------------------------------------------------------------

struct split_card {
  std::int32_t color, key;
};
/// What a new communicator's rank 0 hands its members: an id (tcp parent), or an in-process world.
struct split_blob {
  std::uint8_t kind;  ///< 0 none, 1 id, 2 in-process world holder
  std::uint8_t pad[7];
  std::uint8_t id[id_bytes];
  std::uint64_t holder;  ///< std::shared_ptr<in_process_world>* of the leader (this process)
};

ncclResult_t run_split(pending_split& s) {
  ncclComm* p = s.parent;
  ncclComm* child = s.child;
  const std::string what = "ncclCommSplit (parent rank " + std::to_string(p->rank) + ")";
  std::shared_ptr<bootstrap::in_process_world>* holder = nullptr;
  int new_rank = -1, new_size = 0;
  split_blob leader{};
  try {
    device_guard g(p->device);
    std::unique_lock lock(p->boot.mu);
    bootstrap::bootstrap_ref b = p->boot.ref();
    split_card mine{s.color, s.key};
    const auto cards = setup::vote(b, "nccl layer: split", mine, [] {});
    std::vector<std::pair<std::pair<int, int>, int>> members;  // ((key, parent rank), parent rank)
    for (int q = 0; q < p->size; ++q)
      if (s.color != NCCL_SPLIT_NOCOLOR && cards[q].color == s.color) members.push_back({{cards[q].key, q}, q});
    std::sort(members.begin(), members.end());
    for (std::size_t i = 0; i < members.size(); ++i)
      if (members[i].second == p->rank) new_rank = static_cast<int>(i);
    new_size = static_cast<int>(members.size());
    split_blob blob{};
    const auto blobs = setup::vote(b, "nccl layer: split ids", blob, [&] {
      if (new_rank != 0) return;
      if (p->boot.tcp) {
        blob.kind = 1;
        const id_bytes_t bytes = encode(make_id());
        std::memcpy(blob.id, bytes.data(), id_bytes);
      } else {
        blob.kind = 2;
        holder = new std::shared_ptr<bootstrap::in_process_world>(
            std::make_shared<bootstrap::in_process_world>(new_size, bootstrap_timeout()));
        blob.holder = reinterpret_cast<std::uintptr_t>(holder);
      }
    });
    std::shared_ptr<bootstrap::in_process_world> world;
    if (new_rank >= 0) {
      leader = blobs[static_cast<std::size_t>(members[0].second)];
      if (leader.kind == 2) world = *reinterpret_cast<std::shared_ptr<bootstrap::in_process_world>*>(leader.holder);
    }
    if (!p->boot.tcp) {
      b.barrier();  // every member has its copy of the world before its leader lets go of the holder
      delete holder;
      holder = nullptr;
    }
    lock.unlock();
    if (child == nullptr) return ncclSuccess;  // NCCL_SPLIT_NOCOLOR
    child->rank = new_rank;
    child->size = new_size;
    child->device = p->device;
    const config_copy& cfg = s.has_config ? s.config : p->config;
    if (leader.kind == 2) return init_in_process(child, std::move(world), cfg);
    const decoded_id d = decode(leader.id);
    if (!d.fields) throw bootstrap_error("the split's id: " + d.why);
    return init_from_id(child, *d.fields, cfg);
  } catch (const std::exception& e) {
    delete holder;
    const std::string why = what + ": " + e.what();
    if (child != nullptr) finish_state(child, setup_result(e), why);
    log_warn(p->rank, why);
    return fail(setup_result(e), why);
  }
}

// ---- entry points -------------------------------------------------------------------------------------------------

#define ROCENANTE_IF_DISABLED(fn, ...) \
  if (proc().disabled) return ROCENANTE_PASS(fn, __VA_ARGS__)

/// Whether a call on `comm` goes to the real library as it is: every call with ROCENANTE_NCCL_DISABLE=1, and a
/// communicator this layer did not make outside a group (inside one it joins the group's NCCL part).
bool pass_through(ncclComm_t comm) { return proc().disabled || (ours(comm) == nullptr && !in_group()); }

/// The caller of the exported function that calls this (its return address), to tell the real library's own
/// calls apart.
#define ROCENANTE_CALLER() __builtin_extract_return_addr(__builtin_return_address(0))

ncclResult_t get_version(int* version) {
  if (version == nullptr) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  const real::library& l = real::get();
  // Without the real library, the NCCL this layer's ABI comes from.
  *version = l.ok ? l.version : NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t get_unique_id(ncclUniqueId* out, const void* caller) {
  if (proc().disabled || real::called_from_real(caller)) return ROCENANTE_PASS(ncclGetUniqueId, out);
  if (out == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  if (!proc().bad.empty()) return fail(ncclInvalidUsage, proc().bad);
  try {
    const id_bytes_t b = encode(make_id());
    std::memcpy(out->internal, b.data(), id_bytes);
    return ncclSuccess;
  } catch (const std::exception& e) {
    return fail(setup_result(e), std::string("ncclGetUniqueId: ") + e.what());
  }
}

ncclResult_t init_rank_config(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (proc().disabled) {
    if (has_mark(id.internal))
      return fail(ncclInvalidUsage, "ROCENANTE_NCCL_DISABLE=1 here, but the ncclUniqueId was made by the RoCEnante "
                                    "layer on a rank where it is not set: set it alike on every rank");
    if (config != nullptr) return ROCENANTE_PASS(ncclCommInitRankConfig, comm, nranks, id, rank, config);
    return ROCENANTE_PASS(ncclCommInitRank, comm, nranks, id, rank);
  }
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  const decoded_id d = decode(id.internal);
  if (!d.fields) return fail(ncclInvalidArgument, "ncclCommInitRank: " + d.why);
  config_copy cfg;
  if (const ncclResult_t r = copy_config(config, cfg); r != ncclSuccess) return r;
  std::string why;
  const int device = platform::current_device(&why);
  if (device < 0) return fail(ncclInvalidUsage, "ncclCommInitRank: no current " + std::string(platform::name()) + " device: " + why);
  auto* c = new ncclComm;
  c->rank = rank;
  c->size = nranks;
  c->device = device;
  if (in_group()) {
    *comm = c;
    tls_group.inits.push_back({c, *d.fields, std::move(cfg)});
    return ncclSuccess;
  }
  const ncclResult_t r = init_from_id(c, *d.fields, cfg);
  if (r != ncclSuccess) {
    (void)teardown(c, true);
    return r;
  }
  *comm = c;
  return ncclSuccess;
}

ncclResult_t init_all(ncclComm_t* comms, int ndev, const int* devlist) {
  ROCENANTE_IF_DISABLED(ncclCommInitAll, comms, ndev, devlist);
  if (comms == nullptr || ndev < 1) return fail(ncclInvalidArgument, "ncclCommInitAll: comms NULL or ndev < 1");
  std::shared_ptr<bootstrap::in_process_world> world;
  try {
    world = std::make_shared<bootstrap::in_process_world>(ndev, bootstrap_timeout());
  } catch (const std::exception& e) {
    return fail(ncclInvalidArgument, std::string("ncclCommInitAll: ") + e.what());
  }
  std::vector<ncclComm*> cs(static_cast<std::size_t>(ndev));
  for (int i = 0; i < ndev; ++i) {
    cs[i] = new ncclComm;
    cs[i]->rank = i;
    cs[i]->size = ndev;
    cs[i]->device = devlist != nullptr ? devlist[i] : i;
  }
  std::vector<std::function<ncclResult_t()>> jobs;
  for (ncclComm* c : cs)
    jobs.emplace_back([c, world] {
      std::string why;
      if (!platform::set_device(c->device, &why)) {
        // Its peers wait for it in the bootstrap until the timeout: there is no vote before the first exchange.
        finish_state(c, ncclInvalidArgument, "device " + std::to_string(c->device) + ": " + why);
        return fail(ncclInvalidArgument, "ncclCommInitAll: " + c->init_error);
      }
      return init_in_process(c, world, {});
    });
  // Always one thread per device: each rank's set-up waits for the others'.
  std::vector<ncclResult_t> rs(cs.size(), ncclSuccess);
  {
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < jobs.size(); ++i) threads.emplace_back([&, i] { rs[i] = jobs[i](); });
    for (auto& t : threads) t.join();
  }
  ncclResult_t first = ncclSuccess;
  for (ncclResult_t r : rs)
    if (first == ncclSuccess && r != ncclSuccess) first = r;
  if (first != ncclSuccess) {
    for (ncclComm* c : cs) (void)teardown(c, true);
    for (int i = 0; i < ndev; ++i) comms[i] = nullptr;
    return first;
  }
  for (int i = 0; i < ndev; ++i) comms[i] = cs[i];
  return ncclSuccess;
}

ncclResult_t comm_split(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  ncclComm* p = ours(comm);
  if (proc().disabled || p == nullptr) return ROCENANTE_PASS(ncclCommSplit, comm, color, key, newcomm, config);
  if (newcomm == nullptr) return fail(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
  *newcomm = nullptr;
  if (const ncclResult_t r = ready(p, "ncclCommSplit"); r != ncclSuccess) return r;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return fail(ncclInvalidArgument, "ncclCommSplit: color " + std::to_string(color) + " (>= 0 or NCCL_SPLIT_NOCOLOR)");
  pending_split s{p, color, key, nullptr, newcomm, config != nullptr, {}};
  if (const ncclResult_t r = copy_config(config, s.config); r != ncclSuccess) return r;
  if (color != NCCL_SPLIT_NOCOLOR) s.child = new ncclComm;
  if (in_group()) {
    *newcomm = s.child;
    tls_group.splits.push_back(std::move(s));
    return ncclSuccess;
  }
  const ncclResult_t r = run_split(s);
  if (r != ncclSuccess) {
    if (s.child != nullptr) (void)teardown(s.child, true);
    return r;
  }
  *newcomm = s.child;
  return ncclSuccess;
}

ncclResult_t all_reduce(const void* send, void* recv, std::size_t count, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm,
                        cudaStream_t stream) {
  if (pass_through(comm)) return ROCENANTE_PASS(ncclAllReduce, send, recv, count, dt, op, comm, stream);
  ncclComm* c = ours(comm);
  if (c != nullptr)
    if (const ncclResult_t r = ready(c, "ncclAllReduce"); r != ncclSuccess) return r;
  const route rt = c != nullptr ? decide(collective_kind::all_reduce, count, dt, op, c->policy) : route::disabled;
  if (rt == route::empty) return ncclSuccess;
  if (rt == route::served) {
    const served_call s{c, collective_kind::all_reduce, send, recv, count, *served_dtype(dt), stream};
    if (in_group()) {
      tls_group.served.push_back(s);
      return ncclSuccess;
    }
    return serve(s);
  }
  auto op_slot = std::make_shared<ncclRedOp_t>(op);
  return forward(
      comm, "ncclAllReduce",
      [=](ncclComm_t real) { return ROCENANTE_PASS(ncclAllReduce, send, recv, count, dt, *op_slot, real, stream); },
      [=](ncclComm_t) { return c != nullptr ? real_op(c, op, *op_slot) : ncclSuccess; });
}

ncclResult_t all_gather(const void* send, void* recv, std::size_t count, ncclDataType_t dt, ncclComm_t comm,
                        cudaStream_t stream) {
  if (pass_through(comm)) return ROCENANTE_PASS(ncclAllGather, send, recv, count, dt, comm, stream);
  ncclComm* c = ours(comm);
  if (c != nullptr)
    if (const ncclResult_t r = ready(c, "ncclAllGather"); r != ncclSuccess) return r;
  const route rt = c != nullptr ? decide(collective_kind::all_gather, count, dt, ncclSum, c->policy) : route::disabled;
  if (rt == route::empty) return ncclSuccess;
  if (rt == route::served) {
    const served_call s{c, collective_kind::all_gather, send, recv, count, *served_dtype(dt), stream};
    if (in_group()) {
      tls_group.served.push_back(s);
      return ncclSuccess;
    }
    return serve(s);
  }
  return forward(comm, "ncclAllGather",
                 [=](ncclComm_t real) { return ROCENANTE_PASS(ncclAllGather, send, recv, count, dt, real, stream); });
}

/// A forwarded collective with a reduction operator (PreMulSum operators made here are translated).
template <class Call>
ncclResult_t forward_with_op(ncclComm_t comm, const char* name, ncclRedOp_t op, Call call) {
  ncclComm* c = ours(comm);
  auto op_slot = std::make_shared<ncclRedOp_t>(op);
  return forward(
      comm, name, [=](ncclComm_t real) { return call(real, *op_slot); },
      [=](ncclComm_t) { return c != nullptr ? real_op(c, op, *op_slot) : ncclSuccess; });
}

ncclResult_t get_async_error(ncclComm_t comm, ncclResult_t* err) {
  ncclComm* c = ours(comm);
  if (proc().disabled || c == nullptr) return ROCENANTE_PASS(ncclCommGetAsyncError, comm, err);
  if (err == nullptr) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  switch (state_of(c)) {
    case comm_state::initializing: *err = ncclInProgress; return ncclSuccess;
    case comm_state::failed: *err = c->init_result; return ncclSuccess;
    case comm_state::ready: break;
  }
  if (c->eng) {
    const host::health h = c->eng->check_health();
    if (!h.ok()) {
      *err = result_of(status::poisoned, h);
      if (!c->failure_logged.exchange(true)) log_warn(c->rank, "the library communicator failed: " + h.message);
      std::lock_guard lock(error_mu());
      const std::string text = "NCCL layer: the library communicator failed: " + h.message;
      if (error_text() != text) error_text() = text;
      return ncclSuccess;
    }
  }
  if (const ncclComm_t real = c->real.load(std::memory_order_acquire)) return ROCENANTE_PASS(ncclCommGetAsyncError, real, err);
  *err = ncclSuccess;
  return ncclSuccess;
}

/// ncclCommDestroy / ncclCommAbort of this layer's communicator (a deferred one of this thread's group included).
ncclResult_t destroy(ncclComm_t comm, bool abort) {
  ncclComm* c = ours(comm);
  if (proc().disabled || c == nullptr)
    return abort ? ROCENANTE_PASS(ncclCommAbort, comm) : ROCENANTE_PASS(ncclCommDestroy, comm);
  auto& g = tls_group;
  g.inits.erase(std::remove_if(g.inits.begin(), g.inits.end(), [&](const pending_init& i) { return i.comm == c; }), g.inits.end());
  g.served.erase(std::remove_if(g.served.begin(), g.served.end(), [&](const served_call& s) { return s.comm == c; }), g.served.end());
  g.forwarded.erase(std::remove_if(g.forwarded.begin(), g.forwarded.end(), [&](const pending_forward& f) { return f.comm == comm; }),
                    g.forwarded.end());
  for (auto& s : g.splits)
    if (s.child == c) s.child = nullptr;
  return teardown(c, abort);
}

ncclResult_t comm_register(ncclComm_t comm, void* buff, std::size_t size, void** handle) {
  ncclComm* c = ours(comm);
  if (proc().disabled || c == nullptr) return ROCENANTE_PASS(ncclCommRegister, comm, buff, size, handle);
  if (handle == nullptr) return fail(ncclInvalidArgument, "ncclCommRegister: handle is NULL");
  if (const ncclResult_t r = ready(c, "ncclCommRegister"); r != ncclSuccess) return r;
  auto* g = new registration;
  g->buff = buff;
  g->size = size;
  // Registration is local in NCCL: it cannot create the real communicator (that is collective), so a buffer
  // registered before it exists is registered when it is created.
  if (const ncclComm_t real = c->real.load(std::memory_order_acquire)) {
    if (const ncclResult_t r = ROCENANTE_PASS(ncclCommRegister, real, buff, size, &g->real_handle); r != ncclSuccess) {
      delete g;
      return r;
    }
  }
  std::lock_guard lock(c->extras_mu);
  c->regs.push_back(g);
  *handle = g;
  return ncclSuccess;
}

ncclResult_t comm_deregister(ncclComm_t comm, void* handle) {
  ncclComm* c = ours(comm);
  if (proc().disabled || c == nullptr) return ROCENANTE_PASS(ncclCommDeregister, comm, handle);
  std::lock_guard lock(c->extras_mu);
  auto it = std::find(c->regs.begin(), c->regs.end(), static_cast<registration*>(handle));
  if (it == c->regs.end()) return fail(ncclInvalidArgument, "ncclCommDeregister: not a handle of this communicator");
  registration* g = *it;
  ncclResult_t r = ncclSuccess;
  if (g->real_handle != nullptr) r = ROCENANTE_PASS(ncclCommDeregister, c->real.load(std::memory_order_acquire), g->real_handle);
  c->regs.erase(it);
  g->magic = 0;
  delete g;
  return r;
}

ncclResult_t premul_create(ncclRedOp_t* op, void* scalar, ncclDataType_t dt, ncclScalarResidence_t residence, ncclComm_t comm) {
  ncclComm* c = ours(comm);
  if (proc().disabled || c == nullptr) return ROCENANTE_PASS(ncclRedOpCreatePreMulSum, op, scalar, dt, residence, comm);
  if (op == nullptr || scalar == nullptr) return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: op or scalar is NULL");
  const std::uint64_t elem = nccl_element_bytes(dt);
  if (elem == 0) return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: datatype " + std::to_string(static_cast<int>(dt)));
  if (const ncclResult_t r = ready(c, "ncclRedOpCreatePreMulSum"); r != ncclSuccess) return r;
  premul_op p;
  p.datatype = dt;
  p.residence = residence;
  if (residence == ncclScalarHostImmediate) std::memcpy(p.value, scalar, elem);
  else p.scalar = scalar;
  std::lock_guard lock(c->extras_mu);
  // Operators of this layer live above NCCL's built-in ones and above the few NCCL itself hands out, so that a
  // forwarded call can tell them apart; the real operator is made when NCCL first needs it (creation is local in
  // NCCL, so it cannot create the real communicator).
  const int id = static_cast<int>(ncclNumOps) + 4096 + c->next_op++;
  c->ops[id] = p;
  *op = static_cast<ncclRedOp_t>(id);
  return ncclSuccess;
}

ncclResult_t premul_destroy(ncclRedOp_t op, ncclComm_t comm) {
  ncclComm* c = ours(comm);
  if (proc().disabled || c == nullptr) return ROCENANTE_PASS(ncclRedOpDestroy, op, comm);
  std::lock_guard lock(c->extras_mu);
  auto it = c->ops.find(static_cast<int>(op));
  if (it == c->ops.end()) return fail(ncclInvalidArgument, "ncclRedOpDestroy: not an operator of this communicator");
  ncclResult_t r = ncclSuccess;
  if (it->second.created) r = ROCENANTE_PASS(ncclRedOpDestroy, it->second.real_op, c->real.load(std::memory_order_acquire));
  c->ops.erase(it);
  return r;
}

ncclResult_t init_rank_scalable(ncclComm_t* newcomm, int nranks, int myrank, int nid, ncclUniqueId* ids, ncclConfig_t* config) {
  ROCENANTE_IF_DISABLED(ncclCommInitRankScalable, newcomm, nranks, myrank, nid, ids, config);
  if (ids == nullptr || nid < 1) return fail(ncclInvalidArgument, "ncclCommInitRankScalable: no ids");
  // Rank 0 made the first id (NCCL's rule for several ids), and one root is all the bootstrap needs.
  return init_rank_config(newcomm, nranks, ids[0], myrank, config);
}

ncclResult_t comm_shrink(ncclComm_t comm, int* exclude, int count, ncclComm_t* newcomm, ncclConfig_t* config, int flags) {
  ncclComm* c = ours(comm);
  if (proc().disabled || c == nullptr) return ROCENANTE_PASS(ncclCommShrink, comm, exclude, count, newcomm, config, flags);
  if (const ncclResult_t r = ready(c, "ncclCommShrink"); r != ncclSuccess) return r;
  // The excluded ranks never call it, so the layer's bootstrap (every rank of the parent) cannot carry it: only
  // NCCL's own communicator can, and the shrunk communicator is NCCL's (every later call on it is forwarded).
  const ncclComm_t real = c->real.load(std::memory_order_acquire);
  if (real == nullptr)
    return fail(ncclInvalidUsage, "ncclCommShrink: the RoCEnante layer shrinks a communicator only once NCCL's own "
                                  "communicator exists for it (after a forwarded call); for jobs that shrink "
                                  "communicators before that, set ROCENANTE_NCCL_DISABLE=1");
  return ROCENANTE_PASS(ncclCommShrink, real, exclude, count, newcomm, config, flags);
}

const char* error_string(ncclResult_t r, const void* caller) {
  if (real::called_from_real(caller))
    if (auto f = ROCENANTE_REAL(ncclGetErrorString)) return f(r);
  switch (r) {
    case ncclSuccess: return "no error (RoCEnante NCCL layer)";
    case ncclUnhandledCudaError: return "unhandled cuda error (RoCEnante NCCL layer; ncclGetLastError says more)";
    case ncclSystemError: return "unhandled system error (RoCEnante NCCL layer; ncclGetLastError says more)";
    case ncclInternalError: return "internal error (RoCEnante NCCL layer; ncclGetLastError says more)";
    case ncclInvalidArgument: return "invalid argument (RoCEnante NCCL layer; ncclGetLastError says more)";
    case ncclInvalidUsage: return "invalid usage (RoCEnante NCCL layer; ncclGetLastError says more)";
    case ncclRemoteError:
      return "remote process exited or there was a network error (RoCEnante NCCL layer; ncclGetLastError says more)";
    case ncclInProgress: return "NCCL operation in progress (RoCEnante NCCL layer)";
    default: return "unknown result code (RoCEnante NCCL layer)";
  }
}

/// ncclMemAlloc: NCCL's (memory it can register) when the real NCCL loads; else device memory of the layer's own, so
/// that a program allocating its buffers this way (nccl-tests) runs where only the layer is. ncclMemFree tells them
/// apart.
std::mutex& own_alloc_mu() {
  static std::mutex m;
  return m;
}
std::set<void*>& own_allocs() {
  static std::set<void*> s;
  return s;
}

ncclResult_t mem_alloc(void** ptr, std::size_t size) {
  if (real::get().ok) return ROCENANTE_PASS(ncclMemAlloc, ptr, size);
  if (ptr == nullptr) return fail(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  std::string why;
  void* p = platform::alloc(size, &why);
  if (p == nullptr) return fail(ncclUnhandledCudaError, "ncclMemAlloc of " + std::to_string(size) + " bytes: " + why);
  std::lock_guard lock(own_alloc_mu());
  own_allocs().insert(p);
  *ptr = p;
  return ncclSuccess;
}

ncclResult_t mem_free(void* ptr) {
  {
    std::lock_guard lock(own_alloc_mu());
    if (auto it = own_allocs().find(ptr); it != own_allocs().end()) {
      own_allocs().erase(it);
      platform::release(ptr);
      return ncclSuccess;
    }
  }
  return ROCENANTE_PASS(ncclMemFree, ptr);
}

/// The last failure this process saw: the layer's own, or a forwarded call's (with NCCL's text); NCCL's own last
/// error when the layer recorded none.
const char* last_error(ncclComm_t comm) {
  thread_local std::string copy;
  {
    std::lock_guard lock(error_mu());
    copy = error_text();
  }
  if (copy.empty())
    if (auto f = ROCENANTE_REAL(ncclGetLastError)) return f(ours(comm) != nullptr ? nullptr : comm);
  return copy.c_str();
}

}  // namespace
}  // namespace rocenante::nccl_layer

// ---- the exported ABI: pnccl* defined, nccl* weak aliases of them (as libnccl exports them) -------------------------

namespace L = rocenante::nccl_layer;
using L::ours;

#define ROCENANTE_ALIAS(ret, name, params) extern "C" ret name params __attribute__((weak, alias("p" #name)));

extern "C" ncclResult_t pncclMemAlloc(void** ptr, size_t size) { return L::mem_alloc(ptr, size); }
ROCENANTE_ALIAS(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size))

extern "C" ncclResult_t pncclMemFree(void* ptr) { return L::mem_free(ptr); }
ROCENANTE_ALIAS(ncclResult_t, ncclMemFree, (void* ptr))

extern "C" ncclResult_t pncclGetVersion(int* version) { return L::get_version(version); }
ROCENANTE_ALIAS(ncclResult_t, ncclGetVersion, (int* version))

extern "C" ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) { return L::get_unique_id(uniqueId, ROCENANTE_CALLER()); }
ROCENANTE_ALIAS(ncclResult_t, ncclGetUniqueId, (ncclUniqueId* uniqueId))

extern "C" ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config) {
  return L::init_rank_config(comm, nranks, commId, rank, config);
}
ROCENANTE_ALIAS(ncclResult_t, ncclCommInitRankConfig, (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config))

extern "C" ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return L::init_rank_config(comm, nranks, commId, rank, nullptr);
}
ROCENANTE_ALIAS(ncclResult_t, ncclCommInitRank, (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank))

extern "C" ncclResult_t pncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) { return L::init_all(comm, ndev, devlist); }
ROCENANTE_ALIAS(ncclResult_t, ncclCommInitAll, (ncclComm_t* comm, int ndev, const int* devlist))

extern "C" ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  ncclComm* c = ours(comm);
  if (L::proc().disabled || c == nullptr) return L::ROCENANTE_PASS(ncclCommFinalize, comm);
  if (const ncclResult_t r = L::ready(c, "ncclCommFinalize"); r != ncclSuccess) return r;
  // The library's calls need no flush: each kernel ends by itself (bounded waits). NCCL's communicator, if any,
  // is finalized by NCCL (a non-blocking one reports ncclInProgress through ncclCommGetAsyncError meanwhile).
  if (const ncclComm_t real = c->real.load(std::memory_order_acquire)) return L::ROCENANTE_PASS(ncclCommFinalize, real);
  return ncclSuccess;
}
ROCENANTE_ALIAS(ncclResult_t, ncclCommFinalize, (ncclComm_t comm))

extern "C" ncclResult_t pncclCommDestroy(ncclComm_t comm) { return L::destroy(comm, false); }
ROCENANTE_ALIAS(ncclResult_t, ncclCommDestroy, (ncclComm_t comm))

extern "C" ncclResult_t pncclCommAbort(ncclComm_t comm) { return L::destroy(comm, true); }
ROCENANTE_ALIAS(ncclResult_t, ncclCommAbort, (ncclComm_t comm))

extern "C" ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  ncclComm* c = ours(comm);
  if (L::proc().disabled || c == nullptr) return L::ROCENANTE_PASS(ncclCommRevoke, comm, revokeFlags);
  // The library's calls in flight end by themselves (bounded waits); NCCL's, if it has a communicator, are NCCL's.
  if (const ncclComm_t real = c->real.load(std::memory_order_acquire)) return L::ROCENANTE_PASS(ncclCommRevoke, real, revokeFlags);
  return ncclSuccess;
}
ROCENANTE_ALIAS(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags))

extern "C" ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  return L::comm_split(comm, color, key, newcomm, config);
}
ROCENANTE_ALIAS(ncclResult_t, ncclCommSplit, (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config))

extern "C" ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                                        ncclConfig_t* config, int shrinkFlags) {
  return L::comm_shrink(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
}
ROCENANTE_ALIAS(ncclResult_t, ncclCommShrink, (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                                               ncclConfig_t* config, int shrinkFlags))

extern "C" ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                                  ncclConfig_t* config) {
  return L::init_rank_scalable(newcomm, nranks, myrank, nId, commIds, config);
}
ROCENANTE_ALIAS(ncclResult_t, ncclCommInitRankScalable, (ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                                         ncclConfig_t* config))

extern "C" const char* pncclGetErrorString(ncclResult_t result) { return L::error_string(result, ROCENANTE_CALLER()); }
ROCENANTE_ALIAS(const char*, ncclGetErrorString, (ncclResult_t result))

extern "C" const char* pncclGetLastError(ncclComm_t comm) { return L::last_error(comm); }
ROCENANTE_ALIAS(const char*, ncclGetLastError, (ncclComm_t comm))

// Deprecated in nccl.h, and still part of its ABI.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
extern "C" void pncclResetDebugInit() {
  if (auto f = ROCENANTE_REAL(ncclResetDebugInit)) f();
}
ROCENANTE_ALIAS(void, ncclResetDebugInit, ())
#pragma GCC diagnostic pop

extern "C" ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) { return L::get_async_error(comm, asyncError); }
ROCENANTE_ALIAS(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError))

extern "C" ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  ncclComm* c = ours(comm);
  if (L::proc().disabled || c == nullptr) return L::ROCENANTE_PASS(ncclCommCount, comm, count);
  if (count == nullptr) return L::fail(ncclInvalidArgument, "ncclCommCount: count is NULL");
  *count = c->size;
  return ncclSuccess;
}
ROCENANTE_ALIAS(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count))

extern "C" ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  ncclComm* c = ours(comm);
  if (L::proc().disabled || c == nullptr) return L::ROCENANTE_PASS(ncclCommCuDevice, comm, device);
  if (device == nullptr) return L::fail(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
  *device = c->device;
  return ncclSuccess;
}
ROCENANTE_ALIAS(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int* device))

extern "C" ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  ncclComm* c = ours(comm);
  if (L::proc().disabled || c == nullptr) return L::ROCENANTE_PASS(ncclCommUserRank, comm, rank);
  if (rank == nullptr) return L::fail(ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
  *rank = c->rank;
  return ncclSuccess;
}
ROCENANTE_ALIAS(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int* rank))

extern "C" ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return L::comm_register(comm, buff, size, handle);
}
ROCENANTE_ALIAS(ncclResult_t, ncclCommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle))

extern "C" ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) { return L::comm_deregister(comm, handle); }
ROCENANTE_ALIAS(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void* handle))

extern "C" ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags) {
  if (L::pass_through(comm)) return L::ROCENANTE_PASS(ncclCommWindowRegister, comm, buff, size, win, winFlags);
  // Collective in NCCL: it may create the real communicator.
  return L::forward(comm, "ncclCommWindowRegister", [=](ncclComm_t real) {
    return L::ROCENANTE_PASS(ncclCommWindowRegister, real, buff, size, win, winFlags);
  });
}
ROCENANTE_ALIAS(ncclResult_t, ncclCommWindowRegister, (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags))

extern "C" ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  ncclComm* c = ours(comm);
  if (L::proc().disabled || c == nullptr) return L::ROCENANTE_PASS(ncclCommWindowDeregister, comm, win);
  if (c->real.load(std::memory_order_acquire) == nullptr)
    return L::fail(ncclInvalidArgument, "ncclCommWindowDeregister: no window was registered (NCCL has no communicator here yet)");
  return L::forward(comm, "ncclCommWindowDeregister",
                    [=](ncclComm_t real) { return L::ROCENANTE_PASS(ncclCommWindowDeregister, real, win); });
}
ROCENANTE_ALIAS(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))

extern "C" ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                  ncclScalarResidence_t residence, ncclComm_t comm) {
  return L::premul_create(op, scalar, datatype, residence, comm);
}
ROCENANTE_ALIAS(ncclResult_t, ncclRedOpCreatePreMulSum, (ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                         ncclScalarResidence_t residence, ncclComm_t comm))

extern "C" ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) { return L::premul_destroy(op, comm); }
ROCENANTE_ALIAS(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm))

extern "C" ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                                    int root, ncclComm_t comm, cudaStream_t stream) {
  if (L::pass_through(comm))
    return L::ROCENANTE_PASS(ncclReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
  return L::forward_with_op(comm, "ncclReduce", op, [=](ncclComm_t real, ncclRedOp_t o) {
    return L::ROCENANTE_PASS(ncclReduce, sendbuff, recvbuff, count, datatype, o, root, real, stream);
  });
}
ROCENANTE_ALIAS(ncclResult_t, ncclReduce, (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                           ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream))

extern "C" ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  if (L::pass_through(comm)) return L::ROCENANTE_PASS(ncclBcast, buff, count, datatype, root, comm, stream);
  return L::forward(comm, "ncclBcast",
                    [=](ncclComm_t real) { return L::ROCENANTE_PASS(ncclBcast, buff, count, datatype, root, real, stream); });
}
ROCENANTE_ALIAS(ncclResult_t, ncclBcast, (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                          cudaStream_t stream))

extern "C" ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                                       ncclComm_t comm, cudaStream_t stream) {
  if (L::pass_through(comm))
    return L::ROCENANTE_PASS(ncclBroadcast, sendbuff, recvbuff, count, datatype, root, comm, stream);
  return L::forward(comm, "ncclBroadcast", [=](ncclComm_t real) {
    return L::ROCENANTE_PASS(ncclBroadcast, sendbuff, recvbuff, count, datatype, root, real, stream);
  });
}
ROCENANTE_ALIAS(ncclResult_t, ncclBroadcast, (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                                              ncclComm_t comm, cudaStream_t stream))

extern "C" ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                                       ncclComm_t comm, cudaStream_t stream) {
  return L::all_reduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
}
ROCENANTE_ALIAS(ncclResult_t, ncclAllReduce, (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                              ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))

extern "C" ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (L::pass_through(comm))
    return L::ROCENANTE_PASS(ncclReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
  return L::forward_with_op(comm, "ncclReduceScatter", op, [=](ncclComm_t real, ncclRedOp_t o) {
    return L::ROCENANTE_PASS(ncclReduceScatter, sendbuff, recvbuff, recvcount, datatype, o, real, stream);
  });
}
ROCENANTE_ALIAS(ncclResult_t, ncclReduceScatter, (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                                  ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))

extern "C" ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                       ncclComm_t comm, cudaStream_t stream) {
  return L::all_gather(sendbuff, recvbuff, sendcount, datatype, comm, stream);
}
ROCENANTE_ALIAS(ncclResult_t, ncclAllGather, (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                              ncclComm_t comm, cudaStream_t stream))

extern "C" ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                                      cudaStream_t stream) {
  if (L::pass_through(comm))
    return L::ROCENANTE_PASS(ncclAlltoAll, sendbuff, recvbuff, count, datatype, comm, stream);
  return L::forward(comm, "ncclAlltoAll", [=](ncclComm_t real) {
    return L::ROCENANTE_PASS(ncclAlltoAll, sendbuff, recvbuff, count, datatype, real, stream);
  });
}
ROCENANTE_ALIAS(ncclResult_t, ncclAlltoAll, (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                             ncclComm_t comm, cudaStream_t stream))

extern "C" ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                                    ncclComm_t comm, cudaStream_t stream) {
  if (L::pass_through(comm))
    return L::ROCENANTE_PASS(ncclGather, sendbuff, recvbuff, count, datatype, root, comm, stream);
  return L::forward(comm, "ncclGather", [=](ncclComm_t real) {
    return L::ROCENANTE_PASS(ncclGather, sendbuff, recvbuff, count, datatype, root, real, stream);
  });
}
ROCENANTE_ALIAS(ncclResult_t, ncclGather, (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                                           ncclComm_t comm, cudaStream_t stream))

extern "C" ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                                     ncclComm_t comm, cudaStream_t stream) {
  if (L::pass_through(comm))
    return L::ROCENANTE_PASS(ncclScatter, sendbuff, recvbuff, count, datatype, root, comm, stream);
  return L::forward(comm, "ncclScatter", [=](ncclComm_t real) {
    return L::ROCENANTE_PASS(ncclScatter, sendbuff, recvbuff, count, datatype, root, real, stream);
  });
}
ROCENANTE_ALIAS(ncclResult_t, ncclScatter, (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                                            ncclComm_t comm, cudaStream_t stream))

extern "C" ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                                  cudaStream_t stream) {
  if (L::pass_through(comm)) return L::ROCENANTE_PASS(ncclSend, sendbuff, count, datatype, peer, comm, stream);
  return L::forward(comm, "ncclSend",
                    [=](ncclComm_t real) { return L::ROCENANTE_PASS(ncclSend, sendbuff, count, datatype, peer, real, stream); });
}
ROCENANTE_ALIAS(ncclResult_t, ncclSend, (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                                         cudaStream_t stream))

extern "C" ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                                  cudaStream_t stream) {
  if (L::pass_through(comm)) return L::ROCENANTE_PASS(ncclRecv, recvbuff, count, datatype, peer, comm, stream);
  return L::forward(comm, "ncclRecv",
                    [=](ncclComm_t real) { return L::ROCENANTE_PASS(ncclRecv, recvbuff, count, datatype, peer, real, stream); });
}
ROCENANTE_ALIAS(ncclResult_t, ncclRecv, (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                                         cudaStream_t stream))

extern "C" ncclResult_t pncclGroupStart() {
  if (L::proc().disabled) return L::ROCENANTE_PASS(ncclGroupStart);
  ++L::tls_group.depth;
  return ncclSuccess;
}
ROCENANTE_ALIAS(ncclResult_t, ncclGroupStart, ())

extern "C" ncclResult_t pncclGroupEnd() {
  if (L::proc().disabled) return L::ROCENANTE_PASS(ncclGroupEnd);
  return L::group_end(nullptr);
}
ROCENANTE_ALIAS(ncclResult_t, ncclGroupEnd, ())

extern "C" ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  if (L::proc().disabled) return L::ROCENANTE_PASS(ncclGroupSimulateEnd, simInfo);
  if (simInfo == nullptr) return L::fail(ncclInvalidArgument, "ncclGroupSimulateEnd: simInfo is NULL");
  return L::group_end(simInfo);
}
ROCENANTE_ALIAS(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t* simInfo))

// ---- beyond nccl.h ------------------------------------------------------------------------------------------------

/// The start-up line of `comm` (what is served where, nccl_api/layer.cpp's describe) into `buf` (NUL-terminated,
/// truncated to `len`); returns the full length, or -1 for a handle this layer did not make. For tools and tests.
extern "C" int rocenante_nccl_describe(ncclComm_t comm, char* buf, size_t len) {
  ncclComm* c = ours(comm);
  if (c == nullptr) return -1;
  const std::string& s = L::state_of(c) == L::comm_state::ready ? c->info : c->init_error;
  if (buf != nullptr && len > 0) {
    const std::size_t n = std::min(len - 1, s.size());
    std::memcpy(buf, s.data(), n);
    buf[n] = '\0';
  }
  return static_cast<int>(s.size());
}

/// Where `comm`'s call of `count` elements of `datatype` (operator `op`; all-gather: `op` ignored) goes:
/// 0 served, else a rocenante::nccl_layer::route; -1 for a handle this layer did not make. Rank-invariant.
extern "C" int rocenante_nccl_route(ncclComm_t comm, int all_gather, size_t count, int datatype, int op) {
  ncclComm* c = ours(comm);
  if (c == nullptr) return -1;
  return static_cast<int>(L::decide(all_gather ? L::collective_kind::all_gather : L::collective_kind::all_reduce, count,
                                    datatype, all_gather ? ncclSum : op, c->policy));
}

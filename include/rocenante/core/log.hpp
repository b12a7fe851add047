// core/log.hpp — NCCL-style log lines for set-up decisions (transport choice, fallback, algorithm table):
//
//   host:pid:tid [rank 2] ROCENANTE INFO transport: ibverbs on every rank (rxe0 ...)
//
// Only set-up code logs, once per decision; the launch path never does. The level comes from ROCENANTE_DEBUG
// (core/env.hpp: NONE, WARN — the default — or INFO); the caller passes it in, so this header reads no
// environment. Lines go to stderr, or to a sink a test installs (set_log_sink). Host only.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <utility>

#include "keywords.hpp"

namespace rocenante {

enum class log_level : std::uint8_t { none = 0, warn = 1, info = 2 };

/// ROCENANTE_DEBUG's keywords (core/env.hpp), also the names log lines print.
inline constexpr detail::keyword<log_level> log_level_keywords[] = {
    {"NONE", log_level::none}, {"WARN", log_level::warn}, {"INFO", log_level::info}};

inline const char* to_string(log_level l) { return detail::keyword_text(log_level_keywords, l); }

namespace detail {
struct log_state {
  std::mutex mu;
  std::function<void(const std::string&)> sink;  ///< empty: stderr
};
inline log_state& log_globals() {
  static log_state s;
  return s;
}
}  // namespace detail

/// Test hook: every line (already prefixed, no trailing newline) goes to `sink` instead of stderr; an empty
/// function restores stderr. Thread-safe; lines from concurrent ranks are serialised.
inline void set_log_sink(std::function<void(const std::string&)> sink) {
  auto& g = detail::log_globals();
  std::lock_guard lock(g.mu);
  g.sink = std::move(sink);
}

/// The NCCL-style prefix: "host:pid:tid [rank r] ROCENANTE LEVEL ".
inline std::string log_prefix(log_level l, int rank) {
  char host[64] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '?';
  return std::string(host) + ":" + std::to_string(::getpid()) + ":" + std::to_string(::syscall(SYS_gettid)) +
         " [rank " + std::to_string(rank) + "] ROCENANTE " + to_string(l) + " ";
}

/// Writes one line when `l` is at or below `threshold` (WARN lines show at WARN and INFO; INFO lines at INFO).
inline void log_line(log_level l, log_level threshold, int rank, const std::string& msg) {
  if (l == log_level::none || static_cast<int>(l) > static_cast<int>(threshold)) return;
  const std::string line = log_prefix(l, rank) + msg;
  auto& g = detail::log_globals();
  std::lock_guard lock(g.mu);
  if (g.sink)
    g.sink(line);
  else
    std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace rocenante

// core/identity.hpp — which host and which process a rank runs in, as set-up publishes them: the GPU topology
// (gpu/topology.hpp), the transports that work only inside one process or one node, and the start-up vote use
// these, so that "same host" and "same process" mean one thing everywhere. Host only.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "env.hpp"

namespace rocenante::identity {

/// Which host this process runs on: ROCENANTE_HOST_ID when set (containers that share a host name, and tests that
/// play several hosts on one machine), else the host name and the kernel's boot id. `name` receives the text.
inline std::uint64_t host(std::string* name = nullptr, const env::lookup& get = {}) {
  std::string id;
  const char* v = get ? get("ROCENANTE_HOST_ID") : std::getenv("ROCENANTE_HOST_ID");
  if (v && *v) {
    id = v;
    if (name) *name = id;
  } else {
    char hn[256] = {};
    ::gethostname(hn, sizeof hn - 1);
    std::ifstream boot("/proc/sys/kernel/random/boot_id");
    std::string b;
    std::getline(boot, b);
    id = std::string(hn) + "/" + b;
    if (name) *name = hn;
  }
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : id) h = (h ^ c) * 1099511628211ull;
  return h;
}

/// Equal for every rank of one process, different between processes (the host, the pid and an address).
inline std::uint64_t process() {
  static const char anchor = 0;
  return host() ^ (static_cast<std::uint64_t>(::getpid()) * 0x9e3779b97f4a7c15ull) ^
         reinterpret_cast<std::uintptr_t>(&anchor);
}

}  // namespace rocenante::identity

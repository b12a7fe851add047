// gpu/topology.hpp — where every rank's GPU is, as set-up learns it: each rank publishes (host identity, GPU UUID,
// process, CUDA ordinal) once, and "ranks sharing this GPU", "every rank on one node", "peers in this process" and
// the co-residency bound are computed from those identities, never from CUDA ordinals. An ordinal names a GPU only
// inside one process: on a cluster of DGX Sparks every rank is "device 0" of its own node, and on a multi-GPU
// server a process that sees one GPU (CUDA_VISIBLE_DEVICES) calls it 0 whatever it is.
//
// Host code without CUDA (the GPU communicator fills the UUID); tested on CPU with processes that pretend to be
// on different hosts (ROCENANTE_HOST_ID).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include "../bootstrap/concepts.hpp"
#include "../bootstrap/vote.hpp"
#include "../core/env.hpp"
#include "../core/error.hpp"
#include "../core/identity.hpp"

namespace rocenante::gpu {

/// One rank's identity, exchanged at set-up (fixed size, trivially copyable).
struct device_identity {
  std::uint64_t host = 0;     ///< host identity (host_identity())
  std::uint64_t process = 0;  ///< equal exactly for ranks of one process (process_token())
  std::uint8_t uuid[16] = {}; ///< the GPU's UUID (cudaDeviceProp::uuid)
  std::int32_t ordinal = -1;  ///< the CUDA ordinal in this rank's process (meaningful inside that process only)
  std::uint32_t pid = 0;
  char host_name[48] = {};    ///< for messages

  bool same_gpu(const device_identity& o) const {
    return host == o.host && std::memcmp(uuid, o.uuid, sizeof uuid) == 0;
  }
  /// "host spark-2, GPU 0 (GPU-6c1d...), pid 4242"
  std::string text() const {
    static const char* hex = "0123456789abcdef";
    std::string u = "GPU-";
    for (int i = 0; i < 4; ++i) u += std::string{hex[uuid[i] >> 4], hex[uuid[i] & 15]};
    return "host " + std::string(host_name, strnlen(host_name, sizeof host_name)) + ", GPU " + std::to_string(ordinal) +
           " (" + u + "...), pid " + std::to_string(pid);
  }
};

/// This process's identity on its CUDA device `ordinal` with UUID `uuid` (16 bytes).
inline device_identity make_identity(int ordinal, const void* uuid) {
  device_identity d;
  std::string name;
  d.host = identity::host(&name);
  d.process = identity::process();
  std::memcpy(d.uuid, uuid, sizeof d.uuid);
  d.ordinal = ordinal;
  d.pid = static_cast<std::uint32_t>(::getpid());
  std::snprintf(d.host_name, sizeof d.host_name, "%s", name.c_str());
  return d;
}

/// Every rank's identity and what follows from it; the same table on every rank.
struct topology {
  int rank = 0;
  std::vector<device_identity> ids;  ///< [rank]

  int ranks() const { return static_cast<int>(ids.size()); }
  const device_identity& me() const { return ids[static_cast<std::size_t>(rank)]; }
  bool same_host(int q) const { return ids[q].host == me().host; }
  bool same_process(int q) const { return ids[q].process == me().process; }
  bool same_gpu(int q) const { return ids[q].same_gpu(me()); }
  /// Ranks whose kernels run on this rank's GPU, this rank included (they wait on each other inside their
  /// kernels, so all their CTAs must be resident at once).
  int sharing() const {
    int n = 0;
    for (int q = 0; q < ranks(); ++q) n += same_gpu(q) ? 1 : 0;
    return n;
  }
  int in_this_process() const {
    int n = 0;
    for (int q = 0; q < ranks(); ++q) n += same_process(q) ? 1 : 0;
    return n;
  }
  bool all_one_host() const {
    for (int q = 0; q < ranks(); ++q)
      if (!same_host(q)) return false;
    return true;
  }
  /// Every rank's kernels run on this one GPU: flags need only device scope.
  bool all_one_gpu() const { return sharing() == ranks(); }
  /// CUDA ordinals (in this process) of other GPUs that ranks of this process use: peer access to enable.
  std::vector<int> peer_ordinals() const {
    std::vector<int> out;
    for (int q = 0; q < ranks(); ++q)
      if (same_process(q) && !same_gpu(q) &&
          std::find(out.begin(), out.end(), ids[q].ordinal) == out.end())
        out.push_back(ids[q].ordinal);
    return out;
  }
  /// The first rank on another host than this rank's, or -1.
  int first_remote() const {
    for (int q = 0; q < ranks(); ++q)
      if (!same_host(q)) return q;
    return -1;
  }
};

/// Collective: every rank publishes the identity `make()` returns (a set-up vote, step "gpu: topology": a rank whose
/// queries throw fails every rank with the same error, bootstrap/vote.hpp).
template <class Make>
  requires std::is_invocable_r_v<device_identity, Make&>
topology gather_topology(bootstrap::bootstrap_ref b, Make&& make) {
  device_identity mine{};
  topology t;
  t.rank = b.rank();
  t.ids = setup::vote(b, "gpu: topology", mine, [&] { mine = make(); });
  return t;
}

/// Collective: every rank publishes `mine`.
inline topology gather_topology(bootstrap::bootstrap_ref b, const device_identity& mine) {
  return gather_topology(b, [&] { return mine; });
}

/// Why `sharing` ranks of `ctas` CTAs each cannot all be resident on a GPU of `sms` SMs with `per_sm` CTAs per
/// SM (empty when they can). Ranks that share a GPU spin on each other inside their kernels: a CTA that cannot
/// become resident while its peers' CTAs wait for it deadlocks them until the timeout.
inline std::string co_residency_problem(int sharing, std::uint64_t ctas, int sms, int per_sm) {
  const std::uint64_t need = std::uint64_t(sharing) * ctas;
  const std::uint64_t have = std::uint64_t(sms) * std::uint64_t(per_sm < 0 ? 0 : per_sm);
  if (need <= have) return {};
  return std::to_string(sharing) + " ranks share this GPU x " + std::to_string(ctas) + " CTAs = " +
         std::to_string(need) + " CTAs that wait on each other, but only " + std::to_string(have) + " (" +
         std::to_string(sms) + " SMs x " + std::to_string(per_sm) +
         ") can be resident at once: that could deadlock; lower options::max_ctas (or max_parts) to " +
         std::to_string(sharing > 0 ? have / std::uint64_t(sharing) : 0) + " or fewer";
}

}  // namespace rocenante::gpu

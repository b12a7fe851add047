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
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
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
  /// Ranks of this process on this rank's GPU, this rank included: threads of one process that share its CUDA
  /// context there, and with it the context's hardware work queues (work_queue_problem).
  int sharing_context() const {
    int n = 0;
    for (int q = 0; q < ranks(); ++q) n += same_process(q) && same_gpu(q) ? 1 : 0;
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

/// CUDA_DEVICE_MAX_CONNECTIONS's text as an integer; nothing when unset, empty or not an integer. (Not in a nested
/// `detail` namespace: that would hide rocenante::detail from the rest of rocenante::gpu.)
inline std::optional<long long> max_connections_value(const char* text) {
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (*end != '\0' || errno == ERANGE) return std::nullopt;
  return v;
}

/// Hardware work queues a CUDA context has for its streams. CUDA maps a context's streams onto a fixed set of
/// queues: CUDA_DEVICE_MAX_CONNECTIONS (`max_connections`: the variable's text, nullptr when unset) when set, which
/// CUDA takes as 1 to 32 (clamped here to that range); else 8, or under MPS (`mps`: cudaDevAttrMpsEnabled) fewer.
/// How many fewer under MPS is not documented: measured (docs/operations.md, the MPS table), 2 ranks of
/// one process passed and 4 timed out, so it is counted as 2. Empty text and text that is not an integer count as
/// unset (the default applies).
inline int work_queues(const char* max_connections, bool mps) {
  const std::optional<long long> v = max_connections_value(max_connections);
  if (!v) return mps ? 2 : 8;
  return *v < 1 ? 1 : *v > 32 ? 32 : static_cast<int>(*v);
}

/// Why `sharing_context` ranks (threads of one process sharing its CUDA context on one GPU, one stream each) would
/// not each get a hardware work queue of their own (empty when they do); the other arguments as work_queues. A
/// queue starts its work in order, so two ranks' streams on one queue can block each other: a rank's collective
/// held behind a peer's work that waits for it stalls both until the timeout (docs/operations.md: 4 ranks with 2
/// queues, or under MPS with the variable unset, timed out at the first collective). One stream per rank is
/// counted: a rank that launches on more streams (a fork of its collectives onto a second stream) needs a queue
/// for each, which set-up cannot see. Ranks in other processes have queues of their own and are not counted. The
/// inputs are the process's, so every rank of a process gets the same answer.
inline std::string work_queue_problem(int sharing_context, const char* max_connections, bool mps) {
  const int queues = work_queues(max_connections, mps);
  if (sharing_context <= queues) return {};
  const bool value = max_connections_value(max_connections).has_value();
  std::string source;
  if (value)
    source = "CUDA_DEVICE_MAX_CONNECTIONS=" + std::string(max_connections);
  else if (max_connections != nullptr && *max_connections != '\0')
    source = "CUDA_DEVICE_MAX_CONNECTIONS='" + std::string(max_connections) + "' is not an integer: the default";
  else
    source = "CUDA_DEVICE_MAX_CONNECTIONS unset: CUDA's default";
  if (mps && !value) source += " under MPS, fewer than 4 measured, counted as 2";
  std::string what = std::to_string(sharing_context) + " ranks of this process share its CUDA context on this GPU, " +
                     "one stream each, but the context has " + std::to_string(queues) + " hardware work queue" +
                     (queues == 1 ? "" : "s") + " (" + source + "): a queue starts its work in order, so ranks " +
                     "whose streams share one can block each other, a rank's collective held behind a peer's work " +
                     "that waits for it, until the timeout (each further stream a rank launches collectives on " +
                     "needs a queue too): ";
  if (queues < 32)
    return what + "set CUDA_DEVICE_MAX_CONNECTIONS=32 (at most 32) before the first CUDA call, or run ranks as processes";
  return what + "32 is CUDA's most: run ranks as processes (or at most 32 ranks of one process per GPU)";
}

}  // namespace rocenante::gpu

// gpu/candidates.hpp — the GPU executor's transport candidates for the start-up decision (host/selection.hpp): what
// `auto` tries in which order, what each probe checks, where each needs its ranks. Host code with no kernels, so
// that the host suite can test the GPU decision on CPU threads; gpu/select.hpp builds the chosen candidate.
//
//   auto      cuda_ipc (every rank on one node: GPU windows mapped between the processes), then ibverbs (the proxy
//             path with RDMA WRITEs; where rdma-core's headers were found at build time), then socket
//             (transport::cuda_socket: the same proxy path over TCP), then nccl (whole collectives through libnccl,
//             loaded at run time). socket comes before nccl because it keeps the library's guarantees (bounded
//             waits, NaN fill, failures(), aborting the peers of a refused call: core/capabilities.hpp) and puts
//             several ranks on one GPU, which NCCL cannot; nccl is the last resort and says what it lacks.
//   forced    cuda_ipc | ibverbs | socket | nccl: a failure on any rank fails every rank.
#pragma once

#include <string>
#include <vector>

#include "../host/selection.hpp"
#include "../transport/nccl/api.hpp"

namespace rocenante::gpu {

using host::placement;
using host::probe_code;
using host::transport_kind;
using host::verdict;

/// The GPU executor's candidates (host::candidate_rules).
struct gpu_candidates {
  static std::vector<transport_kind> order(env::transport_choice c) {
    if (const auto k = host::forced_kind(c)) return {*k};
    return {transport_kind::cuda_ipc, transport_kind::ibverbs, transport_kind::socket, transport_kind::nccl};
  }

  /// libnccl loads (transport/nccl/api.hpp); whether NCCL's init works is found when it is built.
  static verdict probe_nccl(int rank, const transport::nccl_api::library& l = transport::nccl_api::instance()) {
    if (!l.ok) return verdict::make(transport_kind::nccl, rank, probe_code::library_missing, l.why);
    return verdict::make(transport_kind::nccl, rank, probe_code::ok, "libnccl " + l.version_string());
  }

  static verdict probe(transport_kind k, int rank, const env::settings& s) {
    switch (k) {
      case transport_kind::cuda_ipc:
        return verdict::make(k, rank, probe_code::ok, "GPU windows mapped between the processes of one node");
      case transport_kind::ibverbs: return host::select_detail::probe_ibverbs(rank, s);
      case transport_kind::socket: return host::select_detail::probe_socket(rank, s);
      case transport_kind::nccl: return probe_nccl(rank);
      case transport_kind::loopback:
        return verdict::make(k, rank, probe_code::wrong_executor,
                             "loopback is the host executor's transport (ranks of one process on one GPU use "
                             "gpu::communicator<cuda_loopback> directly); the GPU executor has cuda_ipc, ibverbs, socket "
                             "and nccl");
      case transport_kind::none: break;
    }
    return verdict::make(k, rank, probe_code::not_probed, "not a candidate");
  }

  static placement needs(transport_kind k) { return k == transport_kind::cuda_ipc ? placement::one_host : placement::anywhere; }

  /// cuda_ipc stays in the order across nodes: the reason then says why it was not chosen.
  static std::vector<transport_kind> arrange(env::transport_choice, std::vector<transport_kind> order,
                                             const host::placement_facts&) {
    return order;
  }
};
static_assert(host::candidate_rules<gpu_candidates>);

/// Steps 1-3 of the GPU executor's decision, for callers that build the transport themselves.
inline host::selection select_transport(bootstrap::bootstrap_ref boot, const host::select_config& cfg) {
  return host::select_transport<gpu_candidates>(boot, cfg);
}

}  // namespace rocenante::gpu

// gpu/select.hpp — the GPU executor's start-up decision: which transport every rank's kernels use, decided by all
// ranks together (host/selection.hpp's vote and `settle` loop over gpu/candidates.hpp's candidates), logged once
// and queryable, then fixed for the life of the communicator.
//
//   ROCENANTE_TRANSPORT=auto     cuda_ipc when every rank runs on one node (GPU windows mapped between the
//                                processes), else ibverbs (the proxy path with RDMA WRITEs; built where rdma-core's
//                                headers exist), else socket (transport::cuda_socket: the proxy path over TCP), else
//                                nccl (whole collectives through libnccl, loaded at run time; the log line and
//                                capabilities() say which of the library's guarantees it lacks)
//   ROCENANTE_TRANSPORT=cuda_ipc | ibverbs | socket | nccl
//                                forced: a failure on any rank is a transport_error on every rank, never a fallback.
// Each candidate is built (every local step of its set-up a set-up vote: bootstrap/vote.hpp), its connectivity
// gathered, and a start-up all-reduce of every allowed algorithm checked exactly on every rank (small integers,
// exact in fp32 in any order, so byte-identical too) before the vote settles; a failure at any step on any rank
// moves every rank to the next candidate together. After start-up: fail-stop, never a silent switch
// (host/selection.hpp says why).
//
// Who calls: every rank, one host thread per rank with its GPU current (cudaSetDevice), collectively. Include from
// .cu files (it instantiates the kernels of every candidate's handle type: direct_handle and proxy_handle).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <string>
#include <variant>
#include <vector>

#include "../transport/cuda_ipc.hpp"
#include "../transport/nccl.hpp"
#include "candidates.hpp"
#include "communicator.hpp"
#if ROCENANTE_HAS_IBVERBS
#include "../transport/cuda_ibverbs.hpp"
#endif

namespace rocenante::gpu {

namespace select_detail {
#if ROCENANTE_HAS_IBVERBS
using gpu_base = host::selected_base<communicator<transport::cuda_ipc>, communicator<transport::cuda_socket>,
                                     transport::nccl, communicator<transport::cuda_ibverbs>>;
#else
using gpu_base = host::selected_base<communicator<transport::cuda_ipc>, communicator<transport::cuda_socket>, transport::nccl>;
#endif
}  // namespace select_detail

class selected_communicator : public select_detail::gpu_base {
 public:
  using ipc_comm = communicator<transport::cuda_ipc>;
  using socket_comm = communicator<transport::cuda_socket>;
  using nccl_comm = transport::nccl;
#if ROCENANTE_HAS_IBVERBS
  using ibverbs_comm = communicator<transport::cuda_ibverbs>;
#else
  struct ibverbs_comm {};  // never constructed
#endif

  /// Collective: every rank calls with the same options. Throws config_error (bad environment),
  /// config_mismatch_error (ranks asked for different transports or algorithms), transport_error (no transport
  /// usable by every rank; a forced one failed: the message names the ranks and their reasons).
  template <bootstrap::bootstrap B>
  selected_communicator(B& boot, const options& opts, host::select_config cfg = {}) {
    select_and_build<gpu_candidates>(*this, bootstrap::bootstrap_ref(boot), opts, cfg);
  }
  /// As above, deciding among `Rules`' candidates (host::candidate_rules over the transports build() knows) instead
  /// of gpu_candidates: a caller that must not build one of them passes rules that leave it out (the NCCL-API layer,
  /// nccl_api/, never builds the nccl candidate, which would load the layer itself).
  template <host::candidate_rules Rules, bootstrap::bootstrap B>
  selected_communicator(B& boot, const options& opts, host::select_config cfg, std::type_identity<Rules>) {
    select_and_build<Rules>(*this, bootstrap::bootstrap_ref(boot), opts, cfg);
  }

  /// All-reduce on `stream` with the configured algorithm (ROCENANTE_ALGO; auto: by size and rank count).
  template <class T>
  status all_reduce(const T* in, T* out, std::size_t count, cudaStream_t stream) {
    return host::with_algorithm(algorithm_for(std::uint64_t{count} * sizeof(T)),
                                [&](auto a) { return all_reduce(in, out, count, stream, a); });
  }
  /// A named algorithm; refused (not_supported, no sequence consumed, alike on every rank) when start-up found it
  /// cannot run. Over nccl the algorithm is NCCL's.
  template <algorithm::algorithm A, class T>
  status all_reduce(const T* in, T* out, std::size_t count, cudaStream_t stream, A a) {
    if (auto s = refuse_if_unreachable(A::id)) return *s;
    return pass([&](auto& c) {
      if constexpr (std::is_same_v<std::decay_t<decltype(c)>, nccl_comm>) return c.all_reduce(in, out, count, stream);
      else return c.all_reduce(in, out, count, stream, a);
    });
  }
  template <class T>
  status all_gather(const T* in, T* out, std::size_t count, cudaStream_t stream) {
    if (auto s = refuse_if_unreachable(algorithm::algo::one_shot)) return *s;
    return pass([&](auto& c) { return c.all_gather(in, out, count, stream); });
  }

  /// Refuses this call for a reason the caller found (a binding's checks: dtype, device, output size), in the
  /// collective's place on `stream`: the peers are told to abort it and this rank is poisoned (over nccl the peers
  /// cannot be told: transport::nccl::reject). Returns invalid_argument.
  status reject(const std::string& why, cudaStream_t stream) {
    return pass([&](auto& c) { return c.reject(why, stream); });
  }

 private:
  friend select_detail::gpu_base;  // select_and_build() calls build and self_test

  void build(bootstrap::bootstrap_ref b, host::transport_kind k, const options& o) {
    switch (k) {
      case host::transport_kind::cuda_ipc: comm_ = std::make_unique<ipc_comm>(b, o); return;
      case host::transport_kind::socket: comm_ = std::make_unique<socket_comm>(b, o); return;
      case host::transport_kind::nccl: comm_ = std::make_unique<nccl_comm>(b, transport::nccl_api::instance(), o); return;
#if ROCENANTE_HAS_IBVERBS
      case host::transport_kind::ibverbs: comm_ = std::make_unique<ibverbs_comm>(b, o); return;
#endif
      default: break;
    }
    throw transport_error(std::string("transport ") + host::to_string(k) + " cannot be built by the GPU executor");
  }

  /// Start-up all-reduce of every allowed algorithm on the GPU, checked exactly (small integers: exact in fp32 in
  /// any order, so every rank computes the reference itself and a match on every rank is byte-identical).
  std::string self_test(const host::connectivity_report& conn, const options& o) {
    const int me = rank_, n = size_;
    std::size_t count = host::self_test_count(n);
    if (count * sizeof(float) > o.capacity_bytes) count = o.capacity_bytes / sizeof(float);
    std::vector<float> in(count), out(count);
    for (std::size_t i = 0; i < count; ++i) in[i] = host::self_test_value(me, i);
    float *din = nullptr, *dout = nullptr;
    cudaStream_t s = nullptr;
    std::string why;
    auto cuda = [&](cudaError_t e, const char* what) {
      if (e != cudaSuccess && why.empty()) why = std::string("start-up test: ") + what + ": " + cudaGetErrorString(e);
      return e == cudaSuccess;
    };
    if (cuda(cudaMalloc(&din, count * sizeof(float)), "cudaMalloc") && cuda(cudaMalloc(&dout, count * sizeof(float)), "cudaMalloc") &&
        cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate") &&
        cuda(cudaMemcpy(din, in.data(), count * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy")) {
      for (algorithm::algo a : {algorithm::algo::one_shot, algorithm::algo::two_shot, algorithm::algo::ring}) {
        if (!conn.allows(a) || (a != algorithm::algo::one_shot && n < 2)) continue;
        if (!cuda(cudaMemsetAsync(dout, 0xff, count * sizeof(float), s), "cudaMemsetAsync")) break;
        ++setup_calls_;
        status st = host::with_algorithm(a, [&](auto tag) { return all_reduce(din, dout, count, s, tag); });
        // Bounded: every wait inside the library's kernels is (nccl's are NCCL's).
        if (st == status::ok && (!cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize") ||
                                 !cuda(cudaMemcpy(out.data(), dout, count * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy")))
          break;
        std::string error = last_error_;
        if (const host::health h = check_health(); st == status::ok && !h.ok()) st = h.state, error = h.message;
        why = host::self_test_check(a, st, error, out.data(), count, n);
        if (!why.empty()) break;
        if (std::holds_alternative<std::unique_ptr<nccl_comm>>(comm_)) break;  // NCCL's algorithm is its own
      }
    }
    if (s) cudaStreamDestroy(s);
    if (din) cudaFree(din);
    if (dout) cudaFree(dout);
    return why;
  }
};

}  // namespace rocenante::gpu

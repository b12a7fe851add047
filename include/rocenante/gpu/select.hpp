// gpu/select.hpp — the GPU executor's start-up decision: which transport every rank's kernels use, decided by all
// ranks together (host/select.hpp's vote, then its `settle` loop), logged once (ROCENANTE_DEBUG=INFO) and
// queryable, then fixed for the life of the communicator.
//
//   ROCENANTE_TRANSPORT=auto     cuda_ipc when every rank runs on one node (GPU windows mapped between the
//                                processes), else ibverbs (the proxy path with RDMA WRITEs; built where rdma-core's
//                                headers exist), else nccl (whole collectives through libnccl, loaded at run time)
//   ROCENANTE_TRANSPORT=cuda_ipc | ibverbs | socket | nccl
//                                forced: a failure on any rank is a transport_error on every rank, never a fallback.
//                                socket (transport::cuda_socket) runs the whole proxy path over TCP, for machines
//                                without an RDMA device.
// Each candidate is built, its connectivity gathered, and a start-up all-reduce of every allowed algorithm checked
// exactly on every rank (small integers, exact in fp32 in any order, so byte-identical too) before the vote settles;
// a failure anywhere moves every rank to the next candidate together. After start-up: fail-stop, never a silent
// switch (host/select.hpp says why).
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

#include "../host/select.hpp"
#include "../transport/cuda_ipc.hpp"
#include "../transport/nccl.hpp"
#include "communicator.hpp"
#if ROCENANTE_HAS_IBVERBS
#include "../transport/cuda_ibverbs.hpp"
#endif

namespace rocenante::gpu {

class selected_communicator {
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
    bootstrap::bootstrap_ref b(boot);
    host::vote_table t = host::vote_probes(b, cfg, host::executor::gpu);
    const options o = t.settings.apply(opts);
    rank_ = b.rank();
    size_ = b.size();
    sel_ = host::settle(
        b, t, cfg, [&](host::transport_kind k) { build(b, k, o); }, [&] { comm_ = std::monostate{}; },
        [&](host::transport_kind k) { return transport_reachable(k); },
        [&](const host::connectivity_report& conn) { return self_test(conn, b.rank(), b.size(), o.capacity_bytes); });
    host::log_decision(t, sel_, rank_, size_);
  }

  selected_communicator(const selected_communicator&) = delete;
  selected_communicator& operator=(const selected_communicator&) = delete;

  /// The start-up decision, identical on every rank (selected().summary() is the log line's body).
  const host::selection& selected() const { return sel_; }
  host::transport_kind transport() const { return sel_.chosen; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  /// The algorithm a call of `bytes` bytes per rank that names none runs (nccl: NCCL chooses its own).
  algorithm::algo algorithm_for(std::uint64_t bytes) const {
    if (sel_.algo == env::algo_choice::one_shot) return algorithm::algo::one_shot;
    if (sel_.algo == env::algo_choice::ring || !sel_.connectivity.any_to_any()) return algorithm::algo::ring;
    return algorithm::choose(bytes, size_);
  }

  /// All-reduce on `stream` with the configured algorithm (ROCENANTE_ALGO; auto: by size and rank count).
  template <class T>
  status all_reduce(const T* in, T* out, std::size_t count, cudaStream_t stream) {
    if (algorithm_for(std::uint64_t{count} * sizeof(T)) == algorithm::algo::ring)
      return all_reduce(in, out, count, stream, algorithm::ring{});
    return all_reduce(in, out, count, stream, algorithm::one_shot{});
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

  /// Health without a device synchronize.
  host::health check_health() const {
    host::health h;
    std::visit(
        [&](const auto& c) {
          if constexpr (!std::is_same_v<std::decay_t<decltype(c)>, std::monostate>) h = c->check_health();
        },
        comm_);
    return h;
  }
  const std::string& last_error() const { return last_error_; }

  /// The underlying communicator when it is of type C (ipc_comm, socket_comm, ibverbs_comm, nccl_comm), else nullptr.
  template <class C>
  C* get() {
    auto* p = std::get_if<std::unique_ptr<C>>(&comm_);
    return p ? p->get() : nullptr;
  }

 private:
  void build(bootstrap::bootstrap_ref b, host::transport_kind k, const options& o) {
    switch (k) {
      case host::transport_kind::cuda_ipc: comm_ = std::make_unique<ipc_comm>(b, o); return;
      case host::transport_kind::socket: comm_ = std::make_unique<socket_comm>(b, o); return;
      case host::transport_kind::nccl: comm_ = std::make_unique<nccl_comm>(b); return;
#if ROCENANTE_HAS_IBVERBS
      case host::transport_kind::ibverbs: comm_ = std::make_unique<ibverbs_comm>(b, o); return;
#endif
      default: break;
    }
    throw transport_error(std::string("transport ") + host::to_string(k) + " cannot be built by the GPU executor");
  }

  /// The chosen transport's own per-pair probe (socket, ibverbs: connections made at set-up); empty: every pair.
  std::function<bool(int)> transport_reachable(host::transport_kind k) {
    if (k == host::transport_kind::socket)
      if (auto* c = get<socket_comm>()) return [c](int q) { return c->transport().reachable(q); };
#if ROCENANTE_HAS_IBVERBS
    if (k == host::transport_kind::ibverbs)
      if (auto* c = get<ibverbs_comm>()) return [c](int q) { return c->transport().reachable(q); };
#endif
    return {};
  }

  /// Start-up all-reduce of every allowed algorithm on the GPU, checked exactly (small integers: exact in fp32 in
  /// any order, so every rank computes the reference itself and a match on every rank is byte-identical).
  std::string self_test(const host::connectivity_report& conn, int me, int n, std::uint64_t capacity) {
    std::size_t count = 64 * static_cast<std::size_t>(n) + 3;
    if (count * sizeof(float) > capacity) count = capacity / sizeof(float);
    std::vector<float> in(count), out(count), ref(count);
    for (std::size_t i = 0; i < count; ++i) {
      in[i] = static_cast<float>((me + 1) * 3 + static_cast<int>(i % 7));
      ref[i] = 0;
      for (int q = 0; q < n; ++q) ref[i] += static_cast<float>((q + 1) * 3 + static_cast<int>(i % 7));
    }
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
      for (algorithm::algo a : {algorithm::algo::one_shot, algorithm::algo::ring}) {
        if (!conn.allows(a) || (a == algorithm::algo::ring && n < 2)) continue;
        const char* an = a == algorithm::algo::ring ? "ring" : "one_shot";
        if (!cuda(cudaMemsetAsync(dout, 0xff, count * sizeof(float), s), "cudaMemsetAsync")) break;
        const status st = a == algorithm::algo::ring ? all_reduce(din, dout, count, s, algorithm::ring{})
                                                     : all_reduce(din, dout, count, s, algorithm::one_shot{});
        // Bounded: every wait inside the library's kernels is (nccl's are NCCL's).
        if (st != status::ok) {
          why = std::string("start-up ") + an + " all-reduce returned " + to_string(st) + ": " + last_error_;
          break;
        }
        if (!cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize") ||
            !cuda(cudaMemcpy(out.data(), dout, count * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy"))
          break;
        if (const host::health h = check_health(); !h.ok()) {
          why = std::string("start-up ") + an + " all-reduce failed: " + h.message;
          break;
        }
        for (std::size_t i = 0; i < count && why.empty(); ++i)
          if (out[i] != ref[i])
            why = std::string("start-up ") + an + " all-reduce: element " + std::to_string(i) + " is " +
                  std::to_string(out[i]) + ", expected " + std::to_string(ref[i]);
        if (!why.empty()) break;
        if (std::holds_alternative<std::unique_ptr<nccl_comm>>(comm_)) break;  // NCCL's algorithm is its own
      }
    }
    if (s) cudaStreamDestroy(s);
    if (din) cudaFree(din);
    if (dout) cudaFree(dout);
    return why;
  }

  std::optional<status> refuse_if_unreachable(algorithm::algo a) {
    const std::string why = sel_.connectivity.refusal(a);
    if (why.empty()) return std::nullopt;
    last_error_ = "rocenante rank " + std::to_string(rank_) + ": " + why;
    return status::not_supported;
  }

  template <class F>
  status pass(F&& f) {
    status st = status::internal;
    std::visit(
        [&](auto& c) {
          if constexpr (std::is_same_v<std::decay_t<decltype(c)>, std::monostate>) {
            last_error_ = "rocenante: no communicator was built";
          } else {
            st = f(*c);
            last_error_ = st == status::ok ? std::string() : c->last_error();
          }
        },
        comm_);
    return st;
  }

#if ROCENANTE_HAS_IBVERBS
  std::variant<std::monostate, std::unique_ptr<ipc_comm>, std::unique_ptr<socket_comm>, std::unique_ptr<nccl_comm>,
               std::unique_ptr<ibverbs_comm>>
      comm_;
#else
  std::variant<std::monostate, std::unique_ptr<ipc_comm>, std::unique_ptr<socket_comm>, std::unique_ptr<nccl_comm>> comm_;
#endif
  host::selection sel_;
  int rank_ = 0, size_ = 1;
  std::string last_error_;
};

}  // namespace rocenante::gpu

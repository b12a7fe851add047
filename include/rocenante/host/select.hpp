// host/select.hpp — the host executor's start-up decision: which transport every rank uses, decided by all ranks
// together (host/selection.hpp: the vote, the table, settle), logged once and queryable, then fixed for the life of
// the communicator.
//
//   ROCENANTE_TRANSPORT=auto   ibverbs when every rank can use RDMA and every pair connects; else loopback when every
//                              rank runs in this process; else socket (TCP, transport/socket.hpp). A failure of
//                              loopback at any set-up step on any rank moves every rank to socket too.
//   ROCENANTE_TRANSPORT=ibverbs | loopback | socket
//                              forced: a failure on any rank is a transport_error on every rank, never a fallback.
//   nccl and cuda_ipc are the GPU executor's (gpu/select.hpp): asked of the host executor, they are refused with
//   the reason.
//
// Probes: ibverbs (libibverbs loads, the devices — ROCENANTE_IB_HCA, else the first ACTIVE one — open, their port is
// ACTIVE and they have a usable GID), socket (an interface to listen on), loopback (always; usable when every rank
// runs in this process, decided after the exchange from process tokens).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "../transport/loopback.hpp"
#include "../transport/socket.hpp"
#include "communicator.hpp"
#include "selection.hpp"

namespace rocenante::host {

/// The host executor's candidates (candidate_rules).
struct host_candidates {
  /// What each choice probes, in preference order: auto -> ibverbs, loopback, socket.
  static std::vector<transport_kind> order(env::transport_choice c) {
    if (const auto k = host::forced_kind(c)) return {*k};
    return {transport_kind::ibverbs, transport_kind::loopback, transport_kind::socket};
  }
  static verdict probe(transport_kind k, int rank, const env::settings& s) {
    switch (k) {
      case transport_kind::ibverbs: return select_detail::probe_ibverbs(rank, s);
      case transport_kind::socket: return select_detail::probe_socket(rank, s);
      case transport_kind::loopback: return verdict::make(k, rank, probe_code::ok, "in-process windows");
      case transport_kind::nccl:
        return verdict::make(k, rank, probe_code::wrong_executor,
                             "nccl runs with the GPU executor only (transport/nccl.hpp); the host executor has ibverbs, "
                             "socket and loopback");
      case transport_kind::cuda_ipc:
        return verdict::make(k, rank, probe_code::wrong_executor,
                             "cuda_ipc runs with the GPU executor only (transport/cuda_ipc.hpp)");
      case transport_kind::none: break;
    }
    return verdict::make(k, rank, probe_code::not_probed, "not a candidate");
  }
  static placement needs(transport_kind k) { return k == transport_kind::loopback ? placement::one_process : placement::anywhere; }
  /// Ranks in several processes: loopback, which could serve none of them, leaves auto's order unreported.
  static std::vector<transport_kind> arrange(env::transport_choice c, std::vector<transport_kind> order,
                                             const placement_facts& f) {
    if (c == env::transport_choice::automatic && !f.one_process)
      order.erase(std::remove(order.begin(), order.end(), transport_kind::loopback), order.end());
    return order;
  }
};
static_assert(candidate_rules<host_candidates>);

/// Steps 1-3 of the host executor's decision, for callers that build the transport themselves.
inline selection select_transport(bootstrap::bootstrap_ref boot, const select_config& cfg) {
  return select_transport<host_candidates>(boot, cfg);
}

namespace select_detail {
#if ROCENANTE_HAS_IBVERBS
using host_base = selected_base<communicator<transport::loopback>, communicator<transport::socket>,
                                communicator<transport::ibverbs>>;
#else
using host_base = selected_base<communicator<transport::loopback>, communicator<transport::socket>>;
#endif
}  // namespace select_detail

/// A host communicator over the transport the ranks chose together; same calls as host::communicator.
///
/// Who calls: every rank, collectively (as host::communicator). Set-up throws config_error (bad environment, forced
/// algorithm the connectivity refuses), config_mismatch_error (ranks asked for different transports or
/// algorithms), transport_error (no usable transport; a forced transport failed on some rank: the message names
/// the rank and its reason). Calls return a status and never throw.
/// Algorithm of calls that name none: ROCENANTE_ALGO / select_config::algo (auto: algorithm::choose).
class selected_communicator : public select_detail::host_base {
 public:
  using loopback_comm = communicator<transport::loopback>;
  using socket_comm = communicator<transport::socket>;
#if ROCENANTE_HAS_IBVERBS
  using ibverbs_comm = communicator<transport::ibverbs>;
#else
  struct ibverbs_comm {};  // never constructed
#endif

  template <bootstrap::bootstrap B>
  selected_communicator(B& boot, const options& opts, select_config cfg = {}) {
    select_and_build<host_candidates>(*this, bootstrap::bootstrap_ref(boot), opts, cfg);
  }

  /// All-reduce with the configured algorithm (ROCENANTE_ALGO; auto: by size and rank count).
  template <class T>
  status all_reduce(const T* in, T* out, std::size_t count) {
    return all_reduce(in, out, count, algorithm::automatic{});
  }
  template <class T>
  status all_reduce(const T* in, T* out, std::size_t count, algorithm::automatic) {
    return with_algorithm(algorithm_for(std::uint64_t{count} * sizeof(T)), [&](auto a) { return all_reduce(in, out, count, a); });
  }
  /// A named algorithm; refused (not_supported, no sequence consumed: every rank refuses alike, since the
  /// connectivity report is the same everywhere) when start-up found it cannot run.
  template <algorithm::algorithm A, class T>
  status all_reduce(const T* in, T* out, std::size_t count, A a) {
    if (auto s = refuse_if_unreachable(A::id)) return *s;
    return pass([&](auto& c) { return c.all_reduce(in, out, count, a); });
  }
  template <class T>
  status all_gather(const T* in, T* out, std::size_t count) {
    if (auto s = refuse_if_unreachable(algorithm::algo::one_shot)) return *s;
    return pass([&](auto& c) { return c.all_gather(in, out, count); });
  }
  /// Runtime dispatch (tools).
  status all_reduce(const void* in, void* out, std::size_t count, dtype t, algorithm::algo a) {
    if (auto s = refuse_if_unreachable(a)) return *s;
    return pass([&](auto& c) { return c.all_reduce(in, out, count, t, a); });
  }
  status all_reduce(const void* in, void* out, std::size_t count, dtype t, algorithm::automatic) {
    return all_reduce(in, out, count, t, algorithm_for(std::uint64_t{count} * element_bytes(t)));
  }

  status all_gather(const void* in, void* out, std::size_t count, dtype t) {
    if (auto s = refuse_if_unreachable(algorithm::algo::one_shot)) return *s;
    return pass([&](auto& c) { return c.all_gather(in, out, count, t); });
  }

  /// communicator::reject: refuses this call for a reason the caller found, telling the peers (poisons).
  status reject(const std::string& why, status code = status::invalid_argument) {
    return pass([&](auto& c) { return c.reject(why, code); });
  }

 private:
  friend select_detail::host_base;  // select_and_build() calls build and self_test

  void build(bootstrap::bootstrap_ref b, transport_kind k, const options& o) {
    if (k == transport_kind::loopback) {
      comm_ = std::make_unique<loopback_comm>(b, o);
      return;
    }
    if (k == transport_kind::socket) {
      comm_ = std::make_unique<socket_comm>(b, o);
      return;
    }
#if ROCENANTE_HAS_IBVERBS
    if (k == transport_kind::ibverbs) {
      comm_ = std::make_unique<ibverbs_comm>(b, o);
      return;
    }
#endif
    throw transport_error(std::string("transport ") + to_string(k) + " cannot be built by the host executor");
  }

  /// Start-up collective of every allowed algorithm (self_test_check).
  std::string self_test(const connectivity_report& conn, const options&) {
    const int me = rank_, n = size_;
    const std::size_t count = self_test_count(n);
    std::vector<float> in(count), out(count);
    for (std::size_t i = 0; i < count; ++i) in[i] = self_test_value(me, i);
    for (algorithm::algo a : {algorithm::algo::one_shot, algorithm::algo::two_shot, algorithm::algo::ring}) {
      if (!conn.allows(a) || (a != algorithm::algo::one_shot && n < 2)) continue;
      std::fill(out.begin(), out.end(), -1.0f);
      ++setup_calls_;
      const status st = pass([&](auto& c) { return c.all_reduce(in.data(), out.data(), count, dtype::f32, a); });
      if (std::string why = self_test_check(a, st, last_error_, out.data(), count, n); !why.empty()) return why;
    }
    return {};
  }
};

}  // namespace rocenante::host

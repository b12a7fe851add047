// host/communicator.hpp — the host executor: runs the protocol and the algorithms on CPU threads, one rank
// per communicator object. The code it runs is the code GPU kernels run (protocol/, algorithm/, reduce/);
// only the team differs (one thread here, a CTA there).
//
// Who calls: one thread per rank; every rank constructs its communicator (collective set-up through the
// bootstrap) and then calls the same collectives in the same order with the same counts.
// Progress: a collective returns when every peer has taken part or a wait ran out (options::timeout_ns).
// Errors: set-up throws rocenante::error subclasses; collectives return a [[nodiscard]] status and never throw.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../algorithm/auto.hpp"
#include "../algorithm/one_shot.hpp"
#include "../algorithm/poison.hpp"
#include "../algorithm/ring.hpp"
#include "../algorithm/two_shot.hpp"
#include "../bootstrap/concepts.hpp"
#include "../core/capabilities.hpp"
#include "../core/error.hpp"
#include "../core/options.hpp"
#include "../core/status.hpp"
#include "../protocol/session.hpp"
#include "../protocol/state.hpp"
#include "../reduce/sum.hpp"
#include "../transport/concepts.hpp"
#include "setup.hpp"

namespace rocenante::host {

/// What check_health() reports: ok, or the first failure with a message naming the peer and the sequence.
struct health {
  status state = status::ok;
  protocol::failure_record failure{};
  std::string message;
  bool ok() const { return state == status::ok; }
};

/// Why `count` elements of `elem` bytes cannot be one rank's input to a collective on a window of `capacity_bytes`
/// (empty: they can): a zero count, or more bytes than the window holds. Judged from values every rank shares. The
/// one body of this check: shape_refusal (call_refusal, so every refusal(); the host and GPU executors' calls) and
/// the NVFP4 calls' check_common (host and GPU) reach it.
inline std::string capacity_refusal(std::uint64_t count, std::uint64_t elem, std::uint64_t capacity_bytes) {
  if (count == 0) return "count is zero";
  if (count > capacity_bytes / elem)
    return "count " + std::to_string(count) + " (" + std::to_string(count * elem) + " bytes) exceeds capacity_bytes " +
           std::to_string(capacity_bytes) + "; raise options::capacity_bytes on every rank";
  return {};
}

/// Why a call of `count` elements of `elem` bytes with algorithm A cannot run on `window` (empty: it can), judged
/// only from values every rank shares: capacity_refusal, then whether A fits the window's layout. The shape part of
/// every call's checks (call_refusal; host::communicator::run; gpu::communicator::precheck), which add the dtype
/// and collective (call_refusal) or the pointers (the calls: null first, overlap last).
template <class A>
std::string shape_refusal(std::uint64_t count, std::uint64_t elem, const protocol::window_layout& window) {
  if (std::string why = capacity_refusal(count, elem, window.capacity_bytes); !why.empty()) return why;
  if (!fits<A>(window)) return std::string("algorithm ") + A::name + " needs a larger window than this communicator laid out";
  return {};
}

/// Whether a refused call fills its output with the poison value: when `out` is not null and `count` elements of
/// `elem` bytes fit `capacity_bytes`. A null output cannot be filled, and a count above capacity more likely says
/// the size is wrong than the buffer that large (writing past a buffer is worse than leaving it).
inline bool refusal_fills(const void* out, std::uint64_t count, std::uint64_t elem, std::uint64_t capacity_bytes) {
  return out != nullptr && count != 0 && count <= capacity_bytes / elem;
}

/// What the host executors (communicator, nvfp4_communicator) share: the collective set-up, this rank's protocol
/// state and wait policy, health, the loop over a collective's parts, and the refusal of a bad call in its place in
/// the sequence (session::reject).
template <transport::transport Transport>
class executor_base {
  static_assert(transport::check_transport<Transport>());

 public:
  using transport_type = Transport;

  executor_base(const executor_base&) = delete;
  executor_base& operator=(const executor_base&) = delete;

  int rank() const { return transport_.handle().rank(); }
  int size() const { return transport_.handle().ranks(); }
  const options& opts() const { return opts_; }
  const protocol::window_layout& layout() const { return layout_; }
  Transport& transport() { return transport_; }
  /// Sequence number the next collective will use.
  std::uint32_t next_sequence() const { return state_.seq[0]; }
  /// This rank's symmetric input area (options::symmetric_bytes; empty where the transport has none): an all-reduce
  /// whose input lies here, at the same offset on every rank, with its output elsewhere, reads the peers' inputs
  /// in place (algorithm/one_shot.hpp, "In-place path").
  std::span<std::byte> symmetric_input() {
    if (layout_.input_bytes == 0) return {};
    auto handle = transport_.handle();
    if constexpr (algorithm::one_shot::has_inplace<typename Transport::handle_type>)
      return {const_cast<std::byte*>(handle.input_ptr(handle.rank(), 0)), static_cast<std::size_t>(layout_.input_bytes)};
    else
      return {};
  }

  /// Health of this rank, without waiting for anything.
  health check_health() const {
    health h;
    auto* st = const_cast<protocol::rank_state*>(&state_);
    const std::uint32_t p = detail::load_acquire<std::uint32_t, protocol::state_scope>(&st->poison);
    if (p == protocol::healthy) return h;
    if (p != protocol::poisoned) {  // the record is being written right now: report without reading it
      h.state = status::poisoned;
      h.message = "rank " + std::to_string(rank()) + ": a failure is being recorded";
      return h;
    }
    h.failure = state_.failure;
    h.state = failure_status(h.failure);
    h.message = describe_failure(rank(), h.failure);
    // The protocol records what it saw (often a timeout or a peer's relayed abort); a transport that saw the
    // cause itself (a verbs completion error, a broken connection) says so here, on the rank where it happened.
    if constexpr (requires(const Transport& t) { t.failure_message(); }) {
      const std::string cause = transport_.failure_message();
      if (!cause.empty()) h.message += " [this rank's transport: " + cause + "]";
    }
    // A flag that did not arrive: what this rank's side of the connection holds (ibverbs: queue pair counts and
    // PSNs), so that the ranks' messages together tell a write never sent from one sent and not placed.
    if constexpr (requires(const Transport& t) { t.queue_pair_report(); }) {
      if (h.failure.kind == static_cast<std::uint32_t>(protocol::failure_kind::timeout))
        h.message += " [queue pairs: " + transport_.queue_pair_report() + "]";
    }
    return h;
  }

  /// Message for the last status other than ok returned on this rank (empty if none).
  const std::string& last_error() const { return last_error_; }

  /// Collectives of this rank that did not complete: failed, timed out, refused, or called on a poisoned
  /// communicator (each such call also filled its output with the poison value: docs/api.md). Compare it before
  /// and after a step to know whether the step's outputs can be used.
  std::uint64_t failures() const { return protocol::failures(const_cast<protocol::rank_state*>(&state_)); }

  /// Every guarantee of the library's protocol (core/capabilities.hpp), over any transport.
  static constexpr rocenante::capabilities capabilities() { return rocenante::capabilities::protocol(); }

 protected:
  using session_t = protocol::session<protocol::host_team, typename Transport::handle_type>;

  /// Collective set-up: every rank of `boot` calls with the same options. Throws config_error for a bad value,
  /// config_mismatch_error when ranks disagree, bootstrap_error / transport_error when set-up fails.
  template <bootstrap::bootstrap B>
  executor_base(B& boot, const options& opts)
      : opts_(opts),
        layout_(agree_and_layout<algorithm::one_shot, algorithm::ring, algorithm::two_shot>(
            bootstrap::bootstrap_ref(boot), opts, Transport::name, false, Transport::handle_type::shared_staging)),
        transport_(bootstrap::bootstrap_ref(boot), layout_, opts) {
    protocol::init_state(state_, opts.first_sequence);
    policy_.timeout_ns = opts.timeout_ns;
    policy_.max_polls = opts.max_polls;
  }
  ~executor_base() = default;

  /// One collective of `parts` parts under `signature`: body(session) runs each part in order; the first part that
  /// fails stops the collective, poison() fills the whole output with the poison value and the recorded failure is
  /// reported. On a poisoned communicator nothing runs: the output is filled and the call counted (failures()).
  template <class Body, class Poison>
  status run_parts(std::uint32_t signature, std::uint32_t parts, Body&& body, Poison&& poison) {
    if (protocol::is_poisoned(&state_)) [[unlikely]] {
      poison();
      protocol::count_failure(&state_, nullptr);
      return refuse(status::poisoned, check_health().message);
    }
    protocol::host_team team;
    auto handle = transport_.handle();
    for (std::uint32_t p = 0; p < parts; ++p) {
      session_t s(team, handle, &state_, policy_, signature, p);
      if (!body(s)) [[unlikely]] {
        poison();  // the failure was counted by the part that poisoned the rank (protocol::poison)
        const health h = check_health();
        return refuse(h.state == status::ok ? status::poisoned : h.state, h.message);
      }
    }
    return status::ok;
  }

  status refuse(status s, std::string why) {
    last_error_ = why.rfind("rank ", 0) == 0 ? "rocenante " + std::move(why)
                                             : "rocenante rank " + std::to_string(rank()) + ": " + std::move(why);
    return s;
  }

  /// Bad input seen by this rank: its peers may already be inside this collective, so the rank takes its place
  /// in the sequence and tells them to abort (session::reject), then reports the reason. On a poisoned
  /// communicator there is no sequence to take part in: the call reports the recorded failure, as every call does.
  /// Either way the call is counted (failures()) and `poison` (a poison_list: what the caller judged safe to fill,
  /// docs/api.md) is filled.
  status reject_call(const std::string& why, status code = status::invalid_argument,
                     const algorithm::poison_list& poison = {}) {
    algorithm::fill_poison(poison, 0, 1);
    if (protocol::is_poisoned(&state_)) {
      protocol::count_failure(&state_, nullptr);
      return refuse(status::poisoned, check_health().message);
    }
    protocol::host_team team;
    auto handle = transport_.handle();
    session_t s(team, handle, &state_, policy_, 0, 0);
    if (s.enter()) {
      protocol::failure_record rec{};
      rec.kind = static_cast<std::uint32_t>(protocol::failure_kind::rejected);
      rec.peer = rank();
      s.reject(rec);  // counted by protocol::poison
    }
    return refuse(code, why + "; peers were told to abort this collective and the communicator is now poisoned");
  }

  /// Why a call with these pointers and `count` elements of `elem` bytes cannot run on this window (empty: it can).
  /// The null check first (a null pointer with count 0 reports null), then capacity_refusal.
  std::string check_common(const void* in, const void* out, std::uint64_t count, std::uint64_t elem) const {
    if (in == nullptr || out == nullptr) return "input or output pointer is null";
    return capacity_refusal(count, elem, opts_.capacity_bytes);
  }

  /// What a refused call fills: all of `out` (`out_elems` elements) when refusal_fills; nothing otherwise.
  template <class T>
  algorithm::poison_list refused_poison(T* out, std::uint64_t count, std::uint64_t out_elems, std::uint64_t elem) const {
    algorithm::poison_list l{};
    if (refusal_fills(out, count, elem, opts_.capacity_bytes)) l.span[0] = algorithm::poison_of(out, out_elems);
    return l;
  }

  /// Whether [a, a + an) and [b, b + bn) share a byte.
  static bool overlaps(const void* a, std::uint64_t an, const void* b, std::uint64_t bn) {
    const auto* x = static_cast<const std::byte*>(a);
    const auto* y = static_cast<const std::byte*>(b);
    return x < y + bn && y < x + an;
  }

  options opts_;
  protocol::window_layout layout_;
  Transport transport_;
  protocol::rank_state state_{};
  protocol::wait_policy policy_{};
  std::string last_error_;
};

/// Bytes of one element of `t` on the host executor (0: no reduction for `t` here).
constexpr std::size_t element_bytes(dtype t) {
  return t == dtype::f32 ? 4 : (t == dtype::f16 || t == dtype::bf16) ? 2 : 0;
}

/// The run-time algorithm dispatch (enum -> instantiation) of every executor: f(A{}) for the tag A of `a` (one_shot,
/// two_shot, ring); an id no executor runs (the NVFP4 collectives' own) gets one_shot, as every executor's dispatch
/// did before it named more than two.
template <class F>
decltype(auto) with_algorithm(algorithm::algo a, F&& f) {
  switch (a) {
    case algorithm::algo::ring: return f(algorithm::ring{});
    case algorithm::algo::two_shot: return f(algorithm::two_shot{});
    default: return f(algorithm::one_shot{});
  }
}

/// Why a call of `count` elements of `t` with algorithm `a` would be refused by an executor whose window is laid out
/// as `window` (empty: it would run), judged only from values every rank shares (count, dtype, capacity, the
/// layout), never from pointers: every rank asking with the same arguments gets the same answer. The one body of
/// every communicator's refusal() (host and GPU executors; the selected communicators forward to it). `window`
/// null: a transport with no window of its own (nccl), whose limits are NCCL's: only the dtype and the collective's
/// algorithm are judged.
inline std::string call_refusal(std::size_t count, dtype t, algorithm::algo a, protocol::collective c,
                                const protocol::window_layout* window, const char* executor) {
  const std::size_t elem = element_bytes(t);
  if (elem == 0) return std::string("no reduction for dtype ") + to_string(t) + " on the " + executor;
  if (c == protocol::collective::all_gather && a != algorithm::algo::one_shot) return "all_gather runs one_shot only";
  if (window == nullptr) return {};
  return with_algorithm(a, [&](auto tag) { return shape_refusal<decltype(tag)>(count, elem, *window); });
}

/// The run-time dtype dispatch (enum -> instantiation) of every executor: f.template operator()<T>(nullptr) for the
/// element type T of `t` (float, __half, __nv_bfloat16); not_supported for a dtype with no sum reduction.
template <class F>
status dispatch_dtype(dtype t, F&& f) {
  switch (t) {
    case dtype::f32: return f.template operator()<float>(nullptr);
    case dtype::f16: return f.template operator()<__half>(nullptr);
    case dtype::bf16: return f.template operator()<__nv_bfloat16>(nullptr);
    default: return status::not_supported;
  }
}

template <transport::transport Transport>
class communicator : public executor_base<Transport> {
  using base = executor_base<Transport>;
  using base::layout_;
  using base::opts_;
  using base::overlaps;
  using base::reject_call;
  using typename base::session_t;

 public:
  using base::check_health;
  using base::rank;
  using base::size;

  /// Collective set-up: every rank of `boot` calls with the same options. Throws config_error for a bad value,
  /// config_mismatch_error when ranks disagree, bootstrap_error / transport_error when set-up fails.
  template <bootstrap::bootstrap B>
  communicator(B& boot, const options& opts) : base(boot, opts) {}

  /// out[i] = sum over ranks of in[i], for i < count. `in` may equal `out`; otherwise they must not overlap.
  /// Result identical in bytes on every rank. Algorithm: one_shot (default), two_shot or ring.
  template <algorithm::algorithm A = algorithm::one_shot, class T>
  status all_reduce(const T* in, T* out, std::size_t count, A = {}) {
    using R = reduce::sum<std::remove_cv_t<T>>;
    static_assert(reduce::check_reduction<R>());
    static_assert(algorithm::check_algorithm<A>());
    static_assert(A::template supports<R>, "this algorithm cannot run this reduction");
    return run<A, R>(protocol::collective::all_reduce, in, out, count);
  }

  /// The same, with the algorithm chosen per call by algorithm::choose(count * sizeof(T), size()) (auto.hpp):
  /// a function of values every rank shares, so every rank runs the same algorithm.
  template <class T>
  status all_reduce(const T* in, T* out, std::size_t count, algorithm::automatic) {
    return with_algorithm(algorithm::choose(std::uint64_t{count} * sizeof(T), size()),
                          [&](auto a) { return all_reduce(in, out, count, a); });
  }

  /// out[q*count + i] = in_q[i] for every rank q: out holds size()*count elements.
  template <algorithm::algorithm A = algorithm::one_shot, class T>
  status all_gather(const T* in, T* out, std::size_t count, A = {}) {
    using R = reduce::sum<std::remove_cv_t<T>>;
    static_assert(A::supports_all_gather, "this algorithm has no all-gather; use one_shot");
    return run<A, R>(protocol::collective::all_gather, in, out, count);
  }

  /// Runtime dispatch (enum -> instantiation), for tools that pick the type and algorithm at run time.
  status all_reduce(const void* in, void* out, std::size_t count, dtype t, algorithm::algo a) {
    if (t != dtype::f32 && t != dtype::f16 && t != dtype::bf16)
      return reject_call(std::string("all_reduce has no reduction for dtype ") + to_string(t) + " in this build",
                         status::not_supported);
    return dispatch_dtype(t, [&]<class T>(T*) {
      return with_algorithm(a, [&](auto tag) { return all_reduce(static_cast<const T*>(in), static_cast<T*>(out), count, tag); });
    });
  }
  /// Runtime dispatch with `auto`: the algorithm from algorithm::choose(count * element bytes, size()).
  status all_reduce(const void* in, void* out, std::size_t count, dtype t, algorithm::automatic) {
    const std::uint64_t elem = t == dtype::f32 ? 4 : (t == dtype::f16 || t == dtype::bf16) ? 2 : 1;
    return all_reduce(in, out, count, t, algorithm::choose(std::uint64_t{count} * elem, size()));
  }
  status all_gather(const void* in, void* out, std::size_t count, dtype t) {
    if (t != dtype::f32 && t != dtype::f16 && t != dtype::bf16)
      return reject_call(std::string("all_gather has no instantiation for dtype ") + to_string(t) + " in this build",
                         status::not_supported);
    return dispatch_dtype(t, [&]<class T>(T*) {
      return all_gather<algorithm::one_shot>(static_cast<const T*>(in), static_cast<T*>(out), count);
    });
  }

  /// Why a call of `count` elements of `t` with algorithm `a` would be refused (empty: it would run), judged only
  /// from values every rank shares (count, dtype, capacity, this window's layout), never from pointers: every rank
  /// asking with the same arguments gets the same answer, so an engine can fall back on every rank together.
  /// Consumes no sequence number and never poisons.
  std::string refusal(std::size_t count, dtype t, algorithm::algo a,
                      protocol::collective c = protocol::collective::all_reduce) const {
    return call_refusal(count, t, a, c, &layout_, "host executor");
  }
  bool accepts(std::size_t count, dtype t, algorithm::algo a,
               protocol::collective c = protocol::collective::all_reduce) const {
    return refusal(count, t, a, c).empty();
  }

  /// Refuses this call for a reason the caller found (a binding's checks: device, layout, output size): as for any
  /// bad input, the rank takes its place in the sequence, tells its peers to abort, and the communicator is poisoned.
  status reject(const std::string& why, status code = status::invalid_argument) { return reject_call(why, code); }

 private:
  template <class A, class R>
  status run(protocol::collective c, const typename R::value_type* in, typename R::value_type* out, std::size_t count) {
    using T = typename R::value_type;
    const std::uint64_t bytes = std::uint64_t{count} * sizeof(T);
    // Null pointers first, then the shape (shape_refusal: call_refusal's body, what refusal() answers), then overlap.
    std::string why = in == nullptr || out == nullptr ? std::string("input or output pointer is null")
                                                      : shape_refusal<A>(count, sizeof(T), layout_);
    if (why.empty()) {
      const std::uint64_t out_elems = c == protocol::collective::all_gather ? count * size() : count;
      const bool in_place = c == protocol::collective::all_reduce && static_cast<const void*>(in) == out;
      if (!in_place && overlaps(in, bytes, out, out_elems * sizeof(T)))
        why = "input and output overlap without being the same buffer";
    }
    const std::uint64_t out_elems = c == protocol::collective::all_gather ? std::uint64_t{count} * size() : count;
    if (!why.empty()) return reject_call(why, status::invalid_argument, this->refused_poison(out, count, out_elems, sizeof(T)));

    const std::uint64_t packets = protocol::ceil_div(count, reduce::lanes<R>);
    if constexpr (std::is_same_v<A, algorithm::one_shot> || std::is_same_v<A, algorithm::two_shot>) {
      // An input in the symmetric area (and an output elsewhere): read in place (one_shot.hpp, "In-place path").
      const auto handle = this->transport_.handle();
      if (const std::uint64_t off = c == protocol::collective::all_reduce
                                        ? algorithm::one_shot::inplace_offset<R>(handle, in, out, count)
                                        : algorithm::one_shot::no_inplace;
          off != algorithm::one_shot::no_inplace) {
        const std::uint32_t parts =
            algorithm::part_count(packets, protocol::ceil_div(opts_.min_part_bytes, packet_bytes), opts_.max_parts);
        return this->run_parts(
            A::inplace_signature(static_cast<std::uint32_t>(R::dtype_id), static_cast<std::uint32_t>(R::op_id), count, off),
            parts, [&](session_t& s) { return A::template all_reduce_inplace<R>(s, out, count, parts, off); },
            [&] { algorithm::fill_poison(out, 0, out_elems, 0, 1); });
      }
    }
    const std::uint32_t signature = protocol::call_signature(c, static_cast<std::uint32_t>(A::id),
                                                             static_cast<std::uint32_t>(R::dtype_id),
                                                             static_cast<std::uint32_t>(R::op_id), count);
    // A call posted once needs all its parts staged before any waits; the host runs parts one after another.
    const bool whole = std::is_same_v<A, algorithm::one_shot> &&
                       algorithm::one_shot::posts_call<typename Transport::handle_type>(layout_, bytes);
    const std::uint32_t parts =
        whole ? 1u : algorithm::part_count(packets, protocol::ceil_div(opts_.min_part_bytes, packet_bytes), opts_.max_parts);
    return this->run_parts(signature, parts, [&](session_t& s) {
      return c == protocol::collective::all_reduce ? A::template all_reduce<R>(s, in, out, count, parts)
                                                   : run_all_gather<A, R>(s, in, out, count, parts);
    }, [&] { algorithm::fill_poison(out, 0, out_elems, 0, 1); });
  }

  template <class A, class R, class S>
  static bool run_all_gather(S& s, const typename R::value_type* in, typename R::value_type* out, std::size_t count,
                             std::uint32_t parts) {
    if constexpr (A::supports_all_gather)
      return A::template all_gather<R>(s, in, out, count, parts);
    else
      return false;
  }
};

}  // namespace rocenante::host

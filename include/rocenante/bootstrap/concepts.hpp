// bootstrap/concepts.hpp — how ranks exchange set-up data (addresses, keys, configuration) before they can
// talk through a transport. Set-up only: never on the launch path.
//
//   Requires of a bootstrap B:
//     b.rank(), b.size()                     this rank and the number of ranks
//     b.all_gather(send, recv, bytes)        every rank contributes `bytes` bytes; recv (size()*bytes bytes)
//                                            receives every rank's contribution in rank order. Collective:
//                                            every rank calls, in the same order, with the same `bytes`.
//     b.barrier()                            returns on a rank after every rank has entered it
//   Errors: throw rocenante::bootstrap_error (or a subclass); a bootstrap must not wait forever.
//
// Implementations: in_process (ranks as threads), callback (an engine's own process group, e.g. a
// torch.distributed group, through two callables), and MPI (bootstrap/mpi.hpp, when built with MPI).
#pragma once

#include <concepts>
#include <cstddef>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

namespace rocenante::bootstrap {

template <class B>
concept bootstrap = requires(B& b, const void* send, void* recv, std::size_t bytes) {
  { b.rank() } -> std::convertible_to<int>;
  { b.size() } -> std::convertible_to<int>;
  b.all_gather(send, recv, bytes);
  b.barrier();
};

/// Non-owning, type-erased reference to any bootstrap; what transports take, so that they are not templates
/// over the bootstrap type. The referenced object must outlive the set-up call.
class bootstrap_ref {
 public:
  template <bootstrap B>
    requires(!std::same_as<std::remove_cvref_t<B>, bootstrap_ref>)
  bootstrap_ref(B& b)  // NOLINT(google-explicit-constructor): a reference wrapper
      : obj_(&b),
        rank_([](void* o) { return static_cast<int>(static_cast<B*>(o)->rank()); }),
        size_([](void* o) { return static_cast<int>(static_cast<B*>(o)->size()); }),
        all_gather_([](void* o, const void* s, void* r, std::size_t n) { static_cast<B*>(o)->all_gather(s, r, n); }),
        barrier_([](void* o) { static_cast<B*>(o)->barrier(); }) {}

  int rank() const { return rank_(obj_); }
  int size() const { return size_(obj_); }
  void all_gather(const void* send, void* recv, std::size_t bytes) const { all_gather_(obj_, send, recv, bytes); }
  void barrier() const { barrier_(obj_); }

 private:
  void* obj_;
  int (*rank_)(void*);
  int (*size_)(void*);
  void (*all_gather_)(void*, const void*, void*, std::size_t);
  void (*barrier_)(void*);
};
static_assert(bootstrap<bootstrap_ref>);

/// A bootstrap made of callables: how an inference engine plugs in its own process group.
/// `all_gather(send, recv, bytes)` must have the semantics above; `barrier` defaults to a 1-byte all-gather.
class callback {
 public:
  using all_gather_fn = std::function<void(const void*, void*, std::size_t)>;
  using barrier_fn = std::function<void()>;

  callback(int rank, int size, all_gather_fn all_gather, barrier_fn barrier = {})
      : rank_(rank), size_(size), all_gather_(std::move(all_gather)), barrier_(std::move(barrier)) {}

  int rank() const { return rank_; }
  int size() const { return size_; }
  void all_gather(const void* send, void* recv, std::size_t bytes) { all_gather_(send, recv, bytes); }
  void barrier() {
    if (barrier_) return barrier_();
    char one = 0;
    std::vector<char> all(static_cast<std::size_t>(size_));
    all_gather_(&one, all.data(), 1);
  }

 private:
  int rank_, size_;
  all_gather_fn all_gather_;
  barrier_fn barrier_;
};
static_assert(bootstrap<callback>);

}  // namespace rocenante::bootstrap

// transport/loopback.hpp — ranks in one process whose windows are directly addressable: a rank stores its
// payload straight into its peers' windows and publishes the flag with a release store.
//
// The host object allocates this rank's window, exchanges its address with the peers through the bootstrap
// (the same pattern the RDMA transport uses for addresses and keys), and keeps every peer's window alive until
// it is destroyed itself: a slow rank that is still writing into a peer's window after that peer has torn down
// writes into memory that still exists.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "../bootstrap/concepts.hpp"
#include "../bootstrap/vote.hpp"
#include "../core/atomic.hpp"
#include "../core/error.hpp"
#include "../core/options.hpp"
#include "../protocol/flags.hpp"
#include "../protocol/layout.hpp"
#include "concepts.hpp"

namespace rocenante::transport {

/// Handle for windows that the calling code can store into directly (same address space).
struct direct_handle {
  static constexpr bool shared_staging = false;

  int rank_;
  int ranks_;
  memory_scope scope_;
  protocol::window_layout layout_;
  std::byte* windows_[max_ranks];

  ROCENANTE_HOST_DEVICE int rank() const { return rank_; }
  ROCENANTE_HOST_DEVICE int ranks() const { return ranks_; }
  ROCENANTE_HOST_DEVICE memory_scope scope() const { return scope_; }
  ROCENANTE_HOST_DEVICE const protocol::window_layout& layout() const { return layout_; }
  ROCENANTE_HOST_DEVICE std::byte* put_ptr(int peer, std::uint32_t slot, std::uint64_t off) {
    return windows_[peer] + layout_.data_offset(slot) + off;
  }
  ROCENANTE_HOST_DEVICE const std::byte* recv_ptr(std::uint32_t slot, std::uint64_t off) const {
    return windows_[rank_] + layout_.data_offset(slot) + off;
  }
  ROCENANTE_HOST_DEVICE std::uint64_t* local_flag(std::uint64_t index) {
    return reinterpret_cast<std::uint64_t*>(windows_[rank_]) + index;
  }
  /// LL area of `slot` (layout().ll_bytes): in peer's window / in this rank's window.
  ROCENANTE_HOST_DEVICE std::byte* ll_put_ptr(int peer, std::uint32_t slot, std::uint64_t off) {
    return windows_[peer] + layout_.ll_offset(slot) + off;
  }
  ROCENANTE_HOST_DEVICE std::byte* ll_recv_ptr(std::uint32_t slot, std::uint64_t off) {
    return windows_[rank_] + layout_.ll_offset(slot) + off;
  }
  /// Lamport area of `slot` (layout().lamport_bytes): in peer's window / in this rank's window.
  ROCENANTE_HOST_DEVICE std::byte* lamport_put_ptr(int peer, std::uint32_t slot, std::uint64_t off) {
    return windows_[peer] + layout_.lamport_offset(slot) + off;
  }
  ROCENANTE_HOST_DEVICE std::byte* lamport_recv_ptr(std::uint32_t slot, std::uint64_t off) {
    return windows_[rank_] + layout_.lamport_offset(slot) + off;
  }
  /// Symmetric input area (layout().input_bytes) of peer's window at `off`: read in place by the in-place path.
  ROCENANTE_HOST_DEVICE const std::byte* input_ptr(int peer, std::uint64_t off) const {
    return windows_[peer] + layout_.input_offset() + off;
  }
  /// Flag word `index` in peer's window (the LL and Lamport paths keep it current with a relaxed store; see one_shot.hpp).
  ROCENANTE_HOST_DEVICE std::uint64_t* peer_flag(int peer, std::uint64_t index) {
    return reinterpret_cast<std::uint64_t*>(windows_[peer]) + index;
  }
  /// The bytes are already in the peer's window (stored through put_ptr); publish the flag.
  ROCENANTE_HOST_DEVICE void signal(int peer, std::uint32_t, std::uint64_t, std::uint64_t, std::uint64_t index,
                                    std::uint64_t value) {
    detail::store_release(reinterpret_cast<std::uint64_t*>(windows_[peer]) + index, value, scope_);
  }
};
static_assert(transport_handle<direct_handle>);

/// Host memory for a window: 4 KiB aligned, flags set to flag_unset (and any Lamport area empty: all ones), payload
/// zeroed.
struct host_window {
  std::byte* base = nullptr;
  std::uint64_t bytes = 0;
  explicit host_window(const protocol::window_layout& layout) : bytes(layout.total_bytes()) {
    base = static_cast<std::byte*>(::operator new(bytes, std::align_val_t{4096}, std::nothrow));
    if (!base)
      throw transport_error("loopback: could not allocate a window of " + std::to_string(bytes) +
                            " bytes; lower capacity_bytes or max_parts");
    static_assert(protocol::flag_unset == ~std::uint64_t{0}, "unset flags are all ones");
    std::memset(base, 0, bytes);
    for (int k = 0; k < 2; ++k) std::memset(base + layout.ones_ranges(k).offset, 0xff, layout.ones_ranges(k).bytes);
  }
  host_window(const host_window&) = delete;
  host_window& operator=(const host_window&) = delete;
  ~host_window() { ::operator delete(base, std::align_val_t{4096}); }
};

/// Loopback over windows of type `Window` (host_window here; device_window in transport/cuda_window.hpp).
/// `Window(layout)` allocates and initialises one rank's window and exposes `base`.
template <class Window>
class basic_loopback {
 public:
  static constexpr const char* name = "loopback";
  using handle_type = direct_handle;
  using window_type = Window;

  /// Collective: every rank of `boot` calls, with the same layout. Throws transport_error on every rank when the
  /// ranks are not in one process or a rank could not allocate its window (a set-up vote: bootstrap/vote.hpp).
  basic_loopback(bootstrap::bootstrap_ref boot, const protocol::window_layout& layout, const options& = {}) {
    const int n = boot.size();
    if (n > max_ranks)
      throw transport_error("loopback: " + std::to_string(n) + " ranks exceed max_ranks (" + std::to_string(max_ranks) + ")");
    struct card {
      long pid;
      std::shared_ptr<Window>* window;
    };
    card mine{static_cast<long>(::getpid()), &self_};
    const std::vector<card> all = setup::vote(boot, "loopback: windows", mine, [&] { self_ = std::make_shared<Window>(layout); });
    for (int q = 0; q < n; ++q)
      if (all[q].pid != mine.pid)
        throw transport_error("loopback: rank " + std::to_string(q) + " runs in process " + std::to_string(all[q].pid) +
                              ", this rank in " + std::to_string(mine.pid) +
                              "; the loopback transport needs every rank in one process (use ibverbs or nccl)");
    peers_.resize(static_cast<std::size_t>(n));
    handle_ = {};
    handle_.rank_ = boot.rank();
    handle_.ranks_ = n;
    handle_.scope_ = memory_scope::system;
    handle_.layout_ = layout;
    for (int q = 0; q < n; ++q) {
      peers_[q] = *all[q].window;  // shared ownership: peers' windows outlive this rank's last write
      handle_.windows_[q] = peers_[q]->base;
    }
    boot.barrier();  // every rank has copied every shared_ptr before any `self_` may go away
  }

  handle_type handle() const { return handle_; }

  /// Flags written only by ranks on one GPU need device scope alone (far cheaper fences); the GPU communicator
  /// narrows the scope when every rank shares its device.
  void narrow_scope(memory_scope s) { handle_.scope_ = s; }

 private:
  std::shared_ptr<Window> self_;
  std::vector<std::shared_ptr<Window>> peers_;
  handle_type handle_{};
};

/// Ranks as threads of one process, windows in host memory: the host executor's transport.
using loopback = basic_loopback<host_window>;
static_assert(check_transport<loopback>());

}  // namespace rocenante::transport

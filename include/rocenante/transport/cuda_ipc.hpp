// transport/cuda_ipc.hpp — direct windows across processes of one node: every rank's window is GPU memory that
// every other rank of the node maps into its own address space, so the fused kernels store straight into peers'
// windows exactly as over cuda_loopback (same handle type, same kernels): one process per GPU on an NVLink server,
// or several processes on one GPU (under MPS they run concurrently; without it they time-slice and are correct but
// slow). Ranks that are threads of one process take the same path.
//
// Mechanism: CUDA virtual memory management. Each rank creates its window with cuMemCreate as a shareable
// allocation, exports it as a POSIX file descriptor (cuMemExportToShareableHandle), and sends the descriptor to
// every peer of the node over a Unix datagram socket (transport/fd_exchange.hpp: SCM_RIGHTS; abstract names derived
// from a nonce of rank 0 and the rank; every datagram carries the job's token and the kernel's credentials of its
// sender, so another job's or another user's process cannot hand a rank a window or take one; descriptors leave
// only after every rank voted its socket bound). A peer imports it (cuMemImportFromShareableHandle), maps it and
// grants its own GPU access. Why VMM and not cudaIpcGetMemHandle: an imported VMM allocation is reference-counted,
// so a peer that dies (SIGKILL) leaves its window mapped and backed in the survivors until they unmap it — a
// survivor's stores into a dead peer's window cannot fault, and the survivor reports the dead peer through the
// protocol's bounded wait. A legacy IPC handle gives no such guarantee once the exporting process is gone.
// File descriptors cannot travel in a bootstrap's bytes, hence the socket.
//
// Requirements (checked at set-up on every rank, each local step a set-up vote so every rank throws together,
// bootstrap/vote.hpp): every rank on
// one host (core/identity.hpp; ROCENANTE_HOST_ID overrides), one network namespace (abstract Unix sockets), GPUs
// that support POSIX-descriptor VMM handles, and peer access between distinct GPUs (NVLink or PCIe P2P).
// Driver entry points are resolved through the runtime (cudaGetDriverEntryPointByVersion): no -lcuda.
// Host-side set-up code; the handle (direct_handle) is what kernels see.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "../bootstrap/concepts.hpp"
#include "../bootstrap/vote.hpp"
#include "../core/clock.hpp"
#include "../core/cuda_check.hpp"
#include "../core/error.hpp"
#include "../core/identity.hpp"
#include "../core/options.hpp"
#include "../protocol/layout.hpp"
#include "concepts.hpp"
#include "fd_exchange.hpp"
#include "loopback.hpp"
#include "socket/net.hpp"

namespace rocenante::transport {

namespace ipc_detail {

/// The driver's VMM calls, resolved once through the runtime.
struct vmm_api {
  CUresult (*get_granularity)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*export_handle)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long) = nullptr;
  CUresult (*import_handle)(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType) = nullptr;
  CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*free_address)(CUdeviceptr, size_t) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*device_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  std::string why;  ///< empty when every entry point resolved

  static const vmm_api& get() {
    static const vmm_api api = [] {
      vmm_api a;
      auto load = [&a](const char* name, auto& fn) {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult q{};
        if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess || p == nullptr) {
          (void)cudaGetLastError();
          if (a.why.empty()) a.why = std::string("the CUDA driver has no ") + name;
          return;
        }
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
      };
      load("cuMemGetAllocationGranularity", a.get_granularity);
      load("cuMemCreate", a.create);
      load("cuMemRelease", a.release);
      load("cuMemExportToShareableHandle", a.export_handle);
      load("cuMemImportFromShareableHandle", a.import_handle);
      load("cuMemAddressReserve", a.reserve);
      load("cuMemAddressFree", a.free_address);
      load("cuMemMap", a.map);
      load("cuMemUnmap", a.unmap);
      load("cuMemSetAccess", a.set_access);
      load("cuDeviceGetAttribute", a.device_attribute);
      return a;
    }();
    return api;
  }
};

inline void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS)
    throw transport_error(std::string("cuda_ipc: ") + what + " failed (CUresult " + std::to_string(static_cast<int>(r)) + ")");
}

/// One mapping of a shareable allocation into this process: this rank's own window, or an imported peer's.
struct mapping {
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr ptr = 0;
  std::size_t size = 0;

  mapping() = default;
  mapping(const mapping&) = delete;
  mapping& operator=(const mapping&) = delete;
  ~mapping() { reset(); }

  /// Maps `h` (taking ownership) at a fresh address and lets `device` read and write it.
  void map(CUmemGenericAllocationHandle h, std::size_t bytes, std::size_t align, int device) {
    const vmm_api& a = vmm_api::get();
    handle = h;
    size = bytes;
    check(a.reserve(&ptr, bytes, align, 0, 0), "cuMemAddressReserve");
    check(a.map(ptr, bytes, 0, h, 0), "cuMemMap");
    CUmemAccessDesc d{};
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = device;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    check(a.set_access(ptr, bytes, &d, 1), "cuMemSetAccess");
  }
  void reset() {  // no throw: teardown must return
    const vmm_api& a = vmm_api::get();
    if (ptr && a.unmap) (void)a.unmap(ptr, size);
    if (ptr && a.free_address) (void)a.free_address(ptr, size);
    if (handle && a.release) (void)a.release(handle);
    ptr = 0;
    handle = 0;
  }
};

/// A rank's card: where it runs and the size of its window. Rank 0's nonce names the sockets, its token (never
/// part of a name) marks the job's datagrams.
struct card {
  std::uint64_t host, nonce, token;
  std::uint64_t window_bytes;
};

inline constexpr char socket_prefix[] = "rocenante-ipc";

}  // namespace ipc_detail

class cuda_ipc {
 public:
  static constexpr const char* name = "cuda_ipc";
  using handle_type = direct_handle;

  /// Collective: every rank calls, each with its GPU current. Throws transport_error on every rank alike when a
  /// rank runs on another host, a rank's GPU lacks VMM descriptor handles, or any import fails (naming the rank):
  /// each local step is a set-up vote (bootstrap/vote.hpp).
  cuda_ipc(bootstrap::bootstrap_ref boot, const protocol::window_layout& layout, const options& opts = {})
      : me_(boot.rank()), n_(boot.size()) {
    if (n_ > max_ranks)
      throw transport_error("cuda_ipc: " + std::to_string(n_) + " ranks exceed max_ranks (" + std::to_string(max_ranks) + ")");
    const std::uint64_t deadline =
        detail::now_ns() + (opts.timeout_ns != 0 ? opts.timeout_ns : 30'000'000'000ull);
    ipc_detail::card mine{};
    mine.host = identity::host();
    sock::fd fd_out;
    const std::vector<ipc_detail::card> all = setup::vote(boot, "cuda_ipc: window", mine, [&] {
      ROCENANTE_CUDA_CHECK(cudaGetDevice(&device_));
      mine.nonce = fdx::random_u64();
      mine.token = fdx::random_u64();
      fd_out = create_window(layout);
      mine.window_bytes = self_.size;
    });
    std::vector<setup::failure> elsewhere;
    for (int q = 0; q < n_; ++q)
      if (all[q].host != all[0].host)
        elsewhere.push_back({q, "runs on another host than rank 0; cuda_ipc maps windows between the processes of one "
                                "node (use ibverbs, socket or nccl across nodes)"});
    if (!elsewhere.empty()) setup::fail_together(setup::error_kind::transport, "cuda_ipc: one host", std::move(elsewhere));
    // Exchange descriptors and import every peer's window. The vote is also the barrier: once it returns, every rank
    // has mapped every window, before any rank's kernel may store into one.
    setup::vote(boot, "cuda_ipc: import windows", [&] {
      std::vector<int> fds = fdx::exchange(boot, "cuda_ipc", ipc_detail::socket_prefix, all[0].nonce, all[0].token,
                                           fd_out.get(), deadline);
      std::vector<sock::fd> owned;
      for (int f : fds) owned.emplace_back(f);  // closed on every path; import_window closes the ones it takes
      imported_ = std::make_unique<ipc_detail::mapping[]>(static_cast<std::size_t>(n_));
      for (int q = 0; q < n_; ++q)
        if (q != me_) import_window(q, std::move(owned[q]), all[q].window_bytes);
    });
    handle_ = {};
    handle_.rank_ = me_;
    handle_.ranks_ = n_;
    handle_.scope_ = memory_scope::system;
    handle_.layout_ = layout;
    for (int q = 0; q < n_; ++q)
      handle_.windows_[q] = reinterpret_cast<std::byte*>(q == me_ ? self_.ptr : imported_[q].ptr);
  }

  cuda_ipc(const cuda_ipc&) = delete;
  cuda_ipc& operator=(const cuda_ipc&) = delete;
  /// Unmaps the peers' windows and releases this rank's (peers that still map it keep it alive): returns at once,
  /// also with dead peers.
  ~cuda_ipc() = default;

  handle_type handle() const { return handle_; }
  /// Device scope when every rank's kernels run on this one GPU (the GPU communicator decides from the topology).
  void narrow_scope(memory_scope s) { handle_.scope_ = s; }

 private:
  /// This rank's window, mapped and initialised; returns the descriptor that exports it.
  sock::fd create_window(const protocol::window_layout& layout) {
    const ipc_detail::vmm_api& a = ipc_detail::vmm_api::get();
    if (!a.why.empty()) throw transport_error("cuda_ipc: " + a.why + " (CUDA 11.2 or later is needed)");
    int supported = 0;
    ipc_detail::check(a.device_attribute(&supported, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, device_),
                      "cuDeviceGetAttribute");
    if (!supported)
      throw transport_error("cuda_ipc: GPU " + std::to_string(device_) +
                            " cannot export memory as POSIX file descriptors (VMM); use nccl or ibverbs");
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device_;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    ipc_detail::check(a.get_granularity(&granularity_, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
                      "cuMemGetAllocationGranularity");
    const std::size_t bytes = (layout.total_bytes() + granularity_ - 1) / granularity_ * granularity_;
    CUmemGenericAllocationHandle h = 0;
    const CUresult r = a.create(&h, bytes, &prop, 0);
    if (r != CUDA_SUCCESS)
      throw transport_error("cuda_ipc: cuMemCreate of a " + std::to_string(bytes) + "-byte window failed (CUresult " +
                            std::to_string(static_cast<int>(r)) + "); lower capacity_bytes or max_parts");
    self_.map(h, bytes, granularity_, device_);
    auto* base = reinterpret_cast<std::byte*>(self_.ptr);
    ROCENANTE_CUDA_CHECK(cudaMemset(base, 0, bytes));
    for (int k = 0; k < 2; ++k)
      ROCENANTE_CUDA_CHECK(cudaMemset(base + layout.ones_ranges(k).offset, 0xff, layout.ones_ranges(k).bytes));
    ROCENANTE_CUDA_CHECK(cudaDeviceSynchronize());
    int fd = -1;
    ipc_detail::check(a.export_handle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), "cuMemExportToShareableHandle");
    return sock::fd(fd);
  }

  void import_window(int q, sock::fd fd, std::uint64_t bytes) {
    const ipc_detail::vmm_api& a = ipc_detail::vmm_api::get();
    CUmemGenericAllocationHandle h = 0;
    ipc_detail::check(a.import_handle(&h, reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd.get())),
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                      ("cuMemImportFromShareableHandle of rank " + std::to_string(q) + "'s window").c_str());
    fd.reset();
    imported_[q].map(h, bytes, granularity_, device_);
  }

  int me_ = 0, n_ = 0, device_ = 0;
  std::size_t granularity_ = 0;
  ipc_detail::mapping self_;
  std::unique_ptr<ipc_detail::mapping[]> imported_;  ///< [rank]; this rank's entry unused
  handle_type handle_{};
};
static_assert(check_transport<cuda_ipc>());

}  // namespace rocenante::transport

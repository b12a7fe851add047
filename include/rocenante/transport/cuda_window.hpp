// transport/cuda_window.hpp — memory for GPU kernels' transports: windows in GPU memory for the loopback transport
// (ranks in one process, several on one GPU or one per GPU with peer access), and host-mapped memory (cuda_mapping)
// for the proxy-mode transports (loopback_proxy, socket; ibverbs in transport/cuda_ibverbs.hpp). Host-side set-up
// code; needs the CUDA runtime.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "../core/cuda_check.hpp"
#include "../protocol/layout.hpp"
#include "loopback.hpp"
#include "loopback_proxy.hpp"
#include "socket.hpp"

namespace rocenante::transport {

/// One rank's window in device memory of the current device: flags set to flag_unset (all ones), payload
/// zeroed. Freed when the last rank holding it lets go (see basic_loopback).
struct device_window {
  std::byte* base = nullptr;
  std::uint64_t bytes = 0;
  int device = 0;
  explicit device_window(const protocol::window_layout& layout) : bytes(layout.total_bytes()) {
    ROCENANTE_CUDA_CHECK(cudaGetDevice(&device));
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess)
      throw transport_error("loopback (GPU): cudaMalloc of a " + std::to_string(bytes) + "-byte window failed (" +
                            cudaGetErrorString(e) + "); lower capacity_bytes or max_parts");
    base = static_cast<std::byte*>(p);
    ROCENANTE_CUDA_CHECK(cudaMemset(base, 0, bytes));
    for (int k = 0; k < 2; ++k)
      ROCENANTE_CUDA_CHECK(cudaMemset(base + layout.ones_ranges(k).offset, 0xff, layout.ones_ranges(k).bytes));
    ROCENANTE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  device_window(const device_window&) = delete;
  device_window& operator=(const device_window&) = delete;
  ~device_window() {
    if (base) cudaFree(base);  // no throw in a destructor; teardown must return
  }
};

/// Ranks as threads of one process, windows in GPU memory. One GPU or several with peer access enabled.
using cuda_loopback = basic_loopback<device_window>;
static_assert(check_transport<cuda_loopback>());

/// Proxy mode for GPU kernels (the DGX Spark path): windows, staging and post queues in pinned host-mapped
/// memory that the kernel reads and writes in place; producer cursors in device memory.
struct cuda_mapping {
  static constexpr const char* where = "host-mapped";
  static std::shared_ptr<std::byte> shared(std::uint64_t bytes) {
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess)
      throw transport_error("loopback_proxy (GPU): cudaHostAlloc of " + std::to_string(bytes) + " bytes failed (" +
                            cudaGetErrorString(e) + ")");
    std::memset(p, 0, bytes);
    return std::shared_ptr<std::byte>(static_cast<std::byte*>(p), [](std::byte* q) { cudaFreeHost(q); });
  }
  static std::shared_ptr<std::byte> producer_private(std::uint64_t bytes) {
    void* p = nullptr;
    ROCENANTE_CUDA_CHECK(cudaMalloc(&p, bytes));
    ROCENANTE_CUDA_CHECK(cudaMemset(p, 0, bytes));
    ROCENANTE_CUDA_CHECK(cudaDeviceSynchronize());
    return std::shared_ptr<std::byte>(static_cast<std::byte*>(p), [](std::byte* q) { cudaFree(q); });
  }
  static void fill(std::byte* p, int value, std::uint64_t bytes) { std::memset(p, value, bytes); }
};

using cuda_loopback_proxy = basic_loopback_proxy<cuda_mapping>;
static_assert(check_transport<cuda_loopback_proxy>());

/// The proxy path between processes without an RDMA device: GPU kernels stage into host-mapped memory and ring
/// the doorbell, the proxy thread sends each descriptor's bytes over TCP, the peer's receiver thread writes them
/// into its host-mapped window and then the flag its kernel waits on (transport/socket.hpp).
using cuda_socket = basic_socket<cuda_mapping>;
static_assert(check_transport<cuda_socket>());

}  // namespace rocenante::transport

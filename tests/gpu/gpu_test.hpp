// tests/gpu/gpu_test.hpp — what the GPU test programs share: the probe that decides whether they run or skip,
// CUDA_REQUIRE, device and pinned host buffers, and one in-process rank's stream and error report. Host code built
// by nvcc; gpu_main.hpp adds the doctest main that every in-process GPU test program uses.
#pragma once

#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstddef>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#define CUDA_REQUIRE(call)                                                                                    \
  do {                                                                                                        \
    const cudaError_t e_ = (call);                                                                            \
    REQUIRE_MESSAGE(e_ == cudaSuccess, #call << " failed: " << cudaGetErrorString(e_));                       \
  } while (0)

namespace gtest {

/// Why the GPU tests cannot run on this machine, or "" when a usable CUDA GPU is present. A skip is never a pass:
/// a main that gets a reason prints it and exits 77 (Meson: SKIP).
inline std::string no_gpu_reason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return std::string("no usable CUDA GPU on this machine (") + cudaGetErrorString(e) + ")";
  return count == 0 ? "no usable CUDA GPU on this machine (0 devices)" : "";
}

/// "NAME (sm_XY, N SMs), K device(s)": the line a GPU test program prints before its cases.
inline std::string gpu_line() {
  int count = 0;
  cudaGetDeviceCount(&count);
  cudaDeviceProp p{};
  cudaGetDeviceProperties(&p, 0);
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.multiProcessorCount) + " SMs), " + std::to_string(count) + " device(s)";
}

/// `count` T in device memory (Pinned = false) or pinned host memory (Pinned = true), with 64 bytes of slack past
/// the end (room for the misalignment cases). Pinned: async copies from pageable memory may serialise ranks.
template <class T, bool Pinned>
struct cuda_buffer {
  T* p = nullptr;
  explicit cuda_buffer(std::size_t count) {
    void* v = nullptr;
    if constexpr (Pinned) cudaMallocHost(&v, count * sizeof(T) + 64);
    else cudaMalloc(&v, count * sizeof(T) + 64);
    p = static_cast<T*>(v);
  }
  ~cuda_buffer() {
    if constexpr (Pinned) cudaFreeHost(p);
    else cudaFree(p);
  }
  cuda_buffer(cuda_buffer&& o) noexcept : p(std::exchange(o.p, nullptr)) {}
  cuda_buffer(const cuda_buffer&) = delete;
  cuda_buffer& operator=(const cuda_buffer&) = delete;
  T& operator[](std::size_t i) { return p[i]; }
  T* data() { return p; }
  /// The same memory as U (byte buffers holding bf16, NVFP4 codes and scales).
  template <class U>
  U* as() const { return reinterpret_cast<U*>(p); }
};
template <class T>
using dev_buf = cuda_buffer<T, false>;
template <class T>
using pinned = cuda_buffer<T, true>;

/// One rank's non-blocking stream, destroyed with it.
struct gpu_rank {
  cudaStream_t stream{};
  gpu_rank() { cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); }
  ~gpu_rank() { cudaStreamDestroy(stream); }
  gpu_rank(const gpu_rank&) = delete;
  gpu_rank& operator=(const gpu_rank&) = delete;
};

/// What went wrong on the rank threads of one in-process world, reported on the test's own thread.
struct rank_errors {
  std::mutex mu;
  std::vector<std::string> list;
  /// Waits for `stream` and records rank `rank`'s failure, if any: status `s` other than ok (with `why`), a CUDA
  /// error, or an unhealthy communicator. Call after the rank's last async copy, before its last barrier.
  template <class Comm, class Status>
  void finish(int rank, Comm& comm, cudaStream_t stream, Status s, const std::string& why) {
    const cudaError_t e = cudaStreamSynchronize(stream);
    const auto health = comm.check_health();
    if (s == Status::ok && e == cudaSuccess && health.ok()) return;
    std::lock_guard lock(mu);
    list.push_back("rank " + std::to_string(rank) + ": status " + std::string(to_string(s)) + " " + why + " cuda " +
                   cudaGetErrorString(e) + " health " + health.message);
  }
  void report() const {
    for (const std::string& e : list) FAIL_CHECK(e);
  }
};

}  // namespace gtest

// examples/00_quickstart.cu — the smallest complete program: 4 ranks as threads of one process all-reduce a
// vector with one_shot and with ring, and check the result. On a machine with a GPU the ranks run the fused GPU
// kernels (gpu::communicator, one stream per rank, ranks round-robin over the visible GPUs); without one, or in a
// build without nvcc (00_quickstart.cpp includes this file), the same collectives run on the CPU host executor.
//
//   build/examples/00_quickstart            (meson setup build -Dexamples=true && ninja -C build examples/00_quickstart)
//
// Prints PASS (exit 0) or FAIL (exit 1).
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <rocenante/rocenante.hpp>
#if defined(__CUDACC__)
#include <cuda_runtime.h>

#include <rocenante/gpu/communicator.hpp>
#endif

// ---- configuration ----------------------------------------------------------------------------------------
constexpr int         ranks = 4;      // in-process ranks (threads)
constexpr std::size_t count = 12345;  // elements per rank (not a multiple of the 16-byte packet on purpose)
// Rank r contributes r + 1 + (i % 7) at element i: small integers, so every sum is exact in float.
// ---------------------------------------------------------------------------------------------------------------

using namespace rocenante;

namespace {

float input(int rank, std::size_t i) { return float(rank + 1 + int(i % 7)); }
float expected(std::size_t i) { return float(ranks * (ranks + 1) / 2 + ranks * int(i % 7)); }

/// Compares one rank's output with the exact sum; returns the number of wrong elements.
std::size_t count_wrong(const std::vector<float>& out) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) wrong += out[i] != expected(i) ? 1 : 0;
  return wrong;
}

/// CPU host executor: every rank calls the same collectives in the same order; each call is blocking.
bool run_host() {
  std::size_t wrong = 0;
  bool ok = true;
  std::mutex mu;
  host::spawn_ranks(ranks, [&](bootstrap::in_process& boot) {
    options opts;
    opts.capacity_bytes = count * sizeof(float);               // largest input in bytes, the same on every rank
    host::communicator<transport::loopback> comm(boot, opts);  // collective set-up; throws rocenante::error
    std::vector<float> in(count), out(count);
    for (std::size_t i = 0; i < count; ++i) in[i] = input(boot.rank(), i);
    const status a = comm.all_reduce<algorithm::one_shot>(in.data(), out.data(), count);
    const std::size_t w1 = count_wrong(out);
    const status b = comm.all_reduce<algorithm::ring>(in.data(), out.data(), count);
    const std::size_t w2 = count_wrong(out);
    std::lock_guard<std::mutex> lock(mu);
    if (a != status::ok || b != status::ok) {
      std::printf("rank %d: %s\n", boot.rank(), comm.last_error().c_str());
      ok = false;
    }
    wrong += w1 + w2;
  });
  std::printf("host executor, %d ranks: one_shot and ring, %zu wrong elements\n", ranks, wrong);
  return ok && wrong == 0;
}

#if defined(__CUDACC__)
#define CHECK_CUDA(call)                                                                             \
  do {                                                                                               \
    const cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(e_)); \
  } while (0)

/// GPU executor: the collective is a kernel launched on the rank's stream; the call returns at once. Ranks that
/// share a GPU wait for each other inside their kernels, so no rank may call a device-synchronising CUDA API
/// (cudaMalloc, cudaMemcpy, ...) while peers' kernels are in flight: allocate first, then a barrier, then only
/// asynchronous work on the rank's own stream.
bool run_gpu(int gpus) {
  std::size_t wrong = 0;
  bool ok = true;
  std::mutex mu;
  host::spawn_ranks(ranks, [&](bootstrap::in_process& boot) {
    CHECK_CUDA(cudaSetDevice(boot.rank() % gpus));
    options opts = gpu::default_options();
    opts.capacity_bytes = count * sizeof(float);
    gpu::communicator<> comm(boot, opts);  // cuda_loopback: windows in GPU memory, peer access across GPUs
    cudaStream_t stream;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    float *in, *out, *host_buf;
    CHECK_CUDA(cudaMalloc(&in, count * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&out, 2 * count * sizeof(float)));
    CHECK_CUDA(cudaMallocHost(&host_buf, 2 * count * sizeof(float)));
    for (std::size_t i = 0; i < count; ++i) host_buf[i] = input(boot.rank(), i);
    CHECK_CUDA(cudaMemcpy(in, host_buf, count * sizeof(float), cudaMemcpyHostToDevice));
    boot.barrier();  // set-up done: from here on, only asynchronous calls on `stream`

    const status a = comm.all_reduce(in, out, count, stream, algorithm::one_shot{});
    const status b = comm.all_reduce(in, out + count, count, stream, algorithm::ring{});
    CHECK_CUDA(cudaMemcpyAsync(host_buf, out, 2 * count * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    const auto health = comm.check_health();  // a failure inside the kernel (timeout, peer abort) shows here
    std::vector<float> r1(host_buf, host_buf + count), r2(host_buf + count, host_buf + 2 * count);
    const std::size_t w = count_wrong(r1) + count_wrong(r2);
    boot.barrier();  // no rank frees memory a peer's kernel may still read
    cudaFreeHost(host_buf);
    cudaFree(out);
    cudaFree(in);
    cudaStreamDestroy(stream);
    std::lock_guard<std::mutex> lock(mu);
    if (a != status::ok || b != status::ok) {
      std::printf("rank %d: %s\n", boot.rank(), comm.last_error().c_str());
      ok = false;
    }
    if (!health.ok()) {
      std::printf("rank %d: %s\n", boot.rank(), health.message.c_str());
      ok = false;
    }
    wrong += w;
  });
  cudaDeviceProp p{};
  cudaGetDeviceProperties(&p, 0);
  std::printf("GPU executor, %d ranks on %d GPU(s) [%s]: one_shot and ring, %zu wrong elements\n", ranks,
              gpus < ranks ? gpus : ranks, p.name, wrong);
  return ok && wrong == 0;
}
#endif

}  // namespace

int main() {
  bool passed = false;
  try {
#if defined(__CUDACC__)
    // Ranks sharing a GPU wait for each other inside their kernels: load every kernel at start-up, so that no
    // lazily loaded first launch waits for a peer's spinning kernel (a value the user set is kept).
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    // The ranks' streams also share this process's hardware work queues (8 by default, fewer under MPS); two
    // ranks on one queue can block each other, so ask for CUDA's most (a value the user set is kept).
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    int gpus = 0;
    const cudaError_t e = cudaGetDeviceCount(&gpus);
    if (e == cudaSuccess && gpus > 0) {
      passed = run_gpu(gpus);
    } else {
      std::printf("no usable GPU (%s): running the CPU host executor\n",
                  e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
      passed = run_host();
    }
#else
    std::printf("built without nvcc: running the CPU host executor\n");
    passed = run_host();
#endif
  } catch (const std::exception& ex) {
    std::printf("error: %s\n", ex.what());
  }
  std::printf("%s\n", passed ? "PASS" : "FAIL");
  return passed ? 0 : 1;
}

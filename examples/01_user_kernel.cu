// examples/01_user_kernel.cu — your own __global__ kernel runs the all-reduce in-kernel: each CTA calls
// device::block_all_reduce (the CUB-style block collective in device/block_collectives.hpp) for one part, with
// your own epilogue functor fused into the store, then goes on with its own work (here: it reports its status).
//
//   build/examples/01_user_kernel
//
// What the caller owns when it bypasses gpu::communicator::all_reduce:
//   - launch one CTA per part, parts = comm.parts_for<T>(count), the same on every rank;
//   - every rank launches its kernel in the same order as its other collectives (stream order);
//   - count <= options::capacity_bytes / sizeof(T) (the communicator's argument checks are not run);
//   - co-residency: all ranks' CTAs must fit on the GPU(s) at once. The communicator checked this for its own
//     kernels (512 threads, 1 CTA per SM per launch bound); keep the same launch bounds, as here.
// Prints PASS (exit 0), FAIL (exit 1), or SKIP with the reason (exit 77) on a machine without a GPU.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <rocenante/gpu/communicator.hpp>
#include <rocenante/host/spawn.hpp>

// ---- configuration ----------------------------------------------------------------------------------------
constexpr int         ranks = 4;      // in-process ranks (threads), round-robin over the visible GPUs
constexpr std::size_t count = 50001;  // floats per rank
constexpr float       alpha = 0.5f;   // epilogue: out[i] = alpha * sum[i] + bias[i]
// Inputs are small integers and bias[i] = i % 3, so every result is exact in float and can be compared bitwise.
// ---------------------------------------------------------------------------------------------------------------

using namespace rocenante;

#define CHECK_CUDA(call)                                                                                  \
  do {                                                                                                    \
    const cudaError_t e_ = (call);                                                                        \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(e_)); \
  } while (0)

namespace {

/// The user's epilogue: called on every packet of fp32 sums (acc.v[0..lanes), elements first..first+lanes-1)
/// before the single rounding; lanes past `count` are computed and dropped, so it guards its own reads. It must be
/// trivially copyable (passed by value) and a pure function of data identical on every rank.
struct scale_bias {
  float alpha;
  const float* bias;
  std::uint64_t count;
  template <class Acc>
  __host__ __device__ void operator()(std::uint64_t first, Acc& acc) const {
    constexpr int lanes = sizeof(acc.v) / sizeof(acc.v[0]);
    for (int l = 0; l < lanes; ++l)
      if (first + l < count) acc.v[l] = alpha * acc.v[l] + bias[first + l];
  }
};

/// The user's kernel: CTA p runs part p of the collective; afterwards the CTA is free to do its own work.
template <class Algorithm, class Handle>
__global__ void __launch_bounds__(kernel::threads_per_block, 1)
    user_kernel(device::context<Handle> ctx, const float* in, float* out, std::uint64_t count, scale_bias epi,
                int* part_ok) {
  using all_reduce = device::block_all_reduce<Algorithm, reduce::sum<float>, Handle, scale_bias>;
  __shared__ typename all_reduce::temp_storage tmp;
  all_reduce coll(tmp, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
  // Every thread of the CTA calls run(); it returns false on every thread when the collective failed (a timeout
  // or a peer's abort): the rank is then poisoned and check_health() on the host says why.
  const bool ok = coll.run(ctx, in, out, count, blockIdx.x, gridDim.x, epi);
  if (threadIdx.x == 0) part_ok[blockIdx.x] = ok ? 1 : 0;
}

float input(int rank, std::size_t i) { return float((rank + 1) * int(1 + i % 5)); }
float expected(std::size_t i) {
  float sum = 0;
  for (int q = 0; q < ranks; ++q) sum += input(q, i);
  return alpha * sum + float(i % 3);
}

}  // namespace

int main() {
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);  // ranks sharing a GPU wait inside kernels: no lazy loading mid-run
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);  // and need a hardware work queue each (8 by default, fewer under MPS)
  int gpus = 0;
  const cudaError_t e = cudaGetDeviceCount(&gpus);
  if (e != cudaSuccess || gpus == 0) {
    std::printf("SKIP: no usable CUDA GPU (%s); this example needs one\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  std::mutex mu;
  std::size_t wrong = 0, failed_parts = 0;
  std::vector<std::string> errors;
  try {
    host::spawn_ranks(ranks, [&](bootstrap::in_process& boot) {
      const int r = boot.rank();
      CHECK_CUDA(cudaSetDevice(r % gpus));
      options opts = gpu::default_options();
      opts.capacity_bytes = count * sizeof(float);
      gpu::communicator<> comm(boot, opts);
      using handle = gpu::communicator<>::handle_type;
      const std::uint32_t parts = comm.parts_for<float>(count);  // the same on every rank

      cudaStream_t s;
      CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      float *in, *out, *bias, *host;
      int *part_ok, *ok_host;
      CHECK_CUDA(cudaMalloc(&in, count * sizeof(float)));
      CHECK_CUDA(cudaMalloc(&out, 2 * count * sizeof(float)));
      CHECK_CUDA(cudaMalloc(&bias, count * sizeof(float)));
      CHECK_CUDA(cudaMalloc(&part_ok, 2 * parts * sizeof(int)));
      CHECK_CUDA(cudaMallocHost(&host, 2 * count * sizeof(float)));
      CHECK_CUDA(cudaMallocHost(&ok_host, 2 * parts * sizeof(int)));
      for (std::size_t i = 0; i < count; ++i) host[i] = input(r, i);
      CHECK_CUDA(cudaMemcpy(in, host, count * sizeof(float), cudaMemcpyHostToDevice));
      for (std::size_t i = 0; i < count; ++i) host[i] = float(i % 3);
      CHECK_CUDA(cudaMemcpy(bias, host, count * sizeof(float), cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemset(part_ok, 0, 2 * parts * sizeof(int)));
      cudaFuncAttributes attr{};  // load both kernels now: a lazy first launch could wait for a peer's spinning CTA
      CHECK_CUDA(cudaFuncGetAttributes(&attr, user_kernel<algorithm::one_shot, handle>));
      CHECK_CUDA(cudaFuncGetAttributes(&attr, user_kernel<algorithm::ring, handle>));
      boot.barrier();  // set-up ends: only asynchronous work on `s` from here on

      const scale_bias epi{alpha, bias, count};
      const auto ctx = comm.device_context();
      user_kernel<algorithm::one_shot, handle><<<parts, kernel::threads_per_block, 0, s>>>(ctx, in, out, count, epi, part_ok);
      CHECK_CUDA(cudaGetLastError());
      // Ranks sharing a GPU: every rank submits collective s before any submits s + 1 (docs/api.md, harness
      // rule). Without this barrier a rank's ring kernel could sit in a shared hardware queue ahead of a peer's
      // one-shot kernel that its own one-shot waits for (the H200 showed it: rank 3 late at sequence 1, s7b-3b87ba1).
      boot.barrier();
      user_kernel<algorithm::ring, handle><<<parts, kernel::threads_per_block, 0, s>>>(ctx, in, out + count, count, epi,
                                                                                       part_ok + parts);
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cudaMemcpyAsync(host, out, 2 * count * sizeof(float), cudaMemcpyDeviceToHost, s));
      CHECK_CUDA(cudaMemcpyAsync(ok_host, part_ok, 2 * parts * sizeof(int), cudaMemcpyDeviceToHost, s));
      CHECK_CUDA(cudaStreamSynchronize(s));
      std::size_t w = 0, f = 0;
      for (std::size_t i = 0; i < count; ++i) w += (host[i] != expected(i)) + (host[count + i] != expected(i));
      for (std::uint32_t i = 0; i < 2 * parts; ++i) f += ok_host[i] ? 0 : 1;
      const auto health = comm.check_health();
      boot.barrier();  // nobody frees memory a peer's kernel may still read
      cudaFree(in);
      cudaFree(out);
      cudaFree(bias);
      cudaFree(part_ok);
      cudaFreeHost(host);
      cudaFreeHost(ok_host);
      cudaStreamDestroy(s);
      std::lock_guard<std::mutex> lock(mu);
      wrong += w;
      failed_parts += f;
      if (!health.ok()) errors.push_back(health.message);
      if (r == 0)
        std::printf("01_user_kernel: %d ranks on %d GPU(s), %zu floats, %u CTAs (parts) per rank, one_shot and ring, "
                    "epilogue out = %.2g * sum + bias\n", ranks, gpus < ranks ? gpus : ranks, count, parts, double(alpha));
    });
  } catch (const std::exception& ex) {
    errors.push_back(ex.what());
  }
  for (const auto& err : errors) std::printf("error: %s\n", err.c_str());
  std::printf("wrong elements (all ranks, both algorithms): %zu, failed parts: %zu\n", wrong, failed_parts);
  const bool passed = errors.empty() && wrong == 0 && failed_parts == 0;
  std::printf("%s\n", passed ? "PASS" : "FAIL");
  return passed ? 0 : 1;
}

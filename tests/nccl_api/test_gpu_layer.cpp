// tests/nccl_api/test_gpu_layer.cpp — librocenante_nccl.so itself (the GPU engine) through NCCL's C ABI, on a GPU:
// ranks are threads of this process, each with its own stream, calling the exported nccl* functions as an
// application does. NCCL is the recording stub (ROCENANTE_NCCL_LIBRARY, set by tests/nccl_api/meson.build), so a
// served call is shown not to reach NCCL, and a forwarded one is recorded; every served result is compared with a
// reference computed here (small integers: exact in fp32, fp16 and bf16, in any order of summation).
// Skips (exit 77, reason printed) without a GPU: a skip is not a pass.
//
// Run on the GPU machine (after tools/gpu/run.sh build, or ninja -C build-gpu tests/nccl_api/test_gpu_nccl_layer):
//   meson test -C build-gpu --suite gpu nccl_api_gpu_layer --print-errorlogs
#include "../gpu/gpu_main.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern "C" int rocenante_nccl_describe(ncclComm_t comm, char* buf, size_t len);

namespace {

std::string stub_log() {
  const char* path = std::getenv("ROCENANTE_NCCL_LIBRARY");
  void* h = path ? ::dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
  auto f = reinterpret_cast<const char* (*)()>(h ? ::dlsym(h, "stub_nccl_log") : nullptr);
  return f ? f() : std::string();
}
int lines_with(const std::string& a, const std::string& b = "") {
  int n = 0;
  std::istringstream in(stub_log());
  for (std::string l; std::getline(in, l);)
    if (l.find(a) != std::string::npos && l.find(b) != std::string::npos) ++n;
  return n;
}
std::string last_error() {
  const char* e = ncclGetLastError(nullptr);
  return e ? e : "";
}

float value(int rank, std::size_t i, int round = 0) { return static_cast<float>((rank + 1) * 2 + static_cast<int>((i + round) % 5)); }
float sum_of(int n, std::size_t i, int round = 0) {
  float s = 0;
  for (int q = 0; q < n; ++q) s += value(q, i, round);
  return s;
}
template <class T>
T make(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else if constexpr (std::is_same_v<T, __half>) return __float2half(v);
  else return __float2bfloat16(v);
}
template <class T>
float back(T v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else return __bfloat162float(v);
}
template <class T>
constexpr ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  else if constexpr (std::is_same_v<T, __half>) return ncclFloat16;
  else return ncclBfloat16;
}

/// `n` ranks on threads, rank r on device devices[r], each with a stream, running body(rank, comm, stream).
void run_ranks(int n, const std::vector<int>& devices, const std::function<std::string(int, ncclComm_t, cudaStream_t)>& body) {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::vector<std::string> failed(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      if (cudaSetDevice(devices[r]) != cudaSuccess) {
        failed[r] = "cudaSetDevice";
        return;
      }
      cudaStream_t s{};
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      ncclComm_t c = nullptr;
      if (ncclCommInitRank(&c, n, id, r) != ncclSuccess) {
        failed[r] = "init: " + last_error();
        cudaStreamDestroy(s);
        return;
      }
      if (r == 0) {
        char line[4096];
        rocenante_nccl_describe(c, line, sizeof line);
        std::printf("rank 0: %s\n", line);
      }
      failed[r] = body(r, c, s);
      if (ncclCommDestroy(c) != ncclSuccess && failed[r].empty()) failed[r] = "destroy: " + last_error();
      cudaStreamDestroy(s);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) CHECK_MESSAGE(failed[r].empty(), "rank ", r, ": ", failed[r]);
}

/// All-reduce (out of place and in place) and all-gather (out of place and NCCL's in-place form) of `count` T.
template <class T>
std::string served_round(int rank, int n, ncclComm_t c, cudaStream_t s, std::size_t count) {
  std::vector<T> in(count), out(count), gather(count * n);
  for (std::size_t i = 0; i < count; ++i) in[i] = make<T>(value(rank, i));
  T *din = nullptr, *dout = nullptr, *dg = nullptr;
  cudaMalloc(&din, count * sizeof(T));
  cudaMalloc(&dout, count * sizeof(T));
  cudaMalloc(&dg, count * n * sizeof(T));
  std::string bad;
  auto fail = [&](const std::string& w) {
    if (bad.empty()) bad = w + " (count " + std::to_string(count) + ", " + std::to_string(sizeof(T)) + "-byte type)";
  };
  cudaMemcpyAsync(din, in.data(), count * sizeof(T), cudaMemcpyHostToDevice, s);
  cudaMemsetAsync(dout, 0xff, count * sizeof(T), s);
  if (ncclAllReduce(din, dout, count, nccl_type<T>(), ncclSum, c, s) != ncclSuccess) fail("all_reduce: " + last_error());
  cudaMemcpyAsync(out.data(), dout, count * sizeof(T), cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  for (std::size_t i = 0; i < count && bad.empty(); ++i)
    if (back(out[i]) != sum_of(n, i)) fail("all_reduce element " + std::to_string(i) + " is " + std::to_string(back(out[i])));
  if (ncclAllReduce(din, din, count, nccl_type<T>(), ncclSum, c, s) != ncclSuccess) fail("in-place all_reduce: " + last_error());
  cudaMemcpyAsync(in.data(), din, count * sizeof(T), cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  if (std::memcmp(in.data(), out.data(), count * sizeof(T)) != 0) fail("in-place all_reduce differs");
  for (std::size_t i = 0; i < count; ++i) in[i] = make<T>(value(rank, i));
  cudaMemcpyAsync(din, in.data(), count * sizeof(T), cudaMemcpyHostToDevice, s);
  cudaMemsetAsync(dg, 0xff, count * n * sizeof(T), s);
  if (ncclAllGather(din, dg, count, nccl_type<T>(), c, s) != ncclSuccess) fail("all_gather: " + last_error());
  cudaMemcpyAsync(gather.data(), dg, count * n * sizeof(T), cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  for (int q = 0; q < n && bad.empty(); ++q)
    for (std::size_t i = 0; i < count; ++i)
      if (back(gather[q * count + i]) != value(q, i)) {
        fail("all_gather block " + std::to_string(q) + " element " + std::to_string(i));
        break;
      }
  // NCCL's in-place all-gather: the input is this rank's block of the output
  cudaMemsetAsync(dg, 0xff, count * n * sizeof(T), s);
  cudaMemcpyAsync(dg + rank * count, in.data(), count * sizeof(T), cudaMemcpyHostToDevice, s);
  if (ncclAllGather(dg + rank * count, dg, count, nccl_type<T>(), c, s) != ncclSuccess) fail("in-place all_gather: " + last_error());
  std::vector<T> ip(count * n);
  cudaMemcpyAsync(ip.data(), dg, count * n * sizeof(T), cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  if (std::memcmp(ip.data(), gather.data(), count * n * sizeof(T)) != 0) fail("in-place all_gather differs");
  ncclResult_t async = ncclInternalError;
  if (ncclCommGetAsyncError(c, &async) != ncclSuccess || async != ncclSuccess) fail("async error " + std::to_string(async));
  if (cudaGetLastError() != cudaSuccess) fail("a CUDA error");
  cudaFree(din);
  cudaFree(dout);
  cudaFree(dg);
  return bad;
}

std::vector<int> all_on(int device, int n) { return std::vector<int>(static_cast<std::size_t>(n), device); }

}  // namespace

TEST_SUITE("gpu.nccl_layer") {
  TEST_CASE("ranks sharing GPU 0: served all-reduce and all-gather (fp32, fp16, bf16; 8 B to 1 MiB) are exact and never reach NCCL") {
    for (int n : {2, 4}) {
      run_ranks(n, all_on(0, n), [&](int r, ncclComm_t c, cudaStream_t s) {
        for (std::size_t bytes : {std::size_t{8}, std::size_t{4096}, std::size_t{49152}, std::size_t{262144}, std::size_t{1} << 20}) {
          std::string p = served_round<float>(r, n, c, s, bytes / 4);
          if (p.empty()) p = served_round<__half>(r, n, c, s, bytes / 2);
          if (p.empty()) p = served_round<__nv_bfloat16>(r, n, c, s, bytes / 2);
          if (!p.empty()) return p;
        }
        return std::string();
      });
    }
    CHECK(lines_with("ncclAllReduce") == 0);
    CHECK(lines_with("ncclAllGather") == 0);
    CHECK(lines_with("ncclCommInitRank") == 0);
  }

  TEST_CASE("a CUDA graph captured from served calls replays with new inputs, exact every time") {
    const int n = 4;
    const std::size_t count = 12288;  // 48 KiB of fp32
    run_ranks(n, all_on(0, n), [&](int r, ncclComm_t c, cudaStream_t s) -> std::string {
      float *din = nullptr, *dout = nullptr, *dg = nullptr;
      cudaMalloc(&din, count * 4);
      cudaMalloc(&dout, count * 4);
      cudaMalloc(&dg, count * 4 * n);
      cudaGraph_t g{};
      cudaGraphExec_t ge{};
      if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return "begin capture";
      const ncclResult_t a = ncclAllReduce(din, dout, count, ncclFloat32, ncclSum, c, s);
      const ncclResult_t b = ncclAllGather(dout, dg, count, ncclFloat32, c, s);
      if (cudaStreamEndCapture(s, &g) != cudaSuccess || a != ncclSuccess || b != ncclSuccess) return "capture: " + last_error();
      if (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) return "instantiate";
      std::vector<float> in(count), out(count * n);
      for (int round = 0; round < 3; ++round) {
        for (std::size_t i = 0; i < count; ++i) in[i] = value(r, i, round);
        cudaMemcpyAsync(din, in.data(), count * 4, cudaMemcpyHostToDevice, s);
        if (cudaGraphLaunch(ge, s) != cudaSuccess) return "graph launch";
        cudaMemcpyAsync(out.data(), dg, count * 4 * n, cudaMemcpyDeviceToHost, s);
        if (cudaStreamSynchronize(s) != cudaSuccess) return "synchronize";
        for (int q = 0; q < n; ++q)
          for (std::size_t i = 0; i < count; ++i)
            if (out[q * count + i] != sum_of(n, i, round))
              return "replay " + std::to_string(round) + ": element " + std::to_string(q * count + i) + " is " +
                     std::to_string(out[q * count + i]);
      }
      cudaGraphExecDestroy(ge);
      cudaGraphDestroy(g);
      cudaFree(din);
      cudaFree(dout);
      cudaFree(dg);
      return {};
    });
  }

  TEST_CASE("a group of served calls from each rank runs them in order on their streams") {
    const int n = 2;
    run_ranks(n, all_on(0, n), [&](int r, ncclComm_t c, cudaStream_t s) -> std::string {
      const std::size_t count = 1000;
      std::vector<float> in(count), out(count * n);
      for (std::size_t i = 0; i < count; ++i) in[i] = value(r, i);
      float *a = nullptr, *b = nullptr, *g = nullptr;
      cudaMalloc(&a, count * 4);
      cudaMalloc(&b, count * 4);
      cudaMalloc(&g, count * 4 * n);
      cudaMemcpyAsync(a, in.data(), count * 4, cudaMemcpyHostToDevice, s);
      ncclGroupStart();
      ncclAllReduce(a, b, count, ncclFloat32, ncclSum, c, s);
      ncclAllGather(b, g, count, ncclFloat32, c, s);  // in order after the all-reduce: it gathers the sums
      if (ncclGroupEnd() != ncclSuccess) return "group: " + last_error();
      cudaMemcpyAsync(out.data(), g, count * 4 * n, cudaMemcpyDeviceToHost, s);
      cudaStreamSynchronize(s);
      for (std::size_t i = 0; i < count * n; ++i)
        if (out[i] != sum_of(n, i % count)) return "element " + std::to_string(i);
      cudaFree(a);
      cudaFree(b);
      cudaFree(g);
      return {};
    });
  }

  TEST_CASE("on ranks sharing a GPU a forwarded call fails at once with ncclInvalidUsage, naming why") {
    const int n = 2;
    run_ranks(n, all_on(0, n), [&](int, ncclComm_t c, cudaStream_t s) -> std::string {
      int* d = nullptr;
      cudaMalloc(&d, 64);
      const ncclResult_t r = ncclAllReduce(d, d, 16, ncclInt32, ncclSum, c, s);
      cudaFree(d);
      if (r != ncclInvalidUsage) return "result " + std::to_string(r);
      if (last_error().find("share one GPU") == std::string::npos) return "message: " + last_error();
      return {};
    });
  }

  TEST_CASE("one rank per GPU (where there are two): served calls are exact and a forwarded one reaches NCCL") {
    int devices = 0;
    cudaGetDeviceCount(&devices);
    if (devices < 2) {
      MESSAGE("one GPU here: this case needs two (not run)");
      return;
    }
    run_ranks(2, {0, 1}, [&](int r, ncclComm_t c, cudaStream_t s) -> std::string {
      std::string p = served_round<__nv_bfloat16>(r, 2, c, s, 3000);
      if (!p.empty()) return p;
      int* d = nullptr;
      cudaMalloc(&d, 64);
      const ncclResult_t res = ncclAllReduce(d, d, 16, ncclInt32, ncclSum, c, s);
      cudaFree(d);
      return res == ncclSuccess ? std::string() : "forwarded: " + last_error();
    });
    CHECK(lines_with("ncclAllReduce", "count=16 dtype=2") == 2);
  }
}

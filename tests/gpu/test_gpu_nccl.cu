// tests/gpu/test_gpu_nccl.cu — the NCCL transport (transport/nccl.hpp) through the same host API as the GPU
// executor, with a world of one on one GPU (NCCL puts at most one rank on a GPU), and the start-up selection log
// on that machine (host/select.hpp, GPU candidates: ibverbs, then nccl).
// Skips (exit 77, reason printed) without a GPU or without a loadable libnccl: a skip is not a pass.
// H200: libnccl.so.2 lives in the torch environment; put its folder on LD_LIBRARY_PATH or set ROCENANTE_NCCL_LIB.
// Exact run (repository root on the H200, .deps/include holding doctest/ as for tools/gpu/final-run.sh; build ~1 min,
// run < 30 s):
//   export PATH=/usr/local/cuda/bin:$PATH
//   export LD_LIBRARY_PATH=$(python3 -c 'import os, nvidia.nccl as m; print(os.path.join(list(m.__path__)[0], "lib"))'):${LD_LIBRARY_PATH:-}
//   meson setup build-h200-nccl -Dgpu_archs=90a -Dbenchmarks=false -Dexamples=false -Dextra_include=$PWD/.deps/include
//   ninja -C build-h200-nccl -j16 tests/gpu/test_gpu_nccl
//   ROCENANTE_DEBUG=INFO timeout 60 build-h200-nccl/tests/gpu/test_gpu_nccl 2>&1 | tee test_gpu_nccl.log
#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <rocenante/bootstrap/in_process.hpp>
#include <rocenante/host/select.hpp>
#include <rocenante/transport/nccl.hpp>

using namespace rocenante;

#define CHECK_CUDA(call) REQUIRE_MESSAGE((call) == cudaSuccess, #call)

namespace {

template <class T>
std::vector<T> seeded(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-4.0f, 4.0f);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(d(g));
  return v;
}

/// One rank: all_reduce (out of place and in place) and all_gather of `count` T, compared bit for bit with the
/// input (a world of one sums one contribution and gathers one block).
template <class T>
void round_trip(transport::nccl& t, std::size_t count, cudaStream_t s) {
  const std::vector<T> in = seeded<T>(count, static_cast<unsigned>(count));
  std::vector<T> out(count);
  T *din = nullptr, *dout = nullptr;
  CHECK_CUDA(cudaMalloc(&din, count * sizeof(T)));
  CHECK_CUDA(cudaMalloc(&dout, count * sizeof(T)));
  CHECK_CUDA(cudaMemcpy(din, in.data(), count * sizeof(T), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemset(dout, 0xff, count * sizeof(T)));
  REQUIRE(t.all_reduce(din, dout, count, s) == status::ok);
  CHECK_CUDA(cudaStreamSynchronize(s));
  CHECK_CUDA(cudaMemcpy(out.data(), dout, count * sizeof(T), cudaMemcpyDeviceToHost));
  CHECK(std::memcmp(out.data(), in.data(), count * sizeof(T)) == 0);
  REQUIRE(t.all_reduce(din, din, count, s) == status::ok);  // in place
  CHECK_CUDA(cudaMemset(dout, 0xff, count * sizeof(T)));
  REQUIRE(t.all_gather(din, dout, count, s) == status::ok);
  CHECK_CUDA(cudaStreamSynchronize(s));
  CHECK_CUDA(cudaMemcpy(out.data(), dout, count * sizeof(T), cudaMemcpyDeviceToHost));
  CHECK(std::memcmp(out.data(), in.data(), count * sizeof(T)) == 0);
  CHECK(t.check_health().ok());
  CHECK_CUDA(cudaFree(din));
  CHECK_CUDA(cudaFree(dout));
}

}  // namespace

TEST_SUITE("gpu.nccl") {
  TEST_CASE("the start-up selection on this machine is logged once: auto prefers cuda_ipc on one node, else names why") {
    std::vector<std::string> lines;
    std::mutex mu;
    set_log_sink([&](const std::string& l) {
      std::lock_guard lock(mu);
      lines.push_back(l);
      std::printf("%s\n", l.c_str());
    });
    bootstrap::in_process_world world(1);
    bootstrap::in_process boot(world, 0);
    host::select_config cfg;
    env::settings s = env::settings::read();
    s.debug = log_level::info;
    cfg.settings = s;
    cfg.transport = env::transport_choice::automatic;
    const host::selection sel = host::select_transport(boot, cfg, host::executor::gpu);
    set_log_sink({});
    REQUIRE(lines.size() == 1);
    // Every rank of this world runs on this node, so auto on the GPU executor puts cuda_ipc first; on a machine
    // that can export CUDA VMM memory it is chosen, otherwise the log names why and the next usable one serves.
    CHECK(sel.preferred == host::transport_kind::cuda_ipc);
    CHECK(lines[0].find("cuda_ipc") != std::string::npos);
    if (sel.chosen == host::transport_kind::cuda_ipc) {
      CHECK_FALSE(sel.fell_back);
    } else {
      CHECK((sel.chosen == host::transport_kind::ibverbs || sel.chosen == host::transport_kind::nccl));
      CHECK(sel.fell_back);
      CHECK(lines[0].find("cuda_ipc unusable: rank 0: ") != std::string::npos);
    }
  }

  TEST_CASE("world of one: all_reduce and all_gather through NCCL on the caller's stream return the input, bit for bit") {
    CHECK_CUDA(cudaSetDevice(0));
    bootstrap::in_process_world world(1);
    bootstrap::in_process boot(world, 0);
    transport::nccl t(boot);
    std::printf("NCCL %s, rank %d of %d\n", t.library().version_string().c_str(), t.rank(), t.size());
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{4099}, std::size_t{1} << 20}) {
      round_trip<float>(t, count, s);
      round_trip<__half>(t, count, s);
      round_trip<__nv_bfloat16>(t, count, s);
    }
    CHECK_CUDA(cudaStreamDestroy(s));
  }

  TEST_CASE("world of one: an all_reduce captured in a CUDA graph follows new input on every replay") {
    CHECK_CUDA(cudaSetDevice(0));
    bootstrap::in_process_world world(1);
    bootstrap::in_process boot(world, 0);
    transport::nccl t(boot);
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const std::size_t count = 24576;  // 48 KiB of bf16, the decode size
    __nv_bfloat16 *din = nullptr, *dout = nullptr;
    CHECK_CUDA(cudaMalloc(&din, count * sizeof(__nv_bfloat16)));
    CHECK_CUDA(cudaMalloc(&dout, count * sizeof(__nv_bfloat16)));
    REQUIRE(t.all_reduce(din, dout, count, s) == status::ok);  // NCCL's first call outside capture (its set-up)
    CHECK_CUDA(cudaStreamSynchronize(s));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    const status captured = t.all_reduce(din, dout, count, s);
    CHECK_CUDA(cudaStreamEndCapture(s, &g));
    REQUIRE(captured == status::ok);
    CHECK_CUDA(cudaGraphInstantiate(&ge, g, 0));
    std::vector<__nv_bfloat16> out(count);
    for (unsigned replay = 0; replay < 20; ++replay) {
      const auto in = seeded<__nv_bfloat16>(count, 1000 + replay);
      CHECK_CUDA(cudaMemcpyAsync(din, in.data(), count * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice, s));
      CHECK_CUDA(cudaGraphLaunch(ge, s));
      CHECK_CUDA(cudaMemcpyAsync(out.data(), dout, count * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost, s));
      CHECK_CUDA(cudaStreamSynchronize(s));
      CHECK(std::memcmp(out.data(), in.data(), count * sizeof(__nv_bfloat16)) == 0);
    }
    CHECK(t.check_health().ok());
    CHECK_CUDA(cudaGraphExecDestroy(ge));
    CHECK_CUDA(cudaGraphDestroy(g));
    CHECK_CUDA(cudaFree(din));
    CHECK_CUDA(cudaFree(dout));
    CHECK_CUDA(cudaStreamDestroy(s));
  }
}

int main(int argc, char** argv) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("SKIP: no usable CUDA GPU on this machine (%s); the gpu suite runs on the H200 (docs/results/)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  const auto& lib = transport::nccl_api::instance();
  if (!lib.ok) {
    std::printf("SKIP: %s\n", lib.why.c_str());
    return 77;
  }
  cudaDeviceProp p{};
  cudaGetDeviceProperties(&p, 0);
  std::printf("GPU: %s (sm_%d%d), %d device(s); NCCL %s\n", p.name, p.major, p.minor, count, lib.version_string().c_str());
  doctest::Context ctx(argc, argv);
  return ctx.run();
}

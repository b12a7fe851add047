// tests/gpu/test_gpu_nccl.cu — the NCCL transport (transport/nccl.hpp) through the same host API as the GPU
// executor, with a world of one on one GPU (NCCL puts at most one rank on a GPU), and the start-up selection log
// on that machine (gpu/candidates.hpp: cuda_ipc, ibverbs, socket, then nccl).
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
#include "gpu_test.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <rocenante/bootstrap/in_process.hpp>
#include <rocenante/gpu/candidates.hpp>
#include <rocenante/transport/nccl.hpp>

#include "../host/common.hpp"

using namespace rocenante;
using rtest::random_input;

namespace {

/// One rank: all_reduce (out of place and in place) and all_gather of `count` T, compared bit for bit with the
/// input (a world of one sums one contribution and gathers one block).
template <class T>
void round_trip(transport::nccl& t, std::size_t count, cudaStream_t s) {
  const std::vector<T> in = random_input<T>(count, static_cast<std::uint32_t>(count));
  std::vector<T> out(count);
  T *din = nullptr, *dout = nullptr;
  CUDA_REQUIRE(cudaMalloc(&din, count * sizeof(T)));
  CUDA_REQUIRE(cudaMalloc(&dout, count * sizeof(T)));
  CUDA_REQUIRE(cudaMemcpy(din, in.data(), count * sizeof(T), cudaMemcpyHostToDevice));
  CUDA_REQUIRE(cudaMemset(dout, 0xff, count * sizeof(T)));
  REQUIRE(t.all_reduce(din, dout, count, s) == status::ok);
  CUDA_REQUIRE(cudaStreamSynchronize(s));
  CUDA_REQUIRE(cudaMemcpy(out.data(), dout, count * sizeof(T), cudaMemcpyDeviceToHost));
  CHECK(std::memcmp(out.data(), in.data(), count * sizeof(T)) == 0);
  REQUIRE(t.all_reduce(din, din, count, s) == status::ok);  // in place
  CUDA_REQUIRE(cudaMemset(dout, 0xff, count * sizeof(T)));
  REQUIRE(t.all_gather(din, dout, count, s) == status::ok);
  CUDA_REQUIRE(cudaStreamSynchronize(s));
  CUDA_REQUIRE(cudaMemcpy(out.data(), dout, count * sizeof(T), cudaMemcpyDeviceToHost));
  CHECK(std::memcmp(out.data(), in.data(), count * sizeof(T)) == 0);
  CHECK(t.check_health().ok());
  CUDA_REQUIRE(cudaFree(din));
  CUDA_REQUIRE(cudaFree(dout));
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
    const host::selection sel = gpu::select_transport(boot, cfg);
    set_log_sink({});
    REQUIRE(lines.size() == 1);
    // Every rank of this world runs on this node, so auto on the GPU executor puts cuda_ipc first; on a machine
    // that can export CUDA VMM memory it is chosen, otherwise the log names why and the next usable one serves.
    CHECK(sel.preferred == host::transport_kind::cuda_ipc);
    CHECK(lines[0].find("cuda_ipc") != std::string::npos);
    if (sel.chosen == host::transport_kind::cuda_ipc) {
      CHECK_FALSE(sel.fell_back);
    } else {
      CHECK((sel.chosen == host::transport_kind::ibverbs || sel.chosen == host::transport_kind::socket ||
             sel.chosen == host::transport_kind::nccl));
      CHECK(sel.fell_back);
      CHECK(lines[0].find("cuda_ipc unusable: rank 0: ") != std::string::npos);
    }
  }

  TEST_CASE("world of one: all_reduce and all_gather through NCCL on the caller's stream return the input, bit for bit") {
    CUDA_REQUIRE(cudaSetDevice(0));
    bootstrap::in_process_world world(1);
    bootstrap::in_process boot(world, 0);
    transport::nccl t(boot);
    std::printf("NCCL %s, rank %d of %d\n", t.library().version_string().c_str(), t.rank(), t.size());
    cudaStream_t s;
    CUDA_REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{4099}, std::size_t{1} << 20}) {
      round_trip<float>(t, count, s);
      round_trip<__half>(t, count, s);
      round_trip<__nv_bfloat16>(t, count, s);
    }
    CUDA_REQUIRE(cudaStreamDestroy(s));
  }

  TEST_CASE("world of one: an all_reduce captured in a CUDA graph follows new input on every replay") {
    CUDA_REQUIRE(cudaSetDevice(0));
    bootstrap::in_process_world world(1);
    bootstrap::in_process boot(world, 0);
    transport::nccl t(boot);
    cudaStream_t s;
    CUDA_REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const std::size_t count = 24576;  // 48 KiB of bf16, the decode size
    __nv_bfloat16 *din = nullptr, *dout = nullptr;
    CUDA_REQUIRE(cudaMalloc(&din, count * sizeof(__nv_bfloat16)));
    CUDA_REQUIRE(cudaMalloc(&dout, count * sizeof(__nv_bfloat16)));
    REQUIRE(t.all_reduce(din, dout, count, s) == status::ok);  // NCCL's first call outside capture (its set-up)
    CUDA_REQUIRE(cudaStreamSynchronize(s));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CUDA_REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    const status captured = t.all_reduce(din, dout, count, s);
    CUDA_REQUIRE(cudaStreamEndCapture(s, &g));
    REQUIRE(captured == status::ok);
    CUDA_REQUIRE(cudaGraphInstantiate(&ge, g, 0));
    std::vector<__nv_bfloat16> out(count);
    for (unsigned replay = 0; replay < 20; ++replay) {
      const auto in = random_input<__nv_bfloat16>(count, 1000 + replay);
      CUDA_REQUIRE(cudaMemcpyAsync(din, in.data(), count * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice, s));
      CUDA_REQUIRE(cudaGraphLaunch(ge, s));
      CUDA_REQUIRE(cudaMemcpyAsync(out.data(), dout, count * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost, s));
      CUDA_REQUIRE(cudaStreamSynchronize(s));
      CHECK(std::memcmp(out.data(), in.data(), count * sizeof(__nv_bfloat16)) == 0);
    }
    CHECK(t.check_health().ok());
    CUDA_REQUIRE(cudaGraphExecDestroy(ge));
    CUDA_REQUIRE(cudaGraphDestroy(g));
    CUDA_REQUIRE(cudaFree(din));
    CUDA_REQUIRE(cudaFree(dout));
    CUDA_REQUIRE(cudaStreamDestroy(s));
  }
}

int main(int argc, char** argv) {
  if (const std::string why = gtest::no_gpu_reason(); !why.empty()) {
    std::printf("SKIP: %s; the gpu suite runs on the H200 (docs/results/)\n", why.c_str());
    return 77;
  }
  const auto& lib = transport::nccl_api::instance();
  if (!lib.ok) {
    std::printf("SKIP: %s\n", lib.why.c_str());
    return 77;
  }
  std::printf("GPU: %s; NCCL %s\n", gtest::gpu_line().c_str(), lib.version_string().c_str());
  doctest::Context ctx(argc, argv);
  return ctx.run();
}

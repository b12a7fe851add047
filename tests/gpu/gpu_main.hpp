// tests/gpu/gpu_main.hpp — doctest main for GPU test programs: exits 77 (Meson: SKIP) with a printed reason when
// no usable GPU is present. A skip is never a pass: the reason is printed and Meson counts it as skipped.
#pragma once

#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  // Ranks of one process share a CUDA context; gpu::communicator refuses lazy module loading there (see
  // docs/api.md). Must be set before the first CUDA call.
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("SKIP: no usable CUDA GPU on this machine (%s); the gpu suite runs on the H200 (docs/results/)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  cudaDeviceProp p{};
  cudaGetDeviceProperties(&p, 0);
  std::printf("GPU: %s (sm_%d%d, %d SMs), %d device(s)\n", p.name, p.major, p.minor, p.multiProcessorCount, count);
  doctest::Context ctx(argc, argv);
  return ctx.run();
}

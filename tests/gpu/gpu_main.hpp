// tests/gpu/gpu_main.hpp — doctest main for GPU test programs: exits 77 (Meson: SKIP) with a printed reason when
// no usable GPU is present. A skip is never a pass: the reason is printed and Meson counts it as skipped.
#pragma once

#define DOCTEST_CONFIG_IMPLEMENT
#include "gpu_test.hpp"

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  // Ranks of one process share a CUDA context; gpu::communicator refuses lazy module loading there, and more ranks
  // than the context has hardware work queues (8 by default, fewer under MPS; a case that forks a rank's
  // collectives onto a second stream needs two each): see docs/api.md. Both are read when CUDA starts, so they are
  // set before the first CUDA call (the queue count only where the caller did not choose one).
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  if (const std::string why = gtest::no_gpu_reason(); !why.empty()) {
    std::printf("SKIP: %s; the gpu suite runs on the H200 (docs/results/)\n", why.c_str());
    return 77;
  }
  std::printf("GPU: %s\n", gtest::gpu_line().c_str());
  doctest::Context ctx(argc, argv);
  return ctx.run();
}

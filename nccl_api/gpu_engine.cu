// nccl_api/gpu_engine.cu — the served collectives of librocenante_nccl.so: gpu::selected_communicator behind the
// layer's engine interface (nccl_api/engine.hpp), and the CUDA runtime calls of the layer's core. The one
// translation unit of the layer that nvcc compiles: it instantiates the kernels of every candidate transport for
// float, __half and __nv_bfloat16, one_shot and ring, and the all-gather.
//
// The candidates are the GPU executor's (gpu/candidates.hpp: cuda_ipc on one node, else ibverbs, else socket) less
// nccl: this layer is what an application loads as libnccl, so the library's nccl transport could load the layer
// itself; the layer forwards to the real NCCL instead (nccl_api/real_nccl.hpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include <rocenante/gpu/select.hpp>

#include "engine.hpp"

namespace rocenante::nccl_layer {
namespace {

/// gpu_candidates without nccl (the file comment says why).
struct layer_candidates : gpu::gpu_candidates {
  static std::vector<host::transport_kind> order(env::transport_choice c) {
    std::vector<host::transport_kind> o = gpu::gpu_candidates::order(c);
    o.erase(std::remove(o.begin(), o.end(), host::transport_kind::nccl), o.end());
    return o;
  }
};
static_assert(host::candidate_rules<layer_candidates>);

class gpu_engine final : public communicator_engine<gpu::selected_communicator> {
 public:
  gpu_engine(bootstrap::bootstrap_ref b, const options& o)
      : communicator_engine(b, o, host::select_config{}, std::type_identity<layer_candidates>{}) {}

  status all_reduce(const void* in, void* out, std::size_t count, dtype t, cudaStream_t s) override {
    return host::dispatch_dtype(t, [&]<class T>(T*) { return comm_.all_reduce(static_cast<const T*>(in), static_cast<T*>(out), count, s); });
  }
  status all_gather(const void* in, void* out, std::size_t count, dtype t, cudaStream_t s) override {
    return host::dispatch_dtype(t, [&]<class T>(T*) { return comm_.all_gather(static_cast<const T*>(in), static_cast<T*>(out), count, s); });
  }
};

void clear_error() { (void)cudaGetLastError(); }

}  // namespace

std::unique_ptr<engine> make_engine(bootstrap::bootstrap_ref b, const engine_settings& s) {
  options o = gpu::default_options();
  o.capacity_bytes = s.capacity_bytes;
  return std::make_unique<gpu_engine>(b, o);
}

namespace platform {

const char* name() { return "CUDA"; }

int current_device(std::string* why) {
  // Called on every served call (the device guard): cudaGetDevice alone, which fails without a driver or device.
  int d = -1;
  const cudaError_t e = cudaGetDevice(&d);
  if (e != cudaSuccess) {
    if (why) *why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    clear_error();
    return -1;
  }
  return d;
}

bool set_device(int device, std::string* why) {
  const cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) return true;
  if (why) *why = std::string("cudaSetDevice(") + std::to_string(device) + "): " + cudaGetErrorString(e);
  clear_error();
  return false;
}

gpu::device_identity identity(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    clear_error();
    // Unknown GPU: an identity no other rank can share (the ordinal and this process), so nothing is concluded
    // from it; the library communicator's own set-up reports the device's failure.
    unsigned char unknown[16] = {};
    gpu::device_identity d = gpu::make_identity(device, unknown);
    std::memcpy(d.uuid, &d.process, sizeof d.process);
    return d;
  }
  return gpu::make_identity(device, prop.uuid.bytes);
}

void* alloc(std::size_t bytes, std::string* why) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaSuccess) return p;
  if (why) *why = std::string("cudaMalloc: ") + cudaGetErrorString(e);
  clear_error();
  return nullptr;
}

void release(void* p) {
  if (p != nullptr && cudaFree(p) != cudaSuccess) clear_error();
}

bool copy_async(void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
  if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s) == cudaSuccess) return true;
  clear_error();
  return false;
}

int relax_capture() {
  cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
  if (cudaThreadExchangeStreamCaptureMode(&m) != cudaSuccess) {
    clear_error();
    return -1;
  }
  return static_cast<int>(m);
}

void restore_capture(int previous) {
  if (previous < 0) return;
  auto m = static_cast<cudaStreamCaptureMode>(previous);
  if (cudaThreadExchangeStreamCaptureMode(&m) != cudaSuccess) clear_error();
}

}  // namespace platform
}  // namespace rocenante::nccl_layer

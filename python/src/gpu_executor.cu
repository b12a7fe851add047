// python/src/gpu_executor.cu — gpu_executor.hpp's implementation: gpu::selected_communicator behind the extension's
// type-erased interface. The only translation unit of the package that nvcc compiles (it instantiates the kernels
// of every candidate transport for float, __half and __nv_bfloat16, one_shot, two_shot and ring); it includes no
// nanobind.
#include <cuda_runtime.h>

#include <memory>
#include <span>
#include <string>

#include <rocenante/gpu/select.hpp>

#include "gpu_executor.hpp"

namespace rocenante::python {
namespace {

/// Makes `device` current for a scope and restores the caller's device after it (torch keeps its own current
/// device per thread). Neither call is a stream operation: both are legal during CUDA graph capture.
class device_guard {
 public:
  explicit device_guard(int device) {
    if (cudaGetDevice(&prev_) == cudaSuccess && prev_ != device) changed_ = cudaSetDevice(device) == cudaSuccess;
    (void)cudaGetLastError();
  }
  ~device_guard() {
    if (changed_) (void)cudaSetDevice(prev_);
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int prev_ = -1;
  bool changed_ = false;
};

cudaStream_t as_stream(std::uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

class gpu_selected final : public gpu_executor {
 public:
  gpu_selected(bootstrap::bootstrap_ref b, const gpu_settings& s, const host::select_config& sc)
      : boot_(b), device_(resolve_device(s.device, b.rank())) {
    device_guard g(device_);
    options o = gpu::default_options();
    o.capacity_bytes = s.capacity_bytes;
    o.timeout_ns = s.timeout_ns;
    o.symmetric_bytes = s.symmetric_bytes;
    comm_ = std::make_unique<gpu::selected_communicator>(boot_, o, sc);
    decision_ = comm_->decision();
  }

  status all_reduce(const void* in, void* out, std::size_t count, dtype t, std::optional<algorithm::algo> a,
                    std::uintptr_t stream) override {
    if (host::element_bytes(t) == 0) return reject(std::string("all_reduce has no reduction for dtype ") + to_string(t), stream);
    device_guard g(device_);
    const cudaStream_t s = as_stream(stream);
    return note(host::dispatch_dtype(t, [&]<class T>(T*) {
      const T* i = static_cast<const T*>(in);
      T* o = static_cast<T*>(out);
      if (!a) return comm_->all_reduce(i, o, count, s);
      return host::with_algorithm(*a, [&](auto tag) { return comm_->all_reduce(i, o, count, s, tag); });
    }));
  }

  status all_gather(const void* in, void* out, std::size_t count, dtype t, std::uintptr_t stream) override {
    if (host::element_bytes(t) == 0) return reject(std::string("all_gather has no instantiation for dtype ") + to_string(t), stream);
    device_guard g(device_);
    const cudaStream_t s = as_stream(stream);
    return note(host::dispatch_dtype(t, [&]<class T>(T*) {
      return comm_->all_gather(static_cast<const T*>(in), static_cast<T*>(out), count, s);
    }));
  }

  std::string refusal(std::size_t count, dtype t, std::optional<algorithm::algo> a,
                      protocol::collective c) const override {
    return comm_->refusal(count, t, a, c);
  }

  status reject(const std::string& why, std::uintptr_t stream) override {
    device_guard g(device_);
    return note(comm_->reject(why, as_stream(stream)));
  }

  host::health check_health() const override { return comm_->check_health(); }
  std::string last_error() const override { return last_error_; }
  std::uint64_t failures() const override { return comm_->failures(); }
  std::string decision() const override { return decision_; }
  std::uint32_t first_call_sequence() const override { return comm_->first_call_sequence(); }
  std::string transport() const override { return host::to_string(comm_->transport()); }
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  int device() const override { return device_; }
  std::pair<std::uintptr_t, std::size_t> symmetric_input() override {
    const std::span<std::byte> a = comm_->symmetric_input();
    return {reinterpret_cast<std::uintptr_t>(a.data()), a.size()};
  }

  ~gpu_selected() override {
    device_guard g(device_);
    comm_.reset();
  }

 private:
  static int resolve_device(int want, int rank) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n == 0) e = cudaErrorNoDevice;
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw config_error("rocenante rank " + std::to_string(rank) + ": no usable GPU (" + cudaGetErrorString(e) + ")");
    }
    if (want < 0) {
      if (cudaGetDevice(&want) != cudaSuccess) want = 0;
      (void)cudaGetLastError();
    }
    if (want >= n)
      throw config_error("rocenante rank " + std::to_string(rank) + ": device " + std::to_string(want) + " does not exist (" +
                         std::to_string(n) + " visible)");
    return want;
  }

  status note(status st) {
    last_error_ = st == status::ok ? std::string() : comm_->last_error();
    return st;
  }

  bootstrap::bootstrap_ref boot_;  // what every candidate communicator was built over
  int device_;
  std::unique_ptr<gpu::selected_communicator> comm_;
  std::string decision_, last_error_;
};

}  // namespace

std::unique_ptr<gpu_executor> make_gpu_executor(bootstrap::bootstrap_ref b, const gpu_settings& s,
                                                const host::select_config& sc) {
  return std::make_unique<gpu_selected>(b, s, sc);
}

std::string gpu_unavailable() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("the CUDA runtime reports ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
  }
  return n == 0 ? "no CUDA device is visible to this process" : "";
}

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace rocenante::python

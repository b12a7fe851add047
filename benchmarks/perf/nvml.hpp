// benchmarks/perf/nvml.hpp — the few NVML calls rocenante-perf and the examples use (clocks, energy), loaded at
// run time from the driver's libnvidia-ml.so.1, so that nothing links against NVML and a machine without it (or
// without a GPU) still runs: every query then answers "unavailable".
//
// The CUDA toolkit on the build machines ships no nvml.h, so the handful of declarations are written out here.
// They are NVML's stable C ABI (nvml.h, "_v2" entry points since CUDA 9): an opaque device pointer, int return
// codes with 0 = NVML_SUCCESS, clock types NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2.
#pragma once

#include <dlfcn.h>

#include <cstdio>
#include <string>

namespace rocenante::perf {

class nvml {
 public:
  using device = void*;
  enum clock { graphics = 0, sm = 1, mem = 2 };

  nvml() {
    lib_ = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) {
      why_ = std::string("libnvidia-ml.so.1 not loadable: ") + ::dlerror();
      return;
    }
    init_ = sym<int (*)()>("nvmlInit_v2");
    shutdown_ = sym<int (*)()>("nvmlShutdown");
    by_bus_ = sym<int (*)(const char*, device*)>("nvmlDeviceGetHandleByPciBusId_v2");
    clock_ = sym<int (*)(device, int, unsigned*)>("nvmlDeviceGetClockInfo");
    max_clock_ = sym<int (*)(device, int, unsigned*)>("nvmlDeviceGetMaxClockInfo");
    energy_ = sym<int (*)(device, unsigned long long*)>("nvmlDeviceGetTotalEnergyConsumption");
    power_ = sym<int (*)(device, unsigned*)>("nvmlDeviceGetPowerUsage");
    if (!init_ || !shutdown_ || !by_bus_) {
      why_ = "libnvidia-ml.so.1 lacks nvmlInit_v2 / nvmlDeviceGetHandleByPciBusId_v2";
      return;
    }
    const int rc = init_();
    if (rc != 0) {
      why_ = "nvmlInit_v2 returned " + std::to_string(rc);
      return;
    }
    ok_ = true;
  }
  nvml(const nvml&) = delete;
  nvml& operator=(const nvml&) = delete;
  ~nvml() {
    if (ok_) shutdown_();
    if (lib_) ::dlclose(lib_);
  }

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }

  /// The device with this PCI bus id (cudaDeviceGetPCIBusId's format), or nullptr.
  device by_pci_bus_id(const std::string& bus) const {
    device d = nullptr;
    if (!ok_ || by_bus_(bus.c_str(), &d) != 0) return nullptr;
    return d;
  }
  /// Current clock in MHz, or -1.
  int clock_mhz(device d, clock c) const {
    unsigned v = 0;
    return ok_ && d && clock_ && clock_(d, c, &v) == 0 ? static_cast<int>(v) : -1;
  }
  int max_clock_mhz(device d, clock c) const {
    unsigned v = 0;
    return ok_ && d && max_clock_ && max_clock_(d, c, &v) == 0 ? static_cast<int>(v) : -1;
  }
  /// Energy consumed since the driver was loaded, in millijoules (Volta and later), or -1.
  long long energy_mj(device d) const {
    unsigned long long v = 0;
    return ok_ && d && energy_ && energy_(d, &v) == 0 ? static_cast<long long>(v) : -1;
  }
  /// Board power in milliwatts, or -1.
  long long power_mw(device d) const {
    unsigned v = 0;
    return ok_ && d && power_ && power_(d, &v) == 0 ? static_cast<long long>(v) : -1;
  }

 private:
  template <class F>
  F sym(const char* name) {
    return reinterpret_cast<F>(::dlsym(lib_, name));
  }
  void* lib_ = nullptr;
  bool ok_ = false;
  std::string why_;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*by_bus_)(const char*, device*) = nullptr;
  int (*clock_)(device, int, unsigned*) = nullptr;
  int (*max_clock_)(device, int, unsigned*) = nullptr;
  int (*energy_)(device, unsigned long long*) = nullptr;
  int (*power_)(device, unsigned*) = nullptr;
};

}  // namespace rocenante::perf

// benchmarks/perf/nccl_loader.hpp — NCCL for side-by-side runs, loaded at run time: nccl.h supplies the types
// and prototypes at build time, and libnccl.so.2 is dlopen'ed when first needed, so a binary built with NCCL's
// header runs (and says why NCCL was skipped) where the library is missing. Search order: $ROCENANTE_NCCL_LIB
// (a file path), then libnccl.so.2 on the loader's path (LD_LIBRARY_PATH; on the H200 machine NCCL lives in the
// torch environment's nvidia/nccl/lib). Include only where nccl.h is available (ROCENANTE_PERF_NCCL).
#pragma once

#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <string>

namespace rocenante::perf {

class nccl_loader {
 public:
  nccl_loader() {
    const char* env = std::getenv("ROCENANTE_NCCL_LIB");
    lib_ = ::dlopen(env && *env ? env : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) {
      why_ = std::string("libnccl.so.2 not loadable (") + ::dlerror() +
             "); put its folder on LD_LIBRARY_PATH or set ROCENANTE_NCCL_LIB";
      return;
    }
    bool all = true;
    auto get = [&](auto& fp, const char* name) {
      fp = reinterpret_cast<std::remove_reference_t<decltype(fp)>>(::dlsym(lib_, name));
      all = all && fp != nullptr;
    };
    get(get_version, "ncclGetVersion");
    get(comm_init_all, "ncclCommInitAll");
    get(comm_destroy, "ncclCommDestroy");
    get(all_reduce, "ncclAllReduce");
    get(all_gather, "ncclAllGather");
    get(error_string, "ncclGetErrorString");
    get(group_start, "ncclGroupStart");
    get(group_end, "ncclGroupEnd");
    if (!all) {
      why_ = "libnccl.so.2 lacks an expected symbol";
      return;
    }
    int v = 0;
    if (get_version(&v) != ncclSuccess) {
      why_ = "ncclGetVersion failed";
      return;
    }
    version_ = v;
    ok_ = true;
  }
  nccl_loader(const nccl_loader&) = delete;
  nccl_loader& operator=(const nccl_loader&) = delete;
  ~nccl_loader() {}  // the library stays loaded: communicators may outlive this object during teardown

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  /// NCCL_VERSION_CODE of the loaded library, e.g. 22809 for 2.28.9.
  int version() const { return version_; }
  std::string version_string() const {
    const int major = version_ / 10000, minor = (version_ % 10000) / 100, patch = version_ % 100;
    return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  }

  decltype(&::ncclGetVersion) get_version = nullptr;
  decltype(&::ncclCommInitAll) comm_init_all = nullptr;
  decltype(&::ncclCommDestroy) comm_destroy = nullptr;
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclAllGather) all_gather = nullptr;
  decltype(&::ncclGetErrorString) error_string = nullptr;
  decltype(&::ncclGroupStart) group_start = nullptr;
  decltype(&::ncclGroupEnd) group_end = nullptr;

 private:
  void* lib_ = nullptr;
  bool ok_ = false;
  int version_ = 0;
  std::string why_;
};

/// NCCL's data type for T.
template <class T>
constexpr ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  else if constexpr (std::is_same_v<T, __half>) return ncclFloat16;
  else return ncclBfloat16;
}

}  // namespace rocenante::perf

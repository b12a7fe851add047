// transport/nccl/api.hpp — libnccl loaded lazily (dlopen), with the few NCCL declarations the library needs
// written out here, so that neither nccl.h nor libnccl is needed to build, and a binary starts without NCCL and
// says "NCCL unavailable: ..." when asked for it. (The H200 machine has libnccl.so.2 in the torch environment and
// no nccl.h.) The declarations follow NCCL's stable C ABI (ncclUniqueId is 128 bytes; enums are C ints); where
// nccl.h is on the include path they are checked against it at compile time.
//
// Library search: $ROCENANTE_NCCL_LIB (a file path), else libnccl.so.2 on the loader's path (LD_LIBRARY_PATH; on
// the H200 machine: the torch environment's nvidia/nccl/lib). Same variable as rocenante-perf's loader
// (benchmarks/perf/nccl_loader.hpp), which keeps nccl.h's own types for its side-by-side rows.
// Host only: device code never includes this.
#pragma once

#include <cuda_runtime_api.h>  // cudaStream_t only (a pointer type); no CUDA runtime call is made here
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

struct ncclComm;  // NCCL's opaque communicator (nccl.h: typedef struct ncclComm* ncclComm_t)

namespace rocenante::transport::nccl_api {

using comm_t = ::ncclComm*;
using result_t = int;  ///< ncclResult_t
inline constexpr result_t success = 0;
inline constexpr result_t in_progress = 7;

/// ncclUniqueId: 128 opaque bytes made by one rank (ncclGetUniqueId) and spread to the others.
struct unique_id {
  char internal[128];
};

/// NCCL_CONFIG_UNDEF_INT: a config field left to NCCL's default.
inline constexpr int config_undef_int = -2147483647 - 1;

/// ncclConfig_t as NCCL 2.14 laid it out, the first release with ncclCommInitRankConfig. NCCL reads `size` bytes
/// of it and gives the fields later releases added their defaults (its parseCommConfig), so this prefix serves every
/// NCCL since 2.14; `version` tells NCCL which fields it carries.
struct config_v21400 {
  std::size_t size = sizeof(config_v21400);
  unsigned int magic = 0xcafebeef;  ///< NCCL's "initialised by NCCL_CONFIG_INITIALIZER" mark
  unsigned int version = 21400;     ///< NCCL_VERSION(2, 14, 0)
  int blocking = config_undef_int;  ///< 0: init and calls return ncclInProgress instead of blocking
  int cga_cluster_size = config_undef_int;
  int min_ctas = config_undef_int;
  int max_ctas = config_undef_int;
  const char* net_name = nullptr;
};

/// ncclDataType_t values used here.
enum data_type : int { float16 = 6, float32 = 7, bfloat16 = 9 };
/// ncclRedOp_t values used here.
enum red_op : int { sum = 0 };

/// The entry points, resolved with dlsym. `get_last_error` (NCCL >= 2.13) and `comm_init_rank_config` (NCCL >= 2.14)
/// are optional; the rest are required.
struct library {
  bool ok = false;
  std::string why;  ///< when !ok: "NCCL unavailable: ..."
  int version = 0;  ///< NCCL_VERSION_CODE, e.g. 22809 for 2.28.9
  void* handle = nullptr;

  result_t (*get_version)(int*) = nullptr;
  result_t (*get_unique_id)(unique_id*) = nullptr;
  result_t (*comm_init_rank)(comm_t*, int, unique_id, int) = nullptr;
  result_t (*comm_init_rank_config)(comm_t*, int, unique_id, int, config_v21400*) = nullptr;
  result_t (*comm_destroy)(comm_t) = nullptr;
  result_t (*comm_abort)(comm_t) = nullptr;
  result_t (*comm_get_async_error)(comm_t, result_t*) = nullptr;
  result_t (*all_reduce)(const void*, void*, std::size_t, int, int, comm_t, cudaStream_t) = nullptr;
  result_t (*all_gather)(const void*, void*, std::size_t, int, comm_t, cudaStream_t) = nullptr;
  const char* (*get_error_string)(result_t) = nullptr;
  const char* (*get_last_error)(comm_t) = nullptr;

  std::string version_string() const {
    return std::to_string(version / 10000) + "." + std::to_string((version % 10000) / 100) + "." +
           std::to_string(version % 100);
  }
  /// "ncclSystemError: <NCCL's last error>" for a failed call.
  std::string describe(result_t r, comm_t c = nullptr) const {
    std::string s = get_error_string ? get_error_string(r) : ("NCCL error " + std::to_string(r));
    if (get_last_error != nullptr) {
      const char* last = get_last_error(c);
      if (last != nullptr && *last) s += std::string(" (") + last + ")";
    }
    return s;
  }
};

/// Loads `path` now (no caching): what tests use to point at a missing file.
inline library load(const std::string& path) {
  library l;
  l.handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (l.handle == nullptr) {
    const char* e = ::dlerror();
    l.why = "NCCL unavailable: cannot load " + path + " (" + (e ? e : "dlopen failed") +
            "); put libnccl.so.2's folder on LD_LIBRARY_PATH (pip's nvidia-nccl-cu12/13 has one) or set "
            "ROCENANTE_NCCL_LIB to the file";
    return l;
  }
  std::string missing;
  auto sym = [&](auto& fn, const char* name, bool required = true) {
    void* p = ::dlsym(l.handle, name);
    if (p == nullptr && required) missing += (missing.empty() ? "" : ", ") + std::string(name);
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  sym(l.get_version, "ncclGetVersion");
  sym(l.get_unique_id, "ncclGetUniqueId");
  sym(l.comm_init_rank, "ncclCommInitRank");
  sym(l.comm_init_rank_config, "ncclCommInitRankConfig", false);
  sym(l.comm_destroy, "ncclCommDestroy");
  sym(l.comm_abort, "ncclCommAbort");
  sym(l.comm_get_async_error, "ncclCommGetAsyncError");
  sym(l.all_reduce, "ncclAllReduce");
  sym(l.all_gather, "ncclAllGather");
  sym(l.get_error_string, "ncclGetErrorString");
  sym(l.get_last_error, "ncclGetLastError", false);
  if (!missing.empty()) {
    l.why = "NCCL unavailable: " + path + " lacks " + missing + " (NCCL older than 2.x?)";
    return l;  // the library stays loaded: harmless, and dlclose of NCCL at exit has bitten others
  }
  if (l.get_version(&l.version) != success) {
    l.why = "NCCL unavailable: ncclGetVersion failed in " + path;
    return l;
  }
  l.ok = true;
  return l;
}

/// libnccl, loaded on first use and kept for the life of the process ($ROCENANTE_NCCL_LIB or libnccl.so.2).
inline const library& instance() {
  static const library l = [] {
    const char* env = std::getenv("ROCENANTE_NCCL_LIB");
    return load(env && *env ? env : "libnccl.so.2");
  }();
  return l;
}

}  // namespace rocenante::transport::nccl_api

#if __has_include(<nccl.h>) && !defined(ROCENANTE_NCCL_NO_HEADER_CHECK)
#include <nccl.h>
// The hand-written ABI above must match NCCL's own header wherever that header exists.
static_assert(sizeof(ncclUniqueId) == sizeof(rocenante::transport::nccl_api::unique_id), "ncclUniqueId size");
static_assert(ncclSuccess == rocenante::transport::nccl_api::success && ncclInProgress == rocenante::transport::nccl_api::in_progress);
static_assert(int{ncclFloat16} == int{rocenante::transport::nccl_api::float16} &&
              int{ncclFloat32} == int{rocenante::transport::nccl_api::float32} &&
              int{ncclBfloat16} == int{rocenante::transport::nccl_api::bfloat16} &&
              int{ncclSum} == int{rocenante::transport::nccl_api::sum}, "NCCL enum values");
static_assert(std::is_same_v<ncclComm_t, rocenante::transport::nccl_api::comm_t>);
static_assert(NCCL_CONFIG_UNDEF_INT == rocenante::transport::nccl_api::config_undef_int, "NCCL_CONFIG_UNDEF_INT");
static_assert(offsetof(ncclConfig_t, magic) == offsetof(rocenante::transport::nccl_api::config_v21400, magic) &&
              offsetof(ncclConfig_t, version) == offsetof(rocenante::transport::nccl_api::config_v21400, version) &&
              offsetof(ncclConfig_t, blocking) == offsetof(rocenante::transport::nccl_api::config_v21400, blocking) &&
              offsetof(ncclConfig_t, netName) == offsetof(rocenante::transport::nccl_api::config_v21400, net_name),
              "ncclConfig_t's leading fields");
#endif

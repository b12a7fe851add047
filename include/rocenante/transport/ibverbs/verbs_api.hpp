// transport/ibverbs/verbs_api.hpp — libibverbs loaded lazily (dlopen), so that a binary built with RDMA support
// starts on a machine without libibverbs or without RDMA devices and can say why RDMA is unavailable (the NCCL
// fallback decision reads that). Types come from the real rdma-core headers (libibverbs-dev); only the entry
// points are resolved at run time. Host only: device code never includes this (or anything under ibverbs/).
//
// ibv_post_send and ibv_poll_cq are inline in verbs.h (they call through the context's ops table), so they need
// no symbol. ibv_query_port and ibv_reg_mr are macros over inlines in verbs.h; this table calls the exported
// symbols behind them directly.
//
// Environment: ROCENANTE_IBVERBS_LIB names the library to open (default "libibverbs.so.1"); tests point it at a
// missing file to exercise the "unavailable" path on a machine that has the library.
#pragma once

#include <dlfcn.h>
#include <infiniband/verbs.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace rocenante::transport::ib {

/// The libibverbs entry points the transport uses, resolved with dlsym. `query_gid_ex` may be null (rdma-core
/// older than v32); everything else is required.
struct verbs_api {
  void* lib = nullptr;
  ibv_device** (*get_device_list)(int*) = nullptr;
  void (*free_device_list)(ibv_device**) = nullptr;
  const char* (*get_device_name)(ibv_device*) = nullptr;
  ibv_context* (*open_device)(ibv_device*) = nullptr;
  int (*close_device)(ibv_context*) = nullptr;
  int (*query_port_compat)(ibv_context*, std::uint8_t, _compat_ibv_port_attr*) = nullptr;
  int (*query_gid)(ibv_context*, std::uint8_t, int, ibv_gid*) = nullptr;
  int (*query_gid_ex)(ibv_context*, std::uint32_t, std::uint32_t, ibv_gid_entry*, std::uint32_t, std::size_t) = nullptr;
  ibv_pd* (*alloc_pd)(ibv_context*) = nullptr;
  int (*dealloc_pd)(ibv_pd*) = nullptr;
  ibv_mr* (*reg_mr)(ibv_pd*, void*, std::size_t, int) = nullptr;
  int (*dereg_mr)(ibv_mr*) = nullptr;
  ibv_cq* (*create_cq)(ibv_context*, int, void*, ibv_comp_channel*, int) = nullptr;
  int (*destroy_cq)(ibv_cq*) = nullptr;
  ibv_qp* (*create_qp)(ibv_pd*, ibv_qp_init_attr*) = nullptr;
  int (*destroy_qp)(ibv_qp*) = nullptr;
  int (*modify_qp)(ibv_qp*, ibv_qp_attr*, int) = nullptr;
  int (*query_qp)(ibv_qp*, ibv_qp_attr*, int, ibv_qp_init_attr*) = nullptr;
  const char* (*wc_status_str)(ibv_wc_status) = nullptr;

  /// What verbs.h's ibv_query_port inline does: the extended op when the provider has one, else the symbol.
  int query_port(ibv_context* c, std::uint8_t port, ibv_port_attr* a) const {
    verbs_context* vctx = verbs_get_ctx_op(c, query_port);
    if (vctx == nullptr) {
      std::memset(a, 0, sizeof *a);
      return query_port_compat(c, port, reinterpret_cast<_compat_ibv_port_attr*>(a));
    }
    return vctx->query_port(c, port, a, sizeof *a);
  }
};

/// Result of loading libibverbs once per process.
struct verbs_load {
  verbs_api api;
  bool ok = false;
  std::string why;  ///< when !ok: what is missing, in words
};

namespace detail {
inline verbs_load load_verbs() {
  verbs_load r;
  const char* env = std::getenv("ROCENANTE_IBVERBS_LIB");
  const std::string name = env && *env ? env : "libibverbs.so.1";
  r.api.lib = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (r.api.lib == nullptr) {
    const char* e = ::dlerror();
    r.why = "cannot load " + name + " (" + (e ? e : "dlopen failed") +
            "); install rdma-core's libibverbs (Debian/Ubuntu: apt-get install libibverbs1 ibverbs-providers)";
    return r;
  }
  bool missing = false;
  std::string which;
  auto sym = [&](auto& fn, const char* s, bool required = true) {
    void* p = ::dlsym(r.api.lib, s);
    if (p == nullptr && required) {
      missing = true;
      which += (which.empty() ? "" : ", ") + std::string(s);
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  sym(r.api.get_device_list, "ibv_get_device_list");
  sym(r.api.free_device_list, "ibv_free_device_list");
  sym(r.api.get_device_name, "ibv_get_device_name");
  sym(r.api.open_device, "ibv_open_device");
  sym(r.api.close_device, "ibv_close_device");
  sym(r.api.query_port_compat, "ibv_query_port");
  sym(r.api.query_gid, "ibv_query_gid");
  sym(r.api.query_gid_ex, "_ibv_query_gid_ex", false);
  sym(r.api.alloc_pd, "ibv_alloc_pd");
  sym(r.api.dealloc_pd, "ibv_dealloc_pd");
  sym(r.api.reg_mr, "ibv_reg_mr");
  sym(r.api.dereg_mr, "ibv_dereg_mr");
  sym(r.api.create_cq, "ibv_create_cq");
  sym(r.api.destroy_cq, "ibv_destroy_cq");
  sym(r.api.create_qp, "ibv_create_qp");
  sym(r.api.destroy_qp, "ibv_destroy_qp");
  sym(r.api.modify_qp, "ibv_modify_qp");
  sym(r.api.query_qp, "ibv_query_qp");
  sym(r.api.wc_status_str, "ibv_wc_status_str");
  if (missing) {
    r.why = name + " lacks " + which + " (libibverbs too old?)";
    ::dlclose(r.api.lib);
    r.api = verbs_api{};
    return r;
  }
  r.ok = true;
  return r;
}
}  // namespace detail

/// libibverbs, loaded on first use and kept for the life of the process. Thread-safe.
inline const verbs_load& verbs() {
  static const verbs_load loaded = detail::load_verbs();
  return loaded;
}

}  // namespace rocenante::transport::ib

// nccl_api/real_nccl.cpp — finding and loading the real libnccl (nccl_api/real_nccl.hpp says where from and why).
#include "real_nccl.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace rocenante::nccl_layer::real {
namespace {

/// What one candidate gave.
struct attempt {
  void* handle = nullptr;
  const void* base = nullptr;
  std::string why;  ///< empty when usable
};

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

/// dlopen's `what` and checks that it is an NCCL and not this layer.
attempt try_open(const std::string& what) {
  attempt a;
  void* h = ::dlopen(what.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = ::dlerror();
    a.why = "cannot load " + what + " (" + (e ? e : "dlopen failed") + ")";
    return a;
  }
  void* v = ::dlsym(h, "ncclGetVersion");
  if (v == nullptr) {
    a.why = what + " has no ncclGetVersion: not an NCCL library";
    ::dlclose(h);
    return a;
  }
  Dl_info info{};
  if (::dladdr(v, &info) == 0 || info.dli_fbase == nullptr) {
    a.why = what + ": dladdr cannot place its ncclGetVersion";
    ::dlclose(h);
    return a;
  }
  if (info.dli_fbase == self_base()) {
    // A handle to this very object (a copy, a link, or a name that resolves back here): drop the reference the
    // dlopen added; the object stays loaded by whoever loaded it first.
    ::dlclose(h);
    a.why = what + " is this layer itself (" + (info.dli_fname ? info.dli_fname : "?") + "), not the real NCCL";
    return a;
  }
  a.handle = h;
  a.base = info.dli_fbase;
  return a;
}

/// Paths of objects named libnccl.so* that this process has loaded already.
std::vector<std::string> loaded_libnccl() {
  std::vector<std::string> out;
  ::dl_iterate_phdr(
      [](dl_phdr_info* i, std::size_t, void* data) {
        if (i->dlpi_name == nullptr || *i->dlpi_name == '\0') return 0;
        const std::string path = i->dlpi_name;
        const std::string base = path.substr(path.find_last_of('/') + 1);
        if (base.rfind("libnccl.so", 0) == 0) static_cast<std::vector<std::string>*>(data)->push_back(path);
        return 0;
      },
      &out);
  return out;
}

/// libnccl.so.2 files in LD_LIBRARY_PATH's folders and the usual system folders (when the soname resolves to this
/// layer: the layer installed under libnccl's name, the real one further down the path).
std::vector<std::string> libnccl_files() {
  std::vector<std::string> dirs;
  if (const char* p = env("LD_LIBRARY_PATH")) {
    std::string s = p;
    for (std::size_t at = 0; at <= s.size();) {
      std::size_t end = s.find(':', at);
      if (end == std::string::npos) end = s.size();
      if (end > at) dirs.push_back(s.substr(at, end - at));
      at = end + 1;
    }
  }
  for (const char* d : {"/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                        "/usr/lib"})
    dirs.emplace_back(d);
  std::vector<std::string> out;
  for (const auto& d : dirs) out.push_back(d + "/libnccl.so.2");
  return out;
}

library load() {
  library l;
  std::vector<std::pair<std::string, std::string>> tried;  // (what, why)
  auto take = [&](const std::string& what, const std::string& source) {
    attempt a = try_open(what);
    if (!a.why.empty()) {
      tried.emplace_back(what, a.why);
      return false;
    }
    l.handle = a.handle;
    l.base = a.base;
    l.path = what;
    l.source = source;
    return true;
  };
  auto tried_text = [&] {
    std::string s;
    for (const auto& t : tried) s += (s.empty() ? "" : "; ") + t.second;
    return s;
  };
  bool found = false;
  const char* explicit_var = env("ROCENANTE_NCCL_LIBRARY") ? "ROCENANTE_NCCL_LIBRARY" : env("ROCENANTE_NCCL_LIB") ? "ROCENANTE_NCCL_LIB" : nullptr;
  if (explicit_var != nullptr) {
    const std::string file = env(explicit_var);
    found = take(file, explicit_var);
    if (!found) {
      l.why = "the real NCCL could not be loaded: " + std::string(explicit_var) + "=" + file + ": " + tried_text() +
              "; point " + explicit_var + " at the real libnccl.so.2 (e.g. python -c 'import nvidia.nccl, os; "
              "print(os.path.dirname(nvidia.nccl.__file__))'/lib/libnccl.so.2)";
      return l;
    }
  }
  if (!found)
    for (const std::string& p : loaded_libnccl())
      if ((found = take(p, "already loaded in this process"))) break;
  if (!found) found = take("libnccl.so.2", "soname libnccl.so.2");
  if (!found)
    for (const std::string& p : libnccl_files())
      if ((found = take(p, "found on the library path"))) break;
  if (!found) found = take("libnccl.so", "soname libnccl.so");
  if (!found) {
    l.why = "the real NCCL could not be found (" + tried_text() +
            "): set ROCENANTE_NCCL_LIBRARY to the real libnccl.so.2 (pip's nvidia-nccl-cu12/cu13 has one in "
            "nvidia/nccl/lib)";
    return l;
  }
  using get_version_fn = int (*)(int*);
  auto gv = reinterpret_cast<get_version_fn>(::dlsym(l.handle, "ncclGetVersion"));
  if (gv == nullptr || gv(&l.version) != 0) {
    l.why = "the real NCCL at " + l.path + " did not answer ncclGetVersion";
    return l;
  }
  l.ok = true;
  return l;
}

}  // namespace

void* library::symbol(const char* name) const { return ok ? ::dlsym(handle, name) : nullptr; }

std::string library::version_text() const {
  // NCCL_VERSION(X, Y, Z): X * 10000 + Y * 100 + Z since 2.9 (X * 1000 + Y * 100 + Z before)
  const int v = version;
  if (v >= 10000) return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 100) + "." + std::to_string(v % 100);
}

const library& get() {
  static const library l = load();
  return l;
}

bool called_from_real(const void* code_address) {
  const library& l = get();
  if (!l.ok || code_address == nullptr) return false;
  Dl_info info{};
  return ::dladdr(code_address, &info) != 0 && info.dli_fbase == l.base;
}

const void* self_base() {
  static const void* base = [] {
    Dl_info info{};
    return ::dladdr(reinterpret_cast<const void*>(&self_base), &info) != 0 ? info.dli_fbase : nullptr;
  }();
  return base;
}

}  // namespace rocenante::nccl_layer::real

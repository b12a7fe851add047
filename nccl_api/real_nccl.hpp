// nccl_api/real_nccl.hpp — the real libnccl that the layer forwards to, loaded by explicit path and never this
// layer itself.
//
// Where it comes from, first that applies:
//   1. ROCENANTE_NCCL_LIBRARY (a file), else ROCENANTE_NCCL_LIB (the library's fallback transport's variable,
//      docs/environment.md): that file and nothing else; a file that is this layer is refused by name;
//   2. a libnccl.so* already loaded in this process that is not this layer (PyTorch loads its libnccl.so.2 as a
//      dependency; with LD_PRELOAD=librocenante_nccl.so its symbols lose to this layer's, but the library is there);
//   3. the soname libnccl.so.2 (then libnccl.so) on the loader's path, unless it resolves to this layer (this layer
//      installed under libnccl's name): then ROCENANTE_NCCL_LIBRARY must name the real one.
// "Is this layer" compares the object that defines the candidate's ncclGetVersion (dladdr) with the object that
// defines this layer's: a symlink, a copy under another name or a dlopen that resolves back here are all caught.
//
// Loaded once per process, on first use (ncclGetVersion, a communicator's set-up, a forwarded call), with
// RTLD_NOW | RTLD_LOCAL; never unloaded. Thread-safe (a function-local static). Host only.
#pragma once

#include <cstdint>
#include <string>

namespace rocenante::nccl_layer::real {

struct library {
  bool ok = false;
  std::string why;     ///< when !ok: what was tried and why it failed, with what to do
  std::string path;    ///< the file loaded
  std::string source;  ///< how it was found: "ROCENANTE_NCCL_LIBRARY", "already loaded", "soname libnccl.so.2", ...
  void* handle = nullptr;
  const void* base = nullptr;  ///< its load address (dladdr's dli_fbase): tells calls from inside it apart
  int version = 0;             ///< NCCL_VERSION_CODE of the real library (ncclGetVersion)

  /// `name` in the real library (dlsym on its handle: its own definition, never this layer's); nullptr when the
  /// library did not load or lacks the symbol (an older NCCL).
  void* symbol(const char* name) const;
  /// "2.28.9".
  std::string version_text() const;
};

/// The real library, loaded on the first call.
const library& get();

/// Whether `code_address` (a return address) lies in the real library: the real libnccl calls some of its own
/// public functions through its PLT (ncclGetUniqueId, ncclCommGetAsyncError, ncclMemAlloc, ...), and with this
/// layer preloaded those calls arrive here; such a call is handed back to the real library unchanged.
bool called_from_real(const void* code_address);

/// The base address of this layer's own object (for messages and tests).
const void* self_base();

}  // namespace rocenante::nccl_layer::real

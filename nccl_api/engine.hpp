// nccl_api/engine.hpp — what the layer's core (nccl_api/layer.cpp: the NCCL ABI, ids, groups, forwarding) needs
// from the code that runs collectives and talks to CUDA, so that the core never includes a kernel and is compiled
// by the host compiler:
//
//   engine     one rank's served collectives: gpu::selected_communicator in librocenante_nccl.so
//              (nccl_api/gpu_engine.cu, the one translation unit nvcc compiles); the tests' build of the layer
//              links the host executor instead (tests/nccl_api/host_engine.cpp: host memory, no GPU), so that the
//              layer's logic runs in CI.
//   platform   the few CUDA runtime calls of the core (current device, device identity, scratch memory, a copy on
//              a stream, stream capture), with host stand-ins in the tests' build.
//
// Who calls: the layer, one thread per communicator call. An engine is built collectively (every rank of the
// bootstrap) and throws rocenante::error subclasses alike on every rank (its set-up steps are votes); its calls
// return a status, never throw, allocate nothing and may be captured into a CUDA graph (GPU engine).
#pragma once

#include <cuda_runtime_api.h>  // cudaStream_t (a pointer type); the core makes no CUDA call itself

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <rocenante/bootstrap/concepts.hpp>
#include <rocenante/core/status.hpp>
#include <rocenante/gpu/topology.hpp>  // gpu::device_identity (host code)
#include <rocenante/host/communicator.hpp>  // host::health
#include <rocenante/host/selection.hpp>     // host::to_string(transport_kind)
#include <rocenante/protocol/flags.hpp>
#include <rocenante/reduce/concepts.hpp>

namespace rocenante::nccl_layer {

class engine {
 public:
  virtual ~engine() = default;
  /// out = sum over ranks of in, `count` elements of `t`, on `s` (in == out allowed; no other overlap).
  virtual status all_reduce(const void* in, void* out, std::size_t count, dtype t, cudaStream_t s) = 0;
  /// out[q * count + i] = in_q[i]; `in` must not overlap `out` (the core stages an in-place call).
  virtual status all_gather(const void* in, void* out, std::size_t count, dtype t, cudaStream_t s) = 0;
  /// Why a call would be refused (empty: it runs), from values every rank shares; never poisons.
  virtual std::string refusal(std::size_t count, dtype t, protocol::collective c) const = 0;
  /// Health without waiting for anything.
  virtual host::health check_health() const = 0;
  virtual std::string last_error() const = 0;
  virtual std::uint64_t failures() const = 0;
  /// The start-up decision line (transport, why, algorithm), identical on every rank.
  virtual std::string decision() const = 0;
  virtual std::string transport() const = 0;
};

/// An engine over a selected communicator (gpu:: or host::selected_communicator, which answer these alike): what
/// it forwards unchanged. A derived engine adds the two calls, whose signatures differ between the executors.
template <class Comm>
class communicator_engine : public engine {
 public:
  template <class... Args>
  explicit communicator_engine(Args&&... args) : comm_(std::forward<Args>(args)...) {}
  std::string refusal(std::size_t count, dtype t, protocol::collective c) const override {
    return comm_.refusal(count, t, std::nullopt, c);
  }
  host::health check_health() const override { return comm_.check_health(); }
  std::string last_error() const override { return comm_.last_error(); }
  std::uint64_t failures() const override { return comm_.failures(); }
  std::string decision() const override { return comm_.decision(); }
  std::string transport() const override { return host::to_string(comm_.transport()); }

 protected:
  Comm comm_;
};

struct engine_settings {
  std::uint64_t capacity_bytes = 0;  ///< largest input of one rank (ROCENANTE_NCCL_MAX_BYTES)
};

/// Collective: every rank of `b`, with its device current. Throws rocenante::error subclasses (alike on every
/// rank for a set-up step that failed anywhere; bootstrap_error when the bootstrap failed).
std::unique_ptr<engine> make_engine(bootstrap::bootstrap_ref b, const engine_settings& s);

/// The CUDA runtime calls of the core (the tests' build: host stand-ins). None throws.
namespace platform {
/// "CUDA" or the tests' stand-in's name; for messages.
const char* name();
/// The calling thread's current device, or -1 with `why` (no driver, no device).
int current_device(std::string* why);
/// Makes `device` current on the calling thread; false with `why`.
bool set_device(int device, std::string* why);
/// Where `device` is: host, GPU UUID, ordinal, process (gpu/topology.hpp).
gpu::device_identity identity(int device);
/// `bytes` of device memory on the current device (nullptr with `why`), and its release.
void* alloc(std::size_t bytes, std::string* why);
void release(void* p);
/// Copies `bytes` from `src` to `dst` (device memory) in `s`'s order; capturable.
bool copy_async(void* dst, const void* src, std::size_t bytes, cudaStream_t s);
/// Switches the calling thread's stream-capture mode to relaxed and returns the previous mode (restore_capture
/// puts it back): set-up work (NCCL's init, allocations) issued while a stream of this thread captures a graph in
/// global or thread-local mode is otherwise refused by CUDA.
int relax_capture();
void restore_capture(int previous);
}  // namespace platform

}  // namespace rocenante::nccl_layer

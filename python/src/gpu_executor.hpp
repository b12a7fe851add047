// python/src/gpu_executor.hpp — the GPU executor as the extension sees it: a small type-erased interface over
// gpu::selected_communicator, so that the nanobind translation unit (host compiler) never includes a kernel and
// the one compiled by nvcc (gpu_executor.cu) never includes nanobind. Pointers are device pointers; the dtype is a
// run-time value (host::dispatch_dtype turns it into an instantiation, in gpu_executor.cu); a stream travels as an
// integer (a cudaStream_t's value: torch.cuda.Stream.cuda_stream, cupy's Stream.ptr; 0 is the legacy default stream).
//
// Who calls: one host thread per rank (the rank's calls in order). Set-up is collective and throws the library's
// rocenante::error subclasses; calls return a status and never throw, never synchronise the device and allocate
// nothing, so they may be captured into a CUDA graph.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <rocenante/bootstrap/concepts.hpp>
#include <rocenante/host/select.hpp>

namespace rocenante::python {

class gpu_executor {
 public:
  virtual ~gpu_executor() = default;

  /// out = sum over ranks of in (count elements of `t`), enqueued on `stream`; `a` empty: the communicator's choice.
  virtual status all_reduce(const void* in, void* out, std::size_t count, dtype t, std::optional<algorithm::algo> a,
                            std::uintptr_t stream) = 0;
  /// out[q * count + i] = in_q[i] for every rank q, enqueued on `stream`.
  virtual status all_gather(const void* in, void* out, std::size_t count, dtype t, std::uintptr_t stream) = 0;
  /// Why a call would be refused (empty: it would run), from rank-invariant values only; never poisons.
  virtual std::string refusal(std::size_t count, dtype t, std::optional<algorithm::algo> a,
                              protocol::collective c) const = 0;
  /// Refuses this call for a reason the binding found, in its place in the sequence on `stream`: the peers are told
  /// to abort it (over nccl they cannot be: NCCL has no such message) and this rank is poisoned.
  virtual status reject(const std::string& why, std::uintptr_t stream) = 0;

  virtual host::health check_health() const = 0;
  virtual std::string last_error() const = 0;
  virtual std::uint64_t failures() const = 0;
  /// The start-up decision (identical on every rank: the start-up log line) and the transport chosen.
  virtual std::string decision() const = 0;
  /// The sequence number of the first collective called after set-up (selected_base::first_call_sequence).
  virtual std::uint32_t first_call_sequence() const = 0;
  virtual std::string transport() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// The CUDA device every call of this rank runs on (made current for the call, then restored).
  virtual int device() const = 0;
  /// This rank's symmetric input area in device memory as (address, bytes); (0, 0) where the transport has none.
  virtual std::pair<std::uintptr_t, std::size_t> symmetric_input() = 0;
};

/// What a GPU communicator is built with (identical on every rank but `device`).
struct gpu_settings {
  std::uint64_t capacity_bytes;  // largest input of one rank to one collective
  std::uint64_t timeout_ns;      // bound on every wait for a peer
  int device;                    // CUDA ordinal; -1: the device current on the calling thread
  std::uint64_t symmetric_bytes = 0;  // options::symmetric_bytes: the symmetric input area (0: none)
};

/// Collective: builds gpu::selected_communicator over `b` on `s.device` (cuda_ipc when every rank is on one host,
/// else ibverbs, else nccl; select_config as on the host). Throws rocenante::error subclasses; a CUDA failure
/// before the set-up exchange (no driver, no such device) is a config_error naming the rank.
std::unique_ptr<gpu_executor> make_gpu_executor(bootstrap::bootstrap_ref b, const gpu_settings& s,
                                                const host::select_config& sc);

/// Empty when this process can use a GPU, else why not (the CUDA runtime's answer: no driver, no device). Never
/// throws, never aborts: `import rocenante` on a machine without a GPU asks it.
std::string gpu_unavailable();
/// CUDA devices visible to this process (0 when gpu_unavailable() is not empty).
int gpu_count();

}  // namespace rocenante::python

// core/status.hpp — the status returned by every launch-path call. Launch paths never throw (they run
// under CUDA graph capture and inside engines' hot loops); they return a [[nodiscard]] status instead.
#pragma once

#include <cstdint>

#include "../config.hpp"

namespace rocenante {

enum class [[nodiscard]] status : std::uint32_t {
  ok = 0,
  invalid_argument,  ///< bad input to this call (null pointer, zero count, count above capacity, ...)
  poisoned,          ///< the communicator failed earlier (timeout, mismatch); every later call fails fast
  timeout,           ///< a wait in this call ran out; the communicator is now poisoned
  mismatch,          ///< a peer entered a different collective (count, type or algorithm differ)
  not_supported,     ///< the combination is not available in this build or on this transport
  internal,          ///< a CUDA or system call failed
};

ROCENANTE_HOST_DEVICE constexpr const char* to_string(status s) noexcept {
  switch (s) {
    case status::ok: return "ok";
    case status::invalid_argument: return "invalid_argument";
    case status::poisoned: return "poisoned";
    case status::timeout: return "timeout";
    case status::mismatch: return "mismatch";
    case status::not_supported: return "not_supported";
    case status::internal: return "internal";
  }
  return "unknown";
}

}  // namespace rocenante

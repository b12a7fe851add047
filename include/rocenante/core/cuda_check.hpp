// core/cuda_check.hpp — checking CUDA runtime calls. Set-up paths throw rocenante::cuda_error with the call,
// the error string and what to do; launch paths turn errors into status::internal. Host only.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "error.hpp"

namespace rocenante {

class cuda_error : public error {
 public:
  cuda_error(cudaError_t code, const std::string& what) : error(what), code_(code) {}
  cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

namespace detail {
inline void cuda_throw(cudaError_t e, const char* call, const char* file, int line) {
  throw cuda_error(e, std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                          cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}
}  // namespace detail

}  // namespace rocenante

/// Check a CUDA runtime call on a set-up path; throws rocenante::cuda_error. An embedding engine may define its
/// own ROCENANTE_CUDA_CHECK before including the library.
#ifndef ROCENANTE_CUDA_CHECK
#define ROCENANTE_CUDA_CHECK(call)                                                              \
  do {                                                                                          \
    const cudaError_t rocenante_err_ = (call);                                                  \
    if (rocenante_err_ != cudaSuccess) ::rocenante::detail::cuda_throw(rocenante_err_, #call, __FILE__, __LINE__); \
  } while (0)
#endif

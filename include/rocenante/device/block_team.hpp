// device/block_team.hpp — the protocol's team (protocol/team.hpp) on a GPU: the threads of one CTA.
// Thread index and count are passed in (never read from threadIdx/blockDim here), so a user kernel can call
// the in-kernel collectives with its own numbering. Every thread of the CTA must construct the team and take
// part in every call: sync() and all() are CTA-wide barriers (__syncthreads).
#pragma once

#include "../config.hpp"
#include "../protocol/team.hpp"

namespace rocenante::device {

struct block_team {
  int thread_;
  int size_;
  ROCENANTE_DEVICE int thread() const { return thread_; }
  ROCENANTE_DEVICE int size() const { return size_; }
#if defined(__CUDACC__)
  __device__ void sync() const { __syncthreads(); }
  __device__ bool all(bool b) const { return __syncthreads_and(b ? 1 : 0) != 0; }
#else
  void sync() const {}
  bool all(bool b) const { return b; }
#endif
};
static_assert(protocol::team<block_team>);

}  // namespace rocenante::device

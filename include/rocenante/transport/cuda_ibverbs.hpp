// transport/cuda_ibverbs.hpp — the GPU executor's RDMA transport (the DGX Spark path): window, staging and post
// queues in pinned host-mapped memory that the kernels read and write in place and the NIC reads and writes
// through its registration; the CPU proxy thread posts each descriptor as RDMA WRITEs (transport/ibverbs/).
// Needs rdma-core's headers at build time (libibverbs is loaded at run time) and the CUDA runtime.
#pragma once

#include "cuda_window.hpp"
#include "ibverbs/transport.hpp"

namespace rocenante::transport {

using cuda_ibverbs = basic_ibverbs<cuda_mapping>;
static_assert(check_transport<cuda_ibverbs>());
static_assert(cuda_ibverbs::handle_type::shared_staging, "the NIC path stages through the proxy");

}  // namespace rocenante::transport

// rocenante.hpp — umbrella header: everything that needs neither a GPU nor an RDMA stack at build time: the host
// executor (host::communicator, host::spawn_ranks), the start-up selection across processes
// (host::selected_communicator: ibverbs where RDMA works, else the socket transport transport::socket), the
// bootstraps in_process and tcp (bootstrap::tcp::from_env: torchrun, srun, Open MPI or ROCENANTE_* variables), the
// loopback transports, the algorithms and reductions (NVFP4 included), options, errors and logging.
// Not included: <rocenante/gpu/select.hpp> (gpu::selected_communicator; CUDA sources, nvcc),
// <rocenante/bootstrap/mpi.hpp> (mpi.h), <rocenante/transport/nccl.hpp> (GPU; libnccl loaded at run time).
// host::selected_communicator compiles the ibverbs transport in when the rdma-core headers are installed
// (<infiniband/verbs.h>; libibverbs is loaded at run time) and works without them (socket and loopback only);
// see docs/operations.md. Environment variables: docs/environment.md.
#pragma once

#include "algorithm/auto.hpp"
#include "algorithm/one_shot.hpp"
#include "algorithm/one_shot_fp4.hpp"
#include "algorithm/ring.hpp"
#include "algorithm/two_shot.hpp"
#include "bootstrap/concepts.hpp"
#include "bootstrap/in_process.hpp"
#include "bootstrap/tcp.hpp"
#include "config.hpp"
#include "core/env.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/options.hpp"
#include "core/status.hpp"
#include "host/communicator.hpp"
#include "host/nvfp4.hpp"
#include "host/select.hpp"
#include "host/spawn.hpp"
#include "reduce/nvfp4.hpp"
#include "reduce/nvfp4_sum.hpp"
#include "reduce/sum.hpp"
#include "transport/loopback.hpp"
#include "transport/loopback_proxy.hpp"
#include "transport/socket.hpp"

// rocenante.hpp — umbrella header: everything that needs neither a GPU nor an RDMA stack.
// RDMA: include <rocenante/transport/ibverbs/ibverbs.hpp> (rdma-core headers at build time, libibverbs loaded at
// run time) and, to launch ranks with mpirun, <rocenante/bootstrap/mpi.hpp> (mpi.h). See docs/operations.md.
// Start-up transport selection (ibverbs or loopback, voted by every rank): <rocenante/host/select.hpp>; NCCL (GPU,
// libnccl loaded at run time): <rocenante/transport/nccl.hpp>. Environment variables: docs/environment.md.
#pragma once

#include "algorithm/auto.hpp"
#include "algorithm/one_shot.hpp"
#include "algorithm/one_shot_fp4.hpp"
#include "algorithm/ring.hpp"
#include "bootstrap/concepts.hpp"
#include "bootstrap/in_process.hpp"
#include "config.hpp"
#include "core/env.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/options.hpp"
#include "core/status.hpp"
#include "host/communicator.hpp"
#include "host/nvfp4.hpp"
#include "host/spawn.hpp"
#include "reduce/nvfp4.hpp"
#include "reduce/nvfp4_sum.hpp"
#include "reduce/sum.hpp"
#include "transport/loopback.hpp"
#include "transport/loopback_proxy.hpp"

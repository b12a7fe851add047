// transport/ibverbs/ibverbs.hpp — umbrella for the RDMA transport (host only; needs the rdma-core headers,
// libibverbs-dev, at build time and loads libibverbs at run time). `transport::ibverbs` plugs into
// host::communicator; `transport::ib::probe()` says whether RDMA is usable in this process, and why not.
#pragma once

#include "device.hpp"
#include "transport.hpp"
#include "verbs_api.hpp"

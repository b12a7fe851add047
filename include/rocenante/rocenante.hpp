// rocenante.hpp — umbrella header: everything that needs neither a GPU nor an RDMA stack.
#pragma once

#include "algorithm/one_shot.hpp"
#include "algorithm/ring.hpp"
#include "bootstrap/concepts.hpp"
#include "bootstrap/in_process.hpp"
#include "config.hpp"
#include "core/error.hpp"
#include "core/options.hpp"
#include "core/status.hpp"
#include "host/communicator.hpp"
#include "host/spawn.hpp"
#include "reduce/sum.hpp"
#include "transport/loopback.hpp"
#include "transport/loopback_proxy.hpp"

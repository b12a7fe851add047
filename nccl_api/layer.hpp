// nccl_api/layer.hpp — the layer's own communicator (what an ncclComm_t made by librocenante_nccl.so points to)
// and its environment. Private to nccl_api/layer.cpp and the layer's tests; applications see only nccl.h.
//
// One ncclComm holds, per rank:
//   - the bootstrap its set-up used (bootstrap::tcp from the ncclUniqueId, or an in-process world for
//     ncclCommInitAll and its splits), kept for the life of the communicator: the real NCCL communicator is
//     created later, through it, and ncclCommSplit runs over it;
//   - the library communicator (an engine: gpu::selected_communicator in the shipped build) that serves the calls
//     nccl_api/decision.hpp routes here, when every rank could build one (a set-up vote), with scratch memory of
//     ROCENANTE_NCCL_MAX_BYTES for in-place all-gathers;
//   - the real NCCL communicator, created on the first forwarded call (its own ncclUniqueId from the real
//     library, spread through the bootstrap), unless two ranks share a GPU (NCCL cannot put them on one);
//   - what NCCL calls made before the real communicator existed left for it: buffer registrations, PreMulSum
//     operators.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nccl.h>

#include <rocenante/bootstrap/in_process.hpp>
#include <rocenante/bootstrap/tcp.hpp>

#include "decision.hpp"
#include "engine.hpp"

namespace rocenante::nccl_layer {

inline constexpr std::uint64_t comm_magic = 0x4c43434e4543524full;  // "ROCENCCL", little-endian

/// The user's ncclConfig_t as given (its own size and version: the real NCCL reads it as it would have), with the
/// strings it points to copied.
struct config_copy {
  std::vector<unsigned char> bytes;  ///< empty: no config (NCCL's defaults)
  std::string net_name, comm_name;
  bool has_net_name = false, has_comm_name = false;
  bool blocking = true;
  /// The copy as an ncclConfig_t* for the real NCCL (nullptr when none); its string pointers point into this copy.
  ncclConfig_t* get();
};

/// A buffer registered with ncclCommRegister: kept until the real communicator exists, then registered there.
struct registration {
  std::uint64_t magic = 0x5245474953544552ull;  // "REGISTER"
  void* buff = nullptr;
  std::size_t size = 0;
  void* real_handle = nullptr;
};

/// An operator made by ncclRedOpCreatePreMulSum: created in the real NCCL when a forwarded call first uses it.
struct premul_op {
  ncclDataType_t datatype{};
  ncclScalarResidence_t residence{};
  unsigned char value[8] = {};  ///< ncclScalarHostImmediate: the scalar, copied at creation (as NCCL reads it)
  void* scalar = nullptr;       ///< ncclScalarDevice: the device pointer NCCL dereferences when the call runs
  bool created = false;
  ncclRedOp_t real_op{};
};

/// The bootstrap a communicator keeps.
struct boot_holder {
  std::unique_ptr<bootstrap::tcp> tcp;
  std::shared_ptr<bootstrap::in_process_world> world;
  std::unique_ptr<bootstrap::in_process> local;
  std::mutex mu;  ///< one set-up exchange at a time (real NCCL's creation, a split)
  bootstrap::bootstrap_ref ref() {
    if (tcp) return bootstrap::bootstrap_ref(*tcp);
    return bootstrap::bootstrap_ref(*local);
  }
};

enum class comm_state : int { initializing = 0, ready = 1, failed = 2 };

}  // namespace rocenante::nccl_layer

/// nccl.h's opaque communicator, as this layer makes it. A handle that does not start with comm_magic is not one
/// of these (a real NCCL communicator) and is passed to the real library unchanged.
struct ncclComm {
  std::uint64_t magic = rocenante::nccl_layer::comm_magic;
  std::atomic<int> state{static_cast<int>(rocenante::nccl_layer::comm_state::initializing)};
  ncclResult_t init_result = ncclInProgress;  ///< written before `state` leaves initializing (release)
  std::string init_error;

  int rank = -1, size = 0, device = -1;
  rocenante::nccl_layer::config_copy config;
  rocenante::nccl_layer::boot_holder boot;

  // served here
  std::unique_ptr<rocenante::nccl_layer::engine> eng;
  rocenante::nccl_layer::serve_policy policy;
  std::string served_why;  ///< why nothing is served (policy.serves false)
  void* scratch = nullptr;  ///< policy.max_bytes of device memory: the input of an in-place all-gather
  std::atomic<bool> failure_logged{false};

  // forwarded
  bool real_possible = true;
  std::string real_impossible;  ///< why no real communicator can exist (ranks sharing a GPU)
  std::mutex real_mu;  ///< held while the real communicator is created
  std::atomic<ncclComm_t> real{nullptr};
  bool real_failed = false;  ///< creating it failed on some rank (a vote: alike everywhere); never retried
  ncclResult_t real_result = ncclSuccess;
  std::string real_error;

  std::mutex extras_mu;  ///< registrations and operators
  std::vector<rocenante::nccl_layer::registration*> regs;
  std::map<int, rocenante::nccl_layer::premul_op> ops;
  int next_op = 0;

  std::string info;  ///< the communicator's start-up line (what is served where)
};

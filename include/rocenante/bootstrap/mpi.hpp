// bootstrap/mpi.hpp — bootstrap over MPI: how ranks started by `mpirun` (one per node, or several per node)
// exchange connection cards at set-up. Set-up only; collectives never call MPI.
//
// Who calls: every rank of the communicator, after MPI_Init and before MPI_Finalize; the object duplicates the
// communicator it is given (default MPI_COMM_WORLD), so its traffic never matches the application's messages.
// Errors: an MPI call that fails throws bootstrap_error with MPI's error string (the duplicate is set to
// MPI_ERRORS_RETURN). Bound: MPI collectives have no timeout of their own; a rank that dies during set-up is
// noticed by the launcher (mpirun aborts the job), which is the bound this bootstrap relies on.
// An engine with its own process group (torch.distributed, ...) uses bootstrap::callback instead.
#pragma once

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <string>

#include "../core/error.hpp"
#include "concepts.hpp"

namespace rocenante::bootstrap {

class mpi {
 public:
  /// Collective over `comm`: every rank calls.
  explicit mpi(MPI_Comm comm = MPI_COMM_WORLD) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) throw bootstrap_error("bootstrap::mpi: MPI is not initialized; call MPI_Init first");
    check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  mpi(const mpi&) = delete;
  mpi& operator=(const mpi&) = delete;
  /// Frees the duplicate (local: MPI_Comm_free does not wait for other ranks).
  ~mpi() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_; }

  /// Every rank calls with the same `bytes`; recv receives size()*bytes bytes in rank order.
  void all_gather(const void* send, void* recv, std::size_t bytes) {
    if (bytes > static_cast<std::size_t>(INT_MAX))
      throw bootstrap_error("bootstrap::mpi: all_gather of " + std::to_string(bytes) + " bytes exceeds INT_MAX");
    check(MPI_Allgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE, comm_),
          "MPI_Allgather");
  }
  void barrier() { check(MPI_Barrier(comm_), "MPI_Barrier"); }

 private:
  void check(int rc, const char* what) const {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw bootstrap_error(std::string("bootstrap::mpi: ") + what + " failed on rank " + std::to_string(rank_) + ": " +
                          std::string(text, static_cast<std::size_t>(len)));
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = -1, size_ = 0;
};
static_assert(bootstrap<mpi>);

}  // namespace rocenante::bootstrap

// benchmarks/perf/mpi.cpp — rocenante-perf with one rank per process, started by mpirun (or any launcher MPI
// understands): MPI_Init, bootstrap::mpi, then the per-process run of perf/process.cpp (host or GPU executor, the
// same sweep, rank 0's table and receipt), MPI_Finalize.
//
//   mpirun -np 2 -H node0,node1 build/benchmarks/rocenante-perf --transport ibverbs -b 8 -e 1M -f 2 -J receipt.json
//
// Compiled only when MPI is found (benchmarks/meson.build), as a separate C++-only library so that MPI's compile
// flags never reach nvcc.
#define OMPI_SKIP_MPICXX 1  // the C API only
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <string>

#include <rocenante/bootstrap/mpi.hpp>

#include "perf.hpp"

namespace rocenante::perf {

std::string mpi_unavailable() { return {}; }

int run_mpi(int argc, char** argv, config cfg) {
  MPI_Init(&argc, &argv);
  process_launch how;
  how.name = "mpirun";
  how.barrier = "an MPI_Barrier (bootstrap::mpi)";
  // A rank that fails alone would leave its peers inside an MPI call with no bound: end the job.
  how.abort = [] { MPI_Abort(MPI_COMM_WORLD, 1); };
  {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int len = 0;
    MPI_Get_library_version(lib, &len);
    std::string s(lib, static_cast<std::size_t>(len));
    if (const auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
    how.detail = s;
  }
  int rc = 1;
  try {
    bootstrap::mpi boot;
    rc = run_processes(boot, argc, argv, cfg, how);
  } catch (const std::exception& e) {  // bootstrap::mpi's own set-up
    std::fprintf(stderr, "rocenante-perf: %s\n", e.what());
    how.abort();
  }
  MPI_Finalize();
  return rc;
}

}  // namespace rocenante::perf

// benchmarks/perf/mpi.cpp — rocenante-perf with one rank per process, started by mpirun (or any launcher MPI
// understands). Every process is one rank of the host executor: MPI_Init, bootstrap::mpi, the start-up selection
// (host::selected_communicator; --transport ibverbs forces RDMA, auto follows ROCENANTE_TRANSPORT, unset = auto),
// then the same sweep as the in-process mode (perf/host_sweep.hpp): each rank times its own call after an
// MPI_Barrier, every rank's samples are gathered, a row's sample is the slowest rank's, and `time` / `p99` are
// the median and p99 over samples. Rank 0 prints the table and writes the receipt; every rank computes the same
// verdict from the gathered rows, so every rank exits with the same status.
//
//   mpirun -np 2 -H node0,node1 build/benchmarks/rocenante-perf --transport ibverbs -b 8 -e 1M -f 2 -J receipt.json
//
// Compiled only when MPI is found (benchmarks/meson.build), as a separate C++-only library so that MPI's compile
// flags never reach nvcc.
#define OMPI_SKIP_MPICXX 1  // the C API only
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <algorithm>
#include <exception>
#include <string>
#include <vector>

#include <rocenante/bootstrap/mpi.hpp>
#include <rocenante/host/select.hpp>

#include "host_sweep.hpp"
#include "perf.hpp"

namespace rocenante::perf {

namespace {

/// Every rank contributes `mine` (truncated to 255 bytes); every rank receives all of them in rank order.
std::vector<std::string> gather_strings(bootstrap::mpi& boot, const std::string& mine) {
  char buf[256] = {};
  std::snprintf(buf, sizeof buf, "%s", mine.c_str());
  std::vector<char> all(sizeof buf * static_cast<std::size_t>(boot.size()));
  boot.all_gather(buf, all.data(), sizeof buf);
  std::vector<std::string> out;
  for (int q = 0; q < boot.size(); ++q) out.emplace_back(all.data() + q * sizeof buf);
  return out;
}

std::string first_line(std::string s) {
  const std::size_t nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

}  // namespace

std::string mpi_unavailable() { return {}; }

int run_mpi(int argc, char** argv, config cfg) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (cfg.ranks_given && cfg.ranks != size) {
    if (rank == 0)
      std::fprintf(stderr, "rocenante-perf: --ranks %d, but mpirun started %d ranks: under mpirun the world size is "
                           "the rank count (drop --ranks or set -np)\n", cfg.ranks, size);
    MPI_Finalize();
    return 2;
  }
  if (size > max_ranks) {
    if (rank == 0) std::fprintf(stderr, "rocenante-perf: %d ranks: at most %d\n", size, max_ranks);
    MPI_Finalize();
    return 2;
  }
  cfg.ranks = size;
  const bool root = rank == 0;
  provenance prov;
  if (root) prov = read_provenance();  // git runs on rank 0 only

  run_facts facts;
  facts.launch = "mpirun";
  facts.nccl_state = "not applicable: CPU host executor";
  {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int len = 0;
    MPI_Get_library_version(lib, &len);
    facts.mpi_library = first_line(std::string(lib, static_cast<std::size_t>(len)));
  }
  if (root) {
    for (char** e = environ; e && *e; ++e)
      if (std::strncmp(*e, "ROCENANTE_", 10) == 0) facts.environment.emplace_back(*e);
    std::sort(facts.environment.begin(), facts.environment.end());
  }
  std::vector<row> rows;
  bool crashed = false;
  try {
    bootstrap::mpi boot;
    options opts;
    opts.capacity_bytes = capacity_for(cfg);
    opts.timeout_ns = static_cast<std::uint64_t>(cfg.timeout_s * 1e9);
    host::select_config sel;
    if (cfg.backend == backend_kind::ibverbs) sel.transport = env::transport_choice::ibverbs;  // forced: no fallback
    // Collective; throws on every rank alike when no transport is usable everywhere (or the forced one is not).
    host::selected_communicator comm(boot, opts, sel);
    facts.transport = host::to_string(comm.transport());
    facts.selection = comm.selected().summary();

    char name[128] = {};
    ::gethostname(name, sizeof name - 1);
    std::string devices;
#if ROCENANTE_HAS_IBVERBS
    if (auto* c = comm.get<host::selected_communicator::ibverbs_comm>()) devices = c->transport().describe();
#endif
    facts.rank_hosts = gather_strings(boot, std::string(name) + " pid " + std::to_string(::getpid()));
    facts.rank_devices = gather_strings(boot, devices);

    if (root) {
      std::printf("# rocenante-perf %d.%d.%d: %s, %d ranks, transport %s (CPU host executor; one rank per process, "
                  "launched by mpirun)\n",
                  ROCENANTE_VERSION_MAJOR, ROCENANTE_VERSION_MINOR, ROCENANTE_VERSION_PATCH, to_string(cfg.coll), size,
                  facts.transport.c_str());
      print_provenance_and_sweep(cfg, prov);
      std::printf("# selection (--transport %s): %s\n", to_string(cfg.backend), facts.selection.c_str());
      std::printf("# %s\n", facts.mpi_library.c_str());
      std::string envs;
      for (const auto& e : facts.environment) envs += " " + e;
      std::printf("# environment (rank 0):%s\n", envs.empty() ? " no ROCENANTE_* variable" : envs.c_str());
      for (int q = 0; q < size; ++q)
        std::printf("#   rank %2d: %s%s%s\n", q, facts.rank_hosts[q].c_str(), facts.rank_devices[q].empty() ? "" : ", ",
                    facts.rank_devices[q].c_str());
      std::printf("# time, p99: median and p99 over iterations of the slowest rank's time; each rank times its own call\n"
                  "# after an MPI_Barrier (raw samples of every rank: -J FILE). Over Soft-RoCE in an emulated VM these\n"
                  "# times describe that VM, not RDMA hardware\n#\n");
      print_columns(true);
    }
    sweep(comm, boot, cfg, rows, /*rows_on_every_rank=*/true, /*print_p99=*/true);
    // A rank's transport may know more than its status says (a completion error that reached the peers as a
    // relayed abort): every rank's transport failure, if any, goes to the table and to the receipt's notes.
    std::string transport_failure;
#if ROCENANTE_HAS_IBVERBS
    if (auto* c = comm.get<host::selected_communicator::ibverbs_comm>()) transport_failure = c->transport().failure_message();
#endif
    const auto failures = gather_strings(boot, transport_failure);
    for (int q = 0; q < size; ++q)
      if (!failures[q].empty()) {
        facts.notes.push_back("rank " + std::to_string(q) + " transport failure: " + failures[q]);
        if (root) std::printf("# rank %d transport failure: %s\n", q, failures[q].c_str());
      }
    boot.barrier();  // teardown: no rank deregisters its memory while a peer may be inside the last collective
  } catch (const std::exception& e) {
    // Set-up failures are thrown on every rank together (the start-up decision is a vote); a failure on one rank
    // alone would leave its peers waiting in an exchange, so the job is aborted either way.
    std::fflush(stdout);
    std::fprintf(stderr, "rocenante-perf: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    crashed = true;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const int rc = finish_run(argc, argv, cfg, prov, facts, rows, crashed, root);
  MPI_Finalize();
  return rc;
}

}  // namespace rocenante::perf

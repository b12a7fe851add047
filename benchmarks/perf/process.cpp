// benchmarks/perf/process.cpp — rocenante-perf with one rank per process, whichever launcher started the
// processes: mpirun (perf/mpi.cpp hands over a bootstrap::mpi) or torchrun, srun or a shell loop (main hands over
// a bootstrap::tcp). Every rank runs one executor:
//   host executor (--transport auto|ibverbs|socket): host::selected_communicator, the sweep of perf/host_sweep.hpp;
//   GPU executor (--transport gpu_auto|cuda_ipc|cuda_socket|cuda_ibverbs|gpu_nccl): gpu::selected_communicator on
//   GPU LOCAL_RANK mod device count, the sweep of perf/gpu.cu (CUDA events or graphs, as for in-process ranks).
// Each rank times its own call after a bootstrap barrier (host) or on its own stream (GPU); every rank's samples,
// status and wrong elements are gathered, so every rank holds every row and computes the same exit status. Rank 0
// prints the table and writes the receipt.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <rocenante/host/select.hpp>

#include "host_sweep.hpp"
#include "perf.hpp"

namespace rocenante::perf {

namespace {

/// Every rank contributes `mine` (truncated to 255 bytes); every rank receives all of them in rank order.
std::vector<std::string> gather_strings(bootstrap::bootstrap_ref boot, const std::string& mine) {
  char buf[256] = {};
  std::snprintf(buf, sizeof buf, "%s", mine.c_str());
  std::vector<char> all(sizeof buf * static_cast<std::size_t>(boot.size()));
  boot.all_gather(buf, all.data(), sizeof buf);
  std::vector<std::string> out;
  for (int q = 0; q < boot.size(); ++q) out.emplace_back(all.data() + q * sizeof buf);
  return out;
}

/// This rank's index among the ranks of its node: the launcher's variable when it sets one, else its position among
/// the ranks whose host name equals its own (`hosts` from gather_strings, "name pid N").
int local_rank_of(int rank, const std::vector<std::string>& hosts) {
  for (const char* v : {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"})
    if (const char* x = std::getenv(v); x && *x) return std::atoi(x);
  auto host_of = [](const std::string& h) { return h.substr(0, h.find(" pid ")); };
  int local = 0;
  for (int q = 0; q < rank; ++q) local += host_of(hosts[q]) == host_of(hosts[rank]) ? 1 : 0;
  return local;
}

/// The host executor of one rank-process: host::selected_communicator (--transport ibverbs|socket forces that
/// transport; auto follows ROCENANTE_TRANSPORT, unset = auto), then the host sweep with rows on every rank.
std::string run_host_process(bootstrap::bootstrap_ref boot, const config& cfg, std::vector<row>& rows,
                             const std::function<void(const process_ready&)>& ready) {
  options opts;
  opts.capacity_bytes = capacity_for(cfg);
  opts.timeout_ns = static_cast<std::uint64_t>(cfg.timeout_s * 1e9);
  if (cfg.call_post_max_bytes >= 0) opts.call_post_max_bytes = static_cast<std::uint64_t>(cfg.call_post_max_bytes);
  host::select_config sel;
  if (cfg.backend == backend_kind::ibverbs) sel.transport = env::transport_choice::ibverbs;  // forced: no fallback
  if (cfg.backend == backend_kind::socket) sel.transport = env::transport_choice::socket;
  // Collective; throws on every rank alike when no transport is usable everywhere (or the forced one is not).
  host::selected_communicator comm(boot, opts, sel);
  std::string devices;
#if ROCENANTE_HAS_IBVERBS
  if (auto* c = comm.get<host::selected_communicator::ibverbs_comm>()) devices = c->transport().describe();
#endif
  ready({host::to_string(comm.transport()), comm.selected().summary(), devices});
  sweep(comm, boot, cfg, rows, /*rows_on_every_rank=*/true, /*print_p99=*/true);
  // A rank's transport may know more than its status says (a completion error that reached the peers as a relayed
  // abort).
  std::string failure;
#if ROCENANTE_HAS_IBVERBS
  if (auto* c = comm.get<host::selected_communicator::ibverbs_comm>()) failure = c->transport().failure_message();
#endif
  return failure;
}

}  // namespace

int run_processes(bootstrap::bootstrap_ref boot, int argc, char** argv, config cfg, const process_launch& how) {
  const int rank = boot.rank(), size = boot.size();
  const bool root = rank == 0;
  if (cfg.ranks_given && cfg.ranks != size) {
    if (root)
      std::fprintf(stderr, "rocenante-perf: --ranks %d, but %s started %d ranks: with one rank per process the world "
                           "size is the rank count (drop --ranks, or start %d processes)\n",
                   cfg.ranks, how.name.c_str(), size, cfg.ranks);
    return 2;
  }
  if (size > max_ranks) {
    if (root) std::fprintf(stderr, "rocenante-perf: %d ranks: at most %d\n", size, max_ranks);
    return 2;
  }
  cfg.ranks = size;
  const bool gpu = gpu_per_process(cfg.backend);
  provenance prov;
  if (root) prov = read_provenance();  // git runs on rank 0 only

  run_facts facts;
  facts.launch = how.name;
  facts.launch_detail = how.detail;
  if (!gpu) {
    facts.nccl_state = "not applicable: CPU host executor";
    facts.time_method = "per iteration: every rank (process) times its own call with steady_clock after " + how.barrier +
                        "; a sample is the slowest rank's; median and p99 (nearest rank) over iterations";
  }
  if (root) {
    for (char** e = environ; e && *e; ++e)
      if (std::strncmp(*e, "ROCENANTE_", 10) == 0) facts.environment.emplace_back(*e);
    std::sort(facts.environment.begin(), facts.environment.end());
  }
  std::vector<row> rows;
  bool crashed = false;
  try {
    char name[128] = {};
    ::gethostname(name, sizeof name - 1);
    facts.rank_hosts = gather_strings(boot, std::string(name) + " pid " + std::to_string(::getpid()));

    if (gpu) {
      // Every rank says whether it has a GPU before any rank builds anything, so that all refuse together.
      std::string why;
      const int mine = gpu_count(&why) > 0 ? 1 : 0;
      std::vector<int> have(static_cast<std::size_t>(size));
      boot.all_gather(&mine, have.data(), sizeof mine);
      const auto whys = gather_strings(boot, why);
      std::string missing;
      for (int q = 0; q < size; ++q)
        if (!have[q]) missing += (missing.empty() ? "" : "; ") + ("rank " + std::to_string(q) + ": " + whys[q]);
      if (!missing.empty()) {
        if (root) std::printf("SKIP: --transport %s needs a GPU on every rank: %s\n", to_string(cfg.backend), missing.c_str());
        return 77;
      }
    }

    auto ready = [&](const process_ready& r) {
      facts.transport = r.transport;
      facts.selection = r.selection;
      facts.rank_devices = gather_strings(boot, r.device);
      if (!root) return;
      std::printf("# rocenante-perf %d.%d.%d: %s, %d ranks, transport %s (%s; one rank per process, launched by %s)\n",
                  ROCENANTE_VERSION_MAJOR, ROCENANTE_VERSION_MINOR, ROCENANTE_VERSION_PATCH, to_string(cfg.coll), size,
                  facts.transport.c_str(), gpu ? "GPU executor" : "CPU host executor", how.name.c_str());
      print_provenance_and_sweep(cfg, prov);
      std::printf("# selection (--transport %s): %s\n", to_string(cfg.backend), facts.selection.c_str());
      std::printf("# %s\n", how.detail.c_str());
      std::string envs;
      for (const auto& e : facts.environment) envs += " " + e;
      std::printf("# environment (rank 0):%s\n", envs.empty() ? " no ROCENANTE_* variable" : envs.c_str());
      for (int q = 0; q < size; ++q)
        std::printf("#   rank %2d: %s%s%s\n", q, facts.rank_hosts[q].c_str(), facts.rank_devices[q].empty() ? "" : ", ",
                    facts.rank_devices[q].c_str());
      if (gpu) {
        print_gpu_header(cfg, facts, "");
      } else {
        std::printf("# time, p99: median and p99 over iterations of the slowest rank's time; each rank times its own "
                    "call\n# after %s (raw samples of every rank: -J FILE). Over Soft-RoCE in an emulated VM these\n"
                    "# times describe that VM, not RDMA hardware\n#\n",
                    how.barrier.c_str());
        print_columns(true);
      }
    };
    const std::string failure =
        gpu ? run_gpu_process(boot, cfg, local_rank_of(rank, facts.rank_hosts), facts, rows, ready)
            : run_host_process(boot, cfg, rows, ready);
    // Every rank's transport failure, if any, goes to the table and to the receipt's notes.
    const auto failures = gather_strings(boot, failure);
    for (int q = 0; q < size; ++q)
      if (!failures[q].empty()) {
        facts.notes.push_back("rank " + std::to_string(q) + " failure: " + failures[q]);
        if (root) std::printf("# rank %d failure: %s\n", q, failures[q].c_str());
      }
    boot.barrier();  // teardown: no rank deregisters its memory while a peer may be inside the last collective
  } catch (const std::exception& e) {
    // Set-up failures are thrown on every rank together (the start-up decision is a vote); a failure on one rank
    // alone is the launcher's to end (how.abort) or ends its peers' bounded waits.
    std::fflush(stdout);
    std::fprintf(stderr, "rocenante-perf: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    crashed = true;
    if (how.abort) how.abort();
  }
  return finish_run(argc, argv, cfg, prov, facts, rows, crashed, root);
}

}  // namespace rocenante::perf

// rocenante-perf — nccl-tests-style sweep of RoCEnante's collectives: one row per (size, type, algorithm),
// with nccl-tests' columns (size count type redop time algbw busbw #wrong) plus the algorithm, NCCL's rows beside
// the library's where NCCL can run, and an optional JSON receipt holding every raw sample.
//
//   rocenante-perf -b 16 -e 1M -f 4 -d all --algo all --ranks 4            (what `tools/quickstart perf` runs)
//   rocenante-perf --transport cuda_loopback -b 8 -e 64M -f 2 --ranks 4 -G 10 -J receipt.json
//   mpirun -np 2 -H node0,node1 rocenante-perf --transport ibverbs -b 8 -e 1M -f 2 -J receipt.json
//   torchrun --no-python --nproc-per-node=4 rocenante-perf --transport gpu_auto -b 8 -e 64M -f 2 -J receipt.json
//
// Backends (--transport):
//   host           CPU host executor (host::communicator over the in-process loopback transport); ranks are CPU
//                  threads. Its times are CPU times of CPU threads, not a GPU, NVLink or RoCE figure. Alias: loopback.
//   cuda_loopback  gpu::communicator<cuda_loopback>: fused kernels, ranks as threads of this process, each rank on
//   cuda_proxy     its own stream (several ranks may share a GPU); cuda_proxy: cuda_loopback_proxy (host-mapped
//                  windows, a CPU proxy thread per rank moves the bytes). GPU path: perf/gpu.cu (built with nvcc).
//   auto, ibverbs, socket
//                  one rank per process (perf/process.cpp): host executor over the start-up selection
//                  (host::selected_communicator); ibverbs and socket force that transport, auto is the selection as
//                  ROCENANTE_TRANSPORT says (unset = auto).
//   gpu_auto, cuda_ipc, cuda_socket, cuda_ibverbs, gpu_nccl
//                  one rank per process, GPU executor (gpu::selected_communicator) on GPU LOCAL_RANK mod the device
//                  count: the selection, or that transport forced; the sweep and timing of perf/gpu.cu.
// One rank per process is chosen by the launcher's variables: mpirun's (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK,
// or --mpi; bootstrap::mpi, perf/mpi.cpp) or bootstrap::tcp's (ROCENANTE_BOOTSTRAP, or RANK/WORLD_SIZE from
// torchrun, SLURM_PROCID/SLURM_NTASKS from srun, ROCENANTE_RANK/ROCENANTE_WORLD_SIZE, with no MPI variable);
// its default is auto. Else cuda_loopback when this build has the GPU path and a GPU is present, else host.
//
// Measurement, host backend: `-w` untimed iterations, then `-n` timed ones; before each timed iteration every rank
// enters a bootstrap barrier (MPI_Barrier under mpirun, through rank 0 under bootstrap::tcp), then times its own
// call with steady_clock. GPU backends: see perf/gpu.cu (CUDA events per rank; -G N captures the -n iterations in
// one CUDA graph per rank and launches it N times, as in nccl-tests). A row's sample is the slowest rank's; `time`
// is the median of the samples (p99 by nearest rank and the raw samples of every rank go to the JSON receipt; with
// one host rank per process the table also has the p99 column). algbw = size/time; busbw = algbw * 2(n-1)/n for
// all-reduce, * (n-1)/n for all-gather (nccl-tests' formulas; for all-gather `size` is the gathered output).
//
// Check (-c 1): rank r's element i is a small integer in [-4, 4] drawn from a hash of (seed, r, i), exactly
// representable in every type, so every sum of up to 16 ranks is exact and the right answer has exactly one
// encoding. After the timed loop the output is filled with NaN bytes, one more collective runs, and every rank's
// output bytes are compared with the expected bytes; an element counts once in #wrong when it differs on any
// rank (which also counts every element where ranks' bytes differ from each other).
//
// Exit status: 0 when every row ran with status ok and #wrong is 0 everywhere; 1 otherwise; 2 for bad usage;
// 77 when a GPU transport was asked for and there is no GPU (or no GPU path in this build; with one rank per process,
// on every rank when any rank has none).
#include <getopt.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <rocenante/rocenante.hpp>
#include <rocenante/bootstrap/tcp.hpp>

#include "perf/host_sweep.hpp"
#include "perf/perf.hpp"

#ifndef ROCENANTE_SOURCE_DIR
#define ROCENANTE_SOURCE_DIR "."
#endif

namespace {

using namespace rocenante;
using namespace rocenante::perf;

// ---- command line ---------------------------------------------------------------------------------------

[[noreturn]] void usage_error(const std::string& why) {
  std::fprintf(stderr, "rocenante-perf: %s (try --help)\n", why.c_str());
  std::exit(2);
}

void print_help() {
  std::printf(
      "usage: rocenante-perf [options]\n"
      "  -b, --minbytes SIZE       smallest size (default 16); SIZE takes K, M, G suffixes (powers of 1024)\n"
      "  -e, --maxbytes SIZE       largest size (default 1M); also sets the communicator's capacity\n"
      "  -f, --stepfactor F        multiply the size by F each step (default 4)\n"
      "  -i, --stepbytes SIZE      add SIZE each step instead of multiplying\n"
      "  -n, --iters N             timed iterations per row (default 20)\n"
      "  -w, --warmup_iters N      untimed iterations per row (default 5)\n"
      "  -c, --check 0|1           check every result (default 1)\n"
      "  -d, --datatype T          float|half|bfloat16|all, or a comma list (default all)\n"
      "  -o, --op OP               sum (the only reduction today)\n"
      "  -J, --json FILE           write a JSON receipt with every raw sample\n"
      "  -T, --timeout SECONDS     bound on every wait for a peer (default 10)\n"
      "  -G, --cudagraph N         GPU: capture the -n iterations of a row in one CUDA graph per rank and launch\n"
      "                            it N times (nccl-tests' meaning); a sample is one launch / -n (default 0: eager)\n"
      "      --algo A              one_shot|two_shot|ring|auto|all, or a comma list (default all); auto runs\n"
      "                            one_shot at every size here (the size table of algorithm/auto.hpp is not applied\n"
      "                            by this tool). --algorithm A: the same\n"
      "      --collective C        all_reduce|all_gather (default all_reduce)\n"
      "      --ranks N             in-process ranks, 1..%d (default 4); one rank per process: the world size\n"
      "      --transport T         ranks as threads: host | loopback_proxy | cuda_loopback | cuda_proxy (default:\n"
      "                            cuda_loopback when a GPU is present and this build has the GPU path, else host);\n"
      "                            `loopback` = host; loopback_proxy: the host executor's proxy path (a CPU proxy\n"
      "                            thread per rank posts what the ranks stage, as over ibverbs and socket).\n"
      "                            One rank per process, host executor: auto | ibverbs | socket (default auto: the\n"
      "                            start-up selection, ROCENANTE_TRANSPORT from the environment, unset = auto);\n"
      "                            GPU executor (rank on GPU LOCAL_RANK mod device count): gpu_auto (the selection:\n"
      "                            cuda_ipc on one node, else ibverbs, else nccl) | cuda_ipc | cuda_socket |\n"
      "                            cuda_ibverbs | gpu_nccl (forced: no fallback)\n"
      "      --mpi                 one rank per process through MPI even where no MPI launcher variable\n"
      "                            (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK) is set; these select it by themselves\n"
      "      --devices N           GPU: spread ranks round-robin over the first N GPUs (default: min(ranks, GPUs))\n"
      "      --max-parts N         GPU: CTAs per collective per rank (default: gpu::default_options(), 16)\n"
      "      --call-post-max-bytes N  proxy-mode transports: calls up to N bytes per rank are posted once (one\n"
      "                            doorbell, one payload and one flag write per peer and rail), larger ones per part\n"
      "                            (options::call_post_max_bytes; 0: always per part). Proxy rows print a line with\n"
      "                            rank 0's proxy counters per call (doorbells, writes, completions, busy time)\n"
      "      --lamport-max-bytes N GPU, directly written windows (cuda_loopback, cuda_ipc), 2-8 ranks: one_shot calls\n"
      "                            up to N bytes per rank (at most 64K) send packets that are their own ready flag\n"
      "                            (options::lamport_max_bytes; default 0: off)\n"
      "      --symmetric           GPU, directly read windows (cuda_loopback, cuda_ipc): every rank's input lies in its\n"
      "                            symmetric input area (options::symmetric_bytes), so one_shot and two_shot read it in\n"
      "                            place instead of staging it; an error over a transport without one\n"
      "      --nccl, --no-nccl     GPU: run NCCL beside the library (default: wherever it can run, i.e. one rank\n"
      "                            per GPU and libnccl.so.2 loadable; --nccl makes its absence an error)\n"
      "      --self-test-corrupt R flip one output bit on rank R before checking (tests the checker; exits 1)\n"
      "  -h, --help\n"
      "One rank per process without MPI (bootstrap::tcp): set ROCENANTE_BOOTSTRAP=host:port (rank 0's host, a free\n"
      "port) or MASTER_ADDR/MASTER_PORT (it listens on MASTER_PORT+1), and ROCENANTE_RANK/ROCENANTE_WORLD_SIZE,\n"
      "or start it with torchrun (RANK, WORLD_SIZE) or srun (SLURM_PROCID, SLURM_NTASKS):\n"
      "  for r in 0 1; do ROCENANTE_BOOTSTRAP=127.0.0.1:29600 ROCENANTE_RANK=$r ROCENANTE_WORLD_SIZE=2 \\\n"
      "      rocenante-perf -b 16 -e 1M & done; wait\n"
      "  torchrun --no-python --nproc-per-node=4 rocenante-perf --transport gpu_auto -b 8 -e 64M -f 2 -J r.json\n"
      "  ROCENANTE_BOOTSTRAP=node0:29600 srun -N2 --ntasks-per-node=4 rocenante-perf --transport gpu_auto\n"
      "  mpirun -np 2 -H node0,node1 rocenante-perf --transport ibverbs       (MPI: bootstrap::mpi)\n"
      "Rank 0 prints the table and writes the receipt; every rank exits with the same status.\n"
      "Times from the host transport are CPU times of the host executor, not a performance figure. With one rank\n"
      "per process, times include the path between the processes (RDMA stack, sockets) and scheduling.\n",
      max_ranks);
}

std::uint64_t parse_size(const char* s) {
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || v < 0) usage_error(std::string("bad size '") + s + "'");
  double mult = 1;
  switch (*end) {
    case 'k': case 'K': mult = 1024.0; ++end; break;
    case 'm': case 'M': mult = 1024.0 * 1024; ++end; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; ++end; break;
    default: break;
  }
  if (*end == 'i') ++end;  // KiB, MiB, GiB
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') usage_error(std::string("bad size '") + s + "': use a number with an optional K, M or G suffix");
  return static_cast<std::uint64_t>(v * mult);
}

long parse_int(const char* s, const char* what, long lo, long hi) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi)
    usage_error(std::string("bad ") + what + " '" + s + "': expected an integer in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "]");
  return v;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t end = s.find(',', start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

std::vector<dtype> parse_dtypes(const std::string& s) {
  if (s == "all") return {dtype::f32, dtype::f16, dtype::bf16};
  std::vector<dtype> out;
  for (const auto& t : split_commas(s)) {
    if (t == "float" || t == "fp32" || t == "f32" || t == "float32") out.push_back(dtype::f32);
    else if (t == "half" || t == "fp16" || t == "f16" || t == "float16") out.push_back(dtype::f16);
    else if (t == "bfloat16" || t == "bf16") out.push_back(dtype::bf16);
    else usage_error("unknown datatype '" + t + "': use float, half, bfloat16 or all");
  }
  return out;
}

std::vector<algo> parse_algos(const std::string& s, bool* automatic) {
  *automatic = false;
  if (s == "all") return {algo::one_shot, algo::two_shot, algo::ring};
  std::vector<algo> out;
  auto add = [&](algo a) {
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  };
  for (const auto& t : split_commas(s)) {
    if (t == "one_shot") add(algo::one_shot);
    else if (t == "two_shot") add(algo::two_shot);
    else if (t == "ring") add(algo::ring);
    else if (t == "auto") { add(algo::one_shot); *automatic = true; }
    else usage_error("unknown algorithm '" + t + "': use one_shot, two_shot, ring, auto or all");
  }
  return out;
}

/// One rank per process when a launcher's variables say so. mpirun: --mpi, or an MPI launcher's variables
/// (OMPI_COMM_WORLD_SIZE: Open MPI; PMI_SIZE: MPICH, Slurm's PMI; PMIX_RANK: PMIx). bootstrap::tcp:
/// ROCENANTE_BOOTSTRAP (it wins over the MPI variables: mpirun without MPI), or the rank variables of torchrun
/// (RANK, WORLD_SIZE), srun (SLURM_PROCID, SLURM_NTASKS) or ROCENANTE_RANK / ROCENANTE_WORLD_SIZE with no MPI
/// launcher variable.
void detect_launch(config& c) {
  auto var = [](const char* v) -> const char* {
    const char* x = std::getenv(v);
    return x && *x ? x : nullptr;
  };
  if (c.launch == launch_kind::mpirun) return;  // --mpi
  if (const char* b = var("ROCENANTE_BOOTSTRAP")) {
    c.launch = launch_kind::tcp;
    c.launch_why = std::string("ROCENANTE_BOOTSTRAP=") + b;
  } else {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
      if (const char* x = var(v)) {
        c.launch = launch_kind::mpirun;
        c.launch_why = std::string(v) + "=" + x;
        return;
      }
  }
  // Whose rank variables bootstrap::tcp will read (its order): names the launch in the header and receipt.
  static constexpr const char* pairs[][3] = {{"ROCENANTE_RANK", "ROCENANTE_WORLD_SIZE", "ROCENANTE_RANK"},
                                             {"RANK", "WORLD_SIZE", "torchrun"},
                                             {"SLURM_PROCID", "SLURM_NTASKS", "srun"},
                                             {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "mpirun"},
                                             {"PMI_RANK", "PMI_SIZE", "PMI"}};
  for (const auto& p : pairs)
    if (var(p[0]) && var(p[1])) {
      // Open MPI's and PMI's pair count only when ROCENANTE_BOOTSTRAP chose tcp (else it was an MPI launch above).
      if (c.launch != launch_kind::tcp && (std::strcmp(p[2], "mpirun") == 0 || std::strcmp(p[2], "PMI") == 0)) continue;
      if (c.launch != launch_kind::tcp)
        c.launch_why = std::string(p[0]) + "=" + var(p[0]) + ", " + p[1] + "=" + var(p[1]);
      c.launch = launch_kind::tcp;
      c.launcher = p[2];
      return;
    }
  if (c.launch == launch_kind::tcp) c.launcher = "ROCENANTE_BOOTSTRAP";  // bootstrap::tcp will name what is missing
}

config parse_args(int argc, char** argv) {
  enum { opt_algo = 1000, opt_ranks, opt_collective, opt_transport, opt_corrupt, opt_nccl, opt_no_nccl, opt_devices,
         opt_parts, opt_mpi, opt_call_post, opt_lamport, opt_symmetric };
  static const option long_opts[] = {
      {"minbytes", required_argument, nullptr, 'b'},   {"maxbytes", required_argument, nullptr, 'e'},
      {"stepfactor", required_argument, nullptr, 'f'}, {"stepbytes", required_argument, nullptr, 'i'},
      {"iters", required_argument, nullptr, 'n'},      {"warmup_iters", required_argument, nullptr, 'w'},
      {"check", required_argument, nullptr, 'c'},      {"datatype", required_argument, nullptr, 'd'},
      {"op", required_argument, nullptr, 'o'},         {"json", required_argument, nullptr, 'J'},
      {"timeout", required_argument, nullptr, 'T'},    {"algo", required_argument, nullptr, opt_algo},
      {"algorithm", required_argument, nullptr, opt_algo},
      {"ranks", required_argument, nullptr, opt_ranks}, {"collective", required_argument, nullptr, opt_collective},
      {"transport", required_argument, nullptr, opt_transport}, {"help", no_argument, nullptr, 'h'},
      {"self-test-corrupt", required_argument, nullptr, opt_corrupt},
      {"cudagraph", required_argument, nullptr, 'G'},  {"nccl", no_argument, nullptr, opt_nccl},
      {"no-nccl", no_argument, nullptr, opt_no_nccl},   {"devices", required_argument, nullptr, opt_devices},
      {"max-parts", required_argument, nullptr, opt_parts}, {"mpi", no_argument, nullptr, opt_mpi},
      {"call-post-max-bytes", required_argument, nullptr, opt_call_post},
      {"lamport-max-bytes", required_argument, nullptr, opt_lamport},
      {"symmetric", no_argument, nullptr, opt_symmetric},
      {nullptr, 0, nullptr, 0}};
  config c;
  int ch;
  while ((ch = getopt_long(argc, argv, "b:e:f:i:n:w:c:d:o:J:T:G:h", long_opts, nullptr)) != -1) {
    switch (ch) {
      case 'b': c.min_bytes = parse_size(optarg); break;
      case 'e': c.max_bytes = parse_size(optarg); break;
      case 'f': {
        char* end = nullptr;
        c.step_factor = std::strtod(optarg, &end);
        if (end == optarg || *end != '\0' || !(c.step_factor > 1.0)) usage_error("stepfactor must be a number above 1");
        c.step_bytes = 0;
        break;
      }
      case 'i': c.step_bytes = parse_size(optarg); if (c.step_bytes == 0) usage_error("stepbytes must be positive"); break;
      case 'n': c.iters = static_cast<int>(parse_int(optarg, "iters", 1, 100000000)); break;
      case 'w': c.warmup = static_cast<int>(parse_int(optarg, "warmup_iters", 0, 100000000)); break;
      case 'c': c.check = parse_int(optarg, "check", 0, 1) != 0; break;
      case 'd': c.dtypes = parse_dtypes(optarg); break;
      case 'o':
        if (std::strcmp(optarg, "sum") != 0 && std::strcmp(optarg, "all") != 0)
          usage_error(std::string("unsupported op '") + optarg + "': only sum is implemented");
        break;
      case 'J': c.json_path = optarg; break;
      case 'T': {
        char* end = nullptr;
        c.timeout_s = std::strtod(optarg, &end);
        if (end == optarg || *end != '\0' || !(c.timeout_s > 0)) usage_error("timeout must be a positive number of seconds");
        break;
      }
      case opt_algo: c.algos = parse_algos(optarg, &c.algo_auto); break;
      case 'G': c.graph_launches = static_cast<int>(parse_int(optarg, "cudagraph", 0, 100000000)); break;
      case opt_nccl: c.nccl = nccl_mode::on; break;
      case opt_no_nccl: c.nccl = nccl_mode::off; break;
      case opt_devices: c.devices = static_cast<int>(parse_int(optarg, "devices", 1, max_ranks)); break;
      case opt_parts: c.max_parts = static_cast<int>(parse_int(optarg, "max-parts", 1, 1024)); break;
      case opt_call_post: c.call_post_max_bytes = static_cast<long long>(parse_size(optarg)); break;
      case opt_lamport: c.lamport_max_bytes = static_cast<long long>(parse_size(optarg)); break;
      case opt_symmetric: c.symmetric = true; break;
      case opt_ranks: c.ranks = static_cast<int>(parse_int(optarg, "ranks", 1, max_ranks)); c.ranks_given = true; break;
      case opt_mpi: c.launch = launch_kind::mpirun; c.launch_why = "--mpi"; break;
      case opt_collective:
        if (std::strcmp(optarg, "all_reduce") == 0) c.coll = collective_kind::all_reduce;
        else if (std::strcmp(optarg, "all_gather") == 0) c.coll = collective_kind::all_gather;
        else usage_error(std::string("unknown collective '") + optarg + "': use all_reduce or all_gather");
        break;
      case opt_transport: {
        const std::string t = optarg;
        c.transport_given = true;
        c.transport_arg = t;
        if (t == "host" || t == "loopback") c.backend = backend_kind::host;
        else if (t == "loopback_proxy" || t == "host_proxy") c.backend = backend_kind::host_proxy;
        else if (t == "cuda_loopback" || t == "gpu") c.backend = backend_kind::cuda_loopback;
        else if (t == "cuda_proxy" || t == "cuda_loopback_proxy") c.backend = backend_kind::cuda_proxy;
        else if (t == "ibverbs") c.backend = backend_kind::ibverbs;
        else if (t == "socket") c.backend = backend_kind::socket;
        else if (t == "auto") c.backend = backend_kind::automatic;
        else if (t == "gpu_auto" || t == "gpu-auto") c.backend = backend_kind::gpu_auto;
        else if (t == "cuda_ipc") c.backend = backend_kind::cuda_ipc;
        else if (t == "cuda_socket") c.backend = backend_kind::cuda_socket;
        else if (t == "cuda_ibverbs") c.backend = backend_kind::cuda_ibverbs;
        else if (t == "gpu_nccl" || t == "nccl") c.backend = backend_kind::gpu_nccl;
        else usage_error("unknown transport '" + t + "': use host, cuda_loopback, cuda_proxy (ranks as threads), or with "
                         "one rank per process auto, ibverbs, socket (host executor), gpu_auto, cuda_ipc, cuda_socket, "
                         "cuda_ibverbs, gpu_nccl (GPU executor)");
        break;
      }
      case opt_corrupt: c.corrupt_rank = static_cast<int>(parse_int(optarg, "rank", 0, max_ranks - 1)); break;
      case 'h': print_help(); std::exit(0);
      default: usage_error("unknown option");
    }
  }
  if (optind < argc) usage_error(std::string("unexpected argument '") + argv[optind] + "'");
  detect_launch(c);
  if (c.launch != launch_kind::threads) {
    const char* by = c.launch == launch_kind::mpirun ? "mpirun" : "a launcher";
    if (!c.transport_given) c.backend = backend_kind::automatic;
    if (!per_process(c.backend))
      usage_error(std::string("started by ") + by + " (" + c.launch_why + "), each process is one rank: use --transport "
                  "auto, ibverbs or socket (host executor) or gpu_auto, cuda_ipc, cuda_socket, cuda_ibverbs or gpu_nccl "
                  "(GPU executor), not " + c.transport_arg + " (which runs every rank as a thread of one process)");
    if (!gpu_per_process(c.backend) && (c.graph_launches > 0 || c.max_parts > 0))
      usage_error("-G and --max-parts belong to the GPU executor: use --transport gpu_auto, cuda_ipc, cuda_socket, "
                  "cuda_ibverbs or gpu_nccl");
    if (c.nccl == nccl_mode::on || c.devices > 0)
      usage_error("--nccl and --devices belong to ranks as threads; with one rank per process each rank uses GPU "
                  "LOCAL_RANK mod the device count, and NCCL runs as --transport gpu_nccl");
  } else if (per_process(c.backend)) {
    usage_error("--transport " + c.transport_arg + " runs one rank per process: start the processes with a launcher, "
                "e.g. ROCENANTE_BOOTSTRAP=127.0.0.1:29600 ROCENANTE_RANK=r ROCENANTE_WORLD_SIZE=2 for r = 0, 1, "
                "torchrun --no-python --nproc-per-node=2, or mpirun -np 2 (see --help)");
  }
  if (c.min_bytes == 0) c.min_bytes = 1;
  if (c.max_bytes < c.min_bytes) usage_error("maxbytes is below minbytes");
  if (c.transport_given && host_threads(c.backend) && c.graph_launches > 0) usage_error("-G needs a GPU transport");
  if (c.coll == collective_kind::all_gather) {
    std::vector<algo> kept;
    for (algo a : c.algos)
      if (a == algo::one_shot) kept.push_back(a);
    if (kept.empty()) usage_error("ring and two_shot have no all-gather; use --algo one_shot");
    c.algos = kept;
  }
  return c;
}

// ---- the host backend --------------------------------------------------------------------------------------

void run_host(const config& cfg, std::vector<row>& rows) {
  const auto boot_timeout = std::chrono::milliseconds(static_cast<long long>(std::max(60.0, 6 * cfg.timeout_s) * 1e3));
  host::spawn_ranks(
      cfg.ranks,
      [&](bootstrap::in_process& boot) {
        if (cfg.backend == backend_kind::host_proxy)
          run_rank<transport::loopback_proxy>(boot, cfg, rows);
        else
          run_rank<transport::loopback>(boot, cfg, rows);
      },
      boot_timeout);
}

// ---- provenance and the JSON receipt -------------------------------------------------------------------------

std::string run_capture(const std::string& cmd, bool* ok) {
  std::string out;
  *ok = false;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[512];
  std::size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
  *ok = ::pclose(p) == 0;
  return out;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

provenance rocenante::perf::read_provenance() {
  provenance p;
  const std::string git = "git -C " + shell_quote(ROCENANTE_SOURCE_DIR);
  bool ok = false;
  std::string head = run_capture(git + " rev-parse HEAD 2>/dev/null", &ok);
  while (!head.empty() && (head.back() == '\n' || head.back() == '\r')) head.pop_back();
  if (ok && head.size() == 40) {
    p.commit = head;
    const std::string st = run_capture(git + " status --porcelain 2>/dev/null", &ok);
    if (ok) p.dirty = st.empty() ? "false" : "true";
    p.commit_source = "git";
  } else if (FILE* f = std::fopen(ROCENANTE_SOURCE_DIR "/.deps/commit", "r")) {
    // A copy of the tree without .git (the GPU machine): the sender wrote the commit, and optionally a second
    // line "dirty" or "clean", into .deps/commit.
    char line[128] = {}, state[32] = {};
    if (std::fscanf(f, "%127s %31s", line, state) >= 1 && std::strlen(line) == 40) {
      p.commit = line;
      p.dirty = std::strcmp(state, "dirty") == 0 ? "true" : std::strcmp(state, "clean") == 0 ? "false" : "unknown";
      p.commit_source = ".deps/commit";
    }
    std::fclose(f);
  }
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) == 0) p.host = buf;
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
  p.date = date;
  return p;
}

namespace {

std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') { o += '\\'; o += static_cast<char>(c); }
    else if (c == '\n') o += "\\n";
    else if (c == '\t') o += "\\t";
    else if (c < 0x20) { char u[8]; std::snprintf(u, sizeof u, "\\u%04x", c); o += u; }
    else o += static_cast<char>(c);
  }
  return o + "\"";
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

bool write_json(const std::string& path, int argc, char** argv, const config& cfg, const provenance& p,
                const run_facts& facts, const std::vector<row>& rows, bool passed) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  std::string cmd;
  for (int i = 0; i < argc; ++i) {
    if (i) cmd += ' ';
    cmd += shell_quote(argv[i]);
  }
  const bool on_host = host_threads(cfg.backend);
  const bool mpi = per_process(cfg.backend);  // one rank per process, whichever launcher
  const bool gpu_proc = gpu_per_process(cfg.backend);
  std::fprintf(f, "{\n  \"tool\": \"rocenante-perf\",\n  \"version\": \"%d.%d.%d\",\n", ROCENANTE_VERSION_MAJOR,
               ROCENANTE_VERSION_MINOR, ROCENANTE_VERSION_PATCH);
  std::fprintf(f, "  \"command_line\": %s,\n  \"argv\": [", json_string(cmd).c_str());
  for (int i = 0; i < argc; ++i) std::fprintf(f, "%s%s", i ? ", " : "", json_string(argv[i]).c_str());
  std::fprintf(f, "],\n  \"git_commit\": %s,\n  \"git_dirty\": %s,\n  \"git_commit_source\": %s,\n",
               json_string(p.commit).c_str(), p.dirty == "unknown" ? "\"unknown\"" : p.dirty.c_str(),
               json_string(p.commit_source).c_str());
  std::fprintf(f, "  \"date\": %s,\n  \"host\": %s,\n  \"transport\": %s,\n  \"ranks\": %d,\n",
               json_string(p.date).c_str(), json_string(p.host).c_str(),
               json_string(mpi ? facts.transport : std::string(to_string(cfg.backend))).c_str(), cfg.ranks);
  if (mpi) {
    // One rank per process: how it was launched, what the ranks decided at start-up, and where each rank ran.
    std::fprintf(f, "  \"launch\": %s,\n  \"launch_detected_by\": %s,\n  \"transport_requested\": %s,\n",
                 json_string(facts.launch).c_str(), json_string(cfg.launch_why).c_str(),
                 json_string(to_string(cfg.backend)).c_str());
    std::fprintf(f, "  \"selection\": %s,\n  \"%s\": %s,\n  \"rank_hosts\": [", json_string(facts.selection).c_str(),
                 cfg.launch == launch_kind::mpirun ? "mpi_library" : "bootstrap", json_string(facts.launch_detail).c_str());
    for (std::size_t i = 0; i < facts.rank_hosts.size(); ++i)
      std::fprintf(f, "%s%s", i ? ", " : "", json_string(facts.rank_hosts[i]).c_str());
    std::fprintf(f, "],\n  \"rank_devices\": [");
    for (std::size_t i = 0; i < facts.rank_devices.size(); ++i)
      std::fprintf(f, "%s%s", i ? ", " : "", json_string(facts.rank_devices[i]).c_str());
    std::fprintf(f, "],\n  \"environment_rank0\": [");
    for (std::size_t i = 0; i < facts.environment.size(); ++i)
      std::fprintf(f, "%s%s", i ? ", " : "", json_string(facts.environment[i]).c_str());
    std::fprintf(f, "],\n  \"timeout_s\": %s,\n", json_number(cfg.timeout_s).c_str());
  }
  std::fprintf(f, "  \"collective\": \"%s\",\n  \"op\": \"%s\",\n  \"iters\": %d,\n  \"warmup_iters\": %d,\n",
               to_string(cfg.coll), cfg.coll == collective_kind::all_reduce ? "sum" : "none", cfg.iters, cfg.warmup);
  std::fprintf(f, "  \"graph_launches\": %d,\n  \"mode\": \"%s\",\n  \"algo_auto\": %s,\n", cfg.graph_launches,
               cfg.graph_launches > 0 ? "graph" : "eager", cfg.algo_auto ? "true" : "false");
  std::fprintf(f, "  \"call_post_max_bytes\": %llu,\n",
               static_cast<unsigned long long>(cfg.call_post_max_bytes >= 0 ? static_cast<std::uint64_t>(cfg.call_post_max_bytes)
                                                                            : options{}.call_post_max_bytes));
  std::fprintf(f, "  \"lamport_max_bytes\": %llu,\n",
               static_cast<unsigned long long>(cfg.lamport_max_bytes >= 0 ? static_cast<std::uint64_t>(cfg.lamport_max_bytes)
                                                                          : options{}.lamport_max_bytes));
  std::fprintf(f, "  \"symmetric\": %s,\n", cfg.symmetric ? "true" : "false");
  std::fprintf(f, "  \"check\": %s,\n  \"capacity_bytes\": %llu,\n  \"time\": %s,\n", cfg.check ? "true" : "false",
               static_cast<unsigned long long>(capacity_for(cfg)),
               json_string(on_host ? "per iteration: the slowest rank's steady_clock time of one call, after a "
                                     "barrier; median and p99 (nearest rank) over iterations"
                                 : facts.time_method)
                   .c_str());
  std::fprintf(f, "  \"note\": %s,\n",
               json_string(on_host ? "CPU host executor over the in-process loopback transport: not a performance figure"
                           : gpu_proc ? "GPU executor, one rank per process (" + facts.launch + "), transport " +
                                            facts.transport + ", each rank on GPU LOCAL_RANK mod the device count (rank_devices)"
                           : mpi ? "CPU host executor, one rank per process (" + facts.launch + "), transport " + facts.transport +
                                       ": times include the path between the processes (for ibverbs, the RDMA stack), "
                                       "the CPUs and the scheduler; rank_hosts says where it ran (softroce-vm: Soft-RoCE "
                                       "in an emulated VM, not a hardware figure)"
                                 : "GPU executor; ranks are threads of this process, each on its own stream")
                   .c_str());
  if (!on_host && (!mpi || gpu_proc)) {
    std::fprintf(f, "  \"max_parts\": %u,\n  \"min_part_bytes\": %llu,\n", facts.max_parts,
                 static_cast<unsigned long long>(facts.min_part_bytes));
    if (!mpi) std::fprintf(f, "  \"timeout_s\": %s,\n", json_number(cfg.timeout_s).c_str());
  }
  std::fprintf(f, "  \"nccl\": %s,\n  \"cuda_runtime\": %s,\n  \"driver\": %s,\n  \"rank_device\": [",
               json_string(facts.nccl_state).c_str(), json_string(facts.cuda_runtime).c_str(),
               json_string(facts.driver).c_str());
  for (std::size_t i = 0; i < facts.rank_device.size(); ++i) std::fprintf(f, "%s%d", i ? ", " : "", facts.rank_device[i]);
  std::fprintf(f, "],\n  \"gpus\": [");
  for (std::size_t i = 0; i < facts.gpus.size(); ++i) {
    const gpu_facts& g = facts.gpus[i];
    std::fprintf(f, "%s\n    {\"index\": %d, \"name\": %s, \"uuid\": %s, \"pci_bus_id\": %s, \"sm\": \"%d%d\", \"sms\": %d, ",
                 i ? "," : "", g.index, json_string(g.name).c_str(), json_string(g.uuid).c_str(),
                 json_string(g.pci_bus_id).c_str(), g.sm_major, g.sm_minor, g.sms);
    auto mhz = [](int v) { return v < 0 ? std::string("null") : std::to_string(v); };
    std::fprintf(f, "\"clocks_MHz\": {\"sm\": %s, \"mem\": %s, \"sm_max\": %s, \"mem_max\": %s, \"source\": %s}}",
                 mhz(g.sm_clock_mhz).c_str(), mhz(g.mem_clock_mhz).c_str(), mhz(g.sm_clock_max_mhz).c_str(),
                 mhz(g.mem_clock_max_mhz).c_str(), json_string(g.clocks_source).c_str());
  }
  std::fprintf(f, "%s],\n  \"notes\": [", facts.gpus.empty() ? "" : "\n  ");
  for (std::size_t i = 0; i < facts.notes.size(); ++i)
    std::fprintf(f, "%s%s", i ? ", " : "", json_string(facts.notes[i]).c_str());
  std::fprintf(f, "],\n  \"passed\": %s,\n  \"rows\": [", passed ? "true" : "false");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const row& r = rows[i];
    std::fprintf(f, "%s\n    {\"impl\": \"%s\", \"size\": %llu, \"count\": %llu, \"type\": \"%s\", \"algorithm\": \"%s\", ",
                 i ? "," : "", r.impl.c_str(), static_cast<unsigned long long>(r.bytes),
                 static_cast<unsigned long long>(r.count), to_string(r.type), r.label().c_str());
    std::fprintf(f, "\"graph\": %s, \"collectives_per_sample\": %d, ", r.graph ? "true" : "false", r.iters_per_sample);
    std::fprintf(f, "\"status\": \"%s\", \"error\": %s,\n     ", to_string(r.state), json_string(r.error).c_str());
    if (!r.rank_errors.empty()) {
      std::fprintf(f, "\"rank_errors\": [");
      for (std::size_t q = 0; q < r.rank_errors.size(); ++q)
        std::fprintf(f, "%s%s", q ? ", " : "", json_string(r.rank_errors[q]).c_str());
      std::fprintf(f, "],\n     ");
    }
    std::fprintf(f, "\"samples_us\": [");
    for (std::size_t s = 0; s < r.samples_us.size(); ++s)
      std::fprintf(f, "%s%s", s ? ", " : "", json_number(r.samples_us[s]).c_str());
    std::fprintf(f, "],\n     \"rank_samples_us\": [");
    const std::size_t per = r.ranks > 0 ? r.rank_samples_us.size() / static_cast<std::size_t>(r.ranks) : 0;
    for (int q = 0; q < r.ranks; ++q) {
      std::fprintf(f, "%s[", q ? ", " : "");
      for (std::size_t s = 0; s < per; ++s)
        std::fprintf(f, "%s%s", s ? ", " : "", json_number(r.rank_samples_us[q * per + s]).c_str());
      std::fprintf(f, "]");
    }
    std::fprintf(f, "],\n     \"median_us\": %s, \"p99_us\": %s, \"loop_us\": %s, \"algbw_GBps\": %s, \"busbw_GBps\": %s, "
                 "\"wrong\": %llu",
                 json_number(r.median_us).c_str(), json_number(r.p99_us).c_str(),
                 r.loop_us > 0 ? json_number(r.loop_us).c_str() : "null", json_number(r.algbw).c_str(),
                 json_number(r.busbw).c_str(), static_cast<unsigned long long>(r.wrong));
    if (r.proxy.present)
      std::fprintf(f, ",\n     \"proxy_per_call\": {\"doorbells\": %s, \"whole_calls\": %s, \"writes\": %s, "
                   "\"completions\": %s, \"busy_us\": %s, \"copy_us\": %s}",
                   json_number(r.proxy.doorbells).c_str(), json_number(r.proxy.calls).c_str(),
                   json_number(r.proxy.writes).c_str(),
                   r.proxy.completions < 0 ? "null" : json_number(r.proxy.completions).c_str(),
                   json_number(r.proxy.busy_us).c_str(), json_number(r.proxy.copy_us).c_str());
    std::fprintf(f, "}");
  }
  std::fprintf(f, "\n  ]\n}\n");
  return std::fclose(f) == 0;
}

}  // namespace

namespace rocenante::perf {

void print_row(const row& r, collective_kind c, bool p99) {
  char wrong[32], p99_col[24] = "";
  if (r.state != status::ok) std::snprintf(wrong, sizeof wrong, "%s", to_string(r.state));
  else std::snprintf(wrong, sizeof wrong, "%llu", static_cast<unsigned long long>(r.wrong));
  if (p99) std::snprintf(p99_col, sizeof p99_col, "  %10.2f", r.p99_us);
  std::printf("%12llu  %12llu  %8s  %6s  %9s  %10.2f%s  %11.3f  %11.3f  %6s\n", static_cast<unsigned long long>(r.bytes),
              static_cast<unsigned long long>(r.count), to_string(r.type),
              c == collective_kind::all_reduce ? "sum" : "none", r.label().c_str(), r.median_us, p99_col, r.algbw,
              r.busbw, wrong);
  if (r.state != status::ok)  // the library's message names the rank
    std::printf("# %s\n", r.error.empty() ? ("rank " + std::to_string(r.failed_rank) + ": no message").c_str()
                                           : r.error.c_str());
  std::fflush(stdout);
}

void print_proxy(const row& r) {
  if (!r.proxy.present) return;
  char completions[48] = "";
  if (r.proxy.completions >= 0) std::snprintf(completions, sizeof completions, ", %.2f completions", r.proxy.completions);
  std::printf("#   proxy of rank 0, per call: %.2f doorbells (%.2f whole calls), %.2f writes%s, busy %.2f us "
              "(copying %.2f us, posting %.2f us)\n",
              r.proxy.doorbells, r.proxy.calls, r.proxy.writes, completions, r.proxy.busy_us, r.proxy.copy_us,
              r.proxy.busy_us - r.proxy.copy_us);
}

void print_columns(bool p99) {
  std::printf("# %10s  %12s  %8s  %6s  %9s  %10s%s  %11s  %11s  %6s\n", "size", "count", "type", "redop", "algorithm",
              "time", p99 ? "         p99" : "", "algbw", "busbw", "#wrong");
  std::printf("# %10s  %12s  %8s  %6s  %9s  %10s%s  %11s  %11s  %6s\n", "(B)", "(elements)", "", "", "", "(us)",
              p99 ? "        (us)" : "", "(GB/s)", "(GB/s)", "");
  std::fflush(stdout);
}

#ifndef ROCENANTE_PERF_GPU
// Built without nvcc: the GPU path is absent.
int gpu_count(std::string* why) {
  *why = "this build has no GPU path (nvcc was not found at configure time)";
  return 0;
}
void run_gpu(const config&, std::vector<row>&, run_facts&) {}
std::string run_gpu_process(bootstrap::bootstrap_ref, const config&, int, run_facts&, std::vector<row>&,
                            const std::function<void(const process_ready&)>&) {
  throw config_error("this build has no GPU path (nvcc was not found at configure time)");
}
#endif

void print_gpu_header(const config& cfg, const run_facts& facts, const std::string& placement) {
  for (const gpu_facts& g : facts.gpus) {
    std::printf("# GPU %d: %s (sm_%d%d, %d SMs), %s, PCI %s\n", g.index, g.name.c_str(), g.sm_major, g.sm_minor, g.sms,
                g.uuid.c_str(), g.pci_bus_id.c_str());
    if (g.sm_clock_mhz >= 0)
      std::printf("#   clocks: SM %d MHz (max %d), memory %d MHz (max %d), %s\n", g.sm_clock_mhz, g.sm_clock_max_mhz,
                  g.mem_clock_mhz, g.mem_clock_max_mhz, g.clocks_source.c_str());
    else
      std::printf("#   clocks: %s\n", g.clocks_source.c_str());
  }
  if (!placement.empty()) std::printf("%s\n", placement.c_str());
  std::printf("# options: max_parts %u (CTAs per collective and rank, at most), min_part_bytes %llu, timeout %g s\n",
              facts.max_parts, static_cast<unsigned long long>(facts.min_part_bytes), cfg.timeout_s);
  std::printf("# NCCL: %s\n", facts.nccl_state.c_str());
  std::printf("# time (us): %s\n#\n", cfg.graph_launches > 0
                                          ? "per collective inside a CUDA graph of -n collectives, median over -G "
                                            "launches of the slowest rank (raw samples, p99, loop_us: -J FILE)"
                                          : "per collective, CUDA events on each rank's stream, median over -n of the "
                                            "slowest rank (raw samples, p99, loop_us: -J FILE)");
  print_columns();
}

#ifndef ROCENANTE_PERF_MPI
// Built without MPI: no rank-per-process mode.
std::string mpi_unavailable() { return "this build has no MPI (no MPI was found at configure time: apt-get install libopenmpi-dev)"; }
int run_mpi(int, char**, config) { return 2; }
#endif

void print_provenance_and_sweep(const config& cfg, const provenance& prov) {
  std::string types;
  for (dtype t : cfg.dtypes) {
    if (!types.empty()) types += ',';
    types += to_string(t);
  }
  std::string algos;
  for (algo a : cfg.algos) {
    if (!algos.empty()) algos += ',';
    algos += algo_name(a);
  }
  std::printf("# commit %s%s, host %s, %s\n", prov.commit.c_str(),
              prov.dirty == "true" ? " (dirty)" : "", prov.host.c_str(),
              prov.date.c_str());
  std::printf("# minBytes %llu maxBytes %llu step: %s warmup iters: %d iters: %d validation: %d graph: %d types: %s "
              "algorithms: %s\n",
              static_cast<unsigned long long>(cfg.min_bytes), static_cast<unsigned long long>(cfg.max_bytes),
              cfg.step_bytes ? (std::to_string(cfg.step_bytes) + "(bytes)").c_str()
                             : (json_number(cfg.step_factor) + "(factor)").c_str(),
              cfg.warmup, cfg.iters, cfg.check ? 1 : 0, cfg.graph_launches, types.c_str(), algos.c_str());
  if (cfg.algo_auto)
    std::printf("# --algo auto: one_shot at every size (this tool does not apply algorithm/auto.hpp's size table yet)\n");
}

int finish_run(int argc, char** argv, const config& cfg, const provenance& prov, const run_facts& facts,
               const std::vector<row>& rows, bool crashed, bool print) {
  std::uint64_t wrong = 0;
  bool all_ok = !crashed;
  double busbw_sum = 0;
  int busbw_rows = 0;
  for (const row& r : rows) {
    wrong += r.wrong;
    if (r.impl == "rocenante") {
      busbw_sum += r.busbw;
      ++busbw_rows;
    }
    if (r.state != status::ok) all_ok = false;
  }
  const bool passed = all_ok && wrong == 0;
  if (!print) return passed ? 0 : 1;
  const bool on_host = host_threads(cfg.backend);
  std::printf("# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(wrong), passed ? "OK" : "FAILED");
  std::printf("# Avg bus bandwidth    : %.4g%s\n", busbw_rows == 0 ? 0.0 : busbw_sum / busbw_rows,
              on_host ? "  (CPU host executor: not a performance figure)" : "  (library rows only)");
  std::printf("#\n");
  std::fflush(stdout);

  if (!cfg.json_path.empty()) {
    if (!write_json(cfg.json_path, argc, argv, cfg, prov, facts, rows, passed)) {
      std::fprintf(stderr, "rocenante-perf: could not write %s: %s\n", cfg.json_path.c_str(), std::strerror(errno));
      return 1;
    }
  }
  return passed ? 0 : 1;
}

}  // namespace rocenante::perf

int main(int argc, char** argv) {
  // GPU ranks sharing a device wait for each other inside their kernels; CUDA's lazy module loading could make a
  // rank's first launch of a kernel wait for a peer's running kernel. Load every module at start-up instead
  // (before the first CUDA call; a value the user set is kept).
  ::setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  config cfg = parse_args(argc, argv);
  // Ranks as threads share the context's hardware work queues (8 by default, fewer under MPS), and two ranks on one
  // queue can block each other until the timeout; gpu::communicator refuses more ranks than queues. Ask for CUDA's
  // most, 32, before the first CUDA call (a value the user set is kept). Not for a rank that is a process (mpirun,
  // a TCP launcher): it has a context of its own, and under MPS every client's queues come out of one shared pool,
  // so processes asking for 32 each can leave none for the next one's context (docs/operations.md).
  if (cfg.launch == launch_kind::threads) ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  if (cfg.launch == launch_kind::mpirun) {  // one rank per process, bootstrap::mpi (perf/mpi.cpp)
    const std::string why = mpi_unavailable();
    if (!why.empty()) {
      std::fprintf(stderr, "rocenante-perf: launched by mpirun (%s), but %s; or set ROCENANTE_BOOTSTRAP=host:port "
                           "(rank 0's host and a free port) to start the ranks over TCP without MPI\n",
                   cfg.launch_why.c_str(), why.c_str());
      return 2;
    }
    return run_mpi(argc, argv, cfg);
  }
  if (cfg.launch == launch_kind::tcp) {  // one rank per process, bootstrap::tcp (perf/process.cpp)
    process_launch how;
    how.name = "tcp (" + cfg.launcher + ")";
    how.barrier = "a bootstrap::tcp barrier (through rank 0)";
    std::unique_ptr<bootstrap::tcp> boot;
    try {
      const bootstrap::tcp_config tc = bootstrap::tcp_config_from_env();
      how.detail = "bootstrap::tcp, rank 0 at " + tc.host + ":" + std::to_string(tc.port) + " (" + tc.source + ")";
      boot = std::make_unique<bootstrap::tcp>(tc);  // connects every rank to rank 0, bounded
    } catch (const config_error& e) {
      std::fprintf(stderr, "rocenante-perf: started by %s (%s): %s\n", how.name.c_str(), cfg.launch_why.c_str(), e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rocenante-perf: started by %s (%s): %s\n", how.name.c_str(), cfg.launch_why.c_str(), e.what());
      return 1;
    }
    return run_processes(*boot, argc, argv, cfg, how);
  }
  std::string no_gpu_why;
  if (!cfg.transport_given) {
    // Default: the GPU when this build has the GPU path and one is present, else the host executor.
    cfg.backend = gpu_count(&no_gpu_why) > 0 ? backend_kind::cuda_loopback : backend_kind::host;
  } else if (!host_threads(cfg.backend) && gpu_count(&no_gpu_why) == 0) {
    std::printf("SKIP: --transport %s needs a GPU: %s\n", cfg.transport_arg.c_str(), no_gpu_why.c_str());
    return 77;
  }
  const bool on_host = host_threads(cfg.backend);
  if (on_host && cfg.graph_launches > 0) usage_error("-G needs a GPU transport (no GPU: " + no_gpu_why + ")");
  if (on_host && cfg.symmetric) usage_error("--symmetric needs a GPU transport (no GPU: " + no_gpu_why + ")");

  const provenance prov = read_provenance();
  const char* description = cfg.backend == backend_kind::host_proxy
                                ? "CPU host executor, proxy mode: a CPU proxy thread per rank moves what the ranks stage"
                            : on_host ? "CPU host executor; ranks are threads of this process"
                            : cfg.backend == backend_kind::cuda_loopback
                                ? "GPU executor, windows in GPU memory; ranks are threads of this process, one stream each"
                                : "GPU executor, proxy mode: host-mapped windows, a CPU proxy thread per rank";
  std::printf("# rocenante-perf %d.%d.%d: %s, %d ranks, transport %s (%s)\n", ROCENANTE_VERSION_MAJOR,
              ROCENANTE_VERSION_MINOR, ROCENANTE_VERSION_PATCH, to_string(cfg.coll), cfg.ranks, to_string(cfg.backend),
              description);
  print_provenance_and_sweep(cfg, prov);
  if (on_host) {
    std::printf("# CPU host executor: times are CPU threads' times, not a GPU or network performance figure\n");
    std::printf("# time: median over iterations of the slowest rank's time (p99 and raw samples: -J FILE)\n#\n");
  }
  // The GPU path prints its own lines (devices, clocks, NCCL, timing method) and then the column header.
  if (on_host) print_columns();
  std::fflush(stdout);

  std::vector<row> rows;
  run_facts facts;
  if (on_host) facts.nccl_state = "not applicable: CPU host executor";
  bool crashed = false;
  try {
    if (on_host) run_host(cfg, rows);
    else run_gpu(cfg, rows, facts);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "rocenante-perf: %s\n", e.what());
    crashed = true;
  }

  return finish_run(argc, argv, cfg, prov, facts, rows, crashed, true);
}

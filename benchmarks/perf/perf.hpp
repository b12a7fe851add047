// benchmarks/perf/perf.hpp — what rocenante-perf's translation units share: the configuration parsed from the
// command line, one result row, the data pattern and its check, and the statistics of a row. The host path
// lives in rocenante_perf.cpp and perf/host_sweep.hpp; the GPU path (gpu::communicator and NCCL side by side) in
// perf/gpu.cu, compiled only when nvcc is found; one rank per process in perf/process.cpp, started by mpirun
// (perf/mpi.cpp, compiled only when MPI is found) or by any launcher through bootstrap::tcp (torchrun, srun, a
// shell loop).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <rocenante/config.hpp>
#include <rocenante/core/status.hpp>
#include <rocenante/reduce/sum.hpp>
#include <rocenante/transport/proxy.hpp>
#include <rocenante/algorithm/concepts.hpp>
#include <rocenante/bootstrap/concepts.hpp>

namespace rocenante::perf {

using algorithm::algo;

enum class collective_kind { all_reduce, all_gather };

/// The backend that runs the rows. `host` is the CPU host executor (ranks are CPU threads), `host_proxy` the same
/// over the in-process proxy transport (loopback_proxy: the posting path of ibverbs and socket, a memcpy for the
/// wire); cuda_loopback and cuda_proxy run gpu::communicator ranks as threads of this process, each rank on its own
/// stream.
/// One rank per process: `ibverbs`, `socket` and `automatic` run the host executor (host::selected_communicator):
/// that transport forced, or the start-up selection (ROCENANTE_TRANSPORT from the environment, unset = auto);
/// `gpu_auto`, `cuda_ipc`, `cuda_socket`, `cuda_ibverbs` and `gpu_nccl` run the GPU executor
/// (gpu::selected_communicator), the start-up selection or that transport forced.
enum class backend_kind {
  host, host_proxy, cuda_loopback, cuda_proxy,       // ranks as threads
  ibverbs, socket, automatic,                         // one rank per process, host executor
  gpu_auto, cuda_ipc, cuda_socket, cuda_ibverbs, gpu_nccl  // one rank per process, GPU executor
};

/// How the ranks were started: as threads of this process, or one per process by mpirun (bootstrap::mpi) or by
/// another launcher whose variables bootstrap::tcp reads (torchrun, srun, a shell loop).
enum class launch_kind { threads, mpirun, tcp };

/// How NCCL is run beside the library: `automatic` runs it where it can run (one rank per GPU, NCCL loadable).
enum class nccl_mode { automatic, on, off };

/// What --algo asked for. `automatic` is the library's default choice (one_shot today; the library has no
/// size-based selection yet) and is printed as one_shot with a note.
enum class algo_choice { one_shot, ring, automatic };

inline const char* to_string(collective_kind c) { return c == collective_kind::all_reduce ? "all_reduce" : "all_gather"; }
inline const char* to_string(backend_kind b) {
  switch (b) {
    case backend_kind::host: return "host";
    case backend_kind::host_proxy: return "loopback_proxy";
    case backend_kind::cuda_loopback: return "cuda_loopback";
    case backend_kind::cuda_proxy: return "cuda_proxy";
    case backend_kind::ibverbs: return "ibverbs";
    case backend_kind::socket: return "socket";
    case backend_kind::automatic: return "auto";
    case backend_kind::gpu_auto: return "gpu_auto";
    case backend_kind::cuda_ipc: return "cuda_ipc";
    case backend_kind::cuda_socket: return "cuda_socket";
    case backend_kind::cuda_ibverbs: return "cuda_ibverbs";
    case backend_kind::gpu_nccl: return "gpu_nccl";
  }
  return "?";
}
/// Whether the backend runs one rank per process (mpirun or bootstrap::tcp).
inline bool per_process(backend_kind b) { return b >= backend_kind::ibverbs; }
/// Whether it runs the GPU executor with one rank per process.
inline bool gpu_per_process(backend_kind b) { return b >= backend_kind::gpu_auto; }
/// Whether it runs the CPU host executor with ranks as threads.
inline bool host_threads(backend_kind b) { return b == backend_kind::host || b == backend_kind::host_proxy; }
inline const char* algo_name(algo a) { return a == algo::ring ? "ring" : a == algo::two_shot ? "two_shot" : "one_shot"; }

struct config {
  std::uint64_t min_bytes = 16;
  std::uint64_t max_bytes = std::uint64_t{1} << 20;
  std::uint64_t step_bytes = 0;  // -i: linear steps; 0 = use the factor
  double step_factor = 4.0;
  int iters = 20;
  int warmup = 5;
  bool check = true;
  std::vector<dtype> dtypes = {dtype::f32, dtype::f16, dtype::bf16};
  std::vector<algo> algos = {algo::one_shot, algo::two_shot, algo::ring};
  bool algo_auto = false;  // --algo auto was given (runs one_shot, labelled)
  collective_kind coll = collective_kind::all_reduce;
  int ranks = 4;
  bool ranks_given = false;
  launch_kind launch = launch_kind::threads;
  std::string launch_why;   // what chose it: "--mpi", "OMPI_COMM_WORLD_SIZE=4", "ROCENANTE_BOOTSTRAP=node0:29600", ...
  std::string launcher;     // tcp: whose rank variables ("torchrun", "srun", "ROCENANTE_RANK", ...)
  bool transport_given = false;
  backend_kind backend = backend_kind::host;
  std::string transport_arg;  // as typed
  int graph_launches = 0;     // -G N: capture the -n iterations in one CUDA graph per rank, launch it N times
  nccl_mode nccl = nccl_mode::automatic;
  int devices = 0;    // --devices N: ranks round-robin over the first N GPUs (0: min(ranks, visible GPUs))
  int max_parts = 0;  // --max-parts N: CTAs per collective and rank (0: gpu::default_options())
  long long call_post_max_bytes = -1;  // --call-post-max-bytes N: options::call_post_max_bytes (-1: the default)
  long long lamport_max_bytes = -1;    // --lamport-max-bytes N: options::lamport_max_bytes (-1: the default)
  bool symmetric = false;  // --symmetric: GPU inputs in the symmetric input area (options::symmetric_bytes), read in place
  std::string json_path;
  double timeout_s = 10.0;
  int corrupt_rank = -1;  // --self-test-corrupt R: flip one output bit on rank R before the check (tests the checker)
};

/// What rank 0's proxy (proxy-mode transports: loopback_proxy, socket, ibverbs) did per collective over a row's
/// calls (warm-up and check included): descriptors taken (doorbells), of which whole calls, writes issued (payload
/// and flag writes; RDMA work requests), completions polled (ibverbs), time inside its posting step, and of that the
/// time copying payload (loopback proxies only, standing in for the NIC's DMA).
struct proxy_row {
  bool present = false;
  double doorbells = 0, calls = 0, writes = 0, completions = -1, busy_us = 0, copy_us = 0;
};

/// A proxy's counters at one moment (proxy_row is the difference of two, per call).
struct proxy_snapshot {
  std::uint64_t posts = 0, calls = 0, writes = 0, busy_ns = 0, copy_ns = 0;
  std::int64_t completions = -1;
};

/// The counters of a communicator's proxy, when its transport has one: host::communicator / gpu::communicator over
/// a proxy-mode transport, or a selected communicator that chose one (socket, ibverbs).
template <class Comm>
bool proxy_now(Comm& comm, proxy_snapshot& out) {
  auto take = [&](const auto& st) {
    out.posts = st.posts;
    out.calls = st.calls;
    out.writes = st.writes;
    out.busy_ns = st.busy_ns;
    out.copy_ns = st.copy_ns;
    if constexpr (requires { st.completions; }) out.completions = static_cast<std::int64_t>(st.completions);
    return true;
  };
  if constexpr (requires { comm.transport().stats().writes; }) {
    return take(comm.transport().stats());
  } else {
    bool got = false;
    if constexpr (requires { typename Comm::socket_comm; })
      if (auto* c = comm.template get<typename Comm::socket_comm>()) got = take(c->transport().stats());
    if constexpr (requires { typename Comm::ibverbs_comm; })
      if (auto* c = comm.template get<typename Comm::ibverbs_comm>()) got = take(c->transport().stats());
    return got;
  }
}

/// For a failed row: this rank's proxy queues (transport::describe_queues) and counters, when its transport is a
/// proxy with queues (cuda_proxy, loopback_proxy); empty otherwise.
template <class Comm>
std::string proxy_queue_state(Comm& comm) {
  if constexpr (requires { comm.transport().queues(); comm.transport().stats(); }) {
    const auto st = comm.transport().stats();
    return "posts " + std::to_string(st.posts) + " (whole calls " + std::to_string(st.calls) + "), " +
           transport::describe_queues(comm.transport().queues(), comm.transport().handle().layout().max_parts);
  } else {
    return {};
  }
}

inline proxy_row proxy_per_call(const proxy_snapshot& a, const proxy_snapshot& b, std::uint64_t calls) {
  proxy_row r;
  if (calls == 0) return r;
  const double c = static_cast<double>(calls);
  r.present = true;
  r.doorbells = static_cast<double>(b.posts - a.posts) / c;
  r.calls = static_cast<double>(b.calls - a.calls) / c;
  r.writes = static_cast<double>(b.writes - a.writes) / c;
  r.completions = b.completions < 0 ? -1.0 : static_cast<double>(b.completions - a.completions) / c;
  r.busy_us = static_cast<double>(b.busy_ns - a.busy_ns) / 1e3 / c;
  r.copy_us = static_cast<double>(b.copy_ns - a.copy_ns) / 1e3 / c;
  return r;
}

/// One row of the table.
struct row {
  std::string impl = "rocenante";  // "rocenante" or "nccl"
  std::uint64_t bytes = 0;         // the size column: all-reduce input, or all-gather output (n * count * sizeof)
  std::uint64_t count = 0;         // elements per rank's input
  dtype type = dtype::f32;
  algo algorithm = algo::one_shot;
  bool graph = false;
  int iters_per_sample = 1;        // graph mode: a sample is one graph launch divided by the collectives in it
  std::vector<double> samples_us;  // per sample, slowest rank
  std::vector<double> rank_samples_us;  // every rank's own samples: [rank * samples + i]
  int ranks = 0;
  double median_us = 0, p99_us = 0, algbw = 0, busbw = 0;
  double loop_us = 0;  // GPU: nccl-tests' figure, host wall time of the whole timed loop / collectives (slowest rank)
  std::uint64_t wrong = 0;
  status state = status::ok;
  int failed_rank = -1;
  std::string error;
  std::vector<std::string> rank_errors;  // when the row failed: per rank "<status>: <its first error>", "" if ok
  proxy_row proxy;                       // proxy-mode transports: rank 0's proxy per call
  std::string label() const { return impl == "nccl" ? std::string("nccl") : std::string(algo_name(algorithm)); }
};

/// Facts about the GPU a run used, for the header and the receipt (filled by the GPU path).
struct gpu_facts {
  int index = -1;
  std::string name, uuid, pci_bus_id;
  int sm_major = 0, sm_minor = 0, sms = 0;
  // Clocks in MHz from NVML when it loads (current and maximum SM and memory clocks); -1 when unknown.
  int sm_clock_mhz = -1, mem_clock_mhz = -1, sm_clock_max_mhz = -1, mem_clock_max_mhz = -1;
  std::string clocks_source = "unavailable";
};

/// What the GPU path tells main about the run, beyond the rows.
struct run_facts {
  std::vector<gpu_facts> gpus;
  std::vector<int> rank_device;  // device of each rank
  std::string nccl_state = "not built";  // "ran (version ...)", "skipped: <why>", "not built"
  std::string cuda_runtime, driver;
  std::string time_method;
  std::uint32_t max_parts = 0;       // GPU: options::max_parts every communicator used (CTAs per collective, at most)
  std::uint64_t min_part_bytes = 0;  // GPU: options::min_part_bytes
  std::vector<std::string> notes;
  // One rank per process (perf/process.cpp); empty otherwise.
  std::string launch = "threads";  // "threads", "mpirun" or "tcp (torchrun)" etc.
  std::string transport;           // the transport the start-up selection chose ("ibverbs", "socket", "cuda_ipc")
  std::string selection;           // its decision line (selection::summary())
  std::string launch_detail;       // mpirun: MPI_Get_library_version, first line; tcp: rank 0's address and source
  std::vector<std::string> rank_hosts;    // per rank: "host pid N"
  std::vector<std::string> rank_devices;  // per rank: its GPU and/or the RDMA devices its transport uses, or ""
  std::vector<std::string> environment;   // rank 0's ROCENANTE_* variables (NAME=value)
};

/// Small integer in [-4, 4] for (seed, rank, index): exact in fp32, fp16 and bf16, and so is any sum of 16.
ROCENANTE_HOST_DEVICE inline int input_value(std::uint64_t seed, int rank, std::uint64_t i) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull ^ (static_cast<std::uint64_t>(rank) << 48) ^ i;
  x ^= x >> 30; x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27; x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<int>(x % 9) - 4;
}

template <class T>
ROCENANTE_HOST_DEVICE inline T from_int(int v) {
  return reduce::sum<T>::from_accum(static_cast<float>(v));
}

/// Element j of the exact output of an n-rank collective over input_value(seed, ...): the sum over ranks for an
/// all-reduce, rank j / count's element j % count for an all-gather (`gather`) of `count` elements per rank.
template <class T>
ROCENANTE_HOST_DEVICE inline T expected_value(std::uint64_t seed, int n, std::uint64_t count, std::uint64_t j, bool gather) {
  if (gather) return from_int<T>(input_value(seed, static_cast<int>(j / count), j % count));
  int sum = 0;
  for (int q = 0; q < n; ++q) sum += input_value(seed, q, j);
  return from_int<T>(sum);
}

/// Sizes of the sweep: -b to -e, times -f or plus -i.
inline std::vector<std::uint64_t> sweep_sizes(const config& c) {
  std::vector<std::uint64_t> sizes;
  for (std::uint64_t s = c.min_bytes; s <= c.max_bytes;) {
    sizes.push_back(s);
    const std::uint64_t next =
        c.step_bytes ? s + c.step_bytes : static_cast<std::uint64_t>(std::floor(static_cast<double>(s) * c.step_factor));
    s = std::max(next, s + 1);
  }
  return sizes;
}

/// Largest input of one rank: the communicator's capacity.
inline std::uint64_t capacity_for(const config& c) {
  const std::uint64_t per_rank =
      c.coll == collective_kind::all_gather ? (c.max_bytes + c.ranks - 1) / c.ranks : c.max_bytes;
  return std::max<std::uint64_t>(per_rank, packet_bytes);
}

/// Fills count/bytes of a row for `size` bytes of type T on n ranks (all-gather: size is the gathered output).
template <class T>
void shape_row(row& r, collective_kind c, int n, std::uint64_t size) {
  const bool gather = c == collective_kind::all_gather;
  r.type = reduce::sum<T>::dtype_id;
  r.count = gather ? size / (sizeof(T) * n) : size / sizeof(T);
  r.bytes = r.count * sizeof(T) * (gather ? n : 1);
}

/// all[q * samples + i] is rank q's time for sample i. A row's sample i is the slowest rank's; median and p99
/// (nearest rank) over samples; algbw = size / median; busbw with nccl-tests' factors.
inline void finish_row(row& r, const std::vector<double>& all, int n, int samples, collective_kind c) {
  r.rank_samples_us = all;
  r.ranks = n;
  r.samples_us.assign(static_cast<std::size_t>(samples), 0.0);
  for (int i = 0; i < samples; ++i) {
    double slowest = 0;
    for (int q = 0; q < n; ++q) slowest = std::max(slowest, all[static_cast<std::size_t>(q) * samples + i]);
    r.samples_us[i] = slowest;
  }
  std::vector<double> sorted = r.samples_us;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t k = sorted.size();
  if (k == 0) return;
  r.median_us = k % 2 ? sorted[k / 2] : 0.5 * (sorted[k / 2 - 1] + sorted[k / 2]);
  r.p99_us = sorted[static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(k))) - 1];
  if (r.median_us > 0) {
    r.algbw = static_cast<double>(r.bytes) / r.median_us / 1e3;  // bytes/us/1e3 = GB/s
    const double factor = c == collective_kind::all_gather ? double(n - 1) / n : 2.0 * double(n - 1) / n;
    r.busbw = r.algbw * factor;
  }
}

/// Gathers every rank's first failure (status and message) into `r`, the same on every rank: the row's state is
/// the root cause (a mismatch seen by one rank makes its peers time out waiting, so a mismatch wins), and when the
/// row failed, rank_errors holds every rank's own "<status>: <message>" ("" where that rank saw none).
template <class Boot>
void gather_verdict(Boot& boot, row& r, status first, const std::string& why) {
  const int n = boot.size();
  struct rank_status {
    std::uint32_t state;
    char why[492];
  } st{static_cast<std::uint32_t>(first), {}};
  std::snprintf(st.why, sizeof st.why, "%s", why.c_str());
  std::vector<rank_status> statuses(static_cast<std::size_t>(n));
  boot.all_gather(&st, statuses.data(), sizeof st);
  for (int q = 0; q < n; ++q)
    if (statuses[q].state != 0 && (r.state == status::ok || (r.state != status::mismatch &&
                                                             statuses[q].state == std::uint32_t(status::mismatch)))) {
      r.state = static_cast<status>(statuses[q].state);
      r.failed_rank = q;
      r.error = statuses[q].why;
    }
  if (r.state != status::ok)
    for (int q = 0; q < n; ++q)
      r.rank_errors.push_back(statuses[q].state == 0 ? std::string()
                                                     : std::string(to_string(static_cast<status>(statuses[q].state))) +
                                                           ": " + statuses[q].why);
}

/// `bits`: bit j (byte j/8, bit j%8) set when this rank's output element j is wrong. Returns the number of
/// elements wrong on any rank, the same on every rank (every rank calls with bitmaps of one length). The counts
/// are exchanged first, so a clean row moves no bitmap.
template <class Boot>
std::uint64_t count_wrong_anywhere(Boot& boot, const std::vector<std::uint8_t>& bits) {
  const int n = boot.size();
  std::uint64_t mine = 0;
  for (std::uint8_t b : bits) mine += static_cast<std::uint64_t>(__builtin_popcount(b));
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(n));
  boot.all_gather(&mine, counts.data(), sizeof mine);
  bool any = false;
  for (std::uint64_t c : counts) any = any || c != 0;
  if (!any || bits.empty()) return 0;
  std::vector<std::uint8_t> all(bits.size() * static_cast<std::size_t>(n));
  boot.all_gather(bits.data(), all.data(), bits.size());
  std::uint64_t wrong = 0;
  for (std::size_t b = 0; b < bits.size(); ++b) {
    std::uint8_t merged = 0;
    for (int q = 0; q < n; ++q) merged |= all[q * bits.size() + b];
    wrong += static_cast<std::uint64_t>(__builtin_popcount(merged));
  }
  return wrong;
}

/// One line of the table; `p99` adds the p99 column after `time` (one rank per process only).
void print_row(const row& r, collective_kind c, bool p99 = false);
/// The proxy line under a row whose transport has a proxy (nothing otherwise).
void print_proxy(const row& r);
/// The two column-header lines of the table.
void print_columns(bool p99 = false);

// ---- shared by the launch modes (rocenante_perf.cpp) ---------------------------------------------------------

struct provenance {
  std::string commit = "unknown";
  std::string dirty = "unknown";  // "true", "false" or "unknown"
  std::string date, host = "unknown";
  std::string commit_source = "none";  // "git", ".deps/commit" or "none"
};
/// The git commit of the source tree this binary was built from, its dirty flag, the host name and the date.
provenance read_provenance();
/// "# commit ..., host ..., date" and "# minBytes ... maxBytes ..." lines of the header.
void print_provenance_and_sweep(const config& cfg, const provenance& p);
/// The GPU path's header lines after the first: each GPU in facts.gpus with its clocks, then `placement` (a line
/// of its own, when not empty), the options, NCCL's state, what `time` means, and the column header.
void print_gpu_header(const config& cfg, const run_facts& facts, const std::string& placement);
/// Prints the trailer ("# Out of bounds values : N OK|FAILED", average bus bandwidth), writes the JSON receipt
/// when -J was given; returns the exit status (0 passed, 1 otherwise). `print`: this process prints (rank 0).
int finish_run(int argc, char** argv, const config& cfg, const provenance& p, const run_facts& facts,
               const std::vector<row>& rows, bool crashed, bool print);

// ---- one rank per process (perf/process.cpp), whichever launcher started it --------------------------------

/// What the launcher adds to a rank-process's run.
struct process_launch {
  std::string name;    // "mpirun", "tcp (torchrun)", ...
  std::string detail;  // the MPI library, or rank 0's address and where it came from
  std::string barrier; // what every rank enters before each timed call, for the header and receipt
  /// Called on a rank whose set-up or sweep threw, after its message is printed: MPI_Abort under mpirun (a rank
  /// alone in an exchange would wait forever); empty for bootstrap::tcp, whose every wait is bounded and whose
  /// peers see this process's connection close.
  void (*abort)() = nullptr;
};
/// The whole run of one rank-process over a bootstrap every rank has built: set-up of the executor the backend
/// names, rank 0's header and table, the sweep (a bootstrap barrier before each timed call), the receipt. Every
/// rank calls; returns the exit status, the same on every rank (77 on every rank when a GPU backend is asked for
/// and some rank has no GPU).
int run_processes(bootstrap::bootstrap_ref boot, int argc, char** argv, config cfg, const process_launch& how);

// ---- one rank per process under mpirun (perf/mpi.cpp); declared always, defined only in builds with MPI ---------

/// Empty when this build can run under mpirun with bootstrap::mpi; else why not.
std::string mpi_unavailable();
/// MPI_Init, bootstrap::mpi, run_processes, MPI_Finalize. Returns the exit status, the same on every rank.
int run_mpi(int argc, char** argv, config cfg);

// ---- the GPU path (perf/gpu.cu); declared always, defined only in builds with nvcc --------------------------

/// Number of usable CUDA GPUs, 0 with a reason in *why when none (or when built without nvcc).
int gpu_count(std::string* why);
/// Runs the whole sweep on the GPU backend in cfg (rows in order; NCCL rows beside the library's).
void run_gpu(const config& cfg, std::vector<row>& rows, run_facts& facts);
/// What a rank-process's executor tells the runner once its communicator is built (collective: every rank calls
/// it once, before the sweep; the runner prints the header there).
struct process_ready {
  std::string transport, selection;  // the start-up decision
  std::string device;                // this rank's GPU and/or RDMA devices, "" when none
};
/// One rank-process of the GPU executor (gpu::selected_communicator on GPU `local_rank` mod device count): set-up,
/// `ready`, the sweep with rows on every rank. Returns this rank's failure text after the sweep ("" when healthy).
std::string run_gpu_process(bootstrap::bootstrap_ref boot, const config& cfg, int local_rank, run_facts& facts,
                            std::vector<row>& rows, const std::function<void(const process_ready&)>& ready);

}  // namespace rocenante::perf

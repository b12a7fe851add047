// benchmarks/perf/gpu.cu — rocenante-perf's GPU path: gpu::communicator ranks as threads of this process, each
// rank on its own stream (several ranks may share one GPU), timed with CUDA events, eager or in CUDA graphs, and
// NCCL's rows beside the library's where NCCL can run; and one rank per process (run_gpu_process, called by
// perf/process.cpp): gpu::selected_communicator on GPU LOCAL_RANK mod the device count, the same sweep and timing,
// each rank checking its own output. Compiled only when nvcc is found (benchmarks/meson.build).
//
// Placement: rank r runs on GPU r mod D, D = --devices or min(ranks, visible GPUs). NCCL cannot put two ranks of
// one communicator on one device, so its rows exist only when every rank has a GPU of its own (a world of one
// included); otherwise the header says that NCCL was skipped and why.
//
// Timing, per rank, on its own stream (no host barrier inside the timed loop; ranks pace each other through the
// collective itself):
//   eager:   sample i = elapsed(event before launch i, event after launch i). When the host enqueues faster than
//            the GPU runs (the usual case), the "before" event completes when collective i-1 ends on this
//            stream, so a sample is the GPU time of one collective including the wait for its peers, not the host's
//            launch cost.
//   -G N:    the -n iterations are captured into one CUDA graph per rank (thread-local capture), launched once
//            untimed, then N times; sample l = elapsed(event before launch l, event after) / n (nccl-tests' -G).
//   A row's sample is the slowest rank's; `time` is their median. `loop_us` in the receipt is nccl-tests' own
//   figure: host wall time from a barrier to the end of the timed loop (stream synchronized) / collectives,
//   slowest rank.
// Check: inputs are generated on the GPU from the same hash as the host path; after the timed loop each rank's
// output is filled with 0xff, one more (eager) collective runs, and a kernel on rank 0's GPU compares every rank's
// output bytes with the exact expected bytes (an element counts once if it is wrong on any rank). With one rank per
// process each rank's kernel marks its own wrong elements in a bitmap, merged through the bootstrap.
//
// Harness rule (docs/design.md, in-process ranks sharing a GPU): between set-up and teardown no rank's thread
// calls a device-synchronising CUDA API; buffers are allocated before the barrier that ends set-up.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <span>
#include <string>
#include <vector>

#include <rocenante/gpu/communicator.hpp>
#include <rocenante/gpu/select.hpp>
#include <rocenante/host/spawn.hpp>

#include "nvml.hpp"
#include "perf.hpp"
#if ROCENANTE_PERF_NCCL
#include "nccl_loader.hpp"
#endif

namespace rocenante::perf {
namespace {

// ---- kernels: input pattern and check -------------------------------------------------------------------------

template <class T>
__global__ void fill_input(T* p, std::uint64_t count, std::uint64_t seed, int rank) {
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  for (std::uint64_t i = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += stride)
    p[i] = from_int<T>(input_value(seed, rank, i));
}

struct output_set {
  const void* p[max_ranks];
};

template <class T>
__device__ unsigned bits_of(T v) {
  if constexpr (sizeof(T) == 4) {
    unsigned u;
    memcpy(&u, &v, 4);
    return u;
  } else {
    unsigned short u;
    memcpy(&u, &v, 2);
    return u;
  }
}

/// Counts elements j for which any of the `checked` outputs in `outs` differs bitwise from the exact expected value
/// of an n-rank collective; sets bit j of `bitmap` (when not null) for each.
template <class T>
__global__ void count_wrong(output_set outs, int checked, int n, std::uint64_t count, std::uint64_t out_count,
                            bool gather, std::uint64_t seed, unsigned long long* wrong, unsigned* bitmap) {
  unsigned long long mine = 0;
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  for (std::uint64_t j = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; j < out_count; j += stride) {
    const unsigned want = bits_of(expected_value<T>(seed, n, count, j, gather));
    bool bad = false;
    for (int q = 0; q < checked; ++q) bad = bad || bits_of(static_cast<const T*>(outs.p[q])[j]) != want;
    mine += bad ? 1 : 0;
    if (bad && bitmap) atomicOr(&bitmap[j / 32], 1u << (j % 32));
  }
  if (mine) atomicAdd(wrong, mine);
}

__global__ void flip_bit(unsigned char* p) { *p ^= 1u; }

constexpr int fill_blocks = 1024, fill_threads = 256;

// ---- the world: what rank threads share --------------------------------------------------------------------

/// Whose outputs a rank's check reads. Ranks as threads (`shared`): rank 0's kernel reads every rank's output
/// through `outs`, and only rank 0's row has #wrong. Ranks as processes: each rank checks its own output into a
/// bitmap, and the bitmaps are merged through the bootstrap (every rank's row has #wrong).
struct check_plan {
  const output_set* outs = nullptr;  // shared: every rank's output, filled before the sweep
  bool shared = true;
};

struct world {
  int n = 0;
  std::vector<int> device;  // per rank
  output_set outs{};
  bool nccl = false;
#if ROCENANTE_PERF_NCCL
  const nccl_loader* lib = nullptr;
  std::vector<ncclComm_t> comms;
#endif
};

/// One rank's buffers, stream and events; allocated before the barrier that ends set-up.
struct rank_buffers {
  void* in = nullptr;
  void* out = nullptr;
  cudaStream_t stream{};
  std::vector<cudaEvent_t> start, stop;
  unsigned long long* wrong_dev = nullptr;
  unsigned long long* wrong_host = nullptr;
  unsigned* bitmap = nullptr;  // per-rank check: one bit per output element (2-byte types: the most elements)
  std::uint64_t bitmap_bytes = 0;

  bool own_in = true;  // false: `in` is the communicator's symmetric input area (--symmetric)

  rank_buffers(std::uint64_t in_bytes, std::uint64_t out_bytes, int events, bool with_bitmap, std::span<std::byte> sym = {})
      : start(events), stop(events) {
    if (with_bitmap) {
      bitmap_bytes = (out_bytes / 2 + 31) / 32 * 4;
      ROCENANTE_CUDA_CHECK(cudaMalloc(&bitmap, bitmap_bytes));
    }
    if (!sym.empty()) {
      if (sym.size() < in_bytes + 64) throw config_error("--symmetric: the symmetric input area is smaller than the input");
      in = sym.data();
      own_in = false;
    } else {
      ROCENANTE_CUDA_CHECK(cudaMalloc(&in, in_bytes + 64));
    }
    ROCENANTE_CUDA_CHECK(cudaMalloc(&out, out_bytes + 64));
    ROCENANTE_CUDA_CHECK(cudaMemset(in, 0, in_bytes + 64));
    ROCENANTE_CUDA_CHECK(cudaMalloc(&wrong_dev, sizeof(unsigned long long)));
    ROCENANTE_CUDA_CHECK(cudaMallocHost(&wrong_host, sizeof(unsigned long long)));
    ROCENANTE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (int i = 0; i < events; ++i) {
      ROCENANTE_CUDA_CHECK(cudaEventCreate(&start[i]));
      ROCENANTE_CUDA_CHECK(cudaEventCreate(&stop[i]));
    }
    ROCENANTE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  rank_buffers(const rank_buffers&) = delete;
  rank_buffers& operator=(const rank_buffers&) = delete;
  ~rank_buffers() {  // after the barrier that ends the sweep: no peer kernel reads these any more
    cudaStreamSynchronize(stream);
    for (auto e : start) cudaEventDestroy(e);
    for (auto e : stop) cudaEventDestroy(e);
    cudaStreamDestroy(stream);
    if (own_in) cudaFree(in);
    cudaFree(out);
    cudaFree(wrong_dev);
    cudaFreeHost(wrong_host);
    if (bitmap) cudaFree(bitmap);
  }
};

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// One row on every rank (every rank calls with the same arguments). `call(in, out, count, stream, why)` issues
/// one collective on this rank and returns its status; `health(why)` reports an asynchronous failure after the
/// stream is synchronized. Statistics are complete on every rank; #wrong on rank 0 (plan.shared) or every rank.
template <class T, class Boot, class Call, class Health>
row measure(Boot& boot, const config& cfg, rank_buffers& b, const check_plan& plan, std::uint64_t size,
            std::uint64_t seed, Call&& call, Health&& health) {
  const int n = boot.size(), me = boot.rank();
  const bool gather = cfg.coll == collective_kind::all_gather;
  const bool graph = cfg.graph_launches > 0;
  row r;
  shape_row<T>(r, cfg.coll, n, size);
  r.graph = graph;
  r.iters_per_sample = graph ? cfg.iters : 1;
  const std::uint64_t count = r.count, out_count = gather ? count * n : count;
  T* in = static_cast<T*>(b.in);
  T* out = static_cast<T*>(b.out);
  cudaStream_t s = b.stream;

  status first = status::ok;
  std::string why;
  auto note = [&](status st, const std::string& w_) {
    if (st != status::ok && first == status::ok) {
      first = st;
      why = w_;
    }
  };
  auto cuda = [&](cudaError_t e, const char* what) {
    if (e != cudaSuccess) note(status::internal, std::string(what) + ": " + cudaGetErrorString(e));
    return e == cudaSuccess;
  };
  auto issue = [&] {
    std::string w_;
    const status st = call(in, out, count, s, w_);
    note(st, w_);
  };

  fill_input<T><<<fill_blocks, fill_threads, 0, s>>>(in, count, seed, me);
  cuda(cudaGetLastError(), "fill_input launch");
  for (int i = 0; i < cfg.warmup; ++i) issue();

  const int samples = graph ? cfg.graph_launches : cfg.iters;
  std::vector<double> mine(static_cast<std::size_t>(samples), 0.0);
  double loop_us = 0;
  if (graph) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    bool ok = cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    if (ok) {
      for (int i = 0; i < cfg.iters; ++i) issue();
      ok = cuda(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
    }
    ok = ok && cuda(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
    if (g) cudaGraphDestroy(g);
    // Instantiation may allocate: no rank launches its graph before every rank has instantiated (harness rule).
    boot.barrier();
    // A rank whose graph failed still launches nothing: its peers' waits end at the timeout and poison them.
    if (ok) cuda(cudaGraphLaunch(exec, s), "cudaGraphLaunch (warm-up)");
    cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    boot.barrier();
    const double t0 = now_us();
    for (int l = 0; ok && l < samples; ++l) {
      cudaEventRecord(b.start[l], s);
      cuda(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
      cudaEventRecord(b.stop[l], s);
    }
    cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    loop_us = (now_us() - t0) / (double(samples) * cfg.iters);
    for (int l = 0; ok && l < samples; ++l) {
      float ms = 0;
      cuda(cudaEventElapsedTime(&ms, b.start[l], b.stop[l]), "cudaEventElapsedTime");
      mine[l] = double(ms) * 1e3 / cfg.iters;
    }
    if (exec) cudaGraphExecDestroy(exec);
  } else {
    cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    boot.barrier();
    const double t0 = now_us();
    for (int i = 0; i < samples; ++i) {
      cudaEventRecord(b.start[i], s);
      issue();
      cudaEventRecord(b.stop[i], s);
    }
    cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    loop_us = (now_us() - t0) / samples;
    for (int i = 0; i < samples; ++i) {
      float ms = 0;
      cuda(cudaEventElapsedTime(&ms, b.start[i], b.stop[i]), "cudaEventElapsedTime");
      mine[i] = double(ms) * 1e3;
    }
  }

  if (cfg.check) {
    cuda(cudaMemsetAsync(out, 0xff, out_count * sizeof(T), s), "cudaMemsetAsync");
    issue();
    if (cfg.corrupt_rank == me) flip_bit<<<1, 1, 0, s>>>(reinterpret_cast<unsigned char*>(out) + out_count * sizeof(T) - 1);
    cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }
  {
    std::string w_;
    const status st = health(w_);
    note(st, w_);
  }
  boot.barrier();  // every rank's output is final
  if (cfg.check && (me == 0 || !plan.shared)) {
    output_set own{};
    own.p[0] = out;
    const std::uint64_t words = (out_count + 31) / 32;
    *b.wrong_host = 0;
    cuda(cudaMemsetAsync(b.wrong_dev, 0, sizeof(unsigned long long), s), "cudaMemsetAsync");
    if (!plan.shared) cuda(cudaMemsetAsync(b.bitmap, 0, words * 4, s), "cudaMemsetAsync");
    count_wrong<T><<<fill_blocks, fill_threads, 0, s>>>(plan.shared ? *plan.outs : own, plan.shared ? n : 1, n, count,
                                                        out_count, gather, seed, b.wrong_dev,
                                                        plan.shared ? nullptr : b.bitmap);
    cuda(cudaGetLastError(), "count_wrong launch");
    cuda(cudaMemcpyAsync(b.wrong_host, b.wrong_dev, sizeof(unsigned long long), cudaMemcpyDeviceToHost, s),
         "cudaMemcpyAsync");
    cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    r.wrong = *b.wrong_host;
    if (!plan.shared) {
      // Bit j of word j/32 is bit j%8 of byte j/8 (little-endian): the layout count_wrong_anywhere merges.
      std::vector<std::uint8_t> bits(static_cast<std::size_t>((out_count + 7) / 8));
      if (r.wrong != 0 && !bits.empty())
        cuda(cudaMemcpyAsync(bits.data(), b.bitmap, bits.size(), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync") &&
            cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      r.wrong = count_wrong_anywhere(boot, bits);
    }
  }

  // Gather every rank's samples, loop time and first error through the bootstrap.
  std::vector<double> all(static_cast<std::size_t>(n) * samples);
  boot.all_gather(mine.data(), all.data(), mine.size() * sizeof(double));
  std::vector<double> loops(static_cast<std::size_t>(n));
  boot.all_gather(&loop_us, loops.data(), sizeof(double));
  gather_verdict(boot, r, first, why);
  finish_row(r, all, n, samples, cfg.coll);
  for (double l : loops) r.loop_us = std::max(r.loop_us, l);
  return r;
}

// ---- one rank's sweep ---------------------------------------------------------------------------------------

/// Loads every kernel this rank may launch after set-up. With lazy module loading (CUDA's default) a first launch
/// may wait for the device to go idle, while a peer's kernel sharing the GPU spins waiting for this rank: a
/// deadlock until the timeout. main() asks for eager loading; this makes the sweep safe where that was overridden.
template <class Handle>
void preload_kernels() {
  cudaFuncAttributes a{};
  auto load = [&](auto fn) { ROCENANTE_CUDA_CHECK(cudaFuncGetAttributes(&a, fn)); };
  auto per_type = [&]<class T>(T*) {
    using R = reduce::sum<T>;
    load(kernel::all_reduce<algorithm::one_shot, R, Handle>);
    load(kernel::all_reduce<algorithm::ring, R, Handle>);
    load(kernel::all_reduce<algorithm::two_shot, R, Handle>);
    load(kernel::all_gather<algorithm::one_shot, R, Handle>);
    load(fill_input<T>);
    load(count_wrong<T>);
  };
  per_type(static_cast<float*>(nullptr));
  per_type(static_cast<__half*>(nullptr));
  per_type(static_cast<__nv_bfloat16*>(nullptr));
  load(kernel::reject<Handle>);
  load(flip_bit);
}

/// One rank's sweep over a communicator every rank has built (gpu::communicator or gpu::selected_communicator):
/// per type and size, one row per algorithm of cfg labelled `impl`, then `extra(T*, size, seed, emit)` (NCCL's
/// rows beside the library's). Rank 0 prints each row; rows are kept on rank 0, or on every rank when
/// `rows_on_every_rank` (one process per rank). Stops on every rank at the first failed row.
template <class Comm, class Boot, class Extra>
void gpu_sweep(Comm& comm, Boot& boot, const config& cfg, rank_buffers& b, const check_plan& plan,
               std::vector<row>& rows, bool rows_on_every_rank, const char* impl, Extra&& extra) {
  const int me = boot.rank(), n = boot.size();
  auto lib_health = [&](std::string& why) {
    const auto h = comm.check_health();
    if (h.ok()) return status::ok;
    why = h.message;
    return h.state;
  };
  const auto sizes = sweep_sizes(cfg);
  std::uint64_t seed = 1;
  bool stop = false;
  for (dtype t : cfg.dtypes) {
    for (std::uint64_t size : sizes) {
      const std::uint64_t unit = (t == dtype::f32 ? 4 : 2) * (cfg.coll == collective_kind::all_gather ? n : 1);
      if (size < unit) continue;  // not one element per rank at this size
      auto run_type = [&]<class T>(T*) {
        auto emit = [&](row r) {
          if (me == 0) {
            print_row(r, cfg.coll);
            print_proxy(r);
            if (rows_on_every_rank)  // one rank per process: each rank's own message
              for (std::size_t q = 0; q < r.rank_errors.size(); ++q)
                if (!r.rank_errors[q].empty()) std::printf("#   rank %zu: %s\n", q, r.rank_errors[q].c_str());
          }
          if (me == 0 || rows_on_every_rank) rows.push_back(r);
          if (r.state != status::ok) stop = true;  // every rank saw the same gathered status
        };
        for (algo a : cfg.algos) {
          if (stop) return;
          ++seed;
          auto lib_call = [&]<class A>(A) {
            return [&](const T* in, T* out, std::uint64_t count, cudaStream_t s, std::string& why) {
              status st;
              if (cfg.coll == collective_kind::all_gather) {
                if constexpr (A::supports_all_gather) st = comm.all_gather(in, out, count, s);
                else st = status::not_supported;
              } else {
                st = comm.all_reduce(in, out, count, s, A{});
              }
              if (st != status::ok) why = comm.last_error();
              return st;
            };
          };
          proxy_snapshot p0, p1;
          const bool proxied = proxy_now(comm, p0);
          row r = host::with_algorithm(a, [&](auto tag) { return measure<T>(boot, cfg, b, plan, size, seed, lib_call(tag), lib_health); });
          // Every call of the row: warm-up, the timed ones (a graph: its capture's calls, launched once untimed and
          // then -G times) and the check.
          const std::uint64_t calls = std::uint64_t(cfg.warmup) + (cfg.check ? 1u : 0u) +
                                      (cfg.graph_launches > 0 ? std::uint64_t(cfg.iters) * (1u + std::uint64_t(cfg.graph_launches))
                                                              : std::uint64_t(cfg.iters));
          if (proxied && proxy_now(comm, p1)) r.proxy = proxy_per_call(p0, p1, calls);
          if (r.state != status::ok)  // what each rank's proxy had taken: a lost flag vs a descriptor never posted
            if (const std::string q = proxy_queue_state(comm); !q.empty())
              std::printf("#   rank %d proxy: %s\n", boot.rank(), q.c_str());
          r.algorithm = a;
          r.impl = impl;
          emit(r);
        }
        if (!stop) extra(static_cast<T*>(nullptr), size, seed, emit);
      };
      if (t == dtype::f32) run_type(static_cast<float*>(nullptr));
      else if (t == dtype::f16) run_type(static_cast<__half*>(nullptr));
      else run_type(static_cast<__nv_bfloat16*>(nullptr));
      if (stop) break;
    }
    if (stop) break;
  }
  cudaStreamSynchronize(b.stream);
  boot.barrier();  // nobody frees a buffer a peer's kernel may still read
}

/// Options every GPU communicator of the run uses.
options gpu_options(const config& cfg) {
  options o = gpu::default_options();
  o.capacity_bytes = capacity_for(cfg);
  o.timeout_ns = static_cast<std::uint64_t>(cfg.timeout_s * 1e9);
  if (cfg.max_parts > 0) o.max_parts = static_cast<std::uint32_t>(cfg.max_parts);
  if (cfg.call_post_max_bytes >= 0) o.call_post_max_bytes = static_cast<std::uint64_t>(cfg.call_post_max_bytes);
  if (cfg.lamport_max_bytes >= 0) o.lamport_max_bytes = static_cast<std::uint64_t>(cfg.lamport_max_bytes);
  if (cfg.symmetric) o.symmetric_bytes = capacity_for(cfg) + 64;  // rank_buffers' slack past the input
  return o;
}

/// Buffers of one rank for the run's largest row.
/// `sym`: the communicator's symmetric input area, the input's place with --symmetric (an error where it is empty).
std::unique_ptr<rank_buffers> make_buffers(const config& cfg, int n, bool with_bitmap, std::span<std::byte> sym = {}) {
  const std::uint64_t cap = capacity_for(cfg);
  const std::uint64_t out_bytes = cfg.coll == collective_kind::all_gather ? cap * n : cap;
  if (cfg.symmetric && sym.empty())
    throw config_error("--symmetric: this transport has no symmetric input area (proxy mode and nccl read no peer's "
                       "memory); use cuda_loopback or cuda_ipc");
  return std::make_unique<rank_buffers>(cap, out_bytes, std::max(cfg.iters, cfg.graph_launches), with_bitmap,
                                        cfg.symmetric ? sym : std::span<std::byte>{});
}

template <class Transport>
void run_rank(bootstrap::in_process& boot, const config& cfg, world& w, std::vector<row>& rows) {
  const int me = boot.rank(), n = boot.size();
  ROCENANTE_CUDA_CHECK(cudaSetDevice(w.device[me]));
  gpu::communicator<Transport> comm(boot, gpu_options(cfg));
  auto b = make_buffers(cfg, n, false, comm.symmetric_input());
  preload_kernels<typename gpu::communicator<Transport>::handle_type>();
  w.outs.p[me] = b->out;
  boot.barrier();  // set-up ends: from here on no device-synchronising call until the last barrier

  auto nccl_rows = [&]<class T>(T*, std::uint64_t size, std::uint64_t& seed, auto&& emit) {
#if ROCENANTE_PERF_NCCL
    if (!w.nccl) return;
    ++seed;
    auto nccl_call = [&](const T* in, T* out, std::uint64_t count, cudaStream_t s, std::string& why) {
      const ncclResult_t e = cfg.coll == collective_kind::all_gather
                                 ? w.lib->all_gather(in, out, count, nccl_type<T>(), w.comms[me], s)
                                 : w.lib->all_reduce(in, out, count, nccl_type<T>(), ncclSum, w.comms[me], s);
      if (e == ncclSuccess) return status::ok;
      why = std::string("NCCL rank ") + std::to_string(me) + ": " + w.lib->error_string(e);
      return status::internal;
    };
    row r = measure<T>(boot, cfg, *b, check_plan{&w.outs, true}, size, seed, nccl_call,
                       [](std::string&) { return status::ok; });
    r.impl = "nccl";
    emit(r);
#else
    (void)size, (void)seed, (void)emit;
#endif
  };
  gpu_sweep(comm, boot, cfg, *b, check_plan{&w.outs, true}, rows, false, "rocenante", nccl_rows);
}

gpu_facts describe(int dev, const nvml& nv) {
  gpu_facts g;
  g.index = dev;
  cudaDeviceProp p{};
  ROCENANTE_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  g.name = p.name;
  g.sm_major = p.major;
  g.sm_minor = p.minor;
  g.sms = p.multiProcessorCount;
  char uuid[64];
  const unsigned char* u = reinterpret_cast<const unsigned char*>(p.uuid.bytes);
  std::snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  g.uuid = uuid;
  char bus[64] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, dev) == cudaSuccess) g.pci_bus_id = bus;
  if (nv.ok()) {
    const auto d = nv.by_pci_bus_id(g.pci_bus_id);
    g.sm_clock_mhz = nv.clock_mhz(d, nvml::sm);
    g.mem_clock_mhz = nv.clock_mhz(d, nvml::mem);
    g.sm_clock_max_mhz = nv.max_clock_mhz(d, nvml::sm);
    g.mem_clock_max_mhz = nv.max_clock_mhz(d, nvml::mem);
    g.clocks_source = d ? "NVML, read before the sweep" : "NVML: no device with bus id " + g.pci_bus_id;
  } else {
    g.clocks_source = "unavailable: " + nv.why();
  }
  return g;
}

/// The CUDA versions, the options every communicator uses and what a sample means, for the header and receipt.
void runtime_facts(const config& cfg, run_facts& facts) {
  const options o = gpu_options(cfg);
  facts.max_parts = o.max_parts;
  facts.min_part_bytes = o.min_part_bytes;
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  facts.cuda_runtime = std::to_string(rt / 1000) + "." + std::to_string((rt % 1000) / 10);
  facts.driver = "CUDA " + std::to_string(drv / 1000) + "." + std::to_string((drv % 1000) / 10) + " driver API";
  facts.time_method =
      cfg.graph_launches > 0
          ? "CUDA graph (nccl-tests -G): the -n iterations captured in one graph per rank, launched once untimed and "
            "then G times; a rank's sample = elapsed(event before the launch, event after) / n; row sample = slowest "
            "rank; median and p99 (nearest rank) over the G samples. loop_us: host wall time of the G launches from a "
            "barrier / (G*n), slowest rank (nccl-tests' figure)"
          : "eager: a rank's sample = elapsed(CUDA event recorded before the launch, event after) on its own stream; "
            "with the host ahead of the GPU this is one collective's GPU time including the wait for peers, not the "
            "host launch cost; row sample = slowest rank; median and p99 (nearest rank) over -n samples. loop_us: host "
            "wall time of the n launches from a barrier to stream synchronize / n, slowest rank (nccl-tests' figure)";
}

}  // namespace

int gpu_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("no usable CUDA GPU (") + cudaGetErrorString(e) + ")";
    return 0;
  }
  if (n == 0) *why = "no CUDA GPU on this machine";
  return n;
}

void run_gpu(const config& cfg, std::vector<row>& rows, run_facts& facts) {
  int visible = 0;
  ROCENANTE_CUDA_CHECK(cudaGetDeviceCount(&visible));
  const int d = cfg.devices > 0 ? cfg.devices : std::min(cfg.ranks, visible);
  if (d > visible)
    throw config_error("--devices " + std::to_string(d) + " but only " + std::to_string(visible) + " GPU(s) are visible");
  world w;
  w.n = cfg.ranks;
  for (int r = 0; r < cfg.ranks; ++r) w.device.push_back(r % d);
  facts.rank_device = w.device;
  runtime_facts(cfg, facts);
  {
    nvml nv;
    for (int g = 0; g < d; ++g) facts.gpus.push_back(describe(g, nv));
  }

  // NCCL beside the library: only where every rank has a GPU of its own.
  const bool own_gpu = cfg.ranks <= d;
#if ROCENANTE_PERF_NCCL
  std::unique_ptr<nccl_loader> lib;
#endif
  if (cfg.nccl == nccl_mode::off) {
    facts.nccl_state = "skipped: --no-nccl";
  } else if (!own_gpu) {
    facts.nccl_state = "skipped: " + std::to_string(cfg.ranks) + " ranks share " + std::to_string(d) +
                       " GPU(s), and NCCL cannot put several ranks of one communicator on one device; NCCL rows "
                       "exist only for one rank per GPU (e.g. --ranks 1 on one GPU)";
  } else {
#if ROCENANTE_PERF_NCCL
    lib = std::make_unique<nccl_loader>();
    if (!lib->ok()) {
      if (cfg.nccl == nccl_mode::on) throw config_error("--nccl: " + lib->why());
      facts.nccl_state = "skipped: " + lib->why();
    } else {
      w.comms.assign(static_cast<std::size_t>(cfg.ranks), nullptr);
      const ncclResult_t e = lib->comm_init_all(w.comms.data(), cfg.ranks, w.device.data());
      if (e != ncclSuccess) {
        if (cfg.nccl == nccl_mode::on) throw config_error(std::string("ncclCommInitAll: ") + lib->error_string(e));
        facts.nccl_state = std::string("skipped: ncclCommInitAll failed: ") + lib->error_string(e);
        w.comms.clear();
      } else {
        w.nccl = true;
        w.lib = lib.get();
        facts.nccl_state = "ran: NCCL " + lib->version_string() + " (ncclCommInitAll, one rank per GPU, same streams, "
                           "events and graphs as the library's rows)";
      }
    }
#else
    if (cfg.nccl == nccl_mode::on) throw config_error("--nccl: this build has no NCCL rows (nccl.h not found at configure time)");
    facts.nccl_state = "not built: nccl.h was not found at configure time";
#endif
  }
  if (cfg.coll == collective_kind::all_gather && w.nccl)
    facts.notes.push_back("NCCL all-gather rows use ncclAllGather (rank-major output, as the library's)");

  std::string placement;
  for (int r = 0; r < cfg.ranks; ++r) placement += " " + std::to_string(r) + ":" + std::to_string(w.device[r]);
  print_gpu_header(cfg, facts, "# ranks -> GPUs:" + placement + " (threads of this process, one stream each); CUDA runtime " +
                                   facts.cuda_runtime + ", " + facts.driver);

  const auto boot_timeout = std::chrono::milliseconds(static_cast<long long>(std::max(60.0, 6 * cfg.timeout_s) * 1e3));
  auto body = [&](bootstrap::in_process& boot) {
    if (cfg.backend == backend_kind::cuda_proxy) run_rank<transport::cuda_loopback_proxy>(boot, cfg, w, rows);
    else run_rank<transport::cuda_loopback>(boot, cfg, w, rows);
  };
  std::exception_ptr failed;
  try {
    host::spawn_ranks(cfg.ranks, body, boot_timeout);
  } catch (...) {
    failed = std::current_exception();
  }
#if ROCENANTE_PERF_NCCL
  for (ncclComm_t c : w.comms)
    if (c) lib->comm_destroy(c);
#endif
  if (failed) std::rethrow_exception(failed);
}

std::string run_gpu_process(bootstrap::bootstrap_ref boot, const config& cfg, int local_rank, run_facts& facts,
                            std::vector<row>& rows, const std::function<void(const process_ready&)>& ready) {
  int visible = 0;
  ROCENANTE_CUDA_CHECK(cudaGetDeviceCount(&visible));
  const int dev = local_rank % visible;
  ROCENANTE_CUDA_CHECK(cudaSetDevice(dev));
  runtime_facts(cfg, facts);
  {
    nvml nv;
    facts.gpus.push_back(describe(dev, nv));  // this rank's; rank 0's goes to the header
  }
  std::vector<int> devices(static_cast<std::size_t>(boot.size()));
  boot.all_gather(&dev, devices.data(), sizeof dev);
  facts.rank_device = devices;
  facts.nccl_state = cfg.backend == backend_kind::gpu_nccl
                         ? "the library's transport (--transport gpu_nccl): the rows are NCCL's, through the library"
                         : "not beside the library with one rank per process: run --transport gpu_nccl for NCCL's rows";

  host::select_config sel;
  switch (cfg.backend) {  // forced: a failure on any rank fails every rank, never a fallback
    case backend_kind::cuda_ipc: sel.transport = env::transport_choice::cuda_ipc; break;
    case backend_kind::cuda_socket: sel.transport = env::transport_choice::socket; break;
    case backend_kind::cuda_ibverbs: sel.transport = env::transport_choice::ibverbs; break;
    case backend_kind::gpu_nccl: sel.transport = env::transport_choice::nccl; break;
    default: break;  // gpu_auto: ROCENANTE_TRANSPORT, unset = auto
  }
  // Collective, bounded; throws on every rank alike when no transport is usable everywhere.
  gpu::selected_communicator comm(boot, gpu_options(cfg), sel);
  const bool nccl = comm.transport() == host::transport_kind::nccl;
  config run = cfg;
  if (nccl) run.algos = {algo::one_shot};  // NCCL picks its own algorithm: one row per size, labelled nccl
  auto b = make_buffers(run, boot.size(), true, comm.symmetric_input());
  preload_kernels<gpu::selected_communicator::ipc_comm::handle_type>();
  preload_kernels<gpu::selected_communicator::socket_comm::handle_type>();
  ready({host::to_string(comm.transport()), comm.selected().summary(),
         "GPU " + std::to_string(dev) + " " + facts.gpus[0].name + " (PCI " + facts.gpus[0].pci_bus_id + ")"});
  boot.barrier();  // set-up ends

  auto no_extra = []<class T>(T*, std::uint64_t, std::uint64_t&, auto&&) {};
  gpu_sweep(comm, boot, run, *b, check_plan{nullptr, false}, rows, true, nccl ? "nccl" : "rocenante", no_extra);
  const host::health h = comm.check_health();
  return h.ok() ? std::string() : h.message;
}

}  // namespace rocenante::perf

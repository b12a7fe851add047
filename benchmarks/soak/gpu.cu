// benchmarks/soak/gpu.cu — rocenante-soak's GPU executors (soak.hpp `executor`): the same loop, call sequence,
// checks and receipt as the host executor, with the calls run on a GPU. Compiled and linked only in builds with
// nvcc (benchmarks/soak/meson.build); rocenante_soak.cpp calls in here only for --gpu.
//
//   gpu-processes  one rank per process (the launcher's fork, or any launcher bootstrap::tcp reads): gpu::selected_
//                  communicator over a bootstrap::tcp on port + generation, on GPU local rank (or rank) mod the
//                  device count. On one node the start-up vote picks cuda_ipc; ROCENANTE_TRANSPORT=socket forces the
//                  proxy path over TCP (tests/gpu/test_gpu_multiprocess.cu runs both).
//   gpu-threads    ranks as threads of one process sharing GPU 0: gpu::communicator<cuda_loopback> over the
//                  bootstrap::in_process world of the generation (thread_world).
//
// A call, on the rank's own stream: the input is written into a pinned host buffer and copied to the device, the
// output filled with 0xff (NaN in every dtype), the stream synchronized (untimed); then the timed part: the
// collective launched eagerly or as a CUDA graph, and the stream synchronized; then the health (a fail-stop shows
// there, asynchronously) and the output copied back and checked on the host (soak.hpp check_output).
//
// Graph calls (call_choice::graph, the same choice on every rank): one graph per (bytes, dtype, kind), captured on
// the rank's stream (thread-local capture mode: capture launches nothing, so no peer waits on it) at the shape's
// first call, instantiated, and replayed from then on with the new input copied into the same device buffer before
// each launch. At most --graph-cache graphs per rank, the least recently used destroyed first; every rank misses and
// evicts on the same calls. A rebuild drops every graph (they hold the old communicator's device context).
//
// Harness rules for ranks sharing a GPU (docs/api.md §5), kept in both modes: buffers, stream and pinned copies are
// allocated before the rank's first communicator and kept across rebuilds; after set-up a rank makes no
// device-synchronising call except at a point where no peer's kernel can be waiting for it: every collective is
// synchronized before the next is submitted (so collective s is submitted on every rank before any rank submits
// s + 1), and launched on an idle stream (its staging copies synchronized first); with threads, no rank launches a
// graph before every rank has instantiated and uploaded its own (either may synchronise the device; evictions
// happen there too), and after a fail-stop no rank tears down (frees its window) before every rank's stream
// is synchronized (thread_world::leave). CUDA_MODULE_LOADING=EAGER and CUDA_DEVICE_MAX_CONNECTIONS=32 (ranks as
// threads need a hardware work queue each) are set by main before the first CUDA call.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <rocenante/gpu/communicator.hpp>
#include <rocenante/gpu/select.hpp>

#include "soak.hpp"

namespace rocenante::soak {
namespace {

/// One rank's device buffers, pinned host copies and stream: allocated once, before the rank's first communicator,
/// and kept across rebuilds.
struct rank_buffers {
  void *din = nullptr, *dout = nullptr, *hin = nullptr, *hout = nullptr;
  float *dctl = nullptr, *hctl = nullptr;  // control all-reduce: [0] the flag, [4] the sum (16 bytes apart)
  cudaStream_t stream = nullptr;

  rank_buffers(std::uint64_t in_bytes, int n) {
    const std::uint64_t out_bytes = in_bytes * static_cast<std::uint64_t>(n);
    ROCENANTE_CUDA_CHECK(cudaMalloc(&din, in_bytes + 64));
    ROCENANTE_CUDA_CHECK(cudaMalloc(&dout, out_bytes + 64));
    ROCENANTE_CUDA_CHECK(cudaMallocHost(&hin, in_bytes + 64));
    ROCENANTE_CUDA_CHECK(cudaMallocHost(&hout, out_bytes + 64));
    ROCENANTE_CUDA_CHECK(cudaMalloc(&dctl, 256));
    ROCENANTE_CUDA_CHECK(cudaMallocHost(&hctl, 256));
    ROCENANTE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    ROCENANTE_CUDA_CHECK(cudaMemset(din, 0, in_bytes + 64));
    ROCENANTE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  rank_buffers(const rank_buffers&) = delete;
  rank_buffers& operator=(const rank_buffers&) = delete;
  ~rank_buffers() {  // after the summary exchange: no peer's kernel reads or writes anything of this rank
    if (stream) {
      cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
    }
    cudaFree(din);
    cudaFree(dout);
    cudaFreeHost(hin);
    cudaFreeHost(hout);
    cudaFree(dctl);
    cudaFreeHost(hctl);
  }
};

/// The CUDA graphs of one generation, one per shape; beyond `capacity` the least recently used is destroyed.
class graph_cache {
 public:
  struct shape {
    std::uint64_t bytes;
    dtype type;
    int kind;  // 0 one_shot, 1 ring, 2 all-gather
    auto operator<=>(const shape&) const = default;
  };
  explicit graph_cache(int capacity) : capacity_(static_cast<std::size_t>(capacity)) {}
  graph_cache(const graph_cache&) = delete;
  graph_cache& operator=(const graph_cache&) = delete;
  ~graph_cache() { clear(); }

  cudaGraphExec_t find(const shape& s) {
    const auto it = graphs_.find(s);
    if (it == graphs_.end()) return nullptr;
    it->second.used = ++clock_;
    return it->second.exec;
  }
  /// Room for one more graph: destroys the least recently used when full; true when it did.
  bool make_room() {
    if (graphs_.size() < capacity_) return false;
    auto lru = graphs_.begin();
    for (auto it = graphs_.begin(); it != graphs_.end(); ++it)
      if (it->second.used < lru->second.used) lru = it;
    cudaGraphExecDestroy(lru->second.exec);
    graphs_.erase(lru);
    return true;
  }
  void insert(const shape& s, cudaGraphExec_t exec) { graphs_[s] = {exec, ++clock_}; }
  void clear() {
    for (auto& [s, e] : graphs_) cudaGraphExecDestroy(e.exec);
    graphs_.clear();
  }

 private:
  struct entry {
    cudaGraphExec_t exec;
    std::uint64_t used;
  };
  std::size_t capacity_;
  std::uint64_t clock_ = 0;
  std::map<shape, entry> graphs_;
};

/// "NVIDIA H100 80GB HBM3" and "GPU 0, sm_90, 132 SMs, PCI 0000:..., CUDA runtime 13.0, driver API 13.0".
std::string gpu_detail(int dev, std::string& name) {
  cudaDeviceProp p{};
  ROCENANTE_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  name = p.name;
  char bus[64] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, dev) != cudaSuccess) std::snprintf(bus, sizeof bus, "unknown");
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  char b[256];
  std::snprintf(b, sizeof b, "GPU %d, sm_%d%d, %d SMs, PCI %s, CUDA runtime %d.%d, driver API %d.%d", dev, p.major, p.minor,
                p.multiProcessorCount, bus, rt / 1000, (rt % 1000) / 10, drv / 1000, (drv % 1000) / 10);
  return b;
}

/// The GPU executor of one rank. Comm: gpu::selected_communicator over Boot = bootstrap::tcp (ranks as processes),
/// or gpu::communicator<cuda_loopback> over Boot = bootstrap::in_process of thread_world `tw` (ranks as threads).
template <class Comm, class Boot>
class gpu_executor final : public executor {
  static constexpr bool threads = std::is_same_v<Boot, bootstrap::in_process>;

 public:
  /// On the rank's own thread, `device` current from here on.
  gpu_executor(const config& cfg, int device, int thread_rank, thread_world* tw)
      : max_bytes_(cfg.max_bytes), pdl_(cfg.pdl), device_(device), thread_rank_(thread_rank), tw_(tw),
        graphs_(cfg.graph_cache) {
    ROCENANTE_CUDA_CHECK(cudaSetDevice(device));
    detail_ = gpu_detail(device, gpu_);
    o_ = gpu::default_options();
    o_.capacity_bytes = std::max<std::uint64_t>(cfg.max_bytes, packet_bytes);
    o_.timeout_ns = cfg.timeout_ms * 1'000'000ull;
  }
  ~gpu_executor() override { tear_down(); }

  void build(int generation) override {
    if constexpr (threads) boot_ = std::make_unique<Boot>(tw_->world(generation), thread_rank_);
    else boot_ = tcp_bootstrap(generation);
    if (!buf_) buf_ = std::make_unique<rank_buffers>(max_bytes_, boot_->size());  // before the first communicator
    comm_ = std::make_unique<Comm>(*boot_, o_);
    if constexpr (requires(Comm& c) { c.set_programmatic_launch(true); }) {
      comm_->set_programmatic_launch(pdl_);
    } else {
      if (auto* p = comm_->template get<gpu::selected_communicator::ipc_comm>()) p->set_programmatic_launch(pdl_);
      if (auto* p = comm_->template get<gpu::selected_communicator::socket_comm>()) p->set_programmatic_launch(pdl_);
    }
    generation_ = generation;
    round_ = 0;
  }
  bool has_bootstrap() const override { return boot_ != nullptr; }
  void quiesce(int generation) override {
    if (buf_) (void)cudaStreamSynchronize(buf_->stream);  // this rank's kernels end by themselves (bounded waits)
    if (tw_ && !tw_->leave(generation))
      std::fprintf(stderr, "rank %d: not every rank left generation %d within the wait: tearing down anyway\n",
                   thread_rank_, generation);
  }
  void tear_down() override {
    graphs_.clear();  // they hold this communicator's device context
    comm_.reset();
    boot_.reset();
  }
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  std::string transport() const override {
    if constexpr (threads) return "cuda_loopback";
    else return host::to_string(comm_->transport());
  }
  std::string decision() const override {
    if constexpr (threads)
      return "ranks as threads of one process on GPU " + std::to_string(device_) +
             " (bootstrap::in_process, a new world per generation; no start-up vote)";
    else
      return comm_->selected().summary();
  }
  void barrier() override { boot_->barrier(); }
  void all_gather(const void* send, void* recv, std::size_t bytes) override { boot_->all_gather(send, recv, bytes); }

  status control(float flag, float& sum) override {
    cudaStream_t s = buf_->stream;
    buf_->hctl[0] = flag;
    buf_->hctl[4] = -1;
    if (!cuda(cudaMemcpyAsync(buf_->dctl, buf_->hctl, sizeof(float), cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (flag)") ||
        !cuda(cudaMemsetAsync(buf_->dctl + 4, 0xff, sizeof(float), s), "cudaMemsetAsync (sum)") ||
        !cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize (staging)"))
      return status::internal;
    if (const status st = comm_->all_reduce(buf_->dctl, buf_->dctl + 4, 1, s); st != status::ok) {
      last_error_ = comm_->last_error();
      return st;
    }
    if (!cuda(cudaMemcpyAsync(buf_->hctl + 4, buf_->dctl + 4, sizeof(float), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync (sum)"))
      return status::internal;
    const status st = synchronized("control all_reduce");
    sum = buf_->hctl[4];
    return st;
  }

  status run(const call_choice& ch, std::uint64_t k, bool corrupt, double& seconds, std::string& wrong) override {
    return with_type(ch.type, [&]<class T>(T*) { return run_typed<T>(ch, k, corrupt, seconds, wrong); });
  }
  std::string last_error() const override { return last_error_; }
  void before_call() override {
    if (tw_) tw_->take_pause(thread_rank_);
  }
  void facts(exec_facts& f) const override {
    f.executor = "gpu";
    f.mode = threads ? "gpu-threads" : "gpu-processes";
    f.gpu = gpu_;
    f.gpu_detail = detail_;
    f.pdl = pdl_;
    f.graph_captures = captures_;
    f.graph_launches = launches_;
    f.graph_evictions = evictions_;
  }

 private:
  bool cuda(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    last_error_ = "rank " + std::to_string(comm_ ? comm_->rank() : thread_rank_) + ": " + what + ": " + cudaGetErrorString(e);
    return false;
  }
  /// Waits for this rank's stream, then reads the health: a failure of what ran there (a timeout, a peer's abort)
  /// shows here, not in the launch's status.
  status synchronized(const char* what) {
    if (!cuda(cudaStreamSynchronize(buf_->stream), "cudaStreamSynchronize")) return status::internal;
    if (const host::health h = comm_->check_health(); !h.ok()) {
      last_error_ = std::string(what) + ": " + h.message;
      return h.state;
    }
    return status::ok;
  }

  /// Launches call `ch` on `s` from the staged buffers (eager, or into a graph being captured).
  template <class T>
  status issue(const call_choice& ch, cudaStream_t s) {
    const T* in = static_cast<const T*>(buf_->din);
    T* out = static_cast<T*>(buf_->dout);
    const std::size_t count = ch.bytes / sizeof(T);
    const status st = ch.gather ? comm_->all_gather(in, out, count, s)
                      : ch.algo == algorithm::algo::ring ? comm_->all_reduce(in, out, count, s, algorithm::ring{})
                                                         : comm_->all_reduce(in, out, count, s, algorithm::one_shot{});
    if (st != status::ok) last_error_ = comm_->last_error();
    return st;
  }

  /// The graph of `ch`'s shape, captured and instantiated on a miss.
  template <class T>
  status graph_for(const call_choice& ch, cudaGraphExec_t& exec) {
    const graph_cache::shape key{ch.bytes, ch.type, ch.gather ? 2 : ch.algo == algorithm::algo::ring ? 1 : 0};
    if ((exec = graphs_.find(key))) return status::ok;
    if (graphs_.make_room()) ++evictions_;
    cudaStream_t s = buf_->stream;
    status st = status::ok;
    cudaGraph_t g = nullptr;
    if (!cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture")) {
      st = status::internal;
    } else {
      st = issue<T>(ch, s);  // captured, not launched
      const cudaError_t e = cudaStreamEndCapture(s, &g);
      if (st == status::ok && !cuda(e, "cudaStreamEndCapture")) st = status::internal;
    }
    if (st == status::ok && !cuda(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate")) {
      st = status::internal;
      exec = nullptr;
    }
    if (g) cudaGraphDestroy(g);
    // The upload, so that the first replay's time is a replay's.
    if (st == status::ok && (!cuda(cudaGraphUpload(exec, s), "cudaGraphUpload") || !cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize (upload)")))
      st = status::internal;
    if constexpr (threads) {
      // Instantiation and upload may synchronise the shared device: no rank launches this graph before every rank
      // has its own ready (a rank whose capture failed comes too, and then launches nothing).
      if (const status w = tw_->all_arrived(generation_, round_++); w != status::ok && st == status::ok) {
        st = w;
        last_error_ = "rank " + std::to_string(thread_rank_) + ": " +
                      (w == status::poisoned ? "a peer left this generation (its fail-stop)"
                                             : "the wait for every rank's graph instantiation ran out") +
                      " before this graph was launched";
      }
    }
    if (st != status::ok) {
      if (exec) cudaGraphExecDestroy(exec);
      exec = nullptr;
      return st;
    }
    graphs_.insert(key, exec);
    ++captures_;
    return status::ok;
  }

  template <class T>
  status run_typed(const call_choice& ch, std::uint64_t k, bool corrupt, double& seconds, std::string& wrong) {
    const int n = comm_->size();
    const std::size_t count = ch.bytes / sizeof(T);
    const std::size_t out_bytes = (ch.gather ? count * static_cast<std::size_t>(n) : count) * sizeof(T);
    cudaStream_t s = buf_->stream;
    cudaGraphExec_t exec = nullptr;
    if (ch.graph)
      if (const status st = graph_for<T>(ch, exec); st != status::ok) return st;
    fill_input(ch, k, comm_->rank(), static_cast<T*>(buf_->hin));
    if (!cuda(cudaMemcpyAsync(buf_->din, buf_->hin, count * sizeof(T), cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (input)") ||
        !cuda(cudaMemsetAsync(buf_->dout, 0xff, out_bytes, s), "cudaMemsetAsync (output)") ||
        !cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize (staging)"))
      return status::internal;
    const auto t0 = clk::now();
    status st = status::ok;
    if (ch.graph) {
      st = cuda(cudaGraphLaunch(exec, s), "cudaGraphLaunch") ? status::ok : status::internal;
      launches_ += st == status::ok ? 1 : 0;
    } else {
      st = issue<T>(ch, s);
    }
    if (st == status::ok) st = synchronized(ch.graph ? "graph replay" : "eager call");
    seconds = std::chrono::duration<double>(clk::now() - t0).count();
    if (st != status::ok) return st;
    if (!cuda(cudaMemcpyAsync(buf_->hout, buf_->dout, out_bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync (output)") ||
        !cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize (output)"))
      return status::internal;
    wrong = check_output(ch, k, n, static_cast<T*>(buf_->hout), corrupt);
    return status::ok;
  }

  options o_;
  std::uint64_t max_bytes_;
  bool pdl_;
  int device_, thread_rank_;
  thread_world* tw_;
  std::string gpu_, detail_, last_error_;
  int generation_ = 0;
  std::uint64_t round_ = 0;  // graph instantiations of this generation (threads: the round every rank waits in)
  std::uint64_t captures_ = 0, launches_ = 0, evictions_ = 0;
  // Destroyed in reverse: graphs, then the communicator, the bootstrap, and last the buffers its kernels used.
  std::unique_ptr<rank_buffers> buf_;
  std::unique_ptr<Boot> boot_;
  std::unique_ptr<Comm> comm_;
  graph_cache graphs_;
};

}  // namespace

std::string gpu_unavailable() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no usable CUDA GPU (") + cudaGetErrorString(e) + ")";
  if (n == 0) return "no CUDA GPU on this machine";
  return {};
}

int run_gpu_rank(const config& cfg) {
  const char* env_rank = std::getenv("ROCENANTE_RANK");
  if (const std::string why = gpu_unavailable(); !why.empty()) {
    std::fprintf(stderr, "rocenante-soak rank %s: --gpu: %s: nothing ran\n", env_rank ? env_rank : "?", why.c_str());
    return 77;
  }
  int device = 0;
  try {
    const bootstrap::tcp_config t = bootstrap::tcp_config_from_env();
    int visible = 1;
    ROCENANTE_CUDA_CHECK(cudaGetDeviceCount(&visible));
    device = (t.local_rank >= 0 ? t.local_rank : t.rank) % visible;
    gpu_executor<gpu::selected_communicator, bootstrap::tcp> ex(cfg, device, t.rank, nullptr);
    return run_rank(cfg, ex);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rocenante-soak rank %s: %s\n", env_rank ? env_rank : "?", e.what());
    return 1;
  }
}

std::unique_ptr<executor> make_gpu_thread_executor(const config& cfg, int rank, thread_world& tw) {
  return std::make_unique<gpu_executor<gpu::communicator<transport::cuda_loopback>, bootstrap::in_process>>(cfg, 0, rank, &tw);
}

}  // namespace rocenante::soak

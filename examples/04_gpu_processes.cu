// examples/04_gpu_processes.cu — GPU ranks as processes, one per GPU (or several on one GPU), started by any
// launcher without MPI: the set-up an inference engine copies. bootstrap::tcp carries the set-up exchange (rank 0's
// address from ROCENANTE_BOOTSTRAP, or torchrun's MASTER_ADDR / MASTER_PORT + 1); the ranks decide the transport
// together (gpu::selected_communicator: ROCENANTE_TRANSPORT, unset = auto: cuda_ipc when every rank is on one node,
// else ibverbs, else nccl; rank 0 prints the decision); then bf16 all-reduces with one_shot and ring at three sizes
// and an fp32 all-gather, each checked against the exact result and compared byte for byte across ranks (a hash of
// every output, gathered through the bootstrap), and the same all-reduce captured in a CUDA graph and replayed.
//
//   torchrun --no-python --nproc-per-node=4 build/examples/04_gpu_processes
//       4 processes; each takes GPU LOCAL_RANK % (GPUs visible): one per GPU on a 4-GPU server, all on GPU 0 on a
//       one-GPU machine (then kernels of different processes time-slice unless MPS runs: correct, not fast)
//   for r in 0 1; do ROCENANTE_BOOTSTRAP=127.0.0.1:29600 ROCENANTE_RANK=$r ROCENANTE_WORLD_SIZE=2
//       build/examples/04_gpu_processes & done; wait        (one command line)
//   ROCENANTE_TRANSPORT=socket ...   the whole proxy path (kernel -> host-mapped staging -> proxy -> TCP -> peer)
//
// Every rank ends with "rank r/n: PASS" (exit 0) or "FAIL" (exit 1); "SKIP: <reason>" (exit 77) without a GPU.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include <rocenante/bootstrap/tcp.hpp>
#include <rocenante/gpu/select.hpp>

// ---- configuration ----------------------------------------------------------------------------------------
constexpr std::size_t   counts[]       = {1, 4099, 24576};  // bf16 elements per rank: one; not a multiple of the
                                                            // 16-byte packet; 48 KiB (a decode step's all-reduce)
constexpr std::size_t   gather_count   = 1000;              // fp32 all-gather: elements per rank
constexpr std::size_t   capacity_bytes = 1 << 20;           // largest input of one rank, the same on every rank
constexpr std::uint64_t timeout_ms     = 60000;             // bound on every wait (time-sliced processes are slow)
constexpr int           graph_replays  = 10;
// Rank r contributes a small integer in [-4, 4] at element i: every sum of up to 16 ranks is exact in bf16.
inline float value(int rank, std::size_t i) { return static_cast<float>(static_cast<int>((i * 7 + rank * 3) % 9) - 4); }

using namespace rocenante;

namespace {

std::uint64_t fnv(const void* p, std::size_t n, std::uint64_t h) {
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}

#define CHECK_CUDA(call)                                                                           \
  do {                                                                                             \
    const cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(e_)); \
  } while (0)

/// One bf16 all-reduce of `count` elements with algorithm A (or, with `graph`, captured once and replayed), checked
/// exactly; folds the output into `hash`. Returns an empty string or what went wrong.
template <class A>
std::string all_reduce_case(gpu::selected_communicator& comm, std::size_t count, bool graph, cudaStream_t s,
                            std::uint64_t& hash) {
  const int me = comm.rank(), n = comm.size();
  std::vector<__nv_bfloat16> in(count), out(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = __float2bfloat16(value(me, i));
  __nv_bfloat16 *din = nullptr, *dout = nullptr;
  CHECK_CUDA(cudaMalloc(&din, count * sizeof(__nv_bfloat16)));
  CHECK_CUDA(cudaMalloc(&dout, count * sizeof(__nv_bfloat16)));
  // On the collective's stream: a plain cudaMemcpy from pageable memory may return before its copy lands, and a
  // non-blocking stream is not ordered after it, so the collective could read the buffer before it is written.
  CHECK_CUDA(cudaMemcpyAsync(din, in.data(), count * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice, s));
  std::string why;
  if (!graph) {
    if (comm.all_reduce(din, dout, count, s, A{}) != status::ok) why = comm.last_error();
  } else {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    const status st = comm.all_reduce(din, dout, count, s, A{});
    CHECK_CUDA(cudaStreamEndCapture(s, &g));
    if (st != status::ok) why = comm.last_error();
    else {
      CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
      for (int k = 0; k < graph_replays; ++k) CHECK_CUDA(cudaGraphLaunch(exec, s));  // sequence read on the device
      CHECK_CUDA(cudaGraphExecDestroy(exec));
    }
    CHECK_CUDA(cudaGraphDestroy(g));
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  if (why.empty()) {
    if (const host::health h = comm.check_health(); !h.ok()) why = h.message;
  }
  CHECK_CUDA(cudaMemcpy(out.data(), dout, count * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < count && why.empty(); ++i) {
    float want = 0;
    for (int q = 0; q < n; ++q) want += value(q, i);
    if (__bfloat162float(out[i]) != want)
      why = "element " + std::to_string(i) + " is " + std::to_string(__bfloat162float(out[i])) + ", expected " +
            std::to_string(want);
  }
  hash = fnv(out.data(), count * sizeof(__nv_bfloat16), hash);
  cudaFree(din);
  cudaFree(dout);
  return why;
}

int run() {
  bootstrap::tcp boot = bootstrap::tcp::from_env();  // config_error naming the variable when one is missing
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::printf("SKIP: no usable CUDA GPU on this machine; rank %d of %d exits\n", boot.rank(), boot.size());
    return 77;
  }
  const int device = (boot.local_rank() >= 0 ? boot.local_rank() : boot.rank()) % gpus;
  CHECK_CUDA(cudaSetDevice(device));
  options opts = gpu::default_options();
  opts.capacity_bytes = capacity_bytes;
  opts.timeout_ns = timeout_ms * 1'000'000ull;
  gpu::selected_communicator comm(boot, opts);  // collective; throws on every rank alike when nothing is usable
  const int me = comm.rank(), n = comm.size();
  if (me == 0) std::printf("decision: %s\n", comm.selected().summary().c_str());

  cudaStream_t s = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::uint64_t hash = 1469598103934665603ull;
  bool ok = true;
  auto report = [&](const std::string& what, const std::string& why) {
    if (me == 0 || !why.empty()) std::printf("rank %d: %-34s %s\n", me, what.c_str(), why.empty() ? "exact" : why.c_str());
    ok = ok && why.empty();
  };
  for (std::size_t count : counts) {
    report("bf16 one_shot x " + std::to_string(count), all_reduce_case<algorithm::one_shot>(comm, count, false, s, hash));
    report("bf16 ring x " + std::to_string(count), all_reduce_case<algorithm::ring>(comm, count, false, s, hash));
  }
  report("bf16 one_shot x 24576, CUDA graph x " + std::to_string(graph_replays),
         all_reduce_case<algorithm::one_shot>(comm, 24576, true, s, hash));
  {  // all-gather: out[q * count + i] is rank q's element i
    std::vector<float> in(gather_count), out(gather_count * n);
    for (std::size_t i = 0; i < gather_count; ++i) in[i] = value(me, i);
    float *din = nullptr, *dout = nullptr;
    CHECK_CUDA(cudaMalloc(&din, in.size() * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&dout, out.size() * sizeof(float)));
    CHECK_CUDA(cudaMemcpyAsync(din, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice, s));
    std::string why;
    if (comm.all_gather(din, dout, gather_count, s) != status::ok) why = comm.last_error();
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK_CUDA(cudaMemcpy(out.data(), dout, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (std::size_t k = 0; k < out.size() && why.empty(); ++k)
      if (out[k] != value(static_cast<int>(k / gather_count), k % gather_count)) why = "element " + std::to_string(k) + " wrong";
    hash = fnv(out.data(), out.size() * sizeof(float), hash);
    report("fp32 all_gather x " + std::to_string(gather_count), why);
    cudaFree(din);
    cudaFree(dout);
  }
  // Byte-identical across ranks: every rank's hash of every output, through the bootstrap.
  std::vector<std::uint64_t> hashes(static_cast<std::size_t>(n));
  boot.all_gather(&hash, hashes.data(), sizeof hash);
  for (int q = 0; q < n; ++q)
    if (hashes[q] != hashes[0]) {
      std::printf("rank %d: outputs of rank %d differ in bytes from rank 0's\n", me, q);
      ok = false;
    }
  boot.barrier();  // no rank tears down while a peer still reads its window
  cudaStreamDestroy(s);
  std::printf("rank %d/%d: %s\n", me, n, ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
}

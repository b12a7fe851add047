// GPU suite, ranks as processes on one GPU: this program re-executes itself once per rank (`--rank SCENARIO`, as
// tests/host/test_multiprocess.cpp does; rank, size and rank 0's address in ROCENANTE_RANK / ROCENANTE_WORLD_SIZE /
// ROCENANTE_BOOTSTRAP), every rank builds gpu::selected_communicator with ROCENANTE_TRANSPORT forced to cuda_ipc
// (GPU windows mapped between the processes) or socket (the proxy path over TCP, host-mapped windows), and the
// parent checks what each rank printed and how it exited:
//   - N = 2 and 4: fp32/fp16/bf16 one_shot, two_shot, ring and all-gather at counts 1, 7, 1003 (not a whole packet),
//     8 KiB, 48 KiB and 4 MiB, exact against a reference each rank computes and byte-identical across processes (hashes);
//     1,000 mixed collectives (same seed on every rank); 100 CUDA-graph replays of four collectives with inputs
//     changed in place between replays, with programmatic launch off and on; the start-up decision line;
//   - N = 4: rank 2 raises SIGKILL after 50 collectives; every survivor reports rank 2 within timeout + 1 s and
//     exits 0 after its communicator's destructor returned;
//   - N = 4, recovery (docs/operations.md "After a failure", as the host suite's case): rank 2 raises SIGKILL after
//     50 replays of a CUDA graph and the parent starts a replacement rank 2 at once; every survivor names rank 2,
//     finds the failed replay's output NaN or its own sum (never the previous step's) and failures() up by one,
//     drains its stream (bounded), destroys the graph, the communicator and the bootstrap, and with the
//     replacement builds generation 1 (bootstrap on rank 0's port + 1, a new gpu::selected_communicator) within
//     10 s of the failure; then all four run the 1,000 mixed collectives and 20 replays of a new graph, exact and
//     byte-identical (the replacement included);
//   - N = 2, ROCENANTE_TRANSPORT=auto and the test build's fault plan (bootstrap/vote.hpp, ROCENANTE_TEST_FAULT): a
//     fault at each step of cuda_ipc's set-up on rank 1 lands both ranks on the same next transport (socket where
//     there is no RDMA device) with the same reason, never a bootstrap error; cuda_ipc and socket both failing
//     leave nccl, on which both ranks run or both fail alike.
// Without MPS the processes time-slice the GPU (a rank's kernel spins until its peers' slices come): correctness
// only, never speed; the program prints whether an MPS daemon was running. It never starts MPS itself.
//
// The parent never touches CUDA (fork after CUDA initialisation is undefined): it learns whether a GPU exists from
// a child (`--rank probe`) and exits 77 with the child's reason where there is none.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime.h>
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <rocenante/bootstrap/tcp.hpp>
#include <rocenante/gpu/select.hpp>

#include "../host/processes.hpp"
#include "gpu_test.hpp"

using namespace rocenante;
using namespace rtest;

namespace {

// ---- the ranks ------------------------------------------------------------------------------------------------

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// What a call runs: a named algorithm, the configured one (ROCENANTE_ALGO, auto by size), or an all-gather.
enum class op { one_shot, ring, automatic, gather, two_shot };
const char* op_name(op k) {
  switch (k) {
    case op::one_shot: return "one_shot";
    case op::ring: return "ring";
    case op::automatic: return "auto";
    case op::gather: return "all_gather";
    case op::two_shot: return "two_shot";
  }
  return "?";
}

template <class T>
status launch(gpu::selected_communicator& c, op k, const T* in, T* out, std::size_t count, cudaStream_t s) {
  switch (k) {
    case op::one_shot: return c.all_reduce(in, out, count, s, algorithm::one_shot{});
    case op::ring: return c.all_reduce(in, out, count, s, algorithm::ring{});
    case op::automatic: return c.all_reduce(in, out, count, s);
    case op::gather: return c.all_gather(in, out, count, s);
    case op::two_shot: return c.all_reduce(in, out, count, s, algorithm::two_shot{});
  }
  return status::internal;
}

/// Device and pinned host buffers of one rank, allocated before the communicator exists: after set-up a rank
/// makes no device-synchronising call (docs/api.md §5), only async copies and its own stream's synchronize.
struct rank_buffers {
  std::size_t capacity = 0;  ///< bytes of one rank's input
  void *din = nullptr, *dout = nullptr, *hin = nullptr, *hout = nullptr;
  cudaStream_t stream = nullptr;
  rank_buffers(std::size_t cap, int n) : capacity(cap) {
    const std::size_t out_bytes = cap * static_cast<std::size_t>(n);
    if (cudaMalloc(&din, cap) != cudaSuccess || cudaMalloc(&dout, out_bytes) != cudaSuccess ||
        cudaMallocHost(&hin, cap) != cudaSuccess || cudaMallocHost(&hout, out_bytes) != cudaSuccess ||
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
      throw std::runtime_error("buffer allocation failed: " + std::string(cudaGetErrorString(cudaGetLastError())));
  }
  ~rank_buffers() {
    if (stream) cudaStreamDestroy(stream);
    cudaFree(din);
    cudaFree(dout);
    cudaFreeHost(hin);
    cudaFreeHost(hout);
  }
};

/// One collective of `count` elements of T, synchronised and checked exactly; folds the output into `hash`.
template <class T>
std::string one_call(gpu::selected_communicator& c, rank_buffers& b, op k, std::size_t count, int round,
                     std::uint64_t& hash) {
  const int n = c.size(), me = c.rank();
  const std::size_t out_count = k == op::gather ? count * static_cast<std::size_t>(n) : count;
  T* hin = static_cast<T*>(b.hin);
  T* hout = static_cast<T*>(b.hout);
  for (std::size_t i = 0; i < count; ++i) hin[i] = exact_input<T>(me, i, round);
  cudaMemcpyAsync(b.din, hin, count * sizeof(T), cudaMemcpyHostToDevice, b.stream);
  cudaMemsetAsync(b.dout, 0xff, out_count * sizeof(T), b.stream);  // poison: every element must be written
  const status st = launch<T>(c, k, static_cast<const T*>(b.din), static_cast<T*>(b.dout), count, b.stream);
  if (st != status::ok) return std::string("status ") + to_string(st) + ": " + c.last_error();
  cudaMemcpyAsync(hout, b.dout, out_count * sizeof(T), cudaMemcpyDeviceToHost, b.stream);
  if (const cudaError_t e = cudaStreamSynchronize(b.stream); e != cudaSuccess)
    return std::string("cudaStreamSynchronize: ") + cudaGetErrorString(e);
  if (const host::health h = c.check_health(); !h.ok()) return "health: " + h.message;
  if (std::string w = check_exact(hout, n, count, round, k == op::gather); !w.empty()) return w;
  hash = fnv(hout, out_count * sizeof(T), hash);
  return {};
}

template <class T>
const char* dtype_name() {
  return std::is_same_v<T, float> ? "fp32" : std::is_same_v<T, __half> ? "fp16" : "bf16";
}

/// Every dtype x {one_shot, two_shot, ring, all-gather} x counts 1, 7, 1003, 8 KiB, 48 KiB, 4 MiB.
template <class T>
std::string sweep(gpu::selected_communicator& c, rank_buffers& b, int& calls, std::uint64_t& hash) {
  const std::size_t counts[] = {1, 7, 1003, (8u << 10) / sizeof(T), (48u << 10) / sizeof(T), (4u << 20) / sizeof(T)};
  for (std::size_t count : counts)
    for (op k : {op::one_shot, op::two_shot, op::ring, op::gather}) {
      if (std::string w = one_call<T>(c, b, k, count, calls, hash); !w.empty())
        return std::string(dtype_name<T>()) + " " + op_name(k) + " count " + std::to_string(count) + ": " + w;
      ++calls;
    }
  return {};
}

/// 1,000 collectives whose dtype, operation and count come from one seed, the same on every rank.
std::string mixed(gpu::selected_communicator& c, rank_buffers& b, int& calls, std::uint64_t& hash) {
  std::mt19937 rng(2026);
  for (int j = 0; j < 1000; ++j) {
    const int dtype = static_cast<int>(rng() % 3);
    const op k = static_cast<op>(rng() % 5);
    const int size_class = static_cast<int>(rng() % 8);
    std::size_t count = 0;
    if (size_class == 0) count = 1 + rng() % 16;
    else if (size_class == 6) count = 4096;  // 8 KiB of a 16-bit type: the decode size
    else if (size_class == 7) count = 1 + rng() % 100000;
    else count = 1 + rng() % 6000;
    std::string w;
    if (dtype == 0) w = one_call<float>(c, b, k, count, calls, hash);
    else if (dtype == 1) w = one_call<__half>(c, b, k, count, calls, hash);
    else w = one_call<__nv_bfloat16>(c, b, k, count, calls, hash);
    if (!w.empty())
      return "mixed call " + std::to_string(j) + " (" + (dtype == 0 ? "fp32" : dtype == 1 ? "fp16" : "bf16") + " " +
             op_name(k) + " count " + std::to_string(count) + "): " + w;
    ++calls;
  }
  return {};
}

/// Sets programmatic launch on whichever GPU communicator the vote built (a rank-local setting).
void set_pdl(gpu::selected_communicator& c, bool on) {
  if (auto* p = c.get<gpu::selected_communicator::ipc_comm>()) p->set_programmatic_launch(on);
  if (auto* p = c.get<gpu::selected_communicator::socket_comm>()) p->set_programmatic_launch(on);
}

/// Four collectives captured into one graph (bf16 auto 8 KiB, fp32 ring 48 KiB + 3, fp16 all-gather 1000, fp32
/// one_shot 7), replayed `replays` times; before each replay new inputs are copied into the same buffers outside
/// the graph, and after it every output is checked. Buffers are allocated before the communicator (`b` is used
/// only for staging).
struct graph_buffers {
  static constexpr std::size_t c_bf16 = 4096, c_ring = 12288 + 3, c_gather = 1000, c_small = 7;
  void *in[4] = {}, *out[4] = {}, *hin[4] = {}, *hout[4] = {};
  explicit graph_buffers(int n) {
    const std::size_t in_bytes[4] = {c_bf16 * 2, c_ring * 4, c_gather * 2, c_small * 4};
    const std::size_t out_bytes[4] = {c_bf16 * 2, c_ring * 4, c_gather * 2 * static_cast<std::size_t>(n), c_small * 4};
    for (int j = 0; j < 4; ++j)
      if (cudaMalloc(&in[j], in_bytes[j]) != cudaSuccess || cudaMalloc(&out[j], out_bytes[j]) != cudaSuccess ||
          cudaMallocHost(&hin[j], in_bytes[j]) != cudaSuccess || cudaMallocHost(&hout[j], out_bytes[j]) != cudaSuccess)
        throw std::runtime_error("graph buffer allocation failed");
  }
  ~graph_buffers() {
    for (int j = 0; j < 4; ++j) {
      cudaFree(in[j]);
      cudaFree(out[j]);
      cudaFreeHost(hin[j]);
      cudaFreeHost(hout[j]);
    }
  }
};

/// A CUDA graph of what `launches()` submits on `s` (it returns "" or what failed), instantiated; empty when
/// capture failed (then `capture` returns why).
struct captured_graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  captured_graph() = default;
  captured_graph(const captured_graph&) = delete;
  captured_graph& operator=(const captured_graph&) = delete;
  ~captured_graph() { reset(); }
  /// Destroys the graph: a graph that captured a communicator's collectives holds that communicator's windows and
  /// device state, so it goes before the communicator (and is captured again on a new one).
  void reset() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    exec = nullptr;
    graph = nullptr;
  }
  template <class F>
  std::string capture(cudaStream_t s, F&& launches) {
    reset();
    if (cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal); e != cudaSuccess)
      return std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(e);
    const std::string launched = launches();
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    if (!launched.empty()) {
      reset();
      return launched;
    }
    if (end != cudaSuccess) return std::string("cudaStreamEndCapture: ") + cudaGetErrorString(end);
    if (cudaError_t e = cudaGraphInstantiate(&exec, graph, 0); e != cudaSuccess) {
      reset();
      return std::string("cudaGraphInstantiate: ") + cudaGetErrorString(e);
    }
    return {};
  }
};

std::string graph_replay(gpu::selected_communicator& c, graph_buffers& g, cudaStream_t s, int replays, bool pdl,
                         std::uint64_t& hash) {
  using gb = graph_buffers;
  const int n = c.size(), me = c.rank();
  set_pdl(c, pdl);
  captured_graph cg;
  const std::string captured = cg.capture(s, [&]() -> std::string {
    const status st[4] = {
        launch<__nv_bfloat16>(c, op::automatic, static_cast<__nv_bfloat16*>(g.in[0]), static_cast<__nv_bfloat16*>(g.out[0]), gb::c_bf16, s),
        launch<float>(c, op::ring, static_cast<float*>(g.in[1]), static_cast<float*>(g.out[1]), gb::c_ring, s),
        launch<__half>(c, op::gather, static_cast<__half*>(g.in[2]), static_cast<__half*>(g.out[2]), gb::c_gather, s),
        launch<float>(c, op::one_shot, static_cast<float*>(g.in[3]), static_cast<float*>(g.out[3]), gb::c_small, s)};
    for (int j = 0; j < 4; ++j)
      if (st[j] != status::ok) return "captured collective " + std::to_string(j) + ": status " + to_string(st[j]) + ": " + c.last_error();
    return {};
  });
  if (!captured.empty()) {
    set_pdl(c, false);
    return captured;
  }
  cudaGraphExec_t exec = cg.exec;
  std::string why;
  const std::size_t in_bytes[4] = {gb::c_bf16 * 2, gb::c_ring * 4, gb::c_gather * 2, gb::c_small * 4};
  const std::size_t out_bytes[4] = {gb::c_bf16 * 2, gb::c_ring * 4, gb::c_gather * 2 * static_cast<std::size_t>(n), gb::c_small * 4};
  for (int rep = 0; rep < replays && why.empty(); ++rep) {
    const int round = 5000 + rep * 4;  // a different input for each collective and replay
    for (std::size_t i = 0; i < gb::c_bf16; ++i) static_cast<__nv_bfloat16*>(g.hin[0])[i] = exact_input<__nv_bfloat16>(me, i, round);
    for (std::size_t i = 0; i < gb::c_ring; ++i) static_cast<float*>(g.hin[1])[i] = exact_input<float>(me, i, round + 1);
    for (std::size_t i = 0; i < gb::c_gather; ++i) static_cast<__half*>(g.hin[2])[i] = exact_input<__half>(me, i, round + 2);
    for (std::size_t i = 0; i < gb::c_small; ++i) static_cast<float*>(g.hin[3])[i] = exact_input<float>(me, i, round + 3);
    for (int j = 0; j < 4; ++j) {
      cudaMemcpyAsync(g.in[j], g.hin[j], in_bytes[j], cudaMemcpyHostToDevice, s);
      cudaMemsetAsync(g.out[j], 0xff, out_bytes[j], s);
    }
    if (cudaError_t e = cudaGraphLaunch(exec, s); e != cudaSuccess) {
      why = std::string("cudaGraphLaunch: ") + cudaGetErrorString(e);
      break;
    }
    for (int j = 0; j < 4; ++j) cudaMemcpyAsync(g.hout[j], g.out[j], out_bytes[j], cudaMemcpyDeviceToHost, s);
    if (cudaError_t e = cudaStreamSynchronize(s); e != cudaSuccess) {
      why = std::string("cudaStreamSynchronize: ") + cudaGetErrorString(e);
      break;
    }
    if (const host::health h = c.check_health(); !h.ok()) {
      why = "health: " + h.message;
      break;
    }
    std::string w = check_exact(static_cast<__nv_bfloat16*>(g.hout[0]), n, gb::c_bf16, round, false);
    if (w.empty()) w = check_exact(static_cast<float*>(g.hout[1]), n, gb::c_ring, round + 1, false);
    if (w.empty()) w = check_exact(static_cast<__half*>(g.hout[2]), n, gb::c_gather, round + 2, true);
    if (w.empty()) w = check_exact(static_cast<float*>(g.hout[3]), n, gb::c_small, round + 3, false);
    if (!w.empty()) why = "replay " + std::to_string(rep) + ": " + w;
    for (int j = 0; j < 4 && why.empty(); ++j) hash = fnv(g.hout[j], out_bytes[j], hash);
  }
  cg.reset();
  set_pdl(c, false);
  return why;
}

/// In-place path over cuda_ipc (options::symmetric_bytes): for fp32 and bf16 at 16 B, 48 KiB and 1 MiB + 32 B, this
/// rank's input summed once from an ordinary buffer (staged) and once from its symmetric area (read in place by
/// every peer): the two results must be the same bytes. Counts the in-place calls; folds their outputs into `hash`.
template <class T, class Comm>
std::string inplace_check(Comm& c, rank_buffers& b, int& calls, std::uint64_t& hash) {
  const std::span<std::byte> sym = c.symmetric_input();
  if (sym.empty()) return "no symmetric input area";
  void* dstaged = nullptr;
  if (cudaMalloc(&dstaged, b.capacity) != cudaSuccess) return "cudaMalloc failed";
  std::vector<std::byte> staged(b.capacity);
  std::string why;
  for (std::size_t bytes : {std::size_t{16}, std::size_t{49152}, (std::size_t{1} << 20) + 32}) {
    const std::size_t count = bytes / sizeof(T);
    T* hin = static_cast<T*>(b.hin);
    for (std::size_t i = 0; i < count; ++i) hin[i] = T(float(int((i * 7 + std::size_t(c.rank()) * 13) % 29) - 14));
    cudaMemcpyAsync(b.din, hin, bytes, cudaMemcpyHostToDevice, b.stream);
    cudaMemcpyAsync(sym.data(), hin, bytes, cudaMemcpyHostToDevice, b.stream);
    status st = c.all_reduce(static_cast<const T*>(b.din), static_cast<T*>(dstaged), count, b.stream, algorithm::one_shot{});
    if (st == status::ok)
      st = c.all_reduce(reinterpret_cast<const T*>(sym.data()), static_cast<T*>(b.dout), count, b.stream, algorithm::one_shot{});
    cudaMemcpyAsync(staged.data(), dstaged, bytes, cudaMemcpyDeviceToHost, b.stream);
    cudaMemcpyAsync(b.hout, b.dout, bytes, cudaMemcpyDeviceToHost, b.stream);
    const cudaError_t e = cudaStreamSynchronize(b.stream);
    if (st != status::ok || e != cudaSuccess) {
      why = std::string("status ") + to_string(st) + ", cuda " + cudaGetErrorString(e) + " at " + std::to_string(bytes) + " bytes";
      break;
    }
    if (std::memcmp(b.hout, staged.data(), bytes) != 0) {
      why = "in-place bytes differ from the staged path's at " + std::to_string(bytes) + " bytes";
      break;
    }
    ++calls;
    hash = fnv(b.hout, bytes, hash);
  }
  cudaFree(dstaged);
  return why;
}

/// The rank's GPU: device 0 (the acceptance runs every rank on the one GPU).
void use_gpu() {
  if (cudaError_t e = cudaSetDevice(0); e != cudaSuccess)
    throw std::runtime_error(std::string("cudaSetDevice(0): ") + cudaGetErrorString(e));
}

/// Correctness of one world: the vote, the sweep of every dtype, 1,000 mixed calls, graph replays (PDL off, on).
int rank_world() {
  use_gpu();
  bootstrap::tcp boot = bootstrap::tcp::from_env();
  const int n = boot.size();
  constexpr std::size_t capacity = 4u << 20;  // the largest call: 4 MiB per rank
  rank_buffers b(capacity, n);
  graph_buffers g(n);
  options o = gpu::default_options();
  o.capacity_bytes = capacity;  // ROCENANTE_TIMEOUT_MS from the parent sets the bound
  // ROCENANTE_TEST_LAMPORT_MAX_BYTES: options::lamport_max_bytes (the Lamport path for decode-size one-shot calls)
  if (const char* e = std::getenv("ROCENANTE_TEST_LAMPORT_MAX_BYTES")) o.lamport_max_bytes = std::strtoull(e, nullptr, 10);
  // ROCENANTE_TEST_SYMMETRIC_BYTES: options::symmetric_bytes (cuda_ipc: the in-place path's check, inplace_check)
  if (const char* e = std::getenv("ROCENANTE_TEST_SYMMETRIC_BYTES")) o.symmetric_bytes = std::strtoull(e, nullptr, 10);
  const auto t0 = std::chrono::steady_clock::now();
  {
    gpu::selected_communicator c(boot, o);
    std::printf("transport=%s\ndecision=%s\nsetup_seconds=%.3f\n", host::to_string(c.transport()),
                c.selected().summary().c_str(), since(t0));
    if (auto* ipc = c.get<gpu::selected_communicator::ipc_comm>())  // which kernel a 48 KiB bf16 one-shot call runs
      std::printf("path_48k=%d\n", static_cast<int>(ipc->path_for<__nv_bfloat16>(24576)));
    auto fail = [&](const char* phase, const std::string& why) {
      std::printf("failed=%s: %s\n", phase, why.c_str());
      return 1;
    };
    int calls = 0;
    std::uint64_t h = 1469598103934665603ull;
    auto t = std::chrono::steady_clock::now();
    if (std::string w = sweep<float>(c, b, calls, h); !w.empty()) return fail("sweep", w);
    if (std::string w = sweep<__half>(c, b, calls, h); !w.empty()) return fail("sweep", w);
    if (std::string w = sweep<__nv_bfloat16>(c, b, calls, h); !w.empty()) return fail("sweep", w);
    std::printf("sweep_calls=%d\nsweep_hash=%016llx\nsweep_seconds=%.3f\n", calls, static_cast<unsigned long long>(h), since(t));
    h = 1469598103934665603ull;
    const int before = calls;
    t = std::chrono::steady_clock::now();
    if (std::string w = mixed(c, b, calls, h); !w.empty()) return fail("mixed", w);
    std::printf("mixed_calls=%d\nmixed_hash=%016llx\nmixed_seconds=%.3f\n", calls - before, static_cast<unsigned long long>(h), since(t));
    for (const bool pdl : {false, true}) {
      h = 1469598103934665603ull;
      t = std::chrono::steady_clock::now();
      if (std::string w = graph_replay(c, g, b.stream, 100, pdl, h); !w.empty()) return fail(pdl ? "graph_pdl" : "graph", w);
      std::printf("%s_replays=100\n%s_hash=%016llx\n%s_seconds=%.3f\n", pdl ? "graph_pdl" : "graph", pdl ? "graph_pdl" : "graph",
                  static_cast<unsigned long long>(h), pdl ? "graph_pdl" : "graph", since(t));
    }
    if (o.symmetric_bytes != 0) {
      auto* ipc = c.get<gpu::selected_communicator::ipc_comm>();
      if (!ipc) return fail("inplace", "the world is not on cuda_ipc");
      int ip_calls = 0;
      h = 1469598103934665603ull;
      if (std::string w = inplace_check<float>(*ipc, b, ip_calls, h); !w.empty()) return fail("inplace", w);
      if (std::string w = inplace_check<__nv_bfloat16>(*ipc, b, ip_calls, h); !w.empty()) return fail("inplace", w);
      std::printf("inplace_calls=%d\ninplace_hash=%016llx\n", ip_calls, static_cast<unsigned long long>(h));
    }
    if (const host::health hh = c.check_health(); !hh.ok()) return fail("health", hh.message);
  }
  std::printf("teardown=ok\n");
  return 0;
}

/// Rank 2 kills itself with SIGKILL before its 51st collective; the others report it by name within the timeout
/// (ROCENANTE_TIMEOUT_MS) + 1 s, and their communicator's destructor returns.
int rank_kill() {
  use_gpu();
  bootstrap::tcp boot = bootstrap::tcp::from_env();
  constexpr std::size_t count = 1024;
  rank_buffers b(count * sizeof(float), boot.size());
  options o = gpu::default_options();
  o.capacity_bytes = 64 << 10;
  {
    gpu::selected_communicator c(boot, o);
    std::printf("transport=%s\n", host::to_string(c.transport()));
    float* hin = static_cast<float*>(b.hin);
    float* hout = static_cast<float*>(b.hout);
    for (std::size_t i = 0; i < count; ++i) hin[i] = 1.0f;
    cudaMemcpyAsync(b.din, hin, count * sizeof(float), cudaMemcpyHostToDevice, b.stream);
    auto last_ok = std::chrono::steady_clock::now();
    for (int k = 0;; ++k) {
      if (c.rank() == 2 && k == 50) ::raise(SIGKILL);
      const status st = c.all_reduce(static_cast<const float*>(b.din), static_cast<float*>(b.dout), count, b.stream,
                                     algorithm::one_shot{});
      cudaMemcpyAsync(hout, b.dout, count * sizeof(float), cudaMemcpyDeviceToHost, b.stream);
      const cudaError_t e = cudaStreamSynchronize(b.stream);
      const host::health h = c.check_health();
      if (st != status::ok || !h.ok() || e != cudaSuccess) {
        std::printf("calls_ok=%d\nstatus=%s\ncuda=%s\nwaited=%.3f\nerror=%s\nhealth=%s\n", k, to_string(st),
                    cudaGetErrorString(e), since(last_ok), c.last_error().c_str(), h.message.c_str());
        break;
      }
      if (hout[0] != static_cast<float>(c.size()) || hout[count - 1] != static_cast<float>(c.size())) {
        std::printf("wrong=%g at call %d\n", hout[0], k);
        return 1;
      }
      last_ok = std::chrono::steady_clock::now();
      if (k > 100000) {
        std::printf("failed=rank 2 never died\n");
        return 1;
      }
    }
  }
  std::printf("teardown=ok\n");
  return 0;
}

/// Waits for the work on `s` by polling, at most `limit_s`: "" when it finished, else what went wrong. This rank's
/// kernels end by themselves at the protocol timeout, so the limit is reached only when that bound failed; the
/// caller must then not tear down (it would unmap windows a running kernel uses) and exits instead.
std::string wait_stream(cudaStream_t s, double limit_s) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return {};
    if (e != cudaErrorNotReady) return std::string("cudaStreamQuery: ") + cudaGetErrorString(e);
    if (since(t0) > limit_s) return "the stream's work still runs after " + std::to_string(limit_s) + " s";
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

/// Recovery after a lost rank, the calls docs/operations.md "After a failure" has an engine make, on the GPU.
/// Generation 0 replays a CUDA graph of one fp32 one_shot all-reduce of 1024 elements, as an engine's decode step
/// would: a new input copied in before each replay, the output never reset. Rank 2 raises SIGKILL before its 51st
/// replay and the parent starts a replacement rank 2 at once (ROCENANTE_REPLACEMENT=1). Each survivor:
///   1. notices: check_health() and failures() after the replay (its kernel ended by itself, at the protocol
///      timeout or on a peer's abort flag); what the failed replay left in `out` must be its own sum or NaN, never
///      the previous replay's;
///   2. tears down: its stream drained (a bounded wait: a kernel still running past the timeout ends the process
///      before anything is unmapped), the graph destroyed (it holds generation 0's windows and device state), then
///      the communicator — unmapping every peer's window, the dead rank's too (cuda_ipc maps VMM allocations, which
///      are reference-counted: no cudaIpcCloseMemHandle, and the dead process's exit cannot pull memory from under
///      a survivor) — and the bootstrap; CUDA must report no error afterwards;
///   (3. replacing the lost rank is the parent's part;)
///   4. with the replacement, rebuilds: a bootstrap on rank 0's port + 1 and a new gpu::selected_communicator, then
///      1,000 mixed collectives (mixed()) and 20 replays of a graph captured on the new communicator.
/// Buffers are allocated once, before generation 0 (the replacement's before generation 1), and kept: between
/// set-up and teardown a rank makes no device-synchronising call (the communicators' own set-up and teardown do).
/// Prints how long each step took, so that a failure on the GPU machine reads from the log alone.
int rank_recover() {
  const auto started = std::chrono::steady_clock::now();
  const bool replacement = std::getenv("ROCENANTE_REPLACEMENT") != nullptr;
  use_gpu();
  bootstrap::tcp_config cfg = bootstrap::tcp_config_from_env();
  const int n = cfg.size;
  constexpr std::size_t capacity = 512u << 10;  // the largest mixed call: 100,000 fp32 (400,000 bytes)
  rank_buffers b(capacity, n);
  graph_buffers g(n);
  options o = gpu::default_options();
  o.capacity_bytes = capacity;  // ROCENANTE_TIMEOUT_MS from the parent sets the bound
  const double timeout_s = static_cast<double>(env::settings::read().apply(o).timeout_ns) / 1e9;
  std::printf("replacement=%d\ntimeout_seconds=%.3f\ncuda_ready_seconds=%.3f\n", replacement ? 1 : 0, timeout_s,
              since(started));
  auto fail = [](const char* phase, const std::string& why) {
    std::printf("failed=%s: %s\n", phase, why.c_str());
    return 1;
  };
  auto failed_at = started;
  if (!replacement) {
    auto boot = std::make_unique<bootstrap::tcp>(cfg);
    auto c = std::make_unique<gpu::selected_communicator>(*boot, o);
    std::printf("transport0=%s\n", host::to_string(c->transport()));
    constexpr std::size_t count = 1024;
    float* din = static_cast<float*>(b.din);
    float* dout = static_cast<float*>(b.dout);
    float* hin = static_cast<float*>(b.hin);
    float* hout = static_cast<float*>(b.hout);
    captured_graph step;
    if (std::string w = step.capture(b.stream, [&]() -> std::string {
          const status st = c->all_reduce(din, dout, count, b.stream, algorithm::one_shot{});
          return st == status::ok ? std::string() : std::string("status ") + to_string(st) + ": " + c->last_error();
        });
        !w.empty())
      return fail("capture", w);
    auto last_ok = std::chrono::steady_clock::now();
    for (int k = 0;; ++k) {
      if (c->rank() == 2 && k == 50) ::raise(SIGKILL);
      const float v = static_cast<float>(1 + k % 7), want = v * static_cast<float>(n);  // differs from the last step's
      for (std::size_t i = 0; i < count; ++i) hin[i] = v;
      cudaMemcpyAsync(din, hin, count * sizeof(float), cudaMemcpyHostToDevice, b.stream);
      const std::uint64_t failures_before = c->failures();
      const cudaError_t launched = cudaGraphLaunch(step.exec, b.stream);
      cudaMemcpyAsync(hout, dout, count * sizeof(float), cudaMemcpyDeviceToHost, b.stream);
      if (const std::string w = wait_stream(b.stream, timeout_s + 10); !w.empty()) {
        std::printf("failed=replay %d: %s\n", k, w.c_str());
        std::fflush(stdout);
        std::_Exit(5);  // no teardown under a running or faulted kernel
      }
      if (launched != cudaSuccess) return fail("replay", std::string("cudaGraphLaunch: ") + cudaGetErrorString(launched));
      const host::health h = c->check_health();
      if (h.ok() && c->failures() == failures_before) {
        for (std::size_t i = 0; i < count; ++i)
          if (hout[i] != want)
            return fail("replay", "replay " + std::to_string(k) + ": element " + std::to_string(i) + " is " +
                                      std::to_string(hout[i]) + ", expected " + std::to_string(want));
        last_ok = std::chrono::steady_clock::now();
        if (k > 100000) return fail("generation 0", "rank 2 never died");
        continue;
      }
      failed_at = std::chrono::steady_clock::now();
      std::size_t nan = 0;
      std::string out_check = "ok";  // every element this replay's sum or NaN (docs/api.md §1.1)
      for (std::size_t i = 0; i < count; ++i) {
        if (std::isnan(hout[i])) ++nan;
        else if (hout[i] != want && out_check == "ok")
          out_check = "element " + std::to_string(i) + " is " + std::to_string(hout[i]) + ", neither NaN nor this replay's sum " +
                      std::to_string(want);
      }
      std::printf("calls_ok=%d\nstatus=%s\nwaited=%.3f\nfailures=%llu\nout_nan_elements=%zu\nout_check=%s\nfailure=%s\n", k,
                  to_string(h.state), since(last_ok), static_cast<unsigned long long>(c->failures()), nan,
                  out_check.c_str(), h.message.c_str());
      break;
    }
    // Tear down behind a dead peer, in the order an engine must: nothing of this rank still runs, then the graph,
    // then the communicator, then the bootstrap.
    const auto t_down = std::chrono::steady_clock::now();
    if (const std::string w = wait_stream(b.stream, timeout_s + 10); !w.empty()) {
      std::printf("failed=teardown: %s\n", w.c_str());
      std::fflush(stdout);
      std::_Exit(5);
    }
    // What CUDA reported so far (a sticky error would show here; cudaErrorNotReady from the polls is none), cleared
    // so that cuda_after_close tells what teardown itself left.
    const cudaError_t before = cudaGetLastError();
    std::printf("drain_seconds=%.3f\ncuda_before_close=%s\n", since(t_down), cudaGetErrorString(before));
    step.reset();
    const auto t_close = std::chrono::steady_clock::now();
    c.reset();
    std::printf("close_seconds=%.3f\n", since(t_close));
    boot.reset();
    const cudaError_t after = cudaGetLastError();
    std::printf("teardown_seconds=%.3f\ncuda_after_close=%s\n", since(t_down), cudaGetErrorString(after));
    if (after != cudaSuccess) return fail("teardown", std::string("CUDA error after teardown: ") + cudaGetErrorString(after));
  }
  // Generation 1: survivors and the replacement, a fresh bootstrap (so no rank of the old world can join) and a
  // new communicator; the start-up vote runs again.
  cfg.port = static_cast<std::uint16_t>(cfg.port + 1);
  auto boot = std::make_unique<bootstrap::tcp>(cfg);
  auto c = std::make_unique<gpu::selected_communicator>(*boot, o);
  if (!replacement) std::printf("failed_ns=%lld\n", monotonic_ns(failed_at));
  std::printf("ready_ns=%lld\nrebuild_seconds=%.3f\ntransport=%s\n", monotonic_ns(), since(failed_at),
              host::to_string(c->transport()));
  int calls = 0;
  std::uint64_t h = 1469598103934665603ull;
  auto t = std::chrono::steady_clock::now();
  if (std::string w = mixed(*c, b, calls, h); !w.empty()) return fail("after the rebuild", w);
  std::printf("exact_after_rebuild=%d\nhash=%016llx\nmixed_seconds=%.3f\n", calls, static_cast<unsigned long long>(h), since(t));
  h = 1469598103934665603ull;
  t = std::chrono::steady_clock::now();
  if (std::string w = graph_replay(*c, g, b.stream, 20, false, h); !w.empty()) return fail("graph after the rebuild", w);
  std::printf("graph_after_rebuild=20\ngraph_hash=%016llx\ngraph_seconds=%.3f\n", static_cast<unsigned long long>(h), since(t));
  if (const host::health hh = c->check_health(); !hh.ok()) return fail("health", hh.message);
  t = std::chrono::steady_clock::now();
  c.reset();
  boot.reset();
  std::printf("teardown=ok\nclose1_seconds=%.3f\n", since(t));
  return 0;
}

/// The GPU start-up selection under the fault plan of ROCENANTE_TEST_FAULT (bootstrap/vote.hpp; every process reads
/// it, only the rank it names fails), then one exact all-reduce on what was chosen: prints the transport and the
/// reason, or the error set-up threw (exit 3), and every step this rank reached (steps=, '|' between).
int rank_select_fault() {
  use_gpu();
  bootstrap::tcp boot = bootstrap::tcp::from_env();
  options o = gpu::default_options();
  o.capacity_bytes = 1 << 20;
  auto steps = [&] {
    std::string all;
    for (const std::string& st : setup::testing::steps_seen(boot.rank())) all += (all.empty() ? "" : "|") + st;
    return all;
  };
  try {
    gpu::selected_communicator c(boot, o);
    std::printf("transport=%s\nreason=%s\nsteps=%s\n", host::to_string(c.transport()), c.selected().reason.c_str(),
                steps().c_str());
    constexpr std::size_t count = 4096;
    rank_buffers b(count * sizeof(float), boot.size());
    auto* in = static_cast<float*>(b.hin);
    auto* out = static_cast<float*>(b.hout);
    for (std::size_t i = 0; i < count; ++i) in[i] = float(boot.rank() + 1);
    cudaMemcpyAsync(b.din, in, count * sizeof(float), cudaMemcpyHostToDevice, b.stream);
    const status st = c.all_reduce(static_cast<const float*>(b.din), static_cast<float*>(b.dout), count, b.stream);
    cudaMemcpyAsync(out, b.dout, count * sizeof(float), cudaMemcpyDeviceToHost, b.stream);
    const bool ran = cudaStreamSynchronize(b.stream) == cudaSuccess;
    const float want = float(boot.size() * (boot.size() + 1) / 2);
    std::printf("all_reduce=%s\n", st == status::ok && ran && out[0] == want && out[count - 1] == want ? "ok" : "wrong");
    return 0;
  } catch (const error& e) {
    std::printf("error=%s\nkind=%s\nsteps=%s\n", e.what(), dynamic_cast<const transport_error*>(&e) ? "transport_error" : "other",
                steps().c_str());
    return 3;
  }
}

/// Whether this machine has a usable GPU (run in a child: the parent stays CUDA-free). 0: yes; 77: no.
int rank_probe() {
  if (const std::string why = gtest::no_gpu_reason(); !why.empty()) {
    std::printf("%s\n", why.c_str());
    return 77;
  }
  std::printf("GPU: %s; every rank runs on device 0\n", gtest::gpu_line().c_str());
  return 0;
}

int rank_main(const std::string& scenario) {
  // Line-buffered: a rank killed by the parent's limit still leaves what it printed so far.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // A lazy kernel load can wait for running kernels (docs/api.md §5); before the first CUDA call.
  ::setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  return run_scenario(scenario, {{"probe", rank_probe},
                                 {"world", rank_world},
                                 {"kill", rank_kill},
                                 {"recover", rank_recover},
                                 {"select_fault", rank_select_fault}});
}

// ---- the parent -----------------------------------------------------------------------------------------------

/// Runs `--rank probe` in a child and returns its exit code (77 with no GPU) and output; bounded by 120 s.
int probe_gpu(std::string& out) {
  char self[4096] = {};
  if (::readlink("/proc/self/exe", self, sizeof self - 1) <= 0) {
    out = "cannot read /proc/self/exe to start the probe";
    return 1;
  }
  int fds[2];
  if (::pipe(fds) != 0) {
    out = "pipe() failed for the probe";
    return 1;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    out = "fork() failed for the probe";
    return 1;
  }
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execl(self, self, "--rank", "probe", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    if (since(t0) > 120) {
      ::kill(pid, SIGKILL);
      out += "(the probe did not finish within 120 s)";
      break;
    }
    if (::poll(&p, 1, 1000) <= 0) continue;
    char buf[512];
    const ssize_t got = ::read(fds[0], buf, sizeof buf);
    if (got <= 0) break;
    out.append(buf, static_cast<std::size_t>(got));
  }
  ::close(fds[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/// Whether CUDA MPS serves this machine's processes: a control pipe in CUDA_MPS_PIPE_DIRECTORY (default
/// /tmp/nvidia-mps) and a running nvidia-cuda-mps-control or -server process. Nothing is started here.
bool mps_active(std::string& how) {
  const char* dir_env = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string dir = dir_env && *dir_env ? dir_env : "/tmp/nvidia-mps";
  const bool pipe = ::access((dir + "/control").c_str(), F_OK) == 0;
  bool daemon = false;
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      std::ifstream comm(std::string("/proc/") + e->d_name + "/comm");
      std::string name;
      std::getline(comm, name);
      if (name.rfind("nvidia-cuda-mps", 0) == 0) daemon = true;  // comm is cut at 15 characters
    }
    ::closedir(d);
  }
  bool binary = false;
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin";
  for (std::size_t at = 0; at <= path.size();) {
    const std::size_t colon = std::min(path.find(':', at), path.size());
    const std::string dirp = path.substr(at, colon - at);
    if (!dirp.empty() && ::access((dirp + "/nvidia-cuda-mps-control").c_str(), X_OK) == 0) binary = true;
    at = colon + 1;
  }
  how = std::string("nvidia-cuda-mps-control ") + (binary ? "found" : "not found") + " in PATH; control pipe " + dir +
        "/control " + (pipe ? "present" : "absent") + "; MPS daemon " + (daemon ? "running" : "not running");
  return pipe && daemon;
}

std::string mps_line() {
  std::string how;
  const bool on = mps_active(how);
  return on ? "MPS: active (" + how + "): the ranks' kernels run concurrently"
            : "MPS: not active (" + how + "): the processes time-slice the GPU, so this run checks correctness only";
}

/// A rank process's environment. CUDA_DEVICE_MAX_CONNECTIONS is removed: this program's main sets 32 for its ranks
/// as threads (gpu_main.hpp), but a rank that is a process has a context of its own, and under MPS every client's
/// work queues come out of one shared pool — 4 processes asking for 32 each left none for ranks 1-3, whose
/// cudaSetDevice failed with "out of memory" (docs/operations.md).
std::map<std::string, std::string> world_env(const std::string& transport, const std::string& timeout_ms) {
  return {{"ROCENANTE_TRANSPORT", transport},
          {"ROCENANTE_TIMEOUT_MS", timeout_ms},
          {"ROCENANTE_DEBUG", "INFO"},
          {"CUDA_MODULE_LOADING", "EAGER"},
          {"CUDA_DEVICE_MAX_CONNECTIONS", unset_variable}};
}

/// One world of `n` processes over `transport`: every check of the correctness scenario. `lamport`: with
/// options::lamport_max_bytes = 64 KiB (cuda_ipc: the decode-size one-shot calls take the Lamport path).
void check_world(const std::string& transport, int n, bool lamport = false) {
  MESSAGE(mps_line());
  // Generous bounds: without MPS a rank's kernel waits for its peers' time slices.
  auto env = world_env(transport, "60000");
  if (lamport) env["ROCENANTE_TEST_LAMPORT_MAX_BYTES"] = "65536";
  if (lamport) env["ROCENANTE_TEST_SYMMETRIC_BYTES"] = std::to_string((std::size_t{1} << 20) + 4096);  // and the in-place check
  const auto rs = run_world("world", n, n, env, {}, std::chrono::seconds(480));
  INFO(all_output(rs));
  REQUIRE(rs.size() == static_cast<std::size_t>(n));
  MESSAGE("rank 0's start-up decision: " << rs[0].value("decision"));
  MESSAGE("rank 0: set-up " << rs[0].value("setup_seconds") << " s, sweep " << rs[0].value("sweep_seconds")
                            << " s, 1,000 mixed " << rs[0].value("mixed_seconds") << " s, 100 graph replays "
                            << rs[0].value("graph_seconds") << " s (PDL on: " << rs[0].value("graph_pdl_seconds") << " s)");
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(rs[r].exit_code == 0);
    CHECK(rs[r].value("failed") == "");
    CHECK(rs[r].value("transport") == transport);
    // the start-up decision, logged once per rank at INFO
    CHECK(rs[r].out.find("ROCENANTE INFO transport " + transport + " (ROCENANTE_TRANSPORT=" + transport) != std::string::npos);
    CHECK(rs[r].value("sweep_calls") == "72");  // 3 dtypes x 6 counts x (one_shot, two_shot, ring, all-gather)
    CHECK(rs[r].value("mixed_calls") == "1000");
    CHECK(rs[r].value("graph_replays") == "100");
    CHECK(rs[r].value("graph_pdl_replays") == "100");
    for (const char* key : {"sweep_hash", "mixed_hash", "graph_hash", "graph_pdl_hash"}) {
      CAPTURE(key);
      CHECK(rs[r].value(key).size() == 16);
      CHECK(rs[r].value(key) == rs[0].value(key));  // byte-identical across processes
    }
    CHECK(rs[r].value("teardown") == "ok");
    if (lamport) CHECK(rs[r].value("path_48k") == std::to_string(static_cast<int>(kernel::reduce_path::small_lamport)));
    if (lamport) {
      CHECK(rs[r].value("inplace_calls") == "6");  // fp32 and bf16 x 3 sizes, each equal to the staged path's bytes
      CHECK(rs[r].value("inplace_hash") == rs[0].value("inplace_hash"));
    }
  }
}

/// Rank 2 of 4 killed with SIGKILL mid-run over `transport`: every survivor names it within timeout + 1 s.
void check_kill(const std::string& transport) {
  MESSAGE(mps_line());
  constexpr double timeout_s = 3.0;
  const auto rs = run_world("kill", 4, 4, world_env(transport, "3000"), {}, std::chrono::seconds(180));
  INFO(all_output(rs));
  REQUIRE(rs.size() == 4);
  CHECK(rs[2].signal == SIGKILL);
  for (int r : {0, 1, 3}) {
    CAPTURE(r);
    MESSAGE("survivor " << r << ": " << rs[r].value("calls_ok") << " calls ok, failure seen " << rs[r].value("waited")
                        << " s after the last good call, health: " << rs[r].value("health"));
    CHECK(rs[r].exit_code == 0);
    CHECK(rs[r].value("transport") == transport);
    CHECK(rs[r].value("status") != "");
    // rank 2's 50th call may already be lost on the proxy path (its proxy can die before posting it)
    const std::string ok = rs[r].value("calls_ok");
    CHECK(std::stoi(ok.empty() ? "0" : ok) >= 49);
    CHECK(rs[r].value("health").find("rank 2") != std::string::npos);
    const std::string waited = rs[r].value("waited");
    CHECK(std::stod(waited.empty() ? "99" : waited) < timeout_s + 1.0);
    CHECK(rs[r].value("teardown") == "ok");  // the destructor returned with a dead peer
  }
}

/// Rank 2 of 4 killed with SIGKILL and restarted at once, over `transport` (rank_recover): every survivor names
/// rank 2 and tears down, and all four rebuild within 10 s of the first survivor's sight of the failure and run
/// 1,000 exact collectives and 20 graph replays, byte-identical across the four. Bounds (environment, as the host
/// case): ROCENANTE_TEST_TIMEOUT_MS the protocol timeout (default 10000, gpu::default_options()'s: the same 1,000
/// mixed calls took 12.5-15.5 ms each on average with 4 processes time-slicing an H100 without MPS, docs/results/
/// h100-2026-12-06/gpu-suite-de84c63, so waiting for peers' time slices stays far below it; a dead rank is seen
/// after it), ROCENANTE_TEST_LIMIT_S the whole world (default 150 s: the timeout, start-ups and the 1,000 calls need
/// well under half of it; both cases at their limit still fit tools/gpu/run.sh's 500 s with the other six cases'
/// 76 s), ROCENANTE_TEST_CLOSE_S a survivor's communicator teardown (default 5 s).
void check_recover(const std::string& transport) {
  MESSAGE(mps_line());
  const char* timeout = std::getenv("ROCENANTE_TEST_TIMEOUT_MS");
  const char* limit = std::getenv("ROCENANTE_TEST_LIMIT_S");
  const char* close_bound = std::getenv("ROCENANTE_TEST_CLOSE_S");
  const auto rs = run_world("recover", 4, 4, world_env(transport, timeout ? timeout : "10000"), {},
                            std::chrono::seconds(limit ? std::atoi(limit) : 150),
                            [](int rank) { return rank == 2 ? std::string("recover") : std::string(); });
  INFO(all_output(rs));
  for (const rank_result& r : rs) {  // one line per process, pass or fail
    if (r.signal != 0 || r.exit_code != 0) MESSAGE("rank " << r.rank << std::string(r.replacement ? " (replacement)" : "") << ": exit "
                                                    << r.exit_code << ", signal " << r.signal << " after " << r.seconds << " s; "
                                                    << r.value("failed"));
    if (r.replacement)
      MESSAGE("rank 2 (replacement): CUDA and buffers ready " << r.value("cuda_ready_seconds")
              << " s after its start, its new communicator " << r.value("rebuild_seconds") << " s after its start ("
              << r.value("transport") << "); 1,000 mixed in " << r.value("mixed_seconds") << " s");
    else if (!r.value("failure").empty())
      MESSAGE("survivor " << r.rank << " (" << r.value("transport0") << "): failure seen after " << r.value("calls_ok")
              << " good replays, " << r.value("waited") << " s after the last (status " << r.value("status")
              << ", failures " << r.value("failures") << ", NaN elements " << r.value("out_nan_elements") << "): "
              << r.value("failure") << "; teardown " << r.value("teardown_seconds") << " s (stream drained "
              << r.value("drain_seconds") << " s, communicator " << r.value("close_seconds") << " s; CUDA after: "
              << r.value("cuda_after_close") << "); rebuilt " << r.value("rebuild_seconds") << " s after the failure ("
              << r.value("transport") << "); 1,000 mixed in " << r.value("mixed_seconds") << " s");
  }
  check_recovered(rs, close_bound ? std::atof(close_bound) : 5.0, transport);
  for (int i : {0, 1, 3, 4}) {
    CAPTURE(i);
    CHECK(rs[i].value("failed") == "");
    CHECK(rs[i].value("graph_after_rebuild") == "20");  // a graph captured on the new communicator
    CHECK(rs[i].value("graph_hash").size() == 16);
    CHECK(rs[i].value("graph_hash") == rs[0].value("graph_hash"));
    CHECK(rs[i].value("teardown") == "ok");  // generation 1's destructor returned
    if (i == 4) continue;
    CHECK(rs[i].value("transport0") == transport);
    const std::string st = rs[i].value("status");
    CHECK((!st.empty() && st != "ok"));
    // rank 2's 50th replay may already be lost on the proxy path (its proxy can die before posting it)
    const std::string ok = rs[i].value("calls_ok");
    CHECK(std::stoi(ok.empty() ? "0" : ok) >= 49);
    CHECK(rs[i].value("failures") == "1");   // the failed replay, counted without a device synchronize
    CHECK(rs[i].value("out_check") == "ok");  // its sum or NaN, never the previous replay's
    CHECK(rs[i].value("cuda_after_close") == "no error");
  }
}

/// Splits "a|b|c" (rank_select_fault's steps=).
std::vector<std::string> split_steps(const std::string& s) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= s.size() && !s.empty()) {
    const std::size_t bar = std::min(s.find('|', at), s.size());
    out.push_back(s.substr(at, bar - at));
    at = bar + 1;
  }
  return out;
}

/// Every rank ended the same way: the same transport and reason, or the same error; never a bootstrap error.
void check_same_ending(const std::vector<rank_result>& rs) {
  for (const rank_result& r : rs) {
    CAPTURE(r.rank);
    CHECK(r.value("transport") == rs[0].value("transport"));
    CHECK(r.value("reason") == rs[0].value("reason"));
    CHECK(r.value("error") == rs[0].value("error"));
    CHECK(r.value("kind") != "other");
    if (r.exit_code == 0) CHECK(r.value("all_reduce") == "ok");
  }
}

}  // namespace

TEST_SUITE("gpu.multiprocess.faults") {
  TEST_CASE("auto with 2 processes on one GPU: a fault at each step of cuda_ipc's set-up on rank 1 lands every rank on "
            "the same next transport (socket where there is no RDMA device) with the same reason; then cuda_ipc and "
            "socket failing leave nccl") {
    MESSAGE(mps_line());
    std::map<std::string, std::string> env = world_env("auto", "20000");
    std::vector<std::string> steps;
    {
      const auto rs = run_world("select_fault", 2, 2, env, {}, std::chrono::seconds(180));
      INFO(all_output(rs));
      REQUIRE(rs.size() == 2);
      for (const rank_result& r : rs) CHECK(r.exit_code == 0);
      REQUIRE(rs[1].value("transport") == "cuda_ipc");
      steps = split_steps(rs[1].value("steps"));
    }
    // cuda_ipc's own steps: its probe, and everything from its build to its self-test.
    std::vector<std::string> ipc;
    for (std::size_t i = 0; i < steps.size(); ++i)
      if (steps[i] == "probe cuda_ipc" || (std::find(steps.begin(), steps.begin() + i + 1, "build cuda_ipc") !=
                                           steps.begin() + i + 1))
        ipc.push_back(steps[i]);
    for (const char* want : {"probe cuda_ipc", "build cuda_ipc", "agree on options", "gpu: transport", "cuda_ipc: window",
                             "cuda_ipc: descriptor sockets", "cuda_ipc: import windows", "gpu: topology",
                             "gpu: local set-up", "connectivity of cuda_ipc", "self-test on cuda_ipc"})
      CHECK_MESSAGE(std::find(ipc.begin(), ipc.end(), want) != ipc.end(), want);
    for (const std::string& step : ipc) {
      CAPTURE(step);
      env["ROCENANTE_TEST_FAULT"] = "1@" + step;
      const auto rs = run_world("select_fault", 2, 2, env, {}, std::chrono::seconds(180));
      INFO(all_output(rs));
      REQUIRE(rs.size() == 2);
      check_same_ending(rs);
      CHECK(rs[0].exit_code == 0);
      CHECK(rs[0].value("transport") != "cuda_ipc");
      CHECK(rs[0].value("reason").find("cuda_ipc unusable: rank 1: ") == 0);
      CHECK(rs[0].value("reason").find("'" + step + "'") != std::string::npos);
      MESSAGE(step << " -> " << rs[0].value("transport"));
    }
    // cuda_ipc and socket both failing on rank 1: nccl, which cannot put two ranks on one GPU (or is not installed):
    // every rank fails the same way, or every rank runs over it.
    env["ROCENANTE_TEST_FAULT"] = "1@build cuda_ipc; 1@connection cards";
    const auto rs = run_world("select_fault", 2, 2, env, {}, std::chrono::seconds(180));
    INFO(all_output(rs));
    REQUIRE(rs.size() == 2);
    check_same_ending(rs);
    if (rs[0].exit_code == 0) CHECK(rs[0].value("transport") == "nccl");
    else CHECK(rs[0].value("error").find("nccl") != std::string::npos);
    MESSAGE("after cuda_ipc and socket: " << (rs[0].exit_code == 0 ? rs[0].value("transport") : rs[0].value("error")));
  }
}

// Case names have no commas: doctest's -tc takes a comma-separated list (e.g. -tc='socket with 4*').
TEST_SUITE("gpu.multiprocess") {
  TEST_CASE("cuda_ipc with 2 processes on one GPU: fp32/fp16/bf16 one_shot/two_shot/ring/all-gather exact and byte-identical; "
            "1000 mixed calls; 100 graph replays") {
    check_world("cuda_ipc", 2);
  }
  TEST_CASE("cuda_ipc with 4 processes on one GPU: fp32/fp16/bf16 one_shot/two_shot/ring/all-gather exact and byte-identical; "
            "1000 mixed calls; 100 graph replays") {
    check_world("cuda_ipc", 4);
  }
  TEST_CASE("cuda_ipc with 4 processes on one GPU and the Lamport path on: the same checks; a 48 KiB call takes the "
            "Lamport kernel; inputs in the symmetric area are read in place with the staged path's bytes") {
    check_world("cuda_ipc", 4, true);
  }
  TEST_CASE("socket (proxy path) with 2 processes on one GPU: fp32/fp16/bf16 one_shot/two_shot/ring/all-gather exact and "
            "byte-identical; 1000 mixed calls; 100 graph replays") {
    check_world("socket", 2);
  }
  TEST_CASE("socket (proxy path) with 4 processes on one GPU: fp32/fp16/bf16 one_shot/two_shot/ring/all-gather exact and "
            "byte-identical; 1000 mixed calls; 100 graph replays") {
    check_world("socket", 4);
  }
  TEST_CASE("cuda_ipc with 4 processes: rank 2 killed with SIGKILL mid-run is named by every survivor within timeout "
            "+ 1 s and every survivor exits cleanly") {
    check_kill("cuda_ipc");
  }
  TEST_CASE("socket (proxy path) with 4 processes: rank 2 killed with SIGKILL mid-run is named by every survivor "
            "within timeout + 1 s and every survivor exits cleanly") {
    check_kill("socket");
  }
}

// The host suite's recovery case (tests/host/test_multiprocess.cpp) on the GPU: -ts='*recovery*' runs both.
TEST_SUITE("gpu.multiprocess.recovery") {
  TEST_CASE("cuda_ipc with 4 processes: rank 2 killed with SIGKILL during graph replays and restarted: all four "
            "rebuild within 10 s and run 1000 exact collectives") {
    check_recover("cuda_ipc");
  }
  TEST_CASE("socket (proxy path) with 4 processes: rank 2 killed with SIGKILL during graph replays and restarted: "
            "all four rebuild within 10 s and run 1000 exact collectives") {
    check_recover("socket");
  }
}

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--rank") return rank_main(argv[2]);
  std::string probe;
  const int rc = probe_gpu(probe);
  while (!probe.empty() && (probe.back() == '\n' || probe.back() == ' ')) probe.pop_back();
  if (rc == 77) {
    std::printf("SKIP: %s; the gpu suite runs on the GPU machine (tools/gpu/run.sh test)\n", probe.c_str());
    return 77;
  }
  if (rc != 0) {
    std::printf("the GPU probe (this program with --rank probe) failed with exit %d: %s\n", rc, probe.c_str());
    return 1;
  }
  std::printf("%s\n%s\n", probe.c_str(), mps_line().c_str());
  doctest::Context ctx(argc, argv);
  return ctx.run();
}

// gpu/communicator.hpp — host API for the fused GPU collectives: one communicator per rank, kernels launched
// on the caller's stream. Include from .cu files (it instantiates kernels).
//
// Who calls: one host thread per rank (or one thread for all ranks, launching each rank on its own stream once
// set-up is done). Set-up is collective through the bootstrap and throws rocenante::error subclasses.
// Launch path: all_reduce / all_gather return a [[nodiscard]] status, never throw, allocate nothing, and are
// safe under CUDA graph capture: the sequence number lives on the device, so a replayed graph is correct.
// Ordering: a rank's collectives must execute in the order they were issued (one stream, or streams ordered
// by events); ranks' collectives run concurrently and must be co-resident (checked at set-up on one GPU).
// Health: check_health() reads a host-mapped mirror of the failure record and never synchronizes the device.
#pragma once

#include <cuda.h>  // CUmoduleLoadingMode only: the driver entry point is resolved through the runtime (no -lcuda)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../algorithm/one_shot.hpp"
#include "../algorithm/ring.hpp"
#include "../algorithm/two_shot.hpp"
#include "../bootstrap/concepts.hpp"
#include "../bootstrap/vote.hpp"
#include "../core/capabilities.hpp"
#include "../core/cuda_check.hpp"
#include "../core/options.hpp"
#include "../core/status.hpp"
#include "../host/communicator.hpp"
#include "../host/setup.hpp"
#include "../kernel/collectives.cuh"
#include "../reduce/sum.hpp"
#include "../transport/cuda_window.hpp"
#include "lifetime.hpp"
#include "topology.hpp"

namespace rocenante::gpu {

using host::health;

/// Defaults suited to GPUs: up to 16 CTAs per rank, at least 3 KiB of input per CTA (48 KiB: 16 CTAs of 192
/// threads, measured against 12 of 256 side by side on the H200: docs/results/h200-2026-12-05/s11-0c4216e).
inline options default_options() {
  options o;
  o.capacity_bytes = std::uint64_t{64} << 20;
  o.max_parts = 16;
  o.min_part_bytes = 3072;
  o.timeout_ns = 10'000'000'000ull;
  return o;
}

template <class Transport = transport::cuda_loopback>
class communicator {
  static_assert(transport::check_transport<Transport>());

 public:
  using handle_type = typename Transport::handle_type;
  static constexpr int threads = kernel::threads_per_block;

  /// Collective set-up. Every local step is a set-up vote (bootstrap/vote.hpp): a step that fails on any rank fails
  /// every rank with the same error, naming the rank, the step and the reason.
  template <bootstrap::bootstrap B>
  communicator(B& boot, const options& opts)
      : opts_(opts),
        layout_(host::agree_and_layout<algorithm::one_shot, algorithm::ring, algorithm::two_shot>(
            bootstrap::bootstrap_ref(boot), opts, Transport::name, !handle_type::shared_staging, handle_type::shared_staging)) {
    bootstrap::bootstrap_ref b(boot);
    // The transport's own steps are votes; this one also catches a rank that fails after its last (a thread that
    // does not start), which would otherwise leave its peers waiting in the next step.
    setup::vote(b, "gpu: transport", [&] { transport_.emplace(b, layout_, opts); });
    topo_ = gather_topology(b, [&] {
      ROCENANTE_CUDA_CHECK(cudaGetDevice(&device_));
      cudaDeviceProp prop{};
      ROCENANTE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
      return make_identity(device_, prop.uuid.bytes);
    });
    // Every remaining check and allocation is local; the vote that ends them is also the barrier that ends set-up.
    setup::vote(b, "gpu: local set-up", [&] {
      if (topo_.in_this_process() > 1 && lazy_module_loading())
        throw config_error(
            "rank " + std::to_string(b.rank()) + ": " + std::to_string(topo_.in_this_process()) +
            " ranks share this process's CUDA context and CUDA loads kernels lazily: the first launch of a kernel "
            "can wait for kernels already running, which are other ranks' collectives spinning on this rank, so a "
            "collective would stall until the timeout. Set CUDA_MODULE_LOADING=EAGER in the environment (or with "
            "setenv before the first CUDA call)");
      check_work_queues(b);
      enable_peer_access(b);
      if constexpr (requires { transport_->narrow_scope(memory_scope::device); })
        if (topo_.all_one_gpu()) transport_->narrow_scope(memory_scope::device);
      check_co_residency(b);
      // Load the reject kernel now. Under CUDA's lazy module loading (the default since CUDA 12.2) the first
      // launch of a kernel loads its module, and that can wait for running kernels to finish: a rank refusing a
      // call launches the reject kernel alone while its peers' kernels spin on its flags, so a lazy load there
      // would stall the refusal until the peers time out. (Collective kernels are loaded by the first rank to
      // launch them, before anyone waits on that kernel; the occupancy queries above load the built-in ones.)
      cudaFuncAttributes attr{};
      ROCENANTE_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel::reject<handle_type>));
      protocol::rank_state init{};
      protocol::init_state(init, opts.first_sequence);
      kept_.create(init, b.rank());  // gpu/lifetime.hpp: outlives the graphs that capture this rank's kernels
      ROCENANTE_CUDA_CHECK(cudaDeviceSynchronize());
      ctx_.handle = transport_->handle();
      ctx_.state = kept_.state();
      ctx_.mirror = kept_.mirror_device();
      ctx_.policy = {opts.timeout_ns, opts.max_polls};
    });
  }

  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;

  /// Returns even when a peer is dead: this rank's kernels end by themselves (every wait is bounded). Retires this
  /// rank's state: a kernel of it still captured in a CUDA graph refuses at entry when replayed (fills NaN, counts
  /// the call), and the state outlives such graphs (gpu/lifetime.hpp).
  ~communicator() = default;

  int rank() const { return ctx_.handle.rank(); }
  int size() const { return ctx_.handle.ranks(); }
  int device() const { return device_; }
  /// Where every rank runs (identical on every rank).
  const topology& ranks_topology() const { return topo_; }
  const options& opts() const { return opts_; }
  const protocol::window_layout& layout() const { return layout_; }
  const device::context<handle_type>& device_context() const { return ctx_; }
  Transport& transport() { return *transport_; }

  /// Parts and CTAs of a collective of `count` elements of T with algorithm A (algorithm::plan_split); the same
  /// on every rank. A ring part is cut into n chunks, one per step, so its parts may be n x max_part_bytes (at 4
  /// ranks, 64 MiB: 256 KiB parts 446 us, 64 KiB parts 646 us, one part per CTA 554 us; s6-0324847); a two_shot
  /// part holds one range of each of the n chunks too, and is cut the same way (not measured separately).
  /// A call posted once (algorithm::one_shot::posts_call, proxy mode) has one part per CTA: its last part to stage posts
  /// it for all, so every part must run at the same time.
  template <class T, class A = algorithm::one_shot>
  algorithm::launch_split split_for(std::size_t count) const {
    const std::uint64_t packets = protocol::ceil_div(std::uint64_t{count} * sizeof(T), packet_bytes);
    const bool whole = std::is_same_v<A, algorithm::one_shot> &&
                       algorithm::one_shot::posts_call<handle_type>(layout_, std::uint64_t{count} * sizeof(T));
    const std::uint64_t part_bytes =
        whole ? 0 : opts_.max_part_bytes * (std::is_same_v<A, algorithm::one_shot> ? 1u : std::uint64_t(size()));
    return algorithm::plan_split(packets, protocol::ceil_div(opts_.min_part_bytes, packet_bytes), part_bytes / packet_bytes,
                                 opts_.max_parts, max_ctas());
  }
  /// Parts a collective of `count` elements of T is cut into (its CTAs: split_for(count).ctas).
  template <class T, class A = algorithm::one_shot>
  std::uint32_t parts_for(std::size_t count) const {
    return split_for<T, A>(count).parts;
  }
  /// The kernel variant an all-reduce of `count` elements of T with algorithm A launches (rank-invariant): one_shot
  /// calls whose every part holds more packets than a CTA has threads run the bulk loop alone (no LL, no
  /// one-packet path: fewer registers), dropping read staged lines from L2 when parts outnumber CTAs (parts
  /// sized by max_part_bytes to be read from L2); calls with one part per CTA and at most one packet per thread
  /// run the decode-size code alone (small), with as few threads as the largest part needs.
  template <class T, class A = algorithm::one_shot>
  kernel::reduce_path path_for(std::size_t count) const {
    const algorithm::launch_split sp = split_for<T, A>(count);
    const std::uint64_t packets = protocol::ceil_div(std::uint64_t{count} * sizeof(T), packet_bytes);
    if (!std::is_same_v<A, algorithm::one_shot> || packets / sp.parts <= std::uint64_t{threads}) {
      if (sp.parts > sp.ctas) return kernel::reduce_path::any_loop;
      const std::uint64_t most = protocol::ceil_div(packets, sp.parts);
      if (!std::is_same_v<A, algorithm::one_shot> || most > std::uint64_t{threads})
        return kernel::reduce_path::any;
      switch (algorithm::one_shot::small_protocol_for<reduce::sum<std::remove_cv_t<T>>, handle_type>(
          layout_, size(), count, sp.parts, int(kernel::small_threads(most)))) {
        case algorithm::small_protocol::lamport: return kernel::reduce_path::small_lamport;
        case algorithm::small_protocol::ll: return kernel::reduce_path::small_ll;
        case algorithm::small_protocol::packets: break;
      }
      return kernel::reduce_path::small;
    }
    return sp.parts > sp.ctas ? kernel::reduce_path::bulk_discard : kernel::reduce_path::bulk;
  }
  /// This rank's symmetric input area (options::symmetric_bytes; empty where the transport has none — proxy mode): device
  /// memory of this rank's window. An all-reduce (one_shot) whose input lies here, at the same offset on every rank,
  /// 16-byte aligned, with its output elsewhere, reads the peers' inputs in place (algorithm/one_shot.hpp,
  /// "In-place path"); the caller writes its input here (its own kernels or a copy) before the call, in stream order.
  std::span<std::byte> symmetric_input() const {
    if constexpr (algorithm::one_shot::has_inplace<handle_type>) {
      if (layout_.input_bytes != 0)
        return {const_cast<std::byte*>(ctx_.handle.input_ptr(ctx_.handle.rank(), 0)), static_cast<std::size_t>(layout_.input_bytes)};
    }
    return {};
  }
  /// Most CTAs per collective kernel of this rank (options::max_ctas, 0 meaning max_parts).
  std::uint32_t max_ctas() const { return opts_.max_ctas != 0 ? opts_.max_ctas : opts_.max_parts; }

  /// out[i] = epilogue(sum over ranks of in[i]), rounded once; see algorithm::no_epilogue for the contract of an
  /// epilogue (trivially copyable functor, passed to the kernel by value).
  template <algorithm::algorithm A = algorithm::one_shot, class T, class Epilogue = algorithm::no_epilogue>
  status all_reduce(const T* in, T* out, std::size_t count, cudaStream_t stream, A = {}, Epilogue epi = {}) {
    using R = reduce::sum<std::remove_cv_t<T>>;
    static_assert(reduce::check_reduction<R>());
    static_assert(A::template supports<R>, "this algorithm cannot run this reduction");
    static_assert(std::is_trivially_copyable_v<Epilogue>, "an epilogue is passed to the kernel by value");
    if (const status s = precheck<A>(in, out, count, sizeof(T), false, stream, algorithm::poison_of(out, count)); s != status::ok)
      return s;
    // An input in the symmetric area, its output elsewhere: read in place (one_shot, "In-place path").
    const bool inplace = (std::is_same_v<A, algorithm::one_shot> || std::is_same_v<A, algorithm::two_shot>) &&
                         algorithm::one_shot::inplace_offset<R>(ctx_.handle, in, out, count) != algorithm::one_shot::no_inplace;
    return launch_variant<A, R, Epilogue>(kernel::variant_index(inplace ? kernel::reduce_path::inplace : path_for<T, A>(count), size()),
                                          in, out, count, stream, epi, std::make_integer_sequence<int, kernel::variant_count>{});
  }

  template <algorithm::algorithm A = algorithm::one_shot, class T>
  status all_gather(const T* in, T* out, std::size_t count, cudaStream_t stream, A = {}) {
    using R = reduce::sum<std::remove_cv_t<T>>;
    static_assert(A::supports_all_gather, "this algorithm has no all-gather; use one_shot");
    if (const status s = precheck<A>(in, out, count, sizeof(T), true, stream, algorithm::poison_of(out, std::uint64_t{count} * size()));
        s != status::ok)
      return s;
    const algorithm::launch_split sp = split_for<T, A>(count);
    if (sp.parts > sp.ctas)
      return launched(launch(kernel::all_gather<A, R, handle_type, true>, sp.ctas, threads, stream, capacity_, ctx_, in, out, count, sp.parts));
    return launched(launch(kernel::all_gather<A, R, handle_type>, sp.ctas, threads, stream, capacity_, ctx_, in, out, count, sp.parts));
  }

  /// Refuses this call for a reason the caller found (a binding's checks: dtype, device, output size): the reject
  /// kernel takes the collective's place on `stream`, tells the peers to abort it, and this rank is poisoned (as
  /// for any bad argument). Returns invalid_argument; last_error() names the rank and `why`.
  status reject(const std::string& why, cudaStream_t stream) { return reject_in_sequence(stream, why, {}); }

  /// Why a call of `count` elements of `t` with algorithm `a` would be refused (empty: it would run), from values
  /// every rank shares (count, dtype, capacity, the window's layout), never pointers: the same answer on every rank,
  /// so an engine can fall back on every rank together. Consumes no sequence number and never poisons.
  std::string refusal(std::size_t count, dtype t, algorithm::algo a,
                      protocol::collective c = protocol::collective::all_reduce) const {
    return host::call_refusal(count, t, a, c, &layout_, "GPU executor");
  }
  bool accepts(std::size_t count, dtype t, algorithm::algo a,
               protocol::collective c = protocol::collective::all_reduce) const {
    return refusal(count, t, a, c).empty();
  }

  /// Collectives of this rank that did not complete — failed, timed out, refused, or called (or replayed in a
  /// graph) on a poisoned communicator; each of them filled its output with the poison value (docs/api.md).
  /// Reads the host-mapped mirror: no device synchronize; a kernel reads the same count from
  /// protocol::failures(device_context().state). Counted when the kernel that failed runs, not at launch.
  std::uint64_t failures() const { return detail::load_acquire(&kept_.mirror_host()->failures); }

  /// Every guarantee of the library's protocol (core/capabilities.hpp), over any transport.
  static constexpr rocenante::capabilities capabilities() { return rocenante::capabilities::protocol(); }

  /// When `stream` is capturing a CUDA graph, that graph keeps this rank's state alive (gpu/lifetime.hpp). The
  /// communicator's own launches do this; call it before capturing a kernel of yours that uses device_context().
  void hold_in_capture(cudaStream_t stream) noexcept { kept_.hold_in_capture(stream); }

  /// Health without a device synchronize: reads the host-mapped mirror of the failure record.
  health check_health() const {
    health h;
    const protocol::rank_state* mirror = kept_.mirror_host();
    if (detail::load_acquire(&mirror->poison) != protocol::poisoned) return h;
    h.failure = mirror->failure;
    h.state = host::failure_status(h.failure);
    h.message = host::describe_failure(rank(), h.failure);
    return h;
  }

 private:
  /// Whether kernel::all_reduce_variants[V] exists for algorithm A over this transport: the bulk and decode-size
  /// kernels are one_shot's, the LL and Lamport kernels need a handle with an LL or Lamport area, the in-place kernel
  /// an algorithm with an in-place path (one_shot, two_shot) and a handle whose windows its ranks read.
  template <class A, kernel::variant V>
  static constexpr bool has_variant = (V.path == kernel::reduce_path::any || V.path == kernel::reduce_path::any_loop ||
                                       V.path == kernel::reduce_path::inplace || std::is_same_v<A, algorithm::one_shot>) &&
                                      (V.path != kernel::reduce_path::small_ll || algorithm::one_shot::has_ll<handle_type>) &&
                                      (V.path != kernel::reduce_path::small_lamport || algorithm::one_shot::has_lamport<handle_type>) &&
                                      (V.path != kernel::reduce_path::inplace ||
                                       (requires { A::inplace_id; } && algorithm::one_shot::has_inplace<handle_type>));

  /// Launches kernel::all_reduce_variants[v] (kernel::variant_index: the same on every rank, which have the same
  /// rank count); a fixed-rank variant runs over fixed_context, with the bytes of the plain kernel.
  template <class A, class R, class Epilogue, class T, int... I>
  status launch_variant(int v, const T* in, T* out, std::size_t count, cudaStream_t stream, const Epilogue& epi,
                        std::integer_sequence<int, I...>) {
    status s = status::internal;
    const bool found = ((v == I && (s = launch_variant_at<A, R, Epilogue, I>(in, out, count, stream, epi), true)) || ...);
    if (!found)
      return reject_in_sequence(stream, "no all-reduce kernel for this call (kernel::all_reduce_variants)",
                                algorithm::poison_list{{algorithm::poison_of(out, count)}});
    return s;
  }
  template <class A, class R, class Epilogue, int I, class T>
  status launch_variant_at(const T* in, T* out, std::size_t count, cudaStream_t stream, const Epilogue& epi) {
    constexpr kernel::variant v = kernel::all_reduce_variants[I];
    if constexpr (!has_variant<A, v>)
      return reject_in_sequence(stream, "no all-reduce kernel for this call (kernel::all_reduce_variants)",
                                algorithm::poison_list{{algorithm::poison_of(out, count)}});
    else if constexpr (v.fixed != 0)
      return launch_over<A, R, Epilogue, v.path>(fixed_context<v.fixed>(), in, out, count, stream, epi);
    else
      return launch_over<A, R, Epilogue, v.path>(ctx_, in, out, count, stream, epi);
  }

  /// This rank's device context over transport::fixed_ranks<handle_type, N> (size() == N).
  template <int N>
  device::context<transport::fixed_ranks<handle_type, N>> fixed_context() const {
    return {transport::fixed_ranks<handle_type, N>{ctx_.handle}, ctx_.state, ctx_.mirror, ctx_.policy};
  }

  template <class A, class R, class Epilogue, kernel::reduce_path Path, class H, class T>
  status launch_over(const device::context<H>& ctx, const T* in, T* out, std::size_t count, cudaStream_t stream,
                     const Epilogue& epi) {
    const algorithm::launch_split sp = split_for<T, A>(count);
    std::uint64_t capacity = capacity_;
    if constexpr (!std::is_same_v<Epilogue, algorithm::no_epilogue>) {
      // A user epilogue makes a kernel of its own, whose registers may allow fewer resident CTAs than the
      // kernels measured at set-up: check that every rank on this GPU still fits (once per instantiation).
      static const int per_sm = resident_per_sm(kernel::all_reduce<A, R, H, Epilogue, Path>);
      if (std::uint64_t(sharing_) * sp.ctas > std::uint64_t(sms_) * std::uint64_t(per_sm < 0 ? 0 : per_sm))
        return reject_in_sequence(
            stream, "this epilogue's kernel fits " + std::to_string(per_sm) + " CTA(s) per SM: " +
                        std::to_string(sharing_) + " ranks x " + std::to_string(sp.ctas) + " CTAs would not all be " +
                        "resident on " + std::to_string(sms_) + " SMs and could deadlock; lower options::max_ctas or " +
                        "the epilogue's register use",
            algorithm::poison_list{{algorithm::poison_of(out, count)}});
      capacity = std::uint64_t(sms_) * std::uint64_t(per_sm < 0 ? 0 : per_sm);
    }
    // The small kernel: only as many threads as the largest part has packets (every rank derives the same number).
    const unsigned block =
        kernel::is_small(Path)
            ? kernel::small_threads(protocol::ceil_div(protocol::ceil_div(std::uint64_t{count} * sizeof(T), packet_bytes), sp.parts))
            : unsigned{threads};
    return launched(launch(kernel::all_reduce<A, R, H, Epilogue, Path>, sp.ctas, block, stream, capacity, ctx, in, out,
                           count, sp.parts, epi));
  }

 public:
  const std::string& last_error() const { return last_error_; }

  /// Programmatic dependent launch (off by default; opt in; sm_90 and later, ignored elsewhere): kernels are launched with
  /// cudaLaunchAttributeProgrammaticStreamSerialization, so a collective is scheduled while the kernel before it
  /// in the stream is still running and its launch latency is hidden; every collective kernel starts with
  /// griddepcontrol.wait, which keeps stream order's guarantees (kernel/collectives.cuh). When ranks share a GPU
  /// a launch uses it only if every rank's running collective and the one launched early fit on the GPU together
  /// (ranks x (max_ctas + this launch's CTAs) resident CTAs), so the co-residency argument still holds.
  /// Captured into CUDA graphs as programmatic edges. Local to this rank: ranks need not agree.
  /// A collective launched on another stream than this rank's previous collective is launched without the attribute
  /// (stream order alone): on the H200 a rank whose collectives alternated between two eagerly launched streams,
  /// ordered by cudaStreamWaitEvent, got wrong results with programmatic launch on every launch (tests/gpu:
  /// "collectives alternating between two eagerly launched streams", ROCENANTE_TEST_PDL=1) once; that result has not
  /// been reproduced since, with or without this rule, so its cause is unknown (docs/design.md §1.4).
  /// Consecutive collectives on one stream, and graphs captured from one stream, keep it. Why still opt-in: the
  /// whole gpu and multiprocess suites have not yet run with it on.
  void set_programmatic_launch(bool on) { pdl_ = on; }
  bool programmatic_launch() const { return pdl_; }

 private:
  /// Checks that depend only on this call's arguments. A refusal is still a step in the sequence: the reject
  /// kernel takes the collective's place on the stream and tells the peers to abort (session::reject). A refused
  /// call, and a call on a poisoned communicator, fills `fill` (all of out) when out is not null and count fits
  /// capacity_bytes (else nothing: a count above capacity more likely says the size is wrong than the buffer that
  /// large) and is counted (failures()).
  template <class A>
  status precheck(const void* in, const void* out, std::size_t count, std::size_t elem, bool gather, cudaStream_t stream,
                  algorithm::poison_span fill) {
    algorithm::poison_list safe{};
    if (host::refusal_fills(out, count, elem, opts_.capacity_bytes)) safe.span[0] = fill;
    if (detail::load_acquire(&kept_.mirror_host()->poison) == protocol::poisoned) {
      // Nothing to take part in: the reject kernel returns at entry after filling and counting.
      (void)launch(kernel::reject<handle_type>, 1, threads, stream, capacity_, ctx_, safe);
      (void)cudaGetLastError();
      return refuse(status::poisoned, check_health().message);
    }
    // Null pointers first, then the shape (host::shape_refusal: call_refusal's body, what refusal() answers), then
    // overlap.
    const auto* ib = static_cast<const std::byte*>(in);
    const auto* ob = static_cast<const std::byte*>(out);
    const std::uint64_t out_bytes = std::uint64_t{count} * elem * (gather ? size() : 1);
    std::string why = in == nullptr || out == nullptr ? std::string("input or output pointer is null")
                                                      : host::shape_refusal<A>(count, elem, layout_);
    if (why.empty() && !(!gather && ib == ob) && ib < ob + out_bytes && ob < ib + count * elem)
      why = "input and output overlap without being the same buffer";
    if (why.empty()) return status::ok;
    return reject_in_sequence(stream, why, safe);
  }

  /// A refusal that takes the collective's place on the stream: the reject kernel tells the peers to abort and
  /// fills `fill` with the poison value.
  status reject_in_sequence(cudaStream_t stream, const std::string& why, const algorithm::poison_list& fill) {
    (void)launch(kernel::reject<handle_type>, 1, threads, stream, capacity_, ctx_, fill);
    (void)cudaGetLastError();
    return refuse(status::invalid_argument,
                  why + "; peers were told to abort this collective and the communicator is now poisoned");
  }

  /// CTAs of `kernel_fn` (threads per block, no dynamic shared memory) resident per SM; -1 if the query fails.
  template <class Kernel>
  static int resident_per_sm(Kernel kernel_fn) {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel_fn, threads, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
    return n;
  }

  /// Launches `fn` with `grid` CTAs of `block` threads on `stream`, with the programmatic attribute when enabled and when the
  /// co-residency bound allows it (see set_programmatic_launch); `capacity` = CTAs of this kernel resident on the GPU.
  template <class... Params, class... Args>
  cudaError_t launch(void (*fn)(Params...), std::uint32_t grid, unsigned block, cudaStream_t stream, std::uint64_t capacity,
                     Args&&... args) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1]{};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    const bool fits = sharing_ <= 1 || std::uint64_t(sharing_) * (max_ctas() + grid) <= capacity;
    const bool same_stream = stream == last_stream_;  // see set_programmatic_launch: never across streams
    last_stream_ = stream;
    cfg.attrs = attr;
    cfg.numAttrs = pdl_ && fits && same_stream ? 1 : 0;
    kept_.hold_in_capture(stream);
    return cudaLaunchKernelEx(&cfg, fn, std::forward<Args>(args)...);
  }

  status launched(cudaError_t e) {
    if (e == cudaSuccess) e = cudaGetLastError();
    else (void)cudaGetLastError();
    if (e == cudaSuccess) return status::ok;
    return refuse(status::internal, std::string("kernel launch failed: ") + cudaGetErrorString(e));
  }

  status refuse(status s, std::string why) {
    last_error_ = why.rfind("rank ", 0) == 0 ? "rocenante " + std::move(why)
                                             : "rocenante rank " + std::to_string(rank()) + ": " + std::move(why);
    return s;
  }

  /// True when this process's CUDA context loads modules lazily (CUDA_MODULE_LOADING=LAZY, the default since
  /// CUDA 12.2). Asked through the runtime's driver entry point, so users need not link libcuda.
  static bool lazy_module_loading() {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuModuleGetLoadingMode", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        fn == nullptr) {
      (void)cudaGetLastError();
      return false;  // a driver without the query predates lazy loading
    }
    CUmoduleLoadingMode mode{};
    if (reinterpret_cast<CUresult (*)(CUmoduleLoadingMode*)>(fn)(&mode) != CUDA_SUCCESS) return false;
    return mode == CU_MODULE_LAZY_LOADING;
  }

  /// Ranks that are threads of this process on this GPU share its CUDA context, and the context's streams share a
  /// bounded set of hardware work queues. A queue starts its work in order: a rank's kernel held behind a peer's
  /// work that waits for it stalls both until the timeout. Refuse a set-up with more such ranks than
  /// queues (gpu/topology.hpp, work_queue_problem). The environment and the MPS flag are the process's, so every
  /// rank of it gives the same answer.
  void check_work_queues(bootstrap::bootstrap_ref b) {
    const int sharing = topo_.sharing_context();
    if (sharing <= 1) return;
    int mps = 0;
    if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, device_) != cudaSuccess) {
      (void)cudaGetLastError();
      mps = 0;  // a driver that does not know the attribute: counted as without MPS
    }
    if (const std::string why = work_queue_problem(sharing, std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"), mps != 0);
        !why.empty())
      throw config_error("rank " + std::to_string(b.rank()) + " (GPU " + std::to_string(device_) + "): " + why);
  }

  /// Peer access to the other GPUs that ranks of this process use (ranks in other processes are reached through
  /// their transport's own mapping: cuda_ipc grants access when it maps a peer's window).
  void enable_peer_access(bootstrap::bootstrap_ref b) {
    for (int d : topo_.peer_ordinals()) {
      int can = 0;
      ROCENANTE_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device_, d));
      if (!can)
        throw transport_error("rank " + std::to_string(b.rank()) + ": device " + std::to_string(device_) +
                              " cannot access device " + std::to_string(d) +
                              " of another rank of this process (no peer access); use one process per GPU with "
                              "cuda_ipc where the GPUs are peers, or the NCCL transport");
      const cudaError_t e = cudaDeviceEnablePeerAccess(d, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled)
        (void)cudaGetLastError();
      else
        ROCENANTE_CUDA_CHECK(e);
    }
  }

  /// Ranks sharing this GPU wait on each other inside their kernels: all their CTAs must fit on the GPU at once,
  /// or a waiting CTA could hold the SM a peer's CTA needs (deadlock until the timeout). Refuse such a set-up.
  void check_co_residency(bootstrap::bootstrap_ref b) {
    const int sharing = topo_.sharing();  // by GPU UUID and host: every Spark rank is "device 0" of its own node
    int sms = 0;
    ROCENANTE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_));
    sharing_ = sharing;
    sms_ = sms;
    int per_sm = 1 << 30;
    auto occ = [&](auto kernel_fn) {
      int n = 0;
      ROCENANTE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel_fn, threads, 0));
      per_sm = n < per_sm ? n : per_sm;
    };
    // bf16 of every all-reduce kernel this rank count launches (kernel::all_reduce_variants), both all-gathers
    const int n = b.size();
    [&]<int... I>(std::integer_sequence<int, I...>) {
      auto occ_variant = [&]<int V>(std::integral_constant<int, V>) {
        constexpr kernel::variant v = kernel::all_reduce_variants[V];
        using H = std::conditional_t<v.fixed == 0, handle_type, transport::fixed_ranks<handle_type, v.fixed == 0 ? 1 : v.fixed>>;
        using bf16 = reduce::sum<__nv_bfloat16>;
        if (kernel::variant_index(v.path, n) != V) return;
        if constexpr (has_variant<algorithm::one_shot, v>)
          occ(kernel::all_reduce<algorithm::one_shot, bf16, H, algorithm::no_epilogue, v.path>);
        if constexpr (has_variant<algorithm::ring, v>)
          occ(kernel::all_reduce<algorithm::ring, bf16, H, algorithm::no_epilogue, v.path>);
        if constexpr (has_variant<algorithm::two_shot, v>)
          occ(kernel::all_reduce<algorithm::two_shot, bf16, H, algorithm::no_epilogue, v.path>);
      };
      (occ_variant(std::integral_constant<int, I>{}), ...);
    }(std::make_integer_sequence<int, kernel::variant_count>{});
    occ(kernel::all_gather<algorithm::one_shot, reduce::sum<float>, handle_type>);
    occ(kernel::all_gather<algorithm::one_shot, reduce::sum<float>, handle_type, true>);
    capacity_ = std::uint64_t(sms) * std::uint64_t(per_sm);
    if (const std::string why = co_residency_problem(sharing, max_ctas(), sms, per_sm); !why.empty())
      throw config_error("rank " + std::to_string(b.rank()) + " (GPU " + std::to_string(device_) + "): " + why);
  }

  options opts_;
  protocol::window_layout layout_;
  std::optional<Transport> transport_;  ///< constructed inside a set-up vote
  int device_ = 0;
  int sharing_ = 1;  ///< ranks of this communicator on this GPU
  int sms_ = 0;
  std::uint64_t capacity_ = 0;  ///< CTAs of the built-in kernels resident on this GPU at once
  bool pdl_ = false;            ///< programmatic dependent launch (set_programmatic_launch)
  cudaStream_t last_stream_ = nullptr;  ///< stream of this rank's previous launch (programmatic only on the same one)
  topology topo_;  ///< every rank's host, GPU and process (gpu/topology.hpp)
  lifetime::kept_state kept_;  ///< state and mirror; after transport_, so destroyed (retired) before the windows
  device::context<handle_type> ctx_{};
  std::string last_error_;
};

}  // namespace rocenante::gpu

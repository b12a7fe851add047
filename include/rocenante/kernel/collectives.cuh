// kernel/collectives.cuh — ready-made __global__ kernels: gridDim.x CTAs take the collective's `parts` parts,
// CTA b parts b, b + gridDim.x, ... in order (one part per CTA when parts == gridDim.x).
// Launched by gpu::communicator; usable directly with a device::context.
#pragma once

#include "../algorithm/poison.hpp"
#include "../device/block_collectives.hpp"

namespace rocenante::kernel {

inline constexpr int threads_per_block = 512;

/// Called by every collective kernel before its first read of memory that earlier kernels may have written (the first
/// statement, or after the plan: dependency_gate). Programmatic dependent launch (sm_90 and later; PTX
/// griddepcontrol): `wait` returns once every kernel this one depends on in stream order has completed and its
/// memory is visible — exactly the guarantee of ordinary stream order, so the input written by the previous
/// kernel and the epoch written by the previous collective are safe to read after it. It returns at once when the
/// kernel was launched without the programmatic attribute. `launch_dependents` then lets the next kernel of the
/// stream, if it was launched with the attribute, be scheduled now and wait in its own `wait` instead of paying
/// its launch latency after this kernel ends. It comes after `wait`, so at most two kernels of a rank are resident
/// at once (gpu::communicator counts both when ranks share a GPU).
ROCENANTE_DEVICE ROCENANTE_FORCEINLINE void dependent_launch_entry() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// dependent_launch_entry() as an algorithm gate (algorithm::no_gate): the decode-size kernels wait for their stream
/// predecessor only once their plan is computed, so that with programmatic launch the plan (the part's range, the
/// call's signature and strides, the addresses) is computed while the kernel before finishes, not after.
struct dependency_gate {
  ROCENANTE_DEVICE ROCENANTE_FORCEINLINE void operator()() const { dependent_launch_entry(); }
};

/// CTAs per SM the compiler must leave registers for in the collective kernels (launch bounds): 1, so that ranks
/// sharing a GPU fit one CTA of each rank's collective per SM. 2 made the one-shot kernels spill and run 1.3x
/// (48 KiB) to 2.3x (64 MiB) slower (docs/results/h200-2026-12-04/s5c-8599fd3).
inline constexpr int min_blocks_per_sm = 1;

/// Which code of the all-reduce a kernel compiles: every path, one part per CTA (any call with parts ==
/// gridDim.x); every path, CTAs looping over parts (any_loop); or the bulk loop alone, CTAs looping over parts
/// (block_all_reduce::run_bulk; one_shot, calls whose every part holds more packets than threads per block),
/// optionally dropping read staged lines from L2 (gpu::communicator uses it when parts outnumber CTAs).
/// Why `any` does not loop: the loop keeps the part index, the part count and the pointers live across the
/// whole one-shot code, which pushed that kernel from 12 to 1368 bytes of register spills (sm_90a, bf16), and the
/// spills cost decode-size calls about 1.2 us (48 KiB at 4 ranks, graph: 6.42 vs 5.20 us; s6c-c1cc2a6).
/// small / small_ll / small_lamport: the decode-size code alone (block_all_reduce::run_small; one_shot, one part
/// per CTA, every part at most as many packets as the CTA has threads), packets + flag, the LL path or the Lamport
/// path (algorithm::small_protocol), launched with only as many threads as the largest part has packets (rounded up
/// to whole warps): docs/results/h200-2026-12-04 has what it saves.
enum class reduce_path : int { any = 0, any_loop = 1, bulk = 2, bulk_discard = 3, small = 4, small_ll = 5, small_lamport = 6, inplace = 7 };

/// The decode-size protocol a small* path runs.
ROCENANTE_HOST_DEVICE constexpr algorithm::small_protocol small_protocol_of(reduce_path path) {
  return path == reduce_path::small_ll ? algorithm::small_protocol::ll
         : path == reduce_path::small_lamport ? algorithm::small_protocol::lamport
                                               : algorithm::small_protocol::packets;
}
ROCENANTE_HOST_DEVICE constexpr bool is_small(reduce_path path) {
  return path == reduce_path::small || path == reduce_path::small_ll || path == reduce_path::small_lamport;
}

/// One all-reduce kernel that gpu::communicator launches: its code, and its handle — the plain one (fixed == 0), or
/// transport::fixed_ranks<handle, N> (fixed == N: the rank count a template parameter, every loop over ranks
/// unrolled), launched at N ranks only.
struct variant {
  reduce_path path;
  int fixed = 0;
  constexpr bool operator==(const variant&) const = default;
};

/// Every all-reduce kernel gpu::communicator launches. Its dispatch (all_reduce) and its set-up co-residency check
/// both read this table, so a kernel is listed here and nowhere else. The decode-size kernels run over fixed_ranks
/// at 2 and 8 ranks, where they were 0.11-0.16 us faster, not at 4, where they were 0.056 us slower
/// (docs/results/h200-2026-12-05/s11-0c4216e); small_ll serves at most ll_max_ranks = 2 ranks, small_lamport
/// 2..lamport_max_ranks (over the plain handle: not measured yet). inplace: one_shot's in-place path (an input in
/// the symmetric area, read where it lies: algorithm/one_shot.hpp), CTAs looping over parts.
inline constexpr variant all_reduce_variants[] = {
    {reduce_path::any},   {reduce_path::any_loop}, {reduce_path::bulk},     {reduce_path::bulk_discard},
    {reduce_path::small}, {reduce_path::small, 2}, {reduce_path::small, 8}, {reduce_path::small_ll, 2},
    {reduce_path::small_lamport}, {reduce_path::inplace},
};
inline constexpr int variant_count = static_cast<int>(sizeof(all_reduce_variants) / sizeof(all_reduce_variants[0]));

/// Whether a call at `ranks` ranks can take `path` (the LL path serves 2..ll_max_ranks ranks: algorithm::one_shot::uses_ll;
/// the Lamport path 2..lamport_max_ranks: uses_lamport).
constexpr bool path_at(reduce_path path, int ranks) {
  if (path == reduce_path::small_ll) return ranks > 1 && ranks <= ll_max_ranks;
  if (path == reduce_path::small_lamport) return ranks > 1 && ranks <= lamport_max_ranks;
  return true;
}

/// Index in all_reduce_variants of the kernel a call taking `path` at `ranks` ranks launches: the fixed_ranks entry
/// for this rank count if there is one, else the plain one; -1 where the path cannot occur at this rank count.
constexpr int variant_index(reduce_path path, int ranks) {
  if (!path_at(path, ranks)) return -1;
  int plain = -1;
  for (int i = 0; i < variant_count; ++i) {
    if (all_reduce_variants[i] == variant{path, ranks}) return i;
    if (all_reduce_variants[i] == variant{path, 0}) plain = i;
  }
  return plain;
}

/// Every path that can occur at a rank count has a kernel.
constexpr bool variants_cover_every_call() {
  for (int n = 1; n <= max_ranks; ++n)
    for (int p = 0; p <= static_cast<int>(reduce_path::inplace); ++p)
      if (path_at(reduce_path(p), n) && variant_index(reduce_path(p), n) < 0) return false;
  return true;
}
static_assert(variants_cover_every_call(), "all_reduce_variants: a reduce_path has no kernel at some rank count");

/// Fewest threads of a reduce_path::small launch: whole warps.
inline constexpr unsigned small_min_threads = 64;

/// Threads of a reduce_path::small launch whose largest part has `packets` packets: whole warps, at least
/// small_min_threads, at most threads_per_block (fewer threads, cheaper barriers).
ROCENANTE_HOST_DEVICE constexpr unsigned small_threads(std::uint64_t packets) {
  const std::uint64_t t = (packets + 31) / 32 * 32;
  return t < small_min_threads ? small_min_threads
                               : (t > threads_per_block ? threads_per_block : static_cast<unsigned>(t));
}

/// The failure path of part `part` of a collective kernel (a wait failed, or the call returned at entry on a poisoned
/// rank): every thread of the CTA fills the part's elements of `out` with the poison value (algorithm/poison.hpp),
/// and thread 0 of part 0 counts the call (protocol::count_failed_call). Out of line, so it takes values only: a
/// reference to the kernel's context would make the compiler copy the whole context (a kernel parameter) into local
/// memory at entry and read the handle from there on the hot path (docs/design.md §1.4, "Cold paths").
template <class Algorithm, class Reduction>
ROCENANTE_DEVICE ROCENANTE_COLD void poison_part(typename Reduction::value_type* out, std::uint64_t count,
                                                 std::uint32_t part, std::uint32_t parts, int ranks,
                                                 protocol::collective c, protocol::rank_state* state,
                                                 protocol::rank_state* mirror) {
  device::block_team team{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
  Algorithm::template poison_part<Reduction>(team, out, count, part, parts, ranks, c);
  if (part == 0 && threadIdx.x == 0) protocol::count_failed_call(state, mirror);
}

template <class Algorithm, class Reduction, class Handle, class Epilogue = algorithm::no_epilogue,
          reduce_path Path = reduce_path::any>
__global__ void __launch_bounds__(threads_per_block, min_blocks_per_sm)
    all_reduce(device::context<Handle> ctx, const typename Reduction::value_type* in,
               typename Reduction::value_type* out, std::uint64_t count, std::uint32_t parts, Epilogue epi = {}) {
  using block_t = device::block_all_reduce<Algorithm, Reduction, Handle, Epilogue>;
  __shared__ typename block_t::temp_storage tmp;
  block_t coll(tmp, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
  if constexpr (is_small(Path)) {
    // parts == gridDim.x; the wait for the stream predecessor comes after the plan (dependency_gate)
    if (!coll.template run_small<small_protocol_of(Path)>(ctx, in, out, count, blockIdx.x, parts, epi, dependency_gate{}))
      poison_part<Algorithm, Reduction>(out, count, blockIdx.x, parts, ctx.handle.ranks(), protocol::collective::all_reduce, ctx.state, ctx.mirror);
    return;
  }
  dependent_launch_entry();
  if constexpr (Path == reduce_path::any) {
    if (!coll.run(ctx, in, out, count, blockIdx.x, parts, epi))  // parts == gridDim.x
      poison_part<Algorithm, Reduction>(out, count, blockIdx.x, parts, ctx.handle.ranks(), protocol::collective::all_reduce, ctx.state, ctx.mirror);
  } else {
    for (std::uint32_t p = blockIdx.x; p < parts; p += gridDim.x) {
      if (p != blockIdx.x) __threadfence();  // two calls in one kernel (block_all_reduce::run)
      bool ok;
      if constexpr (Path == reduce_path::any_loop)
        ok = coll.run(ctx, in, out, count, p, parts, epi);
      else if constexpr (Path == reduce_path::inplace)
        ok = coll.run_inplace(ctx, in, out, count, p, parts, epi);
      else
        ok = coll.template run_bulk<Path == reduce_path::bulk_discard>(ctx, in, out, count, p, parts, epi);
      if (!ok) {  // this part and the CTA's later ones are not computed: poison them all
        for (std::uint32_t q = p; q < parts; q += gridDim.x)
          poison_part<Algorithm, Reduction>(out, count, q, parts, ctx.handle.ranks(), protocol::collective::all_reduce, ctx.state, ctx.mirror);
        break;
      }
    }
  }
}

/// Loop: CTAs loop over parts (parts > gridDim.x); otherwise one part per CTA (see reduce_path::any).
template <class Algorithm, class Reduction, class Handle, bool Loop = false>
__global__ void __launch_bounds__(threads_per_block, min_blocks_per_sm)
    all_gather(device::context<Handle> ctx, const typename Reduction::value_type* in,
               typename Reduction::value_type* out, std::uint64_t count, std::uint32_t parts) {
  dependent_launch_entry();
  __shared__ typename device::block_all_gather<Algorithm, Reduction, Handle>::temp_storage tmp;
  device::block_all_gather<Algorithm, Reduction, Handle> coll(tmp, static_cast<int>(threadIdx.x),
                                                              static_cast<int>(blockDim.x));
  if constexpr (!Loop) {
    if (!coll.run(ctx, in, out, count, blockIdx.x, parts))
      poison_part<Algorithm, Reduction>(out, count, blockIdx.x, parts, ctx.handle.ranks(), protocol::collective::all_gather, ctx.state, ctx.mirror);
  } else {
    for (std::uint32_t p = blockIdx.x; p < parts; p += gridDim.x) {
      if (p != blockIdx.x) __threadfence();
      if (!coll.run(ctx, in, out, count, p, parts)) {
        for (std::uint32_t q = p; q < parts; q += gridDim.x)
          poison_part<Algorithm, Reduction>(out, count, q, parts, ctx.handle.ranks(), protocol::collective::all_gather, ctx.state, ctx.mirror);
        break;
      }
    }
  }
}

/// A rank that refuses a call (bad input seen on the host), or that is asked for a call on a poisoned communicator,
/// launches this instead of the collective, in stream order: it takes the collective's place in the sequence and
/// tells every peer to abort (session::reject; on a poisoned rank there is nothing to abort), fills `fill` with the
/// poison value (what the host judged safe to write) and counts the call (protocol::failures).
template <class Handle>
__global__ void __launch_bounds__(threads_per_block, 1) reject(device::context<Handle> ctx, algorithm::poison_list fill) {
  dependent_launch_entry();
  device::block_team team{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
  algorithm::fill_poison(fill, threadIdx.x, blockDim.x);
  protocol::session<device::block_team, Handle> s(team, ctx.handle, ctx.state, ctx.policy, 0, 0, ctx.mirror);
  if (s.enter()) {
    protocol::failure_record rec{};
    rec.kind = static_cast<std::uint32_t>(protocol::failure_kind::rejected);
    rec.peer = ctx.handle.rank();
    s.reject(rec);  // counted by protocol::poison
  }
  if (threadIdx.x == 0) protocol::count_failed_call(ctx.state, ctx.mirror);
}

}  // namespace rocenante::kernel

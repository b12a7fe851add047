// core/options.hpp — what a communicator is configured with. Every rank must pass the same values: they are
// exchanged at set-up and any difference fails set-up on every rank, naming the field (hazard H8).
#pragma once

#include <cstdint>

namespace rocenante {

struct options {
  /// Largest input of one rank to one collective, in bytes (all-gather: one rank's contribution).
  std::uint64_t capacity_bytes = std::uint64_t{1} << 20;
  /// Most parts one collective is split into (CTAs on a GPU; loop iterations on the host executor).
  std::uint32_t max_parts = 4;
  /// Fewest bytes of input per part; the part count is derived from the count, so every rank agrees on it.
  std::uint64_t min_part_bytes = 64 * 1024;
  /// GPU: most CTAs one collective's kernel launches per rank (0: max_parts). The co-residency check at set-up
  /// counts these. A collective with more parts than CTAs runs them in a loop: CTA b takes parts b, b + CTAs, ...
  std::uint32_t max_ctas = 0;
  /// GPU: most bytes of input per part (0: no bound). A collective larger than CTAs x max_part_bytes is cut into
  /// more parts than CTAs (at most max_parts), so that what a rank stages for one part is read by its peers while
  /// it is still in the GPU's L2 cache, not after it was written back to memory.
  std::uint64_t max_part_bytes = 0;
  /// Proxy-mode transports (loopback_proxy, socket, ibverbs; the DGX Spark path): a call of at most this many bytes
  /// per rank is posted once, when its last part has staged — one payload write and one flag write per peer and
  /// rail, one doorbell; a larger call posts each part as soon as it is staged, so that the proxy moves one part
  /// while the next is staged. 0: every call posts per part. Direct windows ignore it. Every part of a call posted
  /// once must run at the same time: the executors cap such a call's parts at its CTAs (GPU) or use one part
  /// (host executor).
  std::uint64_t call_post_max_bytes = std::uint64_t{1} << 20;
  /// GPU, directly written windows (cuda_loopback, cuda_ipc), 2 to 8 ranks: a one-shot all-reduce (fp32, fp16, bf16
  /// sums) of at most this many bytes per rank whose every part holds at most one packet per thread takes the
  /// Lamport path — packets that are their own ready flag (algorithm/one_shot.hpp): no fence, no flag round trip,
  /// no barrier between staging and polling. Costs an area of 2 x ranks x this (rounded) bytes per window.
  /// 0: off (every call takes the packet or LL path). Every rank must pass the same value.
  std::uint64_t lamport_max_bytes = 0;
  /// Directly read windows (loopback, cuda_loopback, cuda_ipc): bytes of each rank's window set aside as its
  /// symmetric input area (rounded up to 4 KiB; communicator::symmetric_input()). A one-shot all-reduce whose input
  /// lies there, at the same offset on every rank, and whose output lies elsewhere is summed by reading the peers'
  /// inputs where they are (algorithm/one_shot.hpp, "In-place path"): no staging copy, (n + 1) x S bytes moved per
  /// rank instead of (2n + 1) x S. Proxy-mode transports have no such area (symmetric_input() is empty there).
  /// 0: none. Every rank must pass the same value.
  std::uint64_t symmetric_bytes = 0;
  /// Bound on every wait for a peer, in nanoseconds (0: none — not recommended).
  std::uint64_t timeout_ns = 10'000'000'000ull;
  /// Bound on the number of polls of one wait (0: none). The first of the two bounds to run out ends the wait.
  std::uint64_t max_polls = 0;
  /// Sequence number of the first collective. Tests use values near 2^31 and 2^32 to exercise the wrap.
  std::uint32_t first_sequence = 1;
};

}  // namespace rocenante

// algorithm/partition.hpp — how a collective's packets are split into parts (one part per CTA on a GPU, a loop
// iteration on the host). The split depends only on values every rank shares (count and configuration),
// never on pointers or timing, so every rank cuts the data at the same places (hazard H7).
#pragma once

#include <cstdint>

#include "../protocol/layout.hpp"

namespace rocenante::algorithm {

struct range {
  std::uint64_t begin;
  std::uint64_t end;
  ROCENANTE_HOST_DEVICE constexpr std::uint64_t size() const { return end - begin; }
};

/// Packets each thread keeps in flight in copy and reduce loops: several independent 16-byte loads per thread
/// hide memory latency on a GPU; on the host one is as good as four. 8 / 4 on the GPU made the 64 MiB one-shot 2x
/// slower (docs/results/h200-2026-12-04/s5b-6382782).
inline constexpr int unroll = ROCENANTE_DEVICE_PASS ? 4 : 1;
/// one_shot's reduce loop: a thread loads `source_group` sources x `reduce_unroll` packets before it adds
/// (8 x 16 bytes in flight per thread, no register spills at 512 threads per CTA for fp32/fp16/bf16 on sm_90).
inline constexpr int reduce_unroll = ROCENANTE_DEVICE_PASS ? 2 : 1;
inline constexpr int source_group = ROCENANTE_DEVICE_PASS ? 4 : 1;

/// Part `part` of `parts` over `total` items: contiguous, in order, sizes differ by at most one.
ROCENANTE_HOST_DEVICE constexpr range split(std::uint64_t total, std::uint32_t parts, std::uint32_t part) {
  if (total <= 0xffffffffu) {  // every call below 64 GiB: a 32-bit division (a 64-bit one is a long subroutine on
                               // a GPU, and the first load of a collective waits for this range)
    const std::uint32_t t = static_cast<std::uint32_t>(total), b = t / parts, x = t % parts;
    const std::uint64_t begin = std::uint64_t{part} * b + (part < x ? part : x);
    return {begin, begin + b + (part < x ? 1 : 0)};
  }
  const std::uint64_t base = total / parts, extra = total % parts;
  const std::uint64_t begin = part * base + (part < extra ? part : extra);
  return {begin, begin + base + (part < extra ? 1 : 0)};
}

/// Chunked algorithms (ring, two_shot) cut the call's `packets` packets into n chunks of `chunk_packets(n, packets)`
/// (the last ones shorter or empty) and each chunk the same way into parts, so that part p handles sub-range p of
/// every chunk.
ROCENANTE_HOST_DEVICE constexpr std::uint64_t chunk_packets(int n, std::uint64_t packets) {
  return (packets + static_cast<std::uint64_t>(n) - 1) / static_cast<std::uint64_t>(n);
}

/// Packets of chunk `c` (chunks of `k` packets) in sub-range `sub` of a chunk, clipped to `packets`; never below the
/// chunk's first packet, so that offsets relative to the chunk never wrap (a chunk may lie wholly past the end).
ROCENANTE_HOST_DEVICE constexpr range chunk_part(int c, std::uint64_t k, std::uint64_t packets, const range& sub) {
  const std::uint64_t first = static_cast<std::uint64_t>(c) * k;
  const std::uint64_t limit = packets > first ? packets : first;
  return {first + sub.begin > limit ? limit : first + sub.begin, first + sub.end > limit ? limit : first + sub.end};
}

/// Number of parts for a collective of `packets` packets: every part gets at least `min_packets_per_part`
/// packets (floor), at most `max_parts` parts, at least one part.
ROCENANTE_HOST_DEVICE constexpr std::uint32_t part_count(std::uint64_t packets, std::uint64_t min_packets_per_part,
                                                         std::uint32_t max_parts) {
  const std::uint64_t want = min_packets_per_part ? packets / min_packets_per_part : max_parts;
  return want == 0 ? 1u : (want > max_parts ? max_parts : static_cast<std::uint32_t>(want));
}

/// How a GPU collective is cut: `ctas` CTAs per rank and `parts` >= ctas parts, which the CTAs take in a loop
/// (CTA b: parts b, b + ctas, b + 2 ctas, ... in order).
struct launch_split {
  std::uint32_t parts;
  std::uint32_t ctas;
};

/// CTAs as part_count gives them (at least `min_packets_per_part` each, at most max_ctas); then, when a part
/// would hold more than `max_packets_per_part` packets (0: no bound), more parts — at most max_parts — so that
/// each holds about that many. Depends only on shared values, like part_count.
ROCENANTE_HOST_DEVICE constexpr launch_split plan_split(std::uint64_t packets, std::uint64_t min_packets_per_part,
                                                        std::uint64_t max_packets_per_part, std::uint32_t max_parts,
                                                        std::uint32_t max_ctas) {
  const std::uint32_t ctas = part_count(packets, min_packets_per_part, max_ctas < max_parts ? max_ctas : max_parts);
  std::uint64_t parts = ctas;
  if (max_packets_per_part != 0) {
    const std::uint64_t want = (packets + max_packets_per_part - 1) / max_packets_per_part;
    if (want > parts) parts = want < max_parts ? want : max_parts;
  }
  return {static_cast<std::uint32_t>(parts), ctas};
}

static_assert(plan_split(4096, 256, 0, 64, 32).parts == 16 && plan_split(4096, 256, 0, 64, 32).ctas == 16);
static_assert(plan_split(1 << 22, 256, 4096, 4096, 32).parts == 1024 && plan_split(1 << 22, 256, 4096, 4096, 32).ctas == 32);
static_assert(plan_split(1 << 22, 256, 16, 1024, 32).parts == 1024);
static_assert(plan_split(8192, 256, 4096, 1024, 32).parts == 32);

static_assert(split(10, 3, 0).begin == 0 && split(10, 3, 0).end == 4);
static_assert(split(10, 3, 1).begin == 4 && split(10, 3, 1).end == 7);
static_assert(split(10, 3, 2).begin == 7 && split(10, 3, 2).end == 10);
static_assert(split(2, 4, 3).size() == 0);
static_assert(chunk_packets(4, 9) == 3 && chunk_part(1, 3, 9, {1, 3}).begin == 4 && chunk_part(1, 3, 9, {1, 3}).end == 6);
static_assert(chunk_part(3, 3, 7, {0, 3}).size() == 0 && chunk_part(3, 3, 7, {0, 3}).begin == 9);  // past the end: empty
static_assert(chunk_part(2, 3, 7, {0, 3}).begin == 6 && chunk_part(2, 3, 7, {0, 3}).end == 7);     // clipped

}  // namespace rocenante::algorithm

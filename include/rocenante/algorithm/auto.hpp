// algorithm/auto.hpp — the `auto` algorithm choice: one_shot, two_shot or ring by message size and rank count,
// from a constexpr table of measured crossovers (plain aggregates, as CUB's tuning policies).
//
// The choice depends only on the byte count and the rank count, which every rank shares, so every rank picks the
// same algorithm for the same call (hazard H7). A caller can always force one by naming it.
//
// THE ONLY TABLE TODAY IS AN H200 SINGLE-GPU TABLE: ranks were kernels on one H200 sharing its memory, so it says
// where one_shot's n-fold read traffic starts to lose to ring's 2(n-1) steps on HBM, not on a network. RoCE
// thresholds (DGX Spark, ConnectX-7) are to be measured and added as their own table; until then the H200 table
// is the default everywhere, including the host executor, where it is only a reasonable guess.
#pragma once

#include <cstdint>

#include "concepts.hpp"

namespace rocenante::algorithm {

/// Tag: "choose for me". Accepted where an algorithm tag is (host::communicator::all_reduce, the runtime dispatch,
/// host::selected_communicator); resolved per call by choose(bytes, ranks).
struct automatic {
  static constexpr const char* name = "auto";
};

/// Measured crossovers at `ranks` ranks, in bytes per rank: one_shot up to `one_shot_max_bytes`, then two_shot up to
/// `two_shot_max_bytes`, ring above. A two_shot limit not above the one_shot limit (0: not measured) never chooses
/// two_shot.
struct auto_row {
  int ranks = 0;
  std::uint64_t one_shot_max_bytes = 0;
  std::uint64_t two_shot_max_bytes = 0;
};

/// A table of crossovers, rows sorted by rank count. Ranks between rows use the row with the largest rank count not
/// above them (3 ranks -> the 2-rank row, 5..7 -> the 4-rank row, 16 -> the 8-rank row): unmeasured, stated here.
struct auto_table {
  const char* name;
  int rows_used;
  auto_row rows[8];
};

/// H200, single GPU: ranks as kernels on one H200 (cuda_loopback), bf16 sum, CUDA graph, median of 5 graph launches
/// of 10 collectives, max_parts 16, min_part_bytes 4096; commit 61a8494, 2026-12-03.
/// two_shot is not measured yet, so no row chooses it (two_shot_max_bytes 0). Its column comes from, per rank count:
///   rocenante-perf --transport cuda_loopback --ranks N --algorithm one_shot,two_shot,ring -d bf16 -b 64K -e 64M -f 2 -G 5 -J r.json
inline constexpr auto_table h200_single_gpu{
    "H200 single-GPU (cuda_loopback, bf16, CUDA graph; RoCE not measured yet)",
    3,
    {
        // docs/results/h200-2026-12-03/final-61a8494/sweep/perf-cuda_loopback-r2-graph.json:
        // 256 KiB one_shot 7.06 us vs ring 7.26 us; 512 KiB one_shot 9.34 us vs ring 8.82 us (ring wins from 512 KiB)
        {2, 256u * 1024u},
        // docs/results/h200-2026-12-03/final-61a8494/sweep/perf-cuda_loopback-r4-graph.json:
        // 512 KiB one_shot 15.27 us vs ring 16.72 us; 1 MiB one_shot 23.88 us vs ring 21.68 us (ring wins from 1 MiB)
        {4, 512u * 1024u},
        // docs/results/h200-2026-12-03/final-61a8494/sweep/perf-cuda_loopback-r8-graph.json:
        // 512 KiB one_shot 32.56 us vs ring 34.69 us; 1 MiB one_shot 66.14 us vs ring 41.73 us (ring wins from 1 MiB)
        {8, 512u * 1024u},
    }};

/// The row of `t` that serves `ranks` ranks (the largest rank count not above them; the first row below all).
constexpr const auto_row& row_for(int ranks, const auto_table& t) {
  const auto_row* row = &t.rows[0];
  for (int i = 0; i < t.rows_used; ++i)
    if (t.rows[i].ranks <= ranks) row = &t.rows[i];
  return *row;
}

/// The algorithm `auto` picks for an all-reduce of `bytes` bytes per rank at `ranks` ranks. One rank: one_shot
/// (no exchange at all). All-gather has one_shot only and never consults this.
constexpr algo choose(std::uint64_t bytes, int ranks, const auto_table& t = h200_single_gpu) {
  if (ranks <= 1 || t.rows_used <= 0) return algo::one_shot;
  const auto_row& row = row_for(ranks, t);
  if (bytes <= row.one_shot_max_bytes) return algo::one_shot;
  return bytes <= row.two_shot_max_bytes ? algo::two_shot : algo::ring;
}

/// The byte count up to which `choose` picks one_shot at `ranks` ranks (for logs).
constexpr std::uint64_t one_shot_limit(int ranks, const auto_table& t = h200_single_gpu) {
  if (ranks <= 1 || t.rows_used <= 0) return ~std::uint64_t{0};
  return row_for(ranks, t).one_shot_max_bytes;
}

/// The byte count up to which `choose` picks two_shot at `ranks` ranks, or 0 where it never does (for logs).
constexpr std::uint64_t two_shot_limit(int ranks, const auto_table& t = h200_single_gpu) {
  if (ranks <= 1 || t.rows_used <= 0) return 0;
  const auto_row& row = row_for(ranks, t);
  return row.two_shot_max_bytes > row.one_shot_max_bytes ? row.two_shot_max_bytes : 0;
}

static_assert(choose(256u * 1024u, 2) == algo::one_shot && choose(256u * 1024u + 1, 2) == algo::ring);
static_assert(choose(512u * 1024u, 4) == algo::one_shot && choose(1u << 20, 4) == algo::ring);
static_assert(choose(512u * 1024u, 8) == algo::one_shot && choose(1u << 20, 8) == algo::ring);
static_assert(two_shot_limit(2) == 0 && two_shot_limit(4) == 0 && two_shot_limit(8) == 0, "two_shot is not measured yet");
static_assert([] {
  constexpr auto_table t{"three-way", 1, {{4, 64u * 1024u, 1u << 20}}};
  return choose(64u * 1024u, 4, t) == algo::one_shot && choose(1u << 20, 4, t) == algo::two_shot &&
         choose((1u << 20) + 1, 4, t) == algo::ring && two_shot_limit(4, t) == 1u << 20;
}());

}  // namespace rocenante::algorithm

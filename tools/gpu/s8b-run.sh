#!/usr/bin/env bash
# tools/gpu/s8b-run.sh — correctness of what s8 measures: the compact build's gpu suite (ROCENANTE_COMPACT_KERNELS=1);
# compute-sanitizer on the decode-size kernels (new since the last sanitizer run, f301f95): memcheck, racecheck and
# synccheck on the one-rank subset (every collective with one rank, which runs the decode-size kernel for small
# counts), memcheck on the looped-parts case, memcheck on the compact build's one-rank subset. Then, if Nsight
# Compute reads counters on this machine (device README: Firecracker yes, gVisor no), the decode-size kernel's warp
# stall reasons with one rank (ncu serializes kernels, so ranks that wait on each other cannot run under it): a large
# "no instruction" share means instruction fetch (see benchmarks/gpu/floor.cuh). Binaries built on the CPU machine
# at .deps/commit.
source "$(dirname "$0")/lib.sh"
gpu_header
gpu_prebuilt
gpu_deadline 540
step gpu-tests-collectives-compact 240 $B/test_gpu_collectives-compact
for tool in memcheck racecheck synccheck; do
  step san-$tool 150 compute-sanitizer --tool $tool $B/test_gpu_collectives -tc='one rank*'
done
step san-memcheck-looped 120 compute-sanitizer --tool memcheck $B/test_gpu_collectives -tc='CTAs looping*'
step san-memcheck-compact 120 compute-sanitizer --tool memcheck $B/test_gpu_collectives-compact -tc='one rank*'
for b in test_gpu_collectives test_gpu_collectives-compact; do
  step ncu-$b 120 ncu --clock-control none --cache-control none --section LaunchStats \
    --metrics 'regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$' \
    --kernel-name-base mangled --kernel-name regex:reduce_pathE4 --launch-skip 5 --launch-count 3 $B/$b -tc='one rank*'
  grep -iE "stalled|Block Size|Grid Size|==ERROR|==PROF==" "$OUT/ncu-$b.log" | head -40 | tee -a "$S"
done
gpu_pack

#!/usr/bin/env bash
# tools/gpu/s8b-run.sh — compute-sanitizer on the decode-size kernels (new since the last sanitizer run): memcheck,
# racecheck and synccheck on the one-rank subset (every collective with one rank, which runs the decode-size kernel
# for small counts), memcheck on the looped-parts case; the same subset with the compact build. Binaries built on
# the CPU machine at .deps/commit.
source "$(dirname "$0")/lib.sh"
gpu_header
gpu_prebuilt
for tool in memcheck racecheck synccheck; do
  step san-$tool 150 compute-sanitizer --tool $tool $B/test_gpu_collectives -tc='one rank*'
done
step san-memcheck-looped 120 compute-sanitizer --tool memcheck $B/test_gpu_collectives -tc='CTAs looping*'
step san-memcheck-compact 120 compute-sanitizer --tool memcheck $B/test_gpu_collectives-compact -tc='one rank*'
gpu_pack

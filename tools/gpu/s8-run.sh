#!/usr/bin/env bash
# tools/gpu/s8-run.sh — prepared for the next device call (not run yet): binaries built on the CPU machine at
# .deps/commit. compute-sanitizer (memcheck, racecheck, synccheck) on the one-rank subset and memcheck on the
# looped-parts case with the decode-size kernels; the suites; the phase tracer, which now prints the floor kernel's
# phases (benchmarks/gpu/floor.cuh) beside the library's, at 48 KiB and 2 / 4 / 8 ranks; the decode rows.
source "$(dirname "$0")/lib.sh"
gpu_header
gpu_prebuilt
step gpu-tests-collectives 150 $B/test_gpu_collectives
step gpu-tests-nvfp4 60 $B/test_gpu_nvfp4
for tool in memcheck racecheck synccheck; do
  step san-$tool 120 compute-sanitizer --tool $tool $B/test_gpu_collectives -tc='one rank*'
done
step san-memcheck-looped 90 compute-sanitizer --tool memcheck $B/test_gpu_collectives -tc='CTAs looping*'
{ for n in 4 2 8; do timeout 60 $B/rocenante-trace-phases 49152 $n 16; done; } >"$OUT/trace.log" 2>&1
say "trace: rc=$?"; grep -vE "^$" "$OUT/trace.log" | tee -a "$S"
gpu_bench decode $B/rocenante-bench-gpu 'all_reduce/one_shot/loopback/bf16/bytes:(8192|49152)/ranks:(2|4|8)/graph:1|floor/one_shot_minimal/bf16/bytes:49152/ranks:(2|4|8)/ctas:16/threads:256/pdl:1' ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=1
gpu_pack

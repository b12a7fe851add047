#!/usr/bin/env bash
# tools/gpu/s7-run.sh — first device call of 2026-12-04 (night). Binaries built on the CPU machine (.deps/bin) at the
# commit in .deps/commit. (1) The suites on the review changes of b936aab, which never ran on the GPU. (2) Where the
# decode-size time goes: the library's one-shot rows beside the floor rows of the same binary (floor/empty: a
# kernel of the collective's grid doing nothing, K per rank stream; floor/one_shot_minimal: the least one-shot this
# transport allows), programmatic launch off and on. (3) The phase tracer at 48 KiB, 4 ranks, 16 CTAs.
source "$(dirname "$0")/lib.sh"
gpu_header
export LD_LIBRARY_PATH=$root/.deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$root/.deps/bin
step gpu-tests-collectives 150 $B/test_gpu_collectives
step gpu-tests-nvfp4 60 $B/test_gpu_nvfp4
dec='all_reduce/one_shot/loopback/bf16/bytes:(8192|49152)/ranks:(2|4|8)/graph:1|floor/'
gpu_bench decode-pdl1 $B/rocenante-bench-gpu "$dec" ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=1
gpu_bench decode-pdl0 $B/rocenante-bench-gpu 'all_reduce/one_shot/loopback/bf16/bytes:(8192|49152)/ranks:(2|4|8)/graph:1' ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=0
{ timeout 60 $B/rocenante-trace-phases 49152 4 16; } >"$OUT/trace.log" 2>&1
say "trace: rc=$?"; grep -vE "^$" "$OUT/trace.log" >>"$S"
gpu_pack

#!/usr/bin/env bash
# Ran at commit 2cbb7ed (docs/results/h200-2026-12-04/); the experiment macros it uses (ROCENANTE_DISCARD_STAGED,
# ROCENANTE_ONE_SHOT_BULK_ONLY) exist only there: later code has kernel::reduce_path instead.
# tools/gpu/s6b-run.sh — second device call of 2026-12-04 (evening): binaries built on the CPU machine from this
# commit (.deps/bin, with .deps/lib/libbenchmark) to save device time. The gpu suite with the staged lines dropped
# from L2 after the reduce (ROCENANTE_DISCARD_STAGED=1; includes the looped-parts case at 16 KiB parts); the 64 MiB
# one-shot row (4 ranks, bf16, graph) by part size, with and without the discard, and with the one-shot kernel
# compiled without its LL and one-packet paths (ROCENANTE_ONE_SHOT_BULK_ONLY=1: 118 registers, no spills, vs 128
# registers and 1368 bytes of spills).
source "$(dirname "$0")/lib.sh"
gpu_header
export LD_LIBRARY_PATH=$root/.deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$root/.deps/bin
step gpu-tests-collectives-discard 200 $B/test-d
f='all_reduce/one_shot/loopback/bf16/bytes:67108864/ranks:4/graph:1|copy/d2d/bytes:67108864'
loop() { echo ROCENANTE_BENCH_MAX_PARTS=4096 ROCENANTE_BENCH_MAX_CTAS=32 ROCENANTE_BENCH_MAX_PART_BYTES=$1; }
gpu_bench base $B/bench-base "$f"
gpu_bench base-64k $B/bench-base "$f" $(loop 65536)
gpu_bench d-none $B/bench-d "$f"
for pb in 32768 65536 131072; do gpu_bench d-$pb $B/bench-d "$f" $(loop $pb); done
gpu_bench db-none $B/bench-db "$f"
for pb in 32768 65536 131072; do gpu_bench db-$pb $B/bench-db "$f" $(loop $pb); done
gpu_bench base-again $B/bench-base "$f"
gpu_pack

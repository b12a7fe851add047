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
bench() {  # bench NAME BINARY [VAR=VALUE...]
  local name=$1 bin=$2; shift 2; local t; t=$(date +%s)
  env "$@" timeout 60 $B/$bin --benchmark_filter="$f" --benchmark_out="$OUT/$name.json" --benchmark_out_format=json >"$OUT/bench-$name.log" 2>&1
  say "$name ($bin $*): rc=$? after $(( $(date +%s) - t )) s"
  grep -E "^(all_|copy)" "$OUT/bench-$name.log" | awk '{printf "  %-72s %10s %s\n", $1, $2, $3}' | tee -a "$S"
}
loop() { echo ROCENANTE_BENCH_MAX_PARTS=4096 ROCENANTE_BENCH_MAX_CTAS=32 ROCENANTE_BENCH_MAX_PART_BYTES=$1; }
bench base bench-base
bench base-64k bench-base $(loop 65536)
bench d-none bench-d
for pb in 32768 65536 131072; do bench d-$pb bench-d $(loop $pb); done
bench db-none bench-db
for pb in 32768 65536 131072; do bench db-$pb bench-db $(loop $pb); done
bench base-again bench-base
gpu_pack

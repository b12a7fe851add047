#!/usr/bin/env bash
# tools/gpu/s5e-run.sh — fifth device call of 2026-12-04 (afternoon): LL at 4 ranks with more CTAs per rank. LL's
# stage cost grows with the bytes each CTA stores (2x the payload, to every peer), so at 12 CTAs per rank it lost to
# packets + flag (ll-1145a32); here a second benchmark binary built with ROCENANTE_LL_MAX_RANKS=4 runs 8 / 48 KiB at
# 4 ranks with input per CTA 4096 / 2048 / 1536 bytes (max_parts 16: programmatic launch fits), beside the default
# binary at the same settings. Results in $OUT: summary.log and logs.tar.gz.
source "$(dirname "$0")/lib.sh"
gpu_header
b=build-s5e; v=build-ll4
gpu_setup $b -Dexamples=false
gpu_setup $v -Dexamples=false
ninja -C $b -j8 benchmarks/gpu/rocenante-bench-gpu >/tmp/build.log 2>&1 &
NVCC_APPEND_FLAGS="-DROCENANTE_LL_MAX_RANKS=4" ninja -C $v -j8 benchmarks/gpu/rocenante-bench-gpu tests/gpu/test_gpu_collectives >/tmp/build2.log 2>&1
wait
gpu_build_errors /tmp/build.log /tmp/build2.log
say "build: $(( $(date +%s) - t0 )) s"
F='all_reduce/one_shot/loopback/bf16/bytes:(8192|49152)/ranks:4/graph:1'
for run in "$b 4096" "$v 4096" "$v 2048" "$v 1536" "$b 1536"; do read -r bin mp <<<"$run"; t=$(date +%s)
  ROCENANTE_BENCH_PDL=1 ROCENANTE_BENCH_MAX_PARTS=16 ROCENANTE_BENCH_MIN_PART=$mp timeout 60 $bin/benchmarks/gpu/rocenante-bench-gpu --benchmark_filter="$F" \
    --benchmark_out="$OUT/ll4-$bin-$mp.json" --benchmark_out_format=json --benchmark_counters_tabular=true >"$OUT/bench-ll4-$bin-$mp.log" 2>&1
  say "rocenante-bench-gpu ($bin, PDL on, max_parts 16, min_part $mp): rc=$? after $(( $(date +%s) - t )) s"
  grep -E "^all_reduce" "$OUT/bench-ll4-$bin-$mp.log" | awk '{print "  " $1, $2, $3}' | tee -a "$S"
done
t=$(date +%s); timeout 120 $v/tests/gpu/test_gpu_collectives -tc='*bit for bit*,*never launches*,*refuses*' >"$OUT/gpu-tests-ll4.log" 2>&1
say "gpu tests (correctness, never launches, refusal) with LL at 4 ranks: rc=$? after $(( $(date +%s) - t )) s; $(grep -E 'test cases:' "$OUT/gpu-tests-ll4.log")"
gpu_pack

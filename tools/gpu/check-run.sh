#!/usr/bin/env bash
# tools/gpu/check-run.sh — gpu suite (collectives, 3x the proxy-pause case), a narrow benchmark receipt
# (headline sizes, proxy mode, 64 MiB against the copy) and the rocenante-perf runs whose first collective
# stalled in an earlier run (all-gather and proxy at 4 ranks). Results in $OUT (at most 8 files).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"; root=$PWD; export PATH=/usr/local/cuda/bin:$PATH
S="$OUT/summary.log"; say() { echo "$*" | tee -a "$S"; }
{ date -u +%Y-%m-%dT%H:%M:%SZ; echo "commit: $(cat .deps/commit)"; echo "CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-unset}"
  nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm --format=csv; } 2>&1 | tee "$S"
t0=$(date +%s); b=build-h200
meson setup $b -Dgpu_archs=90a -Dexamples=false -Dextra_include="$root/.deps/include" >/tmp/setup.log 2>&1 || { tail -20 /tmp/setup.log | tee -a "$S"; exit 1; }
ninja -C $b -j16 tests/gpu/test_gpu_collectives benchmarks/gpu/rocenante-bench-gpu benchmarks/rocenante-perf >/tmp/build.log 2>&1 ||
  { grep -E "error|FAILED" -A3 /tmp/build.log | head -40 | tee -a "$S"; }
say "build: $(( $(date +%s) - t0 )) s"
t=$(date +%s); timeout 150 $b/tests/gpu/test_gpu_collectives >"$OUT/gpu-tests.log" 2>&1
say "test_gpu_collectives: rc=$? after $(( $(date +%s) - t )) s; $(grep -E 'test cases:' "$OUT/gpu-tests.log")"
for i in 1 2 3; do timeout 30 $b/tests/gpu/test_gpu_collectives -tc='*proxy stopped*' >/tmp/p$i.log 2>&1
  say "proxy-pause repeat $i: rc=$? $(grep -E 'test cases:' /tmp/p$i.log)"; done
F='all_reduce/(one_shot|ring)/loopback/bf16/bytes:(8192|49152|67108864)/ranks:4|all_reduce/one_shot/loopback/bf16/bytes:49152/ranks:(2|8)|all_reduce/one_shot/loopback_proxy/bf16/bytes:(8192|49152)/ranks:4|copy'
t=$(date +%s); timeout 120 $b/benchmarks/gpu/rocenante-bench-gpu --benchmark_filter="$F" --benchmark_out="$OUT/h200-loopback.json" \
  --benchmark_out_format=json --benchmark_counters_tabular=true >"$OUT/bench-gpu.log" 2>&1
say "rocenante-bench-gpu: rc=$? after $(( $(date +%s) - t )) s (filter: $F)"
for args in "--collective all_gather -b 32 -e 64M -f 2 -d all -w 2 -n 20" "--transport cuda_proxy -b 8 -e 1M -f 4 -d bfloat16 --algo all -w 2 -n 20"; do
  t=$(date +%s); timeout 60 $b/benchmarks/rocenante-perf --ranks 4 $args >>"$OUT/perf.log" 2>&1
  say "rocenante-perf --ranks 4 $args: rc=$? after $(( $(date +%s) - t )) s; $(grep 'Out of bounds' "$OUT/perf.log" | tail -1)"
done
say "total: $(( $(date +%s) - t0 )) s"

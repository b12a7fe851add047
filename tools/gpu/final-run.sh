#!/usr/bin/env bash
# tools/gpu/final-run.sh — one device call that validates and measures everything GPU-side at one commit:
# build every GPU target (tests, Google Benchmark suites, rocenante-perf, examples) for sm_90a, run the gpu
# suite (collectives, nvfp4), the compute-sanitizer subset, the loopback/proxy benchmark, the NVFP4 benchmark,
# then the rocenante-perf sweeps and the examples (benchmarks/perf/h200-sweep.sh). Each step has its own time
# limit, so a hang costs one step, not the call. The device returns at most 8 files: logs and JSON land in $OUT
# directly, the sweep's many receipts in one tarball.
# Before (on the development machine): .deps/include holds doctest/ and nccl.h; .deps/commit the commit id.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
root=$PWD
export PATH=/usr/local/cuda/bin:$PATH
S="$OUT/summary.log"
say() { echo "$*" | tee -a "$S"; }
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  echo "commit: $(cat .deps/commit 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,clocks.max.sm --format=csv
  nvcc --version | tail -1; meson --version; uname -r
} 2>&1 | tee "$S"
t0=$(date +%s)
b=build-h200-perf
meson setup $b -Dgpu_archs=90a -Dexamples=true -Dextra_include="$root/.deps/include" >/tmp/setup.log 2>&1 ||
  { tail -30 /tmp/setup.log | tee -a "$S"; exit 1; }
ninja -C $b -j16 tests/gpu/test_gpu_collectives tests/gpu/test_gpu_nvfp4 benchmarks/gpu/rocenante-bench-gpu \
  benchmarks/gpu/rocenante-bench-nvfp4 benchmarks/rocenante-perf examples/00_quickstart examples/01_user_kernel \
  examples/02_tp_mlp_decode >/tmp/build.log 2>&1 || { grep -E "error|FAILED" -A3 /tmp/build.log | head -60 | tee -a "$S"; }
say "build: $(( $(date +%s) - t0 )) s"
step() {  # step NAME LIMIT CMD...: runs with a time limit, output to $OUT/NAME.log unless redirected
  local name=$1 lim=$2; shift 2
  local t=$(date +%s)
  timeout "$lim" "$@" >"$OUT/$name.log" 2>&1
  local r=$?
  say "$name: rc=$r after $(( $(date +%s) - t )) s; $(grep -E 'test cases:|Status:' "$OUT/$name.log" | tr '\n' ' ')"
}
step gpu-tests-collectives 200 $b/tests/gpu/test_gpu_collectives
step gpu-tests-nvfp4 150 $b/tests/gpu/test_gpu_nvfp4
for tool in memcheck racecheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 $b/tests/gpu/test_gpu_collectives -tc="*one rank*" \
    >/tmp/san-$tool.log 2>&1
  say "compute-sanitizer $tool on test_gpu_collectives -tc='*one rank*': rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/san-$tool.log | tail -1)"
done
F='all_reduce/(one_shot|ring)/loopback(_proxy)?/bf16/.*ranks:4|all_reduce/one_shot/loopback/bf16/bytes:(8192|49152|1048576)/ranks:(2|8)|all_gather/one_shot/loopback/bf16/bytes:(8192|49152)/ranks:4|all_reduce/one_shot/loopback/(fp16|fp32)/bytes:(49152|67108864)|copy'
t=$(date +%s)
timeout 150 $b/benchmarks/gpu/rocenante-bench-gpu --benchmark_filter="$F" --benchmark_out="$OUT/h200-loopback.json" \
  --benchmark_out_format=json --benchmark_counters_tabular=true >"$OUT/bench-gpu.log" 2>&1
say "rocenante-bench-gpu: rc=$? after $(( $(date +%s) - t )) s (filter: $F)"
t=$(date +%s)
timeout 150 $b/benchmarks/gpu/rocenante-bench-nvfp4 --benchmark_out="$OUT/nvfp4-h200.json" --benchmark_out_format=json \
  --benchmark_counters_tabular=true >"$OUT/bench-nvfp4.log" 2>&1
say "rocenante-bench-nvfp4: rc=$? after $(( $(date +%s) - t )) s"
mkdir -p /tmp/sweep
t=$(date +%s)
OUT=/tmp/sweep timeout 200 bash benchmarks/perf/h200-sweep.sh examples >/tmp/sweep/examples-summary.txt 2>&1
say "examples: rc=$? after $(( $(date +%s) - t )) s"; cat /tmp/sweep/examples-summary.txt >>"$S"
t=$(date +%s)
OUT=/tmp/sweep timeout 240 bash benchmarks/perf/h200-sweep.sh perf >/tmp/sweep/perf-summary.txt 2>&1
say "sweeps: rc=$? after $(( $(date +%s) - t )) s"; cat /tmp/sweep/perf-summary.txt >>"$S"
cp /tmp/san-*.log /tmp/sweep/ 2>/dev/null
tar czf "$OUT/sweep.tar.gz" -C /tmp sweep
say "total: $(( $(date +%s) - t0 )) s"

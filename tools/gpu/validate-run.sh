#!/usr/bin/env bash
# tools/gpu/validate-run.sh — one device call: the gpu suites at this commit (the shared proxy thread of
# transport/proxy.hpp on a GPU), the "proxy stopped across two doorbells" case 20 more times (it failed
# intermittently at c429b60; on failure the test prints each rank's proxy counters, queue stamps and epochs),
# compute-sanitizer on the one-rank subset, the phase tracer, and the NVFP4 benchmark with the plain epilogue's
# shape sweep. Results in $OUT: summary.log and logs.tar.gz.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"; root=$PWD; export PATH=/usr/local/cuda/bin:$PATH
S="$OUT/summary.log"; say() { echo "$*" | tee -a "$S"; }
{ date -u +%Y-%m-%dT%H:%M:%SZ; echo "commit: $(cat .deps/commit)"
  nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1; } 2>&1 | tee "$S"
t0=$(date +%s); b=build-val
meson setup $b -Dgpu_archs=90a -Dexamples=false -Dextra_include="$root/.deps/include" >/tmp/setup.log 2>&1 || { tail -20 /tmp/setup.log | tee -a "$S"; exit 1; }
ninja -C $b -j16 tests/gpu/test_gpu_collectives tests/gpu/test_gpu_nvfp4 benchmarks/gpu/rocenante-bench-nvfp4 \
  benchmarks/gpu/rocenante-trace-phases >/tmp/build.log 2>&1 ||
  { grep -E "error|FAILED" -A3 /tmp/build.log | head -40 | tee -a "$S"; }
say "build: $(( $(date +%s) - t0 )) s"
step() { local name=$1 lim=$2; shift 2; local t=$(date +%s); timeout "$lim" "$@" >"$OUT/$name.log" 2>&1; local r=$?
  say "$name: rc=$r after $(( $(date +%s) - t )) s; $(grep -E 'test cases:|Status:' "$OUT/$name.log" | tr '\n' ' ')"; }
step gpu-tests-collectives 200 $b/tests/gpu/test_gpu_collectives
step gpu-tests-nvfp4 150 $b/tests/gpu/test_gpu_nvfp4
fails=0; t=$(date +%s)
for k in $(seq 1 20); do
  timeout 30 $b/tests/gpu/test_gpu_collectives -tc='*stopped across two doorbells*' >"$OUT/pause-$k.log" 2>&1 || { fails=$((fails+1)); cp "$OUT/pause-$k.log" "$OUT/pause-fail-$k.log"; }
  rm -f "$OUT/pause-$k.log"
done
say "proxy stopped across two doorbells, 20 more runs: $fails failed, $(( $(date +%s) - t )) s"
for f in "$OUT"/pause-fail-*.log; do [ -f "$f" ] && { grep -E "MESSAGE|diagnostics|part [0-9]+:|ERROR" -A0 "$f" | head -60 | tee -a "$S"; break; }; done
for tool in memcheck racecheck synccheck; do
  timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 $b/tests/gpu/test_gpu_collectives -tc="*one rank*" >"$OUT/san-$tool.log" 2>&1
  say "compute-sanitizer $tool on test_gpu_collectives -tc='*one rank*': rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san-$tool.log" | tail -1)"
done
{ for args in "49152 4 16" "8192 4 16"; do timeout 60 $b/benchmarks/gpu/rocenante-trace-phases $args; done; } >"$OUT/trace.log" 2>&1
say "trace: rc=$?"; cat "$OUT/trace.log" >>"$S"
t=$(date +%s)
timeout 200 $b/benchmarks/gpu/rocenante-bench-nvfp4 --benchmark_filter='copy|quantize' --benchmark_out="$OUT/nvfp4-h200.json" --benchmark_out_format=json \
  --benchmark_counters_tabular=true >"$OUT/bench-nvfp4.log" 2>&1
say "rocenante-bench-nvfp4 (codec and epilogue rows): rc=$? after $(( $(date +%s) - t )) s"; grep -E "copy|quantize" "$OUT/bench-nvfp4.log" | tee -a "$S"
say "total: $(( $(date +%s) - t0 )) s"
cd "$OUT" && tar czf logs.tar.gz *.log *.json && rm -f bench-*.log gpu-*.log san-*.log trace.log pause-*.log stdout.log *.json

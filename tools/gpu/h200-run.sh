#!/usr/bin/env bash
# tools/gpu/h200-run.sh — what runs on the H200 (the `device` machine): build the GPU targets for sm_90a, run
# the gpu suite, run the GPU benchmark suite, and leave logs and JSON receipts in $OUT (default: ./gpu-out).
# Usage: tools/gpu/h200-run.sh [tests|bench|all] [extra benchmark args...]
# The machine has no doctest / Google Benchmark packages and no internet: their headers and library travel in
# .deps/ (copied from this machine's Debian packages; see docs/results/README.md).
set -uo pipefail
mode=${1:-all}; shift || true
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
root=$PWD
export LD_LIBRARY_PATH=$root/.deps/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  echo "commit: $(cat .deps/commit 2>/dev/null || echo unknown) (from .deps/commit; the device copy's own .git may be older)"
  nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,clocks.max.sm --format=csv
  nvcc --version | tail -1; meson --version; uname -r
} 2>&1 | tee "$OUT/machine.txt"
t0=$(date +%s)
# Meson build of the GPU targets; plain nvcc (same flags) when the Meson set-up is not usable.
nvflags="-std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xcompiler=-pthread -Iinclude -I.deps/include"
test_bin=build-gpu/tests/gpu/test_gpu_collectives; bench_bin=build-gpu/benchmarks/gpu/rocenante-bench-gpu
if meson setup build-gpu -Dgpu_archs=90a -Dextra_include="$root/.deps/include" -Dexamples=false >"$OUT/setup.log" 2>&1; then
  targets="tests/gpu/test_gpu_collectives"
  [ "$mode" != tests ] && [ "$mode" != sanitize ] && targets="$targets benchmarks/gpu/rocenante-bench-gpu"
  ninja -C build-gpu -j16 $targets >"$OUT/build.log" 2>&1 || { grep -E "error|FAILED" -A3 "$OUT/build.log" | head -60; exit 1; }
else
  echo "meson set-up failed (see setup.log); building with nvcc directly"; tail -3 "$OUT/setup.log"
  mkdir -p build-direct; test_bin=build-direct/test_gpu_collectives; bench_bin=build-direct/rocenante-bench-gpu
  nvcc $nvflags tests/gpu/test_gpu_collectives.cu -o $test_bin -lcuda >"$OUT/build.log" 2>&1 &
  [ "$mode" != tests ] && nvcc $nvflags benchmarks/gpu/bench_gpu.cu -o $bench_bin -L.deps/lib -lbenchmark -lcuda >>"$OUT/build.log" 2>&1 &
  wait || true
  [ -x $test_bin ] || { grep -E "error" -A3 "$OUT/build.log" | head -60; exit 1; }
fi
echo "build: $(( $(date +%s) - t0 )) s"
rc=0
if [ "$mode" = all ] || [ "$mode" = tests ]; then
  t1=$(date +%s)
  $test_bin ${TEST_ARGS:-} 2>&1 | tee "$OUT/gpu-tests.log"
  rc=${PIPESTATUS[0]}
  echo "gpu tests: rc=$rc, $(( $(date +%s) - t1 )) s"
fi
if [ "$mode" = all ] || [ "$mode" = sanitize ]; then
  t3=$(date +%s)
  for tool in memcheck racecheck synccheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 $test_bin -tc="*one rank*" > "$OUT/sanitizer-$tool.log" 2>&1
    echo "compute-sanitizer $tool: rc=$? ($(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer-$tool.log" | tail -1))"
  done
  echo "sanitizers: $(( $(date +%s) - t3 )) s"
fi
if [ "$mode" != tests ] && [ "$mode" != sanitize ]; then
  t2=$(date +%s)
  filter=()
  [ -n "${BENCH_FILTER:-}" ] && filter=(--benchmark_filter="$BENCH_FILTER")
  $bench_bin --benchmark_out="$OUT/h200-loopback.json" --benchmark_out_format=json \
    --benchmark_counters_tabular=true "${filter[@]}" "$@" 2>&1 > "$OUT/bench.log"
  echo "bench: rc=$?, $(( $(date +%s) - t2 )) s"
  grep -E "^(all_reduce/one_shot/loopback/bf16/bytes:49152|all_reduce/.*/bf16/bytes:(8192|67108864)/ranks:4|copy)" "$OUT/bench.log" | head -40
fi
exit $rc

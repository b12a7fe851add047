#!/usr/bin/env bash
# tools/gpu/s5d-run.sh — fourth device call of 2026-12-04 (afternoon): the gpu suite with the new 2-rank LL failure
# cases (a rank that never launches, a rank that refuses its input, calls with different counts), then those three
# cases twice more. Results in $OUT: summary.log and logs.tar.gz.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"; root=$PWD; export PATH=/usr/local/cuda/bin:$PATH
S="$OUT/summary.log"; say() { echo "$*" | tee -a "$S"; }
{ date -u +%Y-%m-%dT%H:%M:%SZ; echo "commit: $(cat .deps/commit)"; nvidia-smi --query-gpu=name,driver_version --format=csv; } 2>&1 | tee "$S"
t0=$(date +%s); b=build-s5d
meson setup $b -Dgpu_archs=90a -Dexamples=false -Dbenchmarks=false -Dextra_include="$root/.deps/include" >/tmp/setup.log 2>&1 || { tail -20 /tmp/setup.log | tee -a "$S"; exit 1; }
ninja -C $b -j16 tests/gpu/test_gpu_collectives >/tmp/build.log 2>&1 || { grep -E "error|FAILED" -A3 /tmp/build.log | head -30 | tee -a "$S"; }
say "build: $(( $(date +%s) - t0 )) s"
step() { local name=$1 lim=$2; shift 2; local t=$(date +%s); timeout "$lim" "$@" >"$OUT/$name.log" 2>&1; local r=$?
  say "$name: rc=$r after $(( $(date +%s) - t )) s; $(grep -E 'test cases:|Status:' "$OUT/$name.log" | tr '\n' ' ')"; }
step gpu-tests-collectives 200 $b/tests/gpu/test_gpu_collectives -s
grep -E "^.*(rank [0-9]+: |saw the failure)" "$OUT/gpu-tests-collectives.log" | grep -E "LL|ms" | head -20 >>"$S"
for k in 1 2; do step gpu-ll-failures-$k 60 $b/tests/gpu/test_gpu_collectives -tc='2 ranks*'; done
cd "$OUT" && tar czf logs.tar.gz --exclude=logs.tar.gz --exclude=summary.log *.log && find . -maxdepth 1 -type f ! -name summary.log ! -name logs.tar.gz -delete; cd "$root"
say "total: $(( $(date +%s) - t0 )) s"

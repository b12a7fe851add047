#!/usr/bin/env bash
# tools/gpu/s5f-run.sh — sixth device call of 2026-12-04 (afternoon), after the review: LL calls write an LL flag
# word (protocol::ll_word_signature) so that a peer on the other path fails with a mismatch at once; new cases
# (LL vs packet path at 2 ranks; the NVFP4 launcher with a misaligned input). gpu + nvfp4 suites, and the 2- and
# 4-rank 48 KiB rows (programmatic launch on, max_parts 16) to compare with s5c-8599fd3 (3.61 / 4.28 us).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"; root=$PWD; export PATH=/usr/local/cuda/bin:$PATH
S="$OUT/summary.log"; say() { echo "$*" | tee -a "$S"; }
{ date -u +%Y-%m-%dT%H:%M:%SZ; echo "commit: $(cat .deps/commit)"; nvidia-smi --query-gpu=name,driver_version --format=csv; } 2>&1 | tee "$S"
t0=$(date +%s); b=build-s5f
meson setup $b -Dgpu_archs=90a -Dexamples=false -Dextra_include="$root/.deps/include" >/tmp/setup.log 2>&1 || { tail -20 /tmp/setup.log | tee -a "$S"; exit 1; }
ninja -C $b -j16 tests/gpu/test_gpu_collectives tests/gpu/test_gpu_nvfp4 benchmarks/gpu/rocenante-bench-gpu >/tmp/build.log 2>&1 || { grep -E "error|FAILED" -A3 /tmp/build.log | head -30 | tee -a "$S"; }
say "build: $(( $(date +%s) - t0 )) s"
step() { local name=$1 lim=$2; shift 2; local t=$(date +%s); timeout "$lim" "$@" >"$OUT/$name.log" 2>&1; local r=$?
  say "$name: rc=$r after $(( $(date +%s) - t )) s; $(grep -E 'test cases:|Status:' "$OUT/$name.log" | tr '\n' ' ')"; }
step gpu-tests-collectives 150 $b/tests/gpu/test_gpu_collectives
grep -E "MESSAGE: rank [0-9]: launch" "$OUT/gpu-tests-collectives.log" | sed 's/^.*MESSAGE: /  /' | cut -c1-200 >>"$S"
step gpu-tests-nvfp4 100 $b/tests/gpu/test_gpu_nvfp4
t=$(date +%s)
ROCENANTE_BENCH_PDL=1 ROCENANTE_BENCH_MAX_PARTS=16 timeout 60 $b/benchmarks/gpu/rocenante-bench-gpu --benchmark_filter='all_reduce/one_shot/loopback/bf16/bytes:49152/ranks:(2|4)/graph:1' \
  --benchmark_out="$OUT/ll-word.json" --benchmark_out_format=json >"$OUT/bench-ll-word.log" 2>&1
say "rocenante-bench-gpu 48 KiB PDL on max_parts 16: rc=$? after $(( $(date +%s) - t )) s"; grep -E "^all_reduce" "$OUT/bench-ll-word.log" | awk '{print "  " $1, $2, $3}' | tee -a "$S"
cd "$OUT" && tar czf logs.tar.gz --exclude=logs.tar.gz --exclude=summary.log *.log *.json && find . -maxdepth 1 -type f ! -name summary.log ! -name logs.tar.gz -delete; cd "$root"
say "total: $(( $(date +%s) - t0 )) s"

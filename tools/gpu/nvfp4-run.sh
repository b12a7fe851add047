#!/usr/bin/env bash
# tools/gpu/nvfp4-run.sh — one short device call: the nvfp4 gpu suite (GPU codec == host on 1e8 elements, collectives
# and both standalone epilogue kernels == host), the NVFP4 benchmark (epilogue and codec against the copy), and the
# alternating-eager-streams collectives case five times with programmatic launch on (ROCENANTE_TEST_PDL=1).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"; root=$PWD; export PATH=/usr/local/cuda/bin:$PATH
S="$OUT/summary.log"; say() { echo "$*" | tee -a "$S"; }
{ date -u +%Y-%m-%dT%H:%M:%SZ; echo "commit: $(cat .deps/commit)"
  nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm --format=csv; } 2>&1 | tee "$S"
t0=$(date +%s); b=build-h200-nv; rm -rf $b
meson setup $b -Dgpu_archs=90a -Dexamples=false -Dextra_include="$root/.deps/include" >/tmp/setup.log 2>&1 || { tail -20 /tmp/setup.log | tee -a "$S"; exit 1; }
ninja -C $b -j16 tests/gpu/test_gpu_collectives tests/gpu/test_gpu_nvfp4 benchmarks/gpu/rocenante-bench-nvfp4 >/tmp/build.log 2>&1 ||
  { grep -E "error|FAILED" -A3 /tmp/build.log | head -40 | tee -a "$S"; }
say "build: $(( $(date +%s) - t0 )) s"
step() { local name=$1 lim=$2; shift 2; local t=$(date +%s); timeout "$lim" "$@" >"$OUT/$name.log" 2>&1; local r=$?
  say "$name: rc=$r after $(( $(date +%s) - t )) s; $(grep -E 'test cases:|Status:' "$OUT/$name.log" | tr '\n' ' ')"; }
step gpu-tests-nvfp4 150 $b/tests/gpu/test_gpu_nvfp4
for k in 1 2 3 4 5; do ROCENANTE_TEST_PDL=1 step gpu-alternating-pdl-$k 60 $b/tests/gpu/test_gpu_collectives -tc='*alternating*'; done
t=$(date +%s)
timeout 150 $b/benchmarks/gpu/rocenante-bench-nvfp4 --benchmark_out="$OUT/nvfp4-h200.json" --benchmark_out_format=json \
  --benchmark_counters_tabular=true >"$OUT/bench-nvfp4.log" 2>&1
say "rocenante-bench-nvfp4: rc=$? after $(( $(date +%s) - t )) s"; grep -E "quantize|codec|fp4|copy" "$OUT/bench-nvfp4.log" | tee -a "$S"
say "total: $(( $(date +%s) - t0 )) s"
cd "$OUT" && tar czf logs.tar.gz *.log *.json && rm -f bench-*.log gpu-*.log *.json; ls

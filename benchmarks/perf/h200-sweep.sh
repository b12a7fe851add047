#!/usr/bin/env bash
# benchmarks/perf/h200-sweep.sh — what rocenante-perf and the examples run on the H200 (the `device` machine):
# build the targets for sm_90a, run the rocenante-perf sweeps (2, 4, 8 ranks on the one GPU; every algorithm and
# dtype; 8 B..64 MiB; eager and CUDA graph), a world of one beside NCCL, a short proxy-mode sweep, and examples
# 00, 01 and 02; leave receipts (JSON), tables and logs in $OUT (default ./gpu-out), laid out for docs/results/.
#
# Usage (repository root, on the GPU machine):  bash benchmarks/perf/h200-sweep.sh [all|perf|examples]
# Before: copy NCCL's header next to the other carried headers (the GPU machine has libnccl.so.2 in the torch
# environment but no nccl.h):  mkdir -p .deps/include && cp /usr/local/cuda/include/nccl.h .deps/include/
# Without it the NCCL rows are not built (the output says so); everything else runs. The copy of the tree on the
# GPU machine has no .git: write the commit for the receipts first, on this machine:
#   git rev-parse HEAD > .deps/commit; (git status --porcelain | grep -q . && echo dirty || echo clean) >> .deps/commit
# Expected time on one H200: build ~1-2 min (16 cores); sweeps ~60-90 s; examples ~20 s.
set -uo pipefail
mode=${1:-all}
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
root=$PWD
export PATH=/usr/local/cuda/bin:$PATH
# libnccl.so.2 from the torch environment's nvidia-nccl package, when there is one
nccl_dir=$(python3 -c 'import os, nvidia.nccl as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null || true)
if [ -n "$nccl_dir" ] && [ -e "$nccl_dir/libnccl.so.2" ]; then export LD_LIBRARY_PATH=$nccl_dir:${LD_LIBRARY_PATH:-}; fi
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  echo "commit: $(git rev-parse --verify -q HEAD 2>/dev/null || cat .deps/commit 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.draw --format=csv
  nvcc --version | tail -1; meson --version; uname -r
  echo "libnccl: ${nccl_dir:-not found}"
} 2>&1 | tee "$OUT/machine.txt"

t0=$(date +%s)
b=build-h200-perf
extra=()
[ -f .deps/include/nccl.h ] && extra+=(-Dextra_include="$root/.deps/include")
if [ ! -f $b/build.ninja ]; then
  meson setup $b -Dgpu_archs=90a -Dtests=false -Dexamples=true "${extra[@]}" >"$OUT/setup.log" 2>&1 ||
    { tail -20 "$OUT/setup.log"; exit 1; }
fi
ninja -C $b -j16 benchmarks/rocenante-perf examples/00_quickstart examples/01_user_kernel examples/02_tp_mlp_decode \
  >"$OUT/build.log" 2>&1 || { grep -E "error|FAILED" -A3 "$OUT/build.log" | head -60; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"

perf=$b/benchmarks/rocenante-perf
rc=0
run() {  # run NAME ARGS...: table to NAME.txt, receipt to NAME.json
  local name=$1; shift
  local t=$(date +%s)
  $perf "$@" -J "$OUT/$name.json" >"$OUT/$name.txt" 2>&1
  local r=$?
  [ $r -ne 0 ] && rc=1
  echo "$name: rc=$r, $(( $(date +%s) - t )) s, $(grep -c '^ ' "$OUT/$name.txt") rows; $(grep 'Out of bounds' "$OUT/$name.txt")"
}
if [ "$mode" = all ] || [ "$mode" = perf ]; then
  t1=$(date +%s)
  sweep=(-b 8 -e 64M -f 2 -d all --algo all -w 2)
  for r in 2 4 8; do
    run perf-cuda_loopback-r$r-eager --transport cuda_loopback --ranks $r "${sweep[@]}" -n 20
    run perf-cuda_loopback-r$r-graph --transport cuda_loopback --ranks $r "${sweep[@]}" -n 10 -G 5
  done
  # All-gather (one_shot only), 4 ranks; size = the gathered output, as in nccl-tests.
  run perf-cuda_loopback-r4-all_gather-eager --transport cuda_loopback --ranks 4 --collective all_gather \
    -b 32 -e 64M -f 2 -d all -w 2 -n 20
  # A world of one: the only place NCCL can run beside the library on one GPU.
  run perf-cuda_loopback-r1-eager --transport cuda_loopback --ranks 1 "${sweep[@]}" -n 20
  run perf-cuda_loopback-r1-graph --transport cuda_loopback --ranks 1 "${sweep[@]}" -n 10 -G 5
  # Proxy mode (host-mapped windows, a CPU proxy thread per rank), small sizes only (pinned host memory).
  run perf-cuda_proxy-r4-eager --transport cuda_proxy --ranks 4 -b 8 -e 1M -f 4 -d bfloat16 --algo all -w 2 -n 20
  run perf-cuda_proxy-r4-graph --transport cuda_proxy --ranks 4 -b 8 -e 1M -f 4 -d bfloat16 --algo all -w 2 -n 10 -G 5
  echo "sweeps: $(( $(date +%s) - t1 )) s"
fi
if [ "$mode" = all ] || [ "$mode" = examples ]; then
  t2=$(date +%s)
  for ex in 00_quickstart 01_user_kernel; do
    $b/examples/$ex >"$OUT/example-$ex.log" 2>&1; r=$?; [ $r -ne 0 ] && rc=1
    echo "example $ex: rc=$r, $(tail -1 "$OUT/example-$ex.log")"
  done
  for args in "" "--ranks 1" "--ranks 8 --tokens 4"; do
    tag=$(echo "r4 $args" | tr -d ' -' ); [ -n "$args" ] && tag=$(echo "$args" | tr -d ' -')
    $b/examples/02_tp_mlp_decode $args >"$OUT/example-02_tp_mlp_decode-$tag.log" 2>&1; r=$?; [ $r -ne 0 ] && rc=1
    echo "example 02 $args: rc=$r, $(tail -1 "$OUT/example-02_tp_mlp_decode-$tag.log")"
  done
  echo "examples: $(( $(date +%s) - t2 )) s"
fi
if python3 -c "import matplotlib" 2>/dev/null && ls "$OUT"/perf-*.json >/dev/null 2>&1; then
  python3 tools/plot_receipts.py "$OUT"/perf-*.json -o "$OUT/plots" >/dev/null &&
    python3 tools/plot_receipts.py "$OUT"/perf-cuda_loopback-r{2,4,8}-{eager,graph}.json --overlay -o "$OUT/plots" >/dev/null &&
    echo "plots: $(ls "$OUT/plots" | wc -l) PNGs in $OUT/plots"
else
  echo "plots: matplotlib not here; run tools/plot_receipts.py on the receipts after fetching them"
fi
exit $rc

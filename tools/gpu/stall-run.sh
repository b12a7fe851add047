#!/usr/bin/env bash
# tools/gpu/stall-run.sh — the experiment that decides the cause of the intermittent stall
# (docs/results/h200-2026-12-04/README.md): the two eager multi-launch cases, 6 runs each (a failed run costs its 5-10 s timeout), with and without the
# host barrier between launches, at CUDA_DEVICE_MAX_CONNECTIONS=1 and at the default. Prediction if streams sharing
# a hardware queue is the cause: at 1 queue nearly every run without the barrier fails and none with it.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"; root=$PWD; export PATH=/usr/local/cuda/bin:$PATH
S="$OUT/summary.log"; say() { echo "$*" | tee -a "$S"; }
{ date -u +%Y-%m-%dT%H:%M:%SZ; echo "commit: $(cat .deps/commit)"; nvidia-smi --query-gpu=name,driver_version --format=csv; } 2>&1 | tee "$S"
b=build-stall
meson setup $b -Dgpu_archs=90a -Dexamples=false -Dbenchmarks=false -Dextra_include="$root/.deps/include" >/tmp/setup.log 2>&1 || { tail -20 /tmp/setup.log | tee -a "$S"; exit 1; }
ninja -C $b -j16 tests/gpu/test_gpu_collectives >/tmp/build.log 2>&1 || { grep -E "error" -A3 /tmp/build.log | head -20 | tee -a "$S"; exit 1; }
for conns in 1 default; do
  for nobar in 0 1; do
    for tc in '*stopped across two doorbells*' '*alternating*'; do
      fails=0; t=$(date +%s)
      for k in $(seq 1 6); do
        if [ "$conns" = default ]; then
          ROCENANTE_TEST_NO_LAUNCH_BARRIER=$nobar timeout 40 $b/tests/gpu/test_gpu_collectives -tc="$tc" >"$OUT/run.log" 2>&1 || fails=$((fails+1))
        else
          CUDA_DEVICE_MAX_CONNECTIONS=$conns ROCENANTE_TEST_NO_LAUNCH_BARRIER=$nobar timeout 40 $b/tests/gpu/test_gpu_collectives -tc="$tc" >"$OUT/run.log" 2>&1 || fails=$((fails+1))
        fi
      done
      say "connections=$conns no_barrier=$nobar case=$tc: $fails of 6 failed ($(( $(date +%s) - t )) s)"
    done
  done
done
rm -f "$OUT/run.log"

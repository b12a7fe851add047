#!/usr/bin/env bash
# tools/gpu/s5d-run.sh — fourth device call of 2026-12-04 (afternoon): the gpu suite with the new 2-rank LL failure
# cases (a rank that never launches, a rank that refuses its input, calls with different counts), then those three
# cases twice more. Results in $OUT: summary.log and logs.tar.gz.
source "$(dirname "$0")/lib.sh"
gpu_header
b=build-s5d
gpu_setup $b -Dexamples=false -Dbenchmarks=false
ninja -C $b -j16 tests/gpu/test_gpu_collectives >/tmp/build.log 2>&1 || gpu_build_errors /tmp/build.log
say "build: $(( $(date +%s) - t0 )) s"
step gpu-tests-collectives 200 $b/tests/gpu/test_gpu_collectives -s
grep -E "^.*(rank [0-9]+: |saw the failure)" "$OUT/gpu-tests-collectives.log" | grep -E "LL|ms" | head -20 >>"$S"
for k in 1 2; do step gpu-ll-failures-$k 60 $b/tests/gpu/test_gpu_collectives -tc='2 ranks*'; done
gpu_pack

#!/usr/bin/env bash
# tools/gpu/s5f-run.sh — sixth device call of 2026-12-04 (afternoon), after the review: LL calls write an LL flag
# word (protocol::ll_word_signature) so that a peer on the other path fails with a mismatch at once; new cases
# (LL vs packet path at 2 ranks; the NVFP4 launcher with a misaligned input). gpu + nvfp4 suites, and the 2- and
# 4-rank 48 KiB rows (programmatic launch on, max_parts 16) to compare with s5c-8599fd3 (3.61 / 4.28 us).
source "$(dirname "$0")/lib.sh"
gpu_header
b=build-s5f
gpu_setup $b -Dexamples=false
ninja -C $b -j16 tests/gpu/test_gpu_collectives tests/gpu/test_gpu_nvfp4 benchmarks/gpu/rocenante-bench-gpu >/tmp/build.log 2>&1 || gpu_build_errors /tmp/build.log
say "build: $(( $(date +%s) - t0 )) s"
step gpu-tests-collectives 150 $b/tests/gpu/test_gpu_collectives
grep -E "MESSAGE: rank [0-9]: launch" "$OUT/gpu-tests-collectives.log" | sed 's/^.*MESSAGE: /  /' | cut -c1-200 >>"$S"
step gpu-tests-nvfp4 100 $b/tests/gpu/test_gpu_nvfp4
t=$(date +%s)
ROCENANTE_BENCH_PDL=1 ROCENANTE_BENCH_MAX_PARTS=16 timeout 60 $b/benchmarks/gpu/rocenante-bench-gpu --benchmark_filter='all_reduce/one_shot/loopback/bf16/bytes:49152/ranks:(2|4)/graph:1' \
  --benchmark_out="$OUT/ll-word.json" --benchmark_out_format=json >"$OUT/bench-ll-word.log" 2>&1
say "rocenante-bench-gpu 48 KiB PDL on max_parts 16: rc=$? after $(( $(date +%s) - t )) s"; grep -E "^all_reduce" "$OUT/bench-ll-word.log" | awk '{print "  " $1, $2, $3}' | tee -a "$S"
gpu_pack

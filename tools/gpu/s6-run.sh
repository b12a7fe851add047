#!/usr/bin/env bash
# Ran at commit 0324847 (docs/results/h200-2026-12-04/); the experiment macros it uses (ROCENANTE_DISCARD_STAGED,
# ROCENANTE_ONE_SHOT_BULK_ONLY) exist only there: later code has kernel::reduce_path instead.
# tools/gpu/s6-run.sh — first device call of 2026-12-04 (evening): the review changes of 5cc851e on the GPU (gpu +
# nvfp4 suites, new case: CTAs looping over more parts than CTAs), and the 64 MiB experiment: parts smaller than
# a CTA's share (options::max_part_bytes, CTAs loop over them) so that a rank's staged data is read by its peers
# while it is still in L2; with and without dropping the read lines from L2 (ROCENANTE_DISCARD_STAGED=1).
source "$(dirname "$0")/lib.sh"
gpu_header
b=build-s6; d=build-s6d
gpu_setup $b -Dexamples=false
gpu_setup $d -Dexamples=false
ninja -C $b -j16 tests/gpu/test_gpu_collectives tests/gpu/test_gpu_nvfp4 benchmarks/gpu/rocenante-bench-gpu >/tmp/build.log 2>&1 || gpu_build_errors /tmp/build.log
NVCC_APPEND_FLAGS=-DROCENANTE_DISCARD_STAGED=1 ninja -C $d -j16 benchmarks/gpu/rocenante-bench-gpu tests/gpu/test_gpu_collectives >/tmp/buildd.log 2>&1 || gpu_build_errors /tmp/buildd.log
say "build: $(( $(date +%s) - t0 )) s"
step gpu-tests-collectives 200 $b/tests/gpu/test_gpu_collectives
step gpu-tests-nvfp4 100 $b/tests/gpu/test_gpu_nvfp4
big='(all_reduce/(one_shot|ring)|all_gather/one_shot)/loopback/bf16/bytes:(1048576|4194304|16777216|67108864)/ranks:4/graph:1|copy/d2d/bytes:67108864$'
gpu_bench base $b/benchmarks/gpu/rocenante-bench-gpu "$big"
for pb in 262144 65536 16384; do
  gpu_bench parts-$pb $b/benchmarks/gpu/rocenante-bench-gpu "$big" ROCENANTE_BENCH_MAX_PARTS=4096 ROCENANTE_BENCH_MAX_CTAS=32 ROCENANTE_BENCH_MAX_PART_BYTES=$pb
done
for pb in 65536 16384; do
  gpu_bench discard-$pb $d/benchmarks/gpu/rocenante-bench-gpu "$big" ROCENANTE_BENCH_MAX_PARTS=4096 ROCENANTE_BENCH_MAX_CTAS=32 ROCENANTE_BENCH_MAX_PART_BYTES=$pb
done
gpu_pack

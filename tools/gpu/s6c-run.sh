#!/usr/bin/env bash
# tools/gpu/s6c-run.sh — third device call (and s6d-run.sh, the fourth) of 2026-12-04 (evening): the committed code, binaries built on the CPU
# machine from this commit (.deps/bin, .deps/lib/libbenchmark): gpu + nvfp4 suites, compute-sanitizer memcheck
# on the one-rank subset and on the looped-parts case, and the benchmark receipt: decode-size rows (16 CTAs per
# rank, programmatic launch on) and large rows with parts sized for L2 (the bench's default for direct windows:
# 32 CTAs per rank, 64 KiB parts; 8 ranks 16 CTAs, 32 KiB) against one part per CTA (max_part_bytes 0), one run.
source "$(dirname "$0")/lib.sh"
gpu_header
export LD_LIBRARY_PATH=$root/.deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$root/.deps/bin
step gpu-tests-collectives 200 $B/test_gpu_collectives
step gpu-tests-nvfp4 100 $B/test_gpu_nvfp4
step memcheck-one-rank 120 compute-sanitizer --tool memcheck $B/test_gpu_collectives -tc='one rank*'
step memcheck-looped 200 compute-sanitizer --tool memcheck $B/test_gpu_collectives -tc='CTAs looping*'
small='all_reduce/(one_shot|ring)/loopback/bf16/bytes:(8192|49152)/ranks:4|all_reduce/one_shot/loopback/bf16/bytes:49152/ranks:(2|8)|all_reduce/one_shot/loopback_proxy/bf16/bytes:(8192|49152)/ranks:4|copy'
big='(all_reduce/(one_shot|ring)|all_gather/one_shot)/loopback/bf16/bytes:(262144|1048576|4194304|16777216|67108864)/ranks:4/graph:1|all_reduce/(one_shot|ring)/loopback/bf16/bytes:67108864/ranks:(2|8)/graph:1|all_reduce/one_shot/loopback/(fp16|fp32)/bytes:67108864/ranks:4/graph:1|copy'
gpu_bench decode $B/rocenante-bench-gpu "$small" ROCENANTE_BENCH_MAX_CTAS=16
gpu_bench large $B/rocenante-bench-gpu "$big"
gpu_bench large-one-part-per-cta $B/rocenante-bench-gpu "$big" ROCENANTE_BENCH_MAX_PART_BYTES=0
gpu_pack

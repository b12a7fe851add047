#!/usr/bin/env bash
# tools/gpu/s6d-run.sh — fourth device call of 2026-12-04 (evening), after s6c-c1cc2a6 showed decode-size calls
# 1.2 us slower: the part loop in the all-purpose one-shot kernel made it spill (1368 bytes); now only kernels
# that loop (reduce_path::any_loop / bulk / bulk_discard, all_gather<..., true>) have the loop. Binaries built on
# the CPU machine from this commit (.deps/bin). Suites, memcheck on the looped-parts case, and the receipt rows:
# decode sizes (16 CTAs per rank, programmatic launch on), large sizes with parts sized for L2 and, side by side,
# one part per CTA.
source "$(dirname "$0")/lib.sh"
gpu_header
export LD_LIBRARY_PATH=$root/.deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$root/.deps/bin
step gpu-tests-collectives 150 $B/test_gpu_collectives
step gpu-tests-nvfp4 60 $B/test_gpu_nvfp4
step memcheck-looped 60 compute-sanitizer --tool memcheck $B/test_gpu_collectives -tc='CTAs looping*'
small='all_reduce/(one_shot|ring)/loopback/bf16/bytes:(8192|49152)/ranks:4|all_reduce/one_shot/loopback/bf16/bytes:49152/ranks:(2|8)|all_reduce/one_shot/loopback_proxy/bf16/bytes:(8192|49152)/ranks:4|copy'
big='(all_reduce/(one_shot|ring)|all_gather/one_shot)/loopback/bf16/bytes:(262144|1048576|4194304|16777216|67108864)/ranks:4/graph:1|all_reduce/(one_shot|ring)/loopback/bf16/bytes:67108864/ranks:(2|8)/graph:1|all_reduce/one_shot/loopback/(fp16|fp32)/bytes:67108864/ranks:4/graph:1|copy'
big1='all_reduce/(one_shot|ring)/loopback/bf16/bytes:(4194304|16777216|67108864)/ranks:4/graph:1|all_reduce/one_shot/loopback/bf16/bytes:67108864/ranks:(2|8)/graph:1|copy'
gpu_bench decode $B/rocenante-bench-gpu "$small" ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=1
gpu_bench large $B/rocenante-bench-gpu "$big"
gpu_bench large-one-part-per-cta $B/rocenante-bench-gpu "$big1" ROCENANTE_BENCH_MAX_PART_BYTES=0
gpu_pack

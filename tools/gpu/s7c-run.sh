#!/usr/bin/env bash
# tools/gpu/s7c-run.sh — third device call of 2026-12-04 (night): the decode-size kernel with its loads issued
# together (s7b's phase trace showed one round trip per peer in the reduce: each load sat behind a branch and an
# unpack), the all-purpose kernel running the same decode-size code for its one-packet parts. Binaries built on
# the CPU machine at .deps/commit (side by side: -t512 with ROCENANTE_SMALL_MIN_THREADS=512, -ll4 with
# ROCENANTE_LL_MAX_RANKS=4, the LL path up to 4 ranks now that its polls load every line at once). Suites, examples, the
# receipt rows (decode sizes with programmatic launch, large sizes with parts sized for L2), the tracer.
source "$(dirname "$0")/lib.sh"
gpu_header
export LD_LIBRARY_PATH=$root/.deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$root/.deps/bin
step gpu-tests-collectives 150 $B/test_gpu_collectives
step gpu-tests-nvfp4 60 $B/test_gpu_nvfp4
step gpu-tests-collectives-ll4 150 $B/test_gpu_collectives-ll4
for e in 01_user_kernel 02_tp_mlp_decode; do step example-$e 60 $B/$e; say "  $(tail -1 "$OUT/example-$e.log")"; done
small='all_reduce/(one_shot|ring)/loopback/bf16/bytes:(8192|49152)/ranks:4|all_reduce/one_shot/loopback/bf16/bytes:(8192|49152)/ranks:(2|8)|all_reduce/one_shot/loopback_proxy/bf16/bytes:(8192|49152)/ranks:4|floor/one_shot_minimal/bf16/bytes:49152/ranks:(2|4|8)/ctas:16/threads:256/pdl:1|floor/empty/ranks:4/ctas:16/pdl:1|copy'
gpu_bench decode $B/rocenante-bench-gpu "$small" ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=1
gpu_bench decode-ll4 $B/rocenante-bench-gpu-ll4 'all_reduce/one_shot/loopback/bf16/bytes:(8192|49152)/ranks:(2|4|8)/graph:1' ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=1
gpu_bench decode-t512 $B/rocenante-bench-gpu-t512 'all_reduce/one_shot/loopback/bf16/bytes:(8192|49152)/ranks:(2|4|8)/graph:1' ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=1
big='(all_reduce/(one_shot|ring)|all_gather/one_shot)/loopback/bf16/bytes:(262144|1048576|4194304|16777216|67108864)/ranks:4/graph:1|all_reduce/(one_shot|ring)/loopback/bf16/bytes:67108864/ranks:(2|8)/graph:1|all_reduce/one_shot/loopback/(fp16|fp32)/bytes:67108864/ranks:4/graph:1|copy'
gpu_bench large $B/rocenante-bench-gpu "$big"
{ timeout 60 $B/rocenante-trace-phases 49152 4 16; } >"$OUT/trace.log" 2>&1
say "trace: rc=$?"; grep -vE "^$" "$OUT/trace.log" | tee -a "$S"
gpu_pack

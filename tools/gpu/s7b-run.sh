#!/usr/bin/env bash
# tools/gpu/s7b-run.sh — second device call of 2026-12-04 (night): the decode-size kernel (reduce_path::small /
# small_ll: only the one-packet-per-thread code or only the LL path, as many threads as the largest part has
# packets). Binaries built on the CPU machine at .deps/commit: rocenante-bench-gpu (the commit), -allpurpose
# (ROCENANTE_SMALL_KERNEL=0: the all-purpose kernel in its place, as before), -t512 (ROCENANTE_SMALL_MIN_THREADS=512).
# Suites first, then decode rows of the three binaries side by side (with the floor rows), large rows, the tracer.
source "$(dirname "$0")/lib.sh"
gpu_header
export LD_LIBRARY_PATH=$root/.deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$root/.deps/bin
step gpu-tests-collectives 150 $B/test_gpu_collectives
step gpu-tests-nvfp4 60 $B/test_gpu_nvfp4
step example-01 60 $B/01_user_kernel
say "$(tail -3 "$OUT/example-01.log")"
step example-02 60 $B/02_tp_mlp_decode
say "$(tail -3 "$OUT/example-02.log")"
dec='all_reduce/one_shot/loopback/bf16/bytes:(8192|49152)/ranks:(2|4|8)/graph:1'
gpu_bench decode $B/rocenante-bench-gpu "$dec|floor/one_shot_minimal/bf16/bytes:49152/ranks:4/ctas:16/threads:256/pdl:1|floor/empty/ranks:4/ctas:16/pdl:1" ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=1
gpu_bench decode-allpurpose $B/rocenante-bench-gpu-allpurpose "$dec" ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=1
gpu_bench decode-t512 $B/rocenante-bench-gpu-t512 "$dec" ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=1
gpu_bench decode-16ctas $B/rocenante-bench-gpu 'all_reduce/one_shot/loopback/bf16/bytes:49152/ranks:4/graph:1' ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=1 ROCENANTE_BENCH_MIN_PART=3072
gpu_bench decode-again $B/rocenante-bench-gpu "$dec" ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=1
gpu_bench large $B/rocenante-bench-gpu 'all_reduce/(one_shot|ring)/loopback/bf16/bytes:(1048576|67108864)/ranks:4/graph:1|copy'
{ timeout 60 $B/rocenante-trace-phases 49152 4 16; } >"$OUT/trace.log" 2>&1
say "trace: rc=$?"; grep -vE "^$" "$OUT/trace.log" | tee -a "$S"
gpu_pack

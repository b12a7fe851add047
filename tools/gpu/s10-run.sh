#!/usr/bin/env bash
# tools/gpu/s10-run.sh — 2026-12-05, last device call of the session (about 300 s of device time left): the decode-size
# reduce loads sources in groups of 4 up to 4 ranks (groups of 8 loaded 8 sources per thread at 4 ranks: s9's phase
# trace had the reduce at 608 ns against the floor's 448). In order (a deadline at 270 s; logs always packed):
#   1. the receipt's decode rows (as tools/gpu/s7c-run.sh but eager rows at 4 ranks only: graph and eager, ring, proxy
#      mode, floors in the library's shape, copy) with this build — docs/results/h200-loopback.json
#   2. the gpu suite, examples 01 and 02, memcheck on the one-rank subset (the changed code runs in every case)
#   3. side by side: s9's binary (groups of 8, 5345431) at 4 and 8 ranks
#   4. one-shot and ring at 4 and 16 MiB, 4 ranks (the crossover), then the phase tracer at 48 KiB, 4 ranks
# Large rows: the bulk kernels are unchanged since s9 (docs/results/h200-2026-12-05/s9-5345431/large.json).
source "$(dirname "$0")/lib.sh"
gpu_header
gpu_prebuilt
gpu_deadline ${S10_DEADLINE:-270}
pdl="ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=1"
small='all_reduce/(one_shot|ring)/loopback/bf16/bytes:(8192|49152)/ranks:4|all_reduce/one_shot/loopback/bf16/bytes:(8192|49152)/ranks:(2|8)/graph:1|all_reduce/one_shot/loopback_proxy/bf16/bytes:(8192|49152)/ranks:4|floor/one_shot_minimal/bf16/bytes:49152/ranks:(2|4|8)/ctas:12/threads:256/pdl:1/graph|floor/empty/ranks:4/ctas:16/pdl:1/graph|copy'
gpu_bench receipt-decode $B/rocenante-bench-gpu "$small" $pdl
step gpu-tests-collectives 120 $B/test_gpu_collectives
for e in 01_user_kernel 02_tp_mlp_decode; do step example-$e 30 $B/$e; say "  $(tail -1 "$OUT/example-$e.log" 2>/dev/null)"; done
step san-memcheck 60 compute-sanitizer --tool memcheck $B/test_gpu_collectives -tc='one rank*'
gpu_bench decode-s9 $B/rocenante-bench-gpu-s9 'all_reduce/one_shot/loopback/bf16/bytes:(8192|49152)/ranks:(4|8)/graph:1' $pdl
gpu_bench large4 $B/rocenante-bench-gpu 'all_reduce/(one_shot|ring)/loopback/bf16/bytes:(4194304|16777216)/ranks:4/graph:1'
l=$(left 30); if [ "$l" -ge 10 ]; then timeout "$l" $B/rocenante-trace-phases 49152 4 16 >"$OUT/trace.log" 2>&1; say "trace: rc=$?"; grep -vE "^$" "$OUT/trace.log" | tee -a "$S"; fi
gpu_pack

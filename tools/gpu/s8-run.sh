#!/usr/bin/env bash
# tools/gpu/s8-run.sh — prepared on 2026-12-04 (no device was lent that session), for the next device call: where the
# library's 48 KiB all-reduce (3.60 us at 4 ranks) spends its ~1.2 us above the floor kernel (2.41 us), measured
# side by side in one run. Binaries built on the CPU machine at .deps/commit (-compact: ROCENANTE_COMPACT_KERNELS=1).
# In order of priority (a deadline at 540 s skips what is left, so that the logs are always packed):
#   1. decode rows: the library (default shape: 12 CTAs of 256 threads at 48 KiB; and 16 CTAs of 192, the floor's,
#      with ROCENANTE_BENCH_MIN_PART=3072; and with max_parts 16, so that finish advances 16 epoch entries, not
#      1024), the compact build, and the floor kernel plain (12 and 16 CTAs), with
#      never-run code between its phases (bloat:4/16: instruction fetch) and with the protocol's features added one
#      by one (plus:1 vote, 2 checked poll, 4 finish barrier, 7 all)
#   2. the phase tracer at 48 KiB, 4 / 2 / 8 ranks (library, floor, floor with bloat, floor with every feature),
#      and the compact build's at 4 ranks
#   3. large rows (1 and 64 MiB, 4 ranks), default and compact builds
#   4. suites: gpu, nvfp4; examples 01 and 02 (the compact build's gpu suite runs in s8b)
# Sanitizers: tools/gpu/s8b-run.sh (a second call).
source "$(dirname "$0")/lib.sh"
gpu_header
gpu_prebuilt
gpu_deadline 540
lib='all_reduce/one_shot/loopback/bf16/bytes:(8192|49152)/ranks:(2|4|8)/graph:1'
fl='floor/one_shot_minimal/bf16/bytes:49152/ranks:(2|4|8)/ctas:1[26]/threads:256/pdl:1/(bloat:16/|plus:7/)?graph:1|floor/one_shot_minimal/bf16/bytes:49152/ranks:4/ctas:16/threads:256/pdl:1/(bloat:4|plus:[124])/graph:1|floor/empty/ranks:4/ctas:16/pdl:1'
gpu_bench decode $B/rocenante-bench-gpu "$lib|$fl" ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=1
gpu_bench decode-16x192 $B/rocenante-bench-gpu "$lib" ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=1 ROCENANTE_BENCH_MIN_PART=3072
# max_parts 16 instead of the bench's 1024: each collective's finish then advances 16 epoch entries per rank, not 1024
gpu_bench decode-parts16 $B/rocenante-bench-gpu "$lib" ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=1 ROCENANTE_BENCH_MAX_PARTS=16
gpu_bench decode-compact $B/rocenante-bench-gpu-compact "$lib|floor/one_shot_minimal/bf16/bytes:49152/ranks:4/ctas:12/threads:256/pdl:1/graph:1" ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=1
# trace BINARY RANKS: one tracer run, limited to 60 s and to the deadline ("timeout 0" would mean no limit)
trc=0
trace() { local l; l=$(left 60); if [ "$l" -lt 10 ]; then echo "skipped (deadline)"; trc=124; return; fi
  timeout "$l" "$1" 49152 "$2" 16 || trc=$?; }
{ for n in 4 2 8; do trace $B/rocenante-trace-phases $n; done
  echo; echo "=== compact build (ROCENANTE_COMPACT_KERNELS=1) ==="; trace $B/rocenante-trace-phases-compact 4
} >"$OUT/trace.log" 2>&1
say "trace: rc=$trc"; grep -vE "^$" "$OUT/trace.log" | tee -a "$S"
# the compact build's kernels hold more registers in the bulk loop (bulk 112 -> 118, bulk_discard 118 -> 122): the
# large rows side by side
big='all_reduce/(one_shot|ring)/loopback/bf16/bytes:(1048576|67108864)/ranks:4/graph:1|copy'
gpu_bench large $B/rocenante-bench-gpu "$big"
gpu_bench large-compact $B/rocenante-bench-gpu-compact "$big"
step gpu-tests-collectives 240 $B/test_gpu_collectives
step gpu-tests-nvfp4 60 $B/test_gpu_nvfp4
for e in 01_user_kernel 02_tp_mlp_decode; do step example-$e 60 $B/$e; say "  $(tail -1 "$OUT/example-$e.log" 2>/dev/null)"; done
gpu_pack

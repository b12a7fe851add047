#!/usr/bin/env bash
# tools/gpu/s9-run.sh — 2026-12-05: the decode-size kernels wait for their stream predecessor only after their plan
# (kernel::dependency_gate: with programmatic launch the plan is computed while the previous kernel finishes) and
# compact kernels become the default (ROCENANTE_COMPACT_KERNELS=1: s8-a4e189b measured them faster at 8 KiB–64 MiB).
# Side by side in one run, in order of priority (a deadline at 540 s skips what is left; the logs are always packed):
#   1. decode rows (8 and 48 KiB, 2/4/8 ranks, graph, programmatic launch): this build (gate + compact), this build
#      with ROCENANTE_COMPACT_KERNELS=0 (-c0), and a4e189b's binaries (-a4: no gate, not compact; -a4compact)
#   2. the phase tracer at 48 KiB, 4 and 2 ranks (new: where the wait for the predecessor returned, "start")
#   3. large rows (1 and 64 MiB, 4 ranks): this build, -c0, -a4, -a4compact
#   4. suites (gpu, nvfp4), examples 01/02, compute-sanitizer memcheck/racecheck/synccheck on the one-rank subset
#   5. the receipt rows of docs/results/h200-loopback.json (as tools/gpu/s7c-run.sh) with this build
# Binaries built on the CPU machine at .deps/commit (a4 ones at a4e189b).
source "$(dirname "$0")/lib.sh"
gpu_header
gpu_prebuilt
gpu_deadline 540
lib='all_reduce/one_shot/loopback/bf16/bytes:(8192|49152)/ranks:(2|4|8)/graph:1'
fl='floor/one_shot_minimal/bf16/bytes:49152/ranks:(2|4|8)/ctas:12/threads:256/pdl:1/graph:1'
pdl="ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=1"
gpu_bench decode $B/rocenante-bench-gpu "$lib|$fl" $pdl
gpu_bench decode-c0 $B/rocenante-bench-gpu-c0 "$lib" $pdl
gpu_bench decode-a4 $B/rocenante-bench-gpu-a4 "$lib" $pdl
gpu_bench decode-a4compact $B/rocenante-bench-gpu-a4compact "$lib" $pdl
trc=0
trace() { local l; l=$(left 60); if [ "$l" -lt 10 ]; then echo "skipped (deadline)"; trc=124; return; fi
  timeout "$l" "$1" 49152 "$2" 16 || trc=$?; }
{ for n in 4 2; do trace $B/rocenante-trace-phases $n; done; } >"$OUT/trace.log" 2>&1
say "trace: rc=$trc"; grep -vE "^$" "$OUT/trace.log" | tee -a "$S"
big='all_reduce/(one_shot|ring)/loopback/bf16/bytes:(1048576|67108864)/ranks:4/graph:1|copy'
for v in "" -c0 -a4 -a4compact; do gpu_bench large$v $B/rocenante-bench-gpu$v "$big"; done
step gpu-tests-collectives 200 $B/test_gpu_collectives
step gpu-tests-nvfp4 60 $B/test_gpu_nvfp4
for e in 01_user_kernel 02_tp_mlp_decode; do step example-$e 60 $B/$e; say "  $(tail -1 "$OUT/example-$e.log" 2>/dev/null)"; done
for tool in memcheck racecheck synccheck; do
  step san-$tool 100 compute-sanitizer --tool $tool $B/test_gpu_collectives -tc='one rank*'
done
small='all_reduce/(one_shot|ring)/loopback/bf16/bytes:(8192|49152)/ranks:4|all_reduce/one_shot/loopback/bf16/bytes:(8192|49152)/ranks:(2|8)|all_reduce/one_shot/loopback_proxy/bf16/bytes:(8192|49152)/ranks:4|floor/one_shot_minimal/bf16/bytes:49152/ranks:(2|4|8)/ctas:16/threads:256/pdl:1|floor/empty/ranks:4/ctas:16/pdl:1|copy'
gpu_bench receipt-decode $B/rocenante-bench-gpu "$small" $pdl
big='(all_reduce/(one_shot|ring)|all_gather/one_shot)/loopback/bf16/bytes:(262144|1048576|4194304|16777216|67108864)/ranks:4/graph:1|all_reduce/(one_shot|ring)/loopback/bf16/bytes:67108864/ranks:(2|8)/graph:1|all_reduce/one_shot/loopback/(fp16|fp32)/bytes:67108864/ranks:4/graph:1|copy'
gpu_bench receipt-large $B/rocenante-bench-gpu "$big"
gpu_pack

#!/usr/bin/env bash
# tools/gpu/s11-run.sh PART — prepared 2026-12-05 (session 10, no device lent) for the next device calls. Binaries
# (variants cumulative: e = the input loaded early, eh = e + reduce addresses held, ehf = eh + fixed rank counts,
# ehfc0 = ehf with compact kernels off):
#   PREPARE_TESTS=ehf tools/gpu/prepare.sh e=-DROCENANTE_SMALL_EARLY_INPUT=1 \
#     eh="-DROCENANTE_SMALL_EARLY_INPUT=1 -DROCENANTE_SMALL_HOLD_ADDRESSES=1" \
#     ehf="-DROCENANTE_SMALL_EARLY_INPUT=1 -DROCENANTE_SMALL_HOLD_ADDRESSES=1 -DROCENANTE_SMALL_FIXED_RANKS=1" \
#     ehfc0="-DROCENANTE_SMALL_EARLY_INPUT=1 -DROCENANTE_SMALL_HOLD_ADDRESSES=1 -DROCENANTE_SMALL_FIXED_RANKS=1 -DROCENANTE_COMPACT_KERNELS=0"
# then the device call with carry [".deps"]. Two calls, each with a deadline (S11_DEADLINE, default 540 s; logs
# always packed):
#   PART=a  1. side by side, 8 / 48 KiB at 2, 4 and 8 ranks, graph, programmatic launch, at most 16 CTAs: default
#              (with floors in both shapes) | ehf with 16 CTAs of 192 threads at 48 KiB (ROCENANTE_BENCH_MIN_PART=3072;
#              s7b and s8 had that shape 0.04-0.15 us faster) | default with 3072 | ehf with 4096 | e, eh, ehfc0
#              with 3072 | default again (drift)
#           2. the gpu suite, default build: the first run of "programmatic launch: a decode-size all-reduce reads
#              the input its predecessor wrote late" (kernel::dependency_gate)
#           3. the gpu suite with all three changes (ehf)
#           4. examples 01 and 02
#   PART=c  a, then the steps of b that do not depend on which variant wins (one device start instead of two, when
#           starts are scarce): compute-sanitizer memcheck, racecheck and synccheck on the ehf build's one-rank subset,
#           the nvfp4 suite, one-shot and ring at 1, 4 and 16 MiB (4 ranks), the phase tracer
#   PART=r  b's receipt rows only (decode at 2/4/8 ranks with floors, ring and proxy at 4 ranks), then the gpu suite
#   PART=b  (after the winners of a are made the defaults and the binaries rebuilt) 1. the receipt's decode rows
#           (docs/results/h200-loopback.json) 2. compute-sanitizer memcheck, racecheck, synccheck on the one-rank
#           subset (after the gpu suite) 3. one-shot and ring at 1, 4, 16 and 64 MiB, 4 ranks (the crossover; 64 MiB beside the copy of step 1) 4. the phase tracer, 48 KiB, 4 ranks
#           5. the nvfp4 suite
source "$(dirname "$0")/lib.sh"
gpu_header
gpu_prebuilt
gpu_deadline "${S11_DEADLINE:-540}"
pdl="ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=1"
decode='all_reduce/one_shot/loopback/bf16/bytes:(8192|49152)/ranks:(2|4|8)/graph:1'
floors='floor/one_shot_minimal/bf16/bytes:49152/ranks:(2|4|8)/ctas:(12/threads:256|16/threads:192)/pdl:1/graph|floor/empty/ranks:4/ctas:16/pdl:1/graph'
case "${1:-a}" in
  a)
    # the measurements first (a deadline cuts from the end), the variants' order shuffled against drift
    gpu_bench decode-default $B/rocenante-bench-gpu "$decode|$floors" $pdl
    gpu_bench decode-ehf-3072 $B/rocenante-bench-gpu-ehf "$decode" $pdl ROCENANTE_BENCH_MIN_PART=3072
    gpu_bench decode-3072 $B/rocenante-bench-gpu "$decode" $pdl ROCENANTE_BENCH_MIN_PART=3072
    gpu_bench decode-ehf $B/rocenante-bench-gpu-ehf "$decode" $pdl
    for v in e eh ehfc0; do
      gpu_bench decode-$v-3072 $B/rocenante-bench-gpu-$v "$decode" $pdl ROCENANTE_BENCH_MIN_PART=3072
    done
    gpu_bench decode-default-again $B/rocenante-bench-gpu "$decode" $pdl
    if command -v python3 >/dev/null; then  # one table, every variant beside the default (ratios)
      python3 tools/gpu/compare.py "$OUT"/decode-default.json "$OUT"/decode-3072.json "$OUT"/decode-ehf.json \
        "$OUT"/decode-e-3072.json "$OUT"/decode-eh-3072.json "$OUT"/decode-ehf-3072.json "$OUT"/decode-ehfc0-3072.json \
        "$OUT"/decode-default-again.json 2>&1 | grep -v "^floor" | tee -a "$S"
    fi
    step gpu-tests-collectives 130 $B/test_gpu_collectives
    step gpu-tests-ehf 130 $B/test_gpu_collectives-ehf
    for e in 01_user_kernel 02_tp_mlp_decode; do step example-$e 30 $B/$e; say "  $(tail -1 "$OUT/example-$e.log" 2>/dev/null)"; done
    if [ "${S11_WITH_CHECKS:-0}" = 1 ]; then  # part b's steps that do not depend on which variant wins (c)
      for t in memcheck racecheck synccheck; do
        step san-$t-ehf 40 compute-sanitizer --tool $t $B/test_gpu_collectives-ehf -tc='one rank*'
      done
      step gpu-tests-nvfp4 60 $B/test_gpu_nvfp4
      gpu_bench large4 $B/rocenante-bench-gpu 'all_reduce/(one_shot|ring)/loopback/bf16/bytes:(1048576|4194304|16777216)/ranks:4/graph:1'
      l=$(left 30); if [ "$l" -ge 10 ]; then timeout "$l" $B/rocenante-trace-phases 49152 4 16 >"$OUT/trace.log" 2>&1; say "trace: rc=$?"; grep -vE "^$" "$OUT/trace.log" | tee -a "$S"; fi
    fi
    ;;
  c) S11_WITH_CHECKS=1 exec bash "$0" a ;;
  r)
    # b's receipt rows for a short lease: the decode rows at 2, 4 and 8 ranks with the floors, ring and proxy mode
    # at 4 ranks (graph); then the gpu suite while time is left
    gpu_bench receipt-decode $B/rocenante-bench-gpu "$decode|$floors|all_reduce/(ring/loopback|one_shot/loopback_proxy)/bf16/bytes:(8192|49152)/ranks:4/graph:1" $pdl
    step gpu-tests-collectives 130 $B/test_gpu_collectives
    ;;
  b)
    small='all_reduce/(one_shot|ring)/loopback/bf16/bytes:(8192|49152)/ranks:4|all_reduce/one_shot/loopback/bf16/bytes:(8192|49152)/ranks:(2|8)/graph:1|all_reduce/one_shot/loopback_proxy/bf16/bytes:(8192|49152)/ranks:4|'"$floors"'|copy'
    gpu_bench receipt-decode $B/rocenante-bench-gpu "$small" $pdl
    step gpu-tests-collectives 130 $B/test_gpu_collectives
    step san-memcheck 70 compute-sanitizer --tool memcheck $B/test_gpu_collectives -tc='one rank*'
    step san-racecheck 70 compute-sanitizer --tool racecheck $B/test_gpu_collectives -tc='one rank*'
    step san-synccheck 70 compute-sanitizer --tool synccheck $B/test_gpu_collectives -tc='one rank*'
    step gpu-tests-nvfp4 60 $B/test_gpu_nvfp4
    for e in 01_user_kernel 02_tp_mlp_decode; do step example-$e 30 $B/$e; say "  $(tail -1 "$OUT/example-$e.log" 2>/dev/null)"; done
    gpu_bench large4 $B/rocenante-bench-gpu 'all_reduce/(one_shot|ring)/loopback/bf16/bytes:(1048576|4194304|16777216|67108864)/ranks:4/graph:1'
    l=$(left 30); if [ "$l" -ge 10 ]; then timeout "$l" $B/rocenante-trace-phases 49152 4 16 >"$OUT/trace.log" 2>&1; say "trace: rc=$?"; grep -vE "^$" "$OUT/trace.log" | tee -a "$S"; fi
    ;;
esac
gpu_pack

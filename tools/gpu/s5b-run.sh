#!/usr/bin/env bash
# tools/gpu/s5b-run.sh — second device call of 2026-12-04 (afternoon): NVFP4 whole-blocks kernel without/with loads
# ahead (64 registers allowed) x 8/16/32 CTAs per SM; the one-shot split at decode sizes at 32 CTAs per rank at most
# (input bytes per CTA 4096 / 2048 / 1024) with the phase tracer; LL at 2 ranks with max_parts 16 (as ll2-59a710d);
# 64 MiB one-shot with the default unrolls and with ROCENANTE_DEVICE_UNROLL=8 / ROCENANTE_DEVICE_REDUCE_UNROLL=4
# (a second benchmark binary). Results in $OUT: summary.log and logs.tar.gz.
source "$(dirname "$0")/lib.sh"
gpu_header
b=build-s5b; u=build-u8
gpu_setup $b -Dexamples=false
gpu_setup $u -Dexamples=false
ninja -C $b -j10 benchmarks/gpu/rocenante-bench-gpu benchmarks/gpu/rocenante-bench-nvfp4 benchmarks/gpu/rocenante-trace-phases >/tmp/build.log 2>&1 &
NVCC_APPEND_FLAGS="-DROCENANTE_DEVICE_UNROLL=8 -DROCENANTE_DEVICE_REDUCE_UNROLL=4" ninja -C $u -j6 benchmarks/gpu/rocenante-bench-gpu >/tmp/build2.log 2>&1
wait
gpu_build_errors /tmp/build.log /tmp/build2.log
say "build: $(( $(date +%s) - t0 )) s"
t=$(date +%s)
timeout 150 $b/benchmarks/gpu/rocenante-bench-nvfp4 --benchmark_filter='copy|quantize_epilogue/bf16/bytes:67108864/(plain|residual)|nvfp4/quantize/bf16' \
  --benchmark_out="$OUT/nvfp4-epilogue.json" --benchmark_out_format=json --benchmark_counters_tabular=true >"$OUT/bench-nvfp4.log" 2>&1
say "rocenante-bench-nvfp4 epilogue variants: rc=$? after $(( $(date +%s) - t )) s"
grep -E "^copy|^nvfp4" "$OUT/bench-nvfp4.log" | awk '{printf "  %-100s %s %s vs_copy=%s\n", $1, $2, $3, $NF}' | tee -a "$S"
cuobjdump --dump-resource-usage $b/benchmarks/gpu/rocenante-bench-nvfp4 2>&1 | grep -A1 -E "quantize_whole" | grep -oE "_Z[^ ]*|REG:[0-9]+|STACK:[0-9]+|LOCAL:[0-9]+" | paste - - - - | head -8 | tee -a "$S"
F='all_reduce/one_shot/loopback/bf16/bytes:(8192|49152)/ranks:(2|4)/graph:1'
for mp in 4096 2048 1024; do t=$(date +%s)
  ROCENANTE_BENCH_MIN_PART=$mp ROCENANTE_BENCH_MAX_PARTS=32 timeout 120 $b/benchmarks/gpu/rocenante-bench-gpu --benchmark_filter="$F" \
    --benchmark_out="$OUT/split-$mp.json" --benchmark_out_format=json --benchmark_counters_tabular=true >"$OUT/bench-split-$mp.log" 2>&1
  say "rocenante-bench-gpu PDL on, min_part $mp, max_parts 32: rc=$? after $(( $(date +%s) - t )) s"
  grep -E "^all_reduce" "$OUT/bench-split-$mp.log" | awk '{print "  " $1, $2, $3}' | tee -a "$S"
done
t=$(date +%s)
ROCENANTE_BENCH_MAX_PARTS=16 timeout 60 $b/benchmarks/gpu/rocenante-bench-gpu --benchmark_filter='all_reduce/one_shot/loopback/bf16/bytes:49152/ranks:2/graph:1' \
  --benchmark_out="$OUT/ll2-mp16.json" --benchmark_out_format=json >"$OUT/bench-ll2-mp16.log" 2>&1
say "rocenante-bench-gpu 2 ranks 48 KiB, max_parts 16 (as ll2-59a710d): rc=$?"; grep -E "^all_reduce" "$OUT/bench-ll2-mp16.log" | awk '{print "  " $1, $2, $3}' | tee -a "$S"
{ for mp in 4096 1024; do ROCENANTE_BENCH_MIN_PART=$mp timeout 60 $b/benchmarks/gpu/rocenante-trace-phases 49152 4 32; done
  timeout 60 $b/benchmarks/gpu/rocenante-trace-phases 49152 2 16; } >"$OUT/trace.log" 2>&1
say "trace: rc=$?"; grep -vE "^$" "$OUT/trace.log" >>"$S"
for bin in $b $u; do t=$(date +%s)
  timeout 100 $bin/benchmarks/gpu/rocenante-bench-gpu --benchmark_filter='all_reduce/(one_shot|ring)/loopback/bf16/bytes:67108864/ranks:4/graph:1|copy' \
    --benchmark_out="$OUT/big-$bin.json" --benchmark_out_format=json --benchmark_counters_tabular=true >"$OUT/bench-big-$bin.log" 2>&1
  say "rocenante-bench-gpu 64 MiB ($bin): rc=$? after $(( $(date +%s) - t )) s"; grep -E "^all_reduce|^copy" "$OUT/bench-big-$bin.log" | awk '{print "  " $1, $2, $3}' | tee -a "$S"
done
gpu_pack

#!/usr/bin/env bash
# tools/gpu/s5-run.sh — one device call (2026-12-04, second session): the gpu suites at HEAD (review fixes: LL flag
# word, v2.u64 LL accesses; NVFP4 whole-blocks kernel with loads ahead and 32-bit scale offsets), the stall
# experiment (the two eager multi-launch cases with and without the launch barrier at CUDA_DEVICE_MAX_CONNECTIONS=1,
# and with it at the default), the NVFP4 epilogue variants, the one-shot split at decode sizes (input bytes per
# CTA: 4096 / 2048 / 1024) with the phase tracer, and the 64 MiB one-shot at 32 and 48 CTAs per rank.
# Results in $OUT: summary.log and logs.tar.gz.
source "$(dirname "$0")/lib.sh"
gpu_header
b=build-s5
gpu_setup $b -Dexamples=false
ninja -C $b -j16 tests/gpu/test_gpu_collectives tests/gpu/test_gpu_nvfp4 benchmarks/gpu/rocenante-bench-gpu \
  benchmarks/gpu/rocenante-bench-nvfp4 benchmarks/gpu/rocenante-trace-phases >/tmp/build.log 2>&1 ||
  gpu_build_errors /tmp/build.log
say "build: $(( $(date +%s) - t0 )) s"
step gpu-tests-collectives 200 $b/tests/gpu/test_gpu_collectives
step gpu-tests-nvfp4 150 $b/tests/gpu/test_gpu_nvfp4
# the stall experiment
runs() {  # name, runs, env...; the two cases
  local label=$1 k=$2; shift 2
  for tc in '*stopped across two doorbells*' '*alternating*'; do
    local fails=0 t=$(date +%s)
    for i in $(seq 1 "$k"); do
      env "$@" timeout 40 $b/tests/gpu/test_gpu_collectives -tc="$tc" >"$OUT/run.log" 2>&1 || { fails=$((fails+1)); cp "$OUT/run.log" "$OUT/stall-fail-$label-$i.log"; }
    done
    say "$label case=$tc: $fails of $k failed ($(( $(date +%s) - t )) s)"
  done
}
runs conn1-nobarrier 4 CUDA_DEVICE_MAX_CONNECTIONS=1 ROCENANTE_TEST_NO_LAUNCH_BARRIER=1
runs conn1-barrier 4 CUDA_DEVICE_MAX_CONNECTIONS=1 ROCENANTE_TEST_NO_LAUNCH_BARRIER=0
runs default-barrier 8 ROCENANTE_TEST_NO_LAUNCH_BARRIER=0
rm -f "$OUT/run.log"
t=$(date +%s)
timeout 120 $b/benchmarks/gpu/rocenante-bench-nvfp4 --benchmark_filter='copy|quantize_epilogue/bf16/bytes:67108864/plain|nvfp4/quantize/bf16' \
  --benchmark_out="$OUT/nvfp4-epilogue.json" --benchmark_out_format=json --benchmark_counters_tabular=true >"$OUT/bench-nvfp4.log" 2>&1
say "rocenante-bench-nvfp4 epilogue variants: rc=$? after $(( $(date +%s) - t )) s"
grep -E "^copy|^nvfp4" "$OUT/bench-nvfp4.log" | awk '{printf "  %-90s %s %s vs_copy=%s\n", $1, $2, $3, $(NF-2)}' | tee -a "$S"
grep -E "^Benchmark|^-" "$OUT/bench-nvfp4.log" | head -2 >>"$S"
cuobjdump --dump-resource-usage $b/benchmarks/gpu/rocenante-bench-nvfp4 2>&1 | grep -A1 -E "quantize_whole" | grep -oE "_Z[^ ]*|REG:[0-9]+" | paste - - | head -8 | tee -a "$S"
F='all_reduce/one_shot/loopback/bf16/bytes:(8192|49152)/ranks:(2|4)/graph:1'
for mp in 4096 2048 1024; do t=$(date +%s)
  ROCENANTE_BENCH_MIN_PART=$mp ROCENANTE_BENCH_MAX_PARTS=48 timeout 120 $b/benchmarks/gpu/rocenante-bench-gpu --benchmark_filter="$F" \
    --benchmark_out="$OUT/split-$mp.json" --benchmark_out_format=json --benchmark_counters_tabular=true >"$OUT/bench-split-$mp.log" 2>&1
  say "rocenante-bench-gpu PDL on, min_part $mp, max_parts 48: rc=$? after $(( $(date +%s) - t )) s"
  grep -E "^all_reduce" "$OUT/bench-split-$mp.log" | awk '{print "  " $1, $2, $3}' | tee -a "$S"
done
{ for mp in 4096 1024; do ROCENANTE_BENCH_MIN_PART=$mp timeout 60 $b/benchmarks/gpu/rocenante-trace-phases 49152 4 48; done; } >"$OUT/trace.log" 2>&1
say "trace: rc=$?"; grep -vE "^$" "$OUT/trace.log" >>"$S"
for mp in 32 48; do t=$(date +%s)
  ROCENANTE_BENCH_MAX_PARTS=$mp timeout 90 $b/benchmarks/gpu/rocenante-bench-gpu --benchmark_filter='all_reduce/one_shot/loopback/bf16/bytes:67108864/ranks:4|copy' \
    --benchmark_out="$OUT/big-$mp.json" --benchmark_out_format=json --benchmark_counters_tabular=true >"$OUT/bench-big-$mp.log" 2>&1
  say "rocenante-bench-gpu 64 MiB, max_parts $mp: rc=$? after $(( $(date +%s) - t )) s"; grep -E "^all_reduce|^copy" "$OUT/bench-big-$mp.log" | tee -a "$S"
done
gpu_pack

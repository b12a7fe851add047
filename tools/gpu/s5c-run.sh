#!/usr/bin/env bash
# tools/gpu/s5c-run.sh — third device call of 2026-12-04 (afternoon): the gpu and nvfp4 suites at HEAD (the NVFP4
# launcher now takes the whole-blocks kernel with loads ahead), compute-sanitizer memcheck on the nvfp4 suite, the
# NVFP4 epilogue receipt, the headline all-reduce rows with programmatic launch (max_parts 16), and a second
# benchmark binary built with ROCENANTE_KERNEL_MIN_BLOCKS=2 (two collective CTAs per SM: 64 registers) at 64 MiB
# (max_parts 32 and 64) and 48 KiB. Results in $OUT: summary.log and logs.tar.gz.
source "$(dirname "$0")/lib.sh"
gpu_header
b=build-s5c; v=build-mb2
gpu_setup $b -Dexamples=false
gpu_setup $v -Dexamples=false
ninja -C $b -j11 tests/gpu/test_gpu_collectives tests/gpu/test_gpu_nvfp4 benchmarks/gpu/rocenante-bench-gpu benchmarks/gpu/rocenante-bench-nvfp4 >/tmp/build.log 2>&1 &
NVCC_APPEND_FLAGS="-DROCENANTE_KERNEL_MIN_BLOCKS=2" ninja -C $v -j5 benchmarks/gpu/rocenante-bench-gpu >/tmp/build2.log 2>&1
wait
gpu_build_errors /tmp/build.log /tmp/build2.log
say "build: $(( $(date +%s) - t0 )) s"
step gpu-tests-collectives 200 $b/tests/gpu/test_gpu_collectives
step gpu-tests-nvfp4 150 $b/tests/gpu/test_gpu_nvfp4
step memcheck-nvfp4 120 compute-sanitizer --tool memcheck --error-exitcode 9 $b/tests/gpu/test_gpu_nvfp4 -tc='*epilogue*'
t=$(date +%s)
timeout 150 $b/benchmarks/gpu/rocenante-bench-nvfp4 --benchmark_filter='copy|quantize_epilogue/bf16/bytes:67108864/(plain|residual)|nvfp4/quantize/bf16' \
  --benchmark_out="$OUT/nvfp4-epilogue.json" --benchmark_out_format=json --benchmark_counters_tabular=true >"$OUT/bench-nvfp4.log" 2>&1
say "rocenante-bench-nvfp4 epilogue: rc=$? after $(( $(date +%s) - t )) s"
grep -E "^copy|^nvfp4" "$OUT/bench-nvfp4.log" | awk '{printf "  %-100s %s %s vs_copy=%s\n", $1, $2, $3, $NF}' | tee -a "$S"
cuobjdump --dump-resource-usage $b/benchmarks/gpu/rocenante-bench-gpu 2>&1 | grep -A1 -E "all_reduceINS_9algorithm8one_shot.*13__nv_bfloat16.*cuda_direct|all_reduceINS_9algorithm8one_shot" | grep -oE "REG:[0-9]+" | sort | uniq -c | tee -a "$S"
F='all_reduce/(one_shot|ring)/loopback/bf16/bytes:(8192|49152)/ranks:4|all_reduce/one_shot/loopback/bf16/bytes:49152/ranks:(2|8)|all_reduce/one_shot/loopback_proxy/bf16/bytes:(8192|49152)/ranks:4|copy'
t=$(date +%s)
ROCENANTE_BENCH_PDL=1 ROCENANTE_BENCH_MAX_PARTS=16 timeout 120 $b/benchmarks/gpu/rocenante-bench-gpu --benchmark_filter="$F" \
  --benchmark_out="$OUT/h200-loopback-pdl1.json" --benchmark_out_format=json --benchmark_counters_tabular=true >"$OUT/bench-gpu-pdl1.log" 2>&1
say "rocenante-bench-gpu PDL=1 max_parts=16: rc=$? after $(( $(date +%s) - t )) s"; grep -E "^all_reduce|^copy" "$OUT/bench-gpu-pdl1.log" | awk '{print "  " $1, $2, $3}' | tee -a "$S"
for run in "$b 32" "$v 32" "$v 64"; do read -r bin mp <<<"$run"; t=$(date +%s)
  ROCENANTE_BENCH_MAX_PARTS=$mp timeout 60 $bin/benchmarks/gpu/rocenante-bench-gpu --benchmark_filter='all_reduce/one_shot/loopback/bf16/bytes:(49152|67108864)/ranks:4/graph:1|copy/d2d/bytes:67108864' \
    --benchmark_out="$OUT/big-$bin-$mp.json" --benchmark_out_format=json --benchmark_counters_tabular=true >"$OUT/bench-big-$bin-$mp.log" 2>&1
  say "rocenante-bench-gpu ($bin, max_parts $mp): rc=$? after $(( $(date +%s) - t )) s"; grep -E "^all_reduce|^copy|what" "$OUT/bench-big-$bin-$mp.log" | awk '{print "  " $0}' | cut -c1-160 | tee -a "$S"
done
gpu_pack

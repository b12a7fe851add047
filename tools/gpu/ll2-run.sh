#!/usr/bin/env bash
# tools/gpu/ll2-run.sh — one device call after LL was limited to two ranks (with the entry abort check): gpu
# suites (the alternating-streams case also under ROCENANTE_TEST_PDL=1, twice, and twice without; the proxy-pause
# case 10 more times), compute-sanitizer on the one-rank subset, the phase tracer, the headline all-reduce rows
# with programmatic launch off and on (max_parts 16), the 64 MiB rows at the default split, and Nsight Compute on
# the NVFP4 plain epilogue and the 1-D codec (where the epilogue's time goes). Results in $OUT: summary.log and
# logs.tar.gz.
source "$(dirname "$0")/lib.sh"
gpu_header
b=build-ll2
gpu_setup $b -Dexamples=false
ninja -C $b -j16 tests/gpu/test_gpu_collectives tests/gpu/test_gpu_nvfp4 benchmarks/gpu/rocenante-bench-gpu \
  benchmarks/gpu/rocenante-bench-nvfp4 benchmarks/gpu/rocenante-trace-phases >/tmp/build.log 2>&1 ||
  gpu_build_errors /tmp/build.log
say "build: $(( $(date +%s) - t0 )) s"
step gpu-tests-collectives 200 $b/tests/gpu/test_gpu_collectives
for k in 1 2; do ROCENANTE_TEST_PDL=1 step gpu-alternating-pdl-$k 60 $b/tests/gpu/test_gpu_collectives -tc='*alternating*'; done
for k in 1 2; do step gpu-alternating-nopdl-$k 60 $b/tests/gpu/test_gpu_collectives -tc='*alternating*'; done
step gpu-tests-nvfp4 150 $b/tests/gpu/test_gpu_nvfp4
fails=0; t=$(date +%s)
for k in $(seq 1 10); do
  timeout 30 $b/tests/gpu/test_gpu_collectives -tc='*stopped across two doorbells*' >"$OUT/pause-$k.log" 2>&1 || { fails=$((fails+1)); cp "$OUT/pause-$k.log" "$OUT/pause-fail-$k.log"; }
  rm -f "$OUT/pause-$k.log"
done
say "proxy stopped across two doorbells, 10 more runs: $fails failed, $(( $(date +%s) - t )) s"
fails=0; t=$(date +%s)
for k in $(seq 1 10); do
  ROCENANTE_TEST_MAX_PARTS=4 timeout 30 $b/tests/gpu/test_gpu_collectives -tc='*stopped across two doorbells*' >"$OUT/pause4-$k.log" 2>&1 || { fails=$((fails+1)); cp "$OUT/pause4-$k.log" "$OUT/pause-fail-mp4-$k.log"; }
  rm -f "$OUT/pause4-$k.log"
done
say "the same with max_parts 4 (4 CTAs per rank instead of 16), 10 runs: $fails failed, $(( $(date +%s) - t )) s"
for f in "$OUT"/pause-fail-*.log; do [ -f "$f" ] && { grep -E "MESSAGE|diagnostics|part [0-9]+:|ERROR" "$f" | head -60 | tee -a "$S"; break; }; done
for tool in memcheck racecheck synccheck; do
  timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 $b/tests/gpu/test_gpu_collectives -tc="*one rank*" >"$OUT/san-$tool.log" 2>&1
  say "compute-sanitizer $tool on test_gpu_collectives -tc='*one rank*': rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san-$tool.log" | tail -1)"
done
{ for args in "49152 4 16" "8192 4 16" "49152 2 16" "49152 8 8"; do timeout 60 $b/benchmarks/gpu/rocenante-trace-phases $args; done; } >"$OUT/trace.log" 2>&1
say "trace: rc=$?"; cat "$OUT/trace.log" >>"$S"
F='all_reduce/(one_shot|ring)/loopback/bf16/bytes:(8192|49152)/ranks:4|all_reduce/one_shot/loopback/bf16/bytes:49152/ranks:(2|8)|all_reduce/one_shot/loopback_proxy/bf16/bytes:(8192|49152)/ranks:4|copy'
for pdl in 0 1; do t=$(date +%s)
  ROCENANTE_BENCH_PDL=$pdl ROCENANTE_BENCH_MAX_PARTS=16 timeout 120 $b/benchmarks/gpu/rocenante-bench-gpu --benchmark_filter="$F" \
    --benchmark_out="$OUT/h200-loopback-pdl$pdl.json" --benchmark_out_format=json --benchmark_counters_tabular=true >"$OUT/bench-gpu-pdl$pdl.log" 2>&1
  say "rocenante-bench-gpu PDL=$pdl max_parts=16: rc=$? after $(( $(date +%s) - t )) s"; grep -E "^all_reduce|^copy" "$OUT/bench-gpu-pdl$pdl.log" | awk '{print $1, $2, $3}' | tee -a "$S"
done
t=$(date +%s)
timeout 90 $b/benchmarks/gpu/rocenante-bench-gpu --benchmark_filter='all_reduce/(one_shot|ring)/loopback/bf16/bytes:67108864/ranks:4|copy' \
  --benchmark_out="$OUT/h200-64m.json" --benchmark_out_format=json --benchmark_counters_tabular=true >"$OUT/bench-gpu-64m.log" 2>&1
say "rocenante-bench-gpu 64 MiB (default split): rc=$? after $(( $(date +%s) - t )) s"; grep -E "^all_reduce|^copy" "$OUT/bench-gpu-64m.log" | tee -a "$S"
t=$(date +%s); NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
{ cuobjdump --dump-resource-usage $b/benchmarks/gpu/rocenante-bench-nvfp4 2>&1 | grep -A1 -E "nvfp4_quantize" | grep -E "Function|REG" | head -20; } >"$OUT/nvfp4-resources.log" 2>&1
say "NVFP4 kernels' resources:"; sed -E 's/^.*Function ([^ ]{0,90}).*$/  \1/' "$OUT/nvfp4-resources.log" | head -20 | tee -a "$S"
if [ -n "$NCU" ]; then
  for flt in 'quantize_epilogue/bf16/bytes:67108864/plain/min' 'nvfp4/quantize/bf16'; do
    timeout 75 "$NCU" --clock-control none -k regex:nvfp4_quantize -c 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section Occupancy --section LaunchStats --section WarpStateStats $b/benchmarks/gpu/rocenante-bench-nvfp4 \
      --benchmark_filter="$flt" --benchmark_min_time=0.01 >>"$OUT/ncu-nvfp4.log" 2>&1
  done
  say "ncu on the NVFP4 kernels: rc=$? after $(( $(date +%s) - t )) s"
  grep -E "nvfp4_quantize|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Issue Slots|Stall|L2 Hit|Warp Cycles Per Issued" "$OUT/ncu-nvfp4.log" | head -70 | tee -a "$S"
else say "ncu: not found"; fi
say "total: $(( $(date +%s) - t0 )) s"
cd "$OUT" && tar czf logs.tar.gz *.log *.json && rm -f bench-*.log gpu-*.log san-*.log trace.log pause-*.log stdout.log *.json

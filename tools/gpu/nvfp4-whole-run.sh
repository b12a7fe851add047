#!/usr/bin/env bash
# tools/gpu/nvfp4-whole-run.sh — one short device call for the NVFP4 whole-blocks epilogue kernel: the nvfp4 GPU
# suite (the new kernel and launcher checked against the host), the NVFP4 codec and epilogue benchmark rows, and
# Nsight Compute on the whole-blocks kernel. Results in $OUT: summary.log and logs.tar.gz.
source "$(dirname "$0")/lib.sh"
gpu_header
b=build-nvw
gpu_setup $b -Dexamples=false
ninja -C $b -j16 tests/gpu/test_gpu_nvfp4 benchmarks/gpu/rocenante-bench-nvfp4 >/tmp/build.log 2>&1 ||
  gpu_build_errors /tmp/build.log
say "build: $(( $(date +%s) - t0 )) s"
t=$(date +%s); timeout 120 $b/tests/gpu/test_gpu_nvfp4 >"$OUT/gpu-tests-nvfp4.log" 2>&1
say "gpu-tests-nvfp4: rc=$? after $(( $(date +%s) - t )) s; $(grep -E 'test cases:|Status:' "$OUT/gpu-tests-nvfp4.log" | tr '\n' ' ')"
grep -E "ERROR|differ" "$OUT/gpu-tests-nvfp4.log" | head -10 | tee -a "$S"
t=$(date +%s)
timeout 120 $b/benchmarks/gpu/rocenante-bench-nvfp4 --benchmark_filter='copy|quantize' --benchmark_out="$OUT/nvfp4-h200.json" \
  --benchmark_out_format=json --benchmark_counters_tabular=true >"$OUT/bench-nvfp4.log" 2>&1
say "rocenante-bench-nvfp4 (codec and epilogue rows): rc=$? after $(( $(date +%s) - t )) s"
grep -E "quantize|copy" "$OUT/bench-nvfp4.log" | awk '{print $1, $2, $3, $NF}' | tee -a "$S"
t=$(date +%s); NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  timeout 60 "$NCU" --clock-control none -k regex:nvfp4_quantize_whole -c 1 --section SpeedOfLight --section Occupancy \
    --section LaunchStats $b/benchmarks/gpu/rocenante-bench-nvfp4 --benchmark_filter='quantize_epilogue/bf16/bytes:67108864/plain/min' \
    --benchmark_min_time=0.01s >"$OUT/ncu-whole.log" 2>&1
  say "ncu on the whole-blocks kernel: rc=$? after $(( $(date +%s) - t )) s"
  grep -E "nvfp4_quantize|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per" "$OUT/ncu-whole.log" | head -20 | tee -a "$S"
fi
say "total: $(( $(date +%s) - t0 )) s"
cd "$OUT" && tar czf logs.tar.gz *.log *.json && rm -f bench-*.log gpu-*.log *.json

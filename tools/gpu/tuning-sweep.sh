set -u
export OUT=${OUT:-/tmp/out}
F='all_reduce/one_shot/loopback/bf16/bytes:(8192|49152|262144)/ranks:(2|4|8)/graph:1'
TEST_ARGS='-tc=*refuses*' BENCH_FILTER="($F|all_reduce/(one_shot|ring)/loopback/bf16/bytes:67108864/ranks:4/graph|copy)" timeout 300 bash tools/gpu/h200-run.sh all 2>&1 | grep -vE "^(copy|all_reduce)" | tail -30
grep -E "^(all_reduce|copy)" $OUT/bench.log | awk '{print $1, $2, $3}' | sed 's|/min_time:0.0[51]0/manual_time||' 
B=build-gpu/benchmarks/gpu/rocenante-bench-gpu; [ -x $B ] || B=build-direct/rocenante-bench-gpu
for mp in 1024 2048 8192; do
  echo "== min_part $mp"
  ROCENANTE_BENCH_MIN_PART=$mp $B --benchmark_filter="$F" 2>/dev/null | grep -E "^all_reduce" | awk '{print $1, $2, $3}' | sed 's|/min_time:0.050/manual_time||'
done
echo "== max_parts 33 (4 ranks x 33 = 132 SMs)"
ROCENANTE_BENCH_MAX_PARTS=33 $B --benchmark_filter='all_reduce/one_shot/loopback/bf16/bytes:67108864/ranks:4/graph' 2>/dev/null | grep -E "^all_reduce" | awk '{print $1, $2, $3}'

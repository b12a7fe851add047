# tools/gpu/lib.sh — sourced by the tools/gpu/*-run.sh scripts that run on the GPU machine (device tool), from the
# repository root with .deps/ carried (doctest and nccl.h headers, .deps/commit = the commit id). Results go to
# $OUT (default ./gpu-out): summary.log (also on stdout) and, after gpu_pack, logs.tar.gz.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"; root=$PWD; export PATH=/usr/local/cuda/bin:$PATH
S="$OUT/summary.log"
t0=$(date +%s)
# a line into the summary and onto stdout
say() { echo "$*" | tee -a "$S"; }
# the summary's head: date, commit, GPU, driver, clocks, nvcc
gpu_header() {
  { date -u +%Y-%m-%dT%H:%M:%SZ; echo "commit: $(cat .deps/commit)"
    nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -1; } 2>&1 | tee "$S"
}
# gpu_prebuilt: use binaries built on the CPU machine and carried in .deps/bin (Google Benchmark's library in
# .deps/lib); sets B to that folder
gpu_prebuilt() { export LD_LIBRARY_PATH=$root/.deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; B=$root/.deps/bin; }
# gpu_setup DIR [meson options...]: configure an sm_90a build in DIR; exit with the log's tail on failure
gpu_setup() {
  local dir=$1; shift
  meson setup "$dir" -Dgpu_archs=90a -Dextra_include="$root/.deps/include" "$@" >"/tmp/setup-${dir//\//_}.log" 2>&1 ||
    { tail -20 "/tmp/setup-${dir//\//_}.log" | tee -a "$S"; exit 1; }
}
# gpu_build_errors LOG...: the first compiler errors of build logs into the summary
gpu_build_errors() { grep -E "error|FAILED" -A3 "$@" | head -30 | tee -a "$S"; }
# gpu_deadline S: every later step, bench and `left` ends by S seconds after the script started (the device tool
# stops a command at 600 s, and gpu_pack must still run); a step with under 10 s left is skipped, and says so
gpu_deadline() { deadline=$((t0 + $1)); }
# left LIMIT_S: LIMIT_S, or the seconds to the deadline when fewer
left() {
  local l=$1
  if [ -n "${deadline:-}" ]; then local d=$((deadline - $(date +%s))); [ "$d" -lt "$l" ] && l=$d; fi
  echo "$l"
}
# step NAME LIMIT_S COMMAND...: run with a time limit, output in $OUT/NAME.log, one summary line with doctest's
# and compute-sanitizer's totals
step() {
  local name=$1 lim; lim=$(left "$2"); shift 2; local t; t=$(date +%s)
  if [ "$lim" -lt 10 ]; then say "$name: skipped (deadline)"; return; fi
  timeout "$lim" "$@" >"$OUT/$name.log" 2>&1; local r=$?
  say "$name: rc=$r after $(( $(date +%s) - t )) s; $(grep -E 'test cases:|Status:|ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$name.log" | tr '\n' ' ')"
}
# gpu_bench NAME BINARY FILTER [VAR=VALUE | --flag ...]: run a Google Benchmark binary with the filter, the variables
# in its environment and the --flags on its command line (limit 200 s), JSON in $OUT/NAME.json, output in
# $OUT/bench-NAME.log, one summary line and the rows' times
gpu_bench() {
  local name=$1 bin=$2 f=$3 lim; lim=$(left 200); shift 3; local t; t=$(date +%s)
  if [ "$lim" -lt 10 ]; then say "$name: skipped (deadline)"; return; fi
  local vars=() flags=() a
  for a in "$@"; do if [[ $a == --* ]]; then flags+=("$a"); else vars+=("$a"); fi; done
  env "${vars[@]}" timeout "$lim" "$bin" --benchmark_filter="$f" --benchmark_out="$OUT/$name.json" --benchmark_out_format=json \
    --benchmark_counters_tabular=true "${flags[@]}" >"$OUT/bench-$name.log" 2>&1
  say "$name ($*): rc=$? after $(( $(date +%s) - t )) s"
  grep -E "^(all_|copy|floor)" "$OUT/bench-$name.log" | awk '{printf "  %-76s %10s %s\n", $1, $2, $3}' | tee -a "$S"
}
# pack every log and JSON of $OUT into logs.tar.gz and leave only it and the summary (the device tool returns a
# limited number of files)
gpu_pack() {
  (cd "$OUT" && tar czf logs.tar.gz --exclude=logs.tar.gz --exclude=summary.log $(ls *.log *.json 2>/dev/null | grep -v '^summary.log$') &&
     find . -maxdepth 1 -type f ! -name summary.log ! -name logs.tar.gz -delete)
  say "total: $(( $(date +%s) - t0 )) s"
}

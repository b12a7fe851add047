#!/usr/bin/env bash
# tools/gpu/run.sh COMMAND [FLAGS] — builds and runs the GPU suites and benchmarks on a GPU machine and leaves a
# receipt folder: command.txt (this command line, date), commit, gpu.txt (nvidia-smi, driver, nvcc), summary.log,
# and every log and JSON the steps wrote.
#
# Commands (from the repository root):
#   deps      on the CPU machine, before going to the GPU machine: fill .deps/ (git-ignored) with what the GPU
#             machine lacks — doctest's and Google Benchmark's headers, nccl.h, libbenchmark, and in .deps/wheels
#             the wheels the Python package's build and tests need (meson-python, meson, nanobind and their
#             dependencies, pytest; pure Python, a few MiB), nccl-tests' source (.deps/nccl-tests, for
#             tools/gpu/nccl-layer.sh) — and .deps/commit (a .git copied there may be stale).
#             Then carry .deps along with the working tree.
#   build     configure and build the GPU targets in build-gpu/ (or --build DIR) for sm_90a (or --arch)
#   test      the gpu suites (collectives, nvfp4, nccl where built), examples 01 and 02, and the ranks-as-processes
#             suite (multiprocess: up to 500 s without MPS, so run it alone: --tests test_gpu_multiprocess)
#   sanitize  compute-sanitizer memcheck, racecheck and synccheck on the one-rank subset of the gpu suite (several
#             ranks on one GPU wait for each other inside their kernels, which the sanitizer serialises)
#   bench     rocenante-bench-gpu (or --binary) with --filter, --env and --repetitions; JSON in the receipt
#   receipt   build, then the receipt rows of docs/results/h200-loopback.json (decode sizes with floors, ring, proxy
#             mode, eager, copy, and the peer rows beside them), test, sanitize, the large rows (1-64 MiB; peer rows
#             at 1 and 4 MiB), the NVFP4 benchmark, the phase trace, and receipt.json (the decode and large rows
#             merged by tools/gpu/merge-receipt.py)
#   perf      the rocenante-perf sweeps (2, 4, 8 ranks on the one GPU, eager and graph, 8 B-64 MiB, every dtype and
#             algorithm; all-gather; a world of one beside NCCL; proxy mode) with a JSON receipt each, the source of
#             the `auto` table (algorithm/auto.hpp), and example 02 at 1 and 8 ranks (time and energy per step)
#   proxy     proxy mode side by side (cuda_proxy: host-mapped windows, a CPU proxy thread per rank standing in for
#             the NIC — the DGX Spark path): rocenante-perf, bf16 one_shot, CUDA graph, --ranks N (default 4), 8 KiB to
#             4 MiB: calls posted once with the loopback proxy's copy engines (one per peer, opt-in), posted once without
#             them, posted per part without them (--call-post-max-bytes 0: the design before calls were posted
#             once), posted once again; every row with rank 0's proxy counters per call (doorbells, writes, busy and
#             copy time). Builds rocenante-perf first (incremental)
#   python    the Python package with the GPU executor, offline: a venv (build-pyvenv/, --system-site-packages so
#             that torch is visible) filled from .deps/wheels, `pip install .` with -Dcuda=enabled for --arch, then
#             --tests (default build,pytest2,pytest4,example4,example1: the build, python/tests/test_gpu.py's torchrun
#             cases at 2 and 4 processes on GPU 0, examples/05_tp_mlp.py at 4 processes and as a world of one
#             beside NCCL). The build takes about 3 minutes: split it over device calls with --tests
#   sass      on the CPU machine: registers, hot-path length and two instruction counts of the decode-size kernel
#             (kernel::all_reduce, reduce_path::small, bf16, sm_90a) that docs/design.md §1.4 quotes; --ranks N
#             builds it over transport::fixed_ranks<direct_handle, N>; cuobjdump and nvdisasm come from PyPI.
#             --ranks all: instead, every kernel gpu::communicator<cuda_loopback> launches for bf16 and fp32
#             (one_shot, two_shot and ring all-reduce, all-gather, reject), one SASS file per kernel and kernels.txt
#             (SHA-256 of each kernel's SASS, its resource usage, its name) in --out; diff two kernels.txt to compare
#             trees
#   soak      rocenante-soak's GPU mode (docs/performance.md "Soak"), after an incremental build of it: --mode threads
#             (ranks as threads of one process on GPU 0, cuda_loopback; a pause is a rank's thread sleeping) or
#             processes (forked ranks, gpu::selected_communicator: cuda_ipc on one node unless --env
#             ROCENANTE_TRANSPORT=socket; a pause is SIGSTOP/SIGCONT; use --mps on), --ranks N (default 4),
#             --seconds S (default 300; cut so that the soak ends by --deadline), the default mix (16 B-4 MiB,
#             fp32/fp16/bf16, one_shot/ring/all-gather, 30 % CUDA-graph replays) and --soak-args. Receipt
#             soak-MODE.json (and soak-MODE.png where matplotlib is installed); summary: collectives (eager, graph),
#             wrong results, fail-stops with their messages, pauses, per-bucket p50/p99/p99.9. Exit 0 clean, 4
#             fail-stops only, 1 wrong results or a failed rank, 77 no GPU
#
# Flags:
#   --out DIR          receipt folder (default gpu-out/COMMAND-COMMIT)
#   --build DIR        build folder (default build-gpu; build-gpu-NAME with --variant)
#   --arch LIST        gpu_archs for meson (default 90a)
#   --variant NAME=FLAGS  build with extra nvcc flags (e.g. maxreg=-maxrregcount=96) in its own folder
#   --filter REGEX     benchmark filter (bench; default: the receipt's decode rows). Three names stand for filters:
#                      `peers`, the library's all-reduce rows (one_shot, one_shot_lamport, one_shot_inplace, two_shot,
#                      two_shot_inplace, ring) beside the peer rows (vLLM's and TensorRT-LLM's published kernels,
#                      benchmarks/gpu/peers.cuh) at 2/4/8 ranks, 8 and 48 KiB, bf16, CUDA graph, with the floors;
#                      `peers-large`, the same at 256 KiB and 1 MiB; `peers-rest`, the same at 4 MiB, and eager
#                      launches at 4 ranks, 8 KiB-4 MiB. Each fits one device call (a benchmark cut at the deadline
#                      leaves no JSON). A run with peer rows adds
#                      tools/gpu/peer-table.py's table to the summary (peers-NAME.txt): every cell's fastest library
#                      and peer rows and their ratio. The bench command's benchmark may run until --deadline
#   --env VAR=VALUE    environment of the benchmark (repeatable; default ROCENANTE_BENCH_MAX_CTAS=16 and
#                      ROCENANTE_BENCH_PDL=1, the receipt's conditions; the peer rows ignore both and launch with
#                      their published defaults, TRTLLM_ENABLE_PDL=0 turns TensorRT-LLM's programmatic launch off)
#   --binary NAME      rocenante-bench-gpu (default) or rocenante-bench-nvfp4
#   --name NAME        the bench step's name (NAME.json, bench-NAME.log; default bench)
#   --repetitions N    Google Benchmark repetitions (mean, median, stddev rows)
#   --deadline S       every step ends by S seconds after the start (default 540: a device call stops at 600 s)
#   --ranks N          sass: fixed rank count (0: plain handle), or `all` (every kernel the dispatch launches)
#   --mps on           start the MPS control daemon (nvidia-cuda-mps-control -d, default pipe directory, its logs
#                      under OUT/mps-logs) for this command and quit it at the end: ranks as processes then share the GPU instead of
#                      time-slicing (test_gpu_multiprocess prints whether MPS is active)
#   --include DIR      sass: the headers to compile (default include/ of this tree; e.g. another commit's, unpacked
#                      with `git archive COMMIT include | tar -x -C DIR`, then DIR/include)
#   --targets LIST     build: ninja targets (default: everything the configuration has)
#   --tests LIST       test: what to run, comma separated, in order (default: test_gpu_collectives,test_gpu_nvfp4,
#                      test_gpu_nccl,examples,test_gpu_multiprocess; receipt runs all but the last); python: its
#                      steps (build,pytest2,pytest4,example4,example1)
#   --jobs N           build: ninja jobs (default: every core)
#   --mode M           soak: threads or processes (default threads)
#   --seconds S        soak: duration (default 300)
#   --soak-args 'A'    soak: more rocenante-soak options, split at spaces (e.g. '--graph-share 0.5 --pdl')
#   (soak: --ranks N is its rank count, default 4; --env VAR=VALUE goes to rocenante-soak, none by default)
#
# Examples:
#   tools/gpu/run.sh deps                                       # here; then carry .deps on the device call
#   tools/gpu/run.sh receipt --out "$OUT/receipt"               # on the GPU machine
#   tools/gpu/run.sh build --targets benchmarks/gpu/rocenante-bench-gpu && tools/gpu/run.sh bench --filter peers --out "$OUT/peers"
#   tools/gpu/run.sh python --out "$OUT/py" --tests build,pytest2   # on the GPU machine, then in a second call:
#   tools/gpu/run.sh python --out "$OUT/py" --tests pytest4,example4,example1
#   # two builds side by side in one device call, then one table of ratios:
#   tools/gpu/run.sh build --variant trial=-DMY_CHANGE=1 && tools/gpu/run.sh build
#   tools/gpu/run.sh bench --out "$OUT/ab" --name default --filter 'bytes:49152/ranks:4' --repetitions 5
#   tools/gpu/run.sh bench --out "$OUT/ab" --name trial --filter 'bytes:49152/ranks:4' --repetitions 5 --variant trial=-DMY_CHANGE=1
#   python3 tools/gpu/compare.py "$OUT"/ab/default.json "$OUT"/ab/trial.json
#   # GPU soaks (docs/performance.md "Soak"): a 20 s smoke of each mode (the first builds), then one device call
#   # for each 5-minute soak:
#   tools/gpu/run.sh soak --out "$OUT/soak-smoke" --mode threads --seconds 20
#   tools/gpu/run.sh soak --out "$OUT/soak-smoke" --mode processes --seconds 20 --mps on --deadline 200
#   tools/gpu/run.sh soak --out "$OUT/soak-threads" --mode threads --ranks 4 --seconds 300
#   tools/gpu/run.sh soak --out "$OUT/soak-processes" --mode processes --ranks 4 --seconds 300 --mps on
# Carry: .deps (from `deps`); build folders stay on the GPU machine between calls while it is warm.
# Receipts go under docs/results/<gpu>-<date>/ with the folder as written (docs/results/README.md).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd); cd "$root" || exit 1
export PATH=/usr/local/cuda/bin:$PATH

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
cmd=${1:-}; [ -n "$cmd" ] || usage 2; shift
case "$cmd" in -h|--help|help) usage 0 ;; deps|build|test|sanitize|bench|receipt|perf|proxy|python|sass|soak) ;; *) echo "run.sh: unknown command '$cmd'" >&2; usage 2 ;; esac
argv=("$cmd" "$@")

out='' build=build-gpu arch=90a variant='' filter='' binary=rocenante-bench-gpu name=bench reps='' deadline=540 ranks=0
targets='' jobs=$(nproc) tests='' include=$root/include mps=off mode=threads seconds=300 soak_args=''
envs=()
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { echo "run.sh: $1 needs a value (run.sh --help)" >&2; exit 2; }
  case "$1" in
    --out) out=$2 ;; --build) build=$2 ;; --arch) arch=$2 ;; --variant) variant=$2 ;; --filter) filter=$2 ;;
    --env) envs+=("$2") ;; --binary) binary=$2 ;; --name) name=$2 ;; --repetitions) reps=$2 ;;
    --deadline) deadline=$2 ;; --ranks) ranks=$2 ;; --targets) targets=$2 ;; --jobs) jobs=$2 ;; --tests) tests=$2 ;;
    --include) include=$2 ;; --mps) mps=$2 ;; --mode) mode=$2 ;; --seconds) seconds=$2 ;; --soak-args) soak_args=$2 ;;
    *) echo "run.sh: unknown flag '$1' (run.sh --help)" >&2; exit 2 ;;
  esac
  shift 2
done
case "$mps" in on|off) ;; *) echo "run.sh: --mps wants on or off" >&2; exit 2 ;; esac
case "$mode" in threads|processes) ;; *) echo "run.sh: --mode wants threads or processes" >&2; exit 2 ;; esac
[[ $seconds =~ ^[0-9]+$ ]] || { echo "run.sh: --seconds wants whole seconds" >&2; exit 2; }
soak_envs=(${envs[@]+"${envs[@]}"})  # soak: only what --env gave
[ ${#envs[@]} -gt 0 ] || envs=(ROCENANTE_BENCH_MAX_CTAS=16 ROCENANTE_BENCH_PDL=1)
vflags=
if [ -n "$variant" ]; then
  [[ $variant == *=* ]] || { echo "run.sh: --variant wants NAME=FLAGS" >&2; exit 2; }
  vflags=${variant#*=}; [ "$build" != build-gpu ] || build=build-gpu-${variant%%=*}
fi

# the commit and whether tracked files differ from it (git where there is a .git)
git_commit() { git rev-parse --verify -q HEAD 2>/dev/null &&
  { git status --porcelain --untracked-files=no | grep -q . && echo dirty || echo clean; }; }
# on the GPU machine: what `deps` wrote on the CPU machine (a .git there may be a stale copy), else git
commit() { if [ -s .deps/commit ]; then cat .deps/commit; else git_commit || echo unknown; fi; }

deps() {
  mkdir -p .deps/include .deps/lib
  [ -d .deps/include/doctest ] || cp -r /usr/include/doctest .deps/include/ || { echo "deps: apt-get install doctest-dev" >&2; return 1; }
  [ -d .deps/include/benchmark ] || cp -r /usr/include/benchmark .deps/include/ || { echo "deps: apt-get install libbenchmark-dev" >&2; return 1; }
  local nccl; nccl=$(ls /usr/local/cuda/include/nccl.h /usr/local/include/nccl.h /usr/include/nccl.h 2>/dev/null | head -1)
  if [ -n "$nccl" ]; then cp "$nccl" .deps/include/; else echo "deps: no nccl.h here: the NCCL rows and suite will not be built" >&2; fi
  # a real file under both names: the link name for the build, the SONAME for the run (links may not travel)
  local lib; lib=$(readlink -f /usr/lib/x86_64-linux-gnu/libbenchmark.so) || return 1
  cp "$lib" .deps/lib/libbenchmark.so; cp "$lib" ".deps/lib/$(objdump -p "$lib" | awk '/SONAME/{print $2}')"
  python_wheels || return 1
  nccl_tests || return 1
  git_commit > .deps/commit || echo unknown > .deps/commit
  du -sh .deps | sed 's/^/deps: carry .deps (/; s/$/)/'
}

# The wheels `run.sh python` installs offline: the package's build requirements (pyproject.toml) and pytest, with
# their dependencies, resolved for every Python the GPU machine may have (all pure Python: one set serves them).
py_build_reqs=("meson-python>=0.15" "meson>=1.4" "nanobind>=2.0" "pytest>=7")
python_wheels() {
  local v w=.deps/wheels; mkdir -p "$w"
  # pip judges the dependencies' markers by this Python, not --python-version: older Pythons' backports by name
  for v in 3.9 3.10 3.11 3.12 3.13; do
    python3 -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version "$v" -d "$w" \
      "${py_build_reqs[@]}" tomli exceptiongroup typing_extensions ||
      { echo "deps: pip download of the Python build wheels failed (Python $v)" >&2; return 1; }
  done
  du -sh "$w" | sed 's/^/deps: Python wheels in .deps\/wheels (/; s/$/)/'
}

# nccl-tests' source at a fixed tag, without its .git, for tools/gpu/nccl-layer.sh (the GPU machine has no internet).
# ROCENANTE_NCCL_TESTS_GIT names another clone source (a local mirror) where GitHub cannot be reached.
nccl_tests_tag=v2.19.6
nccl_tests() {
  [ -f .deps/nccl-tests/src/common.cu ] && return 0
  rm -rf .deps/nccl-tests
  git clone -q --depth 1 --branch "$nccl_tests_tag" "${ROCENANTE_NCCL_TESTS_GIT:-https://github.com/NVIDIA/nccl-tests.git}" \
    .deps/nccl-tests ||
    { echo "deps: cloning nccl-tests $nccl_tests_tag failed" >&2; return 1; }
  git -C .deps/nccl-tests rev-parse HEAD >.deps/nccl-tests.commit && rm -rf .deps/nccl-tests/.git
  echo "deps: nccl-tests $nccl_tests_tag ($(cat .deps/nccl-tests.commit)) in .deps/nccl-tests"
}

sass() {
  local tools=${HOME}/.cache/rocenante-sass
  if [ ! -x "$tools/cuobj/nvidia/cu13/bin/cuobjdump" ]; then
    mkdir -p "$tools"
    pip download -q --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm -d "$tools/whl" >/dev/null || return 1
    python3 -m zipfile -e "$tools"/whl/nvidia_cuda_cuobjdump*.whl "$tools/cuobj"
    python3 -m zipfile -e "$tools"/whl/nvidia_cuda_nvdisasm*.whl "$tools/nvd"
    chmod +x "$tools"/cuobj/nvidia/cu13/bin/* "$tools"/nvd/nvidia/cu13/bin/*
  fi
  export PATH=$tools/nvd/nvidia/cu13/bin:$PATH
  local w handle=rocenante::transport::direct_handle; w=$(mktemp -d)
  local cuobjdump=$tools/cuobj/nvidia/cu13/bin/cuobjdump
  if [ "$ranks" = all ]; then
    # what the communicator's dispatch instantiates (tests/gpu/dispatched_kernels.cu), so the list follows the library
    cp "$root/tests/gpu/dispatched_kernels.cu" "$w/k.cu"
    # shellcheck disable=SC2086
    nvcc -std=c++20 -arch=sm_90a -cubin -O3 -I"$include" $vflags "$w/k.cu" -o "$w/k.cubin" || { rm -rf "$w"; return 1; }
    local dir=${out:-$root/gpu-out/sass-all}; mkdir -p "$dir"
    "$cuobjdump" -sass "$w/k.cubin" | sed 's|/\* 0x[0-9a-f]* \*/||' | grep -v '^\s*$' |
      awk -v d="$dir" '/Function : /{f=d "/" $3 ".sass"} f{print > f}'
    "$cuobjdump" -res-usage "$w/k.cubin" | awk '/Function /{sub(":$", "", $2); n=$2; next} n{print n, $1, $2, $3; n=""}' |
      while read -r fn reg stack shared; do
        echo "$(sha256sum <"$dir/$fn.sass" | cut -c1-16) $reg $stack $shared $(echo "$fn" | c++filt | sed 's/rocenante:://g; s/>(.*$/>/')"
      done | sort -k6 >"$dir/kernels.txt"
    cat "$dir/kernels.txt"; rm -rf "$w"; return 0
  fi
  [ "$ranks" != 0 ] && handle="rocenante::transport::fixed_ranks<rocenante::transport::direct_handle, $ranks>"
  cat >"$w/k.cu" <<CU
#include <rocenante/rocenante.hpp>
#include <rocenante/kernel/collectives.cuh>
#include <rocenante/transport/cuda_window.hpp>
using namespace rocenante;
using H = $handle;
template __global__ void kernel::all_reduce<algorithm::one_shot, reduce::sum<__nv_bfloat16>, H, algorithm::no_epilogue,
                                            kernel::reduce_path::small>(device::context<H>, const __nv_bfloat16*,
                                                                        __nv_bfloat16*, std::uint64_t, std::uint32_t,
                                                                        algorithm::no_epilogue);
CU
  # shellcheck disable=SC2086
  nvcc -std=c++20 -arch=sm_90a -cubin -O3 -I"$include" $vflags "$w/k.cu" -o "$w/k.cubin" -Xptxas -v 2>&1 |
    grep -o "Used [0-9]* registers.*"
  "$cuobjdump" -sass "$w/k.cubin" | sed 's|/\* 0x[0-9a-f]* \*/||' | grep -v '^\s*$' >"$w/k.sass"
  echo "hot path ends at: $(grep -m1 -E '^\s*/\*[0-9a-f]+\*/\s+EXIT' "$w/k.sass" | grep -o '/\*[0-9a-f]*\*/')"
  echo "staging barrier -> first MEMBAR: $(awk '/BAR.SYNC/{c++} c==1' "$w/k.sass" | awk '/MEMBAR/{print NR-1; exit}') instructions"
  echo "barrier after the wait -> first source load: $(awk '/BAR.RED.AND/{c++} c==2' "$w/k.sass" | awk '/LDG.E.128/{print NR-1; exit}') instructions"
  [ -z "${out:-}" ] || { mkdir -p "$out"; cp "$w/k.sass" "$out/decode-kernel.sass"; }
  rm -rf "$w"
}

case "$cmd" in deps) deps; exit $? ;; sass) sass; exit $? ;; esac

# --- on the GPU machine ---------------------------------------------------------------------------------------
c=$(commit | head -1 | cut -c1-12)
out=${out:-$root/gpu-out/$cmd-$c}; mkdir -p "$out"; S=$out/summary.log; t0=$(date +%s)
say() { echo "$*" | tee -a "$S"; }
{ printf "%q " tools/gpu/run.sh "${argv[@]}"; echo; date -u +%Y-%m-%dT%H:%M:%SZ; } >>"$out/command.txt"
commit >"$out/commit"
{ nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv; nvcc --version | tail -1
  meson --version; uname -r; } >"$out/gpu.txt" 2>&1
say "$(date -u +%FT%TZ) tools/gpu/run.sh ${argv[*]}: commit $(head -1 "$out/commit"), GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep . || echo 'none (nvidia-smi failed)')"
export LD_LIBRARY_PATH=$root/.deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nccl_dir=$(python3 -c 'import os, nvidia.nccl as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$nccl_dir" ] && [ -e "$nccl_dir/libnccl.so.2" ] && export LD_LIBRARY_PATH=$nccl_dir:$LD_LIBRARY_PATH
export CUDA_MODULE_LOADING=EAGER  # a kernel's lazy first load can wait for peers' spinning kernels (docs/api.md §5)
# CUDA_DEVICE_MAX_CONNECTIONS is left to the programs: those that run ranks as threads ask for 32 work queues
# themselves, and ranks as processes must not (under MPS every client's queues come out of one shared pool, and
# 4 processes asking for 32 each left none for a fourth context: docs/operations.md).
if [ "$mps" = on ]; then
  # The daemon's and the server's own logs (client connections, their errors) come back in $out/mps-logs.
  mkdir -p "$out/mps-logs"
  if CUDA_MPS_LOG_DIRECTORY="$out/mps-logs" nvidia-cuda-mps-control -d >"$out/mps.log" 2>&1; then
    say "MPS: control daemon started (quit at the end; its logs in mps-logs/)"
    trap 'echo quit | nvidia-cuda-mps-control >/dev/null 2>&1' EXIT
  else say "MPS: nvidia-cuda-mps-control -d failed (mps.log): the processes time-slice"; fi
fi

# left LIMIT: LIMIT seconds, or fewer when the deadline is nearer
left() { local d=$((t0 + deadline - $(date +%s))); [ "$d" -lt "$1" ] && echo "$d" || echo "$1"; }
# step NAME LIMIT COMMAND...: run with a time limit, output in NAME.log, one summary line with the totals
step() {
  local n=$1 lim; lim=$(left "$2"); shift 2
  if [ "$lim" -lt 10 ]; then say "$n: skipped (deadline): not run, not passed"; return 1; fi
  local t; t=$(date +%s); timeout "$lim" "$@" >"$out/$n.log" 2>&1; local r=$?
  say "$n: rc=$r after $(( $(date +%s) - t )) s; $(grep -E 'test cases:|Status:|ERROR SUMMARY|RACECHECK SUMMARY|PASS|FAIL|Out of bounds' "$out/$n.log" | tail -3 | tr '\n' ' ')"
  return $r
}

B=$build
do_build() {
  if [ ! -f "$B/build.ninja" ]; then
    local a=(-Dgpu_archs="$arch" -Dcuda=enabled -Dextra_include="$root/.deps/include")
    [ -z "$vflags" ] || a+=(-Dcuda_args="$vflags")
    meson setup "$B" "${a[@]}" >"$out/setup.log" 2>&1 || { say "setup failed:"; tail -20 "$out/setup.log" | tee -a "$S"; return 1; }
  fi
  # shellcheck disable=SC2086
  step build 400 ninja -C "$B" -j"$jobs" $targets || { grep -E "error|FAILED" -A3 "$out/build.log" | head -30 | tee -a "$S"; return 1; }
}
need() { [ -x "$B/$1" ] || { say "$1: not built (run.sh build${variant:+ --variant $variant})"; return 1; }; }
# do_test [LIST]: the test programs of LIST (else --tests, else all of them), each a step
do_test() {
  local t e r=0 want
  IFS=, read -ra want <<<"${1:-${tests:-test_gpu_collectives,test_gpu_nvfp4,test_gpu_nccl,examples,test_gpu_multiprocess}}"
  for t in "${want[@]}"; do
    case "$t" in
      # NCCL's suite needs nccl.h at build time, example 02 cuBLAS: built only where those were found
      test_gpu_nccl) [ -x "$B/tests/gpu/$t" ] && { step "$t" 120 "$B/tests/gpu/$t" || r=1; } ;;
      examples) for e in 01_user_kernel 02_tp_mlp_decode; do [ -x "$B/examples/$e" ] && { step "example-$e" 60 "$B/examples/$e" || r=1; }; done ;;
      # processes time-slicing one GPU without MPS: slow, but correct
      test_gpu_multiprocess) if need "tests/gpu/$t"; then step "$t" 500 "$B/tests/gpu/$t" || r=1; else r=1; fi ;;
      *) if need "tests/gpu/$t"; then step "$t" 200 "$B/tests/gpu/$t" || r=1; else r=1; fi ;;
    esac
  done
  return $r
}
do_sanitize() {
  need tests/gpu/test_gpu_collectives || return 1
  local tool; for tool in memcheck racecheck synccheck; do
    step "sanitize-$tool" 120 compute-sanitizer --tool "$tool" --error-exitcode 9 "$B/tests/gpu/test_gpu_collectives" -tc='*one rank*'
  done
}
# bench NAME BINARY FILTER: Google Benchmark with the --env variables, JSON in NAME.json, rows into the summary;
# where the run has peer rows, tools/gpu/peer-table.py's table of the library beside them (a failed peer row fails
# the step)
do_bench() {
  local n=$1 bin=$B/benchmarks/gpu/$2 f=$3 r=0; need "benchmarks/gpu/$2" || return 1
  local extra=(); [ -z "$reps" ] || extra+=(--benchmark_repetitions="$reps")
  step "bench-$n" "${bench_limit:-200}" env "${envs[@]}" "$bin" --benchmark_filter="$f" --benchmark_out="$out/$n.json" \
    --benchmark_out_format=json --benchmark_counters_tabular=true "${extra[@]}" || r=1
  say "  environment: ${envs[*]} (the library's rows; peer rows launch with their published settings)"
  grep -E "^(all_|copy|floor|nvfp4|quantize)" "$out/bench-$n.log" | awk '{printf "  %-76s %10s %s\n", $1, $2, $3}' | tee -a "$S"
  if grep -q '"all_reduce/peer_' "$out/$n.json" 2>/dev/null; then
    python3 tools/gpu/peer-table.py "$out/$n.json" >"$out/peers-$n.txt" 2>&1 || r=1
    sed 's/^/  /' "$out/peers-$n.txt" | tee -a "$S"
  fi
  return $r
}

# perf NAME ARGS...: one rocenante-perf run, its table in NAME.log and its receipt in NAME.json
perf() { step "$1" 150 "$B/benchmarks/rocenante-perf" "${@:2}" -J "$out/$1.json"; }
do_perf() {
  need benchmarks/rocenante-perf || return 1
  local r=0 n sweep=(-b 8 -e 64M -f 2 -d all --algo all -w 2)
  for n in 2 4 8; do
    perf "perf-cuda_loopback-r$n-eager" --transport cuda_loopback --ranks "$n" "${sweep[@]}" -n 20 || r=1
    perf "perf-cuda_loopback-r$n-graph" --transport cuda_loopback --ranks "$n" "${sweep[@]}" -n 10 -G 5 || r=1
  done
  # all-gather (one_shot only; size = the gathered output, as in nccl-tests); a world of one, where NCCL can run
  # beside the library on one GPU; proxy mode at small sizes (pinned host memory)
  perf perf-cuda_loopback-r4-all_gather-eager --transport cuda_loopback --ranks 4 --collective all_gather -b 32 -e 64M -f 2 -d all -w 2 -n 20 || r=1
  perf perf-cuda_loopback-r1-eager --transport cuda_loopback --ranks 1 "${sweep[@]}" -n 20 || r=1
  perf perf-cuda_loopback-r1-graph --transport cuda_loopback --ranks 1 "${sweep[@]}" -n 10 -G 5 || r=1
  perf perf-cuda_proxy-r4-graph --transport cuda_proxy --ranks 4 -b 8 -e 1M -f 4 -d bfloat16 --algo all -w 2 -n 10 -G 5 || r=1
  if [ -x "$B/examples/02_tp_mlp_decode" ]; then
    step example-02-ranks1 60 "$B/examples/02_tp_mlp_decode" --ranks 1 || r=1
    step example-02-ranks8-tokens4 60 "$B/examples/02_tp_mlp_decode" --ranks 8 --tokens 4 || r=1
  fi
  return $r
}

# proxy: calls posted once beside calls posted per part, in one call; the loopback proxy with its copy engines (one
# per peer, opt-in) and without (every copy in the proxy thread, as before the engines). Order A B C A.
do_proxy() {
  targets=${targets:-benchmarks/rocenante-perf} do_build || return 1
  need benchmarks/rocenante-perf || return 1
  local n=$ranks r=0 name; [ "$n" != 0 ] || n=4
  local sweep=(--transport cuda_proxy --ranks "$n" -d bfloat16 --algo one_shot -b 8K -e 4M -f 2 -w 5 -n 20 -G 10)
  # pstep NAME ENGINES [more rocenante-perf arguments]
  pstep() {
    name=$1; local engines=$2; shift 2
    step "$name" 150 env ROCENANTE_PROXY_COPY_ENGINES="$engines" "$B/benchmarks/rocenante-perf" "${sweep[@]}" "$@" -J "$out/$name.json"
  }
  pstep "proxy-r$n-once" $((n - 1)) || r=1
  pstep "proxy-r$n-once-no_engines" 0 || r=1
  pstep "proxy-r$n-per_part-no_engines" 0 --call-post-max-bytes 0 || r=1
  pstep "proxy-r$n-once-again" $((n - 1)) || r=1
  local f; for f in once once-no_engines per_part-no_engines; do
    say "--- proxy-r$n-$f"; grep -hE '^ +[0-9]+ .*one_shot|proxy of rank 0' "$out/proxy-r$n-$f.log" | tee -a "$S" >/dev/null
  done
  return $r
}

# soak: rocenante-soak --gpu in --mode, built first (incremental), cut to end by the deadline; receipt soak-MODE.json,
# its totals, fail-stops and per-bucket percentiles in the summary, soak-MODE.png where matplotlib is installed.
do_soak() {
  local bin=$B/benchmarks/soak/rocenante-soak n=$ranks margin=60 r
  [ "$n" != 0 ] || n=4
  local how=(--threads "$n"); [ "$mode" = threads ] || how=(--launch "$n")
  targets=${targets:-benchmarks/soak/rocenante-soak} do_build || return 1
  need benchmarks/soak/rocenante-soak || return 1
  # the receipt's commit: the one `deps` recorded (a .git copied to the GPU machine may be stale)
  ROCENANTE_SOAK_COMMIT=$(commit | paste -sd' ' | awk '{print substr($1, 1, 12) ($2 == "dirty" ? "-dirty" : "")}')
  export ROCENANTE_SOAK_COMMIT
  # the soak, plus set-up and teardown (margin), must end by the deadline
  local secs=$seconds left_s=$((t0 + deadline - $(date +%s)))
  if [ $((left_s - margin)) -lt "$secs" ]; then
    secs=$((left_s - margin)); say "soak: --seconds $seconds cut to $secs s: the deadline (--deadline $deadline) leaves $left_s s"
  fi
  [ "$secs" -ge 10 ] || { say "soak-$mode: skipped (deadline): $left_s s left, not run, not passed"; return 1; }
  local json=$out/soak-$mode.json
  say "soak-$mode: $n ranks, $secs s${soak_envs[*]:+, environment ${soak_envs[*]}}${soak_args:+, $soak_args}"
  # shellcheck disable=SC2086  # --soak-args is split at spaces on purpose
  step "soak-$mode" $((secs + margin)) env ${soak_envs[@]+"${soak_envs[@]}"} "$bin" --gpu "${how[@]}" --seconds "$secs" \
    --json "$json" $soak_args
  r=$?
  # a run cut short leaves rank 0's last minute-by-minute receipt (complete: false)
  [ -s "$json" ] || { [ -s "$json.rank0" ] && json=$json.rank0; }
  if [ -s "$json" ]; then
    python3 - "$json" <<'PY' 2>&1 | tee -a "$S"
import json, sys
r = json.load(open(sys.argv[1]))
g = r.get("graph", {})
print(f"  {r.get('mode')}: {r.get('ranks')} ranks, {r.get('transport')}, {r.get('gpu', {}).get('name')}, complete {r.get('complete')}: "
      f"{r.get('collectives')} collectives ({r.get('calls_eager')} eager, {r.get('calls_graph')} graph; rank 0 captured "
      f"{g.get('captures_rank0')} graphs, evicted {g.get('evictions_rank0')}), {r.get('wrong_results')} wrong, "
      f"{r.get('fail_stops')} fail-stops, {len(r.get('pauses', []))} pauses, {r.get('run_seconds')} s")
for pr in r.get("per_rank", []):
    for f in pr.get("fail_stop_reports", []):
        print(f"  fail-stop: rank {pr['rank']} at {f['t_s']} s, call {f['call']}, {f['status']}: {f['message']}")
    for w in pr.get("wrong_reports", []):
        print(f"  WRONG: rank {pr['rank']} call {w['call']}: {w['what']}")
    if pr.get("stopped_on_error"):
        print(f"  rank {pr['rank']} stopped: {pr['stopped_on_error']}")
for c in r.get("overall", []):
    if c["n"]:
        print(f"  {c['bucket']:>9}: {c['n']:>8} calls, p50 {c['p50_us']:9.1f} us, p99 {c['p99_us']:9.1f} us, "
              f"p99.9 {c['p999_us']:9.1f} us, max {c['max_us']:9.1f} us")
PY
    python3 tools/plot_soak.py "$json" -o "$out/soak-$mode.png" >/dev/null 2>&1 && say "  plot: soak-$mode.png" ||
      say "  no plot here (matplotlib?): python3 tools/plot_soak.py soak-$mode.json -o soak-$mode.png elsewhere"
  else
    say "  no receipt; the end of soak-$mode.log:"; tail -4 "$out/soak-$mode.log" | sed 's/^/    /' | tee -a "$S"
  fi
  return $r
}

# python [STEPS]: the package with the GPU executor in build-pyvenv/ (offline, from .deps/wheels), its GPU tests and
# example 05. Build folder $B-python (meson-python's, incremental while the machine stays warm).
do_python() {
  local v=$root/build-pyvenv w=$root/.deps/wheels s r=0 want
  IFS=, read -ra want <<<"${tests:-build,pytest2,pytest4,example4,example1}"
  for s in "${want[@]}"; do
    case "$s" in
      build)
        [ -d "$w" ] || { say "python: no .deps/wheels: run tools/gpu/run.sh deps on the CPU machine and carry .deps"; return 1; }
        python3 -c 'import torch, numpy' >"$out/python-torch.log" 2>&1 ||
          say "python: python3 cannot import torch and numpy (python-torch.log): the GPU cases will skip"
        if [ ! -x "$v/bin/python" ]; then
          python3 -m venv --system-site-packages "$v" >"$out/python-venv.log" 2>&1 || { say "python: venv failed:"; tail -5 "$out/python-venv.log" | tee -a "$S"; return 1; }
          # python3 may itself be a venv (the GPU image's holds torch): --system-site-packages reaches only the base
          # interpreter's, so a .pth adds python3's own site-packages after the new venv's
          python3 -c 'import site; print("\n".join(site.getsitepackages()))' >"$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/rocenante-parent-site.pth"
        fi
        step python-tools 120 "$v/bin/python" -m pip install --disable-pip-version-check --no-index --find-links "$w" \
          "${py_build_reqs[@]}" || return 1
        step python-build 480 env PATH="$v/bin:$PATH" "$v/bin/python" -m pip install -v --disable-pip-version-check \
          --no-index --find-links "$w" --no-build-isolation --no-deps -Cbuild-dir="$root/$B-python" \
          -Csetup-args=-Dcuda=enabled -Csetup-args=-Dgpu_archs="$arch" . || { grep -E "error|Error" "$out/python-build.log" | head -20 | tee -a "$S"; return 1; }
        step python-import 60 "$v/bin/python" -c 'import rocenante, torch
print("rocenante: has_gpu", rocenante.has_gpu, "gpu_unavailable", repr(rocenante.gpu_unavailable()))
print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())' &&
          tee -a "$S" <"$out/python-import.log" || r=1 ;;
      pytest2|pytest4)
        [ -x "$v/bin/python" ] || { say "$s: no build-pyvenv (run.sh python --tests build)"; return 1; }
        step "python-$s" 500 bash -c "cd python/tests && '$v/bin/python' -m pytest -v -s -rs -p no:cacheprovider \
          'test_gpu.py::test_torchrun_ranks_on_one_gpu[${s#pytest}]' test_gpu.py::test_a_missing_gpu_is_a_config_error_naming_the_rank" || r=1
        grep -E "rank [0-9]+: (ok|PASS|FAIL)|passed|failed|skipped|SKIP" "$out/python-$s.log" | tail -25 | tee -a "$S"
        # a skipped GPU case is not a passed one
        grep -q "rank 0: PASS" "$out/python-$s.log" || { say "python-$s: the torchrun case did not pass (skipped or failed)"; r=1; } ;;
      example4|example1)
        [ -x "$v/bin/python" ] || { say "$s: no build-pyvenv (run.sh python --tests build)"; return 1; }
        step "python-$s" 300 env CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}" "$v/bin/python" -m torch.distributed.run \
          --standalone --nproc-per-node="${s#example}" examples/05_tp_mlp.py || r=1
        grep -vE '^\s*$|^W[0-9]|^\*+$|OMP_NUM_THREADS' "$out/python-$s.log" | tail -25 | tee -a "$S" ;;
      *) say "python: unknown step '$s' (build, pytest2, pytest4, example4, example1)"; r=1 ;;
    esac
  done
  return $r
}

# (floor/host_staged: proxy mode's bus traffic with a proxy that costs nothing, beside the loopback_proxy rows)
floors='floor/one_shot_minimal/bf16/bytes:49152/ranks:(2|4|8)/ctas:16/threads:192/pdl:1/graph|floor/empty/ranks:4/ctas:16/pdl:1/graph|floor/host_staged/bf16/bytes:(8192|49152)/ranks:4/'
# peer rows (benchmarks/gpu/peers.cuh: vLLM's and TensorRT-LLM's published kernels) beside the library's graph rows
# (18 rows, about a minute: the step's 200 s hold them; eager peer rows: --filter peers-rest)
decode='all_reduce/(one_shot|ring)/loopback/bf16/bytes:(8192|49152)/ranks:4|all_reduce/(one_shot|one_shot_lamport|peer_[a-z_]+)/loopback/bf16/bytes:(8192|49152)/ranks:(2|4|8)/graph:1|all_reduce/one_shot/loopback_proxy/bf16/bytes:(8192|49152)/ranks:4|'"$floors"'|copy'
large='all_reduce/(one_shot|ring|peer_[a-z_]+)/loopback/bf16/bytes:(1048576|4194304|16777216|67108864)/ranks:4/graph:1'
# --filter peers: the library (one_shot, one_shot_lamport, one_shot_inplace, two_shot, two_shot_inplace, ring) beside every peer row, CUDA graph, 2/4/8 ranks,
# 8 and 48 KiB, with the floors; --filter peers-large: the same at 256 KiB and 1 MiB; --filter peers-rest: the other peer
# cells a device call can hold, CUDA graph at 4 MiB (2/4/8 ranks) and eager launches at 4 ranks, 8 KiB-4 MiB
# (`ranks:4/min_time`: the name goes on without /graph:1, the eager row; the filter is POSIX, without lookahead)
lib_peer='all_reduce/(one_shot|one_shot_lamport|one_shot_inplace|two_shot_inplace|two_shot|ring|peer_[a-z_]+)/loopback/bf16'
peers="$lib_peer"'/bytes:(8192|49152)/ranks:(2|4|8)/graph:1|floor/one_shot_minimal/bf16/bytes:(8192|49152)/ranks:(2|4|8)/ctas:16/threads:(192|256)/pdl:1/graph'
peers_large="$lib_peer"'/bytes:(262144|1048576)/ranks:(2|4|8)/graph:1'
peers_rest="$lib_peer"'/bytes:4194304/ranks:(2|4|8)/graph:1|'"$lib_peer"'/bytes:(8192|49152|262144|1048576|4194304)/ranks:4/min_time'
case "$filter" in peers) filter=$peers ;; peers-large) filter=$peers_large ;; peers-rest) filter=$peers_rest ;; esac

rc=0
case "$cmd" in
  build) do_build || rc=1 ;;
  test) do_test || rc=1 ;;
  sanitize) do_sanitize || rc=1 ;;
  bench) bench_limit=$deadline do_bench "$name" "$binary" "${filter:-$decode}" || rc=1 ;;
  perf) do_perf || rc=1 ;;
  proxy) do_proxy || rc=1 ;;
  python) do_python || rc=1 ;;
  soak) do_soak; rc=$? ;;
  receipt)
    do_build || { say "total: $(( $(date +%s) - t0 )) s"; exit 1; }
    do_bench receipt-decode rocenante-bench-gpu "$decode"  # first: a deadline cuts from the end
    do_test test_gpu_collectives,test_gpu_nvfp4,test_gpu_nccl,examples
    do_sanitize
    do_bench large rocenante-bench-gpu "$large"
    do_bench nvfp4 rocenante-bench-nvfp4 'copy|quantize'
    need benchmarks/gpu/rocenante-trace-phases && step trace 60 "$B/benchmarks/gpu/rocenante-trace-phases" 49152 4 16 &&
      grep -vE '^$' "$out/trace.log" | tee -a "$S"
    if [ -s "$out/receipt-decode.json" ] && [ -s "$out/large.json" ]; then
      python3 tools/gpu/merge-receipt.py "$out/receipt.json" "tools/gpu/run.sh receipt at $(head -1 "$out/commit")" \
        "decode=$out/receipt-decode.json" "large=$out/large.json" && say "receipt.json: the decode and large rows merged"
    fi
    ;;
esac
say "total: $(( $(date +%s) - t0 )) s; receipt folder $out"
exit $rc

#!/usr/bin/env bash
# tools/gpu/nccl-layer.sh [FLAGS] — the NCCL-API layer (librocenante_nccl.so, docs/nccl.md) on the GPU machine, with
# ranks as processes sharing one GPU (which NCCL itself refuses), leaving a receipt folder: command.txt, commit,
# gpu.txt, summary.log and every step's log.
#
# Steps (--steps, comma separated, in this order; default all of them):
#   build       the layer, its GPU test and the stub NCCL in the build folder (meson, -Dextra_include=.deps/include
#               for nccl.h), then nccl-tests from .deps/nccl-tests (tools/gpu/run.sh deps fetched it on the CPU
#               machine: the GPU machine has no internet) with MPI=1, linked against the layer (a NCCL_HOME whose
#               lib/libnccl.so is the layer). MPI: the installed one when mpicc is on PATH, else the stand-in in
#               tools/gpu/mpi-stand-in (nccl-tests' few MPI calls over RoCEnante's TCP bootstrap; it moves only
#               nccl-tests' own host data, never a collective under test)
#   gputest     tests/nccl_api/test_gpu_nccl_layer: ranks as threads on GPU 0, served calls exact and never
#               forwarded, a CUDA graph, a group (the stub NCCL records what is forwarded)
#   nccltests   all_reduce_perf and all_gather_perf, -c 1, 8 B to 64 MiB (-f 2), eager and -G, --ranks processes
#               on GPU 0 (NCCL_TESTS_DEVICE=0), one process per rank (mpirun, or the stand-in's launcher: a shell
#               loop), ROCENANTE_NCCL_MAX_BYTES=64M so that every size is served (NCCL cannot hold these ranks)
#   torch       tests/nccl_api/torch_check.py under torchrun, --ranks processes on GPU 0, the layer preloaded
#               (LD_PRELOAD): all_reduce / all_gather of several sizes and dtypes, one CUDA graph, exact against a
#               CPU reference; the forwarded call's refusal
#
# Flags:
#   --out DIR        receipt folder (default gpu-out/nccl-layer-COMMIT)
#   --build DIR      meson build folder (default build-gpu, shared with tools/gpu/run.sh)
#   --arch LIST      gpu_archs (default 90a; nccl-tests gets the same)
#   --steps LIST     see above (default build,gputest,nccltests,torch)
#   --ranks LIST     process counts (default 2,4)
#   --dtypes LIST    nccl-tests datatypes (default float; e.g. float,half,bfloat16)
#   --mpi auto|stand-in  nccl-tests' MPI: an installed Open MPI where mpicc and mpirun are found (auto), or always
#                    the stand-in
#   --mps on|off     start the MPS control daemon for this command (default on: ranks as processes then run
#                    concurrently on the GPU instead of time-slicing; the summary says whether it started)
#   --deadline S     every step ends by S seconds after the start (default 540: a device call stops at 600 s)
#   --jobs N         build jobs (default: every core)
#
# On the GPU machine, three device calls of under 10 minutes each (the build is most of the first):
#   tools/gpu/nccl-layer.sh --steps build --out "$OUT/nccl-layer"
#   tools/gpu/nccl-layer.sh --steps gputest,nccltests --out "$OUT/nccl-layer"
#   tools/gpu/nccl-layer.sh --steps torch --out "$OUT/nccl-layer"
# What passing looks like: summary.log has "gputest: rc=0", one "nccl-tests ... rc=0 ... Out of bounds values : 0 OK"
# line per (test, ranks, mode), and "torch-N: N/N ranks PASS" for each N.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd); cd "$root" || exit 1
export PATH=/usr/local/cuda/bin:$PATH

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
case "${1:-}" in -h|--help|help) usage 0 ;; esac
argv=("$@")
out='' B=build-gpu arch=90a steps=build,gputest,nccltests,torch ranks=2,4 dtypes=float mps=on deadline=540 jobs=$(nproc)
mpi=auto
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { echo "nccl-layer.sh: $1 needs a value (--help)" >&2; exit 2; }
  case "$1" in
    --out) out=$2 ;; --build) B=$2 ;; --arch) arch=$2 ;; --steps) steps=$2 ;; --ranks) ranks=$2 ;;
    --dtypes) dtypes=$2 ;; --mps) mps=$2 ;; --mpi) mpi=$2 ;; --deadline) deadline=$2 ;; --jobs) jobs=$2 ;;
    *) echo "nccl-layer.sh: unknown flag '$1' (--help)" >&2; exit 2 ;;
  esac
  shift 2
done

commit() { if [ -s .deps/commit ]; then head -1 .deps/commit; else git rev-parse --verify -q HEAD 2>/dev/null || echo unknown; fi; }
c=$(commit | cut -c1-12)
out=${out:-$root/gpu-out/nccl-layer-$c}; mkdir -p "$out"; S=$out/summary.log; t0=$(date +%s)
say() { echo "$*" | tee -a "$S"; }
{ printf "%q " tools/gpu/nccl-layer.sh "${argv[@]}"; echo; date -u +%Y-%m-%dT%H:%M:%SZ; } >>"$out/command.txt"
commit >"$out/commit"
{ nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv; nvcc --version | tail -1; meson --version
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'; command -v mpicc mpirun; } >"$out/gpu.txt" 2>&1
say "$(date -u +%FT%TZ) tools/gpu/nccl-layer.sh ${argv[*]}: commit $(commit), GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep . || echo 'none (nvidia-smi failed)')"

left() { local d=$((t0 + deadline - $(date +%s))); [ "$d" -lt "$1" ] && echo "$d" || echo "$1"; }
# step NAME LIMIT COMMAND...: output in NAME.log, one summary line
step() {
  local n=$1 lim; lim=$(left "$2"); shift 2
  if [ "$lim" -lt 10 ]; then say "$n: skipped (deadline): not run, not passed"; return 1; fi
  local t; t=$(date +%s); timeout "$lim" "$@" >"$out/$n.log" 2>&1; local r=$?
  say "$n: rc=$r after $(( $(date +%s) - t )) s; $(grep -E 'test cases:|Status:|Out of bounds|PASS|FAIL|SKIP' "$out/$n.log" | tail -3 | tr '\n' ' ')"
  return $r
}

# The real NCCL (forwarded calls): the torch environment's, as tools/gpu/run.sh finds it.
nccl_dir=$(python3 -c 'import os, nvidia.nccl as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)
real_nccl=''
[ -n "$nccl_dir" ] && [ -e "$nccl_dir/libnccl.so.2" ] && real_nccl=$nccl_dir/libnccl.so.2
say "real NCCL for forwarded calls: ${real_nccl:-none found (forwarded calls fail, saying so)}"
export CUDA_MODULE_LOADING=EAGER  # ranks as threads of one process (gputest) need it (docs/api.md §5)
# (their hardware work queues: test_gpu_nccl_layer asks for 32 itself; nccl-tests' and torchrun's ranks are processes,
# which must not, under MPS: docs/operations.md)
if [ "$mps" = on ]; then
  if nvidia-cuda-mps-control -d >"$out/mps.log" 2>&1; then
    say "MPS: control daemon started (quit at the end)"; trap 'echo quit | nvidia-cuda-mps-control >/dev/null 2>&1' EXIT
  else say "MPS: nvidia-cuda-mps-control -d failed (mps.log): the processes time-slice (slower, still correct)"; fi
fi

layer=$root/$B/nccl_api/librocenante_nccl.so
nt_src=$root/$B/nccl-tests-src nt_bin=$root/$B/nccl-tests nccl_home=$root/$B/nccl-home stand_in=$root/$B/mpi-stand-in

# MPI for nccl-tests: an installed Open MPI when mpicc and its mpirun are on PATH, else the stand-in.
mpi_home='' mpi_kind=stand-in
if [ "$mpi" = auto ] && command -v mpicc >/dev/null 2>&1 && mpirun --version 2>&1 | grep -q "Open MPI"; then
  inc=$(mpicc --showme:incdirs 2>/dev/null | awk '{print $1}')
  [ -z "$inc" ] && inc=$(mpicc -show 2>/dev/null | tr ' ' '\n' | sed -n 's/^-I//p' | head -1)
  if [ -n "$inc" ] && [ -f "$inc/mpi.h" ]; then mpi_home=$(dirname "$inc"); mpi_kind=installed; fi
fi
[ -n "$mpi_home" ] || mpi_home=$stand_in

do_build() {
  if [ ! -f "$B/build.ninja" ]; then
    meson setup "$B" -Dgpu_archs="$arch" -Dcuda=enabled -Dextra_include="$root/.deps/include" >"$out/setup.log" 2>&1 ||
      { say "setup failed:"; tail -20 "$out/setup.log" | tee -a "$S"; return 1; }
  fi
  step build-layer 400 ninja -C "$B" -j"$jobs" nccl_api/librocenante_nccl.so tests/nccl_api/test_gpu_nccl_layer \
    tests/nccl_api/libstub_nccl.so || { grep -E "error|FAILED|not found" "$out/build-layer.log" | head -20 | tee -a "$S"; return 1; }
  [ -f .deps/nccl-tests/src/common.cu ] ||
    { say "nccl-tests: no source in .deps/nccl-tests: run tools/gpu/run.sh deps on the CPU machine and carry .deps"; return 1; }
  rm -rf "$nt_src"; cp -r .deps/nccl-tests "$nt_src"
  # NCCL_HOME for nccl-tests: nccl.h, and lib/libnccl.so = the layer (the binaries then need the layer's folder on
  # LD_LIBRARY_PATH; the layer finds the real NCCL itself)
  mkdir -p "$nccl_home/include" "$nccl_home/lib"
  local h; h=$(ls "$root/.deps/include/nccl.h" /usr/local/cuda/include/nccl.h 2>/dev/null | head -1)
  [ -n "$h" ] || { say "nccl-tests: no nccl.h (.deps/include or CUDA's)"; return 1; }
  cp "$h" "$nccl_home/include/"; ln -sf "$layer" "$nccl_home/lib/libnccl.so"
  if [ "$mpi_kind" = stand-in ]; then
    mkdir -p "$stand_in/include" "$stand_in/lib"; cp tools/gpu/mpi-stand-in/mpi.h "$stand_in/include/"
    step build-mpi-stand-in 120 g++ -std=c++20 -O2 -shared -fPIC -I"$root/include" -Itools/gpu/mpi-stand-in \
      -isystem /usr/local/cuda/include tools/gpu/mpi-stand-in/mpi.cpp -o "$stand_in/lib/libmpi.so" || return 1
  fi
  say "MPI for nccl-tests: $mpi_kind ($mpi_home)"
  local gencode='' a; for a in ${arch//,/ }; do gencode+="-gencode=arch=compute_$a,code=sm_$a "; done
  step build-nccl-tests 400 make -C "$nt_src/src" -j"$jobs" BUILDDIR="$nt_bin" MPI=1 MPI_HOME="$mpi_home" \
    NCCL_HOME="$nccl_home" CUDA_HOME=/usr/local/cuda NVCC_GENCODE="$gencode" \
    "$nt_bin/all_reduce_perf" "$nt_bin/all_gather_perf" ||
    { grep -E "error|Error" "$out/build-nccl-tests.log" | head -20 | tee -a "$S"; return 1; }
  say "nccl-tests $(cat .deps/nccl-tests.commit 2>/dev/null || echo '(commit unknown)'): all_reduce_perf links $(ldd "$nt_bin/all_reduce_perf" | grep -oE 'lib(rocenante_)?nccl[^ ]*' | head -1) (run with the layer preloaded)"
}

do_gputest() {
  [ -x "$B/tests/nccl_api/test_gpu_nccl_layer" ] || { say "gputest: not built (--steps build)"; return 1; }
  step gputest 300 env ROCENANTE_NCCL_LIBRARY="$root/$B/tests/nccl_api/libstub_nccl.so" ROCENANTE_TIMEOUT_MS=10000 \
    "$B/tests/nccl_api/test_gpu_nccl_layer"
}

# launch N NAME COMMAND...: N processes of COMMAND, one per rank, on GPU 0 (mpirun, or a shell loop for the stand-in)
port=29700
launch() {
  local n=$1 name=$2; shift 2
  # LD_PRELOAD: nccl-tests' -lnccl may have found a real libnccl.so before NCCL_HOME's (CUDA's lib64 comes first on
  # its link line); preloaded, the layer's symbols win either way, and that libnccl is the one it forwards to.
  local envs=(NCCL_TESTS_DEVICE=0 ROCENANTE_NCCL_MAX_BYTES=64M ROCENANTE_DEBUG=INFO LD_PRELOAD="$layer"
              LD_LIBRARY_PATH="$root/$B/nccl_api:$mpi_home/lib${nccl_dir:+:$nccl_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  if [ "$mpi_kind" = installed ]; then
    local x=() e; for e in "${envs[@]}"; do x+=(-x "$e"); done
    step "$name" 200 mpirun --allow-run-as-root --oversubscribe -np "$n" "${x[@]}" "$@"
  else
    port=$((port + 1))
    step "$name" 200 bash -c 'n=$1; port=$2; shift 2; for r in $(seq 0 $((n - 1))); do
        ROCENANTE_BOOTSTRAP=127.0.0.1:$port ROCENANTE_RANK=$r ROCENANTE_WORLD_SIZE=$n "$@" & done
      rc=0; for p in $(jobs -p); do wait "$p" || rc=1; done; exit $rc' _ "$n" "$port" env "${envs[@]}" "$@"
  fi
}

do_nccltests() {
  local r=0 n t mode d g
  for t in all_reduce_perf all_gather_perf; do [ -x "$nt_bin/$t" ] || { say "nccl-tests: $t not built (--steps build)"; return 1; }; done
  for n in ${ranks//,/ }; do
    for t in all_reduce_perf all_gather_perf; do
      for d in ${dtypes//,/ }; do
        for mode in eager graph; do
          g=(); [ "$mode" = graph ] && g=(-G 5)
          launch "$n" "nccl-tests-$t-$d-r$n-$mode" "$nt_bin/$t" -b 8 -e 64M -f 2 -c 1 -w 2 -n 5 -d "$d" "${g[@]}" || r=1
          # a wrong result shows as a non-zero #wrong column and "Out of bounds values : N FAILED"
          grep -q "Out of bounds values : 0 OK" "$out/nccl-tests-$t-$d-r$n-$mode.log" ||
            { say "  nccl-tests-$t-$d-r$n-$mode: no 'Out of bounds values : 0 OK' line: not passed"; r=1; }
        done
      done
    done
  done
  return $r
}

do_torch() {
  [ -f "$layer" ] || { say "torch: the layer is not built (--steps build)"; return 1; }
  local n r=0 pass
  for n in ${ranks//,/ }; do
    step "torch-$n" 300 env LD_PRELOAD="$layer" CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}" ROCENANTE_DEBUG=INFO \
      python3 -m torch.distributed.run --standalone --nproc-per-node="$n" tests/nccl_api/torch_check.py || r=1
    pass=$(grep -cE "^rank [0-9]+: PASS" "$out/torch-$n.log")
    say "torch-$n: $pass/$n ranks PASS"; grep -E "^rank [0-9]+: FAIL" "$out/torch-$n.log" | head -4 | tee -a "$S"
    [ "$pass" = "$n" ] || r=1
  done
  return $r
}

rc=0
IFS=, read -ra want <<<"$steps"
for s in "${want[@]}"; do
  case "$s" in
    build) do_build || rc=1 ;;
    gputest) do_gputest || rc=1 ;;
    nccltests) do_nccltests || rc=1 ;;
    torch) do_torch || rc=1 ;;
    *) say "unknown step '$s' (build, gputest, nccltests, torch)"; rc=1 ;;
  esac
done
say "total: $(( $(date +%s) - t0 )) s; receipt folder $out"
exit $rc

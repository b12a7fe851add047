#!/bin/sh
# tests/host/perf_processes.sh — rocenante-perf with one rank per process and no MPI: starts N processes with
# ROCENANTE_BOOTSTRAP=127.0.0.1:PORT ROCENANTE_RANK=r ROCENANTE_WORLD_SIZE=N (bootstrap::tcp), waits for each (bounded
# by `timeout`), and checks every exit status and rank 0's table.
#
#   perf_processes.sh PERF N EXPECT [rocenante-perf arguments...]
#     EXPECT  0    every rank exits 0; rank 0's table has rows, each with #wrong 0, and says OK
#             1    every rank exits 1 and rank 0's table counts wrong elements (with --self-test-corrupt)
#             gpu  every rank exits 77 with rank 0 naming the missing GPU, or (on a GPU machine) every rank exits 0
# Registered in benchmarks/meson.build (suite host).
set -u
perf=$1 n=$2 expect=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT INT TERM

fail() {
  echo "FAIL: $*"
  for r in $(seq 0 $((n - 1))); do
    echo "---- rank $r stdout"; cat "$dir/out$r"
    echo "---- rank $r stderr"; cat "$dir/err$r"
  done
  exit 1
}

# One rank per GPU: processes sharing a GPU would time-slice each other's spinning kernels. With fewer GPUs than
# ranks the GPU case is skipped, not passed.
if [ "$expect" = gpu ] && command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  if [ "$gpus" -gt 0 ] && [ "$gpus" -lt "$n" ]; then
    echo "SKIP: $n ranks need $n GPUs, this machine has $gpus"
    exit 77
  fi
fi

# A port another program holds makes rank 0 fail to listen: try again on another.
attempt=0
while :; do
  attempt=$((attempt + 1))
  port=$((20000 + ($$ * 31 + attempt * 977) % 40000))
  pids=""
  for r in $(seq 0 $((n - 1))); do
    env -u RANK -u WORLD_SIZE -u SLURM_PROCID -u SLURM_NTASKS -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_RANK \
      ROCENANTE_BOOTSTRAP=127.0.0.1:$port ROCENANTE_RANK=$r ROCENANTE_WORLD_SIZE=$n ROCENANTE_BOOTSTRAP_TIMEOUT_MS=20000 \
      timeout 60 "$perf" "$@" >"$dir/out$r" 2>"$dir/err$r" &
    pids="$pids $!"
  done
  r=0
  for p in $pids; do
    wait "$p"
    echo $? >"$dir/rc$r"
    r=$((r + 1))
  done
  if grep -q "cannot listen" "$dir/err0" && [ $attempt -lt 4 ]; then continue; fi
  break
done

statuses=""
for r in $(seq 0 $((n - 1))); do statuses="$statuses $(cat "$dir/rc$r")"; done
echo "exit statuses:$statuses"
first=$(cat "$dir/rc0")
for r in $(seq 1 $((n - 1))); do
  [ "$(cat "$dir/rc$r")" = "$first" ] || fail "ranks exited differently:$statuses"
done
[ "$first" = 124 ] && fail "a rank ran past 60 s"

# Rank 0 prints; the others print nothing on stdout.
for r in $(seq 1 $((n - 1))); do
  [ -s "$dir/out$r" ] && fail "rank $r printed to stdout (only rank 0 prints the table)"
done

rows() { grep -v '^#' "$dir/out0" | grep -v '^SKIP' | grep -c .; }
case $expect in
  0)
    [ "$first" = 0 ] || fail "expected exit 0 on every rank"
    grep -q "$n ranks, .*launched by tcp (ROCENANTE_RANK)" "$dir/out0" || fail "rank 0's header does not name the tcp launch and $n ranks"
    [ "$(rows)" -gt 0 ] || fail "rank 0's table has no rows"
    bad=$(grep -v '^#' "$dir/out0" | awk '$NF != "0"' | grep -c .)
    [ "$bad" = 0 ] || fail "$bad rows of rank 0's table do not end in #wrong 0"
    grep -q "^# Out of bounds values : 0 OK" "$dir/out0" || fail "rank 0's trailer is not '0 OK'"
    echo "ok: $n processes over bootstrap::tcp, $(rows) rows, #wrong 0 on each"
    ;;
  1)
    [ "$first" = 1 ] || fail "expected exit 1 on every rank"
    grep -Eq "^# Out of bounds values : [1-9][0-9]* FAILED" "$dir/out0" || fail "rank 0's trailer does not count wrong elements"
    echo "ok: the corrupted element was counted and every rank exited 1"
    ;;
  gpu)
    if [ "$first" = 77 ]; then
      grep -q "^SKIP: .*needs a GPU on every rank: rank 0: " "$dir/out0" || fail "exit 77 without rank 0 naming the missing GPU"
      echo "ok: every rank refused together (no GPU): $(cat "$dir/out0")"
    else
      [ "$first" = 0 ] || fail "expected 77 (no GPU) or 0 (GPU) on every rank"
      echo "ok: ran on a GPU machine"
    fi
    ;;
  *) fail "unknown EXPECT '$expect'" ;;
esac

# tests/softroce/vm/kill.sh — inside the VM: the last rank raises SIGKILL at collective 200; every survivor must
# report it, naming that rank, within timeout + 2 s, and return from teardown. Protocol timeout 3 s; queue pairs
# at timeout 14 (67 ms) x retry 6. mpirun runs with recovery enabled so that it does not kill the survivors itself.
. "$(dirname "$0")/common.sh"
n=$SOFTROCE_RANKS victim=$((SOFTROCE_RANKS - 1))
file=$SOFTROCE_OUT/kill_time
rm -f "$file"
out=$(SOFTROCE_MPIRUN_ARGS=--enable-recovery mpi "$n" kill "$victim" 200 3000 "$file" 2>&1)
echo "$out"
passes=$(grep -c '^PASS rank' <<<"$out")
fails=$(grep -c '^FAIL' <<<"$out")
echo "survivors passing: $passes of $((n - 1)); failed checks: $fails"
[ "$passes" = $((n - 1)) ] && [ "$fails" = 0 ]

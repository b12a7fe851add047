# tests/softroce/vm/kill.sh — inside the VM: (1) the last rank raises SIGKILL at collective 200; every survivor
# must report it, naming that rank, within timeout + 2 s (protocol timeout 3 s), and return from teardown; mpirun
# runs with recovery enabled so that it does not kill the survivors itself. (2) the last rank's link is cut (see
# below). Queue pairs at timeout 14 (67 ms) x retry 6.
. "$(dirname "$0")/common.sh"
n=$SOFTROCE_RANKS victim=$((SOFTROCE_RANKS - 1))
file=$SOFTROCE_OUT/kill_time
rm -f "$file"
out=$(SOFTROCE_MPIRUN_ARGS=--enable-recovery mpi "$n" kill "$victim" 200 3000 "$file" 2>&1)
echo "$out"
passes=$(grep -c '^PASS rank' <<<"$out")
fails=$(grep -c '^FAIL' <<<"$out")
echo "survivors passing: $passes of $((n - 1)); failed checks: $fails"
rc=0
[ "$passes" = $((n - 1)) ] && [ "$fails" = 0 ] || rc=1
# 2. The victim's link cut (100% loss) mid-run, protocol timeout 30 s: the writers' queue pairs run out of retries
#    (IBV_WC_RETRY_EXC_ERR) and that completion error must fail every rank within 5 s, the others naming the victim.
mpi "$n" cut "$victim" 200 "tc qdisc add dev r$victim root netem loss 100%" || rc=1
tc qdisc del dev "r$victim" root 2>/dev/null
exit $rc

# tests/softroce/vm/recover.sh — inside the VM: recovery after a lost rank over RDMA, ranks as processes without MPI
# (bootstrap::tcp on 127.0.0.1). The host suite's case "rank 2 of 4 killed with SIGKILL, restarted" runs here with
# ibverbs forced and rank r on rxe<r>: rank 2 raises SIGKILL mid-run, the test starts a replacement rank 2 at once,
# every survivor names rank 2, tears down, and with the replacement rebuilds a communicator (a new bootstrap on the
# next port) within 10 s of seeing the failure; then all four run 1,000 exact collectives, byte-identical.
# Four busy ranks share two emulated vCPUs, so the bounds are the VM's: protocol timeout 20 s, 450 s for the whole
# world (1,000 calls took about 310 s on a loaded host), teardown within 5 s (2.2 s seen on a loaded host).
# On failure: the rxe counters and the kernel's messages (retransmissions, retry exhaustion, drops).
: "${SOFTROCE_MULTIPROCESS:?}"
t0=$SECONDS
ROCENANTE_TRANSPORT=ibverbs TEST_IB_HCA_PER_RANK=1 ROCENANTE_TEST_TIMEOUT_MS=20000 ROCENANTE_TEST_LIMIT_S=450 \
  ROCENANTE_TEST_CLOSE_S=5 timeout --kill-after=5 500 "$SOFTROCE_MULTIPROCESS" -tc='rank 2 of 4 killed with SIGKILL*' -s
rc=$?
echo "(recovery case: exit $rc after $((SECONDS - t0)) s)"
if [ "$rc" != 0 ]; then
  for d in $SOFTROCE_RXE; do
    echo "$d counters: $(cd /sys/class/infiniband/$d/ports/1/hw_counters && grep -H . * | grep -v ':0$' | tr '\n' ' ')"
  done
  dmesg | grep -i -E 'rxe|rdma|warn|error|drop' | grep -v -E 'set active|added r|loaded' | sed 's/^/kernel: /' | tail -20
fi
exit $rc

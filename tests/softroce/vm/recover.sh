# tests/softroce/vm/recover.sh — inside the VM: recovery after a lost rank over RDMA, ranks as processes without MPI
# (bootstrap::tcp on 127.0.0.1). The host suite's case "rank 2 of 4 killed with SIGKILL, restarted" runs here with
# ibverbs forced and rank r on rxe<r>: rank 2 raises SIGKILL mid-run, the test starts a replacement rank 2 at once,
# every survivor names rank 2, tears down, and with the replacement rebuilds a communicator (a new bootstrap on the
# next port) within 10 s of seeing the failure; then all four run 1,000 exact collectives, byte-identical.
# Protocol timeout 20 s: four busy ranks share two emulated vCPUs (with 5 s a rank once stalled past the bound on
# a loaded host after 697 of the 1,000 calls; the rebuild itself took 1.4-1.7 s).
: "${SOFTROCE_MULTIPROCESS:?}"
t0=$SECONDS
ROCENANTE_TRANSPORT=ibverbs TEST_IB_HCA_PER_RANK=1 ROCENANTE_TEST_TIMEOUT_MS=20000 \
  timeout --kill-after=5 500 "$SOFTROCE_MULTIPROCESS" -tc='rank 2 of 4 killed with SIGKILL*' -s
rc=$?
echo "(recovery case: exit $rc after $((SECONDS - t0)) s)"
exit $rc

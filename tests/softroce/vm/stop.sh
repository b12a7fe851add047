# tests/softroce/vm/stop.sh — inside the VM: a proxy paused across two doorbells, and a peer process stopped
# with SIGSTOP and resumed with SIGCONT during a stream of collectives: every collective completes, exact.
. "$(dirname "$0")/common.sh"
mpi "$SOFTROCE_RANKS" stop

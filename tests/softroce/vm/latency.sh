# tests/softroce/vm/latency.sh — inside the VM (2 ranks, 1 device each): perftest's ib_write_lat between rxe0 and
# rxe1 beside the library's one_shot fp32 all-reduce latency over the same two devices, same VM, same moment.
# ib_write_lat reports half a ping-pong round trip (one write's latency); a 2-rank one_shot all-reduce is one flag
# hop each way, in parallel, plus the proxy and the reduction: the ratio to the wire floor is the point, not the
# absolute figure (Soft-RoCE under TCG emulation is slow). Prints PERF lines and JSON lines.
. "$(dirname "$0")/common.sh"
read -r D0 D1 _ <<<"$SOFTROCE_RXE"
rc=0
for s in 8 1024 16384; do
  timeout 120 ib_write_lat -d "$D0" -x 1 -s "$s" -n 1000 -F >/tmp/lat_srv.log 2>&1 &
  sp=$!
  sleep 1
  out=$(timeout 120 ib_write_lat -d "$D1" -x 1 -s "$s" -n 1000 -F 127.0.0.1 2>&1) || rc=1
  wait $sp || rc=1
  line=$(awk '$1 ~ /^[0-9]+$/ && NF >= 9 {print; exit}' <<<"$out")
  echo "PERF ib_write_lat $D1 -> $D0: $line"
  read -r b it tmin tmax ttyp tavg tstd p99 p999 <<<"$line"
  echo "JSON {\"tool\":\"ib_write_lat\",\"bytes\":$b,\"iterations\":$it,\"t_min_us\":$tmin,\"t_typical_us\":$ttyp,\"t_avg_us\":$tavg,\"p99_us\":$p99}"
done
for idle in yield spin; do
  echo "library, ROCENANTE_IB_IDLE=$idle:"
  ROCENANTE_IB_IDLE=$idle mpi 2 latency 1000 8 1024 16384 || rc=1
done
exit $rc

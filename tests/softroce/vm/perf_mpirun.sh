# tests/softroce/vm/perf_mpirun.sh — inside the VM (4 ranks x 1 device): rocenante-perf with one rank per process
# under mpirun (rank r on rxe<r> through rank-env.sh), a short sweep at 2 and at 4 ranks:
#   -b 8 -e 64K -f 4 -n 5 -w 2, every dtype, every algorithm (--algo all: one_shot, two_shot, ring), --transport auto (ROCENANTE_TRANSPORT unset)
# Checks, per rank count: exit 0; the header says transport ibverbs and prints the selection line; the table has a
# row for every size x dtype x algorithm (sizes computed here from -b/-e/-f) with #wrong 0; the trailer says
# "Out of bounds values : 0 OK"; the JSON receipt parses, says launch mpirun, transport ibverbs, has every row
# with every rank's samples. Then the checker itself: one flipped bit on rank 1 (another process than rank 0,
# which prints) must show in #wrong and make every rank exit 1.
. "$(dirname "$0")/common.sh"
: "${SOFTROCE_PERF:?}"
unset ROCENANTE_TRANSPORT ROCENANTE_ALGO
perf() { # perf NP ARGS...: the documented command
  local np=$1
  shift
  timeout --kill-after=5 600 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
    "$SOFTROCE_SRC/rank-env.sh" "$SOFTROCE_PERF" "$@"
}
algos='one_shot two_shot ring'
sizes=$(awk 'BEGIN { for (s = 8; s <= 65536; s = int(s * 4)) print s }')

for np in 2 4; do
  json=$SOFTROCE_OUT/perf-mpirun-np$np.json
  rm -f "$json"
  t0=$SECONDS
  # 5 timed iterations a row: the checks are the table's shape, #wrong and the receipt, not the VM's timings
  out=$(perf "$np" -b 8 -e 64K -f 4 -n 5 -w 2 -d all --algo all -J "$json" 2>&1); rc=$?
  echo "$out" | sed 's/^/    /'
  echo "(rocenante-perf, $np ranks: exit $rc after $((SECONDS - t0)) s)"
  [ "$rc" = 0 ] && ok "$np ranks: exit 0" || ko "$np ranks: exit $rc, want 0"
  has "$out" "# rocenante-perf " && has "$out" "all_reduce, $np ranks, transport ibverbs (CPU host executor; one rank per process" &&
    ok "$np ranks: header names transport ibverbs, one rank per process" || ko "$np ranks: header"
  has "$out" "# selection (--transport auto): transport ibverbs (ROCENANTE_TRANSPORT=auto" && ok "$np ranks: selection line" ||
    ko "$np ranks: no selection line choosing ibverbs"
  missing=0 bad=0
  for t in float half bfloat16; do
    for a in $algos; do
      for s in $sizes; do
        line=$(awk -v s="$s" -v t="$t" -v a="$a" '$1 == s && $3 == t && $4 == "sum" && $5 == a' <<<"$out")
        if [ -z "$line" ]; then missing=$((missing + 1)); echo "    missing row: $s B $t $a"; continue; fi
        # size count type redop algorithm time p99 algbw busbw #wrong
        awk '{ exit !(NF == 10 && $10 == "0" && $6 > 0 && $7 >= $6) }' <<<"$line" ||
          { bad=$((bad + 1)); echo "    bad row: $line"; }
      done
    done
  done
  [ "$missing" = 0 ] && ok "$np ranks: a row for every size x dtype x algorithm" || ko "$np ranks: $missing row(s) missing"
  [ "$bad" = 0 ] && ok "$np ranks: every row #wrong 0, time > 0, p99 >= time" || ko "$np ranks: $bad bad row(s)"
  has "$out" "# Out of bounds values : 0 OK" && ok "$np ranks: validation OK" || ko "$np ranks: no '0 OK' trailer"
  if python3 - "$json" "$np" <<'PY'; then ok "$np ranks: receipt complete"; else ko "$np ranks: receipt incomplete"; fi
import json, sys
r = json.load(open(sys.argv[1])); n = int(sys.argv[2])
assert r["tool"] == "rocenante-perf" and r["launch"] == "mpirun" and r["transport"] == "ibverbs", "header fields"
assert r["ranks"] == n and len(r["rank_hosts"]) == n and len(r["rank_devices"]) == n, "per-rank facts"
assert r["passed"] is True and r["git_commit"] != "unknown", "passed / commit"
assert len(r["rows"]) == 7 * 3 * 3, "rows: %d" % len(r["rows"])  # sizes x dtypes x algorithms
for row in r["rows"]:
    assert row["status"] == "ok" and row["wrong"] == 0, row
    assert len(row["rank_samples_us"]) == n and all(len(s) == 5 for s in row["rank_samples_us"]), "samples"
    assert row["samples_us"] == [max(col) for col in zip(*row["rank_samples_us"])], "slowest rank per sample"
PY
done

# The checker across processes: rank 1 flips one bit of its output before the check.
out=$(perf 2 -b 1K -e 4K -n 2 -w 0 -d bfloat16 --algo ring --self-test-corrupt 1 2>&1); rc=$?
echo "$out" | sed 's/^/    /'
[ "$rc" = 1 ] && ok "corrupted rank 1: exit 1" || ko "corrupted rank 1: exit $rc, want 1"
awk '$3 == "bfloat16" && $5 == "ring" && $10 != "0" { found = 1 } END { exit !found }' <<<"$out" &&
  ok "corrupted rank 1: a nonzero #wrong in the table" || ko "corrupted rank 1: no row counted it"
has "$out" "# Out of bounds values : " && has "$out" " FAILED" && ok "corrupted rank 1: trailer FAILED" ||
  ko "corrupted rank 1: trailer not FAILED"
summary

#!/usr/bin/env python3
"""tools/gpu/peer-table.py JSON [JSON...] — the library's all-reduce rows beside the peer rows of the same
rocenante-bench-gpu run(s) (Google Benchmark JSON): one line per (ranks, bytes), bf16, graph replay first, then
eager launches; us per collective.

Columns: the library's algorithms found (one_shot, two_shot, ring, ...), the floor (graph only: the fastest plain
floor/one_shot_minimal row at that size and rank count, where the run has one), each peer row (peer_vllm_one_shot,
peer_vllm_two_shot, peer_trtllm_lamport_one_shot: benchmarks/gpu/peers.cuh), then the fastest library row, the
fastest peer row, their ratio peer/library (below 1: a peer is faster) and the fastest peer row over the library's
one_shot (peer/one_shot). Cell marks: `a` the peer's published dispatch picks that kernel at this size and rank
count (counter auto), `*` its grid was capped so that every rank's blocks fit on the one GPU (counter capped), `ERR`
the row failed (its error is listed under the table). Rows repeated with --benchmark_repetitions count by their
median. Exit 1 if a peer row failed, 2 on bad usage or no rows."""
import json
import re
import statistics
import sys

ROW = re.compile(r"^all_reduce/(?P<alg>[^/]+)/loopback/bf16/bytes:(?P<bytes>\d+)/ranks:(?P<ranks>\d+)(?P<graph>/graph:1)?(/|$)")
FLOOR = re.compile(r"^floor/one_shot_minimal/bf16/bytes:(?P<bytes>\d+)/ranks:(?P<ranks>\d+)/ctas:\d+/threads:\d+/pdl:\d/graph:1(/|$)")
LIBRARY_ORDER = ["one_shot", "one_shot_lamport", "one_shot_inplace", "two_shot", "two_shot_inplace", "ring"]
PEER_ORDER = ["peer_vllm_one_shot", "peer_vllm_two_shot", "peer_trtllm_lamport_one_shot"]
TO_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def load(paths):
    """{base name: [benchmark rows]} over every file (a truncated file is reported and skipped)."""
    rows = {}
    for path in paths:
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            print(f"{path}: not read ({e})", file=sys.stderr)
            continue
        for b in data.get("benchmarks", []):
            rows.setdefault(b.get("run_name", b["name"]), []).append(b)
    return rows


def summary(bs):
    """(us, row): the median aggregate where there is one, else the median of the iteration rows; us is None for a
    failed row."""
    failed = [b for b in bs if b.get("error_occurred")]
    if failed:
        return None, failed[0]
    med = [b for b in bs if b.get("run_type") == "aggregate" and b.get("aggregate_name") == "median"]
    pick = med or [b for b in bs if b.get("run_type", "iteration") == "iteration"]
    if not pick:
        return None, bs[0]
    us = statistics.median(b["real_time"] * TO_US.get(b.get("time_unit", "us"), 1.0) for b in pick)
    return us, pick[0]


def cells(rows):
    """{(graph, ranks, bytes): {alg: (us, row)}}, with the floor under the key 'floor'."""
    out = {}
    for name, bs in rows.items():
        m = ROW.match(name)
        if m:
            key = (bool(m["graph"]), int(m["ranks"]), int(m["bytes"]))
            out.setdefault(key, {})[m["alg"]] = summary(bs)
            continue
        m = FLOOR.match(name)
        if m and "bloat:" not in name and "plus:" not in name:
            key = (True, int(m["ranks"]), int(m["bytes"]))
            us, row = summary(bs)
            have = out.setdefault(key, {}).get("floor")
            if us is not None and (have is None or have[0] is None or us < have[0]):
                out[key]["floor"] = (us, row)
    return out


def short(alg):
    return alg[len("peer_"):] if alg.startswith("peer_") else alg


def size(b):
    return f"{b // 1048576} MiB" if b % 1048576 == 0 else f"{b // 1024} KiB" if b % 1024 == 0 else f"{b} B"


def cell(v, peer):
    if v is None:
        return "-"
    us, row = v
    if us is None:
        return "ERR"
    marks = ""
    if peer:
        c = row.get("auto")
        marks += "a" if c else ""
        marks += "*" if row.get("capped") else ""
    return f"{us:.2f}{(' ' + marks) if marks else ''}"


def table(grid, graph, title):
    keys = sorted(k for k in grid if k[0] == graph and any(a.startswith("peer_") for a in grid[k]))
    if not keys:
        return [], 0, 0
    algs = {a for k in keys for a in grid[k]}
    lib = [a for a in LIBRARY_ORDER if a in algs] + sorted(a for a in algs - set(LIBRARY_ORDER) if not a.startswith("peer_") and a != "floor")
    peers = [a for a in PEER_ORDER if a in algs] + sorted(a for a in algs - set(PEER_ORDER) if a.startswith("peer_"))
    cols = lib + (["floor"] if graph and "floor" in algs else []) + peers
    head = ["ranks", "bytes"] + [short(c) for c in cols] + ["library best", "peer best", "peer/lib"]
    if "one_shot" in lib:
        head.append("peer/one_shot")
    lines, faster, compared = [], 0, 0
    body = []
    for k in keys:
        c = grid[k]
        row = [str(k[1]), size(k[2])] + [cell(c.get(a), a.startswith("peer_")) for a in cols]
        best_lib = min(((c[a][0], a) for a in lib if a in c and c[a][0] is not None), default=None)
        best_peer = min(((c[a][0], a) for a in peers if a in c and c[a][0] is not None), default=None)
        row += [f"{best_lib[1]} {best_lib[0]:.2f}" if best_lib else "-",
                f"{short(best_peer[1])} {best_peer[0]:.2f}" if best_peer else "-"]
        if best_lib and best_peer:
            ratio = best_peer[0] / best_lib[0]
            compared += 1
            faster += ratio < 1
            row.append(f"{ratio:.3f}{' PEER FASTER' if ratio < 1 else ''}")
        else:
            row.append("-")
        if "one_shot" in lib:
            one = c.get("one_shot")
            row.append(f"{best_peer[0] / one[0]:.3f}" if best_peer and one and one[0] is not None else "-")
        body.append(row)
    widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
    lines.append(title)
    lines.append("  ".join(h.rjust(w) for h, w in zip(head, widths)))
    for r in body:
        lines.append("  ".join(v.rjust(w) for v, w in zip(r, widths)))
    lines.append(f"  a peer is faster than the library's best row in {faster} of {compared} cells")
    return lines, faster, compared


def main(argv):
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    paths = argv
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    rows = load(paths)
    grid = cells(rows)
    out = []
    for graph, title in ((True, "all_reduce bf16, CUDA graph replay, us per collective"),
                         (False, "all_reduce bf16, eager launches, us per collective")):
        lines, _, _ = table(grid, graph, title)
        if lines:
            out += lines + [""]
    if not out:
        print("peer-table: no all_reduce peer rows (all_reduce/peer_*/loopback/bf16/...) in " + " ".join(paths), file=sys.stderr)
        return 2
    out.append("marks: a = the peer's published dispatch picks this kernel here; * = grid capped so that every rank's "
               "blocks fit on one GPU")
    errors = sorted((name, bs[0].get("error_message", "")) for name, bs in rows.items()
                    if ROW.match(name) and any(b.get("error_occurred") for b in bs))
    for name, msg in errors:
        out.append(f"ERR {re.sub(r'/(min_time|repeats):[^/]*|/manual_time', '', name)}: {msg}")
    print("\n".join(out))
    return 1 if any(ROW.match(n)["alg"].startswith("peer_") for n, _ in errors) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

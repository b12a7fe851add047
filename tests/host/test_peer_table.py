#!/usr/bin/env python3
"""tests/host/test_peer_table.py — tools/gpu/peer-table.py on Google Benchmark JSON written here (made-up times, no
GPU): the columns it picks, the ratio and its verdict, medians of repeated rows, the floor, the marks, failed rows
and the exit status. Prints PASS or the first failed check (exit 1)."""
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
TOOL = ROOT / "tools" / "gpu" / "peer-table.py"
SUFFIX = "/min_time:0.050/manual_time"


def row(name, us, **counters):
    b = {"name": name + SUFFIX, "run_name": name + SUFFIX, "run_type": "iteration", "real_time": us, "time_unit": "us"}
    b.update(counters)
    return b


def agg(name, us, which):
    return {"name": name + SUFFIX + "_" + which, "run_name": name + SUFFIX, "run_type": "aggregate",
            "aggregate_name": which, "real_time": us, "time_unit": "us"}


def failed(name, message):
    return {"name": name + SUFFIX, "run_name": name + SUFFIX, "run_type": "iteration", "error_occurred": True,
            "error_message": message, "real_time": 0, "time_unit": "us"}


def ar(alg, bytes_, ranks, graph=True):
    return f"all_reduce/{alg}/loopback/bf16/bytes:{bytes_}/ranks:{ranks}" + ("/graph:1" if graph else "")


def run(*files):
    p = subprocess.run([sys.executable, str(TOOL), *files], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def line_of(out, ranks, size):
    """The table line of (ranks, size) in the first table of `out`."""
    for ln in out.splitlines():
        f = ln.split()
        if len(f) > 3 and f[0] == str(ranks) and f"{f[1]} {f[2]}" == size:
            return ln
    raise AssertionError(f"no line for {ranks} ranks, {size} in:\n{out}")


def main():
    bench = [
        # 4 ranks, 48 KiB: the library wins; the floor's fastest plain row counts, not a bloat row
        row(ar("one_shot", 49152, 4), 3.00),
        row(ar("ring", 49152, 4), 12.00),
        row("floor/one_shot_minimal/bf16/bytes:49152/ranks:4/ctas:16/threads:256/pdl:1/graph:1", 2.60),
        row("floor/one_shot_minimal/bf16/bytes:49152/ranks:4/ctas:16/threads:192/pdl:1/graph:1", 2.40),
        row("floor/one_shot_minimal/bf16/bytes:49152/ranks:4/ctas:16/threads:256/pdl:1/bloat:16/graph:1", 1.00),
        row(ar("peer_vllm_one_shot", 49152, 4), 4.50, auto=1.0, capped=0.0),
        row(ar("peer_vllm_two_shot", 49152, 4), 6.00, auto=0.0, capped=0.0),
        row(ar("peer_trtllm_lamport_one_shot", 49152, 4), 3.60, auto=1.0, capped=0.0),
        # 8 ranks, 1 MiB: a peer wins; two_shot is a library column when present; the peer's time is the median of
        # its repetitions' aggregates, not its mean
        row(ar("one_shot", 1048576, 8), 40.0),
        row(ar("two_shot", 1048576, 8), 30.0),
        row(ar("ring", 1048576, 8), 35.0),
        agg(ar("peer_vllm_two_shot", 1048576, 8), 24.0, "median"),
        agg(ar("peer_vllm_two_shot", 1048576, 8), 99.0, "mean"),
        row(ar("peer_vllm_one_shot", 1048576, 8), 50.0, auto=0.0, capped=1.0),
        failed(ar("peer_trtllm_lamport_one_shot", 1048576, 8), "peer row: wrong sum before timing"),
        # eager rows go to their own table
        row(ar("one_shot", 8192, 2, graph=False), 17.0),
        row(ar("peer_vllm_one_shot", 8192, 2, graph=False), 8.5, auto=1.0, capped=0.0, staged=1.0),
        # a library row with no peer beside it is not a line; proxy rows are not loopback rows
        row(ar("one_shot", 8192, 4), 2.8),
        row("all_reduce/one_shot/loopback_proxy/bf16/bytes:8192/ranks:4/graph:1", 19.8),
    ]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.json")
        with open(path, "w") as f:
            json.dump({"context": {}, "benchmarks": bench}, f)
        rc, out, err = run(path)
        graph_part, eager_part = out.split("eager launches")
        l48 = line_of(graph_part, 4, "48 KiB")
        assert "2.40" in l48 and "1.00" not in l48, f"floor: the fastest plain row, no bloat row: {l48}"
        assert "one_shot 3.00" in l48 and "trtllm_lamport_one_shot 3.60" in l48, l48
        assert "1.200" in l48 and "PEER FASTER" not in l48, f"ratio 3.60 / 3.00: {l48}"
        assert "4.50 a" in l48 and "6.00" in l48, f"auto mark on vLLM's one-shot only: {l48}"
        l1m = line_of(graph_part, 8, "1 MiB")
        assert "two_shot 30.00" in l1m and "vllm_two_shot 24.00" in l1m, l1m
        assert "0.800 PEER FASTER" in l1m and l1m.rstrip().endswith("0.600"), f"ratios 24 / 30 and 24 / 40: {l1m}"
        assert "50.00 *" in l1m and "ERR" in l1m, f"capped mark and the failed row: {l1m}"
        assert "99.00" not in out, "a mean aggregate must not be used"
        assert "in 1 of 2 cells" in graph_part, graph_part
        assert not any(ln.split()[:3] == ["4", "8", "KiB"] for ln in graph_part.splitlines()) and "19.8" not in out, \
            "a cell without peers, and proxy rows, stay out"
        le = line_of(eager_part, 2, "8 KiB")
        assert "17.00" in le and "8.50 a" in le and "0.500 PEER FASTER" in le, le
        assert "ERR all_reduce/peer_trtllm_lamport_one_shot/loopback/bf16/bytes:1048576/ranks:8/graph:1" in out and \
            "wrong sum before timing" in out, out
        assert rc == 1, f"a failed peer row exits 1, got {rc}"

        # The same without the failed row: exit 0. No peer rows at all: exit 2 with a message.
        with open(path, "w") as f:
            json.dump({"benchmarks": [b for b in bench if not b.get("error_occurred")]}, f)
        rc, out, _ = run(path)
        assert rc == 0 and "ERR" not in out, (rc, out)
        with open(path, "w") as f:
            json.dump({"benchmarks": [row(ar("one_shot", 8192, 4), 2.8)]}, f)
        rc, out, err = run(path)
        assert rc == 2 and "no all_reduce peer rows" in err, (rc, out, err)
        # Several files merge (the receipt's decode and large runs); a truncated file is reported, not fatal.
        a, b = os.path.join(d, "a.json"), os.path.join(d, "b.json")
        with open(a, "w") as f:
            json.dump({"benchmarks": [row(ar("one_shot", 49152, 4), 3.0)]}, f)
        with open(b, "w") as f:
            f.write('{"benchmarks": [' + json.dumps(row(ar("peer_vllm_one_shot", 49152, 4), 6.0, auto=1.0)) + "]}")
        trunc = os.path.join(d, "cut.json")
        with open(trunc, "w") as f:
            f.write('{"benchmarks": [')
        rc, out, err = run(a, b, trunc)
        assert rc == 0 and "2.000" in line_of(out, 4, "48 KiB") and "cut.json: not read" in err, (rc, out, err)
    print("PASS")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print(f"FAIL: {e}")
        sys.exit(1)

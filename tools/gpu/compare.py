#!/usr/bin/env python3
"""tools/gpu/compare.py JSON... — one table of Google Benchmark rows from several runs side by side (the files of one
device call, e.g. decode-default.json decode-ehf-3072.json ...): a row per benchmark name (min_time and manual_time
suffixes dropped), a column per file (its name without .json), real time in the rows' unit; every column after the
first also gives, in parentheses, its ratio to the first file's value. A missing or truncated file leaves its
column empty (said on stderr)."""
import json
import os
import sys


def rows(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:  # a run cut by its deadline leaves a truncated file
        print(f"{path}: not read ({e}); its column stays empty", file=sys.stderr)
        return {}
    out = {}
    for b in data.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration" or "error_occurred" in b and b["error_occurred"]:
            continue
        name = b["name"].replace("/min_time:0.050", "").replace("/min_time:0.100", "").replace("/manual_time", "")
        out[name] = (b["real_time"], b.get("time_unit", "us"))
    return out


def main(paths):
    if not paths:
        print(__doc__)
        return 2
    cols = [os.path.basename(p)[:-5] if p.endswith(".json") else os.path.basename(p) for p in paths]
    tables = [rows(p) for p in paths]
    names = []
    for t in tables:
        for n in t:
            if n not in names:
                names.append(n)
    width = max(len(n) for n in names) if names else 10
    cw = max([18] + [len(c) for c in cols])
    print(f"{'benchmark':<{width}}  " + "  ".join(f"{c:>{cw}}" for c in cols))
    for n in names:
        base = tables[0].get(n, (None, ""))[0]
        cells = []
        for i, t in enumerate(tables):
            v = t.get(n)
            if v is None:
                cells.append(f"{'-':>{cw}}")
            elif i == 0 or base is None:
                cells.append(f"{f'{v[0]:.3f} {v[1]}':>{cw}}")
            else:
                cells.append(f"{f'{v[0]:.3f} ({v[0] / base:5.3f})':>{cw}}")
        print(f"{n:<{width}}  " + "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""tools/gpu/merge-receipt.py OUT NOTE LABEL=FILE.json [LABEL=FILE.json ...]

Merges Google Benchmark JSON files of rocenante-bench-gpu into one receipt (docs/results/h200-loopback.json): the
context of the first file, with `rocenante_note` = NOTE, and every benchmark row of every file in order, each row
tagged with "run": LABEL (which run it came from). Rows are copied as the benchmark wrote them; nothing is computed.
Example:
  tools/gpu/merge-receipt.py docs/results/h200-loopback.json "$(cat note.txt)" \
      "decode (s13-fb4a6cc)=receipt-decode.json" "large (s13-fb4a6cc)=large4.json"
"""
import json
import sys


def main(argv):
    if len(argv) < 4 or any("=" not in a for a in argv[3:]):
        print(__doc__, file=sys.stderr)
        return 2
    out, note = argv[1], argv[2]
    merged = None
    for arg in argv[3:]:
        label, path = arg.rsplit("=", 1)
        with open(path) as f:
            d = json.load(f)
        if merged is None:
            merged = {"context": dict(d["context"]), "benchmarks": []}
            merged["context"]["rocenante_note"] = note
        for b in d["benchmarks"]:
            row = dict(b)
            row["run"] = label
            merged["benchmarks"].append(row)
    with open(out, "w") as f:
        json.dump(merged, f, indent=2)
        f.write("\n")
    print(f"{out}: {len(merged['benchmarks'])} rows from {len(argv) - 3} file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

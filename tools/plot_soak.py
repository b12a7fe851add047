#!/usr/bin/env python3
"""plot_soak.py - latency percentiles per minute per size bucket from a rocenante-soak receipt (--json FILE).

    python3 tools/plot_soak.py docs/results/<run>/soak.json -o docs/results/<run>/soak.png [--label TEXT]

One panel per size bucket: p50, p99 and p99.9 of rank 0's call latency for each minute of the run (log scale),
with the number of calls of that minute under it; the launcher's pauses (SIGSTOP/SIGCONT of a rank) are ticks on
the time axis and fail-stops are red lines, so drift and the cause of a tail can be read off the same figure. The
title names the receipt's transport, ranks, commit, counts of collectives, wrong results and fail-stops; --label
adds the conditions a receipt cannot know (e.g. an emulated VM and its netem loss). Needs matplotlib.
"""
import argparse
import collections
import json
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # pragma: no cover
    sys.exit("plot_soak.py needs matplotlib (apt-get install python3-matplotlib, or pip install matplotlib)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("receipt")
    ap.add_argument("-o", "--output", required=True, help="PNG file to write")
    ap.add_argument("--label", default="", help="an extra line for the title (conditions)")
    args = ap.parse_args()
    with open(args.receipt) as f:
        r = json.load(f)

    buckets = [b["name"] for b in r["config"]["buckets"]]
    cells = collections.defaultdict(dict)  # bucket -> minute -> cell
    for c in r.get("per_minute", []):
        cells[c["bucket"]][c["minute"]] = c
    shown = [b for b in buckets if cells[b]]
    if not shown:
        sys.exit(f"{args.receipt}: no per-minute latency cells (did rank 0 write the receipt?)")
    fails = []
    for pr in r.get("per_rank", []):
        for fs in pr.get("fail_stop_reports", []):
            fails.append((fs["t_s"] / 60.0, pr["rank"], fs["status"]))
    pauses = [(p["t_s"] / 60.0, p["ms"]) for p in r.get("pauses", [])]

    fig, axes = plt.subplots(len(shown), 1, figsize=(9, 2.2 * len(shown) + 1.2), sharex=True, squeeze=False)
    for ax, b in zip(axes[:, 0], shown):
        mins = sorted(cells[b])
        run_min = r.get("run_seconds", 1e9) / 60.0
        x = [m + min(1.0, run_min - m) / 2 for m in mins]  # a cell at the middle of its span (the last may be short)
        for key, style, lab in (("p50_us", "o-", "p50"), ("p99_us", "s--", "p99"), ("p999_us", "^:", "p99.9")):
            ax.plot(x, [cells[b][m][key] / 1000.0 for m in mins], style, ms=3, lw=1, label=lab)
        ax.set_yscale("log")
        ax.set_ylabel(f"{b}\nms")
        ax.grid(True, which="both", alpha=0.3)
        n = [cells[b][m]["n"] for m in mins]
        ax.text(0.995, 0.04, f"calls/min {min(n)}..{max(n)}", transform=ax.transAxes, ha="right", fontsize=7)
        for t, _ in pauses:
            ax.axvline(t, ymin=0, ymax=0.06, color="grey", lw=0.8)
        for t, _, _ in fails:
            ax.axvline(t, color="red", lw=1)
    axes[0, 0].legend(loc="upper left", fontsize=7, ncol=3)
    axes[-1, 0].set_xlabel("minute of the run (grey ticks: a rank paused by SIGSTOP/SIGCONT; red: fail-stop)")
    title = (f"rocenante-soak: {r.get('ranks')} ranks, {r.get('transport')}, commit {r.get('git_commit')}\n"
             f"{r.get('collectives')} collectives, {r.get('wrong_results')} wrong, {r.get('fail_stops')} fail-stops, "
             f"{len(pauses)} pauses; latency of rank 0 per minute")
    if args.label:
        title += "\n" + args.label
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(args.output, dpi=80)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

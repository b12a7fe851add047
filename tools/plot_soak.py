#!/usr/bin/env python3
"""plot_soak.py - latency percentiles per minute per size bucket from rocenante-soak receipts (--json FILE).

    python3 tools/plot_soak.py docs/results/<run>/soak.json -o docs/results/<run>/soak.png [--label TEXT]
    python3 tools/plot_soak.py OUT/soak-threads.json OUT/soak-processes.json -o OUT/soak.png   # side by side

One panel per size bucket: p50, p99 and p99.9 of rank 0's call latency for each minute of the run (log scale),
with the number of calls of that minute under it; the pauses (a rank's process stopped with SIGSTOP/SIGCONT, or,
with ranks as threads, a rank's thread sleeping before its next call) are ticks on the time axis and fail-stops are
red lines, so drift and the cause of a tail can be read off the same figure. Several receipts (e.g. the GPU soak
with ranks as threads and with ranks as processes, or host and GPU) are columns side by side, each titled with its
mode, transport, GPU, ranks, commit, counts of collectives (eager and CUDA-graph calls), wrong results, fail-stops
and pauses; --label adds the conditions a receipt cannot know (e.g. an emulated VM and its netem loss, MPS on).
Needs matplotlib.
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


def describe(r):
    """Two lines naming one receipt: what ran where, and what came of it."""
    mode = r.get("mode", "host")  # receipts before the GPU mode have no "mode": the host executor
    where = f"{r.get('ranks')} ranks, {mode}, {r.get('transport')}"
    if r.get("gpu"):
        where += f", {r['gpu'].get('name')}"
    where += f", commit {r.get('git_commit')}"
    calls = f"{r.get('collectives')} collectives"
    if r.get("calls_graph"):
        calls += f" ({r.get('calls_eager')} eager, {r.get('calls_graph')} graph)"
    return (f"{where}\n{calls}, {r.get('wrong_results')} wrong, {r.get('fail_stops')} fail-stops, "
            f"{len(r.get('pauses', []))} pauses")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("receipts", nargs="+", help="rocenante-soak JSON receipts (one column each)")
    ap.add_argument("-o", "--output", required=True, help="PNG file to write")
    ap.add_argument("--label", default="", help="an extra line for the title (conditions)")
    args = ap.parse_args()
    runs = []
    for path in args.receipts:
        with open(path) as f:
            r = json.load(f)
        cells = collections.defaultdict(dict)  # bucket -> minute -> cell
        for c in r.get("per_minute", []):
            cells[c["bucket"]][c["minute"]] = c
        if not cells:
            sys.exit(f"{path}: no per-minute latency cells (did rank 0 write the receipt?)")
        runs.append((r, cells))

    buckets = []
    for r, _ in runs:
        buckets += [b["name"] for b in r["config"]["buckets"] if b["name"] not in buckets]
    shown = [b for b in buckets if any(cells[b] for _, cells in runs)]
    threads = any(r.get("launcher", {}).get("ranks_as") == "threads" for r, _ in runs)

    fig, axes = plt.subplots(len(shown), len(runs), figsize=(9 if len(runs) == 1 else 6.5 * len(runs), 2.2 * len(shown) + 1.4),
                             sharex="col", sharey="row", squeeze=False)
    for col, (r, cells) in enumerate(runs):
        fails = [fs["t_s"] / 60.0 for pr in r.get("per_rank", []) for fs in pr.get("fail_stop_reports", [])]
        pauses = [p["t_s"] / 60.0 for p in r.get("pauses", [])]
        run_min = r.get("run_seconds", 1e9) / 60.0
        for row, b in enumerate(shown):
            ax = axes[row, col]
            mins = sorted(cells[b])
            if mins:
                x = [m + min(1.0, run_min - m) / 2 for m in mins]  # a cell at the middle of its span (the last may be short)
                for key, style, lab in (("p50_us", "o-", "p50"), ("p99_us", "s--", "p99"), ("p999_us", "^:", "p99.9")):
                    ax.plot(x, [cells[b][m][key] / 1000.0 for m in mins], style, ms=3, lw=1, label=lab)
                n = [cells[b][m]["n"] for m in mins]
                ax.text(0.995, 0.04, f"calls/min {min(n)}..{max(n)}", transform=ax.transAxes, ha="right", fontsize=7)
                ax.set_yscale("log")
            else:
                ax.text(0.5, 0.5, "no calls", transform=ax.transAxes, ha="center", fontsize=8)
            if col == 0:
                ax.set_ylabel(f"{b}\nms")
            ax.grid(True, which="both", alpha=0.3)
            for t in pauses:
                ax.axvline(t, ymin=0, ymax=0.06, color="grey", lw=0.8)
            for t in fails:
                ax.axvline(t, color="red", lw=1)
        if len(runs) > 1:
            axes[0, col].set_title(describe(r), fontsize=8)
        axes[-1, col].set_xlabel("minute of the run")
    axes[0, 0].legend(loc="upper left", fontsize=7, ncol=3)
    paused = ("a rank paused (processes: SIGSTOP/SIGCONT; threads: its thread slept before its next call)" if threads
              else "a rank paused by SIGSTOP/SIGCONT")
    title = "rocenante-soak: " + (describe(runs[0][0]) if len(runs) == 1 else f"{len(runs)} receipts")
    title += f"\nlatency of rank 0 per minute; grey ticks: {paused}; red: fail-stop"
    if args.label:
        title += "\n" + args.label
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(args.output, dpi=80)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

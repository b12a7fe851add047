#!/usr/bin/env python3
"""plot_receipts.py - turn rocenante-perf JSON receipts (-J FILE) into PNG plots of latency against size.

    python3 tools/plot_receipts.py docs/results/<run>/*.json -o docs/results/<run>/plots
    python3 tools/plot_receipts.py a.json b.json --overlay -o plots      # one figure per dtype, all receipts
    python3 tools/plot_receipts.py perf-mpirun-np*.json --overlay --label "Soft-RoCE in a QEMU TCG VM" -o plots

Default: one PNG per receipt and dtype, one line per algorithm (one_shot, ring, and nccl where the receipt has
NCCL rows): median time of the slowest rank (marker) with its p99 (thin line above). --overlay draws every
receipt on one figure per dtype (labels: algorithm, ranks, eager/graph), for eager-vs-graph or rank-count
comparisons. Rows whose status is not ok or whose #wrong is not 0 are not plotted; they are listed on stderr.

Every figure names its receipt file and the commit it was built from; receipts from the CPU host executor are
titled as such (not a performance figure). Receipts from `mpirun` runs (one rank per process, "launch": "mpirun")
are titled with the transport and the host they ran on, and carry the receipt's note; --label adds a line of your
own to every title (e.g. the conditions a receipt cannot know, such as an emulated VM). Needs matplotlib (pip
install matplotlib).
"""
import argparse
import collections
import json
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # pragma: no cover
    sys.exit("plot_receipts.py needs matplotlib: pip install matplotlib")

STYLE = {"one_shot": ("tab:blue", "o"), "ring": ("tab:orange", "s"), "nccl": ("tab:green", "^")}


def load(path):
    with open(path) as f:
        r = json.load(f)
    if r.get("tool") != "rocenante-perf":
        sys.exit(f"{path}: not a rocenante-perf receipt")
    return r


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}" if unit == "B" else f"{n:g} {unit}"
        n /= 1024
    return str(n)


def mode(r):
    return r.get("mode", "graph" if r.get("graph_launches", 0) else "eager")


def describe(r, path):
    gpu = r.get("gpus") or []
    if r.get("launch") == "mpirun":
        hosts = sorted({h.split(" pid ")[0] for h in r.get("rank_hosts", [])}) or [r.get("host", "?")]
        where = (f"CPU host executor, one rank per process (mpirun), transport {r.get('transport')}, "
                 f"host(s) {', '.join(hosts)}")
    else:
        where = gpu[0]["name"] if gpu else "CPU host executor (not a performance figure)"
    commit = r.get("git_commit", "unknown")[:12] + (" dirty" if r.get("git_dirty") is True else "")
    return where, commit


def series(r):
    """{(type, algorithm): [(size, median, p99)]} for rows that ran correctly; bad rows are reported."""
    out = collections.defaultdict(list)
    for row in r["rows"]:
        if row.get("status") != "ok" or row.get("wrong", 0) != 0:
            print(f"skipping row {row['type']} {row['algorithm']} {row['size']} B: status {row.get('status')}, "
                  f"wrong {row.get('wrong')}", file=sys.stderr)
            continue
        if row.get("median_us") is None:
            continue
        out[(row["type"], row["algorithm"])].append((row["size"], row["median_us"], row.get("p99_us") or row["median_us"]))
    for k in out:
        out[k].sort()
    return out


def axes_setup(ax, title, note):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size per rank (bytes; all-gather: gathered output)")
    ax.set_ylabel("time per collective (us), slowest rank")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title, fontsize=10)
    ax.text(0.0, -0.16, note, transform=ax.transAxes, fontsize=7, va="top", ha="left", wrap=True)


def mode_text(r):
    return "mpirun" if r.get("launch") == "mpirun" else mode(r)


def plot_one(path, r, outdir, label):
    where, commit = describe(r, path)
    by_type = collections.defaultdict(dict)
    for (t, algo), pts in series(r).items():
        by_type[t][algo] = pts
    written = []
    for t, algos in sorted(by_type.items()):
        fig, ax = plt.subplots(figsize=(7.5, 5))
        for algo, pts in sorted(algos.items()):
            color, marker = STYLE.get(algo, ("black", "x"))
            xs = [p[0] for p in pts]
            ax.plot(xs, [p[1] for p in pts], marker=marker, color=color, label=f"{algo} median")
            ax.plot(xs, [p[2] for p in pts], linestyle=":", color=color, linewidth=0.8, label=f"{algo} p99")
        title = (f"{r['collective']} {t}, {r['ranks']} ranks, {r['transport']}, {mode_text(r)}\n{where}" +
                 (f"\n{label}" if label else ""))
        note = (f"receipt: {os.path.basename(path)}  commit {commit}  {r.get('date', '')}\n"
                f"{r.get('command_line', '')}\nNCCL: {r.get('nccl', 'n/a')}" +
                (f"\n{r['note']}" if r.get("launch") == "mpirun" and r.get("note") else ""))
        axes_setup(ax, title, note)
        ax.legend(fontsize=8)
        written.append(save(fig, outdir, f"{os.path.splitext(os.path.basename(path))[0]}-{t}.png"))
    return written


def save(fig, outdir, name):
    """Writes one figure as outdir/name and closes it; returns name."""
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, name), dpi=120, bbox_inches="tight")
    plt.close(fig)
    return name


SHADES = {"one_shot": "Blues", "ring": "Oranges", "nccl": "Greens"}


def plot_overlay(receipts, outdir, label):
    by_type = collections.defaultdict(list)  # type -> [(label, pts, algo, mode, ranks)]
    commits, paths = set(), []
    for path, r in receipts:
        where, commit = describe(r, path)
        commits.add(commit)
        paths.append(os.path.basename(path))
        for (t, algo), pts in series(r).items():
            by_type[t].append((f"{algo}, {r['ranks']} ranks, {mode_text(r)}", pts, algo, mode(r), r["ranks"]))
    rank_counts = sorted({r["ranks"] for _, r in receipts})
    written = []
    for t, lines in sorted(by_type.items()):
        fig, ax = plt.subplots(figsize=(8.5, 5.5))
        for name, pts, algo, m, n in sorted(lines):
            _, marker = STYLE.get(algo, ("black", "x"))
            # one hue per algorithm, darker for more ranks; solid = graph, dashed = eager
            shade = 0.45 + 0.5 * (rank_counts.index(n) + 1) / len(rank_counts)
            color = matplotlib.colormaps[SHADES.get(algo, "Greys")](shade)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, markersize=3, color=color,
                    linestyle="-" if m == "graph" else "--", label=name, alpha=0.9)
        where = " / ".join(sorted({describe(r, p)[0] for p, r in receipts}))
        gpu_runs = any(r.get("gpus") for _, r in receipts)
        axes_setup(ax, f"{receipts[0][1]['collective']} {t}, median of the slowest rank\n{where}" +
                   (f"\n{label}" if label else ""),
                   "receipts: " + ", ".join(paths) + "\ncommit(s): " + ", ".join(sorted(commits)) +
                   ("   solid: CUDA graph, dashed: eager" if gpu_runs else "   dashed: eager (host executor)"))
        ax.legend(fontsize=7, ncol=2)
        written.append(save(fig, outdir, f"overlay-{t}.png"))
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("receipts", nargs="+", help="rocenante-perf JSON receipts")
    ap.add_argument("-o", "--outdir", default="plots", help="folder for the PNGs (default: plots)")
    ap.add_argument("--overlay", action="store_true", help="one figure per dtype with every receipt on it")
    ap.add_argument("--label", default="", help="an extra title line on every figure (conditions the receipt cannot know)")
    args = ap.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    receipts = [(p, load(p)) for p in args.receipts]
    written = plot_overlay(receipts, args.outdir, args.label) if args.overlay else \
        [n for p, r in receipts for n in plot_one(p, r, args.outdir, args.label)]
    for n in written:
        print(os.path.join(args.outdir, n))
    if not written:
        sys.exit("no plottable rows")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""tests/docs/check_docs.py — the commands of README.md, docs/*.md and examples/README.md against the checked list
tests/docs/commands.txt, which says for each what becomes of it: run by tests/docs/run_commands.sh on a clean clone,
run by .ci/run itself, or not runnable on a machine without a GPU (and why).

A command is a line of a fenced `sh` block (or of an unlabelled block that starts like a command), with lines ending
in a backslash joined and comments dropped, or an inline code span of prose that starts with a command word. A
command added to or changed in the documents fails the check until the list classifies it; an entry whose command
is no longer in its document fails it too; and the `run` entries must be exactly the commands run_commands.sh runs,
in the same order.

    tests/docs/check_docs.py            check (exit 1 with what differs)
    tests/docs/check_docs.py --write   rewrite commands.txt from the documents, keeping the known tags; new
                                       commands get the tag `new`, which the check refuses
"""
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
LIST = HERE / "commands.txt"
RUNNER = HERE / "run_commands.sh"

# What each tag means; the legend heads commands.txt.
TAGS = {
    "run": "run on a clean clone by tests/docs/run_commands.sh (suite docs), in this order",
    "ci": "run by .ci/run itself (tools/quickstart test in the main phase: running it inside its own suite would "
          "recurse; the asan and tsan phases run tools/quickstart test --suite host)",
    "slow": "runs on a machine without a GPU, but rebuilds every test (the --cpu-only form of what .ci/run runs); "
            "its time is the one tools/quickstart's header states",
    "gpu": "needs a GPU, or nvcc to build GPU code (tools/gpu/run.sh runs these on the GPU machine)",
    "rdma": "needs an RDMA device or the Soft-RoCE VM (.ci/run's softroce phase runs the softroce suite)",
    "cluster": "needs several nodes, Slurm or mpirun across hosts",
    "root": "installs Debian packages (root); tools/quickstart installs the same packages on every CI run",
    "form": "a form with a placeholder (PROG, SCRIPT, script.py, OUT, RECEIPT, <...>), not a command; run_commands.sh runs the "
            "shell-loop forms with a real program",
    "mention": "a program named in prose, not a command to run",
    "fix-elsewhere": "does not run as written on a fresh machine; its document is being changed by another line of "
                     "work (listed so that it is not forgotten)",
    "new": "not classified yet: the check fails",
}

FILES = ["README.md"] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")) + ["examples/README.md"]
FENCE = re.compile(r"^```(\S*)\s*$")
COMMAND_START = re.compile(
    r"^(tools/|\.venv/|build-venv/|build/|build-\w+/|meson |ninja |pip |python3 |apt-get |sudo |g\+\+ |torchrun |"
    r"mpirun |srun |for \w+ in |export |git |\./|rocenante-|[A-Z_]+=\S* )")
INLINE = re.compile(r"`([^`\n]+)`")
INLINE_START = re.compile(
    r"^(tools/\S+|\.venv/bin/\S+|build-venv/bin/\S+|build/\S+[^/]|meson|ninja|pip|python3|apt-get|g\+\+|torchrun|"
    r"mpirun|srun|for \w+ in)( |$)")


def strip_comment(line):
    """The command without a trailing ' # comment'."""
    return re.split(r"\s+#\s", line, maxsplit=1)[0].rstrip()


def commands_of(rel):
    """(line number, command) in document order."""
    out = []
    lines = (ROOT / rel).read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            lang, start, i = m.group(1), i + 1, i + 1
            body = []
            while i < len(lines) and not lines[i].startswith("```"):
                body.append((i + 1, lines[i]))
                i += 1
            i += 1
            first = next((t.strip() for _, t in body if t.strip() and not t.strip().startswith("#")), "")
            if lang in ("sh", "bash", "shell") or (lang == "" and COMMAND_START.match(first)):
                pending, at = "", 0
                for n, text in body:
                    t = text.strip()
                    if not pending and (not t or t.startswith("#")):
                        continue
                    if not pending:
                        at = n
                    if t.endswith("\\"):
                        pending += t[:-1].rstrip() + " "
                        continue
                    out.append((at, strip_comment(pending + t)))
                    pending = ""
            continue
        for span in INLINE.findall(lines[i]):
            if INLINE_START.match(span):
                out.append((i + 1, span.strip()))
        i += 1
    return out


def documented():
    seen, result = set(), []
    for rel in FILES:
        for n, cmd in commands_of(rel):
            if (rel, cmd) not in seen:
                seen.add((rel, cmd))
                result.append((rel, n, cmd))
    return result


def read_list():
    entries = []
    for raw in LIST.read_text().splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        tag, rel, cmd = raw.split("\t", 2)
        entries.append((tag, rel, cmd))
    return entries


def runner_commands():
    """What run_commands.sh runs: its `run FILES 'COMMAND'` lines, in order, as (file, command) pairs."""
    out = []
    for raw in RUNNER.read_text().splitlines():
        m = re.match(r"^\s*run '([^']+)' '(.*)'\s*(#.*)?$", raw)
        if m:
            for rel in m.group(1).split():
                out.append((rel, m.group(2)))
    return out


def write():
    known = {}
    if LIST.exists():
        known = {(rel, cmd): tag for tag, rel, cmd in read_list()}
    lines = ["# tests/docs/commands.txt — every command of README.md, docs/*.md and examples/README.md, with what",
             "# becomes of it (tests/docs/check_docs.py keeps this list and the documents in step). Tags:"]
    lines += [f"#   {t:<14}{why}" for t, why in TAGS.items()]
    lines.append("# Columns, tab-separated: tag, document, command (as extracted: continuation lines joined, comments "
                 "dropped).")
    for rel, _, cmd in documented():
        lines.append(f"{known.get((rel, cmd), 'new')}\t{rel}\t{cmd}")
    LIST.write_text("\n".join(lines) + "\n")


def check():
    problems = []
    docs = [(rel, cmd) for rel, _, cmd in documented()]
    where = {(rel, cmd): n for rel, n, cmd in documented()}
    listed = read_list()
    tags = {(rel, cmd): tag for tag, rel, cmd in listed}
    for key in docs:
        if key not in tags:
            problems.append(f"{key[0]}:{where[key]}: not in tests/docs/commands.txt: {key[1]}")
        elif tags[key] not in TAGS or tags[key] == "new":
            problems.append(f"{key[0]}:{where[key]}: tag '{tags[key]}' is not a classification: {key[1]}")
    for tag, rel, cmd in listed:
        if (rel, cmd) not in where:
            problems.append(f"tests/docs/commands.txt: {rel} no longer has this command ({tag}): {cmd}")
    # The same commands, and within each document in the document's order (one run line may serve several
    # documents that give the same command).
    want = [(rel, cmd) for tag, rel, cmd in listed if tag == "run"]
    have = runner_commands()
    if sorted(want) != sorted(have) or any([k for k in want if k[0] == rel] != [k for k in have if k[0] == rel]
                                           for rel in FILES):
        problems.append("tests/docs/run_commands.sh does not run exactly the `run` commands of commands.txt, in order:")
        for key in want:
            if key not in have:
                problems.append(f"  not run: {key[0]}: {key[1]}")
        for key in have:
            if key not in want:
                problems.append(f"  run but not a `run` entry: {key[0]}: {key[1]}")
        if set(want) == set(have):
            problems.append("  (the same commands in another order)")
    counts = {}
    for tag, _, _ in listed:
        counts[tag] = counts.get(tag, 0) + 1
    print("documented commands by tag: " + ", ".join(f"{t} {c}" for t, c in sorted(counts.items())))
    for tag, rel, cmd in listed:
        if tag == "fix-elsewhere":
            print(f"does not run as written (fix-elsewhere): {rel}: {cmd}")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write()
        sys.exit(0)
    sys.exit(check())

#!/usr/bin/env bash
# tests/docs/run_commands.sh — the `run` commands of tests/docs/commands.txt, word for word as README.md, docs/ and
# examples/README.md give them and in their order, on a clean clone of this checkout, as a new user on a machine
# without a GPU would run them (meson test: suite docs; tests/docs/check_docs.py checks that the `run` lines below
# are exactly the list's `run` entries).
#
# The clone: `git clone` of the checkout, then its working tree's files on top (tracked and untracked ones git does
# not ignore), so that uncommitted work is what is tested; in a temporary folder, removed when every step passed and
# kept (its path printed) when one failed. Every command runs from the clone's root in this shell, with a plain
# environment (PATH without any venv, HOME, CUDA_HOME if set) and:
#   ROCENANTE_CPU_ONLY=1   the documented form of a trial without a GPU (tools/quickstart --cpu-only): nvcc, where it
#                          is installed, compiles nothing;
#   /opt/rocenante         becomes a prefix in the temporary folder (installing into /opt needs root).
# The documents' examples run too, between the commands that need them: README's C++ example is the main.cpp its
# install section compiles; the host lines of README's "Ranks as processes" compile against the installed headers;
# README's Python example (without its GPU lines) is the PROG of README's shell loop (4 ranks) and the SCRIPT of
# docs/python.md's (2 ranks); docs/python.md's threads example runs. Each step says what it checked.
#
# Usage: tests/docs/run_commands.sh [SOURCE_DIR]   (default: the checkout holding this script). Needs git, network
# access to PyPI (the tools venv and pip install .) and the Debian packages tools/quickstart installs.
set -uo pipefail

src="$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")/../..}" && pwd)"
work="$(mktemp -d /tmp/rocenante-docs.XXXXXX)"
clone="$work/rocenante"
prefix="$work/prefix"
out="$work/step.out"
t_start=$(date +%s)

say() { printf '==== [%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
fail() {
  say "FAILED: $*"
  printf '     the clone and its logs stay in %s\n' "$work"
  exit 1
}

# ---- the clone --------------------------------------------------------------------------------------------------
say "clone of $src into $clone (the working tree's files on top of its HEAD)"
git clone -q --no-hardlinks "$src" "$clone" || fail "git clone $src"
(cd "$src" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar cf - --no-recursion --ignore-failed-read 2>/dev/null) |
  tar xf - -C "$clone" || fail "copying the working tree"
(cd "$src" && git ls-files -z --deleted) | (cd "$clone" && xargs -0 -r rm -f)
cd "$clone" || fail "cd $clone"

# A plain environment: what a new user's shell has, plus the documented CPU-only switch.
keep_cuda="${CUDA_HOME:-}"
for v in $(env | sed -n 's/^\(ROCENANTE_[A-Z_]*\|VIRTUAL_ENV\|PYTHONPATH\|PKG_CONFIG_PATH\|MESON_[A-Z_]*\)=.*/\1/p'); do
  unset "$v"
done
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export ROCENANTE_CPU_ONLY=1
[[ -n $keep_cuda ]] && export CUDA_HOME="$keep_cuda"

# run DOCUMENTS 'COMMAND': the command as the documents give it (after the /opt/rocenante substitution), its output
# in $out and on stdout; a nonzero status fails the test.
run() {
  local docs="$1" cmd="$2" actual
  actual="${cmd//\/opt\/rocenante/$prefix}"
  say "$docs: $cmd"
  [[ $actual != "$cmd" ]] && printf '     run as: %s\n' "$actual"
  local t0 rc=0
  t0=$(date +%s)
  eval "$actual" >"$out" 2>&1 || rc=$?
  cat "$out"
  printf '     exit %d after %d s\n' "$rc" "$(($(date +%s) - t0))"
  ((rc == 0)) || fail "$docs: $cmd (exit $rc)"
}
# expect PATTERN WHAT: the last step's output holds PATTERN (grep -E).
expect() {
  grep -Eq -- "$1" "$out" || fail "the output of the last step lacks $2 (/$1/)"
  printf '     checked: %s\n' "$2"
}
# fenced_block FILE HEADING LANG: the first ```LANG block after the line HEADING in FILE.
fenced_block() {
  python3 - "$@" <<'PY'
import sys
path, heading, lang = sys.argv[1:]
lines = open(path).read().splitlines()
i = lines.index(heading)
while lines[i] != "```" + lang:
    i += 1
j = lines.index("```", i + 1)
print("\n".join(lines[i + 1:j]))
PY
}

# ---- README.md --------------------------------------------------------------------------------------------------
run 'README.md' 'tools/quickstart perf'
expect '# Out of bounds values : 0 OK' "the sweep's check (no wrong value)"
run 'README.md' 'tools/quickstart --cpu-only perf'
expect '# Out of bounds values : 0 OK' "the sweep's check (no wrong value)"
run 'README.md' 'tools/quickstart perf --collective all_gather -J receipt.json'
python3 -c 'import json, sys; r = json.load(open("receipt.json")); sys.exit(0 if "all_gather" in json.dumps(r) else 1)' ||
  fail "receipt.json is not a JSON receipt of all_gather"
printf '     checked: receipt.json is JSON and names all_gather\n'
run 'README.md docs/python.md' 'python3 -m venv --upgrade-deps .venv && .venv/bin/pip install .'
.venv/bin/python -c 'import rocenante, ml_dtypes; print(rocenante.__file__)' >"$out" 2>&1 || { cat "$out"; fail "import rocenante, ml_dtypes"; }
printf '     checked: the venv imports rocenante and ml_dtypes\n'

# README's Python example without its GPU lines (those after the first blank line), as README's shell loop's PROG:
# every rank writes the first element it got, 1 + 2 + 3 + 4.
fenced_block README.md 'Python, one process per rank: the CPU host executor, installed into a venv (Debian and Ubuntu refuse `pip install`' python |
  sed '/^$/,$d' >readme_example.py
printf 'open(f"docs-rank{comm.rank}.txt", "w").write(f"{x[0]:g} {comm.decision}")\n' >>readme_example.py
loop="$(grep -m1 -F 'for r in 0 1 2 3; do ROCENANTE_BOOTSTRAP=127.0.0.1:29600' README.md)"
loop="${loop//PROG/.venv/bin/python readme_example.py}"
say "README.md: the shell loop with PROG = README's Python example: $loop"
rm -f docs-rank*.txt
eval "$loop" >"$out" 2>&1
cat "$out"
for r in 0 1 2 3; do
  [[ $(cut -d' ' -f1 "docs-rank$r.txt" 2>/dev/null) == 10 ]] || fail "rank $r of README's Python example did not get 10"
done
grep -q '; algorithm ' docs-rank0.txt || fail "comm.decision lacks the algorithm clause: $(cat docs-rank0.txt)"
printf '     checked: 4 processes, every rank got 10; decision: %s\n' "$(cut -d' ' -f2- docs-rank0.txt)"

fenced_block README.md '## Example' cpp >main.cpp
run 'README.md' 'tools/quickstart install /opt/rocenante'
[[ -f $prefix/include/rocenante/rocenante.hpp && ! -e $prefix/bin ]] || fail "the prefix lacks the headers, or has bin/"
printf '     checked: headers installed, nothing in bin/\n'
run 'README.md' 'export PKG_CONFIG_PATH=/opt/rocenante/lib/x86_64-linux-gnu/pkgconfig'
run 'README.md' 'g++ main.cpp $(pkg-config --cflags --libs rocenante) -o app'
run 'README.md' './app'
expect '^out\[0\] = 10 \(expected 10\)$' "the example's printed result"
# "Ranks as processes": its host lines, with the umbrella header it names, against the installed headers.
{
  grep -m1 -F '#include <rocenante/rocenante.hpp>' README.md
  printf 'int main() {\n  rocenante::options opts;\n'
  grep -m1 -F 'auto boot = rocenante::bootstrap::tcp::from_env();' README.md
  grep -m1 -F 'rocenante::host::selected_communicator comm(boot, opts);' README.md
  printf '}\n'
} >ranks_as_processes.cpp
g++ -c ranks_as_processes.cpp $(pkg-config --cflags rocenante) -o ranks_as_processes.o >"$out" 2>&1 ||
  { cat "$out"; fail "README's ranks-as-processes lines do not compile with <rocenante/rocenante.hpp>"; }
printf '     checked: README'"'"'s ranks-as-processes host lines compile with <rocenante/rocenante.hpp>\n'
run 'README.md examples/README.md' 'tools/quickstart venv'
expect 'build-venv/bin$' "the venv's bin directory"

# ---- docs/performance.md ---------------------------------------------------------------------------------------
run 'docs/performance.md' 'for r in 0 1; do ROCENANTE_BOOTSTRAP=127.0.0.1:29600 ROCENANTE_RANK=$r ROCENANTE_WORLD_SIZE=2 build/benchmarks/rocenante-perf -b 16 -e 1M & done; wait'
expect '# Out of bounds values : 0 OK' "the 2-process sweep's check"
run 'docs/performance.md' 'ninja -C build benchmarks/soak/rocenante-soak'
run 'docs/performance.md' 'build/benchmarks/soak/rocenante-soak --launch 2 --seconds 10 --json soak.json'
python3 -c 'import json, sys; r = json.load(open("soak.json")); sys.exit(0 if r else 1)' || fail "soak.json is not JSON"
printf '     checked: soak.json is JSON\n'

# ---- docs/python.md --------------------------------------------------------------------------------------------
fenced_block docs/python.md '## Example' python >threads_example.py
.venv/bin/python threads_example.py >"$out" 2>&1 || { cat "$out"; fail "docs/python.md's threads example"; }
printf '     checked: docs/python.md'"'"'s threads example ran (its asserts hold)\n'
loop="$(grep -m1 -F 'for r in 0 1; do ROCENANTE_BOOTSTRAP=127.0.0.1:29600' docs/python.md)"
loop="${loop//SCRIPT/readme_example.py}"
say "docs/python.md: the shell loop with SCRIPT = README's Python example: $loop"
rm -f docs-rank*.txt
eval "$loop" >"$out" 2>&1
cat "$out"
for r in 0 1; do
  [[ $(cut -d' ' -f1 "docs-rank$r.txt" 2>/dev/null) == 3 ]] || fail "rank $r of 2 did not get 1 + 2"
done
printf '     checked: 2 processes, every rank got 3\n'
run 'docs/python.md' 'tools/quickstart test --suite python'
expect '^[0-9]+ passed, 0 failed, [0-9]+ skipped$' "the Python suite's summary"

# ---- examples/README.md ----------------------------------------------------------------------------------------
run 'examples/README.md' 'build-venv/bin/meson setup build -Dexamples=true'
run 'examples/README.md' 'build-venv/bin/meson test -C build --suite examples'
run 'examples/README.md' 'build/examples/00_quickstart'
expect 'PASS' "PASS"
run 'examples/README.md' 'build/examples/03_mpi_ibverbs'
expect 'PASS' "PASS"

say "every documented command that runs here ran: $(($(date +%s) - t_start)) s"
cd / && rm -rf "$work"

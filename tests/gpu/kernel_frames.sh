#!/usr/bin/env bash
# tests/gpu/kernel_frames.sh LIMIT NVCC... -- SOURCE: compiles SOURCE (every kernel the GPU dispatch launches) for
# sm_90a with ptxas -v and fails when a kernel's cumulative stack size is above LIMIT bytes. Why: an out-of-line
# (__noinline__) function that receives a reference to a kernel parameter, or a `this` that holds one, makes the
# compiler copy the whole kernel context into local memory at entry and read the transport handle from there on
# the hot path: every kernel's frame grew to 360 bytes that way and the 48 KiB decode all-reduce lost 0.7 us on an
# H100 (docs/design.md §1.4, "Cold paths"). Needs nvcc only, no GPU.
set -uo pipefail
limit=$1; shift
cmd=(); while [ $# -gt 0 ] && [ "$1" != -- ]; do cmd+=("$1"); shift; done; shift
src=$1
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
"${cmd[@]}" -std=c++20 -arch=sm_90a -cubin -O3 -Xptxas -v "$src" -o "$w/k.cubin" >"$w/log" 2>&1 ||
  { cat "$w/log"; echo "kernel_frames: nvcc failed"; exit 1; }
# ptxas: "Compiling entry function 'NAME' for 'sm_90a'" ... "Used R registers, ..., S bytes cumulative stack size"
awk -v limit="$limit" '
  /Compiling entry function/ { match($0, /'"'"'[^'"'"']*'"'"'/); fn = substr($0, RSTART + 1, RLENGTH - 2); next }
  /cumulative stack size/ && fn != "" {
    match($0, /[0-9]+ bytes cumulative stack size/); s = substr($0, RSTART, RLENGTH) + 0
    match($0, /Used [0-9]+ registers/); r = substr($0, RSTART + 5, RLENGTH - 15) + 0
    n++; if (s > limit) { bad++; mark = "  <- above " limit } else mark = ""
    printf "%4d bytes stack  %3d registers  %s%s\n", s, r, fn, mark; fn = ""
  }
  END { printf "%d kernels, %d above %d bytes of stack\n", n, bad, limit; exit (n == 0 || bad > 0) }' "$w/log" |
  { if command -v c++filt >/dev/null; then c++filt; else cat; fi; }

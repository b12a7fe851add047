#!/usr/bin/env bash
# tools/gpu/build-variant.sh NAME FLAGS... — on the CPU machine: build benchmarks/gpu/bench_gpu.cu for sm_90a with
# extra compiler flags (tuning macros such as -DROCENANTE_SMALL_KERNEL=0) into .deps/bin/rocenante-bench-gpu-NAME,
# for side-by-side rows in one device call. Needs .deps/include (doctest, nccl.h) and Google Benchmark installed.
set -euo pipefail
name=$1; shift
root=$(cd "$(dirname "$0")/../.." && pwd)
o=$(mktemp -d)
nvcc -DNDEBUG -O3 -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Xcompiler=-pthread \
  -I"$root/include" -I"$root/.deps/include" "$@" -o "$o/bench.o" -c "$root/benchmarks/gpu/bench_gpu.cu"
mkdir -p "$root/.deps/bin"
nvcc -gencode=arch=compute_90a,code=sm_90a -o "$root/.deps/bin/rocenante-bench-gpu-$name" "$o/bench.o" -lcuda -lbenchmark \
  -Xlinker=-rpath,/usr/lib/x86_64-linux-gnu
rm -rf "$o"

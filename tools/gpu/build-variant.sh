#!/usr/bin/env bash
# tools/gpu/build-variant.sh NAME FLAGS... — on the CPU machine: build benchmarks/gpu/bench_gpu.cu for sm_90a with
# extra compiler flags (tuning macros such as -DROCENANTE_SMALL_KERNEL=0) into .deps/bin/rocenante-bench-gpu-NAME,
# for side-by-side rows in one device call. Needs .deps/include (doctest, nccl.h) and Google Benchmark installed.
# With TESTS=1 it builds tests/gpu/test_gpu_collectives.cu into .deps/bin/test_gpu_collectives-NAME instead, with
# TRACE=1 benchmarks/gpu/trace_phases.cu into .deps/bin/rocenante-trace-phases-NAME.
set -euo pipefail
name=$1; shift
root=$(cd "$(dirname "$0")/../.." && pwd)
o=$(mktemp -d)
src=$root/benchmarks/gpu/bench_gpu.cu; dst=$root/.deps/bin/rocenante-bench-gpu-$name; libs=(-lcuda -lbenchmark)
if [ "${TESTS:-0}" = 1 ]; then
  src=$root/tests/gpu/test_gpu_collectives.cu; dst=$root/.deps/bin/test_gpu_collectives-$name; libs=(-lcuda)
elif [ "${TRACE:-0}" = 1 ]; then
  src=$root/benchmarks/gpu/trace_phases.cu; dst=$root/.deps/bin/rocenante-trace-phases-$name; libs=(-lcuda)
fi
nvcc -DNDEBUG -O3 -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Xcompiler=-pthread \
  -I"$root/include" -I"$root/.deps/include" -I"$root/tests/gpu" "$@" -o "$o/obj.o" -c "$src"
mkdir -p "$root/.deps/bin"
nvcc -gencode=arch=compute_90a,code=sm_90a -Xcompiler=-pthread -o "$dst" "$o/obj.o" "${libs[@]}" \
  -Xlinker=-rpath,/usr/lib/x86_64-linux-gnu
rm -rf "$o"

#!/usr/bin/env bash
# tools/gpu/prepare.sh [VARIANT=FLAGS ...] — on the CPU machine, before a device call: build the GPU binaries for
# sm_90a from the checkout into .deps/bin (the device call carries .deps), with .deps/commit = HEAD. Builds the gpu
# suites, the GPU benchmark, the phase tracer and examples 01 and 02 in build-dev/, then for each VARIANT=FLAGS the
# benchmark and the gpu collectives suite with those flags (tools/gpu/build-variant.sh: rocenante-bench-gpu-VARIANT,
# test_gpu_collectives-VARIANT; with PREPARE_TESTS="NAME ..." the suite only for those variants: a device call carries
# at most 64 MiB). Sets up .deps (doctest and nccl.h headers, Google Benchmark's library) when missing.
# Example: tools/gpu/prepare.sh fixed=-DROCENANTE_SMALL_FIXED_RANKS=1
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd); cd "$root"
[ -z "$(git status --porcelain --untracked-files=no)" ] || echo "prepare: the checkout has uncommitted changes; .deps/commit names HEAD" >&2
mkdir -p .deps/include .deps/bin .deps/lib
[ -d .deps/include/doctest ] || cp -r /usr/include/doctest .deps/include/
[ -f .deps/include/nccl.h ] || cp "$(ls /usr/local/include/nccl.h /usr/local/cuda/include/nccl.h 2>/dev/null | head -1)" .deps/include/
[ -f .deps/lib/libbenchmark.so.1debian ] || cp /usr/lib/x86_64-linux-gnu/libbenchmark.so.1debian .deps/lib/
git rev-parse HEAD > .deps/commit
# meson >= 1.4 (quickstart's tools venv): nvcc objects then track their headers, so a header change rebuilds them.
PATH="$(tools/quickstart venv):$PATH"
if [ -d build-dev ]; then  # a build-dev made by an older meson is set up again
  meson setup --reconfigure build-dev >/dev/null || meson setup --wipe build-dev -Dgpu_archs=90a -Dextra_include="$root/.deps/include" >/dev/null
else
  meson setup build-dev -Dgpu_archs=90a -Dextra_include="$root/.deps/include" >/dev/null
fi
targets=(tests/gpu/test_gpu_collectives tests/gpu/test_gpu_nvfp4 benchmarks/gpu/rocenante-bench-gpu
         benchmarks/gpu/rocenante-trace-phases examples/01_user_kernel examples/02_tp_mlp_decode)
ninja -C build-dev -j2 "${targets[@]}"
for t in "${targets[@]}"; do cp "build-dev/$t" .deps/bin/; done
for v in "$@"; do
  name=${v%%=*}; flags=${v#*=}
  # shellcheck disable=SC2086
  tools/gpu/build-variant.sh "$name" $flags
  if [ -z "${PREPARE_TESTS+x}" ] || [[ " $PREPARE_TESTS " == *" $name "* ]]; then
    # shellcheck disable=SC2086
    TESTS=1 tools/gpu/build-variant.sh "$name" $flags
  fi
done
du -sh .deps | sed 's/^/prepare: carried size /'
ls .deps/bin

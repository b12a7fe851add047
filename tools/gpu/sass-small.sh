#!/usr/bin/env bash
# tools/gpu/sass-small.sh [RANKS] [FLAGS...] — on the CPU machine: compile the decode-size all-reduce kernel alone
# (kernel::all_reduce<one_shot, sum<bf16>, H, no_epilogue, reduce_path::small>, sm_90a) and print what design.md §1.4
# quotes from its SASS: registers, where the hot path's EXIT is (its code size), and the instructions between the
# staging barrier and the first flag release (MEMBAR) and between the barrier that ends the wait and the first load
# of a source. RANKS 0 (default): H = direct_handle; 2, 4 or 8: transport::fixed_ranks<direct_handle, RANKS>. FLAGS go
# to nvcc, e.g. -DROCENANTE_SMALL_HOLD_ADDRESSES=0 -DROCENANTE_SMALL_EARLY_INPUT=0 (the kernel before s11 made both
# the defaults; design.md's figures from c3098db are of that kernel). The CUDA toolkit here has no
# cuobjdump/nvdisasm: they come from PyPI (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm) into ~/.cache/rocenante-sass.
# SASS_INCLUDE=DIR compiles another checkout's headers (e.g. a `git worktree` of an older commit); SASS_OUT=FILE keeps
# the whole listing, to compare two builds with `diff`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
ranks=${1:-0}; shift || true
tools=${HOME}/.cache/rocenante-sass
if [ ! -x "$tools/cuobj/nvidia/cu13/bin/cuobjdump" ]; then
  mkdir -p "$tools"
  pip download -q --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm -d "$tools/whl" >/dev/null
  python3 -m zipfile -e "$tools"/whl/nvidia_cuda_cuobjdump*.whl "$tools/cuobj"
  python3 -m zipfile -e "$tools"/whl/nvidia_cuda_nvdisasm*.whl "$tools/nvd"
  chmod +x "$tools"/cuobj/nvidia/cu13/bin/* "$tools"/nvd/nvidia/cu13/bin/*
fi
export PATH=$tools/nvd/nvidia/cu13/bin:/usr/local/cuda/bin:$PATH
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
handle=rocenante::transport::direct_handle
[ "$ranks" != 0 ] && handle="rocenante::transport::fixed_ranks<rocenante::transport::direct_handle, $ranks>"
cat >"$w/k.cu" <<CU
#include <rocenante/rocenante.hpp>
#include <rocenante/kernel/collectives.cuh>
#include <rocenante/transport/cuda_window.hpp>
using namespace rocenante;
using H = $handle;
template __global__ void kernel::all_reduce<algorithm::one_shot, reduce::sum<__nv_bfloat16>, H, algorithm::no_epilogue,
                                            kernel::reduce_path::small>(device::context<H>, const __nv_bfloat16*,
                                                                        __nv_bfloat16*, std::uint64_t, std::uint32_t,
                                                                        algorithm::no_epilogue);
CU
nvcc -std=c++20 -arch=sm_90a -cubin -O3 -I"${SASS_INCLUDE:-$root/include}" -I"$root/.deps/include" "$@" "$w/k.cu" -o "$w/k.cubin" \
  -Xptxas -v 2>&1 | grep -o "Used [0-9]* registers.*" || true
"$tools/cuobj/nvidia/cu13/bin/cuobjdump" -sass "$w/k.cubin" | sed 's|/\* 0x[0-9a-f]* \*/||' | grep -v '^\s*$' >"$w/k.sass"
echo "hot path ends at: $(grep -m1 -E '^\s*/\*[0-9a-f]+\*/\s+EXIT' "$w/k.sass" | grep -o '/\*[0-9a-f]*\*/')"
echo "staging barrier -> first MEMBAR: $(awk '/BAR.SYNC/{c++} c==1' "$w/k.sass" | awk '/MEMBAR/{print NR-1; exit}') instructions"
echo "barrier after the wait -> first source load: $(awk '/BAR.RED.AND/{c++} c==2' "$w/k.sass" | awk '/LDG.E.128/{print NR-1; exit}') instructions"
[ -z "${SASS_OUT:-}" ] || cp "$w/k.sass" "$SASS_OUT"

#!/usr/bin/env bash
# tools/gpu/last-run.sh — the short device call that checks what changed after tools/gpu/check-run.sh: the fused
# residual + RMSNorm bf16 epilogue (norm_out) against the host executor, the NCCL transport with a world of one and
# the start-up selection log, and the gpu suite's failure-path cases (protocol, proxy, epilogue).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"; root=$PWD; export PATH=/usr/local/cuda/bin:$PATH
nccl_dir=$(python3 -c 'import os, nvidia.nccl as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null || true)
[ -n "$nccl_dir" ] && export LD_LIBRARY_PATH=$nccl_dir:${LD_LIBRARY_PATH:-}
S="$OUT/summary.log"; say() { echo "$*" | tee -a "$S"; }
{ date -u +%Y-%m-%dT%H:%M:%SZ; echo "commit: $(cat .deps/commit)"; echo "libnccl: ${nccl_dir:-not found}"
  nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader; } 2>&1 | tee "$S"
t0=$(date +%s); b=build-h200
meson setup $b -Dgpu_archs=90a -Dbenchmarks=false -Dexamples=false -Dextra_include="$root/.deps/include" >/tmp/setup.log 2>&1 || { tail -20 /tmp/setup.log | tee -a "$S"; exit 1; }
ninja -C $b -j16 tests/gpu/test_gpu_collectives tests/gpu/test_gpu_nvfp4 tests/gpu/test_gpu_nccl >/tmp/build.log 2>&1 ||
  grep -E "error|FAILED" -A3 /tmp/build.log | head -30 | tee -a "$S"
say "build: $(( $(date +%s) - t0 )) s"
t=$(date +%s); timeout 60 $b/tests/gpu/test_gpu_nvfp4 -tc='*norm_out*' >"$OUT/gpu-nvfp4-norm_out.log" 2>&1
say "test_gpu_nvfp4 -tc='*norm_out*': rc=$? after $(( $(date +%s) - t )) s; $(grep -E 'test cases:' "$OUT/gpu-nvfp4-norm_out.log")"
t=$(date +%s); ROCENANTE_DEBUG=INFO timeout 60 $b/tests/gpu/test_gpu_nccl >"$OUT/gpu-nccl.log" 2>&1
say "test_gpu_nccl: rc=$? after $(( $(date +%s) - t )) s; $(grep -E 'test cases:' "$OUT/gpu-nccl.log")"
t=$(date +%s); timeout 90 $b/tests/gpu/test_gpu_collectives -ts='gpu.protocol,gpu.proxy,gpu.epilogue' >"$OUT/gpu-collectives-subset.log" 2>&1
say "test_gpu_collectives -ts=gpu.protocol,gpu.proxy,gpu.epilogue: rc=$? after $(( $(date +%s) - t )) s; $(grep -E 'test cases:' "$OUT/gpu-collectives-subset.log")"
say "total: $(( $(date +%s) - t0 )) s"

"""python -m rocenante: the installed NCCL-API layer's path (docs/nccl.md)."""
import ctypes
import os
import subprocess
import sys

import rocenante


def run(*args):
    return subprocess.run([sys.executable, "-m", "rocenante", *args], capture_output=True, text=True, timeout=120)


def test_without_arguments_prints_the_options():
    r = run()
    assert r.returncode == 0
    assert "--nccl-library" in r.stdout


def test_nccl_library_prints_a_loadable_layer_or_says_why_there_is_none():
    r = run("--nccl-library")
    if r.returncode == 0:
        path = r.stdout.strip()
        assert os.path.basename(path) == "librocenante_nccl.so"
        assert os.path.dirname(path) == os.path.dirname(os.path.abspath(rocenante.__file__))
        lib = ctypes.CDLL(path)  # loads without a GPU: CUDA and NCCL are reached only when used
        assert hasattr(lib, "ncclGetUniqueId") and hasattr(lib, "pncclAllReduce")
    else:
        assert r.returncode == 1
        assert "has no librocenante_nccl.so" in r.stderr
        assert not rocenante.has_gpu or "nccl.h" in r.stderr

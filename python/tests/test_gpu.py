"""The GPU executor from Python: gpu_ranks.py launched by torchrun with 2 and 4 processes on the first GPU (several
processes share it; cuda_ipc maps windows between them), and a torch-free check that every rank names a missing GPU.

Skipped, with the reason printed (pytest -rs), where torch, a CUDA device, or a build with nvcc is missing: a skip is
not a pass. tools/gpu/run.sh python runs these on a GPU machine.
"""
import os
import socket
import subprocess
import sys

import pytest

import rocenante

HERE = os.path.dirname(os.path.abspath(__file__))


def gpu_skip_reason():
    """Why the GPU cases cannot run here ("" when they can). Asks CUDA in a child process, so that this process (whose
    other tests fork) never initialises CUDA."""
    if not rocenante.has_gpu:
        return "this build of rocenante has no GPU executor (built without nvcc: pip install . -Csetup-args=-Dcuda=enabled)"
    code = ("import sys, rocenante\n"
            "why = rocenante.gpu_unavailable()\n"
            "try:\n"
            "    import torch\n"
            "except ImportError:\n"
            "    why = why or 'torch is not installed'\n"
            "else:\n"
            "    why = why or ('' if torch.cuda.is_available() else 'torch sees no CUDA device')\n"
            "print(why)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return f"probing the GPU failed: {r.stderr.strip()[-500:]}"
    return r.stdout.strip()


@pytest.fixture(scope="module")
def gpu():
    why = gpu_skip_reason()
    if why:
        print(f"\nGPU tests skipped: {why}", file=sys.stderr)
        pytest.skip(why)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("ranks", [2, 4])
def test_torchrun_ranks_on_one_gpu(gpu, ranks):
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = env.get("ROCENANTE_TEST_GPU", "0")  # every rank on one GPU: the case cuda_ipc serves
    env["ROCENANTE_BOOTSTRAP"] = f"127.0.0.1:{free_port()}"  # from_env's store, apart from torchrun's
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("CUDA_MODULE_LOADING", "EAGER")  # ranks sharing a GPU: no lazy kernel load while a peer spins
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
           os.path.join(HERE, "gpu_ranks.py")]
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        pytest.fail(f"torchrun with {ranks} processes did not finish in 1200 s; its output:\n{out[-6000:]}")
    out = r.stdout + r.stderr
    print(out[-20000:])
    assert r.returncode == 0, f"torchrun with {ranks} processes exited {r.returncode}:\n{out[-6000:]}"
    for q in range(ranks):
        assert f"rank {q}: PASS" in out, f"rank {q} printed no PASS:\n{out[-6000:]}"


def test_a_missing_gpu_is_a_config_error_naming_the_rank():
    """Where CUDA cannot run (a build without nvcc, or no driver or device), a GPU communicator is refused at set-up
    with ConfigError naming the rank (or the build), and import never fails. In a child process: this one never
    initialises CUDA."""
    code = ("import rocenante\n"
            "if rocenante.has_gpu and not rocenante.gpu_unavailable():\n"
            "    print('usable'); raise SystemExit(0)\n"
            "try:\n"
            "    rocenante.Communicator.from_callbacks(0, 1, lambda b: b, device=0)\n"
            "except rocenante.ConfigError as e:\n"
            "    print('refused:', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    if r.stdout.startswith("usable"):
        pytest.skip("a GPU is usable here: the missing-GPU path cannot be taken")
    assert r.stdout.startswith("refused:"), r.stdout
    assert "rocenante rank 0: no usable GPU" in r.stdout or "host executor only" in r.stdout, r.stdout

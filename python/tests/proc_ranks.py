"""Rank programs for test_processes.py, run in child processes (multiprocessing, spawn): module-level so that the
spawn start method can import them."""
import os
import signal
import time
import traceback

import numpy as np


def _env(port, rank, size):
    os.environ.update(ROCENANTE_BOOTSTRAP=f"127.0.0.1:{port}", ROCENANTE_RANK=str(rank), ROCENANTE_WORLD_SIZE=str(size))


def collectives(port, rank, size, queue):
    """Every dtype, both algorithms and all_gather over the store bootstrap; sends (rank, transport, results)."""
    try:
        _env(port, rank, size)
        import ml_dtypes
        import rocenante
        from conftest import rank_input

        out = {}
        with rocenante.Communicator.from_env(timeout=20, bootstrap_timeout=30) as comm:
            for name, dt in (("f32", np.float32), ("f16", np.float16), ("bf16", ml_dtypes.bfloat16)):
                for algo in ("one_shot", "two_shot", "ring", "auto"):
                    x = rank_input(rank, 1001, dt)
                    comm.all_reduce(x, algo=algo)
                    out[(name, algo)] = x.tobytes()
                out[(name, "gather")] = comm.all_gather(rank_input(rank, 33, dt, seed=2)).tobytes()
            queue.put((rank, comm.transport, out))
    except BaseException:  # noqa: BLE001 -- reported to the parent
        queue.put((rank, "error", traceback.format_exc()))


def killed(port, rank, size, queue, victim):
    """Rank `victim` kills itself with SIGKILL after 5 collectives; the others report what their first failing call raised."""
    try:
        _env(port, rank, size)
        import rocenante

        comm = rocenante.Communicator.from_env(timeout=2, bootstrap_timeout=30)
        if rank == victim:
            for _ in range(5):
                comm.all_reduce(np.ones(256, np.float32))
            os.kill(os.getpid(), signal.SIGKILL)
        # The survivors call until a call fails: the victim's last frames may still have been in flight when it died,
        # so the first failing call is its 5th or 6th, whichever the timing makes it.
        t0 = time.monotonic()
        try:
            for _ in range(100):
                comm.all_reduce(np.ones(256, np.float32))
                t0 = time.monotonic()
            queue.put((rank, "no error", 0.0, "", ""))
        except rocenante.CollectiveError as e:
            waited = time.monotonic() - t0
            health = comm.health()
            t1 = time.monotonic()
            comm.close()
            queue.put((rank, str(e), waited, health.message, f"close took {time.monotonic() - t1:.3f}"))
    except BaseException:  # noqa: BLE001
        queue.put((rank, "error: " + traceback.format_exc(), 0.0, "", ""))


def never_started(port, rank, size, queue):
    """Only some ranks start: the bootstrap names the missing ones."""
    try:
        _env(port, rank, size)
        import rocenante

        t0 = time.monotonic()
        try:
            rocenante.Communicator.from_env(bootstrap_timeout=2)
            queue.put((rank, "built", 0.0))
        except rocenante.BootstrapError as e:
            queue.put((rank, str(e), time.monotonic() - t0))
    except BaseException:  # noqa: BLE001
        queue.put((rank, "error: " + traceback.format_exc(), 0.0))

"""Helpers for the rocenante tests: ranks as threads of this process, and dtypes with exact small-integer data."""
import threading

import numpy as np
import pytest

import rocenante

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pyproject's [test] extra installs it; without it the bf16 cases fail loudly, not skip
    BF16 = None

DTYPES = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": BF16}


@pytest.fixture(params=sorted(DTYPES))
def dtype(request):
    if DTYPES[request.param] is None:
        pytest.fail("ml_dtypes is not installed: pip install ml_dtypes (bfloat16 arrays for NumPy)")
    return DTYPES[request.param]


def rank_input(rank, count, dtype, seed=1):
    """Small integers in [-8, 8]: exact in every dtype, and their sum over up to 16 ranks too."""
    rng = np.random.default_rng(seed * 1000 + rank)
    return rng.integers(-8, 9, size=count).astype(np.float32).astype(dtype)


def run_ranks(n, body, *, world_timeout=30.0, **comm_kwargs):
    """Runs body(comm) on n threads, one rank each (Communicator.in_process); returns the n results in rank order.
    An exception on a rank is returned in its place, so tests can check what every rank saw."""
    world = rocenante.World(n, timeout=world_timeout)
    results = [None] * n

    def one(rank):
        try:
            comm = rocenante.Communicator.in_process(world, rank, **comm_kwargs)
            try:
                results[rank] = body(comm)
            finally:
                comm.close()
        except BaseException as e:  # noqa: BLE001 -- reported to the test
            results[rank] = e

    threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a rank thread did not finish within 120 s"
    return results


def no_errors(results):
    for r, v in enumerate(results):
        if isinstance(v, BaseException):
            raise AssertionError(f"rank {r} raised {type(v).__name__}: {v}") from v
    return results

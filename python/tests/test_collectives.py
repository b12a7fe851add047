"""Collectives on NumPy arrays through the host executor, ranks as threads: every dtype and algorithm, in place and
out of place, against a float64 reference, identical bytes on every rank."""
import numpy as np
import pytest

import rocenante
from conftest import no_errors, rank_input, run_ranks

RANKS = 4


def reference(count, dtype, n=RANKS, seed=1):
    return sum(rank_input(q, count, dtype, seed).astype(np.float64) for q in range(n))


@pytest.mark.parametrize("algo", ["auto", "one_shot", "two_shot", "ring"])
@pytest.mark.parametrize("in_place", [True, False], ids=["in_place", "out_of_place"])
@pytest.mark.parametrize("count", [1, 7, 1003, 65536 + 5])
def test_all_reduce_matches_reference_on_every_rank(dtype, algo, in_place, count):
    def body(comm):
        x = rank_input(comm.rank, count, dtype)
        keep = x.copy()
        if in_place:
            r = comm.all_reduce(x, algo=algo)
            assert r is x
        else:
            out = np.full(count, -1, dtype=dtype)
            r = comm.all_reduce(x, out=out, algo=algo)
            assert r is out
            assert np.array_equal(x.view(np.uint8), keep.view(np.uint8)), "out-of-place call changed its input"
        return r.copy()

    res = no_errors(run_ranks(RANKS, body))
    ref = reference(count, dtype)
    assert np.array_equal(res[0].astype(np.float64), ref)
    for r in res[1:]:
        assert r.dtype == dtype
        assert r.tobytes() == res[0].tobytes(), "ranks disagree on the result bytes"


def test_bf16_is_reduced_as_bfloat16_not_as_another_16_bit_type():
    from conftest import BF16

    if BF16 is None:
        pytest.fail("ml_dtypes is not installed")
    # 1.5 + 2.25: read as float16 bits these would sum to something else entirely.
    res = no_errors(run_ranks(2, lambda c: c.all_reduce(np.array([1.5, -3.0], BF16) if c.rank == 0
                                                        else np.array([2.25, 0.5], BF16)).copy()))
    for r in res:
        assert r.astype(np.float32).tolist() == [3.75, -2.5]


def test_all_reduce_of_a_2d_array_and_explicit_bf16_view():
    from conftest import BF16

    def body(comm):
        x = np.full((3, 5), comm.rank + 1, dtype=np.float32)
        comm.all_reduce(x)
        # bfloat16 data held as uint16 (no ml_dtypes in the caller): the extension takes an explicit dtype.
        b = np.full(6, comm.rank + 1, dtype=BF16).view(np.uint16)
        comm._raise_if_failed(comm._c.all_reduce(b, None, "auto", "bf16"))
        return x, b.view(BF16).astype(np.float32)

    for x, b in no_errors(run_ranks(3, body)):
        assert x.shape == (3, 5) and np.all(x == 6)
        assert np.all(b == 6)


@pytest.mark.parametrize("count", [1, 9, 4096])
def test_all_gather_places_rank_q_at_row_q(dtype, count):
    def body(comm):
        g = comm.all_gather(rank_input(comm.rank, count, dtype, seed=2))
        out = np.empty(RANKS * count, dtype=dtype)
        assert comm.all_gather(rank_input(comm.rank, count, dtype, seed=2), out=out) is out
        return g.copy(), out.copy()

    res = no_errors(run_ranks(RANKS, body))
    for g, flat in res:
        assert g.shape == (RANKS, count) and g.dtype == dtype
        for q in range(RANKS):
            assert g[q].tobytes() == rank_input(q, count, dtype, seed=2).tobytes()
        assert flat.tobytes() == g.tobytes()


def test_misaligned_views_are_staged_and_give_the_same_result():
    count = 1000

    def body(comm):
        raw = np.zeros(count * 4 + 8, dtype=np.uint8)
        x = raw[2:2 + count * 4].view(np.float32)  # address 2 bytes past an 8-byte boundary
        assert x.ctypes.data % 4 != 0
        x[:] = rank_input(comm.rank, count, np.float32)
        assert comm.accepts(x)  # never judged by the address
        comm.all_reduce(x)
        return x.copy()

    res = no_errors(run_ranks(RANKS, body))
    for r in res:
        assert np.array_equal(r.astype(np.float64), reference(count, np.float32))


def test_many_calls_in_sequence_keep_ranks_in_step():
    def body(comm):
        total = 0.0
        for i in range(200):
            x = np.full(1 + (i * 37) % 3000, comm.rank + i, dtype=np.float32)
            comm.all_reduce(x, algo=("one_shot", "two_shot", "ring", "auto")[i % 4])
            total += float(x[0])
        return total

    res = no_errors(run_ranks(3, body))
    expect = sum(3 * i + 3 for i in range(200))
    assert res == [expect] * 3


def test_decision_health_and_close():
    def body(comm):
        assert comm.size == 2 and comm.transport == "loopback"
        assert comm.health().ok and comm.health().state == "ok"
        assert comm.last_error == ""
        return comm.decision

    res = no_errors(run_ranks(2, body))
    assert res[0] == res[1] and res[0].startswith("transport loopback")
    # the start-up log line's algorithm clause: which algorithm a call with algo="auto" runs, up to which size
    assert "; algorithm auto (" in res[0] and "one_shot up to " in res[0], res[0]

    world = rocenante.World(1)
    comm = rocenante.Communicator.in_process(world, 0)
    comm.close()
    comm.close()  # idempotent
    assert comm.closed and not comm.health().ok
    with pytest.raises(rocenante.CollectiveError, match="rank 0: the communicator is closed"):
        comm.all_reduce(np.ones(4, np.float32))


def test_callback_bootstrap_from_python_threads():
    import threading

    n = 3
    barrier = threading.Barrier(n, timeout=30)
    slots = [None] * n

    def make_all_gather(rank):
        def all_gather(b):
            slots[rank] = b
            barrier.wait()
            joined = b"".join(slots)
            barrier.wait()  # nobody overwrites a slot before every rank has read the round
            return joined
        return all_gather

    results = [None] * n

    def one(rank):
        try:
            with rocenante.Communicator.from_callbacks(rank, n, make_all_gather(rank)) as c:
                x = np.full(100, rank + 1, np.float16)
                c.all_reduce(x)
                results[rank] = (c.transport, float(x[0]))
        except BaseException as e:  # noqa: BLE001
            results[rank] = e

    ts = [threading.Thread(target=one, args=(r,)) for r in range(n)]
    [t.start() for t in ts]
    [t.join(60) for t in ts]
    assert results == [("loopback", 6.0)] * n


def test_symmetric_buffer_inputs_are_read_in_place_with_the_staged_bytes(dtype):
    """An input written into the symmetric area (symmetric_bytes) is summed by reading every rank's area in place:
    the same bytes as the same input from an ordinary array, on every rank."""
    count = 1003

    def body(comm):
        x = rank_input(comm.rank, count, dtype)
        staged = comm.all_reduce(x.copy())
        area = comm.symmetric_buffer(str(np.dtype(dtype)) if dtype is not None else "float32")
        assert area.nbytes == 16384
        area[:count] = x
        out = np.full(count, -1, dtype=dtype)
        comm.all_reduce(area[:count], out=out)
        return staged.tobytes(), out.tobytes()

    res = no_errors(run_ranks(RANKS, body, symmetric_bytes=16384))
    for staged, inplace in res:
        assert inplace == staged
        assert inplace == res[0][1]


def test_ranks_that_disagree_on_the_symmetric_offset_fail_instead_of_summing_the_wrong_bytes():
    def body(comm):
        area = comm.symmetric_buffer("float32")
        start = 4 if comm.rank == 1 else 0  # rank 1's input 16 bytes further: peers would read the wrong place
        area[start:start + 64] = comm.rank + 1
        with pytest.raises(rocenante.CollectiveError, match="mismatch|different"):
            comm.all_reduce(area[start:start + 64], out=np.zeros(64, np.float32))
        return True

    no_errors(run_ranks(2, body, symmetric_bytes=4096, timeout=5.0))


def test_no_symmetric_area_is_a_clear_error():
    def body(comm):
        with pytest.raises(rocenante.ConfigError, match="symmetric_bytes"):
            comm.symmetric_buffer()
        return True

    no_errors(run_ranks(2, body))

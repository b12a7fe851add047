"""Bad input: Python exceptions carrying the C++ message and naming the rank; the peers of a rank that refuses a
call are told (they raise too, instead of waiting out the timeout); accepts() says no without poisoning."""
import time

import numpy as np
import pytest

import rocenante
from conftest import run_ranks

MAX = 4096  # bytes


def expect_refusal_everywhere(results, bad_rank, own_words):
    """The bad rank raises CollectiveError with its own reason; every peer raises naming the bad rank."""
    for r, e in enumerate(results):
        assert isinstance(e, rocenante.CollectiveError), f"rank {r} returned {e!r}"
        if r == bad_rank:
            assert f"rocenante rank {bad_rank}:" in str(e) and own_words in str(e), str(e)
        else:
            assert f"rank {bad_rank}" in str(e), f"rank {r}'s error does not name rank {bad_rank}: {e}"


@pytest.mark.parametrize("case, words", [
    ("too_big", "exceeds max_bytes 4096; raise max_bytes on every rank"),
    ("int32", "has dtype int32; rocenante reduces float32, float16 and bfloat16"),
    ("strided", "is not C-contiguous"),
    ("empty", "count is zero"),
    ("short_out", "output has 10 elements, the input 11"),
    ("dtype_out", "output dtype differs"),
    ("bad_algo", 'algo must be "auto", "one_shot", "two_shot" or "ring"'),
    ("read_only", "input is read-only; pass a writable array"),
    ("read_only_out", "output is read-only"),
    ("not_an_array", "input is not an array (DLPack or buffer protocol): got list"),
    ("stream", "stream applies to GPU arrays"),
])
def test_bad_call_on_one_rank_raises_there_and_on_its_peers(case, words):
    bad = 1

    def body(comm):
        x = np.ones(11, np.float32)
        kw = {}
        if comm.rank == bad:
            if case == "too_big":
                x = np.ones(MAX // 4 + 1, np.float32)
            elif case == "int32":
                x = np.ones(11, np.int32)
            elif case == "strided":
                x = np.ones(22, np.float32)[::2]
            elif case == "empty":
                x = np.ones(0, np.float32)
            elif case == "short_out":
                kw["out"] = np.ones(10, np.float32)
            elif case == "dtype_out":
                kw["out"] = np.ones(11, np.float16)
            elif case == "bad_algo":
                kw["algo"] = "fastest"
            elif case == "read_only":
                x.flags.writeable = False  # in place: the input is the output
            elif case == "read_only_out":
                kw["out"] = np.ones(11, np.float32)
                kw["out"].flags.writeable = False
            elif case == "not_an_array":
                x = [1.0] * 11
            elif case == "stream":
                kw["stream"] = 7
        t0 = time.monotonic()
        try:
            comm.all_reduce(x, **kw)
        except rocenante.CollectiveError as e:
            assert time.monotonic() - t0 < 5, "the refusal waited for a timeout instead of being told"
            assert not comm.health().ok  # a refused call poisons, as in C++
            with pytest.raises(rocenante.CollectiveError):  # and every later call fails fast
                comm.all_reduce(np.ones(11, np.float32))
            return e
        return "no error"

    expect_refusal_everywhere(run_ranks(3, body, max_bytes=MAX, timeout=20), bad, words)


def test_collective_error_carries_the_status():
    def body(comm):
        try:
            comm.all_reduce(np.ones(3, np.int64) if comm.rank == 0 else np.ones(3, np.float32))
        except rocenante.CollectiveError as e:
            return e.status

    own, peer = run_ranks(2, body)
    assert own == "not_supported"
    assert peer in ("mismatch", "poisoned")  # the peer saw rank 0's abort flag inside its own call


def test_accepts_is_false_without_poisoning_and_the_next_call_runs():
    def body(comm):
        refused = {
            "too_big": np.ones(MAX // 2 + 1, np.float16),
            "int32": np.ones(8, np.int32),
            "float64": np.ones(8, np.float64),
            "strided": np.ones(16, np.float32)[::2],
            "empty": np.ones(0, np.float32),
        }
        answers = {k: comm.accepts(v) for k, v in refused.items()}
        reasons = {k: comm.why_not(v) for k, v in refused.items()}
        gather_ring = comm.why_not(np.ones(8, np.float32), algo="ring", collective="all_gather")
        fits = comm.accepts(np.ones(MAX // 4, np.float32), algo="ring")
        assert comm.health().ok and comm.last_error == ""
        x = np.full(8, comm.rank + 1.0, np.float32)
        comm.all_reduce(x)  # nothing was consumed or poisoned by the questions
        return answers, reasons, gather_ring, fits, x.tolist()

    for answers, reasons, gather_ring, fits, x in run_ranks(2, body, max_bytes=MAX):
        assert answers == {k: False for k in answers}
        assert "exceeds max_bytes 4096" in reasons["too_big"]
        assert "dtype float64" in reasons["float64"]
        assert gather_ring == "all_gather runs one_shot only"
        assert fits is True
        assert x == [3.0] * 8


def _set_up_errors(**per_rank):
    """Each of 2 in-process ranks sets up with its own keyword values (name -> (rank 0's, rank 1's)); returns what
    each raised (None where it did not)."""
    import threading

    world = rocenante.World(2, timeout=20)
    errs = [None, None]

    def one(rank):
        try:
            rocenante.Communicator.in_process(world, rank, **{k: v[rank] for k, v in per_rank.items()})
        except rocenante.Error as e:
            errs[rank] = e

    ts = [threading.Thread(target=one, args=(r,)) for r in range(2)]
    [t.start() for t in ts]
    [t.join(60) for t in ts]
    return errs


def test_set_up_with_different_options_fails_on_every_rank_naming_the_field():
    for e in _set_up_errors(max_bytes=(4096, 8192)):
        # The start-up vote reports a set-up that failed on some rank as "no transport usable", with each rank's reason.
        assert isinstance(e, rocenante.TransportError) and isinstance(e, rocenante.Error), repr(e)
        assert "field 'max_bytes' is 4096 on rank 0 but 8192 on rank 1" in str(e)
        assert "capacity_bytes" not in str(e)  # the C++ name of max_bytes


def test_set_up_with_different_timeouts_names_the_python_option_in_seconds():
    for e in _set_up_errors(timeout=(1.0, 2.5)):
        assert isinstance(e, rocenante.Error), repr(e)
        assert "field 'timeout' is 1 s on rank 0 but 2.5 s on rank 1" in str(e)


def test_messages_count_calls_from_the_first_one_and_never_show_set_up_sequences():
    """Set-up runs collectives of its own; messages number this communicator's calls from 1."""

    def body(comm):
        x = np.ones(8, np.float32) if comm.rank != 1 else np.ones(8, np.int32)  # rank 1 refuses its first call
        try:
            comm.all_reduce(x)
        except rocenante.CollectiveError as e:
            return str(e), comm.health().message, comm.last_error
        return None

    for r, got in enumerate(run_ranks(3, body, max_bytes=MAX)):
        assert got is not None, f"rank {r} did not raise"
        raised, health, last = got
        assert "call 1 " in health, f"rank {r}: {health}"  # every rank's health names the call
        if r != 1:  # the peers' errors name rank 1 and the call; rank 1's own is the reason it refused
            assert "rank 1 refused the collective at call 1 " in raised, f"rank {r}: {raised}"
        for text in got:
            assert "sequence" not in text, f"rank {r}: {text}"


def test_bad_option_value_is_a_config_error():
    with pytest.raises(rocenante.ConfigError, match='rocenante rank 0: transport must be "auto"'):
        rocenante.Communicator.in_process(rocenante.World(1), 0, transport="carrier-pigeon")
    with pytest.raises(rocenante.ConfigError, match="outside"):
        rocenante.Communicator.in_process(rocenante.World(1), 3)


@pytest.mark.skipif(not rocenante.has_tcp_bootstrap, reason="this build has no store bootstrap")
def test_a_malformed_rank_variable_is_named_by_its_value_not_as_a_rank(monkeypatch):
    for v in ("ROCENANTE_RANK", "ROCENANTE_WORLD_SIZE", "RANK", "WORLD_SIZE", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("ROCENANTE_BOOTSTRAP", "127.0.0.1:1")  # nobody listens: the failure report gives up at once
    monkeypatch.setenv("RANK", "abc")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(rocenante.ConfigError) as info:
        rocenante.Communicator.from_env(bootstrap_timeout=1.0)
    assert "RANK='abc' is not an integer in [0, 1]" in str(info.value), str(info.value)
    assert "rocenante rank abc" not in str(info.value), str(info.value)


def test_a_raising_bootstrap_callback_is_a_bootstrap_error():
    def all_gather(b):
        raise OSError("the store is down")

    with pytest.raises(rocenante.BootstrapError, match="rank 0: the all_gather callback raised OSError: the store is down"):
        rocenante.Communicator.from_callbacks(0, 1, all_gather)


def test_a_rank_that_never_sets_up_is_named_by_the_bootstrap():
    world = rocenante.World(2, timeout=1.0)
    t0 = time.monotonic()
    with pytest.raises(rocenante.BootstrapError, match=r"rank\(s\) 1 that never arrived"):
        rocenante.Communicator.in_process(world, 0)
    assert time.monotonic() - t0 < 10


def test_ranks_asking_for_different_transports_get_config_mismatch_error():
    for e in _set_up_errors(transport=("loopback", "auto")):
        assert isinstance(e, rocenante.ConfigMismatchError) and isinstance(e, rocenante.ConfigError), repr(e)
        assert "ROCENANTE_TRANSPORT is loopback on rank 0 but auto on rank 1" in str(e)


def test_from_process_group_carries_set_up_through_all_gather_object(monkeypatch):
    """torch is not needed for this check: a stand-in torch.distributed with the three calls the adapter makes,
    over threads, so that the adapter's exchange (bytes in, rank-ordered bytes out) is what is tested."""
    import sys
    import threading
    import types

    n = 3
    barrier = threading.Barrier(n, timeout=30)
    slots = [None] * n
    ranks = threading.local()
    dist = types.ModuleType("torch.distributed")
    dist.get_rank = lambda group=None: ranks.rank
    dist.get_world_size = lambda group=None: n

    def all_gather_object(out, obj, group=None):
        slots[ranks.rank] = obj
        barrier.wait()
        out[:] = list(slots)
        barrier.wait()

    dist.all_gather_object = all_gather_object
    torch = types.ModuleType("torch")
    torch.distributed = dist
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)

    results = [None] * n

    def one(rank):
        ranks.rank = rank
        try:
            with rocenante.Communicator.from_process_group(None, device="cpu") as c:
                x = np.full(10, rank, np.float32)
                c.all_reduce(x)
                results[rank] = (c.rank, c.size, float(x[0]))
        except BaseException as e:  # noqa: BLE001
            results[rank] = e

    ts = [threading.Thread(target=one, args=(r,)) for r in range(n)]
    [t.start() for t in ts]
    [t.join(60) for t in ts]
    assert results == [(r, n, 3.0) for r in range(n)]
    if not rocenante.has_gpu:  # a build with nvcc builds a GPU communicator there (test_gpu.py)
        with pytest.raises(rocenante.ConfigError, match="host executor only"):
            rocenante.Communicator.from_process_group(None, device="cuda:0")


def test_a_read_only_input_is_fine_out_of_place():
    def body(comm):
        x = np.full(5, comm.rank + 1.0, np.float32)
        x.flags.writeable = False
        return comm.all_reduce(x, out=np.empty(5, np.float32)).tolist()

    assert run_ranks(2, body) == [[3.0] * 5] * 2


def test_all_gather_of_a_non_array_is_refused_on_every_rank():
    def body(comm):
        try:
            comm.all_gather([1.0, 2.0] if comm.rank == 0 else np.ones(2, np.float32))
        except rocenante.CollectiveError as e:
            return str(e)

    own, peer = run_ranks(2, body)
    assert own.startswith("rocenante rank 0: input is not an array"), own
    assert "rank 0" in peer, peer

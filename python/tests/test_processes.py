"""Ranks as processes (multiprocessing, spawn) over the store bootstrap (Communicator.from_env, bootstrap::tcp on
127.0.0.1): the transport the ranks vote for is socket; results exact and byte-identical across processes; a rank
killed with SIGKILL is named by every survivor within the timeout."""
import multiprocessing as mp
import queue as queue_mod
import socket

import numpy as np
import pytest

import proc_ranks
import rocenante
from conftest import BF16, rank_input

pytestmark = pytest.mark.skipif(not rocenante.has_tcp_bootstrap,
                                reason="bootstrap::tcp not yet on this branch (rocenante.has_tcp_bootstrap is False)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_processes(target, size, *args, ranks=None, expect=None, limit=120):
    """Starts `target(port, rank, size, queue, *args)` for each rank in `ranks` (default: all); waits for `expect`
    messages (default: one per rank) and returns them sorted by rank, with the processes' exit codes."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = {r: ctx.Process(target=target, args=(port, r, size, q) + args) for r in (ranks or range(size))}
    for p in procs.values():
        p.start()
    messages = []
    try:
        for _ in range(len(procs) if expect is None else expect):
            messages.append(q.get(timeout=limit))
    except queue_mod.Empty:
        pass
    for p in procs.values():
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
            p.join()
    return sorted(messages, key=lambda m: m[0]), {r: p.exitcode for r, p in procs.items()}


def test_processes_reduce_every_dtype_over_the_socket_transport():
    size = 3
    msgs, codes = run_processes(proc_ranks.collectives, size)
    assert len(msgs) == size, f"only {len(msgs)} of {size} ranks reported: {msgs} (exit codes {codes})"
    for rank, transport, out in msgs:
        assert transport == "socket", f"rank {rank}: {out}"
    dtypes = {"f32": np.float32, "f16": np.float16, "bf16": BF16}
    for (name, algo), data in msgs[0][2].items():
        dt = dtypes[name]
        got = np.frombuffer(data, dtype=dt)
        if algo == "gather":
            want = np.concatenate([rank_input(q, 33, dt, seed=2) for q in range(size)])
            assert got.tobytes() == want.tobytes(), (name, algo)
        else:
            ref = sum(rank_input(q, 1001, dt).astype(np.float64) for q in range(size))
            assert np.array_equal(got.astype(np.float64), ref), (name, algo)
        for other in msgs[1:]:
            assert other[2][(name, algo)] == data, f"rank {other[0]} differs from rank 0 on {name} {algo}"


def test_a_killed_process_is_named_by_every_survivor():
    size, victim = 3, 2
    msgs, codes = run_processes(proc_ranks.killed, size, victim, expect=size - 1)
    assert codes[victim] == -9, f"rank {victim} exit code {codes[victim]}"
    assert [m[0] for m in msgs] == [r for r in range(size) if r != victim], msgs
    for rank, message, waited, health, close in msgs:
        assert message.startswith(f"rocenante rank {rank}:"), message
        assert f"rank {victim}" in message, f"rank {rank}'s error does not name rank {victim}: {message}"
        assert waited < 2 + 3, f"rank {rank} waited {waited:.1f} s with a 2 s timeout"
        assert f"rank {victim}" in health, health
        assert float(close.split()[-1]) < 5, close


def test_a_rank_that_never_starts_is_named_at_set_up():
    msgs, _ = run_processes(proc_ranks.never_started, 3, ranks=[0, 1])
    assert len(msgs) == 2, msgs
    for rank, message, waited in msgs:
        assert "rank(s) 2 did not connect within 2000 ms" in message, message
        assert waited < 2 + 10, waited

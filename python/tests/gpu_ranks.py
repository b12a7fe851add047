"""One rank of the GPU tests, launched by torchrun (python/tests/test_gpu.py starts it with 2 and 4 processes; several
processes may share one GPU: cuda_ipc maps windows between processes of one GPU).

    python -m torch.distributed.run --standalone --nproc-per-node 4 python/tests/gpu_ranks.py

Every rank takes GPU LOCAL_RANK % (GPUs visible), joins a gloo process group (the set-up exchange) and runs the cases
in order: all-reduce of every dtype x algorithm x in place / out of place at several counts, exact against the sum of
every rank's input (integer-valued, so the sum is exact in every dtype) and byte-identical across ranks; all-gather;
accepts()/why_not; the torch custom ops; one all-reduce captured in a torch.cuda.CUDAGraph and replayed 100 times with
new inputs, checked after each replay; a torch.compile'd module with the row-parallel linear layer; a refused call
(rank 0 passes a CPU tensor) raising on rank 0 and poisoning every rank. Prints one line per case and
"rank R: PASS (N cases)" or "rank R: FAIL ..." at the end; exit status 0 only when every case passed.
"""
import hashlib
import os
import sys
import time
import traceback

os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")  # before CUDA starts: no lazy kernel load while a peer spins

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import rocenante  # noqa: E402
import rocenante.torch_ops as rops  # noqa: E402

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
ALGOS = ("one_shot", "two_shot", "ring", "auto")
COUNTS = (1, 1003, 12288, 65536 + 5)  # one element, not a whole packet, a decode-size row (24 KiB of bf16), larger
MAX_BYTES = 1 << 20

rank = int(os.environ["RANK"])
size = int(os.environ["WORLD_SIZE"])
local = int(os.environ.get("LOCAL_RANK", rank))
device = torch.device("cuda", local % torch.cuda.device_count())
passed = []


def log(msg):
    print(f"rank {rank}: {msg}", flush=True)


def rank_input(q, count, dtype, seed):
    """Rank q's input: integers in [-8, 8] from a generator seeded by (seed, q), so every rank can make every input."""
    g = torch.Generator().manual_seed(seed * 1000 + q)
    return torch.randint(-8, 9, (count,), generator=g).to(dtype)


def reference(count, dtype, seed):
    """torch.sum over ranks of every rank's input (exact: small integers), rounded once to dtype, on this GPU."""
    every = torch.stack([rank_input(q, count, torch.float64, seed) for q in range(size)])
    return torch.sum(every, dim=0).to(dtype).to(device)


def digest(t):
    t = t.detach().contiguous()
    return hashlib.sha256(t.view(torch.uint8).cpu().numpy().tobytes()).hexdigest()


def same_bytes_everywhere(t, what):
    """The bytes of t are identical on every rank (gathered over gloo)."""
    mine = digest(t)
    every = [None] * size
    dist.all_gather_object(every, mine)
    if any(d != mine for d in every):
        raise AssertionError(f"{what}: bytes differ between ranks ({sorted(set(every))})")


def exact(got, want, what):
    torch.cuda.synchronize()
    if not torch.equal(got, want):
        bad = (got != want).nonzero()
        i = int(bad[0, 0]) if bad.numel() else -1
        raise AssertionError(f"{what}: {bad.shape[0]} elements differ, first at {i}: got {got.flatten()[i].item()}, "
                             f"expected {want.flatten()[i].item()}")


def case(name):
    def wrap(fn):
        def run(*args):
            t0 = time.perf_counter()
            fn(*args)
            passed.append(name)
            log(f"ok {name} ({time.perf_counter() - t0:.2f} s)")
        run.case_name = name
        return run
    return wrap


@case("all_reduce: every dtype x algorithm x in place / out of place x count, exact and byte-identical")
def all_reduce_exact(comm):
    seed = 1
    for dname, dtype in DTYPES.items():
        for algo in ALGOS:
            for count in COUNTS:
                for in_place in (True, False):
                    seed += 1
                    what = f"{dname} {algo} count {count} {'in place' if in_place else 'out of place'}"
                    x = rank_input(rank, count, dtype, seed).to(device)
                    keep = x.clone()
                    assert comm.accepts(x, algo), f"{what}: accepts() is false: {comm.why_not(x, algo)}"
                    if in_place:
                        got = comm.all_reduce(x, algo=algo)
                        assert got is x
                    else:
                        out = torch.full_like(x, float("nan"))
                        got = comm.all_reduce(x, out=out, algo=algo)
                        assert got is out
                        exact(x, keep, what + ": the input changed")
                    exact(got, reference(count, dtype, seed), what)
                    same_bytes_everywhere(got, what)


@case("all_reduce on an explicit stream (int and torch.cuda.Stream), ordered by events")
def all_reduce_on_a_stream(comm):
    s = torch.cuda.Stream(device)
    for i, handle in enumerate((s.cuda_stream, s)):
        x = rank_input(rank, 4096, torch.bfloat16, 500 + i).to(device)
        s.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(s):
            out = torch.empty_like(x)
        comm.all_reduce(x, out=out, stream=handle)
        torch.cuda.current_stream(device).wait_stream(s)
        exact(out, reference(4096, torch.bfloat16, 500 + i), f"stream given as {type(handle).__name__}")


@case("all_gather: every dtype, rank-major, exact; a given output and a new one")
def all_gather_exact(comm):
    for dname, dtype in DTYPES.items():
        for count in (1, 1003, 8192):
            seed = 100 + count
            x = rank_input(rank, count, dtype, seed).to(device)
            want = torch.stack([rank_input(q, count, dtype, seed) for q in range(size)]).to(device)
            exact(comm.all_gather(x), want, f"all_gather {dname} count {count}")
            out = torch.empty(size * count, dtype=dtype, device=device)
            assert comm.all_gather(x, out=out) is out
            exact(out.view(size, count), want, f"all_gather {dname} count {count} into a given output")


@case("accepts()/why_not: refusals without poisoning (CPU tensor, over max_bytes, int32, non-contiguous)")
def refusals_without_poison(comm):
    cases = {
        "a CPU tensor": torch.ones(8),
        "over max_bytes": torch.ones(MAX_BYTES // 4 + 1, device=device),
        "int32": torch.ones(8, dtype=torch.int32, device=device),
        "non-contiguous": torch.ones(8, 8, device=device).t(),
    }
    for what, x in cases.items():
        assert not comm.accepts(x), f"{what}: accepted"
        assert comm.why_not(x), f"{what}: no reason"
    assert comm.why_not(torch.ones(8, device=device), collective="all_gather") == ""
    h = comm.health()
    assert h.ok and h.state == "ok", h
    assert comm.failures == 0 and comm.last_error == "", (comm.failures, comm.last_error)


@case("torch custom ops: all_reduce (out of place), all_reduce_ (in place), all_gather")
def custom_ops(comm, handle):
    for dname, dtype in DTYPES.items():
        x = rank_input(rank, 3000, dtype, 200).to(device).view(30, 100)
        keep = x.clone()
        want = reference(3000, dtype, 200).view(30, 100)
        y = torch.ops.rocenante.all_reduce(x, handle, "auto")
        exact(y, want, f"rocenante::all_reduce {dname}")
        exact(x, keep, f"rocenante::all_reduce {dname}: the input changed")
        torch.ops.rocenante.all_reduce_(x, handle, "ring")
        exact(x, want, f"rocenante::all_reduce_ {dname}")
        g = torch.ops.rocenante.all_gather(keep, handle)
        assert g.shape == (size, 30, 100), g.shape
        exact(g[rank], keep, f"rocenante::all_gather {dname}: this rank's row")


@case("CUDA graph: one all_reduce captured, replayed 100 times with new inputs, checked after each replay")
def cuda_graph(comm, handle):
    count, dtype = 6144, torch.bfloat16
    x = torch.zeros(count, dtype=dtype, device=device)
    out = torch.empty_like(x)
    side = torch.cuda.Stream(device)  # warm-up off the default stream, as torch asks before a capture
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        comm.all_reduce(x, out=out)
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        comm.all_reduce(x, out=out)  # torch's current stream is the capture stream
        y = torch.ops.rocenante.all_reduce(x, handle, "one_shot")  # the custom op too, out of a graph-pool tensor
    for i in range(100):
        seed = 1000 + i
        x.copy_(rank_input(rank, count, dtype, seed).to(device, non_blocking=True))
        g.replay()
        want = reference(count, dtype, seed)
        exact(out, want, f"graph replay {i}")
        exact(y, want, f"graph replay {i} (custom op)")
    same_bytes_everywhere(out, "the last graph replay")


class TinyMlp(torch.nn.Module):
    """The down-projection of a tensor-parallel MLP: relu of a column-parallel shard, then RowParallelLinear."""

    def __init__(self, up, down, handle):
        super().__init__()
        n = up.out_features // size
        self.up = torch.nn.Linear(up.in_features, n, bias=False, device=device, dtype=up.weight.dtype)
        with torch.no_grad():
            self.up.weight.copy_(up.weight[rank * n:(rank + 1) * n])
        self.down = rops.RowParallelLinear.from_linear(down, handle)

    def forward(self, x):
        return self.down(torch.relu(self.up(x))) + x


@case("torch.compile: a module with the row-parallel linear layer (custom op in the graph), vs eager and 1-rank math")
def compiled_module(handle):
    torch.manual_seed(7)  # the same full layers on every rank
    hidden, ffn = 256, 512
    up = torch.nn.Linear(hidden, ffn, bias=False, device=device)
    down = torch.nn.Linear(ffn, hidden, bias=True, device=device)
    with torch.no_grad():  # integer-valued weights and input: every sum below is exact in fp32
        for p in (up.weight, down.weight, down.bias):
            p.copy_(torch.randint(-2, 3, p.shape, device=device).float())
    x = torch.randint(-2, 3, (4, hidden), device=device).float()
    mod = TinyMlp(up, down, handle)
    with torch.no_grad():
        full = down(torch.relu(up(x))) + x
        eager = mod(x)
        compiled = torch.compile(mod, fullgraph=True)
        got = compiled(x)
        got2 = compiled(x * 2)
    exact(eager, full, "eager TP module vs single-rank math")
    exact(got, full, "compiled TP module vs single-rank math")
    exact(got2, mod(x * 2), "compiled TP module, second call")
    same_bytes_everywhere(got, "compiled output")


@case("a refused call: rank 0 passes a CPU tensor; it raises naming rank 0, every rank ends poisoned")
def refused_call(comm):
    x = torch.ones(256, device=device)
    if rank == 0:
        try:
            comm.all_reduce(torch.ones(256))
        except rocenante.CollectiveError as e:
            assert str(e).startswith("rocenante rank 0:") and "CUDA" in str(e), str(e)
        else:
            raise AssertionError("rank 0: the CPU tensor was not refused")
    else:
        comm.all_reduce(x)  # enqueued; the peer's refusal reaches this rank's kernel, which poisons it
    torch.cuda.synchronize()
    deadline = time.time() + 30
    while comm.health().ok and time.time() < deadline:
        time.sleep(0.05)
    h = comm.health()
    assert not h.ok, f"rank {rank}: still healthy after rank 0's refused call"
    if rank != 0:
        assert "rank 0" in h.message, h.message
        assert comm.failures >= 1, comm.failures
    try:
        comm.all_reduce(x)
    except rocenante.CollectiveError as e:
        assert e.status == "poisoned", (e.status, str(e))
    else:
        raise AssertionError("a call on a poisoned communicator did not raise")


def main():
    torch.cuda.set_device(device)
    dist.init_process_group("gloo")
    log(f"device {device} ({torch.cuda.get_device_name(device)}), world {size}, torch {torch.__version__}, "
        f"MPS {'on' if os.path.exists('/tmp/nvidia-mps') else 'not seen'}")
    # Processes sharing one GPU time-slice it, so a wait for a peer can take a while: 60 s per wait here. The
    # torch.compile case has its own communicator with a longer bound, as ranks finish compiling at different times.
    comm = rocenante.Communicator.from_process_group(None, device=device, max_bytes=MAX_BYTES, timeout=60)
    log(f"{comm!r}: {comm.decision}")
    handle = rops.register(comm)
    try:
        all_reduce_exact(comm)
        all_reduce_on_a_stream(comm)
        all_gather_exact(comm)
        refusals_without_poison(comm)
        custom_ops(comm, handle)
        cuda_graph(comm, handle)
        torch.cuda.synchronize()
        with rocenante.Communicator.from_env(device=device, max_bytes=MAX_BYTES, timeout=600) as slow:
            h2 = rops.register(slow)
            compiled_module(h2)
            torch.cuda.synchronize()
            rops.unregister(h2)
        h = comm.health()
        assert h.ok and comm.failures == 0, (h, comm.failures)
        refused_call(comm)
    except BaseException as e:  # noqa: BLE001
        traceback.print_exc()
        log(f"FAIL after {len(passed)} cases: {type(e).__name__}: {e}")
        log(f"health {comm.health()!r}, last_error {comm.last_error!r}, failures {comm.failures}")
        sys.stdout.flush()
        os._exit(1)  # the peers may be inside a collective: do not wait for them in teardown
    rops.unregister(handle)
    comm.close()
    log(f"PASS ({len(passed)} cases)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""examples/05_tp_mlp.py — the tensor-parallel MLP decode step of 02_tp_mlp_decode.cu written with torch and the
rocenante package, ranks as processes:

  up_r  = silu(x @ W_up[r].T)         column-parallel up-projection: rank r holds F/n rows of W_up      (torch)
  y_r   = up_r @ W_down[:, r].T       row-parallel down-projection: rank r holds F/n columns             (torch)
  h     = sum_r y_r + x               Communicator.all_reduce in place, then the residual add (a second rounding:
                                      the C++ example fuses the add into the all-reduce's epilogue, Python cannot)
  out   = rmsnorm(h) * gamma

The result is checked against single-rank math (the same bf16 weights unsplit, fp32 down-projection, residual and
RMSNorm; every element within 1/64 * (1 + |reference|)), every rank must hold identical bytes, and each step is timed
per algorithm, eager (CUDA events per step) and as a CUDA graph of several steps, beside torch.distributed's NCCL
all_reduce where NCCL can run: NCCL puts at most one rank of a communicator on a GPU, so with several processes
sharing one GPU its row is skipped with that reason (run a world of one to see it beside the library).

  torchrun --nproc-per-node 4 examples/05_tp_mlp.py     (4 processes; on one GPU they share it and time-slice)
  torchrun --nproc-per-node 1 examples/05_tp_mlp.py     (world of one: the NCCL row runs too)
  python examples/05_tp_mlp.py --tokens 4               (a world of one without torchrun)

Each rank takes GPU LOCAL_RANK % (GPUs visible). With n processes on one GPU the step time is that of n ranks
time-slicing one GPU (without MPS their kernels do not overlap), not a tensor-parallel speed-up. Rank 0 prints the
table and PASS (exit 0) or FAIL (exit 1); SKIP with the reason (exit 77) without a GPU, torch, or a rocenante built
with nvcc (pip install . -Csetup-args=-Dcuda=enabled).
"""
import argparse
import hashlib
import os
import socket
import statistics
import sys

# ---- configuration --------------------------------------------------------------------------------------------
HIDDEN = 4096          # H: model width (Llama-3-8B)
FFN = 14336            # F: MLP width, split over the ranks (must divide by the world size)
RMS_EPS = 1e-5
WARMUP_STEPS = 5
EAGER_STEPS = 50       # timed eager steps (one sample each)
GRAPH_STEPS = 10       # steps captured in one CUDA graph
GRAPH_LAUNCHES = 10    # timed launches of that graph (one sample each)
TOLERANCE = 1.0 / 64   # |tp - reference| <= TOLERANCE * (1 + |reference|)
ALGOS = ("one_shot", "ring", "auto")
# -----------------------------------------------------------------------------------------------------------------


# Several ranks on one GPU: load every kernel when CUDA starts, not at its first launch, which may wait for a peer's
# spinning kernel (docs/api.md, harness rule). Read when CUDA initialises, so before torch touches the GPU.
os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)


try:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
except ImportError:
    skip("torch is not installed")
import rocenante  # noqa: E402

if not rocenante.has_gpu:
    skip("this build of rocenante has no GPU executor (pip install . -Csetup-args=-Dcuda=enabled)")
if not torch.cuda.is_available():
    skip("torch sees no CUDA device")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=1, help="tokens per decode step (rows of x)")
    args = ap.parse_args()
    if "RANK" not in os.environ:  # a world of one without a launcher
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if FFN % n != 0:
        raise SystemExit(f"the world size {n} must divide FFN = {FFN}")
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("gloo")  # the set-up exchange, the checks' hashes and the timings' gather

    def gather(obj):
        every = [None] * n
        dist.all_gather_object(every, obj)
        return every

    # ---- weights: the same full matrices on every rank (seeded on the GPU), then this rank's shards -------------
    k, b = FFN // n, args.tokens
    g = torch.Generator(device=dev).manual_seed(1234)
    bf16 = torch.bfloat16

    def uniform(*shape, scale=1.0, shift=0.0):
        return (shift + scale * (2 * torch.rand(*shape, generator=g, device=dev) - 1)).to(bf16)

    w_up = uniform(FFN, HIDDEN, scale=1 / HIDDEN ** 0.5)
    w_down = uniform(HIDDEN, FFN, scale=1 / FFN ** 0.5)
    gamma = uniform(HIDDEN, scale=0.1, shift=1.0)
    x = uniform(b, HIDDEN)
    w_up_r = w_up[rank * k:(rank + 1) * k].contiguous()
    w_down_r = w_down[:, rank * k:(rank + 1) * k].contiguous()

    def rmsnorm(h):
        h = h.float()
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + RMS_EPS) * gamma.float()

    with torch.no_grad():
        up_ref = F.silu((x.float() @ w_up.float().T).to(bf16).float()).to(bf16)
        reference = rmsnorm(up_ref.float() @ w_down.float().T + x.float())
    del w_up, w_down

    # ---- the communicators ------------------------------------------------------------------------------------
    comm = rocenante.Communicator.from_process_group(None, device=dev, max_bytes=max(1 << 20, b * HIDDEN * 2),
                                                     timeout=60)
    places = gather((socket.gethostname(), str(getattr(torch.cuda.get_device_properties(dev), "uuid", dev.index))))
    shared_gpu = len(set(map(str, places))) < n
    nccl_group, nccl_note = None, ""
    if shared_gpu:
        nccl_note = (f"skipped: NCCL puts at most one rank of a communicator on a GPU, and these {n} ranks share "
                     f"{len(set(map(str, places)))} GPU(s); run a world of one (--nproc-per-node 1) for this row")
    elif not dist.is_nccl_available():
        nccl_note = "skipped: this torch has no NCCL backend"
    else:
        try:
            nccl_group = dist.new_group(backend="nccl")
        except Exception as e:  # noqa: BLE001 -- reported in the table, the library's rows still run
            nccl_note = f"skipped: NCCL process group failed: {e}"

    def all_reduce(impl, y):
        if impl == "nccl":
            dist.all_reduce(y, group=nccl_group)
        else:
            comm.all_reduce(y, algo=impl)

    def step(impl):
        up = F.silu(x @ w_up_r.T)
        y = up @ w_down_r.T
        all_reduce(impl, y)
        return rmsnorm(y + x).to(bf16)

    impls = list(ALGOS) + (["nccl"] if nccl_group is not None else [])
    rows, errors, ok = {}, [], True
    with torch.no_grad():
        for impl in impls:
            out = step(impl)
            torch.cuda.synchronize()
            err = ((out.float() - reference).abs() / (1 + reference.abs())).max().item()
            digest = hashlib.sha256(out.view(torch.uint16).cpu().numpy().tobytes()).hexdigest()
            identical = len(set(gather(digest))) == 1
            good = err <= TOLERANCE and identical
            ok &= good

            for _ in range(WARMUP_STEPS):
                step(impl)
            torch.cuda.synchronize()
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for _ in range(EAGER_STEPS)]
            for e0, e1 in events:
                e0.record()
                step(impl)
                e1.record()
            torch.cuda.synchronize()
            eager = sorted(1000 * e0.elapsed_time(e1) for e0, e1 in events)

            side = torch.cuda.Stream(dev)  # warm-up off the default stream before a capture, as torch asks
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                step(impl)
            torch.cuda.current_stream(dev).wait_stream(side)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(GRAPH_STEPS):
                    captured = step(impl)
            graph.replay()
            torch.cuda.synchronize()
            graph_err = ((captured.float() - reference).abs() / (1 + reference.abs())).max().item()
            good_graph = graph_err <= TOLERANCE
            ok &= good_graph
            samples = []
            for _ in range(GRAPH_LAUNCHES):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                graph.replay()
                e1.record()
                e1.synchronize()
                samples.append(1000 * e0.elapsed_time(e1) / GRAPH_STEPS)
            samples.sort()
            del graph
            mine = (statistics.median(eager), eager[min(len(eager) - 1, int(0.99 * len(eager)))],
                    statistics.median(samples), samples[-1])
            slowest = [max(v) for v in zip(*gather(mine))]
            rows[impl] = (err, identical, graph_err, slowest)
            if not good or not good_graph:
                errors.append(f"{impl}: max relative error {err:.3g} eager, {graph_err:.3g} graph; identical bytes "
                              f"across ranks: {identical}")

    health = comm.health()
    ok &= health.ok and comm.failures == 0
    if rank == 0:
        print(f"05_tp_mlp: TP={n} ranks (processes) on {len(set(map(str, places)))} GPU(s) "
              f"[{torch.cuda.get_device_name(dev)}], tokens={b}, hidden={HIDDEN}, ffn={FFN}, torch {torch.__version__}")
        print(f"rocenante: {comm.decision}")
        print(f"\ncheck against single-rank math (tolerance {TOLERANCE:.4g} * (1 + |ref|)), eager and graph; every "
              "rank's bytes identical:")
        for impl, (err, identical, graph_err, _) in rows.items():
            good = err <= TOLERANCE and graph_err <= TOLERANCE and identical
            print(f"  {impl:<9} max err {err:.3g} eager, {graph_err:.3g} graph, identical: {identical}  "
                  f"{'ok' if good else 'WRONG'}")
        print(f"\nstep time in us (whole MLP step: 2 GEMMs, SiLU, all-reduce, residual, RMSNorm), slowest rank:")
        print(f"  eager: median/p99 over {EAGER_STEPS} steps (CUDA events per step); graph: {GRAPH_STEPS} steps per "
              f"graph, median/max over {GRAPH_LAUNCHES} launches")
        print(f"  {'algorithm':<9} {'eager_med':>10} {'eager_p99':>10} {'graph_med':>10} {'graph_max':>10}")
        for impl, (_, _, _, t) in rows.items():
            print(f"  {impl:<9} {t[0]:10.1f} {t[1]:10.1f} {t[2]:10.1f} {t[3]:10.1f}")
        if nccl_group is None:
            print(f"  {'nccl':<9} {nccl_note}")
        if shared_gpu:
            print(f"  ({n} processes share a GPU: without MPS they time-slice it, so these times are not a TP speed-up)")
        if not health.ok or comm.failures:
            print(f"error: health {health!r}, failures {comm.failures}")
        for e in errors:
            print(f"error: {e}")
    all_ok = all(gather(ok))
    comm.close()
    if nccl_group is not None:
        dist.destroy_process_group(nccl_group)
    dist.destroy_process_group()
    if rank == 0:
        print("PASS" if all_ok else "FAIL")
    sys.exit(0 if all_ok else 1)


if __name__ == "__main__":
    main()

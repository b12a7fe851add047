"""PyTorch through the NCCL-API layer (librocenante_nccl.so, docs/nccl.md): torch.distributed's nccl backend with
the layer preloaded, every rank's result compared exactly with a CPU reference. One process per rank, started by
torchrun; several ranks may share one GPU (which NCCL itself refuses: only the layer serves them).

    LD_PRELOAD=$(python -m rocenante --nccl-library) ROCENANTE_NCCL_LIBRARY=/path/to/real/libnccl.so.2 \\
      CUDA_VISIBLE_DEVICES=0 torchrun --standalone --nproc-per-node=4 tests/nccl_api/torch_check.py

Checks, on every rank: the layer is the NCCL torch calls (its symbols are loaded); all_reduce (sum) and
all_gather_into_tensor (out of place and in place) of fp32, fp16 and bf16 at several sizes up to 1 MiB per rank are
exact (small integers: exact in every dtype and in any order of summation); one CUDA graph holding an all_reduce and
an all_gather, replayed with new inputs, is exact every time; and where ranks share a GPU, a call the layer forwards
(int32) fails with the layer's message instead of hanging. Prints "rank R: PASS" or "rank R: FAIL: ..." and exits
0 or 1. tools/gpu/nccl-layer.sh runs it with 2 and 4 processes on GPU 0.
"""
import ctypes
import os
import sys
import traceback

import torch
import torch.distributed as dist

SIZES = [1, 7, 1000, 12288, 262144]  # elements; 262144 fp32 = 1 MiB per rank (ROCENANTE_NCCL_MAX_BYTES' default)
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def rank_input(rank, count, dtype, device, salt=0):
    i = torch.arange(count, dtype=torch.int64)
    return ((rank + 1) * 2 + (i + salt) % 5).to(torch.float64).to(dtype).to(device)


def expected_sum(world, count, dtype, salt=0):
    i = torch.arange(count, dtype=torch.int64)
    total = sum(((q + 1) * 2 + (i + salt) % 5) for q in range(world))
    return total.to(torch.float64).to(dtype)


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    device = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(device)
    problems = []

    layer = ctypes.CDLL(None)
    if not hasattr(layer, "rocenante_nccl_describe"):
        print(f"rank {rank}: FAIL: librocenante_nccl.so is not loaded (set LD_PRELOAD=$(python -m rocenante "
              f"--nccl-library))", flush=True)
        return 1

    dist.init_process_group("nccl", device_id=device)
    sharing = torch.cuda.device_count() < world
    if rank == 0:
        print(f"torch {torch.__version__}, NCCL as torch sees it {torch.cuda.nccl.version()}, {world} ranks on "
              f"{torch.cuda.device_count()} GPU(s) ({torch.cuda.get_device_name(device)})", flush=True)

    for dtype in DTYPES:
        for count in SIZES:
            x = rank_input(rank, count, dtype, device)
            dist.all_reduce(x)
            if not torch.equal(x.cpu(), expected_sum(world, count, dtype)):
                problems.append(f"all_reduce {dtype} x {count}")
            inp = rank_input(rank, count, dtype, device)
            out = torch.full((world * count,), -1.0, dtype=dtype, device=device)
            dist.all_gather_into_tensor(out, inp)
            ref = torch.cat([rank_input(q, count, dtype, "cpu") for q in range(world)])
            if not torch.equal(out.cpu(), ref):
                problems.append(f"all_gather {dtype} x {count}")
            inplace = torch.full((world * count,), -1.0, dtype=dtype, device=device)
            inplace[rank * count:(rank + 1) * count].copy_(inp)
            dist.all_gather_into_tensor(inplace, inplace[rank * count:(rank + 1) * count])
            if not torch.equal(inplace.cpu(), ref):
                problems.append(f"in-place all_gather {dtype} x {count}")
    torch.cuda.synchronize()

    # One CUDA graph: an all_reduce and an all_gather of its result, replayed with new inputs.
    count, dtype = 12288, torch.bfloat16
    static_in = rank_input(rank, count, dtype, device)
    static_sum = torch.empty_like(static_in)
    static_all = torch.empty(world * count, dtype=dtype, device=device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as torch recommends
        static_sum.copy_(static_in)
        dist.all_reduce(static_sum)
        dist.all_gather_into_tensor(static_all, static_sum)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_sum.copy_(static_in)
        dist.all_reduce(static_sum)
        dist.all_gather_into_tensor(static_all, static_sum)
    for salt in range(1, 4):
        static_in.copy_(rank_input(rank, count, dtype, device, salt))
        graph.replay()
        torch.cuda.synchronize()
        want = expected_sum(world, count, dtype, salt)
        if not torch.equal(static_sum.cpu(), want) or not torch.equal(static_all.cpu(), want.repeat(world)):
            problems.append(f"CUDA graph replay {salt}")

    if sharing:
        # NCCL cannot hold ranks that share a GPU: a forwarded call must fail at once, saying why.
        try:
            dist.all_reduce(torch.ones(16, dtype=torch.int32, device=device))
            torch.cuda.synchronize()
            problems.append("an int32 all_reduce (forwarded to NCCL) did not fail on ranks sharing a GPU")
        except Exception as e:  # torch raises DistBackendError with NCCL's last error
            if "share one GPU" not in str(e):
                problems.append(f"the forwarded call failed without the layer's reason: {e}")
            elif rank == 0:
                print("forwarded int32 all_reduce refused as expected:", str(e).splitlines()[0][:200], flush=True)

    print(f"rank {rank}: " + ("PASS" if not problems else "FAIL: " + "; ".join(problems)), flush=True)
    try:
        dist.destroy_process_group()
    except Exception:
        traceback.print_exc()
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())

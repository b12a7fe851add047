"""torch integration: rocenante collectives as torch custom ops (torch.library.custom_op), so that torch.compile
and torch's dispatcher see them as operators with a known output (fake tensors) instead of opaque Python calls, and
the row-parallel linear layer of tensor parallelism built on them.

Imported only on request (`import rocenante.torch_ops`); `import rocenante` never imports torch.

    import rocenante, rocenante.torch_ops as rops
    comm = rocenante.Communicator.from_process_group(group, device=torch.device("cuda", local_rank))
    h = rops.register(comm)                       # an integer handle the ops can carry through a graph
    y = torch.ops.rocenante.all_reduce(x, h, "auto")    # out of place: a new tensor, x unchanged
    torch.ops.rocenante.all_reduce_(x, h, "auto")       # in place (x must be contiguous)
    g = torch.ops.rocenante.all_gather(x, h)            # shape (size, *x.shape)
    y = rops.row_parallel_linear(x_shard, w_shard, h, bias)   # sum over ranks of x_r @ w_r.T, plus bias once

The rules are the communicator's (docs/python.md): every rank calls in the same order with the same shapes. CPU
tensors run on the host executor, CUDA tensors on the GPU executor (a communicator built with a device), enqueued on
torch's current stream: the ops never synchronise and allocate only through torch (empty_like), so they work inside
torch.cuda.graph capture and in torch.compile'd code. A failed call raises rocenante.CollectiveError.
"""

from __future__ import annotations

import itertools
import threading
from typing import Dict, Optional

import torch

from . import Communicator

_lock = threading.Lock()
_comms: Dict[int, Communicator] = {}
_next = itertools.count(1)


def register(comm: Communicator) -> int:
    """Makes `comm` reachable from the ops; returns its handle (the same on every rank when every rank registers its
    communicators in the same order). unregister() drops it."""
    with _lock:
        h = next(_next)
        _comms[h] = comm
        return h


def unregister(handle: int) -> None:
    with _lock:
        _comms.pop(handle, None)


def _comm(handle: int) -> Communicator:
    with _lock:
        c = _comms.get(handle)
    if c is None:
        raise KeyError(f"rocenante: no communicator registered under handle {handle} (rocenante.torch_ops.register)")
    return c


@torch.library.custom_op("rocenante::all_reduce", mutates_args=())
def all_reduce(x: torch.Tensor, handle: int, algo: str) -> torch.Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _comm(handle).all_reduce(x.detach().contiguous(), out=out, algo=algo)  # DLPack refuses tensors needing grad
    return out


@all_reduce.register_fake
def _(x: torch.Tensor, handle: int, algo: str) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("rocenante::all_reduce_", mutates_args=("x",))
def all_reduce_(x: torch.Tensor, handle: int, algo: str) -> None:
    _comm(handle).all_reduce(x.detach(), algo=algo)  # a non-contiguous x is refused (on every rank) by the library


@all_reduce_.register_fake
def _(x: torch.Tensor, handle: int, algo: str) -> None:
    return None


@torch.library.custom_op("rocenante::all_gather", mutates_args=())
def all_gather(x: torch.Tensor, handle: int) -> torch.Tensor:
    c = _comm(handle)
    out = x.new_empty((c.size,) + tuple(x.shape))
    c.all_gather(x.detach().contiguous(), out=out)
    return out


@all_gather.register_fake
def _(x: torch.Tensor, handle: int) -> torch.Tensor:
    return x.new_empty((_comm(handle).size,) + tuple(x.shape))


def row_parallel_linear(x: torch.Tensor, weight: torch.Tensor, handle: int, bias: Optional[torch.Tensor] = None,
                        algo: str = "auto") -> torch.Tensor:
    """The row-parallel linear layer of tensor parallelism: rank r holds the r-th block of input features, x_r
    (..., in/n) and weight_r (out, in/n); every rank gets sum_r x_r @ weight_r.T, plus `bias` once (added after the
    sum, so every rank holds identical bytes). The partial product is reduced out of place (the custom op), so it
    composes with torch.compile and CUDA graph capture. The all-reduce sums in fp32 and rounds once to x's dtype."""
    y = all_reduce(torch.nn.functional.linear(x, weight), handle, algo)
    return y if bias is None else y + bias


class RowParallelLinear(torch.nn.Module):
    """torch.nn.Linear split by input features over the ranks of a registered communicator: rank r keeps columns
    [r * in/n, (r + 1) * in/n) of the weight and takes the matching block of the input (the output of a
    column-parallel layer before it, as in a transformer MLP's down-projection). forward(x_r) = the full layer's
    output on every rank (row_parallel_linear)."""

    def __init__(self, weight_shard: torch.Tensor, handle: int, bias: Optional[torch.Tensor] = None,
                 algo: str = "auto"):
        super().__init__()
        self.weight = torch.nn.Parameter(weight_shard, requires_grad=False)
        self.bias = None if bias is None else torch.nn.Parameter(bias, requires_grad=False)
        self.handle, self.algo = int(handle), str(algo)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, handle: int, algo: str = "auto") -> "RowParallelLinear":
        """This rank's shard of `linear` (the same full layer on every rank)."""
        c = _comm(handle)
        n_in = linear.in_features
        if n_in % c.size != 0:
            raise ValueError(f"in_features {n_in} does not divide by the {c.size} ranks")
        k = n_in // c.size
        w = linear.weight.detach()[:, c.rank * k:(c.rank + 1) * k].contiguous()
        b = None if linear.bias is None else linear.bias.detach().clone()
        return cls(w, handle, b, algo)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return row_parallel_linear(x, self.weight, self.handle, self.bias, self.algo)

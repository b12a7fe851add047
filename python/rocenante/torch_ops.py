"""torch integration: rocenante collectives as torch custom ops (torch.library.custom_op), so that torch.compile
and torch's dispatcher see them as operators with a known output (fake tensors) instead of opaque Python calls.

Imported only on request (`import rocenante.torch_ops`); `import rocenante` never imports torch.

    import rocenante, rocenante.torch_ops as rops
    comm = rocenante.Communicator.from_process_group(group)
    h = rops.register(comm)                       # an integer handle the ops can carry through a graph
    y = torch.ops.rocenante.all_reduce(x, h, "auto")    # out of place: a new tensor, x unchanged
    g = torch.ops.rocenante.all_gather(x, h)            # shape (size, *x.shape)

The rules are the communicator's (docs/python.md): every rank calls in the same order with the same shapes; this
build has the host executor only, so tensors must be on the CPU. A failed call raises rocenante.CollectiveError.
"""

from __future__ import annotations

import itertools
import threading
from typing import Dict

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
    _comm(handle).all_reduce(x.contiguous(), out=out, algo=algo)
    return out


@all_reduce.register_fake
def _(x: torch.Tensor, handle: int, algo: str) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("rocenante::all_gather", mutates_args=())
def all_gather(x: torch.Tensor, handle: int) -> torch.Tensor:
    c = _comm(handle)
    out = x.new_empty((c.size,) + tuple(x.shape))
    c.all_gather(x.contiguous(), out=out)
    return out


@all_gather.register_fake
def _(x: torch.Tensor, handle: int) -> torch.Tensor:
    return x.new_empty((_comm(handle).size,) + tuple(x.shape))

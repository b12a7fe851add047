"""RoCEnante collectives from Python: one-shot, two-shot and ring all-reduce and all-gather over the host executor
(CPU arrays) and, in a build with nvcc, the GPU executor (CUDA arrays, enqueued on a stream, CUDA-graph capturable).

Arrays travel through DLPack, so NumPy, torch, CuPy and JAX arrays all work; the GIL is released while a collective
runs. Every rank builds a Communicator collectively and then calls the same collectives in the same order with the
same element counts; the rules are those of the C++ API (docs/python.md).

    world = rocenante.World(4)                        # ranks as threads of this process
    comm = rocenante.Communicator.in_process(world, rank)
    comm.all_reduce(x)                                # in place: x becomes the sum over ranks

    comm = rocenante.Communicator.from_env(device=local_rank)   # GPU ranks as processes (torchrun)
    comm.all_reduce(t)                                # t: a CUDA tensor; on torch's current stream
"""

from __future__ import annotations

import re
import sys
from typing import Any, Callable, Optional

from . import _ext
from ._ext import BootstrapError, CollectiveError, ConfigError, ConfigMismatchError, Error, TransportError

__all__ = [
    "Communicator", "World", "Health", "Error", "ConfigError", "ConfigMismatchError", "BootstrapError",
    "TransportError", "CollectiveError", "has_tcp_bootstrap", "has_gpu", "gpu_unavailable",
]

#: Whether this build has the store bootstrap (Communicator.from_env).
has_tcp_bootstrap: bool = bool(_ext.has_tcp_bootstrap)

#: Whether this build has the GPU executor (built with nvcc: -Csetup-args=-Dcuda=enabled). Whether a GPU is usable
#: here is gpu_unavailable()'s answer.
has_gpu: bool = bool(_ext.has_gpu)


def gpu_unavailable() -> str:
    """Empty when this process can build a GPU communicator, else why not (a build without nvcc; the CUDA runtime's
    answer: no driver, no device). Asks the CUDA runtime on every call, never at import."""
    return _ext.gpu_unavailable()

_DEFAULT_MAX_BYTES = 1 << 20


class World:
    """Ranks as threads of one process: every rank's Communicator.in_process() takes the same World.

    A rank that does not arrive at set-up within `timeout` seconds makes every waiting rank raise BootstrapError
    naming the missing ranks.
    """

    def __init__(self, size: int, timeout: float = 60.0):
        self._w = _ext.World(int(size), float(timeout))

    @property
    def size(self) -> int:
        return self._w.size


class Health:
    """What Communicator.health() reports: `ok`, the status name (`state`) and the message naming the peer."""

    __slots__ = ("ok", "state", "message")

    def __init__(self, ok: bool, state: str, message: str):
        self.ok, self.state, self.message = ok, state, message

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        return f"Health(ok={self.ok}, state={self.state!r}, message={self.message!r})"


def _bf16_view(x: Any):
    """NumPy has no bfloat16 of its own and cannot export ml_dtypes.bfloat16 through DLPack: such an array goes
    to the extension as a uint16 view with an explicit dtype. Other arrays go as they are."""
    dt = getattr(x, "dtype", None)
    if dt is not None and getattr(dt, "name", "") == "bfloat16" and hasattr(x, "view") and type(x).__module__ == "numpy":
        import numpy as np

        return x.view(np.uint16), "bf16"
    return x, None


def _empty_like_gather(x: Any, size: int):
    """Output of all_gather when none is given: shape (size, *x.shape), same type, dtype and device as x."""
    if hasattr(x, "new_empty"):  # torch
        return x.new_empty((size,) + tuple(x.shape))
    if type(x).__module__.startswith("cupy"):
        import cupy

        with cupy.cuda.Device(x.device.id):
            return cupy.empty((size,) + tuple(x.shape), dtype=x.dtype)
    import numpy as np

    return np.empty((size,) + tuple(x.shape), dtype=x.dtype)


def _device_index(device: Any) -> Optional[int]:
    """None for the CPU (the host executor), else the CUDA ordinal (-1: the calling thread's current device).
    Accepts an int, "cpu", "cuda", "cuda:N", or anything with .type and .index (torch.device)."""
    if device is None:
        return None
    if isinstance(device, int) and not isinstance(device, bool):
        return int(device)
    kind, index = getattr(device, "type", None), getattr(device, "index", None)
    if kind is None:
        text = str(device)
        kind, _, rest = text.partition(":")
        index = int(rest) if rest.isdigit() else None
        if rest and index is None:
            raise ConfigError(f"device {device!r}: expected an int, 'cpu', 'cuda' or 'cuda:N'")
    if kind == "cpu":
        return None
    if kind != "cuda":
        raise ConfigError(f"device {device!r}: rocenante runs on the CPU or on CUDA devices")
    if not has_gpu:
        raise ConfigError(f"device {device!r}: this build of rocenante has the host executor only (built without "
                          "nvcc): pass device=None for CPU arrays, or reinstall it with "
                          "-Csetup-args=-Dcuda=enabled for CUDA arrays")
    return -1 if index is None else int(index)


def _require_gpu(rank: Any) -> None:
    """A GPU communicator on a machine where CUDA cannot run fails here, before the set-up exchange."""
    why = _ext.gpu_unavailable()
    if why:
        raise ConfigError(f"rocenante rank {'?' if rank is None else rank}: no usable GPU ({why})")


def _stream_of(x: Any, device: int) -> int:
    """The stream a call on x runs on when none is given: torch's current stream on x's device (on `device` when x is
    not a CUDA tensor: a call that will be refused still takes its place on a stream), CuPy's current stream, else 0
    (the legacy default stream)."""
    mod = type(x).__module__
    if mod.startswith("torch"):
        return sys.modules["torch"].cuda.current_stream(x.device if x.is_cuda else device).cuda_stream
    if mod.startswith("cupy"):
        return sys.modules["cupy"].cuda.get_current_stream().ptr
    return 0


_TIMEOUT_FIELD = re.compile(r"field 'timeout_ns' is (\d+) on rank (\d+) but (\d+) on rank (\d+)")
_SEQUENCE = re.compile(r"\bsequence (\d+)")


def _py_text(message: str, first_call_sequence: Optional[int] = None) -> str:
    """A library message in this package's terms: the C++ option capacity_bytes is max_bytes here, timeout_ns (in
    ns) is timeout (in s); and, given the communicator's first_call_sequence, "sequence N" becomes "call K", K
    counting this communicator's collective calls from 1 (set-up runs collectives of its own, so the first call's
    sequence number is not 1). A sequence from before the first call (set-up's) is left as it is."""
    message = _TIMEOUT_FIELD.sub(lambda m: f"field 'timeout' is {int(m[1]) / 1e9:g} s on rank {m[2]} but "
                                 f"{int(m[3]) / 1e9:g} s on rank {m[4]}", message)
    message = message.replace("options::capacity_bytes", "max_bytes").replace("capacity_bytes", "max_bytes")
    message = message.replace("options::timeout_ns", "timeout")
    if first_call_sequence is not None:
        def call(m):
            k = (int(m[1]) - first_call_sequence) % (1 << 32)
            return f"call {k + 1}" if k < (1 << 31) else m[0]
        message = _SEQUENCE.sub(call, message)
    return message


def _build(rank: Optional[int], make: Callable[[], Any]):
    """Runs a collective set-up; the error message in this package's terms (_py_text), with this rank's name in
    front when it names no rank."""
    try:
        return make()
    except Error as e:
        text = _py_text(str(e))
        if rank is not None and "rank" not in text:
            text = f"rocenante rank {rank}: {text}"
        if text != str(e):
            raise type(e)(text) from None
        raise


class Communicator:
    """One rank of a communicator over the host executor (CPU arrays) or, with `device`, the GPU executor.

    Build it on every rank collectively (in_process, from_callbacks, from_process_group, from_env). The transport is
    chosen at start-up by all ranks together (`decision` says which and why). Host executor: loopback when every rank
    is a thread of one process, ibverbs where RDMA works, socket (TCP) across processes otherwise. GPU executor
    (device given; ranks as processes, each on its GPU): cuda_ipc when every rank is on one host (several processes
    may share one GPU), else ibverbs, else nccl.

    Options (identical on every rank, checked at set-up):
      max_bytes  largest input of one rank to one collective, in bytes (all_gather: one rank's contribution)
      timeout    bound on every wait for a peer, in seconds; a wait that runs out poisons the communicator
      transport  "auto" (default), "loopback", "socket", "ibverbs", or "env" (ROCENANTE_TRANSPORT decides); a GPU
                 communicator: "auto", "cuda_ipc", "ibverbs", "socket", "nccl" or "env"
      algo       algorithm of calls that pass algo="auto": "auto" (by size and rank count), "one_shot", "two_shot",
                 "ring", "env"
      symmetric_bytes  bytes of this rank's symmetric input area (0: none; symmetric_buffer()): an all_reduce whose
                 input lies there, at the same offset on every rank, with a separate `out`, reads every rank's input in
                 place instead of staging it (transports whose ranks read each other's memory: loopback, cuda_ipc)
    """

    def __init__(self, impl: Any):
        self._c = impl
        self._first_call = impl.first_call_sequence

    def _text(self, message: str) -> str:
        return _py_text(message, self._first_call)

    # -- construction ------------------------------------------------------------------------------------------
    @staticmethod
    def _config(max_bytes: int, timeout: float, transport: str, algo: str, symmetric_bytes: int = 0):
        return _ext.Config(int(max_bytes), float(timeout), str(transport), str(algo), int(symmetric_bytes))

    @classmethod
    def in_process(cls, world: World, rank: int, *, max_bytes: int = _DEFAULT_MAX_BYTES, timeout: float = 10.0,
                   transport: str = "auto", algo: str = "auto", symmetric_bytes: int = 0) -> "Communicator":
        """Rank `rank` of `world` (ranks as threads). Every rank calls it, each from its own thread."""
        return cls(_build(rank, lambda: _ext.Communicator.in_process(
            world._w, int(rank), cls._config(max_bytes, timeout, transport, algo, symmetric_bytes))))

    @classmethod
    def from_callbacks(cls, rank: int, size: int, all_gather: Callable[[bytes], bytes], *,
                       max_bytes: int = _DEFAULT_MAX_BYTES, timeout: float = 10.0, transport: str = "auto",
                       algo: str = "auto", device: Any = None, symmetric_bytes: int = 0) -> "Communicator":
        """Set-up through your own exchange: all_gather(b) must be collective and return every rank's `b`
        concatenated in rank order (all of equal length). It must not wait forever: an exception it raises becomes
        BootstrapError. Used only during set-up. `device`: None (host executor) or this rank's CUDA device (GPU
        executor: an int, "cuda:N" or a torch.device)."""
        dev = _device_index(device)
        if dev is not None:
            _require_gpu(rank)
        return cls(_build(rank, lambda: _ext.Communicator.callback(
            int(rank), int(size), all_gather, cls._config(max_bytes, timeout, transport, algo, symmetric_bytes), dev)))

    @classmethod
    def from_process_group(cls, group: Any = None, device: Any = None, *, max_bytes: int = _DEFAULT_MAX_BYTES,
                           timeout: float = 10.0, transport: str = "auto", algo: str = "auto",
                           symmetric_bytes: int = 0) -> "Communicator":
        """Set-up through a torch.distributed process group (None: the default group): its all_gather_object
        carries the set-up exchange. `device`: None or "cpu" for the host executor (CPU tensors); this rank's CUDA
        device (torch.device('cuda', i), "cuda:i" or i) for the GPU executor (CUDA tensors; a build with nvcc)."""
        dev = _device_index(device)
        import torch.distributed as dist

        rank, size = dist.get_rank(group), dist.get_world_size(group)

        def all_gather(b: bytes) -> bytes:
            parts = [None] * size
            dist.all_gather_object(parts, b, group=group)
            return b"".join(parts)

        return cls.from_callbacks(rank, size, all_gather, max_bytes=max_bytes, timeout=timeout, transport=transport,
                                  algo=algo, device=dev, symmetric_bytes=symmetric_bytes)

    @classmethod
    def from_env(cls, *, max_bytes: int = _DEFAULT_MAX_BYTES, timeout: float = 10.0, transport: str = "auto",
                 algo: str = "auto", bootstrap_timeout: Optional[float] = None, device: Any = None,
                 symmetric_bytes: int = 0) -> "Communicator":
        """Set-up through the store bootstrap (ranks as processes, any launcher): rank 0's address from
        ROCENANTE_BOOTSTRAP=host:port, else MASTER_ADDR and MASTER_PORT + 1 (torchrun keeps MASTER_PORT itself);
        rank and size from ROCENANTE_RANK/ROCENANTE_WORLD_SIZE, RANK/WORLD_SIZE (torchrun), SLURM_PROCID/SLURM_NTASKS
        or OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE. Rank 0 listens; the others connect. Every bootstrap wait is
        bounded by `bootstrap_timeout` seconds (None: ROCENANTE_BOOTSTRAP_TIMEOUT_MS, else 120 s); a rank that never
        connects is named in the BootstrapError every other rank raises. `device`: None (host executor) or this rank's
        CUDA device (GPU executor), e.g. int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count()."""
        dev = _device_index(device)
        if not has_tcp_bootstrap:
            raise ConfigError("this build of rocenante has no store bootstrap (bootstrap/tcp.hpp); use "
                              "from_process_group or from_callbacks")
        import os

        # The rank names this process in messages only when it is one: a malformed value is the error itself.
        given = next((os.environ[v].strip() for v in ("ROCENANTE_RANK", "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK")
                      if os.environ.get(v)), None)
        rank = int(given) if given is not None and given.isdigit() else None
        if dev is not None:
            _require_gpu(rank)
        return cls(_build(rank, lambda: _ext.Communicator.from_env(
            cls._config(max_bytes, timeout, transport, algo, symmetric_bytes),
            None if bootstrap_timeout is None else float(bootstrap_timeout), dev)))

    # -- collectives -------------------------------------------------------------------------------------------
    def _raise_if_failed(self, result) -> None:
        status, message = result
        if status != "ok":
            err = CollectiveError(self._text(message) or f"rocenante rank {self.rank}: collective failed ({status})")
            err.status = status
            raise err

    def all_reduce(self, x: Any, out: Any = None, algo: str = "auto", stream: Any = None):
        """out = sum over ranks of x, elementwise; returns the array holding the result (x itself when out is None:
        in place). x: a C-contiguous array of float32, float16 or bfloat16 with at most max_bytes bytes, on the CPU
        (host executor) or on this communicator's CUDA device (GPU executor); out: same dtype and element count.
        Bytes of the result are identical on every rank. algo: "auto" (the communicator's choice, by size),
        "one_shot", "two_shot" or "ring".

        GPU executor: the call is enqueued on `stream` (an int cudaStream_t value, a torch.cuda.Stream or a CuPy
        stream; None: torch's current stream on x's device for a tensor, CuPy's current stream for a CuPy array) and
        returns without waiting for it; it never synchronises and allocates nothing, so it may be captured into a
        CUDA graph. Host executor: stream must be None.

        Raises CollectiveError (message from the C++ library, naming the rank) when the call is refused or a peer
        fails; a refused call tells the peers and poisons the communicator: ask accepts() first to fall back without
        poisoning."""
        s = self._stream(x, stream)
        if s is None:
            return x if out is None else out
        xv, as_dtype = _bf16_view(x)
        ov = None
        if out is not None:
            ov, _ = _bf16_view(out)
        self._raise_if_failed(self._c.all_reduce(xv, ov, str(algo), as_dtype, s))
        return x if out is None else out

    def all_gather(self, x: Any, out: Any = None, stream: Any = None):
        """out[q] = x of rank q: out holds size * x.size elements (rank-major); when None, a new array of shape
        (size, *x.shape) of x's type (and device). Returns out. Same input and stream rules as all_reduce; algorithm
        one_shot."""
        s = self._stream(x, stream)
        if s is None:
            return out
        if out is None:
            try:
                out = _empty_like_gather(x, self.size)
            except (AttributeError, TypeError) as e:  # refused through the library, so that the peers are told
                self._raise_if_failed(self._c.reject(f"input is not an array: cannot make all_gather's output ({e})", s))
        xv, as_dtype = _bf16_view(x)
        ov, _ = _bf16_view(out)
        self._raise_if_failed(self._c.all_gather(xv, ov, as_dtype, s))
        return out

    def accepts(self, x: Any, algo: str = "auto", collective: str = "all_reduce") -> bool:
        """Whether a call with an array like x would run: element count, dtype, capacity, contiguity, device and the
        algorithm (and what start-up connectivity allows). It never looks at the array's address, so every rank asking
        with the same shape and dtype gets the same answer; it never poisons and consumes no sequence number, so an
        engine can fall back on every rank together. why_not() gives the reason."""
        return not self.why_not(x, algo, collective)

    def why_not(self, x: Any, algo: str = "auto", collective: str = "all_reduce") -> str:
        """The reason accepts() is false (empty string when it is true)."""
        if collective not in ("all_reduce", "all_gather"):
            raise ValueError(f"collective must be 'all_reduce' or 'all_gather', got {collective!r}")
        xv, as_dtype = _bf16_view(x)
        return self._text(self._c.refusal(xv, str(algo), collective, as_dtype))

    def _stream(self, x: Any, stream: Any) -> Optional[int]:
        """The call's stream as an int (0 for the host executor); None when the call was refused here (never: a
        refusal raises after telling the peers)."""
        if self._c.device is None:
            if stream is not None:  # refused through the library, so that the peers do not wait for this rank
                self._raise_if_failed(self._c.reject("stream applies to GPU arrays; this communicator runs the host "
                                                     "executor: pass stream=None", 0))
            return 0
        if stream is None:
            return _stream_of(x, self._c.device)
        if isinstance(stream, int) and not isinstance(stream, bool):
            return stream
        for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
            value = getattr(stream, attr, None)
            if isinstance(value, int):
                return value
        self._raise_if_failed(self._c.reject(f"stream must be an int (a cudaStream_t value), a torch.cuda.Stream or a "
                                             f"CuPy stream, got {type(stream).__name__}", _stream_of(x, self._c.device)))
        return None

    def symmetric_buffer(self, dtype: Any = "float32") -> Any:
        """This rank's symmetric input area (symmetric_bytes at set-up) as a 1-D array of `dtype` ("float32",
        "float16", "bfloat16", or a NumPy / torch dtype of those) spanning the whole area: a torch tensor on this
        communicator's device for the GPU executor (torch required), a NumPy array for the host executor. It views
        the communicator's own memory (valid while the communicator is open). Write a rank's input into it (or into a
        slice starting at the same 16-byte aligned element on every rank) and pass that to all_reduce with a separate
        `out`: the peers then read it where it lies instead of receiving a copy. Raises ConfigError where there is no
        area (symmetric_bytes=0, or a transport whose ranks cannot read each other's memory: socket, ibverbs, nccl)."""
        address, nbytes = self._c.symmetric_input()
        if nbytes == 0:
            raise ConfigError(f"rocenante rank {self.rank}: no symmetric input area: pass symmetric_bytes=N at set-up, "
                              f"over a transport whose ranks read each other's memory (loopback, cuda_ipc; this "
                              f"communicator runs {self.transport})")
        name = str(dtype).replace("torch.", "").replace("numpy.", "")
        sizes = {"float32": 4, "float16": 2, "bfloat16": 2}
        if name not in sizes:
            raise ValueError(f"symmetric_buffer: dtype must be float32, float16 or bfloat16, got {dtype!r}")
        if self._c.device is not None:
            import torch

            class _Area:  # CUDA array interface over the area's bytes (torch shares the memory, no copy)
                __cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (address, False),
                                            "version": 3, "strides": None}

            raw = torch.as_tensor(_Area(), device=torch.device("cuda", self._c.device))
            return raw.view(getattr(torch, name))
        import ctypes

        import numpy as np

        raw = np.ctypeslib.as_array(ctypes.cast(address, ctypes.POINTER(ctypes.c_uint8)), shape=(nbytes,))
        if name == "bfloat16":
            import ml_dtypes

            return raw.view(ml_dtypes.bfloat16)
        return raw.view(np.dtype(name))

    # -- state ---------------------------------------------------------------------------------------------------
    def health(self) -> Health:
        """This rank's health without waiting for anything: ok, or the first failure naming the peer and the call
        (calls counted from 1, the first collective after construction)."""
        ok, state, message = self._c.health()
        return Health(ok, state, self._text(message))

    @property
    def last_error(self) -> str:
        """Message of the last failed call on this rank (empty if none)."""
        return self._text(self._c.last_error)

    @property
    def failures(self) -> int:
        """Collectives of this rank that did not complete (failed, timed out, refused, or called on a poisoned
        communicator); on the GPU executor counted when the failing kernel runs, read without synchronising."""
        return self._c.failures

    @property
    def device(self) -> Optional[int]:
        """The CUDA device of a GPU communicator; None for the host executor."""
        return self._c.device

    @property
    def decision(self) -> str:
        """The start-up decision, identical on every rank, as the start-up log line states it: the transport chosen
        and why, the connectivity found, and the algorithm of calls that name none (with auto: up to which size
        one_shot runs)."""
        return self._c.decision

    @property
    def transport(self) -> str:
        return self._c.transport

    @property
    def rank(self) -> int:
        return self._c.rank

    @property
    def size(self) -> int:
        return self._c.size

    @property
    def closed(self) -> bool:
        return self._c.closed

    def close(self) -> None:
        """Frees the communicator without waiting for peers (returns even when a peer is dead). Idempotent."""
        self._c.close()

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else self.transport
        where = "" if self.device is None else f", cuda:{self.device}"
        return f"<rocenante.Communicator rank {self.rank} of {self.size}, {state}{where}>"


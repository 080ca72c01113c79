"""The trainer → vLLM-server weight channel: a standalone process group, one code path for both backends.

Ranks 0..K-1 are the server's K tensor-parallel vLLM workers, rank K is the trainer (rank 0 of its
own DDP job, if any). Worker rank 0 hosts the ``TCPStore`` rendezvous on the server's host. The
group is a ``ProcessGroupGloo`` (CPU tensors) or ``ProcessGroupNCCL`` (CUDA tensors) built directly
on that store: nothing here touches ``torch.distributed``'s default process group, which the
trainer may already hold under torchrun.

A push is a list of ``[name, dtype, shape]`` (the metadata, sent over HTTP) and, in that order,
broadcasts from the trainer's rank: tensors are packed into flat buckets of one dtype of at most
``BUCKET_BYTES`` (:func:`plan_buckets`, computed identically on both sides from the metadata).

Only gloo on CPU has been run; the NCCL branch follows torch's documented constructors.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import math
import time
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist

BUCKET_BYTES = 1 << 30  # 1 GiB: bounds the extra memory a push takes on either side
BACKENDS = ("gloo", "nccl")


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown tensor dtype {name!r}")
    return dtype


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tensor_meta(weights: list[tuple[str, torch.Tensor]], dtype: torch.dtype | None = None) -> list[list]:
    """``[[name, dtype, shape], ...]`` for a push (the JSON the server receives); ``dtype``: sent cast to it."""
    return [[name, dtype_name(dtype or t.dtype), list(t.shape)] for name, t in weights]


def plan_buckets(meta: list[list], bucket_bytes: int = BUCKET_BYTES) -> list[list[tuple[str, torch.dtype, list[int]]]]:
    """Consecutive tensors of one dtype, grouped up to ``bucket_bytes`` (a larger tensor is a bucket alone)."""
    buckets: list[list[tuple[str, torch.dtype, list[int]]]] = []
    size = 0
    for entry in meta:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 3 and isinstance(entry[0], str)
                and isinstance(entry[2], (list, tuple))):
            raise ValueError(f"a tensor entry is [name, dtype, shape], got {entry!r}")
        name, dtype, shape = entry[0], _dtype(entry[1]), [int(s) for s in entry[2]]
        nbytes = math.prod(shape) * dtype.itemsize
        if not buckets or buckets[-1][0][1] != dtype or size + nbytes > bucket_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append((name, dtype, shape))
        size += nbytes
    return buckets


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class WeightGroup:
    """One member of the standalone trainer + vLLM-workers group.

    Args:
        host, port: the TCPStore's address (the server's host; rank 0 listens on ``port``).
        rank, world_size: this member's rank; K workers + 1 trainer.
        backend: "gloo" (tensors on CPU) or "nccl" (tensors on the current CUDA device).
        timeout: seconds for the rendezvous and for each collective.
    """

    def __init__(self, host: str, port: int, *, rank: int, world_size: int, backend: str, timeout: float = 600.0):
        if backend not in BACKENDS:
            raise ValueError(f"weight-sync backend must be one of {BACKENDS}, got {backend!r}")
        if not 0 <= rank < world_size or world_size < 2:
            raise ValueError(f"rank {rank} of a weight group of {world_size} (>= 2: workers + trainer)")
        self.rank, self.world_size, self.backend = rank, world_size, backend
        self.src = world_size - 1  # the trainer
        delta = datetime.timedelta(seconds=timeout)
        store = dist.TCPStore(host, int(port), world_size, is_master=rank == 0, timeout=delta,
                              wait_for_workers=False)
        self._store = store  # rank 0 serves the rendezvous for as long as the group lives
        prefixed = dist.PrefixStore("rlvr-weight-sync", store)
        if backend == "gloo":
            options = dist.ProcessGroupGloo._Options()
            options._timeout = delta
            # Loopback: bind gloo to it too (the default resolves the machine's hostname, which may
            # not be reachable); elsewhere gloo's default device (GLOO_SOCKET_IFNAME is honoured).
            device = (dist.ProcessGroupGloo.create_device(hostname="127.0.0.1") if _is_loopback(host)
                      else dist.ProcessGroupGloo.create_default_device())
            options._devices = [device]
            self.group = dist.ProcessGroupGloo(prefixed, rank, world_size, options)
            self.device = torch.device("cpu")
        else:
            if not torch.cuda.is_available() or not hasattr(dist, "ProcessGroupNCCL"):
                raise ValueError("weight-sync backend nccl needs CUDA and a torch built with NCCL")
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = delta
            self.group = dist.ProcessGroupNCCL(prefixed, rank, world_size, options)
            self.device = torch.device("cuda", torch.cuda.current_device())

    def send(self, weights: list[tuple[str, torch.Tensor]], *, dtype: torch.dtype | None = None,
             check: Callable[[], None] | None = None, timeout: float = 600.0) -> None:
        """Broadcast ``weights`` (the trainer's side), in :func:`plan_buckets` order, cast to ``dtype``
        bucket by bucket (the metadata sent is ``tensor_meta(weights, dtype)``).

        ``check`` is called while a broadcast is pending (it raises to abandon the push, e.g. when
        the server answered the metadata with an error); ``timeout`` bounds each bucket.
        """
        meta = tensor_meta(weights, dtype)
        tensors = iter(t for _, t in weights)
        for bucket in plan_buckets(meta):
            parts = [next(tensors).detach().to(self.device, bucket[0][1]).reshape(-1) for _ in bucket]
            flat = torch.cat(parts) if len(parts) > 1 else parts[0].contiguous()
            work = self.group.broadcast(flat, self.src)
            deadline = time.monotonic() + timeout
            while not work.is_completed():
                if check is not None:
                    check()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"a weight broadcast took more than {timeout:g}s")
                time.sleep(0.005)
            work.wait()

    def receive(self, meta: list[list]) -> Iterator[tuple[str, torch.Tensor]]:
        """The broadcast tensors (a worker's side), bucket by bucket as they are consumed.

        Each bucket gets a fresh buffer: a consumer may keep the views (vLLM's layer-wise reload
        holds a layer's tensors until the layer is complete).
        """
        for bucket in plan_buckets(meta):
            numels = [math.prod(shape) for _, _, shape in bucket]
            flat = torch.empty(sum(numels), dtype=bucket[0][1], device=self.device)
            self.group.broadcast(flat, self.src).wait()
            offset = 0
            for (name, _, shape), numel in zip(bucket, numels):
                yield name, flat[offset: offset + numel].view(shape)
                offset += numel

    def close(self) -> None:
        group, self.group = getattr(self, "group", None), None
        if group is not None:
            with contextlib.suppress(Exception):  # a peer already gone: nothing left to release
                group.shutdown()
        self._store = None

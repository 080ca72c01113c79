"""A CPU stand-in for "the accelerator": device mix-ups that CUDA would refuse, caught on a CPU dry run.

On a GPU, an operation that meets a CUDA tensor and a CPU tensor (other than a 0-dim scalar) raises
"Expected all tensors to be on the same device". On a CPU run every tensor is on the CPU, so such a
mix-up passes unseen until the first GPU minute. :class:`DeviceDiscipline` (a ``TorchFunctionMode``)
makes the CPU tell two devices apart:

- the accelerator is ``ON_DEVICE = torch.device("cpu", 0)``; tensors marked with :func:`mark_on_device`
  (a model's parameters and buffers) and every tensor computed from one are on it, and their
  ``.device`` reads ``cpu:0``;
- a tensor made by a factory with ``device=cpu:0`` (or ``cuda``), moved there by ``.to(...)``/``.cuda()``,
  is on it; ``.cpu()`` and ``.to("cpu")`` bring a copy back to the host, as on a GPU (the copy is real,
  so later writes to one do not show in the other);
- every other tensor is on the host.

An operation that meets both (host tensors of one element or more) raises :class:`DeviceMixUp` naming the
operation and the shapes. Indexing with a host index (``t[idx]``) is allowed, as CUDA allows it. This is an
emulation for dry runs and tests, not a product feature: a run never enters it.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

ON_DEVICE = torch.device("cpu", 0)
_MARK = "_rlvr_on_device"
_DEVICE_GET = torch.Tensor.device.__get__
_HOST_MOVES = {"cpu", "numpy", "tolist", "item"}
_MOVES = {"to", "cuda", "cpu", "new_tensor", "new_zeros", "new_ones", "new_full", "new_empty", "copy_"}
_ALLOWED_WITH_HOST = {"__getitem__", "__setitem__"}  # host indices into device tensors, as CUDA allows
_INFO = {"size", "dim", "numel", "is_floating_point", "__len__", "__repr__", "__format__",
         "data_ptr", "element_size", "_has_compatible_shallow_copy_type", "stride", "storage_offset", "is_contiguous", "requires_grad_"}


class DeviceMixUp(RuntimeError):
    """A host tensor met an accelerator tensor in one operation: CUDA would refuse it."""


def mark_on_device(*objects) -> None:
    """Put tensors, or modules' parameters and buffers, on the emulated accelerator."""
    for obj in objects:
        if isinstance(obj, torch.nn.Module):
            for tensor in [*obj.parameters(), *obj.buffers()]:
                _set(tensor, True)
        elif isinstance(obj, torch.Tensor):
            _set(obj, True)


def on_device(tensor: torch.Tensor) -> bool:
    return bool(getattr(tensor, _MARK, False))


def _set(tensor, value: bool) -> None:
    try:
        setattr(tensor, _MARK, value)
    except (AttributeError, RuntimeError):  # a tensor that takes no attributes stays host-side
        pass


def _is_device(spec) -> bool | None:
    """True: the accelerator, False: the host, None: not a device argument."""
    if isinstance(spec, torch.Tensor):
        return on_device(spec)
    if isinstance(spec, str):
        spec = torch.device(spec) if spec.split(":")[0] in ("cpu", "cuda", "meta") else None
    if isinstance(spec, torch.device):
        return spec.type == "cuda" or spec == ON_DEVICE
    return None


def _target(name: str, args, kwargs) -> bool | None:
    """Where a move or factory puts its result: True/False, or None (it follows its inputs)."""
    if name == "cuda":
        return True
    if name in _HOST_MOVES:
        return False
    if "device" in kwargs and kwargs["device"] is not None:
        return _is_device(kwargs["device"])
    if name == "to":
        for arg in args[1:]:
            side = _is_device(arg)
            if side is not None:
                return side
    return None


class DeviceDiscipline(TorchFunctionMode):
    """Within it, an operation mixing host and accelerator tensors raises :class:`DeviceMixUp`."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func == _DEVICE_GET:  # a fresh method-wrapper on every access: equal, not identical
            return ON_DEVICE if on_device(args[0]) else torch.device("cpu")
        name = getattr(func, "__name__", "")
        if name == "__get__":  # an attribute (.grad, .data, .T, ...) lives where its tensor does
            result = func(*args, **kwargs)
            if isinstance(result, torch.Tensor) and on_device(args[0]):
                _set(result, True)
            return result
        if name == "__set__" and len(args) == 2 and isinstance(args[1], torch.Tensor):  # t.data = moved
            result = func(*args, **kwargs)
            _set(args[0], on_device(args[1]))
            return result
        if name in _INFO:
            return func(*args, **kwargs)
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        device = [t for t in tensors if on_device(t)]
        if device and name not in _MOVES and name not in _ALLOWED_WITH_HOST:
            host = [t for t in tensors if not on_device(t) and t.dim() > 0]
            if host:
                raise DeviceMixUp(f"{name}: accelerator tensor(s) {[tuple(t.shape) for t in device][:3]} met host "
                                  f"tensor(s) {[tuple(t.shape) for t in host][:3]}; CUDA refuses this "
                                  "(move the host tensor to the model's device)")
        target = _target(name, args, kwargs)
        result = func(*args, **kwargs)
        side = target if target is not None else bool(device)
        if name == "copy_":
            side = on_device(args[0])
        if target is not None and isinstance(result, torch.Tensor) and any(result is t for t in tensors) and \
                on_device(result) != side:
            result = result.clone()  # a move between devices is a copy on a GPU
        for out in tree_flatten(result)[0]:  # new tensors, and a move's result, are where the operation put them
            if isinstance(out, torch.Tensor) and (target is not None or not any(out is t for t in tensors)):
                _set(out, side)
        return result

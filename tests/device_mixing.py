"""A stand-in accelerator on the CPU: catches tensors that a GPU run would find on the wrong device.

CI has no GPU, and on the CPU every tensor is on the same device, so a tensor that a run
makes, loads or caches on the host and then feeds to its model (the bug class of issue 26)
goes unnoticed until a GPU machine runs it. :class:`StandInDevice` is a torch function mode
that gives every tensor a *home*:

* ``run``: placed through the run's device path: made with ``device=`` the stand-in
  (``cpu:0``, which the run's config is given), or moved there with ``.to(...)``;
* ``host``: made by a factory without a device (``torch.zeros(n)``, ``torch.tensor``,
  ``torch.from_numpy``, ``torch.load``, ...), or moved back with ``.cpu()`` / ``.to("cpu")``;
* an op's result inherits its inputs' home (``run`` if any input is ``run``).

``Tensor.device`` answers ``cpu`` for a host tensor and ``cpu:0`` for any other, so
``torch.zeros(n, device=x.device)`` follows ``x`` as it would on a GPU. An op that mixes
a ``run`` tensor with a host tensor of one or more dimensions raises
:class:`DeviceMixing`, as CUDA would (it accepts 0-dim host tensors as scalars and host
index tensors in ``t[idx]``), and so does ``.numpy()`` / ``np.asarray`` of a ``run``
tensor, and a host ``torch.Generator`` drawing on the run's device. Tensors made before the mode started, or inside transforms that re-wrap them
(``torch.func.vmap``), have no home and are never flagged: the check errs on the side of
silence, never of a false alarm.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from typing import Any, Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

STAND_IN = torch.device("cpu", 0)
RUN, HOST = "run", "host"
_ATTR = "_chillfl_home"
_DEVICE = torch._C.TensorBase.__dict__["device"]
_DATA = torch._C.TensorBase.__dict__["data"]
_FACTORIES = {
    "zeros", "ones", "empty", "full", "tensor", "as_tensor", "arange", "range", "linspace", "logspace", "eye",
    "rand", "randn", "randint", "randperm", "normal", "empty_strided", "scalar_tensor", "from_file", "frombuffer",
}
_MOVES = {"to", "cpu", "cuda", "type_as"}
_HOST_OUT = {"numpy", "__array__"}
_SYNCS = {"item", "tolist", "__bool__", "__float__", "__int__", "__index__", "numpy", "__array__"}
"""Reads of a tensor's values on the host: on a GPU each waits for the device (a host sync)."""
_INDEXING = {"__getitem__", "__setitem__", "index_put_", "index_put"}
_EXEMPT = {  # no device of their own: shapes, Python numbers, storage access, cross-device copies
    "copy_", "_has_compatible_shallow_copy_type", "set_", "is_floating_point", "is_complex", "dim", "size", "numel", "__len__",
    "__repr__", "__format__", "__bool__", "item", "tolist", "__index__", "__int__", "__float__", "__hash__", "__eq__", "__reduce_ex__",
    "_typed_storage", "untyped_storage", "storage_offset", "stride", "data_ptr", "element_size", "__deepcopy__",
}


class DeviceMixing(AssertionError):
    """A GPU run would fail here: a host tensor meets a tensor on the run's device."""


def home(t: torch.Tensor) -> str | None:
    return t.__dict__.get(_ATTR) if hasattr(t, "__dict__") else None


_TRACE = os.environ.get("CHILLFL_DEVICE_TRACE") == "1"
"""Debugging aid: remember where each host tensor was made, and name it in the error (slow)."""


def _set_home(t: Any, where: str | None) -> None:
    if where is not None and isinstance(t, torch.Tensor):
        try:
            t.__dict__[_ATTR] = where
            if _TRACE and where == HOST:
                t.__dict__["_chillfl_made"] = "".join(traceback.format_stack(limit=12)[:-2])
        except (AttributeError, TypeError):
            pass


def _is_run_device(device: Any) -> bool | None:
    """True: the stand-in; False: the host; None: no device named."""
    if device is None:
        return None
    if isinstance(device, torch.Tensor):
        return home(device) != HOST
    if isinstance(device, (str, torch.device)):
        d = torch.device(device)
        if d.type == "meta":  # shapes only (the model memory check): neither the host nor the run's device
            return None
        return d.type == "cpu" and d.index == 0 if d.type == "cpu" else True
    return None


def _move_target(name: str, args: tuple, kwargs: dict) -> bool | None:
    if name == "cpu":
        return False
    if name == "cuda":
        return True
    if name == "type_as":
        return home(args[1]) != HOST if len(args) > 1 else None
    for a in list(args[1:]) + [kwargs.get("device"), kwargs.get("other")]:
        if isinstance(a, (str, torch.device, torch.Tensor)):
            return _is_run_device(a)
    return None


def _name(func: Any) -> str:
    return getattr(func, "__name__", str(func))


class StandInDevice(TorchFunctionMode):
    """The mode (see the module's docstring); ``strict``: raise at the first mixing (else record it)."""

    def __init__(self, strict: bool = True) -> None:
        super().__init__()
        self.strict = strict
        self.mixings: list[str] = []
        self.syncs: list[str] = []
        """Host reads of run tensors' values (``.item()``, ``float(t)``, ``.cpu()``, ...): each a host sync on a GPU."""

    def _flag(self, message: str) -> None:
        self.mixings.append(message)
        if self.strict:
            raise DeviceMixing(message)

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = _name(func)
        owner = getattr(func, "__self__", None)
        if owner is _DEVICE and name == "__get__":
            where = home(args[0])
            real = func(*args, **kwargs)
            if real.type != "cpu":  # meta tensors (shape-only model builds) keep their device
                return real
            return torch.device("cpu") if where == HOST else STAND_IN  # no home: silence, never a false alarm
        generator = kwargs.get("generator")
        if isinstance(generator, torch.Generator) and generator.device.type == "cpu":
            on_run = _is_run_device(kwargs.get("device")) or any(home(t) == RUN for t in tree_flatten(args)[0] if isinstance(t, torch.Tensor))
            if on_run:
                self._flag(f"{name}: a host torch.Generator draws on the run's device (CUDA needs a CUDA generator)")
        out = func(*args, **kwargs)
        if owner is _DATA and name == "__set__":  # module.to(): param.data = moved
            _set_home(args[0], home(args[1]))
            return out
        if name in _FACTORIES:
            if name == "as_tensor" and args and isinstance(args[0], torch.Tensor) and kwargs.get("device") is None:
                _set_home(out, home(args[0]))
            else:
                _set_home(out, RUN if _is_run_device(kwargs.get("device")) else HOST)
            return out
        if name in _SYNCS and args and isinstance(args[0], torch.Tensor) and home(args[0]) == RUN:
            self.syncs.append(name)
        if name in _EXEMPT:
            return out
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        homes = [home(t) for t in tensors]
        if name in _HOST_OUT:
            if RUN in homes:
                self._flag(f"{name}() of a tensor on the run's device (a GPU tensor cannot become a numpy array)")
            return out
        if name in _MOVES:
            target = _move_target(name, args, kwargs)
            where = homes[0] if target is None else (RUN if target else HOST)
            if homes[0] == RUN and where == HOST:
                self.syncs.append(name)
            if isinstance(out, torch.Tensor) and out is args[0] and where != homes[0]:
                out = out.view_as(out)  # a no-op move on the CPU: an alias, so that the source keeps its own home
            _set_home(out, where)
            return out
        if name == "__setitem__" and not any(isinstance(t, torch.Tensor) for t in tree_flatten(args[1])[0]):
            result_home = homes[0]  # t[basic index] = rows: a copy_, which crosses devices
        elif name in _INDEXING and tensors and homes[0] == RUN:
            result_home = RUN  # CUDA takes host index tensors in t[idx]
        else:
            big = [(h, t) for h, t in zip(homes, tensors) if h is not None]
            has_run = any(h == RUN for h, _ in big)
            host = [t for h, t in big if h == HOST and t.dim() > 0]
            if has_run and host:
                shapes = ", ".join(str(tuple(t.shape)) for t in host)
                made = "".join(f"\n{t.shape} made at:\n{t.__dict__.get('_chillfl_made')}" for t in host) if _TRACE else ""
                self._flag(f"{name}: host tensor(s) of shape {shapes} meet tensor(s) on the run's device{made}")
            result_home = RUN if has_run else HOST if any(h == HOST for h, _ in big) else None
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and home(t) is None:
                _set_home(t, result_home)
        return out


def _host_made(make: Any) -> Any:
    def made(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = make(*args, **kwargs)
        _set_home(out, HOST)
        return out

    return made


def _keeps_home(wrap: Any) -> Any:
    """functorch's (un)wrapping of a tensor for vmap/grad, which torch function modes do not see: the wrapper keeps the home."""

    def wrapped(t: Any, *args: Any, **kwargs: Any) -> Any:
        out = wrap(t, *args, **kwargs)
        if isinstance(t, torch.Tensor) and out is not t:
            _set_home(out, home(t))
        return out

    return wrapped


def _parameter_new(new: Any) -> Any:
    """``nn.Parameter(data)`` wraps ``data`` in C (``_make_subclass``), unseen by the mode: the parameter keeps ``data``'s home."""

    def made(cls: Any, data: Any = None, requires_grad: bool = True) -> Any:
        out = new(cls, data, requires_grad)
        if isinstance(data, torch.Tensor):
            _set_home(out, home(data))
        return out

    return made


@contextlib.contextmanager
def stand_in_device(strict: bool = True) -> Iterator[StandInDevice]:
    """The mode, plus what it cannot see: ``torch.from_numpy`` makes host tensors, functorch's wrappers and
    ``nn.Parameter`` keep their tensor's home."""
    import torch._functorch.eager_transforms as eager
    import torch._functorch.vmap as vmap

    patches = [(torch, "from_numpy", _host_made(torch.from_numpy)), (torch.nn.Parameter, "__new__", _parameter_new(torch.nn.Parameter.__new__))]
    patches += [(vmap, name, _keeps_home(getattr(vmap, name))) for name in ("_add_batch_dim", "_remove_batch_dim")]
    patches += [(eager, name, _keeps_home(getattr(eager, name))) for name in ("_wrap_for_grad", "_unwrap_for_grad")]
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    mode = StandInDevice(strict)
    for owner, name, new in patches:
        setattr(owner, name, new)
    try:
        with mode:
            yield mode
    finally:
        for owner, name, old in originals:
            setattr(owner, name, old)

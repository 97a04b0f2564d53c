"""CUDA's deterministic-mode failures, caught on the CPU.

With ``deterministic = true`` (the default) a CUDA run calls
``torch.use_deterministic_algorithms(True)``, and then every op that has only a
non-deterministic CUDA kernel raises ``RuntimeError: ... does not have a
deterministic implementation``. On the CPU the same ops run without complaint,
so such a failure waits for a GPU machine (issue 26's bug class, in another
form). :class:`DeterministicAlerts` is a torch *dispatch* mode: it sees every
aten op below autograd and vmap, backward ops included, and raises
:class:`NondeterministicOnCuda` for the ops on PyTorch's list (the docstring of
``torch.use_deterministic_algorithms``, torch 2.13: the ops that "will throw a
RuntimeError when mode=True"), with the list's conditions (``cumsum`` of a
floating tensor, ``bincount`` with weights, ``median`` with indices, ...).

It flags an op whatever the device of its tensors: a host-side call of one of
these ops would be flagged too (none exists; the check errs toward an alarm
that names the op, never toward silence).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ALWAYS = frozenset({
    "avg_pool3d_backward", "_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward", "adaptive_max_pool2d_backward",
    "fractional_max_pool2d_backward", "fractional_max_pool3d_backward", "max_unpool2d", "max_unpool3d",
    "upsample_linear1d_backward", "upsample_bilinear2d_backward", "upsample_bicubic2d_backward", "upsample_trilinear3d_backward",
    "_upsample_bilinear2d_aa_backward", "_upsample_bicubic2d_aa_backward",
    "reflection_pad1d_backward", "reflection_pad2d_backward", "reflection_pad3d_backward",
    "nll_loss2d_forward", "_ctc_loss_backward", "histc", "grid_sampler_2d_backward", "grid_sampler_3d_backward", "put", "put_",
})
"""Ops with no deterministic CUDA kernel at all (backward ops where the list says "when attempting to differentiate")."""


class NondeterministicOnCuda(AssertionError):
    """A CUDA run with ``deterministic = true`` would raise here."""


def _floating(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())


def alert(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether op ``name`` (its overload packet's name) with these arguments raises on CUDA under deterministic algorithms."""
    if name in ALWAYS:
        return True
    if name in ("cumsum", "cumsum_"):  # floating or complex only (integer cumsums stay allowed)
        dtype = kwargs.get("dtype")
        return bool(args) and (_floating(args[0]) if dtype is None else (dtype.is_floating_point or dtype.is_complex))
    if name == "bincount":
        weights = args[1] if len(args) > 1 else kwargs.get("weights")
        return weights is not None
    if name in ("median", "nanmedian"):  # with indices: the dim overloads
        return len(args) > 1 or "dim" in kwargs
    if name in ("scatter_reduce", "scatter_reduce_"):
        reduce = args[3] if len(args) > 3 else kwargs.get("reduce")
        return reduce == "prod"
    if name == "_embedding_bag_backward":  # mode 'max' (2)
        mode = args[7] if len(args) > 7 else kwargs.get("mode")
        return mode == 2
    return False


class DeterministicAlerts(TorchDispatchMode):
    """The mode (see the module docstring). ``strict``: raise at the first such op; else record them in ``seen``."""

    def __init__(self, strict: bool = True) -> None:
        super().__init__()
        self.strict = strict
        self.seen: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = func._overloadpacket.__name__
        if alert(name, args, kwargs):
            self.seen.append(name)
            if self.strict:
                raise NondeterministicOnCuda(f"{name}: no deterministic CUDA kernel; a CUDA run with deterministic = true raises here")
        return func(*args, **kwargs)

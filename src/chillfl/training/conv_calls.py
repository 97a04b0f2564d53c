"""What the vmapped step's convolution rewrites share (``batched_conv = "gemm"`` / ``"nhwc"`` / ``"loop"``): the call they take over,
and the batch norm after it.

Both are ``TorchFunctionMode`` s around the step's forward: they see each functional convolution call with its
arguments, rewrite the plain ones (:func:`plain_conv_call`), and pass every other call through.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


def pair(value: int | Sequence[int]) -> tuple[int, int]:
    """A convolution's stride / padding / dilation as two ints."""
    if isinstance(value, int):
        return value, value
    first, second = value
    return int(first), int(second)


class ConvCall(NamedTuple):
    """A functional convolution's arguments by name (``groups`` checked to be 1 and dropped)."""

    input: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor | None = None
    stride: int | Sequence[int] = 1
    padding: int | Sequence[int] = 0
    dilation: int | Sequence[int] = 1


def plain_conv_call(args: tuple, kwargs: Mapping[str, Any], dims: int) -> ConvCall | None:
    """A convolution call's arguments if it is a plain one (``groups = 1``, numeric padding, a ``dims``-d input), else None
    (it runs as it was)."""
    bound = dict(zip((*ConvCall._fields, "groups"), args)) | dict(kwargs)
    if bound.pop("groups", 1) != 1:
        return None
    call = ConvCall(**bound)
    if not (isinstance(call.input, torch.Tensor) and call.input.dim() == dims and not isinstance(call.padding, str)):
        return None
    return call


class BatchNormAsksLayout(TorchFunctionMode):
    """Passes every call through, except that batch norm gets a contiguous copy of a non-contiguous input.

    Why: both rewrites return NHWC views, and torch 2.11's CUDA batch norm asks a non-contiguous input whether it is
    channels-last, which vmap cannot answer ("NYI: querying is_contiguous inside of vmap"; seen on an H200). The other
    ops after a convolution take the NHWC view as it is.
    """

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Mapping[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is F.batch_norm and args and isinstance(args[0], torch.Tensor) and not args[0].is_contiguous():
            return func(args[0].contiguous(), *args[1:], **kwargs)
        return func(*args, **kwargs)

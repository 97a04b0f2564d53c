"""The clients' convolutions as ONE channels-last grouped convolution, for the vmapped step (``batched_conv = "nhwc"``).

Under ``vmap`` a per-client ``conv2d`` becomes one grouped convolution with the
clients folded into the channels (groups = clients). vmap folds them in
NCHW order: ``x [N, clients * C, H, W]`` contiguous. On an H200, cuDNN ran
that form as one small kernel per client (issue 26; docs/gpu.md), and a
layout of a client's own batch (``memory_format = "channels_last"``) does not
reach it: vmap's fold copies it back to NCHW.

This mode hands cuDNN (or oneDNN) the same grouped convolution in NHWC
order, the clients' channels interleaved as its groups:

    x [clients, N, C, H, W]  ->  memory (N, H, W, clients, C)  ->  [N, clients * C, H, W] channels-last
    w [clients, O, C, k, k]  ->  memory (clients, O, k, k, C)  ->  [clients * O, C, k, k] channels-last

NHWC is the layout in which cuDNN's tensor-core kernels (TF32, bf16) take a
grouped convolution, and the output comes back NHWC. Max-pooling (``nn.MaxPool2d``)
runs on the same folded tensor (it pools each channel's plane, so the fold
changes nothing but the layout): vmap's own pooling rule folds the clients
into the batch instead and copies the tensor back to NCHW. Element-wise ops
(ReLU) keep the layout, so in a McMahan-style CNN (conv -> pool -> ReLU) each
convolution finds its input already laid out. On that CNN under vmap the
layout copies of a step fell from 453 KB to 137 KB a client sample (CPU,
counted with a dispatch mode; ``tests/test_conv_nhwc.py`` holds the direction).

It is a custom autograd function with its own vmap rule: outside vmap (one
client) it is ``F.conv2d``; the backward's input and weight gradients are two
more such functions, so they too run grouped and NHWC, and only the ones
asked for (the first layer's input gradient, the data's, is never taken). The
maths is the convolution's; the rounding is the kernel's that cuDNN picks
for NHWC. Under bf16 autocast the inputs are cast before the function (the
casts' backward returns fp32 gradients, as autocast's own). Higher-order
gradients are not supported (no chillfl step takes them).

Only plain ``conv2d`` calls on a 4-d input (``groups = 1``, numeric padding)
and ``max_pool2d`` calls on a 4-d input that return no indices are rewritten;
anything else runs as it was. Not the default: whether it is
faster is for ``benchmarks/conv_kernels.py`` and ``gpu-check.sh`` to measure on
a GPU; on the CPU the vectorised executor trains large convolutions client by
client, so the mode rarely applies there.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F

from chillfl.training.conv_calls import BatchNormAsksLayout, pair, plain_conv_call

Pair = tuple[int, int]


def _front(t: torch.Tensor, dim: int | None, size: int) -> torch.Tensor:
    """``t`` with its vmapped dim first (an unbatched ``t`` expanded to ``size`` clients, as each client's own)."""
    return t.movedim(dim, 0) if dim is not None else t.unsqueeze(0).expand(size, *t.shape)


def fold_input(x: torch.Tensor) -> torch.Tensor:
    """[clients, N, C, H, W] -> [N, clients * C, H, W], channels-last (memory N, H, W, clients, C; no copy if already so)."""
    b, n, c, h, w = x.shape
    return x.permute(1, 3, 4, 0, 2).contiguous().view(n, h, w, b * c).permute(0, 3, 1, 2)


def fold_weight(w: torch.Tensor) -> torch.Tensor:
    """[clients, O, C, kh, kw] -> [clients * O, C, kh, kw], channels-last (memory clients, O, kh, kw, C)."""
    b, o, c, kh, kw = w.shape
    return w.permute(0, 1, 3, 4, 2).contiguous().view(b * o, kh, kw, c).permute(0, 3, 1, 2)


class _Conv(torch.autograd.Function):
    """``F.conv2d(x, w, b, stride, padding, dilation)``; under vmap one NHWC grouped convolution over the clients."""

    generate_vmap_rule = False

    @staticmethod
    def forward(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, stride: Pair, padding: Pair, dilation: Pair) -> torch.Tensor:
        return F.conv2d(x, w, b, stride, padding, dilation)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        x, w, b, stride, padding, dilation = inputs
        ctx.save_for_backward(x, w)
        ctx.geometry = stride, padding, dilation
        ctx.has_bias = b is not None

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor) -> tuple:
        x, w = ctx.saved_tensors
        needs = ctx.needs_input_grad
        gx = _Grad.apply(gy, x, w, *ctx.geometry, INPUT) if needs[0] else None
        gw = _Grad.apply(gy, x, w, *ctx.geometry, WEIGHT) if needs[1] else None
        gb = gy.sum((0, 2, 3)) if ctx.has_bias and needs[2] else None
        return gx, gw, gb, None, None, None

    @staticmethod
    def vmap(info: Any, in_dims: tuple, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, stride: Pair, padding: Pair,
             dilation: Pair) -> tuple[torch.Tensor, int]:
        n = info.batch_size
        xs, ws = _front(x, in_dims[0], n), _front(w, in_dims[1], n)
        bias = None if b is None else _front(b, in_dims[2], n).reshape(-1)
        y = F.conv2d(fold_input(xs), fold_weight(ws), bias, stride, padding, dilation, groups=n)
        return y.unflatten(1, (n, -1)), 1  # [N, clients, O, H', W']: the clients at dim 1


class _FirstOrder(torch.autograd.Function):
    """A gradient's own function (under vmap, its own rule): its gradient, a second-order one, is never taken."""

    generate_vmap_rule = False

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple:
        raise RuntimeError("batched_conv = 'nhwc' takes no second-order gradients")


class _Grad(_FirstOrder):
    """One of the convolution's gradients (``which``: 0 the input's, 1 the weight's); under vmap one NHWC grouped
    gradient over the clients."""

    @staticmethod
    def forward(gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, stride: Pair, padding: Pair, dilation: Pair, which: int) -> torch.Tensor:
        return _grads(gy, x, w, stride, padding, dilation, 1, which)

    @staticmethod
    def vmap(info: Any, in_dims: tuple, gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, stride: Pair, padding: Pair,
             dilation: Pair, which: int) -> tuple[torch.Tensor, int]:
        n = info.batch_size
        gys, xs, ws = (_front(t, d, n) for t, d in zip((gy, x, w), in_dims))
        g = _grads(fold_input(gys), fold_input(xs), fold_weight(ws), stride, padding, dilation, n, which)
        # the input gradient [N, clients * C, H, W] has the clients at dim 1, the weight's [clients * O, C, kh, kw] at dim 0
        return (g.unflatten(1, (n, -1)), 1) if which == INPUT else (g.unflatten(0, (n, -1)), 0)


INPUT, WEIGHT = 0, 1
"""``_Grad``'s ``which``."""


def _grads(gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, stride: Pair, padding: Pair, dilation: Pair, groups: int,
           which: int) -> torch.Tensor:
    """A convolution's input (``which = INPUT``) or weight gradient, the other not computed (the bias gradient is a sum,
    taken outside)."""
    grads = torch.ops.aten.convolution_backward(gy, x, w, None, list(stride), list(padding), list(dilation), False, [0, 0],
                                                groups, [which == INPUT, which == WEIGHT, False])
    return grads[which]


class _MaxPool(torch.autograd.Function):
    """``max_pool2d_with_indices``; under vmap on the clients' folded NHWC tensor (pooling is per channel: the fold
    changes nothing but the layout), so that a convolution's NHWC output reaches the next one without a copy."""

    generate_vmap_rule = False

    @staticmethod
    def forward(x: torch.Tensor, kernel: Pair, stride: Pair, padding: Pair, dilation: Pair, ceil: bool) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.ops.aten.max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple[torch.Tensor, torch.Tensor]) -> None:
        x, *geometry = inputs
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(x, output[1])
        ctx.geometry = geometry

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor, _indices: Any) -> tuple:
        x, indices = ctx.saved_tensors
        return _MaxPoolGrad.apply(gy, x, indices, *ctx.geometry), None, None, None, None, None

    @staticmethod
    def vmap(info: Any, in_dims: tuple, x: torch.Tensor, kernel: Pair, stride: Pair, padding: Pair, dilation: Pair,
             ceil: bool) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[int, int]]:
        n = info.batch_size
        out, indices = torch.ops.aten.max_pool2d_with_indices(fold_input(_front(x, in_dims[0], n)), kernel, stride, padding, dilation, ceil)
        return (out.unflatten(1, (n, -1)), indices.unflatten(1, (n, -1))), (1, 1)


class _MaxPoolGrad(_FirstOrder):
    """The max-pool's input gradient (each window's gradient to its maximum); under vmap on the folded NHWC tensors.
    The indices are positions within a channel's plane, so they fold as the values do."""

    @staticmethod
    def forward(gy: torch.Tensor, x: torch.Tensor, indices: torch.Tensor, kernel: Pair, stride: Pair, padding: Pair, dilation: Pair,
                ceil: bool) -> torch.Tensor:
        return torch.ops.aten.max_pool2d_with_indices_backward(gy, x, kernel, stride, padding, dilation, ceil, indices)

    @staticmethod
    def vmap(info: Any, in_dims: tuple, gy: torch.Tensor, x: torch.Tensor, indices: torch.Tensor, kernel: Pair, stride: Pair,
             padding: Pair, dilation: Pair, ceil: bool) -> tuple[torch.Tensor, int]:
        n = info.batch_size
        gys, xs, idx = (fold_input(_front(t, d, n)) for t, d in zip((gy, x, indices), in_dims))
        gx = torch.ops.aten.max_pool2d_with_indices_backward(gys, xs, kernel, stride, padding, dilation, ceil, idx)
        return gx.unflatten(1, (n, -1)), 1


def max_pool2d_nhwc(x: torch.Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                    padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False) -> torch.Tensor:
    """``F.max_pool2d`` (no indices returned); under vmap on the clients' folded NHWC tensor."""
    kernel = pair(kernel_size)
    step = kernel if stride is None or (not isinstance(stride, int) and len(stride) == 0) else pair(stride)
    return _MaxPool.apply(x, kernel, step, pair(padding), pair(dilation), bool(ceil_mode))[0]


def conv2d_nhwc(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride: int | Sequence[int] = 1,
                padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1) -> torch.Tensor:
    """``F.conv2d`` with ``groups = 1``; under vmap the clients' convolutions run as one NHWC grouped convolution.

    Under autocast the inputs are cast to its dtype first and the function runs without it: the casts' backward gives
    the fp32 gradients autocast's own convolution would, and the function's backward sees one dtype.
    """
    device = x.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        x, weight = x.to(dtype), weight.to(dtype)
        bias = None if bias is None else bias.to(dtype)
    with torch.autocast(device, enabled=False):
        return _Conv.apply(x, weight, bias, pair(stride), pair(padding), pair(dilation))


_POOL_ARGS = ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices")


class NhwcConvolutions(BatchNormAsksLayout):
    """Every plain ``conv2d`` of the forward (``nn.Conv2d`` calls it) as :func:`conv2d_nhwc`, and every ``max_pool2d``
    of a 4-d input that returns no indices (``nn.MaxPool2d``) as :func:`max_pool2d_nhwc`."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Mapping[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is F.conv2d and (call := plain_conv_call(args, kwargs, 4)) is not None:
            return conv2d_nhwc(*call)
        if func is F.max_pool2d:
            bound = dict(zip(_POOL_ARGS, args)) | dict(kwargs)
            x = bound.pop("input")
            if not bound.pop("return_indices", False) and isinstance(x, torch.Tensor) and x.dim() == 4:
                return max_pool2d_nhwc(x, **bound)
        return super().__torch_function__(func, types, args, kwargs)

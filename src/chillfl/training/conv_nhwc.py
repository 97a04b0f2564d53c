"""The clients' convolutions channels-last, for the vmapped step: ONE grouped convolution (``batched_conv = "nhwc"``)
or one plain convolution per client (``batched_conv = "loop"``).

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

``loop`` (:data:`PER_CLIENT`) folds the clients into the batch instead: between layers a batched tensor's
memory is ``(clients, N, H, W, C)``, each client's slice one contiguous channels-last batch, and each
convolution and gradient is one plain (``groups = 1``) channels-last call per client: the form in which cuDNN
picks its tensor-core kernels for any convolution, at the price of a launch per client (meant with
``cuda_graphs = true``, where a step's launches replay as one). The max-pools run once on the fold
``[clients * N, C, H, W]``, as with ``nhwc``.

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
Geometry = tuple[Pair, Pair, Pair]
"""A convolution's stride, padding and dilation."""
PoolGeometry = tuple[Pair, Pair, Pair, Pair, bool]
"""A max-pool's kernel, stride, padding, dilation and ceil mode."""


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


def _per_client_weight(ws: torch.Tensor) -> torch.Tensor:
    """[clients, O, C, kh, kw] with each client's filter bank channels-last (memory clients, O, kh, kw, C)."""
    return ws.permute(0, 1, 3, 4, 2).contiguous().permute(0, 1, 4, 2, 3)


class Fold:
    """How a vmap rule lays the clients of a batched tensor out for its kernels, and runs their convolutions.

    A batched activation arrives as ``[clients, N, C, H, W]``; :meth:`input` makes it one 4-d channels-last tensor,
    :meth:`output` turns a 4-d result of the same fold back into a batched one (the tensor and its clients' dim).
    """

    def input(self, xs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def output(self, y: torch.Tensor, n: int) -> tuple[torch.Tensor, int]:
        raise NotImplementedError

    def conv(self, xs: torch.Tensor, ws: torch.Tensor, bias: torch.Tensor | None, geometry: Geometry, n: int) -> tuple[torch.Tensor, int]:
        """The clients' convolutions of ``xs`` by ``ws`` (``[clients, O, C, kh, kw]``) and ``bias`` (``[clients, O]``)."""
        raise NotImplementedError

    def grad(self, gys: torch.Tensor, xs: torch.Tensor, ws: torch.Tensor, geometry: Geometry, n: int, which: int) -> tuple[torch.Tensor, int]:
        """One of the clients' convolution gradients (``which``: :data:`INPUT` or :data:`WEIGHT`), batched."""
        raise NotImplementedError


class _Groups(Fold):
    """``nhwc``: the clients' channels interleaved as the groups of ONE grouped convolution (:func:`fold_input`)."""

    def input(self, xs: torch.Tensor) -> torch.Tensor:
        return fold_input(xs)

    def output(self, y: torch.Tensor, n: int) -> tuple[torch.Tensor, int]:
        return y.unflatten(1, (n, -1)), 1  # [N, clients, C, H, W]: the clients at dim 1

    def conv(self, xs: torch.Tensor, ws: torch.Tensor, bias: torch.Tensor | None, geometry: Geometry, n: int) -> tuple[torch.Tensor, int]:
        flat_bias = None if bias is None else bias.reshape(-1)
        return self.output(F.conv2d(fold_input(xs), fold_weight(ws), flat_bias, *geometry, groups=n), n)

    def grad(self, gys: torch.Tensor, xs: torch.Tensor, ws: torch.Tensor, geometry: Geometry, n: int, which: int) -> tuple[torch.Tensor, int]:
        g = _grads(fold_input(gys), fold_input(xs), fold_weight(ws), geometry, n, which)
        # the input gradient [N, clients * C, H, W] has the clients at dim 1, the weight's [clients * O, C, kh, kw] at dim 0
        return self.output(g, n) if which == INPUT else (g.unflatten(0, (n, -1)), 0)


class _PerClient(Fold):
    """``loop``: the clients folded into the batch, ``[clients * N, C, H, W]`` channels-last; one call per client."""

    def input(self, xs: torch.Tensor) -> torch.Tensor:
        b, n, c, h, w = xs.shape
        return xs.permute(0, 1, 3, 4, 2).contiguous().view(b * n, h, w, c).permute(0, 3, 1, 2)  # no copy if already so

    def output(self, y: torch.Tensor, n: int) -> tuple[torch.Tensor, int]:
        return y.unflatten(0, (n, -1)), 0

    def conv(self, xs: torch.Tensor, ws: torch.Tensor, bias: torch.Tensor | None, geometry: Geometry, n: int) -> tuple[torch.Tensor, int]:
        x, w, size = self.input(xs), _per_client_weight(ws), xs.shape[1]
        ys = [F.conv2d(x[i * size:(i + 1) * size], w[i], None if bias is None else bias[i], *geometry) for i in range(n)]
        return self.output(torch.cat(ys), n)  # cat keeps the inputs' channels-last layout

    def grad(self, gys: torch.Tensor, xs: torch.Tensor, ws: torch.Tensor, geometry: Geometry, n: int, which: int) -> tuple[torch.Tensor, int]:
        gy, x, w, size = self.input(gys), self.input(xs), _per_client_weight(ws), xs.shape[1]
        gs = [_grads(gy[i * size:(i + 1) * size], x[i * size:(i + 1) * size], w[i], geometry, 1, which) for i in range(n)]
        return self.output(torch.cat(gs), n) if which == INPUT else (torch.stack(gs), 0)


GROUPS, PER_CLIENT = _Groups(), _PerClient()
"""The folds of ``batched_conv = "nhwc"`` and ``"loop"``."""


class _Conv(torch.autograd.Function):
    """``F.conv2d(x, w, b, stride, padding, dilation)``; under vmap the clients' convolutions in ``fold``."""

    generate_vmap_rule = False

    @staticmethod
    def forward(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, geometry: Geometry, fold: Fold) -> torch.Tensor:
        return F.conv2d(x, w, b, *geometry)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        x, w, b, geometry, fold = inputs
        ctx.save_for_backward(x, w)
        ctx.geometry, ctx.fold = geometry, fold
        ctx.has_bias = b is not None

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor) -> tuple:
        x, w = ctx.saved_tensors
        needs = ctx.needs_input_grad
        gx = _Grad.apply(gy, x, w, ctx.geometry, INPUT, ctx.fold) if needs[0] else None
        gw = _Grad.apply(gy, x, w, ctx.geometry, WEIGHT, ctx.fold) if needs[1] else None
        gb = gy.sum((0, 2, 3)) if ctx.has_bias and needs[2] else None
        return gx, gw, gb, None, None

    @staticmethod
    def vmap(info: Any, in_dims: tuple, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, geometry: Geometry,
             fold: Fold) -> tuple[torch.Tensor, int]:
        n = info.batch_size
        bias = None if b is None else _front(b, in_dims[2], n)
        return fold.conv(_front(x, in_dims[0], n), _front(w, in_dims[1], n), bias, geometry, n)


class _FirstOrder(torch.autograd.Function):
    """A gradient's own function (under vmap, its own rule): its gradient, a second-order one, is never taken."""

    generate_vmap_rule = False

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple:
        raise RuntimeError("batched_conv = 'nhwc' / 'loop' takes no second-order gradients (batched_conv = 'auto' picks 'nhwc' "
                           "on CUDA in bf16 and TF32 where cuda_graphs records the steps: plain SGD at a constant local rate, no dp-sgd): "
                           "set batched_conv = 'grouped' or 'gemm' for a step that needs them")


class _Grad(_FirstOrder):
    """One of the convolution's gradients (``which``: 0 the input's, 1 the weight's); under vmap the clients' in
    ``fold``."""

    @staticmethod
    def forward(gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, geometry: Geometry, which: int, fold: Fold) -> torch.Tensor:
        return _grads(gy, x, w, geometry, 1, which)

    @staticmethod
    def vmap(info: Any, in_dims: tuple, gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, geometry: Geometry, which: int,
             fold: Fold) -> tuple[torch.Tensor, int]:
        n = info.batch_size
        gys, xs, ws = (_front(t, d, n) for t, d in zip((gy, x, w), in_dims))
        return fold.grad(gys, xs, ws, geometry, n, which)


INPUT, WEIGHT = 0, 1
"""``_Grad``'s ``which``."""


def _grads(gy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, geometry: Geometry, groups: int, which: int) -> torch.Tensor:
    """A convolution's input (``which = INPUT``) or weight gradient, the other not computed (the bias gradient is a sum,
    taken outside)."""
    stride, padding, dilation = geometry
    grads = torch.ops.aten.convolution_backward(gy, x, w, None, list(stride), list(padding), list(dilation), False, [0, 0],
                                                groups, [which == INPUT, which == WEIGHT, False])
    return grads[which]


class _MaxPool(torch.autograd.Function):
    """``max_pool2d_with_indices``; under vmap once on the clients' folded channels-last tensor (pooling is per channel
    plane: either fold changes nothing but the layout), so that a convolution's output reaches the next one without a
    copy."""

    generate_vmap_rule = False

    @staticmethod
    def forward(x: torch.Tensor, pool: PoolGeometry, fold: Fold) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.ops.aten.max_pool2d_with_indices(x, *pool)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple[torch.Tensor, torch.Tensor]) -> None:
        x, ctx.pool, ctx.fold = inputs
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(x, output[1])

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor, _indices: Any) -> tuple:
        x, indices = ctx.saved_tensors
        return _MaxPoolGrad.apply(gy, x, indices, ctx.pool, ctx.fold), None, None

    @staticmethod
    def vmap(info: Any, in_dims: tuple, x: torch.Tensor, pool: PoolGeometry, fold: Fold
             ) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[int, int]]:
        n = info.batch_size
        out, indices = torch.ops.aten.max_pool2d_with_indices(fold.input(_front(x, in_dims[0], n)), *pool)
        (out, dim), (indices, _) = fold.output(out, n), fold.output(indices, n)
        return (out, indices), (dim, dim)


class _MaxPoolGrad(_FirstOrder):
    """The max-pool's input gradient (each window's gradient to its maximum); under vmap on the folded tensors.
    The indices are positions within a channel's plane, so they fold as the values do."""

    @staticmethod
    def forward(gy: torch.Tensor, x: torch.Tensor, indices: torch.Tensor, pool: PoolGeometry, fold: Fold) -> torch.Tensor:
        return torch.ops.aten.max_pool2d_with_indices_backward(gy, x, *pool, indices)

    @staticmethod
    def vmap(info: Any, in_dims: tuple, gy: torch.Tensor, x: torch.Tensor, indices: torch.Tensor, pool: PoolGeometry,
             fold: Fold) -> tuple[torch.Tensor, int]:
        n = info.batch_size
        gys, xs, idx = (fold.input(_front(t, d, n)) for t, d in zip((gy, x, indices), in_dims))
        return fold.output(torch.ops.aten.max_pool2d_with_indices_backward(gys, xs, *pool, idx), n)


def max_pool2d_nhwc(x: torch.Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                    padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
                    fold: Fold = GROUPS) -> torch.Tensor:
    """``F.max_pool2d`` (no indices returned); under vmap once on the clients' tensor folded by ``fold``."""
    kernel = pair(kernel_size)
    step = kernel if stride is None or (not isinstance(stride, int) and len(stride) == 0) else pair(stride)
    return _MaxPool.apply(x, (kernel, step, pair(padding), pair(dilation), bool(ceil_mode)), fold)[0]


def conv2d_nhwc(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride: int | Sequence[int] = 1,
                padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, fold: Fold = GROUPS) -> torch.Tensor:
    """``F.conv2d`` with ``groups = 1``; under vmap the clients' convolutions run channels-last in ``fold`` (:data:`GROUPS`:
    one grouped convolution; :data:`PER_CLIENT`: one per client).

    Under autocast the inputs are cast to its dtype first and the function runs without it: the casts' backward gives
    the fp32 gradients autocast's own convolution would, and the function's backward sees one dtype.
    """
    device = x.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        x, weight = x.to(dtype), weight.to(dtype)
        bias = None if bias is None else bias.to(dtype)
    with torch.autocast(device, enabled=False):
        return _Conv.apply(x, weight, bias, (pair(stride), pair(padding), pair(dilation)), fold)


_POOL_ARGS = ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices")


class NhwcConvolutions(BatchNormAsksLayout):
    """Every plain ``conv2d`` of the forward (``nn.Conv2d`` calls it) as :func:`conv2d_nhwc`, and every ``max_pool2d``
    of a 4-d input that returns no indices (``nn.MaxPool2d``) as :func:`max_pool2d_nhwc`, in :attr:`fold`."""

    fold: Fold = GROUPS

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Mapping[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is F.conv2d and (call := plain_conv_call(args, kwargs, 4)) is not None:
            return conv2d_nhwc(*call, fold=self.fold)
        if func is F.max_pool2d:
            bound = dict(zip(_POOL_ARGS, args)) | dict(kwargs)
            x = bound.pop("input")
            if not bound.pop("return_indices", False) and isinstance(x, torch.Tensor) and x.dim() == 4:
                return max_pool2d_nhwc(x, **bound, fold=self.fold)
        return super().__torch_function__(func, types, args, kwargs)


class LoopConvolutions(NhwcConvolutions):
    """``batched_conv = "loop"``: as :class:`NhwcConvolutions`, one plain channels-last convolution per client."""

    fold = PER_CLIENT

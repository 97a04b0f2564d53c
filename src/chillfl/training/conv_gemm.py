"""The clients' convolutions as batched matrix products, for the vmapped step (``batched_conv = "gemm"``).

Under ``vmap`` a per-client ``conv2d`` becomes ONE grouped convolution, the
clients folded into the channels (:mod:`chillfl.executors.vectorized`). On an
H200, cuDNN ran those grouped convolutions with one kernel per client and
step (issue 26: 75,647 kernel launches in a round of 5,000 client steps;
14.5 % of the FP32 peak; bf16 only 1.35x faster), so the round was bound by
launches, not by FLOPs.

This mode writes each client's convolution as im2col + one matrix product:

    cols = unfold(x)                                   # [N, K, L], K = C_in kh kw, L = H_out W_out
    out  = cols^T (N L, K) @ W^T (K, C_out)            # [N L, C_out] -> [N, C_out, H_out, W_out] (NHWC in memory)

Under ``vmap`` the product is ONE batched GEMM over all clients of the chunk,
whatever their number, with shapes that suit tensor cores (TF32, bf16);
autograd gives the backward as two more batched GEMMs and one ``col2im``. The
price is memory traffic: the columns are materialised, twice (K x L elements a
sample: 0.24 and 0.32 MB for the McMahan CNN's two layers on 32x32 in fp32,
against outputs of 0.10 and 0.03 MB).

Not the default. On the CPU it was slower than oneDNN's grouped convolution:
1.9-2.5x in fp32, 1.1-1.3x in bf16 (``benchmarks/conv_layouts.py --device cpu``,
one thread, McMahan CNN, chunks of 4 and 16 clients x 100 samples; one run on
the shared 2-core Xeon). On an H200 (2026-11-30, torch 2.11) workload 1's round
was 5x slower than with the grouped convolutions (5.36 s against 1.00 s, both
with CUDA graphs; docs/gpu.md); ``benchmarks/gpu-check.sh`` keeps timing it.
Same maths as the convolution, other rounding: the tests compare it with the
sequential executor within float tolerance.

Only plain convolutions are rewritten: ``conv2d`` (4-d input) and ``conv1d``
(3-d input, as a 2-d convolution of height 1), ``groups = 1``, numeric
padding; any other call (grouped or depthwise layers, ``padding = "same"``)
runs as it was.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F

from chillfl.training.conv_calls import BatchNormAsksLayout, pair, plain_conv_call


def conv2d_as_gemm(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
) -> torch.Tensor:
    """``F.conv2d(x, weight, bias, stride, padding, dilation)`` with ``groups = 1``, as unfold + one matrix product.

    The output is laid out NHWC in memory (a channels-last view of
    [N, C_out, H_out, W_out]): the product's rows are (sample, position), so no
    copy is needed to give it the convolution's shape.
    """
    s, p, d = pair(stride), pair(padding), pair(dilation)
    n, _, h, w = x.shape
    out_channels, _, kh, kw = weight.shape
    h_out = (h + 2 * p[0] - d[0] * (kh - 1) - 1) // s[0] + 1
    w_out = (w + 2 * p[1] - d[1] * (kw - 1) - 1) // s[1] + 1
    if torch.is_autocast_enabled(x.device.type):  # unfold in the product's dtype: half the columns' bytes under bf16
        x = x.to(torch.get_autocast_dtype(x.device.type))
    cols = F.unfold(x, (kh, kw), dilation=d, padding=p, stride=s)  # [N, K, L]
    k = cols.shape[1]
    rows = cols.transpose(1, 2).reshape(n * h_out * w_out, k)  # [N L, K]
    out = rows @ weight.reshape(out_channels, k).t()  # [N L, C_out]
    if bias is not None:
        out = out + bias.to(out.dtype)
    return out.reshape(n, h_out, w_out, out_channels).permute(0, 3, 1, 2)


def conv1d_as_gemm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride: int | Sequence[int] = 1,
                   padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1) -> torch.Tensor:
    """``F.conv1d`` with ``groups = 1``: a 2-d convolution of height 1, through :func:`conv2d_as_gemm`."""
    one = lambda v: int(v if isinstance(v, int) else v[0])  # noqa: E731 - conv1d's arguments are an int or a 1-tuple
    out = conv2d_as_gemm(x.unsqueeze(2), weight.unsqueeze(2), bias, (1, one(stride)), (0, one(padding)), (1, one(dilation)))
    return out.squeeze(2)


_AS_GEMM = {F.conv2d: (conv2d_as_gemm, 4), F.conv1d: (conv1d_as_gemm, 3)}
"""The functional convolution -> (its GEMM form, the input's dimensions it handles: a batched input; unbatched ones run as they were)."""


class GemmConvolutions(BatchNormAsksLayout):
    """Every plain ``conv2d`` and ``conv1d`` of the forward (``nn.Conv2d`` / ``nn.Conv1d`` call them) in its GEMM form."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Mapping[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        form = _AS_GEMM.get(func)
        call = plain_conv_call(args, kwargs, form[1]) if form is not None else None
        if form is None or call is None:
            return super().__torch_function__(func, types, args, kwargs)
        return form[0](*call)

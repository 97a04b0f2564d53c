"""The clients' convolutions as batched matrix products, for the vmapped step (``batched_conv = "gemm"``).

Under ``vmap`` a per-client ``conv2d`` becomes ONE grouped convolution, the
clients folded into the channels (:mod:`chillfl.executors.vectorized`). On an
H200, cuDNN ran those grouped convolutions with one kernel per client and
step (issue 26: 75,647 kernel launches in a round of 5,000 client steps;
14.5 % of the FP32 peak; bf16 only 1.35x faster), so the round was bound by
launches, not by FLOPs.

This mode writes each client's convolution as a gather of its windows + one matrix product:

    cols = pixels[:, window_index]                     # [N, (L + 1) kh kw, C_in] = [N (L + 1), K], L = H_out W_out, K = kh kw C_in
    out  = (cols @ W^T)[:, :L]                         # [N, L, C_out] -> [N, C_out, H_out, W_out] (NHWC in memory)

(``pixels``: the NHWC input with one zero pixel after each sample's, which is
the padding too; the last window is blank, see :func:`window_index`.) Under
``vmap`` the product is ONE batched GEMM over all clients of the chunk,
whatever their number, with shapes that suit tensor cores (TF32, bf16);
the backward is two more batched GEMMs and, for the input, a gather and a sum
(:class:`GatherWindows`). The price is memory traffic: the columns are
materialised once, and their gradient once (K x L elements a sample: 0.24
and 0.32 MB for the McMahan CNN's two layers on 32x32 in fp32, against
outputs of 0.10 and 0.03 MB), and the input gradient's gather holds kh kw
values a pixel (0.63 MB a sample for the second layer).

Not the default. Until 2026-12-04 the columns came from ``F.unfold``, whose
CUDA kernel ATen launches once per sample: on an H200 (2026-11-30, torch
2.11) workload 1's round was then 5x slower than with the grouped
convolutions (5.36 s against 1.00 s, both with CUDA graphs; docs/gpu.md), and
``benchmarks/conv_kernels.py`` counted 5,007 kernels for one layer's forward.
The gather has not been timed on a GPU yet; ``benchmarks/gpu-check.sh``
times it (workload 1, ``auto+gemm+graphs``). On the CPU it is slower than
oneDNN's grouped convolution (``benchmarks/conv_layouts.py --device cpu``).
Same maths as the convolution, other rounding: the tests compare it with the
sequential executor within float tolerance.

Only plain convolutions are rewritten: ``conv2d`` (4-d input) and ``conv1d``
(3-d input, as a 2-d convolution of height 1), ``groups = 1``, numeric
padding; any other call (grouped or depthwise layers, ``padding = "same"``)
runs as it was.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F

from chillfl.training.conv_calls import BatchNormAsksLayout, pair, plain_conv_call


def _spans(size: int, pad: int, k: int, s: int, d: int) -> int:
    """How many windows fit along one side of the padded image."""
    return (size + 2 * pad - d * (k - 1) - 1) // s + 1


def window_index(h: int, w: int, kernel: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int],
                 padding: tuple[int, int], device: torch.device) -> tuple[torch.Tensor, int, int]:
    """Where each output position's window reads an h x w image, flat: ``[(H_out W_out + 1) kh kw]`` indices into its
    ``h w`` pixels and one zero pixel after them, at ``h w``; with the output's height and width.

    The window at ``(p, q)`` reads, at ``(i, j)``, the pixel ``(y, x) = (p s0 + i d0 - pad0, q s1 + j d1 - pad1)``, at
    ``y w + x``; where that lies in the padding, the zero pixel. So the padding is never copied: it is that one pixel.
    One more window, the *blank window*, reads only the zero pixel: its product row is a row nobody keeps, whose
    gradient is zero, which every slot outside the output points to in :func:`window_sources` (no zero row to append
    to the columns' gradient: a copy of the largest tensor of the backward). Made on the device by a few small kernels,
    once per shape (:func:`windows`).
    """
    (kh, kw), (s0, s1), (d0, d1), (p0, p1) = kernel, stride, dilation, padding
    h_out, w_out = _spans(h, p0, kh, s0, d0), _spans(w, p1, kw, s1, d1)
    y = torch.arange(h_out, device=device).view(h_out, 1, 1, 1) * s0 + torch.arange(kh, device=device).view(1, 1, kh, 1) * d0 - p0
    x = torch.arange(w_out, device=device).view(1, w_out, 1, 1) * s1 + torch.arange(kw, device=device).view(1, 1, 1, kw) * d1 - p1
    inside = (y >= 0) & (y < h) & (x >= 0) & (x < w)
    index = torch.where(inside, y * w + x, h * w).reshape(-1)
    return torch.cat([index, index.new_full((kh * kw,), h * w)]), h_out, w_out


def window_sources(h: int, w: int, kernel: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int],
                   padding: tuple[int, int], out: tuple[int, int], device: torch.device) -> torch.Tensor:
    """The inverse of :func:`window_index`: for each of the ``h w`` pixels, the ``kh kw`` window slots that read it.

    ``[h w + 1, kh kw]``: entry ``(y, x), (i, j)`` is the slot ``((p W_out + q) kh + i) kw + j`` of the window at
    ``p = (y + pad0 - i d0) / s0``, ``q = (x + pad1 - j d1) / s1`` where those are whole and inside the output, else
    ``H_out W_out kh kw``: the first slot of the blank window, whose gradient is zero. The last row, the zero pixel's
    (a constant: its gradient is dropped), points there too. Plain arithmetic on the device: no sort and no sync, so
    a recorded CUDA graph holds it.
    """
    (kh, kw), (s0, s1), (d0, d1), (p0, p1), (h_out, w_out) = kernel, stride, dilation, padding, out

    def along(size: int, k: int, s: int, d: int, pad: int, n_out: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = torch.arange(size, device=device).view(size, 1) + pad - torch.arange(k, device=device).view(1, k) * d
        first = start.div(s, rounding_mode="floor")
        return first, (start >= 0) & (start % s == 0) & (first < n_out)

    p, p_inside = along(h, kh, s0, d0, p0, h_out)
    q, q_inside = along(w, kw, s1, d1, p1, w_out)
    i, j = torch.arange(kh, device=device).view(1, 1, kh, 1), torch.arange(kw, device=device).view(1, 1, 1, kw)
    slot = ((p.view(h, 1, kh, 1) * w_out + q.view(1, w, 1, kw)) * kh + i) * kw + j
    inside = p_inside.view(h, 1, kh, 1) & q_inside.view(1, w, 1, kw)
    blank = h_out * w_out * kh * kw
    sources = torch.where(inside, slot, blank).reshape(h * w, kh * kw)
    return torch.cat([sources, sources.new_full((1, kh * kw), blank)])


Windows = tuple[torch.Tensor, torch.Tensor, int, int]
"""A layer's :func:`window_index`, :func:`window_sources` and output height and width."""

_MADE: dict[tuple[Any, ...], Windows] = {}
"""The windows made so far, by image size, convolution arguments and device: constants of the shapes, kept for the
process (a few KB a layer) so that a step does not rebuild them (about 65 small kernels a layer and step: 130 of the
195 ops of a vmapped workload 1 step, eagerly). Never evicted: a recorded CUDA graph reads them by address."""


def windows(h: int, w: int, kernel: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int],
            padding: tuple[int, int], device: torch.device) -> Windows:
    """:func:`window_index` and :func:`window_sources` of a layer, made once per shape and device (see ``_MADE``).

    Kept only when made as plain tensors that hold their values: not while a CUDA graph is being captured (its
    kernels only run at replay, and its memory is the graph's), nor while tracing (``torch.compile``'s fake
    tensors), nor under inference mode (autograd could not save them for a later training step). Those calls make
    their own, as before. A graph's warm-up steps run eagerly first (:mod:`chillfl.executors.step_graphs`), so the
    graph reads the kept ones.
    """
    key = (h, w, kernel, stride, dilation, padding, device)
    made = _MADE.get(key)
    if made is not None:
        return made
    # constants: plain tensors, not wrapped at the grad or vmap level of this call; while torch.compile traces (which
    # cannot enter that context: a graph break, an error under fullgraph) they are the graph's constants instead
    with nullcontext() if torch.compiler.is_compiling() else torch._C._DisableFuncTorch():
        index, h_out, w_out = window_index(h, w, kernel, stride, dilation, padding, device)
        made = (index, window_sources(h, w, kernel, stride, dilation, padding, (h_out, w_out), device), h_out, w_out)
    if _may_keep(made[0]):
        _MADE[key] = made
    return made


def _may_keep(t: torch.Tensor) -> bool:
    """Whether ``t``, just made, is a plain tensor holding its values, which a later step may read."""
    capturing = torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()  # this thread records a graph
    return type(t) is torch.Tensor and not capturing and not torch.compiler.is_compiling() and not torch.is_inference_mode_enabled()


class GatherWindows(torch.autograd.Function):
    """``pixels.index_select(1, index)`` whose gradient is a gather and a sum, not a scatter.

    Why: autograd's gradient of a gather is a scatter-add (``index_add``, or under vmap ``scatter_add`` with an index
    as large as the columns), and on CUDA under ``torch.use_deterministic_algorithms`` PyTorch makes a scatter-add
    deterministic through ``index_put_`` with accumulation, which sorts one index per element: 400 M a step for
    workload 1's second layer. Here each pixel gathers the gradients of the ``kh kw`` slots that read it
    (:func:`window_sources`) and sums them in a fixed order: deterministic by construction, one gather and one
    reduction. The caller keeps the blank window's gradient zero (:func:`conv2d_as_gemm` drops its product row), and
    the zero pixel, a constant, gets zero. ``generate_vmap_rule``: vmap runs this forward and backward with their own
    ops' batching rules, and they stay differentiable (a Hessian-vector product through a convolution works).
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(pixels: torch.Tensor, index: torch.Tensor, sources: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """``[N, H W + 1, C]`` -> ``[N, len(index), C]``."""
        return pixels.index_select(1, index)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor], output: torch.Tensor) -> None:
        ctx.save_for_backward(inputs[2])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, None]:  # type: ignore[override]
        if not ctx.needs_input_grad[0]:
            return None, None, None
        (sources,) = ctx.saved_tensors
        n, _, c = grad.shape
        positions, reads = sources.shape
        return grad.index_select(1, sources.reshape(-1)).view(n, positions, reads, c).sum(2), None, None


def conv2d_as_gemm(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
) -> torch.Tensor:
    """``F.conv2d(x, weight, bias, stride, padding, dilation)`` with ``groups = 1``, as a gather + one matrix product.

    The columns are gathered NHWC, ``[N, (H_out W_out + 1) kh kw, C_in]``: one gather whatever the batch (ATen's CUDA
    ``im2col``, ``F.unfold``, launched one kernel per sample: 5,007 for a layer's forward in workload 1, measured by
    ``benchmarks/conv_kernels.py`` on an H200, 2026-12-04), whose gradient is one gather and one sum
    (:class:`GatherWindows`). It reads the input NHWC with one zero pixel after each sample's: a copy of the input
    (``kh kw`` times smaller than the columns) that is the padding as well. The last window is blank (:func:`window_index`):
    its product row is dropped, so that the columns' gradient has the zero row the input gradient's gather needs
    without a copy. The output is NHWC in memory (a channels-last [N, C_out, H_out, W_out]): the product's rows are
    (sample, position).
    """
    s, p, d = pair(stride), pair(padding), pair(dilation)
    n, c, h, w = x.shape
    out_channels, _, kh, kw = weight.shape
    if torch.is_autocast_enabled(x.device.type):  # gather in the product's dtype: half the columns' bytes under bf16
        x = x.to(torch.get_autocast_dtype(x.device.type))
    pixels = F.pad(x.permute(0, 2, 3, 1).reshape(n, h * w, c), (0, 0, 0, 1))  # [N, H W + 1, C]: + the zero pixel
    index, sources, h_out, w_out = windows(h, w, (kh, kw), s, d, p, x.device)
    cols = GatherWindows.apply(pixels, index, sources)  # [N, (L + 1) kh kw, C]: row (sample, position), column (i, j, c)
    positions = h_out * w_out
    rows = cols.reshape(n * (positions + 1), kh * kw * c)
    out = rows @ weight.permute(0, 2, 3, 1).reshape(out_channels, kh * kw * c).t()  # [N (L + 1), C_out]
    kept = out.reshape(n, positions + 1, out_channels)[:, :positions]  # the blank window's row dropped
    kept = kept + bias.to(out.dtype) if bias is not None else kept.contiguous()
    return kept.reshape(n, h_out, w_out, out_channels).permute(0, 3, 1, 2)


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

"""Adaptive average pooling whose backward is deterministic on CUDA.

``torch.use_deterministic_algorithms(True)`` (chillfl's ``deterministic = true``,
the default) makes CUDA raise in ``adaptive_avg_pool2d``'s backward, which adds
its gradients with atomics; only an output of 1 x 1 escapes (it is a mean).
So a model with ``AdaptiveAvgPool2d(2)`` (FedChill's CNN1/CNN3, the SVHN CNN)
could not train on a GPU at all with the default config
(``tests/test_deterministic_alerts.py``).

:func:`average_pool_to` computes the same bins as ``adaptive_avg_pool2d``
(bin ``i`` covers rows ``floor(i H / h)`` to ``ceil((i + 1) H / h)``):

* when the output divides the input, the bins are disjoint blocks of equal size:
  ``avg_pool2d`` with that block as kernel and stride, whose CUDA backward
  gathers (no atomics);
* otherwise, bins overlap or differ in size: a matrix product with the
  row and column averaging matrices, ``P_h X P_w^T`` (deterministic GEMMs).

Values equal ``adaptive_avg_pool2d``'s up to float rounding (summation
order); on the CPU both are deterministic anyway.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def averaging_matrix(size_in: int, size_out: int, like: torch.Tensor) -> torch.Tensor:
    """``[size_out, size_in]``: row ``i`` is 1/len over adaptive pooling's bin ``i`` (on ``like``'s device and dtype)."""
    rows = torch.zeros(size_out, size_in, dtype=like.dtype, device=like.device)
    for i in range(size_out):
        start, end = (i * size_in) // size_out, -((-(i + 1) * size_in) // size_out)
        rows[i, start:end] = 1.0 / (end - start)
    return rows


def average_pool_to(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """``adaptive_avg_pool2d(x, size)`` for ``x`` of shape ``[..., H, W]``, with a backward that is deterministic on CUDA."""
    (h, w), (oh, ow) = x.shape[-2:], size
    if (h, w) == (oh, ow):
        return x  # one element a bin: adaptive pooling returns the input's values
    if (oh, ow) == (1, 1):
        return x.mean((-2, -1), keepdim=True)  # what adaptive_avg_pool2d itself runs for 1 x 1
    if h % oh == 0 and w % ow == 0:
        return F.avg_pool2d(x, (h // oh, w // ow))
    return averaging_matrix(h, oh, x) @ x @ averaging_matrix(w, ow, x).T


class AveragePool2d(nn.Module):
    """``nn.AdaptiveAvgPool2d(size)`` by :func:`average_pool_to` (no parameters or buffers: state dicts are unchanged)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return average_pool_to(x, (self.size, self.size))

    def extra_repr(self) -> str:
        return f"output_size={self.size}"

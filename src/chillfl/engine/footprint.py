"""Memory estimates that chunk sizes are computed from (training chunks and stacked predictions)."""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch
import torch.utils._pytree as pytree
from torch import nn
from torch.func import functional_call

from chillfl.training.local import split_state


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def activation_bytes(model: nn.Module, state: Mapping[str, torch.Tensor], x: torch.Tensor, gemm_columns: bool = False) -> int:
    """Bytes of every module output of one forward pass on ``x`` (eval mode, template untouched).

    ``gemm_columns``: plus what ``batched_conv = "gemm"`` materialises for each plain ``Conv2d`` / ``Conv1d``
    (:mod:`chillfl.training.conv_gemm`): its gathered columns and, in the backward, their gradient, 2 x N x K x (L + 1)
    elements (the blank window included), often several times the layer's output (K = C_in kh kw against C_out), and
    the input gradient's gather, kh kw values for each of the N x C_in x (H W + 1) pixels (the zero pixel included).
    """
    total = 0

    def hook(module: nn.Module, inputs: Any, output: Any) -> None:
        nonlocal total
        total += sum(nbytes(t) for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor))
        if gemm_columns and isinstance(module, (nn.Conv1d, nn.Conv2d)) and module.groups == 1 and not isinstance(module.padding, str):
            window = math.prod(module.kernel_size)
            k = module.in_channels * window
            x = inputs[0]
            windows = output.numel() // module.out_channels + x.shape[0]  # N L, and each sample's blank window
            pixels = math.prod(x.shape[2:]) + 1
            total += (2 * k * windows + x.shape[0] * module.in_channels * pixels * window) * output.element_size()

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            functional_call(model, split_state(model, state), (x,))
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return total

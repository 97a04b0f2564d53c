"""``batched_conv = "gemm"`` under ``torch.compile``: a layer's windows first made while dynamo traces are traced as the
graph's constants (dynamo cannot enter ``torch._C._DisableFuncTorch``: it was a graph break, which inside ``vmap``
leaves the step uncompiled, and an error with ``fullgraph``), and are not kept for later eager steps."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.func import grad, vmap

from chillfl.training import conv_gemm
from chillfl.training.conv_gemm import GemmConvolutions


def _loss(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return F.conv2d(x, w, padding=1, stride=(1, 2)).square().sum()


def _gemm_loss(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    with GemmConvolutions():
        return _loss(w, x)


def _step(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return vmap(grad(_gemm_loss))(w, x)


def test_windows_made_while_compiling_trace_whole_and_are_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conv_gemm, "_MADE", {})  # none made yet: the first made are the trace's
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(3, 4, 2, 3, 3, generator=g), torch.randn(3, 5, 2, 7, 9, generator=g)  # 3 clients
    expected = vmap(grad(_loss))(w, x)  # vmap's grouped convolution
    torch._dynamo.reset()
    compiled = torch.compile(_step, fullgraph=True, backend="aot_eager")(w, x)  # fullgraph: any graph break is an error
    torch.testing.assert_close(compiled, expected, rtol=1e-4, atol=1e-4)
    assert conv_gemm._MADE == {}  # the trace's tensors are not kept
    torch.testing.assert_close(_step(w, x), expected, rtol=1e-4, atol=1e-4)
    assert len(conv_gemm._MADE) == 1  # an eager step keeps its plain ones
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(_step, fullgraph=True, backend="aot_eager")(w, x), expected, rtol=1e-4, atol=1e-4)  # and a trace reads them

"""FedAlign's Lipschitz (feature-alignment) term (Mendieta et al., "Local Learning Matters", CVPR 2022).

The final stage (block group) of the network runs twice per step: at full
width in the ordinary forward, and at a reduced width (``width``, default
0.25) on the first ``make_divisible(c_in * width)`` channels of the same,
detached, stage input (a slimmable sub-network, :mod:`chillfl.models.resnet_cifar`).
For each sample, the stage's transformation is summarised by the
"transmitting matrix" between its input X (C_in x HW, average-pooled to the
output's spatial size) and output Y (C_out x HW),

    T = X Y^T / HW                                     (C_in x C_out)

and its Lipschitz estimate by T's largest singular value, sigma = sqrt(lambda_max(T T^T)),
from ``iterations`` (10) steps of power iteration started at the all-ones
vector. The term matches the reduced stage's estimate to the full stage's
(the latter detached, a target):

    L_lip = mean_batch (sigma_reduced - sigma_full)^2

and the official code scales it to the cross-entropy's size before the
weight mu:  mu * (CE / L_lip) * L_lip, the ratio CE / L_lip carrying no
gradient (``scale = "ce"``, default); ``scale = "none"`` gives the plain
mu * L_lip. Gradients reach only the final stage's weights (its input is
detached), through the reduced-width pass.

Defaults from the official code (``main.py``): mu = 0.45, width = 0.25.
Checked again on 2026-12-01 against mmendiet/FedAlign (``methods/fedalign.py``,
``models/resnet_fedalign.py``): the CE backward then ``mu * (CE / L) * L`` on
the MSE between the power-iteration estimates (10 steps from ones) of the
sliced-input, reduced-width final stage and the detached full-width one, the
transmitting matrix ``X Y^T / HW`` with the input average-pooled to the
output's size, ``main.py``'s ``--mu 0.45 --width 0.25`` (and the README's run
command). The paper's text was not reachable here (its abstract only), so the
loss is the code's; ``tests/test_fedalign.py`` works its values by hand.
Not reproduced: its gradient-norm clipping at 10 and its Nesterov momentum
(the optimiser is ``[client]``'s, the same for every method here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

import torch
import torch.nn.functional as F
from torch.func import functional_call

from chillfl.options import Scale, require
from chillfl.training.objective import Context, StepView

TINY = 1e-30
MIN_LIPSCHITZ_LOSS = 1e-12
"""Below this L_lip the "ce" scale is capped: the official code divides by it unguarded (inf at 0)."""


def transmitting_matrix(inputs: torch.Tensor, outputs: torch.Tensor) -> torch.Tensor:
    """Per sample, X Y^T / HW for input maps X [B, C_in, H, W] (pooled to the output's H x W) and outputs Y [B, C_out, H', W']."""
    if inputs.shape[-2] > outputs.shape[-2]:
        inputs = F.adaptive_avg_pool2d(inputs, (outputs.shape[-2], outputs.shape[-1]))
    x = inputs.flatten(2)
    y = outputs.flatten(2)
    return x @ y.transpose(1, 2) / x.shape[2]


def top_singular_value(matrix: torch.Tensor, iterations: int = 10) -> torch.Tensor:
    """Per sample, sqrt of the power-iteration estimate of lambda_max(M M^T), from the all-ones start; shape [B, 1, 1].

    As the official code: v <- K v / ||K v|| with K = M M^T, then sqrt(||K v|| / ||v||).
    Computed on M / s with s = max|M| (detached) and scaled back by s, which is
    the same value (sigma(cM) = |c| sigma(M)) without overflowing float32: K's
    entries grow as the fourth power of the activations (a T = 0.05 run reaches
    |M| ~ 1e13). Norms are floored at 1e-30, so an all-zero M gives ~0, not 0/0.
    """
    scale = matrix.detach().abs().amax(dim=(1, 2), keepdim=True).clamp_min(TINY)
    unit = matrix / scale
    k = unit @ unit.transpose(1, 2)
    v = k.new_ones(k.shape[0], k.shape[1], 1)
    norm = v.norm(dim=1, keepdim=True)
    for _ in range(iterations):
        m = k @ v
        norm = m.norm(dim=1, keepdim=True)
        v = m / norm.clamp_min(TINY)
    return scale * torch.sqrt(norm.clamp_min(TINY) / v.norm(dim=1, keepdim=True).clamp_min(TINY))


def lipschitz_loss(reduced_in: torch.Tensor, reduced_out: torch.Tensor, full_in: torch.Tensor, full_out: torch.Tensor, iterations: int = 10) -> torch.Tensor:
    """mean over the batch of (sigma(T_reduced) - sigma(T_full))^2, the full pass detached."""
    target = top_singular_value(transmitting_matrix(full_in.detach(), full_out.detach()), iterations)
    return F.mse_loss(top_singular_value(transmitting_matrix(reduced_in, reduced_out), iterations), target)


@dataclass(frozen=True)
class FedAlignOptions:
    """``mu`` (0.45), ``width`` of the reduced pass (0.25), ``iterations`` of power iteration (10), ``scale``: ce | none."""

    mu: Scale = 0.45
    width: float = 0.25
    iterations: int = 10
    scale: Literal["ce", "none"] = "ce"

    def validate(self, section: str) -> None:
        require(self.mu >= 0, f"{section}.mu", f"must be >= 0, got {self.mu}")
        require(0 < self.width < 1, f"{section}.width", f"must be in (0, 1), got {self.width}")
        require(1 <= self.iterations <= 1000, f"{section}.iterations", f"must be in [1, 1000], got {self.iterations}")


class FedAlignTerm:
    """``mu * [CE / L_lip] * L_lip`` on the final stage ``stage`` of a model with a slimmable last stage."""

    per_batch = True
    reads: tuple[str, ...] = ()

    def __init__(self, stage: str, options: FedAlignOptions = FedAlignOptions()) -> None:
        self.stage = stage
        self.options = options
        self.captures: tuple[str, ...] = (stage,)

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context, step: StepView) -> torch.Tensor:
        full_in, full_out = step.captured[self.stage]
        full_in = full_in.detach()
        module: Any = step.model.get_submodule(self.stage)
        prefix = self.stage + "."
        stage_params = {k[len(prefix) :]: v for k, v in params.items() if k.startswith(prefix)}
        stage_buffers = {k[len(prefix) :]: v for k, v in step.buffers.items() if k.startswith(prefix)}
        width = self.options.width
        reduced_in = full_in[:, : module.input_channels(width)]
        reduced_out = functional_call(module, (stage_params, stage_buffers), (reduced_in,), {"width": width})
        lip = lipschitz_loss(reduced_in, reduced_out, full_in, full_out, self.options.iterations)
        if self.options.scale == "ce":
            lip = lip * (step.base_loss.detach() / lip.detach().clamp_min(MIN_LIPSCHITZ_LOSS))
        return self.options.mu * lip

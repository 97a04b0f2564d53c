"""FedGen's client-side regulariser and its feature-space generator (Zhu, Hong & Zhou, ICML 2021).

A lightweight generator G_w(y, eps) maps a label and noise to a point of
the classifier head's input space (the representation, :mod:`chillfl.models.parts`).
The server trains it (:mod:`chillfl.aggregation.fedgen`) so that the
clients' heads, weighted by how much of each label a client holds,
classify its outputs as the asked-for label (Eq. 4 with the official code's
diversity term). Clients then add the paper's Eq. 5 regulariser

    alpha_t * E_{y ~ p(y), z ~ G_w(.|y)} [ CE(h(z; theta_p), y) ]

which trains their head on the generated features; ``alpha_t`` decays per
round, ``max(1e-4, alpha * 0.98^t)`` as the official code's ``exp_lr_decay``.

The generator (as in the official code, ``GENERATORCONFIGS``): one-hot y and
uniform noise eps in [0, 1)^noise_dim, concatenated, then Linear -> BatchNorm1d
(batch statistics; it is only ever run in training mode) -> ReLU -> Linear to
the feature dimension.
"""

from __future__ import annotations

from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from chillfl.training.objective import Context, read_number, read_tensor


class FeatureGenerator(nn.Module):
    """G_w(y, eps): [one_hot(y), eps] -> Linear -> BN -> ReLU -> Linear (feature_dim)."""

    def __init__(self, num_classes: int, noise_dim: int, hidden: int, feature_dim: int) -> None:
        super().__init__()
        self.num_classes, self.noise_dim = num_classes, noise_dim
        self.fc = nn.Linear(noise_dim + num_classes, hidden)
        self.bn = nn.BatchNorm1d(hidden, track_running_stats=False)
        self.out = nn.Linear(hidden, feature_dim)

    def forward(self, labels: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        onehot = F.one_hot(labels, self.num_classes).to(noise.dtype)
        return self.out(F.relu(self.bn(self.fc(torch.cat([noise, onehot], dim=1)))))


def head_cross_entropy(features: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Per-sample CE(h(z), y) of a linear head; log-softmax + gather (vmaps natively, unlike F.cross_entropy)."""
    log_probs = F.log_softmax(F.linear(features, weight, bias), dim=-1)
    return -log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def teacher_loss(features: torch.Tensor, labels: torch.Tensor, heads: list[tuple[torch.Tensor, torch.Tensor | None]], label_weights: torch.Tensor) -> torch.Tensor:
    """sum_k mean_i w[y_i, k] * CE(h_k(z_i), y_i): the clients' heads as a label-weighted ensemble teacher.

    ``label_weights[c, k]`` = n_{k,c} / sum_j n_{j,c}, client k's share of label c
    among the round's clients (``get_label_weights`` of the official code).
    """
    total = features.new_zeros(())
    for k, (weight, bias) in enumerate(heads):
        total = total + (label_weights[labels, k] * head_cross_entropy(features, labels, weight, bias)).mean()
    return total


def diversity_loss(noise: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """exp(-mean_{i,j} d2(eps_i, eps_j) * d1(z_i, z_j)); d2 / d1: mean squared / mean absolute difference.

    The official code's ``DiversityLoss(metric="l1")``: small when outputs of
    distant noise vectors are far apart, so minimising it fights mode collapse.
    """
    noise_dist = ((noise.unsqueeze(0) - noise.unsqueeze(1)) ** 2).mean(dim=2)
    feature_dist = (features.unsqueeze(0) - features.unsqueeze(1)).abs().mean(dim=2)
    return torch.exp(-(noise_dist * feature_dist).mean())


class FedGenTerm:
    """``fedgen_weight * mean CE(h(z), y)`` over the round's generated features ``fedgen_z`` with labels ``fedgen_y``.

    A parameter term (it reads the head's weights and the context, not the batch).
    """

    reads: tuple[str, ...] = ("fedgen_z", "fedgen_y", "fedgen_weight")

    def __init__(self, head: str) -> None:
        self.weight_key = f"{head}.weight"
        self.bias_key = f"{head}.bias"

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context) -> torch.Tensor:
        ce = head_cross_entropy(read_tensor(context, "fedgen_z"), read_tensor(context, "fedgen_y"), params[self.weight_key], params.get(self.bias_key))
        return read_number(context, "fedgen_weight") * ce.mean()

"""FedGen's client-side regulariser and its feature-space generator (Zhu, Hong & Zhou, ICML 2021).

A lightweight generator G_w(y, eps) maps a label and noise to a point of
the classifier head's input space (the representation, :mod:`chillfl.models.parts`).
The server trains it (:mod:`chillfl.aggregation.fedgen`) so that the
clients' heads, weighted by how much of each label a client holds,
classify its outputs as the asked-for label (:func:`teacher_loss`, three forms,
plus the official code's diversity term). Clients then add the paper's Eq. 5 regulariser

    alpha_t * E_{y ~ p(y), z ~ G_w(.|y)} [ CE(h(z; theta_p), y) ]

which trains their head on the generated features; ``alpha_t`` decays per
round, ``max(1e-4, alpha * 0.98^t)`` as the official client's ``exp_lr_scheduler``.
The official client's second term (``generative_beta``) is
:class:`FedGenLatentTerm`, off unless ``beta > 0``.

The generator (as in the official code, ``GENERATORCONFIGS``): one-hot y and
uniform noise eps in [0, 1)^noise_dim, concatenated, then Linear -> BatchNorm1d
(batch statistics; it is only ever run in training mode) -> ReLU -> Linear to
the feature dimension.
"""

from __future__ import annotations

from typing import Literal, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from chillfl.training.objective import Context, StepView, distillation_kl, read_number, read_tensor


Teacher = Literal["clients", "ensemble", "broadcast"]
"""How the clients' heads teach the generator (:func:`teacher_loss`)."""


class FeatureGenerator(nn.Module):
    """G_w(y, eps): [one_hot(y), eps] -> Linear -> BN -> ReLU -> Linear (feature_dim).

    Built in ``dtype`` (float32, the dtype the clients' heads are read in), not the process's default: a default left at
    float64 by an earlier notebook cell would otherwise draw another start and meet the float32 heads with float64 features.
    """

    def __init__(self, num_classes: int, noise_dim: int, hidden: int, feature_dim: int, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.num_classes, self.noise_dim = num_classes, noise_dim
        self.fc = nn.Linear(noise_dim + num_classes, hidden, dtype=dtype)
        self.bn = nn.BatchNorm1d(hidden, track_running_stats=False, dtype=dtype)
        self.out = nn.Linear(hidden, feature_dim, dtype=dtype)

    def forward(self, labels: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        onehot = F.one_hot(labels, self.num_classes).to(noise.dtype)
        return self.out(F.relu(self.bn(self.fc(torch.cat([noise, onehot], dim=1)))))


def head_cross_entropy(features: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Per-sample CE(h(z), y) of a linear head; log-softmax + gather (vmaps natively, unlike F.cross_entropy)."""
    log_probs = F.log_softmax(F.linear(features, weight, bias), dim=-1)
    return -log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def teacher_loss(
    features: torch.Tensor,
    labels: torch.Tensor,
    heads: list[tuple[torch.Tensor, torch.Tensor | None]],
    label_weights: torch.Tensor,
    form: Teacher = "clients",
) -> torch.Tensor:
    """The clients' heads as a label-weighted teacher of the generated features; ``form`` picks how they are combined.

    ``label_weights[c, k]`` = n_{k,c} / sum_j n_{j,c}, client k's share of label c
    among the round's clients (``get_label_weights`` of the official code).

    * ``clients``: sum_k mean_i w[y_i, k] CE(h_k(z_i), y_i), each client's CE on the
      labels it holds (what the official ``train_generator`` line is written to do);
    * ``ensemble``: mean_i CE(sum_k w[y_i, k] h_k(z_i), y_i), one CE on the
      label-weighted ensemble of the heads' logits (the official code's
      ``teacher_logit``; the form "the ensemble predicts y");
    * ``broadcast``: sum_k (mean_i w[y_i, k]) (mean_j CE(h_k(z_j), y_j)), what that
      official line computes: its per-sample CE ``[B]`` times the weights ``[B, 1]``
      broadcasts to ``[B, B]`` before the mean.
    """
    if form == "ensemble":
        logits = sum(label_weights[labels, k].unsqueeze(-1) * F.linear(features, weight, bias) for k, (weight, bias) in enumerate(heads))
        assert isinstance(logits, torch.Tensor)
        log_probs = F.log_softmax(logits, dim=-1)
        return -log_probs.gather(-1, labels.unsqueeze(-1)).mean()
    total = features.new_zeros(())
    for k, (weight, bias) in enumerate(heads):
        ce = head_cross_entropy(features, labels, weight, bias)
        w = label_weights[labels, k]
        total = total + (w.mean() * ce.mean() if form == "broadcast" else (w * ce).mean())
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


class FedGenLatentTerm:
    """``fedgen_beta * KL(softmax(h(z_{y_i})) || softmax(f(x_i)))`` over the batch: the official client's second term.

    The official ``UserpFedGen.train`` adds ``generative_beta * KLDivLoss(batchmean)``
    between the model's prediction on each real sample x_i and the client's own
    head on a generated feature of x_i's label, the latter detached (a target,
    not trained). Here the generated feature of label c is ``fedgen_class_z[c]``,
    one per class and round (the official client draws a fresh one per sample and
    step). A batch term (it reads the step's logits and labels), at T = 1.
    """

    per_batch = True
    captures: tuple[str, ...] = ()
    reads: tuple[str, ...] = ("fedgen_class_z", "fedgen_beta")

    def __init__(self, head: str) -> None:
        self.weight_key = f"{head}.weight"
        self.bias_key = f"{head}.bias"

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context, step: StepView) -> torch.Tensor:
        generated = read_tensor(context, "fedgen_class_z")[step.y]
        target = F.linear(generated, params[self.weight_key], params.get(self.bias_key)).detach()
        return read_number(context, "fedgen_beta") * distillation_kl(step.logits, target)

"""The maths of FedProto and FedHKD: per-class means, their aggregation, and the local objective's terms.

Pure functions of tensors, written without data-dependent shapes (masks
multiply, never index) so that the vectorised executor can ``vmap`` the loss.
Notation: ``C`` classes, ``d`` the representation's width (the input of the
model's last ``nn.Linear``, :mod:`chillfl.models.parts`).

FedProto (Tan et al., AAAI 2022, Eqs. 5-8; official code ``yuetan031/fedproto``)::

    C_k^(j)  = mean of f_k(x) over client k's samples of class j         (uplink, with the count n_k,j)
    Cbar^(j) = sum_k n_k,j C_k^(j) / sum_k n_k,j                          (server, count-weighted)
    L_k      = CE(F_k(x), y) + lambda * MSE(f_k(x), Cbar^(y))             (client; lambda = 1)

FedHKD (Chen et al., ICLR 2023, Eqs. 4-7; official code ``CityChan/Federated-Hyper-Knowledge-Distillation``)::

    hyper-knowledge of client k, class j:  (hbar_k,j + N(0, sigma^2 I),  qbar_k,j = mean softmax(F_k(x) / tau))
    server: count-weighted means H_j, Q_j
    L_k = CE(F_k(x), y)
        + lam   * mean_j KL(Q_j || softmax(head_k(H_j) / tau))            (lam = 0.05, tau = 0.5)
        + gamma * MSE(f_k(x), H_y)                                         (gamma = 0.05)

``MSE`` is ``torch.nn.MSELoss``'s mean over samples and dimensions; a sample
whose class has no global mean yet contributes zero (and still counts in the
denominator), as in both official codes, which put the sample's own feature
there as the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

import torch
import torch.nn.functional as F

from chillfl.settings.prototypes import Weighting
from chillfl.training.objective import Context, read_tensor, temperature_cross_entropy


def class_means(values: torch.Tensor, y: torch.Tensor, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class means of ``values`` ``[n, d]`` and the class counts ``[C]`` (int64); absent classes: zeros."""
    onehot = F.one_hot(y, num_classes).to(values.dtype)  # a matmul, not index_add_: deterministic on every device
    counts = onehot.sum(0).to(torch.int64)
    return (onehot.T @ values) / counts.clamp(min=1).unsqueeze(1).to(values.dtype), counts


def aggregate_means(
    means: Sequence[torch.Tensor], counts: Sequence[torch.Tensor], weighting: Weighting = "count"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The server's per-class means over clients, and the mask of classes some client holds.

    ``count``: Cbar_j = sum_k n_k,j C_k,j / sum_k n_k,j (FedProto Eq. 6 as the
    issue states it, FedHKD Eq. 6). ``uniform``: the plain mean over the
    clients that hold class j (FedProto's official ``proto_aggregation``).
    Classes nobody holds get zeros and ``mask = False``.
    """
    stack = torch.stack([m.to(torch.float64) for m in means])  # [K, C, d]
    n = torch.stack([c.to(torch.float64) for c in counts])  # [K, C]
    w = n if weighting == "count" else (n > 0).to(torch.float64)
    total = w.sum(0)
    out = (w.unsqueeze(-1) * stack).sum(0) / total.clamp(min=1e-300).unsqueeze(-1)
    return out.to(means[0].dtype), total > 0


def prototype_distance(features: torch.Tensor, y: torch.Tensor, protos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``MSELoss(f(x), P[y])`` over ``[n, d]``, with zero for samples whose class has no prototype (``mask``)."""
    known = mask.to(features.dtype)[y].unsqueeze(-1)  # [n, 1]
    diff = (features - protos.to(features.dtype)[y]) * known
    return (diff * diff).sum() / features.numel()


def hyper_knowledge_kd(
    weight: torch.Tensor, bias: torch.Tensor | None, protos: torch.Tensor, soft: torch.Tensor, mask: torch.Tensor, tau: float
) -> torch.Tensor:
    """mean over known classes j of KL(Q_j || softmax(head(H_j) / tau)), the local head applied to the global means."""
    logits = protos.to(weight.dtype) @ weight.T
    if bias is not None:
        logits = logits + bias
    log_q = F.log_softmax(logits / tau, dim=-1)
    target = soft.to(weight.dtype)
    per_class = (torch.xlogy(target, target) - target * log_q).sum(-1)  # [C]
    known = mask.to(weight.dtype)
    return (per_class * known).sum() / known.sum().clamp(min=1.0)


@dataclass(frozen=True)
class KnowledgeLoss:
    """The local objective of FedProto (``kd_weight = 0``) and FedHKD: a base loss that also sees the representation.

    It reads the round's global knowledge from the job's context: ``protos``
    ``[C, d]``, ``proto_mask`` ``[C]`` and (FedHKD) ``soft`` ``[C, C]``; the
    head's parameters by name (``head_weight``, ``head_bias``).
    """

    uses_features: ClassVar[bool] = True
    distance_weight: float
    kd_weight: float = 0.0
    kd_temperature: float = 1.0
    head_weight: str = ""
    head_bias: str | None = None

    def __call__(
        self,
        logits: torch.Tensor,
        targets: torch.Tensor,
        temperature: Any,
        *,
        features: torch.Tensor | None = None,
        params: Mapping[str, torch.Tensor] | None = None,
        context: Context | None = None,
    ) -> torch.Tensor:
        if features is None or params is None or context is None:
            raise TypeError("KnowledgeLoss needs the representation, the parameters and the context (StepLoss passes them)")
        value = temperature_cross_entropy(logits, targets, temperature)
        protos, mask = read_tensor(context, "protos"), read_tensor(context, "proto_mask")
        if self.distance_weight:
            value = value + self.distance_weight * prototype_distance(features, targets, protos, mask)
        if self.kd_weight:
            bias = params[self.head_bias] if self.head_bias is not None else None
            value = value + self.kd_weight * hyper_knowledge_kd(params[self.head_weight], bias, protos, read_tensor(context, "soft"), mask, self.kd_temperature)
        return value


def nearest_prototype(features: torch.Tensor, protos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """FedProto's inference: the class of the nearest (Euclidean) prototype among the known ones."""
    dist = torch.cdist(features.to(torch.float32), protos.to(torch.float32))
    return dist.masked_fill(~mask.unsqueeze(0), float("inf")).argmin(dim=1)

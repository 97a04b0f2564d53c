"""The maths every prototype method shares: per-class means, their aggregation, the distance term, inference.

Pure functions of tensors, written without data-dependent shapes (masks
multiply, never index) so that the vectorised executor can ``vmap`` the loss.
Notation: ``C`` classes, ``d`` the representation's width (the input of the
model's classifier head, :mod:`chillfl.models.parts`).

FedProto (Tan et al., AAAI 2022, Eqs. 5-8; official code ``yuetan031/fedproto``)::

    C_k^(j)  = mean of f_k(x) over client k's samples of class j         (uplink, with the count n_k,j)
    Cbar^(j) = sum_k n_k,j C_k^(j) / sum_k n_k,j                          (server, count-weighted)
    L_k      = CE(F_k(x), y) + lambda * MSE(f_k(x), Cbar^(y))             (client; lambda = 1)

``MSE`` is ``torch.nn.MSELoss``'s mean over samples and dimensions; a sample
whose class has no global mean yet contributes zero (and still counts in the
denominator), as in FedProto's and FedHKD's official codes, which put the
sample's own feature there as the target. A method's own terms (FedHKD's
hyper-knowledge KD) live in its module, :mod:`chillfl.prototypes.methods`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Mapping, Sequence

import torch
import torch.nn.functional as F

from chillfl.training.objective import Context, read_tensor, temperature_cross_entropy

Weighting = Literal["count", "uniform"]
"""How the server averages a class's rows over clients: by sample count, or uniformly over the clients holding it."""


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


def nearest_prototype(features: torch.Tensor, protos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The inference by prototypes: the class of the nearest (Euclidean) prototype among the known ones."""
    dist = torch.cdist(features.to(torch.float32), protos.to(torch.float32))
    return dist.masked_fill(~mask.unsqueeze(0), float("inf")).argmin(dim=1)


@dataclass(frozen=True)
class PrototypeLoss:
    """CE + ``distance_weight`` * MSE(f(x), P_y): FedProto's local objective, the base of every prototype method's.

    A base loss that also sees the representation (``uses_features``): it reads the
    round's global prototypes from the job's context, ``protos`` ``[C, d]`` and
    ``proto_mask`` ``[C]``. A method adds its own terms by subclassing and
    overriding :meth:`extra` (called with the value so far, so the float
    operations stay in one order).
    """

    uses_features: ClassVar[bool] = True
    distance_weight: float = 1.0

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
            raise TypeError(f"{type(self).__name__} needs the representation, the parameters and the context (StepLoss passes them)")
        value = temperature_cross_entropy(logits, targets, temperature)
        protos, mask = read_tensor(context, "protos"), read_tensor(context, "proto_mask")
        if self.distance_weight:
            value = value + self.distance_weight * prototype_distance(features, targets, protos, mask)
        return self.extra(value, params, context, protos, mask)

    def extra(self, value: torch.Tensor, params: Mapping[str, torch.Tensor], context: Context, protos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The loss with the method's own terms added (none here)."""
        return value

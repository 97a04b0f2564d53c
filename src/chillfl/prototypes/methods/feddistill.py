"""FedDistill (Jeong et al., 2018; PFLlib's ``feddistill``): per-class average logits shared, distilled into each client's own model.

Jeong, Oh, Kim, Park, Bennis & Kim, "Communication-Efficient On-Device Machine Learning: Federated
Distillation and Augmentation under Non-IID Private Data" (arXiv 1811.11479), federated distillation
(FD); as PFLlib (``TsingZ0/PFLlib``, ``clientdistill`` / ``serverdistill``) runs it as a personalised
baseline. A member of the prototype family whose prototypes live among the logits
(:attr:`~chillfl.prototypes.spec.PrototypeHooks.space` = ``"logits"``): models never travel, each
client's own model is its personal model. Round t, sampled client k, F_k its model's logits::

    upload:  Fbar_k,c = 1/n_k,c sum_{(x, y) in D_k, y = c} F_k(x)      for each class c it holds, with n_k,c
    server:  Fhat_c   = 1/|K_c| sum_{k in K_c} Fbar_k,c                 K_c: the round's clients holding c
                        (weighting = "count": sum_k n_k,c Fbar_k,c / sum_k n_k,c)
    client:  L_k = CE(F_k(x) / T, y) + lam * D(F_k(x), Fhat_y)          (Fhat: the table it received)

    D = "mse": 1/(n C) sum_i m_{y_i} ||F_k(x_i) - Fhat_{y_i}||^2              (PFLlib to 2023: nn.MSELoss, lam = 1)
    D = "kl":  1/n     sum_i m_{y_i} KL(softmax(Fhat_{y_i}) || softmax(F_k(x_i)))   (the paper's; PFLlib 2024-25)

with m_c = 1 when the table holds class c, else 0 (the sample still counts in n). Uplink: each
held class's C floats + its class id and count; downlink: each known class's C floats + its id
(the family's pricing): C x C floats at most, whatever the model's size.

Choices (where the paper and PFLlib differ or say nothing):

* ``distance = "mse"`` (default): PFLlib's MSE between the raw logits and the class's global
  average logit (its ``loss_mse``, to its December 2023 version). ``"kl"``: the paper's
  distillation regulariser, a cross entropy between the softmaxes of the two, written as the
  KL divergence (it differs by the teacher's entropy, a constant of the model: the same
  gradient, zero at a match); PFLlib's term from April 2024, ``CrossEntropyLoss(output,
  softmax(Fhat_y))``, is this one. Its November 2025 version (``clientfd.py``) drops the
  softmax and feeds the raw average logits to ``CrossEntropyLoss`` as soft-label
  probabilities: not followed. Both at temperature 1; the CE term is the run's, at its
  temperature T.
* ``weighting = "uniform"`` (default): the plain mean over the clients holding the class
  (PFLlib's ``logit_aggregation``; the paper's sum over devices is one too); ``"count"`` weighs
  each client's average logit by its sample count of the class.
* One table for every client: the paper hands device i the mean of the *other* devices' averages,
  (sum_j Fbar_j - Fbar_i) / (M - 1), PFLlib everyone the same one; the family sends one downlink.
* The table is rebuilt from each round's uploads (PFLlib): a class none of the round's clients
  holds is unknown in the next round. Round 1 has no table (plain CE).
* A sample of a class the table lacks contributes zero and counts in the mean over the batch
  (PFLlib puts the sample's own output as its target).
* The average logits are computed once after training, in eval mode, over the client's training
  split (the family's rule); PFLlib and the paper accumulate each sample's output during training,
  over every epoch, in train mode, with the weights of that step.
* Local training is the run's (``[client]`` optimiser, CE at the run's T).

Checked (2026-12) against: TsingZ0/PFLlib ``system/flcore/clients/clientdistill.py`` over its
history (``loss_mse`` to 2b077c1, Dec 2023; ``self.loss(output, logit_new.softmax(dim=1))`` from
83e2182, Apr 2024) and, renamed, ``clientfd.py`` / ``serverfd.py`` at d832e76 (Nov 2025: no
softmax; ``proto_aggregation``, a plain mean per class; ``agg_func``, each client's per-class mean
of its outputs during training; ``--lamda`` 1.0); Jeong et al. (arXiv 1811.11479) for the
per-label average logits and the other devices' mean. Found: the docs named MSE as PFLlib's
current term; behaviour unchanged.

Evaluation: ``local_acc`` is the client's model after its training, which it keeps;
``global_acc`` the family's mean over the clients trained so far of their own models on the test
set; ``local_proto_acc`` / ``global_proto_acc`` classify a sample by the nearest class-average
logit vector. Only C-wide rows travel, so architectures may differ in their representation width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Sequence

import torch
import torch.nn.functional as F

from chillfl.capabilities import Capabilities
from chillfl.options import Scale, require
from chillfl.prototypes.maths import Weighting, prototype_distance
from chillfl.prototypes.methods.fedproto import ON_FLOWER
from chillfl.prototypes.spec import ClassRows, Head, Knowledge, PrototypeHooks, PrototypeSpec, Space, average_rows
from chillfl.training.local import BaseLoss
from chillfl.training.objective import Context, read_tensor, temperature_cross_entropy

Distance = Literal["mse", "kl"]
"""The distillation term's distance: PFLlib's MSE on logits, or the paper's KL between softmaxes."""


@dataclass(frozen=True)
class FedDistillOptions:
    """``lam``: weight of the distillation term (1, PFLlib's ``--lamda``). ``distance``: ``mse`` (PFLlib) or ``kl`` (the
    paper's cross entropy between softmaxes). ``weighting``: ``uniform`` over the clients holding a class (PFLlib) or
    ``count``-weighted (the parser refuses any other value of the two, naming the field)."""

    lam: Scale = 1.0
    distance: Distance = "mse"
    weighting: Weighting = "uniform"

    def validate(self, section: str) -> None:
        require(self.lam >= 0, f"{section}.lam", f"must be >= 0, got {self.lam}")


def distillation_distance(logits: torch.Tensor, y: torch.Tensor, table: torch.Tensor, mask: torch.Tensor, distance: Distance) -> torch.Tensor:
    """D(F(x), Fhat_y) over a batch, zero for samples whose class the table lacks (``mask``), averaged over all samples.

    ``mse``: :func:`~chillfl.prototypes.maths.prototype_distance` on the logits (``nn.MSELoss``'s mean over n x C).
    ``kl``: 1/n sum_i KL(softmax(Fhat_{y_i}) || softmax(F(x_i))); no data-dependent shapes (masks multiply), for ``vmap``.
    """
    if distance == "mse":
        return prototype_distance(logits, y, table, mask)
    target = torch.softmax(table.to(logits.dtype)[y], dim=-1)  # [n, C]
    per_sample = (torch.xlogy(target, target) - target * F.log_softmax(logits, dim=-1)).sum(-1)
    return (per_sample * mask.to(logits.dtype)[y]).sum() / logits.shape[0]


@dataclass(frozen=True)
class LogitDistillLoss:
    """FedDistill's local objective, CE(F(x) / T, y) + ``lam`` * D(F(x), Fhat_y), the table read from the context.

    It reads the context only (``uses_context``: no second forward for the representation); the table is
    the protocol's ``protos`` ``[C, C]`` and ``proto_mask`` ``[C]`` (the hooks' ``space`` is the logits).
    """

    uses_context: ClassVar[bool] = True
    lam: float = 1.0
    distance: Distance = "mse"

    def __call__(self, logits: torch.Tensor, targets: torch.Tensor, temperature: Any, *, context: Context | None = None) -> torch.Tensor:
        if context is None:
            raise TypeError("LogitDistillLoss needs the context (StepLoss passes it to a loss that declares uses_context)")
        value = temperature_cross_entropy(logits, targets, temperature)
        if self.lam:
            table, mask = read_tensor(context, "protos"), read_tensor(context, "proto_mask")
            value = value + self.lam * distillation_distance(logits, targets, table, mask, self.distance)
        return value


class FedDistill(PrototypeHooks[FedDistillOptions]):
    """Per-class average logits up (the default release, among the logits), their mean down, distilled in the loss."""

    space: ClassVar[Space] = "logits"

    def loss(self, head: Head) -> BaseLoss:
        return LogitDistillLoss(self.options.lam, self.options.distance)

    def combine(self, releases: Sequence[ClassRows]) -> Knowledge:
        return average_rows(releases, self.options.weighting)


SPEC = PrototypeSpec(
    "feddistill",
    FedDistillOptions,
    FedDistill,
    summary="per-class average logits shared, lam * MSE to them in the local loss (lam = 1); models stay on the clients",
    capabilities=Capabilities(
        on_flower=ON_FLOWER,
        personal_model=True,
        private_steps="each client uploads the per-class means of its model's logits on its raw data, computed outside its training: "
        "per-sample clipping of the steps bounds none of them",
    ),
)

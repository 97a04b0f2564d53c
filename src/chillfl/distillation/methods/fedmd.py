"""FedMD (Li & Wang 2019): transfer learning on the labelled public set, then consensus = the mean class scores.

The algorithm's mapping onto the protocol and its choices: :mod:`chillfl.distillation.fedmd`.

Checked against: diogenes0319/FedMD_clean ``FedMD.py``, ``Neural_Networks.py``, ``conf/CIFAR_balance_conf.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Sequence

import torch

from chillfl.distillation.fedmd import consensus, mean_absolute_error
from chillfl.options import require
from chillfl.protocols.softlabels.messages import SoftLabelUplink
from chillfl.protocols.softlabels.method import Aggregate, Loss, Pretraining, SoftLabelMethod, SoftLabelSpec, stack_uplinks


@dataclass(frozen=True)
class FedMDOptions:
    """``transfer_epochs``: epochs of supervised training on the labelled public set before a model's first round
    (the paper trains to convergence; 0 = no transfer phase). ``transfer_lr``: its learning rate (None: ``client.lr``).
    ``scores``: what the class scores are: ``logits`` digested with an L1 loss (the reference code), or ``probs``
    (softmax outputs) digested with KL, as the other soft-label methods."""

    transfer_epochs: int = 20
    transfer_lr: float | None = None
    scores: Literal["logits", "probs"] = "logits"

    def validate(self, section: str) -> None:
        require(0 <= self.transfer_epochs <= 100_000, f"{section}.transfer_epochs", f"must be in [0, 100000], got {self.transfer_epochs}")
        require(self.transfer_lr is None or self.transfer_lr > 0, f"{section}.transfer_lr", f"must be > 0 or unset, got {self.transfer_lr}")


class FedMD(SoftLabelMethod[FedMDOptions]):
    """FedMD's server half: consensus = the plain mean of the clients' class scores (:func:`~chillfl.distillation.fedmd.consensus`);
    with ``scores = "logits"`` both distillations use the mean absolute error."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.uses_logits = self.options.scores == "logits"

    def aggregate(self, round: int, indices: torch.Tensor, uplinks: Sequence[SoftLabelUplink]) -> Aggregate:
        stack, keep = stack_uplinks(indices, uplinks, self.num_classes)
        if bool(keep.all()):
            rows = consensus(list(stack))
            return Aggregate(torch.ones(len(indices), dtype=torch.bool), rows, rows)
        return super().aggregate(round, indices, uplinks)

    def distill_loss(self) -> Loss:
        return mean_absolute_error if self.uses_logits else super().distill_loss()

    def server_loss(self) -> Loss:
        return mean_absolute_error if self.uses_logits else super().server_loss()


def transfer_learning(options: FedMDOptions) -> Pretraining | None:
    """The transfer-learning phase, as the protocol's public-set pretraining (None when ``transfer_epochs`` is 0)."""
    if not options.transfer_epochs:
        return None
    return Pretraining(options.transfer_epochs, options.transfer_lr, "transfer_epochs")


SPEC = SoftLabelSpec(
    "fedmd", FedMDOptions, FedMD, summary="transfer learning on the labelled public set, consensus = mean class scores",
    pretraining=transfer_learning,
)

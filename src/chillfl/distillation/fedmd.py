"""FedMD (Li & Wang, 2019): transfer learning, then rounds of communicate / aggregate / digest / revisit.

FedMD's Algorithm 1 maps onto the soft-label round protocol (:mod:`.protocol`)
as follows::

    transfer learning   each model trains on the labelled public set D0 (``transfer_epochs``),
                        then on its private data: a client does the first at its first
                        participation, the second is that round's private training
    communicate         class scores f_k(x) on the round's public subset d_t  (the uplink)
    aggregate           consensus  f~(x) = (1/K) sum_k f_k(x)                 (:func:`consensus`)
    distribute          the consensus goes down with the next round's downlink
    digest              train towards f~ on d_t (the protocol's distillation, ``distill_epochs``)
    revisit             train on the private data (the protocol's private training, ``client.epochs``)

Choices (docs/baselines.md):

* **Class scores** are the softmax outputs at T = 1 and the digest loss is
  KL(f~ || softmax(f(x))), the protocol's distillation; the paper says
  "class scores" and its reference code matches logits with an L1 loss.
* **Order.** The consensus of round t is digested at the start of round t+1
  (before revisiting), as in every method of this protocol; the paper digests
  it in the same round. Each round still runs digest -> revisit -> communicate.
* **Server model.** FedMD has none; here the protocol's server model (the
  ``[model]`` default) also does the transfer learning once, then distils the
  consensus each round, so that ``global_acc`` exists (FedChill's Table 1
  reports one for FedMD).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from chillfl.options import require

from .era import mean_soft_labels


@dataclass(frozen=True)
class FedMDOptions:
    """``transfer_epochs``: epochs of supervised training on the labelled public set before a model's first round
    (the paper trains to convergence; 0 = no transfer phase). ``transfer_lr``: its learning rate (None: ``client.lr``)."""

    transfer_epochs: int = 20
    transfer_lr: float | None = None

    def validate(self, section: str) -> None:
        require(self.transfer_epochs >= 0, f"{section}.transfer_epochs", f"must be >= 0, got {self.transfer_epochs}")
        require(self.transfer_lr is None or self.transfer_lr > 0, f"{section}.transfer_lr", f"must be > 0 or unset, got {self.transfer_lr}")


def consensus(scores: Sequence[torch.Tensor]) -> torch.Tensor:
    """FedMD's aggregate: f~ = (1/K) sum_k f_k over the K clients' ``[n, C]`` class scores."""
    return mean_soft_labels(torch.stack(list(scores)))

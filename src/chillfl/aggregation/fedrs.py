"""FedRS (Li & Zhan, KDD 2021): FedAvg whose clients train with a restricted softmax.

"FedRS: Federated Learning with Restricted Softmax for Label Distribution Non-IID
Data". A client that has no sample of class c still updates c's weights through
the softmax's denominator, pushing c's logits down on every sample it sees (the
"missing classes" of label skew). FedRS scales those classes' logits by
alpha in [0, 1] before the softmax cross-entropy::

    z'_c = alpha * z_c   if n_c = 0,   z'_c = z_c otherwise;   loss CE(z', y)

n_c the client's training count of class c. Aggregation is FedAvg's
(n_i / n, or ``weighting = "uniform"``).

Choices
-------
* ``alpha`` defaults to 0.5, the value fluke uses. The paper's
  text was not reachable here (its abstract only, read 2026-12-01); the first
  author's code has no single default either: ``train_lab.py`` of
  lxcnju/FedRepo tunes FedRS over ``alpha`` in {0.9, 0.5, 0.1}, and 0.5 is its
  middle value (Flower's FedLC baseline runs FedRS at 0.9).
* A class is "missing" when the client has no training sample of it (n_c = 0);
  fluke's alternative threshold (n_c <= 2 counted missing) is not offered.
* ``scaling = "proportional"``: the first author's code (lxcnju/FedRepo,
  ``algorithms/fedrs.py``) scales *every* class, by
  ``s_c = alpha + (1 - alpha) * n_c / max_j n_j``: missing classes get alpha,
  the client's most frequent class 1, the others in between. The default
  ``"missing"`` is the rule above (1 for every class present), the one the
  abstract-level descriptions, fluke and Flower's baseline use (FL-bench has no FedRS).
* Where the scaling applies: that code trains on ``s_c * (h . w_c)``, the
  classifier's weight times the features with *no bias at all* (the head's
  bias is left out of the training logits, and so gets no gradient); here the
  whole logit ``z_c = h . w_c + b_c`` is scaled, bias included (``logit =
  "whole"``, default, as fluke and Flower's FedLC baseline do).
  ``logit = "weights"`` trains on the code's ``s_c (z_c - b_c) = s_c (h . w_c)``:
  the head's bias leaves the training logits (it gets no gradient from the
  loss; the uploaded and global models still evaluate with it). The two agree
  for a head without bias.
* With logit chilling's temperature T the loss is the run's base loss at T on the
  restricted logits: CE(z'/T, y), i.e. present classes' logits scaled by 1/T and
  missing ones by alpha/T. At T = 1 it is the paper's loss; alpha = 1 is FedAvg.
* The restriction is in the local loss only: the model the client uploads and the
  global model evaluate plain logits.

Checked (2026-12) against the first author's code, lxcnju/FedRepo ``algorithms/fedrs.py`` (``update_local``:
``cdist = dist / dist.max() * (1 - alpha) + alpha`` from the client's label counts, training logits
``cdist * h W^T`` with no bias, the server's FedAvg by sample counts): ``scaling = "proportional"`` with
``logit = "weights"`` is that code's loss term for term; the defaults keep the abstract-level rule (see above).
The paper's text could not be read here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from chillfl.aggregation.logit_adjust import AdjustedFedAvg, logit_width
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, Built, register_algorithm, require_head
from chillfl.capabilities import Capabilities
from chillfl.options import require

COUNTS = "fedrs_label_counts"
"""Context key of the client's per-class training counts n_c."""


@dataclass(frozen=True)
class FedRSOptions:
    """``alpha``: the factor of a missing class's logit, in [0, 1] (1: FedAvg; 0: missing classes' logits are 0)."""

    alpha: float = 0.5
    weighting: Literal["samples", "uniform"] = "samples"
    """As FedAvg's: ``samples`` (m_i / m) or ``uniform`` (1/|S|)."""
    scaling: Literal["missing", "proportional"] = "missing"
    """``missing``: alpha for classes without samples, 1 otherwise (the paper); ``proportional``: alpha + (1 - alpha) n_c / max n (the authors' code)."""
    logit: Literal["whole", "weights"] = "whole"
    """``whole``: the scale multiplies the whole logit, bias included; ``weights``: ``h . w_c`` only, the head's bias left
    out of the training logits (the authors' code)."""

    def validate(self, section: str) -> None:
        require(math.isfinite(self.alpha) and 0.0 <= self.alpha <= 1.0, f"{section}.alpha", f"must be in [0, 1], got {self.alpha}")


@dataclass(frozen=True)
class Restricted:
    """z'_c = alpha * z_c where n_c = 0, else z_c; ``proportional``: z'_c = (alpha + (1 - alpha) n_c / max n) z_c.

    Tensor ops only (``torch.where``, ``amax``): vmappable, no branch on the counts.
    """

    alpha: float
    proportional: bool = False

    def __call__(self, logits: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        if self.proportional:  # an option, not data: no branch under vmap
            share = counts / counts.amax(dim=-1, keepdim=True).clamp_min(1.0)
            return (self.alpha + (1.0 - self.alpha) * share) * logits
        return torch.where(counts > 0, logits, self.alpha * logits)


def build(options: FedRSOptions, ctx: BuildContext) -> Built:
    width = logit_width(ctx.model, "FedRS")
    bias = None if options.logit == "whole" else f"{require_head(ctx, 'FedRS')}.bias"
    return AdjustedFedAvg(Restricted(options.alpha, options.scaling == "proportional"), COUNTS, width, options.weighting, options, bias), []


SPEC = register_algorithm(
    "fedrs",
    AlgorithmSpec(
        FedRSOptions,
        build,
        "FedAvg + restricted softmax: missing classes' logits scaled by alpha (Li & Zhan 2021)",
        capabilities=Capabilities(
            private_steps="its loss reads the client's label counts, so one sample changes every sample's gradient, which per-sample clipping does not bound",
            takes_weights=True,
            not_a_base="FedRS's clients run their own local training (the restricted loss), which PA3Fed's client half does not compose with",
        ),
    ),
)

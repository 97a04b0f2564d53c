"""FedLC (Zhang, Li, Li, Xu, Wu, Ding & Wu, ICML 2022): FedAvg whose clients train on calibrated logits.

"Federated Learning with Label Distribution Skew via Logits Calibration". Each
client subtracts from every logit a class-wise margin that grows as the class
gets rarer on the client::

    z'_c = z_c - tau * n_c^(-1/4);   loss CE(z', y)

n_c the client's training count of class c. Aggregation is FedAvg's (n_i / n,
or ``weighting = "uniform"``).

Choices
-------
* ``tau`` defaults to 1.0, the value FL-bench (``src/server/fedlc.py``) and
  fluke use. The paper's text was not reachable here (its abstract and
  introduction only, read 2026-12-01); Flower's FedLC baseline (adap/flower
  ``baselines/fedlc/README.md``), whose author read it, says the paper does not
  give tau for its Equation 7 and defaults to 0.5, reporting 0.1, 0.5 and 1.0;
  FedDecorr's FedLC (bytedance/FedDecorr ``approach/fedlogitcal.py``) runs 0.1.
  No code from the authors was found.
* The margin is ``tau * n_c^(-1/4)``, i.e. tau over the fourth root of the
  count, subtracted from the logit (the larger the count, the smaller the
  margin); FL-bench, fluke and Flower's baseline compute the same
  ``tau * n ** (-1/4)`` (the by-hand tests in ``tests/test_label_skew_losses.py``).
* A class the client has no sample of has n_c^(-1/4) = inf. ``absent = "mask"``
  (default) gives it the margin tau * 1e9, a large finite offset (FedRoD's
  ``NO_SAMPLE``): its softmax probability is 0 and its logit gets no gradient
  when tau > 0, which is what FedDecorr's and fluke's ``tau * 0 ** -0.25 = inf``
  does (FL-bench's client, read 2026-12-01, clamps the count at 1e-8: a margin
  of 100 tau, nearly the same for tau >= 1), without infinities (and without
  NaN at tau = 0).
  ``absent = "one"`` counts it as n_c = 1 instead: the largest finite margin, tau.
* The softmax runs over every class (y's own calibrated logit in the
  denominator too), as FL-bench, fluke, FedDecorr and Flower's baseline do. The
  paper's loss leaves y out of the denominator,
  -log(e^(z'_y) / sum_{j != y} e^(z'_j)) (quoted from the paper in FL-bench
  issue #5; FL-bench's ``src/server/fedlc.py`` says the same). That loss is
  -z'_y + logsumexp_{j != y} z'_j: unbounded below, its gradient on z_y is -1
  whatever the prediction, so it never stops growing the true logit (FL-bench's
  author reports that training with it collapsed). It is not offered.
* With logit chilling's temperature T the loss is the run's base loss at T on the
  calibrated logits: CE((z - tau n^(-1/4)) / T, y), so the margin is divided by T
  too (FedRoD instead adds its log prior after the division). At T = 1 it is the
  loss above (the paper's up to its denominator); tau = 0 is FedAvg.
* The calibration is in the local loss only: the uploaded and the global model
  evaluate plain logits.

Checked (2026-12) against FL-bench (``src/client/fedlc.py``: ``exp(z - tau n^(-1/4))`` over every class, y's own
in the denominator, the mean over the batch, absent classes counted as 1e-8; ``src/server/fedlc.py``: ``--tau 1.0``
and FedAvg). The paper's text and any authors' code could not be read here; the choices above say what differs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from chillfl.aggregation.logit_adjust import AdjustedFedAvg, logit_width
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, Built, register_algorithm
from chillfl.capabilities import Capabilities
from chillfl.options import Scale, require

COUNTS = "fedlc_label_counts"
"""Context key of the client's per-class training counts n_c."""
NO_SAMPLE = 1e9
"""n_c^(-1/4) for a class without samples under ``absent = "mask"`` (0^(-1/4) = inf, kept finite)."""


@dataclass(frozen=True)
class FedLCOptions:
    """``tau``: the calibration strength (>= 0; 0: FedAvg). ``absent``: a class without samples is ``mask``ed or counted as ``one`` sample."""

    tau: Scale = 1.0
    absent: Literal["mask", "one"] = "mask"
    weighting: Literal["samples", "uniform"] = "samples"
    """As FedAvg's: ``samples`` (m_i / m) or ``uniform`` (1/|S|)."""

    def validate(self, section: str) -> None:
        require(math.isfinite(self.tau) and self.tau >= 0.0, f"{section}.tau", f"must be a finite number >= 0, got {self.tau}")


@dataclass(frozen=True)
class Calibrated:
    """z'_c = z_c - tau * n_c^(-1/4); a class with n_c = 0 gets n^(-1/4) = ``NO_SAMPLE`` (``mask``) or 1 (``one``)."""

    tau: float
    absent: str = "mask"

    def __call__(self, logits: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        missing = NO_SAMPLE if self.absent == "mask" else 1.0  # an option, not data: no branch under vmap
        quarter = torch.where(counts > 0, counts.clamp_min(1.0).pow(-0.25), torch.full_like(counts, missing))
        return logits - self.tau * quarter


def build(options: FedLCOptions, ctx: BuildContext) -> Built:
    return AdjustedFedAvg(Calibrated(options.tau, options.absent), COUNTS, logit_width(ctx.model, "FedLC"), options.weighting, options), []


SPEC = register_algorithm(
    "fedlc",
    AlgorithmSpec(
        FedLCOptions,
        build,
        "FedAvg + logits calibrated by tau * n_c^(-1/4) (Zhang et al. 2022)",
        capabilities=Capabilities(
            private_steps="its loss reads the client's label counts, so one sample changes every sample's gradient, which per-sample clipping does not bound",
            takes_weights=True,
            not_a_base="FedLC's clients run their own local training (the calibrated loss), which PA3Fed's client half does not compose with",
        ),
    ),
)

"""FedProx (Li et al., MLSys 2020): FedAvg plus a proximal term in the local objective.

Local objective of client i (Li et al., Eq. 2)::

    h_i(w; w^t) = F_i(w) + mu/2 * ||w - w^t||^2

so the term's gradient is ``mu * (w - w^t)``: it pulls the local model back to
the global model the round started from. Aggregation is FedAvg,
``w^{t+1} = sum_i p_i w_i`` with ``p_i = n_i / sum_j n_j`` over the round's
clients (or caller-supplied weights, which is how PA3Fed plugs in).

Choices
-------
* The proximal term covers the trainable parameters only (the keys the
  training loop differentiates); buffers such as BN statistics are not
  penalised.
* The term's gradient ``mu (w - w^t)`` joins the loss's before the optimiser: SGD's weight decay and momentum
  act on the sum, as ``torch.optim.SGD`` on ``F_i + prox`` (the authors' PerturbedGradientDescent has no
  momentum; FL-bench and PFLlib add it to the gradient the same way). Frozen parameters are not penalised.
* ``train_loss`` is the objective trained, ``h_i`` (the term included), not the authors' ``F_i``.
* Stragglers (``federation.stragglers``) report their partial work, the paper's FedProx; the authors' code
  gives a straggler 1 .. E-1 whole epochs, chillfl a share of its steps (``straggler_work``).
* ``mu = 0`` is allowed (it is exactly FedAvg) but logs a warning, since it
  is almost always a configuration mistake.

Checked (2026-12) against Li et al. 2020 (Eq. 2, Sec. 5), litian96/FedProx (``flearn/trainers/fedprox.py``,
``flearn/optimizer/pgd.py``), FL-bench and PFLlib: the term, its gradient, the aggregation and the straggler rule.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from chillfl.aggregation.base import Downlink, FedAvg, Params
from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm, with_terms
from chillfl.capabilities import PARAMETER_TERM, Capabilities, Cost
from chillfl.options import require
from chillfl.training.objective import ProximalTerm, Term

__all__ = ["FedProx", "FedProxOptions", "ProximalTerm"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FedProxOptions:
    """``mu``: proximal coefficient (default 0.01, Li et al. tune it in {0.001, 0.01, 0.1, 1})."""

    mu: float = 0.01
    weighting: Literal["samples", "uniform"] = "samples"
    """As FedAvg's: ``samples`` (m_i / m) or ``uniform`` (1/|S|)."""

    def validate(self, section: str) -> None:
        # the range of [objective] proximal_mu (ProximalOptions): the same term under its other name, refused alike
        require(0 <= self.mu <= 1e6, f"{section}.mu", f"must be in [0, 1e6], got {self.mu}")


class FedProx(FedAvg):
    """FedAvg aggregation that also sends ``mu`` and the global model for :class:`ProximalTerm`."""

    def __init__(self, options: FedProxOptions = FedProxOptions()) -> None:
        super().__init__(options.weighting)
        self.options = options  # recorded for an instance passed from Python
        self.mu = options.mu
        if self.mu == 0:
            log.warning("FedProx with mu = 0 is equivalent to FedAvg")

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        return Downlink(context={"mu": self.mu, "global_params": global_params}, local=("global_params",))

    def needed_terms(self) -> list[Term]:
        """The proximal term that reads ``mu`` (:class:`ProximalTerm`): without it the clients run FedAvg's steps."""
        return [ProximalTerm()]


SPEC = register_algorithm(
    "fedprox",
    AlgorithmSpec(
        FedProxOptions,
        lambda o, ctx: with_terms(FedProx(o)),
        "FedAvg + proximal term (Li et al. 2020)",
        # the term over every parameter tensor a step: calls, next to no FLOPs (PARAMETER_TERM, measured on FedProx itself)
        capabilities=Capabilities(takes_weights=True, cost=Cost(pass_overhead=PARAMETER_TERM)),
        makes=(FedProx,),
    ),
)

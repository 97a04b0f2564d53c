"""FedNova (Wang et al., NeurIPS 2020): normalised averaging for unequal local work.

Client i runs ``tau_i`` local steps (``ClientResult.num_steps``) from ``x``
and returns ``y_i``. Its normalised update and the server step are (Wang et
al., Eq. 6-7, with the learning rate folded into ``x - y_i``)

    d_i     = (x - y_i) / a_i
    tau_eff = sum_i p_i a_i
    x      <- x - tau_eff * sum_i p_i d_i

with ``a_i = tau_i`` for plain SGD and, for SGD with momentum ``rho``
(Wang et al., Sec. 5 / App. "momentum"),

    a_i = (tau_i - rho * (1 - rho^tau_i) / (1 - rho)) / (1 - rho).

``p_i = n_i / sum_j n_j`` (or caller-supplied weights, e.g. PA3Fed's).

Choices
-------
* ``momentum`` must equal the local optimiser's momentum (the upload does not
  carry it). Built from a config, it is left unset and filled from
  ``client.momentum``; a different explicit value is a ConfigError. Weight
  decay is ignored in ``a_i``, as in the paper's main formula.
* Only trainable parameters are normalised; buffers (BN statistics) are
  averaged with ``p_i`` (a normalised step could make a running variance
  negative); integer buffers take the max.
* Checked against JYWa/FedNova ``distoptim/FedNova.py``: ``step``'s
  ``local_counter = local_counter * momentum + 1; local_normalizing_vec +=
  local_counter`` is a_i above, and ``average``'s ``tau_eff = sum ratio *
  local_normalizing_vec``, ``cum_grad * weight * tau_eff / a_i`` is the server
  step. Not carried over: its proximal variant (``mu != 0``: a_i shrinks by
  ``1 - lr mu`` a step and tau_eff uses the plain step counts), so a run's
  proximal term (``objective.proximal_mu``, a ``proximal`` term) is refused
  rather than normalised as plain SGD; and its server momentum ``gmf`` (0 in
  the paper's main runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Collection, Mapping, Sequence

import torch

from chillfl.aggregation.base import (
    AggregatorBase,
    ClientResult,
    Json,
    Params,
    check_state_keys,
    sample_weights,
    weighted_average,
)
from chillfl.options import require
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, Built, register_algorithm, with_client_momentum
from chillfl.capabilities import Capabilities
from chillfl.errors import ConfigError
from chillfl.training.terms import entry_name

if TYPE_CHECKING:
    from chillfl.config import RunConfig


@dataclass(frozen=True)
class FedNovaOptions:
    """``momentum``: the clients' SGD momentum rho in [0, 1); unset = ``client.momentum`` (0 outside a config)."""

    momentum: float | None = None

    def validate(self, section: str) -> None:
        if self.momentum is not None:
            require(0 <= self.momentum < 1, f"{section}.momentum", f"must be in [0, 1), got {self.momentum}")


def effective_steps(num_steps: int, momentum: float = 0.0) -> float:
    """a_i: ``tau`` for plain SGD, ``(tau - rho(1 - rho^tau)/(1 - rho)) / (1 - rho)`` with momentum."""
    if momentum == 0:
        return float(num_steps)
    rho = momentum
    return (num_steps - rho * (1 - rho**num_steps) / (1 - rho)) / (1 - rho)


class FedNova(AggregatorBase):
    """FedNova server (stateless between rounds)."""

    def __init__(self, options: FedNovaOptions = FedNovaOptions(), param_keys: Collection[str] | None = None) -> None:
        self.options = options
        self.momentum = options.momentum or 0.0
        self.param_keys = None if param_keys is None else list(param_keys)
        self._tau_eff = float("nan")

    def default_weights(self, results: Sequence[ClientResult]) -> torch.Tensor:
        """p_i = m_i / m, the clients' sample shares (PA3Fed multiplies them by its alpha_i)."""
        return sample_weights(results)

    def aggregate(
        self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None
    ) -> Params:
        w = (self.default_weights(results) if weights is None else weights).tolist()
        a = [effective_steps(r.num_steps, self.momentum) for r in results]
        if min(a) <= 0:
            raise ValueError("FedNova needs num_steps >= 1 for every client")
        tau_eff = sum(p * ai for p, ai in zip(w, a))
        out = weighted_average([r.params for r in results], torch.tensor(w, dtype=torch.float64))
        keys = self.param_keys if self.param_keys is not None else list(global_params)
        for k in keys:
            x = global_params[k]
            if not torch.is_floating_point(x):
                continue
            d = sum(p / ai * (x.double() - r.params[k].double()) for p, ai, r in zip(w, a, results))
            out[k] = (x.double() - tau_eff * d).to(x.dtype)
        self._tau_eff = tau_eff
        return out

    def round_metrics(self) -> Mapping[str, Json]:
        return {"tau_eff": self._tau_eff}

    def state_dict(self) -> dict[str, Any]:
        """Only the last round's tau_eff (a metric), kept so ``round_metrics`` reads the same after a resume."""
        return {"tau_eff": self._tau_eff}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("tau_eff",), "FedNova")
        self._tau_eff = float(state["tau_eff"])


def _check(options: FedNovaOptions, config: "RunConfig", section: str) -> None:
    """A proximal term on the clients is refused: it shrinks each local step towards w^t, so a_i is no longer the
    step count (the reference code's ``etamu`` branch normalises by sum_k (1 - lr mu)^k: 23.56 for tau = 25 at lr 0.05,
    mu 0.1, where this a_i says 25), and the run went on silently with the plain-SGD a_i."""
    terms = [entry_name(t) for t in config.objective.terms]
    field = "objective.proximal_mu" if config.objective.proximal_mu > 0 else "objective.terms" if "proximal" in terms else None
    if field is not None:
        raise ConfigError(field, "FedNova's a_i counts plain (or heavy-ball) SGD steps; a proximal term's normaliser, "
                                 "sum_k (1 - lr mu)^k, is not implemented: drop the term")


def _build(options: FedNovaOptions, ctx: BuildContext) -> Built:
    return FedNova(with_client_momentum(options, ctx, "FedNova's a_i"), ctx.param_keys()), []


SPEC = register_algorithm(
    "fednova",
    AlgorithmSpec(
        FedNovaOptions,
        _build,
        "normalised averaging (Wang et al. 2020)",
        capabilities=Capabilities(plain_sgd="FedNova's normalised update (x - y_i) / (a_i lr)", takes_weights=True),
        check=_check,
    ),
)

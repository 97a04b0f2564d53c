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
  decay is ignored in ``a_i``, as in the paper's main formula. Above
  momentum 0.99 ``a_i`` is the exact recursion, not the closed form, which
  cancels as rho -> 1 (``agg_tau_eff`` 23 instead of 276 for 23 steps at
  rho = 1 - 1e-10): :data:`CLOSED_FORM_MAX_MOMENTUM`.
* A proximal term on the clients (``objective.proximal_mu``, or a ``proximal``
  entry of ``objective.terms``: FedProx's ``mu/2 ||w - x||^2``) shrinks each
  local step towards ``x``, so ``a_i`` is no longer the step count: with plain
  SGD it is ``sum_{k<tau_i} (1 - lr mu)^k`` (Wang et al., Sec. 4, FedProx's
  case; the reference code's ``etamu`` recursion ``a <- a (1 - lr mu) + 1``).
  In general ``a_i`` is what ``x - y_i`` is in units of ``lr`` when every
  gradient is 1 (the local steps are linear in the gradients with scalar
  coefficients), so :func:`effective_steps` runs the local optimiser's scalar
  recursion; with momentum the proximal gradient goes through the momentum
  buffer, as chillfl's term (in the loss) does. ``proximal_mu`` is filled from
  the run's term like ``momentum``.
* ``tau_eff``: ``"normaliser"`` (default) is the paper's ``sum_i p_i a_i``,
  under which equal local work gives FedAvg's (or FedProx's) step exactly;
  ``"steps"`` is ``sum_i p_i tau_i``, what JYWa/FedNova's code uses when its
  ``mu != 0`` (it is ``sum_i p_i a_i`` without one only for plain SGD).
* Only trainable parameters are normalised; buffers (BN statistics) are
  averaged with ``p_i`` (a normalised step could make a running variance
  negative); integer buffers take the max.
* Checked against JYWa/FedNova ``distoptim/FedNova.py``: ``step``'s
  ``local_counter = local_counter * momentum + 1; local_normalizing_vec +=
  local_counter`` is a_i above, and ``average``'s ``tau_eff = sum ratio *
  local_normalizing_vec``, ``cum_grad * weight * tau_eff / a_i`` is the server
  step. Not carried over: its proximal term added after the momentum buffer
  (with both, its normaliser adds each step's counter and then 1 again), and
  its server momentum ``gmf`` (0 in the paper's main runs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Collection, Literal, Mapping, Sequence, get_args

import torch

from chillfl.aggregation.base import (
    AggregatorBase,
    ClientResult,
    Json,
    OnParameters,
    Params,
    check_state_keys,
    sample_weights,
    weighted_average,
)
from chillfl.options import require
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, Built, register_algorithm, with_client_momentum
from chillfl.capabilities import Capabilities
from chillfl.errors import ConfigError
from chillfl.training.objective import PROXIMAL
from chillfl.training.terms import ObjectiveTerm


TauEff = Literal["normaliser", "steps"]
"""How tau_eff is formed (a Literal, so that ``chillfl list --options`` shows the allowed values)."""
TAU_EFF: tuple[TauEff, ...] = get_args(TauEff)


@dataclass(frozen=True)
class FedNovaOptions:
    """``momentum``: the clients' SGD momentum rho in [0, 1); unset = ``client.momentum`` (0 outside a config).
    ``proximal_mu``: the mu of the clients' proximal term; unset = the run's (``objective.proximal_mu`` or a
    ``proximal`` term; 0 without one or outside a config). ``tau_eff``: ``"normaliser"`` (sum_i p_i a_i, the paper's)
    or ``"steps"`` (sum_i p_i tau_i, the reference code's with a proximal term)."""

    momentum: float | None = None
    proximal_mu: float | None = None
    tau_eff: TauEff = "normaliser"

    def validate(self, section: str) -> None:
        if self.momentum is not None:
            require(0 <= self.momentum < 1, f"{section}.momentum", f"must be in [0, 1), got {self.momentum}")
        if self.proximal_mu is not None:
            require(0 <= self.proximal_mu <= 1e6, f"{section}.proximal_mu", f"must be in [0, 1e6], got {self.proximal_mu}")
        require(self.tau_eff in TAU_EFF, f"{section}.tau_eff", f"must be one of {', '.join(map(repr, TAU_EFF))}, got {self.tau_eff!r}")




CLOSED_FORM_MAX_MOMENTUM = 0.99
"""The largest momentum whose a_i is the closed form. It cancels catastrophically as rho -> 1 (relative error ~1e-13 at
0.99, 1e-9 at 0.9999, 0.67 at 1 - 1e-10, where a_i -> tau(tau + 1)/2); above, a_i is the exact O(tau) recursion
(error ~1e-16 tau). Not everywhere: the two differ in the last bits at ordinary rho, and runs keep theirs."""


def effective_steps(num_steps: int, momentum: float = 0.0, lr_mu: float = 0.0) -> float:
    """a_i: ``tau`` for plain SGD, ``(tau - rho(1 - rho^tau)/(1 - rho)) / (1 - rho)`` with momentum up to
    :data:`CLOSED_FORM_MAX_MOMENTUM`; above it, or with a proximal term (``lr_mu = lr * mu``), the local optimiser's
    recursion on unit gradients, ``x - y_i`` over ``lr``."""
    if lr_mu == 0 and momentum <= CLOSED_FORM_MAX_MOMENTUM:
        if momentum == 0:
            return float(num_steps)
        rho = momentum
        return (num_steps - rho * (1 - rho**num_steps) / (1 - rho)) / (1 - rho)
    a = buffer = 0.0  # a = (x - w_k) / lr; the proximal gradient mu (w_k - x) = -lr mu a joins the unit gradient
    for _ in range(num_steps):
        buffer = momentum * buffer + 1 - lr_mu * a
        a += buffer
    return a


class FedNova(OnParameters, AggregatorBase):
    """FedNova server (stateless between rounds)."""

    trainable_only = False  # as its builder: every parameter (a frozen one is normalised to itself)

    def __init__(self, options: FedNovaOptions = FedNovaOptions(), param_keys: Collection[str] | None = None) -> None:
        self.options = options
        self.momentum = options.momentum or 0.0
        self.proximal_mu = options.proximal_mu or 0.0
        self.param_keys = None if param_keys is None else list(param_keys)
        self._tau_eff = float("nan")

    def default_weights(self, results: Sequence[ClientResult]) -> torch.Tensor:
        """p_i = m_i / m, the clients' sample shares (PA3Fed multiplies them by its alpha_i)."""
        return sample_weights(results)

    def aggregate(
        self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None
    ) -> Params:
        w = (self.default_weights(results) if weights is None else weights).tolist()
        a = [effective_steps(r.num_steps, self.momentum, r.lr * self.proximal_mu) for r in results]
        if min(a) <= 0:
            raise ValueError("FedNova needs num_steps >= 1 for every client (and lr * proximal_mu < 1)")
        work = a if self.options.tau_eff == "normaliser" else [float(r.num_steps) for r in results]
        tau_eff = sum(p * ai for p, ai in zip(w, work))
        out = weighted_average([r.params for r in results], torch.tensor(w, dtype=torch.float64))
        for k in self.rule_keys(global_params):
            x = global_params[k]
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


def proximal_mu(terms: Sequence[ObjectiveTerm]) -> float:
    """The mu of the run's proximal term (its context carries one at most: :func:`~chillfl.training.terms.check_context`)."""
    return sum(t.options.mu for t in terms if t.spec is PROXIMAL)


def _with_run(options: FedNovaOptions, ctx: BuildContext) -> FedNovaOptions:
    """``momentum`` and ``proximal_mu`` filled from the run; an explicit different ``proximal_mu`` is a ConfigError."""
    options = with_client_momentum(options, ctx, "FedNova's a_i")
    if ctx.objective_terms is None:  # built outside a config: the options say it
        return options if options.proximal_mu is not None else replace(options, proximal_mu=0.0)
    mu = proximal_mu(ctx.objective_terms)
    if options.proximal_mu is not None and options.proximal_mu != mu:
        raise ConfigError(f"{ctx.section}.proximal_mu", f"must equal the run's proximal term's mu = {mu} (FedNova's a_i depends on it), "
                                                        f"got {options.proximal_mu}; leave it unset")
    return options if options.proximal_mu is not None else replace(options, proximal_mu=mu)


def _build(options: FedNovaOptions, ctx: BuildContext) -> Built:
    return FedNova(_with_run(options, ctx), ctx.param_keys()), []


def _bind(aggregator: FedNova, ctx: BuildContext) -> None:
    """An instance passed from Python takes ``client.momentum`` and the run's proximal mu as the builder's does (a_i; unset:
    the run's, a different one refused on ``aggregator.options.momentum`` / ``.proximal_mu``)."""
    options = _with_run(aggregator.options, ctx)
    aggregator.options, aggregator.momentum, aggregator.proximal_mu = options, options.momentum or 0.0, options.proximal_mu or 0.0


SPEC = register_algorithm(
    "fednova",
    AlgorithmSpec(
        FedNovaOptions,
        _build,
        "normalised averaging (Wang et al. 2020)",
        capabilities=Capabilities(plain_sgd="FedNova's normalised update (x - y_i) / (a_i lr)", takes_weights=True),
        makes=(FedNova,),  # an instance passed from Python meets this spec's checks (check_instance)
        bind=_bind,
    ),
)

"""FedExP (Jhunjhunwala, Wang & Joshi, ICLR 2023): FedAvg with an adaptive server extrapolation step.

Round t, sampled clients S (M = |S|), each trained from w^t to w_i::

    Delta_i  = w^t - w_i
    Delta    = (1/M) sum_i Delta_i
    eta_g    = max(1, sum_i ||Delta_i||^2 / (2 M (||Delta||^2 + eps)))
    w^{t+1}  = w^t - eta_g * Delta

eta_g = 1 is FedAvg (with a plain mean); when the clients' updates disagree
(sum ||Delta_i||^2 large against ||Delta||^2) the server steps further along
their average, as a projection-method extrapolation (the paper's Eq. 8).

Choices
-------
* ``eps = 1e-3``, the paper's value for its neural-network experiments.
* The plain mean 1/M over the sampled clients (the paper's Algorithm 1; the
  step size's bound is derived for it), so the rule takes no client weights.
  The authors' code (Divyansh03/FedExP ``main.py``) weighs both means by the
  clients' sample shares p_i / sum_S p_j, ``Delta = sum p_i Delta_i`` and
  ``sum p_i ||Delta_i||^2`` in place of ``(1/M) sum ||Delta_i||^2``:
  ``weighting = "samples"`` selects it.
* eps is added to ||Delta||^2 as the paper's formula writes; the authors'
  code adds ``S * epsilon`` (M eps), which ``eps_times_clients = true``
  selects. Their code also decays eps by 0.998^2 a round as it decays the
  local lr by 0.998 (eps is on the scale of an update's square):
  ``eps_decay`` multiplies eps by ``eps_decay**t`` in round t (0-based), as
  ``client.lr_decay`` does the lr; default 1, a fixed eps as the paper writes.
  Their loop decays both before its first round too, so their setting is
  ``client.lr = 0.01 * 0.998``, ``client.lr_decay = 0.998``, ``eps = 1e-3 *
  0.998**2``, ``eps_decay = 0.998**2``.
* Norms and the step cover the trainable parameters; buffers (batch-norm
  statistics) take the same mean, integer buffers the max. Sums in float64.
* Checked against Divyansh03/FedExP ``main.py`` (the server loop: ``grad_avg``,
  ``grad_norm_avg``, ``eta_g = max(1, 0.5 grad_norm_avg / (||grad_avg||^2 +
  S epsilon))``, ``w_vec_avg`` for evaluation).
* ``average_last_two`` (default off): the paper reports the accuracy of
  (w^{t+1} + w^t) / 2, because the extrapolated iterates oscillate. On, the
  model chillfl evaluates and checkpoints as global is that average, while
  the clients keep training from w^{t+1}: the aggregator keeps w^{t+1} and
  sends it as every client's start (:attr:`Downlink.params`), so the
  downlink still carries one model. Off, the global model is w^{t+1}, the
  algorithm's own iterate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Literal, Mapping, Sequence

import torch

from chillfl.aggregation.base import (
    AggregatorBase,
    ClientResult,
    Downlink,
    OnParameters,
    Params,
    check_state_keys,
    client_weights,
    load_params,
    params_state,
    weighted_average,
)
from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm
from chillfl.capabilities import Capabilities
from chillfl.engine.record import Json
from chillfl.options import require


@dataclass(frozen=True)
class FedExPOptions:
    """``eps``: the step size's damping (paper: 1e-3); ``average_last_two``: evaluate (w^{t+1} + w^t)/2 as the paper reports."""

    eps: float = 1e-3
    average_last_two: bool = False
    weighting: Literal["uniform", "samples"] = "uniform"
    """``uniform`` (1/M, Algorithm 1) or ``samples`` (n_i / sum_S n_j, the authors' code) for both means."""
    eps_times_clients: bool = False
    """Add M eps to ||Delta||^2 (the authors' code's ``S * epsilon``) instead of eps (the paper's formula)."""
    eps_decay: float = 1.0
    """eps of round t (0-based) is ``eps * eps_decay**t`` (the authors' code: 0.998**2 with ``client.lr_decay = 0.998``)."""

    def validate(self, section: str) -> None:
        require(self.eps > 0, f"{section}.eps", f"must be > 0, got {self.eps}")
        require(0 < self.eps_decay <= 1, f"{section}.eps_decay", f"must be in (0, 1], got {self.eps_decay}")


def fedexp_step(
    global_params: Mapping[str, torch.Tensor], models: Sequence[Mapping[str, torch.Tensor]], eps: float, keys: Sequence[str], weights: Sequence[float] | None = None
) -> tuple[Params, float]:
    """w^t - eta_g * sum_i p_i Delta_i on ``keys`` (float64 sums, cast back), and eta_g = max(1, sum_i p_i ||Delta_i||^2 / (2 (||.||^2 + eps))).

    ``weights`` p_i (summing to 1) default to 1/M, the paper's sum_i ||Delta_i||^2 / (2 M (||mean||^2 + eps)).
    """
    p = [1.0 / len(models)] * len(models) if weights is None else list(weights)
    deltas = [{k: global_params[k].double() - model[k].double() for k in keys} for model in models]
    mean = {k: sum((pi * d[k] for pi, d in zip(p, deltas)), torch.zeros_like(global_params[k], dtype=torch.float64)) for k in keys}
    spread = sum(pi * float((d[k] * d[k]).sum()) for pi, d in zip(p, deltas) for k in keys)
    mean2 = sum(float((mean[k] * mean[k]).sum()) for k in keys)
    eta = max(1.0, spread / (2 * (mean2 + eps)))
    return {k: (global_params[k].double() - eta * mean[k]).to(global_params[k].dtype) for k in keys}, eta


class FedExP(OnParameters, AggregatorBase):
    """FedAvg's mean of the updates, stepped by the adaptive eta_g; optionally reports the last two iterates' average."""

    trainable_only = False  # as its builder

    def __init__(self, options: FedExPOptions = FedExPOptions(), param_keys: Collection[str] | None = None) -> None:
        self.options = options
        self.param_keys = None if param_keys is None else list(param_keys)
        self.iterate: Params = {}
        """w^{t+1}, the clients' next start, kept only with ``average_last_two`` (the global model is then the average)."""
        self._eta: float | None = None

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        return Downlink(params=self.iterate) if self.iterate else Downlink()

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        current = self.iterate or global_params  # w^t: the model the clients trained from
        o = self.options
        w = client_weights(results, o.weighting)
        out = weighted_average([r.params for r in results], w)
        keys = self.rule_keys(current)
        eps = o.eps * o.eps_decay**round * (len(results) if o.eps_times_clients else 1)
        step, self._eta = fedexp_step(current, [r.params for r in results], eps, keys, w.tolist())
        out.update(step)
        if not self.options.average_last_two:
            return out
        self.iterate = out
        averaged = dict(out)
        for k in keys:
            averaged[k] = ((out[k].double() + current[k].double()) / 2).to(out[k].dtype)
        return averaged

    def round_metrics(self) -> Mapping[str, Json]:
        """eta_g, the round's server step size (1: a FedAvg step)."""
        return {} if self._eta is None else {"fedexp_eta": self._eta}

    def state_dict(self) -> dict[str, Any]:
        """w^{t+1} when the global model is the last two iterates' average (empty otherwise)."""
        return {"iterate": params_state(self.iterate)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("iterate",), "FedExP")
        self.iterate = load_params(state["iterate"])


SPEC = register_algorithm(
    "fedexp",
    AlgorithmSpec(
        FedExPOptions,
        lambda o, ctx: (FedExP(o, ctx.param_keys()), []),
        "FedAvg with adaptive server extrapolation (Jhunjhunwala et al. 2023)",
        capabilities=Capabilities(),
        makes=(FedExP,),
    ),
)

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
* Norms and the step cover the trainable parameters; buffers (batch-norm
  statistics) take the plain mean, integer buffers the max. Sums in float64.
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
from typing import Any, Collection, Mapping, Sequence

import torch

from chillfl.aggregation.base import (
    AggregatorBase,
    ClientResult,
    Downlink,
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

    def validate(self, section: str) -> None:
        require(self.eps > 0, f"{section}.eps", f"must be > 0, got {self.eps}")


def fedexp_step(global_params: Mapping[str, torch.Tensor], models: Sequence[Mapping[str, torch.Tensor]], eps: float, keys: Sequence[str]) -> tuple[Params, float]:
    """w^t - eta_g * mean Delta_i on ``keys`` (float64 sums, cast back), and eta_g."""
    m = len(models)
    deltas = [{k: global_params[k].double() - model[k].double() for k in keys} for model in models]
    mean = {k: sum((d[k] for d in deltas), torch.zeros_like(global_params[k], dtype=torch.float64)) / m for k in keys}
    spread = sum(float((d[k] * d[k]).sum()) for d in deltas for k in keys)
    mean2 = sum(float((mean[k] * mean[k]).sum()) for k in keys)
    eta = max(1.0, spread / (2 * m * (mean2 + eps)))
    return {k: (global_params[k].double() - eta * mean[k]).to(global_params[k].dtype) for k in keys}, eta


class FedExP(AggregatorBase):
    """FedAvg's mean of the updates, stepped by the adaptive eta_g; optionally reports the last two iterates' average."""

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
        out = weighted_average([r.params for r in results], client_weights(results, "uniform"))
        keys = [k for k in (self.param_keys if self.param_keys is not None else list(current)) if torch.is_floating_point(current[k])]
        step, self._eta = fedexp_step(current, [r.params for r in results], self.options.eps, keys)
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
    ),
)

"""FedAvgM (Hsu, Qi & Brown, 2019): FedAvg with server momentum on the round's pseudo-gradient.

Round t, sampled clients S, weights p_i = n_i / sum_{j in S} n_j::

    Delta_t = w_t - sum_i p_i w_i          (the pseudo-gradient: minus the FedAvg step)
    v_t     = beta * v_{t-1} + Delta_t     (v_{-1} = 0)
    w_{t+1} = w_t - server_lr * v_t

With ``beta = 0`` and ``server_lr = 1`` this is FedAvg. It is heavy-ball SGD
on the server with Delta_t as gradient, the update the paper's
``v <- beta v + Delta w; w <- w - v`` writes (torch's SGD momentum, no dampening).
``nesterov = true`` steps by ``Delta_t + beta * v_t`` instead (torch's SGD with
``nesterov=True``): FL-bench's server (``src/server/fedavgm.py``) builds
``SGD(lr=1, momentum=beta, nesterov=True)``, so its trajectory differs from the
paper's from round 1 (one weight moved by -1 a round, beta 0.9: -1, -2.9, -5.61
here; -1.9, -4.61, -8.05 there).

Choices
-------
* Checked against Flower's ``flwr.server.strategy.FedAvgM.aggregate_fit``
  (``pseudo_gradient = old - new``; ``momentum_vector = server_momentum * mv +
  pg`` from round 2; ``old - server_learning_rate * momentum_vector``): the
  same rule. Flower's defaults are ``server_momentum = 0``, ``server_learning_rate
  = 1`` and it moves every array, buffers included.
* Defaults: ``beta = 0.9``, ``server_lr = 1.0`` (the paper's sweeps centre on
  beta = 0.9 with an effective lr of 1 - beta times the client lr; FL-bench's
  defaults are beta = 0.9, server_lr = 1.0).
* ``p_i = n_i / n``, so a reweighting wrapper (PA3Fed) may pass its own
  weights, as for FedOpt (:mod:`chillfl.aggregation.fedopt`), whose layout
  this follows: only trainable parameters carry momentum (float64; a frozen
  weight, ``requires_grad = False``, none); buffers
  (batch-norm statistics) take the weighted average, integer buffers the max.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Mapping, Sequence

import torch

from chillfl.aggregation.base import AggregatorBase, ClientResult, OnParameters, Params, check_state_keys, load_params, params_state, sample_weights, weighted_average
from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm
from chillfl.capabilities import Capabilities
from chillfl.options import require


@dataclass(frozen=True)
class FedAvgMOptions:
    """``beta``: server momentum (paper: 0.9); ``server_lr``: server step size (1.0); ``nesterov``: step by
    ``Delta + beta * v`` (FL-bench's server optimizer) instead of ``v`` (the paper's and Flower's heavy ball)."""

    beta: float = 0.9
    server_lr: float = 1.0
    nesterov: bool = False

    def validate(self, section: str) -> None:
        require(0 <= self.beta < 1, f"{section}.beta", f"must be in [0, 1), got {self.beta}")
        require(self.server_lr > 0, f"{section}.server_lr", f"must be > 0, got {self.server_lr}")


class FedAvgM(OnParameters, AggregatorBase):
    """Server heavy-ball momentum over the FedAvg pseudo-gradient; keeps ``v`` per trainable key."""

    def __init__(self, options: FedAvgMOptions = FedAvgMOptions(), param_keys: Collection[str] | None = None) -> None:
        self.options = options
        self.param_keys = None if param_keys is None else list(param_keys)
        self.v: Params = {}

    def default_weights(self, results: Sequence[ClientResult]) -> torch.Tensor:
        return sample_weights(results)

    def aggregate(
        self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None
    ) -> Params:
        o = self.options
        w = self.default_weights(results) if weights is None else weights
        out = weighted_average([r.params for r in results], w)
        for k in self.rule_keys(global_params):
            x = global_params[k]
            delta = x.double() - out[k].double()
            v = o.beta * self.v[k] + delta if k in self.v else delta
            self.v[k] = v
            step = delta + o.beta * v if o.nesterov else v
            out[k] = (x.double() - o.server_lr * step).to(x.dtype)
        return out

    def state_dict(self) -> dict[str, Any]:
        """The momentum buffer ``v`` (float64, one per trainable key; empty before the first round)."""
        return {"v": params_state(self.v)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("v",), "FedAvgM")
        self.v = load_params(state["v"])


SPEC = register_algorithm(
    "fedavgm",
    AlgorithmSpec(
        FedAvgMOptions,
        lambda o, ctx: (FedAvgM(o, ctx.trainable_keys()), []),
        "FedAvg with server momentum (Hsu et al. 2019)",
        capabilities=Capabilities(takes_weights=True),
        makes=(FedAvgM,),
    ),
)

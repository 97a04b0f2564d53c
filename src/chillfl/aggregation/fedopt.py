"""FedOpt server optimisers (Reddi et al., ICLR 2021, Algorithm 2): FedAdagrad, FedYogi, FedAdam.

Pseudo-gradient of round t (Alg. 2, line 8; weighted mean of the client models)

    Delta_t = sum_i p_i y_i - x_t

then, element-wise, with ``m_{-1} = 0`` and ``v_{-1} = tau^2`` (Alg. 2, lines 9-13)

    m_t = beta1 * m_{t-1} + (1 - beta1) * Delta_t
    v_t = v_{t-1} + Delta_t^2                                            (FedAdagrad)
    v_t = v_{t-1} - (1 - beta2) * Delta_t^2 * sign(v_{t-1} - Delta_t^2)   (FedYogi)
    v_t = beta2 * v_{t-1} + (1 - beta2) * Delta_t^2                      (FedAdam)
    x_{t+1} = x_t + eta * m_t / (sqrt(v_t) + tau)

Choices
-------
* No bias correction by default (Algorithm 2 has none); ``v_{-1} = tau^2``, the smallest
  value Algorithm 2 allows (``v_{-1} >= tau^2``). FedAdam's ``bias_correction``
  scales eta as Adam does (Kingma & Ba 2014, the line before Sec. 2.1),
  ``eta_t = eta * sqrt(1 - beta2^t) / (1 - beta1^t)``: ``"adam"`` with t the
  1-based round, ``"flower"`` with t one more (Flower's FedAdam raises to
  ``server_round + 1``). t counts rounds, not server steps, as Flower's does: a
  round without uploads still advances it.
* ``p_i = n_i / sum n_j`` by default (``weighting = "samples"``, as FedAvg;
  it lets PA3Fed pass its weights). Algorithm 2 writes a plain mean over the
  sampled clients, ``Delta_t = (1/|S|) sum_i Delta_i``: ``weighting =
  "uniform"`` selects it. The two coincide when clients hold equally many
  samples.
* Only trainable parameters are optimised (a frozen weight, ``requires_grad =
  False``, has no moments); buffers (BN statistics) take the weighted average,
  integer buffers the max.
* Defaults follow Reddi et al.'s typical setting: eta = 0.01, beta1 = 0.9,
  beta2 = 0.99, tau = 1e-3.
* Checked against Flower's ``src/py/flwr/server/strategy/fedadam.py`` (and
  its FedYogi sibling): the same m_t, v_t and step on the
  sample-weighted ``Delta_t``, but ``v_{-1} = 0`` (here tau^2, which Algorithm 2
  asks for; the two differ by tau^2 = 1e-6 in the first round), Flower's
  defaults ``eta = 0.1``, ``tau = 1e-9``, and every array moved, buffers
  included. Flower's FedAdam also scales eta by Adam's bias correction, one
  round late (``bias_correction = "flower"``); Algorithm 2 has none, nor has
  chillfl's default. Flower's FedAdagrad passes ``beta_1 = 0`` to its parent
  (m_t = Delta_t, no momentum), where Algorithm 2 keeps beta1 for all three:
  ``beta1 = 0`` gives Flower's. Its ``tau = 1e-9`` is the legacy
  ``flwr.server.strategy``'s; ``flwr.serverapp.strategy`` defaults to 1e-3.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Collection, Literal, Mapping, Sequence

import torch

from chillfl.aggregation.base import (
    AggregatorBase,
    ClientResult,
    OnParameters,
    Weighting,
    Params,
    check_state_keys,
    check_weighting,
    load_params,
    params_state,
    client_weights,
    weighted_average,
)
from chillfl.options import require, require_square_fits, warn_unread
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, Built, register_algorithm
from chillfl.capabilities import Capabilities

log = logging.getLogger(__name__)

ServerOptimizer = Literal["adam", "yogi", "adagrad"]


@dataclass(frozen=True)
class FedOptOptions:
    """Server optimiser hyper-parameters: ``server_lr`` (eta), ``beta1`` (the momentum of m_t, read by all three, FedAdagrad
    included, as Algorithm 2; ``beta1 = 0`` gives Flower's FedAdagrad), ``beta2`` (FedAdam's and FedYogi's: FedAdagrad
    does not read it, and a value set says so in a warning), ``tau`` (epsilon); ``weighting`` of Delta_t."""

    server_lr: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1e-3
    weighting: Weighting = "samples"
    """``samples`` (n_i / n, as FedAvg) or ``uniform`` (1/|S|, Algorithm 2's plain mean)."""

    def validate(self, section: str) -> None:
        check_weighting(self.weighting, f"{section}.weighting")  # a FedOpt built in Python meets no table parse
        require(self.server_lr > 0, f"{section}.server_lr", f"must be > 0, got {self.server_lr}")
        require(0 <= self.beta1 < 1, f"{section}.beta1", f"must be in [0, 1), got {self.beta1}")
        require(0 <= self.beta2 < 1, f"{section}.beta2", f"must be in [0, 1), got {self.beta2}")
        require(self.tau > 0, f"{section}.tau", f"must be > 0, got {self.tau}")
        require_square_fits(self.tau, f"{section}.tau", "the second moment's start tau**2")


@dataclass(frozen=True)
class FedAdamOptions(FedOptOptions):
    """FedOpt's options, and FedAdam's ``bias_correction`` (Yogi and Adagrad have none, in Algorithm 2 and in Flower)."""

    bias_correction: Literal["none", "adam", "flower"] = "none"
    """``none`` (Algorithm 2), ``adam`` (eta * sqrt(1 - beta2^t) / (1 - beta1^t), t the 1-based round)
    or ``flower`` (the same with t one more, as Flower's FedAdam)."""

    def validate(self, section: str) -> None:
        super().validate(section)
        require(self.bias_correction in ("none", "adam", "flower"), f"{section}.bias_correction", f"must be none, adam or flower, got {self.bias_correction!r}")


class FedOpt(OnParameters, AggregatorBase):
    """Adaptive server optimiser over the pseudo-gradient; keeps ``m`` and ``v`` per key."""

    def __init__(self, optimizer: ServerOptimizer, options: FedOptOptions = FedOptOptions(), param_keys: Collection[str] | None = None) -> None:
        if optimizer not in ("adam", "yogi", "adagrad"):
            raise ValueError(f"unknown server optimizer {optimizer!r}; allowed: adagrad, adam, yogi")
        self.bias_correction = options.bias_correction if isinstance(options, FedAdamOptions) else "none"
        if optimizer != "adam" and self.bias_correction != "none":
            raise ValueError(f"bias_correction is FedAdam's (Yogi and Adagrad have none), got {self.bias_correction!r} for {optimizer}")
        self.optimizer = optimizer
        self.options = options
        self.param_keys = None if param_keys is None else list(param_keys)
        self.m: Params = {}
        self.v: Params = {}

    def default_weights(self, results: Sequence[ClientResult]) -> torch.Tensor:
        return client_weights(results, self.options.weighting)

    def _second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        b2 = self.options.beta2
        if self.optimizer == "adagrad":
            return v + d2
        if self.optimizer == "yogi":
            return v - (1 - b2) * d2 * torch.sign(v - d2)
        return b2 * v + (1 - b2) * d2

    def step_size(self, round: int) -> float:
        """eta of 0-based ``round``, bias-corrected as ``options.bias_correction`` says."""
        o = self.options
        if self.bias_correction == "none":
            return o.server_lr
        t = round + (1 if self.bias_correction == "adam" else 2)
        return o.server_lr * math.sqrt(1 - o.beta2**t) / (1 - o.beta1**t)

    def aggregate(
        self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None
    ) -> Params:
        o = self.options
        eta = self.step_size(round)
        w = self.default_weights(results) if weights is None else weights
        out = weighted_average([r.params for r in results], w)
        for k in self.rule_keys(global_params):
            x = global_params[k]
            delta = out[k].double() - x.double()
            m = self.m.get(k, torch.zeros_like(delta))
            v = self.v.get(k, torch.full_like(delta, o.tau**2))
            m = o.beta1 * m + (1 - o.beta1) * delta
            v = self._second_moment(v, delta**2)
            self.m[k], self.v[k] = m, v
            out[k] = (x.double() + eta * m / (v.sqrt() + o.tau)).to(x.dtype)
        return out

    def state_dict(self) -> dict[str, Any]:
        """The server moments ``m`` and ``v`` (float64, one per optimised key; empty before the first round)."""
        return {"m": params_state(self.m), "v": params_state(self.v)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("m", "v"), f"FedOpt({self.optimizer})")
        self.m = load_params(state["m"])
        self.v = load_params(state["v"])


def _fedopt(kind: ServerOptimizer) -> Callable[[Any, BuildContext], Built]:
    def build(o: FedOptOptions, ctx: BuildContext) -> Built:
        if kind == "adagrad":  # one options class for the three: refused, a grid over algorithm.name broke
            warn_unread(o, ("beta2",), ctx.section, "by FedAdagrad (v_t sums every Delta_t^2; beta2 is FedAdam's and FedYogi's)")
        return FedOpt(kind, o, ctx.trainable_keys()), []

    return build


ADAM = register_algorithm("fedadam", AlgorithmSpec(FedAdamOptions, _fedopt("adam"), "server Adam (Reddi et al. 2021)", capabilities=Capabilities(takes_weights=True)))
YOGI = register_algorithm("fedyogi", AlgorithmSpec(FedOptOptions, _fedopt("yogi"), "server Yogi (Reddi et al. 2021)", capabilities=Capabilities(takes_weights=True)))
ADAGRAD = register_algorithm(
    "fedadagrad", AlgorithmSpec(FedOptOptions, _fedopt("adagrad"), "server Adagrad (Reddi et al. 2021)", capabilities=Capabilities(takes_weights=True))
)

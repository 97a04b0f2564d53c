"""q-FFL / q-FedAvg (Li, Sanjabi, Beirami & Smith, ICLR 2020): fair aggregation that weighs clients by their loss.

Round t, sampled clients S, each trained from w^t to w_k by the run's local
training; F_k is client k's loss of the model it *received*, w^t, on its own
training data (Algorithm 3; the authors' ``fair_flearn`` computes it before
``solve_inner``). With L = 1/lr (the paper's code: ``1.0 / learning_rate``)::

    Delta_k = L (w^t - w_k)
    h_k     = q F_k^{q-1} ||Delta_k||^2 + L F_k^q
    w^{t+1} = w^t - sum_k F_k^q Delta_k / sum_k h_k

q = 0 is FedAvg with a plain mean over S and server step 1 (the sum of
Delta_k / L over |S| clients divided by |S|); a larger q moves the model towards
the clients it serves worst.

Choices
-------
* F_k is measured by the client half (:class:`QfflClient`) after training,
  on the model it was sent (``trained.start``), with the run's template in
  eval mode (mean cross-entropy at T = 1, :func:`~chillfl.training.local.evaluate`),
  and reported as ``qffl_loss``: it needs no extra round trip.
* ``F_k^q`` is computed as ``(F_k + 1e-10)^q`` as in the authors' code, so
  a zero loss with q < 1 stays finite. The step divides the common factor
  max_k F_k^q out of numerator and denominator before any power is taken
  (:func:`qffl_step`), so a large q neither overflows nor underflows; the
  ``qffl_h`` metric is inf where sum_k h_k itself is past a float.
* Checked against litian96/fair_flearn ``flearn/trainers/qffedavg.py``
  (``train``: loss before ``solve_inner``, ``grads = (before - after) / lr``,
  ``hs``), ``flearn/trainers/fedbase.py`` ``aggregate2`` (``w - sum Deltas / sum hs``) and
  ``flearn/utils/tf_utils.py`` ``norm_grad`` (a squared norm).
* ``q = 1.0`` by default (the paper tunes q per data set in {0.001, ..., 15};
  its code's default 0 is the plain mean, FedAvg with uniform weights). ``lipschitz`` unset: L = 1/lr of the
  round, the paper's estimate; set it to fix L. That estimate reads the
  client's displacement as plain SGD steps at lr: with momentum or Adam the
  displacement is another (momentum 0.9: about 10x), Delta_k and h_k with it,
  and the server step collapsed (chance accuracy, nothing said); unset, such
  a client optimiser is refused (:func:`_check`), as is an lr schedule over a round's
  local steps (the round's lr is then their peak, not their rate).
* ``||Delta_k||^2`` and the step cover the trainable parameters (the paper's
  model variables); buffers (batch-norm statistics) take the sample-weighted
  average, integer buffers the max. Sums in float64.
"""

from __future__ import annotations

import math
import sys

from dataclasses import dataclass
from typing import TYPE_CHECKING, Collection, Mapping, Sequence

import torch
from torch import nn

from chillfl.aggregation.base import AggregatorBase, ClientHalf, ClientResult, ClientState, OnParameters, Params, Report, Stateless, Trained, report_number, sample_weights, weighted_average
from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm
from chillfl.capabilities import FORWARD, Capabilities, Cost
from chillfl.engine.record import Json
from chillfl.errors import ConfigError
from chillfl.options import Scale, require
from chillfl.training.local import evaluate

if TYPE_CHECKING:
    from chillfl.config import RunConfig

LOSS = "qffl_loss"
"""The report key of F_k, the client's loss of the model it was sent."""
TINY = 1e-10
"""Added to F_k before the power, as the authors' code does."""
LOG_FLOAT_MAX = math.log(sys.float_info.max)
"""ln of the largest float, 709.78 (just below the true one, so e^it is a float): past it sum_k h_k reads as inf."""


@dataclass(frozen=True)
class QfflOptions:
    """``q``: fairness exponent (0: the plain mean over the sampled clients, i.e. FedAvg with ``weighting = "uniform"``,
    not the default sample-weighted FedAvg); ``lipschitz``: L (unset: 1 / the round's lr, the paper's estimate)."""

    q: Scale = 1.0
    lipschitz: Scale | None = None
    eval_batch_size: int = 1024

    def validate(self, section: str) -> None:
        require(self.q >= 0, f"{section}.q", f"must be >= 0, got {self.q}")
        if self.lipschitz is not None:
            require(self.lipschitz > 0, f"{section}.lipschitz", f"must be > 0, got {self.lipschitz}")
        require(self.eval_batch_size >= 1, f"{section}.eval_batch_size", f"must be >= 1, got {self.eval_batch_size}")


@dataclass(frozen=True)
class QfflClient(Stateless):
    """Reports F_k: the client's mean loss of the model it was sent, on its training data."""

    eval_batch_size: int = 1024

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        _, loss = evaluate(model, trained.start, trained.x, trained.y, self.eval_batch_size)
        return {}, {LOSS: loss}


def qffl_step(
    global_params: Mapping[str, torch.Tensor], models: Sequence[Mapping[str, torch.Tensor]], losses: Sequence[float], lipschitz: Sequence[float], q: float, keys: Sequence[str]
) -> tuple[Params, float]:
    """w^t - sum_k F_k^q Delta_k / sum_k h_k on ``keys`` (float64), and sum_k h_k.

    With h_k = F_k^q (q ||Delta_k||^2 / F_k + L_k), the step's numerator and
    denominator share the factor max_k F_k^q, divided out before the powers
    are taken: F_k^q itself overflows a float (an OverflowError) once
    q ln F_k > 709, and underflows to 0 for every client (0 / 0: a NaN model)
    once q ln F_k < -745, while the ratios F_k^q / max_j F_j^q stay in (0, 1].
    """
    deltas = [{k: L * (global_params[k].double() - m[k].double()) for k in keys} for m, L in zip(models, lipschitz)]
    total = {k: torch.zeros_like(global_params[k], dtype=torch.float64) for k in keys}
    top = max(math.log(loss + TINY) for loss in losses)
    scaled_h = 0.0
    for delta, loss, L in zip(deltas, losses, lipschitz):
        f = loss + TINY
        share = math.exp(q * (math.log(f) - top))  # F_k^q / max_j F_j^q
        norm2 = float(sum(float((d * d).sum()) for d in delta.values()))
        scaled_h += share * (q * norm2 / f + L)
        for k in keys:
            total[k].add_(delta[k], alpha=share)
    step = {k: (global_params[k].double() - total[k] / scaled_h).to(global_params[k].dtype) for k in keys}
    log_h = q * top + math.log(scaled_h)
    return step, math.exp(log_h) if log_h <= LOG_FLOAT_MAX else math.inf  # a NaN reads as inf too


class Qffl(OnParameters, AggregatorBase):
    """q-FedAvg's server step from the uploaded models and the reported losses F_k."""

    trainable_only = False  # as its builder

    def __init__(self, options: QfflOptions = QfflOptions(), param_keys: Collection[str] | None = None) -> None:
        self.options = options
        self.param_keys = None if param_keys is None else list(param_keys)
        self._metrics: dict[str, Json] = {}

    def client_half(self) -> ClientHalf:
        return QfflClient(self.options.eval_batch_size)

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        out = weighted_average([r.params for r in results], sample_weights(results))  # the buffers' values
        keys = self.rule_keys(global_params)
        losses = [report_number(r, LOSS, "q-FFL") for r in results]
        lipschitz = [self.options.lipschitz if self.options.lipschitz is not None else 1.0 / r.lr for r in results]
        step, h_sum = qffl_step(global_params, [r.params for r in results], losses, lipschitz, self.options.q, keys)
        out.update(step)
        self._metrics = {"qffl_mean_loss": sum(losses) / len(losses), "qffl_max_loss": max(losses), "qffl_h": h_sum}
        return out

    def round_metrics(self) -> Mapping[str, Json]:
        """The reported losses' mean and max (what q trades off) and sum_k h_k, the step's denominator."""
        return dict(self._metrics)


def _check(options: QfflOptions, config: "RunConfig", section: str) -> None:
    """L = 1/lr (``lipschitz`` unset) with a client optimiser other than plain SGD at momentum 0, or with one lr per round no more
    (a schedule over local steps): one line on that option."""
    if options.lipschitz is not None:
        return
    client = config.client
    why = f"q-FFL's L = 1/lr ({section}.lipschitz unset) reads each client's displacement as plain SGD steps at lr"
    if client.optimizer != "sgd":
        raise ConfigError("client.optimizer", f"{why}; with {client.optimizer!r} it is another: use optimizer = 'sgd' or set {section}.lipschitz")
    if client.momentum != 0:
        raise ConfigError("client.momentum", f"{why}; momentum {client.momentum} scales it by about 1 / (1 - momentum): use momentum = 0 or set {section}.lipschitz")
    if client.lr_schedule != "constant" and client.lr_schedule_over == "steps":  # the round's lr is then its steps' peak, not their rate
        raise ConfigError("client.lr_schedule_over", f"{why}; under lr_schedule = {client.lr_schedule!r} over 'steps' the steps run below lr, "
                                                     f"the round's peak: use lr_schedule_over = 'rounds' or set {section}.lipschitz")


SPEC = register_algorithm(
    "qffl",
    AlgorithmSpec(
        QfflOptions,
        lambda o, ctx: (Qffl(o, ctx.param_keys()), []),
        "q-FFL / q-FedAvg, loss-weighted fair aggregation (Li et al. 2020)",
        capabilities=Capabilities(
            reports="each client's loss F_k on its training data, which sets its weight",
            cost=Cost(epochs=FORWARD),  # F_k: the received model's forward over the client's training rows, before it trains
        ),
        check=_check,
        makes=(Qffl,),  # an instance passed from Python meets this spec's checks (check_instance)
    ),
)

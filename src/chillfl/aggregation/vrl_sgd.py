"""VRL-SGD (Liang et al., 2019, "Variance Reduced Local SGD with Lower Communication Complexity").

Each worker i keeps ``Delta_i`` (zeros at start, so the first period is plain
local SGD: the paper's warm-up). Local steps (Liang et al., Alg. 1)

    x_i <- x_i - gamma * (grad f_i(x_i; xi) - Delta_i)

are obtained from the shared training loop with :class:`LinearCorrectionTerm`
and ``context["correction"] = -Delta_i`` (the term's gradient). At the
communication step, with ``x_hat`` the new average model and ``k`` the
worker's number of local steps,

    x_hat   = sum_i p_i x_i
    Delta_i <- Delta_i + (x_hat - x_i) / (k * gamma)

so ``Delta_i`` tracks ``grad f_i - grad f``, the worker's gradient bias, and
the corrected step follows the global gradient.

Choices
-------
* VRL-SGD assumes every worker takes part in every round. With client
  sampling, only the round's clients update their ``Delta_i`` (others keep
  theirs), and ``x_hat`` is the average over the round's clients.
* ``p_i = n_i / sum n_j`` by default (``weighting = "samples"``, as FedAvg);
  ``weighting = "uniform"`` is the paper's reading, ``1/N`` (Alg. 1 averages the
  workers uniformly, on equal shards, as the authors' code). On equal shards
  the two agree; on unequal ones only the uniform mean is the paper's. Caller
  weights (PA3Fed) replace ``p_i``. Whichever ``p_i``, ``sum_i p_i (x_hat - x_i) = 0``,
  so the increments keep ``sum_i p_i Delta_i`` at 0 only when every client takes
  the same ``k gamma`` (the paper's equal shards, k steps each); with a fixed
  number of epochs on unequal clients the step counts differ and the Delta_i
  are not centred (the paper's formula, kept as written).
* ``k`` and ``gamma`` are each client's reported ``num_steps`` and ``lr``.
  With local momentum rho, ``k`` is replaced by FedNova's effective steps
  ``a(k) = (k - rho(1 - rho^k)/(1 - rho))/(1 - rho)``: k momentum steps of a
  constant gradient move the model ``a(k) * gamma`` times it, so dividing by
  ``k * gamma`` would overstate ``Delta_i`` by up to 1/(1 - rho) (10x at
  rho = 0.9, which makes the corrected local steps diverge).
  ``momentum`` is filled from ``client.momentum``.
* Checked against zerolxf/VRL-SGD ``DistributedSgd.py`` (``DSGD.step``,
  ``_update_params``): without momentum the same rule. With momentum the
  authors' code subtracts ``vrl_buff`` after the momentum buffer (so the
  correction is not amplified by it), divides by ``lr * update_period``
  (k gamma), and averages the momentum buffers across workers at each
  communication, keeping them; chillfl's local optimiser starts each round
  afresh and its correction goes through the momentum with the gradient,
  which the a(k) above accounts for. The authors average the models
  uniformly (equal shards).
* No momentum variant of the authors' is offered. The paper's Algorithm 1
  has none, and the authors' ``main.py`` builds ``DSGD(..., momentum=0)``, so
  the branch above ran in none of their experiments. Copying it would need
  what chillfl's local training does not carry: a correction added after the
  momentum buffer (the step is ``b <- rho b + g; x <- x - gamma (b -
  Delta_i)``), and a momentum buffer kept across rounds and averaged over
  the workers at each communication (a second model-sized tensor each way,
  which the paper does not count, and which it leaves undefined when only
  sampled clients take part: whose buffers are averaged, and what a client
  sampled for the first time starts from).
* ``Delta_i`` stays on the server, which sends ``-Delta_i`` as downlink
  context (``correction``): its update reads x_hat, the round's new average,
  which exists only after aggregation, when the client has replied. Keeping
  it on the client would need x_hat sent to every client after each round
  (under full participation, the next round's global model: the paper's
  setting, where each worker updates its own ``Delta_i`` from it); under
  client sampling a client sampled again rounds later would need the x_hat of
  its last round, which is not the model it is then sent. So the downlink
  costs one model more than FedAvg's for each client with a ``Delta_i``, each
  round: one model per client per round, avoidable under full participation
  only. A client sampled for the first time has none (zeros): it is sent no
  correction it must pay for (``Downlink.local``: it knows the zeros), so
  round 1 costs FedAvg's bytes.
* Only trainable parameters carry ``Delta_i``; buffers are averaged. A frozen
  weight (``requires_grad = False``: :attr:`LocalSpec.frozen`) never moves, so it
  carries none either (:meth:`BuildContext.trainable_keys`): it would be a
  per-client tensor of zeros on the server, sent as downlink context each round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Mapping, Sequence

import torch

from chillfl.aggregation.base import (
    AggregatorBase,
    ClientResult,
    Downlink,
    OnParameters,
    Params,
    check_state_keys,
    client_params_state,
    load_client_params,
    Weighting,
    client_weights,
    weighted_average,
)
from chillfl.aggregation.client_states import ClientParams
from chillfl.aggregation.fednova import effective_steps
from chillfl.options import require
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, register_algorithm, with_client_momentum, with_terms
from chillfl.training.objective import Term
from chillfl.capabilities import Capabilities, Cost
from chillfl.aggregation.scaffold import CORRECTION_TERM, LinearCorrectionTerm


@dataclass(frozen=True)
class VRLSGDOptions:
    """``momentum``: the clients' SGD momentum (unset = ``client.momentum``, 0 outside a config); k and gamma come from the clients;
    ``weighting``: the average x_hat by samples (n_i / n, the default) or ``uniform`` (1/|S|, the paper's 1/N on equal shards)."""

    momentum: float | None = None
    weighting: Weighting = "samples"
    """The model average's p_i: ``samples`` (n_i / n, as FedAvg) or ``uniform`` (1/|S|, the paper's 1/N on equal shards)."""

    def validate(self, section: str) -> None:
        if self.momentum is not None:
            require(0 <= self.momentum < 1, f"{section}.momentum", f"must be in [0, 1), got {self.momentum}")


class VRLSGD(OnParameters, AggregatorBase):
    """Server side of VRL-SGD: averages models and keeps every client's ``Delta_i``."""

    def __init__(self, options: VRLSGDOptions = VRLSGDOptions(), param_keys: Collection[str] | None = None) -> None:
        self.options = options
        self.param_keys = None if param_keys is None else list(param_keys)
        self.deltas = ClientParams()  # Delta_i of the clients sampled so far, flat on the CPU

    def default_weights(self, results: Sequence[ClientResult]) -> torch.Tensor:
        return client_weights(results, self.options.weighting)

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        own = self.deltas.get(client_id)
        correction = {k: -own[k] if own is not None else torch.zeros_like(global_params[k]) for k in self.rule_keys(global_params)}
        return Downlink(context={"correction": correction}, local=() if own is not None else ("correction",))  # zeros: no bytes

    def aggregate(
        self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None
    ) -> Params:
        w = self.default_weights(results) if weights is None else weights
        out = weighted_average([r.params for r in results], w)
        keys = self.rule_keys(global_params)
        for r in results:
            if r.num_steps < 1 or r.lr <= 0:
                raise ValueError(f"VRL-SGD needs num_steps >= 1 and lr > 0 (client {r.client_id})")
            old = self.deltas.get(r.client_id) or {k: torch.zeros_like(global_params[k]) for k in keys}
            scale = effective_steps(r.num_steps, self.options.momentum or 0.0) * r.lr
            self.deltas[r.client_id] = {k: old[k] + (out[k] - r.params[k]) / scale for k in keys}
        return out

    def state_dict(self) -> dict[str, Any]:
        """Every client's ``Delta_i`` (clients never sampled have none: zeros)."""
        return {"deltas": client_params_state(self.deltas)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("deltas",), "VRL-SGD")
        self.deltas = ClientParams.of(load_client_params(state["deltas"]))

    def needed_terms(self) -> list[Term]:
        """The corrected step's ``-Delta_i`` (:class:`LinearCorrectionTerm`): without it the clients run FedAvg's steps."""
        return [LinearCorrectionTerm()]


def _bind(aggregator: VRLSGD, ctx: BuildContext) -> None:
    """An instance passed from Python takes ``client.momentum`` as the builder's does (Delta_i's a(k); unset: the run's)."""
    aggregator.options = with_client_momentum(aggregator.options, ctx, "VRL-SGD's Delta_i")


SPEC = register_algorithm(
    "vrl_sgd",
    AlgorithmSpec(
        VRLSGDOptions,
        lambda o, ctx: with_terms(VRLSGD(with_client_momentum(o, ctx, "VRL-SGD's Delta_i"), ctx.trainable_keys())),
        "variance-reduced local SGD (Liang et al. 2019)",
        capabilities=Capabilities(
            plain_sgd="VRL-SGD's Delta_i += (x_hat - x_i) / (k lr)",
            on_flower="VRL-SGD's Delta_i update needs the round's new average model, which a Flower node never sees",
            takes_weights=True,
            cost=Cost(pass_overhead=CORRECTION_TERM),  # SCAFFOLD's correction term, with Delta_i, on every pass
        ),
        makes=(VRLSGD,),  # an instance passed from Python meets this spec's checks (check_instance)
        bind=_bind,
    ),
)

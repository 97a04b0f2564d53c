"""FedMut (Hu et al., AAAI 2024, "FedMut: Generalized Federated Learning via Stochastic Mutation").

The server averages the client models (``w_g^t = (1/|S|) sum_i w_i``), then hands each
client of the next round a *mutated* copy of the global model instead of
``w_g^t`` itself (Hu et al., Alg. 1, mutation step):

    g      = w_g^t - w_g^{t-1}                 (the last global update)
    w_(j)  = w_g^t + alpha * v_j (.) g         (v_j in {-1, +1} per layer)

with the mutation vectors balanced, ``sum_j v_j = 0`` layer by layer, so the
mutated models average back to ``w_g^t`` and explore the loss landscape
around it symmetrically.

Choices
-------
* "Layer" = one state-dict entry of a trainable parameter; buffers (BN
  statistics) are never mutated (a mutated running variance could go negative).
* Balance: the engine announces the round's clients with
  ``begin_round(round, client_ids)``. For each layer, ``m // 2`` signs +1 and
  ``m // 2`` signs -1 (plus one 0 when ``m`` is odd) are shuffled with a
  generator seeded from (seed, round, layer) and assigned to the sorted
  client ids. Without that call, each client draws independent +-1 signs
  seeded from (seed, round, cid, layer): reproducible, balanced only in
  expectation.
* The first round (no previous global model) sends the plain global model.
* Checked against HMHelloWorld/FedMut ``Algorithm/Training_FedMut.py``
  (``FedMut``: ``w_old`` the global model before the round, ``Aggregation(w_locals,
  None)`` the plain mean, ``FedSub``; ``mutation_spread``: per-key sign lists
  of +1 / (-1 + ctrl_rate) pairs, shuffled, the odd last client unmutated).
  There every state-dict entry is mutated, buffers included.
* ``alpha`` (FedMut's mutation radius) defaults to 4.0 (the authors'
  ``--radius``).
* ``acc_rate`` (default 0: the balanced mutations above): the authors' code
  also "accelerates" early rounds, replacing each -1 sign by ``-1 + r_t``
  with ``r_t = acc_rate * (1 - min(t / acc_bound, 1))`` (t the round the
  update g came from; its defaults ``--mut_acc_rate 0.3``, ``--mut_bound
  50``), so the mutated models average to ``w_g^t + alpha * g * r_t * (#-1
  signs) / m``, ahead of w_g^t along g. ``acc_rate = 0.3`` follows that code;
  the default keeps the zero-sum mutations that Alg. 1 describes.
* Aggregation is the plain mean over the round's clients (``weighting =
  "uniform"``, default), as in Hu et al.'s aggregation: the balanced
  mutations cancel only under equal weights. With sample weights
  (``"samples"``) and quantity skew, the weighted mean of the mutated starts
  is ``w + alpha * g * sum_j p_j v_j``, which feeds back into the next ``g``
  and can blow up (seen at Dirichlet h = 0.1: the global model fell to
  chance level).
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
    load_params,
    params_state,
    sample_weights,
    weighted_average,
)
from chillfl.options import Scale, require
from chillfl.seeds import derive_seed, instance_seed
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, instance_field, register_algorithm, run_value
from chillfl.capabilities import Capabilities


@dataclass(frozen=True)
class FedMutOptions:
    """``alpha``: mutation radius (default 4.0; 0 disables mutation); ``weighting``: ``uniform`` mean or by ``samples``."""

    alpha: Scale = 4.0
    weighting: Literal["uniform", "samples"] = "uniform"
    acc_rate: float = 0.0
    """The authors' code's early-round acceleration (``--mut_acc_rate``, 0.3 there): a -1 sign becomes -1 + r_t."""
    acc_bound: int = 50
    """Rounds over which r_t falls linearly to 0 (``--mut_bound``)."""

    def validate(self, section: str) -> None:
        require(self.alpha >= 0, f"{section}.alpha", f"must be >= 0, got {self.alpha}")
        require(0 <= self.acc_rate <= 1, f"{section}.acc_rate", f"must be in [0, 1], got {self.acc_rate}")
        require(self.acc_bound >= 1, f"{section}.acc_bound", f"must be >= 1, got {self.acc_bound}")


def balanced_signs(num_clients: int, generator: torch.Generator) -> torch.Tensor:
    """A shuffled vector of ``m // 2`` (+1), ``m // 2`` (-1) and ``m % 2`` zeros: it sums to 0."""
    half = num_clients // 2
    signs = torch.tensor([1.0] * half + [-1.0] * half + [0.0] * (num_clients % 2))
    return signs[torch.randperm(num_clients, generator=generator)]


class FedMut(OnParameters, AggregatorBase):
    """FedAvg aggregation plus per-client mutated start models."""

    trainable_only = False  # as its builder: every parameter mutates

    def __init__(self, seed: int | None = None, options: FedMutOptions = FedMutOptions(), param_keys: Collection[str] | None = None) -> None:
        self.seed = seed
        """The run's seed, which draws the mutation signs (None: the run's, which a run fills, :func:`_bind`; 0 outside a run)."""
        self.options = options
        self.param_keys = None if param_keys is None else list(param_keys)
        self.previous: Params | None = None
        self._round_ids: tuple[int | None, list[int]] = (None, [])

    def begin_round(self, round: int, client_ids: Sequence[int]) -> None:
        """Announce the round's clients so that their mutation signs can be balanced."""
        self._round_ids = (round, sorted(client_ids))

    def client_signs(self, client_id: int, round: int, keys: Sequence[str]) -> dict[str, float]:
        """v_j: one sign per layer; balanced across the announced clients of ``round``."""
        announced_round, ids = self._round_ids
        seed = instance_seed(self.seed)
        if announced_round == round and client_id in ids:
            pos = ids.index(client_id)
            gens = (torch.Generator().manual_seed(derive_seed(seed, "fedmut", round, i)) for i in range(len(keys)))
            return {k: float(balanced_signs(len(ids), g)[pos]) for k, g in zip(keys, gens)}
        signs = {}
        for i, key in enumerate(keys):
            gen = torch.Generator().manual_seed(derive_seed(seed, "fedmut-iid", round, client_id, i))
            signs[key] = 1.0 if float(torch.rand((), generator=gen)) < 0.5 else -1.0
        return signs

    def default_weights(self, results: Sequence[ClientResult]) -> torch.Tensor:
        """1/|S| (``uniform``, so balanced mutations cancel) or n_i / sum n_j (``samples``)."""
        if self.options.weighting == "samples":
            return sample_weights(results)
        return torch.full((len(results),), 1.0 / len(results), dtype=torch.float64)

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        if self.previous is None or self.options.alpha == 0:
            return Downlink()
        keys = self.rule_keys(global_params)
        signs = self.client_signs(client_id, round, keys)
        alpha, acc_rate, acc_bound = self.options.alpha, self.options.acc_rate, self.options.acc_bound
        rate = acc_rate * (1 - min((round - 1) / acc_bound, 1.0))  # g came from round - 1's aggregation
        signs = {k: -1.0 + rate if v < 0 else v for k, v in signs.items()}
        mutated = {k: global_params[k] + alpha * signs[k] * (global_params[k] - self.previous[k]) for k in keys}
        return Downlink(params=mutated)

    def aggregate(
        self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None
    ) -> Params:
        w = self.default_weights(results) if weights is None else weights
        self.previous = {k: v.detach().clone() for k, v in global_params.items()}
        return weighted_average([r.params for r in results], w)

    def state_dict(self) -> dict[str, Any]:
        """w_g^{t-1} (None before the first aggregation) and the last announced round's clients.

        The announcement is saved too, so a checkpoint taken between
        ``begin_round`` and the downlinks still gives the balanced signs.
        """
        announced_round, ids = self._round_ids
        return {
            "previous": None if self.previous is None else params_state(self.previous),
            "round_ids": {"round": announced_round, "client_ids": list(ids)},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("previous", "round_ids"), "FedMut")
        previous = state["previous"]
        self.previous = None if previous is None else load_params(previous)
        announced = state["round_ids"]
        check_state_keys(announced, ("round", "client_ids"), "FedMut round_ids")
        rnd = announced["round"]
        self._round_ids = (None if rnd is None else int(rnd), [int(c) for c in announced["client_ids"]])


def _bind(aggregator: FedMut, ctx: BuildContext) -> None:
    """An instance passed from Python draws its signs from the run's seed, as the builder's does: its ``seed`` the run's
    (None: filled), another refused on ``aggregator.seed`` (``FedMut(0)`` mutated every seed's run alike)."""
    aggregator.seed = run_value(aggregator.seed, ctx.seed, instance_field(ctx, "seed"), "seed")


SPEC = register_algorithm(
    "fedmut",
    AlgorithmSpec(
        FedMutOptions,
        lambda o, ctx: (FedMut(ctx.seed, o, ctx.param_keys()), []),
        "stochastic mutation (Hu et al. 2024)",
        capabilities=Capabilities(takes_weights=True),
        makes=(FedMut,),
        bind=_bind,
    ),
)

"""FeSEM (Xie, Long, Liu, Jiang, Zhou & Jiang, World Wide Web 2023; arXiv 2005.01026): multi-center FL by stochastic EM.

The server keeps K centres W~_1..W~_K (models) and every client's centre
k_i. The objective is the multi-center federated loss, the distance of each
local model to its centre (a k-means of the clients' models)::

    min_{W~, r}  sum_i sum_k r_ik Dist(W_i, W~_k)      Dist(a, b) = ||a - b||_2 (flattened parameters)

Round t, sampled clients S: each client i trains from its centre W~_{k_i}
(sent as its start) by the run's local training and uploads W_i. Then, over
the round's uploads (stochastic: the sampled clients only)::

    E-step   k_i <- argmin_k ||W_i - W~_k||                        (ties: the lowest k)
    M-step   W~_k <- sum_{i in S, k_i = k} w_i W_i / sum_{i in S, k_i = k} w_i

and a centre no sampled client is assigned to keeps its value. A client's
personalised model is its centre.

Choices
-------
* ``clusters = 2`` by default (IFCA's default here; the paper runs K = 2 to 4
  by data set: set it to the number of groups you expect).
* ``order = "e_then_m"`` (default, the paper's Algorithm 1, E-step, M-step,
  then local updates from the new centres, and a k-means step): the E-step
  measures the distances to the centres *before* this round's M-step, then
  each centre averages the uploads assigned to it.
  ``"m_then_e"`` (FlexCFL's FeSEM baseline): each centre first averages the
  uploads of the clients that trained from it, then every sampled client is
  reassigned to the nearest *updated* centre, which it trains from next.
* ``init = "clients"`` (default; the authors' code seeds its k-means with K of
  the clients' models): in the first round every client trains the run's
  initial model, and the centres are K of that round's uploads picked at
  random without replacement (seeded by the run's seed and the round); with
  fewer than K uploads the picks repeat in turn (a repeated centre ties with
  an earlier one, which wins, until the two part). ``"random"`` (FlexCFL's
  cold start, as IFCA here): centre 0 is the run's initial model and centre
  j >= 1 the same architecture re-initialised from a seed derived from the
  run's seed and j. The authors' code runs five k-means iterations on its
  first clustering; here every round is one E-step and one M-step. In the
  round the centres are made from the uploads, both orders run the E-step
  first (no client trained from a centre yet), so K = 1 with ``samples``
  weighting is FedAvg, round for round.
* A client not yet assigned (never sampled, or before the centres exist)
  trains from the global model (below). Under ``m_then_e`` its upload joins
  the M-step of the centre it trained from.
* ``Dist`` is the L2 norm over the model's trainable parameters, flattened,
  in float64 (buffers such as batch-norm statistics are averaged, not
  measured). Squared or not, the argmin is the same.
* ``weighting = "uniform"``: the paper's M-step, the plain mean of the
  members (r_ik = 1); ``"samples"`` weights members by n_i.
* The global model chillfl evaluates and checkpoints is the centre with the
  most assigned clients (ties: the lowest k; before the first round the run's
  initial model). Centres are not averaged into one: they may start from
  different models, whose units need not correspond. Every centre and every
  client's centre are the aggregator's state, so a resumed run is the same run.
* Local accuracy measures the client's centre after its training. The client
  keeps nothing (its centre is the server's), so FeSEM declares no personal model.

Checked against
---------------
No official repository is indexed; the released code in a public fork,
xxyen/age-based-multi-center-fed-learning ``models/fedsem.py`` (TensorFlow),
runs the round as ``m_then_e`` does: each cluster's sampled clients train
from its centre, the centre becomes the mean of their uploads, and every
``update-center-every`` rounds the clients are re-clustered by k-means on
their local models (seeded from the clients' models, not fresh ones).
FL-bench has no FeSEM; FlexCFL (morningD/FlexCFL) runs it as a baseline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

import torch
from torch import nn

from chillfl.aggregation.base import AggregatorBase, ClientResult, Downlink, Params, check_state_keys, client_weights, load_params, weighted_average
from chillfl.aggregation.ifca import fresh_model
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, instance_field, register_algorithm, run_value
from chillfl.capabilities import Capabilities
from chillfl.engine.record import Json
from chillfl.options import require
from chillfl.seeds import derive_seed, instance_seed


@dataclass(frozen=True)
class FesemOptions:
    """``clusters``: K centres (default 2); ``order``: E-step before (``e_then_m``, the paper's) or after the M-step.

    ``init``: centres from the first round's uploads (``clients``) or fresh models
    (``random``); ``weighting``: the M-step's mean (``uniform``, the paper's, or ``samples``).
    """

    clusters: int = 2
    order: Literal["e_then_m", "m_then_e"] = "e_then_m"
    init: Literal["clients", "random"] = "clients"
    weighting: Literal["uniform", "samples"] = "uniform"

    def validate(self, section: str) -> None:
        require(self.clusters >= 1, f"{section}.clusters", f"must be >= 1, got {self.clusters}")


def distance(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor], keys: Sequence[str]) -> float:
    """||a - b||_2 over ``keys``, flattened, in float64."""
    return sum(float(((a[k].double() - b[k].double()) ** 2).sum()) for k in keys) ** 0.5


def nearest(model: Mapping[str, torch.Tensor], centres: Sequence[Mapping[str, torch.Tensor]], keys: Sequence[str]) -> tuple[int, float]:
    """The E-step for one model: (argmin_k ||model - centre_k||, that distance); ties: the lowest k."""
    distances = [distance(model, c, keys) for c in centres]
    best = min(range(len(distances)), key=lambda k: (distances[k], k))
    return best, distances[best]


def picks(n: int, k: int, seed: int) -> list[int]:
    """K indices of n uploads for the initial centres: a seeded permutation of range(n), repeated in turn when n < K."""
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(n, generator=gen).tolist()
    return [order[j % n] for j in range(k)]


class Fesem(AggregatorBase):
    """K centres, every client's centre, and one E-step and one M-step over each round's uploads."""

    def __init__(self, num_clients: int, param_keys: Sequence[str], model: nn.Module, seed: int | None = None, options: FesemOptions = FesemOptions()) -> None:
        self.options = options
        self.num_clients = num_clients
        """The federation's clients, the size of :attr:`assignment` (a run's own, :func:`_bind`)."""
        self.param_keys = list(param_keys)
        self.template = model
        self.seed = seed
        """The run's seed, which draws the initial centres (None: the run's, which a run fills, :func:`_bind`; 0 outside a run)."""
        self.centres: list[Params] = []
        self.assignment = torch.full((num_clients,), -1, dtype=torch.int64)
        """Client id -> its centre (-1: not assigned yet)."""
        self._metrics: dict[str, Json] = {}

    def drawn_seed(self) -> int:
        """The seed the draws use: :attr:`seed`, 0 where unset outside a run."""
        return instance_seed(self.seed)

    def _ensure_random(self, global_params: Params) -> None:
        if not self.centres and self.options.init == "random":
            self.centres = [dict(global_params)] + [fresh_model(self.template, derive_seed(self.drawn_seed(), "fesem", j), global_params) for j in range(1, self.options.clusters)]

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        self._ensure_random(global_params)
        k = int(self.assignment[client_id])
        return Downlink(params=self.centres[k]) if k >= 0 else Downlink()  # not assigned: the global model

    def largest(self) -> int:
        """The centre with the most assigned clients (ties: the lowest index)."""
        counts = torch.bincount(self.assignment[self.assignment >= 0], minlength=len(self.centres)).tolist()
        return max(range(len(self.centres)), key=lambda k: (counts[k], -k))

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        o = self.options
        self._ensure_random(global_params)
        keys = [k for k in self.param_keys if torch.is_floating_point(global_params[k])]
        before = {r.client_id: int(self.assignment[r.client_id]) for r in results}
        started = self.largest() if self.centres else -1  # the centre an unassigned client trained from (the global one); -1: none yet
        made = not self.centres
        if made:
            self.centres = [dict(results[p].params) for p in picks(len(results), o.clusters, derive_seed(self.drawn_seed(), "fesem-init", round))]
        if o.order == "e_then_m" or made:  # in the round the centres are made from the uploads, no client trained from one: E, then M
            members = self._estep(results, keys)
            self._mstep(members)
        else:
            trained_from = [[r for r in results if (before[r.client_id] if before[r.client_id] >= 0 else started) == k] for k in range(len(self.centres))]
            self._mstep(trained_from)
            self._estep(results, keys)
        moved = sum(1 for r in results if before[r.client_id] >= 0 and before[r.client_id] != int(self.assignment[r.client_id]))
        best = self.largest()
        used = int((torch.bincount(self.assignment[self.assignment >= 0], minlength=len(self.centres)) > 0).sum())
        self._metrics.update({"fesem_global_cluster": best, "fesem_clusters": used, "fesem_moved": moved})
        return dict(self.centres[best])

    def _estep(self, results: Sequence[ClientResult], keys: Sequence[str]) -> list[list[ClientResult]]:
        """Assign every upload to its nearest centre; the members of each centre, and the mean distance as a metric."""
        members: list[list[ClientResult]] = [[] for _ in self.centres]
        total = 0.0
        for r in results:
            k, d = nearest(r.params, self.centres, keys)
            self.assignment[r.client_id] = k
            members[k].append(r)
            total += d
        self._metrics = {"fesem_distance": total / len(results)}
        return members

    def _mstep(self, members: Sequence[Sequence[ClientResult]]) -> None:
        """Each centre becomes the mean of its members' models; a centre without members keeps its value."""
        for k, group in enumerate(members):
            if group:
                self.centres[k] = weighted_average([r.params for r in group], client_weights(group, self.options.weighting))

    def round_metrics(self) -> Mapping[str, Json]:
        """The mean E-step distance of the round's uploads, centres in use, clients that changed centre, and the global one."""
        return dict(self._metrics)

    def state_dict(self) -> dict[str, Any]:
        """Every centre (empty before the first round under ``init = "clients"``) and every client's centre."""
        return {"centres": {str(k): dict(c) for k, c in enumerate(self.centres)}, "assignment": self.assignment.clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("centres", "assignment"), "FeSEM")
        centres = state["centres"]
        self.centres = [load_params(centres[str(k)]) for k in range(len(centres))]
        assignment = state["assignment"]
        if not isinstance(assignment, torch.Tensor) or assignment.shape != self.assignment.shape:
            raise ValueError(f"FeSEM assignment must be a tensor of shape {tuple(self.assignment.shape)}")
        self.assignment = assignment.to("cpu", torch.int64).clone()


def _bind(aggregator: Fesem, ctx: BuildContext) -> None:
    """An instance passed from Python sizes its assignment by its ``num_clients`` and draws its centres from its ``seed``:
    another count than the run's is refused on ``aggregator.num_clients`` (an IndexError at the first client id past it
    otherwise); the seed is the run's (None: filled), another refused on ``aggregator.seed`` (seed 0 drew every seed's
    centres alike)."""
    aggregator.num_clients = run_value(aggregator.num_clients, ctx.num_clients, instance_field(ctx, "num_clients"), "federation.num_clients")
    aggregator.seed = run_value(aggregator.seed, ctx.seed, instance_field(ctx, "seed"), "seed")


SPEC = register_algorithm(
    "fesem",
    AlgorithmSpec(
        FesemOptions,
        lambda o, ctx: (Fesem(ctx.num_clients, ctx.param_keys(), ctx.model, ctx.seed, o), []),
        "multi-center FL: K centres, each client's model assigned to the nearest by L2 distance, stochastic EM (Xie et al. 2023)",
        capabilities=Capabilities(),
        makes=(Fesem,),
        bind=_bind,
    ),
)

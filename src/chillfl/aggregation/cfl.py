"""CFL, clustered federated learning (Sattler, Müller & Samek, IEEE TNNLS 2020): split a cluster when its clients' updates disagree.

Every client belongs to one cluster (all to cluster 0 at the start) and
trains from its cluster's model (sent as its start, :attr:`Downlink.params`).
Round t, for each cluster c with sampled members S_c, updates
dW_i = w_i - theta_c (trainable parameters, flattened)::

    mean_norm = || (1/|S_c|) sum_{i in S_c} dW_i ||       max_norm = max_{i in S_c} ||dW_i||

If ``mean_norm < eps1`` and ``max_norm > eps2`` (the cluster is near a
stationary point of the joint objective while some clients are not: their
distributions differ), ``|S_c| > min_cluster_size`` and ``round >=
warmup_rounds``, S_c is split in two by complete-linkage agglomerative
clustering of the cosine similarities

    alpha_ij = <dW_i, dW_j> / (||dW_i|| ||dW_j|| + 1e-12)

(distance -alpha_ij, Algorithm 1's optimal bi-partition as the authors' code
computes it). Then every cluster's model is the mean of its sampled members'
models (theta_c + mean dW_i), split or not; a cluster none of whose members
was sampled keeps its model.

Choices
-------
* ``eps1 = 0.4``, ``eps2 = 1.6``, ``min_cluster_size = 2`` and
  ``warmup_rounds = 20`` are the authors' (and FL-bench's) defaults. The
  thresholds are absolute norms of a round's model displacement, which grow
  with the lr, the local steps and the model's size: tune them to the run
  (the round metrics ``cfl_mean_norm`` and ``cfl_max_norm`` show the scale).
* ``weighting = "uniform"``: the authors' plain mean of the updates;
  ``samples`` weights members by n_i.
* Partial participation (the paper's experiments sample every client): a
  split divides the cluster's members sampled that round; the part holding
  the lowest client id keeps the cluster's index, and with it the members not
  sampled; the other part is a new cluster, starting from the same model.
* The global model chillfl evaluates and checkpoints is the model of the
  cluster with the most clients (ties: the lowest index): before any split,
  the one model every client trains. Every cluster model and every client's
  cluster are the aggregator's state, so a resumed run is the same run.
* Local accuracy measures the client's cluster model after its training.
  Clients keep nothing of their own (their cluster's model is the server's),
  so CFL declares no personal model.
* No gamma_max test: the paper's analysis says a bipartition separates the
  distributions correctly when gamma_max < sqrt((1 - alpha_cross_max) / 2),
  but gamma_max needs the clients' true gradients at a stationary point and
  is not observable; like the authors' code and FL-bench, chillfl splits on
  the two norm criteria alone.

Checked against
---------------
The authors' code, felisat/clustered-federated-learning: ``fl_devices.py``
(``pairwise_angles``, ``compute_max_update_norm``, ``compute_mean_update_norm``,
``aggregate_clusterwise``: plain mean of dW over named parameters) and
``clustered_federated_learning.ipynb`` (the split test ``mean_norm < EPS_1 and
max_norm > EPS_2 and len(idc) > 2 and c_round > 20``, rounds from 1, so
``round >= 20`` here with rounds from 0; ``AgglomerativeClustering(linkage=
"complete")`` on ``-similarities``); FL-bench, KarhouTam/FL-bench
``src/server/cfl.py`` (the same test with ``current_epoch >=
start_clustering_round``, and defaults 0.4, 1.6, 2, 20).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

import torch

from chillfl.aggregation.base import AggregatorBase, ClientResult, Downlink, Params, check_state_keys, client_weights, load_params, weighted_average
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, instance_field, register_algorithm, run_value
from chillfl.aggregation.robust import flat_state
from chillfl.capabilities import Capabilities
from chillfl.engine.record import Json
from chillfl.options import require


@dataclass(frozen=True)
class CflOptions:
    """Split when mean update norm < ``eps1`` and max > ``eps2``, with > ``min_cluster_size`` members, from round ``warmup_rounds`` on."""

    eps1: float = 0.4
    eps2: float = 1.6
    min_cluster_size: int = 2
    warmup_rounds: int = 20
    weighting: Literal["uniform", "samples"] = "uniform"

    def validate(self, section: str) -> None:
        require(self.eps1 >= 0, f"{section}.eps1", f"must be >= 0, got {self.eps1}")
        require(self.eps2 >= 0, f"{section}.eps2", f"must be >= 0, got {self.eps2}")
        require(self.min_cluster_size >= 1, f"{section}.min_cluster_size", f"must be >= 1, got {self.min_cluster_size}")
        require(self.warmup_rounds >= 0, f"{section}.warmup_rounds", f"must be >= 0, got {self.warmup_rounds}")


def update_norms(updates: Sequence[Mapping[str, torch.Tensor]], keys: Sequence[str]) -> tuple[float, float]:
    """(||mean_i dW_i||, max_i ||dW_i||) over ``keys``, in float64."""
    n = len(updates)
    mean2 = 0.0
    for k in keys:
        mean = sum((u[k].double() for u in updates), torch.zeros_like(updates[0][k], dtype=torch.float64)) / n
        mean2 += float((mean * mean).sum())
    norms = [sum(float((u[k].double() ** 2).sum()) for k in keys) ** 0.5 for u in updates]
    return mean2**0.5, max(norms)


def cosine_similarities(updates: Sequence[Mapping[str, torch.Tensor]], keys: Sequence[str]) -> list[list[float]]:
    """alpha_ij = <dW_i, dW_j> / (||dW_i|| ||dW_j|| + 1e-12), the authors' pairwise angles."""
    n = len(updates)
    gram = torch.zeros((n, n), dtype=torch.float64)
    for k in keys:
        rows = torch.stack([flat_state(u, (k,)) for u in updates]).cpu()  # per key, as the authors' sum of per-layer Gram matrices
        gram += rows @ rows.T
    norms = gram.diagonal().sqrt()
    return (gram / (norms[:, None] * norms[None, :] + 1e-12)).tolist()


def bipartition(similarity: Sequence[Sequence[float]]) -> tuple[list[int], list[int]]:
    """Complete-linkage agglomerative clustering of n >= 2 items into two, at distance -similarity.

    Merges the two groups of least complete-linkage distance (the largest
    pairwise distance between them) until two remain; ties: the first pair in
    index order. Returns the two groups, the one with the lowest index first.
    """
    n = len(similarity)
    groups = [[i] for i in range(n)]
    dist = [[-float(similarity[i][j]) for j in range(n)] for i in range(n)]
    while len(groups) > 2:
        best: tuple[float, int, int] | None = None
        for a in range(len(groups)):
            for b in range(a + 1, len(groups)):
                if best is None or dist[a][b] < best[0]:
                    best = (dist[a][b], a, b)
        assert best is not None
        _, a, b = best
        for c in range(len(groups)):  # Lance-Williams for complete linkage: d(a u b, c) = max(d(a, c), d(b, c))
            dist[a][c] = dist[c][a] = max(dist[a][c], dist[b][c])
        groups[a] = sorted(groups[a] + groups[b])
        del groups[b]
        del dist[b]
        for row in dist:
            del row[b]
    first, second = sorted(groups, key=min)
    return first, second


class Cfl(AggregatorBase):
    """Cluster models, every client's cluster, and the split test of each round."""

    def __init__(self, num_clients: int, param_keys: Sequence[str], options: CflOptions = CflOptions()) -> None:
        self.options = options
        self.num_clients = num_clients
        """The federation's clients, the size of :attr:`assignment` (a run's own, :func:`_bind`)."""
        self.param_keys = list(param_keys)
        self.models: list[Params] = []
        self.assignment = torch.zeros(num_clients, dtype=torch.int64)
        """Client id -> its cluster."""
        self._metrics: dict[str, Json] = {}

    def _ensure(self, global_params: Params) -> None:
        if not self.models:
            self.models = [dict(global_params)]

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        self._ensure(global_params)
        return Downlink(params=self.models[int(self.assignment[client_id])])

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        self._ensure(global_params)
        o = self.options
        splits = 0
        mean_norms: list[float] = []
        max_norms: list[float] = []
        for c in range(len(self.models)):  # the clusters as the round began: a new part is not tested again this round
            members = [r for r in results if int(self.assignment[r.client_id]) == c]
            if not members:
                continue
            keys = [k for k in self.param_keys if torch.is_floating_point(self.models[c][k])]
            updates = [{k: r.params[k] - self.models[c][k] for k in keys} for r in members]
            mean_norm, max_norm = update_norms(updates, keys)
            mean_norms.append(mean_norm)
            max_norms.append(max_norm)
            if mean_norm < o.eps1 and max_norm > o.eps2 and len(members) > o.min_cluster_size and round >= o.warmup_rounds:
                _, second = bipartition(cosine_similarities(updates, keys))
                new = len(self.models)
                self.models.append(dict(self.models[c]))
                for i in second:
                    self.assignment[members[i].client_id] = new
                splits += 1
        for c in range(len(self.models)):
            members = [r for r in results if int(self.assignment[r.client_id]) == c]
            if members:
                self.models[c] = weighted_average([r.params for r in members], client_weights(members, o.weighting))
        self._metrics = {"cfl_clusters": len(self.models), "cfl_splits": splits, "cfl_mean_norm": max(mean_norms), "cfl_max_norm": max(max_norms)}
        return dict(self.models[self.largest()])

    def largest(self) -> int:
        """The cluster with the most clients (ties: the lowest index)."""
        counts = torch.bincount(self.assignment, minlength=len(self.models)).tolist()
        return max(range(len(self.models)), key=lambda c: (counts[c], -c))

    def round_metrics(self) -> Mapping[str, Json]:
        """Clusters after the round, splits in it, and the largest mean and max update norms of its clusters (the thresholds' scale)."""
        return dict(self._metrics)

    def state_dict(self) -> dict[str, Any]:
        """Every cluster's model (empty before the first round) and every client's cluster."""
        return {"models": {str(c): dict(m) for c, m in enumerate(self.models)}, "assignment": self.assignment.clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("models", "assignment"), "CFL")
        models = state["models"]
        self.models = [load_params(models[str(c)]) for c in range(len(models))]
        assignment = state["assignment"]
        if not isinstance(assignment, torch.Tensor) or assignment.shape != self.assignment.shape:
            raise ValueError(f"CFL assignment must be a tensor of shape {tuple(self.assignment.shape)}")
        self.assignment = assignment.to("cpu", torch.int64).clone()


def _bind(aggregator: Cfl, ctx: BuildContext) -> None:
    """An instance passed from Python sizes its assignment by its ``num_clients``: another than the run's is refused on
    ``aggregator.num_clients`` (an IndexError at the first client id past it otherwise)."""
    aggregator.num_clients = run_value(aggregator.num_clients, ctx.num_clients, instance_field(ctx, "num_clients"), "federation.num_clients")


SPEC = register_algorithm(
    "cfl",
    AlgorithmSpec(
        CflOptions,
        lambda o, ctx: (Cfl(ctx.num_clients, ctx.param_keys(), o), []),
        "clustered FL by splitting on update similarity (Sattler et al. 2020)",
        capabilities=Capabilities(),
        makes=(Cfl,),
        bind=_bind,
    ),
)

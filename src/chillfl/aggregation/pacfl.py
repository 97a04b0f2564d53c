"""PACFL (Vahidian, Morafah, Wang, Kungurtsev, Chen & Lin, AAAI 2023): cluster the clients once by the principal angles between their data subspaces.

Each client k sends, once, a signature of its training data: the first p left
singular vectors of its data matrix (one row a sample, flattened; D = X^T,
d x n), per label it holds (the authors' code) or of all its data::

    D_k^(l) = U Sigma V^T        U_k^(l) = U[:, :p]          (d x p, orthonormal)

The server's proximity of clients i and j is an angle (in degrees) between
their subspaces. The smallest principal angle (the paper's measure)::

    cos theta_1(U, W) = sigma_max(U^T W)          theta_1 = arccos(sigma_max)

and with one block per label, the least over the pairs of blocks::

    A[i, j] = min_{l, m} theta_1(U_i^(l), U_j^(m))

Agglomerative hierarchical clustering of A then merges, again and again, the
two clusters of least linkage distance while that distance is <= beta; each
cluster runs FedAvg among its members from then on (every client trains its
cluster's model, sent as its start; each cluster's model is the weighted mean
of its sampled members' models).

Choices
-------
* When the signatures are sent: the paper has every client send its
  signature before federation. chillfl's server reaches only the round's
  sampled clients, so a client sends its signature in the first round it is
  sampled (the server asks for it in the context, ``pacfl_send_signature``, so
  ``bytes_up`` counts it in that round only). The clustering is made at the end
  of round 0 from its clients' signatures: they all trained the initial model,
  every cluster's starting model in the paper, so each cluster's model after
  round 0 is the mean of its members' models, the paper's first round. With
  every client sampled in round 0 (the paper's setting) this is the paper's
  one-shot clustering exactly.
* A client first sampled later (a newcomer) trains from the global model and
  sends its signature; the server puts it in the nearest cluster by the
  linkage's distance from it to the cluster's members (single: the least,
  complete: the largest, average and weighted: the mean), the lowest index on
  ties (``newcomers = "nearest"``); a round's newcomers are placed in
  client-id order, each counting the earlier ones as members. With
  ``newcomers = "threshold"`` a newcomer farther than beta from every cluster
  starts a cluster of its own (what the clustering would have made of it),
  whose model is its upload. A newcomer's upload joins its cluster's mean
  only if that cluster's model is the one it started from (the global one):
  another cluster's model did not train it.
* ``measure = "smallest"`` (default): theta_1 above. ``"sum"``: the sum of the
  p principal angles, arccos of every singular value of U^T W. ``"vectors"``:
  the authors' code, the least angle between one column of U and one of W,
  arccos |u_a^T w_b| (the absolute value: a singular vector's sign is
  arbitrary, the code's signed product is not defined by the data). Each is
  taken per pair of blocks and the least over the pairs is A[i, j].
* ``signature = "per_label"`` (default, the authors' code: one block per label
  present on the client); ``"all"``: one block of all its data (the paper's
  equation). The data matrix is the client's training inputs as the model sees
  them (after the data set's normalisation), not centred, as in the code.
* A block of rank r < p (fewer than p samples of a label) has zero columns
  beyond its r-th, so that every signature is (blocks, d, p); a zero column
  is orthogonal to everything (an angle of 90 degrees). Directions of
  singular value <= max(d, n) eps sigma_1 (numerically zero) are zeroed too:
  LAPACK's vectors of a null space are arbitrary. SVD in float64; the
  signature travels as float32 (4 bytes an entry in the ledger). With p > d
  (more vectors than the data's dimension) the signature holds d columns,
  (blocks, d, d): the columns past the d-th would be zero, so the angles are
  the same (``sum`` counts 90 degrees for each missing one) while the
  signature, its bytes and the server's products no longer grow with p.
* ``linkage = "weighted"`` (default) is the authors' code's "average":
  d(a u b, c) = (d(a, c) + d(b, c)) / 2 (WPGMA). ``"average"`` is the
  size-weighted mean of the pairwise distances (UPGMA), ``"single"`` the least
  and ``"complete"`` the largest. Ties: the first pair in index order; the
  clusters are numbered by their lowest client id.
* ``beta = 5.0`` degrees (the authors' code uses 4.9 for CIFAR-10 with two
  labels a client and p = 3); it depends on the data's dimension and the
  partition: the round metric ``pacfl_clusters`` shows what it made. The
  angles are arccos of singular values, so two float32 signatures of one
  subspace read a few hundredths of a degree apart, far below any useful beta.
* ``weighting = "samples"`` (the authors' code weights members by n_i);
  ``uniform``: the plain mean.
* The global model chillfl evaluates and checkpoints is the model of the
  cluster with the most clients (ties: the lowest index), as CFL's; before
  the clustering, the initial model. Every cluster model, every client's
  cluster and every signature received are the aggregator's state, so a
  resumed run is the same run.
* Local accuracy measures the client's cluster model after its training (a
  newcomer's: the global model after its training). Clients keep nothing of
  their own, so PACFL declares no personal model.
* The signature is the SVD of the client's raw data, sent without noise:
  PACFL declares ``reports`` and ``private_steps``, so every ``[privacy]``
  mechanism refuses it.

Checked against
---------------
The authors' code (MMorafah/PACFL; the same functions are in the copies
indexed under other repositories): ``calculating_adjacency`` (per client the
per-label bases ``u[:, :K]`` of the SVD of the d x n data, stacked; A[i, j] =
min arccos of the clipped entries of U_i^T U_j in degrees: ``measure =
"vectors"`` here, up to the sign) and ``hierarchical_clustering`` (merge the
least entry while it is <= ``thresh``; ``linkage="average"`` replaces the two
rows by their mean: WPGMA, ``linkage = "weighted"`` here), called with
``thresh`` 4.9 and ``linkage='average'``; the cluster models are then FedAvg
within each cluster, weighted by n_i.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping, Sequence

import torch
from torch import nn

from chillfl.aggregation.base import (
    AggregatorBase,
    ClientResult,
    ClientState,
    Context,
    Downlink,
    Params,
    Report,
    Trained,
    Wire,
    check_state_keys,
    client_weights,
    load_params,
    weighted_average,
)
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, instance_field, register_algorithm, run_value
from chillfl.capabilities import Capabilities, Cost
from chillfl.engine.record import Json
from chillfl.options import require

ASK = "pacfl_send_signature"
"""Context key: the server has no signature of this client yet and asks for one."""
SIGNATURE = "pacfl_signature"
"""Report key of the client's signature, a (blocks, d, p) tensor."""

Linkage = Literal["weighted", "average", "single", "complete"]
Measure = Literal["smallest", "sum", "vectors"]


@dataclass(frozen=True)
class PacflOptions:
    """``p`` singular vectors a block, threshold ``beta`` (degrees), the ``linkage``, the angle ``measure``, ``signature`` blocks, ``newcomers``, ``weighting``."""

    p: int = 3
    beta: float = 5.0
    linkage: Linkage = "weighted"
    measure: Measure = "smallest"
    signature: Literal["per_label", "all"] = "per_label"
    newcomers: Literal["nearest", "threshold"] = "nearest"
    weighting: Literal["uniform", "samples"] = "samples"

    def validate(self, section: str) -> None:
        require(self.p >= 1, f"{section}.p", f"must be >= 1, got {self.p}")
        require(math.isfinite(self.beta) and self.beta >= 0, f"{section}.beta", f"must be a finite angle >= 0 (degrees), got {self.beta}")


# ---------------------------------------------------------------- the client's signature


def basis(rows: torch.Tensor, p: int) -> torch.Tensor:
    """The first p left singular vectors of the data matrix D = rows^T (d x min(p, d), float64), zero columns past its rank.

    At most d columns: the rank is at most d, so columns past the d-th would all be zero (see :func:`cross_proximity`).
    """
    data = rows.reshape(len(rows), -1).to("cpu", torch.float64).T
    d, n = data.shape
    out = torch.zeros((d, min(p, d)), dtype=torch.float64)
    if n == 0:
        return out
    u, s, _ = torch.linalg.svd(data, full_matrices=False)
    tol = s[0] * max(d, n) * torch.finfo(torch.float64).eps
    keep = [k for k in range(min(p, len(s))) if s[k] > tol]
    out[:, keep] = u[:, keep]
    return out


def signature(x: torch.Tensor, y: torch.Tensor, p: int, per_label: bool) -> torch.Tensor:
    """The client's (blocks, d, min(p, d)) float32 signature: one basis per label present (in label order), or one of all its rows."""
    if not per_label:
        return basis(x, p).unsqueeze(0).float()
    labels = torch.unique(y.cpu()).tolist()
    return torch.stack([basis(x[(y == c).to(x.device)], p) for c in labels]).float()


@dataclass(frozen=True)
class PacflClient:
    """Trains as FedAvg's client; when the server asks, also reports its data's signature (computed once, after its training)."""

    p: int = 3
    per_label: bool = True

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, {k: v for k, v in context.items() if k != ASK}  # the training reads no part of the request

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        if ASK not in trained.sent:
            return {}, {}
        return {}, {SIGNATURE: signature(trained.x, trained.y, self.p, self.per_label)}


# ---------------------------------------------------------------- the server's angles and clustering


def angles_of(cross: torch.Tensor) -> torch.Tensor:
    """The principal angles (degrees, ascending) from cross = U^T W of two orthonormal bases (batched over leading dims): arccos sigma_k(cross)."""
    return torch.rad2deg(torch.arccos(torch.linalg.svdvals(cross).clamp(0.0, 1.0)))


def principal_angles(u: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The principal angles (degrees, ascending) between span(u) and span(w), orthonormal columns (d x p), in float64."""
    return angles_of(u.to("cpu", torch.float64).mT @ w.to("cpu", torch.float64))


def cross_proximity(rows: Sequence[torch.Tensor], cols: Sequence[torch.Tensor], measure: Measure = "smallest", p: int = 0) -> torch.Tensor:
    """A[i, j] (degrees, float64) of every signature of ``rows`` against every one of ``cols``: the least angle over their pairs of blocks.

    Every block of every client at once: one product of all the columns, U^(l)T W^(m) (p x p) for each pair of
    blocks, then ``vectors`` reads its largest |entry| and the others its principal angles; the least over each
    pair of clients' blocks is their entry. In chunks of blocks, so that memory stays bounded.

    ``p``: the columns asked for. A signature holds at most d (:func:`basis`); each of the p - d it lacks would be a
    zero column, orthogonal to everything, so ``sum`` adds 90 degrees for each (``smallest`` and ``vectors`` are unchanged).
    """
    r = torch.cat([s.to("cpu", torch.float64) for s in rows])  # (blocks, d, p)
    c = torch.cat([s.to("cpu", torch.float64) for s in cols])
    owner_r = torch.repeat_interleave(torch.arange(len(rows)), torch.tensor([len(s) for s in rows]))
    owner_c = torch.repeat_interleave(torch.arange(len(cols)), torch.tensor([len(s) for s in cols]))
    nc, d, cp = c.shape
    flat_c = c.permute(1, 0, 2).reshape(d, nc * cp)
    out = torch.full((len(rows), len(cols)), math.inf, dtype=torch.float64)
    step = max(1, 2**22 // (nc * cp * cp))
    for start in range(0, len(r), step):
        part = r[start : start + step]
        cross = (part.mT.reshape(-1, d) @ flat_c).reshape(len(part), cp, nc, cp).transpose(1, 2)  # (part, nc, cp, cp)
        if measure == "vectors":
            angle = torch.rad2deg(torch.arccos(cross.abs().amax((-1, -2)).clamp(0.0, 1.0)))
        else:
            angles = angles_of(cross)
            angle = angles.sum(-1) + 90.0 * max(0, p - cp) if measure == "sum" else angles[..., 0]
        index = owner_r[start : start + step, None] * len(cols) + owner_c[None, :]
        out.view(-1).scatter_reduce_(0, index.reshape(-1), angle.reshape(-1), "amin")
    return out


def proximity(a: torch.Tensor, b: torch.Tensor, measure: Measure = "smallest", p: int = 0) -> float:
    """A[i, j] of two signatures (blocks, d, p): the least angle (degrees) over their pairs of blocks under ``measure``."""
    return float(cross_proximity([a], [b], measure, p)[0, 0])


def proximity_matrix(signatures: Sequence[torch.Tensor], measure: Measure = "smallest", p: int = 0) -> list[list[float]]:
    """The symmetric matrix A of every pair (zero diagonal: the clustering reads only pairs)."""
    a = cross_proximity(signatures, signatures, measure, p)
    a = torch.minimum(a, a.T)  # one value a pair (the product's rounding need not be symmetric)
    a.fill_diagonal_(0.0)
    return a.tolist()  # type: ignore[no-any-return]


def hierarchical_clustering(distance: Sequence[Sequence[float]], beta: float, linkage: Linkage = "weighted") -> list[list[int]]:
    """Agglomerative clustering: merge the two closest groups while their linkage distance is <= ``beta``.

    Lance-Williams updates of the merged group a u b against c: single min, complete max, weighted
    (d(a, c) + d(b, c)) / 2, average (n_a d(a, c) + n_b d(b, c)) / (n_a + n_b). Ties: the first pair in
    index order. Returns the groups (sorted members), ordered by their lowest member.
    """
    groups = [[i] for i in range(len(distance))]
    dist = [[float(v) for v in row] for row in distance]
    while len(groups) > 1:
        best: tuple[float, int, int] | None = None
        for a in range(len(groups)):
            for b in range(a + 1, len(groups)):
                if best is None or dist[a][b] < best[0]:
                    best = (dist[a][b], a, b)
        assert best is not None
        if not best[0] <= beta:
            break
        _, a, b = best
        na, nb = len(groups[a]), len(groups[b])
        for c in range(len(groups)):
            if c in (a, b):
                continue
            dac, dbc = dist[a][c], dist[b][c]
            merged = {"single": min(dac, dbc), "complete": max(dac, dbc), "weighted": (dac + dbc) / 2, "average": (na * dac + nb * dbc) / (na + nb)}[linkage]
            dist[a][c] = dist[c][a] = merged
        groups[a] = sorted(groups[a] + groups[b])
        del groups[b]
        del dist[b]
        for row in dist:
            del row[b]
    return sorted(groups, key=min)


def linkage_distance(distances: Sequence[float], linkage: Linkage) -> float:
    """A newcomer's distance to a cluster from its distances to the members: single the least, complete the largest, else the mean."""
    if linkage == "single":
        return min(distances)
    if linkage == "complete":
        return max(distances)
    return sum(distances) / len(distances)


def reported_signature(result: ClientResult) -> torch.Tensor:
    """Client ``result``'s signature, or a ValueError naming it."""
    value = result.report.get(SIGNATURE)
    if not isinstance(value, torch.Tensor) or value.dim() != 3:
        raise ValueError(f"PACFL needs report[{SIGNATURE!r}], a (blocks, d, p) tensor, from client {result.client_id} (asked for it), got {type(value).__name__}")
    return value.detach().to("cpu").clone()


class Pacfl(AggregatorBase):
    """The clusters (made once from the first round's signatures), their models, and every client's cluster."""

    def __init__(self, num_clients: int, options: PacflOptions = PacflOptions()) -> None:
        self.options = options
        self.num_clients = num_clients
        """The federation's clients, the size of :attr:`assignment` (a run's own, :func:`_bind`)."""
        self.models: list[Params] = []
        self.assignment = torch.full((num_clients,), -1, dtype=torch.int64)
        """Client id -> its cluster (-1: no signature yet)."""
        self.signatures: dict[int, torch.Tensor] = {}
        self._metrics: dict[str, Json] = {}

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        c = int(self.assignment[client_id])
        if c < 0:
            return Downlink(context={ASK: 1.0})  # it trains the global model and sends its signature
        return Downlink(params=self.models[c])

    def largest(self) -> int:
        """The cluster with the most clients (ties: the lowest index)."""
        counts = torch.bincount(self.assignment[self.assignment >= 0], minlength=len(self.models)).tolist()
        return max(range(len(self.models)), key=lambda c: (counts[c], -c))

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        o = self.options
        started = self.largest() if self.models else -1  # the newcomers' start (the global model); -1: before the clustering
        new = [r for r in results if int(self.assignment[r.client_id]) < 0]
        for r in new:
            self.signatures[r.client_id] = reported_signature(r)
        members: list[list[ClientResult]]
        if not self.models:
            ids = [r.client_id for r in new]
            groups = hierarchical_clustering(proximity_matrix([self.signatures[i] for i in ids], o.measure, o.p), o.beta, o.linkage)
            for c, group in enumerate(groups):
                for k in group:
                    self.assignment[ids[k]] = c
            self.models = [dict(global_params) for _ in groups]
            members = [[new[k] for k in group] for group in groups]
        else:
            joined = {r.client_id: self._place(r) for r in new}
            members = [[] for _ in self.models]
            for r in results:
                c = int(self.assignment[r.client_id])
                if r.client_id not in joined or c == started or joined[r.client_id]:
                    members[c].append(r)
        for c, sampled in enumerate(members):
            if sampled:
                self.models[c] = weighted_average([r.params for r in sampled], client_weights(sampled, o.weighting))
        best = self.largest()
        self._metrics = {"pacfl_clusters": len(self.models), "pacfl_signatures": len(new), "pacfl_global_cluster": best}
        return dict(self.models[best])

    def _place(self, r: ClientResult) -> bool:
        """Put newcomer ``r`` in the nearest cluster, or (``threshold``, farther than beta from all) a new one of its model; True: a new one."""
        o = self.options
        members = [i for i in sorted(self.signatures) if int(self.assignment[i]) >= 0]  # the round's earlier newcomers too (client-id order)
        angles = cross_proximity([self.signatures[r.client_id]], [self.signatures[i] for i in members], o.measure, o.p)[0].tolist()
        distances = []
        for c in range(len(self.models)):
            distances.append(linkage_distance([a for i, a in zip(members, angles) if int(self.assignment[i]) == c], o.linkage))
        nearest = min(range(len(distances)), key=lambda c: (distances[c], c))
        if o.newcomers == "threshold" and not distances[nearest] <= o.beta:
            self.assignment[r.client_id] = len(self.models)
            self.models.append(dict(r.params))
            return True
        self.assignment[r.client_id] = nearest
        return False

    def round_metrics(self) -> Mapping[str, Json]:
        """Clusters after the round, signatures received in it, and the cluster whose model is the global one."""
        return dict(self._metrics)

    def state_dict(self) -> dict[str, Any]:
        """Every cluster's model (empty before the clustering), every client's cluster and every signature received."""
        return {
            "models": {str(c): dict(m) for c, m in enumerate(self.models)},
            "assignment": self.assignment.clone(),
            "signatures": {str(i): s.clone() for i, s in sorted(self.signatures.items())},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("models", "assignment", "signatures"), "PACFL")
        models = state["models"]
        self.models = [load_params(models[str(c)]) for c in range(len(models))]
        assignment = state["assignment"]
        if not isinstance(assignment, torch.Tensor) or assignment.shape != self.assignment.shape:
            raise ValueError(f"PACFL assignment must be a tensor of shape {tuple(self.assignment.shape)}")
        self.assignment = assignment.to("cpu", torch.int64).clone()
        self.signatures = {int(i): torch.as_tensor(s).to("cpu").clone() for i, s in state["signatures"].items()}

    def client_half(self) -> PacflClient:
        return PacflClient(self.options.p, self.options.signature == "per_label")


CAPABILITIES = Capabilities(
    private_steps="each client sends the truncated SVD of its raw training data, which dp-sgd's clipped and noised steps do not cover",
    reports="each client's signature once: the first p left singular vectors of its training data (per label)",
)

SVD_PER_LABEL, SVD_ALL = 2.0, 31.0
"""A client's signature (:func:`signature`), once, in FLOPs a pair of its rows and an input feature (``Cost.first_pair_flops``): the
SVD of an (n_c, d) block costs about n_c^2 d, so per label, summed over C labels of n / C rows, n^2 d / C; of all the rows, n^2 d
while n <= d (more than that: n d^2, an upper bound). Measured 2026-12-02 on the 2-vCPU AVX2 machine, one thread, random float32
rows in 10 labels: per label 0.39 s at n = 2,250, d = 3,072 (2.5e-11 s a pair and feature, 1.3 FLOPs at 50 GFLOP/s) and 0.014 s at
n = 500, d = 768 (7.3e-11 s: 3.7 FLOPs); all rows 9.7 s at the first (6.2e-10 s: 31 FLOPs). On the digits (d = 64) a few ms a
client."""
ANGLES = 2.6e-4
"""The server's angle between two blocks of two signatures (:func:`cross_proximity`: U^T W, p x p, and its singular values), in
plain steps' overheads a squared column of the blocks (p^2, at most d^2): the product's 2 d p^2 FLOPs and the batched p x p SVDs,
d-bound where d is large. Measured 2026-12-02 on the 2-vCPU AVX2 machine, one thread, 20 signatures of 10 blocks: 0.14-0.23 us a
block pair and p^2 at d = 3,072 (p = 10, 3, 1), 0.07-0.14 us at d = 768, 0.06-0.12 us at d = 64: 0.2 us (2.6e-4 of the 0.76 ms
overhead), the large inputs' value. Its clustering of the first round's clients, a few ms at 100, is not counted."""


def capabilities(options: PacflOptions) -> Capabilities:
    """Its limits, and its cost: each client's signature once (``first_pair_flops``: :data:`SVD_PER_LABEL` or :data:`SVD_ALL`) and
    the server's angles between every two clients' signatures (:data:`ANGLES` x p^2 a pair of blocks: a block a class,
    ``class_pair_server_steps``, or one of all the rows, ``pair_server_steps``)."""
    angles = ANGLES * options.p**2
    if options.signature == "per_label":
        return replace(CAPABILITIES, cost=Cost(first_pair_flops=SVD_PER_LABEL, class_pair_server_steps=angles))
    return replace(CAPABILITIES, cost=Cost(first_pair_flops=SVD_ALL, pair_server_steps=angles))


def _bind(aggregator: Pacfl, ctx: BuildContext) -> None:
    """An instance passed from Python sizes its assignment by its ``num_clients``: another than the run's is refused on
    ``aggregator.num_clients`` (an IndexError at the first client id past it otherwise)."""
    aggregator.num_clients = run_value(aggregator.num_clients, ctx.num_clients, instance_field(ctx, "num_clients"), "federation.num_clients")


SPEC = register_algorithm(
    "pacfl",
    AlgorithmSpec(
        PacflOptions,
        lambda o, ctx: (Pacfl(ctx.num_clients, o), []),
        "clustered FL, clusters made once from the principal angles between the clients' data subspaces (Vahidian et al. 2023)",
        capabilities=CAPABILITIES,
        capabilities_of=capabilities,
        makes=(Pacfl,),
        bind=_bind,
    ),
)

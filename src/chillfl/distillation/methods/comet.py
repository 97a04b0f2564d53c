"""COMET (Cho et al. 2023): clustered distillation targets; regulariser lambda * KL(target || softmax(f(x))).

Clustering and targets: :mod:`chillfl.distillation.comet`; the choices (client and sample
granularity, caching): :mod:`chillfl.distillation.methods`.

Checked against: kitsuyaazuma/SCARLET (branch ``reproducibility``) ``src/algorithm/comet.py`` and ``src/config/algorithm/comet.yaml`` (c = 2, lambda = 1.0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Sequence

import numpy as np
import torch

from chillfl.config import RunConfig
from chillfl.distillation.comet import cluster_clients, cluster_targets, per_sample_centroids
from chillfl.engine.record import Json
from chillfl.options import Scale, require, require_range
from chillfl.protocols.softlabels.labels import mean_soft_labels
from chillfl.protocols.softlabels.messages import SoftLabelUplink
from chillfl.protocols.softlabels.method import Aggregate, SoftLabelClientHooks, SoftLabelMethod, SoftLabelSpec, stack_uplinks
from chillfl.seeds import derive_seed
from chillfl.settings.distillation import SECTION

Granularity = Literal["client", "sample"]


MAX_N_INIT = 1000
"""k-means restarts per round (SCARLET's setting: a handful); the run time grows linearly with it."""
MAX_ITER = 10_000
"""Lloyd iterations per restart (they stop at convergence, usually within tens)."""


@dataclass(frozen=True)
class COMETOptions:
    """COMET options (defaults: SCARLET Table V, CIFAR-10)."""

    num_clusters: int = 2
    reg_weight: Scale = 1.0
    granularity: Granularity = "client"
    n_init: int = 4
    max_iter: int = 100

    def validate(self, section: str) -> None:
        require(self.num_clusters >= 1, f"{section}.num_clusters", f"must be >= 1, got {self.num_clusters}")
        require(self.reg_weight >= 0, f"{section}.reg_weight", f"must be >= 0, got {self.reg_weight}")
        require(self.granularity in ("client", "sample"), f"{section}.granularity", f"unknown value {self.granularity!r}; allowed: client, sample")
        require_range(self.n_init, 1, MAX_N_INIT, f"{section}.n_init")
        require_range(self.max_iter, 1, MAX_ITER, f"{section}.max_iter")

    def check_clients(self, clients_per_round: int, section: str) -> None:
        """More clusters than clients per round can never be used (each cluster needs a client), only allocated."""
        require(
            self.num_clusters <= clients_per_round,
            f"{section}.num_clusters",
            f"must be in [1, clients per round = {clients_per_round}] (a cluster groups clients), got {self.num_clusters}",
        )


@dataclass(frozen=True)
class COMETMethodOptions(COMETOptions):
    """COMET options (SCARLET Table V: c = 2 clusters, lambda = 1.0)."""


def check_with_run(options: COMETMethodOptions, config: RunConfig) -> None:
    """Every cluster needs a client of the round; a cache holds per-sample centroids only.

    Why client granularity cannot cache: its row holds every cluster's block (the last one the plain mean), and a
    client downloads and is billed for one block (:meth:`COMET.downlink_soft_bytes`). A cached row would let a client
    whose cluster changed read a block it never paid for, and cluster ids of different rounds do not name the same
    group anyway (they are canonicalised per clustering). Sample granularity sends, bills and caches the whole row
    (c centroids per sample), so a client only ever reads rows it paid for.
    """
    options.check_clients(config.federation.sample_size(), SECTION)
    setup = config.distillation_setup
    require(
        not (setup is not None and setup.uses_cache and options.granularity == "client"),
        f"{SECTION}.cache_duration",
        "COMET caches only per-sample centroids: set granularity = 'sample' or cache_duration = 0",
    )


class COMETClient(SoftLabelClientHooks[COMETMethodOptions]):
    """COMET's client: its cluster's target (client granularity: the block the downlink's ``hint`` names), or per sample the centroid nearest its own prediction."""

    def needs_own_predictions(self, hint: int | None) -> bool:
        return self.options.granularity != "client"  # sample granularity: the nearest centroid to the own prediction

    def client_target(self, cid: int, rows: torch.Tensor, own_probs: Callable[[], torch.Tensor], hint: int | None = None) -> torch.Tensor:
        nc, c = self.num_classes, self.options.num_clusters
        if self.options.granularity == "client":
            if hint is None:  # the server names the block (target_hint) with every previous round's rows; a transport that drops it is a bug
                raise ValueError(f"COMET client {cid}: the downlink names no cluster block for client granularity")
            return rows[:, hint * nc : (hint + 1) * nc]
        cents = rows.reshape(rows.shape[0], c, nc)
        own = own_probs()
        pick = (cents - own.unsqueeze(1)).pow(2).sum(dim=-1).argmin(dim=1)  # nearest centroid (Euclidean)
        return cents[torch.arange(rows.shape[0], device=rows.device), pick]


class COMET(SoftLabelMethod[COMETMethodOptions]):
    """COMET's server half: clusters the round's clients (or each sample's predictions); the server model trains on the plain mean."""

    separate_server_rows = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.distill_weight = float(self.options.reg_weight)
        self._assign: dict[int, int] = {}
        self._num_clusters_used = 0

    def _rng(self, round: int) -> np.random.Generator:
        return np.random.default_rng(derive_seed(self.seed, "comet", round))

    def row_width(self) -> int:
        c = self.options.num_clusters
        return (c + 1) * self.num_classes if self.options.granularity == "client" else c * self.num_classes

    def aggregate(self, round: int, indices: torch.Tensor, uplinks: Sequence[SoftLabelUplink]) -> Aggregate:
        o, nc = self.options, self.num_classes
        stack, _ = stack_uplinks(indices, uplinks, nc)
        mean = mean_soft_labels(stack)
        n, c = int(indices.numel()), o.num_clusters
        keep = torch.ones(n, dtype=torch.bool)
        if o.granularity == "client":
            labels = cluster_clients(stack, c, self._rng(round), o.n_init, o.max_iter) if n else np.zeros(len(uplinks), dtype=np.int64)
            targets = cluster_targets(stack, labels) if n else torch.zeros((1, 0, nc))
            used = targets.shape[0]
            blocks = [targets[j] for j in range(used)] + [mean] * (c - used) + [mean]  # last block: the plain mean
            rows = torch.cat(blocks, dim=1) if n else torch.zeros((0, (c + 1) * nc))
            self._assign = {up.client_id: int(lab) for up, lab in zip(uplinks, labels)}
            self._num_clusters_used = used
        else:
            if n:
                cents = per_sample_centroids(stack, c, self._rng(round), o.n_init, o.max_iter)  # [n, c', C]
                if cents.shape[1] < c:  # fewer clients than clusters: repeat the last centroid
                    cents = torch.cat([cents, cents[:, -1:].expand(-1, c - cents.shape[1], -1)], dim=1)
                rows = cents.reshape(n, c * nc)
            else:
                rows = torch.zeros((0, c * nc))
            self._num_clusters_used = min(c, len(uplinks))
        return Aggregate(keep, rows, mean)

    def downlink_soft_bytes(self, rows: torch.Tensor) -> int:
        if self.options.granularity == "client":  # each client downloads its own cluster's target only
            return int(rows.shape[0]) * self.num_classes * 4
        return int(rows.numel()) * 4

    def target_hint(self, cid: int) -> int | None:
        """Client granularity: the block of the client's cluster (last block = the plain mean when unassigned)."""
        return self._assign.get(cid, self.options.num_clusters) if self.options.granularity == "client" else None

    def round_metrics(self) -> dict[str, Json]:
        return {"comet_clusters": self._num_clusters_used}

    def state_dict(self) -> dict[str, Any]:
        return {"assign": {str(k): v for k, v in self._assign.items()}, "clusters_used": self._num_clusters_used}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._assign = {int(k): int(v) for k, v in state["assign"].items()}
        self._num_clusters_used = int(state["clusters_used"])


SPEC = SoftLabelSpec(
    "comet", COMETMethodOptions, COMET, COMETClient, summary="clustered distillation targets", check=check_with_run,
)

"""COMET: clustered knowledge transfer (Cho et al., 2023; SCARLET ref. [22]).

Clients with similar data produce similar soft-labels on the same public
samples. COMET clusters the clients by those soft-labels and gives each client
the average soft-label of *its* cluster as distillation target, so a client is
pulled towards peers like itself rather than towards everybody. Locally the
client adds a regulariser

    lambda * (1/n) sum_x KL( target(x) || softmax(f(x)) )

to its objective (SCARLET Table V: c = 2 clusters, lambda = 1.0 on CIFAR-10).

Choices and gaps
----------------
* Features: a client's soft-labels on this round's requested public subset,
  flattened (``[n * C]``); squared Euclidean k-means (Lloyd) with k-means++
  initialisation drawn from an explicit ``np.random.Generator``, ``n_init``
  restarts, lowest inertia wins (ties: first). Empty clusters are re-seeded
  with the point farthest from its centroid. Cluster ids are canonicalised by
  the first client (in the given order) of each cluster, so the result does
  not depend on the initial centroid order.
* Assignment is server-side and its transmission is free (SCARLET Appendix
  B); each client downloads only its own cluster's target (n x C values).
* With fewer participating clients than c, c is reduced to the number of
  distinct feature vectors.
* The SCARLET authors' code instead clusters *per public sample* (c centroids
  of the K soft-labels of each sample, all sent down; each client picks the
  centroid nearest its own prediction). That reading is available as
  :func:`per_sample_centroids` + :func:`nearest_centroids` (downlink n x c x C).
* The regulariser uses KL averaged over samples (``batchmean``); soft
  cross-entropy differs from it only by the target's entropy, a constant.

Checked against: kitsuyaazuma/SCARLET (branch ``reproducibility``) ``src/algorithm/comet.py`` (per-sample k-means of the K soft-labels, nearest
centroid by Euclidean distance to the client's own prediction, ``lambda * kl_div(batchmean)``);
no code by COMET's authors was found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from chillfl.errors import ConfigError

_DIST_BLOCK = 1 << 22
"""Elements of the ``[points, centroids, dim]`` difference array held at once in :func:`_sq_dists`."""


@dataclass(frozen=True)
class KMeansResult:
    labels: np.ndarray  # int64 [num_points], canonical ids 0..c-1
    centroids: np.ndarray  # float64 [c, d], row j = centroid of cluster j
    inertia: float


def _sq_dists(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """``[m, c]`` squared distances, a block of centroids at a time: memory ``_DIST_BLOCK``, not ``m * c * d``.

    Each entry is the same sum over the same contiguous ``d`` values as in one
    ``[m, c, d]`` array, so blocking changes no bit.
    """
    m, d = x.shape
    step = max(1, _DIST_BLOCK // max(1, m * d))
    blocks = [((x[:, None, :] - centroids[None, j : j + step, :]) ** 2).sum(axis=-1) for j in range(0, centroids.shape[0], step)]
    return blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=1)


def _kmeans_pp(x: np.ndarray, c: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding: first centre uniform, next ones with probability proportional to squared distance."""
    centres = [x[int(rng.integers(x.shape[0]))]]
    for _ in range(1, c):
        d = _sq_dists(x, np.stack(centres)).min(axis=1)
        far = ~np.isfinite(d)  # a non-finite point (or distance overflowing float64) is infinitely far: the limit draws among those
        if far.any():  # was "Probabilities contain NaN" from rng.choice
            centres.append(x[int(rng.choice(np.flatnonzero(far)))])
            continue
        with np.errstate(over="ignore"):  # an overflowing sum is handled below
            total = d.sum()
        if not np.isfinite(total):  # each distance finite, their sum not: the same draw on the distances scaled by their max
            d = d / d.max()
            total = d.sum()
        if total <= 0:  # all points coincide with chosen centres
            centres.append(x[int(rng.integers(x.shape[0]))])
            continue
        centres.append(x[int(rng.choice(x.shape[0], p=d / total))])
    return np.stack(centres)


def _lloyd(x: np.ndarray, centroids: np.ndarray, max_iter: int) -> tuple[np.ndarray, np.ndarray, float]:
    c = centroids.shape[0]
    labels = np.full(x.shape[0], -1, dtype=np.int64)
    for _ in range(max_iter):
        d = _sq_dists(x, centroids)
        new = d.argmin(axis=1)
        for j in range(c):  # re-seed an empty cluster with the worst-fitted point of a cluster that can spare one
            if not np.any(new == j):
                counts = np.bincount(new, minlength=c)
                fit = d[np.arange(x.shape[0]), new].copy()
                fit[counts[new] <= 1] = -1.0
                new[int(fit.argmax())] = j
        centroids = np.stack([x[new == j].mean(axis=0) for j in range(c)])
        if np.array_equal(new, labels):
            break
        labels = new
    inertia = float(_sq_dists(x, centroids)[np.arange(x.shape[0]), labels].sum())
    return labels, centroids, inertia


def _canonical(labels: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order: list[int] = []
    for lab in labels.tolist():
        if lab not in order:
            order.append(lab)
    remap = {old: new for new, old in enumerate(order)}
    return np.array([remap[lab] for lab in labels.tolist()], dtype=np.int64), centroids[order]


def kmeans(points: torch.Tensor | np.ndarray, num_clusters: int, rng: np.random.Generator, n_init: int = 4, max_iter: int = 100) -> KMeansResult:
    """Deterministic (given ``rng``) Lloyd k-means on rows of ``points`` ``[m, d]``."""
    x = np.asarray(torch.as_tensor(points, dtype=torch.float64)).reshape(len(points), -1)
    if num_clusters < 1:
        raise ConfigError("comet.num_clusters", f"must be >= 1, got {num_clusters}")
    c = min(num_clusters, len(np.unique(x, axis=0)))
    best: tuple[np.ndarray, np.ndarray, float] | None = None
    for _ in range(n_init):
        run = _lloyd(x, _kmeans_pp(x, c, rng), max_iter)
        if best is None or run[2] < best[2]:
            best = run
    assert best is not None
    labels, centroids = _canonical(best[0], best[1])
    return KMeansResult(labels=labels, centroids=centroids, inertia=best[2])


def cluster_clients(soft_labels: torch.Tensor, num_clusters: int, rng: np.random.Generator, n_init: int = 4, max_iter: int = 100) -> np.ndarray:
    """Cluster ids ``[K]`` of the clients from their soft-labels ``[K, n, C]`` on the same public samples."""
    if soft_labels.dim() != 3:
        raise ValueError(f"soft_labels must be [K, n, C], got shape {tuple(soft_labels.shape)}")
    return kmeans(soft_labels.reshape(soft_labels.shape[0], -1), num_clusters, rng, n_init, max_iter).labels


def cluster_targets(soft_labels: torch.Tensor, labels: np.ndarray | Sequence[int], weights: Sequence[float] | None = None) -> torch.Tensor:
    """Per-cluster (weighted) mean soft-labels ``[c, n, C]``; row j is the target of cluster j's members."""
    lab = np.asarray(labels, dtype=np.int64)
    w = np.ones(len(lab)) if weights is None else np.asarray(weights, dtype=np.float64)
    out = []
    for j in range(int(lab.max()) + 1):
        members = np.flatnonzero(lab == j)
        wj = torch.as_tensor(w[members] / w[members].sum(), dtype=torch.float64)
        out.append(torch.einsum("k,knc->nc", wj, soft_labels[members].to(torch.float64)))
    return torch.stack(out).to(soft_labels.dtype)


def comet_targets(
    soft_labels: torch.Tensor, num_clusters: int, rng: np.random.Generator, n_init: int = 4, max_iter: int = 100
) -> tuple[np.ndarray, torch.Tensor]:
    """Cluster the clients and return ``(labels [K], per-client targets [K, n, C])``."""
    labels = cluster_clients(soft_labels, num_clusters, rng, n_init, max_iter)
    targets = cluster_targets(soft_labels, labels)
    return labels, targets[torch.as_tensor(labels)]


def comet_regularizer(logits: torch.Tensor, target: torch.Tensor, reg_weight: float) -> torch.Tensor:
    """lambda * mean over samples of KL(target || softmax(logits)); ``logits``, ``target``: ``[n, C]``."""
    if reg_weight < 0:
        raise ConfigError("comet.reg_weight", f"must be >= 0, got {reg_weight}")
    return reg_weight * F.kl_div(F.log_softmax(logits, dim=-1), target, reduction="batchmean")


def per_sample_centroids(soft_labels: torch.Tensor, num_clusters: int, rng: np.random.Generator, n_init: int = 4, max_iter: int = 100) -> torch.Tensor:
    """Alternative reading: for each public sample, k-means of the K clients' soft-labels -> ``[n, c, C]``."""
    k, n, num_classes = soft_labels.shape
    c = min(num_clusters, k)
    out = torch.empty((n, c, num_classes), dtype=soft_labels.dtype)
    for s in range(n):
        res = kmeans(soft_labels[:, s, :], c, rng, n_init, max_iter)
        cents = torch.as_tensor(res.centroids, dtype=soft_labels.dtype)
        if cents.shape[0] < c:  # fewer distinct points than clusters: repeat the last centroid
            cents = torch.cat([cents, cents[-1:].expand(c - cents.shape[0], -1)])
        out[s] = cents
    return out


def nearest_centroids(own: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    """For each sample, the centroid ``[n, c, C]`` nearest (Euclidean) to the client's own soft-label ``[n, C]``."""
    d = (centroids - own.unsqueeze(1)).pow(2).sum(dim=-1)
    pick = d.argmin(dim=1)
    return centroids[torch.arange(own.shape[0]), pick]

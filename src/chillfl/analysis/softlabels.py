"""Analyses behind SCARLET's Figs. 3 and 4: cache hit ratio and entropy curves.

* :func:`simulate_cache_ratio` -- Fig. 3: each round a uniform random subset
  P^t of the public set is drawn (10 % in the paper); the ratio is the share of
  P^t served from the cache, i.e. signalled CACHED under the same validity rule
  and expiry policy as :class:`~chillfl.protocols.softlabels.cache.ServerCache`
  (``tests/test_distill_analysis.py`` checks that they agree). The paper
  suggests choosing D with exactly this kind of simulation (Sec. IV-C).
* :func:`steady_state_cache_ratio` -- the simulation's long-run value in
  closed form: a sample is in P^t with probability p = |P^t| / |P| each
  round, independently across rounds. Once stored it is a hit on each of
  its K ~ Binomial(D, p) draws in the next D rounds; its next draw finds it
  expired (a miss; ``drop`` removes it, so the draw after that is a miss
  that stores it again, ``refresh`` re-stores it at once). By renewal-reward
  the hit share of all draws is E[K] / (E[K] + misses per cycle) =
  Dp / (2 + Dp) (drop, Algorithm 2) or Dp / (1 + Dp) (refresh).
* :func:`entropy_vs_temperature` / :func:`entropy_vs_beta` -- Fig. 4 (c)/(d):
  mean entropy of ERA (Eq. 2) and Enhanced ERA (Eq. 4) outputs over a grid of
  T or beta.

Plots use matplotlib's object API with the Agg canvas (no pyplot state).

Checked (2026-12) against: SCARLET Sec. III-C, Algorithm 2 (validity
t - t_c <= D; an expired entry is dropped), Sec. IV-C / Fig. 3 (ratio of
cached samples in P^t per round, |P^t| = 10 % of |P|), Eq. 2 and Eq. 4 /
Fig. 4 (c)(d) (entropy of Softmax(zbar | T) and of zbar**beta / sum,
in nats, averaged over the samples); the simulation's long-run mean equals
the closed form (tests/test_distill_analysis.py). Compared with
kitsuyaazuma/SCARLET ``src/scarlet/algorithm/scarlet.py``: its
``update_global_cache`` uses the same ``<= D`` rule, while its request
selection (``get_next_indices``) tests ``t_c + D > t``; the simulation
follows Algorithm 2 (docs/analysis.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch
from chillfl.protocols.softlabels.cache import OnExpire, is_valid
from chillfl.distillation.era import entropy, mean_soft_labels, power_sharpen, tempered_softmax


def simulate_cache_ratio(
    num_public: int, subset_size: int, duration_D: int, rounds: int, seed: int, on_expire: OnExpire = "drop"
) -> list[float]:
    """Fraction of P^t served from the cache in rounds 1..``rounds`` (Fig. 3)."""
    if not 0 < subset_size <= num_public:
        raise ValueError(f"subset_size must be in 1..num_public={num_public}, got {subset_size}")
    if duration_D < 0 or rounds < 0:
        raise ValueError("duration_D and rounds must be >= 0")
    rng = np.random.default_rng(seed)
    stored = np.full(num_public, -1, dtype=np.int64)  # round stored, -1 = not cached
    ratios: list[float] = []
    for t in range(1, rounds + 1):
        draw = rng.choice(num_public, size=subset_size, replace=False)
        present = stored[draw] >= 0
        valid = present & is_valid(stored[draw], t, duration_D)  # the ServerCache rule
        ratios.append(float(valid.mean()))
        absent, expired = draw[~present], draw[present & ~valid]
        stored[absent] = t
        stored[expired] = t if on_expire == "refresh" else -1
    return ratios


def steady_state_cache_ratio(subset_fraction: float, duration_D: int, on_expire: OnExpire = "drop") -> float:
    """Long-run share of P^t served from the cache: Dp / (2 + Dp) (drop) or Dp / (1 + Dp) (refresh), p = |P^t| / |P|."""
    if not 0 < subset_fraction <= 1:
        raise ValueError(f"subset_fraction must be in (0, 1], got {subset_fraction}")
    if duration_D < 0:
        raise ValueError(f"duration_D must be >= 0, got {duration_D}")
    hits = duration_D * subset_fraction
    return hits / (hits + (2 if on_expire == "drop" else 1))


def _as_mean(soft_labels: torch.Tensor) -> torch.Tensor:
    """Accept averaged soft-labels ``[n, C]`` or per-client ``[K, n, C]`` (averaged here)."""
    if soft_labels.dim() == 3:
        return mean_soft_labels(soft_labels)
    if soft_labels.dim() == 2:
        return soft_labels
    raise ValueError(f"soft_labels must be [n, C] or [K, n, C], got shape {tuple(soft_labels.shape)}")


def entropy_vs_temperature(soft_labels: torch.Tensor, temps: Sequence[float]) -> np.ndarray:
    """Mean entropy (nats) of ERA's softmax(zbar / T) for each T (Fig. 4c)."""
    zbar = _as_mean(soft_labels)
    return np.array([float(entropy(tempered_softmax(zbar, float(t))).mean()) for t in temps])


def entropy_vs_beta(soft_labels: torch.Tensor, betas: Sequence[float]) -> np.ndarray:
    """Mean entropy (nats) of Enhanced ERA's zbar**beta / sum zbar**beta for each beta (Fig. 4d)."""
    zbar = _as_mean(soft_labels)
    return np.array([float(entropy(power_sharpen(zbar, float(b))).mean()) for b in betas])


def plot_cache_ratio(ratios_by_duration: Mapping[int, Sequence[float]], path: str | Path) -> Path:
    """Fig. 3: cached-sample ratio per round, one line per cache duration D."""
    from chillfl.plots.figure import Figure, save_png  # lazy: matplotlib is the `plots` extra

    from chillfl.plots.run import integer_rounds

    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    for d, ratios in sorted(ratios_by_duration.items()):
        ax.plot(range(1, len(ratios) + 1), ratios, label=f"D={d}")
    ax.set_xlabel("round")
    ax.set_ylabel("ratio of cached samples in $P^t$")
    ax.set_ylim(-0.02, 1.02)  # a long D sits at 1 for rounds: on the frame at ylim (0, 1), half hidden
    integer_rounds(ax)  # no 2.5 on a short simulation
    ax.grid(alpha=0.3)
    fig.legend(loc="outside right upper", title="cache duration")  # beside the axes: inside, it covered the curves
    return save_png(fig, path)


def _plot_curves(xs: Sequence[float], curves: Mapping[str, np.ndarray], xlabel: str, path: str | Path, logx: bool) -> Path:
    from chillfl.plots.figure import Figure, literal, save_png  # lazy: matplotlib is the `plots` extra

    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for label, ys in curves.items():
        ax.plot(list(xs), list(ys), marker="o", label=literal(label))
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("mean entropy (nats)")
    ax.legend()
    return save_png(fig, path)


def plot_entropy_vs_temperature(soft_labels_by_name: Mapping[str, torch.Tensor], temps: Sequence[float], path: str | Path) -> Path:
    """Fig. 4c: ERA entropy against T (log axis), one line per soft-label set."""
    curves = {name: entropy_vs_temperature(sl, temps) for name, sl in soft_labels_by_name.items()}
    return _plot_curves(temps, curves, "ERA temperature T", path, logx=True)


def plot_entropy_vs_beta(soft_labels_by_name: Mapping[str, torch.Tensor], betas: Sequence[float], path: str | Path) -> Path:
    """Fig. 4d: Enhanced ERA entropy against beta, one line per soft-label set."""
    curves = {name: entropy_vs_beta(sl, betas) for name, sl in soft_labels_by_name.items()}
    return _plot_curves(betas, curves, "Enhanced ERA beta", path, logx=False)

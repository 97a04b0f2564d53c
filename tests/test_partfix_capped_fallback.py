"""``dirichlet_balanced`` (per class, capped at N / K) at tiny alpha: a class whose Dirichlet mass falls only on clients
already at the cap was split equally over the clients below it (the IID extreme), so splits got less skewed as alpha
fell. Now that class is drawn again from Dir(alpha) over the clients below the cap (one-hot when degenerate: the
alpha -> 0 limit). A split that never reaches that branch, or reaches it with one client below the cap (which takes
the class, as before, without a draw), draws exactly as before: checked against the old rule, copied here.
"""

from __future__ import annotations

import numpy as np
import pytest

from chillfl.data.partition import Partition, _balanced_by_class, _class_pools, dirichlet, partition, split_by_proportions

LABELS = np.repeat(np.arange(10), 100)  # balanced: 10 classes x 100 rows; with 10 clients the cap N / K is one class
SEEDS = range(8)


def old_balanced_by_class(labels: np.ndarray, k: int, c: int, rng: np.random.Generator, alpha: float,
                          fallbacks: list[int]) -> Partition:
    """The rule before the fix, verbatim but for ``fallbacks``: for each class that took the equal split, over how many clients."""
    n = len(labels)
    parts: list[list[np.ndarray]] = [[] for _ in range(k)]
    held = np.zeros(k, dtype=np.int64)
    for pool in _class_pools(labels, c, rng):
        below = held < n / k
        p = dirichlet(rng, alpha, k) * below
        if p.sum() > 0:
            p = p / p.sum()
        elif below.any():
            p = below / np.sum(below)
            fallbacks.append(int(below.sum()))
        else:
            p = np.full(k, 1.0 / k)
        for i, chunk in enumerate(split_by_proportions(pool, p)):
            parts[i].append(chunk)
            held[i] += len(chunk)
    return Partition([np.concatenate(p) for p in parts])


def classes_per_client(part: Partition, labels: np.ndarray) -> float:
    return float(np.mean([len(np.unique(labels[ix])) for ix in part.client_indices]))


def mean_skew(alpha: float, split: object) -> float:
    """Mean classes per client over SEEDS, 10 clients on LABELS (lower: more skewed)."""
    return float(np.mean([classes_per_client(split(LABELS, 10, 10, np.random.default_rng(s), alpha), LABELS)  # type: ignore[operator]
                          for s in SEEDS]))


def test_skew_does_not_fall_as_alpha_falls() -> None:
    """The old rule gave about 1.9, 1.4, 2.5, 2.9 classes per client at alpha 1e-2 .. 1e-6: back up towards IID."""
    alphas = [1e-2, 1e-3, 1e-4, 1e-6]
    skews = [mean_skew(a, _balanced_by_class) for a in alphas]
    for bigger, smaller in zip(skews, skews[1:]):
        assert smaller <= bigger + 0.05, skews
    old = [mean_skew(a, lambda *args: old_balanced_by_class(*args, fallbacks=[])) for a in alphas]
    assert any(s > b + 0.05 for b, s in zip(old, old[1:])), old  # the check has teeth: the old rule fails it


@pytest.mark.parametrize("seed", SEEDS)
def test_alpha_to_zero_gives_each_client_one_whole_class(seed: int) -> None:
    """The alpha -> 0 limit worked out by hand: every draw is one-hot, so each class goes whole to one client below the
    cap; a class of 100 rows puts its client at the cap (1000 / 10), so the 10 classes go to 10 different clients."""
    part = partition("dirichlet_balanced", LABELS, 10, np.random.default_rng(seed), {"alpha": 1e-6, "min_size": 0})
    per_client = [np.unique(LABELS[ix]) for ix in part.client_indices]
    assert all(len(cls) == 1 for cls in per_client)
    assert sorted(int(cls[0]) for cls in per_client) == list(range(10))
    assert all(len(ix) == 100 for ix in part.client_indices)


@pytest.mark.parametrize("k", [3, 7, 10, 25])
@pytest.mark.parametrize("alpha", [1e-2, 1e-3, 1e-6])
def test_every_row_once_and_the_cap_holds(k: int, alpha: float) -> None:
    labels = np.random.default_rng(k).permutation(np.repeat(np.arange(6), [90, 40, 70, 10, 55, 35]))
    n = len(labels)
    fallbacks: list[int] = []
    for seed in range(6):
        old_balanced_by_class(labels, k, 6, np.random.default_rng(seed), alpha, fallbacks)
        part = _balanced_by_class(labels, k, 6, np.random.default_rng(seed), alpha)
        rows = np.concatenate(part.client_indices)
        assert np.array_equal(np.sort(rows), np.arange(n))  # every row, each exactly once
        counts = np.stack([np.bincount(labels[ix], minlength=6) for ix in part.client_indices])  # client x class
        held_before = np.cumsum(counts, axis=1) - counts  # rows a client held when each class was split (classes in order)
        over = counts * (held_before >= n / k)  # rows a client took of a class it was at the cap for: none ...
        # ... but for one row of the last client: split_by_proportions floors the float cumsum, which can end just under
        # 1, so the last client keeps one row whatever its share (as the old rule did, at any alpha)
        assert not np.any(over[:-1]) and over[-1].max() <= 1, (seed, counts)
    if alpha < 1e-2:
        assert max(fallbacks) > 1  # these cases go through the changed branch


@pytest.mark.parametrize("k", [2, 5, 10, 30])
def test_splits_that_never_reach_the_fallback_are_unchanged(k: int) -> None:
    """Bit for bit the old split wherever the old rule never split a class equally over two or more clients (at
    every alpha down to 1e-3): one client below the cap took the class whole then, and still does, without a draw."""
    labels = np.random.default_rng(100 + k).integers(0, 10, 600)
    checked = differ = 0
    for alpha in (1e-3, 1e-2, 0.05, 0.1, 0.5, 1.0, 5.0, 1e3):
        for seed in range(12):
            fallbacks: list[int] = []
            old = old_balanced_by_class(labels, k, 10, np.random.default_rng(seed), alpha, fallbacks)
            new = _balanced_by_class(labels, k, 10, np.random.default_rng(seed), alpha)
            same = all(np.array_equal(a, b) for a, b in zip(old.client_indices, new.client_indices))
            if max(fallbacks, default=0) <= 1:
                assert same, (alpha, seed, fallbacks)
                checked += 1
            differ += not same
    assert checked >= 60
    if k >= 5:
        assert differ  # the branch was reached somewhere, and there the split now differs


def test_default_redraw_is_unchanged_where_the_fallback_is_never_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through ``partition`` with the default ``min_size = 10`` redraw (several draws from one stream)."""
    import importlib

    module = importlib.import_module("chillfl.data.partition")
    labels = np.random.default_rng(7).integers(0, 10, 800)
    for alpha in (0.1, 0.5, 5.0):
        for seed in range(4):
            new = partition("dirichlet_balanced", labels, 10, np.random.default_rng(seed), {"alpha": alpha})
            fallbacks: list[int] = []
            with monkeypatch.context() as m:
                m.setattr(module, "_balanced_by_class", lambda *a: old_balanced_by_class(*a, fallbacks=fallbacks))
                old = partition("dirichlet_balanced", labels, 10, np.random.default_rng(seed), {"alpha": alpha})
            assert max(fallbacks, default=0) <= 1
            assert all(np.array_equal(a, b) for a, b in zip(old.client_indices, new.client_indices))

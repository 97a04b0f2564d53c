"""Partitioners: hand-checked rounding helpers, invariants, skew trends and every error path."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest
import torch

from chillfl.data.datasets import ArrayDataset
from chillfl.data.partition import (
    PARTITIONERS,
    _fill_clients,
    allocate_counts,
    partition,
    partitioner_names,
    proportional_counts,
    split_by_proportions,
)
from chillfl.errors import ConfigError

# 10 classes x 60 samples, interleaved so that label order != index order.
LABELS = np.tile(np.arange(10), 60)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def counts_of(part: Any, labels: np.ndarray = LABELS, classes: int = 10) -> np.ndarray:
    return np.stack([np.bincount(labels[ix], minlength=classes) for ix in part.client_indices])


def mean_normalised_entropy(counts: np.ndarray) -> float:
    """Mean over clients of H(p_i) / log(C), clients with no data skipped."""
    rows = counts[counts.sum(axis=1) > 0].astype(float)
    p = rows / rows.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.where(p > 0, p * np.log(p), 0.0).sum(axis=1)
    return float(h.mean() / np.log(counts.shape[1]))


# ---------------------------------------------------------------- helpers, by hand


def test_proportional_counts_by_hand() -> None:
    # [1,1,1] * 10/3 = 3.33 each -> floors 3,3,3 (sum 9); one unit left -> lowest index on a tie.
    assert proportional_counts(np.array([1, 1, 1]), 10).tolist() == [4, 3, 3]
    # [0.5, 0.3, 0.2] * 7 = 3.5, 2.1, 1.4 -> floors 3,2,1 (sum 6); largest fraction .5 -> index 0.
    assert proportional_counts(np.array([0.5, 0.3, 0.2]), 7).tolist() == [4, 2, 1]
    # [3, 1, 0] * 8/4 = 6, 2, 0 exactly.
    assert proportional_counts(np.array([3, 1, 0]), 8).tolist() == [6, 2, 0]
    assert proportional_counts(np.array([1.0, 2.0]), 0).tolist() == [0, 0]


def test_allocate_counts_redistributes_exhausted_classes() -> None:
    # total 10, weights .5/.5/0, available 2/20/5:
    # round 1 wants 5/5/0, class 0 capped at 2 -> 2/5/0, 3 missing;
    # round 2 only class 1 has weight and room -> +3 -> 2/8/0.
    for spill in (False, True):
        assert allocate_counts(10, np.array([0.5, 0.5, 0.0]), np.array([2, 20, 5]), spill=spill).tolist() == [2, 8, 0]
    # total 10, weight only on class 0 which has 4: 4/0/0, 6 missing.
    # spill=True spreads the 6 over what is left (0, 3, 5): 6 * 3/8 = 2.25, 6 * 5/8 = 3.75
    # -> floors 2, 3 (sum 5), the extra unit to the larger fraction .75 -> 2, 4.
    assert allocate_counts(10, np.array([1.0, 0, 0]), np.array([4, 3, 5]), spill=True).tolist() == [4, 2, 4]
    assert allocate_counts(10, np.array([1.0, 0, 0]), np.array([4, 3, 5]), spill=False).tolist() == [4, 0, 0]


def test_split_by_proportions_by_hand() -> None:
    # n = 10, p = .25/.25/.5: cumulative cuts floor(2.5) = 2, floor(5.0) = 5 -> sizes 2, 3, 5.
    chunks = split_by_proportions(np.arange(10), np.array([0.25, 0.25, 0.5]))
    assert [c.tolist() for c in chunks] == [[0, 1], [2, 3, 4], [5, 6, 7, 8, 9]]


# ---------------------------------------------------------------- invariants of every partitioner

CASES: list[tuple[str, dict[str, Any], bool]] = [  # name, options, uses every sample
    ("iid", {}, True),
    ("dirichlet", {"alpha": 0.3}, True),
    ("dirichlet", {"alpha": 0.3, "scheme": "client"}, False),
    ("dirichlet_balanced", {"alpha": 0.3}, True),
    ("dirichlet_balanced", {"alpha": 0.3, "scheme": "client"}, True),
    ("dirichlet_balanced", {"alpha": 0.3, "frac": 0.5}, False),
    ("shards", {"shard_size": 30, "shards_per_client": 2}, False),
    ("quantity_skew", {"h": 0.5}, True),
    ("quantity_skew", {"h": 0.5, "label_alpha": 0.3}, True),
    ("feature_noise", {}, True),
]


@pytest.mark.parametrize("name,options,full", CASES)
def test_partition_invariants(name: str, options: dict[str, Any], full: bool) -> None:
    part = partition(name, LABELS, 8, rng(1), options)
    flat = np.concatenate(part.client_indices)
    assert len(part.client_indices) == 8
    assert len(np.unique(flat)) == len(flat), "an index is given to two clients"
    assert flat.min() >= 0 and flat.max() < len(LABELS)
    assert (len(flat) == len(LABELS)) if full else (len(flat) <= len(LABELS))
    assert all(ix.dtype == np.int64 and np.all(np.diff(ix) > 0) for ix in part.client_indices)
    again = partition(name, LABELS, 8, rng(1), options)
    assert all(np.array_equal(a, b) for a, b in zip(part.client_indices, again.client_indices))
    other = partition(name, LABELS, 8, rng(2), options)
    assert not all(np.array_equal(a, b) for a, b in zip(part.client_indices, other.client_indices))


def test_partitioner_registry_lists_all() -> None:
    assert partitioner_names() == sorted(
        ["iid", "dirichlet", "dirichlet_balanced", "shards", "quantity_skew", "feature_noise", "natural", "flexchill_dirichlet", "scarlet_dirichlet", "flwr"]
    )


def test_iid_sizes_equal() -> None:
    # 600 samples / 7 clients = 85 r 5 -> five clients of 86, two of 85.
    sizes = partition("iid", LABELS, 7, rng()).sizes
    assert sorted(sizes.tolist()) == [85, 85, 86, 86, 86, 86, 86]


# ---------------------------------------------------------------- label skew grows as alpha shrinks

SKEWED = [
    ("dirichlet", "alpha", {}),
    ("dirichlet", "alpha", {"scheme": "client"}),
    ("dirichlet_balanced", "alpha", {}),
    ("dirichlet_balanced", "alpha", {"scheme": "client"}),
    ("quantity_skew", "label_alpha", {"h": 5.0}),
]


@pytest.mark.parametrize("name,key,extra", SKEWED)
def test_label_skew_grows_as_alpha_shrinks(name: str, key: str, extra: dict[str, Any]) -> None:
    def entropy(alpha: float) -> float:
        parts = [partition(name, LABELS, 10, rng(s), {key: alpha, **extra}) for s in range(5)]
        return float(np.mean([mean_normalised_entropy(counts_of(p)) for p in parts]))

    low, high = entropy(0.05), entropy(100.0)
    assert low < 0.5 < 0.9 < high


def test_dirichlet_min_size_is_met() -> None:
    part = partition("dirichlet", LABELS, 10, rng(3), {"alpha": 0.2, "min_size": 20})
    assert part.sizes.min() >= 20


def test_dirichlet_client_scheme_follows_its_formula() -> None:
    # FLex&Chill: n_k^(i) = floor(|D_k| p_k^(i)), column scaled by 1/sum_i p_k^(i) when > 1.
    part = partition("dirichlet", LABELS, 4, rng(4), {"alpha": 1.0, "scheme": "client"})
    p = part.class_proportions
    assert p is not None and p.shape == (4, 10)
    expected = np.floor(60 * p / np.maximum(p.sum(axis=0), 1.0))
    assert np.array_equal(counts_of(part), expected.astype(np.int64))


def test_dirichlet_client_scheme_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    # FLex&Chill App. (Dirichlet): p^(i) ~ Dir(alpha) per client, n_k^(i) = floor(|D_k| p_k^(i)); chillfl scales an
    # over-subscribed class column by 1 / sum_i p_k^(i). Proportions injected, so every count is worked out here.
    # 3 classes x 10 samples; client 0: p = (0.5, 0.5, 0), client 1: p = (0.7, 0.1, 0.2).
    # class 0: sum 1.2 > 1 -> floor(10 * 0.5 / 1.2) = floor(4.17) = 4, floor(10 * 0.7 / 1.2) = floor(5.83) = 5
    # class 1: sum 0.6 -> floor(5.0) = 5, floor(1.0) = 1; class 2: sum 0.2 -> 0, floor(2.0) = 2
    rows = iter([np.array([0.5, 0.5, 0.0]), np.array([0.7, 0.1, 0.2])])
    module = sys.modules[partition.__module__]  # chillfl.data re-exports the function partition under the module's name
    monkeypatch.setattr(module, "dirichlet", lambda rng_, alpha, size: next(rows))
    labels = np.tile(np.arange(3), 10)
    part = partition("dirichlet", labels, 2, rng(0), {"alpha": 1.0, "scheme": "client"})
    assert counts_of(part, labels, 3).tolist() == [[4, 5, 0], [5, 1, 2]]
    # without overlap: 17 distinct samples, 13 left unused by the floors and the scaling
    used = np.concatenate(part.client_indices)
    assert len(used) == len(set(used.tolist())) == 17


def test_dirichlet_class_scheme_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    # Per class (Wang et al. 2020 / NIID-Bench "noniid-labeldir" without its N / K cap): q ~ Dir(alpha * 1) over the
    # clients, class k's shuffled samples cut at floor(n_k * cumsum(q)). 2 classes x 10 samples, 3 clients:
    # class 0, q = (.25, .25, .5): cuts floor(2.5) = 2, floor(5.0) = 5 -> 2, 3, 5;
    # class 1, q = (.65, .05, .3): cuts floor(6.5) = 6, floor(7.0) = 7 -> 6, 1, 3 (client 0 ends with 8: no cap).
    calls = _inject_proportions(monkeypatch, [[0.25, 0.25, 0.5], [0.65, 0.05, 0.3]])
    labels = np.tile(np.arange(2), 10)
    part = partition("dirichlet", labels, 3, rng(0), {"alpha": 1.0})
    assert counts_of(part, labels, 2).tolist() == [[2, 6], [3, 1], [5, 3]]
    assert calls == [3, 3] and part.class_proportions is None


def test_dirichlet_redraws_until_min_size(monkeypatch: pytest.MonkeyPatch) -> None:
    # FedMA / NIID-Bench's rule (min_require_size = 10, here 4): redraw the whole split until every client holds >= 4.
    # Draw 1: both classes all to client 0 -> sizes 20, 0: redrawn. Draw 2: q = (.5, .5) for both -> 10, 10.
    calls = _inject_proportions(monkeypatch, [[1.0, 0.0]] * 2 + [[0.5, 0.5]] * 2)
    labels = np.tile(np.arange(2), 10)
    part = partition("dirichlet", labels, 2, rng(0), {"alpha": 1.0, "min_size": 4})
    assert counts_of(part, labels, 2).tolist() == [[5, 5], [5, 5]] and len(calls) == 4


# ---------------------------------------------------------------- dirichlet_balanced


def test_dirichlet_balanced_client_scheme_sizes_and_frac() -> None:
    client = {"alpha": 0.1, "scheme": "client"}
    full = partition("dirichlet_balanced", LABELS, 7, rng(5), client)
    assert full.sizes.max() - full.sizes.min() <= 1 and full.sizes.sum() == 600
    # 600 / 8 = 75 per client; frac .2 keeps floor(75 * .2 + .5) = 15.
    part = partition("dirichlet_balanced", LABELS, 8, rng(5), {**client, "frac": 0.2})
    assert part.sizes.tolist() == [15] * 8


def test_dirichlet_balanced_near_uniform_alpha_gives_exact_shares() -> None:
    # alpha = 1e6 -> p_i ~ (0.1, ..., 0.1); 600 / 2 = 300 per client -> 300 * 0.1 = 30 of each class.
    part = partition("dirichlet_balanced", LABELS, 2, rng(6), {"alpha": 1e6, "scheme": "client"})
    assert counts_of(part).tolist() == [[30] * 10, [30] * 10]
    # per class, q ~ (0.5, 0.5) cuts each class's 60 at floor(60 q_0): 29 or 30 (float q_0 just under or over .5).
    by_class = counts_of(partition("dirichlet_balanced", LABELS, 2, rng(6), {"alpha": 1e6}))
    assert by_class.sum(axis=0).tolist() == [60] * 10 and np.abs(by_class - 30).max() <= 1


def test_dirichlet_balanced_defaults_are_fedchills_partition() -> None:
    # FedChill Sec. 4.2.2 and the code it cites (FedHKD / NIID-Bench): per class, redrawn until >= 10 samples each.
    opts = PARTITIONERS["dirichlet_balanced"].options()  # the options dataclass with its defaults
    assert (opts.scheme, opts.min_size, opts.alpha, opts.frac) == ("class", 10, 0.5, 1.0)


def _inject_proportions(monkeypatch: pytest.MonkeyPatch, rows: list[list[float]]) -> list[int]:
    """Make the partitioner draw these proportions in order; returns a list that counts the draws."""
    calls: list[int] = []
    it = iter(np.array(r) for r in rows)
    module = sys.modules[partition.__module__]

    def drawn(rng_: np.random.Generator, alpha: float, size: int) -> np.ndarray:
        calls.append(size)
        return next(it)

    monkeypatch.setattr(module, "dirichlet", drawn)
    return calls


def test_dirichlet_balanced_class_scheme_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    # 3 classes x 4 samples, 2 clients: N / K = 6. Every class draws q = (0.75, 0.25) over the clients.
    # class 0: cut floor(4 * .75) = 3 -> 3, 1 (held 3, 1); class 1: 3, 1 (held 6, 2);
    # class 2: client 0 already holds 6 >= N / K -> q = (0, .25) / .25 = (0, 1) -> 0, 4 (held 6, 6).
    calls = _inject_proportions(monkeypatch, [[0.75, 0.25]] * 3)
    labels = np.repeat(np.arange(3), 4)
    part = partition("dirichlet_balanced", labels, 2, rng(0), {"alpha": 1.0, "min_size": 0})
    assert counts_of(part, labels, 3).tolist() == [[3, 3, 0], [1, 1, 4]]
    assert calls == [2, 2, 2] and part.class_proportions is None


def test_dirichlet_balanced_class_scheme_redraws_until_min_size(monkeypatch: pytest.MonkeyPatch) -> None:
    # Draw 1 gives client 0 all of classes 0 and 1 (held 8, 0), then class 2 all to client 1: sizes 8, 4 < 5 -> redraw.
    # Draw 2 is the by-hand draw above: sizes 6, 6.
    calls = _inject_proportions(monkeypatch, [[1.0, 0.0]] * 3 + [[0.75, 0.25]] * 3)
    labels = np.repeat(np.arange(3), 4)
    part = partition("dirichlet_balanced", labels, 2, rng(0), {"alpha": 1.0, "min_size": 5})
    assert counts_of(part, labels, 3).tolist() == [[3, 3, 0], [1, 1, 4]] and len(calls) == 6


def test_dirichlet_balanced_min_size_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    labels = np.repeat(np.arange(3), 4)
    with pytest.raises(ConfigError, match=r"partition\.min_size: min_size \* num_clients = 14 exceeds the 12"):
        partition("dirichlet_balanced", labels, 2, rng(0), {"min_size": 7})
    with pytest.raises(ConfigError, match=r"partition\.min_size: 7 exceeds the 6 samples of the smallest client"):
        partition("dirichlet_balanced", labels, 2, rng(0), {"min_size": 7, "scheme": "client"})
    _inject_proportions(monkeypatch, [[1.0, 0.0]] * 9)
    with pytest.raises(ConfigError, match=r"partition\.min_size: no draw gave every client >= 5 samples in 3 tries"):
        partition("dirichlet_balanced", labels, 2, rng(0), {"min_size": 5, "max_retries": 3})


def test_fill_clients_moves_exhausted_class_to_others() -> None:
    # Two clients of 10 that both want only class 0, which has 12 samples (class 1 has 8):
    # whoever is filled first gets 10 of class 0; the other gets the 2 left + 8 of class 1.
    labels = np.array([0] * 12 + [1] * 8)
    pools = [np.arange(12), np.arange(12, 20)]
    clients = _fill_clients(np.array([10, 10]), np.array([[1.0, 0.0], [1.0, 0.0]]), pools, rng(0))
    got = sorted(np.bincount(labels[c], minlength=2).tolist() for c in clients)
    assert got == [[2, 8], [10, 0]]
    assert len(np.unique(np.concatenate(clients))) == 20


# ---------------------------------------------------------------- shards


def test_shards_exact_counts_and_classes() -> None:
    labels = np.repeat(np.arange(10), 100)  # shard size 50 divides every class: no straddling
    part = partition("shards", labels, 9, rng(7), {"shard_size": 50, "shards_per_client": 2})
    assert part.sizes.tolist() == [100] * 9
    assert all((c > 0).sum() <= 2 for c in counts_of(part, labels))
    assert all(np.all(c % 50 == 0) for c in counts_of(part, labels))


def test_shards_default_size() -> None:
    # shard_size unset: 600 // (5 * 3) = 40 -> each client 3 * 40 = 120.
    part = partition("shards", LABELS, 5, rng(), {"shards_per_client": 3})
    assert part.sizes.tolist() == [120] * 5


def test_shards_mcmahan_two_shards_of_n_over_2k() -> None:
    # McMahan et al. 2017: sort by label, cut into 2K shards of N / (2K), two per client. 600 samples, K = 10:
    # shards of 30, each inside one class (60 per class), so a client holds 1 or 2 classes, 30 or 60 of each.
    part = partition("shards", LABELS, 10, rng(1))
    counts = counts_of(part)
    assert part.sizes.tolist() == [60] * 10 and counts.sum(axis=0).tolist() == [60] * 10
    assert all(set(c[c > 0].tolist()) <= {30, 60} and 1 <= (c > 0).sum() <= 2 for c in counts)


# ---------------------------------------------------------------- quantity skew


def test_quantity_skew_sizes_vary_more_as_h_shrinks() -> None:
    def cv(h: float) -> float:
        sizes = [partition("quantity_skew", LABELS, 10, rng(s), {"h": h}).sizes for s in range(8)]
        return float(np.mean([s.std() / s.mean() for s in sizes]))

    assert cv(0.1) > 1.0 > 0.2 > cv(1000.0)


def test_quantity_skew_min_size() -> None:
    part = partition("quantity_skew", LABELS, 20, rng(8), {"h": 0.05, "min_size": 10})
    assert part.sizes.min() >= 10 and part.sizes.sum() == 600


def test_quantity_skew_niid_bench_redraw_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    # NIID-Bench "iid-diff-quantity": p ~ Dir(h) over clients, redrawn until every client holds >= min_size, then the
    # shuffled indices are cut at floor(N * cumsum(p)). N = 600, min_size 10:
    # draw 1 p = (.99, .01, 0): sizes 594, 6, 0 -> redraw; draw 2 p = (.5, .3, .2): cuts 300, 480 -> 300, 180, 120.
    calls = _inject_proportions(monkeypatch, [[0.99, 0.01, 0.0], [0.5, 0.3, 0.2]])
    part = partition("quantity_skew", LABELS, 3, rng(0), {"h": 0.5, "min_size": 10, "min_rule": "redraw"})
    assert part.sizes.tolist() == [300, 180, 120] and calls == [3, 3]
    assert len(np.unique(np.concatenate(part.client_indices))) == 600


def test_quantity_skew_floor_rule_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    # Default rule: min_size each, then Dir(h) shares of the rest: 10 + (.5, .3, .2) * 570 = 295, 181, 124.
    _inject_proportions(monkeypatch, [[0.5, 0.3, 0.2]])
    part = partition("quantity_skew", LABELS, 3, rng(0), {"h": 0.5, "min_size": 10})
    assert part.sizes.tolist() == [295, 181, 124]


def test_quantity_skew_redraw_gives_up_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    _inject_proportions(monkeypatch, [[1.0, 0.0]] * 3)
    # the hint names quantity_skew's own concentration, h (it has no alpha)
    with pytest.raises(ConfigError, match=r"partition\.min_size: no draw gave every client >= 10 samples in 3 tries; lower min_size or raise h$"):
        partition("quantity_skew", LABELS, 2, rng(0), {"min_size": 10, "min_rule": "redraw", "max_retries": 3})


# ---------------------------------------------------------------- feature noise


def test_feature_noise_linear_sigmas_by_hand() -> None:
    # 3 clients over [0.1, 0.3] evenly: 0.1, 0.2, 0.3.
    part = partition("feature_noise", LABELS, 3, rng(), {"sigma_min": 0.1, "sigma_max": 0.3})
    assert part.client_noise == pytest.approx([0.1, 0.2, 0.3])


def test_feature_noise_niid_bench_levels_by_hand() -> None:
    # NIID-Bench noise-based feature skew (its code): party i of N gets sigma * i / (N - 1), i = 0..N-1; with
    # sigma_min = 0, sigma_max = sigma: 4 parties, sigma = 0.3 -> 0, 0.1, 0.2, 0.3.
    part = partition("feature_noise", LABELS, 4, rng(), {"sigma_min": 0.0, "sigma_max": 0.3})
    assert part.client_noise == pytest.approx([0.0, 0.1, 0.2, 0.3])


def test_feature_noise_random_sigmas_in_range() -> None:
    part = partition("feature_noise", LABELS, 50, rng(), {"sigma_min": 0.2, "sigma_max": 0.5, "spacing": "random"})
    sig = np.array(part.client_noise)
    assert sig.min() >= 0.2 and sig.max() <= 0.5 and len(np.unique(sig)) == 50


# ---------------------------------------------------------------- natural


def _grouped_dataset(groups: tuple[np.ndarray, ...] | None) -> ArrayDataset:
    y = torch.arange(6) % 2
    return ArrayDataset("toy", torch.zeros(6, 2), y, torch.zeros(2, 2), torch.zeros(2, dtype=torch.int64), 2, train_groups=groups)


def test_natural_uses_dataset_groups() -> None:
    ds = _grouped_dataset((np.array([0, 1]), np.array([2, 3, 4, 5])))
    part = partition("natural", ds.y_train.numpy(), 2, rng(), dataset=ds)
    assert [ix.tolist() for ix in part.client_indices] == [[0, 1], [2, 3, 4, 5]]


# ---------------------------------------------------------------- errors name their field

ERRORS: list[tuple[str, dict[str, Any], int, str]] = [
    ("nope", {}, 4, "partition.name"),
    ("iid", {"alpha": 1.0}, 4, "partition.alpha"),
    ("dirichlet", {"alpha": 0.0}, 4, "partition.alpha"),
    ("dirichlet", {"alpha": -1.0}, 4, "partition.alpha"),
    ("dirichlet", {"alpha": "big"}, 4, "partition.alpha"),
    ("dirichlet", {"alpha": 0.5, "min_size": 200}, 4, "partition.min_size"),
    ("dirichlet", {"alpha": 0.01, "min_size": 100, "max_retries": 3}, 6, "partition.min_size"),
    ("dirichlet", {"scheme": "rows"}, 4, "partition.scheme"),
    ("dirichlet_balanced", {"frac": 0.0}, 4, "partition.frac"),
    ("dirichlet_balanced", {"frac": 1.5}, 4, "partition.frac"),
    ("dirichlet_balanced", {"alpha": 0.0}, 4, "partition.alpha"),
    ("shards", {"shard_size": 100, "shards_per_client": 2}, 4, "partition.shards_per_client"),
    ("shards", {"shard_size": 0}, 4, "partition.shard_size"),
    ("shards", {"shards_per_client": 0}, 4, "partition.shards_per_client"),
    ("quantity_skew", {"h": 0.0}, 4, "partition.h"),
    ("quantity_skew", {"label_alpha": 0.0}, 4, "partition.label_alpha"),
    ("quantity_skew", {"min_size": 200}, 4, "partition.min_size"),
    ("feature_noise", {"sigma_min": -0.1}, 4, "partition.sigma_min"),
    ("feature_noise", {"sigma_min": 0.3, "sigma_max": 0.1}, 4, "partition.sigma_max"),
    ("iid", {}, 0, "federation.num_clients"),
    ("iid", {}, 601, "federation.num_clients"),
    ("natural", {}, 4, "partition.name"),
]


@pytest.mark.parametrize("name,options,clients,field", ERRORS)
def test_errors_name_the_field(name: str, options: dict[str, Any], clients: int, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        partition(name, LABELS, clients, rng(), options)
    assert info.value.field == field


def test_unknown_partitioner_lists_allowed() -> None:
    with pytest.raises(ConfigError, match="allowed: dirichlet, dirichlet_balanced, feature_noise"):
        partition("diriclet", LABELS, 4, rng())


def test_natural_client_count_must_match() -> None:
    ds = _grouped_dataset((np.array([0, 1]), np.array([2, 3, 4, 5])))
    with pytest.raises(ConfigError) as info:
        partition("natural", ds.y_train.numpy(), 3, rng(), dataset=ds)
    assert info.value.field == "federation.num_clients" and "2 natural clients" in info.value.message
    with pytest.raises(ConfigError) as info:
        partition("natural", ds.y_train.numpy(), 2, rng(), dataset=_grouped_dataset(None))
    assert info.value.field == "partition.name"


# ---------------------------------------------------------------- which Dirichlet: moments of the draws


def _share_moments(shares: np.ndarray) -> tuple[float, float]:
    return float(shares.mean()), float(shares.var())


def test_dirichlet_class_scheme_is_dir_alpha_one_over_clients() -> None:
    # Per class, q ~ Dir(alpha * 1_K) over K clients: E[q_i] = 1/K, Var[q_i] = (1/K)(1 - 1/K) / (K alpha + 1).
    # K = 4, alpha = 0.5: mean .25, var .1875 / 3 = .0625. 400 samples a class keep the floor error < 1/400.
    # 60 seeded draws x 10 classes x 4 clients; the sample variance's spread at this size is ~ 8 %: 20 % tolerance.
    labels = np.tile(np.arange(10), 400)
    shares = np.concatenate([counts_of(partition("dirichlet", labels, 4, rng(s), {"alpha": 0.5}), labels).T / 400 for s in range(60)])
    mean, var = _share_moments(shares)
    assert mean == pytest.approx(0.25, abs=1e-3) and var == pytest.approx(0.0625, rel=0.2)


def test_per_client_scheme_is_dir_alpha_one_over_classes() -> None:
    # Per client, p_i ~ Dir(alpha * 1_C) over C classes (not Hsu's Dir(alpha p) = Dir(alpha / C)): C = 10, alpha = 1:
    # Var[p_ic] = .1 * .9 / 11 = .00818 (Hsu's reading would give .09 / 2 = .045). class_proportions are the draws.
    props = np.concatenate([partition("dirichlet_balanced", LABELS, 5, rng(s), {"alpha": 1.0, "scheme": "client"}).class_proportions for s in range(40)])
    mean, var = _share_moments(props)
    assert mean == pytest.approx(0.1, abs=1e-9) and var == pytest.approx(0.09 / 11, rel=0.2)

"""Hand-worked facts of the partitioners that a mutation audit (session 82) found unpinned.

Each test kills one or more small mutations of ``chillfl.data.partition`` / ``client_rows`` / ``partition_file`` that the
older tests let through (flipped comparisons, floor vs round, a dropped normalisation or shuffle, a fixed order where
the docstring promises a random one). Exact integer facts only: no tolerance.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from chillfl.data import ArrayDataset, partition
from chillfl.data.client_rows import ClientRows
from chillfl.data.partition import _fill_clients, _subsample, client_inner_dirichlet, dirichlet, flexchill_split, split_by_proportions
from chillfl.data.partition_file import labels_digest, read_partition
from chillfl.errors import ConfigError

LABELS = np.tile(np.arange(10), 60)


def _inject(monkeypatch: pytest.MonkeyPatch, rows: list[list[float]]) -> list[int]:
    """Make the partitioner's Dirichlet draws these rows, in order; the returned list counts the draws."""
    calls: list[int] = []
    it = iter(np.array(r) for r in rows)

    def drawn(rng_: np.random.Generator, alpha: float, size: int) -> np.ndarray:
        calls.append(size)
        return next(it)

    monkeypatch.setattr(sys.modules[partition.__module__], "dirichlet", drawn)
    return calls


def _counts(part: object, labels: np.ndarray, classes: int) -> list[list[int]]:
    return [np.bincount(labels[ix], minlength=classes).tolist() for ix in part.client_indices]  # type: ignore[attr-defined]


def _dataset(y_train: np.ndarray, y_test: np.ndarray, classes: int) -> ArrayDataset:
    return ArrayDataset("toy", torch.zeros(len(y_train), 2), torch.from_numpy(y_train), torch.zeros(len(y_test), 2), torch.from_numpy(y_test), classes)


# ---------------------------------------------------------------- rounding and normalisation


def test_split_by_proportions_floors_the_cumulative_cut() -> None:
    # NIID-Bench / FedMA: cut at floor(n * cumsum(p)). n = 10, p = (.37, .63): 3.7 -> 3 (round would give 4).
    assert [len(c) for c in split_by_proportions(np.arange(10), np.array([0.37, 0.63]))] == [3, 7]


def test_subsample_keeps_round_half_up_of_frac_n() -> None:
    # dirichlet_balanced ``frac``: round(frac * n_i) samples, half up: 5 * .5 = 2.5 -> 3 (floor would keep 2).
    labels = np.zeros(5, dtype=np.int64)
    assert len(_subsample(np.arange(5), labels, 0.5, 1)) == 3
    # 7 * .3 = 2.1 -> 2; at least one kept: 1 * .3 -> 1.
    assert len(_subsample(np.arange(7), np.zeros(7, dtype=np.int64), 0.3, 1)) == 2
    assert len(_subsample(np.arange(1), np.zeros(1, dtype=np.int64), 0.3, 1)) == 1


def test_balanced_by_class_renormalises_over_the_clients_below_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # FedChill Sec. 4.2.2 via NIID-Bench's balanced split: a client at >= N / K gets no share, the others' shares are
    # renormalised. 6 of class 0 then 4 of class 1, 3 clients: N / K = 3.33.
    # class 0: q = (1, 0, 0) -> 6, 0, 0 (client 0 now capped); class 1: q = (.5, .25, .25) -> (0, .25, .25) / .5
    # = (0, .5, .5): cuts floor(0) = 0, floor(4 * .5) = 2 -> 0, 2, 2 (unnormalised the cut is floor(1.0) -> 0, 1, 3).
    _inject(monkeypatch, [[1.0, 0.0, 0.0], [0.5, 0.25, 0.25]])
    labels = np.array([0] * 6 + [1] * 4)
    part = partition("dirichlet_balanced", labels, 3, np.random.default_rng(0), {"alpha": 1.0, "min_size": 0})
    assert _counts(part, labels, 2) == [[6, 0], [0, 2], [0, 2]]


def test_degenerate_dirichlet_draw_is_one_hot_at_a_random_class() -> None:
    # alpha -> 0 limit: a NaN draw becomes one-hot at rng.integers(size), not always at class 0.
    class Stub:
        def dirichlet(self, alpha: np.ndarray) -> np.ndarray:
            return np.full(len(alpha), np.nan)

        def integers(self, n: int) -> int:
            return 2

    assert dirichlet(Stub(), 1e-9, 4).tolist() == [0.0, 0.0, 1.0, 0.0]  # type: ignore[arg-type]


# ---------------------------------------------------------------- min_size and its redraw


def test_redraw_accepts_a_draw_that_meets_min_size_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    # FedMA / NIID-Bench redraw while min size < min_require_size: a client at exactly min_size is accepted.
    # 2 classes x 10, q = (.5, .5) for both -> sizes 10, 10 with min_size 10: one draw (two Dirichlet calls).
    # The bound min_size * K = 20 = N is possible, not refused.
    calls = _inject(monkeypatch, [[0.5, 0.5]] * 2)
    labels = np.tile(np.arange(2), 10)
    part = partition("dirichlet", labels, 2, np.random.default_rng(0), {"alpha": 1.0, "min_size": 10, "max_retries": 1})
    assert part.sizes.tolist() == [10, 10] and calls == [2, 2]


def test_one_sample_per_client_is_allowed() -> None:
    # num_clients == N is the edge of "must be <= the number of training samples".
    part = partition("iid", LABELS, 600, np.random.default_rng(0))
    assert part.sizes.tolist() == [1] * 600


def test_flexchill_accepts_a_class_of_exactly_min_samples_per_client() -> None:
    # The refusal is for fewer than min_samples * num_clients; exactly that many gives every client min_samples.
    y = np.array([0] * 50 + [1] * 20)
    part = partition("flexchill_dirichlet", y, 2, np.random.default_rng(0), {"min_samples": 10, "seed": 1}, dataset=_dataset(y, y, 2))
    assert [c[1] for c in _counts(part, y, 2)] == [10, 10]


# ---------------------------------------------------------------- shuffles and orders the docstring promises


def test_class_pools_are_shuffled_before_the_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    # Per-class split: the class's samples are shuffled, then cut; client 0's 5 of class 0's 10 are not always the 5
    # lowest indices. Fixed q = (.5, .5); over 8 seeds client 0 gets some other set.
    labels = np.zeros(10, dtype=np.int64)
    got = set()
    for seed in range(8):
        _inject(monkeypatch, [[0.5, 0.5]])
        got.add(tuple(partition("dirichlet", labels, 2, np.random.default_rng(seed), {"alpha": 1.0}).client_indices[0].tolist()))
    assert len(got) > 1


def test_fill_clients_order_is_random() -> None:
    # "Clients are filled in a random order so that no client id is systematically last": two clients that both want
    # only class 0 (12 samples, class 1 has 8); the one filled first gets 10 of class 0. Over 16 seeds, both do.
    labels = np.array([0] * 12 + [1] * 8)
    firsts = set()
    for seed in range(16):
        pools = [np.arange(12), np.arange(12, 20)]
        clients = _fill_clients(np.array([10, 10]), np.array([[1.0, 0.0], [1.0, 0.0]]), pools, np.random.default_rng(seed))
        firsts.add(int(np.argmax([np.sum(labels[c] == 0) for c in clients])))
    assert firsts == {0, 1}


def test_scarlet_test_split_continues_the_train_stream() -> None:
    # SCARLET (FedLab client-inner Dirichlet): one default_rng(seed): priors, then the train split, then the test split
    # with the same priors on the same stream, continued (not a fresh stream).
    y = np.random.default_rng(0).integers(0, 3, 90)
    yt = np.random.default_rng(1).integers(0, 3, 30)
    part = partition("scarlet_dirichlet", y, 3, np.random.default_rng(9), {"alpha": 0.5, "seed": 4}, dataset=_dataset(y, yt, 3))
    ref = np.random.default_rng(4)
    priors = ref.dirichlet([0.5] * 3, size=3)
    client_inner_dirichlet(y, 3, 3, priors, ref)
    test = client_inner_dirichlet(yt, 3, 3, priors, ref)
    assert [t.tolist() for t in part.client_test_indices or []] == [np.sort(t).tolist() for t in test]


def test_num_classes_comes_from_the_dataset_when_the_top_class_is_absent() -> None:
    # A train set without its top class still splits over the dataset's C classes: p_i ~ Dir(alpha * 1_C), C = 3.
    y = np.tile(np.arange(2), 10)
    part = partition("dirichlet", y, 2, np.random.default_rng(0), {"scheme": "client"}, dataset=_dataset(y, y, 3))
    assert part.class_proportions is not None and part.class_proportions.shape == (2, 3)


# ---------------------------------------------------------------- ClientRows


def test_client_rows_negative_index_like_a_list() -> None:
    rows = ClientRows.from_lists([np.array([0, 1]), np.array([5])])
    assert rows[-2].tolist() == [0, 1] and rows[-1].tolist() == [5]
    with pytest.raises(IndexError):
        rows[-3]


# ---------------------------------------------------------------- partition.json checks, one per rule


def _write(tmp_path: Path, clients: list[list[int]], **extra: object) -> str:
    path = tmp_path / "partition.json"
    path.write_text(json.dumps({"format": "chillfl-partition", "version": 1, "train_size": 6, "clients": clients, **extra}))
    return str(path)


def test_read_partition_checks_each_rule(tmp_path: Path) -> None:
    none = np.zeros(0, dtype=np.int64)
    ok = read_partition({"from": _write(tmp_path, [[2, 0], [5]])}, 6, 2, none)
    assert [o.tolist() for o in ok.clients] == [[0, 2], [5]] and ok.noise is None

    def field_error(clients: list[list[int]], k: int = 2, public: np.ndarray = none) -> str:
        with pytest.raises(ConfigError) as err:
            read_partition({"from": _write(tmp_path, clients)}, 6, k, public)
        assert err.value.field == "partition.from"
        return err.value.message

    assert "has 2 clients; federation.num_clients is 3" in field_error([[0], [1]], k=3)
    assert "must be in [0, 5]" in field_error([[0], [6]])
    assert "to two clients" in field_error([[0, 1], [1]])
    assert "public pool" in field_error([[0], [1]], public=np.array([1]))


def test_labels_digest_is_of_little_endian_int64() -> None:
    # The same labels as int32 and int64 are the same rows: the digest is taken of their int64 form.
    y = np.array([3, 1, 2])
    assert labels_digest(y.astype(np.int32)) == labels_digest(y.astype(np.int64))


# ---------------------------------------------------------------- second batch


def test_flexchill_test_minimum_is_min_samples_times_test_over_train() -> None:
    # The authors' code: min_test = min_samples * N_test // N_train, the product first: 2 * 20 // 30 = 1 (2 * (20 // 30)
    # would be 0). alpha = 1e-3 gives one client all of the Dirichlet mass, so the other holds exactly the minimums:
    # 2 train, 1 test.
    train, test = flexchill_split(np.zeros(30, dtype=np.int64), np.zeros(20, dtype=np.int64), 2, 1, 1e-3, 2, 0)
    assert min(len(t) for t in train) == 2 and min(len(t) for t in test) == 1


def test_balanced_by_class_fallback_redraws_over_the_clients_below_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # A class whose whole Dirichlet mass lands on capped clients is drawn again over the clients below N / K (the
    # reference code divides 0 by 0; an equal split there was the IID extreme). 6 of class 0, 4 of class 1, 3 clients:
    # N / K = 3.33. class 0: q = (1, 0, 0) -> 6, 0, 0; class 1: q = (1, 0, 0) masked to 0 -> redrawn over clients 1
    # and 2: (.25, .75) -> 0, 1, 3.
    calls = _inject(monkeypatch, [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.25, 0.75]])
    labels = np.array([0] * 6 + [1] * 4)
    part = partition("dirichlet_balanced", labels, 3, np.random.default_rng(0), {"alpha": 1.0, "min_size": 0})
    assert _counts(part, labels, 2) == [[6, 0], [0, 1], [0, 3]] and calls == [3, 3, 2]


def test_quantity_skew_with_label_skew_keeps_each_clients_size(monkeypatch: pytest.MonkeyPatch) -> None:
    # PA3Fed "Experimental Setup": sizes ~ Dir(h) and class mixes skewed too. The floor rule by hand:
    # 10 + (.5, .3, .2) * 570 = 295, 181, 124, and client i keeps its size whatever its class mix.
    _inject(monkeypatch, [[0.5, 0.3, 0.2]] + [[0.1] * 10] * 3)
    part = partition("quantity_skew", LABELS, 3, np.random.default_rng(0), {"h": 0.5, "min_size": 10, "label_alpha": 1.0})
    assert part.sizes.tolist() == [295, 181, 124]
    assert len(np.unique(np.concatenate(part.client_indices))) == 600


def test_shards_leave_the_label_sorted_tail_unused() -> None:
    # McMahan et al. / FLex&Chill Sec. 4: sort by label, cut shards from the start; the samples beyond
    # num_shards * shard_size (the end of the sorted order) are unused. 7 samples, shards of 3: [0,0,0], [1,1,1].
    labels = np.array([2, 0, 1, 0, 1, 0, 1])
    part = partition("shards", labels, 1, np.random.default_rng(0), {"shard_size": 3, "shards_per_client": 2})
    assert part.client_indices[0].tolist() == [1, 2, 3, 4, 5, 6]


def test_quantity_skew_clients_get_shuffled_indices() -> None:
    # IID labels: each client's samples are a random subset, not a contiguous run of the dataset's order.
    part = partition("quantity_skew", LABELS, 3, np.random.default_rng(0), {"h": 5.0})
    first = part.client_indices[0]
    assert first.tolist() != list(range(len(first)))


def test_allocate_counts_stops_instead_of_looping_when_a_pass_places_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every pass of allocate_counts places at least one sample; two mutations of its share rule (an exhausted class
    # keeping its weight, the spill spread uniformly) made a pass place none, and the loop then never ended: the suite
    # hung instead of failing. A pass that places nothing now raises.
    import importlib

    module = importlib.import_module("chillfl.data.partition")  # the package exports a function of the same name
    assert module.allocate_counts(5, np.array([0.5, 0.5]), np.array([1, 9]), spill=False).tolist() == [1, 4]
    monkeypatch.setattr(module, "proportional_counts", lambda share, need: np.zeros(len(share), dtype=np.int64))
    with pytest.raises(RuntimeError, match="placed nothing of the 5 samples"):
        module.allocate_counts(5, np.array([0.5, 0.5]), np.array([1, 9]), spill=False)

"""The authors' own partitioners: FLex&Chill (legacy RandomState, min per class) and SCARLET (FedLab's client-inner Dirichlet)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from chillfl.data import ArrayDataset, build_federated_data, partition
from chillfl.data.partition import client_inner_dirichlet, flexchill_split
from chillfl.errors import ConfigError


def _dataset(y_train: np.ndarray, y_test: np.ndarray, classes: int) -> ArrayDataset:
    return ArrayDataset("toy", torch.zeros(len(y_train), 2), torch.from_numpy(y_train), torch.zeros(len(y_test), 2), torch.from_numpy(y_test), classes)


def test_flexchill_split_by_hand():
    y = np.array([0, 0, 0, 0, 1, 1, 1, 1, 0, 0])  # class 0: 0,1,2,3,8,9; class 1: 4,5,6,7  (N_train = 10)
    yt = np.array([0, 1, 0, 1])  # class 0: 0,2; class 1: 1,3                               (N_test = 4)
    # Step RandomState(3) by hand, in the authors' order.
    rs = np.random.RandomState(3)
    d = rs.dirichlet([1.0, 1.0], 2)  # [classes, clients]
    np.testing.assert_allclose(d, [[0.39388042, 0.60611958], [0.32467279, 0.67532721]], atol=1e-8)
    order = []
    for idx in ([0, 1, 2, 3, 8, 9], [0, 2], [4, 5, 6, 7], [1, 3]):  # class 0 train, test; class 1 train, test
        a = np.array(idx)
        rs.shuffle(a)
        order.append(a.tolist())
    assert order == [[0, 8, 1, 2, 3, 9], [2, 0], [7, 4, 6, 5], [3, 1]]
    # m = 1, k = 2. Train: take m + int(d * (n_l - m k)); test: m*4//10 = 0 + int(d * (t_l - (1*2*4)//10 = t_l)).
    # class 0 train (rest 4): client 0: 1 + int(1.58) = 2 -> [0, 8]; client 1: 1 + int(2.42) = 3 -> [1, 2, 3]
    # class 0 test  (rest 2): client 0: int(0.79) = 0 -> [];    client 1: int(1.21) = 1 -> [2]
    # class 1 train (rest 2): client 0: 1 + int(0.65) = 1 -> [7]; client 1: 1 + int(1.35) = 2 -> [4, 6]
    # class 1 test  (rest 2): client 0: int(0.65) = 0 -> [];    client 1: int(1.35) = 1 -> [3]
    train, test = flexchill_split(y, yt, 2, 2, 1.0, 1, 3)
    assert [sorted(t.tolist()) for t in train] == [[0, 7, 8], [1, 2, 3, 4, 6]]
    assert [sorted(t.tolist()) for t in test] == [[], [2, 3]]


def test_flexchill_partition_is_the_legacy_global_stream_and_leaves_it_untouched():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 5, 600)
    yt = rng.integers(0, 5, 120)
    before = np.random.get_state()[1].copy()
    part = partition("flexchill_dirichlet", y, 6, np.random.default_rng(1), {"alpha": 0.3, "seed": 7}, dataset=_dataset(y, yt, 5))
    assert np.array_equal(np.random.get_state()[1], before)  # the global state is never read or moved
    # The authors seed the global stream: np.random.seed(7) then np.random.dirichlet / shuffle gives the same first draw.
    state = np.random.get_state()
    try:
        np.random.seed(7)
        d_global = np.random.dirichlet([0.3] * 6, 5)
    finally:
        np.random.set_state(state)
    assert np.array_equal(d_global, np.random.RandomState(7).dirichlet([0.3] * 6, 5))
    counts = np.stack([np.bincount(y[ix], minlength=5) for ix in part.client_indices])
    assert counts.min() >= 10  # the authors' minimum per class and client
    flat = np.concatenate(part.client_indices)
    assert len(np.unique(flat)) == len(flat)  # disjoint
    assert part.client_test_indices is not None and len(part.client_test_indices) == 6
    # the partitioner's seed alone decides the split: the chillfl stream passed in is not used when seed is set
    again = partition("flexchill_dirichlet", y, 6, np.random.default_rng(99), {"alpha": 0.3, "seed": 7}, dataset=_dataset(y, yt, 5))
    assert all(np.array_equal(a, b) for a, b in zip(part.client_indices, again.client_indices))


def test_flexchill_refuses_a_class_below_the_minimum():
    y = np.array([0] * 50 + [1] * 15)
    with pytest.raises(ConfigError) as err:
        partition("flexchill_dirichlet", y, 2, np.random.default_rng(0), {"min_samples": 10}, dataset=_dataset(y, y, 2))
    assert err.value.field == "partition.min_samples" and "class 1 has 15" in err.value.message


def test_scarlet_client_inner_dirichlet_by_hand():
    y = np.array([0, 0, 1, 1, 1, 0])  # class 0: [0, 1, 5]; class 1: [2, 3, 4]; 2 clients of 6 // 2 = 3 samples
    rng = np.random.default_rng(1)
    priors = rng.dirichlet([1.0, 1.0], size=2)
    np.testing.assert_allclose(np.cumsum(priors, axis=1)[:, 0], [0.77672304, 0.93618325], atol=1e-8)
    got = client_inner_dirichlet(y, 2, 2, priors, rng)
    # Step the same stream by hand (cid = integers(2); u = uniform(); class = first cumsum >= u):
    ref = np.random.default_rng(1)
    ref.dirichlet([1.0, 1.0], size=2)
    assert ref.integers(2) == 1 and ref.uniform() <= 0.936  # client 1, class 0 -> last unused of [0,1,5]: 5 -> slot 2
    assert ref.integers(2) == 0 and ref.uniform() <= 0.777  # client 0, class 0 -> 1 -> slot 2
    assert ref.integers(2) == 1 and ref.uniform() <= 0.936  # client 1, class 0 -> 0 -> slot 1 (class 0 exhausted)
    assert ref.integers(2) == 1 and ref.uniform() <= 0.936  # client 1, class 0 empty:
    assert ref.integers(2) == 1  # ... redraw -> class 1 -> last of [2,3,4]: 4 -> slot 0 (client 1 full)
    assert ref.integers(2) == 1 and ref.integers(2) == 1  # client 1 full: drawn again, twice
    assert ref.integers(2) == 0 and ref.uniform() > 0.777  # client 0, class 1 -> 3 -> slot 1
    assert ref.integers(2) == 0 and ref.uniform() <= 0.777  # client 0, class 0 empty:
    assert ref.integers(2) == 0 and ref.integers(2) == 1  # ... redraws 0 (empty), 1 -> 2 -> slot 0
    assert [t.tolist() for t in got] == [[2, 3, 1], [4, 0, 5]]


def test_scarlet_partition_sizes_and_test_split():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 403)
    yt = rng.integers(0, 4, 81)
    part = partition("scarlet_dirichlet", y, 5, np.random.default_rng(1), {"alpha": 0.5, "seed": 3}, dataset=_dataset(y, yt, 4))
    assert part.sizes.tolist() == [80] * 5  # int(403 / 5) each, the remainder unused
    assert [len(t) for t in part.client_test_indices or []] == [16] * 5
    flat = np.concatenate(part.client_indices)
    assert len(np.unique(flat)) == len(flat)
    # priors come first from default_rng(seed), and the test split reuses them
    assert part.class_proportions is not None
    assert np.array_equal(part.class_proportions, np.random.default_rng(3).dirichlet([0.5] * 4, size=5))


def test_seed_unset_derives_from_the_run_stream():
    y = np.random.default_rng(0).integers(0, 3, 300)
    ds = _dataset(y, y[:60], 3)
    a = partition("scarlet_dirichlet", y, 3, np.random.default_rng(1), {}, dataset=ds)
    b = partition("scarlet_dirichlet", y, 3, np.random.default_rng(1), {}, dataset=ds)
    c = partition("scarlet_dirichlet", y, 3, np.random.default_rng(2), {}, dataset=ds)
    assert all(np.array_equal(u, v) for u, v in zip(a.client_indices, b.client_indices))
    assert any(not np.array_equal(u, v) for u, v in zip(a.client_indices, c.client_indices))


def test_client_split_partition_uses_the_authors_test_split():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300).astype(np.int64)
    yt = rng.integers(0, 3, 90).astype(np.int64)
    ds = _dataset(y, yt, 3)
    opts = {"alpha": 1.0, "min_samples": 5, "seed": 11}
    data = build_federated_data(ds, num_clients=3, partitioner="flexchill_dirichlet", partition_options=opts, seed=0, client_eval="partition")
    _, test = flexchill_split(y, yt, 3, 3, 1.0, 5, 11)
    assert all(np.array_equal(a, np.sort(b)) for a, b in zip(data.eval_indices, test))
    with pytest.raises(ConfigError) as err:
        build_federated_data(ds, num_clients=3, partitioner="iid", partition_options={}, seed=0, client_eval="partition")
    assert err.value.field == "eval.client_split"


@pytest.mark.parametrize(
    "name, options, field",
    [
        ("flexchill_dirichlet", {"alpha": 0}, "partition.alpha"),
        ("flexchill_dirichlet", {"seed": -1}, "partition.seed"),
        ("flexchill_dirichlet", {"min_samples": -2}, "partition.min_samples"),
        ("scarlet_dirichlet", {"alpha": -1.0}, "partition.alpha"),
        ("scarlet_dirichlet", {"beta": 1.0}, "partition.beta"),
    ],
)
def test_bad_options(name, options, field):
    y = np.arange(100) % 2
    with pytest.raises(ConfigError) as err:
        partition(name, y, 2, np.random.default_rng(0), options, dataset=_dataset(y, y, 2))
    assert err.value.field == field

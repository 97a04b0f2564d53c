"""FederatedData: determinism, public pool, client eval splits, feature noise, report and errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from chillfl.data.datasets import ArrayDataset
from chillfl.data.federated import _proportional_eval, build_federated_data
from chillfl.data.show import describe, plot_class_heatmap
from chillfl.errors import ConfigError


def toy(n_train: int = 600, n_test: int = 400, dim: int = 64, groups: bool = False) -> ArrayDataset:
    """Random inputs, labels cycling over 5 classes (test: 80 per class)."""
    gen = torch.Generator().manual_seed(0)
    train_groups = test_groups = None
    if groups:
        train_groups = tuple(np.arange(i, n_train, 3) for i in range(3))
        test_groups = tuple(np.arange(i, n_test, 3) for i in range(3))
    return ArrayDataset(
        "toy",
        torch.randn(n_train, dim, generator=gen),
        torch.arange(n_train) % 5,
        torch.randn(n_test, dim, generator=gen),
        torch.arange(n_test) % 5,
        5,
        train_groups,
        test_groups,
    )


def build(ds: ArrayDataset | None = None, **kw: Any) -> Any:
    args: dict[str, Any] = dict(num_clients=6, partitioner="dirichlet", partition_options={"alpha": 0.5}, seed=3)
    args.update(kw)
    return build_federated_data(ds if ds is not None else toy(), **args)


def test_same_seed_same_split_and_noise() -> None:
    kw = dict(partitioner="feature_noise", partition_options=None, public_size=30)
    a, b, c = build(**kw), build(**kw), build(seed=4, **kw)
    for x, y in ((a.train_indices, b.train_indices), (a.eval_indices, b.eval_indices)):
        assert all(np.array_equal(i, j) for i, j in zip(x, y))
    assert np.array_equal(a.public_indices, b.public_indices)
    assert torch.equal(a.client_train(2)[0], b.client_train(2)[0])
    assert torch.equal(a.client_train(2)[0], a.client_train(2)[0])  # fixed per client across calls
    assert not all(np.array_equal(i, j) for i, j in zip(a.train_indices, c.train_indices))
    assert not torch.equal(a.client_train(2)[0], c.client_train(2)[0])


def test_public_pool_is_removed_before_partitioning() -> None:
    fd = build(partitioner="iid", partition_options=None, public_size=60)
    train = np.concatenate(fd.train_indices)
    assert len(fd.public_indices) == 60 and fd.public().shape == (60, 64)
    assert np.intersect1d(train, fd.public_indices).size == 0
    assert np.array_equal(np.sort(np.concatenate([train, fd.public_indices])), np.arange(600))
    assert torch.equal(fd.public(), fd.dataset.x_train[torch.from_numpy(fd.public_indices)])
    assert build(public_size=0).public().shape == (0, 64)


def test_client_tensors_and_counts() -> None:
    fd = build()
    x, y = fd.client_train(1)
    idx = torch.from_numpy(fd.train_indices[1])
    assert torch.equal(x, fd.dataset.x_train[idx]) and torch.equal(y, fd.dataset.y_train[idx])
    counts = fd.class_counts()
    assert counts.shape == (6, 5) and counts.sum() == 600
    assert counts[1].tolist() == np.bincount(y.numpy(), minlength=5).tolist()
    assert fd.num_clients == 6 and fd.num_classes == 5
    assert fd.test()[0] is fd.dataset.x_test


def test_a_client_owning_a_contiguous_range_gets_a_view() -> None:
    fd = build()
    fd.train_indices[2] = np.arange(10, 40, dtype=np.int64)  # rows 10..39: no copy needed
    x, y = fd.client_train(2)
    assert x._base is not None and x.data_ptr() == fd.dataset.x_train[10].data_ptr()
    assert torch.equal(x, fd.dataset.x_train[10:40]) and torch.equal(y, fd.dataset.y_train[10:40])
    fd.train_indices[3] = np.array([10, 11, 13], dtype=np.int64)  # a gap: gathered copy
    x3, _ = fd.client_train(3)
    assert torch.equal(x3, fd.dataset.x_train[[10, 11, 13]]) and x3.data_ptr() != fd.dataset.x_train[10].data_ptr()


# ---------------------------------------------------------------- proportional client eval


def test_proportional_eval_by_hand() -> None:
    test_labels = np.repeat(np.arange(3), 10)  # 10 test samples per class
    gen = np.random.default_rng(0)
    # train counts 3:1:0 and size 8 -> 6 of class 0, 2 of class 1, none of class 2.
    (split,) = _proportional_eval(np.array([[3, 1, 0]]), test_labels, 8, 3, gen)
    assert np.bincount(test_labels[split], minlength=3).tolist() == [6, 2, 0]
    # counts 1:1 and size 24 -> wants 12/12; both classes have only 10 -> 10/10, a smaller split
    # (class 2 has no training data, so it never fills the gap).
    (split,) = _proportional_eval(np.array([[1, 1, 0]]), test_labels, 24, 3, gen)
    assert np.bincount(test_labels[split], minlength=3).tolist() == [10, 10, 0]
    # no training data -> empty split.
    (split,) = _proportional_eval(np.array([[0, 0, 0]]), test_labels, 8, 3, gen)
    assert split.size == 0
    # training classes the test set lacks (class 3 here) -> an empty split, not a crash (a real test set may miss a class).
    (split,) = _proportional_eval(np.array([[0, 0, 0, 4]]), test_labels, 8, 4, gen)
    assert split.size == 0 and split.dtype == np.int64


def test_proportional_eval_matches_train_proportions() -> None:
    fd = build(client_eval_size=50)
    y_test = fd.dataset.y_test.numpy()
    for cid, counts in enumerate(fd.class_counts()):
        ev = fd.eval_indices[cid]
        assert len(np.unique(ev)) == len(ev) == 50  # no repeats within a client
        got = np.bincount(y_test[ev], minlength=5)
        expected = counts / counts.sum() * 50
        assert np.all(np.abs(got - expected) < 1.0), (got, expected)  # rounding moves < 1 per class
        assert torch.equal(fd.client_eval(cid)[1], fd.dataset.y_test[torch.from_numpy(ev)])


def test_drawn_proportions_option() -> None:
    options = {"alpha": 0.5, "scheme": "client"}  # the scheme that draws a class mix per client
    fd = build(partitioner="dirichlet_balanced", partition_options=options, eval_proportions="drawn", client_eval_size=40)
    assert fd.class_proportions is not None
    y_test = fd.dataset.y_test.numpy()
    for cid in range(6):
        got = np.bincount(y_test[fd.eval_indices[cid]], minlength=5)
        assert np.all(np.abs(got - fd.class_proportions[cid] * 40) < 1.0)


def test_drawn_proportions_without_drawn_mix_is_one_line_error() -> None:
    # scheme "class" splits each class over clients: no client has a drawn class mix, and "drawn" must not quietly mean "train".
    with pytest.raises(ConfigError, match=r"^eval_proportions: 'drawn' needs .*'dirichlet_balanced'") as err:
        build(partitioner="dirichlet_balanced", partition_options={"alpha": 0.5}, eval_proportions="drawn")
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"^eval_proportions: "):
        build(partitioner="iid", partition_options=None, eval_proportions="drawn")
    build(partitioner="iid", partition_options=None, eval_proportions="drawn", client_eval="none")  # no proportional split: nothing to draw


def test_client_eval_none_and_natural() -> None:
    fd = build(client_eval="none")
    assert all(e.size == 0 for e in fd.eval_indices) and fd.client_eval(0)[0].shape == (0, 64)
    ds = toy(groups=True)
    nat = build(ds, num_clients=3, partitioner="natural", partition_options=None, client_eval="natural", public_size=30)
    assert all(np.array_equal(e, g) for e, g in zip(nat.eval_indices, ds.test_groups or ()))
    # natural train groups lose exactly the public samples and keep everything else.
    for train, group in zip(nat.train_indices, ds.train_groups or ()):
        assert np.array_equal(train, np.setdiff1d(group, nat.public_indices))


# ---------------------------------------------------------------- feature noise


def test_feature_noise_has_the_client_sigma() -> None:
    ds = toy(n_train=1200, dim=256)
    fd = build(ds, num_clients=3, partitioner="feature_noise", partition_options={"sigma_min": 0.1, "sigma_max": 0.5})
    assert fd.noise == pytest.approx([0.1, 0.3, 0.5])
    for cid, sigma in enumerate(fd.noise):
        clean = ds.x_train[torch.from_numpy(fd.train_indices[cid])]
        diff = fd.client_train(cid)[0] - clean  # 400 x 256 = 102400 draws: std error ~0.2%
        assert float(diff.std()) == pytest.approx(sigma, rel=0.02)
        assert abs(float(diff.mean())) < 0.01
        ev_clean = ds.x_test[torch.from_numpy(fd.eval_indices[cid])]
        assert float((fd.client_eval(cid)[0] - ev_clean).std()) == pytest.approx(sigma, rel=0.1)
    assert torch.equal(fd.test()[0], ds.x_test)  # the server's test set stays clean


# ---------------------------------------------------------------- report


def test_describe_and_heatmap(tmp_path: Path) -> None:
    fd = build(partitioner="feature_noise", partition_options=None, public_size=12)
    text = describe(fd)
    lines = text.splitlines()
    assert "6 clients" in lines[0] and "public pool 12" in lines[0] and lines[0].endswith("test set 400")
    # a validation split leaves the test metrics 300 of the 400 test samples: the summary says so
    assert describe(build(validation=0.25)).splitlines()[0].endswith("test set 300, validation 100")
    assert lines[1].split()[:4] == ["client", "train", "eval", "sigma"]
    total = lines[-2].split()
    # the legend: the eval total (600) exceeds the test set (400), which read as a miscount without it
    assert lines[-1].startswith("train: the client's training rows; eval: its own evaluation rows (eval.client_split), drawn from the test set")
    assert lines[-1].endswith("; sigma: its feature noise; c0..c4: its training rows per class"), lines[-1]
    assert total[0] == "total" and int(total[1]) == 588 and int(total[2]) == 600
    path = tmp_path / "heat.png"
    plot_class_heatmap(fd.class_counts(), path, title="toy")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_describe_lists_the_first_and_last_clients_past_its_limit() -> None:
    """10,000 clients printed 10,001 rows: past ``max_clients`` the table keeps the first and last rows, says how many
    it left out, and its totals still count every client."""
    fd = build(num_clients=50, partitioner="iid", partition_options=None)
    lines = describe(fd, max_clients=6).splitlines()
    ids = [line.split()[0] for line in lines[2:-1]]  # the last line is the legend
    assert ids == ["0", "1", "2", "...", "47", "48", "49", "total"]
    assert "44 clients not shown" in lines[5]
    assert int(lines[-2].split()[1]) == sum(len(t) for t in fd.train_indices)
    every = describe(fd, max_clients=None).splitlines()
    assert [line.split()[0] for line in every[2:-2]] == [str(c) for c in range(50)] and every[-2] == lines[-2]
    assert len(describe(fd).splitlines()) == 2 + 40 + 1 + 1 + 1  # the default: 40 rows, the "..." line, the totals, the legend
    assert describe(build(), max_clients=6) == describe(build(), max_clients=None)  # 6 clients: none left out
    assert describe(build(), max_clients=5) == describe(build(), max_clients=None)  # one left out would cost the "..." line
    assert "2 clients not shown" in describe(build(), max_clients=4)


# ---------------------------------------------------------------- errors

ERRORS: list[tuple[dict[str, Any], str]] = [
    ({"client_eval": "local"}, "eval.client_split"),
    ({"client_eval": "natural"}, "eval.client_split"),
    ({"client_eval_size": 0}, "eval.client_split_size"),
    ({"public_size": 600}, "distillation.public_size"),
    ({"public_size": -1}, "distillation.public_size"),
    ({"num_clients": 0}, "federation.num_clients"),
    ({"num_clients": 591, "public_size": 10}, "federation.num_clients"),
    ({"seed": -1}, "seed"),
    ({"partitioner": "nope"}, "partition.name"),
    ({"partition_options": {"alpha": -1.0}}, "partition.alpha"),
]


@pytest.mark.parametrize("kw,field", ERRORS)
def test_errors_name_the_field(kw: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        build(**kw)
    assert info.value.field == field

"""Review of the dataset-size seam and ``chillfl list``'s unusable plugins.

A plugin's ``size`` computed with NumPy (``arr.shape[0] * 3 // 4`` of a NumPy int) was refused as not "whole counts > 0";
an unknown dataset name made the cost model raise where it had said "not priced"; and a broken entry point named like
a built-in was left out of ``chillfl list``'s unusable plugins (only a stderr warning said it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from chillfl.catalogue import dataset_size, work
from chillfl.cli import main
from chillfl.config import config_from_dict

PLUGIN = '''
from dataclasses import dataclass

import numpy as np
import torch

from chillfl import ArrayDataset
from chillfl.extend import DatasetEntry, DatasetSize


@dataclass(frozen=True)
class Options:
    rows: int = 100


def build(options, data_dir):
    x = torch.randn(options.rows, 1, 6, 6)
    y = torch.arange(options.rows) % 3
    return ArrayDataset("np", x[:75], y[:75], x[75:], y[75:], 3)


def size(options):
    n = np.int64(options.rows)
    return DatasetSize(n * 3 // 4, n - n * 3 // 4, (np.int64(1), 6, 6), np.int32(3))


NUMPY = DatasetEntry(Options, build, "real", size=size)
'''

BASE = {"name": "s", "device": "cpu", "model": {"name": "mlp"}, "partition": {"name": "iid"},
        "federation": {"num_clients": 2, "clients_per_round": 2, "rounds": 1}, "client": {"batch_size": 10}}


def test_a_size_given_in_numpy_integers_is_taken_as_python_ints(user_module: Callable[[str, str], None]) -> None:
    user_module("review1_np_sized", PLUGIN)
    size = dataset_size(config_from_dict({**BASE, "dataset": {"name": "review1_np_sized:NUMPY"}}))
    assert size is not None and tuple(size) == (75, 25, (1, 6, 6), 3)
    assert all(type(n) is int for n in (size.train, size.test, size.classes, *size.input_shape))


def test_a_dataset_the_registry_does_not_know_is_not_priced() -> None:
    config = config_from_dict({**BASE, "dataset": {"name": "review1_no_such_dataset"}})
    assert dataset_size(config) is None and work(config) is None


def test_a_broken_entry_point_named_like_a_built_in_is_listed_as_unusable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    info = tmp_path / "review1_eps-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: review1-eps\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[chillfl.plugins]\nfedavg = review1_no_such_module_xyz:Rule\n")
    os.utime(tmp_path, ns=(0, 0))  # the entry points are cached per state of the import path: this folder's is new
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines.index("unusable plugins (chillfl.plugins entry points that no part can use, and why):")
    assert any(line.startswith("  fedavg: ") and "review1_no_such_module_xyz" in line for line in lines[header + 1:])


def test_every_bundled_fixed_size_dataset_declares_its_size_in_its_spec() -> None:
    """The catalogue's name-keyed size table is gone: each dataset declares its numbers (``DatasetEntry.size``), so a dry
    run (chillfl.experiment, below the catalogue) can ask them too; CIFAR-100's classes follow ``labels``, the digits'
    split ``test_fraction`` exactly as :func:`stratified_split` makes it."""
    from chillfl.data.datasets import DATASETS, DigitsOptions, build_digits, dataset_size

    for name in ("digits", "cifar10", "cifar100", "svhn", "mnist", "fashion_mnist", "mnist1d", "femnist"):
        assert DATASETS[name].size is not None, name
    assert dataset_size({"name": "cifar100"}).classes == 100  # type: ignore[union-attr]
    assert dataset_size({"name": "cifar100", "labels": "coarse"}).classes == 20  # type: ignore[union-attr]
    for fraction in (0.2, 0.1, 0.33):
        made = build_digits(DigitsOptions(test_fraction=fraction), Path("."))
        size = dataset_size({"name": "digits", "test_fraction": fraction})
        assert size is not None and (size.train, size.test) == (len(made.y_train), len(made.y_test))
    assert dataset_size({"name": "review1_no_such_dataset"}) is None

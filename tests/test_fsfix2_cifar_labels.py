"""CIFAR batches whose labels are nested lists (``[[3], [9]]``) passed the loader, then failed in training (a
RuntimeError traceback after a round, its folder left behind) or in ``np.concatenate`` (fsfault finding 3): refused
in one line naming the file, before any run folder is made."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from chillfl.cli import main

from fake_datasets import cifar_batch
from test_damaged_files import _one_line_error
from test_fsfix_loaders import _write


def _nested(labels: list[int]) -> bytes:
    data = np.stack([np.full(3072, 10 * i, dtype=np.uint8) for i in range(len(labels))])
    return pickle.dumps({b"data": data, b"labels": [[y] for y in labels]}, protocol=2)


@pytest.mark.parametrize("bad", ["test_batch", "data_batch_3"])
def test_cifar_labels_that_are_not_one_per_image_are_refused_before_a_run_folder(bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    members = {f"cifar-10-batches-py/data_batch_{i}": cifar_batch([i - 1, i]) for i in range(1, 6)}
    members["cifar-10-batches-py/test_batch"] = cifar_batch([3, 9])
    members[f"cifar-10-batches-py/{bad}"] = _nested([3, 9])
    _write(tmp_path / "data", members)
    config = tmp_path / "c.toml"
    config.write_text('name = "c"\n')
    overrides = ["dataset.name=cifar10", "model.name=mlp", "model.hidden=[4]", "partition.name=iid", "federation.num_clients=2", "federation.rounds=1"]
    assert main(["run", str(config), "-q", "--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "out"), *overrides]) == 2
    _one_line_error(capsys, "data_dir", str(tmp_path / "data" / "cifar-10-batches-py" / bad), "labels of shape (2, 1)")
    assert not (tmp_path / "out").exists()

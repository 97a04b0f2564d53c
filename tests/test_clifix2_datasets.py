"""An empty train or test split from ``dataset.test_fraction`` is one line on that field, for digits too (it ran with an
empty test set: null metrics blamed on non-finite logits; or with an empty train set: numpy warnings, then an error on
``distillation.public_size``)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from chillfl.cli import main
from chillfl.data.datasets import load_dataset, stratified_split
from chillfl.errors import ConfigError

BASE = """name = "t"
[federation]
num_clients = 4
rounds = 1
clients_per_round = 2
[dataset]
name = "digits"
[model]
name = "mlp"
"""


def test_stratified_split_refuses_an_empty_side_by_hand() -> None:
    # 3 and 2 rows: 0.1 holds out round(0.3) = round(0.2) = 0 rows, 0.9 holds out round(2.7) = 3 and round(1.8) = 2: all of them
    labels = np.array([0, 0, 0, 1, 1])
    for fraction, side in ((0.1, "test"), (0.9, "train")):
        with pytest.raises(ConfigError) as info:
            stratified_split(labels, fraction, np.random.default_rng(0), "images")
        assert info.value.field == "dataset.test_fraction"
        assert f"{fraction} of each class's images leaves an empty train or test split of the 5 images (here the {side} split)" == info.value.message
    train, test = stratified_split(labels, 0.5, np.random.default_rng(0))  # round(1.5) = 2 and round(1.0) = 1 held out
    assert len(train) == 2 and len(test) == 3


@pytest.mark.parametrize("fraction,side", [(0.001, "test"), (0.999, "train")])
def test_digits_empty_split_is_refused_before_standardising(fraction: float, side: str) -> None:
    # digits' classes hold 174 to 183 rows: 0.001 x 183 rounds to 0 test rows, 0.999 x 174 rounds to all of them
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the empty train set's mean and std warned ten times before the error
        with pytest.raises(ConfigError) as info:
            load_dataset("digits", {"test_fraction": fraction})
    assert info.value.field == "dataset.test_fraction" and f"(here the {side} split)" in info.value.message


def test_dry_run_and_run_refuse_it_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "base.toml"
    path.write_text(BASE)
    for extra in (["--dry-run"], ["--out", str(tmp_path / "o"), "--strict"]):
        assert main(["run", str(path), *extra, "dataset.test_fraction=0.001"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == ["chillfl: error: dataset.test_fraction: 0.001 of each class's images leaves an empty train or test split "
                       "of the 1797 images (here the test split)"], err
    assert not (tmp_path / "o").exists()

"""Config fields the fuzzer (report-fuzzcfg) found accepted, blamed on another field, or refused in two lines.

1. An option squared in Python (``float ** 2`` raises OverflowError past ~1.34e154): privacy.noise_multiplier (Opacus's
   RDP), FedOpt's tau, Selective-FD's kernel_width ended as tracebacks; now refused on the field.
2. An empty training set made by a dataset option was blamed on ``distillation.public_size: must be in [0, -1]``.
4. out_dir, data_dir and distillation.state_dir took control, bidi and blank strings that ``name`` refuses.
5. out_dir set in a comparison variant was dropped silently.
6. client.lr_min = 1e300 under the constant schedule was noted as ignored, then refused.
7. device and [compare] select had no "did you mean".
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

import chillfl
from chillfl.aggregation.fedopt import FedAdamOptions
from chillfl.cli import main
from chillfl.config import check_compare_option, config_from_dict, variant_config
from chillfl.data.datasets import Mnist1dOptions, SyntheticOptions, build_synthetic
from chillfl.distillation.methods.selective_fd import SelectiveFDMethodOptions
from chillfl.errors import ConfigError
from chillfl.settings.distillation import DistillationOptions
from chillfl.tune import rule_key

BASE = """name = "fz"
[federation]
num_clients = 3
rounds = 1
[dataset]
name = "digits"
[partition]
name = "iid"
[model]
name = "mlp"
[algorithm]
name = "fedavg"
"""


def _base(tmp_path: Path) -> str:
    path = tmp_path / "base.toml"
    path.write_text(BASE)
    return str(path)


# ---- 1. squared in Python ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("options, field, factor", [
    (FedAdamOptions(tau=1e200), "algorithm.tau", 1.0),
    (SelectiveFDMethodOptions(kernel_width=1e200), "distillation.kernel_width", 2.0),
])
def test_an_option_whose_square_overflows_is_refused_on_its_field(options: object, field: str, factor: float) -> None:
    section, _, key = field.rpartition(".")
    with pytest.raises(ConfigError) as caught:
        options.validate(section)  # type: ignore[attr-defined]
    assert caught.value.field == field and "finite float64" in caught.value.message
    largest = math.sqrt(sys.float_info.max / factor)  # the bound itself squares to a finite float64 (no OverflowError)
    assert math.isfinite(factor * largest**2)
    type(options)(**{**vars(options), key: largest}).validate(section)  # accepted at the bound


def test_a_huge_noise_multiplier_is_one_line_at_dry_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The accountant's start-up probe raised OverflowError (a 70-line traceback, exit 1) even at --dry-run."""
    monkeypatch.chdir(tmp_path)
    assert main(["run", _base(tmp_path), "privacy.mechanism=dp-fedavg", "privacy.noise_multiplier=1e200", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # the one line, no traceback before it (since 2026-12-07 the float32 bound of every noise scale, far inside the
    # accountant's 2 * sigma**2 overflow that refused it before)
    assert err == ["chillfl: error: privacy.noise_multiplier: must be at most 3.403e+38 in size (the largest float32, the dtype the model "
                   "computes in: a weight or scale past it overflows the loss, gradient, weights or noise it multiplies), got 1e+200"]


# ---- 2. an empty training set named on the dataset's field ----------------------------------------------------
def test_mnist1d_train_split_that_leaves_no_training_rows_is_refused_on_it() -> None:
    with pytest.raises(ConfigError) as caught:
        Mnist1dOptions(train_split=0.0001).validate("dataset")  # int(5000 * 0.0001) = 0 rows to train
    assert caught.value.field == "dataset.train_split"
    Mnist1dOptions(train_split=0.0002).validate("dataset")  # 1 row: accepted
    Mnist1dOptions(num_samples=100, train_split=0.999).validate("dataset")  # int(99.9) = 99 train, 1 test


def test_synthetic_test_fraction_that_leaves_no_training_rows_is_refused_on_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        build_synthetic(SyntheticOptions(num_clients=3, test_fraction=0.9999), tmp_path)
    assert caught.value.field == "dataset.test_fraction"


# ---- 4. paths checked as names are ------------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["out_dir", "data_dir"])
@pytest.mark.parametrize("value", ["r\u0007\u202eX", "  ", "a\nb"])
def test_a_run_folder_path_with_control_characters_or_blank_is_refused(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_dict({key: value})
    assert caught.value.field == key


def test_a_state_dir_with_control_characters_is_refused() -> None:
    for value in ("a\u202eb", " "):
        with pytest.raises(ConfigError) as caught:
            DistillationOptions(method="fedmd", public_size=400, subset_size=100, state_dir=value).validate("distillation")
        assert caught.value.field == "distillation.state_dir"
    DistillationOptions(method="fedmd", public_size=400, subset_size=100, state_dir="states").validate("distillation")


# ---- 5. out_dir in a variant ------------------------------------------------------------------------------------
def test_out_dir_inside_a_variant_is_refused() -> None:
    base = config_from_dict({})
    with pytest.raises(ConfigError) as caught:
        variant_config(base, "out_dir=aa", {"out_dir": "aa"})
    assert caught.value.field == "out_dir" and "comparison's folder" in caught.value.message
    assert variant_config(base, "data", {"data_dir": "other"}).data_dir == "other"  # data_dir is honoured per variant


# ---- 6. an unread lr_min is noted, not refused too --------------------------------------------------------------
def test_an_lr_min_the_schedule_does_not_read_is_not_refused_after_the_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["run", _base(tmp_path), "client.lr_min=1e300", "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "this run ignores it" in err and "error" not in err


# ---- 7. did you mean --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("typed", ["cpx", "CPU"])
def test_a_device_near_miss_is_suggested(typed: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_dict({"device": typed})
    assert "(did you mean 'cpu'?)" in caught.value.message


def test_a_select_near_miss_is_suggested(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        check_compare_option("select", "bets")
    assert "(did you mean 'best'?)" in caught.value.message
    with pytest.raises(ConfigError) as caught:
        rule_key("bets")
    assert "(did you mean 'best'?)" in caught.value.message
    with pytest.raises(ConfigError) as caught:
        chillfl.compare(config=_base(tmp_path), select="bets")
    assert "(did you mean 'best'?)" in caught.value.message


def test_a_dataset_with_no_training_rows_is_named_not_public_size() -> None:
    """Any other way to an empty train set (a user's dataset) says so on 'dataset', not 'public_size: must be in [0, -1]'."""
    import torch

    from chillfl.data.datasets import ArrayDataset
    from chillfl.data.federated import build_federated_data

    empty = ArrayDataset("empty", torch.zeros((0, 2)), torch.zeros(0, dtype=torch.int64), torch.zeros((3, 2)), torch.tensor([0, 1, 0]), 2)
    with pytest.raises(ConfigError) as caught:
        build_federated_data(empty, num_clients=2, partitioner="iid", partition_options=None, seed=0)
    assert caught.value.field == "dataset" and "no training rows" in caught.value.message

"""A tuning grid over the dataset's rows (``dataset.test_fraction``, ``dataset.split_seed``, ...) is refused, as one over
``dataset.name`` or ``eval.*`` is: each point held out test (and validation) rows of its own, so selection compared
points on other rows and the table reported the chosen point's own test set. ``dataset.augment.*`` (it transforms rows,
chooses none) stays tunable."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.config import config_from_dict
from chillfl.data.augment import SECTION as AUGMENT_SECTION
from chillfl.errors import ConfigError
from chillfl.tune import parse_tune


@pytest.mark.parametrize("key", ["dataset.test_fraction", "dataset.split_seed", "dataset.train_fraction", "dataset.seed", "dataset.size"])
def test_a_grid_over_the_dataset_rows_is_refused(key: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_tune({"client.lr": [0.1], key: [1, 2]})
    assert err.value.field == f"tune.{key}" and "decides the dataset's rows" in err.value.message


def test_a_variants_own_grid_is_refused_too() -> None:
    data = {"eval": {"validation": 0.2}, "variants": {"a": {"client": {"lr": 0.1}}, "b": {"tune": {"dataset": {"split_seed": [1, 2]}}}}}
    with pytest.raises(ConfigError) as err:
        config_from_dict(data)
    assert err.value.field == "variants.b.tune.dataset.split_seed"


def test_augment_stays_tunable() -> None:
    from chillfl.tune import TRAINING_DATA_PREFIX

    assert TRAINING_DATA_PREFIX == f"{AUGMENT_SECTION}."  # the one dataset table tune lets through is the augment table
    assert len(parse_tune({"dataset.augment.flip": [True, False], "dataset.augment.crop_padding": [0, 2]})) == 4


@pytest.mark.parametrize("grid", ["dataset.test_fraction=0.2,0.3", "dataset.split_seed=0,1"])
def test_compare_ends_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], grid: str) -> None:
    path = tmp_path / "b.toml"
    path.write_text('name = "b"\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\n[eval]\nvalidation = 0.2\n')
    assert main(["compare", str(path), f"out_dir={tmp_path / 'out'}", "--tune", grid, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    key = grid.partition("=")[0]
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: tune.{key}: decides the dataset's rows"), err

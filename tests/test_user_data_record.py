"""A comparison on the user's own data cannot vary the keys that record those data (``dataset.num_classes``, ``train_size``, ``source``).

The record describes the tensors passed from Python; a grid over its keys trained every variant on the same data
and wrote a different record for each (a table of variants that did not differ). It is one line naming the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import chillfl

CONFIG: dict[str, Any] = {
    "seed": 0,
    "device": "cpu",
    "model": {"name": "mlp", "hidden": [8]},
    "partition": {"name": "iid"},
    "federation": {"num_clients": 2, "clients_per_round": 2, "rounds": 1},
    "eval": {"clients": "none"},
}


def _data() -> chillfl.TensorData:
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(60, 4, generator=gen), torch.arange(60) % 3
    return chillfl.TensorData(x[:40], y[:40], x[40:], y[40:], num_classes=3, name="mine")


@pytest.mark.parametrize(("key", "values"), [("num_classes", [3, 5]), ("train_size", [40, 20]), ("source", ["mine", "other"]), ("test_size", [20, 7])])
def test_a_grid_over_a_record_key_is_one_line_naming_it(key: str, values: list[Any], tmp_path: Path) -> None:
    with pytest.raises(chillfl.ConfigError) as err:
        chillfl.compare(data=_data(), config=CONFIG, grid={f"dataset.{key}": values}, out_dir=tmp_path / "out", progress=False)
    assert err.value.field == f"dataset.{key}" and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_grid_over_other_keys_still_runs_on_the_users_data(tmp_path: Path) -> None:
    result = chillfl.compare(data=_data(), config=CONFIG, grid={"client.lr": [0.01, 0.1]}, write=False, progress=False)
    assert len(result.rows) == 2


@pytest.mark.parametrize(("key", "value"), [("dataset.num_classes", 5), ("dataset.train_size", 7)])
def test_a_keyword_override_of_a_record_key_is_one_line_not_dropped(key: str, value: Any) -> None:
    # the record replaces a config's [dataset] table (a saved config's record is fine), but a keyword the caller gives
    # explicitly and that contradicts the data was dropped without a word
    with pytest.raises(chillfl.ConfigError) as err:
        chillfl.run(data=_data(), config=CONFIG, write=False, progress=False, **{key: value})
    assert err.value.field == key and "\n" not in str(err.value)
    same = chillfl.run(data=_data(), config=CONFIG, write=False, progress=False, **{"dataset.num_classes": 3})  # what the data hold: fine
    assert same.config.dataset["num_classes"] == 3

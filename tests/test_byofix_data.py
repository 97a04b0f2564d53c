"""A user's dataset builder's odd arrays (byodata findings 2, 3, 5, 6, 8): uint8 inputs, string labels, a huge class
id, its own public rows, a zero-width plugin layer: each is held as the built-ins hold theirs or refused in one line,
never a traceback in round 1 or a hang."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
import torch

import chillfl
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.data.datasets import load_dataset
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from plugin_modules import plugin_module

pytestmark = pytest.mark.usefixtures("one_thread")

SOURCE = '''
import numpy as np

from chillfl import ArrayDataset
from chillfl.data.datasets import DatasetEntry
from chillfl.options import NoOptions


def images(options, data_dir):
    """uint8 images [N, 1, 4, 4], the common on-disk form."""
    rng = np.random.default_rng(0)
    y = np.arange(48) % 3
    x = rng.integers(0, 256, (48, 1, 4, 4)).astype(np.uint8)
    return ArrayDataset("u8", x[:36], y[:36], x[36:], y[36:], 3)


REAL = DatasetEntry(NoOptions, images, "real")


def with_public(options, data_dir):
    """The last 10 train rows are its own public set."""
    rng = np.random.default_rng(0)
    y = np.arange(70) % 3
    x = rng.normal(2.0 * y[:, None], 1.0, (70, 4)).astype(np.float32)
    return ArrayDataset("pub", x[:60], y[:60], x[60:], y[60:], 3, public_rows=10)


def blobs(options, data_dir):
    rng = np.random.default_rng(0)
    y = np.arange(48) % 3
    x = rng.normal(2.0 * y[:, None], 1.0, (48, 4)).astype(np.float32)
    return ArrayDataset("blobs", x[:36], y[:36], x[36:], y[36:], 3)


def names(options, data_dir):
    """Class names, not ids, as labels."""
    y = np.array(["a", "b", "c"])[np.arange(12) % 3]
    x = np.zeros((12, 2), dtype=np.float32)
    return ArrayDataset("names", x[:9], y[:9], x[9:], y[9:], 3)
'''

BASE: dict[str, Any] = {
    "seed": 0, "threads": 1, "device": "cpu", "model.name": "mlp", "model.hidden": [8], "federation.num_clients": 2,
    "federation.rounds": 1, "client.batch_size": 8, "eval.client_split_size": 4,
}


def toml(table: dict[str, Any], out: Path) -> str:
    """``table`` (dotted keys) as a config file writing under ``out``."""
    lines = [f'out_dir = "{out.as_posix()}"', 'name = "byo"']
    for key, value in table.items():
        rendered = repr(value).replace("'", '"') if not isinstance(value, bool) else str(value).lower()
        lines.append(f"{key} = {rendered}")
    return "\n".join(lines) + "\n"


@pytest.fixture()
def byo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with plugin_module(tmp_path, monkeypatch, "byofix_data", SOURCE):
        yield tmp_path


# ---------------------------------------------------------------- 2. integer inputs and a built-in model


def test_uint8_inputs_of_a_real_entry_are_scaled_as_the_built_in_loaders_scale_theirs(byo: Path) -> None:
    """``DatasetEntry(..., "real")`` with uint8 images: float32 in [0, 1] (uint8 / 255, as ``_from_raw``), and an mlp
    trains on them; they met its float weights as a dtype error in round 1 (exit 1)."""
    raw = np.random.default_rng(0).integers(0, 256, (48, 1, 4, 4)).astype(np.uint8)
    ds = load_dataset("byofix_data:REAL")
    assert ds.x_train.dtype == torch.float32
    assert torch.allclose(ds.x_train, torch.from_numpy(raw[:36].astype(np.float32) / 255.0))
    build_experiment(load_config(None, {**BASE, "dataset.name": "byofix_data:REAL"}))


@pytest.mark.parametrize("model", ["mlp", "mcmahan_cnn"])
def test_uint8_inputs_of_a_plain_builder_on_a_built_in_model_are_one_line(byo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], model: str) -> None:
    """A builder function (inputs ``any``: its values decide) keeps its integers; a built-in float model is now checked
    on a batch of them as a plugin model is: one line on dataset.name, exit 2, not a traceback in round 1."""
    out = tmp_path / "out"
    path = tmp_path / "run.toml"
    path.write_text(toml(BASE, out), encoding="utf-8")
    args = ["run", str(path), "-q", 'dataset.name="byofix_data:images"', f'model.name="{model}"']
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: dataset.name:") and "fails on a batch of inputs" in err[0], err
    assert not out.exists() or not any(out.rglob("metrics.jsonl"))


# ---------------------------------------------------------------- 3. string labels


@pytest.mark.parametrize("dtype", ["<U1", "S1", "datetime64[s]"])
def test_non_numeric_arrays_from_python_are_one_line_on_their_field(dtype: str, tmp_path: Path) -> None:
    """A ``<U1`` label array reached torch.from_numpy (TypeError, exit 1 on the CLI); only dtype object was refused."""
    x = np.zeros((12, 2), dtype=np.float32)
    y = np.array(["a", "b", "c"])[np.arange(12) % 3].astype(dtype) if dtype != "datetime64[s]" else np.arange(12).astype(dtype)
    data = chillfl.TensorData(x[:9], y[:9], x[9:], np.arange(3), num_classes=3)
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=torch.nn.Linear(2, 3), data=data, config={"federation": {"num_clients": 2, "rounds": 1}}, out_dir=tmp_path / "out", progress=False)
    assert err.value.field == "data.y_train" and f"must be a numeric array, got dtype {np.dtype(dtype)}" in err.value.message
    assert "np.unique(y, return_inverse=True)" in err.value.message
    assert not (tmp_path / "out").exists()


def test_string_labels_from_a_builder_are_one_line_on_dataset_name(byo: Path) -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(load_config(None, {**BASE, "dataset.name": "byofix_data:names"}))
    assert err.value.field == "dataset.name"
    assert "returned an ArrayDataset whose y_train must be a numeric array, got dtype <U1" in err.value.message


# ---------------------------------------------------------------- 5. a huge class id


@pytest.mark.parametrize("big", [10**12, 1_440_764])
def test_a_huge_class_id_is_one_line_not_a_hang(big: int, tmp_path: Path) -> None:
    """num_classes defaults to max label + 1: a label 10**12 looped over 10**12 class pools in the partitioner (a
    hang), an ImageNet synset number ran 1.44M classes for 6 rows. Refused on data.y_train, before any partition."""
    x = torch.zeros(12, 4)
    y = torch.arange(12) % 3
    y[5] = big
    data = chillfl.TensorData(x[:9], y[:9], x[9:], y[9:])
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=torch.nn.Linear(4, 3), data=data, config={"federation": {"num_clients": 2, "rounds": 1}}, out_dir=tmp_path / "out", progress=False)
    assert err.value.field == "data.y_train" and f"labels run to {big:,} but only 4 distinct values occur" in err.value.message, err.value
    assert "np.unique(y, return_inverse=True)" in err.value.message and not (tmp_path / "out").exists()


def test_gappy_labels_within_the_bound_and_an_explicit_count_are_kept(tmp_path: Path) -> None:
    """Small gaps stay classes (max + 1), as documented; an explicit num_classes past the bound is one line."""
    x = torch.zeros(12, 4)
    y = torch.tensor([0, 1, 9, 0, 1, 9, 0, 1, 9, 0, 1, 9])
    from chillfl.data.checks import MAX_CLASSES, checked_arrays

    assert checked_arrays(x[:9], y[:9], x[9:], y[9:], None, torch.float32).num_classes == 10
    with pytest.raises(ConfigError) as err:
        checked_arrays(x[:9], y[:9], x[9:], y[9:], MAX_CLASSES + 1, torch.float32)
    assert err.value.field == "data.num_classes" and "must be at most" in err.value.message


# ---------------------------------------------------------------- 6. a builder's own public rows


def test_a_builders_public_rows_ask_for_their_own_count(byo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """public_size unset: "set both, e.g. public_size = 400"; set to another count: "(leave it unset)", which the
    first line had refused. It now says the count that runs, and that count runs."""
    path = tmp_path / "run.toml"
    path.write_text(toml(BASE, tmp_path / "out"), encoding="utf-8")
    args = ["run", str(path), "-q", 'dataset.name="byofix_data:with_public"', 'distillation.method="scarlet"', "distillation.subset_size=5",
            "distillation.server_epochs=1"]
    assert main([*args, "distillation.public_size=5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["chillfl: error: distillation.public_size: is 5; the public set that comes with the data has 10 samples: set it to 10"], err
    assert main([*args, "distillation.public_size=10"]) == 0, capsys.readouterr().err


# ---------------------------------------------------------------- 8. a zero-width plugin layer

NET = """
import math

from torch import nn


class Zero(nn.Module):
    \"\"\"A working head beside a zero-width layer (nn.Linear(F, 0), which PyTorch trains).\"\"\"

    def __init__(self, input_shape, num_classes, options, section):
        super().__init__()
        self.empty = nn.Linear(math.prod(input_shape), 0)
        self.head = nn.Linear(math.prod(input_shape), num_classes)

    def forward(self, x):
        return self.head(x.flatten(1)) + 0 * self.empty(x.flatten(1)).sum()
"""


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors is a no-op")  # torch's, building nn.Linear(4, 0)
def test_a_zero_width_layer_is_one_line_on_model_name(byo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """nn.Linear(4, 0) passed the model check, then crashed the fast SGD path's flat_rows in round 1 (exit 1)."""
    path = tmp_path / "run.toml"
    path.write_text(toml({**BASE, "dataset.name": "byofix_data:blobs"}, tmp_path / "out"), encoding="utf-8")
    with plugin_module(tmp_path, monkeypatch, "byofix_net", NET):
        assert main(["run", str(path), "-q", 'model.name="byofix_net:Zero"']) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: model.name:") and "'empty.weight' has no elements" in err[0], err

"""Datasets from outside the package, named in a config: by import path (``dataset.name = "pkg.mod:build"``) and
through ``chillfl.plugins`` entry points, resolved by :func:`chillfl.plugins.look_up` like models and partitioners.

A builder is called as the built-ins' are, ``build(options, data_dir)``, and returns an ``ArrayDataset``, checked as
data passed from Python are. The user's module is written to a temporary folder put on ``sys.path`` (a subprocess's
PYTHONPATH for the entry point): nothing is installed anywhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

from chillfl import runner
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.data.datasets import dataset_names, load_dataset
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment, check_config
from chillfl.plugins import PluginNotImported, reading_data
from chillfl.resolve import dataset_table
from chillfl.runner import MODEL, run_experiment
from plugin_modules import plugin_module
from resume_cases import check_resume

USER_DATASETS = '''
from dataclasses import dataclass

import numpy as np
import torch

from chillfl import ArrayDataset
from chillfl.data.datasets import DatasetEntry
from chillfl.errors import ConfigError


@dataclass(frozen=True)
class BlobOptions:
    samples: int = 240
    split_seed: int = 0

    def validate(self, section):
        if self.samples < 40:
            raise ConfigError(f"{section}.samples", f"must be >= 40, got {self.samples}")


def blobs(options, data_dir):
    """Three Gaussian blobs in 8 features, as float64 NumPy arrays: the check holds them as the built-ins hold theirs."""
    rng = np.random.default_rng(options.split_seed)
    y = rng.integers(0, 3, options.samples)
    x = rng.normal(2.0 * y[:, None], 1.0, (options.samples, 8))
    cut = options.samples * 3 // 4
    return ArrayDataset("blobs", x[:cut], y[:cut], x[cut:], y[cut:], 3)


blobs.Options = BlobOptions


def fixed(options, data_dir):
    """No options; remembers the folder it was given."""
    global SEEN_DIR
    SEEN_DIR = data_dir
    x = torch.arange(48, dtype=torch.float32).reshape(12, 4)
    y = torch.arange(12) % 2
    return ArrayDataset("fixed", x[:8], y[:8], x[8:], y[8:], 2)


ENTRY = DatasetEntry(BlobOptions, blobs, "real")
ODD_INPUTS = DatasetEntry(BlobOptions, blobs, "pixels")


def a_dict(options, data_dir):
    return {"x_train": torch.zeros(4, 2)}


def float_labels(options, data_dir):
    x = torch.zeros(6, 2)
    return ArrayDataset("bad", x, torch.zeros(6), x, torch.zeros(6), 2)


def labels_past_classes(options, data_dir):
    x = torch.zeros(6, 2)
    return ArrayDataset("bad", x, torch.arange(6), x, torch.arange(6), 3)


def shapes_differ(options, data_dir):
    y = torch.zeros(6, dtype=torch.int64)
    return ArrayDataset("bad", torch.zeros(6, 2), y, torch.zeros(6, 3), y, 2)


def three_args(options, data_dir, seed):
    return None
'''

BASE: dict[str, Any] = {
    "seed": 3,
    "threads": 1,
    "device": "cpu",
    "model.name": "mlp",
    "model.hidden": [16],
    "federation.num_clients": 4,
    "federation.clients_per_round": 2,
    "federation.rounds": 2,
    "client.batch_size": 16,
    "eval.client_split_size": 10,
}


@pytest.fixture()
def user_datasets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with plugin_module(tmp_path, monkeypatch, "my_fl_data", USER_DATASETS):
        yield tmp_path


def test_the_builder_gets_its_options_and_the_data_dir_and_its_arrays_are_held_as_the_built_ins(user_datasets: Path) -> None:
    table = dataset_table({"name": "my_fl_data:blobs", "samples": 80})
    assert {k: v for k, v in table.items() if k != "augment"} == {"name": "my_fl_data:blobs", "samples": 80, "split_seed": 0}  # every default
    ds = load_dataset("my_fl_data:blobs", {"samples": 80})
    assert (len(ds.y_train), len(ds.y_test), ds.num_classes, ds.input_shape) == (60, 20, 3, (8,))
    assert ds.x_train.dtype == torch.float32 and ds.y_train.dtype == torch.int64  # float64 / NumPy in, as digits' tensors out
    fixed = load_dataset("my_fl_data:fixed", data_dir=user_datasets / "data")
    assert sys.modules["my_fl_data"].SEEN_DIR == user_datasets / "data" and fixed.y_test.tolist() == [0, 1, 0, 1]
    assert load_dataset("my_fl_data:ENTRY").input_shape == (8,)  # the built-ins' form, DatasetEntry, as well


def test_a_run_from_its_saved_config_is_bitwise_the_same(user_datasets: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    first = run_experiment(load_config(None, {**BASE, "name": "a", "out_dir": str(tmp_path / "a"), "dataset.name": "my_fl_data:blobs"}), progress=False).folder
    assert first is not None
    saved = (first / "config.toml").read_text()
    assert 'name = "my_fl_data:blobs"' in saved and "samples = 240" in saved
    again = run_experiment(load_config(first / "config.toml", {"out_dir": str(tmp_path / "b")}), progress=False).folder
    assert again is not None
    assert (again / MODEL).read_bytes() == (first / MODEL).read_bytes()
    assert (again / "metrics.jsonl").read_text() == (first / "metrics.jsonl").read_text()


def test_a_run_on_a_plugin_dataset_resumes_bitwise(user_datasets: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    check_resume("algorithm.fedavg", "sequential", 1, tmp_path / "runs", monkeypatch, **{"dataset.name": "my_fl_data:blobs", "dataset.samples": 160})


def test_worker_processes_get_the_arrays_not_the_module(user_datasets: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dataset is built once, in the run's process; workers receive each client's rows (shared memory for the
    processes executor, the object store for Ray), so a module they could not import does not matter to them."""
    config = load_config(None, {**BASE, "dataset.name": "my_fl_data:blobs"})
    sequential = run_experiment(config.with_overrides({"executor": "sequential"}), write=False, progress=False).records
    load_dataset("my_fl_data:blobs")  # imported here; then its folder leaves the import path the workers start with
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(user_datasets)])
    for executor in ("vectorized", "processes"):
        records = run_experiment(config.with_overrides({"executor": executor}), write=False, progress=False).records
        assert [r["global_loss"] for r in records] == pytest.approx([r["global_loss"] for r in sequential], rel=1e-5), executor


@pytest.mark.parametrize(
    "table,field,words",
    [
        ({"name": "my_fl_data:blobs", "samples": 10}, "dataset.samples", "must be >= 40"),
        ({"name": "my_fl_data:blobs", "sample": 100}, "dataset.sample", "unknown option"),
        ({"name": "my_fl_data:fixed", "samples": 100}, "dataset.samples", "unknown option"),
        ({"name": "my_fl_data:three_args"}, "dataset.name", "build(options, data_dir)"),
        ({"name": "my_fl_data:np"}, "dataset.name", "must name a dataset"),
        ({"name": "my_fl_data:ODD_INPUTS"}, "dataset.name", "inputs must be one of 'real', 'indices', 'any', got 'pixels'"),
        ({"name": "my_fl_data:Missing"}, "dataset.name", "no attribute"),
        ({"name": "no_such_data_xyz:blobs"}, "dataset.name", "cannot import module"),
        ({"name": "my_fl_data:a_dict"}, "dataset.name", "'my_fl_data:a_dict' must return a chillfl.ArrayDataset, got"),
        ({"name": "my_fl_data:float_labels"}, "dataset.name", "whose y_train must hold integer class indices, got dtype torch.float32"),
        ({"name": "my_fl_data:labels_past_classes"}, "dataset.name", "whose y_train labels must be in 0..2 (num_classes = 3), found 0..5"),
        ({"name": "my_fl_data:shapes_differ"}, "dataset.name", "whose x_test samples have shape (3,), those of x_train (2,)"),
    ],
)
def test_bad_plugin_datasets_and_options_are_config_errors(user_datasets: Path, table: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(load_config(None, {**BASE, "dataset": table}))
    assert err.value.field == field and words in str(err.value), err.value


def test_a_public_pool_from_a_plugin_dataset_is_checked_on_its_own_key(user_datasets: Path) -> None:
    soft = {"method": "dsfl", "public_size": 40, "subset_size": 20}
    # another draw of the run's own builder (split_seed 1) shares none of its rows: it runs (the same draw is refused:
    # tests/test_byofix_public.py)
    config = load_config(None, {**BASE, "dataset.name": "my_fl_data:blobs",
                                "distillation": {**soft, "public_dataset": "my_fl_data:blobs", "public_dataset_options": {"split_seed": 1}}})
    assert check_config(config)
    with pytest.raises(ConfigError) as err:
        check_config(config.with_overrides({"distillation.public_dataset": "my_fl_data:Missing"}))
    assert err.value.field == "distillation.public_dataset" and "no attribute" in str(err.value)


def test_a_results_folder_read_as_data_imports_no_dataset_plugin(user_datasets: Path) -> None:
    with reading_data("chillfl report"), pytest.raises(PluginNotImported) as err:
        dataset_table({"name": "my_fl_data:blobs"})
    assert err.value.field == "dataset.name" and "my_fl_data" not in sys.modules


@pytest.mark.parametrize("override", ["dataset.name=no_such_data_xyz:blobs", "dataset.name=my_fl_data:a_dict", "dataset.samples=1"])
def test_the_cli_refuses_in_one_line_and_writes_nothing(user_datasets: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], override: str) -> None:
    out = tmp_path / "out"
    code = main(["run", "src/chillfl/experiments/demo.toml", "dataset.name=my_fl_data:blobs", "model.name=mlp", override, f"out_dir={out}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"{override.partition('=')[0]}:" in err[0], err
    assert not out.exists() or not any(out.iterdir())


def test_an_entry_point_dataset_is_listed_and_loads(tmp_path: Path) -> None:
    """A tiny distribution on PYTHONPATH (its .dist-info with an entry_points.txt), in a subprocess: nothing installed."""
    (tmp_path / "my_fl_data.py").write_text(USER_DATASETS)
    info = tmp_path / "chillfl_mydata-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: chillfl-mydata\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[chillfl.plugins]\nblobs = my_fl_data:blobs\ndigits = my_fl_data:fixed\n")
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(src)])}
    script = textwrap.dedent("""
        from chillfl.cli import main
        from chillfl.data import load_dataset
        assert main(["list"]) == 0
        print("loaded", load_dataset("blobs", {"samples": 80}).input_shape, load_dataset("digits").input_shape)
    """)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.replace("\n    ", " ").splitlines()
    assert any(line.startswith("datasets:") and "blobs" in line for line in lines), out.stdout
    assert not any(line.startswith(("models:", "partitioners:", "algorithms:")) and "blobs" in line for line in lines), out.stdout
    assert "loaded (8,) (1, 8, 8)" in out.stdout  # 'digits' is the built-in: the entry point of that name never runs
    assert "dataset.name: chillfl.plugins entry point 'digits' (my_fl_data:fixed) has the name of a built-in" in out.stderr
    assert "blobs" not in dataset_names() and "digits" in dataset_names()  # nothing registered in this process

"""Partitioners from outside the package, named in a config: by import path (``partition.name = "pkg.mod:split"``)
and through ``chillfl.plugins`` entry points, resolved by :mod:`chillfl.plugins` like every other part."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from plugin_modules import plugin_module

from chillfl import runner
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.data.partition import partition, partitioner_names
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.resolve import partition_table
from chillfl.runner import MODEL, run_experiment

USER_SPLITS = '''
import math
from dataclasses import dataclass

import numpy as np
from torch import nn

from chillfl.data.partition import Partition
from chillfl.errors import ConfigError


def round_robin(labels, num_clients, rng, options, section, dataset):
    """Sample i to client (i + offset) % num_clients: no randomness at all."""
    owner = (np.arange(len(labels)) + options.offset) % num_clients
    return Partition([np.flatnonzero(owner == c) for c in range(num_clients)])


@dataclass(frozen=True)
class RoundRobinOptions:
    offset: int = 1

    def validate(self, section):
        if self.offset < 0:
            raise ConfigError(f"{section}.offset", f"must be >= 0, got {self.offset}")


round_robin.Options = RoundRobinOptions


def halves(labels, num_clients, rng, options, section, dataset):
    """Without options: a seeded shuffle cut into equal parts."""
    return Partition([np.asarray(p) for p in np.array_split(rng.permutation(len(labels)), num_clients)])


def linear(input_shape, num_classes, options, section):
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))
'''

BASE: dict[str, Any] = {"seed": 3, "threads": 1, "device": "cpu", "dataset.name": "digits", "model.name": "mlp", "model.hidden": [8],
                        "federation.num_clients": 4, "federation.rounds": 2, "client.batch_size": 32}


@pytest.fixture()
def user_splits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with plugin_module(tmp_path, monkeypatch, "my_fl_splits", USER_SPLITS):
        yield tmp_path


def test_a_split_function_partitions_with_its_options(user_splits: Path) -> None:
    labels = np.zeros(10, dtype=np.int64)
    part = partition("my_fl_splits:round_robin", labels, 3, np.random.default_rng(0), {"offset": 2})
    assert [ix.tolist() for ix in part.client_indices] == [[1, 4, 7], [2, 5, 8], [0, 3, 6, 9]]  # (i + 2) % 3, by hand
    assert partition_table({"name": "my_fl_splits:round_robin"}) == {"name": "my_fl_splits:round_robin", "offset": 1}
    assert partition_table({"name": "my_fl_splits:halves"}) == {"name": "my_fl_splits:halves"}


def test_a_run_from_its_saved_config_is_bitwise_the_same(user_splits: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    cfg = load_config(None, {**BASE, "name": "a", "out_dir": str(tmp_path / "a"), "partition.name": "my_fl_splits:halves"})
    first = run_experiment(cfg, progress=False).folder
    assert 'name = "my_fl_splits:halves"' in (first / "config.toml").read_text()
    again = run_experiment(load_config(first / "config.toml", {"out_dir": str(tmp_path / "b")}), progress=False).folder
    assert (again / MODEL).read_bytes() == (first / MODEL).read_bytes()
    assert (again / "partition.json").read_text() == (first / "partition.json").read_text()


@pytest.mark.parametrize("table,field,words", [
    ({"name": "my_fl_splits:round_robin", "offset": -1}, "partition.offset", "must be >= 0"),
    ({"name": "my_fl_splits:halves", "offset": 1}, "partition.offset", "unknown option"),
    ({"name": "my_fl_splits:linear"}, "partition.name", "split(labels, num_clients, rng, options, section, dataset)"),
    ({"name": "my_fl_splits:np"}, "partition.name", "must name a partitioner"),
    ({"name": "no_such_splits_xyz:split"}, "partition.name", "cannot import module"),
])
def test_bad_plugin_partitioners_and_options_are_config_errors(user_splits: Path, table: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(load_config(None, {**BASE, "partition": table}))
    assert err.value.field == field and words in str(err.value), err.value


def test_the_cli_refuses_a_bad_import_path_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["run", "src/chillfl/experiments/demo.toml", "partition.name=no_such_splits_xyz:split", f"out_dir={out}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "partition.name:" in err[0] and "cannot import" in err[0], err
    assert not out.exists() or not any(out.iterdir())


def test_entry_points_are_listed_under_their_part(tmp_path: Path) -> None:
    """A split function (six parameters) under partitioners only, a builder function (four) under models only."""
    (tmp_path / "my_fl_splits.py").write_text(USER_SPLITS)
    info = tmp_path / "chillfl_mysplits-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: chillfl-mysplits\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[chillfl.plugins]\nrobin = my_fl_splits:round_robin\nlin_net = my_fl_splits:linear\n")
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(src)])}
    script = textwrap.dedent("""
        import numpy as np
        from chillfl.cli import main
        from chillfl.data.partition import partition
        assert main(["list"]) == 0
        print("sizes", [len(ix) for ix in partition("robin", np.zeros(7, dtype=np.int64), 2, np.random.default_rng(0)).client_indices])
    """)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.replace("\n    ", " ").splitlines()
    listed = {line.partition(":")[0]: line for line in lines if ":" in line}
    assert "robin" in listed["partitioners"] and "lin_net" not in listed["partitioners"], out.stdout
    assert "lin_net" in listed["models"] and "robin" not in listed["models"], out.stdout
    assert "sizes [3, 4]" in out.stdout  # offset 1: samples 1, 3, 5 to client 0
    assert "robin" not in partitioner_names()  # nothing registered in this process

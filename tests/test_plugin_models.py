"""Models from outside the package, named in a config: by import path (``model.name = "pkg.mod:Net"``) and through
``chillfl.plugins`` entry points, resolved by :mod:`chillfl.plugins` like every other part.

The user's module is written to a temporary folder put on ``sys.path`` (a subprocess's PYTHONPATH for the entry
point): nothing is installed anywhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterator

import pytest

from chillfl import runner
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.models.registry import build_model, model_names
from chillfl.resolve import model_table
from chillfl.runner import MODEL, run_experiment
from plugin_modules import plugin_module
from resume_cases import check_resume

USER_MODELS = '''
import math
from dataclasses import dataclass

import torch
from torch import nn

from chillfl.errors import ConfigError


class Net(nn.Module):
    """A two-layer perceptron with an option, built as the built-ins' builders are called."""

    @dataclass(frozen=True)
    class Options:
        hidden: int = 12
        bias: bool = True

        def validate(self, section):
            if self.hidden < 1:
                raise ConfigError(f"{section}.hidden", f"must be >= 1, got {self.hidden}")

    def __init__(self, input_shape, num_classes, options, section):
        super().__init__()
        self.body = nn.Linear(math.prod(input_shape), options.hidden, bias=options.bias)
        self.fc = nn.Linear(options.hidden, num_classes)

    def forward(self, x):
        return self.fc(torch.relu(self.body(x.flatten(1))))

    def head_name(self):
        return "fc"


def linear(input_shape, num_classes, options, section):
    """A factory without options."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))


def two_args(input_shape, num_classes):
    return nn.Linear(3, num_classes)
'''

BASE: dict[str, Any] = {"seed": 3, "threads": 1, "device": "cpu", "dataset.name": "digits", "federation.num_clients": 4,
                        "federation.rounds": 2, "client.batch_size": 32}


@pytest.fixture()
def user_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with plugin_module(tmp_path, monkeypatch, "my_fl_models", USER_MODELS):
        yield tmp_path


def test_the_resolved_table_keeps_the_name_as_written_with_every_default(user_models: Path) -> None:
    # projection_dim: every model's option, a plugin's too (build_model adds its head to any)
    assert model_table({"name": "my_fl_models:Net", "hidden": 5}) == {"name": "my_fl_models:Net", "hidden": 5, "bias": True, "projection_dim": 0}
    assert model_table({"name": "my_fl_models:linear"}) == {"name": "my_fl_models:linear", "projection_dim": 0}
    model = build_model("my_fl_models:Net", (1, 8, 8), 10, {"hidden": 5}, seed=0)
    assert type(model).__name__ == "Net" and model.body.out_features == 5 and model.fc.out_features == 10  # type: ignore[union-attr]


def test_a_run_from_its_saved_config_is_bitwise_the_same(user_models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    first = run_experiment(load_config(None, {**BASE, "name": "a", "out_dir": str(tmp_path / "a"), "model.name": "my_fl_models:Net"}), progress=False).folder
    assert 'name = "my_fl_models:Net"' in (first / "config.toml").read_text() and "hidden = 12" in (first / "config.toml").read_text()
    again = run_experiment(load_config(first / "config.toml", {"out_dir": str(tmp_path / "b")}), progress=False).folder
    assert (again / MODEL).read_bytes() == (first / MODEL).read_bytes()
    assert (again / "metrics.jsonl").read_text() == (first / "metrics.jsonl").read_text()


def test_a_run_on_a_plugin_model_resumes_bitwise(user_models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    check_resume("algorithm.fedavg", "sequential", 1, tmp_path / "runs", monkeypatch, **{"model.name": "my_fl_models:Net", "model.hidden": 8})


@pytest.mark.parametrize("table,field,words", [
    ({"name": "my_fl_models:Net", "hidden": 0}, "model.hidden", "must be >= 1"),
    ({"name": "my_fl_models:Net", "hiden": 3}, "model.hiden", "unknown option"),
    ({"name": "my_fl_models:linear", "hidden": 3}, "model.hidden", "unknown option"),
    ({"name": "my_fl_models:two_args"}, "model.name", "build(input_shape, num_classes, options, section)"),
    ({"name": "my_fl_models:math"}, "model.name", "must name a model"),
    ({"name": "my_fl_models:Missing"}, "model.name", "no attribute"),
    ({"name": "no_such_models_xyz:Net"}, "model.name", "cannot import module"),
])
def test_bad_plugin_models_and_options_are_config_errors(user_models: Path, table: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(load_config(None, {**BASE, "model": table}))
    assert err.value.field == field and words in str(err.value), err.value


@pytest.mark.parametrize("override,field", [("model.name=no_such_models_xyz:Net", "model.name"), ("model.hidden=0", "model.hidden")])
def test_the_cli_refuses_in_one_line_and_writes_nothing(user_models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], override: str, field: str) -> None:
    out = tmp_path / "out"
    code = main(["run", "src/chillfl/experiments/demo.toml", "model.name=my_fl_models:Net", override, f"out_dir={out}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"{field}:" in err[0], err
    assert not out.exists() or not any(out.iterdir())


def test_an_entry_point_model_is_listed_and_runs(tmp_path: Path) -> None:
    """A tiny distribution on PYTHONPATH (its .dist-info with an entry_points.txt), in a subprocess: nothing installed."""
    (tmp_path / "my_fl_models.py").write_text(USER_MODELS)
    info = tmp_path / "chillfl_mymodel-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: chillfl-mymodel\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[chillfl.plugins]\ntiny_net = my_fl_models:Net\n")
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(src)])}
    script = textwrap.dedent("""
        from chillfl.cli import main
        from chillfl.models.registry import build_model
        assert main(["list"]) == 0
        print("built", type(build_model("tiny_net", (1, 8, 8), 10, {"hidden": 3})).__name__)
    """)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.replace("\n    ", " ").splitlines()
    assert any(line.startswith("models:") and "tiny_net" in line for line in lines), out.stdout
    assert not any(line.startswith("algorithms:") and "tiny_net" in line for line in lines), out.stdout
    assert "built Net" in out.stdout
    assert "tiny_net" not in model_names() and "mlp" in model_names()  # nothing registered in this process

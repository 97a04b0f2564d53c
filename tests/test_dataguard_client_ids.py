"""Client-model files naming clients past the run's are refused as they are read.

``replay.finished_run`` and the sweeps' read-backs (a resumed comparison's finished runs, the models a sweep
let go) read ``client_models.safetensors`` without the run's client count, so a crafted file's client 7 of a
2-client run came back as a client model (``chillfl.load_run`` checked only after, the others never).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

import chillfl
from chillfl.analysis.replay import finished_run
from chillfl.api import as_dataset
from chillfl.errors import ConfigError
from chillfl.runner import RunOutput
from chillfl.storage.model_file import read_model, write_client_models, write_model
from chillfl.sweeps import resume
from chillfl.sweeps.run import Devices, Sweep
from test_revbfix_load_run import CONFIG, DATA, Watched


def _state(bias: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"fc.weight": torch.ones(2, 4), "fc.bias": bias}


def _run(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    folder = chillfl.run(model=Watched(), data=DATA, config=CONFIG, out_dir=tmp_path, name="r", progress=False).folder
    assert folder is not None
    return folder


def test_finished_run_refuses_a_client_past_the_runs_as_it_reads(tmp_path: Path) -> None:
    folder = _run(tmp_path)
    good = read_model(folder / "model.safetensors")
    write_client_models(folder / "client_models.safetensors", {0: good, 7: good})  # a 2-client run (CONFIG)
    with pytest.raises(ConfigError) as err:
        finished_run(folder, model=Watched(), dataset=as_dataset(DATA))
    assert err.value.field == "checkpoint.client_models" and "\n" not in str(err.value)
    assert "tensor '7/fc.bias' does not name one of the run's client ids 0..1" in str(err.value)
    write_client_models(folder / "client_models.safetensors", {0: good, 1: good})
    assert set(finished_run(folder, model=Watched(), dataset=as_dataset(DATA)).client_states) == {0, 1}


def test_a_resumed_sweeps_finished_run_refuses_a_client_past_the_runs(tmp_path: Path) -> None:
    done = tmp_path / "a-s0"
    done.mkdir()
    (done / "summary.json").write_text("{}")
    write_client_models(done / "client_models.safetensors", {0: _state(torch.zeros(2)), 7: _state(torch.zeros(2))})
    with pytest.raises(ConfigError, match="tensor '7/fc.bias' does not name one of the run's client ids 0..1"):
        resume.finished_run(tmp_path, "a-s0", 2)


def _sweep(folder: Path, num_clients: int) -> tuple[Sweep, RunOutput]:
    """A sweep holding one written run whose client models 0 and 1 it let go (:meth:`Sweep.keep`)."""
    sweep = Sweep(None, False, False, None, None, 1)  # type: ignore[arg-type]  # bring_back reads neither progress nor pools
    out = RunOutput(folder, [], {})
    sweep.results[("a", 0, 0)] = out
    sweep.let_go[("a", 0, 0)] = Devices("cpu", "cpu", (), ((0, ("fc.weight", "fc.bias")), (1, ("fc.weight", "fc.bias"))), num_clients)
    return sweep, out


def test_a_sweep_reading_its_client_models_back_refuses_a_client_past_the_runs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = _state(torch.zeros(2))
    write_client_models(tmp_path / "client_models.safetensors", {0: state, 1: state, 7: state})
    sweep, out = _sweep(tmp_path, 2)
    with caplog.at_level(logging.WARNING):
        sweep.bring_back([out])
    assert out.client_states == {} and "does not name one of the run's client ids 0..1" in caplog.text
    sweep, out = _sweep(tmp_path, 8)
    sweep.bring_back([out])
    assert set(out.client_states) == {0, 1}


def test_a_sweep_reading_back_a_file_without_a_client_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A file rewritten without client 1 was a KeyError traceback after the comparison's table was written."""
    write_model(tmp_path / "client_models.safetensors", {f"0/{k}": v for k, v in _state(torch.zeros(2)).items()})
    sweep, out = _sweep(tmp_path, 2)
    with caplog.at_level(logging.WARNING):
        sweep.bring_back([out])
    assert out.client_states == {} and "its file lacks 1" in caplog.text

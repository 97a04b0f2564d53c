"""``chillfl status`` of a stopped run made from Python (its config.toml records ``custom`` parts) gives the advice
``chillfl resume`` gives it: start it again with ``chillfl.run(...)``. It said "run its config.toml again", which
``chillfl run`` refuses ("model.name: 'custom' records a run on the user's own nn.Module"); a run made with the command
line keeps its line."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import torch
from torch import nn

import chillfl
from chillfl.cli import main
from chillfl.storage.run_state import FINAL_WRITE_FAILED, SINGLE_UNCHECKPOINTED, folder_state

CLI_MADE = 'name = "run"\n[model]\nname = "mlp"\n[dataset]\nname = "digits"\n'
PYTHON_MADE = 'name = "run"\n[model]\nname = "custom"\nclass = "x.M"\n[dataset]\nname = "custom"\n'


def _partial(tmp_path: Path, config: str, finished: bool = False) -> Path:
    """A single run's ``.partial`` without a checkpoint: stopped before it, or (``finished``) a final write failed."""
    folder = tmp_path / "run.partial"
    folder.mkdir()
    (folder / "config.toml").write_text(config)
    (folder / "metrics.jsonl").write_text('{"round": 1}\n')
    if finished:
        (folder / "summary.json").write_text('{"rounds": 1}')
    return folder


def _status_line(folder: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["status", str(folder)]) == 0
    return capsys.readouterr().out.splitlines()[3]


@pytest.mark.parametrize("finished", [False, True], ids=["before-checkpoint", "final-write-failed"])
def test_a_python_made_runs_status_says_start_it_again_from_python(tmp_path: Path, capsys: pytest.CaptureFixture[str], finished: bool) -> None:
    folder = _partial(tmp_path, PYTHON_MADE, finished)
    line = _status_line(folder, capsys)
    assert "it ran on your own model and data from Python: start it again with chillfl.run(...)" in line, line
    assert "config.toml" not in line, line
    assert main(["resume", str(folder)]) == 2  # what resume says of it, the same advice
    assert "it ran on your own model and data from Python: start it again with chillfl.run(...)" in capsys.readouterr().err


@pytest.mark.parametrize("finished", [False, True], ids=["before-checkpoint", "final-write-failed"])
def test_a_command_line_runs_status_says_run_its_config_again(tmp_path: Path, capsys: pytest.CaptureFixture[str], finished: bool) -> None:
    folder = _partial(tmp_path, CLI_MADE, finished)
    assert folder_state(folder, "run").detail == (FINAL_WRITE_FAILED if finished else SINGLE_UNCHECKPOINTED)
    assert "run its config.toml again" in _status_line(folder, capsys)


def test_a_config_toml_that_is_a_fifo_does_not_block_status(tmp_path: Path) -> None:
    folder = _partial(tmp_path, CLI_MADE)
    (folder / "config.toml").unlink()
    os.mkfifo(folder / "config.toml")
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(folder_state(folder, "run").detail), daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive():  # unblock the thread: a writer opens the FIFO and closes it
        os.close(os.open(folder / "config.toml", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("status opened the FIFO config.toml and blocked")
    assert got == [SINGLE_UNCHECKPOINTED]


def test_a_python_run_stopped_by_a_callback_is_continued_from_python(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its line said "`chillfl resume` continues it", which refuses a run on the user's own model."""
    from chillfl.engine.view import RunView

    class Stop:
        def on_round(self, record: dict[str, object], run: RunView) -> None:
            if record["round"] == 1:
                run.stop("no gain")

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(100, 8, generator=g), torch.randint(0, 3, (100,), generator=g)
    data = chillfl.TensorData(x[:80], y[:80], x[80:], y[80:], num_classes=3)
    config = {"federation": {"num_clients": 2, "rounds": 2}, "checkpoint": {"every": 1}}
    stopped = chillfl.run(model=nn.Linear(8, 3), data=data, config=config, callbacks=[Stop()], out_dir=tmp_path, progress=False)
    assert stopped.folder is not None
    line = _status_line(stopped.folder, capsys)
    assert "stopped (early, by a callback: no gain; chillfl.resume(...) with your own model and data continues it)" in line, line
    assert main(["resume", str(stopped.folder), "-q"]) == 2  # the command line refuses it, as the line says
    assert "chillfl.resume" in capsys.readouterr().err
    resumed = chillfl.resume(stopped.folder, model=nn.Linear(8, 3), data=data, progress=False)  # and chillfl.resume does
    assert resumed.summary["rounds"] == 2

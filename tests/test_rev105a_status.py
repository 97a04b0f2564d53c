"""What ``chillfl status`` advises for runs made from Python, in the cases rev105a found: a config run whose model is an
import path in a module named ``custom_*`` is no Python-made run (``chillfl resume`` continues it), and a Python-made
run interrupted after a checkpoint is continued from Python (``chillfl resume`` refuses it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import chillfl
from chillfl.storage.run_folder import own_from_python
from chillfl.storage.run_state import folder_state
from test_depth_status_python import _partial, _status_line


@pytest.mark.parametrize("name", ["custom_models:Net", "customs.nets:Net", "custom.py:Net"])
def test_an_import_path_starting_with_custom_is_a_config_run(tmp_path: Path, name: str) -> None:
    folder = _partial(tmp_path, f'name = "run"\n[model]\nname = "{name}"\n[dataset]\nname = "digits"\n')
    assert own_from_python(folder) is None
    assert "run its config.toml again" in folder_state(folder, "run").detail


@pytest.mark.parametrize("name", ["custom", "custom:my net"])
def test_custom_and_a_labelled_custom_are_python_made(tmp_path: Path, name: str) -> None:
    folder = _partial(tmp_path, f'name = "run"\n[model]\nname = "{name}"\n[dataset]\nname = "digits"\n')
    assert own_from_python(folder) == "model"


def _interrupted(tmp_path: Path) -> Path:
    """A run on a module and data from Python, interrupted in round 2 after its round-1 checkpoint: its ``.partial``."""
    from chillfl.engine.view import RunView

    class Interrupt:
        def on_round(self, record: dict[str, object], run: RunView) -> None:
            if record["round"] == 2:
                raise KeyboardInterrupt

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(100, 8, generator=g), torch.randint(0, 3, (100,), generator=g)
    data = chillfl.TensorData(x[:80], y[:80], x[80:], y[80:], num_classes=3)
    config = {"federation": {"num_clients": 2, "rounds": 3}, "checkpoint": {"every": 1}}
    with pytest.raises(KeyboardInterrupt):
        chillfl.run(model=nn.Linear(8, 3), data=data, config=config, callbacks=[Interrupt()], out_dir=tmp_path, progress=False)
    (folder,) = tmp_path.rglob("*.partial")
    return folder


def test_a_python_run_interrupted_after_a_checkpoint_is_continued_from_python(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its line said only "resumes after round 1, its checkpoint", while `chillfl resume` refuses it."""
    line = _status_line(_interrupted(tmp_path), capsys)
    assert "its checkpoint: chillfl.resume(...) with your own model and data continues it" in line, line


def test_a_python_comparisons_interrupted_run_is_not_sent_to_chillfl_resume(tmp_path: Path) -> None:
    """rev105b 2: a comparison's run goes on with the comparison (resume_compare), not with chillfl.resume alone."""
    from chillfl.storage.run_folder import SWEEP_FILE

    folder = _interrupted(tmp_path / "run")
    sweep = tmp_path / "cmp"
    sweep.mkdir()
    (sweep / SWEEP_FILE).write_text("{}")
    moved = folder.rename(sweep / folder.name)
    detail = folder_state(moved, "run").detail
    assert detail.startswith("resumes after round 1, its checkpoint") and "chillfl.resume(" not in detail, detail

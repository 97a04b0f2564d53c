"""Review revlate of the late merges: APFL on a persistent=False buffer, a head module aliased under a second attribute,
an older folder that kept such buffers as state, status over a sink file resume refuses, and a model with more logits
than classes under a head-reading method."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import chillfl
from chillfl.errors import ConfigError
from test_fsfix_wording import needs_fifo
from test_umfix_buffers import Cached, data

CONFIG: dict[str, Any] = {"federation": {"num_clients": 3, "rounds": 2}, "client": {"batch_size": 10, "lr": 0.05}}


def test_apfl_runs_a_model_with_a_non_persistent_buffer() -> None:
    """APFL's mixed model read every buffer from the state (v.shift): a TermError blaming MixedLoss's reads."""
    torch.manual_seed(0)
    chillfl.run(model=Cached(), data=data(), config={**CONFIG, "algorithm": {"name": "apfl"}}, write=False, progress=False)


class Aliased(nn.Module):
    def __init__(self, first: str = "fc") -> None:
        super().__init__()
        self.body = nn.Linear(8, 16)
        if first == "fc":
            self.fc = nn.Linear(16, 3)
            self.classifier = self.fc  # the head module itself under a second name
        else:
            self.classifier = nn.Linear(16, 3)
            self.fc = self.classifier

    def head_name(self) -> str:
        return "fc"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.body(x)))


@pytest.mark.parametrize("name", ["fedper", "fedrod"])
def test_a_head_module_under_a_second_name_is_no_tie(name: str) -> None:
    torch.manual_seed(0)
    chillfl.run(model=Aliased(), data=data(), config={**CONFIG, "algorithm": {"name": name}}, write=False, progress=False)


def test_a_head_registered_first_under_another_name() -> None:
    """FedPer's head keys follow the module (named_modules lists it under its first name, the state's): it was a
    ValueError traceback; FedRoD, which reads the head by its declared name, names the first one."""
    torch.manual_seed(0)
    chillfl.run(model=Aliased("classifier"), data=data(), config={**CONFIG, "algorithm": {"name": "fedper"}}, write=False, progress=False)
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=Aliased("classifier"), data=data(), config={**CONFIG, "algorithm": {"name": "fedrod"}}, write=False, progress=False)
    assert err.value.field == "model" and "registered first as 'classifier'" in err.value.message


def test_an_older_folder_that_kept_the_buffers_as_state_is_refused_for_that(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import chillfl.training.local as local

    def stop(record: dict[str, Any], run: Any) -> None:
        if record["round"] == 1:
            run.stop("pause")

    with monkeypatch.context() as old:  # as a chillfl before 2026-12-06 saved them: every buffer
        old.setattr(local, "persistent_buffers", lambda model: list(model.named_buffers()))
        torch.manual_seed(0)
        cfg = {**CONFIG, "checkpoint": {"every": 1}}
        folder = chillfl.run(model=Cached(), data=data(), config=cfg, out_dir=tmp_path, name="r", callbacks=[stop], progress=False).folder
    assert folder is not None
    with pytest.raises(ConfigError) as err:
        chillfl.resume(folder, model=Cached(), data=data(), progress=False)
    assert err.value.field == "checkpoint" and "kept the model's persistent=False buffers (shift)" in err.value.message


@needs_fifo
def test_status_says_resume_refuses_a_fifo_metrics_csv(tmp_path: Path) -> None:
    from chillfl.storage.run_state import _refused

    folder = tmp_path / "r.partial"
    folder.mkdir()
    os.mkfifo(folder / "metrics.csv")
    assert _refused(folder) == "its metrics.csv is no regular file: resume refuses it"
    (folder / "metrics.csv").unlink()
    (folder / "tensorboard").write_text("")
    assert _refused(folder) == "its tensorboard is no folder: resume refuses it"


def test_more_logits_than_classes_is_said_before_a_head_guess() -> None:
    wide = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 5))
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=wide, data=data(), config={**CONFIG, "algorithm": {"name": "fedper"}}, write=False, progress=False)
    assert err.value.field == "data.num_classes" and "outputs 5 logits per sample" in err.value.message

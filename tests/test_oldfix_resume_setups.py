"""A run resumed on another setup than its checkpoint's records the mix (``summary.json``'s ``resumed``), and a
checkpoint of a chillfl that recorded no code digest (before 2026-12-03) warns on resume: an installed chillfl (no git
commit) resuming it said nothing, though its code may be another's."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

import chillfl.runner as runner
from chillfl.config import load_config
from chillfl.environment import changes, environment, lacks_code
from chillfl.runner import resume_experiment, run_experiment
from procs import InterruptAt

CONFIG = {"name": "mix", "dataset.name": "digits", "model.name": "mlp", "model.hidden": [8], "federation.num_clients": 4,
          "federation.clients_per_round": 2, "federation.rounds": 4, "client.batch_size": 32, "checkpoint.every": 1,
          "eval.client_split_size": 20, "threads": 1, "device": "cpu"}


def recorded(**fields: Any) -> Callable[[torch.device], dict[str, Any]]:
    """``environment`` with ``fields`` replaced (a value None: the field left out, as an older chillfl's record)."""
    def env(device: torch.device) -> dict[str, Any]:
        now = environment(device)
        for key, value in fields.items():
            now.pop(key) if value is None else now.__setitem__(key, value)
        return now
    return env


def test_an_installed_chillfl_resuming_a_checkpoint_without_a_code_digest_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                               caplog: pytest.LogCaptureFixture) -> None:
    config = load_config(None, {**CONFIG, "out_dir": str(tmp_path)})
    monkeypatch.setattr(runner, "environment", recorded(code=None, git_commit=None))  # written before 2026-12-03, installed
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config, progress=False, callbacks=[InterruptAt(3)])
    now = recorded(git_commit=None)
    monkeypatch.setattr(runner, "environment", now)  # an installed chillfl of today: no git commit either
    with caplog.at_level(logging.WARNING, logger="chillfl.runner"):
        out = resume_experiment(tmp_path / "mix.partial", progress=False)
    assert any("written by a chillfl that recorded no code digest" in r.getMessage() for r in caplog.records)
    summary = json.loads((out.folder / "summary.json").read_text())
    assert summary["resumed"] == [{"round": 2, "changed": {"code": [None, now(torch.device("cpu"))["code"]]}}]


def test_each_resume_across_setups_is_recorded_in_the_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rounds 1-2 on torch "1.0", 3 on "2.0", 4 on this one: config.toml's header names the first, summary.json's
    environment the last; ``resumed`` names both changes, kept through the checkpoint between them."""
    config = load_config(None, {**CONFIG, "out_dir": str(tmp_path)})
    monkeypatch.setattr(runner, "environment", recorded(torch="1.0"))
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config, progress=False, callbacks=[InterruptAt(3)])
    monkeypatch.setattr(runner, "environment", recorded(torch="2.0"))
    with pytest.raises(KeyboardInterrupt):
        resume_experiment(tmp_path / "mix.partial", progress=False, callbacks=[InterruptAt(4)])
    monkeypatch.undo()
    out = resume_experiment(tmp_path / "mix.partial", progress=False)
    summary = json.loads((out.folder / "summary.json").read_text())
    assert summary["resumed"] == [{"round": 2, "changed": {"torch": ["1.0", "2.0"]}},
                                  {"round": 3, "changed": {"torch": ["2.0", str(torch.__version__)]}}]


def test_a_record_without_code_is_a_change_unless_one_clean_commit_names_it() -> None:
    now = {"code": "abc", "git_commit": "c1", "torch": "2"}
    assert lacks_code({"git_commit": None}, now) and lacks_code({}, now) and lacks_code({"git_commit": "c0"}, now)
    assert not lacks_code({"git_commit": "c1"}, now) and not lacks_code({"code": "old"}, now)
    assert lacks_code({"git_commit": "c1+dirty"}, {**now, "git_commit": "c1+dirty"})
    assert changes({"git_commit": None, "torch": "1"}, now) == {"git_commit": [None, "c1"], "torch": ["1", "2"], "code": [None, "abc"]}

"""``chillfl resume`` of a folder whose ``config.toml`` predates an option says, in one line, which options it now takes at
their defaults (it said nothing: FedPAC's ``unseen`` or ``attack.local_dp``, added since, were picked up silently)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import pytest

from chillfl import runner
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.runner import run_experiment
from chillfl.storage.results import ResultWriter

TINY: dict[str, Any] = {
    "device": "cpu", "dataset.name": "digits", "model.name": "mlp", "model.hidden": [16], "federation.num_clients": 4,
    "federation.clients_per_round": 2, "federation.rounds": 2, "client.batch_size": 32, "eval.client_split_size": 20, "checkpoint.every": 1,
}


class Crash(Exception):
    """Stands for a kill -9 after round 1's checkpoint."""


class CrashIn2:
    def on_round(self, record: dict[str, Any]) -> None:
        if record["round"] == 2:
            raise Crash

    def on_end(self, output: object) -> None:
        pass


def stopped_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dropped: tuple[tuple[str, str], ...]) -> Path:
    """A run stopped after round 1 whose config.toml lacks the ``dropped`` (section, option)s, as an older chillfl wrote it
    (its checkpoint records that file, so it resumes without --force)."""
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    write = ResultWriter.write_config

    def older(self: ResultWriter, config: Mapping[str, Any], header: str = "") -> None:
        data = {k: dict(v) if isinstance(v, Mapping) else v for k, v in config.items()}
        for section, option in dropped:
            del data[section][option]
        write(self, data, header)

    with monkeypatch.context() as mp:
        mp.setattr(ResultWriter, "write_config", older)
        with pytest.raises(Crash):
            run_experiment(load_config(None, {**TINY, "out_dir": str(tmp_path)}), progress=False, callbacks=[CrashIn2()])
    partial = tmp_path / "run.partial"
    text = (partial / "config.toml").read_text()
    assert all(f"\n{option} = " not in text.split(f"[{section}]")[1].split("\n[")[0] for section, option in dropped)
    return partial


@pytest.mark.parametrize(
    ("dropped", "said"),
    [
        ((("attack", "local_dp"),), 'attack.local_dp = "comply"'),
        ((("algorithm", "weighting"), ("client", "lr")), 'client.lr = 0.01, algorithm.weighting = "samples"'),
    ],
)
def test_resume_names_the_options_added_since_the_run_started(
    dropped: tuple[tuple[str, str], ...], said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    partial = stopped_run(tmp_path, monkeypatch, dropped)
    capsys.readouterr()
    assert main(["resume", str(partial), "-q"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"chillfl: resume: options added since this run started take their defaults: {said}"], err
    assert (tmp_path / "run" / "summary.json").is_file()  # it resumed to the end


def test_resume_says_nothing_when_no_option_is_new(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    partial = stopped_run(tmp_path, monkeypatch, ())
    capsys.readouterr()
    assert main(["resume", str(partial), "-q"]) == 0
    assert capsys.readouterr().err == ""

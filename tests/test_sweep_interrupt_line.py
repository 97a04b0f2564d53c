"""``chillfl analyze temperature-sweep`` stopped by Ctrl-C said only "chillfl: interrupted": whether a half sweep folder
was left, or could be continued, it did not say. Nothing is written until the sweep ends (its folder is made last), so
its line says so, as ``report``'s does."""

from __future__ import annotations

from pathlib import Path

import pytest

import chillfl.analysis.temperature_sweep as sweep
from chillfl.cli import main


def test_an_interrupted_sweep_says_nothing_was_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def stopped(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "run_temperature_sweep", stopped)
    config = tmp_path / "ts.toml"
    config.write_text('[dataset]\nname = "digits"\n[federation]\nnum_clients = 4\nrounds = 1\n')
    assert main(["analyze", "temperature-sweep", str(config), "-o", str(tmp_path / "out")]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "chillfl: interrupted; nothing was written"
    assert not (tmp_path / "out").exists()

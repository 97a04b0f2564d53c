"""`chillfl analyze scarlet-deficit` (analyzecheck findings 4, 5): repeated ``--seeds`` refused, ``--drift-executor``
checked before any run."""

from __future__ import annotations

import pytest

from chillfl.cli import main
from test_analyze_fixes import _one_line


def test_scarlet_deficit_refuses_a_repeated_seed(capsys: pytest.CaptureFixture[str]) -> None:
    """0,0,1 ran seed 0 once and counted it twice (CI over n = 3; 0,0 read "± 0.00"), as temperature-sweep refuses 0.1,0.1."""
    assert main(["analyze", "scarlet-deficit", "--seeds", "0,0,1", "--rounds", "2", "--durations", "0", "--betas", "1", "--subset-sizes", "", "--parts", "d"]) == 2
    assert _one_line(capsys, "--seeds").endswith("duplicate values: 0 twice in 0, 0, 1")


def test_scarlet_deficit_checks_the_drift_executor_before_any_run(capsys: pytest.CaptureFixture[str]) -> None:
    """It was refused after every other table was computed and printed, naming ``executor``."""
    assert main(["analyze", "scarlet-deficit", "--drift-executor", "bogus", "--rounds", "2", "--seeds", "0", "--parts", "d,drift",
                 "--durations", "0", "--subset-sizes", ""]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("chillfl: error: --drift-executor: unknown value 'bogus'") and len(err.splitlines()) == 1, (out, err)


def _drift_arm_refused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], field: str, message: str) -> tuple[str, str]:
    """scarlet-deficit with --drift-executor vectorized, the build faked: the sequential arms build, the vectorized
    (drift) arm is refused on ``field``; its exit status must be 2; (stdout, stderr)."""
    import chillfl.experiment
    from chillfl.config import RunConfig
    from chillfl.errors import ConfigError

    def build(config: RunConfig) -> None:
        if config.executor == "vectorized":
            raise ConfigError(field, message)

    monkeypatch.setattr(chillfl.experiment, "build_experiment", build)
    assert main(["analyze", "scarlet-deficit", "--drift-executor", "vectorized", "--rounds", "2", "--seeds", "0", "--parts", "d,drift",
                 "--durations", "0", "--subset-sizes", "", "--betas", "1"]) == 2
    out, err = capsys.readouterr()
    return out, err


def test_scarlet_deficit_builds_the_drift_arm_before_any_table(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A known executor the drift arm's config cannot run is refused before the tables too, naming --drift-executor."""
    out, err = _drift_arm_refused(monkeypatch, capsys, "executor", "not on this machine")
    assert out == "" and err == "chillfl: error: --drift-executor: 'vectorized': executor: not on this machine\n", (out, err)


def test_a_drift_arm_refused_on_another_field_keeps_that_field(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A refusal on another field that only the drift executor gets is the flag's too, that field in its message (rev111 3:
    the config's own refusals are raised as they are, tests/test_revmend_scarlet.py)."""
    out, err = _drift_arm_refused(monkeypatch, capsys, "client.lr", "too large for this arm")
    assert out == "" and err == "chillfl: error: --drift-executor: 'vectorized': client.lr: too large for this arm\n", (out, err)


def test_scarlet_deficit_refuses_a_drift_executor_without_the_drift_table(capsys: pytest.CaptureFixture[str]) -> None:
    """--drift-executor without 'drift' in --parts was ignored without a word (the report's related note)."""
    assert main(["analyze", "scarlet-deficit", "--drift-executor", "vectorized", "--rounds", "2", "--seeds", "0", "--parts", "d",
                 "--durations", "0", "--subset-sizes", "", "--betas", "1"]) == 2
    assert "which --parts 'd' leaves out" in _one_line(capsys, "--drift-executor")

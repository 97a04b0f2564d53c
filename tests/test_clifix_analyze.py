"""``chillfl analyze`` as a newcomer meets it (review cliux, findings 3 to 5): ``--import-plugins`` typed after the
analysis's name, an analysis interrupted (a bare "chillfl: interrupted"; "no checkpoint had been written yet" for the
in-memory runs of scarlet-deficit), and scarlet-deficit's tables cut off on stdout without a mark."""

from __future__ import annotations

import argparse
import signal

import pytest

from chillfl.cli import _dispatch, main

from test_clifix_flat_keys import _error


# ---------------------------------------------------------------- 3: --import-plugins after the analysis's name


def test_import_plugins_is_taken_after_the_analysis_name_too(capsys: pytest.CaptureFixture[str]) -> None:
    from chillfl.cli import build_parser

    parser = build_parser(analyses=True)
    for argv, imports in ((["analyze", "calibration", "r"], False), (["analyze", "--import-plugins", "calibration", "r"], True),
                          (["analyze", "calibration", "--import-plugins", "r"], True), (["analyze", "cka", "r", "--import-plugins"], True)):
        assert parser.parse_args(argv).import_plugins is imports, argv
    with pytest.raises(SystemExit):
        main(["analyze", "calibration", "--help"])
    assert "--import-plugins" in capsys.readouterr().out  # the help the refusal points to lists it


# ---------------------------------------------------------------- 4, 5: an analysis interrupted
# The line of an analysis a signal stops (its name, the signal, "does not resume") is checked on real commands in
# test_shardsig_signals.py: calibration stopped while it draws, and temperature-sweep stopped while it trains (which
# says "nothing was written" instead: its unfinished folder is removed).


def test_an_analysis_whose_in_memory_run_was_interrupted_says_no_checkpoint_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    from chillfl.runner import RunInterrupted

    def stopped(args: argparse.Namespace) -> int:
        raise RunInterrupted(signal.SIGTERM, None, 3)

    assert _dispatch(argparse.Namespace(func=stopped, command="analyze", analysis="scarlet-deficit")) == 143
    line = _error(capsys)
    assert line == ("chillfl: interrupted by SIGTERM after round 3 of a run that chillfl analyze scarlet-deficit holds in memory; "
                    "it does not resume: the same command runs it again"), line
    assert "checkpoint" not in line


def test_scarlet_deficit_interrupted_marks_its_tables_incomplete(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from chillfl.analysis import scarlet_study

    def stopped(self: object, arm: object, seed: int, rounds: int) -> list[dict[str, object]]:
        raise KeyboardInterrupt

    monkeypatch.setattr(scarlet_study.Study, "records", stopped)  # the first run of the tables: no row yet
    assert main(["analyze", "scarlet-deficit", "-q", "--seeds", "0", "--rounds", "2", "--parts", "d"]) == 130
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-3].startswith("|---|") and out[-1] == scarlet_study.INCOMPLETE == "(interrupted: the tables above are incomplete)", out

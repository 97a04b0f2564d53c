"""Stop signals: the lines say what is left (signals findings 1-3)."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from chillfl import cli
from chillfl.paths import shell_path

from test_intrfix_signals import TINY


def test_a_single_run_stopped_at_once_after_a_round_names_the_folder_it_keeps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A double signal in round 2, before the first checkpoint: round 1 is in ``tiny.partial``, which is kept (usage.md:
    removed only when no round was written) but nothing resumes. The line said only "nothing to resume", and the next run
    of the config went to ``tiny-2`` without a word of why."""
    import chillfl.executors.sequential as sequential

    train, out = sequential.train_job, tmp_path / "out"

    def stopped_twice(*args: object, **kwargs: object) -> object:
        metrics = out / "tiny.partial" / "metrics.jsonl"
        if metrics.is_file() and metrics.read_bytes().count(b"\n") == 1 and not stopped_twice.done:  # type: ignore[attr-defined]
            stopped_twice.done = True  # type: ignore[attr-defined]
            signal.raise_signal(signal.SIGINT)  # stop after this round
            signal.raise_signal(signal.SIGTERM)  # another signal: at once
        return train(*args, **kwargs)  # type: ignore[arg-type]

    stopped_twice.done = False  # type: ignore[attr-defined]
    monkeypatch.setattr(sequential, "train_job", stopped_twice)
    config = tmp_path / "tiny.toml"
    config.write_text(TINY.format(out=out.as_posix()).replace("rounds = 1", "rounds = 3"))
    code = cli.main(["run", str(config), "-q"])
    lines = capsys.readouterr().err.strip().splitlines()
    kept = out / "tiny.partial"
    assert lines[-1] == ("chillfl: interrupted by a second SIGTERM during round 2; no checkpoint had been written yet, so there is nothing to resume; "
                         f"its rounds so far are kept in {shell_path(kept)} (remove it before running the config again, or that run is written "
                         "under the next free name, NAME-2)"), lines
    assert code == 128 + signal.SIGTERM
    assert (kept / "metrics.jsonl").read_bytes().count(b"\n") == 1


def _documented(after: str) -> str:
    """The line docs/usage.md quotes for an interrupted analysis: the first quoted after ``after`` (its wraps joined)."""
    text = " ".join((Path(__file__).parent.parent / "docs" / "usage.md").read_text(encoding="utf-8").split())
    found = re.findall(rf"{re.escape(after)}[^`]*`([^`]*)`", text)
    assert len(found) == 1, found
    return found[0]


def _finished_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    config = tmp_path / "tiny.toml"
    config.write_text(TINY.format(out=(tmp_path / "runs").as_posix()))
    assert cli.main(["run", str(config), "-q"]) == 0
    capsys.readouterr()
    return tmp_path / "runs" / "tiny"


@pytest.mark.parametrize("out", [None, "chosen"])
def test_calibration_interrupted_while_it_draws_leaves_no_empty_folder_and_says_what_usage_md_says(
    out: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """The real command, stopped by SIGINT while matplotlib draws its figure: the output folder (``<RUN_DIR>/analysis``
    by default, inside the finished run) was made before the draw and left empty."""
    from matplotlib.figure import Figure

    run = _finished_run(tmp_path, capsys)
    draw = Figure.savefig

    def interrupted(self: Figure, *args: object, **kwargs: object) -> None:
        signal.raise_signal(signal.SIGINT)
        draw(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", interrupted)
    folder = run / "analysis" if out is None else tmp_path / out
    assert cli.main(["analyze", "calibration", str(run), "-q", *([] if out is None else ["-o", str(folder)])]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == _documented("an analysis stopped later names itself and says it does not resume")
    assert not folder.exists()
    monkeypatch.setattr(Figure, "savefig", draw)
    assert cli.main(["analyze", "calibration", str(run), "-q", *([] if out is None else ["-o", str(folder)])]) == 0  # and it is made to write
    assert sorted(p.name for p in folder.iterdir()) == ["calibration.json", "reliability.png"]


def test_temperature_sweep_interrupted_while_it_trains_says_what_usage_md_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """usage.md quoted "... chillfl analyze temperature-sweep does not resume ..." for it, a line it never prints while it
    trains (the sweep runs under RunNotStarted: nothing was written). The real sweep, its first client's training stopped."""
    import chillfl.analysis.temperature_sweep as sweep

    train = sweep.train_client

    def interrupted(*args: object, **kwargs: object) -> object:
        signal.raise_signal(signal.SIGINT)
        return train(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sweep, "train_client", interrupted)
    config = tmp_path / "tiny.toml"
    config.write_text(TINY.format(out=(tmp_path / "runs").as_posix()))
    out = tmp_path / "sweep"
    assert cli.main(["analyze", "temperature-sweep", str(config), "-o", str(out), "--temperatures", "0.5,1", "-q"]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == _documented("except `temperature-sweep`, which removes its unfinished folder and says so")
    assert not out.exists() or list(out.iterdir()) == []

"""Stop signals: the lines say what is left (signals findings 1-3)."""

from __future__ import annotations

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

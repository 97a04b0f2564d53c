"""A comparison's diverged run has one folder name too, ``RUN.failed``: a file there, or a ``RUN.failed`` folder that lost
its ``failure.json``, is refused in one line naming it (exit 2), as at ``RUN`` and ``RUN.partial``.

Before: nothing looked at ``RUN.failed``, so the run trained again, and when it diverged it went to ``RUN.failed-2``
(a resume later ``RUN.failed-3``, ...), which nothing read back: ``status`` called it "not started"."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from test_fsfix_compare_names import finished, stopped  # noqa: F401  (fixtures: a finished comparison, and it stopped before cn-s1)


def test_a_file_at_a_comparison_runs_failed_name_is_refused(stopped: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    (stopped / "cn-s1.failed").write_text("")
    before = sorted(p.name for p in stopped.iterdir())
    assert main(["resume", "-q", str(stopped)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (f"chillfl: error: run_dir: {stopped / 'cn-s1.failed'} is a file, where the comparison's run cn-s1 must have "
                                    f"its folder (nothing else is read back as that run); remove it, then chillfl resume {stopped}"), err
    assert "Traceback" not in err
    assert sorted(p.name for p in stopped.iterdir()) == before  # nothing trained beside it


def test_a_failed_folder_without_its_failure_json_is_refused(stopped: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    (stopped / "cn-s1.failed").mkdir()
    (stopped / "cn-s1.failed" / "metrics.jsonl").write_text("")
    before = sorted(p.name for p in stopped.iterdir())
    assert main(["resume", "-q", str(stopped)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (f"chillfl: error: run_dir: {stopped / 'cn-s1.failed'} is a diverged run's folder without its failure.json "
                                    f"(or it is no regular file); remove {stopped / 'cn-s1.failed'} and it runs again"), err
    assert "Traceback" not in err
    assert sorted(p.name for p in stopped.iterdir()) == before


def test_a_diverged_run_with_its_failure_json_is_read_back(stopped: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    """Positive control: the ``RUN.failed`` the comparison wrote itself is read back as diverged, not refused."""
    (stopped / "cn-s1.failed").mkdir()
    (stopped / "cn-s1.failed" / "failure.json").write_text('{"round": 2, "reason": "diverged"}')
    assert main(["resume", "-q", str(stopped)]) == 0
    final = stopped.with_name("cn-compare")
    assert sorted(p.name for p in final.iterdir() if p.is_dir()) == ["cn-s0", "cn-s1.failed"]
    capsys.readouterr()

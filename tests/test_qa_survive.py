"""What an interrupted comparison left, damaged: a resume names the file in one line, never a traceback.

``chillfl resume NAME-compare.partial`` reads its finished runs back (``summary.json``, ``metrics.jsonl``) and its
diverged ones (``failure.json``); a garbled one raised a JSONDecodeError or AttributeError traceback (exit 1).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.errors import ConfigError
from chillfl.sweeps.resume import finished_run

SUMMARY = '{"rounds": 1}\n'
METRICS = '{"round": 1, "global_acc": 0.5}\n'
DAMAGES = {
    "summary-garbled": ("run", "summary.json", "{garbage"),
    "summary-a-list": ("run", "summary.json", "[1, 2]"),
    "metrics-garbled": ("run", "metrics.jsonl", METRICS + "not json\n"),
    "metrics-a-number": ("run", "metrics.jsonl", METRICS + "3\n"),
    "failure-garbled": ("run.failed", "failure.json", "{garbage"),
    "failure-a-list": ("run.failed", "failure.json", "[1]"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_finished_or_diverged_run_is_one_line(tmp_path: Path, damage: str) -> None:
    folder, name, text = DAMAGES[damage]
    run = tmp_path / folder
    run.mkdir()
    if folder == "run":
        (run / "summary.json").write_text(SUMMARY)
        (run / "metrics.jsonl").write_text(METRICS)
    (run / name).write_text(text)
    with pytest.raises(ConfigError) as err:
        finished_run(tmp_path, "run")
    assert err.value.field == "run_dir" and str(run / name) in err.value.message


def test_intact_runs_read_back(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "summary.json").write_text(SUMMARY)
    (tmp_path / "run" / "metrics.jsonl").write_text(METRICS)
    out = finished_run(tmp_path, "run")
    assert out is not None and not isinstance(out, type(None)) and getattr(out, "records") == [{"round": 1, "global_acc": 0.5}]
    (tmp_path / "other.failed").mkdir()
    (tmp_path / "other.failed" / "failure.json").write_text('{"round": 3}')
    assert getattr(finished_run(tmp_path, "other"), "round") == 3

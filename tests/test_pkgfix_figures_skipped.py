"""Without matplotlib, "...; figures skipped" was logged once a run: 21 lines for the README demo's comparison, 5 for a
comparison of 4 runs, where docs/install.md promises one log line. Now once a command, the runs' and the
comparison's own figures together."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from test_extras import TINY, blocked

LINE = 'chillfl: matplotlib is needed for plots: pip install "chillfl[plots]"; figures skipped'


def test_a_comparison_without_matplotlib_says_figures_skipped_once(tmp_path: Path) -> None:
    (tmp_path / "tiny.toml").write_text(TINY, encoding="utf-8")
    argv = ["compare", "tiny.toml", "--grid", "client.lr=0.05,0.1", "--seeds", "0,1", "--out", "res"]
    out = blocked(f"from chillfl.cli import main\nsys.exit(main({argv!r}))\n", tmp_path)
    assert out.returncode == 0, out.stderr
    assert [line for line in out.stderr.splitlines() if "figures skipped" in line] == [LINE]  # was 5: 4 runs + the comparison
    assert len(list((tmp_path / "res").glob("*/*/metrics.jsonl"))) == 4


def test_it_is_said_once_a_call_not_once_a_process(caplog: pytest.LogCaptureFixture) -> None:
    """Two calls (two ``chillfl.run`` in a notebook) say it each; two runs in one call (a comparison's) once."""
    from chillfl.errors import MissingExtra
    from chillfl.once import said_once
    from chillfl.runner import figures_skipped

    missing = MissingExtra("plots", "matplotlib", "plots")
    caplog.set_level(logging.INFO, logger="chillfl")
    for _ in range(2):
        with said_once():
            figures_skipped(missing)
            figures_skipped(missing)
    said = [r for r in caplog.records if r.getMessage().endswith("figures skipped")]
    assert [(r.name, r.levelno, r.getMessage()) for r in said] == [("chillfl.runner", logging.INFO, LINE.removeprefix("chillfl: "))] * 2

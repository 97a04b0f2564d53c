"""``chillfl analyze scarlet-deficit``: an empty ``--subset-sizes`` where ``--parts`` asks for the ratio table it sizes."""

from __future__ import annotations

import pytest

from chillfl.cli import main

FAST = ["-q", "--seeds", "0", "--rounds", "1", "--durations", "0", "--betas", "1"]


@pytest.mark.parametrize("parts", [["--parts", "ratio"], ["--parts", "d,ratio"], []])  # [] : every table, ratio among them
def test_an_empty_subset_sizes_with_the_ratio_table_is_refused_before_any_run(parts: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Before: --parts ratio --subset-sizes '' printed the two header lines and no table (exit 0); with other parts the
    ratio table was left out without a word."""
    assert main(["analyze", "scarlet-deficit", *FAST, "--subset-sizes", "", *parts]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith("chillfl: error: --subset-sizes: is empty, and --parts ") and err.rstrip().endswith("or leave ratio out of --parts")


@pytest.mark.parametrize("parts", ["drift", "d,drift"])
def test_the_drift_table_asked_for_without_its_executor_is_refused_before_any_run(parts: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: --parts drift without --drift-executor printed header lines and no table (exit 0). The default --parts
    (every table) still leaves the drift table out when no executor is given: it is the one table that needs a second one."""
    assert main(["analyze", "scarlet-deficit", *FAST, "--parts", parts]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith("chillfl: error: --drift-executor: is not set, and --parts ") and err.rstrip().endswith("or leave drift out of --parts")

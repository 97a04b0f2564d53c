"""Counts in chillfl's lines take the noun's number: ``1 run``, ``2 runs`` (it said "the 1 other variants failed")."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import _compare_result
from chillfl.report.compare import CompareResult
from chillfl.sweeps.shard import Shard
from chillfl.wording import counted


def test_counted_takes_the_nouns_number() -> None:
    assert [counted(n, "run") for n in (0, 1, 2)] == ["0 runs", "1 run", "2 runs"]
    assert counted(1, "comparison") == "1 comparison" and counted(3, "analysis", "analyses") == "3 analyses"


def test_a_shard_with_one_run_left_says_it_in_the_singular(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _compare_result(CompareResult(tmp_path, [], "", runs=1, pending=1), False, Shard(1, 2)) == 0
    err = capsys.readouterr().err
    assert "chillfl: shard 1/2: its 1 run ended; 1 run of the comparison is not finished yet (other shards)." in err, err


def test_one_failed_run_of_one_is_singular(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = CompareResult(tmp_path, [{"variant": "a", "delta_acc": None, "final_acc": None}], "", failures={"a-s0": "diverged at round 1"})
    _compare_result(result, False)
    assert "chillfl: 1 run did not finish: a-s0 (diverged at round 1)" in capsys.readouterr().err

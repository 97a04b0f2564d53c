"""``python -m chillfl.metrics.stability`` measures soft-label runs (their records now hold ``client_train_loss``, as
every protocol's do: test_recfix_round_record), and says in one line which run has no trajectory to measure, naming
the key, where it printed a table row of ``-`` without a word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import chillfl
from chillfl.metrics.stability import main as stability_main
from chillfl.storage.jsonl import encode_record
from test_recfix_round_record import tiny


def test_the_stability_tool_measures_a_soft_label_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = chillfl.run(config=tiny("soft labels", **{"federation.rounds": 4}), write=False, progress=False).records
    run = tmp_path / "dsfl"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(encode_record(r), sort_keys=True, allow_nan=False) + "\n" for r in records))  # as a run writes it
    assert stability_main([str(run)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(f"| {run.name} |")]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    float(cells[1])  # the std over the clients that trained twice or more: a number, not "-"


def test_a_run_without_the_key_is_one_line_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, line in (("with", {"round": 1, "client_train_loss": {"0": 1.0}}), ("without", {"round": 1, "train_loss": 1.0})):
        (tmp_path / "cmp" / name).mkdir(parents=True)
        (tmp_path / "cmp" / name / "metrics.jsonl").write_text(json.dumps(line) + "\n" + json.dumps({**line, "round": 2}) + "\n")
    assert stability_main([str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(" | ")[0] for line in out if line.startswith("| ") and not line.startswith("| run ")] == ["| with"]
    assert [line for line in out if "without" in line] == ["without: no client_train_loss in its metrics.jsonl: nothing to measure"]
    # only runs without it: the lines alone, no empty table
    assert stability_main([str(tmp_path / "cmp" / "without"), "--source", "agg_scores"]) == 0
    assert capsys.readouterr().out == "without: no agg_scores in its metrics.jsonl: nothing to measure\n"


def test_two_runs_of_one_name_in_two_folders_are_two_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Two FOLDER arguments each holding a run ``pf`` (a run and its rerun on another executor) are two rows, each named by
    its path; they were one row, the second run's, keyed by the shared name. A folder given twice is still one row."""
    for folder, loss in (("o1", 1.0), ("o2", 2.0)):
        (tmp_path / folder / "pf").mkdir(parents=True)
        lines = [{"round": r, "client_train_loss": {"0": loss * r, "1": loss}} for r in (1, 2, 3)]
        (tmp_path / folder / "pf" / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    monkeypatch.chdir(tmp_path)  # o1 relative and absolute: one folder, one row, as given first
    assert stability_main(["o1", str(tmp_path / "o2"), str(tmp_path / "o1")]) == 0
    rows = [line.split(" | ")[0].removeprefix("| ") for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and not line.startswith("| run ")]
    assert rows == ["o1/pf", (tmp_path / "o2" / "pf").as_posix()]

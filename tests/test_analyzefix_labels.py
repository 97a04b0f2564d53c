"""`chillfl analyze` on run folders (analyzecheck findings 1 and the observation): one label per run (a second run of
the same ``parent/name`` overwrote the first), and local_only's never-trained global model refused by calibration and
grad-norms as cka and aggregation-* refuse it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from chillfl.cli import main
from test_analyze_fixes import _one_line, _run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(tmp_path_factory.mktemp("analyzefix"), "tiny", "federation.rounds=1")


def test_run_labels_grow_until_distinct() -> None:
    """``A/results/demo`` and ``B/results/demo`` were both labelled ``results/demo`` (one parent only)."""
    from chillfl.analysis.replay import run_label
    from chillfl.analysis.labels import unique_label

    a, b, c = "/m/A/results/demo", "/m/B/results/demo", "/m/B/results/other"
    assert [run_label(p, [a, b, c]) for p in (a, b, c)] == ["A/results/demo", "B/results/demo", "other"]
    assert run_label(a, [a, a]) == "demo"  # the same folder twice is one run
    assert unique_label(Path("/r/chill"), [Path("/x/r/chill")]) == "/r/chill"  # a tail of the other: the whole path
    assert unique_label(Path("/x/r/chill"), [Path("/r/chill")]) == "x/r/chill"
    esc, literal = Path("/t/a\x1b"), Path("/t/a\\x1b")  # printed alike in full: numbered, in the order of the paths
    assert (unique_label(esc, [literal]), unique_label(literal, [esc])) == ("/t/a\\x1b[1]", "/t/a\\x1b[2]")


def test_calibration_keeps_two_runs_of_the_same_parent_and_name(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The report's repro: p1/r/chill and p2/r/chill printed one line and the JSON held one run."""
    for machine in ("p1", "p2"):
        shutil.copytree(run_dir, tmp_path / machine / "r" / "chill")
    one, two = str(tmp_path / "p1" / "r" / "chill"), str(tmp_path / "p2" / "r" / "chill")
    assert main(["analyze", "calibration", one, two, "-o", str(tmp_path / "lab"), "-q"]) == 0
    runs = json.loads((tmp_path / "lab" / "calibration.json").read_text())["runs"]
    assert sorted(runs) == ["p1/r/chill", "p2/r/chill"] and [runs[k]["run_dir"] for k in sorted(runs)] == [one, two]
    out = capsys.readouterr().out
    assert "p1/r/chill: accuracy" in out and "p2/r/chill: accuracy" in out


def test_calibration_and_grad_norms_refuse_local_only_as_cka_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """They measured local_only's never-trained global model without a word, while cka and aggregation-* refused it."""
    run = _run(tmp_path, "lo", "federation.rounds=1", "algorithm.name=local_only")
    for analysis in ("calibration", "grad-norms"):
        assert main(["analyze", analysis, str(run), "-o", str(tmp_path / "x"), "-q"]) == 2
        line = _one_line(capsys, "run_dir")
        assert "local_only" in line and "personal_model" in line
    assert not (tmp_path / "x").exists()

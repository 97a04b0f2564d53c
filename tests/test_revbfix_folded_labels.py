"""Review rev99b, finding 3: an older chillfl's comparison whose labels fold alike only under today's fold (``lr-ı``,
``lr-i``) is labelled by ``chillfl report`` with the names its folder holds (comparison_labels used the strict fold:
with two seeds it mapped the long names, which no folder has), and ``chillfl status`` reads one stopped before its
second fold-alike run began, where it refused it ("give them labels that differ in more than case")."""

from __future__ import annotations

import shutil
import unicodedata
from pathlib import Path

import pytest

import chillfl.run_names as run_names
import chillfl.sweeps.run as sweep_run
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.report.html import _missing_runs
from chillfl.run_names import comparison_labels
from chillfl.sweeps.run import run_compare

from test_revcfix_folded_names import LABELS, comparison_config

RUNS = [f"{label}-s{seed}" for label in LABELS for seed in (0, 1)]


def begun_with_two_seeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The ``.partial`` folder an older chillfl (its fold: ``str.casefold``) left of a two-seed comparison, its tables not written."""
    path = comparison_config(tmp_path)
    path.write_text(path.read_text(encoding="utf-8").replace("controls = false\n", "controls = false\nseeds = [0, 1]\n"), encoding="utf-8")
    with monkeypatch.context() as m:
        m.setattr(run_names, "folder_key", lambda name: unicodedata.normalize("NFC", name).casefold())
        m.setattr(sweep_run, "write_tables", lambda *args, **kwargs: None)
        run_compare(load_config(path, {"out_dir": str(tmp_path / "out")}), [], progress=False)
    [partial] = (tmp_path / "out").iterdir()
    assert sorted(p.name for p in partial.iterdir() if p.is_dir()) == sorted(RUNS)
    return partial


def test_report_labels_an_older_comparisons_runs_by_the_folders_it_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    partial = begun_with_two_seeds(tmp_path, monkeypatch)
    assert comparison_labels(partial) == {name: name.rsplit("-s", 1)[0] for name in RUNS}
    assert _missing_runs([partial], [partial / name for name in RUNS]) == []  # it said all four were "not started", off the page


def test_status_reads_an_older_comparison_stopped_before_its_second_folded_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    partial = begun_with_two_seeds(tmp_path, monkeypatch)
    for seed in (0, 1):
        shutil.rmtree(partial / f"{LABELS[1]}-s{seed}")  # stopped before lr-i's runs began
    capsys.readouterr()
    assert main(["status", str(partial)]) == 0
    out = capsys.readouterr().out
    assert all(f"| {LABELS[0]}-s{seed} | finished | 1/1 |" in out for seed in (0, 1))
    assert all(f"| {LABELS[1]}-s{seed} | not started |" in out for seed in (0, 1))
    assert comparison_labels(partial)[f"{LABELS[0]}-s0"] == LABELS[0]
    assert main(["resume", str(partial)]) == 2  # resume still refuses it: lr-i would run into lr-ı's folder
    assert "but for case" in capsys.readouterr().err

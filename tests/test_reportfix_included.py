"""``chillfl report``'s lines on which folders the page covers, and its ``-o``.

A folder named on the command line is on the page: it was also listed as "not included" when it sat inside another
named folder (an unfinished comparison's stopped run, a ``.failed`` run, a comparison beside runs), and a named stopped
run of an interrupted comparison was still counted among its runs "not on this page" (``T0.25-s0.partial`` compared
with the planned ``T0.25-s0``). ``-o new/`` (a folder meant, not there yet) wrote an HTML file named ``new``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.config import RunConfig
from chillfl.report.html import skipped_folders
from chillfl.storage.results import to_toml
from test_reportfix_report import page_of, records, write_run


def interrupted(tmp_path: Path) -> Path:
    """A ``NAME-compare.partial`` of 4 planned runs (T1, T0.25 x seeds 0, 1): T1-s0 finished, T0.25-s0 stopped after
    its rounds (its ``summary.json`` written), the other two not started."""
    folder = tmp_path / "cmp-compare.partial"
    write_run(folder / "T1-s0", records(2.0, 1.5), name="T1-s0")
    write_run(folder / "T0.25-s0.partial", records(2.0, 1.8), name="T0.25-s0", temperature={"policy": "fixed", "value": 0.25})
    variants = [{"label": label, "short": None, "tune": {}} for label in ("T1", "T0.25")]
    (folder / "sweep.json").write_text(json.dumps({"options": {"seeds": [0, 1], "tune": {}}, "variants": variants}), encoding="utf-8")
    (folder / "config.toml").write_text(to_toml(RunConfig(name="cmp").to_dict()), encoding="utf-8")
    return folder


STATUS = "chillfl status {folder} says where each stands, chillfl resume {folder} runs them"


def counted(page: str) -> list[str]:
    """The page's count of runs and groups, whole (``12 runs in 2 groups`` is not ``2 runs in 2 groups``)."""
    return re.findall(r'<p class="muted">([^<;]*); runs equal but for the seed form a group', page)


def missing(page: str) -> list[str]:
    """The page's lines on planned runs it does not hold, each whole."""
    return re.findall(r'<p id="missing">(.*?)</p>', page)


def test_a_named_stopped_run_of_an_interrupted_comparison_is_neither_missing_nor_left_out(tmp_path: Path) -> None:
    folder = interrupted(tmp_path)
    page = page_of(folder, folder / "T0.25-s0.partial")
    assert counted(page) == ["2 runs in 2 groups"]
    assert missing(page) == [f"{folder} is an unfinished comparison: 2 of its 4 planned runs are not on this page: T1-s1 (not started), "
                             f"T0.25-s1 (not started); {STATUS.format(folder=folder)}"]
    assert 'id="skipped"' not in page  # its one unfinished run is named, so on the page
    alone = page_of(folder)  # not named: left out, and said so in both lines
    assert counted(alone) == ["1 run in 1 group"]
    assert missing(alone) == [f"{folder} is an unfinished comparison: 3 of its 4 planned runs are not on this page: T1-s1 (not started), "
                              "T0.25-s0 (stopped (after its last round, before its folder was complete (no checkpoint to resume from): "
                              f"runs again)), T0.25-s1 (not started); {STATUS.format(folder=folder)}"]
    assert re.findall(r'<p class="muted" id="skipped">(.*?)</p>', alone) == [
        f"not included (name a comparison folder or an unfinished run to include it): {folder / 'T0.25-s0.partial'}"]


def test_a_named_failed_run_or_comparison_inside_a_named_folder_is_not_listed_as_left_out(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_run(runs / "a", records(1.0))
    failed = write_run(runs / "div.failed", records(1.0, 9.0), name="div")
    comparison = runs / "demo-compare"
    write_run(comparison / "T1-s0", records(1.0), name="T1-s0")
    (comparison / "table.md").write_text("| variant |\n|---|\n| T1 |\n", encoding="utf-8")
    (comparison / "sweep.json").write_text(json.dumps({"options": {"seeds": [0], "tune": {}}, "variants": [{"label": "T1"}]}), encoding="utf-8")
    (comparison / "config.toml").write_text(to_toml(RunConfig(name="demo").to_dict()), encoding="utf-8")
    assert [s.folder for s in skipped_folders([runs])] == [comparison, failed]
    assert [s.folder for s in skipped_folders([runs, failed])] == [comparison]
    assert [s.folder for s in skipped_folders([runs, comparison])] == [failed]
    assert skipped_folders([runs, str(failed) + "/", comparison]) == []  # the same folder, however it is spelled


@pytest.mark.parametrize("suffix", ["/", "/."])
def test_an_output_ending_in_a_slash_is_refused_in_one_line(tmp_path: Path, suffix: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Other commands refuse a folder for a file output (``data show -o DIR``, ``plot -o DIR``), as ``report`` refuses an
    existing one: a folder not there yet, meant by its trailing ``/``, is refused the same way, before any work."""
    run = write_run(tmp_path / "a", records(1.0))
    out = str(tmp_path / "newdir") + suffix
    assert main(["report", str(run), "--no-models", "--no-partitions", "-o", out]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"chillfl: error: --output: {out} names a folder; give an .html file path, e.g. {tmp_path / 'newdir' / 'report.html'}"]
    assert not (tmp_path / "newdir").exists()

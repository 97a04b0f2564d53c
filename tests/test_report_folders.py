"""``chillfl report``: which run folders a page counts, names and leaves out (a user's test of the page).

A folder named twice counted its run twice; the page never said which folders a group's mean ± std is over; a folder
holding only a comparison said "not a run folder" without naming the comparison; a prototype or soft-label run's
"algorithm" read ``fedavg``; a run folder whose ``metrics.jsonl`` was removed vanished from the page without a word.
"""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.report.html import Group, Run, _config_row, find_runs, render

from test_html_report import three_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return three_runs(tmp_path_factory.mktemp("folders"))


def _counts(page: str) -> str:
    found = re.search(r"\d+ runs? in \d+ groups?", page)
    assert found is not None
    return found.group(0)


def _page(*folders: Path) -> str:
    return html.unescape(render(list(folders), models=False, partitions=False))


def test_a_folder_named_twice_or_inside_a_named_folder_counts_once(runs: Path) -> None:
    """``report r/chill r/chill`` was "2 runs in 2 groups"; ``report r r/chill`` counted seed 0 in its group and again as a
    group of its own. The same folder (resolved path) is one run, as ``analyze`` reads it."""
    assert _counts(_page(runs / "chill", runs / "chill")) == "1 run in 1 group"
    assert _counts(_page(runs, runs / "chill")) == "3 runs in 2 groups"
    assert find_runs([runs / "chill", runs / ".." / runs.name / "chill", runs]) == [runs / "chill", runs / "chill-2", runs / "warm"]


def test_each_group_names_the_run_folders_of_its_mean(runs: Path, tmp_path: Path) -> None:
    """The page said "3 runs in 2 groups" and each group's seeds, but not which folders (``chill-2``) went into a group."""
    shutil.copytree(runs / "chill-2", tmp_path / "elsewhere" / "chill-2")
    page = _page(runs / "chill", tmp_path / "elsewhere" / "chill-2", runs / "warm")
    summaries = re.findall(r"<summary>(.*?)</summary>", page)
    assert summaries[0].endswith(f"2 runs: chill (seed 0) in {runs}; chill-2 (seed 1) in {tmp_path / 'elsewhere'}"), summaries
    assert summaries[1].endswith(f"1 run: warm (seed 0) in {runs}"), summaries


def test_a_folder_holding_only_a_comparison_says_to_name_it(runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``chillfl report results`` after one ``chillfl compare`` said only "not a chillfl run folder ... nor a folder of
    them"; the docs say a comparison is reported by naming it, and the line now says which one."""
    comparison = tmp_path / "results" / "tiny-compare"
    shutil.copytree(runs / "warm", comparison / "warm-s0")
    (comparison / "sweep.json").write_text("{}")
    assert main(["report", str(tmp_path / "results"), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"chillfl: error: RUN_DIR: {tmp_path / 'results'} is not a chillfl run folder (config.toml + metrics.jsonl) nor a folder "
                   f"of them; it holds the comparison {comparison}: name it (chillfl report {comparison})"]
    assert not (tmp_path / "r.html").exists()
    assert main(["report", str(comparison), "--no-models", "--no-partitions", "-o", str(tmp_path / "r.html")]) == 0  # as the line says


def test_the_algorithm_column_names_the_method_that_ran() -> None:
    """A prototype run (``prototypes.method=fedproto``) and a SCARLET run read "fedavg, weighting=samples": the
    ``[algorithm]`` table they never used. The protocol names the method; FedHKD averages the models too."""
    def algorithm(**overrides: object) -> str:
        config = load_config(None, {"dataset.name": "digits", "model.name": "mlp", **overrides})
        return html.unescape(re.findall(r'<td class="l">([^<]*)</td>', _config_row(Group("g", [Run(Path("g"), config, [], {})])))[4])

    assert algorithm() == "fedavg"  # a parameter-sharing run: its [algorithm] (a saved config has its defaults too)
    assert algorithm(**{"prototypes.method": "fedproto"}) == "fedproto (prototype-sharing)"
    assert algorithm(**{"prototypes.method": "fedhkd"}) == "fedhkd (prototype-sharing); models averaged by fedavg"
    assert algorithm(**{"distillation.method": "scarlet", "distillation.public_size": 100, "distillation.subset_size": 50}) == "scarlet (soft-label)"


def test_a_run_folder_cut_short_is_named_not_dropped(runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A comparison's run whose ``metrics.jsonl`` was removed vanished: the page said "2 runs", a group had 1 run, while
    the comparison's own table on the page said n = 2. It is listed as not included, with what it lacks."""
    folder = tmp_path / "results"
    shutil.copytree(runs, folder)
    (folder / "chill-2" / "metrics.jsonl").unlink()
    page = _page(folder)
    skipped = re.search(r'<p class="muted" id="skipped">([^<]*)</p>', page)
    assert skipped is not None and skipped.group(1) == (
        f"not included: incomplete run folders: {folder / 'chill-2'} (config.toml and summary.json but no metrics.jsonl)")
    assert _counts(page) == "2 runs in 2 groups"
    assert main(["report", str(folder / "chill-2"), "-o", str(tmp_path / "r.html")]) == 2  # named itself: one line saying what it lacks
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].endswith("it has config.toml and summary.json but no metrics.jsonl"), err
    (folder / "warm" / "summary.json").write_text("garbled")  # an unreadable file still refuses the page, in one line
    assert main(["report", str(folder), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: RUN_DIR: {folder / 'warm'}: unreadable result files"), err
    assert not (tmp_path / "r.html").exists()

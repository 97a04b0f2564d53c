"""A received run or comparison folder read as data: figures written over a planted link, never through it; a linked default output folder refused (F1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main

from received_folder import copy_run, make_run

@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("secfix"))


def test_save_png_replaces_a_link_at_its_path_and_leaves_its_target(tmp_path: Path) -> None:
    from chillfl.plots.figure import Figure, save_figure, save_png

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "a.png").symlink_to(victim)
    (tmp_path / "b.svg").symlink_to(victim)
    fig = Figure()
    fig.add_subplot().plot([0, 1])
    save_png(fig, tmp_path / "a.png")
    save_figure(fig, tmp_path / "b.svg")
    assert victim.read_text() == "keep me"
    assert not (tmp_path / "a.png").is_symlink() and (tmp_path / "a.png").read_bytes().startswith(b"\x89PNG")
    assert not (tmp_path / "b.svg").is_symlink() and b"<svg" in (tmp_path / "b.svg").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "b.svg", "victim.txt"]  # no temp file left


@pytest.mark.parametrize(("analysis", "figure", "extra"), [("calibration", "reliability.png", []), ("aggregation-entropy", "aggregation-entropy.png", []),
                                                           ("grad-norms", "grad-norms.png", ["--samples", "50"]), ("cka", "cka.png", [])])
def test_an_analysis_writes_over_a_link_planted_in_the_run_folder(run_dir: Path, tmp_path: Path, analysis: str, figure: str, extra: list[str]) -> None:
    run = copy_run(run_dir, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (run / "analysis").mkdir()
    (run / "analysis" / figure).symlink_to(victim)
    assert main(["analyze", analysis, str(run), "-q", *extra]) == 0
    assert victim.read_text() == "keep me"
    assert not (run / "analysis" / figure).is_symlink() and (run / "analysis" / figure).read_bytes().startswith(b"\x89PNG")


def test_a_default_output_folder_that_is_a_link_is_refused(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = copy_run(run_dir, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "analysis").symlink_to(elsewhere)
    assert main(["analyze", "calibration", str(run), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--out" in err[0] and "symbolic link" in err[0]
    assert list(elsewhere.iterdir()) == []
    assert main(["analyze", "calibration", str(run), "-q", "-o", str(elsewhere)]) == 0  # a link the user names is theirs

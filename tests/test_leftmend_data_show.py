"""``chillfl data show -o DIR/``: a path spelled as a folder is refused on ``output``, as ``chillfl report -o DIR/`` is on ``--output``."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main

pytest.importorskip("matplotlib")

TINY = ["federation.num_clients=4", "federation.clients_per_round=2"]


@pytest.mark.parametrize("output", ["new/", "new/.", "a/b/..", ".", "./"])
def test_names_folder_reads_a_trailing_separator_and_dot_components(output: str) -> None:
    from chillfl.paths import names_folder

    assert names_folder(output)


@pytest.mark.parametrize("output", ["new", "new.png", "a/new.png", "..x", "a/.hidden"])
def test_names_folder_leaves_file_names_alone(output: str) -> None:
    from chillfl.paths import names_folder

    assert not names_folder(output)


@pytest.mark.parametrize("output", ["newdir/", "newdir/."])
def test_data_show_refuses_an_output_spelled_as_a_folder(output: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Before: ``-o newdir/`` (newdir not there) wrote ``newdir.png`` beside the folder meant and said so (exit 0)."""
    monkeypatch.chdir(tmp_path)
    assert main(["data", "show", "demo", *TINY, "-o", output]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [f"chillfl: error: output: {output} names a folder; give a .png file path, e.g. newdir/figure.png"]
    assert list(tmp_path.iterdir()) == []  # nothing written, no folder made


def test_data_show_refuses_an_existing_folder_with_or_without_its_slash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "there").mkdir()
    for output in ("there", "there/"):
        assert main(["data", "show", "demo", *TINY, "-o", output]) == 2
        assert capsys.readouterr().err.splitlines() == [f"chillfl: error: output: {output} is a folder; give a .png file path"]
    assert [p.name for p in tmp_path.iterdir()] == ["there"] and list((tmp_path / "there").iterdir()) == []

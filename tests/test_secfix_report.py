"""A received run or comparison folder read as data: a comparison folder's own files embedded only when they are its own regular PNGs and table (F2/F3)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


from received_folder import make_run

@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("secfix"))


def _comparison(tmp_path: Path) -> Path:
    from chillfl.plots.figure import Figure, save_png

    folder = tmp_path / "cmp"
    folder.mkdir()
    (folder / "table.md").write_text("| variant | acc |\n|---|---|\n| a | 1 |\n")
    fig = Figure()
    fig.add_subplot().plot([0, 1])
    save_png(fig, folder / "own.png")
    return folder


def test_report_leaves_out_a_linked_figure_and_names_it(tmp_path: Path) -> None:
    from chillfl.report.html import _comparison_section

    folder = _comparison(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-TOKEN")
    (folder / "leak.png").symlink_to(secret)
    (folder / "fake.png").write_text("SECRET-TOKEN, not an image")
    page = "\n".join(_comparison_section(folder))
    import base64

    assert "SECRET" not in page and base64.b64encode(b"SECRET-TOKEN").decode()[:12] not in page
    assert "own.png" in page and page.count("<img") == 1
    assert "left out of this page: fake.png (not a PNG image); leak.png (a symbolic link)" in page


def test_report_leaves_out_a_linked_table(tmp_path: Path) -> None:
    from chillfl.report.html import _comparison_section

    folder = _comparison(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("| SECRET-TOKEN |\n")
    (folder / "table.md").unlink()
    (folder / "table.md").symlink_to(secret)
    page = "\n".join(_comparison_section(folder))
    assert "SECRET" not in page and "table.md (a symbolic link)" in page


def test_report_does_not_open_a_fifo_or_a_huge_file(tmp_path: Path) -> None:
    from chillfl.report.html import OWN_FILE_LIMIT, _comparison_section

    folder = _comparison(tmp_path)
    os.mkfifo(folder / "hang.png")  # opened blocking, the report waited forever for a writer
    with (folder / "huge.png").open("wb") as fh:
        fh.write(b"\x89PNG\r\n\x1a\n")
        fh.truncate(OWN_FILE_LIMIT + 1)  # sparse: nothing written to disk
    page = "\n".join(_comparison_section(folder))
    assert "hang.png (not a regular file)" in page and "huge.png (over 50 MB)" in page and page.count("<img") == 1


def test_a_table_md_of_the_folder_is_still_shown(tmp_path: Path) -> None:
    from chillfl.report.html import _comparison_section

    page = "\n".join(_comparison_section(_comparison(tmp_path)))
    assert '<table class="compare">' in page and "left out" not in page

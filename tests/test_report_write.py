"""``chillfl report -o OUT`` writes its page whole or not at all: a failed write leaves no ``OUT.partial`` / ``.tmp`` and no
torn ``OUT`` (an older page stays as it was), and says so in one line."""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Iterator

import pytest

from chillfl.cli import main
from chillfl.report import html

PAGE = "<!DOCTYPE html>" + "x" * 200_000


@pytest.fixture
def small_files() -> Iterator[None]:
    """A file-size limit of 64 KiB while the test runs: a write past it fails with EFBIG (Python ignores SIGXFSZ),
    as a full disk fails it midway."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_a_write_that_fails_midway_leaves_nothing_and_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], small_files: None,
) -> None:
    """It wrote OUT.partial with write_text: the write's OSError was a traceback (exit 1) and 64 KiB of page stayed behind."""
    monkeypatch.setattr(html, "render", lambda *args, **kwargs: PAGE)
    out = tmp_path / "r.html"
    out.write_text("the older page")
    assert main(["report", str(tmp_path), "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: cannot write {out}:"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]
    assert out.read_text() == "the older page"


def test_a_page_that_fails_to_render_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(html, "render", broken)
    out = tmp_path / "r.html"
    with pytest.raises(KeyboardInterrupt):
        html.write_report([tmp_path], out)
    assert list(tmp_path.iterdir()) == []


def test_a_page_is_written_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(html, "render", lambda *args, **kwargs: PAGE)
    out = tmp_path / "sub" / "r.html"
    assert html.write_report([tmp_path], out) == out
    assert out.read_text(encoding="utf-8") == PAGE and sorted(p.name for p in out.parent.iterdir()) == ["r.html"]

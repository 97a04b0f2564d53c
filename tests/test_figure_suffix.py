"""A figure saved to a path without a suffix is written as ``<path>.png``, the name matplotlib's ``savefig(path)`` gives
it (drawn into memory first, the PNG went to the bare name, and a caller opening ``acc.png`` found nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from chillfl.plots.figure import Figure, save_figure, save_png  # noqa: E402


def test_a_suffixless_path_is_written_as_a_png_of_that_name(tmp_path: Path) -> None:
    fig = Figure()
    fig.add_subplot().plot([0, 1], [1, 0])
    assert save_png(fig, tmp_path / "acc") == tmp_path / "acc.png"
    assert save_figure(fig, tmp_path / "loss") == tmp_path / "loss.png"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acc.png", "loss.png"]
    assert (tmp_path / "acc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert save_figure(fig, tmp_path / "curve.svg").read_bytes().lstrip().startswith(b"<?xml")

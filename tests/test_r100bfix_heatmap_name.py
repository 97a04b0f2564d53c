"""``chillfl.data.plot_class_heatmap(counts, "heat")`` writes ``heat.png``, as ``savefig("heat")`` did before the heat
map was drawn into memory and written atomically (it then wrote a PNG named ``heat``, and a caller opening
``heat.png`` found nothing)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from chillfl.data import plot_class_heatmap  # noqa: E402


def test_a_path_without_a_suffix_is_written_as_a_png_of_that_name(tmp_path: Path) -> None:
    plot_class_heatmap(np.ones((3, 4)), tmp_path / "heat")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heat.png"]
    assert (tmp_path / "heat.png").read_bytes().startswith(b"\x89PNG")


def test_a_path_with_a_suffix_is_written_as_given(tmp_path: Path) -> None:
    """Positive control: ``.png`` and another format's suffix keep their names."""
    plot_class_heatmap(np.ones((3, 4)), str(tmp_path / "heat.png"))
    plot_class_heatmap(np.ones((3, 4)), tmp_path / "heat.svg")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heat.png", "heat.svg"]
    assert (tmp_path / "heat.svg").read_text().lstrip().startswith("<?xml")

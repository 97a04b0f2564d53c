"""A refusal from a grid variant was named in each nested ``naming`` scope: the demo's grid with a wrong model said
"... (grid variant T=1) (grid variant T=1)". An inner scope's name is kept, not repeated."""

from __future__ import annotations

import pytest

from chillfl.cli import main


def test_a_grid_variants_refusal_names_it_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--dry-run", "dataset.name=cifar10", "model.name=char_lstm"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("chillfl: error: model.name: ")
    assert lines[0].count("(grid variant T=1)") == 1

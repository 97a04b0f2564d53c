"""`chillfl analyze temperature-sweep` (analyzecheck finding 7): strict JSON, non-finite values as null."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest



def test_temperature_sweep_writes_strict_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An undefined r and a diverged cell were written as a bare NaN (JSON.parse rejects it); null, as write_json writes."""
    import chillfl.analysis.temperature_sweep as sweep
    from chillfl.config import load_config
    from chillfl.metrics.correlation import undefined_row

    monkeypatch.setattr(sweep, "plot_heatmap", lambda *a, **k: None)
    monkeypatch.setattr(sweep, "plot_scatter", lambda *a, **k: None)
    (tmp_path / "c.toml").write_text('name = "s"\n')
    acc = np.array([[0.5, math.nan], [0.25, 0.75]])
    result = sweep.SweepResult([0.1, 1.0], acc, acc, np.ones((2, 3)), np.array([0.2, 0.4]), np.array([0.1, 1.0]), np.array([0.5, 0.75]),
                               np.array([0.0, math.nan]), correlation={k: [undefined_row("h", 2, "one best T")] for k in ("best_temperature", "gain")})
    sweep._fill(tmp_path, load_config(tmp_path / "c.toml"), result, "low")

    def refuse(word: str) -> None:
        raise ValueError(word)

    table = json.loads((tmp_path / "temperature_sweep.json").read_text(), parse_constant=refuse)
    assert table["clients"][0]["accuracy"] == [0.5, None] and table["clients"][1]["gain"] is None
    rows = json.loads((tmp_path / "correlation.json").read_text(), parse_constant=refuse)
    assert rows == {k: [{"measure": "h", "r": None, "p": None, "n": 2, "undefined": "one best T"}] for k in ("best_temperature", "gain")}

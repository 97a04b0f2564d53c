"""The temperature sweep scores each client on its local validation split when ``eval.validation`` > 0 provides one; it
scored the evaluation split, drawn from the test rows, even then, and called it "validation accuracy". Without a
validation split it still scores the evaluation split, and says so (JSON ``split``, axis label, printed line)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from chillfl.analysis import temperature_sweep as sweep
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_data

TINY = {"name": "sweep", "dataset.name": "digits", "partition.name": "dirichlet_balanced", "partition.alpha": 0.5, "model.name": "mlp",
        "federation.num_clients": 3, "client.epochs": 1, "client.batch_size": 64, "client.lr": 0.05,
        "eval.client_split_size": 30}


def spied(monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    """The labels of every split the sweep evaluates on, in order."""
    seen: list[torch.Tensor] = []
    real = sweep.evaluate

    def spy(model: Any, params: Any, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> Any:
        seen.append(y.clone())
        return real(model, params, x, y, batch_size)

    monkeypatch.setattr(sweep, "evaluate", spy)
    return seen


def test_with_a_validation_split_the_sweep_scores_it(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config(None, {**TINY, "out_dir": str(tmp_path), "eval.validation": 0.5})
    seen = spied(monkeypatch)
    result = sweep.run_temperature_sweep(config, [0.5, 1.0], progress=False, write=False)
    data = build_data(config)
    val = [data.client_validation(cid) for cid in result.client_ids()]
    assert all(v is not None for v in val)
    want = [v[1] for v in val if v is not None for _ in (0.5, 1.0)]
    assert len(seen) == len(want) and all(torch.equal(a, b) for a, b in zip(seen, want))
    assert any(not torch.equal(v[1], data.client_eval(cid)[1]) for cid, v in zip(result.client_ids(), val) if v is not None)
    assert result.split == sweep.VALIDATION_SPLIT and result.accuracy_label() == "validation accuracy (%)"
    monkeypatch.setattr(sweep, "plot_heatmap", lambda *a, **k: None)  # the JSON alone, fast
    monkeypatch.setattr(sweep, "plot_scatter", lambda *a, **k: None)
    sweep._fill(tmp_path, config, result, "mean")
    assert json.loads((tmp_path / "temperature_sweep.json").read_text())["split"] == "client_validation"


def test_without_one_it_scores_the_test_row_split_and_says_so(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config(None, {**TINY, "out_dir": str(tmp_path)})
    seen = spied(monkeypatch)
    result = sweep.run_temperature_sweep(config, [0.5, 1.0], progress=False, write=False)
    data = build_data(config)
    assert len(seen) == 2 * len(result.client_ids())
    assert all(torch.equal(a, data.client_eval(cid)[1]) for a, cid in zip(seen, [c for c in result.client_ids() for _ in (0, 1)]))
    assert result.split == sweep.EVAL_SPLIT and "validation" not in result.accuracy_label()
    assert "test rows" in sweep.describe_split(result.split, 0.0) and "validation split" in sweep.describe_split(sweep.VALIDATION_SPLIT, 0.2)


def test_a_client_without_validation_rows_is_refused_on_eval_validation(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config(None, {**TINY, "out_dir": str(tmp_path), "eval.validation": 0.5})
    real = sweep.split_rows

    def none_for_client_0(data: Any, split: str, cid: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = real(data, split, cid)
        return (x[:0], y[:0]) if cid == 0 else (x, y)

    monkeypatch.setattr(sweep, "split_rows", none_for_client_0)
    with pytest.raises(ConfigError) as info:
        sweep.run_temperature_sweep(config, [0.5, 1.0], progress=False, write=False)
    assert info.value.field == "eval.validation"

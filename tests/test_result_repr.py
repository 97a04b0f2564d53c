"""``repr(result)`` is one short line a notebook can show (the dataclass's own printed every record and tensor)."""

from __future__ import annotations

import torch

import chillfl
from test_api import SMALL, TinyMLP, data, digits  # noqa: F401  (fixtures)


def test_result_repr_is_one_short_line(data: chillfl.TensorData) -> None:  # noqa: F811
    cfg = {**SMALL, "federation": {"num_clients": 3, "rounds": 2}}
    result = chillfl.run(model=TinyMLP(), data=data, config=cfg, write=False, progress=False)
    said = repr(result)
    assert "\n" not in said and len(said) < 300, said
    acc = result.summary["final_global_acc"]
    assert said.startswith("Result(rounds=2, ") and f"final_global_acc={acc:.4g}" in said
    assert "model=TinyMLP" in said and "folder=None" in said and "records=2" in said
    assert f"algorithm={result.config.algorithm['name']!r}" in said
    assert isinstance(result.state, dict) and all(isinstance(t, torch.Tensor) for t in result.state.values())  # fields kept

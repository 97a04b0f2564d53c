"""``summary.json``'s ``environment`` records the resolved ``memory_format`` and ``batched_conv`` beside the executor:
``config.toml`` keeps ``"auto"`` for both, and channels-last against contiguous changes a run's bits."""

from __future__ import annotations

import json
from chillfl.config import tomllib  # tomli on Python 3.10
from pathlib import Path

import torch
from torch import nn

import chillfl


def _images() -> chillfl.TensorData:
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(24, 3, 32, 32, generator=gen), torch.randint(0, 3, (24,), generator=gen)
    return chillfl.TensorData(x[:16], y[:16], x[16:], y[16:], num_classes=3)


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3))  # 8,192 outputs a sample


def _run(model: nn.Module, over: dict, out: Path | None = None) -> chillfl.Result:
    config = {"device": "cpu", "executor": "sequential", "federation": {"num_clients": 2, "rounds": 1}, **over}
    if out is None:
        return chillfl.run(model=model, data=_images(), config=config, write=False, progress=False)
    return chillfl.run(model=model, data=_images(), config=config, out_dir=str(out), progress=False)


def test_auto_layouts_are_recorded_as_resolved_and_config_keeps_auto(tmp_path: Path) -> None:
    result = _run(_cnn(), {}, tmp_path)
    assert result.folder is not None
    env = json.loads((result.folder / "summary.json").read_text())["environment"]
    assert (env["memory_format"], env["batched_conv"]) == ("channels_last", "grouped")  # a large convolution on the CPU
    saved = tomllib.loads((result.folder / "config.toml").read_text())
    assert (saved["memory_format"], saved["batched_conv"]) == ("auto", "auto")


def test_a_small_model_and_a_named_layout_are_recorded_too() -> None:
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 3))
    assert _run(mlp, {}).summary["environment"]["memory_format"] == "contiguous"
    env = _run(_cnn(), {"memory_format": "contiguous"}).summary["environment"]
    assert env["memory_format"] == "contiguous"

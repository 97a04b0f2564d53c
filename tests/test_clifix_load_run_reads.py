"""``chillfl.load_run`` of a folder whose config names a plugin part (a model by import path) read the folder twice:
all of it as data (no plugin imported) until the model was refused, then all of it again with the plugin imported.
Its config.toml, client models and model.safetensors are now read once, and the data built once: the config is parsed
as data, then again from what was read, and a plugin part is found before anything is built."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest

import chillfl
import chillfl.analysis.replay as replay
import chillfl.config
from chillfl.storage.model_file import write_client_models
from chillfl.storage.run_folder import CLIENT_MODELS
from plugin_modules import plugin_module

MODELS = '''
import math
from torch import nn


def linear(input_shape, num_classes, options, section):
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))
'''
CONFIG = {"seed": 1, "threads": 1, "device": "cpu", "dataset": {"name": "digits"}, "federation": {"num_clients": 2, "rounds": 1},
          "eval": {"clients": "none", "client_split": "none"}}


def _counted(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, calls: Counter[str]) -> None:
    """``module.name`` wrapped to count its calls in ``calls[name]``."""
    real: Callable[..., Any] = vars(module)[name]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)


@pytest.mark.parametrize("model", ["clifix_models:linear", "mlp"], ids=["plugin-model", "built-in"])
def test_load_run_reads_the_folder_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str) -> None:
    with plugin_module(tmp_path, monkeypatch, "clifix_models", MODELS):
        result = chillfl.run(config={**CONFIG, "model": {"name": model}}, out_dir=tmp_path / "runs", name="r", progress=False)
        folder = result.folder
        assert folder is not None and result.model is not None
        write_client_models(folder / CLIENT_MODELS, {0: dict(result.model.state_dict())})  # FedAvg keeps none: one, read once
        calls: Counter[str] = Counter()
        _counted(monkeypatch, chillfl.config, "read_config_file", calls)  # what load_config reads config.toml with
        if "read_config_file" in vars(replay):  # what load_run reads it with now
            _counted(monkeypatch, replay, "read_config_file", calls)
        for name in ("read_client_models", "load_model_state", "build_data"):
            _counted(monkeypatch, replay, name, calls)
        saved = chillfl.load_run(folder)
    assert saved.model is not None and saved.config.model["name"] == model and set(saved.client_states) == {0}
    assert dict(calls) == {"read_config_file": 1, "read_client_models": 1, "load_model_state": 1, "build_data": 1}

"""The Python API's inputs a notebook user gets wrong: each is one ConfigError naming the field, before anything runs.

Tiny: 64 random inputs, a linear model, nothing trained unless a test says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

import chillfl
from chillfl.errors import ConfigError

SMALL = {"federation": {"num_clients": 2, "rounds": 1}}


def tensors() -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(80, 6, generator=g), torch.arange(80) % 3
    return chillfl.TensorData(x[:60], y[:60], x[60:], y[60:], num_classes=3)


def refused(**kwargs: Any) -> ConfigError:
    kwargs = {"model": nn.Linear(6, 3), "data": tensors(), "config": SMALL, "write": False, "progress": False, **kwargs}
    with pytest.raises(ConfigError) as exc:
        chillfl.run(**kwargs)
    return exc.value


def test_a_model_on_the_meta_device_is_refused() -> None:
    exc = refused(model=nn.Linear(6, 3, device="meta"))
    assert exc.field == "model" and "meta device" in exc.message

"""`chillfl list` counts a model's FLOPs on a sample of the model's own dtype: registered models are float32 under a
caller's float64 default, and a probe of the default dtype failed both tries (meta, CPU): "-" for most bundled experiments."""

from __future__ import annotations

from typing import Iterator

import pytest
import torch

from chillfl import catalogue
from chillfl.catalogue import load_config, resolve_config


@pytest.fixture
def float64_default() -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    catalogue._model_counts.cache_clear()
    yield
    torch.set_default_dtype(previous)
    catalogue._model_counts.cache_clear()


@pytest.mark.parametrize("name", ["demo", "fedchill/table3-cifar10-cnn1"])
def test_flops_are_counted_under_a_float64_default(float64_default: object, name: str) -> None:
    config = load_config(resolve_config(name), {})
    under_float64 = catalogue._config_counts(config)
    assert under_float64 is not None and under_float64[0] > 0
    torch.set_default_dtype(torch.float32)
    catalogue._model_counts.cache_clear()
    assert under_float64 == catalogue._config_counts(config)

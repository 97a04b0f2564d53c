"""A CUDA run's deterministic settings are the run's only: the caller's warn_only and CUBLAS_WORKSPACE_CONFIG come back.

device_settings only sets flags, so it is checked on CPU with torch.device("cuda").
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any, Iterator

import pytest
import torch

from chillfl.runner import device_settings


@pytest.fixture(autouse=True)
def _keep_flags() -> Iterator[None]:
    mode, warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    env = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    yield
    torch.use_deterministic_algorithms(mode, warn_only=warn)
    if env is None:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    else:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = env


def _config() -> Any:
    return SimpleNamespace(deterministic=True, precision="fp32")


@pytest.mark.parametrize("mode", [True, False])
def test_the_callers_warn_only_is_restored(mode: bool) -> None:
    torch.use_deterministic_algorithms(mode, warn_only=True)
    with device_settings(_config(), torch.device("cuda")):
        assert torch.are_deterministic_algorithms_enabled()
    assert torch.are_deterministic_algorithms_enabled() is mode
    assert torch.is_deterministic_algorithms_warn_only_enabled()


def test_cublas_workspace_config_is_the_callers_after_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    with device_settings(_config(), torch.device("cuda")):
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ

    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")  # the caller's own: kept, not overwritten
    with device_settings(_config(), torch.device("cuda")):
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"

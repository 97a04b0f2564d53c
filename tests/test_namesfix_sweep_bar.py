"""The temperature sweep's progress bar is closed however the sweep ends: it was made before the sweep's precision was
entered and closed after the loop, so a refused precision (another thread's) or a training error left the tqdm bar, and
its monitor thread, open."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from tqdm import tqdm

import chillfl.analysis.temperature_sweep as module
from chillfl.analysis.temperature_sweep import run_temperature_sweep
from chillfl.errors import ConfigError
from test_tempfix_sweep import tiny_config


def refused_precision(*args: Any, **kwargs: Any) -> Iterator[None]:
    raise ConfigError("precision", "another thread holds another precision")


def failed_training(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("training failed")


@pytest.mark.parametrize(("name", "fake", "error"), [("run_precision", refused_precision, ConfigError), ("train_client", failed_training, RuntimeError)])
def test_the_bar_is_closed_when_the_sweep_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, fake: Any, error: type[Exception]) -> None:
    bars: list[tqdm] = []

    class Bar(tqdm):  # type: ignore[type-arg]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            bars.append(self)

    monkeypatch.setattr(module, "tqdm", Bar)
    monkeypatch.setattr(module, name, fake)
    with pytest.raises(error):
        run_temperature_sweep(tiny_config(tmp_path), [0.5, 1.0], progress="bar", write=False)
    assert len(bars) == 1
    closed = bars[0].disable  # tqdm.close sets it
    bars[0].close()  # the old code's open bar: not left to the next test
    assert closed

"""The loss-health warnings (a training loss above the ceiling, a local loss blown up) say the run's own suspects first,
as the non-finite-loss refusals do (rev116d 3): under ``[privacy]`` the "loss above 1000" warning said "lower
client.lr" alone, where the noise (sigma x C) was the cause."""

from __future__ import annotations

from typing import Any

import pytest

import chillfl.runner as runner
from chillfl.config import load_config
from chillfl.engine.health import LossWatch
from chillfl.errors import LOSS_HINT, Diverged, loss_hint
from chillfl.protocols.book import run_suspects


def test_the_warning_says_the_hint_it_is_given() -> None:
    with pytest.raises(Diverged) as info:
        LossWatch(strict=True, hint="lower privacy.noise_multiplier; or " + LOSS_HINT).observe({"round": 1, "train_loss": 5e7})
    assert "(lower privacy.noise_multiplier; or " in str(info.value)


def test_a_private_runs_watch_leads_with_its_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config(None, {"privacy.mechanism": "dp-fedavg", "federation.rounds": 1, "federation.num_clients": 2, "checkpoint.every": 0})
    assert run_suspects(config) == ["privacy.noise_multiplier or privacy.clip_norm ([privacy] mechanism = 'dp-fedavg' adds noise of scale sigma x C)"]
    hints: list[str] = []

    class Watch(LossWatch):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            hints.append(self.hint)

    monkeypatch.setattr(runner, "LossWatch", Watch)
    runner.run_experiment(config, write=False, progress=False)
    assert hints == [loss_hint(run_suspects(config))] and hints[0] != LOSS_HINT

"""A stop signal (Ctrl-C, SIGTERM) that came during the round in which a comparison's run diverged was lost: the run was
recorded as diverged, "the comparison goes on" ran every remaining run, and the command exited 3, not 130. The
comparison now records the divergence and stops there, resumable (docs/usage.md: a comparison stops at the end of the
round)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
from torch import nn

import chillfl

TINY = {"federation": {"num_clients": 2, "rounds": 2}, "client": {"epochs": 3}, "eval": {"client_split_size": 10}, "checkpoint": {"every": 1}}


class SignalsOnce(nn.Module):
    """A linear model that sends this process SIGINT once (every run's copy shares the class flag), at its first forward
    after a step of the huge lr blew its weights up: inside the first run's first round, the round that diverges."""

    sent = False

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not SignalsOnce.sent and bool(self.lin.weight.abs().max() > 1e10):
            SignalsOnce.sent = True
            os.kill(os.getpid(), signal.SIGINT)
        return torch.exp(self.lin(x))  # inf logits once the weights blew up: a nan loss, so the round diverges


def test_a_signal_in_the_diverging_round_stops_the_comparison(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 4, generator=g), torch.arange(40) % 2
    data = chillfl.TensorData(x, y, x, y, num_classes=2)
    SignalsOnce.sent = False
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, as a script has: an xdist worker ignores SIGINT
    try:
        with pytest.raises(KeyboardInterrupt):
            chillfl.compare(SignalsOnce(), data, TINY, grid={"client.lr": [1e30, 0.1]}, out_dir=tmp_path, progress=False)
    finally:
        signal.signal(signal.SIGINT, previous)
    (folder,) = tmp_path.iterdir()
    assert folder.name.endswith("-compare.partial")
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["lr1e30.failed"]  # the second run never started

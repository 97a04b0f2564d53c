"""The vectorized executor's per-client path trains clients on pool threads, each forking and seeding the process's
one CPU generator for dropout: interleaved, a fork restored another thread's seeded state and the caller's generator
was left changed. The interleaving that did it is forced here (events, no timing): the caller's next draw is as
without the run, and the run's numbers are those of a run without the forced order."""

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Callable

import pytest
import torch
from torch import nn

import chillfl
from chillfl.training import local

WAIT = 60.0  # only a bound on a hang: every wait is released by the other pool thread


def _data() -> chillfl.TensorData:
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(40, 3, 32, 32, generator=g), torch.randint(0, 10, (40,), generator=g)
    return chillfl.TensorData(x[:32], y[:32], x[32:], y[32:], num_classes=10)


def _model() -> nn.Module:
    """16 x 32 x 32 conv outputs a sample: large convolutions on the CPU, trained client by client."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(64, 10))


def _run(model: nn.Module) -> dict[str, torch.Tensor]:
    config = {"federation": {"num_clients": 2, "rounds": 1}, "client": {"lr": 0.05, "batch_size": 8},
              "executor": "vectorized", "threads": 1}  # two pool threads, one client each
    out = chillfl.run(model=model, data=_data(), config=config, write=False, progress=False)
    return {k: v.clone() for k, v in out.model.state_dict().items()}


def _interleaved(real: Callable[[torch.device], AbstractContextManager[Any]]) -> Callable[[torch.device], AbstractContextManager[Any]]:
    """``dropout_rng`` with the two clients' forks ordered so: the first forks and seeds; the second forks (saving the
    first's seeded state) and seeds; the first's fork ends (restoring the caller's); the second's ends last."""
    lock, arrivals = threading.Lock(), [0]
    first_seeded, second_trained, first_ended = threading.Event(), threading.Event(), threading.Event()

    @contextmanager
    def ordered(device: torch.device) -> Iterator[None]:
        with lock:
            n = arrivals[0]
            arrivals[0] += 1
        if n == 1:
            assert first_seeded.wait(WAIT)
        with real(device):
            yield
            if n == 0:
                first_seeded.set()
                assert second_trained.wait(WAIT)
            elif n == 1:
                second_trained.set()
                assert first_ended.wait(WAIT)
        if n == 0:
            first_ended.set()

    return ordered


def test_threaded_per_client_training_leaves_the_callers_cpu_generator_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = _run(_model())
    monkeypatch.setattr(local, "dropout_rng", _interleaved(local.dropout_rng))
    model = _model()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    forced = _run(model)
    assert torch.equal(torch.rand(3), expected)
    assert plain.keys() == forced.keys() and all(torch.equal(plain[k], forced[k]) for k in plain)  # the steps draw nothing

"""Runs in several threads of one process: torch's global generator is the process's; a run's fork-seed-draw blocks
are held apart from other threads' (chillfl.global_rng), and only where something draws."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import pytest
import torch
from torch import nn

from chillfl.global_rng import GLOBAL_RNG
from chillfl.models.registry import build_model
from chillfl.training.local import LocalSpec, draws_global, train_client

WAIT_S = 2.0  # how long a paused thread waits for the other to come in (which it cannot, once the two are held apart)


class Gate(nn.Module):
    """Pauses thread ``A``'s first forward until thread ``B`` is inside its own training (or ``WAIT_S`` passed), and
    B's first forward until A has gone on: their dropout draws interleave wherever nothing holds them apart."""

    def __init__(self) -> None:
        super().__init__()
        self.a_in, self.b_in, self.a_on = threading.Event(), threading.Event(), threading.Event()
        self.calls: dict[str, int] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        name = threading.current_thread().name
        self.calls[name] = self.calls.get(name, 0) + 1
        if name == "A" and self.calls[name] == 1:
            self.a_in.set()
            self.b_in.wait(WAIT_S)
        elif name == "A" and self.calls[name] == 2:
            self.a_on.set()
        elif name == "B" and self.calls[name] == 1:
            self.b_in.set()
            self.a_on.wait(WAIT_S)
        return x


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(32, 8, generator=g), torch.randint(0, 4, (32,), generator=g)


def _model(gate: nn.Module) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 16), gate, nn.Dropout(0.5), nn.Linear(16, 4))


def _train(model: nn.Module, seed: int) -> torch.Tensor:
    x, y = _data()
    out = train_client(model, model.state_dict(), x, y, spec=LocalSpec(epochs=2, batch_size=8), lr=0.1, temperature=1.0,
                       context={}, generator=torch.Generator().manual_seed(seed))
    return torch.cat([v.flatten() for v in out.params.values()])


def test_dropout_of_two_runs_in_threads_is_each_runs_own_and_the_callers_generator_is_kept() -> None:
    gate = Gate()
    model = _model(gate)
    alone = {seed: _train(model, seed) for seed in (1, 2)}  # the main thread: the gate lets it through
    torch.manual_seed(123)
    caller = torch.get_rng_state()
    out: dict[int, torch.Tensor] = {}
    a = threading.Thread(target=lambda: out.__setitem__(1, _train(model, 1)), name="A")
    b = threading.Thread(target=lambda: (gate.a_in.wait(30), out.__setitem__(2, _train(model, 2))), name="B")
    a.start(); b.start(); a.join(); b.join()  # noqa: E702
    assert torch.equal(out[1], alone[1]) and torch.equal(out[2], alone[2])  # same process, same kernels: the same bits
    assert torch.equal(torch.get_rng_state(), caller)


class _OwnForward(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_what_may_draw_from_the_global_generator() -> None:
    spec = LocalSpec(epochs=1, batch_size=4)
    assert not draws_global(nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.BatchNorm1d(2)), spec)
    assert not draws_global(build_model("mlp", (8,), 3), spec)  # chillfl's own layers without dropout
    assert draws_global(nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.1)), spec)
    assert draws_global(nn.Sequential(nn.RReLU()), spec)
    assert draws_global(nn.LSTM(2, 2, num_layers=2, dropout=0.2), spec)
    assert not draws_global(nn.LSTM(2, 2, num_layers=2), spec)
    assert draws_global(nn.Sequential(_OwnForward()), spec)  # a forward chillfl cannot see may call F.dropout
    assert draws_global(nn.Linear(2, 2), LocalSpec(epochs=1, batch_size=4, base_loss=lambda out, y, t: out.sum()))


@contextmanager
def _held_elsewhere() -> Iterator[Callable[[], None]]:
    """:data:`GLOBAL_RNG` held by another thread until the yielded function (or the block's end) releases it."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with GLOBAL_RNG:
            held.set()
            release.wait(60)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(30)
    try:
        yield release.set
    finally:
        release.set()
        t.join()


def test_a_model_that_draws_nothing_trains_while_another_thread_holds_the_generator() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    torch.manual_seed(5)
    caller = torch.get_rng_state()
    done: list[torch.Tensor] = []
    with _held_elsewhere():
        t = threading.Thread(target=lambda: done.append(_train(model, 1)))
        t.start()
        t.join(60)  # not held apart: it finishes while the other thread holds the generator
        assert done
    assert torch.equal(torch.get_rng_state(), caller)  # untouched: neither forked nor seeded


def test_steps_an_executor_verified_free_of_draws_are_not_held() -> None:
    model = nn.Sequential(nn.Linear(8, 16), _OwnForward(), nn.Linear(16, 4))  # may draw, as far as chillfl can see
    x, y = _data()
    spec = LocalSpec(epochs=1, batch_size=8, draw_free=True)  # the vectorized executor's probe verified its steps
    done: list[object] = []
    with _held_elsewhere():
        t = threading.Thread(target=lambda: done.append(train_client(model, model.state_dict(), x, y, spec=spec, lr=0.1, temperature=1.0,
                                                                       context={}, generator=torch.Generator().manual_seed(1))))
        t.start()
        t.join(60)
        assert done


@pytest.mark.parametrize("init", ["build_model", "ifca"])
def test_a_seeded_initialisation_is_held_apart_from_another_threads_draws(init: str) -> None:
    from chillfl.aggregation.ifca import fresh_model

    template = nn.Linear(4, 3)
    make: Callable[[], Any] = ((lambda: build_model("mlp", (8,), 3, seed=7)) if init == "build_model"
                               else (lambda: fresh_model(template, 7, template.state_dict())))
    done = threading.Event()
    with _held_elsewhere() as release:
        t = threading.Thread(target=lambda: (make(), done.set()))
        t.start()
        assert not done.wait(0.3)  # it waits for the other thread's block
        release()
        t.join(60)
        assert done.is_set()


def test_a_hook_or_an_instance_forward_counts_as_drawing() -> None:
    """A forward hook calling F.dropout, or a forward set on the instance, drew from an unseeded generator: results
    followed the caller's RNG, which the run used up (the class's forward is torch's, so nothing else says so)."""
    import types

    import torch.nn.functional as F

    spec = LocalSpec(epochs=1, batch_size=4)
    hooked = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    assert not draws_global(hooked, spec)
    hooked[1].register_forward_hook(lambda mod, i, o: F.dropout(o, 0.5, training=mod.training))
    assert draws_global(hooked, spec)
    own = nn.Sequential(nn.Linear(2, 2))
    own.forward = types.MethodType(lambda self, x: F.dropout(self[0](x), 0.5), own)  # type: ignore[method-assign]
    assert draws_global(own, spec)
    pre = nn.Sequential(nn.Linear(2, 2))
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda mod, args: None)
    try:
        assert draws_global(pre, spec)  # a global hook of the user's runs in every module's forward
    finally:
        handle.remove()
    assert not draws_global(pre, spec)

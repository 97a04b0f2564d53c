"""torch's default dtype is process-wide: registered-model runs in several threads hold float32 together and give the
caller's dtype back when the last ends; a run on the caller's own model beside one is refused (chillfl.models.registry)."""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import Any, Callable, Iterator

import pytest
import torch
from torch import nn

from chillfl.errors import ConfigError
from chillfl.models.registry import caller_dtype, float32_default


def _in_thread(enter: Callable[[], AbstractContextManager[Any]]) -> BaseException | None:
    """``enter()``'s context entered in another thread: the exception it raised, or None."""
    caught: list[BaseException] = []

    def go() -> None:
        try:
            with enter():
                pass
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            caught.append(exc)

    t = threading.Thread(target=go)
    t.start()
    t.join(60)
    return caught[0] if caught else None



@pytest.fixture
def float64() -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def test_float32_holds_of_two_threads_give_the_callers_dtype_back_when_the_last_ends(float64: None) -> None:
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[torch.dtype] = []

    def run_a() -> None:
        with float32_default():
            a_in.set()
            b_in.wait(30)
        a_out.set()

    def run_b() -> None:
        a_in.wait(30)
        with float32_default():
            b_in.set()
            a_out.wait(30)
            seen.append(torch.get_default_dtype())  # A has ended: B's run still computes in float32

    threads = [threading.Thread(target=run_a), threading.Thread(target=run_b)]
    [t.start() for t in threads]; [t.join() for t in threads]  # noqa: E702
    assert seen == [torch.float32]
    assert torch.get_default_dtype() == torch.float64


def test_a_run_in_the_callers_dtype_beside_a_float32_run_in_another_thread_is_one_config_error(float64: None) -> None:
    with float32_default():
        exc = _in_thread(caller_dtype)
        assert isinstance(exc, ConfigError) and exc.field == "model" and "\n" not in str(exc)
        assert "float64" in str(exc)
        with caller_dtype():  # nested in the same thread (a callback's run): never refused
            pass
    with caller_dtype():
        exc = _in_thread(float32_default)
        assert isinstance(exc, ConfigError) and exc.field == "model"
    assert torch.get_default_dtype() == torch.float64


def test_the_callers_float32_lets_both_kinds_run_in_threads() -> None:
    assert torch.get_default_dtype() == torch.float32
    with float32_default():
        assert _in_thread(caller_dtype) is None
    with caller_dtype():
        assert _in_thread(float32_default) is None


def test_chillfl_run_on_a_users_model_beside_a_registered_run_in_another_thread(float64: None) -> None:
    import chillfl

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 4, generator=g), torch.randint(0, 2, (40,), generator=g)
    data = chillfl.TensorData(x[:32], y[:32], x[32:], y[32:], num_classes=2)
    config = {"federation": {"num_clients": 2, "rounds": 1}, "executor": "sequential", "threads": 1}
    result: list[BaseException] = []
    with float32_default():  # a registered model's run in this thread

        def go() -> None:
            try:
                chillfl.run(model=nn.Linear(4, 2), data=data, config=config, write=False, progress=False)
            except ConfigError as exc:
                result.append(exc)

        t = threading.Thread(target=go)
        t.start()
        t.join(120)
    assert len(result) == 1 and result[0].field == "model"


def test_a_flower_run_on_the_callers_own_model_registers_the_callers_dtype(float64: None) -> None:
    """flower.apps.registered_float32 of a user's model was a nullcontext: beside a registered-model run in another
    thread (float32 over the caller's float64) it ran in float32 unrefused; now it is refused as chillfl run's is."""
    from chillfl.config import config_from_dict
    from chillfl.flower.apps import registered_float32
    from chillfl.plugins import CUSTOM

    config = config_from_dict({"model": {"name": CUSTOM}})
    held = float32_default()
    held.__enter__()
    try:
        caught = _in_thread(lambda: registered_float32(config))
    finally:
        held.__exit__(None, None, None)
    assert isinstance(caught, ConfigError) and caught.field == "model"

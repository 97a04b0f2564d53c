"""Runs in several threads of one process share torch's process-wide precision settings: the first run in pins them
and keeps the caller's, the last one out gives the caller's back, and a run needing other settings beside another
thread's run is refused (ConfigError naming ``precision``). The overlaps are forced with events, not timed."""

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

import chillfl
from chillfl.errors import ConfigError
from chillfl.training.local import run_precision

WAIT = 120.0  # only a bound on a hang: every wait is released by the other thread


@pytest.fixture
def caller_medium() -> Iterator[None]:
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved)


def _data() -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(80, 8, generator=g), torch.randint(0, 3, (80,), generator=g)
    return chillfl.TensorData(x[:64], y[:64], x[64:], y[64:], num_classes=3)


def _run(callback: Any) -> None:
    torch.manual_seed(0)
    chillfl.run(model=nn.Linear(8, 3), data=_data(), write=False, progress=False, callbacks=[callback],
                config={"federation": {"num_clients": 2, "rounds": 2}, "executor": "sequential", "precision": "fp32"})


def test_two_overlapping_runs_keep_their_pin_and_give_the_callers_settings_back(caller_medium: None) -> None:
    b_in, a_done = threading.Event(), threading.Event()
    seen: dict[str, list[str]] = {"a": [], "b": []}
    errors: list[BaseException] = []

    def a_round(record: Any) -> None:
        seen["a"].append(torch.get_float32_matmul_precision())
        assert b_in.wait(WAIT)  # B is inside its run: A ends while B still has a round to go

    def b_round(record: Any) -> None:
        seen["b"].append(torch.get_float32_matmul_precision())
        b_in.set()
        assert a_done.wait(WAIT)  # B's second round trains after A's run has returned

    def go(name: str, callback: Any) -> None:
        try:
            _run(callback)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)
            b_in.set()
            a_done.set()
        finally:
            if name == "a":
                a_done.set()

    threads = [threading.Thread(target=go, args=("a", a_round)), threading.Thread(target=go, args=("b", b_round))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert seen == {"a": ["highest", "highest"], "b": ["highest", "highest"]}  # B's round 2: not the caller's "medium"
    assert torch.get_float32_matmul_precision() == "medium"  # the caller's, after both


def _holding(precision: str, entered: threading.Event, release: threading.Event, errors: list[BaseException]) -> None:
    try:
        with run_precision(precision, torch.device("cpu")):
            entered.set()
            assert release.wait(WAIT)
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        errors.append(exc)
        entered.set()


def test_a_run_needing_other_settings_beside_another_threads_is_refused(caller_medium: None) -> None:
    entered, release, errors = threading.Event(), threading.Event(), []
    other = threading.Thread(target=_holding, args=("tf32", entered, release, errors))
    other.start()
    try:
        assert entered.wait(WAIT)
        with pytest.raises(ConfigError) as refused:
            with run_precision("fp32", torch.device("cpu")):
                pass
        assert refused.value.field == "precision" and "'tf32'" in str(refused.value) and "process-wide" in str(refused.value)
        assert torch.backends.cuda.matmul.allow_tf32  # the other run's pin, untouched by the refusal
        with run_precision("tf32", torch.device("cpu")):  # the same settings: shared
            pass
        assert torch.backends.cuda.matmul.allow_tf32
    finally:
        release.set()
        other.join()
    assert not errors, errors
    assert torch.get_float32_matmul_precision() == "medium"


def test_bf16_beside_fp32_shares_the_pin(caller_medium: None) -> None:
    entered, release, errors = threading.Event(), threading.Event(), []
    other = threading.Thread(target=_holding, args=("fp32", entered, release, errors))
    other.start()
    try:
        assert entered.wait(WAIT)
        with run_precision("bf16", torch.device("cpu")):  # its autocast is per thread; the process settings are fp32's
            assert torch.get_float32_matmul_precision() == "highest"
        assert torch.get_float32_matmul_precision() == "highest"  # the other run still holds the pin
    finally:
        release.set()
        other.join()
    assert not errors, errors
    assert torch.get_float32_matmul_precision() == "medium"


def test_a_run_nested_in_the_same_thread_pins_its_own_and_gives_the_outer_ones_back(caller_medium: None) -> None:
    cpu = torch.device("cpu")
    with run_precision("fp32", cpu):
        assert not torch.backends.cuda.matmul.allow_tf32
        with run_precision("tf32", cpu):
            assert torch.backends.cuda.matmul.allow_tf32
        assert not torch.backends.cuda.matmul.allow_tf32 and torch.get_float32_matmul_precision() == "highest"
    assert torch.get_float32_matmul_precision() == "medium"

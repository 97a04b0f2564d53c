"""What a run leaves in the caller's process: the processes executor's excepthook goes with its pool, progress="off"
starts no thread, and progress=True draws a bar only where stderr redraws one."""

import io
import sys
import threading
import types
from typing import Any

import pytest
import torch

import chillfl
from chillfl import progress
from chillfl.executors.processes import WorkerPool


def test_pool_gives_the_excepthook_back() -> None:
    before = sys.excepthook
    pool = WorkerPool(workers=1)
    try:
        assert sys.excepthook is not before  # quiet about its resource sharer while it lives
    finally:
        pool.close()
    assert sys.excepthook is before


def test_pool_leaves_a_hook_set_since() -> None:
    before = sys.excepthook
    pool = WorkerPool(workers=1)

    def mine(*exc: Any) -> None:
        return None

    sys.excepthook = mine
    try:
        pool.close()
        assert sys.excepthook is mine
    finally:
        sys.excepthook = before


def _data() -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(80, 6, generator=g), torch.randint(0, 3, (80,), generator=g)
    return chillfl.TensorData(x[:64], y[:64], x[64:], y[64:], num_classes=3)


@pytest.mark.parametrize("off", [False, "off"])
def test_progress_off_starts_no_thread(off: Any) -> None:
    from tqdm import tqdm

    monitor = tqdm.monitor
    if monitor is not None:  # an earlier bar's: ours would reuse it, so start from none
        monitor.exit()
        tqdm.monitor = None
    before = {t.ident for t in threading.enumerate()}
    chillfl.run(model=torch.nn.Linear(6, 3), data=_data(), config={"federation": {"num_clients": 2, "rounds": 1}}, write=False, progress=off)
    assert tqdm.monitor is None
    assert {t.ident for t in threading.enumerate() if t.is_alive()} <= before


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_true_is_a_bar_on_a_terminal_and_lines_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    assert progress.as_mode(True, _Tty()) == "bar"
    assert progress.as_mode(True, io.StringIO()) == "lines"
    assert progress.as_mode(False, _Tty()) == "off"
    assert progress.as_mode("bar", io.StringIO()) == "bar"
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert progress.as_mode(True) == "lines"
    assert isinstance(progress.make_bar(True, 3, 0, "x"), progress.Lines)


def test_true_is_a_bar_in_jupyter(monkeypatch: pytest.MonkeyPatch) -> None:
    class OutStream(io.StringIO):  # ipykernel's stderr in a notebook: no terminal
        pass

    iostream = types.ModuleType("ipykernel.iostream")
    iostream.OutStream = OutStream  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    monkeypatch.setitem(sys.modules, "ipykernel.iostream", iostream)
    assert progress.as_mode(True, OutStream()) == "bar"
    assert progress.as_mode(True, io.StringIO()) == "lines"


def test_redirected_stderr_gets_lines_not_redraws(capsys: pytest.CaptureFixture[str]) -> None:
    chillfl.run(model=torch.nn.Linear(6, 3), data=_data(), config={"federation": {"num_clients": 2, "rounds": 2}}, write=False, progress=True)
    err = capsys.readouterr().err
    assert "\r" not in err
    assert "round 2/2" in err

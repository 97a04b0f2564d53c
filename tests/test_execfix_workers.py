"""A lost worker ends as one line (WorkerError), whatever it was doing: no traceback from the parent's fetch of its
result, none from the parent's resource sharer, none per worker when it runs out of memory."""

from __future__ import annotations

import os
import resource
import signal
import socket
import sys
from multiprocessing import resource_sharer
from typing import Any

import pytest

from chillfl.executors import processes
from chillfl.executors.processes import ClientCodeError, WorkerError
from chillfl.executors.sequential import ClientJob
from test_executors import _alive, _one_worker


def test_a_result_cut_by_its_workers_death_is_the_dead_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unpickling a result fetches its tensors' file descriptors from the worker that sent it: a worker killed then
    resets that socket, and the ConnectionResetError ended the run with a 60-line traceback."""
    with _one_worker() as (ex, jobs):
        pid = ex.pids[0]
        os.kill(pid, signal.SIGKILL)

        def reset(*args: Any, **kwargs: Any) -> Any:
            raise ConnectionResetError(104, "Connection reset by peer")

        monkeypatch.setattr(ex.pool._results, "get", reset)
        with pytest.raises(WorkerError, match="chillfl-worker-0 died with exit code -9"):
            ex.run(jobs)
        assert not ex.pool.usable
    assert not _alive(pid)


def test_the_parents_resource_sharer_is_quiet_about_a_fetch_cut_short(capfd: pytest.CaptureFixture[str]) -> None:
    """A worker killed while it fetched a task's tensors from the parent cut that connection: the parent's sharer thread
    printed its traceback before the pool's one line. Here a client that connects and goes, then a real fetch (the
    sharer serves one connection at a time, so the first has been handled once the second is done)."""
    with _one_worker():
        capfd.readouterr()
        first, second = resource_sharer.DupFd(os.open(os.devnull, os.O_RDONLY)), resource_sharer.DupFd(os.open(os.devnull, os.O_RDONLY))
        address = first._id[0]  # type: ignore[attr-defined]
        with socket.socket(socket.AF_UNIX) as cut:
            cut.connect(address)
        os.close(second.detach())
        err = capfd.readouterr().err
    assert "Traceback" not in err and "EOFError" not in err


def test_an_error_elsewhere_is_still_printed() -> None:
    seen: list[type[BaseException]] = []
    previous = sys.excepthook
    sys.excepthook = lambda kind, value, tb: seen.append(kind)
    quiet = processes._quiet_resource_sharer()
    try:
        try:
            raise ConnectionResetError("not the sharer's")
        except ConnectionResetError:
            sys.excepthook(*sys.exc_info())
        assert seen == [ConnectionResetError]
    finally:  # the pool's own way out: the process's hook is the caller's again, nothing left installed
        quiet.remove()
        sys.excepthook = previous
    assert sys.excepthook is previous


def _vm_size(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        kb = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
    return kb * 1024


def test_a_worker_out_of_memory_is_one_line(capfd: pytest.CaptureFixture[str]) -> None:
    """A worker whose address space is full (``ulimit -v``, the container's limit) cannot map a task's tensors: each
    worker printed multiprocessing's traceback, then the pool said "died with exit code 1"."""
    with _one_worker() as (ex, jobs):
        pid = ex.pids[0]
        capfd.readouterr()
        size = _vm_size(pid)
        resource.prlimit(pid, resource.RLIMIT_AS, (size, size))  # not one more mapping
        big = [ClientJob(j.client_id, j.start, j.x.repeat(400, 1, 1), j.y.repeat(400), j.lr, j.temperature, j.context, j.seed) for j in jobs]
        with pytest.raises(WorkerError, match="chillfl-worker-0 ran out of memory") as raised:
            ex.run(big)
        assert not isinstance(raised.value, ClientCodeError)
        err = capfd.readouterr().err
    assert "Traceback" not in err, err


def test_a_clients_own_error_is_a_client_code_error() -> None:
    with _one_worker() as (ex, jobs):
        bad = [ClientJob(1, jobs[1].start, jobs[1].x, jobs[1].y.clone().fill_(99), 0.1, 1.0, {}, 7)]
        with pytest.raises(ClientCodeError, match="client 1: RuntimeError: index 99"):
            ex.run(bad)
        assert ex.pool.usable

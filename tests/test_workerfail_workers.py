"""A worker that runs out of memory says what it asked for, not a fixed "Cannot allocate memory"."""

from __future__ import annotations

import multiprocessing
import multiprocessing.util
import os
from typing import Any, Mapping

import pytest
import torch

from chillfl.executors.processes import ClientCodeError, ProcessExecutor, WorkerError
from chillfl.training.local import LocalSpec
from test_executors import _alive, _jobs, _mlp

ASKED = "you tried to allocate 4000000000000 bytes"


class AskTooMuch:
    """A term whose every call fails as torch's allocator does for a model that always needs more than the machine has."""

    reads = ()

    def __call__(self, params: Mapping[str, torch.Tensor], context: Mapping[str, Any]) -> torch.Tensor:
        raise MemoryError(f"{ASKED}\nsecond line, not in the message")


def test_an_out_of_memory_worker_line_quotes_the_failed_request() -> None:
    """The parent's line was a fixed "(MemoryError: Cannot allocate memory); fewer workers or smaller rounds need less":
    torch's size was lost, and a client that always asks too much was promised that a resume helps."""
    model = _mlp()
    ex = ProcessExecutor(model, LocalSpec(epochs=1, batch_size=8, terms=(AskTooMuch(),)), workers=1)
    pid = ex.pids[0]
    try:
        with pytest.raises(WorkerError) as raised:
            ex.run(_jobs(model, [9, 7], (3, 4)))
        temp = multiprocessing.util.get_temp_dir()  # the pool's folder (short_socket_folder)
        assert not any(name.startswith("out-of-memory-") for name in os.listdir(temp))  # the note is read and removed
    finally:
        ex.close()
    line = str(raised.value)
    assert not isinstance(raised.value, ClientCodeError)
    assert f"worker chillfl-worker-0 ran out of memory (MemoryError: {ASKED});" in line, line
    assert line.endswith("; the run can go on after freeing memory or with fewer workers, unless one client alone needs more than "
                         "the machine has") and "\n" not in line, line
    assert not _alive(pid)

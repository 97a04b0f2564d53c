"""The "declares no classifier head" note is said once a call, like chillfl's other notes: a notebook's second run of
the same model says it again (a Python warning showed once a process, or twice when an import reset the filters)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

import chillfl

HEAD_NOTE = "declares no classifier head"


class _Said(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def head_notes() -> Iterator[list[str]]:
    """The 'declares no classifier head' notes logged inside the block, in order (whatever the logger's level)."""
    log = logging.getLogger("chillfl.models.parts")
    said, level = _Said(), log.level
    log.addHandler(said)
    log.setLevel(logging.DEBUG)
    notes: list[str] = []
    try:
        yield notes
    finally:
        log.removeHandler(said)
        log.setLevel(level)
        notes.extend(m for m in said.messages if HEAD_NOTE in m)


def test_each_moon_run_in_one_process_says_the_head_note_once() -> None:
    x = torch.rand(80, 8)
    y = torch.arange(80) % 3
    data = chillfl.TensorData(x[:60], y[:60], x[60:], y[60:], num_classes=3)
    config = {"federation": {"num_clients": 2, "rounds": 1}, "client": {"batch_size": 10}, "algorithm": {"name": "moon"}}
    said = []
    for _ in range(3):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 3))
        with head_notes() as notes:
            chillfl.run(model=model, data=data, config=config, write=False, progress=False)
        said.append(notes)
    expected = "torch.nn.modules.container.Sequential declares no classifier head; chillfl uses its last nn.Linear, '2'"
    assert [len(notes) for notes in said] == [1, 1, 1]
    assert all(notes[0].startswith(expected) for notes in said)

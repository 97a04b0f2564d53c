"""A spawned worker's watch on its parent, started before the worker imports anything heavy.

Why a module of its own, importing nothing beyond the standard library: a spawned worker unpickles its target before it
runs it, and unpickling :func:`chillfl.executors.processes._worker_main` imports torch (seconds). The watch started only
once that was done, so a worker whose parent was SIGKILLed during its start-up lived on for as long as that took (about
8 s on a loaded machine). :class:`Watched` wraps the target so that unpickling it starts the watch first.
"""

from __future__ import annotations

import importlib
import os
import shutil
import threading
import time
from typing import Any, Callable

WATCH_S = 0.2
"""How often the watch looks for the parent."""


def remove_parent_temp(folder: str) -> None:
    """Remove the dead parent's multiprocessing temp folder (``pymp-*``): a SIGKILLed process cannot remove its own."""
    if os.path.basename(folder).startswith("pymp-"):
        shutil.rmtree(folder, ignore_errors=True)  # the other workers may be removing it too


def watch_parent(parent: int, parent_temp: str, every: float = WATCH_S) -> None:
    """Exit this worker as soon as its parent is gone, whatever the main thread is doing (a long job, an import included)."""
    while os.getppid() == parent:
        time.sleep(every)
    remove_parent_temp(parent_temp)
    os._exit(0)  # no clean-up to wait for: the parent that would collect the results is gone


class Watched:
    """A worker's target (a module-level function, by module and name) that a spawned child unpickles with its parent's
    watch already started: multiprocessing unpickles a process's target before its arguments, whose classes (the pool's
    queues) import torch. ``parent``: the parent's pid; ``parent_temp``: its ``pymp-*`` folder, removed once it is gone."""

    def __init__(self, target: Callable[..., Any], parent: int, parent_temp: str) -> None:
        self.module, self.name = target.__module__, target.__qualname__
        self.parent, self.parent_temp = parent, parent_temp

    def __reduce__(self) -> tuple[Any, ...]:
        return (_watching, (self.module, self.name, self.parent, self.parent_temp))

    def __call__(self, *args: Any) -> Any:
        return getattr(importlib.import_module(self.module), self.name)(*args)


def _watching(module: str, name: str, parent: int, parent_temp: str) -> Watched:
    """Unpickled in the spawned child: start the watch, then give back a target that imports its module when called."""
    threading.Thread(target=watch_parent, args=(parent, parent_temp), name="chillfl-parent-watch", daemon=True).start()
    target = Watched.__new__(Watched)
    target.module, target.name, target.parent, target.parent_temp = module, name, parent, parent_temp
    return target

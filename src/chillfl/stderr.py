"""The lines chillfl says on stderr (notices, a command's last line), said so that a lost stderr cannot change how it ends."""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any


def say(line: str) -> None:
    """``line`` on stderr (above a live progress bar, if tqdm draws one); never raises.

    Why: stderr may be gone when a line is said: a closed pipe (``chillfl compare ... 2>&1 | head``), a hung-up
    terminal (after an ssh disconnect's SIGHUP a write fails with EIO). A stop signal's notice that raised there
    raised inside the signal handler, so the run failed instead of stopping after its round, the signal was lost and
    a comparison went on with its next run; a command's last line that raised turned exit 143 into a traceback.
    """
    try:
        tqdm = sys.modules.get("tqdm")  # loaded by every run; a command that ran none has no bar to keep whole
        if tqdm is not None:
            thread_lock(tqdm.tqdm)
            tqdm.tqdm.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr)
    except (OSError, ValueError):  # BrokenPipeError, EIO; ValueError: the stream was closed
        pass


class ThreadLock:
    """tqdm's lock as chillfl gives it: a threads' RLock, without the ``multiprocessing.RLock`` tqdm's own default lock
    makes, which fixes multiprocessing's start method for the process (the user's later
    ``multiprocessing.set_start_method("spawn")`` raised "context has already been set" after any run with progress).
    ``mp_lock``, what ``tqdm.contrib.concurrent.process_map`` hands its workers, is made when first asked for, under the
    start method chosen by then, and held with the threads' lock from then on, as tqdm's own lock holds both."""

    def __init__(self) -> None:
        self._lock = threading.RLock()

    @functools.cached_property
    def mp_lock(self) -> Any:
        import multiprocessing

        return multiprocessing.RLock()

    def _held(self) -> list[Any]:
        made = self.__dict__.get("mp_lock")
        return [self._lock] if made is None else [made, self._lock]

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        for lock in self._held():
            lock.acquire(*args, **kwargs)
        return True

    def release(self) -> None:
        for lock in self._held()[::-1]:
            lock.release()

    def __enter__(self) -> ThreadLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def thread_lock(bar_class: Any) -> None:
    """Give tqdm's ``bar_class`` a :class:`ThreadLock` where it has no lock yet (before its first bar or ``write``);
    a lock already set (the user's, tqdm's own) is kept."""
    if not hasattr(bar_class, "_lock"):
        bar_class.set_lock(ThreadLock())

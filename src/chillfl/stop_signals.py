"""The signals that ask chillfl to stop: SIGINT (Ctrl-C), SIGTERM (a scheduler, ``kill``), SIGHUP (an ssh disconnect).

All three stop a run the same way (after the round, checkpointed, exit 128 + the signal's number). SIGHUP is
held only where it is not ignored: ``nohup chillfl run ...`` starts the run with SIGHUP ignored so that the run
outlives the terminal, and a handler installed over that would turn the disconnect back into a stop. SIGINT is
always held, even where it was inherited ignored (a script's background job ``chillfl run ... &``, a CI harness, a
job started under ``nohup ... &``): a SIGINT that reaches chillfl was sent to it (a Ctrl-C to the script's process
group, ``kill -INT``), and stopping after the round, checkpointed and resumable, is what it asks; keeping it ignored
made ``kill -INT`` and ``timeout -s INT`` do nothing in such jobs.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
import time
from typing import Any, Callable, Iterator, TypeVar

T = TypeVar("T")

REPEAT_WINDOW_S = 1.0
"""How soon after a stop signal the same signal again is the same one delivered twice, not a second one (:class:`Repeats`)."""

SIGINT_REPEAT_WINDOW_S = 0.05
""":data:`REPEAT_WINDOW_S` for SIGINT: shorter than any person's double Ctrl-C, which means "now"."""


SIGHUP: signal.Signals | None = getattr(signal, "SIGHUP", None)
"""SIGHUP where the platform has it; None on Windows, which has no hang-up signal (a bare ``signal.SIGHUP`` there made
``import chillfl`` fail with an AttributeError)."""

STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(sig for sig in (signal.SIGINT, signal.SIGTERM, SIGHUP) if sig is not None)
"""SIGINT, SIGTERM and SIGHUP, those of them this platform has: what every stop-signal handler and mask lists."""


def stop_signals() -> tuple[signal.Signals, ...]:
    """SIGINT, SIGTERM and SIGHUP, less SIGHUP where this process ignores it now (``nohup``; and a ``SIG_IGN`` inherited).
    SIGINT and SIGTERM are always held (the module's docstring says why)."""
    return tuple(sig for sig in STOP_SIGNALS if sig != SIGHUP or signal.getsignal(sig) is not signal.SIG_IGN)


class Repeats:
    """Tells a second stop signal from the same one delivered twice: the same signal again within ``window`` seconds of
    the last one counted is that one.

    Why: GNU ``timeout`` (and a scheduler that stops a job the same way) sends its signal to the command and then to
    the command's whole process group, so the command gets it twice, microseconds apart. Where the first copy's handler
    has run before the second arrives (the main thread woke up waiting), the second looked like a user's second Ctrl-C
    and stopped the run at once, abandoning its round. A different signal, or the same one later, still counts. SIGINT's
    window is :data:`SIGINT_REPEAT_WINDOW_S`: ``timeout -s INT`` repeats it microseconds apart, a person's quick second
    Ctrl-C (a terminal sends it to each process once) comes a tenth of a second later or more, and means "now".
    ``clock``: seconds, monotonic (a test's own clock).
    """

    def __init__(self, window: float = REPEAT_WINDOW_S, clock: Callable[[], float] = time.monotonic,
                 sigint_window: float = SIGINT_REPEAT_WINDOW_S) -> None:
        self.window = window
        self.sigint_window = sigint_window
        self.clock = clock
        self._last: tuple[int, float] | None = None

    def counts(self, signum: int) -> bool:
        """Whether ``signum``, just received, is a new stop signal (then it is the one later repeats are measured from)."""
        now = self.clock()
        window = self.sigint_window if signum == signal.SIGINT else self.window
        if self._last is not None and self._last[0] == signum and now - self._last[1] <= window:
            return False
        self._last = (signum, now)
        return True


class HeldSignals:
    """The stop signals held back from construction until :meth:`release`, which passes the first one that came on
    to the handlers it displaced, from where ``release`` is called.

    Why: a folder made in between (``ResultWriter``) must be in the hands of the code that removes it again before
    an interruption can land; made and handed over under a held signal, then released inside that code's ``try``,
    no instruction between the two can be interrupted. A handler, not a signal mask: Python runs its handlers in
    the main thread whichever thread the kernel delivered the signal to (torch's threads do not block it). Main
    thread only; elsewhere nothing is held (no signal handler runs in another thread anyway).
    """

    def __init__(self) -> None:
        import threading

        self.received: int | None = None
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in stop_signals():
                self._previous[sig] = signal.signal(sig, self._hold)

    def _hold(self, signum: int, frame: Any) -> None:
        if self.received is None:
            self.received = signum

    def release(self) -> None:
        """Give the handlers back, then raise the signal that was held, if one was (idempotent)."""
        previous, self._previous = self._previous, {}
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if self.received is not None:
            signum, self.received = self.received, None
            signal.raise_signal(signum)


class RaisedLater:
    """A block in which the stop signals' handlers run as their signals come, but an exception one raises is kept, and
    raised where :meth:`check` is called or when the block ends.

    Why: a handler runs wherever the main thread checks for signals, and a library's C code checks too: Ray's
    ``ray.get`` and ``ray.wait`` call ``PyErr_CheckSignals`` while they wait, and take only a KeyboardInterrupt or a
    SystemExit from it. Another exception (the runner's ``RunInterrupted`` for a second stop signal) stayed set while
    Ray went on calling into Python, which ended the run in a chain of ``SystemError`` tracebacks and exit 1 instead of
    the interruption's one line and 128 + the signal. Only the exception waits: the handler runs at once, so a first
    signal's notice is said when it comes and a repeat (:class:`Repeats`) is measured from when it came. The block's
    owner waits in short steps and calls :meth:`check` between them. ``SIG_DFL`` and ``SIG_IGN`` run no Python code and
    are left as they are. Main thread only; elsewhere no handler runs anyway.
    """

    def __init__(self) -> None:
        self.raised: BaseException | None = None
        self._previous: dict[int, Callable[[int, Any], Any]] = {}

    def __enter__(self) -> "RaisedLater":
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                handler = signal.getsignal(sig)
                if callable(handler):
                    self._previous[sig] = handler
                    signal.signal(sig, functools.partial(self._run, handler))
        return self

    def _run(self, handler: Callable[[int, Any], Any], signum: int, frame: Any) -> None:
        try:
            handler(signum, frame)
        except BaseException as exc:  # noqa: BLE001 - kept, raised by check() outside the C code that ran the handler
            if self.raised is None:  # the first: with no deferral it alone would have been raised
                self.raised = exc

    def check(self) -> None:
        """Raise the exception a handler raised since the block began (or the last check), if one did."""
        if self.raised is not None:
            exc, self.raised = self.raised, None
            raise exc

    def __exit__(self, *exc_info: Any) -> None:
        previous, self._previous = self._previous, {}
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        self.check()


def made_held(make: Callable[[], T]) -> tuple[T, HeldSignals]:
    """``make()`` (a folder made: ``claim_dir``, a ``ResultWriter``) with the stop signals held, and the hold, which the
    caller releases as the first line of the ``try`` that removes what was made; released here if ``make`` fails.

    Why one function: a signal between the ``mkdir`` and that ``try`` left an empty ``.partial`` (each place that makes a
    folder wrote these same lines)."""
    held = HeldSignals()
    try:
        return make(), held
    except BaseException:
        held.release()
        raise


STARTING_LINE = "chillfl: interrupted; nothing was written"
"""What the ``chillfl`` command says when a stop signal came while it imported its own modules (:func:`command_start`)."""


def _is_command() -> bool:
    """Whether this process is the ``chillfl`` command: ``python -m chillfl``, or the console script (its ``__main__`` is
    the script ``chillfl``). Not a notebook, a test or a script that imports :mod:`chillfl.cli`, nor a spawned worker
    (whose copy of the parent's script runs as ``__mp_main__``)."""
    import sys
    from pathlib import Path

    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name == "chillfl.__main__":
        return True
    return getattr(main, "__name__", None) == "__main__" and Path(getattr(main, "__file__", None) or "").name == "chillfl"


class StartHold(HeldSignals):
    """The ``chillfl`` command's hold from :func:`command_start` until :func:`chillfl.cli.main` has its own handlers in
    place: they take it over (:meth:`hand_over`) and release it inside the ``try`` that says a stop signal's line.

    Why not released where the imports end: between there and ``main``'s handlers the rest of ``chillfl.cli``'s body
    ran under the inherited handlers, where SIGTERM and SIGHUP killed the command with nothing said and SIGINT was a
    KeyboardInterrupt traceback. Found where it is, in the process's signal handlers (:meth:`in_place`), not in a
    variable of its own: a caller of ``main`` without one (a notebook, a test) finds none."""

    @staticmethod
    def in_place() -> StartHold | None:
        """The hold that has the stop signals now, if it is a :class:`StartHold` (SIGTERM is always among them)."""
        owner = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
        return owner if isinstance(owner, StartHold) else None

    def hand_over(self, handler: Callable[[int, Any], object]) -> dict[int, Any]:
        """The handlers this hold displaced (the inherited ones: the new owner gives them back when it ends); from now on
        :meth:`release` installs ``handler`` for each held signal instead, and passes it the held signal, if one came."""
        displaced = self._previous
        self._previous = dict.fromkeys(displaced, handler)
        return displaced


@contextlib.contextmanager
def command_start() -> Iterator[None]:
    """Around the command line's module imports (``chillfl.cli``'s own, a few tenths of a second before its handlers are
    installed): a stop signal meanwhile is held, and once they are done ends the command with one line
    (:data:`STARTING_LINE`) and 128 + the signal's number. Only in the ``chillfl`` command (:func:`_is_command`); an
    import of the module anywhere else keeps the caller's handlers.

    The imports done with no signal, the hold (:class:`StartHold`) goes on past the block: :func:`chillfl.cli.main`
    takes it over once its own handlers are there, and a signal held in between is raised into them, inside its
    ``try``. So the command has its stop signals from here (the first line of ``chillfl.cli``, before its standard-library
    imports) to its end with no gap; only one before here (the interpreter's start-up, ``import chillfl`` and this small
    module, its first few hundredths of a second) meets Python's defaults.

    Why: SIGTERM's default action killed the command there with nothing said (exit -15), SIGINT a KeyboardInterrupt
    traceback from inside an import. Held rather than raised: the imports complete, whatever their code does with an
    exception (:class:`HeldSignals`). SIGHUP ignored on entry (``nohup``) stays ignored."""
    held = StartHold() if _is_command() else None
    imported = False
    try:
        yield
        imported = True
    finally:
        if held is not None and (held.received is not None or not imported):  # else main() takes the hold over
            received, held.received = held.received, None
            held.release()
            if received is not None:
                from chillfl.stderr import say

                say(STARTING_LINE)
                raise SystemExit(128 + received)

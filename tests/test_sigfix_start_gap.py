"""No gap in the ``chillfl`` command's stop signals between its held imports and :func:`chillfl.cli.main`'s handlers.

``command_start`` released its hold (the inherited handlers back: SIGTERM's default, Python's SIGINT handler) where
``chillfl.cli``'s imports ended, and ``main`` installed its own handlers only later: a signal in between (the rest of
the module's body, ``main``'s first lines) killed the command with nothing said (SIGTERM 143, SIGHUP 129), was a
KeyboardInterrupt traceback (SIGINT), or was dropped (SIGINT inherited ignored: the command ran on). Now ``main``'s
handlers take the hold over (:class:`~chillfl.stop_signals.StartHold`) and the held signal is said as any other there.

Forced deterministically in a child process (no timing): the child sends the signal to itself at a patched point of
the gap, and runs the command as ``python -m chillfl`` does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chillfl import cli
from chillfl.stop_signals import STARTING_LINE, StartHold, stop_signals

CHILD = textwrap.dedent(
    """
    import contextlib, os, runpy, signal, sys

    where, signum, argv = sys.argv[1], signal.Signals[sys.argv[2]], sys.argv[3:]
    import chillfl.stop_signals as stop_signals
    import chillfl.worker_start as worker_start

    if where == "after_imports":  # right where command_start's block ends: the rest of chillfl.cli's body runs next
        start = stop_signals.command_start

        @contextlib.contextmanager
        def signalled():
            with start():
                yield
            os.kill(os.getpid(), signum)

        stop_signals.command_start = signalled
    else:  # main()'s first line (before its own handlers are installed)
        refuse = worker_start.refuse_in_worker_start

        def signalled(entry):
            os.kill(os.getpid(), signum)
            refuse(entry)

        worker_start.refuse_in_worker_start = signalled
    sys.argv = ["chillfl", *argv]
    runpy.run_module("chillfl", run_name="__main__", alter_sys=True)  # as `python -m chillfl ...` runs
    """
)


def _command(where: str, signum: signal.Signals, *argv: str, ignored: signal.Signals | None = None) -> subprocess.CompletedProcess[str]:
    def handlers() -> None:  # set explicitly: CI runs under nohup (SIGHUP, and SIGINT in a background job, inherited ignored)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN if sig == ignored else signal.SIG_DFL)

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(Path(cli.__file__).parents[1]), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-c", CHILD, where, signum.name, *argv], capture_output=True, text=True, timeout=120, env=env,
                          preexec_fn=handlers)


@pytest.mark.parametrize("where", ["after_imports", "main_start"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_between_the_held_imports_and_mains_handlers_is_the_commands_line(where: str, signum: signal.Signals) -> None:
    """It was SIGTERM/SIGHUP's default (killed, nothing said) or a KeyboardInterrupt traceback."""
    proc = _command(where, signum, "list")
    assert proc.stderr.strip().splitlines() == [STARTING_LINE], proc.stderr
    assert proc.returncode == 128 + signum, proc.stderr
    assert proc.stdout == ""  # stopped before the command ran


def test_sigint_inherited_ignored_in_the_gap_still_stops_the_command() -> None:
    """SIGINT is always taken (stop_signals says why): in the gap it was ignored again, and the command ran on."""
    proc = _command("after_imports", signal.SIGINT, "list", ignored=signal.SIGINT)
    assert proc.stderr.strip().splitlines() == [STARTING_LINE], proc.stderr
    assert proc.returncode == 128 + signal.SIGINT, proc.stderr


def test_sighup_ignored_on_entry_stays_ignored_in_the_gap() -> None:
    """``nohup``: the command goes on after a disconnect, the hand-over included."""
    proc = _command("after_imports", signal.SIGHUP, "--version", ignored=signal.SIGHUP)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("chillfl "), proc.stdout
    assert "interrupted" not in proc.stderr


def test_the_command_signals_take_over_a_start_hold_and_give_back_what_it_displaced() -> None:
    """The held signal is raised into main()'s handlers where it releases the hold (inside its ``try``); on the way out
    the handlers from before the hold are given back, not the hold's."""
    before = {sig: signal.getsignal(sig) for sig in stop_signals()}
    hold = StartHold()
    try:
        assert StartHold.in_place() is hold
        signal.raise_signal(signal.SIGTERM)  # held
        with pytest.raises(cli.Terminated), cli._CommandSignals() as signals:
            assert signal.getsignal(signal.SIGTERM) == hold._hold  # still held until started()
            signals.started()
    finally:
        hold.release()  # a no-op once handed over and released
    assert {sig: signal.getsignal(sig) for sig in stop_signals()} == before
    assert StartHold.in_place() is None


def test_main_in_process_without_a_start_hold_leaves_the_handlers_as_it_found_them(capsys: pytest.CaptureFixture[str]) -> None:
    """A notebook or a test imports chillfl.cli without the command's hold: main() installs and gives back its own."""
    before = {sig: signal.getsignal(sig) for sig in stop_signals()}
    assert StartHold.in_place() is None
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("chillfl ")
    assert {sig: signal.getsignal(sig) for sig in stop_signals()} == before


def test_the_hold_begins_before_the_command_modules_standard_library_imports() -> None:
    """Signals sent during ``chillfl.cli``'s argparse/logging/dataclasses imports (tens of ms) were tracebacks or silent
    kills: every import of the module but ``__future__`` and the small signal module itself is inside the hold."""
    import ast

    import chillfl.cli

    tree = ast.parse(Path(chillfl.cli.__file__).read_text(encoding="utf-8"))
    outside = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
               and not (isinstance(node, ast.ImportFrom) and node.module in ("__future__", "chillfl.stop_signals"))]
    assert outside == [], [ast.unparse(node) for node in outside]

"""A stop signal at the edges of a command: one landing in a finaliser is raised again in the command's own code, and the
console script ignores one that comes once the command has said its last line (as ``python -m chillfl`` did)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chillfl.cli import _CommandSignals


class _SignalsWhenDropped:
    """Sends this process SIGINT from its finaliser, where Python drops any exception (matplotlib's GC callbacks were one)."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # bytecode for the handler to run in, inside the finaliser
            pass


def test_a_signal_that_lands_in_a_finaliser_is_raised_again_in_the_commands_code(capsys: pytest.CaptureFixture[str]) -> None:
    """Before, the handler's KeyboardInterrupt was dropped in the finaliser ("Exception ignored in ...", a traceback on
    stderr) and, the handler having fired, the command went on and exited 0."""
    reached, handler, hook = False, signal.getsignal(signal.SIGINT), sys.unraisablehook
    with pytest.raises(KeyboardInterrupt):
        with _CommandSignals():
            _SignalsWhenDropped()  # dropped at once: its finaliser runs here
            for _ in range(200):  # the re-sent signal's handler raises here, within RESEND_S
                time.sleep(0.05)
            reached = True
    assert not reached
    assert "Exception ignored" not in capsys.readouterr().err
    assert sys.unraisablehook is hook and signal.getsignal(signal.SIGINT) is handler  # both given back (an xdist worker ignores SIGINT)


def test_the_console_script_ignores_a_signal_once_the_command_has_ended(tmp_path: Path) -> None:
    """The entry point the console script names (pyproject's [project.scripts]) is ``chillfl.cli:entry``, and a SIGINT
    sent after :func:`chillfl.cli.main` returned does not change the exit status (before: 130, with nothing said)."""
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert 'chillfl = "chillfl.cli:entry"' in pyproject
    script = ("import os, signal, chillfl.cli as cli\n"
              "main = cli.main\n"
              "def late(argv=None, **kwargs):\n"
              "    code = main(argv, **kwargs)\n"
              "    os.kill(os.getpid(), signal.SIGINT)\n"  # as `timeout -s INT` just as the command ends
              "    return code\n"
              "cli.main = late\n"
              "cli.entry()\n")
    out = subprocess.run([sys.executable, "-c", script, "--version"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert (out.returncode, out.stderr) == (0, ""), out
    assert out.stdout.startswith("chillfl ")

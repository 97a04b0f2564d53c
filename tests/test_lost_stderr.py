"""A stop signal ends a run the same way when stderr is gone (a closed pipe; a hung-up terminal's EIO is the same OSError).

Before, the signal handler's notice ("stopping after this round") raised BrokenPipeError inside the handler: the run
failed where it stood instead of stopping after its round, the signal was spent, a comparison went on with its next
run, and the command's last line raised again (a traceback and exit 1, not 143). Each child here has fd 2 on a pipe
whose reading end is closed before anything is said, so every write to stderr fails; what it did is read from its
exit status and its folders.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_cli_late_signals import CONFIG

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import chillfl.runner
    from chillfl.cli import main

    read, write = os.pipe()
    os.close(read)
    os.dup2(write, 2)  # stderr: a pipe nobody reads any more
    enter = chillfl.runner._Signals.__enter__

    def entered(self):
        out = enter(self)
        signal.raise_signal(signal.SIGTERM)  # as a scheduler's: stop after round 1
        return out

    chillfl.runner._Signals.__enter__ = entered
    sys.exit(main(sys.argv[1:]))
    """
)


def _chillfl(tmp_path: Path, *args: str) -> int:
    config = tmp_path / "late.toml"
    config.write_text(CONFIG.format(out=(tmp_path / "out").as_posix()))
    proc = subprocess.run([sys.executable, "-c", CHILD, args[0], str(config), *args[1:]], capture_output=True, text=True, timeout=300)
    return proc.returncode


def test_sigterm_with_stderr_gone_stops_the_run_after_its_round_resumable(tmp_path: Path) -> None:
    assert _chillfl(tmp_path, "run", "-q") == 128 + signal.SIGTERM
    partial = tmp_path / "out" / "late.partial"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["late.partial"]
    assert len((partial / "metrics.jsonl").read_text().splitlines()) == 1  # round 1 done, then stopped
    assert (partial / "checkpoint.safetensors").is_file()


def test_sigterm_with_stderr_gone_stops_a_comparison_at_its_first_run(tmp_path: Path) -> None:
    assert _chillfl(tmp_path, "compare", "-q", "--grid", "client.lr=0.05,0.1") == 128 + signal.SIGTERM
    (folder,) = (tmp_path / "out").iterdir()
    assert folder.name.endswith("-compare.partial")
    runs = sorted(p.name for p in folder.iterdir() if p.is_dir())
    assert len(runs) == 1 and runs[0].endswith(".partial"), runs  # stopped, resumable; the second run never started


class _GoneStream:
    """A stderr whose reader went away: every write fails as a closed pipe's does."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_config_error_with_stderr_gone_still_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's one line cannot be written; its exit status still says what happened (it was a traceback, exit 1)."""
    from chillfl.cli import main

    monkeypatch.setattr(sys, "stderr", _GoneStream())
    assert main(["run", str(tmp_path / "missing.toml")]) == 2

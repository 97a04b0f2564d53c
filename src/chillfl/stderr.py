"""The lines chillfl says on stderr (notices, a command's last line), said so that a lost stderr cannot change how it ends."""

from __future__ import annotations

import sys


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
            tqdm.tqdm.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr)
    except (OSError, ValueError):  # BrokenPipeError, EIO; ValueError: the stream was closed
        pass

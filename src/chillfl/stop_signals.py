"""The signals that ask chillfl to stop: SIGINT (Ctrl-C), SIGTERM (a scheduler, ``kill``), SIGHUP (an ssh disconnect).

All three stop a run the same way (after the round, checkpointed, exit 128 + the signal's number). SIGHUP is
held only where it is not ignored: ``nohup chillfl run ...`` starts the run with SIGHUP ignored so that the
run outlives the terminal, and a handler installed over that would turn the disconnect back into a stop.
"""

from __future__ import annotations

import signal


def stop_signals() -> tuple[signal.Signals, ...]:
    """SIGINT, SIGTERM and SIGHUP, less SIGHUP where this process ignores it now (``nohup``; and a ``SIG_IGN`` inherited)."""
    held = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        held.append(signal.SIGHUP)
    return tuple(held)

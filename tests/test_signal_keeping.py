"""``keeping_signal_handlers``: a C-level reset of SIGTERM (what ``ray.shutdown`` does) must not let a SIGTERM kill the run."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import ctypes, os, signal, sys, threading, time
    from chillfl.executors.ray_executor import keeping_signal_handlers

    hits = []
    signal.signal(signal.SIGTERM, lambda *a: hits.append(1))
    libc = ctypes.CDLL(None)
    libc.signal.argtypes, libc.signal.restype = [ctypes.c_int, ctypes.c_void_p], ctypes.c_void_p

    def stop():  # as ray.shutdown does: SIGTERM back to its default below Python, then more work
        libc.signal(signal.SIGTERM, 0)  # SIG_DFL
        time.sleep(0.3)

    threading.Timer(0.15, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
    if sys.argv[1] == "kept":
        keeping_signal_handlers(stop)
    else:
        stop()
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGTERM)  # after it, too
    time.sleep(0.2)
    print("hits", len(hits))
    """
)


@pytest.mark.parametrize("mode", ["kept", "plain"])
def test_a_c_level_reset_does_not_let_sigterm_kill(mode: str) -> None:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, timeout=60)
    if mode == "plain":  # the unprotected call: the reset is real, the SIGTERM kills (so the test can fail)
        assert out.returncode == -15, out
    else:
        assert out.returncode == 0 and out.stdout.strip() == "hits 2", out

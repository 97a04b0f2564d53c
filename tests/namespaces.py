"""A private network and PID namespace for the Ray and Flower suites (tests/test_private_net.py), tied to the
process that starts it: whichever of them dies, however it dies, takes every process of the namespace with it."""

from __future__ import annotations

import ctypes
import signal
import subprocess
from typing import Any

NAMESPACES = ["unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child"]
"""A private network, and a PID namespace whose first process is the command: when it ends, or is killed
(``--kill-child``: also when ``unshare`` itself is, e.g. by a test's timeout), the kernel kills every process
left in the namespace. Ray's head and nodes run in sessions of their own, so without it a suite killed half-way
left them running (a Ray head outlived an interrupted run by 45 minutes)."""

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before ``exec``: SIGKILL when the process that started it dies. ``unshare`` blocks SIGTERM
    while it waits, and the namespace's first process ignores a signal it has no handler for, so a SIGTERM to
    the test process alone (``kill``, ``pkill pytest``) left the inner suite running to its end (minutes)."""
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def in_namespace(command: list[str], **popen: Any) -> subprocess.Popen[Any]:
    """Start ``command`` as the first process of a fresh private namespace (:data:`NAMESPACES`) that dies with
    its starter."""
    return subprocess.Popen([*NAMESPACES, *command], preexec_fn=_die_with_parent, **popen)

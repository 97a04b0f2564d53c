"""Process sessions: Ray and Flower start their helpers in the session of the process the test launched."""

from __future__ import annotations

from procs import SESSION, live_pids


def session_pids(sid: int) -> list[int]:
    """Live (non-zombie) processes of session ``sid``, read from /proc."""
    return live_pids(SESSION, sid)

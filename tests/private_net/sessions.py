"""Process sessions: Ray and Flower start their helpers in the session of the process the test launched."""

from __future__ import annotations

from pathlib import Path


def session_pids(sid: int) -> list[int]:
    """Live (non-zombie) processes of session ``sid``, read from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                out.append(int(entry.name))
    return out

"""Live processes read from /proc, for the tests that check that nothing outlives its run."""

from __future__ import annotations

from pathlib import Path

PARENT, SESSION = 1, 3
"""Positions in /proc/PID/stat after the command name: the parent's pid, the session id."""


def live_pids(field: int, value: int) -> list[int]:
    """Live (non-zombie) processes whose stat ``field`` (:data:`PARENT` or :data:`SESSION`) equals ``value``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[field]) == value and fields[0] != "Z":
                out.append(int(entry.name))
    return out


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class InterruptAt:
    """A run callback that raises KeyboardInterrupt at round ``at``, as Ctrl-C would (before that round's checkpoint)."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_round(self, record: dict) -> None:
        if record["round"] == self.at:
            raise KeyboardInterrupt

    def on_end(self, output: object) -> None:
        pass


def cmdline(pid: int) -> str:
    """Process ``pid``'s command line, its arguments joined by NULs; "" once it has exited (listed a moment before, it may be
    gone by the time its file is read: a FileNotFoundError failed a test that way)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""

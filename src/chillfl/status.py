"""``chillfl status FOLDER``: where a run or a comparison stands, read from its folder while it runs, or after.

For a comparison (``NAME-compare.partial``, its shards' shared folder, or a finished ``NAME-compare``) one line a
run, in plan order: finished (its final accuracy), diverged, running (its folder is locked by a chillfl process),
stopped (resumable from the round of its checkpoint, or from the start), not started. For one run, its line.
Nothing is written; a running run is told by a shared ``flock`` probe held for a moment, which never blocks it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from chillfl.errors import ConfigError
from chillfl.storage.results import FAILED, PARTIAL, FolderInUse, RunLock
from chillfl.storage.run_folder import CHECKPOINT

FIELD = "run_dir"


@dataclass(frozen=True)
class RunState:
    """One run's line: its name, state (``kind``: finished, diverged, running, stopped, not started; ``detail``), rounds
    written of those planned, and final global accuracy when finished."""

    name: str
    kind: str
    detail: str = ""
    rounds: int | None = None
    planned: int | None = None
    accuracy: float | None = None

    def cells(self) -> list[str]:
        rounds = "-" if self.rounds is None else f"{self.rounds}/{self.planned}" if self.planned else str(self.rounds)
        state = f"{self.kind} ({self.detail})" if self.detail else self.kind
        return [self.name, state, rounds, "-" if self.accuracy is None else f"{100 * self.accuracy:.2f}"]


def _rounds_written(folder: Path) -> int:
    """Rounds in ``metrics.jsonl`` (0 without it): a cheap count of lines, not a parse."""
    try:
        with (folder / "metrics.jsonl").open("rb") as fh:
            return sum(1 for line in fh if line.strip())
    except OSError:
        return 0


def _locked(folder: Path) -> bool:
    """Whether a chillfl process holds ``folder``'s exclusive lock (a run going on)."""
    try:
        RunLock(folder, shared=True).release()
    except FolderInUse:
        return True
    except ConfigError:  # gone meanwhile (renamed when it finished)
        return False
    return False


def run_state(parent: Path, name: str, planned: int | None = None) -> RunState:
    """Run ``name``'s state from what ``parent`` holds of it (``NAME``, ``NAME.failed``, ``NAME.partial`` or nothing)."""
    done, failed, partial = parent / name, parent / f"{name}{FAILED}", parent / f"{name}{PARTIAL}"
    if (done / "summary.json").is_file():
        return folder_state(done, name, planned)
    for folder in (failed, partial, done):
        if folder.is_dir() and (folder is not failed or (failed / "failure.json").is_file()):
            return folder_state(folder, name, planned)
    return RunState(name, "not started", "", None, planned)


def folder_state(folder: Path, name: str, planned: int | None = None) -> RunState:
    """The state of the one folder ``folder`` of run ``name``, told by its suffix (``.failed``, ``.partial``, none):
    ``chillfl status NAME.failed`` describes that folder, not a later run of the same name beside it."""
    if folder.name.endswith(FAILED):
        try:
            at = json.loads((folder / "failure.json").read_text(encoding="utf-8")).get("round")
        except (OSError, ValueError, AttributeError):
            at = None
        return RunState(name, "diverged", f"at round {at}" if at is not None else "", _rounds_written(folder), planned)
    if folder.name.endswith(PARTIAL):
        rounds = _rounds_written(folder)
        if _locked(folder):
            return RunState(name, "running", "", rounds, planned)
        how = "resumes from its checkpoint" if (folder / CHECKPOINT).is_file() else "before its first checkpoint: runs again"
        return RunState(name, "stopped", how, rounds, planned)
    if (folder / "summary.json").is_file():
        try:
            summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            summary = {}
        accuracy = summary.get("final_global_acc")
        return RunState(name, "finished", "", summary.get("rounds"), planned, accuracy if isinstance(accuracy, (int, float)) else None)
    # a finished folder without its summary: a run stopped early by a callback
    return RunState(name, "stopped", "early, by a callback", _rounds_written(folder), planned)


def comparison_states(folder: Path) -> list[RunState]:
    """Every run of the comparison in ``folder``, in plan order (from its ``config.toml`` and ``sweep.json``)."""
    from chillfl.config import load_config
    from chillfl.sweeps.plan import plan_runs
    from chillfl.sweeps.record import read_sweep

    variants, options, reference = read_sweep(folder, force=True)  # an edited config.toml still shows where the runs stand
    plan = plan_runs(load_config(folder / "config.toml"), [], options, variants, reference)
    return [run_state(folder, c.config.name, c.config.federation.rounds) for c in plan.cells]


def status_table(path: str | Path) -> str:
    """The status of the run or comparison folder ``path`` as a Markdown table with a one-line summary above it."""
    from chillfl.sweeps.record import is_sweep

    folder = Path(path)
    if not folder.is_dir():
        raise ConfigError(FIELD, f"{folder} is not a folder (give a run's or a comparison's result folder)")
    if is_sweep(folder):
        states = comparison_states(folder)
        counts: dict[str, int] = {}
        for s in states:
            counts[s.kind] = counts.get(s.kind, 0) + 1
        what = "comparison (table written)" if not folder.name.endswith(PARTIAL) else "comparison"
        head = f"{folder}: {what}, {len(states)} runs: " + ", ".join(f"{n} {state}" for state, n in counts.items())
    elif (folder / "config.toml").is_file():
        name = folder.name.removesuffix(PARTIAL).removesuffix(FAILED)
        planned = None
        try:
            from chillfl.config import load_config

            planned = load_config(folder / "config.toml").federation.rounds
        except ConfigError:
            pass
        states = [folder_state(folder, name, planned)]
        head = f"{folder}: one run"
    else:
        raise ConfigError(FIELD, f"{folder} is not a chillfl result folder (no config.toml)")
    lines = [head, "| run | state | rounds | accuracy % |", "|---|---|---|---|"]
    lines += ["| " + " | ".join(s.cells()) + " |" for s in states]
    return "\n".join(lines)

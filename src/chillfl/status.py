"""``chillfl status FOLDER...``: where a run or a comparison stands, read from its folder while it runs, or after.

For a comparison (``NAME-compare.partial``, its shards' shared folder, or a finished ``NAME-compare``) one line a
run, in plan order: finished (its final accuracy), diverged, running (its folder is locked by a chillfl process),
stopped (resumable from the round of its checkpoint, or from the start; or stopped early by a callback, its results
written), not started. For one run, its line. A folder that holds result folders (``results/``) gives each of theirs.
Nothing is written; a running run is told by a shared ``flock`` probe held for a moment, which never blocks it.
"""

from __future__ import annotations

from pathlib import Path

from chillfl.errors import ConfigError, one_line
from chillfl.paths import shell_path
from chillfl.plugins import reading_data
from chillfl.storage.results import FAILED, PARTIAL
from chillfl.storage.run_folder import (
    SWEEP_FILE, is_temperature_sweep, lost_sweep, refuse_temperature_sweep,
)
from chillfl.partition_refusal import checked_folder_state, checked_run_state
from chillfl.storage.run_state import RunState, folder_state, is_sweep
from chillfl.wording import counted

FIELD = "run_dir"


def comparison_states(folder: Path) -> list[RunState]:
    """Every run of the comparison in ``folder``, in plan order (from its ``config.toml`` and ``sweep.json``)."""
    from chillfl.config import load_config
    from chillfl.sweeps.plan import plan_runs
    from chillfl.sweeps.record import read_sweep

    variants, options, reference = read_sweep(folder, force=True)  # an edited config.toml still shows where the runs stand
    try:
        plan = plan_runs(load_config(folder / "config.toml"), [], options, variants, reference, existing=folder)
    except ConfigError:
        begun = _folded_names(folder)
        if begun is None:
            raise
        return [checked_run_state(folder, name, _own_rounds(folder, name)) for name in begun]
    return [checked_run_state(folder, c.config.name, c.config.federation.rounds) for c in plan.cells]


def _folded_names(folder: Path) -> list[str] | None:
    """The run names of an older comparison in ``folder`` whose names fold alike (:func:`~chillfl.run_names.folder_key`)
    and are not all on disk apart, in plan order, as :func:`~chillfl.run_names.comparison_labels` reads them; None for
    any other comparison. Why: its plan is refused (a resume would run the missing one into the other's folder), but
    status only reads: an older chillfl's ``lr-ı/``, stopped before ``lr-i`` began, was refused with "give them labels
    that differ in more than case", which no one can do to a folder begun already."""
    from chillfl.run_names import comparison_labels, folder_clash

    names = list(comparison_labels(folder))
    if folder_clash(names) is None or folder_clash(names, apart=names) is not None:  # no fold clash, or one name twice
        return None
    return names


def _own_rounds(folder: Path, name: str) -> int | None:
    """The rounds run ``name``'s own ``config.toml`` plans (its folder, stopped or failed), None where it has none."""
    from chillfl.config import load_config

    for held in (folder / name, folder / f"{name}{PARTIAL}", folder / f"{name}{FAILED}"):
        if (held / "config.toml").is_file():
            try:
                return load_config(held / "config.toml").federation.rounds
            except ConfigError:
                return None
    return None


def status_table(path: str | Path) -> str:
    """The status of the run or comparison folder ``path`` as a Markdown table with a one-line summary above it.

    The folder is read as data: no plugin a saved config names is imported (:func:`~chillfl.plugins.reading_data`); a
    plugin's table is kept as written, and nothing here needs its code."""
    with reading_data("chillfl status"):
        return _status_table(Path(path))


def is_result_folder(folder: Path) -> bool:
    """A run's or a comparison's folder (what :func:`status_table` reads): a comparison's record, or a run's ``config.toml``
    (not a temperature sweep's, which has one too: a parent holding one was refused for it, where ``chillfl report`` skips it)."""
    return not is_temperature_sweep(folder) and (is_sweep(folder) or (folder / "config.toml").is_file())


def status_folders(path: str | Path) -> list[Path]:
    """The result folders ``path`` names: itself, or, when it is none but holds some (``results/``, a parent of a job
    array's ``--out`` folders), each of its sub-folders that is one, sorted, as ``chillfl report`` walks a folder of runs.

    A path that is neither is returned as it is: :func:`status_table` says why it is no result folder."""
    folder = Path(path)
    if not folder.is_dir() or is_result_folder(folder):
        return [folder]
    try:
        subs = sorted(s for s in folder.iterdir() if s.is_dir() and (is_result_folder(s) or _claimed_run(s)))
    except OSError:
        return [folder]
    return subs or [folder]


def _claimed_run(folder: Path) -> bool:
    """A run's ``NAME.partial`` without its ``config.toml`` yet: a run claims its folder (and opens ``metrics.jsonl``)
    before it writes its config. Why: ``status OUT`` at that moment said "OUT is not a chillfl result folder". Its
    ``metrics.jsonl`` is the run's mark: a comparison's just-claimed ``NAME-compare.partial`` (no records yet) and a
    stray empty ``x.partial`` are no run."""
    return (folder.name.endswith(PARTIAL) and folder.is_dir() and not (folder / "config.toml").exists() and not is_sweep(folder)
            and (folder / "metrics.jsonl").is_file())


def _claimed_state(folder: Path) -> RunState:
    """The line of a :func:`_claimed_run` folder: starting while its process holds it, else stopped before it wrote its config."""
    name = folder.name.removesuffix(PARTIAL)
    state = folder_state(folder, name)
    if state.kind == "running":
        return RunState(name, "running", "starting: its config.toml is not written yet", state.rounds)
    return RunState(name, "stopped", "before it wrote its config.toml: nothing to resume; start the run again", state.rounds)


def not_there(folder: Path, command: str = "status") -> str:
    """The line for a folder that does not exist: where a ``.partial`` went once its run or comparison ended (renamed
    ``NAME``, or ``NAME.failed`` for a run that diverged). Before: "is not a folder", for a path typed from the progress line.
    ``command``: the one to run on the ended folder (``chillfl report`` says it too)."""
    if folder.name.endswith(PARTIAL):
        ended = [p for p in (folder.with_name(folder.name.removesuffix(PARTIAL) + end) for end in ("", FAILED)) if p.is_dir()]
        if ended:
            return f"{folder} does not exist: it ended, and its folder is {ended[0]}; `chillfl {command} {shell_path(ended[0])}`"
    return f"{folder} does not exist (give a run's or a comparison's result folder)"


def _status_table(folder: Path) -> str:
    if not folder.exists():
        raise ConfigError(FIELD, not_there(folder))
    if not folder.is_dir():
        raise ConfigError(FIELD, f"{folder} is not a folder (give a run's or a comparison's result folder)")
    shown = one_line(folder)  # escaped, as the run names are (RunState.cells)
    if folder.is_symlink():  # `status latest`: the run's own folder and name (the link's named no run), the link said too
        folder = folder.resolve()
        shown = f"{shown} (a link to {one_line(folder)})"
    refuse_temperature_sweep(folder, FIELD)
    if is_sweep(folder):
        states = comparison_states(folder)
        counts: dict[str, int] = {}
        for s in states:
            counts[s.kind] = counts.get(s.kind, 0) + 1
        what = "comparison (table written)" if not folder.name.endswith(PARTIAL) else "comparison"
        head = f"{shown}: {what}, {counted(len(states), 'run')}: " + ", ".join(f"{n} {state}" for state, n in counts.items())
    elif (folder / "config.toml").is_file():
        lost = lost_sweep(folder)
        if lost:
            raise ConfigError(SWEEP_FILE, lost)
        name = (folder.name if folder.name not in ("", "..") else folder.resolve().name).removesuffix(PARTIAL).removesuffix(FAILED)  # `chillfl status .` named no run
        planned = None
        try:
            from chillfl.config import load_config

            planned = load_config(folder / "config.toml").federation.rounds
        except ConfigError:
            pass
        states = [checked_folder_state(folder, name, planned)]
        head = f"{shown}: one run"
    elif _claimed_run(folder):
        states = [_claimed_state(folder)]
        head = f"{shown}: one run"
    else:
        raise ConfigError(FIELD, f"{folder} is not a chillfl result folder (no config.toml)")
    lines = [head, "| run | state | rounds | accuracy % |", "|---|---|---|---|"]
    lines += ["| " + " | ".join(s.cells()) + " |" for s in states]
    return "\n".join(lines)

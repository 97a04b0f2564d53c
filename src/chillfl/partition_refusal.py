"""Whether ``chillfl resume`` would refuse a stopped run's ``partition.from`` file, for the run-state lines of ``chillfl
status`` and of the HTML report alike.

Why a module of its own: :mod:`chillfl.storage.run_state` reads only a run's folder and sits below the config and the data
(it cannot import them), while the file check needs both (:func:`~chillfl.data.partition_file.check_file`, the resume's
own check, and the config's paths). ``chillfl status`` and the report both ask here, so they say the same: before, only
status asked, and the report's row said "resumes after round 1" of a run whose resume refused its split file."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from chillfl.errors import ConfigError
from chillfl.storage.checkpoint import CorruptCheckpoint
from chillfl.storage.results import PARTIAL
from chillfl.storage.run_folder import STARTED_IN, check_saved_files, start_folder, sweep_started_in
from chillfl.storage.run_state import RunState, folder_state, is_sweep, run_state


def checked_run_state(parent: Path, name: str, planned: int | None = None) -> RunState:
    """:func:`~chillfl.storage.run_state.run_state`, checked against the run's ``partition.from`` file (:func:`partition_checked`)."""
    return partition_checked(run_state(parent, name, planned), resumed_folder(parent, name))


def checked_folder_state(folder: Path, name: str, planned: int | None = None) -> RunState:
    """:func:`~chillfl.storage.run_state.folder_state`, checked against the run's ``partition.from`` file (:func:`partition_checked`)."""
    return partition_checked(folder_state(folder, name, planned), folder)


def resumed_folder(parent: Path, name: str) -> Path:
    """The folder of run ``name`` under ``parent`` whose line says it resumes: ``NAME`` (stopped by a callback, its summary
    written) or ``NAME.partial``, as :func:`~chillfl.storage.run_state.run_state` picks it."""
    return parent / name if (parent / name / "summary.json").is_file() else parent / f"{name}{PARTIAL}"


def promises_resume(state: RunState) -> bool:
    """Whether ``state``'s line says a resume goes on with the run ("resumes after round 2, its checkpoint", "...;
    `chillfl resume` continues it"), not that resume refuses it or runs it again."""
    return state.kind == "stopped" and (state.detail.startswith("resumes") or state.detail.endswith("continues it"))


def partition_checked(state: RunState, folder: Path) -> RunState:
    """``state``, or, where its line promises a resume and ``chillfl resume`` would refuse the run's ``partition.from`` file
    (moved or deleted since, changed into no partition file, or an older noisy file), the line saying so and what to do.
    Why: a line read only from the run's folder said "resumes after round 1" of a run whose resume then refused its split file."""
    if not promises_resume(state):
        return state
    refusal = partition_refusal(folder)
    if refusal is None:
        return state
    early = state.detail.split("; ", 1)[0] if state.detail.startswith("early") else ""  # "early, by a callback: ..." stays said
    return replace(state, detail=f"{early}; {refusal}" if early else refusal)


def started_in(folder: Path) -> Path | None:
    """Where the run in ``folder`` was started, whence a resume reads a relative ``partition.from``: a comparison's run, its
    comparison's start folder (its ``sweep.json``'s record, as the comparison's resume reads it); another run, its checkpoint's
    record (:func:`~chillfl.storage.run_folder.start_folder`)."""
    if is_sweep(folder.parent):
        return sweep_started_in(folder.parent)
    try:
        return start_folder(folder, check_saved_files(folder, force=True).run.get(STARTED_IN))
    except (ConfigError, CorruptCheckpoint, OSError):
        return start_folder(folder, None)


def partition_refusal(folder: Path) -> str | None:
    """Why a resume of the run in ``folder`` refuses its ``partition.from`` file, and what to do; None: it reads it (or the
    run reads none). Only the file is read, not the dataset: what a resume refuses whatever the data."""
    from chillfl.config import RunConfig, load_config
    from chillfl.data.partition_file import FROM_FILE, FROM_KEY, check_file

    try:
        config = load_config(folder / "config.toml")
    except ConfigError:
        return None  # said otherwise (resume refuses an unreadable config.toml)
    if config.partition.get("name") != FROM_FILE:
        return None
    _, options = RunConfig.component(config.paths_from(started_in(folder)).partition)  # what the resume's data build reads
    try:
        check_file(options, config.federation.num_clients)
    except ConfigError as exc:
        path = options.get(FROM_KEY)
        gone = isinstance(path, str) and not os.path.lexists(path)
        again = "put the file back where it was, or start the run again" if gone else "start the run again"
        return f"resume refuses it, its {exc.field}: {exc.message}" + ("" if "start it again" in exc.message else f"; {again}")
    return None

"""Running a planned comparison: every run in turn, its failures, its resume, each variant's tuned point and the tables.

:func:`run_compare` is what ``chillfl compare``, ``chillfl.compare`` and each claim of ``chillfl reproduce``
run, in named steps (:func:`check_runs` ... :func:`write_tables`); :func:`resume_compare` goes on with an
interrupted one (``chillfl resume results/NAME-compare.partial``). The runs share one set of worker pools
(:class:`~chillfl.executors.pools.WorkerPools`); a run that diverges or crashes is recorded and the sweep goes
on (:class:`Sweep`).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import logging
import math
import os
import shutil
import stat
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from chillfl import runner
from chillfl.aggregation.registry import dropped_choices
from chillfl.config import RunConfig, load_config
from chillfl.data import ArrayDataset, FederatedData
from chillfl.data.loaders import data_absent
from chillfl.errors import ComparisonInterrupted, ConfigError, Diverged, RunNotStarted, StorageError, SweepFailed, Unreachable, one_line, signal_in, stopped_as
from chillfl.paths import current_folder, shell_path
from chillfl.executors.pools import WorkerPools
from chillfl.experiment import Experiment, Plugged, build_data, build_experiment, check_parts, check_protocol, run_notes, say_notes
from chillfl.plugins import CUSTOM, is_custom
from chillfl.progress import Progress, format_seconds
from chillfl.report.caveats import (controls_caveat, ends_with_nonfinite_accuracy, ends_with_nonfinite_loss, epsilon_caveat, epsilon_units, global_model_kinds,
                                    grid_edge_caveat, local_mix_warning, nonfinite_accuracy_caveat, nonfinite_loss_caveat, other_test_rows_caveat, steering_caveat, step_size_caveat)
from chillfl.plots.stop import with_stop_evaluation  # matplotlib-free
from chillfl.report.compare import CompareResult, build_rows, build_seed_rows, format_seed_table, format_table, write_band_figures, write_compare_figures
from chillfl.run_names import BYTES_FIGURE, COMPARISON_CONFIG, CURVES_FIGURE, DIFFERENCES_FIGURE, LOCAL_CURVES_FIGURE, PRIVACY_UTILITY_FIGURE, TABLE_JSON, TABLE_MD
from chillfl.runner import RunInterrupted, RunOutput, run_experiment
from chillfl.sinks import comparison_ended
from chillfl.executors.processes import ClientCodeError, WorkerError
from chillfl.storage.checkpoint import CorruptCheckpoint, write_atomic
from chillfl.storage.jsonl import strict
from chillfl.storage.results import FAILED, LOCAL_MIX_TV, PARTIAL, FolderInUse, RunLock, claim_dir, in_the_way, rename_free, to_toml
from chillfl.stop_signals import made_held
from chillfl.storage.model_file import read_client_models, read_model
from chillfl.storage.run_folder import CLIENT_MODELS, FIELD as RUN_FIELD, MODEL, folder_named
from chillfl.sweeps.plan import Cell, CompareOptions, Plan, Variant, data_key, describe_plan, gets_controls, left_without_controls, naming, plan_runs
from chillfl.sweeps.record import check_resumable, comparison_toml, made_with_changes, read_sweep, sweep_record, sweep_started_in, write_sweep
from chillfl.storage.run_state import CHECKPOINT, SWEEP_FILE
from chillfl.wording import counted
from chillfl.sweeps.resume import DivergedBefore, finished_run, has_ended, say_executor_move, stopped_run
from chillfl.sweeps.shard import FIELD as SHARD_FIELD, ComparisonFinished, Shard, hold_folder, join_folder
from chillfl.settings.distillation import dropped_method_defaults
from chillfl.tune import Point, is_local, point_scores, select_point
from chillfl.temperature.policy import TemperaturePolicy

if TYPE_CHECKING:
    import torch
    from torch import nn

log = logging.getLogger(__name__)


@dataclass
class Sweep:
    """The comparison's runs as they finish: their outputs and failures, run or (resuming) read back or resumed."""

    partial: Path | None
    resuming: bool
    force: bool
    progress: Progress
    pools: WorkerPools
    total: int
    ran: int = 0
    """Runs run or resumed by this process (not read back): the ETA's basis."""
    mine: int | None = None
    """The runs this process goes through (a shard's share of ``total``); None: all ``total``. The ETA counts these only:
    a shard's ETA that counted the whole comparison's runs said minutes with one run of its own left."""
    visited: int = 0
    """Runs this process has gone through so far (run, resumed or read back)."""
    busy_s: float = 0.0
    results: dict[tuple[str, int, int], RunOutput | None] = field(default_factory=dict)
    failures: dict[tuple[str, int, int], str] = field(default_factory=dict)
    dataset: ArrayDataset | None = None
    """The user's own data (``chillfl.compare(data=...)``), which a run rebuilt here splits; None: the config's registered dataset."""
    started_in: Path | None = None
    """A resumed comparison's start folder (:func:`~chillfl.sweeps.record.sweep_started_in`): its runs, resumed or new, read
    their relative ``data_dir`` from there and record it; None: the current folder's (a new comparison, a shard)."""
    shard: Shard | None = None
    """This process's share of the runs (``--shard K/N``): how to go on after a stop is then said for a shard."""
    let_go: dict[tuple[str, int, int], Devices] = field(default_factory=dict)
    """Written runs whose trained models this sweep dropped from their results (:meth:`keep`), with the devices they were
    on: :meth:`bring_back` reads those of the returned runs back from their folders."""

    def run(
        self, i: int, config: RunConfig, key: tuple[str, int, int], data: FederatedData | None, model: nn.Module | None, plugged: Plugged | None,
    ) -> None:
        """The ``i``-th run (``key``: variant, tuning point, seed); resuming, what it has already (:func:`finished_run`, :func:`stopped_run`) first.
        ``data``: None for a run that had ended when the resume began (:func:`check_runs` built none for it)."""
        partial = self.partial
        cfg = config if partial is None else config.with_overrides({"out_dir": str(partial)})
        label = f"[{i + 1}/{self.total}] {cfg.name}"
        before = finished_run(partial, cfg.name, cfg.federation.num_clients) if self.resuming and partial is not None else None
        self.visited += 1
        if self.total > 1:
            eta = f", ETA {format_seconds(left)}" if (left := self.eta_s()) is not None else ""
            log.info("run %d of %d: %s%s", i + 1, self.total, cfg.name, " (finished before: read back)" if before is not None else eta)
        if isinstance(before, DivergedBefore):
            self.results[key], self.failures[key] = None, f"diverged at round {before.round}"
            return
        if before is not None:
            self.keep(key, before, cfg.federation.num_clients)
            return
        if partial is not None and (blocked := in_the_way(partial, cfg.name)) is not None:  # before the run's folder is made or resumed
            raise ConfigError(RUN_FIELD, f"{blocked}, where the comparison's run {cfg.name} must have its folder (nothing else is read back "
                                         f"as that run); remove it, then {resume_advice(partial, self.shard)}")
        start = time.monotonic()
        try:
            stopped = stopped_run(partial, cfg.name) if self.resuming and partial is not None else None
            if stopped is not None and partial is not None:  # (the one implies the other)
                build = self._own_parts(data, model, plugged)
                try:
                    self.results[key] = runner.resume_experiment(stopped, progress=self.progress, pools=self.pools, label=label, force=self.force, build=build, started_in=self.started_in)
                except CorruptCheckpoint as exc:  # a stopped run without its checkpoint runs again from round 1 (stopped_run)
                    raise exc.restart(f"remove {stopped} and `chillfl resume {shell_path(partial)}` runs it again from its start") from exc
            else:
                here = cfg.paths_from(self.started_in)  # what it reads; cfg is what its folder saves
                with stopped_as(RunNotStarted):  # a wrapped stop signal here is the comparison's stop, not this run's failure
                    if data is None:  # it had ended when the resume began and was removed since: it runs again, on the same data
                        data = build_data(here, self.dataset)
                    own = build_experiment(here, data=data, model=model, plugged=plugged) if model is not None or plugged else None
                self.results[key] = run_experiment(cfg, write=partial is not None, progress=self.progress, data=data, label=label, experiment=own, pools=self.pools, started_in=self.started_in,
                                                  exact_name=True)  # a duplicate of this shard that claimed it first runs it: refused
        except Diverged as exc:  # the sweep goes on; its folder is NAME.failed and every table says so
            self.results[key], self.failures[key] = None, f"diverged at round {exc.round}"
            if exc.stop_signal is not None:  # a stop signal came in the round that diverged: the comparison stops here, resumable
                log.warning("%s diverged (%s)", cfg.name, exc)
                signal.raise_signal(exc.stop_signal)
            log.warning("%s diverged (%s); the comparison goes on", cfg.name, exc)
        except RunInterrupted as exc:  # the comparison's line names the run that stopped, as its other lines do
            exc.run = cfg.name
            raise
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - one failed run (its code raised, out of memory) must not lose the others
            if isinstance(exc, WorkerError) and not isinstance(exc, ClientCodeError):  # a lost worker is no result: stop, resumable
                exc.run, exc.folder = cfg.name, partial  # its checkpoint is kept; resuming the comparison finishes the run
                raise
            if partial is not None and storage_failed(exc, partial):  # a full disk is no result either: stop, resumable, never tabulate without it
                raise stopped_by_storage(exc, cfg.name, partial, self.shard) from exc
            self.results[key], self.failures[key] = None, f"failed: {type(exc).__name__}"
            log.warning("%s failed (%s: %s); the comparison goes on", cfg.name, type(exc).__name__, shortened(one_line(str(exc))))
        finally:
            self.ran += 1
            self.busy_s += time.monotonic() - start
        self.keep(key, self.results[key], cfg.federation.num_clients)

    def keep(self, key: tuple[str, int, int], out: RunOutput | None, num_clients: int | None = None) -> None:
        """Record run ``key``'s output, without its trained models (global and clients') once they are in its folder.

        The sweep reads only records and summaries; the models were held for every finished run until the table was
        written (a tuned comparison of a ResNet: a gigabyte of models, on the GPU where they ran, while the later runs
        trained). The returned runs get theirs back at the end (:meth:`bring_back`). A run not written (``write=False``)
        keeps them: they are nowhere else."""
        self.results[key] = out
        if out is None or out.folder is None or (out.model_state is None and not out.client_states):
            return
        self.let_go[key] = Devices(first_device(out.model_state), first_device(next(iter(out.client_states.values()), None)),
                                   tuple(out.model_state or ()), tuple((cid, tuple(state)) for cid, state in out.client_states.items()), num_clients)
        out.model_state, out.client_states = None, {}

    def bring_back(self, returned: Iterable[RunOutput]) -> None:
        """The trained models of the ``returned`` runs (:attr:`CompareResult.outputs`), read back from their folders
        (``model.safetensors``, ``client_models.safetensors``) onto the devices they were on. Called before the
        comparison's folder is renamed: the outputs name their run folders inside the ``.partial`` one."""
        wanted = {id(out) for out in returned}
        for key, held in list(self.let_go.items()):
            out = self.results.get(key)
            if out is None or id(out) not in wanted or out.folder is None:
                continue
            try:
                if held.model:
                    model = read_model(out.folder / MODEL, held.model_device)
                    out.model_state = {name: model[name] for name in held.model}
                if held.clients:
                    clients = read_client_models(out.folder / CLIENT_MODELS, held.clients_device, held.num_clients)
                    out.client_states = {cid: {name: clients[cid][name] for name in names} for cid, names in held.clients}
            except ConfigError as exc:  # removed or damaged since the run wrote it: the table stands, the output lacks its model
                log.warning("the trained model of %s is not read back (%s): its output has none", out.folder.name, exc)
            except KeyError as exc:  # rewritten since without a client or tensor the run had: the same, not a traceback
                log.warning("the trained model of %s is not read back (its file lacks %s): its output has none", out.folder.name, exc)
            del self.let_go[key]

    def eta_s(self) -> float | None:
        """Seconds left for the run now starting and this process's runs after it, at the mean time of the runs that ran
        here; None before the first."""
        if not self.ran:
            return None
        left = (self.total if self.mine is None else self.mine) - self.visited + 1
        return self.busy_s / self.ran * max(left, 1)

    def _own_parts(self, data: FederatedData | None, model: nn.Module | None, plugged: Plugged | None) -> Callable[[RunConfig], Experiment] | None:
        """A stopped run's parts on the user's own data, model or method parts, which its saved config cannot rebuild
        (None: none of them, the config's registered ones)."""
        if self.dataset is None and model is None and not plugged:
            return None

        def build(config: RunConfig) -> Experiment:
            return build_experiment(config, data=data if data is not None else build_data(config, self.dataset), model=model, plugged=plugged)

        return build


@dataclass(frozen=True)
class Devices:
    """Where a comparison's run had its trained models (:meth:`Sweep.keep`) and in what order, so that they are read back
    as they were: on that device, their names and clients in the run's order (the file reader's is by name)."""

    model_device: str
    clients_device: str
    model: tuple[str, ...]
    """Its global model's names, in order (empty: it had none)."""
    clients: tuple[tuple[int, tuple[str, ...]], ...]
    """Its client models' ids and names, in order (empty: none, ``checkpoint.client_models = false``)."""
    num_clients: int | None = None
    """The run's ``federation.num_clients``: a client file read back naming a client past them is refused (a crafted file)."""


def first_device(state: Mapping[str, torch.Tensor] | None) -> str:
    """The device of ``state``'s first tensor (a run's models are on its one device); the CPU for none."""
    first = next(iter(state.values()), None) if state is not None else None
    return str(first.device) if first is not None else "cpu"


STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})
"""What a run folder's writes fail with when the storage, not the run, is at fault (a full disk or quota, an I/O error, a
file system gone read-only): :class:`~chillfl.errors.StorageError`'s cases, also where a library raised the bare OSError."""


def storage_failed(exc: BaseException, partial: Path) -> bool:
    """Whether ``exc`` is the storage's failure, not the run's: a comparison then stops, resumable, as for a lost worker.
    It went on before and wrote a table without the run, which ``chillfl resume`` then refused as finished.

    The run folder's writer's :class:`~chillfl.errors.StorageError`, a full disk or quota wherever it was met, and an I/O
    error or read-only file system (:data:`STORAGE_ERRNOS`) on a file in the comparison's folder ``partial``. An I/O
    error reading the run's input (a bad data file) is the run's own failure: it came back on every resume."""
    if isinstance(exc, StorageError):
        return True
    if not isinstance(exc, OSError) or exc.errno not in STORAGE_ERRNOS:
        return False
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    name = exc.filename
    return isinstance(name, (str, bytes, os.PathLike)) and Path(os.fsdecode(name)).resolve().is_relative_to(partial.resolve())


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` or an exception it was raised from is ENOSPC or EDQUOT: freeing space is then the way on (not for
    a read-only file system or an I/O error)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        seen = seen.__cause__
    return False


def resume_advice(partial: Path, shard: Shard | None) -> str:
    """How to go on with the stopped comparison in ``partial``. A shard's: ``chillfl resume`` is refused while any other
    shard holds the folder, so first this shard again (it reads its finished runs back and resumes the stopped one)."""
    again = f"chillfl resume {shell_path(partial)}"
    if shard is None:
        return again
    return f"restart shard {shard} with the same command, or once every shard has ended: {again}"


def stopped_by_storage(exc: BaseException, run: str, partial: Path, shard: Shard | None) -> StorageError:
    """The one line of a comparison that a run's full disk (or I/O error) stopped: what could not be written, what is kept
    (the run's last checkpoint, if it wrote one) and how to go on with the comparison, not with the run alone."""
    first: BaseException = exc
    while isinstance(first.__cause__, StorageError):  # the runner's own line names the run's folder as the thing to resume
        first = first.__cause__
    what = one_line(str(first))  # a bare OSError's says its errno and file
    then = "free space, then " if disk_full(exc) else ""
    saved = (partial / f"{run}{PARTIAL}" / CHECKPOINT).is_file()
    kept = "its finished runs and the run's last checkpoint are kept" if saved else "its finished runs are kept; the run starts again"
    return StorageError(f"run {run}: {what}; the comparison stopped ({kept}): {then}{resume_advice(partial, shard)}")


def shortened(text: str, limit: int = 200) -> str:
    """``text`` cut to about ``limit`` characters for a log line, but never inside a ``chillfl ...`` command it ends with
    (a resume command cut mid-path was no command)."""
    if len(text) <= limit:
        return text
    at = text.find("chillfl ")
    if at < 0:
        return text[:limit] + "..."
    head = text[:at]
    return (head[:limit] + "... " if len(head) > limit else head) + text[at:]


def check_runs(
    plan: Plan, dataset: ArrayDataset | None, model: nn.Module | None, plugged: Plugged | None, dry_run: bool, resume: Path | None = None,
    started_in: Path | None = None, write: bool = True,
) -> dict[str, FederatedData] | None:
    """Every run's data and parts, built before anything is written (``dry_run``: its protocol too); the
    federated data by :func:`~chillfl.sweeps.plan.data_key`, shared by the runs with the same partition.
    ``resume``: the interrupted comparison's folder, whose ended runs are only read back (the last shard's table
    reads them all), so their parts are not built again. ``started_in``: the resumed comparison's start folder, where
    relative paths are read from (:meth:`~chillfl.config.RunConfig.paths_from`; None: the current folder). ``write``: the
    runs write their folders, so their sinks' packages must be installed (checked first: not at the run's start, mid-comparison).

    None: a dry run without the dataset's files, where only each run's names and options could be checked.
    A dry run then says the notes its runs would (:func:`~chillfl.experiment.run_notes`), once every run is checked."""
    datasets: dict[str, FederatedData] = {}
    notes: list[str] = []  # a dry run's, said once every run is checked: a note cannot precede a later run's error line
    for c in plan.cells:
        if resume is not None and has_ended(resume, c.config.name):
            continue
        if write:
            runner.check_sinks(c.config, dry_run=dry_run)  # one MissingExtra line before anything is written or built
        with naming(c.variant, plan.from_grid):
            if dataset is not None and not is_custom(c.config.dataset.get("name")):  # a variant's registered dataset would be recorded, the user's data trained on
                raise ConfigError("dataset.name", f"a run on the user's own data must record dataset.name = {CUSTOM!r}, got {c.config.dataset.get('name')!r}")
            key = data_key(c.config)  # of the paths as written: the runs that share data share it wherever the resume is typed
            here = c.config.paths_from(started_in)
            if key not in datasets:
                try:
                    datasets[key] = runner.from_start_folder(c.config, started_in, lambda cfg: build_data(cfg, dataset))
                except (ConfigError, Unreachable) as exc:
                    if not (dry_run and data_absent(exc)):
                        raise
                    for other in plan.cells:  # no data here: each run's names and options
                        with naming(other.variant, plan.from_grid):
                            check_parts(other.config)
                    say_notes(note for other in plan.cells for note in run_notes(other.config, None))
                    return None
            exp = build_experiment(here, data=datasets[key], model=model, plugged=cell_parts(c, plugged))  # every part of every variant is valid before anything is written
            if dry_run:
                check_protocol(exp)
                notes += run_notes(here, exp)
    say_notes(notes)
    return datasets


def dropped_choice_notes(config: RunConfig, plan: Plan) -> list[str]:
    """A note for each variant that switches ``algorithm.name`` and so runs a choice every method reads alike
    (``weighting``: :data:`~chillfl.aggregation.registry.SHARED_OPTIONS`) otherwise than the base config sets it, and
    for each that switches ``distillation.method`` and so runs an option whose default is the method's
    (``cache_duration``: :data:`~chillfl.settings.distillation.METHOD_DEFAULTED`) otherwise.

    Why: an override that picks another method starts its table afresh (the old method's options are its own), so
    ``--grid algorithm.name=fedavg,fedprox`` on a base with ``weighting = "uniform"`` ran FedProx at "samples", a
    confounded comparison with nothing said. A note, not an error: the variant may mean it; setting the option in the
    variant (or on the grid) says so and silences it."""
    notes = []
    for variant, run in zip(plan.variants, plan.configs):
        for option, set_, ran in dropped_choices(config.algorithm, run.algorithm):
            notes.append(f"note: variant {variant.label!r} switches algorithm.name, so it runs {run.algorithm.get('name')} at its own "
                         f"algorithm.{option} = {ran!r}, not the base's {set_!r}: the comparison differs in it too (set algorithm.{option} "
                         "in the variant, or grid it, to compare at one setting)")
        for option, set_, ran in dropped_method_defaults(config.distillation, run.distillation_setup):  # its default is the method's
            notes.append(f"note: variant {variant.label!r} switches distillation.method, so it runs {run.distillation.get('method')} at its own "
                         f"distillation.{option} = {ran!r}, not the base's {set_!r}: the comparison differs in it too (set "
                         f"distillation.{option} in the variant, or grid it, to compare at one setting)")
    return notes


def unstarted(resume: Path | None) -> "contextlib.AbstractContextManager[None]":
    """A comparison's start, before its folder holds anything new: a stop signal here (or its exception that a package
    wrapped, :func:`~chillfl.errors.signal_in`) says so (:func:`~chillfl.errors.stopped_as`).

    A new comparison: :class:`~chillfl.errors.RunNotStarted` of ``"comparison"``: nothing was written, nothing to resume
    (the CLI's line said "unfinished results are left in *.partial folders", of which there was none). A resumed one
    (``resume``: its folder): :class:`~chillfl.errors.ComparisonInterrupted`, resumable as it was.
    """
    if resume is None:
        return stopped_as(lambda: RunNotStarted("comparison"))
    return stopped_as(lambda: ComparisonInterrupted(resume))


@dataclass(frozen=True)
class SweepFolder:
    """Where a comparison writes: ``partial`` while it runs, renamed ``folder`` once its table is written (None: nothing is written)."""

    folder: Path | None
    partial: Path | None


def open_folder(config: RunConfig, plan: Plan, resume: Path | None, write: bool, resumable: bool) -> tuple[SweepFolder, RunLock | None]:
    """The interrupted comparison's folders (``resume``), or new ones with its ``config.toml`` and ``sweep.json``; with the folder's lock.

    One process at a time goes on with a comparison (the first run, or a resume of it). A new folder appears under its
    name locked and holding its ``config.toml`` and ``sweep.json`` (:func:`~chillfl.storage.results.claim_dir`, as a
    run's): made there empty and locked after, a shard of the same comparison started at that instant renamed its own
    folder onto it (a rename replaces an empty folder) and both wrote into one folder, or this one then removed the
    shard's. A second copy started at once gets ``NAME-compare-2``, a separate comparison, as a second run of a name
    gets ``NAME-2`` (what ``reproduce --resume`` looks up, docs/usage.md). Whatever stops the start (a Ctrl-C, a full
    disk) removes the folder again: nothing half-written is left to be taken for a comparison.
    """
    if resume is not None:
        return SweepFolder(resume.with_name(resume.name.removesuffix(PARTIAL)), resume), RunLock(resume)
    if not write:
        return SweepFolder(None, None), None
    toml = comparison_toml(config, plan)
    record = sweep_record(toml.encode(), plan, resumable=resumable)

    def first_files(folder: Path) -> None:
        write_atomic(folder / COMPARISON_CONFIG, toml.encode("utf-8"))
        write_sweep(folder, record)

    (folder, partial, lock), held = made_held(lambda: claim_dir(Path(config.out_dir), f"{config.name}-compare", first_files))
    try:
        held.release()  # one that came meanwhile lands here, where the folder is removed again
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        lock.release()
        raise
    return SweepFolder(folder, partial), lock


def cell_parts(cell: Cell, plugged: Plugged | None) -> Plugged | None:
    """The method parts from Python that run ``cell`` takes: all of them, except that a step-size control that trains at
    T = 1 (:func:`~chillfl.sweeps.plan.with_controls`: its ``[temperature]`` names a policy of its own, ``none``) runs
    without the policy passed from Python, as the control of a policy named by import path replaces that policy.

    Why: a policy instance that declares ``trains_at`` gets its controls as the same class by import path does; a run
    given both would refuse the control's ``[temperature]`` (build_policy). A variant the user asked for keeps the rule
    that a policy from Python replaces ``[temperature]`` (a grid over it is refused)."""
    if plugged is None or plugged.policy is None or not cell.variant.control or is_custom(cell.config.temperature.get("policy")):
        return plugged
    return replace(plugged, policy=None) or None


def run_points(
    plan: Plan, where: SweepFolder, resuming: bool, force: bool, progress: Progress, datasets: Mapping[str, FederatedData],
    model: nn.Module | None, plugged: Plugged | None, only: Shard | None = None, dataset: ArrayDataset | None = None, started_in: Path | None = None,
) -> Sweep:
    """Every run in turn (``only``: a shard's), on worker processes and Ray actors started once for the sweep (executors/pools.py).
    ``dataset``: the user's own data, split again for a run that ended before a resume and was deleted since.
    ``started_in``: a resumed comparison's start folder (:attr:`Sweep.started_in`).

    Interrupted (Ctrl-C, a signal), the comparison resumes as a whole, its finished runs kept: the
    :class:`~chillfl.runner.RunInterrupted` names its ``.partial`` folder. A ConfigError found by the first run
    (a plugin's term that returns a vector, found at its first step) leaves no folder: nothing was run to resume."""
    sweep: Sweep | None = None
    try:
        with WorkerPools() as pools:
            mine = sum(1 for i in range(len(plan.cells)) if only is None or only.takes(i))  # a shard's ETA counts its own runs
            sweep = Sweep(where.partial, resuming, force, progress, pools, len(plan.cells), mine=mine, dataset=dataset, started_in=started_in, shard=only)
            for i, c in enumerate(plan.cells):
                if only is None or only.takes(i):
                    sweep.run(i, c.config, c.key, datasets.get(data_key(c.config)), model, cell_parts(c, plugged))
    except RunInterrupted as exc:
        if where.partial is not None:
            exc.folder = where.partial
        raise
    except KeyboardInterrupt as exc:  # no run held the signal (between runs, or after a run's rounds): name the folder too
        if isinstance(exc.__context__, RunInterrupted) and where.partial is not None:  # a late signal while a run's unwound
            exc.__context__.folder = where.partial
        if where.partial is None or isinstance(exc.__context__, RunInterrupted):
            raise
        raise ComparisonInterrupted(where.partial) from exc
    except ConfigError:
        if where.partial is not None and not resuming and (sweep is None or not sweep.results):
            shutil.rmtree(where.partial, ignore_errors=True)
        raise
    return sweep


@contextlib.contextmanager
def named_if_stopped(where: SweepFolder) -> Iterator[None]:
    """A stop signal while a comparison whose runs are all done writes its table and figures: :class:`ComparisonInterrupted`
    naming its ``.partial`` folder, as between two runs (:func:`run_points`), so the line says what ``chillfl resume`` goes on
    with (it writes the table). Without it the line was the generic one, with no folder. Once the folder is renamed final
    nothing is left to resume: the signal's own exception goes on as it is."""
    try:
        yield
    except (KeyboardInterrupt, Exception) as exc:  # an Exception: a signal a package wrapped (matplotlib's lazy imports)
        signalled = exc if isinstance(exc, KeyboardInterrupt) else signal_in(exc)
        if signalled is None or isinstance(exc, ComparisonInterrupted) or where.partial is None or not where.partial.is_dir():
            raise
        raise ComparisonInterrupted(where.partial) from signalled


def refuse_all_failed(plan: Plan, sweep: Sweep, where: SweepFolder) -> None:
    """:class:`~chillfl.errors.SweepFailed` when no run finished; its folder then becomes ``NAME-compare.failed`` (or, when
    that is taken, by an earlier comparison of the name that failed too, the next free ``NAME-compare.failed-2``, ...)."""
    failures = sweep.failures
    if len(failures) == len(plan.cells):
        failed_at = where.partial
        if where.partial is not None and where.folder is not None:
            name = where.folder.name + FAILED
            failed_at = rename_free(where.partial, where.folder.with_name(name), name)
            comparison_ended(failed_at)  # its runs' sinks named NAME-compare, guessed at their start
        raise SweepFailed(f"every run failed ({len(plan.cells)} of {len(plan.cells)}; the first {next(iter(failures.values()))})", failed_at)


@dataclass(frozen=True)
class Picked:
    """Each variant at its chosen tuning point (the only one without tuning)."""

    runs: dict[tuple[str, int], RunOutput | None]
    """(variant label, seed) -> its run (None: it failed)."""
    failed: dict[tuple[str, int], str]
    """(variant label, seed) -> how its run failed."""
    chosen: dict[str, tuple[Point, list[float]]]
    """Tuned: variant label -> (its point, the validation score of every point)."""


def pick_tuned(plan: Plan, sweep: Sweep) -> Picked:
    """Each variant's point with the best validation score, mean over seeds (:mod:`chillfl.tune`); never the test set."""
    results, failures = sweep.results, sweep.failures
    chosen: dict[str, tuple[Point, list[float]]] = {}
    runs: dict[tuple[str, int], RunOutput | None] = {}
    failed: dict[tuple[str, int], str] = {}
    for v in plan.variants:
        pick = 0
        if plan.tuned:
            points = plan.points_of(v)
            per_point = [[None if (o := results[(v.label, pi, s)]) is None else o.records for s in plan.seeds] for pi in range(len(points))]
            scores = point_scores(per_point, plan.select)
            pick = select_point(scores)
            chosen[v.label] = (points[pick], scores)
        for s in plan.seeds:
            runs[(v.label, s)] = results[(v.label, pick, s)]
            if (v.label, pick, s) in failures:
                failed[(v.label, s)] = failures[(v.label, pick, s)]
    return Picked(runs, failed, chosen)


@dataclass(frozen=True)
class Tables:
    """The comparison's rows (``table.json``), its text table (``table.md``) and the runs they were made from."""

    rows: list[dict[str, Any]]
    table: str
    outputs: dict[str, RunOutput]


def tabulate(config: RunConfig, plan: Plan, picked: Picked, nonfinite: Sequence[str] = (), policy: TemperaturePolicy | None = None, nonfinite_acc: Sequence[str] = (),
             aggregator: object | None = None) -> Tables:
    """FLex&Chill's Table 4 for one seed and no tuning, else the table over seeds; the caveats below either.
    ``nonfinite``: the finished runs whose final global loss is non-finite (:func:`nonfinite_runs`), named below it;
    ``nonfinite_acc``: those whose final global accuracy is (NaN logits), named on a line of their own;
    ``policy``: a temperature policy passed from Python, asked whether it steers by accuracy (the steering caveat);
    ``aggregator``: one passed from Python, asked whether it leaves the global model as it began (the global-model caveat)."""
    ref, base, seeds = plan.reference, plan.baseline, plan.seeds
    # every caveat reads the config of the point each row reports: a tuned lr, T, clip or delta is what that row ran with
    labelled = reported_configs(plan, picked)
    configs = [c for _, c in labelled]
    kinds = global_model_kinds(labelled, aggregator)  # accuracies of no trained global model
    if plan.multi:
        rows = build_seed_rows(plan.variants, picked.runs, seeds, ref, base, picked.chosen if plan.tuned else None, failed=picked.failed, global_models=kinds)
        table = format_seed_table(rows, ref.label, base.label, plan.tune_table if plan.tuned else None, plan.select, config.eval.validation,
                                  bool(config.compare.get("local", False)), {v.label: v.tune for v in plan.variants if v.tune},
                                  sorted({c.eval.clients for c in plan.configs}))
        outputs = {f"{label}, seed {s}": out for (label, s), out in picked.runs.items() if out is not None}
    else:
        outputs = {v.label: o for v in plan.variants if (o := picked.runs[(v.label, seeds[0])]) is not None}
        rows = build_rows(plan.variants, outputs, ref, base, failed={label: why for (label, _), why in picked.failed.items()}, global_models=kinds)
        table = format_table(rows, ref.label, base.label)
    tuned = {**plan.tune_table, **{key: values for v in plan.variants for key, values in v.tune.items()}}  # own grids tune too (an lr in each)
    controls = plan.controls_added  # with_controls added them (as the plan records, not a scaled lr: a variant asked for may scale its own)
    # which variants got controls is the plan's (made from their own configs); what they trained with is the reported point's
    uncontrolled = left_without_controls(plan.variants, plan.configs, policy) if controls else []
    controlled = [c for v, own, c in zip(plan.variants, plan.configs, configs) if controls and gets_controls(v, own)]
    points = {v.label: len(plan.points_of(v)) for v in plan.variants}  # a tuned private variant's selection is not in its epsilon
    for caveat in (step_size_caveat(configs, tuned, controls, uncontrolled, policy), controls_caveat(controlled), grid_edge_caveat(chosen_points(plan, picked)),
                   other_test_rows_caveat(configs), nonfinite_loss_caveat(nonfinite), nonfinite_accuracy_caveat(nonfinite_acc), epsilon_caveat(labelled, points), steering_caveat(labelled, policy)):
        if caveat is not None:
            table = f"{table}\n\n{caveat}"
    return Tables(rows, table, outputs)


def reported_configs(plan: Plan, picked: Picked) -> list[tuple[str, RunConfig]]:
    """(label, config) of each variant at the tuning point its row reports (its chosen one; its own config untuned).

    What a row's numbers are may hang on a tuned key: whether its accuracy is a trained global model's (fedhkd's
    ``prototypes.share_model``), its step size (``client.lr``, ``temperature.value``), what its epsilon bounds
    (``privacy.delta``), whether its controls' identity holds (``client.clip_norm``). So every caveat under the table,
    and the epsilon marks of ``privacy_utility.png``, read the config of the point the row reports, not the variant's."""
    out = []
    for v, config in zip(plan.variants, plan.configs):
        point = picked.chosen[v.label][0] if v.label in picked.chosen else {}
        out.append((v.label, config.with_overrides(point) if point else config))
    return out


def chosen_points(plan: Plan, picked: Picked) -> list[tuple[str, Point, dict[str, list[Any]]]]:
    """(label, chosen point, its grid: the shared one and its own) of each tuned variant that chose one (a variant whose
    every point failed at a seed chose none: its row shows the first point), for the grid-edge caveat."""
    out = []
    for v in plan.variants:
        if v.label in picked.chosen:
            point, scores = picked.chosen[v.label]
            if any(math.isfinite(x) for x in scores):  # a point finished with a finite score at every seed
                out.append((v.label, point, {**plan.tune_table, **v.tune}))
    return out


def nonfinite_runs(plan: Plan, sweep: Sweep, ends: Callable[[Sequence[Mapping[str, Any]]], bool] = ends_with_nonfinite_loss) -> list[str]:
    """Every finished run (any tuning point, picked or not) whose last global loss (``ends``: accuracy) is non-finite, by name, in run order."""
    return [c.config.name for c in plan.cells if (out := sweep.results.get(c.key)) is not None and ends(out.records)]


def one_seed_warning(seed: int) -> str:
    """The line a one-seed comparison of several variants prints on stderr and writes atop its ``table.md``: its table
    (FLex&Chill's Table 4) has no spread and no interval, so a difference in it may be the seed's. Not in the printed
    table: the docs' one-seed blocks stay as made."""
    return (f"one seed ({seed}): this table has no spread and no interval, so its differences may be seed noise; "
            "run --seeds 0,1,2 (or [compare] seeds) for paired differences with 95 % intervals")


def seed_noise_warning(plan: Plan) -> str | None:
    """:func:`one_seed_warning` for a one-seed, untuned comparison of several variants; None for any other."""
    return one_seed_warning(plan.seeds[0]) if not plan.multi and len(plan.variants) > 1 else None


def local_selection_warning(plan: Plan, sweep: Sweep) -> str | None:
    """:func:`~chillfl.report.caveats.local_mix_warning` over every finished run (each tuning point's: selection read them
    all) of a comparison that selects with a local rule; None for any other, and for runs whose summary predates the number."""
    if not (plan.tuned and is_local(plan.select)):
        return None
    mismatch = {c.config.name: float(value) for c in plan.cells
                if (out := sweep.results.get(c.key)) is not None and isinstance(value := out.summary.get(LOCAL_MIX_TV), (int, float))}
    return local_mix_warning(mismatch, plan.select, {c.config.name: c.config.eval.client_split for c in plan.cells})


def two_setups_warning(plan: Plan, sweep: Sweep, resume: Path | None) -> str | None:
    """The line naming what of the comparison ran on two setups; None when nothing did.

    Runs: those whose ``summary.json`` records ``resumed`` (a run resumed on another setup than it started on:
    :func:`chillfl.runner.resumed_across`). The comparison: resumed (``resume``) with other code or torch than its
    ``sweep.json``'s ``made_with``, which names the setup that started it, so its runs finished before ran on that one
    and the rest on this. Neither ``table.json``'s rows nor ``sweep.json`` said so."""
    spans = [c.config.name for c in plan.cells if (out := sweep.results.get(c.key)) is not None and out.summary.get("resumed")]
    changed = made_with_changes(resume) if resume is not None else []
    said = []
    if changed:
        said.append(f"this comparison was resumed with other code or torch than {SWEEP_FILE}'s made_with ({'; '.join(changed)}): "
                    "its runs finished before ran on that setup, the rest on this one")
    if spans:
        said.append(f"{counted(len(spans), 'run')} {'spans' if len(spans) == 1 else 'span'} two setups (resumed on another than they started on; summary.json's resumed): {', '.join(spans)}")
    return "; ".join(said) or None


def table_json(rows: Sequence[Mapping[str, Any]]) -> str:
    """``table.json``'s text: strict JSON, every non-finite number null (a tuned point's NaN score, which table.md
    prints as "non-finite", was written as a bare ``NaN`` literal that jq and JavaScript refuse)."""
    return json.dumps(strict(list(rows)), indent=2, allow_nan=False) + "\n"


COMPARISON_OUTPUTS = (TABLE_MD, TABLE_JSON, CURVES_FIGURE, LOCAL_CURVES_FIGURE, DIFFERENCES_FIGURE, BYTES_FIGURE, PRIVACY_UTILITY_FIGURE)
"""The files :func:`write_tables` writes in a comparison's folder, once its runs have ended."""


def blocked_outputs(plan: Plan, partial: Path) -> list[str]:
    """The comparison's own files (``table.md``, ``curves.png``...) that one of its kept run folders stands where they go.

    Why: an older chillfl let a run take such a name (variant ``"curves.png"``, folder ``curves.png/``); writing the figure
    failed with "Is a directory" and advised a resume, which planned the same names (the folder is finished as it was
    begun) and failed again, every time. Such a file is left out instead (:func:`blocked_note`); the runs are all kept."""
    runs = {c.config.name for c in plan.cells}
    return [name for name in COMPARISON_OUTPUTS if name in runs and (partial / name).is_dir()]


def outputs_in_way(plan: Plan, partial: Path) -> bool:
    """Whether a kept run folder stands where :func:`write_tables` writes: on one of its files (:func:`blocked_outputs`)
    or on the ``NAME.tmp`` a figure is written through (:func:`~chillfl.storage.checkpoint.write_atomic`)."""
    runs = {c.config.name for c in plan.cells}
    return any(n in runs and (partial / n).is_dir() for name in COMPARISON_OUTPUTS for n in (name, f"{name}.tmp"))


def blocked_note(name: str) -> str:
    """The one line saying that run folder ``name`` kept the comparison from writing its file ``name``."""
    return (f"the comparison's {name} is not written: its run folder {name}/ (a name an older chillfl let a variant take) "
            f"stands where it goes; the run is kept")


@contextlib.contextmanager
def staged(partial: Path) -> Iterator[Path]:
    """A new hidden folder in ``partial`` to write the tables and figures into where a kept run's folder stands in the way
    (:func:`outputs_in_way`), removed after (with what is left in it: the files not moved out, :func:`blocked_outputs`).
    Beside the runs, on their file system: moving a file out is a rename."""
    stage = Path(tempfile.mkdtemp(prefix=".outputs-", dir=partial))
    try:
        yield stage
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def write_tables(config: RunConfig, plan: Plan, picked: Picked, tables: Tables, where: SweepFolder, warnings: Sequence[str] = ()) -> None:
    """``table.md`` (the printed table, under the comparison's ``warnings`` where there are any: a reader of the folder sees
    them too), ``table.json`` and the figures in the ``.partial`` folder, then its rename to the finished folder."""
    partial, folder = where.partial, where.folder
    if partial is None or folder is None:
        return
    blocked = blocked_outputs(plan, partial)
    for name in blocked:
        log.warning("%s", blocked_note(name))
    notes = [*warnings, *(blocked_note(name) for name in blocked if name != TABLE_MD)]
    try:
        with staged(partial) if outputs_in_way(plan, partial) else contextlib.nullcontext(partial) as stage:
            (stage / TABLE_MD).write_text("".join(f"warning: {w}\n" for w in notes) + tables.table + "\n", encoding="utf-8")
            (stage / TABLE_JSON).write_text(table_json(tables.rows), encoding="utf-8")
            units = epsilon_units(reported_configs(plan, picked))  # privacy_utility.png's marks, at the point each row reports
            if plan.multi:
                # a stopped run's stop-round evaluation (summary.json) with its records, drawn apart as write_compare_figures has it
                bands = {v.label: [with_stop_evaluation(o.records, o.summary) for s in plan.seeds if (o := picked.runs[(v.label, s)]) is not None] for v in plan.variants}
                write_band_figures(bands, plan.seeds[0], stage, config.name, tables.rows, plan.baseline.label, bool(config.compare.get("local", False)), units)
            else:
                write_compare_figures(tables.outputs, stage, config.name, [v.label for v in plan.variants if v.label not in tables.outputs], tables.rows, units,
                                      [v.label for v in plan.variants])
            for made in sorted(stage.iterdir()) if stage != partial else ():  # drawn aside: each moved in but where a run's folder stands
                if made.name not in blocked:
                    os.replace(made, partial / made.name)
    except OSError as exc:  # a full disk while the tables or figures are written (a traceback from savefig): the folder stays .partial
        if not storage_failed(exc, partial):
            raise
        cause = exc.__cause__ if isinstance(exc, StorageError) and isinstance(exc.__cause__, OSError) else exc
        then = "free space, then " if disk_full(exc) else ""
        raise StorageError(f"cannot write the comparison's tables and figures in {partial}: {cause.strerror or cause}; every run is kept: "
                           f"{then}{resume_advice(partial, None)} writes them") from exc
    if (taken := final_in_the_way(folder)) is not None:  # before anything in it changes
        raise taken_final(partial, folder, taken)
    (partial / SHARDS_FILE).unlink(missing_ok=True)  # the shards' bookkeeping: the finished folder is the one a single process writes
    try:
        partial.rename(folder)
    except OSError as exc:  # it appeared since the check
        if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
            raise
        raise taken_final(partial, folder, final_in_the_way(folder) or "a folder") from None
    point_saved_configs_to(folder, partial)
    moved_into(tables.outputs.values(), partial, folder)


def moved_into(outputs: Iterable[RunOutput], partial: Path, folder: Path) -> None:
    """Each returned run's ``folder`` in the finished comparison ``folder``: the runs wrote theirs inside ``partial``,
    which the rename removed, so a caller's ``result.outputs[label].folder`` named a folder that no longer existed."""
    for out in outputs:
        if out.folder is not None and out.folder.is_relative_to(partial):
            out.folder = folder / out.folder.relative_to(partial)


def final_in_the_way(folder: Path) -> str | None:
    """What stands at a comparison's finished name ``folder`` that its ``.partial`` cannot be renamed onto ("a folder",
    "a file", ...); None when nothing does, or an empty folder (the rename replaces it)."""
    try:
        mode = os.lstat(folder).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"something that cannot be read ({exc.strerror or exc})"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if not stat.S_ISDIR(mode):
        return "a file"
    try:
        return "a folder" if any(os.scandir(folder)) else None
    except OSError:
        return "a folder"


def taken_final(partial: Path, folder: Path, what: str) -> ConfigError:
    """The one line (``run_dir``, exit 2) of a finished comparison whose name another folder or file took while it ran (or
    before its resume): the rename was a raw ``OSError: [Errno 39] Directory not empty``. Nothing is lost: the runs,
    tables and figures stay in ``partial``, and a resume, once the name is free, reads the runs back and finishes."""
    return ConfigError(RUN_FIELD, f"{shell_path(partial)} cannot be renamed {shell_path(folder)}, its finished name: {what} is there already; "
                                  f"its runs, tables and figures are kept in {shell_path(partial)}: move {shell_path(folder)} away, "
                                  f"then {resume_advice(partial, None)} finishes it")


def run_compare(
    config: RunConfig,
    grid: Sequence[str],
    *,
    reference: str | None = None,
    progress: Progress = True,
    write: bool = True,
    options: CompareOptions | None = None,
    dry_run: bool = False,
    variants: Sequence[Variant] | None = None,
    dataset: ArrayDataset | None = None,
    model: nn.Module | None = None,
    plugged: Plugged | None = None,
    resume: Path | None = None,
    force: bool = False,
    on_checked: Callable[[], None] | None = None,
    shard: Shard | None = None,
) -> CompareResult:
    """Run every variant (``--grid`` product, else the config's ``[variants]``) at every seed and tuning point.

    One seed and no tuning: the FLex&Chill Table 4 table. Otherwise the table over seeds
    (:func:`~chillfl.report.compare.format_seed_table`), each variant at its best tuning point on validation accuracy.
    ``dry_run``: build and check every run's parts, then return an empty result (nothing runs or is written).
    ``variants``: instead of ``grid`` strings (:func:`~chillfl.sweeps.plan.grid_variants`). ``dataset`` / ``model``: a user's own
    data and ``nn.Module`` (:func:`chillfl.compare`), as for :func:`chillfl.run`; ``plugged``: its method parts.
    ``resume``: the interrupted comparison's ``.partial`` folder to go on in (:func:`resume_compare`; ``force`` as there).
    ``on_checked``: called once every run's parts are built and checked, before anything is written (the command
    line's info line: a config error stays its one line). ``shard``: run only this share of the runs, in the
    comparison's shared folder (:mod:`chillfl.sweeps.shard`, :func:`run_shard`).

    The steps: plan and bound the runs (:func:`~chillfl.sweeps.plan.plan_runs`), then :func:`run_plan`.
    """
    with unstarted(resume):
        plan = plan_runs(config, grid, options, variants, reference, existing=resume if resume is not None else False,
                         policy=plugged.policy if plugged is not None else None)  # a policy from Python: read for its trains_at, as by import path
    return run_plan(config, plan, progress=progress, write=write, dry_run=dry_run, dataset=dataset, model=model, plugged=plugged, resume=resume, force=force, on_checked=on_checked, shard=shard)


def run_plan(
    config: RunConfig,
    plan: Plan,
    *,
    progress: Progress = True,
    write: bool = True,
    dry_run: bool = False,
    dataset: ArrayDataset | None = None,
    model: nn.Module | None = None,
    plugged: Plugged | None = None,
    resume: Path | None = None,
    force: bool = False,
    on_checked: Callable[[], None] | None = None,
    shard: Shard | None = None,
) -> CompareResult:
    """:func:`run_compare` of a comparison planned already: ``plan`` is ``plan_runs(config, ...)``, so a caller
    that needs the plan itself too (``chillfl reproduce``: its size, its folder to resume) plans it once. Options as there.

    The steps: build every run's parts (:func:`check_runs`), claim the folder (:func:`open_folder`), run each point
    (:func:`run_points`), refuse a sweep where every run failed (:func:`refuse_all_failed`), pick each variant's tuned
    point on validation (:func:`pick_tuned`), tabulate (:func:`tabulate`) and write the tables (:func:`write_tables`).
    """
    with unstarted(resume):
        started_in = sweep_started_in(resume) if resume is not None else None
        datasets = check_runs(plan, dataset, model, plugged, dry_run, resume, started_in, write)
        say_notes(dropped_choice_notes(config, plan))
        if datasets is None or dry_run:
            return CompareResult(None, [], "", complete=datasets is not None, planned=describe_plan(plan), runs=len(plan.cells),
                                 recorded=comparison_toml(config, plan))
        if on_checked is not None:
            on_checked()
    if shard is not None:
        if not write or resume is not None or dataset is not None or model is not None or plugged is not None:
            raise ConfigError(SHARD_FIELD, "a shard writes its runs into the comparison's shared folder, which another process must be able to rebuild "
                                           "them from: not with write=False, a resume, or a user's own data, model or method parts")
        return run_shard(config, plan, shard, datasets, progress, force)
    with unstarted(resume):  # a new folder that a signal stops is removed again (open_folder)
        where, lock = open_folder(config, plan, resume, write, resumable=dataset is None and model is None and plugged is None)
    try:
        sweep = run_points(plan, where, resume is not None, force, progress, datasets, model, plugged, dataset=dataset, started_in=started_in)
        with named_if_stopped(where):
            refuse_all_failed(plan, sweep, where)
            picked = pick_tuned(plan, sweep)
            tables = tabulate(config, plan, picked, nonfinite_runs(plan, sweep), plugged.policy if plugged is not None else None,
                              nonfinite_runs(plan, sweep, ends_with_nonfinite_accuracy), plugged.aggregator if plugged is not None else None)
            sweep.bring_back(tables.outputs.values())  # before write_tables renames the folder they are read from
            warnings = [w for w in (seed_noise_warning(plan), local_selection_warning(plan, sweep)) if w is not None]
            for warning in warnings:  # once each, on stderr; not in the printed table (the docs' blocks stay as made)
                log.warning(warning)
            setups = two_setups_warning(plan, sweep, resume)  # in table.md alone: each resume said its own on stderr already
            write_tables(config, plan, picked, tables, where, [*warnings, *([setups] if setups else [])])
        failures = {c.config.name: sweep.failures[c.key] for c in plan.cells if c.key in sweep.failures}
        return CompareResult(where.folder, tables.rows, tables.table, tables.outputs, failures=failures, runs=len(plan.cells))
    finally:
        if lock is not None:
            lock.release()


def run_shard(
    config: RunConfig, plan: Plan, shard: Shard, datasets: Mapping[str, FederatedData], progress: Progress, force: bool,
) -> CompareResult:
    """This shard's runs in the comparison's shared folder (:mod:`chillfl.sweeps.shard`), and the table if they were the last ones.

    Its finished runs are read back and its stopped one resumed, so a shard restarted after a crash goes on. The
    result has ``pending`` > 0 while other shards' runs are unfinished: then no table is written yet.
    """
    toml = comparison_toml(config, plan)
    record = sweep_record(toml.encode(), plan, resumable=True)
    try:
        folder, partial = join_folder(Path(config.out_dir), f"{config.name}-compare", toml, record, shard)
        lock = hold_folder(folder, partial, record, shard)  # shared with the other shards'; keeps a resume of the whole comparison out while this runs
    except ComparisonFinished as exc:  # a requeued or restarted array job: done, not failed (it ended with exit 2)
        log.warning("shard %s: %s is finished (its table is written): nothing is left for this shard to run", shard, shell_path(exc.folder))
        return CompareResult(exc.folder, [], "", runs=0)
    mine = sum(1 for i in range(len(plan.cells)) if shard.takes(i))
    try:
        same_shard_count(partial, shard)  # first: a shard of another N is refused, not told first that it has no runs
        if not mine:  # it said "its 0 runs ended" and no more
            log.warning("shard %s: N = %d exceeds the comparison's %s, so this shard has none (shards %d to %d run nothing; N = %d is enough)",
                        shard, shard.count, counted(len(plan.cells), "run"), len(plan.cells) + 1, shard.count, len(plan.cells))
        sweep = run_points(plan, SweepFolder(folder, partial), True, force, progress, datasets, None, None, only=shard)
    finally:
        lock.release()
    failures = {c.config.name: sweep.failures[c.key] for c in plan.cells if c.key in sweep.failures}
    left = sum(1 for c in plan.cells if not has_ended(partial, c.config.name))
    if left == 0:  # the last shard to end: the table, as `chillfl resume` would write it
        try:
            return resume_compare(partial, progress=progress, force=force)
        except FolderInUse:
            log.info("shard %s: another shard that ended too is writing the table", shard)
        except ConfigError:
            if partial.exists():
                raise
            log.info("shard %s: another shard wrote the table", shard)  # it renamed the folder between the two checks
        return CompareResult(folder, [], "", failures=failures, runs=mine)
    return CompareResult(partial, [], "", failures=failures, runs=mine, pending=left)


SHARDS_FILE = ".shards"
"""In a comparison's shared folder: the N of the ``--shard K/N`` that made it, so that a shard of another N is refused."""


def same_shard_count(partial: Path, shard: Shard) -> None:
    """Record ``shard``'s N in ``partial`` (:data:`SHARDS_FILE`) if no shard has yet, else refuse another N in one line.

    Shards of different N split the runs differently: some runs would run twice at once and others in no shard, with
    nothing said. A folder an older chillfl made records none: then nothing is refused (the first shard now records it)."""
    path = partial / SHARDS_FILE
    if not path.exists():
        tmp = partial / f"{SHARDS_FILE}.{os.getpid()}.tmp"
        write_atomic(tmp, f"{shard.count}\n".encode())
        try:
            os.link(tmp, path)  # atomic, and never over another shard's: the first N stays
            return
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links: nothing is recorded, so nothing is refused
            return
        finally:
            tmp.unlink(missing_ok=True)
    try:
        recorded = path.read_text(encoding="utf-8").strip()
    except OSError:
        return
    if recorded.isdigit() and int(recorded) != shard.count:
        raise ConfigError(SHARD_FIELD, f"{partial} is split into {recorded} shards (--shard K/{recorded}), this one is --shard {shard}: every shard of "
                                       f"a comparison gives the same N; once every shard has ended, `chillfl resume {shell_path(partial)}` runs what is left")


def resume_compare(
    folder: str | Path, *, progress: Progress = True, force: bool = False, dataset: ArrayDataset | None = None, model: nn.Module | None = None,
    plugged: Plugged | None = None, check: Callable[[RunConfig], None] | None = None,
) -> CompareResult:
    """Go on with the interrupted comparison in ``folder`` (its ``.partial`` folder; :mod:`chillfl.sweeps.resume`): the whole sweep's table.

    ``force``: resume a run whose config or metrics changed since its checkpoint (as ``chillfl resume --force``; never
    from a checkpoint that does not match its checksum). ``dataset`` /
    ``model`` / ``plugged``: the user's own data, ``nn.Module`` and method parts a comparison from Python ran on
    (:func:`chillfl.resume_compare`), which its folder cannot hold; ``check``: called with the comparison's saved config
    before anything runs (that they are the parts it records).

    Its runs read a relative ``data_dir`` (and ``partition.from``) from the folder the comparison was started in
    (:func:`~chillfl.sweeps.record.sweep_started_in`), where that folder holds it, wherever the resume is typed.
    """
    path = folder_named(folder)
    check_resumable(path)
    variants, options, reference = read_sweep(path, force, own_parts=dataset is not None or model is not None or bool(plugged))
    if force:  # read_sweep checked no edit: a move of executor is said as a run's resume says it
        say_executor_move(path)
    changed = made_with_changes(path)
    if changed:  # finished runs are kept as they ran: the rest of the table may differ in the last bits from an uninterrupted one
        log.warning("resuming a comparison started with other code or torch (%s): its runs still to run may not be bitwise what an uninterrupted comparison gives",
                    "; ".join(changed))
    config = load_config(path / "config.toml")
    if check is not None:
        check(config)
    return run_compare(config, [], reference=reference, progress=progress, options=options, variants=variants, resume=path, force=force,
                       dataset=dataset, model=model, plugged=plugged)


def point_saved_configs_to(folder: Path, partial: Path) -> None:
    """Each sub-run's saved config names the finished folder as its ``out_dir`` (not the renamed ``.partial``),
    so ``chillfl run FOLDER/RUN/config.toml`` reruns it beside its siblings instead of recreating ``.partial``.
    Its comment lines on top (what the run ran with) are kept, and the file is replaced atomically: the folder is
    final by now, and a kill half-way through wrote a torn config.toml into it.

    A resumed comparison's runs saved the ``.partial`` as it was spelled when each started (relative to the start
    folder, or absolute, or as the resume was typed): every spelling of it (:func:`names_partial`) is pointed at the
    finished folder, in that same spelling (a relative one stays relative to where it was written).

    A run folder still ``.partial`` is left as it is: its config is what its checkpoint was written with, and one pointed
    elsewhere was refused as changed by ``chillfl resume`` of that run."""
    bases = [Path(b) for b in (current_folder(), sweep_started_in(folder)) if b is not None]  # (the current one may be removed)
    for path in folder.glob("*/config.toml"):
        if path.parent.name.endswith(PARTIAL):  # an unfinished run: its config must stay the one its checkpoint was written with
            continue
        text = path.read_text(encoding="utf-8")
        saved = tomllib.loads(text)
        out_dir = saved.get("out_dir")
        if isinstance(out_dir, str) and names_partial(out_dir, partial, bases):
            saved["out_dir"] = str(Path(out_dir).with_name(folder.name))
            lines = text.splitlines(keepends=True)
            header = "".join(itertools.takewhile(lambda line: line.startswith("#"), lines))
            write_atomic(path, (header + to_toml(saved)).encode("utf-8"))


def names_partial(out_dir: str, partial: Path, bases: Sequence[Path]) -> bool:
    """Whether ``out_dir`` (relative: to one of ``bases``) is another spelling of ``partial``, the comparison's
    ``.partial`` folder (renamed by now): the same name in the same parent folder, which ``os.path.samefile`` tells
    through ``.``, ``..``, a trailing slash and symbolic links above it (a run folder holds none, :func:`~chillfl.storage.results.refuse_links`)."""
    saved = Path(out_dir)
    if saved.name != partial.name:
        return False
    for base in bases:
        try:
            if os.path.samefile(base / saved.parent, partial.parent):
                return True
        except OSError:  # a parent that is not there (any more) is not this one
            continue
    return False

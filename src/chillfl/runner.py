"""Run one experiment end to end: build, loop, checkpoint, write the result folder; resume an interrupted one.

The round loop (:func:`chillfl.engine.loop.run_rounds`) only yields records;
everything a run leaves behind hangs off it here as a callback on each
record: the metrics writer, the progress bar, checkpoints, and at the end the
summary, the saved models and the plots.

Checkpoints (``checkpoint.safetensors`` in the run folder, written atomically
by :mod:`chillfl.storage.checkpoint`; no code runs when it is read) hold the
protocol's whole ``state_dict()`` after a completed round. Every random
stream derives from (seed, purpose, round, client), so the round counter is
the only RNG position a run has. SIGINT, SIGTERM and SIGHUP (unless ignored,
as under ``nohup``) stop the run at the end of the current round, write a
checkpoint, and raise :class:`RunInterrupted` (the CLI exits 130, 143 or 129
saying how to resume); a second signal stops at once, keeping the last
periodic checkpoint.
"""

from __future__ import annotations

import copy
import dataclasses
import errno
import inspect
import json
import logging
import math
import os
import shutil
import sys
import signal
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, NamedTuple, Protocol, Sequence, TypeVar, runtime_checkable

import chillfl._torch  # noqa: F401  (first: imports torch with the GC paused)
import safetensors
import torch

from chillfl.aggregation.registry import algorithm_spec
from chillfl.config import RunConfig, load_config, read_config_file
from chillfl.data import FederatedData
from chillfl.data.augment import AUGMENT_KEY, AugmentOptions
from chillfl.data.loaders import files_absent
from chillfl.data.partition import partitioner_options
from chillfl.data.partition_file import PARTITION_FILE, encode_partition, partition_record
from chillfl.resolve import added_options, resolved
from chillfl.storage.checkpoint import UnstorableState, read_checkpoint, read_state, write_atomic, write_state
from chillfl.engine.health import LossWatch
from chillfl.engine.loop import Redraw, run_rounds
from chillfl.storage.model_file import write_client_models, write_model
from chillfl.engine.protocol import EvaluatesNow, Executor, MeasuresNow, ServerProtocol, capability
from chillfl.engine.record import round_number
from chillfl.privacy.protocol import privacy_summary
from chillfl.storage.results import ResultWriter, last_value, summarize
from chillfl.plots.stop import STOP_EVALUATION  # matplotlib-free: the summary's and the figures' key of a stop round's evaluation
from chillfl.storage.run_folder import CHECKPOINT, CLIENT_MODELS as CLIENT_MODELS, MODEL as MODEL, open_for_resume, run_metadata
from chillfl.engine.view import RoundHook, RunView
from chillfl.environment import CHUNKED, COMPARED, NO_CODE, ResumedSetup, as_comment, changes, differences, environment, lacks_code
from chillfl.errors import ConfigError, Diverged, InterruptedAfterRun, MissingExtra, RunNotStarted, StorageError, loss_hint, signal_in, stopped_as
from chillfl.once import once_per_call, warn_once
from chillfl.options import warn_unread
from chillfl.paths import shell_path
from chillfl.executors.parallel import executor_record, follows_cores
from chillfl.executors.pools import WorkerPools
from chillfl.executors.processes import WorkerError
from chillfl.experiment import Experiment, build_client_models, build_experiment, build_protocol, make_executor, run_notes, say_notes
from chillfl.plugins import is_custom
from chillfl.extras import need
from chillfl.metrics.calibration import CalibrationAccumulator
from chillfl.metrics.communication import communication_summary
from chillfl.metrics.stability import stability_summary
from chillfl.models import count_parameters
from chillfl.models.assign import per_client_architectures, summarize as architectures
from chillfl.models.inputs import check_index_rows, index_readers
from chillfl.models.registry import caller_dtype, float32_default
from chillfl.progress import Progress, make_bar
from chillfl.stderr import say
from chillfl.protocols.book import run_suspects
from chillfl.protocols.common import Evaluation
from chillfl.protocols.registry import protocol_of
from chillfl.sinks import build_sinks, check_mlflow_store, close_sinks
from chillfl.stop_signals import Repeats, made_held, stop_signals
from chillfl.training.local import LocalSpec, evaluate, persistent_buffers, pin_deterministic, run_precision, set_deterministic

if TYPE_CHECKING:
    from chillfl.sinks import Sink

log = logging.getLogger(__name__)


class Callback(Protocol):
    """Something that happens after every round (``on_round``) and once at the end (``on_end``)."""

    def on_round(self, record: Mapping[str, Any]) -> None:
        ...

    def on_end(self, output: "RunOutput") -> None:
        ...


@dataclass
class RunOutput:
    """What a run returns: its folder (None when not written), metrics, summary and trained models."""

    folder: Path | None
    records: list[dict[str, Any]]
    summary: dict[str, Any]
    model_state: dict[str, torch.Tensor] | None = None
    client_states: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)


class RunInterrupted(Exception):
    """SIGINT/SIGTERM/SIGHUP stopped the run; ``folder`` holds its last checkpoint (None if none was written).

    ``round``: the last completed round. ``at_once``: a second signal stopped the run in the
    middle of round ``round + 1``; ``checkpoint`` is then the round of the checkpoint kept.
    """

    def __init__(self, signum: int, folder: Path | None, round: int, at_once: bool = False) -> None:
        name = signal.Signals(signum).name
        super().__init__(f"interrupted by a second {name} during round {round + 1}" if at_once else f"interrupted by {name} after round {round}")
        self.signum, self.folder, self.round, self.at_once = signum, folder, round, at_once
        self.checkpoint: int | None = None if at_once else round
        self.resume_command: str | None = None
        """How to go on, where it is more than ``chillfl resume FOLDER`` (``chillfl reproduce PAPER --resume``)."""
        self.run: str | None = None
        """The stopped run's name where it was one of several (a comparison's): its round alone would not say which."""
        self.kept: Path | None = None
        """A run stopped at once before its first checkpoint: its folder, kept because rounds are in it (nothing resumes
        it, and it holds the run's name, so the next run of the config is ``NAME-2``): the line names it."""

    def __str__(self) -> str:
        return super().__str__() if self.run is None else f"run {self.run} {super().__str__()}"

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _postfix(record: Mapping[str, Any]) -> dict[str, str]:
    """The progress bar's numbers, under their names in ``metrics.jsonl`` and the summary (docs/usage.md's metrics
    table defines each): short forms (``acc``, ``local``) printed fractions that nothing on screen explained. Most important
    first: a bar too narrow for all of them leaves out the last ones whole (:class:`~chillfl.progress.FittedBar`)."""
    return {key: f"{record[key]:.4f}" for key in ("global_acc", "local_acc", "global_loss") if record.get(key) is not None}


@contextmanager
def intra_op_threads(threads: int) -> Iterator[None]:
    """Run with ``threads`` torch intra-op threads (0: leave torch's setting), then restore it.

    The thread count is part of the config because it changes float reduction
    order, and so the last bits of every metric.
    """
    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@contextmanager
def device_settings(config: RunConfig, device: torch.device) -> Iterator[None]:
    """The run's ``precision`` on every device (:func:`~chillfl.training.local.run_precision`: IEEE fp32 matmuls, cuDNN
    convolutions on TF32 as torch's default has them, TF32 matmuls too on CUDA for ``"tf32"``, no autocast of the caller's); on CUDA, ``deterministic = true`` ->
    PyTorch's deterministic algorithms. For the run only, restored after: the caller's own settings (a notebook's
    ``warn_only=True``, its ``CUBLAS_WORKSPACE_CONFIG`` or none, its matmul precision) are as they were when the run returns."""
    with run_precision(config.precision, device):
        if device.type != "cuda":
            yield
            return
        was, bench = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark
        warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
        workspace = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
        if config.deterministic:
            pin_deterministic(True)  # what a CUDA worker sets too (pin_worker)
        try:
            yield
        finally:
            set_deterministic(was, warn_only)
            if workspace is None:
                os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
            else:
                os.environ["CUBLAS_WORKSPACE_CONFIG"] = workspace
            torch.backends.cudnn.benchmark = bench


def _cancels_task(handler: object) -> bool:
    """Whether ``handler`` is ``asyncio.run``'s SIGINT handler (an ``asyncio.Runner``'s, Python 3.11+), which cancels the
    main task instead of raising: a run it took the last round's Ctrl-C from raises :class:`InterruptedAfterRun` itself,
    or its Result is lost. A user's own handler that returns (one setting a stop flag) is left to decide (rev117e 1)."""
    if sys.version_info < (3, 11):
        return False
    import asyncio
    import functools

    bound = handler.func if isinstance(handler, functools.partial) else handler  # asyncio's: partial(self._on_sigint, main_task=task)
    return inspect.ismethod(bound) and isinstance(bound.__self__, asyncio.Runner)


class _Signals:
    """SIGINT/SIGTERM/SIGHUP -> stop after the current round (first signal) or at once (second); main thread only.

    SIGHUP is held only where it is not ignored (:func:`~chillfl.stop_signals.stop_signals`): under ``nohup`` it stays ignored.

    Installed for the whole run, clean-up included: a second signal while the
    run is ``armed`` (the round loop, once the executor has started) stops it
    at once; outside, e.g. while the executor starts or shuts its workers or
    its Ray cluster down, further signals are ignored, so that start-up and
    clean-up always complete, nothing is left running, and the CLI still
    prints its one line.

    Once the rounds are done (``finishing``: the summary, models and figures are written), a signal can no
    longer stop the run after a round: the run completes, and the signal is then passed on, as if it had
    come just after the run, to the handler it displaced (the CLI's ends the command with its one line and
    128 + the signal; a comparison does not go on with its next run).

    The same signal again within a moment (``repeats``) is the one signal delivered twice, not a second one: GNU
    ``timeout`` signals the command and then its process group (:class:`~chillfl.stop_signals.Repeats`).
    """

    def __init__(self, repeats: Repeats | None = None) -> None:
        self.repeats = repeats or Repeats()
        self.received: int | None = None
        self.armed = False
        self.finishing = False
        self.late: int | None = None
        self.unraised = False
        """The last round's SIGINT was passed on and its displaced handler returned without raising (asyncio.run's, which
        cancels the task instead: the finished run's return value would be dropped): the run raises it itself."""
        self.done = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "_Signals":
        if threading.current_thread() is threading.main_thread():
            for sig in stop_signals():
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def reinstall(self) -> None:
        """Take the signals back: ``ray.init`` installs Ray's own SIGTERM handler (which exits 1 with no line)."""
        for sig in self._previous:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if not self.repeats.counts(signum):
            return
        if self.finishing:
            if self.late is None:
                self.late = signum
                say(f"chillfl: {signal.Signals(signum).name}: the run has done its rounds; it stops once its results are written")
            return
        if self.received is not None:
            if self.armed:
                self.armed = False  # one exception; clean-up after it runs undisturbed
                raise RunInterrupted(signum, None, self.done, at_once=True)
            return
        self.received = signum
        say(f"chillfl: {signal.Signals(signum).name}: stopping after this round (a second one stops at once)")  # a notice, not output

    def defer(self, why: str = "that was the last round") -> None:
        """The first signal came during the last round (or one a callback stopped the run after): there is no round to
        stop after, so the run completes (as for a signal in ``finishing``) and the signal is passed on after. It was
        stopped "after round N" of N, leaving a ``.partial`` folder whose every round had run; after a callback's stop it
        was dropped, and a script's loop of runs went on."""
        if self.received is not None and self.late is None:
            self.late = self.received
            say(f"chillfl: {signal.Signals(self.received).name}: {why}; the run stops once its results are written")

    def __exit__(self, exc_type: Any, exc: BaseException | None, *rest: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        if self.late is not None and exc_type is None and self._previous:  # the run is complete: the signal now goes where it would have
            signal.raise_signal(self.late)
            # still here: a Ctrl-C asyncio.run's handler took (it cancels the task, dropping the return value); any other
            # handler that returned decides alone, as SIGTERM's and SIGHUP's do (python-api.md)
            self.unraised = self.late == signal.SIGINT and _cancels_task(self._previous.get(signal.SIGINT))
        if isinstance(exc, Diverged) and self._previous:  # the stop asked for in the diverging round: a comparison passes it on
            exc.stop_signal = self.late if self.late is not None else self.received


def refuse_inference_mode() -> None:
    """A run trains: inside ``torch.inference_mode()`` its ``torch.enable_grad()`` records no graph (inference mode is not
    lifted by it), so a user's model read as having no trainable logits and a registered one raised in round 1, leaving
    a ``.partial`` folder. One line first instead. (Not run under ``inference_mode(False)``: tensors the caller made
    inside inference mode, its data, still could not be saved for backward.)"""
    if torch.is_inference_mode_enabled():
        raise ConfigError("torch.inference_mode", "a run trains, and inference mode turns autograd off (torch.enable_grad() does not lift it): "
                          "call chillfl outside 'with torch.inference_mode():'")


@once_per_call
def run_experiment(
    config: RunConfig,
    *,
    write: bool = True,
    progress: Progress = True,
    data: FederatedData | None = None,
    label: str | None = None,
    experiment: Experiment | None = None,
    callbacks: Sequence[Callback] = (),
    hooks: Sequence[RoundHook] = (),
    pools: WorkerPools | None = None,
    started_in: Path | None = None,
    exact_name: bool = False,
) -> RunOutput:
    """Build and run ``config``; write its result folder unless ``write`` is False.

    All validation happens in :func:`build_experiment` before the folder exists.
    ``experiment``: parts built already (the Python API's own model and data).
    ``hooks``: called after every round with the record and a :class:`~chillfl.engine.view.RunView`
    (read-only models; ``stop()`` ends the run after that round, checkpointed and resumable).
    ``pools``: worker processes and Ray actors a sweep lends its runs (:mod:`chillfl.executors.pools`).
    ``started_in``: the folder the run's relative paths are read from, which its checkpoints record (a resumed
    comparison's new runs: the comparison's, :meth:`~chillfl.config.RunConfig.paths_from`; default: the current folder).
    ``exact_name``: the folder is ``config.name`` or none, never ``name-N`` (a comparison's run: another process that holds
    it, a duplicate of the shard, runs it; :class:`~chillfl.storage.results.FolderInUse`).
    """
    refuse_inference_mode()
    with ExitStack() as threads:
        with stopped_as(RunNotStarted):  # a stop signal, or its exception that a package wrapped, before the folder is made
            config = resolved(config)  # the saved config.toml lists every default, however the config was made (a comparison's variant on the user's own model too)
            threads.enter_context(intra_op_threads(config.threads))
            # a registered model: float32 throughout, whatever the caller's default dtype; the caller's own: the caller's
            # (both shared with runs in other threads: chillfl.models.registry._SharedDtype)
            threads.enter_context(float32_default() if not is_custom(config.model.get("name")) else caller_dtype())
            exp = experiment or build_experiment(config.paths_from(started_in), data=data)  # the config as given is what is saved
            say_notes(run_notes(config, exp))  # built: every check has passed, so a note cannot precede an error line
            config = dataclasses.replace(config, device=str(exp.device))  # the saved config says where it ran
            if write:
                check_sinks(config)
            else:  # every sink writes from the run's folder (a tracking service too): a setting that did nothing said so
                warn_unread(config.log, ("sinks",), "log", "without a results folder (write=False; each sink logs from the run's folder)")
            writer, held = made_held(lambda: ResultWriter(config.out_dir, config.name, started_in, exact_name) if write else None)
        try:
            with stopped_as(RunNotStarted):  # the folder is removed again below: nothing to resume
                held.release()  # a signal that came meanwhile lands here
                if writer:
                    write_folder_start(writer, exp, config)
            return _run(exp, config, writer, progress=progress, label=label, callbacks=callbacks, hooks=hooks, pools=pools)
        except (ConfigError, KeyboardInterrupt):  # a misfit found as it starts, or a Ctrl-C before the run's own handling:
            if writer is not None:  # nothing to resume, and the folder would push a rerun to NAME-2
                _discard_unstarted(writer)
            raise


def write_folder_start(writer: ResultWriter, exp: Experiment, config: RunConfig) -> None:
    """The new run folder's ``config.toml`` and ``partition.json``; a failure leaves it ``.partial`` with its lock given up
    (a ConfigError or a Ctrl-C: the caller removes it)."""
    try:
        writer.write_config(config.to_saved_dict(), as_comment(environment(exp.device)))
        _write_partition(writer.path, exp, config)
    except StorageError as exc:
        writer.abort()  # releases the folder's lock
        raise StorageError(f"{exc}; no checkpoint was written yet; partial results in {writer.path}") from exc
    except (ConfigError, KeyboardInterrupt):
        raise
    except BaseException:
        writer.abort()
        raise


def _discard_unstarted(writer: ResultWriter) -> None:
    """Remove the run folder of a run stopped by a misfit (a ConfigError) before it wrote a round or a checkpoint.

    Such a misfit shows only once the run starts (a method's term reads a context key nobody sends, an
    aggregator returns a model of another shape): the folder then holds only the config and the partition,
    and nothing in it can be resumed. A folder with a round or a checkpoint in it stays as it is.
    """
    writer.abort()
    metrics = writer.path / "metrics.jsonl"
    if not (writer.path / CHECKPOINT).exists() and (not metrics.exists() or metrics.stat().st_size == 0):
        shutil.rmtree(writer.path, ignore_errors=True)


def _write_partition(folder: Path, exp: Experiment, config: RunConfig) -> None:
    """``partition.json``: the clients' training indices, reusable with ``partition.from`` (:mod:`chillfl.data.partition_file`)."""
    data = exp.data
    record = partition_record(data.dataset.name, len(data.dataset.y_train), config.partition, data.train_indices,
                              row_labels=data.row_labels, dataset_table=config.dataset, noise=data.noise)
    write_atomic(folder / PARTITION_FILE, encode_partition(record))


@once_per_call
def resume_experiment(
    folder: str | Path, *, progress: Progress = True, callbacks: Sequence[Callback] = (), hooks: Sequence[RoundHook] = (), force: bool = False,
    pools: WorkerPools | None = None, label: str | None = None, build: Callable[[RunConfig], Experiment] | None = None,
    started_in: Path | None = None,
) -> RunOutput:
    """Continue the interrupted run in ``folder`` (a ``NAME.partial`` result folder, or a run a hook stopped) from its checkpoint.

    The folder is locked and checked first (:func:`~chillfl.storage.run_folder.open_for_resume`):
    an edited config.toml or metrics.jsonl is one ConfigError naming it, unless ``force``; a checkpoint whose bytes
    do not match its checksum (torn or flipped) is one, ``force`` or not.
    ``label``: the progress line's name (default: the run's). ``build``: the run's parts from its saved
    config (default :func:`build_experiment`; :func:`chillfl.resume` adds the user's model, data and method parts).

    A relative ``data_dir`` (and ``partition.from``) is read from the folder the run was started in, which its checkpoint
    records (:func:`~chillfl.storage.run_folder.start_folder`), where that folder holds it, not from the one the resume
    is typed in; ``started_in`` overrides the record (a comparison's run: the comparison's). The saved config.toml is
    not changed, and the rounds are bitwise those of an uninterrupted run.
    """
    refuse_inference_mode()
    point = open_for_resume(folder, force)
    writer = None
    try:
        config = load_config(point.path / "config.toml")
        if not point.edited:  # an edited config's missing keys are the edit's (another method's options), not options added since
            _say_added_options(point.path / "config.toml", config)
        if point.done > config.federation.rounds:  # an edited config resumed with --force: no round would run, yet the folder would look finished
            raise ConfigError("federation.rounds", f"{point.path / CHECKPOINT} is of round {point.done}, past federation.rounds = {config.federation.rounds} in config.toml")
        check_sinks(config)
        with intra_op_threads(config.threads), float32_default() if not is_custom(config.model.get("name")) else caller_dtype():
            origin = started_in if started_in is not None else point.started_in
            exp = from_start_folder(config, origin, build or build_experiment)  # written below: the config as saved (config.toml, partition.json)
            state, _ = read_checkpoint(point.path / CHECKPOINT, exp.device)
            compared = COMPARED + (CHUNKED if follows_cores(config.executor, exp.device.type) else ())
            saved, now = state.get("environment") or {}, environment(exp.device)
            left = point.done < config.federation.rounds  # a checkpoint of the last round: no round runs on this setup
            changed = differences(saved, now, compared) if left else []
            if lacks_code(saved, now) and left:  # an older chillfl's checkpoint: whether the code changed is unknown
                also = f" (and on another setup: {'; '.join(changed)})" if changed else ""
                log.warning("resuming a checkpoint %s%s", NO_CODE, also)
            elif changed:  # results stay valid, but the rest of the run may differ in the last bits from an uninterrupted one
                log.warning("resuming on another setup than the checkpoint's (%s): the rounds left may not be bitwise what an uninterrupted "
                            "run gives", "; ".join(changed))
            writer = ResultWriter.reopen(point.path, point.lock, point.metrics, point.config, origin)
            writer.resumed = resumed_across(state, point.done, changes(saved, now, compared) if left else {})  # every round ran on the first
            resumed = Resumed(point.done, state["protocol"], point.records, _wall_time(state))
            return _run(exp, config, writer, progress=progress, label=label or config.name, callbacks=callbacks, hooks=hooks, resume=resumed, pools=pools)
    finally:
        if writer is None:
            point.lock.release()


Built = TypeVar("Built")


def from_start_folder(config: RunConfig, started_in: Path | None, build: Callable[[RunConfig], Built]) -> Built:
    """``build`` of ``config`` with its relative paths read from ``started_in``, the folder a resumed run (or comparison)
    was started in (:meth:`~chillfl.config.RunConfig.paths_from`; None: the current folder). A dataset that is neither
    there nor under the current folder is the loader's one line on ``data_dir``, which then names both folders tried (not
    a hub that is offline or unreachable: :func:`~chillfl.data.loaders.files_absent`)."""
    here = config.paths_from(started_in)
    try:
        return build(here)
    except ConfigError as exc:
        if started_in is None or here.data_dir != config.data_dir or not files_absent(exc):
            raise
        tried = os.path.abspath(started_in / config.data_dir)
        if tried == os.path.abspath(config.data_dir):  # started here: the loader's line names the one folder there is
            raise
        raise ConfigError(exc.field, f"{exc.message}; the folder the run was started in has no {tried} either") from None


WRITTEN_AS_TYPED: tuple[tuple[tuple[str, ...], str], ...] = ((("distillation", "public_dataset_options"), AUGMENT_KEY),)
"""Tables config.toml wrote as typed before it wrote them complete (``public_dataset_options``: before 2026-12-06), each with
the sub-table the complete form always holds in full (its ``augment``, every :class:`AugmentOptions` key). A table without it
complete is such an older one (a user could type part of ``augment`` then): the options it lacks were not added since, the
run took those same defaults then (the public dataset's own), so they are not warned about."""

CLASS_OPTIONS = ("partition", "options")
"""A partitioner's table of a third-party class's own keyword options (flwr-datasets', the only partition entry with an
``options`` table): config.toml wrote only those set before 2026-12-06, and now writes the class's defaults too
(:func:`~chillfl.data.flwr_partition.with_defaults`); the run took those same defaults from the class then, so they are no
news either: each such key whose value is the class's default (:class:`ClassDefaults`), and no other."""


@runtime_checkable
class ClassDefaults(Protocol):
    """A partitioner's options that write a third-party class's own keyword defaults in (``class_defaults``: key -> the value
    written when unset). Why a capability: the resume asks the options which missing keys the class defaulted, naming no partitioner."""

    def class_defaults(self) -> Mapping[str, Any]: ...


AUGMENT_FIELDS = frozenset(f.name for f in dataclasses.fields(AugmentOptions))
"""Every key of a complete ``augment`` sub-table."""


def _no_news(written: Mapping[str, Any], option: str, value: Any) -> bool:
    """Whether the dotted ``option``, absent from ``written`` (config.toml, as read) and resolved now to ``value``, is a default
    the run already took when it started, only not written then (:data:`WRITTEN_AS_TYPED`, :data:`CLASS_OPTIONS`).

    A class option is no news only when the written partitioner's options say the class defaults that key
    (:class:`ClassDefaults`) and ``value`` is that default (of the same type): another partitioner's missing option, or
    one the options do not fill from the class, is added since, as any other option is."""
    for keys, mark in WRITTEN_AS_TYPED:
        if option.startswith(".".join(keys) + "."):
            table: Any = written
            for key in keys:
                table = table.get(key) if isinstance(table, Mapping) else None
            complete = isinstance(table, Mapping) and isinstance(table.get(mark), Mapping) and set(table[mark]) >= AUGMENT_FIELDS
            return not complete
    section, options_key = CLASS_OPTIONS
    prefix = f"{section}.{options_key}."
    key = option[len(prefix):]
    table = written.get(section)
    if not option.startswith(prefix) or "." in key or not isinstance(table, Mapping) or not isinstance(table.get("name"), str):
        return False
    try:
        opts = partitioner_options(*RunConfig.component(table), section)
    except ConfigError:  # the run's own build names it
        return False
    defaults = opts.class_defaults() if isinstance(opts, ClassDefaults) else {}
    return key in defaults and type(defaults[key]) is type(value) and defaults[key] == value


def _say_added_options(path: Path, config: RunConfig) -> None:
    """One warning line naming the options this code resolves ``config`` to that its ``config.toml`` lacks (added since the run
    started) and the defaults they take: the resumed rounds run with them, which nothing said before. Those of a table an
    older chillfl wrote as typed (:func:`_no_news`) are no news: the run took the same defaults from its start."""
    written = read_config_file(path)
    added = {key: value for key, value in added_options(written, config).items() if not _no_news(written, key, value)}
    if added:  # JSON's spelling of a string, number, boolean or list is TOML's: the line reads as the file would
        said = ", ".join(f"{key} = {json.dumps(value, default=str, ensure_ascii=False)}" for key, value in added.items())
        log.warning("resume: options added since this run started take their defaults: %s", said)


def _checkpoint_round(writer: ResultWriter) -> int | None:
    """The round of the checkpoint in the run folder (None without one)."""
    path = writer.path / CHECKPOINT
    return int(read_state(path)["round"]) if path.is_file() else None


def state_owners(spec: LocalSpec) -> tuple[tuple[str, str], ...]:
    """Where a part's own ``state_dict()`` sits in a checkpoint's state tree, and the field that chose the part (a plugin's):
    the run spec's, so that an aggregator or a policy passed from Python is named as the caller passed it (``aggregator``,
    ``policy``), as the run's other refusals of it are, not by a config field the caller never set."""
    return (("protocol.aggregator", spec.method_field or "algorithm.name"), ("protocol.policy", spec.policy_field), ("protocol.method", "distillation.method"))


class Resumed(NamedTuple):
    """Where a resumed run starts: its checkpoint's round, protocol state and the records before it, and the seconds
    its earlier commands ran up to that checkpoint (``summary.json``'s ``wall_time_s`` counts the whole run)."""

    done: int
    protocol: Mapping[str, Any]
    records: list[dict[str, Any]]
    wall_time_s: float


def resumed_across(state: Mapping[str, Any], done: int, changed: Mapping[str, list[Any]]) -> list[ResumedSetup]:
    """The run's resumes across setups: its checkpoint's (``resumed``, kept through later checkpoints) and, where the
    setup changed now (:func:`~chillfl.environment.changes`), ``{"round": done, "changed": {field: [from, to]}}``:
    rounds up to ``done`` ran on the first setup, the rest on the second. ``summary.json`` records the list (``resumed``),
    since its ``environment`` names the last setup alone and ``config.toml``'s header the first."""
    earlier = state.get("resumed")
    history = [ResumedSetup(round=int(e["round"]), changed=dict(e["changed"])) for e in earlier if isinstance(e, Mapping)] if isinstance(earlier, list) else []
    if changed:
        history.append({"round": done, "changed": {field: list(pair) for field, pair in changed.items()}})
    return history


def _wall_time(state: Mapping[str, Any]) -> float:
    """The seconds a checkpoint's run had taken (0.0 for a checkpoint written before it recorded them)."""
    value = state.get("wall_time_s", 0.0)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) and value >= 0 else 0.0


def _checkpoint(writer: ResultWriter | None, protocol: ServerProtocol, done: int, exp: Experiment, wall_time_s: float) -> None:
    """The run state after round ``done`` (and the setup it ran on, ``exp``'s device, and the seconds the run has taken),
    with the checksums of the config and metrics it goes with.

    A part's ``state_dict()`` that holds what a checkpoint cannot (a plugin's int-keyed dict) is one ConfigError on the
    field that chose the part (:func:`state_owners` of ``exp``'s spec), not a TypeError traceback from the encoder. Any other failure to encode or write the
    file (safetensors refusing it, memory) is one StorageError line naming the round and ``checkpoint.every``: the
    runner's handler adds which checkpoint is kept (the file is replaced atomically, so the previous one is) and how
    to resume; a failure that comes again on resume is gone with ``checkpoint.every = 0``."""
    if writer is not None:
        run = run_metadata(writer.config_bytes, writer.metrics_bytes, writer.metrics_sha256, writer.started_in)
        path = writer.path / CHECKPOINT
        resumed = {"resumed": writer.resumed} if writer.resumed else {}  # a later resume keeps the earlier ones' setups
        state = {"round": done, "protocol": protocol.state_dict(), "environment": environment(exp.device), "wall_time_s": wall_time_s, **resumed}
        try:  # the write alone: an error of a part's own state_dict() is its own, not a checkpoint that cannot be written
            write_state(path, state, run)
        except UnstorableState as exc:
            field = next((f for prefix, f in state_owners(exp.spec) if exc.where == prefix or exc.where.startswith(prefix + ".")), None)
            if field is None:
                raise _unwritable(path, done, exc) from exc
            raise ConfigError(field, f"its state_dict() cannot be checkpointed: {exc} (a checkpoint holds dicts with str keys, lists, "
                                     "tensors, int, float, str, bool and None)") from exc
        except (StorageError, ConfigError):  # disk full, I/O error: already one line, and the runner says which checkpoint is kept
            raise
        except (safetensors.SafetensorError, ValueError, RuntimeError, MemoryError, OverflowError) as exc:
            if signal_in(exc) is not None:  # a stop signal a package wrapped: the signal's, not a failed write
                raise
            raise _unwritable(path, done, exc) from exc


def _unwritable(path: Path, done: int, exc: BaseException) -> StorageError:
    """One line for a checkpoint that could not be encoded or written (not the disk's fault): what failed, and the way
    to run on should the same write fail again on resume (the runner adds which checkpoint is kept)."""
    return StorageError(f"cannot write the checkpoint of round {done} to {path}: {type(exc).__name__}: {exc} (should a resume fail the "
                        "same way, set checkpoint.every = 0 in its config.toml and resume with --force: it then writes no periodic checkpoint; "
                        "where no checkpoint was kept, run again with checkpoint.every = 0)")


def _restore(protocol: ServerProtocol, state: Mapping[str, Any], exp: Experiment, writer: ResultWriter | None) -> None:
    """Load a checkpoint's protocol state into the run config.toml builds now.

    After an edit resumed with ``--force`` (another method, another model width) the state does not fit: the
    method's own ``load_state_dict`` fails as it may (KeyError, ValueError, ...), or, worse, takes the old model's
    tensors and the run goes on training a model of another shape than its config.toml says. Either is one
    ConfigError on ``checkpoint`` here; so are the states of clients past ``federation.num_clients``.
    """
    where = f"{writer.path / CHECKPOINT}" if writer is not None else "the checkpoint"
    fresh = protocol.global_state()  # the names config.toml's model has: a checkpoint lacking one trains its initial value on
    names = None if fresh is None else set(fresh)
    try:
        protocol.load_state_dict(state)
    except ConfigError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, RuntimeError) as exc:
        raise ConfigError("checkpoint", f"{where} does not fit the run of config.toml: {type(exc).__name__}: {exc}") from exc
    clients = exp.data.num_clients
    beyond = [cid for cid in protocol.client_states() if not 0 <= cid < clients]
    if beyond:  # federation.num_clients edited down: the clients' own models index their architectures, data, ...
        raise ConfigError("checkpoint", f"{where} does not fit the run of config.toml: it holds the state of client {max(beyond)}, but federation.num_clients = {clients}")
    model = protocol.global_state()
    if names is not None and model is not None and set(model) != names:  # else a silently other run, or a traceback in training
        missing, extra = sorted(names - set(model)), sorted(set(model) - names)
        constants = {n for n, _ in exp.model.named_buffers()} - {n for n, _ in persistent_buffers(exp.model)}
        if not missing and set(extra) <= constants:  # a folder of a chillfl that kept them as state (before 2026-12-06)
            raise ConfigError("checkpoint", f"{where} was saved by a chillfl that kept the model's persistent=False buffers ({', '.join(extra)}) as "
                                            "its state, averaged and saved; this one leaves them in the module: resume it with the chillfl that made it, "
                                            "or start the run again")
        what = f"lacks config.toml's {missing[0]}" if missing else f"has {extra[0]}, which config.toml's has not"
        raise ConfigError("checkpoint", f"{where} does not fit the run of config.toml: its model {what}")
    for key, initial in exp.initial_state.items():
        loaded = model.get(key) if model is not None else None
        if loaded is not None and loaded.shape != initial.shape:
            raise ConfigError("checkpoint", f"{where} does not fit the run of config.toml: its model's {key} has shape {tuple(loaded.shape)}, config.toml's {tuple(initial.shape)}")
        if loaded is not None and loaded.dtype != initial.dtype:  # else a RuntimeError traceback in the first matmul
            raise ConfigError("checkpoint", f"{where} does not fit the run of config.toml: its model's {key} has dtype {loaded.dtype}, config.toml's {initial.dtype}")
    _check_client_models(protocol, exp, where)


def _check_client_models(protocol: ServerProtocol, exp: Experiment, where: str) -> None:
    """The clients' own models in a checkpoint (where the protocol keeps them) against config.toml's and each other.

    A tensor of another shape or dtype than its architecture's was a RuntimeError traceback in that client's next
    training; one more or one missing, a run that went on silently (ignoring it, or with the global model's entry in its
    place). Entries the architecture lacks (a method's own wrapper's) are compared across the clients of one
    architecture: every client's model of a method has the same entries. ConfigError on ``checkpoint``, naming the file."""
    clients = protocol.client_states()
    if not clients:
        return
    models = build_client_models(exp) if per_client_architectures(exp.config.model) else None
    first: dict[int, tuple[int, Mapping[str, torch.Tensor]]] = {}
    for cid, model in sorted(clients.items()):
        arch = 0 if models is None else models.plan.arch_of[cid]
        template = exp.initial_state if models is None else models.states[arch]
        other, like = first.setdefault(arch, (cid, model))
        said = f"{where} does not fit the run of config.toml: client {cid}'s model"
        if set(model) != set(like):
            extra, missing = sorted(set(model) - set(like)), sorted(set(like) - set(model))
            raise ConfigError("checkpoint", f"{said} has {extra[0]}, which client {other}'s has not" if extra else f"{said} lacks {missing[0]}, which client {other}'s has")
        for key, tensor in model.items():
            for want, whose in ((template.get(key), "config.toml's"), (like[key], f"client {other}'s")):
                if want is not None and tensor.shape != want.shape:
                    raise ConfigError("checkpoint", f"{said}'s {key} has shape {tuple(tensor.shape)}, {whose} {tuple(want.shape)}")
                if want is not None and tensor.dtype != want.dtype:
                    raise ConfigError("checkpoint", f"{said}'s {key} has dtype {tensor.dtype}, {whose} {want.dtype}")


def _run(
    exp: Experiment,
    config: RunConfig,
    writer: ResultWriter | None,
    *,
    progress: Progress,
    label: str | None,
    callbacks: Sequence[Callback],
    hooks: Sequence[RoundHook] = (),
    resume: Resumed | None = None,
    pools: WorkerPools | None = None,
) -> RunOutput:
    # device_settings from the protocol's build on (FedMD trains its server model there): every cuBLAS call of the run
    # comes after CUBLAS_WORKSPACE_CONFIG is set and runs under deterministic algorithms, not only the rounds'
    output: RunOutput | None = None
    try:
        with _Signals() as signals, device_settings(config, exp.device):
            output = _run_rounds(exp, config, writer, signals, progress=progress, label=label, callbacks=callbacks, hooks=hooks, resume=resume, pools=pools)
    except KeyboardInterrupt as exc:
        if output is None:
            raise
        raise InterruptedAfterRun(output.folder, output) from exc  # the signal held while the results were written: they are complete
    if signals.unraised:  # asyncio.run's SIGINT handler cancels the task: the result travels with the exception instead
        raise InterruptedAfterRun(output.folder, output)
    return output


def _run_rounds(
    exp: Experiment,
    config: RunConfig,
    writer: ResultWriter | None,
    signals: _Signals,
    *,
    progress: Progress,
    label: str | None,
    callbacks: Sequence[Callback],
    hooks: Sequence[RoundHook],
    resume: Resumed | None,
    pools: WorkerPools | None,
) -> RunOutput:
    start = time.perf_counter() - (resume.wall_time_s if resume is not None else 0.0)  # a resumed run's time counts its earlier commands
    rounds, every = config.federation.rounds, config.checkpoint.every
    protocol = build_protocol(exp)
    view = RunView(protocol, exp.model)
    executor = None
    done, records = 0, list[dict[str, Any]]()
    sinks: list[Sink] = []
    try:
        if resume is not None:
            done, state, records, _ = resume
            _restore(protocol, state, exp, writer)  # before anything is written: a checkpoint that does not fit leaves the folder as it was
            if writer is not None:  # no checksum of the checkpoint covers partition.json, and it follows from config.toml: a damaged one is made whole
                writer.resume()
                _write_partition(writer.path, exp, config)
        if writer is not None and config.log.sinks:
            sinks = run_sinks(config, writer.path, records)
            callbacks = [*callbacks, *sinks]
        executor = make_executor(exp, protocol, pools)  # unarmed: a Ray cut short while it starts could leave its processes behind
        signals.reinstall()
        signals.done, signals.armed = done, True
        try:
            loop = run_rounds(
                protocol, executor, seed=config.seed, num_clients=exp.data.num_clients,
                clients_per_round=config.federation.sample_size(), rounds=rounds, start=done, participation=config.federation, redraw=redraw_of(exp),
                empty=exp.data.without_training_rows(),
            )
            bar = make_bar(progress, rounds, done, label or config.name)
            # a comparison's run (or a resume) names itself; the hint leads with the run's privacy noise or attack
            watch = LossWatch(config.strict, records, name=config.name if label else None, hint=loss_hint(run_suspects(config)))
            with bar:
                for record in loop:
                    watch.observe(record)
                    records.append(record)
                    done = signals.done = round_number(record)
                    if writer:
                        writer.append(record)
                    for cb in callbacks:  # each its own copy: a callback that edits it (accuracy in %) edited the run's records and summary
                        cb.on_round(copy.deepcopy(record))
                    view.round = done
                    for hook in hooks:
                        hook(copy.deepcopy(record), view)
                    bar.set_postfix(_postfix(record), refresh=False)
                    bar.update(1)
                    if view.stop_reason is not None and done < rounds:  # a hook stopped the run: resumable from here
                        signals.armed = False  # the checkpoint below must not be cut short
                        signals.finishing = True  # a signal from here on waits for the results, then is passed on (rev104d)
                        _checkpoint(writer, protocol, done, exp, time.perf_counter() - start)
                        signals.defer("a callback stopped the run after this round")  # one in this round: dropped before
                        break
                    if signals.received is not None and done >= rounds:
                        signals.defer()
                    elif signals.received is not None:
                        signals.armed = False  # the checkpoint below must not be cut short
                        _checkpoint(writer, protocol, done, exp, time.perf_counter() - start)
                        raise RunInterrupted(signals.received, writer.path if writer else None, done)
                    if every and (done % every == 0 or done == rounds):  # the last round's too: a failed final write (the figures on a full disk) resumes to finish
                        if done >= rounds:  # every round ran: a signal during this write waits for the results, as one after it (rev104c)
                            signals.finishing = True
                        _checkpoint(writer, protocol, done, exp, time.perf_counter() - start)
        finally:
            signals.armed = False  # from here on (finishing, clean-up) a signal stops nothing half-way
        signals.finishing = True  # a signal now waits until the run's results are complete
        stopped = {"round": done, "reason": view.stop_reason} if view.stop_reason is not None and done < rounds else None
        # closed as finished once the summary, model and figures are written, just before the folder they write into is
        # renamed; a failure before that closes them as failed (finally below), not FINISHED with a folder left .partial
        output = finish_run(exp, config, protocol, writer, records, time.perf_counter() - start, stopped, executor=executor,
                            before_rename=lambda: close_run_sinks(sinks, None))
        for cb in callbacks:
            cb.on_end(output)
        return output
    except StorageError as exc:  # disk full: the folder stays .partial with its last good checkpoint
        if writer:
            writer.abort()
            kept = _checkpoint_round(writer)
            full = isinstance(exc.__cause__, OSError) and exc.__cause__.errno in (errno.ENOSPC, errno.EDQUOT)  # else (a read-only file system) no space to free
            then = "free space, then " if full else ""
            tail = f"the checkpoint of round {kept} is kept: {then}chillfl resume {shell_path(writer.path)}" if kept else f"no checkpoint was written yet; partial results in {writer.path}"
            raise StorageError(f"{exc}; {tail}") from exc
        raise
    except Diverged as exc:
        if writer:
            exc.folder = writer.fail({"round": exc.round, "client": exc.client, "what": exc.what, "last_checkpoint": _checkpoint_round(writer)})  # type: ignore[attr-defined]
        raise
    except RunInterrupted as exc:
        if writer:
            writer.abort()
        if exc.folder is None and writer is not None and (writer.path / CHECKPOINT).is_file():
            exc.folder, exc.checkpoint = writer.path, _checkpoint_round(writer)
        elif exc.folder is None and writer is not None:  # stopped at once before its first checkpoint: resume would refuse the folder
            _discard_unstarted(writer)  # removed unless a round is in it (its config and partition alone are nothing to keep)
            exc.kept = writer.path if writer.path.is_dir() else None
        raise
    except BaseException as exc:
        if writer:
            writer.abort()
            if isinstance(exc, WorkerError) and exc.folder is None and (writer.path / CHECKPOINT).is_file():  # a lost worker: resumable
                exc.folder = writer.path
            elif not isinstance(exc, WorkerError) or exc.folder is None:  # failed before the first checkpoint (a lost worker, a
                # plugin's or client's code raising in round 1): "run it again" made NAME-2 beside a NAME.partial resume refused;
                _discard_unstarted(writer)  # removed unless a round or a checkpoint is in it, as on a signal or a misfit
        raise
    finally:
        close_run_sinks(sinks, sys.exc_info()[1])  # in this finally: the exception that ends the run (sinks closed above when it finished)
        if executor is not None:
            executor.close()
        protocol.close()


def redraw_of(exp: Experiment) -> Redraw | None:
    """The round loop's per-visit read of a user Dataset's training items (``DatasetData(redraw="round")``); None for fixed inputs.

    A model that reads indices checks each read as it comes (:func:`~chillfl.models.inputs.check_index_rows`): the first
    read was checked before the run, a random transform can leave the range at any visit.
    """
    data = exp.data
    if data.dataset.train_items is None:
        return None
    if not index_readers(exp.config.model, data.num_clients):
        return data.client_redraw

    def checked(cid: int, round: int) -> torch.Tensor | None:
        x = data.client_redraw(cid, round)
        if x is not None:
            check_index_rows(exp.config.model, data, x, f"the train inputs of {data.dataset.name!r} redrawn for client {cid} in round {round + 1}")
        return x

    return checked


def check_sinks(config: RunConfig, dry_run: bool = False) -> None:
    """A sink whose package is missing stops the run before its folder exists (one MissingExtra line), as does an
    MLflow store that cannot be used (one ConfigError line, :func:`~chillfl.sinks.check_mlflow_store`; ``dry_run``:
    only a server is asked, opening any other store creates it)."""
    for sink, what in (("tensorboard", "TensorBoard logs"), ("wandb", "W&B logs"), ("mlflow", "MLflow logs")):
        if sink in config.log.sinks:
            need(sink, sink, what)
    if "mlflow" in config.log.sinks:
        check_mlflow_store(config.log.mlflow_tracking_uri, config.log.mlflow_experiment, dry_run=dry_run)


def run_sinks(config: RunConfig, folder: Path, records: Sequence[Mapping[str, Any]]) -> list["Sink"]:
    """The run's metric sinks (``[log] sinks``), writing under ``folder``."""
    spec = config.log
    return build_sinks(spec.sinks, folder, config.name, config.to_dict(), records, project=spec.wandb_project,
                       wandb_mode=spec.wandb_mode, mlflow_tracking_uri=spec.mlflow_tracking_uri, mlflow_experiment=spec.mlflow_experiment)


def close_run_sinks(sinks: list["Sink"], failure: BaseException | None) -> None:
    """Close the sinks once (the list is emptied), so the error path does not close them twice; ``failure``: what
    ended the run (None: it finished), said to each sink (:class:`~chillfl.sinks.Sink`)."""
    done, sinks[:] = list(sinks), []
    if done:
        close_sinks(done, failure)


def compute_record(spec: LocalSpec) -> dict[str, str | int]:
    """How the clients' steps were laid out, for ``summary.json``'s ``environment`` beside the executor: ``memory_format``
    and ``batched_conv`` as resolved. ``config.toml`` keeps ``"auto"`` for both, whose choice follows the device and the
    model (:func:`~chillfl.training.local.resolve_compute`, :func:`~chillfl.training.batched_conv.resolve_batched_conv`)
    and changes the bits (channels-last against contiguous), and it was recorded nowhere."""
    return {"memory_format": spec.memory_format, "batched_conv": spec.batched_conv}


def dropout_starved(min_clients: int, record: Mapping[str, Any]) -> bool:
    """Whether a round's draw dropped clients from a sample that held ``min_clients`` with training rows: then dropout
    (or dropped stragglers) left it short, not the count sampled. Why: a sample already too small, which a released
    round draws too, names the count as its cause whatever the draw dropped."""
    return bool(record.get("dropped")) and len(record.get("sampled", [])) - len(record.get("no_data", [])) >= min_clients


def no_round_remedy(config: RunConfig, records: Sequence[Mapping[str, Any]]) -> str:
    """What to change when no round trained: ``federation.dropout`` (and the stragglers dropped under
    ``straggler_policy = "drop"``) first where the records show sampled clients dropped by them
    (:func:`dropout_starved`), then the count; the count alone where too few were sampled.

    Why: with every sampled client dropped by ``dropout = 0.9`` the line said only "raise clients_per_round or lower
    min_clients", neither of which touches the cause; and with too few sampled it blamed a dropout that dropped nobody."""
    fed = config.federation
    count = f"raise {fed.size_field}" + (" or lower federation.min_clients" if fed.min_clients > 1 else "")  # 1 is its floor
    if not any(dropout_starved(fed.min_clients, r) for r in records):
        return f"too few clients with training rows sampled for federation.min_clients = {fed.min_clients}: {count}"
    losers = ([f"federation.dropout = {fed.dropout:g}"] if fed.dropout else []) + (
        [f"federation.stragglers = {fed.stragglers:g} (straggler_policy = 'drop')"] if fed.stragglers and fed.straggler_policy == "drop" else [])
    return f"sampled clients were dropped: lower {' or '.join(losers)}, or {count}" if losers else count


def finish_run(
    exp: Experiment, config: RunConfig, protocol: ServerProtocol, writer: ResultWriter | None, records: list[dict[str, Any]], wall: float,
    stopped: dict[str, Any] | None = None, runtime: str | None = None, executor: Executor | None = None,
    before_rename: Callable[[], None] | None = None,
) -> RunOutput:
    """Summary, saved models and plots; ``stopped`` (a hook ended the run early) keeps the checkpoint for ``resume``.

    ``runtime``: the backend whose round loop ran, where it is not chillfl's own (the Flower ServerApp's ``"flower"``),
    recorded in ``summary.json``; the Flower server finishes its folder here too, so that both write the same files.
    ``executor``: what trained the clients, recorded in ``environment`` (:func:`~chillfl.executors.parallel.executor_record`).
    ``before_rename``: called once every file is written, before the folder is renamed from ``.partial`` (the sinks'
    close: a sink that ended its run as finished before then told its tracker a run that failed here succeeded).
    """
    summarized = records if stopped is None else stop_evaluated(exp, config, protocol, records)
    summary = summarize(summarized, config.eval.target_accuracy, exp.data.local_validation_mismatch())
    if runtime is not None:
        summary["runtime"] = runtime
    if records and all(r.get("skipped") for r in records) and stopped is None:  # Poisson sampling at a small q, or min_clients above what reports
        log.warning("no round trained: all %d were skipped (nobody, or too few, reported); the results are the initial model's (%s)",
                    len(records), no_round_remedy(config, records))
    elif records and all(r.get("skipped") or r.get("nobody_reported") for r in records) and stopped is None:  # some released with nobody in
        log.warning("no round trained: in all %d nobody, or too few, reported; the results are the initial model moved by the rounds released "
                    "without clients (a private aggregator's noise alone) (%s)", len(records), no_round_remedy(config, records))
    evaluated = {k: v for k, v in summarized[-1].items() if k not in records[-1]} if summarized is not records else {}
    if stopped is not None:
        summary["stopped"] = stopped
        if evaluated:  # what the stop round measured for the summary alone: the figures and the report draw it apart
            summary[STOP_EVALUATION] = evaluated
    summary["wall_time_s"] = round(wall, 3)
    if (private := privacy_summary(protocol)) is not None:
        summary["privacy"] = private
    summary["num_parameters"] = count_parameters(exp.model)  # trainable parameters, as architectures.*.parameters counts them (no BatchNorm statistics)
    summary["device"] = str(exp.device)
    summary["environment"] = environment(exp.device) | (executor_record(executor) | compute_record(exp.spec) if executor is not None else {})  # config.toml may say "auto"
    if writer is not None and writer.resumed:  # resumed on another setup: the rounds ran on two (resumed_across)
        summary["resumed"] = writer.resumed
    if per_client_architectures(config.model):  # heterogeneous clients: parameters per architecture
        models = build_client_models(exp)
        summary["architectures"] = architectures(models.plan, models.parameter_counts())
    if (stability := stability_summary(records)) is not None:  # the spread of the clients' losses (None without per-client losses)
        summary["stability"] = stability
    has_bytes = last_value(records, "bytes_cumulative") is not None  # a skipped last round carries no bytes
    if has_bytes:  # total bytes and the cost to reach the target accuracy: from the records rounds_to_target was read from
        summary["communication"] = communication_summary(summarized, config.eval.target_accuracy)
    model = protocol.global_state()
    model_state = {k: v.detach().clone() for k, v in model.items()} if model is not None else None
    if model_state is not None and (calibration := final_calibration(exp, config, model_state)) is not None:
        summary["calibration"] = calibration
    clients = {cid: dict(s) for cid, s in protocol.client_states().items()} if config.checkpoint.client_models else {}
    if writer is None:
        return RunOutput(None, records, summary, model_state, clients)
    writer.write_json("summary.json", summary)
    if model_state is not None:
        write_model(writer.path / MODEL, model_state)  # plain named tensors: safetensors + load_state_dict load it
    if clients:
        write_client_models(writer.path / CLIENT_MODELS, clients)  # plain named tensors "<client id>/<name>"
    try:
        _plots(records, writer.path, config, evaluated)
    except OSError as exc:  # disk full while saving a figure
        raise StorageError(f"cannot write the figures in {writer.path}: {exc.strerror or exc}") from exc
    if before_rename is not None:
        before_rename()
    final = writer.finish()
    if stopped is None:  # only once the folder is final: until then it is the run's way back
        (final / CHECKPOINT).unlink(missing_ok=True)
    return RunOutput(final, records, summary, model_state, clients)


def stop_evaluated(exp: Experiment, config: RunConfig, protocol: ServerProtocol, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` for the summary of a run a hook stopped: where its stop round did not evaluate the global model
    (``eval.every`` skipped it, or it was skipped), the last record with that model's metrics, as a last round's are.

    Why: the round a run stops at is its last, and ``final_global_acc`` is the saved model's (as ``rounds_to_target``
    and ``target_eval_interval`` count it measured). Why not in ``metrics.jsonl``: the run resumes from that round, and
    the resumed run's records must be the uninterrupted run's, which has no evaluation there. After the checkpoint:
    an evaluation that draws (a model random in eval mode) leaves the resumed rounds as they were.

    Every measure an evaluated round records is the stopped model's: the protocol's own evaluation (a soft-label
    server's ``server_acc`` alias with its ``global_acc``) and a wrapper's measures (an attack's success,
    :class:`~chillfl.engine.protocol.MeasuresNow`) where the stop round took none (a skipped round); an earlier
    round's beside the stop round's accuracy would describe another model.
    """
    if not records or "global_acc" in records[-1]:
        return records
    evaluation = _evaluated_now(exp, config, protocol)
    if evaluation is None:  # measures nothing: no round is measured (target_eval_interval null)
        return records
    # a wrapper's measures (an attack's success) of the same model; a stop round that took them keeps its own (metrics.jsonl's)
    measurer = capability(protocol, MeasuresNow)  # not isinstance: through a wrapper on Python 3.12 too
    measures = {} if measurer is None else {k: v for k, v in measurer.measure_now().items() if k not in records[-1]}
    return [*records[:-1], {**records[-1], **evaluation, **measures}]


def _evaluated_now(exp: Experiment, config: RunConfig, protocol: ServerProtocol) -> Mapping[str, Any] | None:
    """The present state's metrics as an evaluated round records them: the protocol's own measure where it has one
    (:class:`~chillfl.engine.protocol.EvaluatesNow`: prototypes that share no model, a server model's aliases), found
    through any wrapper; else its global model evaluated as a due round evaluates it (None: it has none)."""
    evaluator = capability(protocol, EvaluatesNow)
    if evaluator is not None:
        return evaluator.evaluate_now()
    state = protocol.global_state()
    return None if state is None else Evaluation(config, exp.data, exp.model, exp.device).metrics(state)


def final_calibration(exp: Experiment, config: RunConfig, state: Mapping[str, torch.Tensor]) -> dict[str, Any] | None:
    """Calibration of the final global model on the test set, with its reliability-diagram bins (None without a test set).

    Kept in ``summary.json`` so that the report draws the reliability diagram
    from the run folder alone: rebuilding the model and the test set from
    ``config.toml`` is impossible for a run on the user's own module or data.
    The same evaluation as the per-round ``global_ece``: T = 1, ``eval.ece_bins`` equal-width bins.
    """
    x, y = exp.data.test()
    if len(y) == 0:
        return None
    accumulator = CalibrationAccumulator(config.eval.ece_bins)
    accuracy, _ = evaluate(exp.model, state, x.to(exp.device), y.to(exp.device), config.eval.batch_size, observe=accumulator)
    bins = accumulator.reliability()
    mean_confidence = sum(c * f for c, f in zip(bins.count, bins.confidence)) / len(y)
    return {"n": len(y), "temperature": 1.0, "bins": config.eval.ece_bins, "binning": "width", "accuracy": accuracy, "mean_confidence": mean_confidence,
            **accumulator.result(), "mce": bins.mce(), "reliability": dataclasses.asdict(bins)}


def method_figures(config: RunConfig) -> tuple[str, ...]:
    """The figures the run's method declares in its spec's ``figures``: the protocol's own method where its table names
    one with figures (a soft-label method's :attr:`~chillfl.protocols.softlabels.method.SoftLabelSpec.figures`), else the
    aggregation method's where an aggregator runs."""
    kind = protocol_of(config)
    if kind.method_figures is not None:
        return kind.method_figures(config)
    name = config.algorithm.get("name")
    if not kind.uses_aggregator or not isinstance(name, str) or is_custom(name):  # custom: an instance from Python
        return ()
    return algorithm_spec(name).figures


def switched_figures(config: RunConfig) -> tuple[str, ...]:
    """The figures the specs of the run's switched tables that are on declare in their ``figures`` (e.g. the
    privacy-utility curve of a private run): read from the specs as the method's are, so a plugin's come in the same way."""
    return tuple(name for spec in config.switched_specs() for name in spec.figures)


def run_figures(records: Sequence[Mapping[str, Any]], config: RunConfig) -> tuple[str, ...]:
    """The names of the run's figures: the common ones, the protocol's bytes figure where the records carry bytes, the method's,
    then the switched tables' (each name once, in that order)."""
    from chillfl.plots.registry import COMMON

    has_bytes = last_value(records, "bytes_cumulative") is not None and protocol_of(config).bytes_figure  # Fig. 7: accuracy against bytes
    names = (*COMMON, *(("accuracy_vs_bytes",) if has_bytes else ()), *method_figures(config), *switched_figures(config))
    return tuple(dict.fromkeys(names))


def figures_skipped(missing: MissingExtra) -> None:
    """Say that figures are skipped for want of the ``plots`` extra: once a call (:func:`~chillfl.once.said_once`),
    for the runs and a comparison's own figures alike. Why: said once a run, a comparison without matplotlib repeated
    it 21 times (the README's demo), where docs/install.md promises one log line."""
    warn_once(log, f"{missing}; figures skipped", key="figures skipped", level=logging.INFO)


def _plots(records: list[dict[str, Any]], folder: Path, config: RunConfig, evaluated: Mapping[str, Any] | None = None) -> None:
    """The run's figures, each looked up by name in :mod:`chillfl.plots.registry` (imported here: the engine knows nothing of plots).

    ``evaluated``: what a stopped run measured at its stop round for its summary alone (:func:`stop_evaluated`), given to
    the figures under :data:`~chillfl.plots.stop.STOP_EVALUATION` in their copy of the last record, so that they draw the
    point the summary reports apart from the curves of ``metrics.jsonl``.

    Without matplotlib (the ``plots`` extra) the run still completes with its
    metrics; one log line says the figures were skipped. A declared figure that no module
    registered is skipped with a warning: the run's metrics are already written.
    """
    from chillfl.plots.registry import registered_figures

    try:
        figures = registered_figures()
    except MissingExtra as exc:
        figures_skipped(exc)
        return
    drawn = [*records[:-1], {**records[-1], STOP_EVALUATION: dict(evaluated)}] if records and evaluated else records
    for name in run_figures(records, config):
        spec = figures.get(name)
        if spec is None:
            log.warning("figure %r is declared but no module registers it (chillfl.plots.registry.register_figure); skipped", name)
            continue
        try:
            spec.render(drawn, folder / spec.file, config)
        except OSError:  # disk full: the caller's StorageError
            raise
        except Exception as exc:  # noqa: BLE001 - a (plugin's) draw: the finished run must not be lost for a figure
            if signal_in(exc) is not None:
                raise
            log.warning("figure %r (%s) failed and is skipped: %s: %s", name, spec.file, type(exc).__name__, exc)


def rounds_for(exp: Experiment) -> Callable[[Experiment], Iterator[dict[str, Any]]]:
    """Every round's record of ``exp`` without writing anything (tests and notebooks)."""

    def rounds(e: Experiment) -> Iterator[dict[str, Any]]:
        protocol = build_protocol(e)
        executor = make_executor(e, protocol)
        watch = LossWatch(e.config.strict, hint=loss_hint(run_suspects(e.config)))
        try:
            for record in run_rounds(
                protocol, executor, seed=e.config.seed, num_clients=e.data.num_clients,
                clients_per_round=e.config.federation.sample_size(), rounds=e.config.federation.rounds, participation=e.config.federation,
                redraw=redraw_of(e), empty=e.data.without_training_rows(),
            ):
                watch.observe(record)
                yield record
        finally:
            executor.close()
            protocol.close()

    return rounds

"""The Python API: one call runs any registered method on the user's own ``nn.Module`` and data.

::

    result = chillfl.run(model=MyNet(), data=chillfl.TensorData(x_tr, y_tr, x_te, y_te, num_classes=10),
                         config={"algorithm": {"name": "scaffold"}}, progress=False)
    result.model      # a copy of MyNet holding the trained global weights

Nothing is registered: the module is handed to the experiment as its model
template (a deep copy; the caller's object is never trained), so no global
registry changes and two runs in one process cannot see each other. The
saved ``config.toml`` records what actually ran: ``[model] name = "custom"``
with the module's class and parameter count, ``[dataset] name = "custom"``
with the data's sizes; a config file cannot rebuild those parts, and loading
it says so (:data:`chillfl.plugins.CUSTOM`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence, TypeVar, Union

import chillfl._torch  # noqa: F401  (first: imports torch with the GC paused)
from chillfl import arguments
import torch
from torch import nn

from chillfl.aggregation.base import Aggregator, AroundAggregator
from chillfl.aggregation.registry import AGGREGATOR_METHODS, algorithm_names
from chillfl.config import SWITCHED, RunConfig, name_from_path, apply_overrides, check_compare_option, check_depth, check_out_dir, config_from_dict, dotted_overrides, read_config_file, set_dotted
from chillfl.data import ArrayDataset, FederatedData, dataset_names, partitioner_names
from chillfl.data.checks import as_tensor, checked_arrays, checked_groups
from chillfl.data.items import REDRAWS, ItemReader, materialize
from chillfl.engine.view import RunView, model_with_state
from chillfl.errors import ConfigError, InterruptedAfterRun, did_you_mean
from chillfl.worker_start import refuse_in_worker_start
from chillfl.experiment import (BOUND, COMPARISON_FROM_PYTHON, RUN_FROM_PYTHON, Experiment, FromPython, Plugged, build_experiment, check_plugged, check_rebuildable,
                                dataset_record, model_record, plugged_records, record_conflict, record_difference)
from chillfl.experiments import resolve_config
from chillfl.models import model_names
from chillfl.numeric import is_whole
from chillfl.models.assign import refuse_with_user_model
from chillfl.options import check_built, plain, short_repr
from chillfl.progress import Progress
from chillfl.plugins import PluginNotImported, instance_only_hooks, is_custom, missing_hooks, reading_data
from chillfl.report.compare import CompareResult as Comparison
from chillfl.storage.model_file import check_client_ids
from chillfl.storage.run_folder import CLIENT_MODELS
from chillfl.storage.run_state import is_sweep
from chillfl.sweeps.plan import CompareOptions, check_select_used, grid_variants, parse_grid, repeats
from chillfl.sweeps.record import check_resumable
from chillfl.sweeps.replaced import AskedBy, check_overrides_replaced
from chillfl.sweeps.run import run_compare
from chillfl.sweeps.shard import Shard
from chillfl.reproduce import Outcome, write_verdicts
from chillfl.resolve import dataset_table, is_default_table, model_table, partition_table, resolved
from chillfl.reproduce import reproduce as reproduce_claims
from chillfl.once import once_per_call, said_once
from chillfl.runner import Callback, RunOutput, refuse_inference_mode, run_experiment
from chillfl.training.local import evaluate, persistent_buffers
from chillfl.settings.attack import kind_names
from chillfl.settings.distillation import method_names
from chillfl.settings.privacy import mechanism_names
from chillfl.settings.prototypes import method_names as prototype_method_names
from chillfl.temperature import POLICY_METHODS, policy_names
from chillfl.temperature.policy import TemperaturePolicy
from chillfl.training.terms import Term, term_names
from chillfl.tune import SELECT_RULES, parse_tune

log = logging.getLogger(__name__)

ConfigLike = Union[RunConfig, Mapping[str, Any], str, Path, None]
UserData = Union["TensorData", "DatasetData", ArrayDataset]

__all__ = ["Comparison", "DatasetData", "FinishedRun", "Result", "TensorData", "available", "compare", "load_run", "make_config", "reproduce_paper",
           "resume", "resume_compare", "run"]


@dataclass(frozen=True, eq=False)
class TensorData:
    """A user's own train/test split: inputs ``[N, ...]`` and integer labels ``[N]`` (tensors or NumPy arrays).

    ``num_classes`` defaults to 1 + the largest label (at least 2); give it when some classes may be absent.
    ``name`` only labels the data in the saved config (``dataset.source``).
    """

    x_train: Any
    y_train: Any
    x_test: Any
    y_test: Any
    num_classes: int | None = None
    name: str = "tensors"
    public: Any = None
    """A separate public set for the soft-label methods (``[distillation]``): inputs ``[P, ...]``, or
    ``(inputs, labels)`` (labels only for FedMD's transfer learning). None: carved from the training data."""
    client_test: Sequence[Any] | None = None
    """Each client's own test set, as indices into ``x_test`` (one list per client): local accuracy is
    measured on them (``eval.client_split = "natural"``). None: drawn from the test set."""


@dataclass(frozen=True, eq=False)
class DatasetData:
    """A user's own map-style ``torch.utils.data.Dataset`` s (``len`` and ``[i] -> (input, label)``), with their transforms.

    Each dataset is read item by item into one preallocated tensor (no second copy of a large
    dataset), every item under its own seeded RNGs (:mod:`chillfl.data.items`). ``redraw="round"``:
    a client's training items are read anew every round it is sampled, so a *random* augmentation
    is drawn afresh at each visit, from (run seed, round, client, item); ``"once"``: the first
    read serves the whole run (for transforms that are not random; cheaper).
    ``public`` and ``client_test`` are those of :class:`TensorData` (``public`` may be a Dataset too);
    test and public sets are read once.
    """

    train: Any
    test: Any
    num_classes: int | None = None
    name: str = "dataset"
    public: Any = None
    client_test: Sequence[Any] | None = None
    redraw: str = "round"


@dataclass
class Result:
    """What :func:`run` returns.

    ``model``: a fresh copy of the given module (else of the config's model)
    holding the trained global weights (the server model for soft-label
    methods); None when the run has no global model (``individual``, and the
    prototype methods whose models never travel: FedProto, FedGH, FedDistill,
    FedTGP, FedHKD with ``share_model = false``).
    The model is in eval mode (dropout off, batch norm on its running
    statistics), as the run evaluated it: ``result.model(x)`` reproduces the
    recorded accuracy; call ``.train()`` to train it further.
    ``state``: the same weights as a name -> tensor dict. ``folder``: the
    result folder (None with ``write=False``). ``config``: the config that
    ran, as saved in ``folder/config.toml``.
    """

    model: nn.Module | None
    summary: dict[str, Any]
    records: list[dict[str, Any]]
    folder: Path | None
    config: RunConfig
    state: dict[str, torch.Tensor] | None = None
    client_states: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)

    def __repr__(self) -> str:
        """One line a notebook can show: the dataclass's own repr printed every record, the summary and each tensor
        (tens of kB for a two-round run). The fields themselves hold everything."""
        finals = {key: self.summary[key] for key in ("rounds", "final_global_acc", "final_local_acc") if key in self.summary}
        said = [f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value!r}" for key, value in finals.items()]
        model = type(self.model).__name__ if self.model is not None else None
        said += [f"algorithm={self.config.algorithm.get('name')!r}", f"model={model}", f"folder={self.folder}", f"records={len(self.records)}"]
        if self.client_states:
            said.append(f"client_states={len(self.client_states)}")
        return f"Result({', '.join(said)})"


@dataclass(frozen=True, eq=False)
class FinishedRun:
    """A finished run folder read back (:func:`load_run`): what its metrics were computed on.

    ``model``: the final global model (a module holding ``model.safetensors``, in eval mode, on the CPU); None for a run
    without a global model. ``data``: the run's federated data rebuilt from its config: ``data.test()`` are the test rows
    its ``global_*`` metrics scored (the server validation split, ``data.validation()``, left out), ``data.client_eval(k)``
    client k's evaluation rows. ``client_states``: client id -> its saved model (``checkpoint.client_models = true``),
    else empty. Why: a registry run's model class, standardisation and class-wise test split live in chillfl, and a
    hand-made test set scored another set of rows than the recorded accuracy.
    """

    folder: Path
    config: RunConfig
    model: nn.Module | None
    data: FederatedData
    client_states: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)

    def evaluate(self, x: torch.Tensor, y: torch.Tensor, state: Mapping[str, torch.Tensor] | None = None) -> tuple[float, float]:
        """(accuracy, mean cross-entropy) of the global model (or of ``state``, e.g. ``client_states[k]``, in the same
        architecture) on (x, y), scored as the run scores: eval mode, ``eval.batch_size`` batches, in the model's dtype (a float64 model in float64)."""
        if self.model is None:  # a protocol whose clients keep their own models (prototypes): no architecture is read back
            kept = "; its client_states are in each client's own model: load one into your module yourself" if self.client_states else ""
            raise ConfigError("model", f"{self.folder} has no global model, the architecture evaluate scores in{kept}")
        # model.safetensors' names (model_state): parameters and persistent buffers, a tied tensor once, where state_dict()
        # repeats a tied submodule under its every name
        held = {**dict(self.model.named_parameters()), **dict(persistent_buffers(self.model))}
        weights = state if state is not None else held
        own = set(held)
        if set(weights) != own:  # another architecture (FedCP's own template) or a partial state: not silently filled from the global model
            differ = sorted(set(weights) ^ own)[:4]
            raise ConfigError("state", f"holds other entries than the run's {type(self.model).__qualname__} ({', '.join(differ)}, ...): "
                                       "a method whose clients keep another architecture (FedCP, FedDBE) is not scored here")
        return evaluate(self.model, weights, x, y, self.config.eval.batch_size)


F = TypeVar("F", bound=Callable[..., Any])

def _top_level(fn: F) -> F:
    """An API entry point that trains: refused inside ``torch.inference_mode()``, and one call's scope for the notes said
    once (:func:`chillfl.once.said_once`): a comparison's runs share them, the next call says them again."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        refuse_in_worker_start(f"chillfl.{fn.__name__}")
        refuse_inference_mode()
        with said_once():
            return fn(*args, **kwargs)

    return call  # type: ignore[return-value]




@_top_level
def run(
    model: nn.Module | None = None,
    data: UserData | None = None,
    config: ConfigLike = None,
    *,
    out_dir: str | Path | None = None,
    callbacks: Sequence[CallbackLike] = (),
    progress: Progress = True,
    write: bool = True,
    aggregator: Aggregator | None = None,
    terms: Sequence[Term] = (),
    policy: TemperaturePolicy | None = None,
    **overrides: Any,
) -> Result:
    """Run one federated experiment and return the trained model.

    ``model``: any ``nn.Module`` mapping a batch of inputs to ``[batch, num_classes]``
    logits; its current weights are the initial global model (None: the
    config's registered ``[model]``). ``data``: :class:`TensorData`, :class:`DatasetData` (your own
    ``torch.utils.data.Dataset`` s) or an :class:`~chillfl.data.ArrayDataset` (None: the config's ``[dataset]``).
    ``config``: a dict shaped like the TOML file, a TOML path or bundled
    experiment name, or a :class:`RunConfig` (None: the defaults).
    ``overrides``: ``key=value`` settings on top, top-level (``seed=1``) or
    dotted (``**{"client.lr": 0.05}``). ``callbacks``: objects with
    ``on_round(record[, run])`` and/or ``on_end(output)``, or functions called
    with each round's record (and, when they take two arguments, a
    :class:`~chillfl.engine.view.RunView`: copies of the global and client
    models, and ``run.stop(reason)`` to end the run early, resumable).
    ``aggregator`` (with its local objective ``terms``) and ``policy``: your own method's parts as
    instances (:mod:`chillfl.extend`, docs/extending.md); they replace ``[algorithm]`` and
    ``[temperature]``, and the run works on copies of them. Every user error raises :class:`ConfigError` naming
    the field, before anything is written.
    """
    out_dir, progress, write = arguments.optional_path(out_dir, "out_dir"), arguments.progress_mode(progress), arguments.flag(write, "write")
    plugged = as_plugged(aggregator, terms, policy)
    cfg, dataset = _prepare(model, data, config, out_dir, overrides, plugged)
    if cfg.variants or repeats(cfg):  # the command line compares such a config; here the caller asked for one run
        log.warning("chillfl.run: the config's [variants] / [compare] / [tune] tables are a comparison's and are not used by one run "
                    "(at seed %d): chillfl.compare(config=...) runs them", cfg.seed)
    hooks = _as_callbacks(callbacks)
    if write:
        check_out_dir(cfg.out_dir)
    exp = build_experiment(cfg, dataset, model=model, plugged=plugged)  # a caller's module checked against the data there (check_model_fits)
    with _result_kept(lambda out: _result(model, exp, cfg, out)):
        out = run_experiment(cfg, write=write, progress=progress, experiment=exp, callbacks=hooks, hooks=[h.hook for h in hooks])
    return _result(model, exp, cfg, out)


def _result(model: nn.Module | None, exp: Experiment, config: RunConfig, out: RunOutput) -> Result:
    """The :class:`Result` of a run on ``exp`` (the caller's ``model``, or the registered one built)."""
    return Result(
        model=_trained_copy(model if model is not None else exp.model, out.model_state),
        summary=out.summary,
        records=out.records,
        folder=out.folder,
        config=dataclasses.replace(config, device=str(exp.device)),  # as the runner saves it
        state=out.model_state,
        client_states=out.client_states,
    )


@contextmanager
def _result_kept(result: Callable[[RunOutput], Result]) -> Iterator[None]:
    """A signal in the last round: the run completed, then :class:`~chillfl.errors.InterruptedAfterRun` ends the call;
    its ``result`` is the :class:`Result` the call would have returned."""
    try:
        yield
    except InterruptedAfterRun as exc:
        if exc.output is not None:
            exc.result = result(exc.output)
        raise


@_top_level
def resume(
    folder: str | Path,
    model: nn.Module | None = None,
    data: UserData | None = None,
    *,
    aggregator: Aggregator | None = None,
    terms: Sequence[Term] = (),
    policy: TemperaturePolicy | None = None,
    callbacks: Sequence[CallbackLike] = (),
    progress: Progress = True,
    force: bool = False,
) -> Result:
    """Continue an interrupted :func:`run` in ``folder`` (its ``NAME.partial``, or a run a callback stopped) from its checkpoint.

    ``chillfl resume FOLDER`` rebuilds a run from its ``config.toml``; a run on your own ``model``, ``data``,
    ``aggregator`` (with its ``terms``) or ``policy`` needs them again, since a file cannot hold them: pass
    the same ones, built the same way (the config records their classes and sizes, which must match; their
    options are yours to repeat). The rounds after the checkpoint are run again, bit for bit as the
    uninterrupted run on the same machine. ``force``: resume although config.toml or metrics.jsonl changed since the
    checkpoint; a checkpoint whose bytes do not match its checksum (torn or flipped) is refused all the same.
    """
    from chillfl.runner import resume_experiment

    folder, progress, force = arguments.path(folder, "folder"), arguments.progress_mode(progress), arguments.flag(force, "force")
    if is_sweep(Path(folder)):  # as `chillfl resume` tells them apart; a run's resume would call it a run without a checkpoint
        check_resumable(Path(folder))  # a finished one: "nothing to resume", as resume_compare would say
        raise ConfigError("run_dir", f"{folder} is an interrupted comparison: chillfl.resume_compare(FOLDER, ...) goes on with it")
    plugged = as_plugged(aggregator, terms, policy)
    _check_model(model)
    dataset = as_dataset(data, _input_dtype(model)) if data is not None else None

    built: list[Experiment] = []

    def build(config: RunConfig) -> Experiment:
        _check_same_parts(config, model, dataset, plugged, RUN_FROM_PYTHON)
        exp = build_experiment(config, dataset, model=model, plugged=plugged)
        built.append(exp)
        return exp

    hooks = _as_callbacks(callbacks)
    with _result_kept(lambda out: _result(model, built[0], built[0].config, out)):
        out = resume_experiment(folder, progress=progress, callbacks=hooks, hooks=[h.hook for h in hooks], force=force, build=build)
    return _result(model, built[0], built[0].config, out)


def load_run(folder: str | Path, model: nn.Module | None = None, data: UserData | None = None) -> FinishedRun:
    """A finished run folder's config, final global model, federated data and saved client models (:class:`FinishedRun`).

    A registry run is rebuilt from its ``config.toml`` alone; a run on your own ``model`` or ``data`` needs them again
    (the same class and data; the weights come from ``model.safetensors``). Everything stays on the CPU. Why: the
    recorded accuracies are reproducible only on the rows and the model the run used (docs/python-api.md).

    A folder whose config names no plugin part is read as data (:func:`~chillfl.plugins.reading_data`): no
    ``chillfl.plugins`` entry point is imported, so a received folder cannot run a module it ships beside itself (the
    working directory is on the import path in a notebook). One that names a plugin imports it: rebuilding needs its code.
    """
    from chillfl.analysis.replay import check_finished, finished_run, saved_config, saved_config_data

    folder = arguments.path(folder, "folder")
    _check_model(model)
    dataset = as_dataset(data, _input_dtype(model)) if data is not None else None
    check_finished(folder, "folder")
    saved = saved_config_data(folder, "folder")  # read once: parsed as data, then (naming a plugin) again with it imported
    parts = None
    with reading_data("chillfl.load_run") as refused:
        try:
            config = saved_config(saved)
            _look_up_built_parts(config)
            if not refused:  # a plugin part kept as written: not built from that, the model files not read for nothing
                parts = finished_run(folder, model, dataset, field="folder", config=config)
        except PluginNotImported:  # a plugin part met while building: before any model file was read (finished_run)
            pass
    if parts is None:  # its config names a plugin's part (a model, a mechanism kept as written): rebuilding the run needs that code
        parts = finished_run(folder, model, dataset, field="folder", config=saved_config(saved))
    check_client_ids(Path(folder) / CLIENT_MODELS, parts.client_states, parts.config.federation.num_clients)  # an id past the run's clients: a crafted file
    return FinishedRun(Path(folder), parts.config, parts.model, parts.data, parts.client_states)


def _look_up_built_parts(config: RunConfig) -> None:
    """Look up the specs of the parts :func:`chillfl.load_run` builds (its dataset, partitioner and model), building nothing.

    Why: a plugin's part is refused (:class:`~chillfl.plugins.PluginNotImported`) while a folder is read as data only
    when its spec is looked up; met while building, the data had been built for nothing, and was built again."""
    dataset_table(config.dataset)
    partition_table(config.partition)
    model_table(config.model)


def _check_same_parts(config: RunConfig, model: nn.Module | None, dataset: ArrayDataset | None, plugged: Plugged, entry: FromPython) -> None:
    """The parts passed to :func:`resume` / :func:`resume_compare` (``entry`` says which) are of the classes and sizes the saved
    config records, and none it records is missing (one ConfigError naming the keyword, and the function to call again).
    An aggregator the run binds (``bound = true``, :func:`~chillfl.experiment.plugged_records`) in a folder saved before
    binding existed is refused on its own line: it ran unbound there, and its options alone cannot tell the two apart."""
    given = {**plugged_records(plugged), **({"model": model_record(model)} if model is not None else {}),
             **({"dataset": dataset_record(dataset)} if dataset is not None else {})}
    keywords = {"algorithm": "aggregator", "temperature": "policy", "model": "model", "dataset": "data"}
    saved = {"algorithm": config.algorithm, "temperature": config.temperature, "model": config.model, "dataset": config.dataset}
    for part, record in given.items():
        if not is_custom(saved[part].get("name" if part != "temperature" else "policy")):
            raise ConfigError(keywords[part], f"the {entry.holds} in this folder did not take one from Python: its [{part}] is {short_repr(dict(saved[part]))}")
        differ = _differing(saved[part], record)
        if BOUND in differ and BOUND not in saved[part]:  # an older chillfl ran it unbound: this one would change the method midway
            raise ConfigError(keywords[part], f"the {entry.holds} in this folder predates the binding of an aggregator from Python to the run "
                                              f"(its saved [{part}] has no {BOUND} = true): its rounds so far ran {str(record.get('class')).rsplit('.', 1)[-1]} "
                                              "without the run's momentum, rounds or sizes, which this chillfl gives it; resume it with the chillfl that made it, "
                                              "or start it again")
        if differ:
            said = ", ".join(f"{k} {short_repr(saved[part].get(k))}, got {short_repr(record.get(k))}" for k in differ)
            raise ConfigError(keywords[part], f"is not what the {entry.holds} was made with: its saved [{part}] has {said}")
    check_rebuildable(config, has_model=model is not None, has_data=dataset is not None, entry=entry)
    check_plugged(config, plugged, entry)


def _differing(saved: Mapping[str, Any], record: Mapping[str, Any]) -> list[str]:
    """The keys of ``record`` that ``saved`` holds otherwise (and ``options`` saved where the instance keeps none).

    A record an older chillfl saved has no ``options`` (it recorded the class alone), a model's no ``dtype``, and names
    each loss term by its class path alone: there the class decides, so the run resumes on an instance of it; a saved
    ``options`` table (the part's or a term's) and ``dtype`` are compared as strictly as the rest.
    """
    def same(key: str, was: Any, now: Any) -> bool:
        if key == "terms" and isinstance(was, list) and isinstance(now, list) and len(was) == len(now):
            return all(_same_term(w, n) for w, n in zip(was, now))
        return was == now or (key in ("options", "dtype") and key not in saved)

    keys = set(record) | ({"options"} & set(saved))  # options saved, none kept now: not the run's either
    return sorted(k for k in keys if not same(k, saved.get(k), record.get(k)))


def _same_term(was: Any, now: Any) -> bool:
    """A term as saved (``was``) and as passed again (``now``): the same record, or the same class where the saved one is its class alone."""
    return was == now or (isinstance(was, str) and isinstance(now, Mapping) and now.get("class") == was)


@_top_level
def compare(
    model: nn.Module | None = None,
    data: UserData | None = None,
    config: ConfigLike = None,
    *,
    grid: Mapping[str, Sequence[Any]] | Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    tune: Mapping[str, Sequence[Any]] | None = None,
    controls: bool | None = None,
    select: str | None = None,
    reference: str | None = None,
    out_dir: str | Path | None = None,
    progress: Progress = True,
    write: bool = True,
    aggregator: Aggregator | None = None,
    terms: Sequence[Term] = (),
    policy: TemperaturePolicy | None = None,
    shard: str | None = None,
    **overrides: Any,
) -> Comparison:
    """Run variants of one experiment on your own model and data, as ``chillfl compare`` does, and tabulate them.

    The same code path as the command line (:func:`chillfl.sweeps.run.run_compare`): the same
    tables (``result.rows`` as data, ``result.table`` / ``str(result)`` as text) and the same result
    folder. ``grid``: ``{"client.lr": [0.01, 0.1], "temperature": [1, 0.25]}`` (the cartesian
    product; or ``["client.lr=0.01,0.1"]`` as on the command line); without it, the config's
    ``[variants]``. ``seeds``: run every variant at each seed (mean ± std, 95 % CI, paired
    differences). ``tune``: ``{"client.lr": [...]}``, each variant at its best point on the
    validation split (needs ``eval.validation > 0``). ``controls``: step-size controls for T != 1
    variants. ``model``, ``data``, ``config``, ``aggregator``, ``terms``, ``policy`` and ``overrides``
    are those of :func:`run` (every variant and seed runs on its own copies of your parts).
    ``result.report("report.html")`` writes the HTML report. ``shard``: ``"K/N"``, run only the K-th of N shares of the runs
    into the comparison's shared folder, as ``--shard K/N`` (:mod:`chillfl.sweeps.shard`): ``result.pending`` counts the
    other shards' unfinished runs; the last shard to end writes the table (not with ``write=False``, a model, data or parts).
    """
    if "callbacks" in overrides:  # else "callbacks: unknown key or section", as if the config had a typo
        raise ConfigError("callbacks", "chillfl.compare takes no callbacks (chillfl.run does): run each variant with chillfl.run(..., callbacks=...) to watch its rounds")
    parsed_shard = None if shard is None else Shard.parse(shard)  # a malformed K/N is named first, as on the command line
    out_dir, progress, write = arguments.optional_path(out_dir, "out_dir"), arguments.progress_mode(progress), arguments.flag(write, "write")
    controls = arguments.optional_flag(controls, "controls")
    plugged = as_plugged(aggregator, terms, policy)
    _check_grid(grid)
    if tune is not None and not isinstance(tune, Mapping):  # the CLI's 'client.lr=0.1,0.2' strings (grid takes them): ValueError from dict()
        raise ConfigError("tune", f"expected a dict {{'section.option': [values]}}, got {type(tune).__name__} {short_repr(tune)}")
    if tune is not None:  # a NumPy array of values a list, and NumPy scalars in a list Python numbers, as for grid
        tune = {key: _plain_values(values) for key, values in tune.items()}
    if select is not None and (not isinstance(select, str) or select not in SELECT_RULES):  # select=1 was told it "picks each variant's tuning point"
        raise ConfigError("select", f"expected a tuning rule, one of {', '.join(map(repr, SELECT_RULES))}, got {type(select).__name__} {short_repr(select)}"
                                    f"{did_you_mean(select, SELECT_RULES)}")
    if reference is not None and not isinstance(reference, str):  # a list was looked up as a label: TypeError unhashable
        raise ConfigError("reference", f"expected a variant label (a string), got {type(reference).__name__} {short_repr(reference)}")
    swept = [str(key) for key in tune or {}]  # a switch swept in the grids lets the base config hold its table's options
    if isinstance(grid, Mapping):
        swept += [str(key) for key in grid]
    elif grid is not None:  # 'key=v1,v2' items
        swept += [item.split("=", 1)[0].strip() for item in grid]
    cfg, dataset = _prepare(model, data, config, out_dir, overrides, plugged, swept)
    if isinstance(grid, Mapping):
        grid = {key: _plain_values(values) for key, values in grid.items()}  # a NumPy array of values: a list
        for key, values in grid.items():
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
                raise ConfigError(f"grid.{key}", f"expected a non-empty list of values, got {values!r}")
        with _keyword_fields():  # a value given twice: named as the keyword, not the command line's --grid
            variants = grid_variants([(str(k), list(v)) for k, v in grid.items()], cfg)
    elif grid is not None:
        with _keyword_fields():
            variants = parse_grid(list(grid), cfg)
    else:
        variants = None
    if seeds is not None:
        seeds = _check_seeds(seeds)
    _check_seed_override(overrides, seeds if seeds is not None else cfg.compare.get("seeds"))
    if tune is not None:
        parse_tune(dict(tune), "tune")
    # an override no run uses (a tuning axis or every variant replaces it), which config.toml would record as the base: one ConfigError, as on the command line
    check_overrides_replaced(cfg, overrides, variants, tune if tune is not None else cfg.tune, AskedBy(grid_rows=grid is not None, tune_given=tune is not None))
    if write:
        check_out_dir(cfg.out_dir)
    if model is not None:  # a caller's module against the data before any run starts (build_experiment checks it)
        build_experiment(cfg, dataset, model=model, plugged=plugged)
    options = CompareOptions(seeds=list(seeds) if seeds is not None else None, tune={k: list(v) for k, v in tune.items()} if tune is not None else None, controls=controls, select=select)
    check_select_used(cfg, options, "select")
    with _keyword_fields():
        return run_compare(cfg, [], reference=reference, progress=progress, write=write, options=options, variants=variants, dataset=dataset, model=model,
                           plugged=plugged or None, shard=parsed_shard)


@_top_level
def resume_compare(
    folder: str | Path,
    model: nn.Module | None = None,
    data: UserData | None = None,
    *,
    aggregator: Aggregator | None = None,
    terms: Sequence[Term] = (),
    policy: TemperaturePolicy | None = None,
    progress: Progress = True,
    force: bool = False,
) -> Comparison:
    """Go on with an interrupted :func:`compare` in ``folder`` (its ``NAME-compare.partial``) and return its whole table.

    As ``chillfl resume FOLDER`` does for a comparison: its finished runs are read back, the stopped one resumes from
    its checkpoint, the rest run, and the table equals the uninterrupted comparison's, bit for bit on the same machine.
    A comparison on your own ``model``, ``data``, ``aggregator`` (with its ``terms``) or ``policy`` needs them again,
    as :func:`resume` does for one run: the same ones, built the same way (the saved config records their classes and
    sizes, which must match). ``force``: resume although config.toml or metrics.jsonl changed since it stopped; a
    corrupt checkpoint (bytes that do not match its checksum) is refused all the same.
    """
    from chillfl.sweeps.run import resume_compare as resume_sweep

    folder, progress, force = arguments.path(folder, "folder"), arguments.progress_mode(progress), arguments.flag(force, "force")
    plugged = as_plugged(aggregator, terms, policy)
    _check_model(model)
    dataset = as_dataset(data, _input_dtype(model)) if data is not None else None
    return resume_sweep(folder, progress=progress, force=force, dataset=dataset, model=model, plugged=plugged or None,
                        check=lambda config: _check_same_parts(config, model, dataset, plugged, COMPARISON_FROM_PYTHON))


_FLAGS = {"--grid": "grid", "--seeds": "seeds", "--tune": "tune", "--select": "select", "--reference": "reference", "--controls": "controls"}


@contextmanager
def _keyword_fields() -> Iterator[None]:
    """The comparison's checks, shared with the command line, name its flags (``--grid``); from Python the error names the keyword (``grid``)."""
    try:
        yield
    except ConfigError as exc:
        if exc.field not in _FLAGS:
            raise
        raise ConfigError(_FLAGS[exc.field], exc.message) from None


@_top_level
def reproduce_paper(paper: str, seeds: Sequence[int] = (0, 1, 2), *, out_dir: str | Path | None = None, resume: bool = False, progress: Progress = True) -> list[Outcome]:
    """A paper's headline claims at CPU scale, each with its verdict, as ``chillfl reproduce PAPER`` does.

    (Not ``chillfl.reproduce``: that name is the module :mod:`chillfl.reproduce`, which holds the claims.)

    Each :class:`~chillfl.reproduce.Outcome` has the claim, ``measured`` (the paired difference over seeds, or the
    bytes ratio), ``verdict`` and ``folder`` (its comparison's runs, table and figures). ``reproduce-PAPER.md`` and
    its figure are written beside those folders. ``resume``: read back the claims this code finished before and
    resume an interrupted one (as ``--resume``; a ``KeyboardInterrupt`` leaves that state behind).
    """
    out_dir, progress, resume = arguments.optional_path(out_dir, "out_dir"), arguments.progress_mode(progress), arguments.flag(resume, "resume")
    seeds = _check_seeds(seeds)
    if out_dir is not None:
        check_out_dir(str(out_dir))
    outcomes = reproduce_claims(paper, seeds, out_dir=None if out_dir is None else str(out_dir), progress=progress, resume=resume)
    write_verdicts(paper, outcomes)
    return outcomes


def _plain_values(values: Any) -> Any:
    """A grid's or tuning grid's values as Python values: a NumPy array a list, and each NumPy scalar in a list or tuple
    (``list(np.arange(2))``, a DataFrame column's values) the number it holds; they reached tomli_w as ``np.int64`` and the
    comparison's record raised a raw TypeError, or labelled a variant ``client.lr=0.05000000074505806``."""
    values = plain(values)
    return [plain(v) for v in values] if isinstance(values, (list, tuple)) else values


def _check_seed_override(overrides: Mapping[str, Any], seeds: Any) -> None:
    """``seed=N`` passed to a comparison whose seeds are set (``seeds=`` or ``[compare] seeds``): a ConfigError on
    ``seed``, as ``--seed`` is on the command line, not a comparison that runs its other seeds and drops N."""
    if "seed" in overrides and seeds:
        raise ConfigError("seed", f"the comparison runs at seeds {list(seeds)}, which seed={overrides['seed']!r} does not change; "
                                  f"pass seeds=[{overrides['seed']!r}] for that seed alone")


def _check_grid(grid: Any) -> None:
    """:func:`compare`'s ``grid``: a dict keyed by option names, or a list of ``'key=v1,v2'`` strings (else one ConfigError
    on ``grid``: ``grid=3`` was iterated, ``[..., 3]`` split, and each raised a TypeError or AttributeError of its own)."""
    if grid is None:
        return
    expected = "expected a dict {key: [values]} or a list of 'key=v1,v2' strings"
    if isinstance(grid, (str, bytes)):
        raise ConfigError("grid", f"{expected}, got a string")
    if isinstance(grid, Mapping):
        bad = [key for key in grid if not isinstance(key, str)]
        if bad:
            raise ConfigError("grid", f"a key must be an option name (a string, e.g. 'client.lr'), got {short_repr(bad[0])} ({type(bad[0]).__name__})")
        return
    if not isinstance(grid, Sequence):
        raise ConfigError("grid", f"{expected}, got {type(grid).__name__} {short_repr(grid)}")
    for i, item in enumerate(grid):
        if not isinstance(item, str):
            raise ConfigError("grid", f"{expected}, got {short_repr(item)} ({type(item).__name__}) as item {i}")


def _check_seeds(seeds: Sequence[int]) -> list[int]:
    """``seeds`` as plain ints (``np.arange(3)`` too), checked by ``[compare] seeds``' rules, the error naming the Python
    argument ``seeds``."""
    seeds = plain(seeds)
    if isinstance(seeds, (str, bytes)):  # a string is a sequence too: '0,1' read as ['0', ',', '1']
        raise ConfigError("seeds", f"expected a list of integer seeds, e.g. [0, 1, 2], got the string {seeds!r}")
    if isinstance(seeds, Mapping) or not isinstance(seeds, Iterable):  # seeds=3 was iterated: TypeError
        hint = f" (for {seeds} seeds: list(range({seeds})))" if is_whole(seeds) and seeds > 0 else ""
        raise ConfigError("seeds", f"expected a list of integer seeds, e.g. [0, 1, 2], got {type(seeds).__name__} {short_repr(seeds)}{hint}")
    plain_seeds = [plain(s) for s in seeds]
    try:
        check_compare_option("seeds", plain_seeds)
    except ConfigError as exc:
        raise ConfigError("seeds", exc.message) from None
    return plain_seeds


def as_plugged(aggregator: Any, terms: Sequence[Any], policy: Any) -> Plugged:
    """The user's method parts passed to :func:`run` / :func:`compare`, checked: ConfigError on ``aggregator``, ``terms[i]``, ``policy``."""
    for field_name, obj, methods, what in (("aggregator", aggregator, AGGREGATOR_METHODS, "Aggregator"), ("policy", policy, POLICY_METHODS, "TemperaturePolicy")):
        lacks = [] if obj is None else missing_hooks(obj, methods)  # the instance's: a proxy's hooks count
        if obj is not None and (isinstance(obj, type) or lacks):
            why = f"{obj.__name__} is a class, not an instance: call it" if isinstance(obj, type) else f"{type(obj).__name__} lacks {', '.join(lacks)}"
            raise ConfigError(field_name, f"must be a chillfl.extend.{what} instance; {why}")
    _refuse_instance_hooks(aggregator, policy)
    if isinstance(terms, (str, bytes)) or not isinstance(terms, Sequence):
        raise ConfigError("terms", f"must be a list of local objective terms, got {type(terms).__name__}")
    for i, term in enumerate(terms):
        reads = getattr(term, "reads", None)
        if isinstance(term, type) or not callable(term):
            raise ConfigError(f"terms[{i}]", f"must be a callable term instance (chillfl.extend.LossTerm), got {short_repr(term)}")
        if not (isinstance(reads, tuple) and all(isinstance(k, str) for k in reads)):
            raise ConfigError(f"terms[{i}]", f"{type(term).__name__} must declare reads: tuple[str, ...], the context keys it reads (() for none)")
    if terms and aggregator is None:
        raise ConfigError("terms", "are the local objective of an aggregator passed with them: add aggregator=... (chillfl.extend.FedAvg() for FedAvg)")
    part, where = aggregator, "aggregator"
    while part is not None:  # a wrapper's base too (aggregator.base.options), as _refuse_instance_hooks walks them
        _validate_options(part, where)
        part, where = (part.base, f"{where}.base") if isinstance(part, AroundAggregator) else (None, where)
    for field_name, obj in (*((f"terms[{i}]", term) for i, term in enumerate(terms)), ("policy", policy)):
        _validate_options(obj, field_name)
    return Plugged(aggregator, tuple(terms), policy)


def _refuse_instance_hooks(aggregator: object, policy: object) -> None:
    """A ConfigError on ``aggregator`` (a wrapper's base too) or ``policy`` whose hooks only the instance holds (set on it,
    forwarded through ``__getattr__``: a proxy). Why: the run reads a part by its class (its spec's limits, ``check`` and
    ``bind``, its declared capabilities), and a proxy's class declares nothing: ``Proxy(Scaffold(2))`` ran with Adam and
    ``Proxy(DnC())`` with seed None; a naive proxy was a RecursionError in ``copy.deepcopy``. A wrapper subclasses
    :class:`~chillfl.aggregation.base.AroundAggregator`, whose base the run checks."""
    part = aggregator
    while part is not None:
        if hooks := instance_only_hooks(part, AGGREGATOR_METHODS):
            raise ConfigError("aggregator", f"{type(part).__name__} holds {', '.join(hooks)} on the instance only (set on it or forwarded through __getattr__), "
                                            "which hides the rule it runs from its spec's checks: subclass chillfl.extend.AroundAggregator to wrap an "
                                            "aggregator (it forwards every hook and the run checks its base), or define the hooks on the class")
        part = part.base if isinstance(part, AroundAggregator) else None
    if policy is not None and (hooks := instance_only_hooks(policy, POLICY_METHODS)):
        raise ConfigError("policy", f"{type(policy).__name__} holds {', '.join(hooks)} on the instance only (set on it or forwarded through __getattr__), "
                                    "which hides the policy it runs from the run's checks of its class (its capabilities): subclass the policy it wraps, "
                                    "or define the hooks on the class")


def _validate_options(obj: object, field_name: str) -> None:
    """An instance's ``options`` dataclass checked by its declared bounds (:func:`~chillfl.options.check_built`) and its own
    ``validate`` (docs/extending.md's ``TrimmedMean.Options``), as a
    config naming the class checks it: a user class does not validate in its constructor as chillfl's own do, and
    ``TrimmedMean(Options(beta=0.7))`` ran into a diverged model instead of ``aggregator.options.beta: must be in [0, 0.5)``."""
    options = vars(obj).get("options") if hasattr(obj, "__dict__") else None
    if not dataclasses.is_dataclass(options) or isinstance(options, type):
        return
    section = f"{field_name}.options"
    check_built(options, section)  # its declared bounds (options.Scale), as parse_options checks a config's table
    validate = getattr(options, "validate", None)
    if callable(validate):
        try:
            inspect.signature(validate).bind(section)
        except (TypeError, ValueError):  # a validate() of another signature: a config naming the class would refuse it; an instance ran
            return
        try:
            validate(section)
        except ConfigError:
            raise
        except (ValueError, TypeError) as exc:  # raised as Python code does: one line on its table, as parse_options says it
            raise ConfigError(section, f"{type(options).__qualname__}.validate(): {exc}") from None


def _record_plugged(raw: dict[str, Any], plugged: Plugged) -> None:
    """Replace ``[algorithm]`` / ``[temperature]`` by the records of the parts passed from Python; a config that sets them too is refused.

    A table that is such a record (``name = "custom"``: ``result.config`` or the ``config.toml`` of a run on the same parts)
    is replaced when it equals the parts' record, as a saved ``[dataset]`` is, so the run can be repeated by passing the
    parts again with its config; a record of other parts is refused on the key that differs."""
    defaults = {"algorithm": ("name", "fedavg", "aggregator"), "temperature": ("policy", "none", "policy")}
    for part, record in plugged_records(plugged).items():
        key, default, keyword = defaults[part]
        table = raw.get(part)
        if isinstance(table, Mapping) and is_custom(table.get(key)):
            _refuse_other_record(table, record, part)
        elif table is not None and not (isinstance(table, Mapping) and is_default_table(part, table, default)):
            raise ConfigError(keyword, f"replaces [{part}], which the config sets too ({short_repr(table)}); pass one of the two")
        raw[part] = record


def _refuse_other_record(table: Mapping[str, Any], record: Mapping[str, Any], part: str) -> None:
    """A config's ``[part]`` table that records a part passed from Python differs from the one passed now: one line naming the key."""
    found = record_difference(plain(dict(table)), record, part)
    if found is not None:
        raise record_conflict(*found, part=part)


def _refuse_part_overrides(overrides: Mapping[str, Any], records: Mapping[str, Mapping[str, Any]]) -> None:
    """A keyword that sets a key of the record of a model, aggregator or policy passed from Python (``model.hidden=64``) to what
    the part does not hold: one line, as for the data's record; the record replaced the table and dropped it without a word."""
    for key, value in dotted_overrides(overrides).items():
        part, _, rest = str(key).partition(".")
        if part not in records or not rest:
            continue
        held: Any = records[part]
        for name in rest.split("."):
            held = held.get(name) if isinstance(held, Mapping) else None
        if plain(value) != held:
            raise record_conflict(str(key), held, value, part=part)


def _check_model(model: object) -> None:
    if model is not None and not isinstance(model, nn.Module):
        raise ConfigError("model", f"must be a torch.nn.Module, got {type(model).__name__}")
    if model is not None and any(t.is_meta for t in (*model.parameters(), *model.buffers())):  # no values to start from: torch's NotImplementedError when moved
        raise ConfigError("model", f"{type(model).__qualname__} has tensors on the meta device (no values): materialise it first (model.to_empty(device='cpu') and initialise it)")


def _prepare(model: nn.Module | None, data: UserData | None, config: ConfigLike, out_dir: str | Path | None,
             overrides: Mapping[str, Any], plugged: Plugged = Plugged(), swept: Sequence[str] = ()) -> tuple[RunConfig, ArrayDataset | None]:
    """The config :func:`run` and :func:`compare` run: overrides applied, the user's model, data and method parts recorded in it.
    ``swept``: the keys :func:`compare`'s grid and tuning grid set (:func:`chillfl.config.check_switches`)."""
    _check_model(model)
    if out_dir is not None:
        overrides = {**overrides, "out_dir": str(out_dir)}
    raw = _config_data(config, overrides)
    dataset = as_dataset(data, _input_dtype(model)) if data is not None else None
    if dataset is not None:  # the record replaces the table; its [dataset.augment] stays (crop/flip apply to any images)
        table = raw.get("dataset")
        augment = {"augment": table["augment"]} if isinstance(table, Mapping) and "augment" in table else {}
        record = dataset_record(dataset)
        _refuse_record_overrides(overrides, record)
        raw["dataset"] = {**record, **augment}
        distill = raw.get("distillation")
        if dataset.public_rows and isinstance(distill, dict) and distill.get("method") and not distill.get("public_size"):  # unset or 0 (a resolved table)
            distill["public_size"] = dataset.public_rows  # the public set passed with the data
        if dataset.test_groups is not None and dataset.train_groups is None:
            _natural_client_split(raw, overrides)
    if model is not None:
        table = raw.get("model")
        if isinstance(table, Mapping):  # the record replaces the table: its per-client architectures would be dropped
            refuse_with_user_model(table)
        raw["model"] = model_record(model)
        _refuse_part_overrides(overrides, {"model": raw["model"]})
    _record_plugged(raw, plugged)  # a keyword on [algorithm] / [temperature] makes the table the config's own: refused there
    return resolved(config_from_dict(raw, swept)), dataset


def _natural_client_split(raw: dict[str, Any], overrides: Mapping[str, Any]) -> None:
    """Data passed with ``client_test`` measure local accuracy on those sets (``eval.client_split = "natural"``).

    A saved or resolved config (``result.config``, ``make_config``, a run's ``config.toml``) carries the default
    ``"proportional"`` filled in, which cannot be told from a choice: it gives way to the data, as its ``[dataset]``
    table does, where keeping it ignored the client test sets without a word. ``"none"`` (no client evaluation) is
    never a default and stays, and so does a split a keyword asks for (``**{"eval.client_split": ...}``), as a
    ``compare`` grid over it does: those are choices."""
    if "eval.client_split" in dotted_overrides(overrides):
        return
    evaluation = raw.get("eval")
    if not (isinstance(evaluation, Mapping) and evaluation.get("client_split") == "none"):
        set_dotted(raw, "eval.client_split", "natural")


def _refuse_record_overrides(overrides: Mapping[str, Any], record: Mapping[str, Any]) -> None:
    """A keyword that sets a key of the user's data record (``dataset.num_classes=5``) to what the data do not hold is one
    line: the record replaces a config's ``[dataset]`` table (a saved run's config carries one), but an explicit keyword
    that contradicts the data was dropped without a word."""
    for key, value in dotted_overrides(overrides).items():
        name = str(key).removeprefix("dataset.")
        if str(key).startswith("dataset.") and name in record and value != record[name]:
            raise record_conflict(str(key), record[name], value)


@once_per_call
def make_config(config: ConfigLike = None, overrides: Mapping[str, Any] | None = None) -> RunConfig:
    """A validated :class:`RunConfig` from any of :func:`run`'s config forms plus ``key=value`` overrides.

    Overrides follow the command line's rules (:func:`chillfl.config.apply_overrides`):
    key by key into a part's table, except that naming another implementation
    (``"partition.name": "iid"``) starts that part afresh.

    Every part's options are validated as the run parses them (an unknown key is a
    ConfigError naming it, e.g. ``algorithm.muu``, with the allowed keys) and the result
    is resolved (:func:`chillfl.resolve.resolved`): its dict and TOML forms list every
    option of every part with its default, as the result folder's ``config.toml`` does.
    """
    return resolved(config_from_dict(_config_data(config, overrides)))


def _config_data(config: ConfigLike, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """:func:`make_config`'s dict before validation (the API adds its records of the user's parts to it)."""
    if overrides is not None and not isinstance(overrides, Mapping):  # a list of "key=value" strings: AttributeError 'items'
        raise ConfigError("overrides", f"expected a dict {{'section.option': value}}, got {type(overrides).__name__} {short_repr(overrides)}"
                                       " (the command line's 'key=value' strings: chillfl.config.parse_overrides turns them into one)")
    bad = [key for key in overrides or {} if not isinstance(key, str)]
    if bad:  # set_dotted splits every key: AttributeError 'startswith'
        raise ConfigError("overrides", f"a key must be a string (e.g. 'client.lr'), got {short_repr(bad[0])} ({type(bad[0]).__name__})")
    overrides = dotted_overrides(overrides or {})
    if config is None:
        data: dict[str, Any] = {}
    elif isinstance(config, RunConfig):
        data = _as_written(config)
    elif isinstance(config, (str, Path)):
        path = resolve_config(str(config))
        data = read_config_file(path)
        data.setdefault("name", name_from_path(path))  # as the command line names it: x.partial.toml runs as x_partial
    elif isinstance(config, Mapping):
        data = dict(config)
    else:
        raise ConfigError("config", f"must be a dict, a TOML path or a RunConfig, got {type(config).__name__}")
    check_depth(data)  # before deepcopy, which recurses
    data = plain(copy.deepcopy(data))  # NumPy scalars in a dict's lists and tables ([variants], [compare] seeds): Python values
    apply_overrides(data, {key: plain(value) for key, value in overrides.items()})
    return data



def _as_written(config: RunConfig) -> dict[str, Any]:
    """``config``'s dict as a TOML file would say it: a switched-off table (``[privacy]``, ``[attack]``) keeps only the
    options that differ from their defaults, without its switch.

    Why: ``to_dict`` writes every field, the switch too, and a switch written (even ``"none"``) is a choice to
    :func:`~chillfl.config.check_switches`, so ``RunConfig(privacy=PrivacyConfig(noise_multiplier=1.1))`` trained
    with no noise and reported no epsilon. Now it is refused as the same table in a file is.
    """
    data, defaults = config.to_dict(), RunConfig().to_dict()
    for section, cls in SWITCHED.items():
        table, default = data.get(section), defaults[section]
        if isinstance(table, dict) and table.get(cls.SWITCH) == default[cls.SWITCH]:
            data[section] = {k: v for k, v in table.items() if k != cls.SWITCH and (k not in default or v != default[k])}
    return data


def _input_dtype(model: nn.Module | None) -> torch.dtype:
    """Floating inputs are cast to the model's parameter dtype (float32 for registered models)."""
    if model is not None:
        for p in model.parameters():
            if p.is_floating_point():
                return p.dtype
    return torch.float32


def as_dataset(data: UserData, dtype: torch.dtype = torch.float32) -> ArrayDataset:
    """Check a user's data and hold it as an :class:`ArrayDataset` on the CPU (floating inputs as ``dtype``).

    Errors name ``data.<field>``: shapes, lengths, label dtype and range, ``num_classes``.
    """
    items = None
    if isinstance(data, DatasetData):
        items = ItemReader(data.train) if data.redraw == "round" else None
        data = _from_datasets(data)
    if not isinstance(data, (TensorData, ArrayDataset)):
        raise ConfigError("data", f"must be chillfl.TensorData, chillfl.DatasetData or chillfl.data.ArrayDataset, got {type(data).__name__}")
    x_train, y_train, x_test, y_test, classes = checked_arrays(data.x_train, data.y_train, data.x_test, data.y_test, data.num_classes, dtype)
    name = data.name
    if not isinstance(name, str):  # str(3) was saved as dataset.source = "3", a label the user never wrote
        raise ConfigError("data.name", f"must be a string (it labels the data in the saved config, as dataset.source), got {type(name).__name__} {short_repr(name)}")
    if isinstance(data, ArrayDataset):  # its natural groups index the rows: a stray one is an IndexError mid-run, a negative one another row
        train_groups = checked_groups(data.train_groups, len(y_train), "data.train_groups", "train")
        test_groups = checked_groups(data.test_groups, len(y_test), "data.test_groups")
        return ArrayDataset(name, x_train, y_train, x_test, y_test, classes, train_groups, test_groups)
    test_groups = checked_groups(data.client_test, len(y_test), "data.client_test")
    public_rows = 0
    if data.public is not None:
        px, py = _public(data.public, x_train, classes, dtype)
        x_train, y_train, public_rows = torch.cat([x_train, px]), torch.cat([y_train, py]), len(px)
    return ArrayDataset(name, x_train, y_train, x_test, y_test, classes, None, test_groups, public_rows=public_rows, train_items=items)


def _public(public: Any, x_train: torch.Tensor, classes: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """A public set as (inputs, labels) tensors; labels -1 where none were given."""
    if isinstance(public, torch.utils.data.Dataset):
        x, y = materialize(public, "data.public", "public")
    elif isinstance(public, tuple) and len(public) == 2:
        x, y = as_tensor(public[0], "data.public"), as_tensor(public[1], "data.public")
    else:
        x, y = as_tensor(public, "data.public"), None
    if x.shape[1:] != x_train.shape[1:] or len(x) == 0:
        raise ConfigError("data.public", f"samples must have the training inputs' shape {tuple(x_train.shape[1:])}, got {tuple(x.shape)}")
    if x.is_floating_point():
        if not bool(torch.isfinite(x).all()):
            raise ConfigError("data.public", "contains NaN or infinite values")
        x = x.to(dtype)
    if y is None:
        return x, torch.full((len(x),), -1, dtype=torch.int64)
    if y.dim() != 1 or len(y) != len(x) or y.is_floating_point() or (len(y) and (int(y.min()) < 0 or int(y.max()) >= classes)):
        raise ConfigError("data.public", f"labels must be {len(x)} integer classes in 0..{classes - 1}")
    return x, y.to(torch.int64)


def _from_datasets(data: DatasetData) -> TensorData:
    """The datasets' first read (seeded per item, :mod:`chillfl.data.items`) as tensors."""
    if data.redraw not in REDRAWS:
        raise ConfigError("data.redraw", f"must be one of {', '.join(map(repr, REDRAWS))}, got {short_repr(data.redraw)}")
    x_train, y_train = materialize(data.train, "data.train", "train")
    x_test, y_test = materialize(data.test, "data.test", "test")
    return TensorData(x_train, y_train, x_test, y_test, data.num_classes, data.name, data.public, data.client_test)


def _trained_copy(template: nn.Module, state: Mapping[str, torch.Tensor] | None) -> nn.Module | None:
    """A deep copy of ``template`` holding ``state``, in eval mode as :meth:`RunView.global_model` and :func:`load_run` give it
    (a caller's module kept its training mode: dropout made ``result.model(x)`` random); None without a state."""
    return None if state is None else model_with_state(template, state).eval()


# ---------------------------------------------------------------- callbacks and registries


class _OnRound(Protocol):
    def on_round(self, record: dict[str, Any]) -> Any: ...


class _OnRoundWithView(Protocol):
    def on_round(self, record: dict[str, Any], run: RunView) -> Any: ...


class _OnEnd(Protocol):
    def on_end(self, output: RunOutput) -> Any: ...


CallbackLike = Union[
    Callback, _OnRound, _OnRoundWithView, _OnEnd, Callable[[dict[str, Any]], Any], Callable[[dict[str, Any], RunView], Any],
]
"""What ``callbacks=[...]`` takes, as its docstring says and :func:`_as_callback` accepts: an object with
``on_round(record[, run])`` and/or ``on_end(output)``, or a function of ``(record)`` or ``(record, run)``. Spelled out
so that a user's mypy accepts every documented form (``Callback`` alone needs both methods and ``on_round(record)``)."""


class _Hook:
    """A user callback: its ``on_round`` as a round hook (given the :class:`RunView` when it takes two
    arguments), its ``on_end`` as the runner's end callback; a missing one does nothing."""

    def __init__(self, on_round: Callable[..., Any] | None, on_end: Callable[[Any], Any] | None, with_view: bool) -> None:
        self._round, self._end, self._with_view = on_round, on_end, with_view

    def hook(self, record: Mapping[str, Any], view: RunView) -> None:
        if self._round is None:
            return
        if self._with_view:
            self._round(record, view)
        else:
            self._round(record)

    def on_round(self, record: Mapping[str, Any]) -> None:
        """The work is in :meth:`hook` (it has the view)."""

    def on_end(self, output: RunOutput) -> None:
        if self._end is not None:
            self._end(_own_copy(output))


def _own_copy(output: RunOutput) -> RunOutput:
    """What a user's ``on_end`` is given: its own records, summary and global model, as ``on_round`` gets its own record
    (one that edited them, accuracy in %, edited the returned Result, no longer what summary.json says). The clients'
    personal models are the run's own tensors, not copied: copying every client's model for each callback cost 1.2 GB
    at 20 clients of a CNN (docs/python-api.md says not to edit them in place)."""
    model = None if output.model_state is None else {k: v.clone() for k, v in output.model_state.items()}
    return dataclasses.replace(output, records=copy.deepcopy(output.records), summary=copy.deepcopy(output.summary), model_state=model,
                               client_states=dict(output.client_states))


def _takes_view(fn: Callable[..., Any], field: str) -> bool:
    """Whether ``fn`` takes ``(record, run)`` rather than ``(record)``; decided once, from its signature."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: called with the record alone
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.VAR_POSITIONAL for p in params) or len(positional) >= 2:
        return True
    if not positional:
        raise ConfigError(field, "on_round must take the round's record (and optionally the run view): on_round(record[, run])")
    return False


def _as_callbacks(callbacks: Any) -> list[_Hook]:
    """``callbacks`` as hooks; one callback passed bare (``callbacks=fn``, a notebook's slip) is refused, not iterated."""
    if isinstance(callbacks, (str, bytes)) or not isinstance(callbacks, Iterable) or any(hasattr(callbacks, m) for m in ("on_round", "on_end")):
        raise ConfigError("callbacks", f"must be a list of callbacks (callbacks=[...]), got {type(callbacks).__name__}")
    return [_as_callback(cb, i) for i, cb in enumerate(callbacks)]


def _as_callback(cb: Any, index: int) -> _Hook:
    field = f"callbacks[{index}]"
    on_round, on_end = getattr(cb, "on_round", None), getattr(cb, "on_end", None)
    if on_round is None and on_end is None:
        if not callable(cb):
            raise ConfigError(field, f"needs on_round(record[, run]) / on_end(output), or must be a function; got {type(cb).__name__}")
        on_round = cb
    return _Hook(on_round, on_end, on_round is not None and _takes_view(on_round, field))


@once_per_call
def available() -> dict[str, list[str]]:
    """Every registered name a config may use, by part (what ``chillfl list`` prints)."""
    return {
        "algorithms": algorithm_names(),
        "datasets": dataset_names(),
        "distillation_methods": method_names(),
        "models": model_names(),
        "partitioners": partitioner_names(),
        "prototype_methods": prototype_method_names(),
        "temperature_policies": policy_names(),
        "loss_terms": term_names(),
        "attacks": kind_names(),
        "privacy_mechanisms": mechanism_names(),
    }


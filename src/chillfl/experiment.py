"""Build every part of an experiment from a :class:`~chillfl.config.RunConfig`: data, model, objective, protocol, executor.

All user errors surface here, before any result folder is created.
"""

from __future__ import annotations

import dataclasses
import math
import copy
import logging
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence, TypeVar

import torch
from torch import nn

from chillfl.aggregation.base import (Aggregator, AroundAggregator, ClientHalf, Personalising, PlannedStage, PlansStages, SkipsOwnTraining, half_parts,
                                    holds_personal_model, innermost, measured_after_average, with_needed_terms, with_run_model)
from chillfl.aggregation.registry import (AGGREGATOR_CALLS, HALF_CALLS, INSTANCE_OPTIONS, BuildContext, Wrapped, algorithm_names, algorithm_options, algorithm_spec,
                                         bind_instance, binds_to_run, built_by, check_algorithm,
                                         check_declarations, check_instance, check_named_classes, check_plain_sgd, declared_capabilities, instance_capabilities, largest_tolerated, make_aggregator,
                                         wrapped)
from chillfl.privacy.build import exempted, private_aggregator, private_steps, with_privacy
from chillfl.attacks.build import attacked_aggregator, attacker_ids, check_attack, forges_models, forges_rows, poisoned_data, skipping_local_dp, with_attack
from chillfl.config import RayConfig, RunConfig
from chillfl.data import ArrayDataset, FederatedData, build_federated_data, dataset_names, load_dataset
from chillfl.data.augment import AUGMENT_KEY, Augment, check_shape, parse_augment, split_augment
from chillfl.data.datasets import DATASETS, dataset_options, dataset_size, dataset_spec
from chillfl.data.loaders import data_absent
from chillfl.data.partition import UNUSED_NOTE_SHARE, partitioner_options, partitioner_spec
from chillfl.data.partition_file import FROM_FILE
from chillfl.executors.compiled import check_toolchain
from chillfl.global_rng import forked_rng
from chillfl.executors.parallel import ExecutorSpec, make_parallel_executor, unsendable
from chillfl.engine.loop import poisson_rate_note
from chillfl.engine.protocol import Executor, ServerProtocol
from chillfl.executors.pools import WorkerPools
from chillfl.executors.ray_executor import RayExecutor, import_ray
from chillfl.errors import ConfigError, Unreachable, choice_error
from chillfl.environment import usable_cores
from chillfl.once import once_per_call, warn_once
from chillfl.options import short_repr
from chillfl.numeric import is_finite_real, is_whole
from chillfl.models import build_model, model_names
from chillfl.models.assign import arch_section, base_table, plan_models, refuse_heterogeneous, refuse_with_user_model
from chillfl.models.inputs import check_index_inputs, refuse_noise, refuse_real_inputs
from chillfl.models.parts import check_declared_head, head_name, refuse_nonlinear_head
from chillfl.models.projection import PROJECTION_OPTION, check_projection_dim
from chillfl.models.registry import MODELS, caller_dtype, check_model_shape, float32_default, model_options
from chillfl.protocols.common import Evaluation, empty_splits_note
from chillfl.protocols.softlabels.build import only_checking
from chillfl.protocols.softlabels.public import check_public_dataset, one_sample_failure
from chillfl.protocols.parts import ClientModels, Experiment, build_architecture, build_client_models  # noqa: F401  (re-exported: the built parts of a run)
from chillfl.protocols.registry import protocol_of
from chillfl.plugins import CUSTOM, check_calls, has_methods, instance_only_hooks, is_custom
from chillfl.seeds import derive_seed
from chillfl.temperature import check_policy, make_policy, policy_names
from chillfl.temperature.registry import check_built_policy, steers_on_test_rows
from chillfl.temperature.base import TemperaturePolicy
from chillfl.training.batched_conv import resolve_batched_conv
from chillfl.training.gradient_ablation import BASE_LOSSES
from chillfl.training.local import LocalSpec, half_weights_note, model_state, parameter_dtypes, persistent_buffers, reads_representation, resolve_compute
from chillfl.training.schedule import StageSteps
from chillfl.training.objective import Term, temperature_cross_entropy
from chillfl.training.terms import check_term, configured_terms

log = logging.getLogger(__name__)


def resolve_device(name: str) -> torch.device:
    """``config.device`` -> a device that exists here; ``auto``: the first CUDA GPU, else the CPU. ``mps`` is a known name
    but refused: Apple's Metal backend has no float64, which chillfl's loss and metric sums are kept in."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError("device", f"{name!r} needs a CUDA GPU, and torch sees none here (torch {torch.__version__}); use 'cpu' or 'auto'")
        index = int(name.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise ConfigError("device", f"{name!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if name == "mps":  # refused before a client trains: the float64 sums (losses, metrics) would fail there, deep in a traceback
        raise ConfigError("device", "'mps' is not supported yet: chillfl accumulates losses and metrics in float64, which Apple's Metal "
                                    "backend lacks; use 'cpu'")
    return torch.device(name)


def base_losses() -> dict[str, Any]:
    return {"standard": temperature_cross_entropy, **BASE_LOSSES}


@dataclass(frozen=True)
class FromPython:
    """The Python functions a folder on the user's own parts was made and is resumed with, and what it holds: the line
    asking for a part again names the ones the user called (a comparison is not resumed with :func:`chillfl.resume`)."""

    made: str = "chillfl.run"
    resumed: str = "chillfl.resume"
    holds: str = "run"


RUN_FROM_PYTHON = FromPython()
COMPARISON_FROM_PYTHON = FromPython("chillfl.compare", "chillfl.resume_compare", "comparison")


def _not_from_file(field: str, what: str, keyword: str, allowed: Sequence[str], entry: FromPython = RUN_FROM_PYTHON) -> ConfigError:
    part = field.partition(".")[0]
    return ConfigError(
        field,
        f"{CUSTOM!r} records a run on the user's own {what}, passed from Python with {entry.made}({keyword}=...); "
        f"a config file cannot rebuild it: rerun it from Python with the same {keyword} (resume it with {entry.resumed}(FOLDER, {keyword}=...)), "
        f"or replace the [{part}] table with a registered one: {', '.join(sorted(allowed))}",
    )


def check_rebuildable(config: RunConfig, *, has_model: bool = False, has_data: bool = False, entry: FromPython = RUN_FROM_PYTHON) -> None:
    """Refuse a config whose model or data came from Python (``custom``) when none is given again; the model first."""
    if not has_model and is_custom(config.model.get("name")):
        raise _not_from_file("model.name", "nn.Module", "model", model_names(), entry)
    if not has_data and is_custom(config.dataset.get("name")):
        raise _not_from_file("dataset.name", "tensors", "data", dataset_names(), entry)


def dataset_record(dataset: ArrayDataset) -> dict[str, Any]:
    """The ``[dataset]`` table a run on user data saves: its label and sizes."""
    record = {
        "name": CUSTOM,
        "source": dataset.name,
        "num_classes": dataset.num_classes,
        "input_shape": list(dataset.input_shape),
        "train_size": len(dataset.y_train) - dataset.public_rows,
        "test_size": len(dataset.y_test),
    }
    if dataset.public_rows:
        record["public_size"] = dataset.public_rows
    if dataset.test_groups is not None and dataset.train_groups is None:
        record["client_test"] = True
    if dataset.train_items is not None:
        record["redraw"] = "round"  # a Dataset's training items read anew every round a client is sampled
    return record


def check_data_record(config: RunConfig, dataset: ArrayDataset) -> None:
    """A run on the user's data (``dataset.name = "custom"``) records them as they are: every key of the record
    (:func:`dataset_record`), and no other but ``augment``, equals the data's own.

    A comparison's grid, tune or variants over ``dataset.num_classes``, ``train_size`` or ``source`` trained
    every variant on the same tensors and wrote another record for each; one line naming the key instead.
    Here, not in the sweep code, because every run (a comparison's too) is built here, after the variant's
    overrides and with the data.
    """
    if not is_custom(config.dataset.get("name")):
        return
    record = dataset_record(dataset)
    for key in sorted(set(record) | set(config.dataset) - {AUGMENT_KEY}):
        got = config.dataset.get(key)
        if got != record.get(key):
            raise record_conflict(f"dataset.{key}", record.get(key), got)


def record_conflict(field: str, held: Any, got: Any, part: str = "dataset") -> ConfigError:
    """A key of the record of a part passed from Python (the data; ``part``: the ``model``, ``algorithm`` or ``temperature``
    instance) set to what the part does not hold (``held``): the one line for it, wherever it is found."""
    what, other = RECORDED_PARTS.get(part, RECORDED_PARTS["dataset"])
    holds = "which has no such key" if held is None else f"{short_repr(held)} for it"
    return ConfigError(field, f"records the {what} passed from Python ({holds}), so a run cannot set it to {short_repr(got)}: "
                              f"vary settings of the run, not the record of its {what.split()[-1]} ({other})")


RECORDED_PARTS = {
    "dataset": ("data", "other data: another call with them"),
    "model": ("nn.Module", "another model: another call with it"),
    "algorithm": ("aggregator", "other options: another call with an instance built with them"),
    "temperature": ("temperature policy", "other options: another call with an instance built with them"),
}
"""What a part passed from Python is called in :func:`record_conflict`, and how to run another one."""


def record_difference(table: Any, record: Any, field: str) -> tuple[str, Any, Any] | None:
    """The first key (dotted from ``field``) where a config's table differs from a part's record, with the record's and
    the table's values; None where they are equal. Nested tables (``options``) are followed to the key that differs. A
    key the table leaves out is the record's (``{"name": "custom"}`` beside a module, an older saved form): only what the
    table sets can claim what did not run."""
    if isinstance(table, dict) and isinstance(record, dict):
        for key in sorted(table):
            found = record_difference(table.get(key), record.get(key), f"{field}.{key}")
            if found is not None:
                return found
        return None
    same = table == record or (isinstance(table, float) and isinstance(record, float) and math.isnan(table) and math.isnan(record))
    return None if same else (field, record, table)  # a NaN option is its record's NaN, though NaN != NaN


def model_record(model: nn.Module) -> dict[str, Any]:
    """The ``[model]`` table a run on ``model`` saves: not rebuildable from a file, but says what ran."""
    cls = type(model)
    if any(isinstance(p, nn.parameter.UninitializedParameter) for p in model.parameters()):  # torch's ValueError from numel()
        raise ConfigError("model", f"{cls.__qualname__} has lazy parameters not yet shaped (nn.LazyLinear, ...): run one forward "
                                   "pass on a batch of your data before handing it over, so that every client starts from the same weights")
    dtype = parameter_dtypes(model)
    return {
        "name": CUSTOM,
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        **({"dtype": dtype} if dtype is not None else {}),  # a float64 run resumed on a float32 module would round its state
    }


def check_part_records(config: RunConfig, model_rec: dict[str, Any] | None, plugged: "Plugged | None") -> None:
    """A run on a model, aggregator or policy passed from Python records it (``name = "custom"``: :func:`plugged_records`,
    :func:`chillfl.api.model_record`), and its config's table equals that record, key for key.

    Why: a comparison's grid, tune or variants over ``algorithm.options.beta``, ``algorithm.class``,
    ``temperature.options.end`` or ``model.hidden`` ran the same instance or module in every variant and wrote another
    record for each (identical rows labelled by settings that never ran); one line naming the key instead, as
    :func:`check_data_record` says for ``[dataset]``. A folder an older chillfl saved is checked by resume's own rules first.
    """
    records = dict(plugged_records(plugged)) if plugged else {}
    if model_rec is not None:
        records["model"] = model_rec
    tables = {"model": config.model, "algorithm": config.algorithm, "temperature": config.temperature}
    for part, record in records.items():
        table = tables[part]
        if not is_custom(table.get("policy" if part == "temperature" else "name")):
            continue  # a registered table where a part was passed: check_plugged / check_rebuildable say it
        if part == "model":
            refuse_with_user_model(table)  # per-client architectures beside the module: that line, not the first key that differs
        found = record_difference(_older_form(table, record), record, part)
        if found is not None:
            raise record_conflict(*found, part=part)


def _older_form(table: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """``table`` with each term an older chillfl saved by its class path alone read as the record's entry for that class,
    which :func:`chillfl.resume` accepts. Keys an older table leaves out (``options``, ``dtype``, ``bound``) need nothing
    here: :func:`record_difference` compares only the keys a table sets."""
    out = dict(table)
    terms, kept = table.get("terms"), record.get("terms")
    if isinstance(terms, list) and isinstance(kept, list) and len(terms) == len(kept):
        out["terms"] = [k if isinstance(t, str) and isinstance(k, dict) and k.get("class") == t else t for t, k in zip(terms, kept)]
    return out


def check_plugged(config: RunConfig, plugged: "Plugged | None", entry: FromPython = RUN_FROM_PYTHON) -> None:
    """Refuse a config whose aggregator or temperature policy came from Python (``custom``) when none is given again."""
    plugged = plugged or Plugged()
    if plugged.aggregator is None and is_custom(config.algorithm.get("name")):
        raise _not_from_file("algorithm.name", "aggregator", "aggregator", algorithm_names(), entry)
    if plugged.policy is None and is_custom(config.temperature.get("policy")):
        raise _not_from_file("temperature.policy", "temperature policy", "policy", policy_names(), entry)


@dataclass(frozen=True)
class Plugged:
    """A user's own method parts passed as instances from Python (:func:`chillfl.run`), not named in the config.

    ``aggregator`` replaces ``[algorithm]`` and ``terms`` are its local objective terms; ``policy``
    replaces ``[temperature]``. Each run works on deep copies, so the caller's objects are never
    mutated and two runs (a comparison's variants and seeds) never share state. The config records
    them as ``name = "custom"`` with their classes (:func:`plugged_records`).
    """

    aggregator: Aggregator | None = None
    terms: tuple[Term, ...] = ()
    policy: TemperaturePolicy | None = None

    def __bool__(self) -> bool:
        return self.aggregator is not None or self.policy is not None or bool(self.terms)


def _class_path(obj: object) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


BOUND = "bound"
"""The ``[algorithm]`` key of a run whose aggregator from Python was bound to the run (:func:`plugged_records`)."""


def plugged_records(plugged: Plugged) -> dict[str, dict[str, Any]]:
    """The ``[algorithm]`` / ``[temperature]`` tables a run with these parts saves: not rebuildable, but say what ran
    (with each instance's ``options`` dataclass, when it keeps one: :func:`options_record`). Its ``terms`` are every term
    the run trains with, the aggregator's own included: a folder saved before an aggregator's needed terms were added
    (``Scaffold(3)`` ran FedAvg's steps) records fewer, and its resume is refused rather than change method midway.
    ``bound = true`` where the run binds the instance to itself (:func:`~chillfl.aggregation.registry.binds_to_run`: its
    spec, or a wrapped base's, takes momentum, rounds or sizes from the run): a folder an older chillfl saved ran it
    unbound (``Scaffold(3)`` at momentum 0 under ``client.momentum = 0.9``) and records the same options, so without the
    key its resume would change the method midway (:func:`chillfl.resume` refuses it)."""
    out: dict[str, dict[str, Any]] = {}
    if plugged.aggregator is not None:  # every term that runs: the caller's and those the aggregator needs (with_needed_terms)
        terms = with_needed_terms(plugged.aggregator, plugged.terms)
        out["algorithm"] = {"name": CUSTOM, "class": _class_path(plugged.aggregator),
                            **({BOUND: True} if binds_to_run(plugged.aggregator) else {}),
                            "terms": [term_record(t, f"algorithm.terms[{i}]") for i, t in enumerate(terms)],
                            **options_record(plugged.aggregator, "algorithm")}
    if plugged.policy is not None:
        out["temperature"] = {"policy": CUSTOM, "class": _class_path(plugged.policy), **options_record(plugged.policy, "temperature")}
    return out


RECORDABLE = (bool, int, float, str)
"""Option values a saved config writes as they are (TOML has no null: an unset option is left out; lists and tables of them too)."""


def term_record(term: object, part: str) -> str | dict[str, Any]:
    """A loss term passed from Python as ``[algorithm] terms`` records it: its class path, with its ``options`` dataclass
    when it keeps one (``{ class = "pkg.mod.Term", options = { lam = 0.3 } }``), as the built-in terms are recorded with theirs."""
    options = options_record(term, part)
    return {"class": _class_path(term), **options} if options else _class_path(term)


def options_record(obj: object, part: str) -> dict[str, Any]:
    """``{"options": {...}}``: every field of an instance's ``options`` dataclass (the pattern of chillfl's own methods and
    of docs/extending.md), for ``[part.options]``; ``{}`` when it keeps none (nothing to record).

    Why: a run on an instance records its class; without its options (``beta = 0.3``) the saved config would not
    say what ran, and :func:`chillfl.resume` could not tell another instance of the same class from it. Nested
    dataclasses and mappings are tables, tuples lists, and an unset (None) option is left out, as the resolved config
    leaves it out; a value TOML cannot hold (a tensor, a function) is one ConfigError naming ``part.options.<field>``,
    rather than a record that silently drops the whole table.
    """
    options = vars(obj).get("options") if hasattr(obj, "__dict__") else None
    if options is None or not dataclasses.is_dataclass(options) or isinstance(options, type):
        return {}
    table = _recordable(dataclasses.asdict(options), f"{part}.options", type(obj).__qualname__)
    return {"options": table} if table else {}


def _recordable(value: Any, field: str, owner: str) -> Any:
    """``value`` as TOML holds it (see :func:`options_record`); ``field`` names it in the error."""
    if isinstance(value, RECORDABLE):
        return value
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _recordable(v, f"{field}.{k}", owner) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)) and all(v is not None for v in value):
        return [_recordable(v, f"{field}[{i}]", owner) for i, v in enumerate(value)]
    raise ConfigError(field, f"{owner}'s option {short_repr(value)} ({type(value).__name__}) cannot be recorded in the run's config.toml; "
                             "an options dataclass holds numbers, flags, names, and lists and tables of them")


def build_data(config: RunConfig, dataset: ArrayDataset | None = None) -> FederatedData:
    name, options = RunConfig.component(config.dataset)
    if dataset is None:
        check_rebuildable(config, has_model=True)
        dataset = load_dataset(name, options, data_dir=config.data_dir)
    elif parse_augment(options.get(AUGMENT_KEY)).normalize != "dataset":  # it acts when chillfl loads the data
        raise ConfigError(f"dataset.{AUGMENT_KEY}.normalize", "applies to datasets chillfl loads; normalise tensors passed from Python yourself")
    pname, poptions = RunConfig.component(config.partition)
    split = config.eval.client_split if config.eval.clients != "none" else "none"
    setup = config.distillation_setup
    public_size = setup.common.public_size if setup is not None and not setup.common.public_dataset else 0  # else the pool comes from another dataset
    return build_federated_data(
        dataset,
        num_clients=config.federation.num_clients,
        partitioner=pname,
        partition_options=poptions,
        seed=config.seed,
        client_eval=split,
        client_eval_size=config.eval.client_split_size,
        public_size=public_size,
        validation=config.eval.validation,
    )


def build_initial_model(config: RunConfig, input_shape: Sequence[int], num_classes: int) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """The model template and its seeded initial state (the global RNG is left untouched)."""
    name, options = RunConfig.component(base_table(config.model))
    check_rebuildable(config, has_data=True)
    model = build_model(name, tuple(input_shape), num_classes, options, seed=derive_seed(config.seed, "init"))
    return model, model_state(model)


def check_model_fits(model: nn.Module, x: torch.Tensor, classes: int, field: str = "model") -> None:
    """One forward pass of two training inputs ``x`` through (a copy of) the model: it must give ``[2, classes]`` logits,
    in eval mode, and in training mode logits that depend on its trainable parameters, leaving its ``persistent=False``
    buffers as they were (the run's state holds none of them). ``field``: what a mismatch names
    (``model`` for a module passed from Python, ``model.name`` for a plugin's named in the config).

    Catches a mismatched model before the result folder exists, where a
    failure in round 1 would leave a half-written run behind.
    """
    model = copy.deepcopy(model)
    if not any(p.requires_grad for p in model.parameters()):
        raise ConfigError(field, f"{type(model).__qualname__} has no trainable parameters")
    empty = next((name for name, p in model.named_parameters() if p.requires_grad and p.numel() == 0), None)
    if empty is not None:  # nn.Linear(8, 0): PyTorch trains it, the local SGD's per-row factors crashed reshaping it in round 1
        raise ConfigError(field, f"{type(model).__qualname__}'s trainable parameter {empty!r} has no elements (a zero-width layer); "
                                 "give every layer at least one unit, or freeze a placeholder (requires_grad_(False))")
    model.eval()
    try:
        with torch.no_grad(), forked_rng():
            out = model(x)
    except Exception as exc:  # noqa: BLE001 - the user's forward: any error is a mismatch with the data
        raise ConfigError(field, f"{type(model).__qualname__} fails on a batch of inputs of shape {tuple(x.shape)}: {type(exc).__name__}: {exc}") from None
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != len(x):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ConfigError(field, f"must return logits of shape [batch, num_classes] = [{len(x)}, {classes}], got {shape}")
    if out.shape[1] != classes:
        if field == "model":  # a module passed from Python: its data (TensorData) carry the num_classes the caller set
            raise ConfigError("data.num_classes", f"is {classes}, but the model outputs {out.shape[1]} logits per sample")
        # a model named in the config: its classes come from [dataset], which has no num_classes key to blame
        raise ConfigError(field, f"outputs {out.shape[1]} logits per sample; the data has {classes} classes")
    model.train()  # as the clients run it: a forward that fails only in training, or logits cut off from the weights, failed in round 1
    constants = non_persistent_buffers(model)  # after the eval forward: a cache it filled once is the module's constant
    try:
        with torch.enable_grad(), forked_rng():  # enable_grad: whatever the caller's grad mode, as training runs
            out = model(x)
    except Exception as exc:  # noqa: BLE001 - the user's forward, as above
        raise ConfigError(field, f"{type(model).__qualname__} fails in training mode on a batch of inputs of shape {tuple(x.shape)}: {type(exc).__name__}: {exc}") from None
    if not (isinstance(out, torch.Tensor) and out.requires_grad):
        raise ConfigError(field, f"{type(model).__qualname__}'s logits in training mode do not depend on its trainable parameters (detached, or under torch.no_grad()): nothing can train")
    after = non_persistent_buffers(model)
    changed = [name for name in sorted(constants.keys() | after.keys()) if name not in constants or name not in after or not same_tensor(constants[name], after[name])]
    if changed:
        raise ConfigError(field, f"{type(model).__qualname__}'s forward in training mode changes its persistent=False buffer {changed[0]!r}: register it persistent=True "
                                 "(the run keeps only persistent buffers as state: one left out would differ between executors and be lost on resume)")


def non_persistent_buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    """Copies of the model's ``persistent=False`` buffers by name: the module's own, not in the run's state
    (:func:`~chillfl.training.local.model_state`), so a forward that changes one runs differently on each executor's copy."""
    kept = {n for n, _ in persistent_buffers(model)}
    return {n: b.detach().clone() for n, b in model.named_buffers() if n not in kept}


def same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype and values (NaN equal to NaN: a buffer holding NaN did not change)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a, b) or (a.is_floating_point() and bool(((a == b) | (a.isnan() & b.isnan())).all()))


def build_algorithm(config: RunConfig, model: nn.Module, plugged: Plugged | None = None,
                    client_sizes: Sequence[int] | None = None) -> tuple[Aggregator, list[Term]]:
    """The configured aggregator and its terms, or (a copy of) the one passed from Python.

    A named algorithm is checked against the run by what its spec declares (:func:`check_algorithm`:
    its plain-SGD limit, its own ``check``, a wrapper's base's), never by its name; an instance passed from
    Python by its class's own ``capabilities`` (its linear-head need and plain-SGD limit), as that class named in a config,
    and by the spec that builds it (:func:`~chillfl.aggregation.registry.check_instance`: ``Scaffold(3)``'s plain-SGD limit,
    Krum's ``f`` against the clients a round, a wrapper's base's), as is a class a config names by import path once built
    (:func:`~chillfl.aggregation.registry.check_named_classes`); its terms are the caller's, then those it needs that the caller did not pass
    (:func:`~chillfl.aggregation.base.with_needed_terms`: ``Scaffold(3)`` alone runs SCAFFOLD, not FedAvg).
    ``client_sizes``: each client's training rows (:attr:`~chillfl.aggregation.registry.BuildContext.client_sizes`).
    """
    try:
        return _build_algorithm(config, model, plugged, client_sizes)
    except ConfigError as exc:  # a method's need of the model (a head, batch norm) refused on the name a caller's module has not
        if exc.field == "model.name" and is_custom(config.model.get("name")):
            raise ConfigError("model", exc.message) from None
        raise


def _build_algorithm(config: RunConfig, model: nn.Module, plugged: Plugged | None,
                     client_sizes: Sequence[int] | None) -> tuple[Aggregator, list[Term]]:
    """:func:`build_algorithm`'s body."""
    name, options = RunConfig.component(config.algorithm)
    if plugged is not None and plugged.aggregator is not None:
        if not is_custom(name):  # e.g. a comparison's variant naming a built-in: the instance would be silently dropped
            raise ConfigError("algorithm.name", f"the run was given an aggregator from Python, which replaces [algorithm]; got {name!r} here too: vary other keys")
        method = type(plugged.aggregator).__name__
        declared = declared_capabilities(type(plugged.aggregator), method, "aggregator")  # read as a class named in the config is
        refuse_nonlinear_head(model, declared.linear_head, method)
        check_plain_sgd(declared, config, method)
        own, terms = plugged_copies(plugged.aggregator, plugged.terms, model)
        aggregator = with_run_model(own, model)  # its parameters, as a builder passes them
        bind_instance(aggregator, run_context(config, model, client_sizes, INSTANCE_OPTIONS))  # what its builder takes from the run (momentum, rounds)
        check_instance(aggregator, config, model)  # its spec's limits and check (a wrapper's base's too), as a config naming the method is checked
        by_spec = instance_capabilities(aggregator)  # what its spec declares (a personal model), a wrapper's completed by its base's
        combined = declared if by_spec is None else by_spec
        refuse_nonlinear_head(model, combined.linear_head, method)  # a user's wrapper around a base with limits keeps them (it ran with Adam)
        check_plain_sgd(combined, config, method)
        check_declarations(combined, aggregator, method, "aggregator")
        built = aggregator, with_needed_terms(aggregator, terms)  # its own terms, as its spec's builder returns them
    else:
        built = make_aggregator(name, options, num_clients=config.federation.num_clients, model=model, seed=config.seed, client_momentum=config.client.momentum,
                               rounds=config.federation.rounds, clients_per_round=config.federation.sample_size(), client_sizes=client_sizes,
                               objective_terms=configured_terms(config.objective))
        check_algorithm(name, options, config)
        check_named_classes(name, options, built[0], config, model)  # a class named by path: held to the spec that makes it, as an instance is
    field = "aggregator" if plugged is not None and plugged.aggregator is not None else "algorithm.name"
    part: object = built[0]
    while True:  # a hook with the wrong parameters: one line now, not a TypeError at round 1; a wrapper's base is called the same way
        check_calls(part, AGGREGATOR_CALLS, field)
        if not isinstance(part, AroundAggregator):
            break
        part = part.base
    check_client_half(built[0], field)
    warn_no_client_models(config, built[0])
    return built


def plugged_copies(aggregator: Aggregator, terms: Sequence[Term], model: nn.Module) -> tuple[Aggregator, list[Term]]:
    """Copies of an aggregator and its terms passed from Python, for one run (:class:`Plugged`: the caller's are never
    changed and two runs never share state), made with one memo, so that a term that is the aggregator, or one the
    aggregator holds, is the same object in the copy as in the caller's; the run's ``model`` is not copied.

    A ConfigError on ``aggregator`` or ``terms[i]`` where ``copy.deepcopy`` cannot copy it (a lock), as
    :func:`~chillfl.aggregation.registry.run_copy` refuses a plugin build's aggregator: it was copy.py's TypeError."""
    memo: dict[int, Any] = {id(model): model}
    own = _run_copy(aggregator, "aggregator", memo)
    return own, [_run_copy(t, f"terms[{i}]", memo) for i, t in enumerate(terms)]


T = TypeVar("T")


def _run_copy(part: T, field: str, memo: dict[int, Any] | None = None) -> T:
    """``copy.deepcopy(part, memo)`` of a part passed from Python; one ConfigError on ``field`` where it cannot be copied."""
    try:
        return copy.deepcopy(part, memo)
    except (TypeError, RuntimeError, copy.Error) as exc:
        raise ConfigError(field, f"{type(part).__name__}: the run works on a copy (yours stays as it is, and two runs never share "
                                 f"its state), and copy.deepcopy cannot copy it ({exc}); give it attributes copy.deepcopy can copy") from None


def run_context(config: RunConfig, model: nn.Module, client_sizes: Sequence[int] | None, section: str) -> BuildContext:
    """What a builder is told of the run (:class:`~chillfl.aggregation.registry.BuildContext`), for an instance passed from
    Python (:func:`~chillfl.aggregation.registry.bind_instance`), as :func:`make_aggregator` tells the config's method."""
    return BuildContext(num_clients=config.federation.num_clients, model=model, seed=config.seed, section=section,
                        client_momentum=config.client.momentum, rounds=config.federation.rounds,
                        clients_per_round=config.federation.sample_size(),
                        client_sizes=None if client_sizes is None else tuple(int(n) for n in client_sizes),
                        objective_terms=tuple(configured_terms(config.objective)))


def check_client_half(aggregator: Aggregator, field: str) -> None:
    """The aggregator's client half has the hooks every client calls (``prepare``, ``finish``; a personalising half
    both of ``objectives`` and ``train``), checked when the run is built rather than at the first client."""
    half = aggregator.client_half()
    if half is None:
        return
    for part in half_parts(half):  # PA3Fed's combined half has every hook and calls its base's as every client calls its own: each part's
        needed = ("prepare", "finish", *(("objectives", "train") if hasattr(part, "train") or hasattr(part, "objectives") else ()))
        lacks = [m for m in needed if not has_methods(type(part), (m,))]  # by its class, as an aggregator passed from Python is
        if lacks:
            held = instance_only_hooks(part, lacks)
            why = f" on its class ({', '.join(held)} only on the instance, set on it or forwarded through __getattr__)" if held else ""
            raise ConfigError(
                field,
                f"{type(aggregator).__name__}'s client half {type(part).__name__} lacks {', '.join(lacks)}{why}: a ClientHalf needs prepare and finish "
                "(subclass chillfl.extend.Stateless for both, keeping nothing), a Personalising one also objectives and train",
            )
        check_calls(part, HALF_CALLS, field)
    if measured_after_average(half) and not holds_personal_model(half):  # the server would have no client model to measure after its average
        raise ConfigError(
            field,
            f"{type(aggregator).__name__}'s client half {type(half).__name__} asks for its local accuracy after the average (after_average = True), "
            "which measures each client's personal_model on the new global model, but it implements no HoldsPersonalModel (chillfl.extend)",
        )


def warn_no_client_models(config: RunConfig, aggregator: Aggregator) -> None:
    """One warning line when ``checkpoint.client_models`` asks for the clients' models of a run that keeps none.

    Under the protocol whose method is ``[algorithm]``, the clients' models are the ones the aggregator's
    client half keeps (:class:`~chillfl.aggregation.base.HoldsPersonalModel`); a method whose clients train
    the global model the server sends each round keeps none, and nothing would be saved (pFedHN's clients keep nothing
    either, but its half's model is the one the server makes for each, so that is saved). Not an error: the global model is
    still saved, and one config may run several methods (a sweep, a comparison).
    """
    if not config.checkpoint.client_models or protocol_of(config).method_table is not None:
        return
    if holds_personal_model(aggregator.client_half()):
        return
    log.warning(
        "checkpoint.client_models: %s keeps no model per client (its clients train what the server sends them each round and keep no model of their own between rounds), so no %s is saved",
        config.algorithm.get("name"), "client_models.safetensors",
    )


def user_initial_model(config: RunConfig, model: nn.Module) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """A user's own module as the model template: a deep copy (the caller's object is never trained or moved),
    its current weights the initial global state. Nothing is registered anywhere.

    ``config.model.name`` must be ``custom``, so that the saved config cannot claim a registered model ran.
    """
    name = config.model.get("name")
    if not is_custom(name):
        raise ConfigError("model.name", f"a run on a user's nn.Module must record model.name = {CUSTOM!r}, got {name!r}")
    refuse_with_user_model(config.model)
    try:
        template = copy.deepcopy(model)
    except (RuntimeError, TypeError) as exc:  # torch's own refusal (an old weight_norm's non-leaf weight), or an uncopyable attribute
        from torch.nn.utils.weight_norm import WeightNorm

        old = [name for name, m in model.named_modules() if any(isinstance(h, WeightNorm) for h in m._forward_pre_hooks.values())]
        hint = (f"its layer {old[0]!r} uses the old torch.nn.utils.weight_norm, whose weight torch cannot copy: "
                "use torch.nn.utils.parametrizations.weight_norm instead") if old else "give it attributes copy.deepcopy can copy"
        raise ConfigError("model", f"{type(model).__name__} cannot be copied (the run trains a copy and leaves yours as it is): "
                                   f"{str(exc).split('.')[0]}; {hint}") from None
    return template, model_state(template)


@once_per_call  # called alone (a test, a script): its checks' warnings said once
def build_experiment(
    config: RunConfig,
    dataset: ArrayDataset | None = None,
    data: FederatedData | None = None,
    *,
    model: nn.Module | None = None,
    plugged: Plugged | None = None,
) -> Experiment:
    """Everything a run needs; raises ConfigError on any bad value before anything is written.

    ``model``: a user's own module instead of the config's registered model (see :func:`user_initial_model`).
    ``plugged``: a user's own aggregator, terms and temperature policy, as instances (see :class:`Plugged`).
    A registered model's parts are built in float32 whatever the caller's default dtype (a method's own modules too:
    FedGen's generator; :func:`~chillfl.models.registry.float32_default`).
    """
    registered = model is None and not is_custom(config.model.get("name"))
    with float32_default() if registered else caller_dtype():
        return _build_experiment(config, dataset, data, model=model, plugged=plugged)


def _build_experiment(
    config: RunConfig, dataset: ArrayDataset | None, data: FederatedData | None, *, model: nn.Module | None, plugged: Plugged | None,
) -> Experiment:
    """:func:`build_experiment`'s steps."""
    check_rebuildable(config, has_model=model is not None, has_data=dataset is not None or data is not None)
    check_plugged(config, plugged)
    if config.executor == "ray":  # before anything is written: the extra must be installed
        import_ray(config.ray.address)  # and a local Ray's sockets must fit under TMPDIR
    device = resolve_device(config.device)
    if data is None:
        data = build_data(config, dataset)
    check_data_record(config, data.dataset)  # before poisoned_data: the user's data as given
    check_part_records(config, model_record(model) if model is not None and is_custom(config.model.get("name")) else None, plugged)
    data = poisoned_data(config, data)  # [attack] label_flip / backdoor: the attackers' training rows
    if config.federation.sample_size() > data.num_clients:
        raise ConfigError("federation.clients_per_round", f"must be <= num_clients={data.num_clients}")
    kind = protocol_of(config)
    if kind.check_data is not None:  # its options against the data, before any model is built
        kind.check_data(config, data)
    check_model_assignment(config, data.num_clients)
    if model is None:
        model, state = build_initial_model(config, data.dataset.input_shape, data.num_classes)
        if RunConfig.component(base_table(config.model))[0] not in MODELS:  # a plugin's, named in the config: checked as one passed from Python is
            check_model_fits(model, data.dataset.x_train[:2], data.num_classes, "model.name")
        elif config.dataset.get("name") not in DATASETS:  # a built-in model on a plugin's (or Python's) data: their inputs' dtype, before round 1
            check_model_fits(model, data.dataset.x_train[:2], data.num_classes, "dataset.name" if not is_custom(config.dataset.get("name")) else "data.x_train")
    else:
        model, state = user_initial_model(config, model)
    check_declared_head(model, data.num_classes)  # a head the model names exists and gives one logit a class
    if is_custom(config.model.get("name")):  # a caller's module: its logits' width before a head-reading method's guess blames the head
        check_model_fits(model, data.dataset.x_train[:2], data.num_classes)
    other_models = check_group_heads(config, data)  # and every per-client architecture's, on its own field
    check_index_inputs(config.model, data)  # a model that reads indices (its spec says so) on whole numbers without noise
    check_one_sample_batches(config, data, model)
    check_step_sizes(config, model)
    if plugged and plugged.aggregator is not None and not kind.uses_aggregator:
        raise ConfigError("aggregator", f"the {config.protocol} protocol averages no models, so it takes no aggregator")
    sizes = tuple(int(n) for n in data.train_sizes())  # the rows each client trains on (after [attack]'s rewrite)
    aggregator, terms = build_algorithm(config, model, plugged, sizes) if kind.uses_aggregator else (None, [])  # its own limits first (Per-FedAvg's plain SGD)
    if runs_own_training(aggregator.client_half() if aggregator is not None else None):  # here, where a round's local steps are known
        config.client.check_step_lr_floor(config.federation.rounds, max(sizes, default=0), "client")
    if aggregator is not None:  # [privacy] dp-fedavg / local: clipped (noised) updates around the aggregator's mean
        aggregator = private_aggregator(config, data, aggregator, exempt=skipping_local_dp(config, data), model=model)  # with the attackers that skip local DP, and the model's variances
        aggregator = attacked_aggregator(config, data, aggregator, state)  # [attack]: the attackers' uploads, before aggregation (and clipping)
    own_table = f"{kind.method_table}.method" if kind.method_table is not None and not kind.uses_aggregator else None  # [distillation]'s: its phases' losses
    method_field = "aggregator" if plugged is not None and plugged.aggregator is not None else own_table or "algorithm.name"
    held = plugged.aggregator.base if plugged is not None and isinstance(plugged.aggregator, AroundAggregator) else None
    configured = objective_terms(config, terms, None if held is None else type(held).__name__)
    passed = len(plugged.terms) if plugged is not None and plugged.aggregator is not None else 0  # the caller's, then the aggregator's own
    term_fields = (*(f"terms[{i}]" if i < passed else method_field for i in range(len(terms))), *(f for _, f in configured))
    terms = [*terms, *(t for t, _ in configured)]
    policy = build_policy(config, data, plugged)
    for term, term_field in zip(terms, term_fields):  # a term's or a policy's hook with the wrong parameters: one line, before anything is written
        check_term(term, term_field)
    policy_field = "policy" if plugged is not None and plugged.policy is not None else "temperature.policy"  # and its client half's, its checks against the data
    client_train = data.client_train
    check_built_policy(config.temperature, policy, data.num_classes, data.num_clients, lambda cid: client_train(cid)[1], policy_field)
    losses = base_losses()
    if config.client.loss not in losses:
        raise choice_error("client.loss", config.client.loss, list(losses))
    sample = sample_input(model, data.dataset.input_shape)  # the conv sizes decide "auto"
    memory_format, precision = resolve_compute(config.memory_format, config.precision, model, device, sample)
    if config.compile:
        check_toolchain(device)
    private = private_steps(config, data, model, aggregator)  # [privacy] dp-sgd
    if private is not None:  # terms of the method's or passed from Python (objective.terms': private_steps)
        coupled = next((i for i, term in enumerate(terms) if getattr(type(term), "couples_samples", False) is True), None)
        if coupled is not None:
            raise ConfigError(term_fields[coupled], f"term {type(terms[coupled]).__name__} couples the samples of a batch (couples_samples), and "
                                                    f"{config.privacy.mechanism!r} takes each sample's gradient on that sample alone, where the "
                                                    "term is another one: it would be dropped without a word; leave it out with this [privacy] mechanism")
    if private is not None and config.client.sam_rho:  # the first gradient (not clipped, not noised) would steer the released one
        raise ConfigError("client.sam_rho", "sharpness-aware steps take a second gradient at weights moved by the first, which the private step "
                                            "neither clips nor noises: a leak outside epsilon; set sam_rho = 0 with this [privacy] mechanism")
    spec = LocalSpec(
        epochs=config.client.epochs,
        batch_size=config.client.batch_size,
        momentum=config.client.momentum,
        weight_decay=config.client.weight_decay,
        optim=config.client.optim(),
        base_loss=losses[config.client.loss],
        terms=tuple(terms),
        term_fields=term_fields,
        method_field=method_field,
        policy_field=policy_field,
        augment=training_augment(config, data.dataset),
        memory_format=memory_format,
        precision=precision,
        deterministic=config.deterministic,
        batched_conv=resolve_batched_conv(config.batched_conv, precision, device, config.cuda_graphs, optim=config.client.optim(), private=private),
        cuda_graphs=config.cuda_graphs,
        compiled=config.compile,
        private=private,
        frozen=frozenset(n for n, p in model.named_parameters() if not p.requires_grad),  # a user's frozen layers (requires_grad=False) stay as given
    )
    check_stage_lr_floors(config, aggregator.client_half() if aggregator is not None else None, spec, max(sizes, default=0))
    if reads_representation(spec):  # a model that declares no head is warned about here, once: the training steps look it up silently
        head_name(model)
    model.to(device)
    state = {k: v.to(device) for k, v in state.items()}
    if device.type != "cpu":  # the data live on the device too: one copy, no per-round transfer
        data = data.to(device)
    exp = Experiment(config, data, model, state, aggregator, policy, spec, device, other_models)
    if kind.check is not None:  # its checks of the built parts, before anything is written
        kind.check(exp)
    if config.executor in ("processes", "ray"):
        check_sendable(config.executor, (model, spec, aggregator.client_half() if aggregator is not None else None))
    return exp


def personal_trainer(half: ClientHalf | None) -> Personalising | None:
    """The part of ``half`` that runs the client's trainings itself (:class:`~chillfl.aggregation.base.Personalising`),
    alone or combined with others (at most one); None where the run's own training is the only one."""
    for part in half_parts(half):
        if isinstance(part, Personalising):
            return part
    return None


def runs_own_training(half: ClientHalf | None) -> bool:
    """Whether the clients of ``half`` run the run's own training (``client.epochs`` at the round's lr), which the check
    before the run counts: all but a :class:`~chillfl.aggregation.base.PlansStages` half that says it does not
    (:class:`~chillfl.aggregation.base.SkipsOwnTraining`: pFedMe's, whose trainings are its declared inner problems).

    Why: that count refused pFedMe over a training it never runs, before its own inner problem was counted at all."""
    trainer = personal_trainer(half)
    return not (isinstance(trainer, PlansStages) and isinstance(trainer, SkipsOwnTraining) and not trainer.runs_own_training())


def check_stage_lr_floors(config: RunConfig, half: ClientHalf | None, spec: LocalSpec, rows: int) -> None:
    """Refuse, before the run, a stage a personalising client half declares (:class:`~chillfl.aggregation.base.PlansStages`)
    whose local steps the schedule over steps takes below float32's smallest normal lr, naming its epochs option.

    Why: a stage's own epochs (FedRep's head) run the schedule further down than ``client.epochs`` does, and were refused
    only when the stage first trained, perhaps hours in; the half says which of its objectives each stage trains, so its
    epochs, batch size and schedule are that spec's. ``rows``: the largest client's training rows."""
    trainer = personal_trainer(half)
    if not isinstance(trainer, PlansStages) or spec.optim.step_schedule.name == "constant":  # a constant schedule: nothing to count
        return
    objectives = trainer.objectives(spec)
    section = spec.method_field.removesuffix(".name") if spec.method_field else "algorithm"
    plans = trainer.planned_stages(spec)
    check_plans(plans, len(objectives), type(trainer).__name__, spec.method_field or "algorithm.name")
    for plan in plans:
        stage = objectives[plan.objective]
        seen = rows if plan.rows is None else min(plan.rows, rows)
        over = f"the largest client's {seen} rows" if plan.rows is None else f"at most {seen} rows a training"
        config.client.check_stage_lr_floor(config.federation.rounds, StageSteps(stage.epochs, f"{section}.{plan.option}", stage.batch_size, stage.optim,
                                                                                 seen, over, plan.lr), "client")


def check_plans(plans: object, objectives: int, half: str, field: str) -> None:
    """Refuse a :meth:`~chillfl.aggregation.base.PlansStages.planned_stages` answer the count cannot read, in one line on
    the method's ``field``: a tuple of :class:`~chillfl.aggregation.base.PlannedStage`, each naming one of the half's
    ``objectives`` (an int index), its option as a str, an lr > 0 (or None) and rows >= 1 (or None).

    Why: a plugin's slip (a stage index past its objectives) crashed every run with a raw IndexError from the count,
    where the same slip in a :class:`~chillfl.aggregation.base.Train` request is one ConfigError line."""
    where = f"{half}.planned_stages()"
    if not isinstance(plans, tuple) or not all(isinstance(p, PlannedStage) for p in plans):
        raise ConfigError(field, f"{where} must return a tuple of PlannedStage, got {type(plans).__name__}")
    for plan in plans:
        index = plan.objective
        if not is_whole(index) or not 0 <= index < objectives:
            raise ConfigError(field, f"{where} names objective {index!r}, but its objectives() has {objectives} (indices 0 to {objectives - 1})"
                                     if objectives else f"{where} names objective {index!r}, but its objectives() has none")
        if not isinstance(plan.option, str) or not plan.option:
            raise ConfigError(field, f"{where} names option {plan.option!r} for objective {index}: it must be the option's name, a non-empty str")
        if plan.lr is not None and (not is_finite_real(plan.lr) or plan.lr <= 0):
            raise ConfigError(field, f"{where} gives stage {plan.option!r} the lr {plan.lr!r}: it must be a finite number > 0, or None (the round's lr)")
        if plan.rows is not None and (not is_whole(plan.rows) or plan.rows < 1):
            raise ConfigError(field, f"{where} gives stage {plan.option!r} the rows {plan.rows!r}: it must be an int >= 1, or None (the client's rows)")


def is_step_size(key: str) -> bool:
    """Whether option ``key`` is a learning rate or scales one, by the options' naming convention: ``lr``, ``*_lr``,
    ``lr_*`` (``client.lr``, ``lr_min``, ``finetune_lr``, ``server_lr``, ``distill_lr``, ...)."""
    return "lr" in key.split("_")


def step_size_fields(table: object, section: str = "") -> Iterable[tuple[str, float]]:
    """Every step-size option (:func:`is_step_size`) set in the config ``table`` (a dataclass or a table, walked
    through its nested tables) with its dotted field: each method's own rates found by name, not by method."""
    items = ({f.name: getattr(table, f.name) for f in dataclasses.fields(table)}.items()  # type: ignore[arg-type]
             if dataclasses.is_dataclass(table) and not isinstance(table, type) else table.items() if isinstance(table, dict) else ())
    for key, value in items:
        field = f"{section}.{key}" if section else str(key)
        if isinstance(value, float) and is_step_size(str(key)):
            yield field, value
        elif isinstance(value, dict) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
            yield from step_size_fields(value, field)


def check_step_sizes(config: RunConfig, model: nn.Module) -> None:
    """Refuse a step size above the largest number of the model's parameter dtype (float32's 3.4e38), naming its field.

    Why: the local step hands the lr to torch as a scalar of the weights' dtype (``w.sub_(g, alpha=lr)``), and one
    past that dtype's range raised "value cannot be converted to type float without overflow" from inside round 1 (a
    66-line traceback), where 1e38 ends as a divergence. A convention (:func:`is_step_size`), so every method's rate
    is covered without a list of methods; a rate named otherwise still ends as torch raises there."""
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()} or {torch.get_default_dtype()}
    dtype = min(dtypes, key=lambda d: torch.finfo(d).max)  # a mixed model: its narrowest (a float64 first layer, float32 after)
    largest = torch.finfo(dtype).max
    unread = {f"client.{name}" for name in config.client.unread_schedule_options()}  # warned about as ignored: not refused too
    for field, value in step_size_fields(config):
        if abs(value) > largest and field not in unread:
            raise ConfigError(field, f"must be at most {largest:.4g} (the largest {str(dtype).removeprefix('torch.')}, the model's parameter "
                                     f"dtype: a step this large overflows it), got {value:g}")


def check_one_sample_batches(config: RunConfig, data: FederatedData, model: nn.Module) -> None:
    """Refuse one-sample training batches the model cannot train on, before anything is written.

    A client trains on one sample at a time when ``client.batch_size = 1`` or when it holds a single sample
    (a trailing one-sample batch is merged into the one before, so only those). Batch norm over features
    cannot normalise one value per channel: torch raises in the first round, a traceback mid-run. A
    train-mode forward of one sample through a copy of the model asks it, whatever the model
    (:func:`~chillfl.protocols.softlabels.public.one_sample_failure`; the public set's batches ask it too).
    """
    single = [int(i) for i in (data.train_sizes() == 1).nonzero()[0]]  # not class_counts(): a pass over every label
    if config.client.batch_size != 1 and not single:
        return
    why = one_sample_failure(model, data.dataset.x_train)
    if why is not None:
        if config.client.batch_size == 1:
            raise ConfigError("client.batch_size", f"is 1, and {why}")
        raise ConfigError("partition", f"gives {len(single)} client(s) a single training sample (client {single[0]}), and {why}; {larger_clients_hint(config)}")


def larger_clients_hint(config: RunConfig) -> str:
    """How to give every client more than one sample, in the options the run's partitioner takes: ``partition.min_size``
    only where it has one (shards or iid refuse it as an unknown option)."""
    name, options = RunConfig.component(config.partition)
    if name == FROM_FILE:
        return "give each client more samples in partition.from or split otherwise"
    cls = partitioner_spec(name).options
    names = sorted(f.name for f in dataclasses.fields(cls) if f.init) if dataclasses.is_dataclass(cls) else []
    if "min_size" in names:
        return "raise partition.min_size or split otherwise"
    if names:
        return f"change {name}'s options ({', '.join(names)}) or partition.name so each client holds more samples"
    return f"{name} takes no options: choose another partition.name"


def sample_input(model: nn.Module, input_shape: Sequence[int]) -> torch.Tensor:
    """One zero input of ``input_shape`` in the model's own floating dtype and on its device: a user's model whose
    dtype is not torch's default (``model.double()``, or ``set_default_dtype`` called after the model was made)
    raised a dtype mismatch on a sample of the default dtype before anything ran."""
    like = next((t for t in (*model.parameters(), *model.buffers()) if t.is_floating_point()), None)
    if like is None:
        return torch.zeros((1, *input_shape))
    return torch.zeros((1, *input_shape), dtype=like.dtype, device=like.device)


def check_sendable(executor: str, parts: Any) -> None:
    """What travels to worker processes (model template, objective terms, the method's client half) can be
    imported there: a user's classes must live in a module (a ``.py`` file on ``sys.path``), not in a
    notebook cell or exec'd code, which the workers cannot import. One ConfigError on ``executor`` instead
    of a worker's traceback in round 1.
    """
    reason = unsendable(parts)
    if reason is None:
        return
    move = "put your classes in a module (a .py file on sys.path), or " if reason.placed else ""  # not for what pickle refuses anywhere
    raise ConfigError(
        "executor",
        f"{executor!r} sends the model, the objective terms and the method's client half to worker processes, and they cannot go ({reason.why}); "
        f"{move}use executor = 'sequential' or 'vectorized'",
    )


def build_policy(config: RunConfig, data: FederatedData, plugged: Plugged | None = None) -> TemperaturePolicy:
    """The configured temperature policy (class counts computed only if it reads them), or a copy of the one passed from Python."""
    if plugged is not None and plugged.policy is not None:
        name = config.temperature.get("policy")
        if not is_custom(name):
            raise ConfigError("temperature.policy", f"the run was given a temperature policy from Python, which replaces [temperature]; got {name!r} here too: vary other keys")
        return _run_copy(plugged.policy, "policy")  # a lock: one line, as plugged_copies refuses an aggregator
    check_policy(config)  # its options, then its own checks against the run (PolicySpec.check)
    return make_policy(config.temperature, data.class_counts)


def steering_note(config: RunConfig, policy: TemperaturePolicy | None = None) -> str | None:
    """The note (said once a process, :func:`say_notes`) when the run's temperature policy declares that the clients' accuracy
    steers their training (:attr:`~chillfl.capabilities.Capabilities.steers_by_accuracy`) and the run has no validation split.

    ``policy``: the run's built policy; one passed from Python (``custom``) is asked what its class declares
    (:func:`~chillfl.temperature.registry.steers_on_test_rows`, which a comparison's steering caveat asks too).

    Why: that accuracy is then each client's evaluation split's, drawn from the test rows the run's accuracy is
    reported on, so test rows steer training. FedChill's paper does so (its validation sets come from the test
    set), and so every bundled FedChill config does; a reader of the results should know, and how to avoid it.
    A note, not an error, and on stderr: the results are unchanged (a comparison's table carries a steering caveat
    line, :func:`chillfl.report.caveats.steering_caveat`). Called once the whole run is
    built (:func:`chillfl.runner.run_experiment`), so that a bad value still ends in its one error line.
    """
    steers = steers_on_test_rows(config, policy)
    if steers is None:
        return None
    return (f"note: {steers} reads each client's accuracy on its evaluation split, drawn from the test rows "
            "the run reports (eval.validation = 0): test rows steer training; eval.validation = 0.2 keeps them out")


def fewer_attackers_note(config: RunConfig, aggregator: Aggregator | None = None) -> str | None:
    """The note (said once a process, :func:`say_notes`) when the run's algorithm declares the byzantine clients of a
    round it withstands and ``[attack]`` has more attackers than that: by an option counting them
    (:attr:`~chillfl.aggregation.registry.AlgorithmSpec.tolerates`: at 0, the default, the robust rule defends against no
    one, below the attackers against some), or by a count its options and the round's size give
    (:attr:`~chillfl.aggregation.registry.AlgorithmSpec.withstands`: the trimmed mean's floor(beta n), the median's
    fewer than half).

    The rule counts the attackers of one round, so the number compared is the run's attackers or, where a round
    samples a fixed number of clients fewer than that, that many (the most a round can hold). Under Poisson sampling
    a round's size varies and a round may hold every attacker, so it is the run's attackers. The note suggests that
    number, or, where the rule refuses that many in this run (Bulyan needs clients per round >= 4f + 3), the largest
    value it accepts (:func:`~chillfl.aggregation.registry.largest_tolerated`, which asks the spec's own check), saying
    that none covers them all; for a ``withstands`` rule, the option value its spec gives
    (:attr:`~chillfl.aggregation.registry.AlgorithmSpec.withstanding`), or that it withstands no such count.

    A note, not an error: a run at f = 0, or below the attackers, is a fair baseline to ask for. Called once the whole
    run is built (:func:`chillfl.runner.run_experiment`), so that a bad value still ends in its one error line.
    ``aggregator``: the run's built one, whose instance passed from Python is read through the spec that builds it
    (:func:`~chillfl.aggregation.registry.built_by`), its option named ``aggregator.options.<option>``.
    """
    if not config.attack.enabled:
        return None
    name, options = RunConfig.component(config.algorithm)
    section = "algorithm"
    if is_custom(name):
        found = built_by(innermost(aggregator))  # the instance, without the attack's and privacy's layers around it
        if found is None or found[2] is None:  # no spec builds it, or its options are not the spec's: no count to read
            return None
        name, spec, parsed = found
        section, options = INSTANCE_OPTIONS, dataclasses.asdict(parsed)
    else:
        spec = algorithm_spec(name)
        parsed = algorithm_options(spec, name, options)
    attacking = len(attacker_ids(config, config.federation.num_clients))
    round_ = _AttackedRound.of(config, attacking)
    if spec.tolerates is not None:
        return _tolerated_note(config, name, options, f"{section}.{spec.tolerates}", getattr(parsed, spec.tolerates), round_)
    if spec.withstands is None:
        return None
    withstood = spec.withstands(parsed, round_.clients)
    if withstood >= round_.most:
        return None
    suggested = None if spec.withstanding is None else spec.withstanding(parsed, round_.most, round_.clients)
    advice = f"{name} cannot withstand {round_.most}" if suggested is None else f"set {section}.{suggested[0]} = {suggested[1]!r}"
    return (f"note: {name} withstands {_attackers(withstood)} of the {round_.per_round} a round, and this run has {round_.attacking} of "
            f"{config.federation.num_clients} clients attacking{round_.in_round}; {advice}")


@dataclass(frozen=True)
class _AttackedRound:
    """The round :func:`fewer_attackers_note` measures a rule against, and how the note words it."""

    attacking: int
    """The run's attackers."""
    clients: int
    """Clients a round: the count under fixed-size sampling, the expected count under Poisson."""
    most: int
    """The attackers a round may hold: at most ``clients`` under fixed-size sampling; every one under Poisson."""
    poisson: bool

    @staticmethod
    def of(config: RunConfig, attacking: int) -> _AttackedRound:
        clients = config.federation.sample_size()
        poisson = config.federation.sampling == "poisson"  # each client drawn on its own: no round size caps the attackers
        return _AttackedRound(attacking, clients, attacking if poisson else min(attacking, clients), poisson)

    @property
    def per_round(self) -> str:
        """The round's size, as a rule's bound was checked against it."""
        return f"{self.clients} clients" + (" expected" if self.poisson else "")

    @property
    def in_round(self) -> str:
        """Why the note compares with :attr:`most` where it is not the plain count of a round's clients."""
        if self.poisson:
            if self.attacking <= self.clients:
                return ""
            return (f"; Poisson sampling varies a round's size ({self.clients} clients expected), "
                    f"so a round may hold all {self.attacking}")
        return "" if self.most == self.attacking else f", at most {self.most} in a round of {self.clients}"


def _attackers(count: int) -> str:
    return "no attacker" if count == 0 else f"{count} attacker{'s' if count > 1 else ''}"


def _tolerated_note(config: RunConfig, name: str, options: Mapping[str, Any] | None, field: str, tolerated: int, round_: _AttackedRound) -> str | None:
    """The note for a rule whose option ``field`` counts the attackers it withstands (Krum's ``f``)."""
    most = round_.most
    if tolerated >= most:
        return None
    largest = largest_tolerated(name, options, config, most)
    here = f"here ({round_.per_round} per round)"
    if largest >= most:
        advice = f"set {field} = {most}"
    elif largest > tolerated:
        advice = f"set {field} = {largest}, the largest {name} accepts {here}: none it accepts covers all {most}"
    else:
        advice = f"{name} accepts no larger {field} {here}: none covers all {most}"
    return (f"note: {field} = {tolerated}: {name} tolerates {_attackers(tolerated)}, and this run has {round_.attacking} of "
            f"{config.federation.num_clients} clients attacking{round_.in_round}; {advice}")


def cpu_graphs_note(config: RunConfig, device: torch.device) -> str | None:
    """The note when ``cuda_graphs = true`` runs on a device that is not CUDA, where no step is recorded: the run is then
    bitwise one without it, while ``config.toml`` records ``true``. A note, not an error: a config that turns it on for
    the GPU runs unchanged on a laptop (``device = "auto"``), as ``precision = "tf32"`` cannot."""
    if not config.cuda_graphs or device.type == "cuda":
        return None
    return f"note: cuda_graphs = true records CUDA graphs of the clients' steps; on device {str(device)!r} there are none, and the run is as without it"


def idle_local_dp_note(config: RunConfig, aggregator: Aggregator | None) -> str | None:
    """The note (said once a process, :func:`say_notes`) when ``attack.local_dp = "skip"`` changes nothing in the built run: no
    attacker sends what it forges past a client-side release, because ``[privacy]`` is off, because its mechanism
    leaves nothing on the clients' side to skip (it clips at the server, or inside local training, before anything
    is forged), or because the attack forges nothing its clients upload (a data attack trains and releases honestly).

    ``aggregator``: the run's built aggregator, whose client-side privacy wrapper holds the attackers it exempts
    (:func:`chillfl.privacy.build.exempted`); under soft-label sharing a forged row skips the row release whenever a
    mechanism runs (its ``rows`` hook is the client's own).

    A note, not an error, as ``[attack]`` options a base table shares while each variant sets ``kind``: a comparison
    may hold ``local_dp = "skip"`` (the threat model) fixed while its variants vary ``[privacy]``, and the run is
    then exactly ``comply``'s. Called once the whole run is built, so that a bad value still ends in its one error line.
    """
    attack = config.attack
    if not attack.enabled or attack.local_dp != "skip":
        return None
    if exempted(aggregator) or (forges_rows(config) and config.privacy.enabled):
        return None  # the attackers send what they forge unreleased: skip acts
    if not config.privacy.enabled:
        why = "[privacy] is off, so no client-side release of the uploads is there to skip"
    elif not (forges_models(config) or forges_rows(config)):
        why = f"attack {attack.kind!r} forges nothing its attackers upload in a {protocol_of(config).title} run: they train and release as honest clients"
    else:
        why = f"privacy.mechanism {config.privacy.mechanism!r} leaves an attacker nothing to skip (it clips at the server or inside local training)"
    return (f'note: attack.local_dp = "skip" changes nothing in this run: {why}; '
            "it acts under a [privacy] mechanism the clients run on what they upload, as they forge it (docs/attacks.md)")


def ignored_fraction_note(config: RunConfig) -> str | None:
    """The note (said once a process, :func:`say_notes`) when ``federation.clients_per_round`` overrides a ``client_fraction`` that
    would sample a different number of clients: the count wins, and a user who wrote both should know which.

    A note, not an error: every resolved ``config.toml`` writes ``client_fraction`` (1.0 unless set), so a saved
    config with a count reruns as it is; the default 1.0 (what such a file holds) and a fraction giving the same
    count say nothing.
    """
    fed = config.federation
    if fed.clients_per_round is None or fed.client_fraction == 1.0:
        return None
    by_fraction = dataclasses.replace(fed, clients_per_round=None).sample_size()
    if by_fraction == fed.clients_per_round:
        return None
    return (f"note: federation.client_fraction = {fed.client_fraction} is ignored: federation.clients_per_round = {fed.clients_per_round} "
            f"sets the clients a round (the fraction would give {by_fraction} of {fed.num_clients}); set only one of them")


def unused_rows_note(config: RunConfig, data: FederatedData) -> str | None:
    """The note (said once a process, :func:`say_notes`) when the run's partitioner declares that its split can leave
    training rows to no client unasked (:attr:`~chillfl.data.partition.PartitionerEntry.leaves_unused`) and its clients
    hold under :data:`~chillfl.data.partition.UNUSED_NOTE_SHARE` of the rows it split (the public pool is not counted).

    Why: ``dirichlet`` with ``scheme = "client"`` gave 5 clients on digits half of the training rows, silently; a
    reader comparing it with another split should know. A note, not an error: that is the split asked for.
    """
    name, options = RunConfig.component(config.partition)
    if name == FROM_FILE:
        return None
    leaves_unused = partitioner_spec(name).leaves_unused
    why = None if leaves_unused is None else leaves_unused(partitioner_options(name, options))
    if why is None:
        return None
    rows = len(data.dataset.y_train) - len(data.public_indices)
    held = sum(len(ix) for ix in data.train_indices)
    if rows <= 0 or held >= UNUSED_NOTE_SHARE * rows:
        return None
    return f"note: the clients hold {held} of the {rows} training rows ({held / rows:.0%}): {why} (docs/data.md)"


def oversubscribed_threads_note(config: RunConfig) -> str | None:
    """The note when ``threads`` exceeds the cores this process may use (its affinity: a job's allocation, ``taskset``):
    the threads then take turns on the cores, and ``threads = 64`` on 2 cores ran ~100x slower, with nothing said."""
    cores = usable_cores()
    if config.threads <= cores:
        return None
    return (f"note: threads = {config.threads} is more than the {cores} core{'' if cores == 1 else 's'} this process may use: its threads contend for them "
            f"and the run is much slower; set threads = 0 (torch's default) or at most {cores}")


def ignored_ray_note(config: RunConfig) -> str | None:
    """The note when ``[ray]`` options are set off their defaults and ``executor`` is not ``"ray"``: only the Ray executor
    reads them (:func:`make_executor`), so ``ray.address = "HOST:6379"`` without ``executor = "ray"`` trained here, with no word.

    A note, not an error: a stopped Ray run moved to ``sequential`` or ``processes`` (docs/reproducibility.md, "Moving a
    stopped run") keeps its ``[ray]`` table in ``config.toml``, and resumes as it is.
    """
    if config.executor == "ray":
        return None
    default = dataclasses.asdict(RayConfig())
    changed = {name: value for name, value in dataclasses.asdict(config.ray).items() if value != default[name]}  # in field order
    if not changed:
        return None
    options = ", ".join(f"ray.{name} = {value!r}" for name, value in changed.items())
    return (f"note: {options} {'is' if len(changed) == 1 else 'are'} ignored: executor = {config.executor!r} runs the client updates without Ray; "
            'executor = "ray" runs them on it (docs/ray.md)')


def run_notes(config: RunConfig, exp: Experiment | None, executor: bool = True) -> list[str]:
    """What a run says on stderr before it trains, in notes, not errors: its results stand, but a reader should know.

    ``executor``: the client updates run in this process's executor; False for a Flower server, whose nodes train
    (the notes on ``threads`` and ``[ray]`` are about the executor, and do not apply there).

    ``exp``: the run's built parts; None for a dry run without the dataset's files (the notes that need no built part).
    A run says them once it is built, and a dry run once every run it checks is built (:func:`say_notes`), so that a
    bad value still ends in its one error line. A dry run says what the run would: ``--dry-run`` said only the
    ignored fraction, so a config checked with it hid Krum's ``f`` below the attackers and an idle ``local_dp``.
    """
    notes = [steering_note(config, None if exp is None else exp.policy), ignored_fraction_note(config), poisson_rate_note(config.federation),
             fewer_attackers_note(config, None if exp is None else exp.aggregator),
             *([oversubscribed_threads_note(config), ignored_ray_note(config)] if executor else [])]
    if exp is not None:
        notes += [idle_local_dp_note(config, exp.aggregator), unused_rows_note(config, exp.data), empty_splits_note(config, exp.data),
                  half_weights_note(exp.model, exp.spec.precision), cpu_graphs_note(config, exp.device)]
    return [note for note in notes if note is not None]


def say_notes(notes: Iterable[str | None]) -> None:
    """Each note (None: none) as one warning line on stderr, once a process (a comparison's runs share most of theirs)."""
    for note in notes:
        if note is not None:
            warn_once(log, note)


def training_augment(config: RunConfig, dataset: ArrayDataset) -> Augment | None:
    """``[dataset.augment]``'s crop and flip of training batches (its normalisation acted when the data were loaded)."""
    opts = parse_augment(config.dataset.get(AUGMENT_KEY))
    check_shape(opts, dataset.input_shape, dataset.name)
    return Augment.from_options(opts, dataset.channel_mean, dataset.channel_std)  # constant padding: raw black


def wrapped_table(config: RunConfig) -> Wrapped | None:
    """The method ``[algorithm]``'s method wraps (:attr:`AlgorithmSpec.wraps`), with its options; None: it wraps none (or is a user's instance)."""
    name, options = RunConfig.component(config.algorithm)
    if is_custom(name):
        return None
    spec = algorithm_spec(name)
    return wrapped(spec, algorithm_options(spec, name, options))


def objective_terms(config: RunConfig, algorithm_terms: Sequence[Term], held_base: str | None = None) -> list[tuple[Term, str]]:
    """The ``[objective]`` terms (``proximal_mu``, then ``terms``), checked against the protocol and the algorithm's own terms,
    each with its config field (``objective.terms[1]``: a term's errors in training name it). ``held_base``: the class of
    the base an aggregator instance passed from Python wraps (``PA3Fed(FedProx(...))``), whose term it may be."""
    configured = configured_terms(config.objective)
    if not configured:
        return []
    own = protocol_of(config).own_objective
    if own is not None:  # the term named, not only its field: objective.terms = ["decorr"] read as if the proximal term were refused
        first = configured[0]
        field = first.field
        raise ConfigError(field, f"{first.name!r} is not added: {own}; leave it {'0' if field.endswith('proximal_mu') else 'empty'}")
    out = []
    for entry in configured:
        term = entry.build()
        if term in algorithm_terms:  # FedProx's keys (Ditto's, FedDyn's own copies read other keys)
            inner = wrapped_table(config)  # a method over another (PA3Fed over FedProx): the term may be the wrapped one's
            whose = (f" (its own options, or those of {inner.name!r}, {inner.section})" if inner is not None
                     else f" (its own options, or those of the base it wraps, {held_base})" if held_base is not None else " (its own options)")
            name = config.algorithm.get("name")  # an instance passed from Python: its class, not "custom"
            what = f"aggregator {str(config.algorithm['class']).rsplit('.', 1)[-1]}" if is_custom(name) and config.algorithm.get("class") else f"algorithm {name!r}"
            raise ConfigError(entry.field, f"{what} already adds {entry.spec.summary}{whose}; set one of the two")
        out.append((term, entry.field))
    return out


def build_protocol(exp: Experiment) -> ServerProtocol:
    """The protocol the config names (:attr:`RunConfig.protocol`), built by its registry entry."""
    evaluation = Evaluation(exp.config, exp.data, exp.model, exp.device)
    protocol = with_privacy(exp, protocol_of(exp.config).build(exp, evaluation), unaccounted=skipping_release(exp))  # [privacy]: every round's epsilon
    return with_attack(exp, protocol)  # [attack]: its attackers, ASR


def skipping_release(exp: Experiment) -> frozenset[int]:
    """The attackers that upload what they forge past the clients' own release (``attack.local_dp = "skip"`` where it acts:
    the models a client-side wrapper exempts them from, the soft-label rows they forge): their privacy is not accounted, so
    ``epsilon`` is the honest clients' guarantee (docs/attacks.md). Before, their releases were charged, and a round in
    which only an attacker had taken part three times reported its three releases' epsilon."""
    config = exp.config
    rows = forges_rows(config) and config.privacy.enabled and config.attack.local_dp == "skip"
    return exempted(exp.aggregator) | (attacker_ids(config, exp.data.num_clients) if rows else frozenset())


def make_executor(exp: Experiment, protocol: ServerProtocol, pools: WorkerPools | None = None) -> Executor:
    """The executor named by ``config.executor``, running ``protocol``'s client updates.

    ``pools``: worker processes and Ray actors lent by a sweep (:mod:`chillfl.executors.pools`); None: the
    executor starts its own and stops them when it closes.
    """
    config = exp.config
    clients = config.federation.sample_size()
    if config.executor == "ray":
        if exp.device.type != "cpu" and config.ray.num_gpus == 0:
            raise ConfigError("ray.num_gpus", f"the run's tensors live on {exp.device.type!r}: give each Ray worker a GPU (num_gpus > 0) or run on device = 'cpu'")
        lent = pools.ray(config.ray, config.threads, clients) if pools is not None else None
        return RayExecutor(exp.model, exp.spec, protocol.client, config.ray, threads=config.threads, clients_per_round=clients, pool=lent)
    parts = ExecutorSpec(
        exp.model, exp.spec, protocol.client, sum(v.numel() for v in exp.initial_state.values()), clients, config.threads, exp.device.type, pools,
    )
    return make_parallel_executor(config.executor, parts)


# ---------------------------------------------------------------- heterogeneous models, prototype sharing


def models_travel(config: RunConfig) -> bool:
    """Whether the configured protocol sends models (then every client must have the same architecture)."""
    return protocol_of(config).models_travel(config)


def check_group_heads(config: RunConfig, data: FederatedData) -> tuple[nn.Module, ...]:
    """Every other architecture of ``model.assign`` / ``model.groups`` through the main model's head check, failing on its field.

    The protocols read those models only when they start (the soft-label one after the run's folder exists), so a
    plugin model whose declared head is wrong would otherwise run, or fail late, or fail on ``model``. Built here with
    their own seeds (the global RNG is left untouched) and returned: the experiment hands them to the protocol
    (:attr:`Experiment.other_models`), which does not build them again.
    """
    plan = plan_models(config.model, data.num_clients)
    models = []
    for i in range(1, len(plan.archs)):
        model = build_architecture(config, plan, i, tuple(data.dataset.input_shape), data.num_classes)
        try:
            check_declared_head(model, data.num_classes)
        except ConfigError as exc:
            raise ConfigError(arch_section(plan, i), exc.message) from None
        models.append(model)
    return tuple(models)


def check_model_assignment(config: RunConfig, num_clients: int) -> None:
    """``model.assign`` / ``model.groups``: well-formed, and only where models never travel."""
    plan_models(config.model, num_clients)
    if models_travel(config):
        refuse_heterogeneous(config.model, protocol_of(config).travel_reason)


# ---------------------------------------------------------------- validation without running (--dry-run)


def check_protocol(exp: Experiment) -> None:
    """Build ``exp``'s protocol to check it, training nothing (``--dry-run`` of a run or a comparison): the server model's
    pretraining on the public set (FedMD's ``transfer_epochs``) is skipped, :func:`~chillfl.protocols.softlabels.build.only_checking`."""
    with only_checking():
        build_protocol(exp)


def check_config(config: RunConfig) -> bool:
    """Build every part of ``config`` as a run would, writing nothing; ConfigError on any mistake a run would hit.

    Returns False when the dataset's files are absent (a ``data_dir`` error):
    then each part's name and options are still checked, and the model against the dataset's input shape and classes
    where those are known without the files (:func:`check_known_shapes`), but nothing else that needs the data
    (partition feasibility). Once checked, it says the notes the run would (:func:`run_notes`).
    """
    try:
        exp = build_experiment(config)
    except (ConfigError, Unreachable) as exc:
        if not data_absent(exc):
            raise
        check_parts(config)
        say_notes(run_notes(config, None))
        return False
    check_protocol(exp)
    say_notes(run_notes(config, exp))
    return True


def known_shapes(config: RunConfig) -> tuple[tuple[int, ...], int] | None:
    """The input shape and classes of the config's dataset known without its files (its spec's or the catalogue's
    numbers, :func:`chillfl.data.datasets.dataset_size`), when every architecture is a registered model that a dry run can
    check on them; None: the model is not checked until the files are there."""
    size = dataset_size(config.dataset)
    plan = plan_models(config.model, config.federation.num_clients)
    if size is None or any(RunConfig.component(arch)[0] not in MODELS for arch in plan.archs):
        return None
    return tuple(size.input_shape), int(size.classes)


def check_known_shapes(config: RunConfig) -> None:
    """Every architecture (the base table's, each group's) built for the dataset's known input shape and classes, as the
    run will build it: a dry run without the files refuses a model that does not fit (one line naming the field), as
    one with them does. Why: such a dry run said only "names and options checked", and the mismatch waited for the
    download. A plugin's model and a dataset of unknown size are left to the run (:func:`absent_data_note` says so)."""
    known = known_shapes(config)
    if known is None:
        return
    shape, classes = known
    plan = plan_models(config.model, config.federation.num_clients)
    for index, arch in enumerate(plan.archs):
        name, options = RunConfig.component(arch)
        check_model_shape(name, shape, classes, options, arch_section(plan, index))


def absent_data_note(config: RunConfig) -> str:
    """What a dry run without the dataset's files checked (:func:`check_config` returned False), in one line."""
    known = known_shapes(config)
    where = f"the files of dataset {config.dataset.get('name')!r} are not in {config.data_dir}"
    if known is None:
        return f"{where}: names and options checked, not the shapes that need the data"
    return (f"{where}: names and options checked, and the model on the dataset's known inputs {known[0]} and {known[1]} classes; "
            "not what needs the data (the partition)")


def check_parts(config: RunConfig) -> None:
    """Every pluggable part's name and options (no data needed): the checks each registry makes before building."""
    check_rebuildable(config, has_model=True, has_data=True)
    check_plugged(config, None)
    name, options = RunConfig.component(config.dataset)
    if not is_custom(name):
        dataset_options(name, split_augment(options)[0])  # a built-in's or a user's builder's (dataset_spec)
    name, options = RunConfig.component(config.partition)
    noisy = False
    if name != FROM_FILE:  # a partition file is read with the data
        parsed = partitioner_options(name, options)  # whether or not it adds noise: a comparison's variant is checked here only
        adds_noise = partitioner_spec(name).adds_noise
        noisy = adds_noise is not None and adds_noise(parsed, config.federation.num_clients)
    name, options = RunConfig.component(config.algorithm)
    check_algorithm(name, options, config)  # its options, then its declared limits against the run
    plan = plan_models(config.model, config.federation.num_clients)
    for index, arch in enumerate(plan.archs):  # the base table, then each group's or assigned architecture
        section = arch_section(plan, index)
        name, options = RunConfig.component(arch)
        if not is_custom(name):
            model_options(name, {k: v for k, v in options.items() if k != PROJECTION_OPTION}, section)
        check_projection_dim(options.get(PROJECTION_OPTION, 0), f"{section}.{PROJECTION_OPTION}")  # every model takes it, so no model's options check it
    check_model_assignment(config, config.federation.num_clients)
    if noisy:  # what the built run refuses once the data are split (check_index_inputs), in its words
        refuse_noise(config.model, config.federation.num_clients)
    dataset = config.dataset.get("name")
    if isinstance(dataset, str) and not is_custom(dataset) and dataset_spec(dataset).inputs == "real":  # its entry says so: no values needed
        refuse_real_inputs(config.model, config.federation.num_clients, dataset)
    check_known_shapes(config)  # after the input kind: an index reader on real inputs is told that, not the builder's shape line
    public = config.distillation_setup
    if public is not None:  # the public pool's dataset: its name and options, as loading it checks them
        check_public_dataset(public.common)
    if public is not None and public.spec.collaborative and public.common.public_dataset is not None:  # the pool the clients distil on
        if dataset_spec(public.common.public_dataset).inputs == "real":
            refuse_real_inputs(config.model, config.federation.num_clients, public.common.public_dataset,
                               f"the public inputs of {public.common.public_dataset!r} (distillation.public_dataset)")
    check_policy(config)  # its options, then its own checks against the run
    objective_terms(config, ())  # the [objective] terms' names and options, and whether the protocol takes them
    check_attack(config)  # [attack]: whether the protocol has what the attack rewrites
    losses = base_losses()
    if config.client.loss not in losses:
        raise choice_error("client.loss", config.client.loss, list(losses))

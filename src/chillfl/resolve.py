"""The resolved config: every pluggable part's table with all of its options, defaults filled in.

A config file names a part (``[temperature] policy = "fedchill"``) and sets the
options it cares about; :func:`resolved` asks each part's own options dataclass,
through its family's public lookup, for the rest. What it returns is what
``--dry-run`` prints, what :func:`chillfl.make_config` returns and what a result
folder's ``config.toml`` records, so a run says which defaults it ran with.

Resolving never changes a run: every table is the dataclass the run parses, written
back field by field, so parsing the resolved table gives the very same options. An
option whose default is ``None`` ("unset": derived at run time, e.g. FedNova's
``momentum`` from ``client.momentum``) stays ``None`` here; TOML has no null, so the
written file omits it and rereading it leaves it unset again (docs/configuration.md).

One small function per family reads its table (:func:`dataset_table`,
:func:`partition_table`, :func:`model_table`, :func:`temperature_table`,
:func:`algorithm_table`, :func:`distillation_table`, :func:`prototypes_table`,
:func:`objective_table` for the loss terms):
a family that moves its lookup changes one line here. Tables that a file cannot
rebuild (``custom`` parts passed from Python, a partition read from a file,
per-client architectures) are kept as written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from chillfl.aggregation.registry import algorithm_options, algorithm_spec, wrapped
from chillfl.config import ObjectiveConfig, RunConfig
from chillfl.errors import ConfigError
from chillfl.data.augment import AUGMENT_KEY, split_augment
from chillfl.data.datasets import dataset_options
from chillfl.data.partition import partitioner_options
from chillfl.data.partition_file import FROM_FILE
from chillfl.plugins import is_custom
from chillfl.protocols.softlabels.public import as_public
from chillfl.models.assign import HETERO_KEYS
from chillfl.models.projection import PROJECTION_OPTION, EveryModelOptions
from chillfl.models.registry import model_options
from chillfl.numeric import is_real
from chillfl.settings.distillation import SECTION, DistillationSetup
from chillfl.settings.prototypes import PrototypeSettings
from chillfl.storage.results import unset_names
from chillfl.options import parse_options, require
from chillfl.temperature import policy_options, policy_spec
from chillfl.training.terms import entry_field, entry_name, term_spec


def option_table(options: Any) -> dict[str, Any]:
    """An options dataclass instance as its TOML table: every field a config may set, in declaration order."""
    return {f.name: _plain(getattr(options, f.name)) for f in dataclasses.fields(options) if f.init}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return option_table(value)
    return value


def dataset_table(table: Mapping[str, Any]) -> dict[str, Any]:
    """``[dataset]`` with the dataset's options and its ``[dataset.augment]`` sub-table complete."""
    name, options = RunConfig.component(table)
    if is_custom(name):
        return dict(table)
    rest, augment = split_augment(options)
    return {"name": name, **option_table(dataset_options(name, rest)), AUGMENT_KEY: option_table(augment)}


def partition_table(table: Mapping[str, Any]) -> dict[str, Any]:
    """``[partition]`` with the partitioner's options complete (a partition read from a file: as written)."""
    name, options = RunConfig.component(table)
    if name == FROM_FILE:
        return dict(table)
    return {"name": name, **option_table(partitioner_options(name, options))}


def model_table(table: Mapping[str, Any]) -> dict[str, Any]:
    """``[model]`` with the architecture's options complete.

    Per-client architectures (``assign`` / ``groups``) stay as written: clients share one
    template when their tables are equal as written, which filling in one table would change.
    """
    name, options = RunConfig.component(table)
    if is_custom(name) or any(key in table for key in HETERO_KEYS):
        return dict(table)
    own = {k: v for k, v in options.items() if k != PROJECTION_OPTION}
    # every model's option, not its own: filled in here with its default, as the model's are (it was left out unless set)
    projection = options.get(PROJECTION_OPTION, EveryModelOptions.projection_dim)
    return {"name": name, **option_table(model_options(name, own)), PROJECTION_OPTION: projection}


def temperature_table(table: Mapping[str, Any]) -> dict[str, Any]:
    """``[temperature]`` with the policy's options complete (a built-in's or a plugin's)."""
    name, options = RunConfig.component(table, "policy")
    if is_custom(name):
        return dict(table)
    return {"policy": name, **option_table(policy_options(policy_spec(name), name, options))}


def algorithm_table(table: Mapping[str, Any], section: str = "algorithm", field: str | None = None) -> dict[str, Any]:
    """``[algorithm]`` with the method's options complete; a wrapper's wrapped method's table too, recursively.

    A spec that wraps another (:attr:`AlgorithmSpec.wraps`, e.g. ``"base"``) names it in that option and
    takes its options in ``<wraps>_options``: that table is resolved against the wrapped method's own spec.
    """
    name, options = RunConfig.component(table)
    if is_custom(name):
        return dict(table)
    spec = algorithm_spec(name, section, field)
    parsed: Any = algorithm_options(spec, name, options, section, field)
    out = {"name": name, **option_table(parsed)}
    inner = wrapped(spec, parsed, section)
    if inner is not None:
        full = algorithm_table({**inner.options, "name": inner.name}, inner.section, inner.field)
        out[inner.section.rpartition(".")[2]] = {k: v for k, v in full.items() if k != "name"}
    return out


def distillation_table(setup: DistillationSetup | None) -> dict[str, Any]:
    """``[distillation]``: the options every soft-label method shares, then the method's own (empty: no soft labels)."""
    if setup is None:
        return {}
    common = option_table(setup.common)
    if setup.common.public_dataset is not None:
        common["public_dataset_options"] = public_dataset_table(setup.common.public_dataset, setup.common.public_dataset_options)
    return {**common, **option_table(setup.options)}


def public_dataset_table(name: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``[distillation] public_dataset_options`` completed as ``[dataset]`` is (:func:`dataset_table`), less the name.

    Why: the public dataset's defaults (hf's ``split_seed``, a generator's ``seed``, the ``augment`` sub-table) decide
    which rows form the pool, so config.toml writes them as it writes the private dataset's. A bad option is named
    under ``distillation.public_dataset_options``.
    """
    require("name" not in options, f"{SECTION}.public_dataset_options.name", "unknown option: public_dataset names the public dataset")
    try:
        table = dataset_table({**options, "name": name})
    except ConfigError as exc:
        raise as_public(exc) from None
    return {key: value for key, value in table.items() if key != "name"}


def prototypes_table(settings: PrototypeSettings | None) -> dict[str, Any]:
    """``[prototypes]``: the method, then its own options (empty: no prototype sharing)."""
    if settings is None:
        return {}
    return {"method": settings.method, **option_table(settings.options)}


def objective_table(objective: ObjectiveConfig) -> ObjectiveConfig:
    """``[objective]`` with every term of ``terms`` a table holding all of its options (a term without options: its name).

    A term is found as the run finds it (its registered name, import path or entry point: :func:`term_spec`),
    and its table is its options dataclass written back, so the run's terms are the same objects either way.
    """
    terms: list[str | dict[str, Any]] = []
    for i, entry in enumerate(objective.terms):
        field = entry_field("objective", i)  # the entry, as configured_terms names it
        name = entry_name(entry)
        spec = term_spec(name, field)
        given = {k: v for k, v in entry.items() if k != "name"} if isinstance(entry, Mapping) else {}
        table = option_table(parse_options(spec.options, given, field))
        terms.append({"name": name, **table} if table else name)
    return dataclasses.replace(objective, terms=tuple(terms))


def resolved(config: RunConfig) -> RunConfig:
    """``config`` with every part's table complete (see the module docstring); a ConfigError names any bad option.

    Idempotent, and the run of the result is bitwise the run of ``config``. A config that is complete
    already comes back as the same object: nothing is parsed again (runs and sweeps resolve what they get).
    """
    out = _completed(config)
    return config if out == config else out


def _completed(config: RunConfig) -> RunConfig:
    """:func:`resolved`, always a new object: one whose tables equal ``config``'s may still hold a number otherwise typed
    (``mu = 0`` equals ``mu = 0.0``), which :func:`held_options` reads."""
    return dataclasses.replace(
        config,
        dataset=dataset_table(config.dataset),
        partition=partition_table(config.partition),
        model=model_table(config.model),
        temperature=temperature_table(config.temperature),
        algorithm=algorithm_table(config.algorithm),
        distillation=distillation_table(config.distillation_setup),
        prototypes=prototypes_table(config.prototype_settings),
        objective=objective_table(config.objective),
    )


def held_options(config: RunConfig, given: Mapping[str, Any]) -> dict[str, Any] | None:
    """``given`` (options set in ``config``: a variant's overrides, a tuning point, a part's table; dotted keys or nested
    tables) with each number as ``config``'s parts hold it once resolved (``algorithm.mu = 0`` under FedProx: ``0.0``;
    IFCA's ``clusters = 2.0``: ``2``); None when ``config`` does not resolve (the run's own check names the option).

    Why: only a part's options class knows an option's type, and :func:`resolved` asks the one ``config`` selects
    (``algorithm.name`` of the variant or of the base). A value held otherwise than written (a number the option
    turned into another) stays as written: only the type of a number changes, never what it says.
    """
    try:
        held = _completed(config).to_dict()
    except ConfigError:
        return None
    return {key: _as_held(value, _at(held, key)) for key, value in given.items()}


def _as_held(given: Any, held: Any) -> Any:
    if isinstance(given, Mapping):
        return {key: _as_held(value, _at(held, key)) for key, value in given.items()}
    if isinstance(given, list) and isinstance(held, (list, tuple)) and len(held) == len(given):  # MLP's hidden = [16.0] is [16]: one label, one folder
        return [_as_held(value, one) for value, one in zip(given, held)]
    return held if is_real(given) and is_real(held) and held == given else given


def _at(table: Any, key: Any) -> Any:
    """The value at dotted ``key`` of nested ``table`` (None where there is none)."""
    for part in str(key).split("."):
        table = table.get(part) if isinstance(table, Mapping) else None
    return table


def added_options(written: Mapping[str, Any], config: RunConfig) -> dict[str, Any]:
    """The options ``config`` resolves to that a result folder's ``config.toml`` (``written``, as read) lacks, by dotted
    name, with the value each takes now: options chillfl added after the run started (FedPAC's ``unseen``, ``attack.local_dp``),
    which a resumed run takes at their defaults. Unset ones (``None``) are left out: TOML never wrote them."""
    return dict(_added(written, resolved(config).to_dict(), ()))


def _added(written: Any, now: Mapping[str, Any], keys: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    for key, value in now.items():
        if value is None or (not keys and key in ("variants", "compare", "tune")):
            continue
        where = (*keys, str(key))
        if not isinstance(written, Mapping) or key not in written:
            yield from _leaves(value, where)
        elif isinstance(value, Mapping):
            yield from _added(written[key], value, where)


def _leaves(value: Any, keys: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):  # a table added whole: each of its options
        for key, inner in value.items():
            if inner is not None:
                yield from _leaves(inner, (*keys, str(key)))
    else:
        yield ".".join(keys), value


def unset_options(config: RunConfig) -> list[str]:
    """The options of ``config``'s parts left unset (``None``: derived at run time), as ``section.option``: what the TOML form omits."""
    return unset_names(config.to_dict())


def is_default_table(part: str, table: Mapping[str, Any], name: str) -> bool:
    """Whether ``table`` is part ``part`` naming ``name`` with nothing but its defaults (as written or resolved)."""
    key = "policy" if part == "temperature" else "name"
    if not table or dict(table) == {key: name}:
        return True
    resolve = {"algorithm": algorithm_table, "temperature": temperature_table}[part]
    return dict(table) == resolve({key: name})

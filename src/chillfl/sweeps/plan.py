"""What a comparison runs: variants x tuning points x seeds, every run's config built and checked before any runs.

Variants come from a ``--grid`` (``key=v1,v2,...``, the cartesian product), from
``chillfl.compare(grid=...)`` or from the config's ``[variants.LABEL]`` tables.
Every variant runs at every seed (at a seed all variants share the partition and
the initial model, both drawn from that seed) and at every point of the
``[tune]`` grid; :mod:`chillfl.sweeps.run` then keeps each variant's best point
on the validation split (:mod:`chillfl.tune`).

Controls (``--controls``): for a variant trained at T != 1, the gradient of
CE(z / T) w.r.t. the logits is (softmax(z / T) - onehot) / T, i.e. 1/T times
larger than at T = 1 in scale. A gain of T < 1 may therefore be a larger step
size. Each such variant gets three controls: T = 1 at lr x 1/T (the same step
scale), and the magnitude-only (T = 1 softmax, gradient x 1/T) and
direction-only (T softmax, gradient x T) ablations at the same T.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chillfl.config import (RunConfig, apply_overrides, dotted_keys, inherited_note, check_compare_option, check_sweep_switches, config_from_dict, own_tune, parse_value, safe_name,
                            typed_grid, variant_config)
from chillfl.errors import ConfigError, MissingExtra, did_you_mean
from chillfl.numeric import is_real, is_whole
from chillfl.options import comma_items, option_type
from chillfl.resolve import held_options, resolved
from chillfl.temperature.policy import TemperaturePolicy
from chillfl.temperature.registry import constant_temperature
from chillfl.run_names import TEMPERATURE_SHORTHAND, folder_clash, run_folders, run_name, short_setting, suffixed, taken_name, variant_points
from chillfl.tune import SELECT_RULES, Point, is_local, parse_tune, point_label
from chillfl.wording import counted

MAX_VARIANTS = 1000
"""A grid's product is built and validated in memory before anything runs: bound it."""
MAX_RUNS = 10_000
"""Variants x tuning points x seeds: every run's config is built and validated up front."""

@dataclass
class Variant:
    label: str
    overrides: dict[str, Any]
    temperature: float | None = None
    lr_scale: float = 1.0
    """Multiplies ``client.lr`` after the variant and its tuning point are applied (the 1/T control)."""
    short: str | None = None
    """A grid variant's folder name from its values (``fedavg-lr0.01``); None: the label made a name."""
    tune: dict[str, list[Any]] = field(default_factory=dict)
    """Its own tuning grid (``[variants.LABEL.tune]``), crossed with the shared one for this variant alone."""
    own: bool = False
    """The config itself as the one variant (:func:`own_variant`), not a variant the config or a grid declares."""
    control: bool | None = False
    """A step-size control :func:`with_controls` added, not a variant the comparison was asked for: the comparison's
    ``config.toml`` records it as ``compare.controls``, not as a row, and its table says it is controlled. Kept here, not
    inferred from ``lr_scale``, which a variant asked for may set itself. None: not recorded (the ``sweep.json`` of an
    older chillfl), inferred then as that chillfl did (:attr:`Plan.controls_recorded`)."""


@dataclass
class CompareOptions:
    """What ``compare`` runs beyond the variants; None fields fall back to the config's ``[compare]``/``[tune]``."""

    seeds: list[int] | None = None
    tune: dict[str, list[Any]] | None = None
    controls: bool | None = None
    select: str | None = None


def parse_grid(items: Sequence[str], base: RunConfig | None = None) -> list[Variant]:
    """``key=v1,v2,...`` items -> the cartesian product of variants of ``base`` (:func:`grid_variants`)."""
    axes: list[tuple[str, list[Any]]] = []
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or not key or not values.strip():
            raise ConfigError("--grid", f"expected key=v1,v2,... got {item!r}")
        axes.append((key, [parse_value(v, "--grid") for v in comma_items(values, "--grid", f"{key}=v1,v2,...")]))
    return grid_variants(axes, base)


def temperature_text(value: float) -> str:
    """T as a label shows it: ``:g`` (``0.5``, ``1``), unless six significant digits would round it, when every digit
    shows (``0.1234561``): else two temperatures of a grid that differ past the sixth digit had one label."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def grid_variants(axes: Sequence[tuple[str, Sequence[Any]]], base: RunConfig | None = None) -> list[Variant]:
    """The cartesian product of ``(key, values)`` axes as variants of ``base`` (``chillfl.compare(grid=...)`` passes typed values).

    ``temperature=...`` is shorthand for ``temperature.policy="fixed"`` with
    ``temperature.value`` set (T = 1 is the plain softmax). A value of a typed option is taken as the option holds it
    (:func:`~chillfl.config.typed_grid`) before it labels, names or is recorded: ``client.lr=0`` and ``client.lr=0.0``
    are one variant, ``client.lr=0.0``, with one folder and one ``sweep.json``, as a ``[tune]`` grid's values are; so is
    a part's own option, as the part the variant's config selects holds it (:func:`typed_variant`: ``algorithm.mu=0``
    of FedProx is ``algorithm.mu=0.0``). Without ``base``, a part's own option is taken as written.
    """
    keys = [key for key, _ in axes]
    for key in keys:  # else the later axis overrode the earlier in every variant, whose label still named both values
        if keys.count(key) > 1:
            raise ConfigError("--grid", f"{key} is given twice; give all its values in one item ({key}=v1,v2,...)")
    typed = typed_grid({key: list(values) for key, values in axes if key != TEMPERATURE_SHORTHAND})
    size = math.prod(len(values) for _, values in axes)
    if size > MAX_VARIANTS:
        raise ConfigError("--grid", f"{' x '.join(str(len(v)) for _, v in axes)} = {size} variants; at most {MAX_VARIANTS}")
    variants = []
    for combo in itertools.product(*([(key, value) for value in typed.get(key, values)] for key, values in axes)):
        overrides: dict[str, Any] = {}
        temp = None
        for key, value in combo:
            if key == TEMPERATURE_SHORTHAND:
                if not is_real(value) or value <= 0:
                    raise ConfigError("--grid temperature", f"values must be numbers > 0, got {value!r}")
                overrides["temperature"] = {"policy": "fixed", "value": float(value)}
                temp = float(value)
            else:
                overrides[key] = value
        if base is not None and _retypable({key: value for key, value in combo if key != TEMPERATURE_SHORTHAND}):  # T: a float already
            overrides = typed_variant(base, overrides)
        named = [(key, value if key == TEMPERATURE_SHORTHAND else overrides[key]) for key, value in combo]
        labels = [f"T={temperature_text(float(value))}" if key == TEMPERATURE_SHORTHAND else f"{key}={value}" for key, value in named]
        short = "-".join(short_setting(key, value) for key, value in named)
        variants.append(Variant(", ".join(labels), overrides, temp, short=short))
    labels = [v.label for v in variants]
    if len(set(labels)) != len(labels):  # "1,1.0" too: both are T=1
        twice = next(label for label in labels if labels.count(label) > 1)
        raise ConfigError("--grid", f"duplicate values: two variants would both be {twice}")
    return variants


def typed_variant(base: RunConfig, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A variant's overrides with each number of a part's own option as the part its config selects holds it
    (:func:`~chillfl.resolve.held_options`: ``algorithm.mu = 0`` under FedProx is ``0.0``, IFCA's ``algorithm.clusters = 2.0``
    is ``2``), its own grid (``tune``) too (:func:`typed_tune`). A variant that does not build, or a value its option
    refuses, is left as written, for the variant's own check to name.

    Why: ``algorithm.mu=0`` and ``algorithm.mu=0.0`` run the same runs, and were two labels, two folders and two ``sweep.json``.
    """
    if not _retypable(overrides):
        return dict(overrides)
    try:
        applied = variant_config(base, "variant", overrides)
    except ConfigError:
        return dict(overrides)
    typed = held_options(applied, overrides)
    if typed is None:
        return dict(overrides)
    if isinstance(overrides.get("tune"), Mapping):
        typed["tune"] = typed_tune(overrides["tune"], [applied])
    return typed


def typed_tune(grid: Mapping[str, Any], configs: Sequence[RunConfig]) -> dict[str, Any]:
    """A tuning grid with each number of a part's own option as the first of ``configs`` (the variants it tunes) to take
    the value holds it (:func:`~chillfl.resolve.held_options`); a value none takes is left as written, for its point to name."""
    return {key: [_held_point(key, value, configs) for value in values] if isinstance(values, list) else values
            for key, values in grid.items()}


def _held_point(key: str, value: Any, configs: Sequence[RunConfig]) -> Any:
    if not _retypable({key: value}):
        return value
    for config in configs:
        try:
            typed = held_options(config.with_overrides({key: value}), {key: value})
        except ConfigError:
            continue
        if typed is not None:
            return typed[key]
    return value


def _retypable(table: Mapping[str, Any], prefix: str = "") -> bool:
    """Whether ``table`` (overrides or a grid; dotted keys or nested tables) sets an option :class:`RunConfig` does not type
    (a part's own) to a whole number, ``0`` or ``2.0``: the only numbers an option's type changes (:func:`~chillfl.options.coerce`).
    A variant or point without one is not built again to type it."""
    for key, value in table.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            if _retypable(value, "" if not prefix and key == "tune" else f"{path}."):
                return True
        elif option_type(RunConfig, path) is None and any(is_whole(v) or (isinstance(v, float) and v.is_integer())
                                                          for v in (value if isinstance(value, list) else [value])):
            return True
    return False


def typed_comparison(config: RunConfig) -> RunConfig:
    """``config`` as a comparison records it (its ``config.toml``, whose SHA-256 ``sweep.json`` holds): each number of its parts'
    own options, of its variants' overrides and grids and of its ``[tune]`` grid as the option holds it
    (:func:`typed_variant`, :func:`typed_tune`), so ``[algorithm] mu = 0`` and ``mu = 0.0`` are one comparison. A config or
    variant that does not build is left as written, for the plan's own check to name."""
    parts = {"dataset": config.dataset, "partition": config.partition, "model": config.model, "temperature": config.temperature,
             "algorithm": config.algorithm, "distillation": config.distillation, "prototypes": config.prototypes}
    tables = [table for table in config.variants.values() if isinstance(table, dict)]
    if not (_retypable(parts) or _retypable(config.tune) or any(_retypable(table) for table in tables)):
        return config
    held = (held_options(config, parts) if _retypable(parts) else None) or parts
    variants = {label: typed_variant(config, table) if isinstance(table, dict) else table for label, table in config.variants.items()}
    tune = dict(config.tune)
    if _retypable(tune):
        built = []
        for label, table in variants.items():
            try:
                built.append(variant_config(config, str(label), table))
            except ConfigError:
                continue
        tune = typed_tune(tune, built or [config])
    try:
        return dataclasses.replace(config, dataset=held["dataset"], partition=held["partition"], model=held["model"],
                                   temperature=held["temperature"], algorithm=held["algorithm"], distillation=held["distillation"],
                                   prototypes=held["prototypes"], variants=variants, tune=tune)
    except ConfigError:
        return config


def variants_from_config(config: RunConfig) -> list[Variant]:
    """The ``[variants.LABEL]`` tables of a config: each a set of overrides (nested tables replace whole parts)."""
    out = []
    if len(config.variants) > MAX_VARIANTS:
        raise ConfigError("variants", f"{len(config.variants)} variants; at most {MAX_VARIANTS}")
    for label, table in config.variants.items():
        if not isinstance(table, dict):
            raise ConfigError(f"variants.{label}", "must be a table of overrides")
        temp = table.get("temperature", {})
        overrides = {k: v for k, v in table.items() if k != "tune"}
        try:
            tune = own_tune(config.tune, table.get("tune"))
        except ConfigError as exc:
            raise ConfigError(f"variants.{label}.{exc.field}", exc.message) from None
        out.append(Variant(str(label), overrides, constant_temperature(temp) if isinstance(temp, dict) else None, tune=tune))
    return out


def chosen_variants(config: RunConfig, labels: Sequence[str]) -> RunConfig:
    """``config`` with only the ``[variants]`` that ``labels`` name (``--variant``, repeatable), in the config's own order.

    Why: rerunning a few rows of a large comparison (35 variants in ``pfl/dirichlet-digits``) meant copying its
    tables into a config of one's own. The kept config is what the comparison saves, so ``chillfl resume`` goes on
    with the same rows. A ``[compare]`` baseline or reference left out is refused: the table would lose what its
    differences and targets are measured against.
    """
    _check_labels(config, labels)
    kept = {label: table for label, table in config.variants.items() if label in labels}
    for key in ("baseline", "reference"):
        named = config.compare.get(key)
        if named is not None and named not in kept:
            raise ConfigError("--variant", f"{config.name}'s [compare] {key} is {named!r}: choose it too (--variant {named!r}), or set compare.{key}")
    return dataclasses.replace(config, variants=kept)


def _check_labels(config: RunConfig, labels: Sequence[str]) -> None:
    if not config.variants:
        raise ConfigError("--variant", f"{config.name} defines no [variants] to choose from")
    unknown = [label for label in labels if label not in config.variants]
    if unknown:
        raise ConfigError("--variant", f"no variant {unknown[0]!r} in {config.name}{did_you_mean(unknown[0], list(config.variants))}; "
                                       f"its variants: {', '.join(map(repr, config.variants))}")


def one_variant(config: RunConfig, label: str, overrides: Mapping[str, Any], swept: Iterable[str] = ()) -> RunConfig:
    """Variant ``label`` of ``config`` as one run, named ``NAME-LABEL``, with the command line's ``overrides`` applied after it.

    ``chillfl run CONFIG --variant LABEL --seed N``: the row's run at that seed; the comparison's seeds and tuning
    grids are set aside, as ``--seed`` sets them aside for a config without variants. The overrides come last, so
    that they can set the variant's own options (``algorithm.lam`` of a variant whose method has it).
    """
    _check_labels(config, [label])
    data = variant_config(config, label, config.variants[label]).to_dict()  # its own tuning grid checked, not applied
    data["name"] = safe_name(f"{config.name}-{label}")
    apply_overrides(data, overrides)
    return config_from_dict(data, swept)


def check_select_used(config: RunConfig, options: CompareOptions, field: str = "--select") -> None:
    """A tuning rule asked for by name (``--select``, ``select=``, ``[compare] select``) for a comparison with no tuning grid
    anywhere (``--tune``, ``[tune]``, a variant's own): one ConfigError on the field that named it, where it was accepted and
    changed nothing. Called where the user's options come in, not in the planning, which a resumed or sharded comparison's
    saved options reach too."""
    select = options.select if options.select is not None else config.compare.get("select")
    if select is None or options.tune or config.tune or any(isinstance(t, Mapping) and t.get("tune") for t in config.variants.values()):
        return
    if options.select is None:
        raise ConfigError("compare.select", f"{select!r} picks each variant's tuning point, and this comparison tunes nothing; "
                                            "give a tuning grid (a [tune] table or --tune KEY=V1,V2), or drop select from [compare]")
    raise ConfigError(field, f"{select!r} picks each variant's tuning point, and this comparison tunes nothing; "
                             f"give a tuning grid ({'--tune KEY=V1,V2' if field == '--select' else 'tune='} or a [tune] table), or drop {field}")


def repeats(config: RunConfig) -> bool:
    """Whether a config with no ``[variants]`` is still a comparison's: it has a ``[compare]`` table (seeds, controls, ...) or a ``[tune]`` grid.

    ``chillfl run`` runs such a config as a comparison of one variant (mean ± std and CI over
    the seeds, the lr tuned on the validation split, controls added), not as one run at
    ``seed`` that would drop both tables silently.
    """
    return not config.variants and bool(config.compare or config.tune)


def own_variant(config: RunConfig) -> Variant:
    """The config itself as the one variant of a comparison, labelled with its name."""
    return Variant(config.name, {}, constant_temperature(config.temperature), own=True)


def apply_variant(config: RunConfig, variant: Variant) -> RunConfig:
    """The config of one variant; a nested table for a pluggable part replaces that part whole."""
    return variant_config(config, variant.label, variant.overrides)


def data_key(config: RunConfig) -> str:
    """What decides the federated data: variants with the same key share one partition."""
    parts = [
        config.dataset, config.partition, config.seed, config.federation.num_clients, config.eval.client_split,
        config.eval.client_split_size, config.eval.clients, config.distillation.get("public_size", 0), config.data_dir,
        config.eval.validation,
    ]
    return json.dumps(parts, sort_keys=True, default=str)


RUN_LEVEL_KEYS = frozenset(f.name for f in dataclasses.fields(RunConfig) if f.default is not dataclasses.MISSING)
"""The config's top-level values (``data_dir``, ``device``), not tables: a variant that does not set one runs with the
config's, so an error on it is named as the file (or the command line) writes it, not under ``variants.LABEL``."""


@contextmanager
def naming(variant: Variant, from_grid: bool) -> Iterator[None]:
    """Name the variant a ConfigError comes from: ``variants.x.client.lr``, or "(grid variant x)" after a grid's message.

    Every variant of a grid or a ``[variants]`` table is named, also one that overrides nothing (where a shared
    ``[tune]`` key fails for it: ``tune.<key>``, where the file writes it, then "(for variant x)"; so is a top-level
    value it does not set, :data:`RUN_LEVEL_KEYS`: ``data_dir``, then "(for variant x)"). The config itself as the one variant (:func:`own_variant`) adds no name: the
    error is the config's.
    """
    label = variant.label
    try:
        yield
    except MissingExtra:  # a missing package, not a bad value of the variant: its one line as it is
        raise
    except ConfigError as exc:
        if variant.own or exc.message.endswith((f" (grid variant {label})", f" (for variant {label})")):  # named by an inner scope already
            raise
        message = exc.message + inherited_note(exc.field, variant.overrides)
        if from_grid:
            raise ConfigError(exc.field, f"{message} (grid variant {label})") from None
        if exc.field.startswith(f"variants.{label}."):
            raise
        tuned = exc.field.removeprefix("tune.")
        if exc.field.startswith("tune.") and not any(_nested(tuned, k) or _nested(k, tuned) for k in variant.tune):
            raise ConfigError(exc.field, f"{message} (for variant {label})") from None  # the shared [tune]'s key, where it is written
        if exc.field in RUN_LEVEL_KEYS and exc.field not in variant.overrides:  # data_dir: the config's value, not in the variant's table
            raise ConfigError(exc.field, f"{message} (for variant {label})") from None
        raise ConfigError(f"variants.{label}.{exc.field}", message) from None


def parse_seeds(text: str) -> list[int]:
    """``--seeds 0,1,2`` (or ``0-4``) -> [0, 1, 2]; checked like ``[compare] seeds``."""
    seeds: list[int] = []
    for part in comma_items(text, "--seeds", "integers like 0,1,2 or 0-4"):
        lo, dash, hi = part.partition("-")
        try:
            first, last = (int(lo), int(hi)) if dash and lo else (int(part), int(part))
        except ValueError:
            raise ConfigError("--seeds", f"expected integers like 0,1,2 or 0-4, got {text!r}") from None
        if last < first:  # range() made it empty, and the line said "got []"
            raise ConfigError("--seeds", f"the range {part} counts down; give {last}-{first}")
        seeds.extend(range(first, last + 1))
    try:
        check_compare_option("seeds", seeds)
    except ConfigError as exc:
        raise ConfigError("--seeds", exc.message) from None
    return seeds


def parse_tune_items(items: Sequence[str]) -> dict[str, list[Any]]:
    """``--tune client.lr=0.01,0.1`` items -> a ``[tune]`` table.

    A mistake in one option's values names it as the ``[tune]`` table it becomes (``tune.client.lr``, as every later
    check of its values and the Python API's ``tune=`` name it); one in the flag's own shape names ``--tune``.
    """
    out: dict[str, list[Any]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or not key or not values.strip():
            raise ConfigError("--tune", f"expected key=v1,v2,... got {item!r}")
        if key in out:  # else the later item's values replaced the earlier's, with nothing said
            raise ConfigError("--tune", f"{key} is given twice; give all its values in one item ({key}=v1,v2,...)")
        out[key] = [parse_value(v, f"tune.{key}") for v in comma_items(values, "--tune", f"{key}=v1,v2,...")]
    try:
        parse_tune(out)
    except ConfigError as exc:  # the grid as a whole (its point count): the flag
        if exc.field != "tune":
            raise
        raise ConfigError("--tune", exc.message) from None
    return out


def with_controls(config: RunConfig, variants: Sequence[Variant], shared: Mapping[str, Any] | None = None, built: Sequence[RunConfig] = ()) -> list[Variant]:
    """``variants`` plus, for each one trained at a fixed T != 1 with the standard loss, its step-size controls.

    (1) T = 1 at lr x 1/T: the same gradient scale without the sharper softmax;
    (2) magnitude only (T = 1 softmax, gradient x 1/T) and (3) direction only
    (softmax at T, gradient x T) at the same T (FedChill Table 5's ablations).
    ``shared``: the shared tuning grid; one that tunes such a variant's temperature is refused (below).
    ``built``: ``apply_variant(config, v)`` of the first variants, in order, already built (:func:`plan_sweep` has them).
    """
    out = list(variants)
    labels = {v.label for v in variants}
    for i, v in enumerate(variants):
        t = v.temperature
        if t is None or not gets_controls(v, built[i] if i < len(built) else apply_variant(config, v)):
            continue
        _refuse_tuned_temperature(v, shared or {})
        rest = {k: val for k, val in v.overrides.items() if k != "temperature"}
        name = v.short or safe_name(v.label)
        for control in (
            Variant(f"T=1, lr x {1 / t:g} (control of {v.label})", {**rest, "temperature": {"policy": "none"}}, None, v.lr_scale / t, f"{name}-T1-lrx{1 / t:g}", v.tune,
                    control=True),
            Variant(f"{v.label} magnitude only", {**v.overrides, "client.loss": "magnitude_only"}, None, v.lr_scale, f"{name}-magnitude", v.tune, control=True),
            Variant(f"{v.label} direction only", {**v.overrides, "client.loss": "direction_only"}, None, v.lr_scale, f"{name}-direction", v.tune, control=True),
        ):
            if control.label not in labels:
                out.append(control)
                labels.add(control.label)
    return out


def gets_controls(variant: Variant, config: RunConfig) -> bool:
    """Whether :func:`with_controls` gives ``variant`` (built: ``config``) its step-size controls: one fixed T != 1, the standard loss."""
    return variant.temperature is not None and variant.temperature != 1.0 and config.client.loss == "standard"


def left_without_controls(variants: Sequence[Variant], configs: Sequence[RunConfig], policy: TemperaturePolicy | None = None) -> list[str]:
    """The labels of the chilled variants that :func:`with_controls` cannot control: the standard loss under a policy
    that sets T per client or round (FedChill's decay), so there is no one T to scale the lr by. Their step-size caveat
    stays under a controlled table (:func:`~chillfl.report.caveats.step_size_caveat`). ``policy``: the one passed from
    Python, read for its declared ``trains_at`` (:func:`constant_temperature`)."""
    return [v.label for v, c in zip(variants, configs) if c.client.loss == "standard" and constant_temperature(c.temperature, policy) is None]


def _refuse_tuned_temperature(variant: Variant, shared: Mapping[str, Any]) -> None:
    """A grid that tunes a chilled variant's temperature cannot have its controls: the lr control's x 1/T is the table's T.

    Why: at a point with another T (``temperature.value = 0.25`` for a variant of T = 0.5) the control ran
    at lr x 2, not x 4, and compared the chilled run with a control of another step size, silently.
    """
    for key in (*shared, *variant.tune):
        if key == TEMPERATURE_SHORTHAND or key.startswith(f"{TEMPERATURE_SHORTHAND}."):
            field = f"variants.{variant.label}.tune.{key}" if key in variant.tune else f"tune.{key}"
            raise ConfigError(field, f"tunes the temperature of {variant.label!r}, whose step-size controls (compare.controls) scale the lr by its "
                                     f"own T = {variant.temperature:g}: give each T its own variant (e.g. --grid temperature=0.5,0.25), or no controls")


def choose_reference(
    variants: Sequence[Variant], reference: str | None, baseline: str | None = None, reference_field: str = "--reference"
) -> tuple[Variant, Variant]:
    """(target-setting reference, baseline) variants; ``reference_field`` names where ``reference`` came from."""
    by_label = {v.label: v for v in variants}
    if baseline is not None and baseline not in by_label:
        raise ConfigError("compare.baseline", f"unknown variant {baseline!r}{did_you_mean(baseline, list(by_label))}; allowed: {', '.join(by_label)}")
    temps = [v for v in variants if v.temperature is not None]
    if reference is not None:
        if reference not in by_label:
            raise ConfigError(reference_field, f"unknown variant {reference!r}{did_you_mean(reference, list(by_label))}; allowed: {', '.join(by_label)}")
        ref = by_label[reference]
    elif temps:
        ref = max(temps, key=lambda v: v.temperature or 0.0)
    else:
        ref = variants[0]
    base = by_label[baseline] if baseline else next((v for v in temps if v.temperature == 1.0), variants[0])
    return ref, base


@dataclass
class Cell:
    """One run of a comparison: a variant at a tuning point and a seed."""

    variant: Variant
    point: int
    seed: int
    config: RunConfig

    @property
    def key(self) -> tuple[str, int, int]:
        """(variant label, tuning point, seed): the run's key in a sweep's results."""
        return (self.variant.label, self.point, self.seed)


def _nested(field: str, key: str) -> bool:
    """Whether ``field`` is ``key`` or an entry under it (``objective.terms.ntd.beta`` under ``objective.terms.ntd``)."""
    return field == key or field.startswith(key + ".")


def cell_config(config: RunConfig, variant: Variant, point: Mapping[str, Any], seed: int, suffix: bool, long: bool = False,
                applied: RunConfig | None = None) -> RunConfig:
    """The variant's config at a tuning point and seed, named by :func:`run_name` (with the point and seed when ``suffix``).

    ``applied``: ``apply_variant(config, variant)`` already built (:attr:`Plan.configs`: once a variant, not once a run).
    """
    cfg = apply_variant(config, variant) if applied is None else applied
    name = run_name(variant, point, seed, long) if suffix else run_name(variant, {}, None, long)
    try:
        cfg = cfg.with_overrides({**point, "seed": seed, "name": name})
    except ConfigError as exc:
        if exc.field.startswith("tune") or any(_nested(exc.field, k) or _nested(k, exc.field) for k in point):  # a tuned key: [tune]'s
            raise ConfigError(exc.field if exc.field.startswith("tune") else f"tune.{exc.field}", exc.message) from None
        # another field, which this point's value made wrong (lr_min >= a tuned lr): named as it is, with the point
        where = ", ".join(f"{k}={v}" for k, v in point.items())
        raise ConfigError(exc.field, f"{exc.message} (tuning point {where})") from None
    try:  # a part's options (algorithm.beta) are parsed only when the run is built, where the [tune] it came from is lost
        resolved(cfg)
    except MissingExtra:  # a missing package, not the tuned value: said where the run is built
        pass
    except ConfigError as exc:
        if any(_nested(exc.field, k) for k in point):
            raise ConfigError(f"tune.{exc.field}", exc.message) from None  # a variant's: naming() puts variants.L. in front
        # not a tuned key: the variant's or the config's own, named where the run is built
    if variant.lr_scale != 1.0:
        cfg = cfg.with_overrides({"client.lr": cfg.client.lr * variant.lr_scale})
    return cfg


def plan_sweep(
    config: RunConfig, grid: Sequence[str], options: CompareOptions | None = None, variants: Sequence[Variant] | None = None,
    policy: TemperaturePolicy | None = None,
) -> tuple[list[Variant], CompareOptions]:
    """The comparison's variants (``grid``, else ``variants``, else the config's; controls added) and its options with
    every default filled in (seeds, tuning table, selection rule): what ``sweep.json`` records. Every variant is
    checked here, before anything runs; errors name the variant. ``policy``: the temperature policy passed from Python
    (``chillfl.compare(policy=...)``), whose declared ``trains_at`` a ``custom`` [temperature] is read for."""
    planned, saved, _ = _plan_sweep(config, grid, options, variants, policy)
    return planned, saved


def _plan_sweep(config: RunConfig, grid: Sequence[str], options: CompareOptions | None, variants: Sequence[Variant] | None,
                policy: TemperaturePolicy | None = None) -> tuple[list[Variant], CompareOptions, list[RunConfig]]:
    """:func:`plan_sweep`, with the configs it built to check the variants: the first of the planned variants', in
    order (the controls after them are built by :func:`variant_configs`). Each variant's config is built once a plan."""
    opts = options or CompareOptions()
    from_grid = bool(grid) or variants is not None
    config = typed_comparison(config)  # its variants and [tune] as its config.toml records them
    if variants is None:
        variants = parse_grid(grid, config) if grid else variants_from_config(config)
    planned = list(variants)
    if not planned and (opts.seeds is not None or opts.tune or repeats(config)):
        planned = [own_variant(config)]  # one method over seeds and tuning points: a comparison of one
    if not planned:
        raise ConfigError("--grid", "give at least one key=v1,v2,..., define [variants.LABEL] tables in the config, or give seeds (--seeds) or a tuning grid")
    seeds = opts.seeds if opts.seeds is not None else list(config.compare.get("seeds", [config.seed]))
    tune_table = typed_grid(opts.tune) if opts.tune is not None else dict(config.tune)  # --tune, tune=: typed as the config's [tune] is
    # a variant's own grid tunes too: without a validation split it is refused here, not after every run ran
    tuned = len(parse_tune(tune_table)) > 1 or bool(tune_table) or any(v.tune for v in planned)
    select = opts.select or config.compare.get("select", "final")
    if select not in SELECT_RULES:
        raise ConfigError("--select", f"unknown rule {select!r}; allowed: {', '.join(SELECT_RULES)}")
    if tuned:
        check_selectable(config, select)
    checked, built = [], []
    for v in planned:  # validates every variant before running any; errors name the variant
        with naming(v, from_grid):
            own = apply_variant(config, v)
            if tuned:  # a variant's own eval.validation = 0 (or eval.clients = "none") failed selection after every run ran
                check_selectable(own, select)
                check_global_model(own, select)
        # the temperature it trains at, also where it comes from the base config or a dotted key: a chilled variant gets
        # its step-size controls and the reference sees it, whatever table set its T (a policy passed from Python too)
        checked.append(dataclasses.replace(v, temperature=constant_temperature(own.temperature, policy)))
        built.append(own)
    planned = checked
    tune_table = typed_tune(tune_table, built)  # --tune too, and a part's own option as the variants' parts hold it
    if tuned and not is_local(select):  # a tuning point may take the global model away (fedhkd's share_model = false)
        for v, own in zip(planned, built):
            with naming(v, from_grid):
                for point in variant_points(tune_table, v):
                    try:
                        pointed = own.with_overrides(point) if point else own
                    except ConfigError:  # a point this variant refuses: the checks below name its tune key
                        continue
                    check_global_model(pointed, select, point)
    # a swept option of an off table ([privacy], [attack]) that no variant switches on changes no run: refused as in a file
    check_sweep_switches(built, [*dotted_keys(v.overrides for v in planned), *tune_table, *dotted_keys(v.tune for v in planned)])
    if opts.controls if opts.controls is not None else config.compare.get("controls", False):
        controlled = with_controls(config, planned, tune_table, built)
        if len(controlled) == len(planned):  # asked for, none added: the table would look controlled and is not
            raise ConfigError("--controls" if opts.controls is not None else "compare.controls",
                              "adds step-size controls to the variants trained at a fixed T != 1 with the standard loss, and no variant is; "
                              "compare temperatures (e.g. --grid temperature=1,0.05) or leave the controls out")
        planned = controlled
    return planned, CompareOptions(seeds=list(seeds), tune=tune_table, controls=False, select=select), built  # the variants carry the controls


def check_selectable(config: RunConfig, select: str) -> None:
    """Refuse a tuned run whose records will not have what ``select`` reads: ``val_acc`` needs a validation split,
    ``local_val_acc`` the clients' splits too."""
    if config.eval.validation <= 0:
        raise ConfigError("eval.validation", "tuning selects on the server validation split; set eval.validation > 0 (e.g. eval.validation=0.1)")
    if is_local(select) and config.eval.clients == "none":
        raise ConfigError("eval.clients", f"select = {select!r} scores the clients' own models on their own validation splits; set eval.clients = 'sampled' or 'all'")


def check_global_model(config: RunConfig, select: str, point: Point | None = None) -> None:
    """Refuse a global rule (``final``, ``best``) for a run that keeps no global model: it records no ``val_acc``, and
    selection failed only after every point of the grid had trained. The protocol says whether its method keeps one."""
    from chillfl.protocols.registry import protocol_of

    kind = protocol_of(config)
    if is_local(select) or kind.global_model(config):
        return
    raise ConfigError("compare.select", f"{select!r} selects on val_acc, a global model's validation accuracy, and {kind.title} method "
                                        f"{kind.method(config)!r} keeps no global model{_at_point(point)} (each client keeps its own), so it records no val_acc; "
                                        f"use select = {' or '.join(repr(r) for r in SELECT_RULES if is_local(r))} (each client's own model on its own validation split)")


def _at_point(point: Point | None) -> str:
    """`` at tuning point k=v`` for a refusal that only one point of the grid earns."""
    return f" at tuning point {point_label(point)}" if point else ""


@dataclass(frozen=True)
class Plan:
    """A comparison planned and checked: its variants, options (every default filled in), runs and reference."""

    variants: list[Variant]
    options: CompareOptions
    """As ``sweep.json`` records them (:func:`plan_sweep`)."""
    points: list[Point]
    """The tuning grid's points in order (``[{}]`` without tuning)."""
    cells: list[Cell]
    """Every run, variant by variant, then point by point, then seed by seed: the order they run in."""
    reference: Variant
    """Its best accuracy is the target the other variants' rounds are counted to."""
    baseline: Variant
    """Differences and speed-ups are relative to it."""
    from_grid: bool
    """The variants came from a grid (their errors say "grid variant"), not from ``[variants]``."""
    configs: list[RunConfig]
    """Each variant's config (:func:`apply_variant`), in the order of ``variants``: built once, read by the runs' cells and the table's caveats."""
    asked_reference: str | None
    """The reference it was planned with (``--reference``; None: the config's or the default), as ``sweep.json`` records it."""

    @property
    def seeds(self) -> list[int]:
        return self.options.seeds or []

    @property
    def tune_table(self) -> dict[str, list[Any]]:
        return self.options.tune or {}

    @property
    def select(self) -> str:
        return self.options.select or "final"

    @property
    def tuned(self) -> bool:
        """Each variant keeps its best tuning point on validation."""
        return len(self.points) > 1 or bool(self.tune_table) or any(v.tune for v in self.variants)

    def points_of(self, variant: Variant) -> list[Point]:
        """The variant's tuning points: the shared grid's, crossed with its own grid (its keys vary fastest)."""
        return variant_points(self.tune_table, variant)

    @property
    def controls_recorded(self) -> bool:
        """Whether each variant says if it was asked for or added as a step-size control (:attr:`Variant.control`); False
        only for a plan read from an older chillfl's ``sweep.json``, which did not record it."""
        return all(v.control is not None for v in self.variants)

    @property
    def asked(self) -> list[Variant]:
        """The variants the comparison was asked for, without the step-size controls added after them (all of them where
        that is not recorded: :func:`chillfl.sweeps.record.as_planned` infers them then, as chillfl did)."""
        return [v for v in self.variants if not v.control]

    @property
    def controls_added(self) -> bool:
        """Whether :func:`with_controls` added step-size controls; of an older ``sweep.json`` that does not record it,
        inferred as chillfl did: a variant whose lr is scaled."""
        if self.controls_recorded:
            return any(v.control for v in self.variants)
        return any(v.lr_scale != 1.0 for v in self.variants)

    @property
    def multi(self) -> bool:
        """The table over seeds (mean, CI, paired differences), not FLex&Chill's Table 4."""
        return self.tuned or len(self.seeds) > 1


def plan_cells(
    config: RunConfig, variants: Sequence[Variant], configs: Sequence[RunConfig], shared: Mapping[str, Any], seeds: Sequence[int], suffix: bool, from_grid: bool,
    existing: bool | Path = False,
) -> list[Cell]:
    """Every run's config; short folder names (``fedavg-lr0.01-s0``), or the full labels if two short ones collide (in
    case too: macOS's and Windows' file systems ignore it, :func:`~chillfl.run_names.folder_clash`) or one is a name the
    comparison's folder keeps (its ``curves.png``, a ``NAME.partial``: :func:`~chillfl.run_names.taken_name`), as
    :func:`~chillfl.run_names.run_labels` reads them back; ConfigError (one line) when the full labels do too.
    ``configs``: each variant's config, in order (:func:`variant_configs`): built once a variant, not once a run.
    ``existing``: the comparison's folder exists (a resume, ``status``): where even the full labels are kept names, the
    short ones it was started with before that rule (names clashing only in the comparison's own files) are planned,
    not refused: its folder is read or finished as it was begun. ``existing`` as that folder's path: names that fold
    alike (:func:`~chillfl.run_names.folder_key`) but whose runs' folders it holds apart are planned too, as an older
    chillfl named them (``lr-ı`` and ``lr-i``: ``str.casefold`` kept them apart); a new comparison keeps the strict fold."""
    cells: list[Cell] = []
    short: list[Cell] = []
    for long in (False, True):
        cells = []
        for v, applied in zip(variants, configs):
            with naming(v, from_grid):
                for pi, point in enumerate(variant_points(shared, v)):
                    for seed in seeds:
                        cells.append(Cell(v, pi, seed, cell_config(config, v, point, seed, suffix, long, applied)))
        names = [c.config.name for c in cells]
        clash, taken = folder_clash(names), taken_name(names)
        if clash is None and taken is None:
            return cells
        if not long:
            short = cells
    if existing and folder_clash(c.config.name for c in short) is None:
        return short
    if isinstance(existing, Path):  # names that fold alike but whose runs' folders stand apart on disk: the folder as begun
        kept = run_folders(existing)
        for begun in (short, cells):
            if folder_clash((c.config.name for c in begun), kept) is None:
                return begun
    if clash is None:  # the full labels are free of each other, but one is the comparison's own (a file, a run's unfinished folder)
        assert taken is not None
        name, what = taken
        labels = ", ".join(dict.fromkeys(repr(c.variant.label) for c in cells if c.config.name == name))
        raise ConfigError("variants", f"{labels} names a run's folder {name!r}, which the comparison's folder keeps for {what}; give it another label")
    first, second = clash  # the full labels collide too: two runs would write one folder
    labels = ", ".join(dict.fromkeys(repr(c.variant.label) for c in cells if c.config.name in clash))
    if first == second:
        raise ConfigError("variants", f"{labels} name their runs' folders alike ({first!r}: a folder name keeps letters, digits, '-', '_' and '.'); "
                                      "give them labels that differ in those")
    raise ConfigError("variants", f"{labels} name their runs' folders alike but for case ({first!r}, {second!r}), which macOS's and Windows' "
                                  "file systems ignore: one run would read the other's results; give them labels that differ in more than case")


def variant_configs(config: RunConfig, variants: Sequence[Variant], built: Sequence[RunConfig], from_grid: bool) -> list[RunConfig]:
    """Each variant's config (:func:`apply_variant`): ``built``, those of the first variants that :func:`plan_sweep` built
    to check them, then the rest's (the controls it added), built here; errors name the variant."""
    configs = list(built)
    for v in variants[len(built) :]:
        with naming(v, from_grid):
            configs.append(apply_variant(config, v))
    return configs


def plan_runs(
    config: RunConfig, grid: Sequence[str], options: CompareOptions | None = None, variants: Sequence[Variant] | None = None,
    reference: str | None = None, existing: bool | Path = False, policy: TemperaturePolicy | None = None,
) -> Plan:
    """The whole comparison (:func:`plan_sweep`), bounded to :data:`MAX_RUNS`, with every run's config and the reference;
    ``existing``: of a folder begun already (:func:`plan_cells`); ``policy``: as for :func:`plan_sweep`."""
    from_grid = bool(grid) or variants is not None
    planned, saved, built = _plan_sweep(config, grid, options, variants, policy)
    seeds, tune_table = saved.seeds or [], saved.tune or {}
    points = parse_tune(tune_table)
    for v in planned:  # a --tune grid replaces the config's: the variants' own grids must still add other keys
        both = sorted(set(v.tune) & set(tune_table))
        if both:
            raise ConfigError(f"variants.{v.label}.tune.{both[0]}", "is tuned by the shared grid (--tune) already; a variant's own grid adds other options")
        fixed = sorted(set(dotted_keys([v.overrides])) & set(tune_table))
        if fixed:  # the tuning point is applied after the variant: its value would never run, under its label
            with naming(v, from_grid):
                raise ConfigError(fixed[0], "is swept by the shared tuning grid ([tune] or --tune), which sets it in every run of the "
                                            "variant, so this value would never run; set it in the variants or tune it, not both")
    multi = suffixed(planned, tune_table, seeds)  # as chillfl.run_names reads a finished comparison's names back
    per_variant = sum(len(variant_points(tune_table, v)) for v in planned)
    total = per_variant * len(seeds)
    if total > MAX_RUNS:
        runs = (f"{len(planned)} variants x {len(points)} tuning points" if per_variant == len(planned) * len(points)
                else f"{per_variant} (variant, tuning point) pairs")
        raise ConfigError("compare.seeds", f"{runs} x {len(seeds)} seeds = {total} runs; at most {MAX_RUNS}")
    configs = variant_configs(config, planned, built, from_grid)
    cells = plan_cells(config, planned, configs, tune_table, seeds, multi, from_grid, existing)
    field = "--reference" if reference else "compare.reference"
    ref, base = choose_reference(planned, reference or config.compare.get("reference"), config.compare.get("baseline"), field)
    return Plan(planned, saved, points, cells, ref, base, from_grid, configs, reference)


def describe_plan(plan: Plan) -> list[str]:
    """What a comparison would run, as ``--dry-run`` prints it: the count, the seeds and shared tuning grid,
    then each variant's run names (they carry its tuning point and seed). Plain lines; the caller makes them comments."""
    seeds = ", ".join(map(str, plan.seeds))
    tune = "; ".join(f"{k} = {', '.join(map(str, v))}" for k, v in plan.tune_table.items())
    pairs = len(plan.cells) // max(1, len(plan.seeds))  # (variant, tuning point) pairs
    if pairs == len(plan.variants) * len(plan.points):
        head = f"{counted(len(plan.cells), 'run')}: {counted(len(plan.variants), 'variant')} x seeds {seeds}"  # "1 runs" with one seed
        lines = [head + (f" x tuning {tune}" if tune else "")]
    else:  # some variants tune on their own grids: "variants x seeds x shared grid" did not multiply out to the count (4 x 3 x 2 for 42)
        shared = f"tuning {tune} and the variants' own grids" if tune else "the variants' own tuning grids"
        lines = [f"{counted(len(plan.cells), 'run')}: {counted(pairs, '(variant, tuning point) pair')} of {counted(len(plan.variants), 'variant')}"
                 f" x seeds {seeds} ({shared}, below)"]
    for v in plan.variants:
        names = [c.config.name for c in plan.cells if c.variant is v]
        own = "; ".join(f"{k} = {', '.join(map(str, vals))}" for k, vals in v.tune.items())
        lines.append(f"{v.label}{f' (own tuning {own})' if own else ''}: {', '.join(names)}")
    return lines

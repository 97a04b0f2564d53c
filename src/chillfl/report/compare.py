"""``chillfl compare``: run variants of one config on the same partition and seed.

The table follows FLex&Chill Table 4: final accuracy and its difference to the
baseline (T = 1), final test loss, and the rounds each variant needs to reach
the *target* — the best global accuracy of the reference run (T = 4 in the
paper; the highest temperature of the grid here) — with the speed-up
rounds(baseline) / rounds(variant).

With several seeds (``--seeds 0,1,2`` or ``[compare] seeds``), a ``[tune]``
grid or ``--controls``, every variant runs at every seed (at a seed all
variants share the partition and the initial model, both drawn from that
seed) and every tuning point; each variant keeps its best point on the
validation split (:mod:`chillfl.tune`), and the table reports that point's
test numbers as mean +- std, a Student-t 95 % interval, and differences to
the baseline paired per seed (:mod:`chillfl.metrics.stats`).

Controls (``--controls``): for a variant trained at T != 1, the gradient of
CE(z / T) w.r.t. the logits is (softmax(z / T) - onehot) / T, i.e. 1/T times
larger than at T = 1 in scale. A gain of T < 1 may therefore be a larger step
size. Each such variant gets three controls: T = 1 at lr x 1/T (the same step
scale), and the magnitude-only (T = 1 softmax, gradient x 1/T) and
direction-only (T softmax, gradient x T) ablations at the same T.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from chillfl.config import RunConfig, check_compare_option, load_config, parse_value, safe_name, variant_config
from chillfl.data import ArrayDataset, FederatedData
from chillfl.data.loaders import DATA_DIR_FIELD
from chillfl.executors.pools import WorkerPools
from chillfl.storage.results import PARTIAL, RunLock, claim_dir, rounds_to_reach, to_toml
from chillfl.errors import ConfigError, MissingExtra, SweepFailed
from chillfl.experiment import Plugged, build_data, build_experiment, build_protocol, check_parts
from chillfl.metrics.stats import paired_difference, summarize
from chillfl.plots.communication import plot_compare_accuracy_vs_bytes
from chillfl.progress import Progress
from chillfl.report.caveats import step_size_caveat
from chillfl.report.html import write_report
from chillfl.report.sweep import FIELD, CompareOptions, Sweep, Variant, check_resumable, find_sweep, read_sweep, sweep_record, write_sweep
from chillfl.runner import RunInterrupted, RunOutput
from chillfl.tune import SELECT_RULES, parse_tune, point_label, point_scores, select_point

if TYPE_CHECKING:
    from torch import nn

log = logging.getLogger(__name__)

TEMPERATURE_SHORTHAND = "temperature"
MAX_VARIANTS = 1000
"""A grid's product is built and validated in memory before anything runs: bound it."""
MAX_RUNS = 10_000
"""Variants x tuning points x seeds: every run's config is built and validated up front."""


NAME_KEYS = ("name", "policy", "method")
"""Options whose value alone names a variant in a folder name (``algorithm.name=fedavg`` -> ``fedavg``)."""


def short_setting(key: str, value: Any) -> str:
    """``client.lr``, 0.01 -> ``lr0.01``; ``algorithm.name``, fedavg -> ``fedavg``; ``temperature``, 0.5 -> ``T0.5``."""
    text = f"{value:g}" if isinstance(value, float) else str(value)
    if key == TEMPERATURE_SHORTHAND:
        return f"T{text}"
    leaf = key.rsplit(".", 1)[-1]
    return text if leaf in NAME_KEYS else f"{leaf}{text}"


def run_name(variant: Variant, point: Mapping[str, Any], seed: int | None, long: bool = False) -> str:
    """A run's folder name in a comparison: ``fedavg-lr0.01-s0`` (``long``: the full label, for when short names collide)."""
    if long:
        return safe_name(", ".join(x for x in (variant.label, point_label(point), "" if seed is None else f"seed{seed}") if x))
    parts = [variant.short or safe_name(variant.label), *(short_setting(k, v) for k, v in point.items())]
    if seed is not None:
        parts.append(f"s{seed}")
    return safe_name("-".join(parts))


def parse_grid(items: Sequence[str]) -> list[Variant]:
    """``key=v1,v2,...`` items -> the cartesian product of variants (:func:`grid_variants`)."""
    axes: list[tuple[str, list[Any]]] = []
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or not key or not values.strip():
            raise ConfigError("--grid", f"expected key=v1,v2,... got {item!r}")
        axes.append((key, [parse_value(v.strip(), "--grid") for v in values.split(",") if v.strip()]))
    return grid_variants(axes)


def grid_variants(axes: Sequence[tuple[str, Sequence[Any]]]) -> list[Variant]:
    """The cartesian product of ``(key, values)`` axes as variants (``chillfl.compare(grid=...)`` passes typed values).

    ``temperature=...`` is shorthand for ``temperature.policy="fixed"`` with
    ``temperature.value`` set (T = 1 is the plain softmax).
    """
    size = math.prod(len(values) for _, values in axes)
    if size > MAX_VARIANTS:
        raise ConfigError("--grid", f"{' x '.join(str(len(v)) for _, v in axes)} = {size} variants; at most {MAX_VARIANTS}")
    variants = []
    for combo in itertools.product(*([(key, value) for value in values] for key, values in axes)):
        overrides: dict[str, Any] = {}
        labels, temp = [], None
        for key, value in combo:
            if key == TEMPERATURE_SHORTHAND:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                    raise ConfigError("--grid temperature", f"values must be numbers > 0, got {value!r}")
                overrides["temperature"] = {"policy": "fixed", "value": float(value)}
                labels.append(f"T={value:g}")
                temp = float(value)
            else:
                overrides[key] = value
                labels.append(f"{key}={value}")
        short = "-".join(short_setting(key, value) for key, value in combo)
        variants.append(Variant(", ".join(labels), overrides, temp, short=short))
    if len({v.label for v in variants}) != len(variants):
        raise ConfigError("--grid", "duplicate values")
    return variants


def variants_from_config(config: RunConfig) -> list[Variant]:
    """The ``[variants.LABEL]`` tables of a config: each a set of overrides (nested tables replace whole parts)."""
    out = []
    if len(config.variants) > MAX_VARIANTS:
        raise ConfigError("variants", f"{len(config.variants)} variants; at most {MAX_VARIANTS}")
    for label, table in config.variants.items():
        if not isinstance(table, dict):
            raise ConfigError(f"variants.{label}", "must be a table of overrides")
        temp = table.get("temperature", {})
        value = temp.get("value") if isinstance(temp, dict) and temp.get("policy") == "fixed" else (1.0 if isinstance(temp, dict) and temp.get("policy") == "none" else None)
        out.append(Variant(str(label), dict(table), value))
    return out


def apply_variant(config: RunConfig, variant: Variant) -> RunConfig:
    """The config of one variant; a nested table for a pluggable part replaces that part whole."""
    return variant_config(config, variant.label, variant.overrides)


def _data_key(config: RunConfig) -> str:
    """What decides the federated data: variants with the same key share one partition."""
    parts = [
        config.dataset, config.partition, config.seed, config.federation.num_clients, config.eval.client_split,
        config.eval.client_split_size, config.eval.clients, config.distillation.get("public_size", 0), config.data_dir,
        config.eval.validation,
    ]
    return json.dumps(parts, sort_keys=True, default=str)


@dataclass
class CompareResult:
    folder: Path | None
    rows: list[dict[str, Any]]
    table: str
    outputs: dict[str, RunOutput] = field(default_factory=dict)
    complete: bool = True
    """False after a ``dry_run`` without the dataset's files: only names and options were checked."""
    failures: dict[str, str] = field(default_factory=dict)
    """Run name -> how it failed (``diverged at round 3``), for the runs that did not finish; the sweep went on."""

    def __str__(self) -> str:
        return self.table

    def report(self, path: str | Path = "report.html", title: str | None = None) -> Path:
        """The comparison as one self-contained HTML page (what ``chillfl report FOLDER`` writes)."""
        if self.folder is None:
            raise ConfigError("write", "a comparison run with write=False has no result folder to report on")
        return write_report([self.folder], path, title)


def choose_reference(
    variants: Sequence[Variant], reference: str | None, baseline: str | None = None, reference_field: str = "--reference"
) -> tuple[Variant, Variant]:
    """(target-setting reference, baseline) variants; ``reference_field`` names where ``reference`` came from."""
    by_label = {v.label: v for v in variants}
    if baseline is not None and baseline not in by_label:
        raise ConfigError("compare.baseline", f"unknown variant {baseline!r}; allowed: {', '.join(by_label)}")
    temps = [v for v in variants if v.temperature is not None]
    if reference is not None:
        if reference not in by_label:
            raise ConfigError(reference_field, f"unknown variant {reference!r}; allowed: {', '.join(by_label)}")
        ref = by_label[reference]
    elif temps:
        ref = max(temps, key=lambda v: v.temperature or 0.0)
    else:
        ref = variants[0]
    base = by_label[baseline] if baseline else next((v for v in temps if v.temperature == 1.0), variants[0])
    return ref, base


def build_rows(
    variants: Sequence[Variant], outputs: Mapping[str, RunOutput], ref: Variant, base: Variant, metric: str = "global_acc",
    failed: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One row per variant; a variant missing from ``outputs`` failed (``failed[label]`` says how) and has no numbers."""
    failed = failed or {}
    ref_out, base_out = outputs.get(ref.label), outputs.get(base.label)
    target = ref_out.summary.get(f"best_{metric}") if ref_out is not None else None
    base_rounds = rounds_to_reach(base_out.records, metric, target) if target is not None and base_out is not None else None
    base_final = base_out.summary.get(f"final_{metric}") if base_out is not None else None
    rows = []
    for v in variants:
        out = outputs.get(v.label)
        if out is None:
            rows.append({"variant": v.label, "failed": failed.get(v.label, "failed"), "final_acc": None, "delta_acc": None, "best_acc": None,
                         "final_loss": None, "final_local_acc": None, "rounds_to_target": None, "speedup": None, "target": target})
            continue
        s = out.summary
        rounds = rounds_to_reach(out.records, metric, target) if target is not None else None
        speedup = base_rounds / rounds if (rounds and base_rounds) else None
        final = s.get(f"final_{metric}")
        rows.append(
            {
                "variant": v.label,
                "final_acc": final,
                "delta_acc": (final - base_final) if final is not None and base_final is not None else None,
                "best_acc": s.get(f"best_{metric}"),
                "final_loss": s.get(f"final_{metric.replace('acc', 'loss')}"),
                "final_local_acc": s.get("final_local_acc"),
                "rounds_to_target": rounds,
                "speedup": speedup,
                "target": target,
            }
        )
        records = out.records
        if records and "bytes_cumulative" in records[-1]:  # communication (SCARLET Sec. IV-A)
            rows[-1]["cumulative_mb"] = records[-1]["bytes_cumulative"] / 1e6
            reached = [r["bytes_cumulative"] for r in records if rounds is not None and r["round"] == rounds]
            rows[-1]["mb_to_target"] = reached[0] / 1e6 if reached else None
    return rows


def format_table(rows: Sequence[Mapping[str, Any]], ref_label: str, base_label: str) -> str:
    def pct(x: float | None, signed: bool = False) -> str:
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return "-"
        return f"{100 * x:+.2f}" if signed else f"{100 * x:.2f}"

    target = rows[0]["target"] if rows else None
    header = ["variant", "accuracy % (diff)", "loss", "local acc %", "rounds to target (speed-up)"]
    with_mb = any("cumulative_mb" in r for r in rows)
    if with_mb:
        header.append("cumulative MB (to target)")
    lines = [
        f"target = best global accuracy of {ref_label}: {pct(target)}%; differences and speed-ups relative to {base_label}",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    for r in rows:
        rounds = "-" if r.get("failed") else "never" if r["rounds_to_target"] is None else str(r["rounds_to_target"])
        speed = f" ({r['speedup']:.2f}x)" if r["speedup"] else ""
        loss = "-" if r["final_loss"] is None else f"{r['final_loss']:.3f}"
        name = r["variant"] + (f" ({r['failed']})" if r.get("failed") else "")
        acc = "-" if r["final_acc"] is None else f"{pct(r['final_acc'])} ({pct(r['delta_acc'], True)})"
        line = f"| {name} | {acc} | {loss} | {pct(r['final_local_acc'])} | {rounds}{speed} |"
        if with_mb:
            mb = "-" if r.get("cumulative_mb") is None else f"{r['cumulative_mb']:.3f}"
            to_target = "" if r.get("mb_to_target") is None else f" ({r['mb_to_target']:.3f})"
            line += f" {mb}{to_target} |"
        lines.append(line)
    return "\n".join(lines)


@contextmanager
def _naming(label: str, from_grid: bool) -> Iterator[None]:
    """Name the variant a ConfigError comes from: ``variants.x.client.lr``, or "(grid variant x)" after a grid's message."""
    try:
        yield
    except MissingExtra:  # a missing package, not a bad value of the variant: its one line as it is
        raise
    except ConfigError as exc:
        if from_grid:
            raise ConfigError(exc.field, f"{exc.message} (grid variant {label})") from None
        if exc.field.startswith(f"variants.{label}."):
            raise
        raise ConfigError(f"variants.{label}.{exc.field}", exc.message) from None


def parse_seeds(text: str) -> list[int]:
    """``--seeds 0,1,2`` (or ``0-4``) -> [0, 1, 2]; checked like ``[compare] seeds``."""
    seeds: list[int] = []
    try:
        for part in (p.strip() for p in text.split(",") if p.strip()):
            lo, dash, hi = part.partition("-")
            seeds.extend(range(int(lo), int(hi) + 1) if dash and lo else [int(part)])
    except ValueError:
        raise ConfigError("--seeds", f"expected integers like 0,1,2 or 0-4, got {text!r}") from None
    try:
        check_compare_option("seeds", seeds)
    except ConfigError as exc:
        raise ConfigError("--seeds", exc.message) from None
    return seeds


def parse_tune_items(items: Sequence[str]) -> dict[str, list[Any]]:
    """``--tune client.lr=0.01,0.1`` items -> a ``[tune]`` table."""
    out: dict[str, list[Any]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or not key or not values.strip():
            raise ConfigError("--tune", f"expected key=v1,v2,... got {item!r}")
        out[key] = [parse_value(v.strip(), "--tune") for v in values.split(",") if v.strip()]
    parse_tune(out, "--tune")
    return out


def with_controls(config: RunConfig, variants: Sequence[Variant]) -> list[Variant]:
    """``variants`` plus, for each one trained at a fixed T != 1 with the standard loss, its step-size controls.

    (1) T = 1 at lr x 1/T: the same gradient scale without the sharper softmax;
    (2) magnitude only (T = 1 softmax, gradient x 1/T) and (3) direction only
    (softmax at T, gradient x T) at the same T (FedChill Table 5's ablations).
    """
    out = list(variants)
    labels = {v.label for v in variants}
    for v in variants:
        t = v.temperature
        if t is None or t == 1.0 or apply_variant(config, v).client.loss != "standard":
            continue
        rest = {k: val for k, val in v.overrides.items() if k != "temperature"}
        name = v.short or safe_name(v.label)
        for control in (
            Variant(f"T=1, lr x {1 / t:g} (control of {v.label})", {**rest, "temperature": {"policy": "none"}}, None, v.lr_scale / t, f"{name}-T1-lrx{1 / t:g}"),
            Variant(f"{v.label} magnitude only", {**v.overrides, "client.loss": "magnitude_only"}, None, v.lr_scale, f"{name}-magnitude"),
            Variant(f"{v.label} direction only", {**v.overrides, "client.loss": "direction_only"}, None, v.lr_scale, f"{name}-direction"),
        ):
            if control.label not in labels:
                out.append(control)
                labels.add(control.label)
    return out


@dataclass
class Cell:
    """One run of a comparison: a variant at a tuning point and a seed."""

    variant: Variant
    point: int
    seed: int
    config: RunConfig


def cell_config(config: RunConfig, variant: Variant, point: Mapping[str, Any], seed: int, suffix: bool, long: bool = False) -> RunConfig:
    """The variant's config at a tuning point and seed, named by :func:`run_name` (with the point and seed when ``suffix``)."""
    cfg = apply_variant(config, variant)
    name = run_name(variant, point, seed, long) if suffix else run_name(variant, {}, None, long)
    try:
        cfg = cfg.with_overrides({**point, "seed": seed, "name": name})
    except ConfigError as exc:
        raise ConfigError(exc.field if exc.field.startswith("tune") else f"tune.{exc.field}", exc.message) from None
    if variant.lr_scale != 1.0:
        cfg = cfg.with_overrides({"client.lr": cfg.client.lr * variant.lr_scale})
    return cfg


def _stat(values: Sequence[float | None]) -> dict[str, Any] | None:
    xs = [v for v in values if v is not None]
    if not xs:
        return None
    s = summarize(xs)
    return {"n": s.n, "mean": s.mean, "std": s.std, "ci_low": s.low, "ci_high": s.high, "per_seed": list(values)}


def _paired(values: Sequence[float | None], base: Sequence[float | None]) -> dict[str, Any] | None:
    """values - base, paired per seed (the seeds where both exist); None when there is no pair."""
    pairs = [(a, b) for a, b in zip(values, base) if a is not None and b is not None]
    if not pairs:
        return None
    p = paired_difference([a for a, _ in pairs], [b for _, b in pairs])
    return {"n": p.n, "mean": p.summary.mean, "std": p.summary.std, "ci_low": p.summary.low, "ci_high": p.summary.high,
            "per_seed": list(p.differences), "sign_holds": p.sign_holds}


def build_seed_rows(
    variants: Sequence[Variant],
    runs: Mapping[tuple[str, int], RunOutput | None],
    seeds: Sequence[int],
    ref: Variant,
    base: Variant,
    chosen: Mapping[str, tuple[Mapping[str, Any], list[float]]] | None,
    metric: str = "global_acc",
    failed: Mapping[tuple[str, int], str] | None = None,
) -> list[dict[str, Any]]:
    """Rows over seeds; ``runs[(label, seed)]``: the chosen point's run (None: it failed; ``failed[(label, seed)]`` says how)."""
    failed = failed or {}

    def summary(label: str, seed: int, key: str) -> float | None:
        out = runs[(label, seed)]
        value = out.summary.get(key) if out is not None else None
        return None if value is None or not math.isfinite(value) else float(value)

    targets = [summary(ref.label, s, f"best_{metric}") for s in seeds]
    base_acc = [summary(base.label, s, f"final_{metric}") for s in seeds]
    base_local = [summary(base.label, s, "final_local_acc") for s in seeds]
    rows = []
    for v in variants:
        acc = [summary(v.label, s, f"final_{metric}") for s in seeds]
        local = [summary(v.label, s, "final_local_acc") for s in seeds]
        rounds = []
        for s, target in zip(seeds, targets):
            out = runs[(v.label, s)]
            rounds.append(rounds_to_reach(out.records, metric, target) if out is not None and target is not None else None)
        row: dict[str, Any] = {
            "variant": v.label,
            "seeds": list(seeds),
            "diverged_seeds": [s for s in seeds if runs[(v.label, s)] is None],
            "failed": {str(s): failed.get((v.label, s), "diverged") for s in seeds if runs[(v.label, s)] is None},
            "final_acc": _stat(acc),
            "delta_acc": _paired(acc, base_acc),
            "final_val_acc": _stat([summary(v.label, s, "final_val_acc") for s in seeds]),
            "final_loss": _stat([summary(v.label, s, f"final_{metric.replace('acc', 'loss')}") for s in seeds]),
            "final_local_acc": _stat(local),
            "delta_local_acc": _paired(local, base_local),
            "rounds_to_target": rounds,
            "target": targets,
        }
        mb = [None if (o := runs[(v.label, s)]) is None or not o.records or "bytes_cumulative" not in o.records[-1]
              else o.records[-1]["bytes_cumulative"] / 1e6 for s in seeds]
        if any(x is not None for x in mb):  # communication (SCARLET Sec. IV-A)
            row["cumulative_mb"] = _stat(mb)
        if chosen is not None:
            point, scores = chosen[v.label]
            row["tuned"] = dict(point)
            row["validation_scores"] = [None if math.isinf(x) else x for x in scores]
        rows.append(row)
    return rows


def _pm(stat: Mapping[str, Any] | None, scale: float = 100.0, digits: int = 2, signed: bool = False) -> str:
    if stat is None:
        return "-"
    sign = "+" if signed else ""
    text = f"{scale * stat['mean']:{sign}.{digits}f}"
    if stat["std"] is not None:
        text += f" ± {scale * stat['std']:.{digits}f}"
    return text


def _ci(stat: Mapping[str, Any] | None, signed: bool = False) -> str:
    if stat is None or stat["ci_low"] is None:
        return "-"
    sign = "+" if signed else ""
    return f"[{100 * stat['ci_low']:{sign}.2f}, {100 * stat['ci_high']:{sign}.2f}]"


def format_seed_table(
    rows: Sequence[Mapping[str, Any]], ref_label: str, base_label: str, tune: Mapping[str, Sequence[Any]] | None, select: str, validation: float,
    local: bool = False,
) -> str:
    """The seed table; ``local`` adds each variant's local accuracy (its clients' own models on their own splits) and its paired diff."""
    seeds = rows[0]["seeds"] if rows else []
    lines = [
        f"seeds {', '.join(map(str, seeds))} (n = {len(seeds)}); accuracy = final global test accuracy %, mean ± std over seeds, 95 % CI (Student t)",
        f"diff = accuracy - {base_label}'s, paired per seed, mean ± std [95 % CI]; sign holds = seeds where the diff has the mean's sign; "
        f"target = best accuracy of {ref_label} at the same seed",
    ]
    if tune:
        grid = "; ".join(f"{k} in {{{', '.join(map(str, v))}}}" for k, v in tune.items())
        lines.append(f"tuned per variant on the validation split (eval.validation = {validation:g} of the test set, "
                     f"{select} val acc, mean over seeds), reported on the test set: {grid}")
    if local:
        lines.append(f"local acc = final mean accuracy of the round's clients, each on its own held-out split with its own model "
                     f"(a personalised method's personal model), mean ± std over seeds; local diff = local acc - {base_label}'s, paired per seed [95 % CI]")
    with_mb = any("cumulative_mb" in r for r in rows)
    header = ["variant", *(["tuned"] if tune else []), "val acc %", "accuracy %", "95 % CI", "diff (paired)", "diff 95 % CI", "sign holds",
              *(["local acc %", "local diff (paired)", "local diff 95 % CI"] if local else []), "loss",
              "rounds to target (reached)", *(["cumulative MB"] if with_mb else [])]
    lines += ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        delta = r["delta_acc"]
        reached = [x for x in r["rounds_to_target"] if x is not None]
        rounds = "never" if not reached else f"{sum(reached) / len(reached):.1f} ({len(reached)}/{len(seeds)})"
        failed = r.get("failed") or {str(s): "diverged" for s in r["diverged_seeds"]}
        name = r["variant"] + (" (" + "; ".join(f"seed {s}: {why}" for s, why in failed.items()) + ")" if failed else "")
        cells = [name]
        if tune:
            cells.append(point_label(r.get("tuned") or {}) or "-")
        cells += [
            _pm(r["final_val_acc"]), _pm(r["final_acc"]), _ci(r["final_acc"]), _pm(delta, signed=True), _ci(delta, signed=True),
            "-" if delta is None else f"{delta['sign_holds']}/{delta['n']}",
        ]
        if local:
            cells += [_pm(r["final_local_acc"]), _pm(r["delta_local_acc"], signed=True), _ci(r["delta_local_acc"], signed=True)]
        cells += [_pm(r["final_loss"], 1.0, 3), rounds]
        if with_mb:
            cells.append(_pm(r.get("cumulative_mb"), 1.0, 3))
        lines.append("| " + " | ".join(cells) + " |")
    if tune:
        points = parse_tune(tune)
        lines += ["", f"validation accuracy % at every tuning point ({select} round, mean over seeds; diverged = at one seed or more)",
                  "| variant | " + " | ".join(point_label(p) for p in points) + " |", "|---|" + "|".join("---" for _ in points) + "|"]
        for r in rows:
            scores = ["diverged" if x is None else f"{100 * x:.2f}" for x in r["validation_scores"]]
            lines.append(f"| {r['variant']} | " + " | ".join(scores) + " |")
    return "\n".join(lines)


def plan_sweep(
    config: RunConfig, grid: Sequence[str], options: CompareOptions | None = None, variants: Sequence[Variant] | None = None,
) -> tuple[list[Variant], CompareOptions]:
    """The comparison's variants (``grid``, else ``variants``, else the config's; controls added) and its options with
    every default filled in (seeds, tuning table, selection rule): what ``sweep.json`` records. Every variant is
    checked here, before anything runs; errors name the variant."""
    opts = options or CompareOptions()
    from_grid = bool(grid) or variants is not None
    if variants is None:
        variants = parse_grid(grid) if grid else variants_from_config(config)
    planned = list(variants)
    if not planned:
        raise ConfigError("--grid", "give at least one key=v1,v2,... or define [variants.LABEL] tables in the config")
    seeds = opts.seeds if opts.seeds is not None else list(config.compare.get("seeds", [config.seed]))
    tune_table = opts.tune if opts.tune is not None else dict(config.tune)
    tuned = len(parse_tune(tune_table)) > 1 or bool(tune_table)
    select = opts.select or config.compare.get("select", "final")
    if select not in SELECT_RULES:
        raise ConfigError("--select", f"unknown rule {select!r}; allowed: {', '.join(SELECT_RULES)}")
    if tuned and config.eval.validation <= 0:
        raise ConfigError("eval.validation", "tuning selects on the server validation split; set eval.validation > 0 (e.g. eval.validation=0.1)")
    for v in planned:  # validates every variant before running any; errors name the variant
        with _naming(v.label, from_grid):
            apply_variant(config, v)
    if opts.controls if opts.controls is not None else config.compare.get("controls", False):
        planned = with_controls(config, planned)
    return planned, CompareOptions(seeds=list(seeds), tune=tune_table, controls=False, select=select)  # the variants carry the controls


def find_compare(config: RunConfig, grid: Sequence[str], options: CompareOptions | None = None, reference: str | None = None) -> Path | None:
    """The folder of this very comparison under ``config.out_dir``, made before by this code: finished (its table
    written) or else interrupted (``.partial``); None when there is none (:func:`chillfl.report.sweep.find_sweep`)."""
    variants, saved = plan_sweep(config, grid, options)
    record = sweep_record(to_toml(config.to_dict()).encode(), variants, saved, reference, resumable=True)
    return find_sweep(Path(config.out_dir), f"{config.name}-compare", record)


def read_compare(folder: Path) -> CompareResult:
    """A finished comparison's table as it was written (rows from ``table.json``); its runs are not read."""
    try:
        rows = json.loads((folder / "table.json").read_text(encoding="utf-8"))
        table = (folder / "table.md").read_text(encoding="utf-8").removesuffix("\n")
    except (OSError, ValueError) as exc:
        raise ConfigError(FIELD, f"{folder} has no readable table ({type(exc).__name__}: {exc})") from None
    return CompareResult(folder, rows, table)


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
) -> CompareResult:
    """Run every variant (``--grid`` product, else the config's ``[variants]``) at every seed and tuning point.

    One seed and no tuning: the FLex&Chill Table 4 table. Otherwise the table over seeds
    (:func:`format_seed_table`), each variant at its best tuning point on validation accuracy.
    ``dry_run``: build and check every run's parts, then return an empty result (nothing runs or is written).
    ``variants``: instead of ``grid`` strings (:func:`grid_variants`). ``dataset`` / ``model``: a user's own
    data and ``nn.Module`` (:func:`chillfl.compare`), as for :func:`chillfl.run`; ``plugged``: its method parts.
    ``resume``: the interrupted comparison's ``.partial`` folder to go on in (:func:`resume_compare`; ``force`` as there).
    """
    from_grid = bool(grid) or variants is not None
    variants, saved = plan_sweep(config, grid, options, variants)
    seeds, tune_table, select = saved.seeds or [], saved.tune or {}, saved.select or "final"
    points = parse_tune(tune_table)
    tuned = len(points) > 1 or bool(tune_table)
    multi = tuned or len(seeds) > 1
    total = len(variants) * len(points) * len(seeds)
    if total > MAX_RUNS:
        raise ConfigError("compare.seeds", f"{len(variants)} variants x {len(points)} tuning points x {len(seeds)} seeds = {total} runs; at most {MAX_RUNS}")
    cells: list[Cell] = []
    for long in (False, True):  # short folder names (fedavg-lr0.01-s0), the full labels if two would collide
        cells = []
        for v in variants:
            with _naming(v.label, from_grid):
                for pi, point in enumerate(points):
                    for seed in seeds:
                        cells.append(Cell(v, pi, seed, cell_config(config, v, point, seed, multi, long)))
        if len({c.config.name for c in cells}) == len(cells):
            break
    field = "--reference" if reference else "compare.reference"
    ref, base = choose_reference(variants, reference or config.compare.get("reference"), config.compare.get("baseline"), field)
    datasets: dict[str, FederatedData] = {}
    for c in cells:
        with _naming(c.variant.label, from_grid):
            key = _data_key(c.config)
            if key not in datasets:
                try:
                    datasets[key] = build_data(c.config, dataset)
                except ConfigError as exc:
                    if not (dry_run and exc.field == DATA_DIR_FIELD):
                        raise
                    for other in cells:  # no data here: each run's names and options
                        with _naming(other.variant.label, from_grid):
                            check_parts(other.config)
                    return CompareResult(None, [], "", complete=False)
            exp = build_experiment(c.config, data=datasets[key], model=model, plugged=plugged)  # every part of every variant is valid before anything is written
            if dry_run:
                build_protocol(exp)
    if dry_run:
        return CompareResult(None, [], "")
    folder = partial = lock = None
    if resume is not None:
        partial, folder = resume, resume.with_name(resume.name.removesuffix(PARTIAL))
    elif write:
        folder, partial = claim_dir(Path(config.out_dir), f"{config.name}-compare")  # atomic: no race with a run beside it
        toml = to_toml(config.to_dict())
        (partial / "config.toml").write_text(toml, encoding="utf-8")
        write_sweep(partial, sweep_record(toml.encode(), variants, saved, reference, resumable=dataset is None and model is None and plugged is None))
    if partial is not None:
        lock = RunLock(partial)  # one process at a time goes on with a comparison (the first run, or a resume of it)
    try:
        try:
            with WorkerPools() as pools:  # the runs' worker processes and Ray actors start once for the sweep (executors/pools.py)
                sweep = Sweep(partial, resume is not None, force, progress, pools, len(cells))
                for i, c in enumerate(cells):
                    sweep.run(i, c.config, (c.variant.label, c.point, c.seed), datasets[_data_key(c.config)], model, plugged)
        except RunInterrupted as exc:  # the comparison resumes as a whole, its finished runs kept
            if partial is not None:
                exc.folder = partial
            raise
        results, failures = sweep.results, sweep.failures
        if len(failures) == len(cells):
            where = partial
            if partial is not None and folder is not None and not folder.with_name(folder.name + ".failed").exists():
                where = partial.rename(folder.with_name(folder.name + ".failed"))
            raise SweepFailed(f"every run failed ({len(cells)} of {len(cells)}; the first {next(iter(failures.values()))})", where)
        chosen: dict[str, tuple[dict[str, Any], list[float]]] = {}
        runs: dict[tuple[str, int], RunOutput | None] = {}
        failed: dict[tuple[str, int], str] = {}
        for v in variants:
            pick = 0
            if tuned:
                per_point = [[None if (o := results[(v.label, pi, s)]) is None else o.records for s in seeds] for pi in range(len(points))]
                scores = point_scores(per_point, select)
                pick = select_point(scores)
                chosen[v.label] = (points[pick], scores)
            for s in seeds:
                runs[(v.label, s)] = results[(v.label, pick, s)]
                if (v.label, pick, s) in failures:
                    failed[(v.label, s)] = failures[(v.label, pick, s)]
        if multi:
            rows = build_seed_rows(variants, runs, seeds, ref, base, chosen if tuned else None, failed=failed)
            table = format_seed_table(rows, ref.label, base.label, tune_table if tuned else None, select, config.eval.validation, bool(config.compare.get("local", False)))
            outputs = {f"{label}, seed {s}": out for (label, s), out in runs.items() if out is not None}
        else:
            outputs = {v.label: o for v in variants if (o := runs[(v.label, seeds[0])]) is not None}
            rows = build_rows(variants, outputs, ref, base, failed={label: why for (label, _), why in failed.items()})
            table = format_table(rows, ref.label, base.label)
        caveat = step_size_caveat([apply_variant(config, v) for v in variants], tune_table, any(v.lr_scale != 1.0 for v in variants))
        if caveat is not None:
            table = f"{table}\n\n{caveat}"
        if partial is not None and folder is not None:
            (partial / "table.md").write_text(table + "\n", encoding="utf-8")
            (partial / "table.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
            if multi:
                bands = {v.label: [o.records for s in seeds if (o := runs[(v.label, s)]) is not None] for v in variants}
                _band_plots(bands, seeds[0], partial, config.name)
            else:
                _compare_plots(outputs, partial, config.name)
            partial.rename(folder)
            _point_saved_configs_to(folder, partial)
        return CompareResult(folder, rows, table, outputs, failures={c.config.name: failures[k] for c in cells if (k := (c.variant.label, c.point, c.seed)) in failures})
    finally:
        if lock is not None:
            lock.release()


def resume_compare(folder: str | Path, *, progress: Progress = True, force: bool = False) -> CompareResult:
    """Go on with the interrupted comparison in ``folder`` (its ``.partial`` folder; :mod:`chillfl.report.sweep`): the whole sweep's table.

    ``force``: resume a run whose files changed since its checkpoint (as ``chillfl resume --force``).
    """
    path = Path(folder)
    check_resumable(path)
    variants, options, reference = read_sweep(path, force)
    return run_compare(load_config(path / "config.toml"), [], reference=reference, progress=progress, options=options, variants=variants, resume=path, force=force)


def _point_saved_configs_to(folder: Path, partial: Path) -> None:
    """Each sub-run's saved config names the finished folder as its ``out_dir`` (not the renamed ``.partial``),
    so ``chillfl run FOLDER/RUN/config.toml`` reruns it beside its siblings instead of recreating ``.partial``."""
    for path in folder.glob("*/config.toml"):
        saved = tomllib.loads(path.read_text(encoding="utf-8"))
        if saved.get("out_dir") == str(partial):
            saved["out_dir"] = str(folder)
            path.write_text(to_toml(saved), encoding="utf-8")


def _compare_plots(outputs: Mapping[str, RunOutput], folder: Path, title: str) -> None:
    """The comparison's figures; without matplotlib (the ``plots`` extra) one log line says they were skipped."""
    try:
        from chillfl.plots.run import plot_curves
    except MissingExtra as exc:
        logging.getLogger(__name__).info("%s; figures skipped", exc)
        return

    plot_curves({label: out.records for label, out in outputs.items()}, folder / "curves.png", title=title)
    plot_compare_accuracy_vs_bytes({label: out.records for label, out in outputs.items()}, folder / "accuracy_vs_bytes.png", title=title)


def _band_plots(bands: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]], first_seed: int, folder: Path, title: str) -> None:
    """Over seeds: curves with min-max bands, and accuracy vs bytes at the first seed (skipped without matplotlib)."""
    try:
        from chillfl.plots.bands import plot_band_curves
    except MissingExtra as exc:
        logging.getLogger(__name__).info("%s; figures skipped", exc)
        return

    plot_band_curves(bands, folder / "curves.png", title=title)
    first = {label: runs[0] for label, runs in bands.items() if runs}
    plot_compare_accuracy_vs_bytes(first, folder / "accuracy_vs_bytes.png", title=f"{title} (seed {first_seed})")

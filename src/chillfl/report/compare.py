"""``chillfl compare``: run variants of one config on the same partition and seed.

The table follows FLex&Chill Table 4: final accuracy and its difference to the
baseline (T = 1), final test loss, and the rounds each variant needs to reach
the *target* — the best global accuracy of the reference run (T = 4 in the
paper; the highest temperature of the grid here) — with the speed-up
rounds(baseline) / rounds(variant).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chillfl.config import (
    RunConfig,
    parse_value,
    variant_config,
)
from chillfl.data import FederatedData
from chillfl.engine.results import rounds_to_reach, to_toml, unique_dir
from chillfl.errors import ConfigError, MissingExtra
from chillfl.experiment import build_data, build_experiment
from chillfl.runner import RunOutput, run_experiment

TEMPERATURE_SHORTHAND = "temperature"
MAX_VARIANTS = 1000
"""A grid's product is built and validated in memory before anything runs: bound it."""


@dataclass
class Variant:
    label: str
    overrides: dict[str, Any]
    temperature: float | None = None


def parse_grid(items: Sequence[str]) -> list[Variant]:
    """``key=v1,v2,...`` items -> the cartesian product of variants.

    ``temperature=...`` is shorthand for ``temperature.policy="fixed"`` with
    ``temperature.value`` set (T = 1 is the plain softmax).
    """
    axes: list[list[tuple[str, Any]]] = []
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or not key or not values.strip():
            raise ConfigError("--grid", f"expected key=v1,v2,... got {item!r}")
        axes.append([(key, parse_value(v.strip(), "--grid")) for v in values.split(",") if v.strip()])
    size = math.prod(len(axis) for axis in axes)
    if size > MAX_VARIANTS:
        raise ConfigError("--grid", f"{' x '.join(str(len(a)) for a in axes)} = {size} variants; at most {MAX_VARIANTS}")
    variants = []
    for combo in itertools.product(*axes):
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
        variants.append(Variant(", ".join(labels), overrides, temp))
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
    ]
    return json.dumps(parts, sort_keys=True, default=str)


@dataclass
class CompareResult:
    folder: Path | None
    rows: list[dict[str, Any]]
    table: str
    outputs: dict[str, RunOutput] = field(default_factory=dict)


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


def build_rows(variants: Sequence[Variant], outputs: Mapping[str, RunOutput], ref: Variant, base: Variant, metric: str = "global_acc") -> list[dict[str, Any]]:
    target = outputs[ref.label].summary.get(f"best_{metric}")
    base_out = outputs[base.label]
    base_rounds = rounds_to_reach(base_out.records, metric, target) if target is not None else None
    rows = []
    for v in variants:
        s = outputs[v.label].summary
        rounds = rounds_to_reach(outputs[v.label].records, metric, target) if target is not None else None
        speedup = base_rounds / rounds if (rounds and base_rounds) else None
        rows.append(
            {
                "variant": v.label,
                "final_acc": s.get(f"final_{metric}"),
                "delta_acc": (s.get(f"final_{metric}") - base_out.summary[f"final_{metric}"]) if s.get(f"final_{metric}") is not None else None,
                "best_acc": s.get(f"best_{metric}"),
                "final_loss": s.get(f"final_{metric.replace('acc', 'loss')}"),
                "final_local_acc": s.get("final_local_acc"),
                "rounds_to_target": rounds,
                "speedup": speedup,
                "target": target,
            }
        )
        records = outputs[v.label].records
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
        rounds = "never" if r["rounds_to_target"] is None else str(r["rounds_to_target"])
        speed = f" ({r['speedup']:.2f}x)" if r["speedup"] else ""
        loss = "-" if r["final_loss"] is None else f"{r['final_loss']:.3f}"
        line = f"| {r['variant']} | {pct(r['final_acc'])} ({pct(r['delta_acc'], True)}) | {loss} | {pct(r['final_local_acc'])} | {rounds}{speed} |"
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


def run_compare(config: RunConfig, grid: Sequence[str], *, reference: str | None = None, progress: bool = True, write: bool = True) -> CompareResult:
    """Run every variant (``--grid`` product, else the config's ``[variants]``) on the same partition and seed."""
    variants = parse_grid(grid) if grid else variants_from_config(config)
    if not variants:
        raise ConfigError("--grid", "give at least one key=v1,v2,... or define [variants.LABEL] tables in the config")
    configs = []
    for v in variants:  # validates every variant before running any; errors name the variant
        with _naming(v.label, bool(grid)):
            configs.append(apply_variant(config, v))
    field = "--reference" if reference else "compare.reference"
    ref, base = choose_reference(variants, reference or config.compare.get("reference"), config.compare.get("baseline"), field)
    datasets: dict[str, FederatedData] = {}
    for v, cfg in zip(variants, configs):
        with _naming(v.label, bool(grid)):
            key = _data_key(cfg)
            if key not in datasets:
                datasets[key] = build_data(cfg)
            build_experiment(cfg, data=datasets[key])  # every part of every variant is valid before anything is written
    folder = partial = None
    if write:
        folder = unique_dir(Path(config.out_dir), f"{config.name}-compare")
        partial = folder.with_name(folder.name + ".partial")
        partial.mkdir(parents=True)
        (partial / "config.toml").write_text(to_toml(config.to_dict()), encoding="utf-8")
    outputs: dict[str, RunOutput] = {}
    for v, cfg in zip(variants, configs):
        if partial is not None:
            cfg = cfg.with_overrides({"out_dir": str(partial)})
        outputs[v.label] = run_experiment(cfg, write=write, progress=progress, data=datasets[_data_key(cfg)], label=v.label)
    rows = build_rows(variants, outputs, ref, base)
    table = format_table(rows, ref.label, base.label)
    if partial is not None and folder is not None:
        (partial / "table.md").write_text(table + "\n", encoding="utf-8")
        (partial / "table.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
        _compare_plots(outputs, partial, config.name)
        partial.rename(folder)
    return CompareResult(folder, rows, table, outputs)


def _compare_plots(outputs: Mapping[str, RunOutput], folder: Path, title: str) -> None:
    """The comparison's figures; without matplotlib (the ``plots`` extra) one log line says they were skipped."""
    try:
        from chillfl.report.plots import plot_curves
    except MissingExtra as exc:
        logging.getLogger(__name__).info("%s; figures skipped", exc)
        return
    from chillfl.report.communication_plots import plot_compare_accuracy_vs_bytes

    plot_curves({label: out.records for label, out in outputs.items()}, folder / "curves.png", title=title)
    plot_compare_accuracy_vs_bytes({label: out.records for label, out in outputs.items()}, folder / "accuracy_vs_bytes.png", title=title)

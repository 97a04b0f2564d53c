"""The comparison's tables: FLex&Chill's Table 4 for one seed, the table over seeds otherwise, and their figures.

The table follows FLex&Chill Table 4: final accuracy and its difference to the
baseline (T = 1), final test loss, and the rounds each variant needs to reach
the *target* — the best global accuracy of the reference run (T = 4 in the
paper; the highest temperature of the grid here) — with the speed-up
rounds(baseline) / rounds(variant).

Over several seeds or a tuning grid, each variant's row is its chosen point's
test numbers as mean +- std, a Student-t 95 % interval, and differences to
the baseline paired per seed (:mod:`chillfl.metrics.stats`). An accuracy's
statistics carry its range (:data:`~chillfl.metrics.stats.FRACTION`, set where
the row defines them); an interval past it is printed clipped and marked
:data:`~chillfl.metrics.stats.CLIPPED`, with one footnote (:data:`CLIPPED_NOTE`) under the table.

Both tables add ``epsilon`` where a variant spent a privacy budget (``[privacy]``)
and ``attack success %`` where one recorded a backdoor's ``attack_success_rate``
(``[attack]``): the final round's value, over seeds mean ± std (lower is better
for the defender).

What a comparison runs and how is :mod:`chillfl.sweeps`; this module only
renders what it ran, and imports nothing of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from chillfl.errors import ConfigError, MissingExtra
from chillfl.metrics.communication import bytes_to_reach
from chillfl.metrics.stats import MIN_SEEDS, CLIPPED_NOTE as CLIPPED_RANGE, FRACTION, Bounds, any_clipped, clip_interval, few_seeds_warning, format_interval, paired_difference, summarize
from chillfl.plots.communication import plot_compare_accuracy_vs_bytes
from chillfl.plots.stop import with_stop_evaluation  # matplotlib-free
from chillfl.report.html import write_report
from chillfl.run_names import BYTES_FIGURE, CURVES_FIGURE, DIFFERENCES_FIGURE, LOCAL_CURVES_FIGURE, PRIVACY_UTILITY_FIGURE
from chillfl.runner import RunOutput, figures_skipped
from chillfl.report.caveats import eval_interval_caveat, global_model_caveat, target_words
from chillfl.storage.results import evaluation_interval, last_value, rounds_to_reach, spent_epsilon, value_at_end
from chillfl.tune import describe_rule, is_local, parse_tune, point_label
from chillfl.wording import counted


REFERENCE_RULE = "--reference or compare.reference, else the variant with the highest set temperature, else the first"
"""How :func:`chillfl.sweeps.plan.choose_reference` picks the reference; the tables recite it, as they do not know
whether the user named the reference or the rule chose it."""


def target_of(ref_label: str, base_label: str) -> str:
    """Which run's best accuracy is the target, and why: the baseline's label alone, or the reference and the rule that
    made it one. Without the why, ``target = best accuracy of T=0.5`` read as if the user had chosen a run other
    than the baseline (the rule picks the highest *set* temperature: T = 0.5 over a baseline with none)."""
    if ref_label == base_label:
        return ref_label  # the baseline: the line says so already ("relative to" it)
    return f"{ref_label} (the reference, not the baseline {base_label}: {REFERENCE_RULE})"


class Labelled(Protocol):
    """What a table needs of a variant (:class:`chillfl.sweeps.plan.Variant` is one): the label its row is named by."""

    @property
    def label(self) -> str: ...


@dataclass
class CompareResult:
    """What a comparison returns (``chillfl.Comparison``): its table as text (``str()`` of it) and as rows, its folder,
    and each variant's selected run's output; :meth:`report` writes the HTML report."""

    folder: Path | None
    """The ``NAME-compare`` folder (one run folder per variant, seed and tuning point); None when nothing was written."""
    rows: list[dict[str, Any]]
    """The table's numbers as data, one row per variant (what ``table.json`` holds)."""
    table: str
    """The table as the command line prints it."""
    outputs: dict[str, RunOutput] = field(default_factory=dict)
    """Each variant's selected run (its tuning point on validation), by variant label, or by ``"LABEL, seed N"`` with
    several seeds; runs that failed are in :attr:`failures` instead."""
    complete: bool = True
    """False after a ``dry_run`` without the dataset's files: only names and options were checked."""
    failures: dict[str, str] = field(default_factory=dict)
    """Run folder name -> how it failed (``diverged at round 3``), for the runs that did not finish; the sweep went on."""
    runs: int = 0
    """How many runs the comparison ran (every variant, tuning point and seed): the denominator of ``failures``. Read back
    from a finished folder (:func:`~chillfl.sweeps.record.read_compare`): the runs its plan made; a dry run: those it would make."""
    pending: int = 0
    """A shard's result (``--shard K/N``): how many of the comparison's runs are not finished yet, in other shards; while
    any is, no table is written (``folder`` is the shared ``.partial`` folder)."""
    planned: list[str] = field(default_factory=list)
    """A ``dry_run``'s plan: the runs it would make (:func:`~chillfl.sweeps.plan.describe_plan`), for ``--dry-run`` to print."""
    recorded: str = ""
    """A ``dry_run``'s ``config.toml``, as the comparison's folder would record it (its flags' grid, seeds and tuning in
    its tables: :func:`~chillfl.sweeps.record.comparison_toml`), for ``--dry-run`` to print: one writer of it."""

    def __str__(self) -> str:
        return self.table

    def __repr__(self) -> str:
        """One line a notebook can show: the dataclass's own repr printed every row and each run's records and tensors
        (tens of kB for a two-round comparison, growing with rounds x runs). The fields themselves hold everything."""
        if self.planned:  # a dry run: nothing ran, and its rows are empty (variants=[] read as a comparison of none)
            said = [f"dry_run, planned={counted(self.runs, 'run')}"]
        elif not self.rows:  # a shard's share, or a finished comparison's shard: its table is not in this result
            said = ["no table", f"runs={self.runs}", f"failures={len(self.failures)}"]
        else:
            labels = [str(r["variant"]) for r in self.rows]
            variants = repr(labels) if len(labels) <= 6 else f"[{', '.join(map(repr, labels[:6]))}, ... {len(labels) - 6} more]"
            said = [f"variants={variants}"]
            if self.rows[0].get("seeds") is not None:  # over seeds; a one-seed table's rows do not name theirs
                said.append(f"seeds={list(self.rows[0]['seeds'])}")
            said += [f"runs={self.runs}", f"failures={len(self.failures)}"]
        if self.pending:
            said.append(f"pending={self.pending}")
        if not self.complete:
            said.append("complete=False")
        said.append(f"folder={self.folder}")
        return f"Comparison({', '.join(said)})"

    def _repr_markdown_(self) -> str | None:
        """The table, which is Markdown already, for a notebook to render (IPython calls this by name; None falls back
        to the repr). Its lines around the table (the target, footnotes) become paragraphs of their own: in Markdown a
        line right above a table would swallow its header row, and consecutive lines would run into one."""
        if not self.table:
            return None
        blocks: list[str] = []
        for line in self.table.splitlines():
            if blocks and not (line.startswith("|") and blocks[-1].startswith("|")):
                blocks.append("")
            blocks.append(line)
        return "\n".join(blocks)

    def no_comparison(self) -> str | None:
        """Why nothing was compared, or None: with two variants or more, a comparison needs the baseline and one
        other variant finished at a common seed (a ``delta_acc`` on the other's row, the baseline finished). A sweep
        whose baseline diverged everywhere compares nothing even when another variant finished (``chillfl``
        exits 3, as when every run failed)."""
        if not self.rows:
            return None
        paired = [r["variant"] for r in self.rows if r.get("delta_acc") is not None or (r.get("baseline") and r.get("final_acc") is not None)]
        if len(self.rows) == 1:
            return None if self.rows[0].get("final_acc") is not None else f"its one variant {self.rows[0]['variant']} failed"
        if len(paired) >= 2:
            return None
        if paired:  # the baseline's own row (finished; an older chillfl wrote 0 as its difference): every other variant failed
            return f"only the baseline {paired[0]} finished; the {counted(len(self.rows) - 1, 'other variant')} failed at every seed where the baseline finished"
        finished = [r["variant"] for r in self.rows if r.get("final_acc") is not None]
        return "the baseline failed at every seed, so no variant has a difference to it" + (f" (finished: {', '.join(finished)})" if finished else "")

    def report(self, path: str | Path = "report.html", title: str | None = None) -> Path:
        """The comparison as one self-contained HTML page (what ``chillfl report FOLDER`` writes)."""
        if self.folder is None:
            raise ConfigError("write", "a comparison run with write=False has no result folder to report on")
        return write_report([self.folder], path, title)


def build_rows(
    variants: Sequence[Labelled], outputs: Mapping[str, RunOutput], ref: Labelled, base: Labelled, metric: str = "global_acc",
    failed: Mapping[str, str] | None = None, global_models: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One row per variant; a variant missing from ``outputs`` failed (``failed[label]`` says how) and has no numbers.

    The baseline's row says ``baseline: true`` and has no difference (null, not the 0 of itself minus itself, which a
    reader of ``table.json`` would take for a measured one); the printed table shows its ``+0.00`` as before.
    ``global_models``: label -> what its accuracy is where it is no trained global model's
    (:func:`~chillfl.report.caveats.global_model_kinds`), its row's ``global_model``."""
    failed = failed or {}
    global_models = global_models or {}
    ref_out, base_out = outputs.get(ref.label), outputs.get(base.label)
    target = ref_out.summary.get(f"best_{metric}") if ref_out is not None else None
    base_rounds = rounds_to_reach(base_out.records, metric, target) if target is not None and base_out is not None else None
    base_final = base_out.summary.get(f"final_{metric}") if base_out is not None else None
    rows = []
    for v in variants:
        out = outputs.get(v.label)
        if out is None:
            rows.append({"variant": v.label, "baseline": v.label == base.label, "failed": failed.get(v.label, "failed"), "final_acc": None, "delta_acc": None, "best_acc": None,
                         "final_loss": None, "final_local_acc": None, "rounds_to_target": None, "speedup": None, "target": target, "eval_interval": None})
            continue
        s = out.summary
        rounds = rounds_to_reach(out.records, metric, target) if target is not None else None
        speedup = base_rounds / rounds if (rounds and base_rounds) else None
        final = s.get(f"final_{metric}")
        rows.append(
            {
                "variant": v.label,
                "baseline": v.label == base.label,
                "final_acc": final,
                "delta_acc": (final - base_final) if final is not None and base_final is not None and v.label != base.label else None,
                "best_acc": s.get(f"best_{metric}"),
                "final_loss": finite_or_none(s.get(f"final_{metric.replace('acc', 'loss')}")),  # an overflowed loss: "-", as over seeds
                "final_local_acc": s.get("final_local_acc"),
                "rounds_to_target": rounds,
                "speedup": speedup,
                "target": target,
                # > 1: rounds_to_target (and mb_to_target) is the first *evaluated* round at the target (eval.every)
                "eval_interval": evaluation_interval(out.records, metric),
            }
        )
        records = out.records
        if (total := last_value(records, "bytes_cumulative")) is not None:  # communication (SCARLET Sec. IV-A)
            rows[-1]["cumulative_mb"] = total / 1e6
            reached = bytes_to_reach(records, metric, target) if target is not None else None  # a skipped round reached it: the bytes so far
            rows[-1]["mb_to_target"] = reached / 1e6 if reached is not None else None
        if (eps := spent_epsilon(records)) is not None:  # [privacy]: the budget the run spent (inf: unbounded by its end)
            rows[-1]["epsilon"] = eps
        if (asr := value_at_end(records, "attack_success_rate")) is not None:  # [attack] backdoor: its success at the end (none: "-")
            rows[-1]["attack_success_rate"] = asr
    for row in rows:  # only where it is no trained global model's: an older table.json's rows, without it, read as they did
        if (kind := global_models.get(str(row["variant"]))) is not None:
            row["global_model"] = kind
    return rows


def format_table(rows: Sequence[Mapping[str, Any]], ref_label: str, base_label: str) -> str:
    def pct(x: float | None, signed: bool = False) -> str:
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return "-"
        return f"{100 * x:+.2f}" if signed else f"{100 * x:.2f}"

    target = rows[0]["target"] if rows else None
    ref_failed = bool(rows) and any(r["variant"] == ref_label and r.get("failed") for r in rows)
    header = ["variant", "accuracy % (diff)", "loss", "local acc %", "rounds to target (speed-up)"]
    with_mb = any("cumulative_mb" in r for r in rows)
    if with_mb:
        header.append("cumulative MB (to target)")
    with_eps = any("epsilon" in r for r in rows)
    if with_eps:
        header.append("epsilon")
    with_asr = any("attack_success_rate" in r for r in rows)
    if with_asr:
        header.append("attack success %")
    if target is None:  # no target, so no rounds to it: "-%" and "never" read as a target no variant reached
        why = f"the reference {ref_label} failed" if ref_failed else f"the reference {ref_label} recorded no global accuracy"
        said = f"target: none ({why}), so no rounds to target"
    else:
        what = target_words(rows, ref_label)  # a reference whose accuracy is no trained global model's: no "global" said of it
        said = f"target = best {'' if what else 'global '}accuracy of {target_of(ref_label, base_label)}{what}: {pct(target)}%"
    lines = [
        f"{said}; differences and speed-ups relative to {base_label}",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    for r in rows:
        best = r.get("best_acc")  # None (a finished run): never a finite accuracy, nothing to reach the target with; absent: an older table.json
        unmeasured = "best_acc" in r and not (best is not None and math.isfinite(best))
        rounds = "-" if r.get("failed") or target is None or unmeasured else "never" if r["rounds_to_target"] is None else str(r["rounds_to_target"])
        speed = f" ({r['speedup']:.2f}x)" if r["speedup"] else ""
        loss = "-" if r["final_loss"] is None else fixed(r["final_loss"], 3)
        name = r["variant"] + (f" ({r['failed']})" if r.get("failed") else "")
        delta = 0.0 if r["variant"] == base_label else r["delta_acc"]  # the baseline's own difference: none recorded, 0 printed
        acc = "-" if r["final_acc"] is None else f"{pct(r['final_acc'])} ({pct(delta, True)})"
        line = f"| {name} | {acc} | {loss} | {pct(r['final_local_acc'])} | {rounds}{speed} |"
        if with_mb:
            mb = "-" if r.get("cumulative_mb") is None else f"{r['cumulative_mb']:.3f}"
            to_target = "" if r.get("mb_to_target") is None else f" ({r['mb_to_target']:.3f})"
            line += f" {mb}{to_target} |"
        if with_eps:
            line += " - |" if r.get("epsilon") is None else f" {r['epsilon']:.3f} |"  # .3g printed 31.998 as 32: within a budget it is not
        if with_asr:
            line += f" {pct(r.get('attack_success_rate'))} |"
        lines.append(line)
    for caveat in (eval_interval_caveat(rows), global_model_caveat(rows, base_label, ref_label)):  # after a blank line: not read as a row of the table
        if caveat is not None:
            lines += ["", caveat]
    return "\n".join(lines)


def finite_or_none(value: float | None) -> float | None:
    """A summary's value, None where it is missing or non-finite (a NaN is ``null`` in ``summary.json`` too)."""
    return None if value is None or not math.isfinite(value) else float(value)


def _range(bounds: Bounds | None) -> dict[str, Any]:
    """A statistic's ``range`` entry (its metric's bounds, which the printed interval is clipped to); none when unbounded."""
    return {} if bounds is None else {"range": [bounds.low, bounds.high]}


def _stat(values: Sequence[float | None], bounds: Bounds | None = None) -> dict[str, Any] | None:
    """Over the seeds that have a value: n, mean, std, the t-interval as computed, and ``bounds`` (the metric's range) as ``range``."""
    xs = [v for v in values if v is not None]
    if not xs:
        return None
    s = summarize(xs, bounds)
    return {"n": s.n, "mean": s.mean, "std": s.std, "ci_low": s.low, "ci_high": s.high, "per_seed": list(values), **_range(s.bounds)}


def _spent(values: Sequence[float | None]) -> dict[str, Any] | None:
    """:func:`_stat` of the seeds' epsilons, unbounded (mean inf, no std, no interval) where a seed's is
    (:func:`~chillfl.storage.results.spent_epsilon`). Why: the budget over seeds is then no number, and the mean and
    std of an inf printed ``inf ± nan``, where one seed's table prints ``inf``."""
    stat = _stat(values)
    if stat is not None and not math.isfinite(stat["mean"]):
        stat.update(mean=math.inf, std=None, ci_low=None, ci_high=None)
    return stat


def _paired(values: Sequence[float | None], base: Sequence[float | None], bounds: Bounds | None = None) -> dict[str, Any] | None:
    """values - base, paired per seed (the seeds where both exist); None when there is no pair. ``bounds``: the metric's
    range; the difference's ``range`` is that of a difference of two such values. ``per_seed`` has one entry per seed,
    None where a side has no value, as :func:`_stat`'s: dropping those put a difference under another seed."""
    pairs = [(a, b) for a, b in zip(values, base) if a is not None and b is not None]
    if not pairs:
        return None
    p = paired_difference([a for a, _ in pairs], [b for _, b in pairs], bounds)
    differences = iter(p.differences)
    per_seed = [next(differences) if a is not None and b is not None else None for a, b in zip(values, base)]
    return {"n": p.n, "mean": p.summary.mean, "std": p.summary.std, "ci_low": p.summary.low, "ci_high": p.summary.high,
            "per_seed": per_seed, "sign_holds": p.sign_holds, **_range(p.summary.bounds)}


def nonfinite_local_acc(out: RunOutput | None) -> bool:
    """Whether a finished run's last recorded local accuracy is NaN or infinite: it finished and counts, but its local
    accuracy is no number for the seed table's statistics, which leave it out (and say so: :func:`local_acc_caveat`)."""
    value = last_value(out.records, "local_acc") if out is not None else None
    return isinstance(value, float) and not math.isfinite(value)


def build_seed_rows(
    variants: Sequence[Labelled],
    runs: Mapping[tuple[str, int], RunOutput | None],
    seeds: Sequence[int],
    ref: Labelled,
    base: Labelled,
    chosen: Mapping[str, tuple[Mapping[str, Any], list[float]]] | None,
    metric: str = "global_acc",
    failed: Mapping[tuple[str, int], str] | None = None,
    global_models: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Rows over seeds; ``runs[(label, seed)]``: the chosen point's run (None: it failed; ``failed[(label, seed)]`` says how).

    The baseline's row says ``baseline: true`` and has no differences (``delta_acc``, ``delta_local_acc`` null: see
    :func:`build_rows`); :func:`format_seed_table` prints its paired difference to itself as before. ``global_models``:
    as :func:`build_rows`' (a row's ``global_model``)."""
    failed = failed or {}
    global_models = global_models or {}

    def summary(label: str, seed: int, key: str) -> float | None:
        out = runs[(label, seed)]
        value = out.summary.get(key) if out is not None else None
        return None if value is None or not math.isfinite(value) else float(value)

    def final_record(label: str, seed: int, key: str, final: Callable[[Sequence[Mapping[str, Any]], str], Any] = last_value) -> float | None:
        """``key`` in the last record that has it (None: a failed run, or never recorded; a skipped last round has none);
        ``final``: how the run's final value is read (:func:`~chillfl.storage.results.value_at_end`: the last round's alone)."""
        out = runs[(label, seed)]
        value = final(out.records, key) if out is not None else None
        return None if value is None or not math.isfinite(value) else float(value)

    targets = [summary(ref.label, s, f"best_{metric}") for s in seeds]
    base_acc = [summary(base.label, s, f"final_{metric}") for s in seeds]
    base_local = [summary(base.label, s, "final_local_acc") for s in seeds]
    rows = []
    for v in variants:
        acc = [summary(v.label, s, f"final_{metric}") for s in seeds]
        local = [summary(v.label, s, "final_local_acc") for s in seeds]
        own = v.label == base.label
        rounds = []
        for s, target in zip(seeds, targets):
            out = runs[(v.label, s)]
            rounds.append(rounds_to_reach(out.records, metric, target) if out is not None and target is not None else None)
        row: dict[str, Any] = {
            "variant": v.label,
            "baseline": own,
            "seeds": list(seeds),
            "diverged_seeds": [s for s in seeds if runs[(v.label, s)] is None],
            "failed": {str(s): failed.get((v.label, s), "diverged") for s in seeds if runs[(v.label, s)] is None},
            # accuracies are fractions (FRACTION): their intervals are shown clipped to [0, 100] %, their differences' to +-100
            "final_acc": _stat(acc, FRACTION),
            "delta_acc": None if own else _paired(acc, base_acc, FRACTION),
            "final_val_acc": _stat([summary(v.label, s, "final_val_acc") for s in seeds], FRACTION),
            "final_local_val_acc": _stat([summary(v.label, s, "final_local_val_acc") for s in seeds], FRACTION),
            "best_val_acc": _stat([summary(v.label, s, "best_val_acc") for s in seeds], FRACTION),
            "best_local_val_acc": _stat([summary(v.label, s, "best_local_val_acc") for s in seeds], FRACTION),
            "final_loss": _stat([summary(v.label, s, f"final_{metric.replace('acc', 'loss')}") for s in seeds]),
            "final_local_acc": _stat(local, FRACTION),
            "delta_local_acc": None if own else _paired(local, base_local, FRACTION),
            "rounds_to_target": rounds,
            "target": targets,
            # the most over its finished seeds; > 1: rounds_to_target is the first *evaluated* round at the target (eval.every)
            "eval_interval": max((evaluation_interval(o.records, metric) for s in seeds if (o := runs[(v.label, s)]) is not None), default=None),
        }
        unmeasured = [s for s in seeds if runs[(v.label, s)] is not None and summary(v.label, s, f"best_{metric}") is None]
        if unmeasured:  # finished without one finite accuracy: no round could reach the target, nor fail to (format_seed_table)
            row["unmeasured_seeds"] = unmeasured
        nonfinite_local = [s for s in seeds if nonfinite_local_acc(runs[(v.label, s)])]
        if nonfinite_local:  # finished, but left out of the local acc statistics: named under the table (local_acc_caveat)
            row["nonfinite_local_acc_seeds"] = nonfinite_local
        mb = [None if (b := final_record(v.label, s, "bytes_cumulative")) is None else b / 1e6 for s in seeds]
        if any(x is not None for x in mb):  # communication (SCARLET Sec. IV-A)
            row["cumulative_mb"] = _stat(mb)
        eps = [None if (run := runs[(v.label, s)]) is None else spent_epsilon(run.records) for s in seeds]  # inf: unbounded by its end
        if any(x is not None for x in eps):  # [privacy]: the budget each seed's run spent
            row["epsilon"] = _spent(eps)
        asr = [final_record(v.label, s, "attack_success_rate", value_at_end) for s in seeds]  # the last round's, not an earlier one's
        if any(x is not None for x in asr):  # [attack] backdoor: its success against each seed's final global model
            row["attack_success_rate"] = _stat(asr, FRACTION)
        if chosen is not None:
            point, scores = chosen[v.label]
            row["tuned"] = dict(point)
            # None: diverged at a seed (null in table.json); NaN: finished with a non-finite score at a seed (null there too)
            row["validation_scores"] = [None if math.isinf(x) else x for x in scores]
        if (kind := global_models.get(v.label)) is not None:  # its accuracy is no trained global model's (global_model_caveat)
            row["global_model"] = kind
        rows.append(row)
    return rows


LARGE = 1e6
"""From here a cell's number is written in exponent form: a diverging loss of 2.7e+17 printed as 18 digits and a
point filled the row (its std too), and its digits past the third said nothing."""


def fixed(value: float, digits: int, sign: str = "") -> str:
    """``value`` with ``digits`` decimals, or in exponent form with as many significant digits when it is huge."""
    return f"{value:{sign}.{digits}e}" if abs(value) >= LARGE else f"{value:{sign}.{digits}f}"


def _pm(stat: Mapping[str, Any] | None, scale: float = 100.0, digits: int = 2, signed: bool = False) -> str:
    if stat is None:
        return "-"
    text = fixed(scale * stat["mean"], digits, "+" if signed else "")
    if stat["std"] is not None:
        text += f" ± {fixed(scale * stat['std'], digits)}"
    return text


CLIPPED_NOTE = CLIPPED_RANGE + "; table.json keeps its ends (ci_low, ci_high)"
"""The footnote under a seed table with a :data:`~chillfl.metrics.stats.CLIPPED` interval: the shared one, and where the ends are kept."""


def _ci(stat: Mapping[str, Any] | None, signed: bool = False) -> str:
    """``[low, high]`` in %, clipped to the statistic's ``range`` (its metric's bounds) and then marked (:func:`~chillfl.metrics.stats.format_interval`)."""
    if stat is None or stat["ci_low"] is None:
        return "-"
    bounds = stat.get("range")
    return format_interval(clip_interval(stat["ci_low"], stat["ci_high"], None if bounds is None else Bounds(*bounds)), signed=signed)




NONFINITE_LOCAL = "the others failed or ended with a non-finite local accuracy"
"""Why a local statistic has fewer seeds than the runs that finished: a run can finish with a NaN local accuracy."""


def fewer_pairs_warnings(rows: Sequence[Mapping[str, Any]], seeds: int, local: bool = False) -> list[str]:
    """:func:`few_seeds_warning` for the rows whose numbers rest on fewer than :data:`MIN_SEEDS` of the ``seeds``: a
    paired difference (the others failed, the variant's run or the baseline's), or a row's own accuracy where its
    difference does not say so already (the baseline's, a lone variant's); with ``local`` the local accuracy and its
    difference too (a finished run's NaN local accuracy is left out). One line per count, naming the rows (quoted).
    The table's own warning counts the seeds asked for; a "sign holds 2/2" over 3 seeds said nothing of its width."""
    def n_of(row: Mapping[str, Any], key: str) -> int | None:
        stat = row.get(key)
        return stat["n"] if isinstance(stat, Mapping) and stat.get("n") is not None and stat["n"] < MIN_SEEDS else None

    kinds = [("delta_acc", "final_acc", "diff", "accuracy", "the others failed")]
    if local:
        kinds.append(("delta_local_acc", "final_local_acc", "local diff", "local acc", NONFINITE_LOCAL))
    fewer: dict[int, list[str]] = {}
    for delta_key, own_key, diff_name, own_name, why in kinds:
        diffs: dict[int, list[str]] = {}
        owns: dict[int, list[str]] = {}
        for r in rows:
            label = repr(r["variant"])
            if (n := n_of(r, delta_key)) is not None:
                diffs.setdefault(n, []).append(label)
            elif (n := n_of(r, own_key)) is not None:  # no difference on fewer seeds names it: the row's own values
                owns.setdefault(n, []).append(label)
        for n, labels in diffs.items():
            fewer.setdefault(n, []).append(f"the {diff_name} of {', '.join(labels)} pairs {n} of the {seeds} seeds: {why}")
        for n, labels in owns.items():
            fewer.setdefault(n, []).append(f"the {own_name} of {', '.join(labels)} rests on {n} of the {seeds} seeds: {why}")
    return [f"{few_seeds_warning(n)} ({'; '.join(parts)})" for n, parts in sorted(fewer.items())]


def local_acc_caveat(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """One line naming the finished runs whose final local accuracy is non-finite (``nonfinite_local_acc_seeds``); None
    when there are none. Their local accuracy is left out of the local acc column and its paired difference, which
    otherwise rested on fewer seeds unsaid; the run still counts everywhere else (it finished)."""
    runs = [f"{r['variant']!r} at seed {s}" for r in rows for s in r.get("nonfinite_local_acc_seeds") or []]
    if not runs:
        return None
    count = f"{len(runs)} run{'s' if len(runs) != 1 else ''}"
    return (f"local accuracy caveat: {count} finished with a non-finite final local accuracy (not diverged; their global "
            f"numbers count, the local acc column and its diff leave them out): {', '.join(runs)}.")


def _differences(row: Mapping[str, Any], base_label: str) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
    """A seed row's paired differences as the table prints them: the baseline's (none recorded) are its own values paired
    with themselves (+0.00 ± 0.00 over the seeds it finished), so the printed table reads as it always has."""
    if row["variant"] != base_label:
        return row["delta_acc"], row.get("delta_local_acc")
    own = [(row.get(key) or {}).get("per_seed") or [] for key in ("final_acc", "final_local_acc")]
    return _paired(own[0], own[0], FRACTION), _paired(own[1], own[1], FRACTION)


def local_clients_phrase(eval_clients: Sequence[str]) -> str:
    """Whose accuracies ``local_acc`` averages, by the runs' ``eval.clients``. Why: under ``"all"`` it is every client that
    has reported, each at its value from its last participation, not the final round's clients."""
    kinds = set(eval_clients) - {"none"}
    sampled = "of the round's clients"
    every = "over every client that has reported, each at its latest value (from its last participation)"
    if kinds == {"all"}:
        return every
    if kinds == {"sampled", "all"}:
        return f'{sampled} (eval.clients = "sampled") or {every} ("all")'
    return sampled


def format_seed_table(
    rows: Sequence[Mapping[str, Any]], ref_label: str, base_label: str, tune: Mapping[str, Sequence[Any]] | None, select: str, validation: float,
    local: bool = False, own: Mapping[str, Mapping[str, Sequence[Any]]] | None = None, eval_clients: Sequence[str] = ("sampled",),
) -> str:
    """The seed table; ``local`` adds each variant's local accuracy (its clients' own models on their own splits) and its paired diff.

    ``tune``: the shared grid (None: no tuning); ``own``: variant label -> its own grid, crossed with the shared one for it alone.
    ``eval_clients``: the runs' ``eval.clients``, which say whose local accuracy the column averages (the caption names it).
    """
    own = own or {}
    seeds = rows[0]["seeds"] if rows else []
    paired = len(rows) > 1  # one variant (a method over seeds): no difference to show
    target = f"target = best accuracy of {target_of(ref_label, base_label)} at the same seed{target_words(rows, ref_label)}"
    lines = [
        f"seeds {', '.join(map(str, seeds))} (n = {len(seeds)}); accuracy = final global test accuracy %, mean ± std over seeds, 95 % CI (Student t)",
        f"diff = accuracy - {base_label}'s, paired per seed, mean ± std [95 % CI]; sign holds = seeds where the diff has the mean's sign; {target}"
        if paired else target,
    ]
    if seeds and len(seeds) < MIN_SEEDS:
        lines.append(few_seeds_warning(len(seeds)))
    else:
        lines += fewer_pairs_warnings(rows, len(seeds), local)
    local_rule = is_local(select)
    grid = "; ".join([f"{k} in {{{', '.join(map(str, v))}}}" for k, v in (tune or {}).items()]
                     + [f"{label} also {k} in {{{', '.join(map(str, v))}}}" for label, table in own.items() for k, v in table.items()])
    if tune is not None and local_rule:  # selection on the clients' own validation splits: the header names the rule
        lines.append(f"tuned per variant on the clients' local validation splits (select = {select}: {describe_rule(select)}; "
                     f"drawn from eval.validation = {validation:g} of the test set; mean over seeds), reported on the test set: {grid}")
    elif tune is not None:
        lines.append(f"tuned per variant on the validation split (eval.validation = {validation:g} of the test set, "
                     f"{select} val acc, mean over seeds), reported on the test set: {grid}")
    if local:
        lines.append(f"local acc = final mean accuracy {local_clients_phrase(eval_clients)}, each on its own held-out split with its own model "
                     "(a personalised method's personal model), mean ± std over seeds"
                     + (f"; local diff = local acc - {base_label}'s, paired per seed [95 % CI]" if paired else ""))
    with_mb = any("cumulative_mb" in r for r in rows)
    with_eps = any("epsilon" in r for r in rows)
    with_asr = any("attack_success_rate" in r for r in rows)
    if with_asr:
        lines.append("attack success = the backdoor's success rate at the final round (triggered test inputs of other labels classified "
                     "as its target), mean ± std over seeds; lower is better for the defender")
    header = ["variant", *([f"tuned ({select})"] if tune is not None and local_rule else ["tuned"] if tune is not None else []),
              "local val acc %" if local_rule else "val acc %", "accuracy %", "95 % CI", *(["diff (paired)", "diff 95 % CI", "sign holds"] if paired else []),
              *(["local acc %", *(["local diff (paired)", "local diff 95 % CI"] if paired else [])] if local else []), "loss",
              "rounds to target (reached)", *(["cumulative MB"] if with_mb else []), *(["epsilon"] if with_eps else []),
              *(["attack success %"] if with_asr else [])]
    lines += ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    # the validation number the rule selected on (a "best" rule's best round, not the final one the table of every point disowns)
    val_key = f"{'best' if select.endswith('best') else 'final'}_{'local_' if local_rule else ''}val_acc"
    clipped = False
    for r in rows:
        delta, delta_local = _differences(r, base_label)
        reached = [x for x in r["rounds_to_target"] if x is not None]
        # out of the seeds with a target that the variant finished: a seed whose reference failed has no target to reach
        # (it counted as "never reached"), and a seed where the variant failed is named in its row
        # a seed whose accuracy was never a number (unmeasured_seeds) is left out as a failed one: "never" is a target a
        # measured variant did not reach
        failed_seeds = {str(s) for s in [*(r.get("diverged_seeds") or []), *(r.get("unmeasured_seeds") or [])]}
        could = sum(1 for s, t in zip(seeds, r.get("target") or []) if t is not None and str(s) not in failed_seeds)
        rounds = "-" if not could else "never" if not reached else f"{sum(reached) / len(reached):.1f} ({len(reached)}/{could})"
        failed = r.get("failed") or {str(s): "diverged" for s in r["diverged_seeds"]}
        name = r["variant"] + (" (" + "; ".join(f"seed {s}: {why}" for s, why in failed.items()) + ")" if failed else "")
        cells = [name]
        if tune is not None:
            picked = point_label(r.get("tuned") or {}) or "-"
            if r.get("validation_scores") and not any(x is not None and math.isfinite(x) for x in r["validation_scores"]):
                # no point finished with a finite score at every seed, so none was chosen: the row's numbers are the first point's
                picked = f"none chosen (every point failed at a seed); {picked} shown"
            cells.append(picked)
        cells += [_pm(r.get(val_key)), _pm(r["final_acc"]), _ci(r["final_acc"])]
        if paired:
            cells += [_pm(delta, signed=True), _ci(delta, signed=True), "-" if delta is None else f"{delta['sign_holds']}/{delta['n']}"]
        if local:
            cells.append(_pm(r["final_local_acc"]))
            if paired:
                cells += [_pm(delta_local, signed=True), _ci(delta_local, signed=True)]
        cells += [_pm(r["final_loss"], 1.0, 3), rounds]
        if with_mb:
            cells.append(_pm(r.get("cumulative_mb"), 1.0, 3))
        if with_eps:
            cells.append(_pm(r.get("epsilon"), 1.0, 3))
        if with_asr:
            cells.append(_pm(r.get("attack_success_rate")))
        lines.append("| " + " | ".join(cells) + " |")
        clipped = clipped or any_clipped(cells)
    if clipped:  # after a blank line: a line right under a markdown table would be read as one of its rows
        lines += ["", CLIPPED_NOTE]
    if local and (caveat := local_acc_caveat(rows)) is not None:
        lines += ["", caveat]
    for caveat in (eval_interval_caveat(rows), global_model_caveat(rows, base_label, ref_label)):
        if caveat is not None:
            lines += ["", caveat]
    if tune is not None:
        points = parse_tune(tune)
        what = "local validation accuracy" if local_rule else "validation accuracy"
        when = "best" if select.endswith("best") else "final"
        nonfinite = any(x is not None and not math.isfinite(x) for r in rows for x in r["validation_scores"])
        said = "diverged = at one seed or more" + ("; non-finite = finished with a non-finite score at one seed or more" if nonfinite else "")
        lines += ["", f"{what} % at every tuning point ({when} round, mean over seeds; {said})",
                  "| variant | " + " | ".join(point_label(p) or "no shared grid" for p in points) + " |", "|---|" + "|".join("---" for _ in points) + "|"]
        for r in rows:
            scores = ["diverged" if x is None else "non-finite" if not math.isfinite(x) else f"{100 * x:.2f}" for x in r["validation_scores"]]
            extra = parse_tune(own[r["variant"]]) if r["variant"] in own else [{}]  # its own points vary fastest: one line each
            for i, point in enumerate(extra):
                label = r["variant"] + (f", {point_label(point)}" if point else "")
                lines.append(f"| {label} | " + " | ".join(scores[i :: len(extra)]) + " |")
    return "\n".join(lines)


def write_compare_figures(
    outputs: Mapping[str, RunOutput], folder: Path, title: str, unfinished: Sequence[str] = (),
    rows: Sequence[Mapping[str, Any]] = (), units: Mapping[str, str] | None = None, order: Sequence[str] = (),
) -> None:
    """The comparison's figures (``unfinished``: variants whose run did not finish, named in the curves' legend), and
    ``privacy_utility.png`` when a row of ``rows`` spent a privacy budget (``units``: label -> what its epsilon bounds);
    without matplotlib (the ``plots`` extra) one log line says they were skipped.

    ``order``: every variant's label in the comparison's order, so that a variant keeps its colour (its index there)
    in every figure, the HTML report's included, also after a variant before it did not finish (it was drawn after the
    finished ones, and left out of accuracy vs bytes, shifting the colours of those after it)."""
    try:
        from chillfl.plots.privacy_utility import plot_privacy_utility
        from chillfl.plots.run import plot_curves
    except MissingExtra as exc:
        figures_skipped(exc)  # once a call: its runs said it already
        return

    labels = list(order) if set(order) >= {*outputs, *unfinished} else [*outputs, *unfinished]
    # an unfinished one: its slot, nothing drawn; a stopped one: its summary's stop-round evaluation, drawn apart
    curves = {label: with_stop_evaluation(outputs[label].records, outputs[label].summary) if label in outputs else [] for label in labels}
    plot_curves(curves, folder / CURVES_FIGURE, title=title)
    plot_compare_accuracy_vs_bytes(curves, folder / BYTES_FIGURE, title=title)
    plot_privacy_utility(rows, folder / PRIVACY_UTILITY_FIGURE, title=title, units=units)


def write_band_figures(
    bands: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]], first_seed: int, folder: Path, title: str,
    rows: Sequence[Mapping[str, Any]] = (), baseline: str = "", local: bool = False, units: Mapping[str, str] | None = None,
) -> None:
    """Over seeds: curves with ± 1 std bands (``local_curves.png`` too with ``local``), the paired differences from
    ``baseline`` in ``rows`` (``differences.png``), accuracy vs bytes at one seed (:func:`one_seed`), and ``privacy_utility.png`` when
    a row spent a privacy budget (``units`` as in :func:`write_compare_figures`); skipped without matplotlib."""
    try:
        from chillfl.plots.bands import plot_band_curves
        from chillfl.plots.differences import plot_differences
        from chillfl.plots.privacy_utility import plot_privacy_utility
    except MissingExtra as exc:
        figures_skipped(exc)  # once a call: its runs said it already
        return

    plot_band_curves(bands, folder / CURVES_FIGURE, title=title)
    if local:
        plot_band_curves(bands, folder / LOCAL_CURVES_FIGURE, key="local_acc", title=f"{title}, local models")
    if rows:
        plot_differences(rows, baseline, folder / DIFFERENCES_FIGURE, title=title, local=local)
    one, seed = one_seed(bands, first_seed, rows)
    plot_compare_accuracy_vs_bytes(one, folder / BYTES_FIGURE, title=f"{title} (seed {seed})")
    plot_privacy_utility(rows, folder / PRIVACY_UTILITY_FIGURE, title=title, units=units)


def one_seed(
    bands: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]], first_seed: int, rows: Sequence[Mapping[str, Any]] = (),
) -> tuple[dict[str, Sequence[Mapping[str, Any]]], int]:
    """One run per variant for a figure of one seed, and that seed: the first seed at which every variant with a
    finished run finished. Where there is none, each variant's first finished run, its label naming its seed where it
    is not the returned one. ``bands[label]``: the finished seeds' records in seed order, as ``rows`` (the seed table's:
    ``seeds``, ``diverged_seeds``) tell which; a variant without a row counts as finished at every seed from ``first_seed``.

    The figure drew ``runs[0]`` under "seed 0": a variant whose seed-0 run diverged was drawn at another seed, unsaid."""
    finished: dict[str, list[int]] = {}
    for label, runs in bands.items():
        row = next((r for r in rows if r.get("variant") == label), None)
        seeds = [first_seed + i for i in range(len(runs))] if row is None else [s for s in row["seeds"] if s not in row["diverged_seeds"]]
        finished[label] = seeds[: len(runs)]
    order = next((list(r["seeds"]) for r in rows if r.get("seeds")), [first_seed])
    common = [s for s in order if all(s in seeds for seeds in finished.values() if seeds)]
    seed = common[0] if common else first_seed
    out: dict[str, Sequence[Mapping[str, Any]]] = {}
    for label, runs in bands.items():
        seeds = finished[label]
        if not runs:  # no line; kept so that every other variant has its colour of curves.png
            out[label] = []
        elif seed in seeds:
            out[label] = runs[seeds.index(seed)]
        else:
            out[f"{label} (seed {seeds[0]})"] = runs[0]
    return out, seed

"""``chillfl analyze scarlet-deficit``: why SCARLET trails DS-FL at CPU scale (issue 29), arm by arm, over seeds.

SCARLET differs from DS-FL in two places: Enhanced ERA (Eq. 4, sharpness
beta) instead of ERA (Eq. 2, temperature T), and the synchronized cache
(Algorithm 2, duration D). This study takes them apart on the bundled CPU
setting (``scarlet/dsfl-vs-scarlet-digits``: |P| = 400, |P^t| = 100):

* **D sweep** (beta = 2): D in ``--durations``, including D scaled to the run
  as in the paper (D / rounds = 50 / 2,000, at least 1);
* **beta x D**: beta in ``--betas`` at D = 0 (no cache: the aggregation alone),
  beta = 1 and 2 at the largest D. beta = 1, D = 0 is DS-FL with ERA replaced by the
  plain mean, bit for bit (tests/test_scarlet_mechanism.py), so
  "beta = 1, D = 0" vs DS-FL measures ERA, beta = 2 vs beta = 1 at D = 0
  measures the sharpening, and D > 0 vs D = 0 at one beta measures the cache;
* **|P^t| / |P|** in ``--subset-sizes`` / |P| (DS-FL rerun at each size);
* **smooth**: the D sweep with the server accuracy averaged over the last
  quarter of the rounds (at this scale one round's accuracy can swing by
  tens of points).

Per arm, paired per seed against DS-FL at the same setting: server accuracy
difference (mean, sample std, 95 % Student-t interval, seeds where the sign
holds; the interval shown clipped to +-100 points and marked, with one
footnote, as ``chillfl compare`` marks it), the bytes ratio (cumulative, SCARLET / DS-FL), the cache hit ratio
(share of P^t served from the cache, mean over the rounds) and the mean age
t - t_c of the cached soft-labels used (mean over the rounds that used any),
plus the mean entropy of the server's targets zhat^t.

Choices
-------
* **One run per arm and seed, read at every length.** Each arm runs
  ``max(--rounds)`` rounds; the numbers at a shorter length L are its round-L
  records. The lr is constant and every round is evaluated, so the first L
  rounds of a longer run are the L-round run bit for bit (tested). The scaled D
  depends on L; its row at length L reads the run with that D.
* The executor is the config's (``sequential`` unless overridden); the output
  names it and the machine, since vectorised runs drift from sequential ones
  over rounds (docs/scarlet.md).

Checked (2026-12) against: SCARLET Sec. IV-A (D = 50 in 2,000 rounds, the
scaled D), Eq. 2 / Eq. 4 (the beta = 1, D = 0 arm is DS-FL with the plain
mean), Algorithm 2 (the cache hit ratio is the share of P^t signalled CACHED,
averaged over the rounds; its closed form is in
:mod:`chillfl.analysis.softlabels`). Paired differences are per seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import platform
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from chillfl.analysis.counting import Counted
from chillfl.config import EXECUTORS, load_config, parse_overrides
from chillfl.distillation.era import require_beta
from chillfl.errors import ConfigError, choice_error
from chillfl.options import comma_items
from chillfl.experiments import resolve_config
from chillfl.metrics.stats import CLIPPED_NOTE, FRACTION, MIN_SEEDS, any_clipped, few_seeds_warning, format_interval, paired_difference

PAPER_D, PAPER_ROUNDS = 50, 2000
DEFAULT_CONFIG = "scarlet/dsfl-vs-scarlet-digits"
PARTS = ("d", "beta", "ratio", "drift", "smooth")


def scaled_duration(rounds: int) -> int:
    """D scaled to a run of ``rounds`` as in the paper (50 in 2,000 rounds), rounded, at least 1 (D = 0 is no cache)."""
    return max(1, math.floor(rounds * PAPER_D / PAPER_ROUNDS + 0.5))


@dataclass(frozen=True)
class Arm:
    """One variant of the study: DS-FL (``beta`` None) or SCARLET (beta, D), at a public subset size."""

    beta: float | None
    duration: int = 0
    subset: int | None = None  # None: the config's |P^t|
    executor: str | None = None  # None: the config's

    def label(self) -> str:
        name = "DS-FL" if self.beta is None else f"SCARLET beta={self.beta:g}, D={self.duration}"
        return name if self.executor is None else f"{name}, {self.executor}"


@dataclass(frozen=True)
class Measure:
    """One run read at round L."""

    acc: float
    bytes: float
    hit: float
    age: float | None
    entropy: float | None


def read(records: Sequence[Mapping[str, Any]], length: int, window: int = 1) -> Measure:
    """Round ``length`` of a run; ``acc`` averages the server accuracy of its last ``window`` rounds (1: that round's)."""
    rows = records[:length]
    ages = [r["cache_age_mean"] for r in rows if r.get("cache_age_mean") is not None]
    ents = [r["soft_label_entropy"] for r in rows if r.get("soft_label_entropy") is not None]
    return Measure(
        acc=sum(float(r["global_acc"]) for r in rows[-window:]) / len(rows[-window:]),
        bytes=float(rows[-1]["bytes_cumulative"]),
        hit=sum(float(r.get("cache_hit_ratio", 0.0)) for r in rows) / len(rows),
        age=sum(ages) / len(ages) if ages else None,
        entropy=sum(ents) / len(ents) if ents else None,
    )


def accuracy_difference(ours: Sequence[float], theirs: Sequence[float]) -> str:
    """The table's "arm - DS-FL" cell: server accuracies (fractions) paired per seed, in points, as mean ± std [95 % CI],
    seeds where the sign holds; the interval clipped to +-100 points and marked as ``chillfl compare`` marks it
    (:func:`~chillfl.metrics.stats.format_interval`). One seed: the mean alone."""
    diff = paired_difference(ours, theirs, FRACTION)
    d = diff.summary
    text = f"{100 * d.mean:+.2f}"
    shown = d.shown()
    if d.std is not None and shown is not None:
        text += f" ± {100 * d.std:.2f} {format_interval(shown, signed=True)}, {diff.sign_holds}/{diff.n}"
    return text


class Study:
    """Runs arms (memoised per arm and seed) on one base config."""

    def __init__(self, config: Any, seeds: Sequence[int], rounds: int, progress: bool = True, total: int = 0) -> None:
        self.config, self.seeds, self.rounds, self.progress = config, list(seeds), rounds, progress
        self._runs: dict[tuple[Arm, int, int], list[dict[str, Any]]] = {}
        self.clipped = False
        """Whether a row printed so far shows an interval clipped to +-100 points (then the output ends with its footnote)."""
        self.counted = Counted(total, "scarlet-deficit", on=progress)
        """The ``[k/N]`` of each run's line: ``total`` is :class:`Planner`'s count of the runs the tables need."""

    def arm_config(self, arm: Arm, seed: int, rounds: int) -> Any:
        table = dict(self.config.distillation)
        if arm.subset is not None:
            table["subset_size"] = arm.subset
        if arm.beta is not None:
            table = {k: v for k, v in table.items() if k not in ("temperature", "aggregation")}
            table.update(method="scarlet", beta=arm.beta, cache_duration=arm.duration)
        cfg = dataclasses.replace(self.config, distillation=table, seed=seed, variants={}, compare={}, executor=arm.executor or self.config.executor)
        return cfg.with_overrides({"federation.rounds": rounds})

    def records(self, arm: Arm, seed: int, rounds: int) -> list[dict[str, Any]]:
        """The arm's run at ``seed``: ``rounds`` rounds, or the longest run already made (its prefix is the shorter run)."""
        from chillfl.runner import run_experiment  # lazy: torch; the study's planning and tables import none

        done = [r for (a, s, r) in self._runs if a == arm and s == seed and r >= rounds]
        if done:
            return self._runs[(arm, seed, max(done))]
        self.counted.starting(f"{arm.label()}, |P^t| = {arm.subset or self.config.distillation['subset_size']}, seed {seed}, {rounds} rounds")
        out = self._runs[(arm, seed, rounds)] = run_experiment(self.arm_config(arm, seed, rounds), write=False, progress=False).records
        return out

    def row(self, arm: Arm, length: int, rounds: int | None = None, base: Arm | None = None, window: int = 1) -> str:
        """Arm vs ``base`` (DS-FL at the same |P^t|) at round ``length`` of runs of ``rounds`` (default: the study's length)."""
        n, base = self.rounds if rounds is None else rounds, base or Arm(None, subset=arm.subset)
        ours = [read(self.records(arm, s, n), length, window) for s in self.seeds]
        theirs = [read(self.records(base, s, n), length, window) for s in self.seeds]
        acc = accuracy_difference([m.acc for m in ours], [m.acc for m in theirs])
        self.clipped = self.clipped or any_clipped([acc])
        ratio = sum(a.bytes / b.bytes for a, b in zip(ours, theirs)) / len(ours)
        ages = [m.age for m in ours if m.age is not None]
        age = f"{sum(ages) / len(ages):.1f}" if ages else "-"
        ents = [m.entropy for m in ours if m.entropy is not None]
        ent = f"{sum(ents) / len(ents):.3f}" if ents else "-"
        mean = lambda xs: 100 * sum(xs) / len(xs)  # noqa: E731
        return (f"| {length} | {arm.label()} | {mean([m.acc for m in ours]):.2f} | {mean([m.acc for m in theirs]):.2f} | {acc} | "
                f"{ratio:.3f} | {sum(m.hit for m in ours) / len(ours):.3f} | {age} | {ent} |")


class Planner(Study):
    """The tables' pass without a run: which runs (arm, seed, rounds) they need, in the order :class:`Study` makes them.
    Why: the arms' progress lines counted nothing ("DS-FL, ..., seed 0, 3 rounds" of how many?)."""

    def __init__(self, config: Any, seeds: Sequence[int], rounds: int) -> None:
        super().__init__(config, seeds, rounds, progress=False)
        self.planned: list[tuple[Arm, int, int]] = []

    def records(self, arm: Arm, seed: int, rounds: int) -> list[dict[str, Any]]:
        if not any(a == arm and s == seed and r >= rounds for a, s, r in self.planned):  # Study's prefix rule
            self.planned.append((arm, seed, rounds))
        return []

    def row(self, arm: Arm, length: int, rounds: int | None = None, base: Arm | None = None, window: int = 1) -> str:
        n, base = self.rounds if rounds is None else rounds, base or Arm(None, subset=arm.subset)
        for a in (arm, base):
            for s in self.seeds:
                self.records(a, s, n)
        return ""


HEADER = ("| rounds | arm | server acc % | DS-FL % | arm - DS-FL, points: mean ± std [95 % CI], sign holds | bytes ratio | "
          "cache hit ratio | mean age of cached soft-labels (rounds) | target entropy (nats) |\n|---|---|---|---|---|---|---|---|---|")


def _numbers(text: str, field: str, kind: type) -> list[Any]:
    try:
        return [kind(v) for v in comma_items(text, field, f"comma-separated {kind.__name__}s")]
    except ValueError:
        raise ConfigError(field, f"expected comma-separated {kind.__name__}s, got {text!r}") from None


def machine(threads: int) -> str:
    """The machine, in words (the docs say which one made each block); ``threads``: the runs' intra-op threads."""
    import torch  # lazy: only the docs' machine line needs it

    return f"{platform.machine()}, {os.cpu_count()} logical CPUs, torch {torch.__version__}, {threads or 'default'} intra-op thread(s) per run"


def distillation_method(table: Any) -> str:
    """What a config's ``[distillation]`` names, in words. Why: a config without one was reported as "got None"."""
    method = table.get("method") if table else None
    if method is None:
        return "a [distillation] table without a method" if table else "a run with no [distillation] table"
    return f"method {method!r}"


def cmd_scarlet_deficit(args: argparse.Namespace) -> int:
    seeds = _numbers(args.seeds, "--seeds", int)
    lengths = sorted(set(_numbers(args.rounds, "--rounds", int)))
    durations = _numbers(args.durations, "--durations", int)
    betas = _numbers(args.betas, "--betas", float)
    subsets = _numbers(args.subset_sizes, "--subset-sizes", int)
    if not seeds:
        raise ConfigError("--seeds", "give at least one seed")
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:  # each seed runs once, but the mean, std and CI counted it as often as typed (0,0 read "± 0.00")
        raise ConfigError("--seeds", f"duplicate values: {', '.join(map(str, twice))} twice in {', '.join(map(str, seeds))}")
    if args.drift_executor and args.drift_executor not in EXECUTORS:  # before any run: it failed after every other table, naming executor
        raise choice_error("--drift-executor", args.drift_executor, EXECUTORS)
    if not lengths or min(lengths) < 1:
        raise ConfigError("--rounds", f"give at least one length, each >= 1, got {lengths}")
    if any(d < 0 for d in durations):
        raise ConfigError("--durations", f"D must be >= 0, got {durations}")
    for b in betas:  # Enhanced ERA's own bounds, on the flag (a beta past them failed midway, naming enhanced_era.beta)
        require_beta(b, "--betas")
    parts = set(_numbers(args.parts, "--parts", str))
    if not parts <= set(PARTS):
        raise ConfigError("--parts", f"unknown part(s) {sorted(parts - set(PARTS))}; allowed: {', '.join(PARTS)}")
    if "ratio" in parts and not subsets:  # the ratio table was skipped without a word: --parts ratio printed header lines only
        raise ConfigError("--subset-sizes", f"is empty, and --parts {args.parts!r} asks for the ratio table it sizes: give |P^t| values "
                                            "(e.g. 50,200), or leave ratio out of --parts")
    if "drift" in parts and not args.drift_executor and args.parts != ",".join(PARTS):  # --parts drift printed header lines only
        raise ConfigError("--drift-executor", f"is not set, and --parts {args.parts!r} asks for the drift table it names: give one "
                                              "(e.g. vectorized), or leave drift out of --parts")
    if args.drift_executor and "drift" not in parts:  # it was ignored without a word
        raise ConfigError("--drift-executor", f"is the executor of the 'drift' table, which --parts {args.parts!r} leaves out: add drift, or drop the option")
    overrides = parse_overrides(args.overrides)
    overrides["federation.rounds"] = max(lengths)
    config = load_config(resolve_config(args.config), overrides)
    if config.distillation.get("method") != "dsfl":
        raise ConfigError("config", f"{args.config}: its [distillation] must be DS-FL's (the baseline), got {distillation_method(config.distillation)}")
    every = config.eval.every  # read() takes the server accuracy at each length (and over 'smooth''s window): a KeyError after every run
    unread = [L for L in lengths if L != max(lengths) and L % every]  # a run evaluates every `every`-th round and its last
    if "smooth" in parts and every != 1:
        raise ConfigError("eval.every", f"the 'smooth' table averages the server accuracy over the last rounds of each length, so every round "
                                        f"must be evaluated: needs 1, got {every} (or leave smooth out of --parts)")
    if unread:
        raise ConfigError("eval.every", f"= {every} evaluates no round {', '.join(map(str, unread))} of --rounds {args.rounds}, which the tables "
                                        f"read: give lengths that are multiples of {every}, or eval.every = 1")
    n_pub, n_sub = config.distillation["public_size"], config.distillation["subset_size"]
    if "ratio" in parts and not all(1 <= s <= n_pub for s in subsets):  # before any run, not as distillation.subset_size midway
        raise ConfigError("--subset-sizes", f"each |P^t| must be in 1..|P| = {n_pub}, got {subsets}")
    planner = Planner(config, seeds, max(lengths))
    plan = Tables(parts, lengths, durations, betas, subsets, args.drift_executor, n_pub, n_sub)
    plan.write(planner, lambda *_: None)
    study = Study(config, seeds, max(lengths), progress=not args.quiet, total=len(planner.planned))
    if planner.planned:
        # The first run's parts, built before anything is printed: a missing extra (scikit-learn for digits) or any
        # other mistake the run's build refuses is its one line and exit 2; raised inside the first table, it came
        # after a header, an empty table and "(interrupted: the tables above are incomplete)" on stdout.
        from chillfl.experiment import build_experiment  # lazy: torch; the study's planning and tables import none

        build_experiment(study.arm_config(*planner.planned[0]))
        drift = next((run for run in planner.planned if run[0].executor), None)
        if drift is not None:  # the drift arm's config under --drift-executor (one it cannot run): its line, before the tables
            try:
                build_experiment(study.arm_config(*drift))
            except ConfigError as exc:
                # The flag is to blame exactly when the same arm builds under the config's executor: a refusal there too is the
                # config's, raised as it is. Not by the refused field: compile, cuda_graphs and batched_conv are refused for an
                # executor that does not vectorise, and came out on the config's field with an executor the config did not set.
                build_experiment(study.arm_config(dataclasses.replace(drift[0], executor=None), *drift[1:]))
                raise ConfigError("--drift-executor", f"{args.drift_executor!r}: {exc.field}: {exc.message}") from None
    print(f"SCARLET vs DS-FL on {args.config}: |P| = {n_pub}, |P^t| = {n_sub}, seeds {','.join(map(str, seeds))}; "
          f"executor {config.executor}; {machine(config.threads)}")
    print(f"scaled D (50 / 2000 of the run): {', '.join(f'{L} rounds -> {scaled_duration(L)}' for L in lengths)}")
    if len(seeds) < MIN_SEEDS:  # its intervals are Student t's, as compare's and reproduce's, which say so
        print(few_seeds_warning(len(seeds)))
    try:
        plan.write(study, print)
    except BaseException as exc:  # a stop signal, a diverged arm: a table's header without its rows read as a whole table
        if not isinstance(exc, BrokenPipeError):  # stdout's reader is gone: no one to tell
            print(f"\n{INCOMPLETE}", flush=True)
        raise
    if study.clipped:
        print(f"\n{CLIPPED_NOTE}")
    return 0


INCOMPLETE = "(interrupted: the tables above are incomplete)"
"""The last line on stdout of a study that did not finish: redirected (``> deficit.md``), the file ended in a table's header
and no mark, and the exit status alone said otherwise."""


@dataclasses.dataclass
class Tables:
    """The tables the options ask for; :meth:`write` prints them through ``out`` (a :class:`Planner` and no output: the runs they need)."""

    parts: set[str]
    lengths: list[int]
    durations: list[int]
    betas: list[float]
    subsets: list[int]
    drift_executor: str
    n_pub: int
    n_sub: int

    def write(self, study: Study, out: Callable[[str], None]) -> None:
        parts, lengths, durations, betas, subsets = self.parts, self.lengths, self.durations, self.betas, self.subsets
        n_pub, n_sub, config = self.n_pub, self.n_sub, study.config
        if "d" in parts:
            d_sweep(study, lengths, durations, config.distillation.get("temperature", 0.1), out)
        big = max(durations) if durations else 0
        if "beta" in parts:
            out(f"\nbeta x D: every beta at D = 0 (the aggregation alone; beta = 1, D = 0 is DS-FL with the plain mean instead of ERA), "
            f"beta = 1 and 2 at D = {big} (the cache with and without the sharpening):\n")
            out(HEADER)
            for L in lengths:
                for d, bs in ((0, betas), (big, [b for b in (1.0, 2.0) if b in betas])):
                    for b in bs:
                        out(study.row(Arm(b, d), L))
        if "ratio" in parts and subsets:
            L = min(lengths)
            out(f"\n|P^t| / |P| (|P| = {n_pub}, beta = 2, {L} rounds; DS-FL rerun at each size):\n")
            out(HEADER.replace("| rounds | arm |", "| rounds | |P^t| / |P|, arm |"))
            for size in sorted(set(subsets) | {n_sub}):
                for d in sorted({big, scaled_duration(L)}):
                    out(study.row(Arm(2.0, d, size if size != n_sub else None), L, rounds=L).replace("| SCARLET", f"| {size}/{n_pub}, SCARLET", 1))
        if "smooth" in parts:
            out("\nD sweep (beta = 2), server accuracy averaged over the last quarter of the rounds (one round's accuracy swings by "
            "points at this scale):\n")
            out(HEADER.replace("| server acc % | DS-FL % |", "| server acc %, last quarter | DS-FL % |"))
            for L in lengths:
                w = max(1, L // 4)
                out(study.row(Arm(None), L, window=w))
                for d in sorted(set(durations) | {scaled_duration(L)}):
                    out(study.row(Arm(2.0, d), L, window=w))
        if "drift" in parts and self.drift_executor:
            other = self.drift_executor
            out(f"\nexecutor drift: the same arm under {other!r} vs {config.executor!r} (paired per seed; "
            f"'arm - DS-FL' reads '{other} - {config.executor}'):\n")
            out(HEADER)
            for L in lengths:
                for arm in (Arm(None), Arm(2.0, big)):
                    out(study.row(dataclasses.replace(arm, executor=other), L, base=arm))


def d_sweep(study: Study, lengths: Sequence[int], durations: Sequence[int], temperature: float, out: Callable[[str], None] = print) -> None:
    out("\nD sweep (beta = 2); 'scaled' marks D = rounds x 50 / 2000:\n")
    out(HEADER)
    for L in lengths:
        out(study.row(Arm(None), L).replace("| DS-FL |", f"| DS-FL (ERA, T = {temperature:g}) |"))
        for d in sorted(set(durations) | {scaled_duration(L)}):
            line = study.row(Arm(2.0, d), L)
            out(line.replace(f"D={d} |", f"D={d} (scaled) |") if d == scaled_duration(L) else line)


def add_parser(analyses: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register ``scarlet-deficit`` under ``chillfl analyze``."""
    p = analyses.add_parser("scarlet-deficit", help="SCARLET vs DS-FL taken apart: cache duration D, beta, |P^t|/|P|, over seeds (issue 29)",
                            description="Run DS-FL and SCARLET arms (in memory: no run folder) and print the tables as markdown on "
                                        "stdout; it writes no file (redirect stdout to keep them: ... > deficit.md). Each run's "
                                        "progress line, [k/N] of the runs the tables need, goes to stderr.")
    p.add_argument("--config", default=DEFAULT_CONFIG, help=f"a DS-FL config (default {DEFAULT_CONFIG})")
    p.add_argument("--seeds", default="0,1,2", help="seeds every arm runs at, comma-separated (default 0,1,2)")
    p.add_argument("--rounds", default="20,40,80", help="lengths to read (one run of the longest per arm and seed; default 20,40,80)")
    p.add_argument("--durations", default="0,1,2,5,20", help="D values of the sweep (the scaled D is added; default 0,1,2,5,20)")
    p.add_argument("--betas", default="1,2,4", help="beta values at D = 0 (1 and 2 also at the largest D; default 1,2,4)")
    p.add_argument("--subset-sizes", default="50,200", help="|P^t| values besides the config's, of the ratio table (default 50,200; leave ratio out of --parts to skip it)")
    p.add_argument("--parts", default=",".join(PARTS), help=f"which tables (default all: {','.join(PARTS)})")
    p.add_argument("--drift-executor", default="", help="also run DS-FL and SCARLET (largest D) under this executor and show the drift (e.g. vectorized)")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-run progress lines on stderr")
    p.add_argument("overrides", nargs="*", help="section.option=value overrides of the config")
    p.set_defaults(func=cmd_scarlet_deficit)

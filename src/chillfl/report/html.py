"""``chillfl report RUN_DIR...``: one self-contained HTML page for one or more result folders.

The page needs nothing but itself: CSS inline, figures as base64 PNG data
URIs, no script or font from the network. It shows

* the runs' configurations (one row per group, the whole TOML folded away),
* final and best metrics (mean ± sample std over the seeds of a group; epsilon and a backdoor's
  attack success where a run recorded them),
* accuracy and loss curves, with a shaded band of ± 1 std across seeds (the band of a comparison's ``curves.png``),
* calibration: ECE / NLL / Brier over rounds, and a reliability diagram of
  each group's first saved model (``model.safetensors``),
* the partition's class x client heat map of each group's first run.

Grouping: runs whose saved configs are equal except for ``seed`` and the
fields that do not change what is computed (``name``, ``out_dir``,
``data_dir``, ``device``, ``executor``, ``threads``, ``checkpoint.*``,
``log.*``, ``strict``) form one group (its seeds). A RUN_DIR may also be a folder of run folders (``chillfl compare``'s
output): every finished run folder directly inside it is taken (``.partial``
and ``.failed`` ones only when named themselves; the others, and run folders cut short, are named as not
included). A folder named twice, or named and inside a named folder (the same resolved path), is read once.
Each group names its run folders. A group of a comparison's
runs is labelled by that comparison's variant label (its ``sweep.json``
records which run folder is which variant), where that label is the group's
alone; other groups by their runs' name, or by the options that differ between groups where their seeds have per-seed
names. Groups of different configs left with one label are each followed by the options that differ among them
(``demo, client.lr=0.05``); a run repeating another's config and seed is a group of its own, ``LABEL [repeat 1]``.

A small inline script checks, after the page has loaded, that every image
decoded (``naturalWidth > 0``) and writes the result into
``#render-check``; tests read it back from a headless browser.
"""

from __future__ import annotations

import base64
import html
import io
import json
import logging
import math
import os
import re
import tempfile
import textwrap
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from chillfl.analysis.calibration import analyze, plot_reliability
from chillfl.analysis.replay import run_label
from chillfl.config import RunConfig, load_config
from chillfl.data.show import plot_class_heatmap
from chillfl.storage.results import SPENT_KEYS, evaluation_interval, nulls_as_nan, read_metrics, series, to_toml, value_at_end
from chillfl.storage.checkpoint import write_atomic
from chillfl.storage.run_folder import is_temperature_sweep, refuse_temperature_sweep
from chillfl.storage.run_state import is_sweep
from chillfl.errors import ConfigError, StorageError, json_loads
from chillfl.experiment import build_data
from chillfl.extras import need
from chillfl.plugins import PluginNotImported, reading_data
from chillfl.protocols.registry import protocol_of
from chillfl.numeric import is_real, is_whole
from chillfl.paths import CLAIM, FAILED, OWN_FILE_LIMIT, PARTIAL, read_own_file, shell_path  # noqa: F401  (OWN_FILE_LIMIT: re-exported, where the page names its cap)
from chillfl.partition_refusal import checked_folder_state, checked_run_state  # status's own lines: a split file resume refuses is said
from chillfl.metrics.spread import SPREAD, seed_band
from chillfl.metrics.stats import summarize
from chillfl.report.caveats import epsilon_caveat
from chillfl.run_names import RecordedVariant, comparison_labels, variant_points
from chillfl.tune import point_label
from chillfl.plots.stop import STOP_EVALUATION, STOP_MARKER, StopPoint, stop_label, summary_stop_point
from chillfl.plots.styles import variant_style
from chillfl.wording import counted

if TYPE_CHECKING:
    from matplotlib.artist import Artist

log = logging.getLogger(__name__)

IGNORED_FOR_GROUPING = ("seed", "name", "out_dir", "data_dir", "device", "executor", "threads", "checkpoint", "log", "strict")
"""Top-level config keys (a whole table for ``checkpoint`` and ``log``) that do not change what a run computes: runs that
differ only in them are seeds of one group. ``checkpoint.every`` split byte-identical metrics into two groups. ``strict``
only turns a warning (:class:`~chillfl.engine.health.LossWatch`) into a stop: a run it stopped is a ``NAME.failed`` one,
and its group's row says so (:func:`_unfinished_note`)."""
TABLE_METRICS = (
    ("final_global_acc", "final acc", True),
    ("best_global_acc", "best acc", True),
    ("final_global_loss", "final loss", False),
    ("final_local_acc", "final local acc", True),
    ("final_global_ece", "final ECE", False),
    ("final_global_nll", "final NLL", False),
    ("final_global_brier", "final Brier", False),
    ("rounds_to_target", "rounds to target", False),
    ("final_epsilon", "epsilon", False),
    ("final_attack_success_rate", "attack success", True),
)
FROM_RECORDS = {"final_attack_success_rate": "attack_success_rate"}
"""Table columns also read from the final round's record, as a comparison's table reads them: ``summary.json``
files written before :func:`~chillfl.storage.results.summarize` kept them lack them."""


@dataclass
class Run:
    folder: Path
    config: RunConfig
    records: list[dict[str, Any]]
    summary: dict[str, Any]
    variant: str | None = None
    """The label of its variant in the comparison whose folder holds it (:func:`~chillfl.run_names.comparison_labels`);
    None: not a comparison's run, or one its ``sweep.json`` does not name."""
    selected: bool | None = None
    """Whether its tuning point is the one its variant selected (the point the comparison's table reports,
    :func:`selected_points`); None: not a tuned comparison's run."""
    points: int | None = None
    """How many tuning points its variant selected among (:attr:`Selection.points`); None where not known."""


@dataclass
class Group:
    label: str
    runs: list[Run] = field(default_factory=list)

    @property
    def seeds(self) -> list[int]:
        return [r.config.seed for r in self.runs]

    @property
    def tuning(self) -> str | None:
        """``selected`` where its runs are at the tuning point their variant selected, ``-`` at another point of a
        tuned comparison's grid; None: no run of it is a tuned comparison's."""
        marks = {r.selected for r in self.runs} - {None}
        return None if not marks else "selected" if marks == {True} else "-"

    @property
    def points(self) -> int | None:
        """How many tuning points the selected group's variant chose among (None: not a selected group, or not known):
        its epsilon is one run's, and the choice among them is not accounted (the epsilon caveat says so)."""
        counts = {r.points for r in self.runs}
        return counts.pop() if self.tuning == "selected" and len(counts) == 1 else None


def _is_run(folder: Path) -> bool:
    return (folder / "config.toml").is_file() and (folder / "metrics.jsonl").is_file()


def _unfinished(folder: Path) -> bool:
    """``NAME.partial`` / ``NAME.failed[-n]``, and a killed claimer's hidden ``.claim-*`` folder: taken only when named explicitly."""
    return ".partial" in folder.name or ".failed" in folder.name or folder.name.startswith(CLAIM)


RUN_FILES = ("config.toml", "metrics.jsonl")
"""What makes a folder a run's (:func:`_is_run`); a sub-folder with one of them, or a ``summary.json``, but not both is
a run folder cut short (a file removed or never written), which the page names rather than drops."""


def distinct(paths: Sequence[str | Path]) -> list[Path]:
    """``paths`` without a folder given twice (the same resolved path), in first-given order: ``chillfl report r r``
    counted ``r``'s run as two, its seed twice in a group's mean ± std; ``analyze`` reads a folder once the same way."""
    seen: set[Path] = set()
    out: list[Path] = []
    for p in map(Path, paths):
        if (key := p.resolve()) not in seen:
            seen.add(key)
            out.append(p)
    return out


def find_runs(paths: Sequence[str | Path]) -> list[Path]:
    """Run folders named by ``paths`` (a run folder, or a folder whose sub-folders are runs), each once: a folder named
    twice, or named and inside a named folder of runs (``results results/chill``), is one run, not a seed counted twice."""
    found: list[Path] = []
    for p in map(Path, paths):
        refuse_temperature_sweep(p, "RUN_DIR")
        if _is_run(p):
            found.append(p)
        elif p.is_dir() and (subs := sorted(s for s in p.iterdir() if s.is_dir() and _is_run(s) and not _unfinished(s))):
            found.extend(subs)
        elif p.is_dir() and (unfinished := sorted(s.name for s in p.iterdir() if s.is_dir() and _is_run(s))):
            raise ConfigError("RUN_DIR", f"{p} holds no finished run, only unfinished ones ({', '.join(unfinished)}): name one to report it")
        else:
            raise ConfigError("RUN_DIR", _no_runs(p))
    return distinct(found)


def variant_order(folders: Sequence[Path], labels: Mapping[Path, Mapping[str, str]]) -> list[Path]:
    """``folders`` with each comparison's runs in its ``sweep.json``'s variant order (``labels``: parent folder -> its
    :func:`~chillfl.run_names.comparison_labels`, in that order), in the places its runs held: sorted by folder name,
    ``FedAvg`` before ``chilled_T0.25`` before ``exploding_lr``, its groups and their colours were not the ones the
    comparison's own figures, embedded on the same page, give its variants."""
    rank = {parent: {name: i for i, name in enumerate(names)} for parent, names in labels.items() if names}
    out = list(folders)
    for parent, order in rank.items():
        slots = [i for i, p in enumerate(out) if p.parent == parent]
        ranked = sorted((out[i] for i in slots), key=lambda p: order.get(p.name, len(order)))  # stable: one not named stays last
        for i, p in zip(slots, ranked):
            out[i] = p
    return out


def colour_indices(groups: Sequence[Group], labels: Mapping[Path, Mapping[str, str]]) -> list[int]:
    """Each group's colour index (:func:`~chillfl.plots.styles.variant_style`): on a page of one comparison's variants,
    its variant's index in that comparison's ``sweep.json`` order, as the comparison's figures colour it (a variant
    with no finished run keeps its slot); else the group's position on the page."""
    parents = {r.folder.parent for g in groups for r in g.runs}
    variants = [_variant_label(g) for g in groups]
    if len(parents) == 1 and None not in variants and (order := list(dict.fromkeys(labels.get(parents.pop(), {}).values()))):
        if all(v in order for v in variants):
            return [order.index(str(v)) for v in variants]
    return list(range(len(groups)))


def _no_runs(p: Path) -> str:
    """Why ``p`` gives no run, and what to name instead: a folder holding only a comparison folder (``results/`` after
    one ``chillfl compare``) said only "not a run folder nor a folder of them", though naming the comparison reports it."""
    head = f"{p} is not a chillfl run folder (config.toml + metrics.jsonl) nor a folder of them"
    if not p.is_dir():
        return head
    if why := _cut_short(p):
        return f"{head}: it has {why}"
    try:
        subs = sorted(s for s in p.iterdir() if s.is_dir())
    except OSError:
        return head
    if comparisons := [s for s in subs if is_sweep(s)]:
        if len(comparisons) == 1:
            return f"{head}; it holds the comparison {comparisons[0]}: name it (chillfl report {comparisons[0]})"
        return f"{head}; it holds the comparisons {', '.join(map(str, comparisons))}: name them"
    if cut := [f"{s.name} ({why})" for s in subs if (why := _cut_short(s))]:
        return f"{head}; its run folders are incomplete: {', '.join(cut)}"
    return head


def _cut_short(folder: Path) -> str | None:
    """What a run folder lacks (``config.toml but no metrics.jsonl``), where it has some of a run's files but is no run
    (:func:`_is_run`); None for a run, a comparison's or a temperature sweep's folder (they have a ``config.toml`` of
    their own), and a folder with none of a run's files."""
    if _is_run(folder) or is_sweep(folder) or is_temperature_sweep(folder):
        return None
    present = [name for name in (*RUN_FILES, "summary.json") if (folder / name).is_file()]
    missing = [name for name in RUN_FILES if name not in present]
    return f"{' and '.join(present)} but no {' nor '.join(missing)}" if present else None


@dataclass(frozen=True)
class Skipped:
    """A sub-folder of a named folder of runs that the page leaves out, and why (:func:`skipped_folders`)."""

    folder: Path
    why: str | None = None
    """None: a comparison or an unfinished run, which naming it includes; else what the run folder lacks."""


def skipped_folders(paths: Sequence[str | Path]) -> list[Skipped]:
    """Sub-folders of a named folder of runs that :func:`find_runs` leaves out: unfinished runs (``.partial``,
    ``.failed``), comparison folders (``NAME-compare``), and run folders cut short (a ``metrics.jsonl`` removed): the
    page lists them, so none is dropped silently (a comparison's table counted n = 2 where the page's group had 1 run).
    A sub-folder that is itself among ``paths`` is on the page, not left out: ``chillfl report cmp cmp/T1-s0.partial``
    counted that run in its group and still listed it as "not included"."""
    named = {p.resolve() for p in distinct(paths)}
    out: list[Skipped] = []
    for p in distinct(paths):
        if not _is_run(p) and p.is_dir():
            listed = (p / "table.md").is_file()  # a finished comparison's section lists its diverged runs itself
            for s in sorted(s for s in p.iterdir() if s.is_dir() and not (listed and ".failed" in s.name) and not s.name.startswith(CLAIM)):
                if s.resolve() in named:
                    continue
                if is_sweep(s) or (_is_run(s) and _unfinished(s)):
                    out.append(Skipped(s))
                elif why := _cut_short(s):
                    out.append(Skipped(s, why))
    return out


def _skipped_note(skipped: Sequence[Skipped]) -> str:
    """The page's "not included" line: what naming includes, then the run folders cut short with what each lacks."""
    named = ", ".join(str(s.folder) for s in skipped if s.why is None)
    cut = ", ".join(f"{s.folder} ({s.why})" for s in skipped if s.why is not None)
    text = "not included" + (f" (name a comparison folder or an unfinished run to include it): {named}" if named else "")
    return text + (f"{'; ' if named else ': '}incomplete run folders: {cut}" if cut else "")


ACCURACY_CURVES = (("global_acc", "global test accuracy"), ("local_acc", "local accuracy (own splits)"))
LOSS_CURVES = (("global_loss", "global test loss (T = 1)"), ("train_loss", "local training loss (at T)"))
CALIBRATION_CURVES = (("global_ece", "ECE"), ("global_nll", "NLL"), ("global_brier", "Brier"))
UNBOUNDED_CURVES = frozenset({"global_loss", "train_loss", "global_nll"})
"""The curves with no upper bound, whose panel turns to a log scale when one run's explodes (:func:`_explodes`). Why a
list: the test was ``"loss" in key``, so the calibration figure's NLL panel (the same cross-entropy) stayed linear, up to
3.5e34 for a diverged run, with every other run's line flat on 0."""
CURVES = tuple(key for key, _ in (*ACCURACY_CURVES, *LOSS_CURVES, *CALIBRATION_CURVES))
"""The per-round metrics the page draws (:func:`render`'s figures): each must be a number where a record has it."""
Y_AXES = {"global_acc": ("accuracy %", 100.0), "local_acc": ("accuracy %", 100.0), "global_loss": ("cross-entropy (T = 1)", 1.0),
          "train_loss": ("training loss (at T)", 1.0), "global_ece": ("ECE", 1.0), "global_nll": ("NLL (T = 1)", 1.0), "global_brier": ("Brier score", 1.0)}
"""Each curve's y-axis label and scale: accuracies in %, as the results table prints them (the curves drew 0-1 under
"accuracies in %", on an unlabelled axis)."""


def load_run(folder: Path, labels: Mapping[str, str] | None = None) -> Run:
    """The run in ``folder``; ``labels``: its comparison's run labels (:func:`~chillfl.run_names.comparison_labels` of its
    parent folder), read here when not given (a page of many runs reads each comparison's once)."""
    summary_path = folder / "summary.json"
    try:
        summary = json_loads(summary_path.read_text(encoding="utf-8")) if summary_path.is_file() else {}
    except json.JSONDecodeError as exc:
        raise ConfigError("RUN_DIR", f"{folder}: unreadable result files: summary.json line {exc.lineno}: not JSON ({exc.msg})") from None
    except (OSError, ValueError) as exc:
        raise ConfigError("RUN_DIR", f"{folder}: unreadable result files ({exc})") from None
    try:
        records = read_metrics(folder, torn_tail=_unfinished(folder))  # a killed run's cut last line, dropped as resume drops it
    except json.JSONDecodeError as exc:  # its message counts within the line: the file's line is looked up
        raise ConfigError("RUN_DIR", f"{folder}: unreadable result files: {_not_json(folder / 'metrics.jsonl', exc)}") from None
    except (OSError, ValueError) as exc:
        raise ConfigError("RUN_DIR", f"{folder}: unreadable result files ({exc})") from None
    _check_shapes(folder, summary, records)
    config = load_config(folder / "config.toml")
    return Run(folder, config, records, summary, (comparison_labels(folder.parent) if labels is None else labels).get(config.name))


def _not_json(path: Path, exc: json.JSONDecodeError) -> str:
    """``metrics.jsonl line 3: not JSON (...): 'garbled'``: the line of ``path`` that :func:`load_run` could not read.
    :func:`~chillfl.storage.results.read_metrics` parses line by line, so ``exc`` says "line 1" of whichever line it
    was: the file's line is the first that does not parse."""
    try:
        with path.open("rb") as fh:
            for number, line in enumerate(fh, 1):
                try:
                    json_loads(line) if line.strip() else None  # as read_metrics reads it: a line nested too deep is a ValueError, not a RecursionError
                except ValueError:
                    shown = line[:60].decode("utf-8", "replace").strip()
                    return f"{path.name} line {number}: not JSON ({exc.msg}, column {exc.colno}): {shown!r}"
    except OSError:
        pass
    return f"{path.name}: not JSON ({exc.msg})"


def _check_shapes(folder: Path, summary: Any, records: list[Any]) -> None:
    """A hand-edited or foreign ``summary.json`` / ``metrics.jsonl`` is one line naming the file and the field, not a
    traceback from deep in the page's tables and figures: the page reads the summary as an object, every record as an
    object with an integer round, and the table's and curves' values as numbers."""
    def number(value: Any) -> bool:
        return value is None or is_real(value)

    if not isinstance(summary, dict):
        raise ConfigError("RUN_DIR", f"{folder / 'summary.json'} is not a JSON object")
    for key, _, _ in TABLE_METRICS:
        if not number(summary.get(key)):
            raise ConfigError("RUN_DIR", f"{folder / 'summary.json'}: {key} is {summary[key]!r}, not a number")
    for line, record in enumerate(records, 1):  # blank lines skipped: the n-th record
        if not isinstance(record, dict) or not is_whole(record.get("round")):
            raise ConfigError("RUN_DIR", f"{folder / 'metrics.jsonl'} record {line}: not a round's record (an object with an integer round)")
        for key in (*CURVES, *FROM_RECORDS.values()):
            if not number(record.get(key)):
                raise ConfigError("RUN_DIR", f"{folder / 'metrics.jsonl'} record {line}: {key} is {record[key]!r}, not a number")


def group_key(config: RunConfig) -> str:
    data = config.to_dict()
    for key in IGNORED_FOR_GROUPING:
        data.pop(key, None)
    return json.dumps(data, sort_keys=True, default=str)


def group_runs(runs: Sequence[Run]) -> list[Group]:
    """Runs equal but for the seed (and execution details) share a group, in first-seen order. A run equal to one of
    a group *with* its seed (the same run in two folders: a run and a comparison's) starts a group of its own, a
    repeat (:func:`_repeats`): a group's mean ± std is over distinct seeds, not a seed counted twice.

    A group is labelled by its comparison's own variant label where every run of it has the same one and no other
    group has it (the label the comparison's table prints, which the user chose); else by the options that differ
    between the groups (seeds of one folder name), or by its run's name. Groups of different configs left with one
    label (two runs of ``demo`` at two ``client.lr``, an override keeping the config's name) are told apart by the options
    that differ among them (``demo, client.lr=0.05``): they were ``demo [1]`` and ``demo [2]``, the lr only in the
    configurations table. A repeat is its first copy's label followed by ``[repeat k]``: its options are that group's."""
    keys = [group_key(r.config) for r in runs]
    first = {k: i for i, k in reversed(list(enumerate(keys)))}
    copies: list[tuple[int, list[Group]]] = []  # (first-seen index, [its group, its repeats...]) per config
    for key in sorted(set(keys), key=first.__getitem__):
        members = [r for r, k in zip(runs, keys) if k == key]
        copies.append((first[key], [Group(rs[0].config.name, rs) for rs in _repeats(members)]))
    _label([copy[0] for _, copy in copies])
    for _, copy in copies:
        for k, g in enumerate(copy[1:], 1):
            g.label = f"{copy[0].label} [repeat {k}]"
    order = {id(r): i for i, r in enumerate(runs)}
    out = sorted((g for _, copy in copies for g in copy), key=lambda g: min(order[id(r)] for r in g.runs))
    labels = [g.label for g in out]
    for i, g in enumerate(out):  # equal labels still (a run named as another group's label): the curves key on labels
        if labels.count(g.label) > 1:
            g.label = f"{g.label} [{i + 1}]"
    return out


def _label(groups: Sequence[Group]) -> None:
    """Label ``groups``, one per config (:func:`group_runs`): by variant label, by run name or by the options that differ,
    then a label several groups share followed by the options that differ among those groups."""
    if any(len({r.config.name for r in g.runs}) > 1 for g in groups):  # per-seed folder names (compare's): label by what varies
        for g, options in zip(groups, _options_label(groups)):
            if len({r.config.name for r in g.runs}) > 1:
                g.label = options or _strip_seed(g.label)
    chosen = [_variant_label(g) for g in groups]
    for g, label in zip(groups, chosen):  # the comparison's own label, where it names this group alone
        if label is not None and chosen.count(label) == 1:
            g.label = label
    shared: dict[str, list[Group]] = {}
    for g in groups:
        shared.setdefault(g.label, []).append(g)
    for label, same in shared.items():  # equal labels, different configs: what differs among them tells them apart
        if len(same) > 1:
            for g, options in zip(same, _options_label(same)):
                g.label = f"{label}, {options}" if options else label


def _repeats(runs: Sequence[Run]) -> list[list[Run]]:
    """``runs`` of one config as groups of distinct seeds: the first takes one run of each seed, the k-th the seeds'
    k-th copies. Which copy goes first does not depend on the order the folders were named: a folder holding more of
    these runs (a comparison's seeds) before one holding fewer (a copy beside it), then by path; within a folder, by
    folder name. The pairing followed the folders' order, so ``chillfl report runs/a runs`` and ``chillfl report runs``
    paired ``a-2``'s seed 1 with another seed 0 each."""
    parents: dict[Path, int] = {}
    for r in runs:
        parents[r.folder.parent.resolve()] = parents.get(r.folder.parent.resolve(), 0) + 1
    ranked = sorted(runs, key=lambda r: (-parents[r.folder.parent.resolve()], str(r.folder.parent.resolve()), r.folder.name))
    out: list[list[Run]] = []
    for run in ranked:
        slot = next((g for g in out if run.config.seed not in {r.config.seed for r in g}), None)
        if slot is None:
            out.append(slot := [])
        slot.append(run)
    return out


def _options_label(groups: Sequence[Group]) -> list[str]:
    """Each group's options that differ between ``groups`` (``client.lr=0.05, temperature.policy=fedchill``), each value
    as the configurations table writes it (:func:`_inline`: ``unset``, ``true``): an option of a part that some group did
    not choose is left out where it is at that part's default, which the chosen name implies."""
    varying = _varying_keys(groups)
    flats = [_flat(g.runs[0].config) for g in groups]
    # an option of a part that some group did not choose, at one value wherever it is set (FedProx's mu at 0.01 and 0.1 stays)
    partial = {k for k in varying if any(k not in f for f in flats) and len({json.dumps(f[k], sort_keys=True, default=str) for f in flats if k in f}) == 1}
    labels = []
    for g, flat in zip(groups, flats):
        implied = _part_defaults(g.runs[0].config)
        shown = [(k, v) for k, v in flat.items() if k in varying and not (k in partial and k in implied and _same(implied[k], v))]
        labels.append(", ".join(f"{k}={_inline(v)}" for k, v in shown))
    return labels


@dataclass(frozen=True)
class Selection:
    """The tuning point each variant of a tuned comparison selected, as its ``table.json`` recorded it (each row's
    ``tuned``): read back, not recomputed from the validation scores."""

    labels: frozenset[str]
    """The selected runs' labels, as :func:`~chillfl.run_names.comparison_labels` names them (``T=1, client.lr=0.1``)."""
    cells: frozenset[tuple[str, str]]
    """(row, column) of the selected point in the validation table at every tuning point (``table.md``): the variant
    with its own grid's point, and the shared grid's point (``no shared grid`` without one)."""
    points: Mapping[str, int] = field(default_factory=dict)
    """Selected run's label -> how many tuning points its variant chose among (the shared grid crossed with its own, as
    ``sweep.json`` recorded them); a variant ``sweep.json`` does not name is left out."""


def selected_points(folder: Path) -> Selection | None:
    """The points the tuned comparison in ``folder`` selected (its ``table.json`` and ``sweep.json``); None when it was
    not tuned (no row has ``tuned``) or its files are missing or unreadable."""
    try:
        rows = _own_json(folder / "table.json")
        record = _own_json(folder / "sweep.json")
        grid = dict(record["options"].get("tune") or {})
        shared = set(grid)
        tuned = [(str(row["variant"]), dict(row["tuned"])) for row in rows if isinstance(row, dict) and isinstance(row.get("tuned"), dict)]
        sizes = {str(v["label"]): len(variant_points(grid, RecordedVariant(str(v["label"]), v.get("short"), dict(v.get("tune") or {}))))
                 for v in record.get("variants") or []}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not tuned:
        return None
    named = {variant: ", ".join(x for x in (variant, point_label(point)) if x) for variant, point in tuned}
    labels = frozenset(named.values())
    points = {named[variant]: sizes[variant] for variant, _ in tuned if variant in sizes}
    cells = set()
    for variant, point in tuned:
        own = point_label({k: v for k, v in point.items() if k not in shared})
        cells.add((variant + (f", {own}" if own else ""), point_label({k: v for k, v in point.items() if k in shared}) or "no shared grid"))
    return Selection(labels, frozenset(cells), points)


def _variant_label(group: Group) -> str | None:
    """The comparison label (``FedAvg + chilling T=0.5``) that every run of ``group`` has, as its table names the row;
    None when a run has none (a run from elsewhere) or two runs have different ones."""
    labels = {r.variant for r in group.runs}
    return labels.pop() if len(labels) == 1 and None not in labels else None


def _flat(config: RunConfig) -> dict[str, Any]:
    """The config as dotted keys (``temperature.value``), without the keys that do not change results."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            flat[prefix] = value

    walk("", {k: v for k, v in config.to_dict().items() if k not in IGNORED_FOR_GROUPING})
    return flat


PART_CHOOSERS = (("dataset", "name"), ("partition", "name"), ("model", "name"), ("temperature", "policy"), ("algorithm", "name"))
"""The tables chosen by one key whose defaults :mod:`chillfl.resolve` fills in (what a group's label may leave implied)."""


def _part_defaults(config: RunConfig) -> dict[str, Any]:
    """Dotted key -> the default of each option of the parts ``config`` chose (``temperature.t_max`` -> 1.0 under FedChill).

    Why: against a group that did not choose FedChill, every FedChill option "varies" (one group has it, the other not),
    and a label listed all ten of them at their defaults; ``temperature.policy=fedchill`` already says them, as the
    resolved config's rule has it (an option equal to its default acts as the option left out). A part that cannot be
    resolved here (a plugin's, read as data) leaves its options in the label."""
    from chillfl.resolve import algorithm_table, dataset_table, model_table, partition_table, temperature_table

    resolvers = {"dataset": dataset_table, "partition": partition_table, "model": model_table, "temperature": temperature_table, "algorithm": algorithm_table}
    out: dict[str, Any] = {}
    for section, key in PART_CHOOSERS:
        table = getattr(config, section)
        if not isinstance(table, dict) or key not in table:
            continue
        try:
            defaults = resolvers[section]({key: table[key]})
        except ConfigError:  # PluginNotImported is one
            continue
        out.update(_flat_table(section, defaults))
    return out


def _flat_table(prefix: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        return {prefix: value}
    return {k: v for name, sub in value.items() for k, v in _flat_table(f"{prefix}.{name}", sub).items()}


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _varying_keys(groups: Sequence[Group]) -> set[str]:
    """Dotted keys whose value differs between the groups (their labels)."""
    flats = [_flat(g.runs[0].config) for g in groups]
    keys = set().union(*flats) if flats else set()
    return {k for k in keys if len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flats}) > 1}


def _strip_seed(name: str) -> str:
    """``T1-lr0.2-s0`` (or the older ``T1_client.lr0.2_seed0``) -> ``T1-lr0.2``: a group of seeds is not one of its members."""
    return re.sub(r"(?:[_, -]*seed|-s)\d+$", "", name) or name


# ----------------------------------------------------------------------------- numbers


def mean_std(values: Sequence[float | None]) -> tuple[float, float | None, int]:
    """(mean, sample std (ddof 1), n) of the finite values, as :func:`~chillfl.metrics.stats.summarize` takes them for
    the compare table: no spread (None) for one value, not 0.0, which read as "the seeds agreed"; NaN mean and no
    spread when none."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return math.nan, None, 0
    s = summarize(vals)
    return s.mean, s.std, s.n


def band(records_per_seed: Sequence[Sequence[dict[str, Any]]], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rounds, mean, std) of ``key`` over seeds, at the rounds every seed measured (:func:`chillfl.metrics.spread.seed_band`)."""
    rounds, mean, std = seed_band([nulls_as_nan(r, key) for r in records_per_seed], key)  # the same band as curves.png: a null breaks it
    return np.array(rounds, dtype=int), np.array(mean, dtype=float), np.array(std, dtype=float)


def _fmt(key: str, mean: float, std: float | None, n: int, pct: bool) -> str:
    """``mean ± std`` (:func:`mean_std`), the spread only where there is one (two or more values)."""
    if n == 0 or math.isnan(mean):
        return "–"
    if key == "rounds_to_target":
        return f"{mean:.1f}" + (f" ± {std:.1f}" if std is not None else "")
    scale, digits = (100.0, 2) if pct else (1.0, 4)
    return f"{scale * mean:.{digits}f}" + (f" ± {scale * std:.{digits}f}" if std is not None else "")


def _spelled(value: float) -> str:
    """``nan``, ``inf`` or ``-inf``, as ``metrics.jsonl``'s ``"nonfinite"`` entry spells a non-finite value."""
    return "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"


def _with_nonfinite(text: str, values: Sequence[float | None]) -> str:
    """A results cell (``text``: the finite values' mean ± std, :func:`mean_std`) that says which runs' values are
    non-finite and so left out of it (``2.2830 (inf in 1 of 2 runs, left out)``; ``inf`` for one run): the mean alone
    read as every seed's, and one run's dash as "not measured", the compare table's loss caveat's case."""
    bad = [float(v) for v in values if v is not None and not math.isfinite(float(v))]
    if not bad:
        return text
    spelled = ", ".join(sorted({_spelled(v) for v in bad}))
    if len(values) == 1:
        return spelled
    if text == "–":
        return f"{spelled} ({len(bad)} of {len(values)} runs)"
    return f"{text} ({spelled} in {len(bad)} of {len(values)} runs, left out)"


# ----------------------------------------------------------------------------- figures


def _png(fig: Any) -> str:
    """A matplotlib figure as a ``data:image/png;base64,...`` URI, its axes labelled without an offset as every saved
    figure is (:func:`~chillfl.plots.figure.no_offset`)."""
    from chillfl.plots.figure import no_offset  # lazy: matplotlib is the `plots` extra

    no_offset(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _via_file(plot: Callable[[Path], None]) -> str:
    """Run a plot function that writes a PNG file, and return that PNG as a data URI."""
    with tempfile.TemporaryDirectory(prefix="chillfl-report-") as tmp:
        path = Path(tmp) / "figure.png"
        plot(path)
        return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


LEGEND_CHARS = 50
"""The widest line of a legend entry in :func:`curves_figure`, in characters: 50 at 7 pt fit a 5.2-inch panel."""
LEGEND_LINE = 0.16
"""Inches of figure height per line of the legend under :func:`curves_figure`'s panels (7 pt text and its spacing)."""
def legend_rows(labels: Sequence[str], columns: int) -> int:
    """Text lines of the tallest column of a legend of ``labels`` in ``columns`` columns (matplotlib fills them in
    order, ceil(n / columns) entries each)."""
    per = -(-len(labels) // columns)
    chunks = [labels[i:i + per] for i in range(0, len(labels), per)]
    return max(sum(label.count("\n") + 1 for label in chunk) for chunk in chunks)


def curves_figure(groups: Sequence[Group], keys: Sequence[tuple[str, str]], colours: Sequence[int] | None = None) -> str | None:
    """One panel per metric key; one line per group (mean over seeds) with a ± 1 std band (:data:`~chillfl.metrics.spread.SPREAD`);
    ``colours``: each group's index for :func:`~chillfl.plots.styles.variant_style` (:func:`colour_indices`; by default
    its position).

    One legend for all panels, under them: a legend in each panel, as tall as the labels (every option that varies)
    make it, covered the curves, and said the same thing twice."""
    from chillfl.plots.figure import literal  # lazy: matplotlib is the `plots` extra
    from chillfl.plots.run import integer_rounds

    present = [(k, t) for k, t in keys if any(series(r.records, k)[0] or summary_stop_point(r.summary, k) for g in groups for r in g.runs)]
    if not present:
        return None
    # a variant's label (every option that varies) can be wider than a panel: wrapped to a panel's width, the legend
    # in as many columns as there are panels, and the figure that much taller (constrained layout places it)
    labels = {g.label: literal(textwrap.fill(f"{g.label} (n={len(g.runs)})", LEGEND_CHARS)) for g in groups}  # a `$` drawn as written
    columns = len(present)
    fig = _figure(5.2 * len(present), 3.8 + 0.3 + LEGEND_LINE * legend_rows(list(labels.values()), columns))
    fig.set_layout_engine("constrained")
    entries: dict[str, Artist] = {}  # a group's label -> its line, from the first panel that drew the group
    stop_entry: Artist | None = None  # the stop-round points' one legend entry, where some run has one
    banded = any(len(g.runs) > 1 for g in groups)  # every group one run: no band, and the titles name none
    for i, (key, title) in enumerate(present):
        ax = fig.add_subplot(1, len(present), i + 1)
        ylabel, scale = Y_AXES.get(key, (key, 1.0))
        for index, g in zip(colours if colours is not None else range(len(groups)), groups):
            rounds, mean, std = band([r.records for r in g.runs], key)
            # a group keeps its colour in every panel and figure, also where a group before it has no such metric
            colour, style = variant_style(index)
            for point in stop_points(g, key):  # a stopped run's final point (summary.json): each run's own, never in the mean
                (stop_entry,) = ax.plot([point.round], [scale * point.value], ls="", marker=STOP_MARKER, ms=9, color=colour, label=stop_label(None))
            if len(rounds) == 0:
                continue
            mean, std = scale * mean, scale * std
            # a dot at each measured round where the series skips some (eval.every, a non-finite value): a plain line
            # through 3, 6, 7 read as values measured at 4 and 5 (as plot_temperatures marks a client's gaps)
            (line,) = ax.plot(rounds, mean, lw=1.5, color=colour, ls=style, marker="." if skips_rounds(rounds, mean) else None, label=labels[g.label])
            entries.setdefault(g.label, line)
            if len(g.runs) > 1:
                ax.fill_between(rounds, mean - std, mean + std, color=line.get_color(), alpha=0.2, lw=0)
        if key in UNBOUNDED_CURVES and _explodes(groups, key):  # one run's loss far above the rest: log scale keeps the others readable
            ax.set_yscale("log")
            title = f"{title} (log scale)"
        ax.set(xlabel="round", ylabel=ylabel, title=f"{title}\n(mean over seeds, {SPREAD})" if banded else title)
        integer_rounds(ax)
        ax.grid(alpha=0.3)
    ordered = [g.label for g in groups if g.label in entries]  # the groups' order, whichever panel drew a group first
    handles, texts = [entries[label] for label in ordered], [labels[label] for label in ordered]
    if stop_entry is not None:
        handles, texts = [*handles, stop_entry], [*texts, stop_label(None)]
    fig.legend(handles, texts, fontsize=7, loc="outside lower center", ncols=columns)
    return _png(fig)


def stop_points(group: Group, key: str) -> list[StopPoint]:
    """``key`` measured at the stop round of each of ``group``'s runs that a hook stopped at a round ``eval.every`` skipped
    (:func:`~chillfl.plots.stop.summary_stop_point`): the final value its ``summary.json`` reports, which its
    ``metrics.jsonl`` (the curves' data) does not hold, so that a curve does not end at an earlier evaluation unsaid."""
    return [point for r in group.runs if (point := summary_stop_point(r.summary, key)) is not None]


def skips_rounds(rounds: Sequence[float] | np.ndarray, values: Sequence[float] | np.ndarray) -> bool:
    """Whether a curve's line would bridge rounds that were not measured (two measured rounds more than one apart) or
    break at a non-finite value (a finite point alone between two breaks draws nothing without a marker)."""
    xs = np.asarray(rounds, dtype=float)
    return bool(np.any(np.diff(xs) > 1) or not np.all(np.isfinite(np.asarray(values, dtype=float))))


def _explodes(groups: Sequence[Group], key: str, factor: float = 10.0) -> bool:
    """True when some value of ``key`` exceeds ``factor`` x the median of the groups' last values."""
    finals, peak = [], 0.0
    for g in groups:
        for r in g.runs:
            values = [v for v in series(r.records, key)[1] if math.isfinite(v)]
            if values:
                finals.append(values[-1])
                peak = max(peak, max(values))
    return bool(finals) and float(np.median(finals)) > 0 and peak > factor * float(np.median(finals))


def reliability_figure(run: Run) -> str | None:
    """The reliability diagram of ``run``'s final global model (None without one).

    From the bins its ``summary.json`` keeps (``calibration``), so a run on
    the user's own module or data gets one too; a folder written before
    those were kept is replayed from its config and ``model.safetensors``.
    """
    from chillfl.plots.figure import literal  # lazy: matplotlib is the `plots` extra

    if isinstance(saved := run.summary.get("calibration"), dict):
        result = {"runs": {literal(run_label(run.folder)): saved}}  # the key is the panel's title: a `$` drawn as written
        try:
            return _via_file(lambda path: plot_reliability(result, path))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:  # a hand-edited or foreign summary.json
            raise ConfigError("RUN_DIR", f"{run.folder / 'summary.json'}: calibration is not what chillfl writes "
                                         f"({type(exc).__name__}: {' '.join(str(exc).split())[:120]})") from None
    elif (run.folder / "model.safetensors").is_file():
        try:
            result = analyze([str(run.folder)], bins=run.config.eval.ece_bins)
        except PluginNotImported:  # its aggregator or policy is a plugin's: the caller names it in its note
            raise
        except ConfigError:  # e.g. a dataset that is not on this machine
            return None
        result = {**result, "runs": {literal(str(label)): one for label, one in result["runs"].items()}}
    else:
        return None
    return _via_file(lambda path: plot_reliability(result, path))


class NotDrawn(Exception):
    """A figure the page cannot draw, with why in one line (``reason``): the page says it in the figure's place and goes on.
    Why: the partition heat map swallowed its rebuild's ConfigError, and the page said nothing of why the map was not there."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def partition_figure(run: Run) -> str | None:
    """The class x client heat map of ``run``'s partition (rebuilt from its config); :class:`NotDrawn` with the rebuild's
    one-line error where the data cannot be rebuilt (a dataset not on this machine, a config no longer valid).

    Built with ``eval.clients = "none"`` (no client splits): the map shows train counts only, and the train partition
    is drawn from its own stream, so it is the run's own; drawing every client's eval split first took half the
    report's time at 20,000 clients."""
    from chillfl.plots.figure import literal  # lazy: matplotlib is the `plots` extra

    from chillfl.partition_refusal import started_in

    here = run.config.paths_from(started_in(run.folder))  # relative data_dir / partition.from: where the run was started, as resume reads them
    config = replace(here, eval=replace(here.eval, clients="none"))
    try:
        data = build_data(config)
    except PluginNotImported:  # e.g. a plugin's soft-label method (its public pool): the caller names it in its note
        raise
    except ConfigError as exc:  # e.g. a dataset that is not on this machine: the page says why, and renders on
        raise NotDrawn(f"its data could not be rebuilt from its config.toml: {exc}") from None
    return _via_file(lambda path: plot_class_heatmap(data.class_counts(), path, title=literal(f"{run.config.name}: class counts per client (seed {run.config.seed})")))


# ----------------------------------------------------------------------------- page

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1200px;color:#222;padding:0 16px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;margin:8px 0;font-size:13px;max-width:100%}th,td{border:1px solid #ccc;padding:4px 8px;text-align:right;overflow-wrap:anywhere}
table#configs,table.compare{width:100%;table-layout:fixed}
th{background:#f3f3f3}td.l,th.l{text-align:left}img{max-width:100%;height:auto;display:block;margin:8px 0}
details pre{background:#f7f7f7;padding:8px;white-space:pre-wrap;overflow-wrap:anywhere;font-size:12px}.muted{color:#666;font-size:12px}
.fig{display:inline-block;vertical-align:top;margin-right:12px}
tr.selected td,td.selected{background:#eaf4e4}
"""

SCRIPT = """
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var broken = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); });
  var out = document.getElementById('render-check');
  out.setAttribute('data-images', String(imgs.length));
  out.setAttribute('data-broken', String(broken.length));
  out.setAttribute('data-tables', String(document.querySelectorAll('table').length));
  var wide = Array.prototype.filter.call(document.querySelectorAll('body *'), function (e) {
    return e.getBoundingClientRect().right > document.documentElement.clientWidth + 1;
  });
  out.setAttribute('data-overflow', String(wide.length));
});
"""


def _e(text: Any) -> str:
    return html.escape(str(text))


SHOWN = ("dataset.", "partition.", "model.", "algorithm.", "temperature.", "distillation.", "federation.rounds", "federation.num_clients",
         "federation.clients_per_round", "client.lr", "client.epochs", "client.batch_size")
"""Config keys the configurations table has a column for; others that differ between groups go into its "other" column."""


def _other_keys(groups: Sequence[Group]) -> list[str]:
    """Keys that differ between the groups but have no column (``privacy.mechanism``, ``attack.kind``,
    ``prototypes.method``, ``eval.validation``...): without them, such groups' rows read as equal."""
    return sorted(k for k in _varying_keys(groups) if not k.startswith(SHOWN))


def _inline(value: Any, nested: bool = False) -> str:
    """A config value as TOML writes it inline (``{crop_padding = 0, flip = true}``, ``[{name = "decorr"}]``), not as
    Python's repr (``{'crop_padding': 0, ...}``, ``({'name': 'decorr'},)``): the page shows the config a reader types.
    A top-level string stays bare (``model=mlp``), as the labels write it; None is ``unset``, as the reference has it."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {_inline(v, True)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_inline(v, True) for v in value) + "]"
    if isinstance(value, str) and nested:
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _sigma_used(g: Group) -> str | None:
    """``sigma used=1.66016``: the noise multiplier a private run's noise was drawn at (``summary.json``'s ``privacy`` block);
    None for a run without one. Why: under ``target_epsilon`` the config keeps ``noise_multiplier`` as written (1.0, unused),
    so the flat config showed a sigma that never ran and not the one that did. Every seed's is read: under ``target_epsilon``
    sigma is calibrated to each seed's client sizes (0.675049 and 0.681458), and the first seed's alone read as the group's;
    where they differ, ``sigma used=0.675049–0.681458 (differs by seed)``."""
    shown: dict[str, float] = {}
    for run in g.runs:
        block = run.summary.get("privacy")
        sigma = block.get("noise_multiplier") if isinstance(block, dict) else None
        if is_real(sigma):
            shown.setdefault(f"{sigma:.6g}", float(sigma))
    if not shown:
        return None
    if len(shown) == 1:
        return f"sigma used={next(iter(shown))}"
    return f"sigma used={min(shown.values()):.6g}–{max(shown.values()):.6g} (differs by seed)"


def _config_row(g: Group, other: Sequence[str] = (), privacy: bool = False) -> str:
    """One group's row; ``privacy``: some group ran private, so the "other" cell says each one's sigma used (:func:`_sigma_used`),
    in place of a written ``privacy.noise_multiplier``."""
    c = g.runs[0].config
    part = lambda table, key: ", ".join(f"{k}={_inline(v)}" if k != key else str(v) for k, v in table.items())  # noqa: E731
    cells = [
        g.label, part(c.dataset, "name"), part(c.partition, "name"), part(c.model, "name"), _method(c, part),
        part(c.temperature, "policy"), part(c.distillation, "method") if c.distillation else "–",
        f"{c.federation.rounds}", f"{c.federation.num_clients} / {c.federation.sample_size()}",
        f"lr {c.client.lr}, {c.client.epochs} ep, bs {c.client.batch_size}", ", ".join(map(str, g.seeds)),
    ]
    if other or privacy:
        flat = _flat(c)
        used = _sigma_used(g)
        shown = [f"{k}={_inline(flat[k])}" for k in other if k in flat and not (used and k == "privacy.noise_multiplier")]
        cells.append(", ".join([*shown, *([used] if used else [])]) or "–")
    return "<tr>" + "".join(f'<td class="l">{_e(x)}</td>' for x in cells) + "</tr>"


def _folders_note(g: Group) -> str:
    """``2 runs: chill (seed 0), chill-2 (seed 1) in results``: the folders a group's mean ± std is over, each parent once.
    Why: the page said "7 runs in 3 groups" and each group's seeds, but not which folders went into which group."""
    by_parent: dict[Path, list[str]] = {}
    for r in g.runs:
        by_parent.setdefault(r.folder.parent, []).append(f"{r.folder.name} (seed {r.config.seed})")
    return f"{counted(len(g.runs), 'run')}: " + "; ".join(f"{', '.join(names)} in {parent}" for parent, names in by_parent.items())


def _method(c: RunConfig, part: Callable[[Mapping[str, Any], str], str]) -> str:
    """The configurations table's "algorithm" cell: the method that ran, as its protocol names it (a prototype or
    soft-label run said ``fedavg, weighting=samples``, the ``[algorithm]`` table it never used), and the aggregator
    where that protocol averages models too."""
    kind = protocol_of(c)
    if kind.method_table is None:
        return part(c.algorithm, "name")
    cell = f"{kind.method(c)} ({kind.title})"
    try:
        averaged = kind.uses_aggregator and kind.models_travel(c)
    except ConfigError:  # a plugin's method, read as data: its settings are not parsed here
        averaged = False
    return f"{cell}; models averaged by {part(c.algorithm, 'name')}" if averaged else cell


def _value(run: Run, key: str) -> Any:
    """A results-table column's value for one run: from its summary, or its final record (:data:`FROM_RECORDS`).

    A summary's ``null`` final value is a non-finite one (strict JSON: a finite value is a number, an unmeasured one
    absent): the final record that measured it says which (``"nonfinite"``, read back as the float), else NaN. Read as
    "not measured", a group's loss cell was the other seeds' mean, and one run's a dash. A null ``final_epsilon`` is an
    unbounded budget (:data:`~chillfl.storage.results.SPENT_KEYS`: the last round's epsilon null, no number at all): inf, as
    the comparison tables print it; read from the records, an earlier round's finite epsilon made it NaN, a dash.

    A summary with a stop-round evaluation (:data:`~chillfl.plots.stop.STOP_EVALUATION`, kept since 2026-12-07) was
    written by a chillfl whose summaries keep the :data:`FROM_RECORDS` columns (since 2026-11-28): one it lacks was not
    measured at the stop round (a probe that measured nothing), and is a dash. Read from ``metrics.jsonl``, whose
    stop round is a skipped one, the round before's success was shown as the final one."""
    if key in run.summary and run.summary[key] is None and key.removeprefix("final_") in SPENT_KEYS:
        return math.inf
    if key in run.summary and run.summary[key] is None and key.startswith("final_"):
        _, values = series(run.records, key.removeprefix("final_"))
        return values[-1] if values and not math.isfinite(values[-1]) else math.nan
    if key in run.summary or key not in FROM_RECORDS or isinstance(run.summary.get(STOP_EVALUATION), Mapping):
        return run.summary.get(key)
    return value_at_end(run.records, FROM_RECORDS[key])  # a summary written before it had the key, or without it: the last round's alone


def _target_interval(run: Run) -> int | None:
    """The evaluation interval the run's ``rounds_to_target`` was read with: its summary's ``target_eval_interval`` (a
    stopped run's counts the stop round's evaluation, which is in ``summary.json`` only; None: no round measured), the
    records' for a summary written before it had the key. Why: the caveat must describe the number in the cell."""
    interval = run.summary.get("target_eval_interval")
    if "target_eval_interval" in run.summary and (interval is None or is_whole(interval)):
        return interval
    return evaluation_interval(run.records)


def _metrics_columns(groups: Sequence[Group]) -> tuple[tuple[str, str, bool], ...]:
    """The results table's columns: rounds to target only where a run set ``eval.target_accuracy``
    (a comparison's own target, the reference's best accuracy per seed, is in its comparison table); its header says
    "first evaluated round" where such a run was not evaluated every round (``eval.every`` > 1)."""
    has_target = any("target_accuracy" in r.summary for g in groups for r in g.runs)
    private = any("final_epsilon" in r.summary for g in groups for r in g.runs)  # [privacy]: epsilon only where a run spent one
    attacked = any(_value(r, "final_attack_success_rate") is not None for g in groups for r in g.runs)  # [attack]: a backdoor's success
    intervals = sorted({i for g in groups for r in g.runs if "target_accuracy" in r.summary and (i := _target_interval(r)) is not None} - {1})
    label = (f"rounds to target (first evaluated round; evaluated every {' or '.join(map(str, intervals))} rounds, eval.every)"
             if intervals else None)  # > 1: the round a target was reached may be up to that - 1 earlier (its summary's target_eval_interval)
    return tuple((key, label, pct) if key == "rounds_to_target" and label else (key, name, pct) for key, name, pct in TABLE_METRICS
                 if (has_target or key != "rounds_to_target") and (private or key != "final_epsilon")
                 and (attacked or key != "final_attack_success_rate"))


def _unfinished_note(g: Group) -> str:
    """`` (div: diverged (at round 1), 0/2 rounds)`` for a group's runs in a named ``.partial`` or ``.failed`` folder,
    or without a summary: their curves are drawn, but the table has no final numbers of them, or numbers of a run that
    did not end (killed after it wrote its ``summary.json``, before the rename), and should say why."""
    notes = []
    for r in g.runs:
        if not r.summary or _unfinished(r.folder):
            name, state, rounds, _ = checked_folder_state(r.folder, r.config.name, r.config.federation.rounds).cells()
            strict = ", strict = true" if r.config.strict and state.startswith("diverged") else ""  # grouped with non-strict seeds: why it stopped
            notes.append(f"{name}: {state}{strict}, {rounds} rounds")
    return f" ({'; '.join(notes)})" if notes else ""


def _metrics_row(g: Group, columns: Sequence[tuple[str, str, bool]] = TABLE_METRICS, tuned: bool = False) -> str:
    """A group's results row; ``tuned``: with the "tuning point" cell (:attr:`Group.tuning`), its selected row in bold."""
    cells = [f'<td class="l">{_e(g.label + _unfinished_note(g))}</td>', f"<td>{len(g.runs)}</td>"]
    if tuned:
        cells.append("<td><strong>selected</strong></td>" if g.tuning == "selected" else f"<td>{_e(g.tuning or '')}</td>")
    for key, _, pct in columns:
        values = [_value(r, key) for r in g.runs]
        unbounded = key.removeprefix("final_") in SPENT_KEYS and math.inf in values  # the group's budget is no number: "inf (1 of 3 runs)", as the seed table's "inf"
        text = _with_nonfinite("–" if unbounded else _fmt(key, *mean_std(values), pct), values)
        if key == "rounds_to_target" and any("target_accuracy" in r.summary for r in g.runs):
            reached = sum(v is not None for v in values)
            text = f"{text} ({reached}/{len(values)} reached)" if reached < len(values) else text  # the mean is over those that did
        cells.append(f"<td>{_e(text)}</td>")
    return ('<tr class="selected">' if tuned and g.tuning == "selected" else "<tr>") + "".join(cells) + "</tr>"


def _partition_key(config: RunConfig) -> str:
    """What decides a partition's heat map: equal keys draw identical maps."""
    parts = [config.dataset, config.partition, config.seed, config.federation.num_clients, config.distillation.get("public_size", 0), config.eval.validation]
    return json.dumps(parts, sort_keys=True, default=str)


EVERY_POINT = "at every tuning point"
"""How ``table.md`` heads its table of validation scores at every point of the grid (:func:`~chillfl.report.compare`)."""


def _markdown_html(text: str, selected: frozenset[tuple[str, str]] = frozenset()) -> list[str]:
    """A comparison's ``table.md`` (markdown tables and lines of prose) as HTML; ``selected``: the (row, column) cells of
    its table at every tuning point that are the point each variant selected (:attr:`Selection.cells`), in bold with
    "(selected)": every point's score was shown alike, the one the main table reports unmarked."""
    out: list[str] = []
    rows: list[list[str]] = []
    every_point = False  # the table under the prose line that heads the scores at every tuning point

    def cell(row: Sequence[str], column: int, value: str) -> str:
        if every_point and column > 0 and (row[0], rows[0][column]) in selected:
            return f'<td class="l selected"><strong>{_e(value)}</strong> (selected)</td>'
        return f'<td class="l">{_e(value)}</td>'

    def flush() -> None:
        if rows:
            head, *body = rows
            out.append('<table class="compare"><tr>' + "".join(f'<th class="l">{_e(c)}</th>' for c in head) + "</tr>"
                       + "".join("<tr>" + "".join(cell(r, i, c) for i, c in enumerate(r)) + "</tr>" for r in body) + "</table>")
            rows.clear()

    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= set("-: ") for c in cells):
                rows.append(cells)
            continue
        flush()
        if line.strip():
            every_point = EVERY_POINT in line
            out.append(f'<p class="muted">{_e(line)}</p>')
    flush()
    return out


REDRAWN = frozenset({"curves.png", "local_curves.png"})
"""A comparison folder's figures the page draws itself from the runs (its curves, with seed bands): not shown twice."""


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _own_file(path: Path, png: bool = False) -> bytes | str:
    """The bytes of a file a comparison folder holds, or why it is left out (:func:`~chillfl.paths.read_own_file`: a
    link, not a regular file, over :data:`~chillfl.paths.OWN_FILE_LIMIT`, unreadable; with ``png``, not a PNG)."""
    data = read_own_file(path)
    if png and isinstance(data, bytes) and not data.startswith(PNG_MAGIC):
        return "not a PNG image"
    return data


def _own_json(path: Path) -> Any:
    """A comparison folder's own JSON file (``table.json``, ``sweep.json``) read as :func:`_own_file` reads; a refused
    one raises ValueError, as a garbled one does (a FIFO hung the report, a link was followed out of the folder)."""
    data = read_own_file(path)
    if isinstance(data, str):
        raise ValueError(data)
    return json_loads(data)


def _left_out(skipped: Sequence[str]) -> list[str]:
    """One note line naming a comparison folder's files the page left out, each with why (:func:`_own_file`)."""
    return [f'<p class="muted">left out of this page: {_e("; ".join(skipped))}</p>'] if skipped else []


def _folder_figures(folder: Path) -> list[str]:
    """The comparison folder's own figures the page does not redraw, as written there and by file name: the forest
    plot of differences, the privacy-utility curve, accuracy against bytes, whatever a comparison drew. A PNG is read
    as bytes and embedded, never interpreted; a link, a file that is no regular PNG (:func:`_own_file`) or cannot be
    read is left out, and one note line names them."""
    parts, skipped = [], []
    for png in sorted(folder.glob("*.png")):
        if png.name in REDRAWN:
            continue
        data = _own_file(png, png=True)
        if isinstance(data, str):
            skipped.append(f"{png.name} ({data})")
            continue
        uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        parts.append(f'<div class="fig"><p class="muted">{_e(png.name)}</p><img alt="{_e(png.stem)}" src="{uri}"></div>')
    return parts + _left_out(skipped)


def _comparison_section(folder: Path) -> list[str]:
    """A ``chillfl compare`` folder's own table, as it printed it (rounds to target, tuned values, caveats), its own
    figures the page does not redraw (:func:`_folder_figures`), and its diverged runs with the round they diverged at
    (they are in no other table of the page)."""
    table = folder / "table.md"
    if not (table.is_file() or table.is_symlink()):
        return []
    parts = [f"<h2>Comparison: {_e(folder.name)}</h2>", '<p class="muted">as <code>chillfl compare</code> printed it (table.md)</p>']
    selection = selected_points(folder)
    text = _own_file(table)
    if isinstance(text, str):  # a link (to a secret, say) or no regular file: named, not embedded
        parts += _left_out([f"table.md ({text})"])
    else:
        parts += _markdown_html(text.decode("utf-8", "replace"), selection.cells if selection is not None else frozenset())
    if selection is not None:
        parts.append('<p class="muted">bold (selected): the point each variant selected on validation, which the table above reports (table.json\'s tuned)</p>')
    parts += _folder_figures(folder)
    failed, skipped = [], []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and ".failed" in p.name):
        data = read_own_file(sub / "failure.json") if os.path.lexists(sub / "failure.json") else b""
        if isinstance(data, str):  # a FIFO hung the report; a link's target was shown as the reason
            skipped.append(f"{sub.name}/failure.json ({data})")
        try:
            reason = json_loads(data) if isinstance(data, bytes) and data else {}
        except ValueError:
            reason = {}
        at = f"diverged at round {reason['round']}" if isinstance(reason, dict) and "round" in reason else "failed"
        what = f" ({reason['what']})" if isinstance(reason, dict) and reason.get("what") else ""
        failed.append(f"<li>{_e(sub.name.split('.failed')[0])}: {_e(at + what)}</li>")
    if failed:
        parts += [f'<p>Diverged runs ({len(failed)}; not in the results and curves below):</p><ul id="diverged">', *failed, "</ul>"]
    return parts + _left_out(skipped)


def _missing_runs(run_dirs: Sequence[Path], taken: Sequence[Path]) -> list[str]:
    """One line per named comparison folder without its table (``NAME-compare.partial``: interrupted, or a shard's
    shared folder) whose planned runs are not all on the page: how many, and each one's state as ``chillfl status``
    reads it (its ``sweep.json``'s run names, :func:`~chillfl.run_names.comparison_labels`, and each run's folder,
    :func:`~chillfl.storage.run_state.run_state`). The page said "1 run in 1 group" of a comparison of 4."""
    lines = []
    for folder in run_dirs:
        if not is_sweep(folder) or (folder / "table.md").is_file():
            continue
        planned = list(comparison_labels(folder))
        here = {_run_name(p) for p in taken if p.parent.resolve() == folder.resolve()}
        missing = [checked_run_state(folder, name) for name in planned if name not in here]
        if missing:
            states = ", ".join(f"{s.name} ({s.cells()[1]})" for s in missing)
            lines.append(f"{folder} is an unfinished comparison: {len(missing)} of its {counted(len(planned), 'planned run')} "
                         f"{'is' if len(missing) == 1 else 'are'} not on this page: {states}; chillfl status {shell_path(folder)} says where each "
                         f"stands, chillfl resume {shell_path(folder)} runs them")
    return lines


def _run_name(folder: Path) -> str:
    """The planned run a run folder is of: ``T0.1-s1`` for ``T0.1-s1``, ``T0.1-s1.partial`` and ``T0.1-s1.failed-2``.
    :func:`_missing_runs` compared the folder's own name with the planned one, so a named stopped run, on the page,
    was also counted among the comparison's runs "not on this page"."""
    return re.sub(rf"(?:{re.escape(PARTIAL)}|{re.escape(FAILED)}(?:-\d+)?)$", "", folder.name)


def _epsilon_caveat(groups: Sequence[Group], columns: Sequence[tuple[str, str, bool]]) -> str | None:
    """The compare table's epsilon caveat (:func:`~chillfl.report.caveats.epsilon_caveat`: what each group's epsilon
    bounds) under a results table with an epsilon column: it was on the page only in a named comparison's own table,
    not for private runs given one by one, whose client- and sample-level epsilons then read as one scale."""
    if not any(key == "final_epsilon" for key, _, _ in columns):
        return None
    try:
        return epsilon_caveat([(g.label, g.runs[0].config) for g in groups], {g.label: n for g in groups if (n := g.points) is not None})
    except ConfigError:  # a plugin's mechanism, read as data: its guarantee is not known here
        return None


GROUP_SEPARATOR = "; "
"""Between group labels in one line (the groups line, a shared partition's caption): a label of options holds ", "
(``client.lr=0.05, temperature.value=1.0``), so a list joined with ", " could not be split back into its groups."""
TITLE_MAX = 80
"""The default title's length bound: a tab or heading, not the list of groups (that follows the heading)."""


def default_title(run_dirs: Sequence[str | Path], runs: int) -> str:
    """``chillfl report: demo-compare, 9 runs``: the folders' names (how many, past two) and the run count, at most
    :data:`TITLE_MAX` characters; the groups are listed below the heading, not in it."""
    names = [Path(p).resolve().name or str(p) for p in run_dirs]
    folders = ", ".join(names) if len(names) <= 2 else f"{names[0]} and {len(names) - 1} more folders"
    tail = f", {counted(runs, 'run')}"
    head = "chillfl report: "
    room = TITLE_MAX - len(head) - len(tail)
    if len(folders) > room:
        folders = folders[: room - 1] + "…"
    return head + folders + tail


def render(run_dirs: Sequence[str | Path], title: str | None = None, *, models: bool = True, partitions: bool = True) -> str:
    """The report page as a string (see module docstring).

    The folders are read as data (:func:`~chillfl.plugins.reading_data`): no plugin module a saved config names is imported.
    A plugin's table is shown as written; a figure that needs its code (a partition beside a plugin's soft-label method, an
    old folder's reliability diagram under a plugin aggregator) is left out, and one note line names the plugins.
    """
    need("matplotlib", "plots", "the report's figures")
    left_out: list[str] = []
    with reading_data("chillfl report"):
        page = _render(run_dirs, title, models=models, partitions=partitions, left_out=left_out)
    if left_out:
        log.info("note: the report imports no plugin code that a results folder names; left out, as only that code could draw them: %s", "; ".join(left_out))
    return page


def _unless_plugin(figure: Callable[[Run], str | None], run: Run, what: str, left_out: list[str]) -> str | None:
    """``figure(run)``, or None with ``what`` and the plugin named in ``left_out`` when it needs a plugin's code."""
    try:
        return figure(run)
    except PluginNotImported as exc:
        left_out.append(f"{what} ({exc.field} = {exc.name!r})")
        return None


def _render(run_dirs: Sequence[str | Path], title: str | None, *, models: bool, partitions: bool, left_out: list[str]) -> str:
    run_dirs = distinct(run_dirs)  # a folder named twice: one comparison section, one entry in the title
    folders = find_runs(run_dirs)
    labels = {parent: comparison_labels(parent) for parent in dict.fromkeys(p.parent for p in folders)}
    folders = variant_order(folders, labels)
    runs = [load_run(p, labels[p.parent]) for p in folders]
    chosen = {parent: selected_points(parent) for parent in labels}
    for run in runs:  # a tuned comparison's run: at its variant's selected point or not, as its table.json says
        if (selection := chosen[run.folder.parent]) is not None and run.variant is not None:
            run.selected = run.variant in selection.labels
            run.points = selection.points.get(run.variant)
    groups = group_runs(runs)
    colours = colour_indices(groups, labels)
    tuned = any(g.tuning is not None for g in groups)
    title = title or default_title(run_dirs, len(runs))
    other = _other_keys(groups)
    private = any(_sigma_used(g) for g in groups)  # the sigma that ran, in the "other" column
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{_e(title)}</title>", f"<style>{CSS}</style>",
        "</head><body>", f"<h1>{_e(title)}</h1>",
        f'<p class="muted">{counted(len(runs), "run")} in {counted(len(groups), "group")}; runs equal but for the seed form a group '
        f"(numbers: mean ± sample std over its seeds; curves: mean over seeds, {SPREAD}).</p>",
        f'<p id="groups">groups: {_e(GROUP_SEPARATOR.join(g.label for g in groups))}</p>',
        *(f'<p id="missing">{_e(line)}</p>' for line in _missing_runs(run_dirs, folders)),
        *([f'<p class="muted" id="skipped">{_e(_skipped_note(skipped))}</p>'] if (skipped := skipped_folders(run_dirs)) else []),
        "<h2>Configurations</h2>", "<table id=\"configs\"><tr>" + "".join(f'<th class="l">{h}</th>' for h in (
            "group", "dataset", "partition", "model", "algorithm", "temperature", "distillation", "rounds", "clients / per round", "client", "seeds",
            *(["other"] if other or private else []))) + "</tr>",
        *(_config_row(g, other, private) for g in groups), "</table>",
    ]
    for g in groups:
        parts.append(f"<details><summary>{_e(g.label)}: full config ({_e(g.runs[0].folder)}); {_e(_folders_note(g))}</summary>"
                     f"<pre>{_e(to_toml(g.runs[0].config.to_dict()))}</pre></details>")
    columns = _metrics_columns(groups)
    for path in map(Path, run_dirs):
        parts += _comparison_section(path)
    caveat = _epsilon_caveat(groups, columns)
    caveat = None if caveat is None or any(_e(caveat) in part for part in parts) else caveat  # a named comparison's table says it already
    parts += [
        "<h2>Results</h2>", "<table id=\"metrics\"><tr><th class=\"l\">group</th><th>runs</th>" + ("<th>tuning point</th>" if tuned else "")
        + "".join(f"<th>{_e(t)}</th>" for _, t, _ in columns) + "</tr>",
        *(_metrics_row(g, columns, tuned) for g in groups), "</table>",
        '<p class="muted">accuracies in %; loss and NLL: cross-entropy at T = 1 on the global test set; ECE: equal-width confidence bins (<code>eval.ece_bins</code>).</p>',
        *(['<p class="muted" id="tuning-note">tuning point: selected = the point its variant selected on validation, which the '
           "comparison's table reports (its table.json); - = another point of the grid</p>"] if tuned else []),
        *([f'<p class="muted" id="epsilon-caveat">{_e(caveat)}</p>'] if caveat else []),
        "<h2>Curves</h2>",
    ]
    for uri in (curves_figure(groups, ACCURACY_CURVES, colours), curves_figure(groups, LOSS_CURVES, colours)):
        if uri:
            parts.append(f'<img alt="curves" src="{uri}">')
    parts.append("<h2>Calibration</h2>")
    uri = curves_figure(groups, CALIBRATION_CURVES, colours)
    parts.append(f'<img alt="calibration over rounds" src="{uri}">' if uri else '<p class="muted">no calibration metrics in these runs</p>')
    if models:
        for g in groups:
            if uri := _unless_plugin(reliability_figure, g.runs[0], f"the reliability diagram of {g.label}", left_out):
                parts.append(f'<div class="fig"><img alt="reliability {_e(g.label)}" src="{uri}"></div>')
    if partitions:
        parts.append("<h2>Partitions</h2>")
        shared: dict[str, list[Group]] = {}
        for g in groups:  # groups on the same data, partition and seed share one heat map
            shared.setdefault(_partition_key(g.runs[0].config), []).append(g)
        for members in shared.values():
            names = GROUP_SEPARATOR.join(m.label for m in members)
            try:
                uri = _unless_plugin(partition_figure, members[0].runs[0], f"the partition of {names}", left_out)
            except NotDrawn as exc:
                parts.append(f'<div class="fig"><p class="muted">{_e(names)}: partition not drawn: {_e(exc.reason)}</p></div>')
                continue
            if uri:
                parts.append(f'<div class="fig"><p class="muted">{_e(names)}</p><img alt="partition {_e(names)}" src="{uri}"></div>')
    parts += ['<p id="render-check" hidden data-images="" data-broken="" data-tables="" data-overflow=""></p>', f"<script>{SCRIPT}</script>", "</body></html>"]
    return "\n".join(parts)


def write_report(run_dirs: Sequence[str | Path], out: str | Path, title: str | None = None, **kwargs: Any) -> Path:
    """Render the page, then write it atomically (:func:`~chillfl.storage.checkpoint.write_atomic`): a failed write (disk
    full, a file-size limit, a signal) removes its ``.tmp`` and leaves an older ``out`` as it was, and is one
    :class:`~chillfl.errors.StorageError` line. It wrote ``OUT.partial`` with ``write_text`` and left it (a traceback)."""
    from chillfl.paths import check_name_lengths, check_writable_dir, names_folder

    path, raw = Path(out), os.fspath(out)
    check_name_lengths(raw, "--output", ".tmp")  # written as OUT.tmp, then renamed
    if path.is_dir():
        raise ConfigError("--output", f"{path} is a folder; give an .html file path")
    if names_folder(raw):  # Path() drops the slash: `-o new/` wrote a file `new`
        raise ConfigError("--output", f"{raw} names a folder; give an .html file path, e.g. {path / 'report.html'}")
    if path.suffix and path.suffix.lower() not in (".html", ".htm"):  # -o r.pdf wrote HTML into a file a PDF viewer cannot open
        raise ConfigError("--output", f"the report is an HTML page; give a .html path, not {path.suffix} (a browser prints it to PDF)")
    check_writable_dir(str(path.parent), "--output")  # before the figures are drawn: an unwritable -o is one line, not a traceback
    page = render(run_dirs, title, **kwargs)  # nothing is written before the page is whole
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # checked writable above; gone since (a race, a full disk)
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc
    # a run folder under a non-UTF-8 name (Latin-1 ``caf\\xe9``, a lone surrogate here) is only shown on the page, never
    # read back from it: shown escaped (``caf\\udce9``, as chillfl's error lines show it), not a UnicodeEncodeError traceback
    write_atomic(path, page.encode("utf-8", "backslashreplace"))
    return path

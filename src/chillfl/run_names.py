"""A comparison's run folder names, and the variant label each run folder stands for.

``chillfl compare`` names each run's folder after its variant, tuning point and
seed (:func:`run_name`: ``fedavg-lr0.01-s0``); its ``sweep.json`` records the
variants (label, short name, own grid) and the seeds and shared grid. From that
record alone :func:`comparison_labels` gives back, for every run folder name,
the label the comparison's table names the run's row by (``FedAvg + chilling
T=0.5``; ``, client.lr=0.05`` added at a tuning point): ``chillfl report`` labels
its groups with it. The names live here, below both :mod:`chillfl.sweeps.plan`
(which names the runs) and :mod:`chillfl.report.html` (which reads them back),
so the two cannot drift apart and the report imports no sweep code.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from chillfl.errors import json_loads
from chillfl.config import MAX_NAME_BYTES, safe_name
from chillfl.paths import FAILED, PARTIAL, read_own_file
from chillfl.storage.run_folder import SWEEP_FILE
from chillfl.tune import Point, parse_tune, point_label

TEMPERATURE_SHORTHAND = "temperature"

NAME_KEYS = ("name", "policy", "method")
"""Options whose value alone names a variant in a folder name (``algorithm.name=fedavg`` -> ``fedavg``)."""


class Named(Protocol):
    """What naming a variant's runs reads of it (:class:`chillfl.sweeps.plan.Variant` is one)."""

    @property
    def label(self) -> str: ...

    @property
    def short(self) -> str | None: ...

    @property
    def tune(self) -> Mapping[str, Sequence[Any]]: ...


@dataclass(frozen=True)
class RecordedVariant:
    """A variant as ``sweep.json`` records it, the fields its run names are made of."""

    label: str
    short: str | None
    tune: Mapping[str, Sequence[Any]]


def short_setting(key: str, value: Any) -> str:
    """``client.lr``, 0.01 -> ``lr0.01``; ``algorithm.name``, fedavg -> ``fedavg``; ``temperature``, 0.5 -> ``T0.5``."""
    text = f"{value:g}" if isinstance(value, float) else str(value)
    if key == TEMPERATURE_SHORTHAND:
        return f"T{text}"
    leaf = key.rsplit(".", 1)[-1]
    return text if leaf in NAME_KEYS else f"{leaf}{text}"


COMPARISON_CONFIG: Final = "config.toml"
TABLE_MD: Final = "table.md"
TABLE_JSON: Final = "table.json"
CURVES_FIGURE: Final = "curves.png"
LOCAL_CURVES_FIGURE: Final = "local_curves.png"
DIFFERENCES_FIGURE: Final = "differences.png"
BYTES_FIGURE: Final = "accuracy_vs_bytes.png"
PRIVACY_UTILITY_FIGURE: Final = "privacy_utility.png"
CLP_FIGURE: Final = "clp_curves.png"
"""The files a comparison's folder holds beside its runs' folders (``python -m chillfl.plots.pa3fed`` adds ``clp_curves.png``).
Their writers name them by these constants, so that :data:`COMPARISON_FILES` cannot miss one."""

COMPARISON_FILES: Final = (COMPARISON_CONFIG, SWEEP_FILE, TABLE_MD, TABLE_JSON, CURVES_FIGURE, LOCAL_CURVES_FIGURE, DIFFERENCES_FIGURE,
                           BYTES_FIGURE, PRIVACY_UTILITY_FIGURE, CLP_FIGURE)
"""Names no run of a comparison may take (:func:`taken_name`): a run folder ``curves.png/`` stood where the figure goes, so the
comparison could never write it, resume or not; a run ``config.toml`` was silently renamed ``config.toml-2``, which a resume never finds."""

RUN_SUFFIX = re.compile(r"-([2-9]|[1-9][0-9]+)")
"""The ``-N`` that :func:`~chillfl.storage.results.claim_dir` and :func:`~chillfl.storage.results.rename_free` add to a
run folder whose name is taken (from 2 on)."""


def _fold(char: str) -> str:
    """One character as a case-insensitive file system compares it: its simple (one-character) case mapping, upper then
    lower (``ǅ``, ``ǆ``, ``Ǆ`` -> ``ǆ``; ``ς`` -> ``σ``, as Windows' upcase table, ``Σ``, makes them one), or itself
    where the mapping is longer (``ß``, ``ﬁ``, ``İ``: NTFS's upcase table keeps them, it maps one character to one)."""
    upper = char.upper()
    if len(upper) != 1:
        upper = char
    lower = upper.lower()
    return lower if len(lower) == 1 else upper


def folder_key(name: str) -> str:
    """What a file system compares of a folder name: macOS's default APFS (and Windows') ignore case and Unicode
    normalisation, so ``T`` and ``t`` are one folder there and two runs named so would read each other's results.
    Case is folded one character at a time (:func:`_fold`), never into more: ``str.casefold`` made ``Straße`` and
    ``strasse`` one name, which NTFS does not (it upcases a character at a time), and refused the two labels."""
    nfc = unicodedata.normalize("NFC", name)
    return unicodedata.normalize("NFC", "".join(_fold(c) for c in nfc))


def folder_clash(names: Iterable[str], apart: Collection[str] = ()) -> tuple[str, str] | None:
    """The first two of ``names`` that name one folder on a case-insensitive file system (:func:`folder_key`), or None.

    ``apart``: names of run folders that stand apart on disk already (:func:`run_folders`): two of them are no clash
    (this file system keeps them apart, and they hold their runs), where one of ``names`` folded alike but not on disk is.
    Why: the fold changed (``ı`` and ``i`` were two names to ``str.casefold``, are one to :func:`_fold`); an older
    chillfl's comparison of ``lr-ı`` and ``lr-i`` has both folders, and was refused by ``status`` and ``resume``."""
    seen: dict[str, list[str]] = {}
    for name in names:
        group = seen.setdefault(folder_key(name), [])
        for other in group:
            if other == name or other not in apart or name not in apart:
                return other, name
        group.append(name)
    return None


def run_folders(folder: Path) -> frozenset[str]:
    """The run names whose folders ``folder`` (a comparison's) holds, as its listing spells them: ``NAME``,
    ``NAME.partial`` and ``NAME.failed`` (a run stopped, or failed) all name run ``NAME``; nothing where it cannot be read."""
    try:
        entries = [e.name for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return frozenset()
    return frozenset(name.removesuffix(PARTIAL).removesuffix(FAILED) for name in entries)


def taken_name(names: Iterable[str]) -> tuple[str, str] | None:
    """The first of a comparison's run folder names ``names`` that its folder keeps for something else, and what (as
    :func:`folder_key` compares, case ignored), or None:

    * a file the comparison writes (:data:`COMPARISON_FILES`, and the ``.tmp`` it is written through);
    * a name with ``.partial`` or ``.failed`` in it: the readers of a comparison (``chillfl status``, ``report``, the
      tables of :mod:`chillfl.metrics.records`) take such a folder for an unfinished run, so a finished ``base.partial``
      was said to be stopped, and left out;
    * ``NAME-N`` beside a run ``NAME``: the name ``NAME`` moves on to where its folder is taken (``-2``, ``-3``, ...)."""
    names = list(names)
    files = {folder_key(f): f for name in COMPARISON_FILES for f in (name, f"{name}.tmp")}
    runs = {folder_key(n): n for n in names}
    for name in names:
        key = folder_key(name)
        if key in files:
            return name, f"its file {files[key]}"
        if PARTIAL in key or FAILED in key:
            return name, f"an unfinished run's folder (a name with {PARTIAL} or {FAILED} in it)"
        stem, dash, number = key.rpartition("-")
        if dash and RUN_SUFFIX.fullmatch(f"-{number}") and stem in runs:
            return name, f"the folder run {runs[stem]!r} moves to when {runs[stem]!r} is taken"
    return None


def names_fit(names: Sequence[str]) -> bool:
    """Whether ``names`` can be a comparison's run folder names: no two are one folder (:func:`folder_clash`) and none is
    kept for something else (:func:`taken_name`). Else the comparison names its runs by the full labels."""
    return folder_clash(names) is None and taken_name(names) is None


def run_name(variant: Named, point: Mapping[str, Any], seed: int | None, long: bool = False) -> str:
    """A run's folder name in a comparison: ``fedavg-lr0.01-s0`` (``long``: the full label, for when short names collide)."""
    if long:
        return _label_cut(variant.label, "".join(f", {x}" for x in (point_label(point), "" if seed is None else f"seed{seed}") if x))
    parts = [short_setting(k, v) for k, v in point.items()]
    if seed is not None:
        parts.append(f"s{seed}")
    return _label_cut(variant.short or safe_name(variant.label), "".join(f"-{x}" for x in parts))


def _label_cut(label: str, suffix: str) -> str:
    """``safe_name(label + suffix)``, where it is over the folder name's bytes (``MAX_NAME_BYTES``) with ``label`` cut,
    never ``suffix`` (the tuning point and seed). Why: the whole was cut from the right, so a long label's runs of every
    point and seed got one folder name, refused as "labels that differ" for a single label."""
    whole, end = safe_name(label + suffix), safe_name(suffix) if suffix else ""  # safe_name("") is "variant"
    if whole.endswith(end):
        return whole
    label = label[:MAX_NAME_BYTES]  # over the limit: no more of it than the bytes there are fits
    while label and not whole.endswith(end):
        label = label[:-1]
        whole = safe_name(label + suffix)
    return whole


def variant_points(shared: Mapping[str, Any], variant: Named) -> list[Point]:
    """The shared grid's points crossed with ``variant``'s own (its keys last: they vary fastest)."""
    return parse_tune({**shared, **variant.tune})


def suffixed(variants: Sequence[Named], shared: Mapping[str, Any], seeds: Sequence[int]) -> bool:
    """Whether the run names carry their tuning point and seed: more than one run per variant (a grid or seeds)."""
    return len(parse_tune(shared)) > 1 or bool(shared) or len(seeds) > 1 or any(v.tune for v in variants)


def run_labels(variants: Sequence[Named], shared: Mapping[str, Any], seeds: Sequence[int], apart: Collection[str] | None = None) -> dict[str, str]:
    """Run folder name -> its variant's label (with its tuning point): the names :func:`run_name` gives the comparison's
    runs, short ones unless two collide, in case too, or one is kept for the comparison's own files (:func:`names_fit`; then
    every name is the long one), as the comparison's plan chose them.

    ``apart``: the run folders a comparison's folder holds (:func:`run_folders`), for a comparison begun already, read as
    :func:`~chillfl.sweeps.plan.plan_cells` plans it then: where neither set of names fits, the short ones if only the
    comparison's files took them, else the first set whose names that fold alike stand apart on disk (:func:`folder_clash`:
    an older chillfl's ``lr-ı`` and ``lr-i``), else the set more of whose folders it holds (one stopped before its second
    fold-alike run began, which resume refuses and ``chillfl report`` and ``status`` still read)."""
    suffix = suffixed(variants, shared, seeds)
    sets: list[dict[str, str]] = []
    for long in (False, True):
        named = [(run_name(v, point, seed, long) if suffix else run_name(v, {}, None, long), ", ".join(x for x in (v.label, point_label(point)) if x))
                 for v in variants for point in variant_points(shared, v) for seed in seeds]
        sets.append(dict(named))
        if names_fit([name for name, _ in named]):
            return sets[-1]
    short, full = sets
    if apart is None:
        return full
    if folder_clash(short) is None:
        return short
    for begun in (short, full):
        if folder_clash(begun, apart) is None:
            return begun
    return short if len(short.keys() & set(apart)) > len(full.keys() & set(apart)) else full


def comparison_labels(folder: Path) -> dict[str, str]:
    """Run folder name -> variant label of the comparison in ``folder`` (its ``sweep.json``), named as the folder holds
    its runs (:func:`run_labels` with its :func:`run_folders`); empty when ``folder`` holds no readable record (a plain
    folder of runs, a foreign or hand-edited file): its runs keep the report's own labels."""
    try:
        data = read_own_file(folder / SWEEP_FILE)  # a FIFO hung report and status, a link was followed out of the folder
        if isinstance(data, str):
            return {}
        record = json_loads(data)
        options = record["options"]
        seeds = [int(s) for s in options["seeds"]]
        shared = dict(options.get("tune") or {})
        variants = [RecordedVariant(str(v["label"]), v.get("short"), dict(v.get("tune") or {})) for v in record["variants"]]
        return run_labels(variants, shared, seeds, run_folders(folder))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}

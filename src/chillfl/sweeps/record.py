"""``sweep.json``: a comparison's plan as its folder records it, and matching a folder to a plan.

A comparison's folder (``NAME-compare.partial`` until its table is written)
holds its base ``config.toml`` and ``sweep.json``: the variants as they ran
(controls included), the seeds, the tuning grid, the selection rule and the
reference, all a resumed sweep needs beyond the config (``chillfl resume
results/NAME-compare.partial``; :mod:`chillfl.sweeps.resume`). A comparison of a
user's own data, model or method parts (``chillfl.compare(dataset=...,
model=...)``) cannot be rebuilt from its folder: ``chillfl.resume_compare(FOLDER, model=..., data=...)``
resumes it from Python, given the same parts again.

The record also names the code and torch that made it: ``chillfl reproduce
--resume`` reuses a finished comparison (:func:`find_compare`,
:func:`read_compare`) only when the same code would make it again; and the folder
it was started in, from which a resume typed elsewhere reads the runs' relative
``data_dir`` (:func:`sweep_started_in`). That folder is no part of what the
comparison is: :func:`same_sweep` leaves it out when a record is matched.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
import sys
from dataclasses import asdict
from glob import escape as glob_escape
from pathlib import Path
from typing import Any, Iterator, Mapping, TypedDict

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

import torch

from chillfl.config import RunConfig
from chillfl.environment import code_sha256
from chillfl.errors import ConfigError, json_loads
from chillfl.numeric import is_whole
from chillfl.paths import check_writable_dir, current_folder, shell_path
from chillfl.report.compare import CompareResult
from chillfl.storage.checkpoint import write_atomic
from chillfl.storage.results import FAILED, FAILURE, PARTIAL, refuse_links, to_toml, unset_comment
from chillfl.storage.run_folder import STARTED_IN, config_changes, executor_move, move_accepted, say_accepted, start_folder, sweep_started_in  # noqa: F401  (sweep_started_in re-exported)
from chillfl.storage.run_state import SWEEP_FILE, is_sweep  # noqa: F401  (is_sweep re-exported: where the sweeps' code asks)
from chillfl.sweeps.plan import CompareOptions, Plan, Variant, parse_grid, repeats, typed_comparison, with_controls

FORMAT = 1
FIELD = "run_dir"


class MadeWith(TypedDict):
    code_sha256: str
    torch: str


class SweepRecord(TypedDict):
    """``sweep.json``, as written (variants and options in their JSON form)."""

    format: int
    resumable: bool
    reference: str | None
    options: dict[str, Any]
    variants: list[dict[str, Any]]
    """Every variant as it ran, the step-size controls after those asked for, each marked ``control`` (absent from an
    older chillfl's record: :func:`recorded_variant`)."""
    config_sha256: str
    config_toml: str
    """The ``config.toml`` it started with: a resume names what an edit of it changed (a run's checkpoint records it too)."""
    made_with: MadeWith
    started_in: str | None
    """The absolute folder the comparison was started in (None: unknown); absent from an older chillfl's record."""


def comparison_toml(config: RunConfig, plan: Plan) -> str:
    """The comparison's ``config.toml``: ``config`` as written, each number of an option as the option holds it
    (:func:`~chillfl.sweeps.plan.typed_comparison`), so ``mu = 0`` and ``mu = 0.0`` record one comparison, with what
    ``plan`` ran beyond the file (:func:`as_planned`), so ``chillfl compare FOLDER/config.toml`` runs it again.

    Above its tables, the options it leaves unset (:func:`~chillfl.storage.results.unset_comment`), as a run folder's
    ``config.toml`` and ``--dry-run`` have them: the TOML omits them (no null), so without the comment the comparison's
    file alone did not say a value was derived at run time. One writer of the file, its record's checksum and the dry run's text."""
    planned = as_planned(typed_comparison(config), plan).to_dict()
    return unset_comment(planned) + to_toml(planned)


def as_planned(config: RunConfig, plan: Plan) -> RunConfig:
    """``config`` with what the comparison's flags or keywords set in its tables: a grid's rows (``--grid``, ``grid=``)
    as its ``[variants]`` (they replaced the file's), and ``--seeds``, ``--tune``, ``--select``, ``--controls`` and
    ``--reference`` in ``[compare]`` and ``[tune]``; an option the file already resolves to the same value is left as written.

    Why: the folder's ``config.toml`` held the file alone, so rerunning it ran another comparison (one seed, no
    tuning, no variants) than the one ``sweep.json`` records. A grid's variants read back from ``[variants]`` run the
    same configs at the same seeds and points, under the same labels; their runs' folders are named by the labels
    (``client.lr0.1-s0``, where the grid named ``lr0.1-s0``)."""
    asked, controls = _asked_variants(config, plan)
    compare = dict(config.compare)
    if plan.seeds != list(config.compare.get("seeds", [config.seed])):
        compare["seeds"] = list(plan.seeds)
    if plan.tuned and plan.select != config.compare.get("select", "final"):
        compare["select"] = plan.select
    if controls != config.compare.get("controls", False):
        compare["controls"] = controls
    if plan.asked_reference is not None:  # --reference: the variant the table's targets are counted to
        compare["reference"] = plan.asked_reference
    variants = {v.label: {**v.overrides, **({"tune": v.tune} if v.tune else {})} for v in asked} if plan.from_grid else config.variants
    tune = dict(plan.tune_table) if plan.tune_table != config.tune else config.tune
    _refuse_null(variants, "grid" if plan.from_grid else "variants")  # a variant's own [tune] grid too
    _refuse_null(tune, "tune")
    planned = dataclasses.replace(config, variants=variants, compare=compare, tune=tune)
    if not planned.variants and not repeats(planned):  # `--seeds 0` at the config's own seed: only the flag made it a comparison
        planned = dataclasses.replace(planned, compare={**compare, "seeds": list(plan.seeds)})
    return planned


def _refuse_null(table: object, field: str, key: str = "") -> None:
    """A ConfigError on ``field`` naming the first None in ``table`` (a grid's or tuning grid's value from Python): TOML
    has no null, so the folder's config.toml could not hold it, and a rerun of that file ran the option's default instead
    (or failed to write at all)."""
    if table is None:
        raise ConfigError(field, f"{key or 'a value'} is None, which a comparison's config.toml cannot record (TOML has no null): "
                                 "give the value itself (the option's default, to compare against it), or leave the option out")
    if isinstance(table, dict):
        for k, v in table.items():
            _refuse_null(v, field, f"{key}.{k}" if key else str(k))
    elif isinstance(table, (list, tuple)):
        for v in table:
            _refuse_null(v, field, key)


def _asked_variants(config: RunConfig, plan: Plan) -> tuple[list[Variant], bool]:
    """The variants the comparison was asked for, and whether step-size controls were added after them: as the plan's
    variants record it (:attr:`~chillfl.sweeps.plan.Variant.control`).

    A plan read from an older chillfl's ``sweep.json`` does not record it: inferred then as that chillfl did. Its
    variants are those asked for (each at ``lr_scale`` 1), then the controls (:func:`with_controls`), of which the first
    scales the lr: the list before it is the asked one when its controls are the rest."""
    if plan.controls_recorded:
        return plan.asked, plan.controls_added
    variants = plan.variants
    first = next((i for i, v in enumerate(variants) if v.lr_scale != 1.0), None)
    if first is None:
        return list(variants), False
    try:
        controlled = with_controls(config, variants[:first], plan.tune_table, plan.configs[:first])
        if [dataclasses.replace(v, control=None) for v in controlled] == [dataclasses.replace(v, control=None) for v in variants]:
            return list(variants[:first]), True
    except ConfigError:
        pass
    return list(variants), False


def recorded_variant(saved: dict[str, Any]) -> Variant:
    """A variant as ``sweep.json`` records it. One of an older chillfl's record, which does not say whether it was asked
    for or added as a control, reads back with ``control`` None: what it was is inferred then, as that chillfl did."""
    return Variant(**{"control": None, **saved})


def sweep_record(config_toml: bytes, plan: Plan, resumable: bool) -> SweepRecord:
    """What ``sweep.json`` holds for ``plan``: what :func:`read_sweep` gives back (``resumable`` False: a user's own data or parts), the
    SHA-256 of the comparison's ``config.toml``, which a resume checks, and the code and torch that ran it, which
    :func:`find_sweep` checks before a finished comparison is reused."""
    return {"format": FORMAT, "resumable": resumable, "reference": plan.asked_reference, "options": asdict(plan.options),
            "variants": [asdict(v) for v in plan.variants], "config_sha256": hashlib.sha256(config_toml).hexdigest(),
            "config_toml": config_toml.decode("utf-8"),
            "made_with": {"code_sha256": code_sha256(), "torch": str(torch.__version__)}, STARTED_IN: current_folder()}


def same_sweep(saved: object, record: SweepRecord) -> bool:
    """Whether ``saved`` (a ``sweep.json`` as read) records the comparison ``record`` would (:func:`sweep_difference`)."""
    return sweep_difference(saved, record) is None


def sweep_difference(saved: object, record: SweepRecord, ignore: tuple[str, ...] = ()) -> str | None:
    """What differs between ``saved`` (a ``sweep.json`` as read) and the comparison ``record`` would make, in a few words
    naming the field (``"data_dir: '/a/data' there, '/b/data' here"``); None when it is the same comparison.

    Every field but the folder each was started in counts (and ``ignore``'s), so a shard or ``reproduce --resume`` started
    in another folder joins or reuses it. Of the config, ``out_dir`` is left out (the folder matched is under it, however
    it is spelt: ``res``, ``./res``, ``res/``, its absolute path) and ``data_dir`` is the folder it names from the folder
    each was started in (a dataset's files can be read from it, as ``hf``'s ``path``). Why: they were compared as typed,
    so a shard started elsewhere, which has to spell ``--out`` absolute, was refused as "another comparison"."""
    if not isinstance(saved, dict):
        return f"its {SWEEP_FILE} holds no JSON object"
    wanted = json.loads(json.dumps(record, sort_keys=True))  # as it reads back (tuples as lists)
    skip = {STARTED_IN, "config_sha256", "config_toml", *ignore}  # the checksum is of config_toml, compared below
    for key in sorted((set(saved) | set(wanted)) - skip):
        if saved.get(key) != wanted.get(key):
            return "chillfl or torch (made_with)" if key == "made_with" else key
    there, here = saved.get("config_toml"), wanted.get("config_toml")
    if there == here and saved.get("config_sha256") == wanted.get("config_sha256"):
        return None
    if not isinstance(there, str) or not isinstance(here, str):
        return "config"
    try:
        before, after = _where_resolved(there, saved.get(STARTED_IN)), _where_resolved(here, wanted.get(STARTED_IN))
    except ValueError:
        return "config"
    for key in sorted(set(before) | set(after)):
        if before.get(key, "unset") != after.get(key, "unset"):
            return f"{key}: {before.get(key, 'unset')!r} there, {after.get(key, 'unset')!r} here"
    return None


def _where_resolved(config_toml: str, started_in: object) -> dict[str, object]:
    """``config_toml``'s options as ``section.key``, without ``out_dir`` and with ``data_dir`` the absolute folder it
    names from ``started_in`` (as typed where that is unknown: an older chillfl's record). Values are only compared."""
    flat: dict[str, object] = {}

    def walk(table: Mapping[str, object], prefix: str) -> None:
        for key, value in table.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                flat[f"{prefix}{key}"] = value

    walk(tomllib.loads(config_toml), "")
    flat.pop("out_dir", None)
    data_dir = flat.get("data_dir")
    if isinstance(data_dir, str) and isinstance(started_in, str):
        flat["data_dir"] = os.path.normpath(os.path.join(started_in, os.path.expanduser(data_dir)))
    return flat


def write_sweep(partial: Path, record: SweepRecord) -> None:
    """``sweep.json`` in the comparison's ``.partial`` folder (beside its ``config.toml``), replaced atomically."""
    write_atomic(partial / SWEEP_FILE, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode("utf-8"))


def _candidates(parent: Path, name: str) -> Iterator[tuple[Path, object]]:
    """(folder, its ``sweep.json`` as read) of every comparison folder under ``parent`` named as a comparison ``name``
    would be (``NAME``, ``NAME-2``, ... as :func:`~chillfl.storage.results.claim_dir` names them, with or without
    ``.partial``), in name order; a link, a folder without a readable ``sweep.json`` left out."""
    for folder in sorted(parent.glob(f"{glob_escape(name)}*"), key=lambda p: p.name):
        base = folder.name.removesuffix(PARTIAL)
        if not (base == name or (base.startswith(f"{name}-") and base[len(name) + 1:].isdigit())) or folder.is_symlink():
            continue
        if not (folder / SWEEP_FILE).is_file():  # a FIFO: read, it blocked the shard or reproduce --resume forever
            continue
        try:
            yield folder, json_loads((folder / SWEEP_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue


def find_sweep(parent: Path, name: str, record: SweepRecord) -> Path | None:
    """The comparison folder under ``parent`` that the sweep ``record`` would make again, finished or (else) interrupted.

    Candidates are ``NAME``, ``NAME-2``, ... as :func:`~chillfl.storage.results.claim_dir` names them, with or
    without ``.partial``; one matches when its ``sweep.json`` equals ``record``: same config, variants, seeds,
    tuning, reference, code and torch. Anything else (another config, an older chillfl) is never reused.
    """
    found: Path | None = None
    for folder, saved in _candidates(parent, name):
        if not same_sweep(saved, record):
            continue
        if not folder.name.endswith(PARTIAL) and (folder / "table.json").is_file():
            return folder  # a finished one first: nothing to run
        if folder.name.endswith(PARTIAL) and found is None:
            found = folder
    return found


def made_by_other_code(parent: Path, name: str, record: SweepRecord) -> list[Path]:
    """The interrupted comparisons under ``parent`` that are the sweep ``record`` but for the code or torch that made
    them (``made_with``), which :func:`find_sweep` never reuses. Why: ``reproduce --resume`` after an upgrade ran the
    claim again from scratch beside such a folder and said nothing of it, though ``chillfl resume`` continues it."""
    return [folder for folder, saved in _candidates(parent, name)
            if folder.name.endswith(PARTIAL) and not same_sweep(saved, record) and sweep_difference(saved, record, ignore=("made_with",)) is None]


def read_sweep(folder: Path, force: bool = False, own_parts: bool = False) -> tuple[list[Variant], CompareOptions, str | None]:
    """(variants, options, reference) of the comparison in ``folder``; ConfigError (one line) if it cannot resume.

    An edited ``config.toml`` would recompute every run's config while the finished runs were read back as they ran:
    refused, unless ``force``, or unless the edit is ``executor`` alone between executors of one float path
    (:func:`~chillfl.storage.run_folder.move_accepted`), which a run's resume takes too (docs/reproducibility.md). ``own_parts``: the resume is given the user's own data, model or method parts again
    (:func:`chillfl.resume_compare`), so a comparison that ran on them resumes."""
    try:
        record = json_loads((folder / SWEEP_FILE).read_text(encoding="utf-8"))
        fmt, resumable, reference = record.get("format"), record["resumable"], record["reference"]
        variants, options = [recorded_variant(v) for v in record["variants"]], CompareOptions(**record["options"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(FIELD, f"{folder / SWEEP_FILE} is unreadable ({type(exc).__name__}: {exc})") from None
    try:  # its own message: a missing config.toml was reported as an unreadable sweep.json
        config = (folder / "config.toml").read_bytes()
    except OSError as exc:
        raise ConfigError(FIELD, f"{folder / 'config.toml'} is unreadable ({type(exc).__name__}: {exc.strerror or exc})") from None
    if fmt != FORMAT:
        raise ConfigError(FIELD, f"{folder / SWEEP_FILE} has format {fmt!r}; this chillfl reads {FORMAT}")
    if not resumable and not own_parts:
        raise ConfigError(FIELD, f"{folder} compared a user's own data, model or method parts, which its folder does not hold: "
                                 "chillfl.resume_compare(FOLDER, model=..., data=...) resumes it with the same ones from Python")
    if record.get("config_sha256") != hashlib.sha256(config).hexdigest() and not force:
        saved = record.get("config_toml")  # None in the sweep.json of an older chillfl: the line cannot name the change
        move = executor_move(saved, config) if isinstance(saved, str) else None
        if move_accepted(move):  # as a run's resume: the runs still to run give the same bits
            say_accepted(move, "the comparison started")
        else:
            changes = f": {config_changes(saved, config)}" if isinstance(saved, str) else ""
            raise ConfigError("config.toml", f"{folder / 'config.toml'} changed since the comparison started{changes}; `chillfl resume --force` resumes with it as it is now")
    return variants, options, reference


def made_with_changes(folder: Path) -> list[str]:
    """What differs between the code and torch that started the comparison in ``folder`` (its ``sweep.json``'s
    ``made_with``) and this process's (``["torch 2.4.0 -> 2.5.1", "chillfl's code"]``; an absent torch: nothing; an absent
    code digest, which an older chillfl's record lacks: named too, since nothing can say the code is the same).

    Its finished runs are read back as they ran, its stopped run's resume compares its own checkpoint's record, but
    the runs still to run would run on this code and torch, which nothing compared: a table mixing two float paths
    (or a default the code changed since) was said to equal the uninterrupted comparison's."""
    try:
        saved = json_loads((folder / SWEEP_FILE).read_text(encoding="utf-8")).get("made_with")
    except (OSError, ValueError, AttributeError):
        return []
    if not isinstance(saved, dict):
        saved = {}
    changes = []
    if "torch" in saved and saved["torch"] != str(torch.__version__):
        changes.append(f"torch {saved['torch']} -> {torch.__version__}")
    if "code_sha256" not in saved:
        changes.append(f"chillfl's code, which its {SWEEP_FILE} does not record (written by an older chillfl)")
    elif saved["code_sha256"] != code_sha256():
        changes.append("chillfl's code")
    return changes


def check_resumable(folder: Path) -> None:
    """One line for a comparison folder that is finished, missing or holds a link."""
    if not folder.is_dir():
        raise ConfigError(FIELD, f"{folder} does not exist")
    if not folder.name.endswith(PARTIAL):
        raise ConfigError(FIELD, f"{folder} is a finished comparison (its table is written); nothing to resume")
    if not (folder / "config.toml").is_file():
        raise ConfigError(FIELD, f"{folder} is not a chillfl comparison folder (no config.toml)")
    refuse_links(folder, FIELD)
    for where in (folder, folder.parent):  # its runs write into it, and it is renamed in its parent at the end
        check_writable_dir(str(where), FIELD)


def find_compare(config: RunConfig, plan: Plan) -> Path | None:
    """The folder of this very comparison (``plan``, of ``config``: :func:`~chillfl.sweeps.plan.plan_runs`) under
    ``config.out_dir``, made before by this code: finished (its table written) or else interrupted (``.partial``);
    None when there is none (:func:`find_sweep`)."""
    record = sweep_record(comparison_toml(config, plan).encode(), plan, resumable=True)
    return find_sweep(Path(config.out_dir), f"{config.name}-compare", record)


def compares_by_other_code(config: RunConfig, plan: Plan) -> list[Path]:
    """:func:`made_by_other_code` for this very comparison (as :func:`find_compare` finds it)."""
    record = sweep_record(comparison_toml(config, plan).encode(), plan, resumable=True)
    return made_by_other_code(Path(config.out_dir), f"{config.name}-compare", record)


def read_compare(folder: Path, plan: Plan) -> CompareResult:
    """A finished comparison's table as it was written (rows from ``table.json``); its runs' outputs are not read.

    ``plan``: the comparison the folder was found for (:func:`find_compare`): the result counts its runs and names
    those that ended without a result (:func:`ended_without_result`), as the comparison that ran them did; read back
    it said ``runs=0``, as if it held none.

    What is no table is one ConfigError naming the file: a FIFO blocked ``reproduce --resume`` forever, a ``table.json``
    of no rows (``[1]``, ``[{}]``) was a TypeError or KeyError traceback where the rows are read."""
    for name in ("table.json", "table.md"):
        if os.path.lexists(folder / name) and not (folder / name).is_file():
            raise ConfigError(FIELD, f"{folder} has no readable table ({folder / name} is not a regular file)")
    try:
        rows = json_loads((folder / "table.json").read_text(encoding="utf-8"))
        table = (folder / "table.md").read_text(encoding="utf-8").removesuffix("\n")
    except (OSError, ValueError) as exc:
        raise ConfigError(FIELD, f"{folder} has no readable table ({type(exc).__name__}: {exc})") from None
    if not isinstance(rows, list) or not all(isinstance(row, dict) and isinstance(row.get("variant"), str) for row in rows):
        raise ConfigError(FIELD, f"{folder / 'table.json'} is not a comparison's table (a list of rows, each naming its variant)")
    names = [c.config.name for c in plan.cells]
    failures = {name: how for name in names if (how := ended_without_result(folder, name)) is not None}
    return CompareResult(folder, rows, table, failures=failures, runs=len(names))


def ended_without_result(folder: Path, name: str) -> str | None:
    """How run ``name`` of the finished comparison in ``folder`` failed (``diverged at round 3``, as the sweep that ran it
    said), or None where it finished (its ``summary.json``). Its ``failure.json`` is read for the round alone; one
    that does not say it, or none (a run whose code raised left its folder unfinished, or none), is ``failed``."""
    if (folder / name / "summary.json").is_file():
        return None
    failure = folder / f"{name}{FAILED}" / FAILURE
    try:
        reason = json_loads(failure.read_text(encoding="utf-8")) if failure.is_file() else None
    except (OSError, ValueError):
        reason = None
    stopped = reason.get("round") if isinstance(reason, dict) else None
    return f"diverged at round {stopped}" if is_whole(stopped) else "failed"


def recorded_flags(config_path: str | Path, config: RunConfig) -> str | None:
    """For ``chillfl compare FOLDER/config.toml`` of a comparison that names no variants: where its flags are, when a
    ``sweep.json`` sits beside the file (None when none does, or it is unreadable).

    Why: an older chillfl's comparison saved the file as given, with an empty ``[variants]`` and ``[compare]`` (today's
    records what its flags set: :func:`as_planned`); rerunning it said only "give at least one key=v1,v2,...", while its
    ``sweep.json`` holds the variants, seeds and tuning grid it ran. Named here, as flags where they make one grid."""
    folder = Path(config_path).parent
    try:
        record = json_loads((folder / SWEEP_FILE).read_text(encoding="utf-8"))
        variants = [recorded_variant(v) for v in record["variants"]]
        options = CompareOptions(**record["options"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if all(v.control is not None for v in variants):  # recorded: the controls are flagged
        controls, first = bool(options.controls) or any(v.control for v in variants), len(variants)
    else:  # an older record: the step-size controls come after the variants asked for (:func:`with_controls`)
        controls = bool(options.controls)
        first = next((i for i, v in enumerate(variants) if v.lr_scale != 1.0), len(variants)) if controls else len(variants)
    asked = [v for v in variants[:first] if not v.own and not v.control]  # own: the config itself over seeds or tuning points, no grid
    flags = _grid_flags(asked, config)
    seeds = ",".join(str(s) for s in options.seeds or [])
    tune = {key: ",".join(map(str, values)) for key, values in (options.tune or {}).items()}
    reference = record.get("reference")
    said = f"grid {' '.join(flags) or 'none'}" if flags is not None else "variants " + "; ".join(
        f"{v.label} ({', '.join(f'{k}={val}' for k, val in _dotted(v.overrides).items())})" for v in asked)
    said += f"; seeds {seeds or 'none'}; tune {' '.join(f'{k}={vals}' for k, vals in tune.items()) or 'none'}"
    said += ("; controls" if controls else "") + (f"; reference {reference}" if isinstance(reference, str) else "")
    ways = [f"`chillfl resume {shell_path(folder)}` goes on with it"] if folder.name.endswith(PARTIAL) else []
    if flags is not None:
        command = [f"chillfl compare {shell_path(config_path)}", *(f"--grid {shlex.quote(f)}" for f in flags), *([f"--seeds {seeds}"] if seeds else []),
                   *(f"--tune {shlex.quote(f'{k}={vals}')}" for k, vals in tune.items()), *([f"--select {options.select}"] if tune and options.select else []),
                   *(["--controls"] if controls else []), *([f"--reference {shlex.quote(reference)}"] if isinstance(reference, str) else [])]
        ways.append(f"`{' '.join(command)}` runs it again")
    else:
        ways.append("these as --grid flags or [variants.LABEL] tables run it again")
    return (f"{shell_path(config_path)} names no variants: an older chillfl kept this comparison's flags in its {SWEEP_FILE} "
            f"({said}): {', or '.join(ways)}")


def _dotted(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A variant's nested overrides as dotted keys (``{"client": {"lr": 0.1}}`` -> ``{"client.lr": 0.1}``)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict) and value:
            out.update(_dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _grid_flags(variants: list[Variant], config: RunConfig) -> list[str] | None:
    """``key=v1,v2`` items whose grid (:func:`~chillfl.sweeps.plan.parse_grid`) gives ``variants``' very overrides, in
    order ([] for none); None when none does (variants of a config's own tables, or no grid's product)."""
    if any(v.tune for v in variants):  # a variant's own tuning grid is a [variants.LABEL.tune] table, no flag
        return None
    rows = []
    for v in variants:
        row = _dotted(v.overrides)
        if v.temperature is not None and row.get("temperature.policy") == "fixed" and row.get("temperature.value") == v.temperature:
            del row["temperature.policy"], row["temperature.value"]
            row["temperature"] = v.temperature
        rows.append(row)
    if not rows:
        return []
    axes: dict[str, list[Any]] = {}
    for row in rows:
        for key, value in row.items():
            values = axes.setdefault(key, [])
            if value not in values:
                values.append(value)
    items = [f"{key}={','.join(json.dumps(v) if isinstance(v, bool) else str(v) for v in values)}" for key, values in axes.items()]
    try:
        again = parse_grid(items, config)
    except ConfigError:
        return None
    return items if [(v.overrides, v.temperature) for v in again] == [(v.overrides, v.temperature) for v in variants] else None

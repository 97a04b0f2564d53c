"""Every option of every registered part refuses a bad value with one ConfigError naming that option.

Generated from what ``chillfl list --options`` lists (:mod:`chillfl.report.reference`: the run's own
sections, every part's registered names with its shared options, the sub-tables, the loss terms), so a
new part or option is covered without editing this file. Each numeric option (int or float, Optional
too) is given nan, inf, -inf and a string; each choice (a ``Literal``, or a string the listing
enumerates) an unknown value. The config selects the part (plus what it cannot run without:
``registry_cases.NEEDS``) and is checked as a dry run checks it, in process, twice:

* with the data (digits, which needs no files): every part is built;
* without the dataset's files (mnist under an empty ``data_dir``): only names and options can be
  checked, and a dry run says so ("names and options checked") -- so they must all be.

``tests/test_hostile_input.py`` mutates one base config with many more values; this file walks the
option tables instead, with few values each. One CLI run per kind of gap found checks the line the
user sees.
"""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from registry_cases import NEEDS, PUBLIC, TINY

from chillfl.config import RunConfig, load_config
from chillfl.errors import ConfigError
from chillfl.experiment import check_config
from chillfl.report.reference import SHARED, SUBTABLES, _registries, _run_sections, _terms, enumerated_options

BAD_NUMBERS: tuple[Any, ...] = (math.nan, math.inf, -math.inf, "abc")
UNKNOWN_CHOICE = "zz-no-such-choice"

ALLOWED: dict[tuple[str, str], str] = {}
"""(dotted option, repr of the value) -> why it is accepted: a value an option takes on purpose (inf as "no
limit"), which its docstring must say. None so far: every option refuses every value tried here."""

MORE_NEEDS: dict[str, dict[str, Any]] = {
    "dataset-hf": {"dataset.path": "absent-hf-folder"},  # required; absent, it is refused after the options are checked
    "model-char_lstm": {"dataset.name": "flwr_shakespeare"},  # reads character indices (its files are absent here)
    "attack-dba": {"federation.num_clients": 8, "attack.fraction": 0.5},  # one trigger part an attacker: 4 attackers
}
"""Beside ``NEEDS`` (settings a method cannot run without): what a part needs for its options to be reached."""


@dataclass(frozen=True)
class Table:
    """One option table as the reference lists it: its options' prefix, its dataclass, a config that selects it."""

    id: str
    prefix: str
    """``section`` (or ``""`` at the top level): an option's dotted name is ``prefix.option``."""
    options: type
    base: dict[str, Any]
    where: str
    """The reference's name of the table (``section[.implementation]``): how :func:`enumerated_options` keys its options."""


def option_tables() -> Iterator[Table]:
    """Every option table ``chillfl list --options`` renders (:func:`~chillfl.report.reference.render_reference`), in its order."""
    yield Table("top-level", "", RunConfig, dict(TINY), "")
    for _heading, cls, prefix in _run_sections():
        yield Table(prefix, prefix, cls, dict(TINY), prefix)
    for section, key, registry in _registries():
        public = PUBLIC if section == "distillation" else {}
        for name in sorted(registry):
            case = f"{section}-{name}"
            base = {**TINY, **public, f"{section}.{key}": name, **NEEDS.get(case, {}), **MORE_NEEDS.get(case, {})}
            yield Table(case, section, registry[name].options, base, f"{section}.{name}")
        if section in SHARED:
            first = sorted(registry)[0]
            yield Table(f"{section}-shared", section, SHARED[section][0], {**TINY, **public, f"{section}.{key}": first}, section)
    for section, options in SUBTABLES:
        yield Table(section, section, options, dict(TINY), section)
    for name, spec in sorted(_terms().items()):
        prefix = f"objective.terms.{name}"
        yield Table(f"term-{name}", prefix, spec.options, {**TINY, "objective.terms": [name]}, prefix)


def _kinds(tp: Any) -> set[str]:
    """What an annotation takes: ``number`` (int, float), ``choice`` (a Literal), through unions and Optional."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_kinds(a) for a in typing.get_args(tp)))
    if origin is typing.Literal:
        return {"choice"}
    return {"number"} if tp in (int, float) else set()


def bad_values(table: Table) -> list[tuple[str, Any]]:
    """(dotted option, value) of every bad value to try on ``table``."""
    out = []
    hints = typing.get_type_hints(table.options)
    for f in dataclasses.fields(table.options):
        if not f.init:
            continue
        kinds = _kinds(hints[f.name])
        field = f"{table.prefix}.{f.name}" if table.prefix else f.name
        listed = f"{table.where}.{f.name}" if table.where else f.name
        values = [*(BAD_NUMBERS if "number" in kinds else ()), *((UNKNOWN_CHOICE,) if "choice" in kinds or listed in ENUMERATED else ())]
        out += [(field, v) for v in values if (field, repr(v)) not in ALLOWED]
    return out


ENUMERATED = enumerated_options()
"""Every option that takes a registry's name (the run's own, and each spec's ``takes_names``), by ``section[.name].option``."""

TABLES = [t for t in option_tables() if bad_values(t)]


def test_every_listed_part_is_walked() -> None:
    """The walk reaches every kind of table: a part missing here would be missing silently."""
    prefixes = {t.id.split("-")[0] for t in TABLES}
    assert {"federation", "client", "eval", "dataset", "partition", "model", "temperature", "algorithm", "distillation",
            "prototypes", "attack", "privacy", "term", "dataset.augment"} <= prefixes
    assert len(TABLES) > 100


def configs(table: Table, data_dir: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(what, overrides) of the base config the way each check goes: with the data and, where the part does not pick
    the dataset, without its files."""
    base = {**table.base, "data_dir": str(data_dir)}
    yield "as built", base
    if not table.prefix.startswith("dataset") and base["dataset.name"] == TINY["dataset.name"]:
        yield "without the data's files", {**base, "dataset.name": "mnist"}


def check(overrides: dict[str, Any]) -> None:
    """What a dry run checks (:func:`chillfl.experiment.check_config`), on the config as loaded."""
    check_config(load_config(None, overrides))


@pytest.mark.parametrize("table", TABLES, ids=[t.id for t in TABLES])
def test_every_option_refuses_bad_values(table: Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a hub dataset's absent files are never fetched
    cases = bad_values(table)
    fields = {field for field, _ in cases}
    wrong = []
    for what, base in configs(table, tmp_path):
        try:
            check(base)
        except ConfigError as exc:  # a base refused for another reason (hf's absent path) still reaches the options first
            assert exc.field not in fields, f"{what}: the base config itself is refused on {exc}"
        for field, value in cases:
            try:
                check({**base, field: value})
            except ConfigError as exc:
                if exc.field != field:
                    wrong.append(f"{what}: {field}={value!r}: blames {exc}")
            except Exception as exc:  # noqa: BLE001  (any other exception is the bug: a traceback instead of a line)
                wrong.append(f"{what}: {field}={value!r}: {type(exc).__name__}: {exc}")
            else:
                wrong.append(f"{what}: {field}={value!r}: accepted")
    assert not wrong, "\n".join(wrong)


# ---------------------------------------------------------------- the line the user sees


def dry_run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chillfl", *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


def assert_one_line(proc: subprocess.CompletedProcess[str], field: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"chillfl: error: {field}:"), proc.stderr
    assert "Traceback" not in proc.stderr and not proc.stdout


def test_the_public_datasets_options_are_checked_without_its_files(tmp_path: Path) -> None:
    """A dict option, so not generated above: without the files, ``public_dataset_options`` was never read (issue found with the walk)."""
    overrides = {**TINY, **PUBLIC, "distillation.method": "dsfl", "dataset.name": "mnist", "data_dir": str(tmp_path),
                 "distillation.public_dataset": "cifar100", "distillation.public_dataset_options": {"labels": "zz"}}
    with pytest.raises(ConfigError) as info:
        check(overrides)
    assert info.value.field == "distillation.public_dataset_options.labels"  # the option itself (pubfix)


# One CLI run per kind of gap the walk found, all in a dry run without the dataset's files: a part's table checked
# only where the part would use it (a partitioner's options, unless it adds noise), and an option read outside its
# part's dataclass (projection_dim, the public dataset), checked only by building with the data.
NO_DATA = ("dataset.name=mnist", "data_dir=empty", "out_dir=results")


def test_a_variants_partition_options_are_checked_without_the_data(tmp_path: Path) -> None:
    """A comparison's variants are checked part by part without the data (``run`` resolves its own tables first)."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "cmp.toml").write_text('data_dir = "empty"\n[dataset]\nname = "mnist"\n[variants.a]\n"partition.alpha" = nan\n'
                                       '[variants.b]\n"client.lr" = 0.1\n')
    assert_one_line(dry_run("compare", "cmp.toml", "--dry-run", cwd=tmp_path), "variants.a.partition.alpha")


@pytest.mark.parametrize("override, field", [
    ("model.projection_dim=abc", "model.projection_dim"),
    ("distillation.public_dataset=zz", "distillation.public_dataset"),
])
def test_an_option_outside_its_parts_dataclass_is_checked_without_the_data(tmp_path: Path, override: str, field: str) -> None:
    (tmp_path / "empty").mkdir()
    public = [f"{k}={v}" for k, v in PUBLIC.items()] + ["distillation.method=dsfl"] if field.startswith("distillation") else []
    assert_one_line(dry_run("run", "--dry-run", *NO_DATA, *public, override, cwd=tmp_path), field)


GROUPS_BASE = {"prototypes.method": "fedproto", "federation.num_clients": 4, "federation.clients_per_round": 2, "model.name": "mlp"}
"""Per-client architectures (``[[model.groups]]``), where models never travel (prototype sharing)."""


@pytest.mark.parametrize(
    ("second", "field"),
    [
        ({"name": "mlp", "hidden": "abc"}, "model.groups[1].hidden"),
        ({"name": "no-such-model"}, "model.groups[1].name"),
        ({"name": "mlp", "projection_dim": "x"}, "model.groups[1].projection_dim"),
    ],
)
@pytest.mark.parametrize("data", ["digits", "no files"])
def test_a_groups_architecture_is_checked_with_and_without_the_data(second: dict[str, Any], field: str, data: str, tmp_path: Path) -> None:
    """Each group's model and options, not only the base table's: without the data's files too, in the same words."""
    where = {"dataset.name": "digits"} if data == "digits" else {"dataset.name": "mnist", "data_dir": str(tmp_path)}
    groups = [{"clients": "0-1", "name": "mlp", "hidden": [8]}, {"clients": "2-3", **second}]
    with pytest.raises(ConfigError) as info:
        check({**GROUPS_BASE, **where, "model.groups": groups})
    assert info.value.field == field

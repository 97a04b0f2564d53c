"""An override that every run of a comparison replaces, refused in one line on its key: the one check of ``chillfl run`` /
``chillfl compare`` and of :func:`chillfl.compare`.

Why: ``client.lr=0.3`` on a config tuning ``client.lr`` ran none of its runs at 0.3, yet the comparison's ``config.toml``
recorded ``lr = 0.3`` as its base, read later as the setting the table was made at. The command line refused it and
Python did not; one function for both, so that the two cannot drift apart again.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chillfl.config import TERM_KEY, RunConfig, dotted_keys, dotted_overrides
from chillfl.errors import ConfigError
from chillfl.options import short_repr
from chillfl.sweeps.plan import Variant, apply_variant, own_variant, typed_comparison, variants_from_config

UNCHECKED_SECTIONS = ("variants", "compare", "tune")
"""Overrides of the comparison's own tables: they make the variants and grids the check reads, nothing a run replaces."""


@dataclass(frozen=True)
class AskedBy:
    """Who asked for the comparison, so that the refusal names its way out in the caller's own terms.

    ``target``: the command line's config as typed (for its ``chillfl run TARGET --variant ...`` hint), None from Python.
    ``grid_rows``: the variants are the rows of a grid the caller gave (``--grid`` / ``grid=``), not the config's own.
    ``tune_given``: the tuning grid is the caller's (``--tune`` / ``tune=``), not the config's ``[tune]``."""

    target: str | None = None
    grid_rows: bool = False
    tune_given: bool = False

    @property
    def python(self) -> bool:
        return self.target is None


def check_overrides_replaced(config: RunConfig, overrides: Mapping[str, Any], variants: Sequence[Variant] | None,
                             tune: Mapping[str, Any], asked: AskedBy) -> None:
    """Raise a ConfigError on the first of ``overrides``' keys that every run of ``config``'s comparison replaces: a
    tuning axis sets it in some run, or every run's variant holds another value there. ``variants``: the comparison's
    (None: the config's ``[variants]``, else the config itself); ``tune``: its shared tuning grid.

    A run keeps an override where no tuning axis covers its key and its variant's config holds the override's value
    there (a variant that writes the same value replaces nothing: nothing is mislabelled). A comparison whose variants
    do not build is left to its planning, which names the variant."""
    keys = [k for k in dotted_overrides(overrides) if k not in ("name", "seed") and k.split(".")[0] not in UNCHECKED_SECTIONS]
    if not keys:
        return
    try:
        typed = typed_comparison(config)
        runs = list(variants) if variants is not None else variants_from_config(typed) or [own_variant(typed)]
    except ConfigError:
        return
    built: dict[str, dict[str, Any] | None] = {}  # a variant's config, as a dict: built only where it writes the key's section

    def keeps(v: Variant, key: str, value: Any) -> bool:
        """Whether ``v``'s config holds ``value`` at ``key``; one that does not build is left to the planning, which names it."""
        section = key.split(".")[0]
        if all(k.split(".")[0] != section for k in dotted_keys([v.overrides])):  # a variant changes only the sections it writes
            return True
        if v.label not in built:
            try:
                built[v.label] = apply_variant(typed, v).to_dict()
            except ConfigError:
                built[v.label] = None
        own = built[v.label]
        if own is None:
            return True
        found, held = value_at(own, key)
        return found and as_written(held) == as_written(value)

    base = config.to_dict()
    for key in keys:
        found, value = value_at(base, key)
        if not found:
            continue
        axes: list[str] = []  # the tuning axes that replace it, as written
        setters: list[str] = []  # the variants that do
        for v in runs:
            axis = next((k for k in (*tune, *v.tune) if key == k or key.startswith(k + ".")), None)
            if axis is not None:
                axes.append(_axis_name(axis, asked) if axis in tune else f"variants.{v.label}.tune.{axis}")
            elif keeps(v, key, value):
                break  # this variant's runs keep it
            else:
                setters.append(repr(v.label))
        else:
            raise ConfigError(key, _refusal(config.name, key, as_written(value), axes, setters, key in tune, asked))


def _axis_name(axis: str, asked: AskedBy) -> str:
    """A shared tuning axis as the caller wrote it."""
    if not asked.tune_given:
        return f"[tune] {axis}"
    return f"tune={{{axis!r}: ...}}" if asked.python else f"--tune {axis}"


def _refusal(name: str, key: str, value: Any, axes: list[str], setters: list[str], shared: bool, asked: AskedBy) -> str:
    """The refusal's message: who replaces ``key`` in every run, and what does set it."""
    text = repr(value) if asked.python else override_text(value)
    said = [f"the tuning grid's {', '.join(dict.fromkeys(axes))}"] if axes else []
    hints = [f"tune it at that value instead: {_tune_hint(key, text, asked)}"] if axes and shared else []
    if setters:
        rows = ("the grid rows" if asked.python else "the --grid rows") if asked.grid_rows else "the variants"
        said.append(f"{rows} {', '.join(setters[:4])}{f' and {len(setters) - 4} more' if len(setters) > 4 else ''}")
        if asked.grid_rows:
            hints.append("give its value to grid" if asked.python else "give its value to --grid")
        elif asked.target is None:
            hints.append("set it in the variants")
        else:
            hints.append(f"set it in the variants, or run one variant at it: chillfl run {asked.target} --variant LABEL --seed N {shlex.quote(f'{key}={text}')}")
    given = "the override" if asked.python else "the command line's"
    return (f"every run of {name} replaces {given} {key}={text} ({' and '.join(said)}), so no run would use it, "
            f"though the comparison's config.toml would record it; {', or '.join(hints) or 'drop it'}")


def _tune_hint(key: str, text: str, asked: AskedBy) -> str:
    """How the caller tunes ``key`` at the override's value alone (``text``: the value as the caller writes it)."""
    if asked.python:
        return f"tune={{{key!r}: [{text}]}}" if asked.tune_given else f"**{{'tune.{key}': [{text}]}}"
    return f"--tune {shlex.quote(f'{key}={text}')}" if asked.tune_given else shlex.quote(f"tune.{key}=[{text}]")


def value_at(table: Any, key: str) -> tuple[bool, Any]:
    """The value at dotted ``key`` of a config's nested dict, and whether it is there. A loss term's option,
    ``objective.terms.<name>.<option>``, is found as :func:`chillfl.training.terms.with_term_option` sets it: the term is
    the entry of ``objective.terms`` whose ``name`` is everything before the key's last dot. Why: split on every dot, a
    term named by import path (``mypkg.reg:L2``) was looked for as ``mypkg``, found nowhere, and an override every run
    replaced went through unrefused."""
    if key.startswith(TERM_KEY):
        found, terms = value_at(table, TERM_KEY[:-1])
        name, _, option = key[len(TERM_KEY):].rpartition(".")
        entry = next((t for t in terms if isinstance(t, dict) and t.get("name") == name), None) if found and isinstance(terms, (list, tuple)) else None
        return (True, entry[option]) if entry is not None and name and option in entry else (False, None)
    for part in key.split("."):
        if isinstance(table, (list, tuple)):  # another list of named tables: entered by an entry's name
            table = next((t for t in table if isinstance(t, dict) and t.get("name") == part), None)
            if table is None:
                return False, None
            continue
        if not isinstance(table, dict) or part not in table:
            return False, None
        table = table[part]
    return True, table


def as_written(value: Any) -> Any:
    """``value`` as a config file writes it: a tuple a list, also inside lists and tables. Why: a resolved config holds
    ``model.hidden`` as ``(64, 32)`` and a variant's built config as ``[64, 32]``, which compared unequal, so an
    override every variant kept was refused as replaced, and its value shown as ``(64, 32)``, no TOML."""
    if isinstance(value, (list, tuple)):
        return [as_written(v) for v in value]
    if isinstance(value, dict):
        return {k: as_written(v) for k, v in value.items()}
    return value


def override_text(value: Any) -> str:
    """A config value as an override writes it (TOML: ``0.3``, ``"fixed"``, ``[64, 32]``)."""
    import tomli_w

    try:
        text = tomli_w.dumps({"v": as_written(value)})
    except TypeError:
        return short_repr(value)
    return text.strip()[len("v = "):] if text.startswith("v = ") and text.count("\n") == 1 else short_repr(value)  # a table: [v] lines

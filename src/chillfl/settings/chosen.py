"""Flat tables whose keys depend on a choice made inside them: ``[attack] kind``, ``[privacy] mechanism``.

Such a table holds the options every choice shares, the key that makes the choice (its "switch", off by
default) and the chosen spec's own options, side by side. One :class:`Choice` parses and writes both tables
the same way, so a rule (an option of another choice names its owner; options written while off are kept for
the variants that switch a choice on; an older result folder's flat table still loads) lives in one place.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Protocol, runtime_checkable

from chillfl.errors import ConfigError
from chillfl.options import Chosen, HasOptions, parse_options, require, unknown_option
from chillfl.plugins import Unread, built_ins_only


@runtime_checkable
class NamedSpec(Protocol):
    """What the config reads of any such spec (an attack's, a mechanism's): its name, options, one-line summary and figures."""

    @property
    def name(self) -> str: ...

    @property
    def options(self) -> type:
        """Its own options, a dataclass."""
        ...

    @property
    def summary(self) -> str: ...

    @property
    def figures(self) -> tuple[str, ...]:
        """The run figures it adds, by name (:mod:`chillfl.plots.registry`), drawn after a run it is on in."""
        ...


def _same(value: Any, default: Any) -> bool:
    """``value`` as TOML read it equals a dataclass default (a tuple default is written and read back as a list)."""
    if isinstance(value, bool) or isinstance(default, bool):
        return value is default
    if isinstance(default, tuple):
        return isinstance(value, list) and list(default) == value
    return bool(value == default)


def option_names(cls: type) -> set[str]:
    """The options a dataclass takes (its init fields)."""
    return {f.name for f in dataclasses.fields(cls) if f.init}


@dataclass(frozen=True)
class Choice:
    """How one such table is read and written.

    ``shared``: the dataclass of the options every choice shares, the switch among them. ``specs``: every listed
    spec by name (imports their modules: called only to name the owner of a misplaced option). ``flat_before``:
    every choice's own options of the one flat dataclass the table was before each choice had its own; a result
    folder of then writes all of them, and a table that holds every one of them is read as such a folder's.
    """

    section: str
    switch: str
    off: str
    shared: type
    specs: Callable[[], Mapping[str, HasOptions]]
    what: str
    """What a choice is called in messages: ``attack``, ``mechanism``."""
    flat_before: frozenset[str] = frozenset()

    def parse_shared(self, table: Mapping[str, Any]) -> Any:
        """The shared options (the switch among them), parsed and checked."""
        names = option_names(self.shared)
        return parse_options(self.shared, {k: v for k, v in table.items() if k in names}, self.section)

    def rest(self, table: Mapping[str, Any], own: type | None) -> list[str]:
        """The table's keys beyond the shared options, as written; an older result folder's other choices' options left out
        where they hold their owner's default (that version wrote them all and ignored them).

        Only defaults: a table written by hand that happens to hold every one of them (a reference table copied whole)
        keeps its other choices' options, and one set to something else is refused as such, naming its owner, rather
        than dropped without a word; dropping a default changes nothing.
        """
        keys = [k for k in table if k not in option_names(self.shared)]
        if own is not None and self.flat_before and self.flat_before <= set(table):
            own_names = option_names(own)
            keys = [k for k in keys if k not in self.flat_before or k in own_names or not self._is_default(k, table[k])]
        return keys

    def _is_default(self, key: str, value: Any) -> bool:
        """Whether ``value`` is the default of ``key`` in every choice that takes it (as a result folder wrote it): the
        flat table's options are the built-ins', so they are asked first (no plugin imported, :meth:`held`)."""
        for specs in self._specs_built_ins_first():
            defaults = [f.default for spec in specs.values() for f in dataclasses.fields(spec.options) if f.name == key and f.init]
            if defaults:
                return all(_same(value, d) for d in defaults)
        return False

    def _specs_built_ins_first(self) -> Iterator[Mapping[str, HasOptions]]:
        """The built-in specs, then (only if the caller asks on) every spec, the plugins' too. Why: listing a plugin's
        spec imports its module, and a saved ``config.toml`` lists this table's options even while it is off: parsing a
        plain fedavg folder imported every installed ``chillfl.plugins`` entry point (:func:`~chillfl.plugins.built_ins_only`)."""
        with built_ins_only():
            built_ins = self.specs()
        yield built_ins
        yield self.specs()

    def held(self, table: Mapping[str, Any], keys: list[str]) -> tuple[tuple[str, Any], ...]:
        """Options written while the table is off, each checked as the choices that own it check it (one of them must
        take the value): a base table may hold them for the variants that switch one on (``chillfl.config.check_switches``).
        The built-ins are asked first; the plugins only for a key no built-in takes, or a value none accepts."""
        searched = self._specs_built_ins_first()
        built_ins = next(searched)
        try:
            return self._held(table, keys, built_ins)
        except ConfigError:
            return self._held(table, keys, next(searched))  # a plugin's key, or no spec takes it: the error names every spec

    def _held(self, table: Mapping[str, Any], keys: list[str], specs: Mapping[str, HasOptions]) -> tuple[tuple[str, Any], ...]:
        """:meth:`held` among ``specs``."""
        held = []
        for key in keys:
            owners = [spec.options for spec in specs.values() if key in option_names(spec.options)]
            if not owners:
                raise unknown_option(self.section, key, option_names(self.shared), Chosen(f"{self.section}.{self.switch}", self.off, self.specs))
            errors = []
            for options in owners:
                try:
                    held.append((key, getattr(parse_options(options, {key: table[key]}, self.section), key)))
                    break
                except ConfigError as exc:
                    errors.append(exc)
            else:
                raise errors[0]
        return tuple(held)

    def own(self, table: Mapping[str, Any], keys: list[str], chosen: str, own: type) -> Any:
        """The chosen spec's options from ``keys``, parsed and checked; an option of another choice names its owner."""
        shared_names, own_names = option_names(self.shared), option_names(own)
        clash = sorted(shared_names & own_names)
        require(not clash, f"{self.section}.{self.switch}", f"{chosen!r}: its options cannot be named {', '.join(clash)} (every {self.what}'s shared options)")
        for key in (k for k in keys if k not in own_names):  # the first as written: the one the reader wrote first
            raise unknown_option(self.section, key, shared_names | own_names, Chosen(f"{self.section}.{self.switch}", chosen, self.specs))
        return parse_options(own, {k: table[k] for k in keys}, self.section)

    def shared_values(self, obj: Any) -> dict[str, Any]:
        """The shared options of ``obj`` (the shared dataclass, or the config class that extends it), by name, in order."""
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(self.shared)}

    def write(self, shared: Any, options: Any, held: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
        """The flat table: the shared options, then the chosen spec's own (every default written), or while off the options held."""
        if isinstance(options, Unread):  # a plugin's, from a folder read as data: as the folder wrote them
            return {**self.shared_values(shared), **options.table}
        own = {k: v for k, v in dataclasses.asdict(options).items() if k in option_names(type(options))}
        return {**self.shared_values(shared), **own, **dict(held)}

    def unread(self, table: Mapping[str, Any], chosen: str) -> Unread:
        """The chosen plugin's own options as written (the keys beyond the shared ones), while a folder is read as data."""
        return Unread(chosen, {k: table[k] for k in self.rest(table, None)})

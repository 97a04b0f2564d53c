"""Heterogeneous client models: which architecture each client trains.

The ``[model]`` table names the default architecture (the server's, where the
protocol has a server model) and may give clients other ones, by list or by
groups::

    [model]
    name = "mlp"                        # every client not listed below; the server model
    hidden = 64                         # the default's own options
    assign = ["mlp", "flexchill_cnn"]   # EITHER one name per client ...

    [[model.groups]]                    # ... OR groups (clients not in any group: the default)
    clients = "0-4"                     # "a-b", "a-b,c", or a list of ids
    name = "mcmahan_cnn"
    # the group model's own options

Protocols where models never travel (soft labels, prototypes) accept this;
parameter sharing refuses it (``model.assign`` / ``model.groups`` named in the
error). Architectures are distinct option tables: two groups with the same
name and options share one template (and one training batch in the
vectorised executor).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from chillfl.errors import ConfigError
from chillfl.models.registry import model_spec
from chillfl.numeric import is_whole

HETERO_KEYS = ("assign", "groups")


@dataclass(frozen=True)
class ModelPlan:
    """Distinct architecture tables (``archs[0]`` is the default) and each client's index into them."""

    archs: tuple[dict[str, Any], ...]
    arch_of: tuple[int, ...]
    field: str | None = None
    """``model.assign`` or ``model.groups`` when the table assigns architectures (None: one architecture)."""
    sections: tuple[str, ...] = ()
    """Per architecture, the config field its options came from: ``model``, ``model.assign``, or the first of the
    ``model.groups[i]`` that names it (errors name the group, not only the list)."""

    @property
    def heterogeneous(self) -> bool:
        return self.field is not None

    def label(self, index: int) -> str:
        """A short name for architecture ``index``: its model name, with options when two share a name."""
        table = self.archs[index]
        same = [t for t in self.archs if t["name"] == table["name"]]
        if len(same) == 1:
            return str(table["name"])
        opts = ",".join(f"{k}={v}" for k, v in sorted(table.items()) if k != "name")
        return f"{table['name']}({opts})"


def base_table(table: Mapping[str, Any]) -> dict[str, Any]:
    """The default architecture's own table (without ``assign``/``groups``)."""
    return {k: v for k, v in table.items() if k not in HETERO_KEYS}


def parse_clients(value: Any, num_clients: int, field: str) -> list[int]:
    """``"0-4"``, ``"0-4,7"``, ``3`` or ``[0, 1, 2]`` -> sorted client ids, each in ``[0, num_clients)``."""
    ids: list[int] = []
    if isinstance(value, bool):
        raise ConfigError(field, f"expected client ids ('0-4', '0-4,7' or a list of ints), got {value!r}")
    if isinstance(value, int):
        ids = [value]
    elif isinstance(value, str):
        for part in value.split(","):
            lo, dash, hi = part.strip().partition("-")
            try:
                ids.extend(range(int(lo), int(hi) + 1) if dash else [int(lo)])
            except ValueError:
                raise ConfigError(field, f"expected ranges like '0-4' or '0-4,7', got {value!r}") from None
    elif isinstance(value, list) and all(is_whole(v) for v in value):
        ids = list(value)
    else:
        raise ConfigError(field, f"expected client ids ('0-4', '0-4,7' or a list of ints), got {value!r}")
    if not ids:
        raise ConfigError(field, "names no client")
    bad = [c for c in ids if not 0 <= c < num_clients]
    if bad:
        raise ConfigError(field, f"client {bad[0]} is out of range: federation.num_clients = {num_clients}")
    if len(set(ids)) != len(ids):
        raise ConfigError(field, "names a client twice")
    return sorted(ids)


def per_client_architectures(table: Mapping[str, Any]) -> bool:
    """Whether ``[model]`` gives clients architectures of their own (``assign`` or ``groups``): the parts that then
    build each client's model (:func:`chillfl.protocols.parts.build_client_models`) ask this, not the keys."""
    return "assign" in table or "groups" in table


def plan_models(table: Mapping[str, Any], num_clients: int) -> ModelPlan:
    """Read ``[model]``'s architecture assignment; ConfigError names the offending field."""
    base = base_table(table)
    if "assign" in table and "groups" in table:
        raise ConfigError("model.groups", "give either model.assign (one name per client) or model.groups, not both")
    per_client: list[dict[str, Any]] = [base] * num_clients
    field: str | None = None
    section_of: dict[int, str] = {id(base): "model"}  # id of a table object -> the field it came from
    if "assign" in table:
        field = "model.assign"
        names = table["assign"]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ConfigError(field, f"expected a list of model names (one per client), got {names!r}")
        if len(names) != num_clients:
            raise ConfigError(field, f"has {len(names)} names for federation.num_clients = {num_clients}")
        per_client = [base if n == base["name"] else {"name": n} for n in names]
        for i, arch in enumerate(per_client):
            if arch is not base:  # the entry is the name itself: blame model.assign[i], not a .name key it does not have
                section_of[id(arch)] = where = f"model.assign[{i}]"
                try:
                    model_spec(arch["name"], where)
                except ConfigError as exc:
                    raise ConfigError(where, exc.message) if exc.field == f"{where}.name" else exc from None
    elif "groups" in table:
        field = "model.groups"
        groups = table["groups"]
        if not isinstance(groups, list) or not groups or not all(isinstance(g, Mapping) for g in groups):
            raise ConfigError(field, "expected a non-empty array of tables ([[model.groups]] with clients and name)")
        owner: dict[int, int] = {}
        for i, group in enumerate(groups):
            where = f"model.groups[{i}]"
            if not isinstance(group.get("name"), str):
                raise ConfigError(f"{where}.name", "is required (a model name)")
            if "clients" not in group:
                raise ConfigError(f"{where}.clients", "is required ('0-4', '0-4,7' or a list of ids)")
            arch = {k: v for k, v in group.items() if k != "clients"}
            section_of[id(arch)] = where
            for cid in parse_clients(group["clients"], num_clients, f"{where}.clients"):
                if cid in owner:
                    raise ConfigError(f"{where}.clients", f"client {cid} is already in model.groups[{owner[cid]}]")
                owner[cid] = i
                per_client[cid] = arch
    if field is None:  # one architecture: no per-client work (100,000 registered clients build at once)
        return ModelPlan((base,), (0,) * num_clients, None)
    archs: list[dict[str, Any]] = [base]
    sections = ["model"]
    keys = [json.dumps(base, sort_keys=True, default=str)]
    seen: dict[int, int] = {}  # id of a table object -> its architecture (clients share table objects)
    arch_of = []
    for arch in per_client:
        if id(arch) not in seen:
            key = json.dumps(arch, sort_keys=True, default=str)
            if key not in keys:
                keys.append(key)
                archs.append(dict(arch))
                sections.append(section_of[id(arch)])
            seen[id(arch)] = keys.index(key)
        arch_of.append(seen[id(arch)])
    return ModelPlan(tuple(archs), tuple(arch_of), field, tuple(sections))


def arch_section(plan: ModelPlan, index: int) -> str:
    """The config field an architecture's options came from (for errors): ``model``, ``model.assign[i]`` or ``model.groups[i]``."""
    return plan.sections[index] if plan.heterogeneous else "model"


def refuse_heterogeneous(table: Mapping[str, Any], why: str) -> None:
    """One line naming the field when a protocol that shares parameters meets per-client architectures."""
    for key in HETERO_KEYS:
        if key in table:
            raise ConfigError(f"model.{key}", f"per-client architectures need a protocol where models never travel ({why})")


def refuse_with_user_model(table: Mapping[str, Any]) -> None:
    """One line naming the field when a model passed from Python meets per-client architectures.

    Why: the module replaces ``[model]`` (its record), so the groups were dropped silently and every client trained
    the module; kept, the registered models of the groups would have trained under the module's frozen parameter
    names (``LocalSpec.frozen``), which are no names of theirs.
    """
    for key in HETERO_KEYS:
        if key in table:
            raise ConfigError(f"model.{key}", "per-client architectures are registered models built by name, and a model passed from Python is "
                                              f"every client's: pass no model and name each architecture in [model], or leave model.{key} out")


def summarize(plan: ModelPlan, counts: Sequence[int]) -> dict[str, Any]:
    """Per architecture: its label, parameter count and clients (for the run's record)."""
    out: dict[str, Any] = {}
    for i in range(len(plan.archs)):
        clients = [c for c, a in enumerate(plan.arch_of) if a == i]
        out[plan.label(i)] = {"parameters": int(counts[i]), "clients": clients}
    return out

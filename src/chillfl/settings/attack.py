"""The ``[attack]`` table and the family of attacks, typed: parsed once, by the config (docs/attacks.md).

One flat table turns the attack on and sets its options::

    [attack]
    kind = "gaussian"          # or "mypkg.attacks:SPEC"; "none" (the default): off
    fraction = 0.2             # the options every attack shares: fraction, clients
    sigma = 0.5                # the kind's own options, validated like a built-in's

An attack is one :class:`chillfl.attacks.spec.AttackSpec` (``SPEC`` in the attack's module),
found one way, built-in or not: a built-in's name is the name of its module under
``chillfl/attacks/kinds/``; a user's is an import path ``"pkg.module:SPEC"`` or a
``chillfl.plugins`` entry point (:class:`chillfl.plugins.SpecFamily`). Listing names imports
nothing; parsing a kind's options imports its module, as a plugin's would. The attacks
themselves run in :mod:`chillfl.attacks`, which reads the spec's hooks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Mapping

from chillfl import plugins
from chillfl.errors import ConfigError, choice_error
from chillfl.options import NoOptions, OwnTable, require
from chillfl.plugins import PluginNotImported, SpecFamily
from chillfl.settings.chosen import Choice, NamedSpec

SECTION = "attack"

OFF = "none"
"""The kind that turns ``[attack]`` off (the default)."""

BUILT_IN = "chillfl.attacks.kinds"
"""The package whose modules are the built-in attacks, each registered by its ``SPEC``."""

SPEC_FIELDS = ("name", "options", "summary", "poison", "forge_models", "forge_rows", "forge_prototypes", "probe", "check", "figures")
"""What an attack's spec has: how the family tells one apart without importing the attacks' runtime."""


@dataclass(frozen=True)
class AttackOptions:
    """The options every attack shares.

    ``kind``: the attack (``none``: off), a built-in's name, an import path or an entry point.
    ``fraction``: the share of all clients that attack, ``round(fraction * num_clients)`` of them drawn
    once from the run's seed; ``clients``: explicit attacker ids instead (then ``fraction`` is ignored).
    ``local_dp``: under ``[privacy] mechanism = "local"``, whether what an attacker forges is clipped and noised
    as an honest upload (``comply``) or sent as forged (``skip``: the client-side mechanism is the attacker's to
    run); the same rule under every protocol (docs/attacks.md).
    """

    kind: str = OFF
    fraction: float = 0.2
    clients: tuple[int, ...] = ()
    local_dp: Literal["comply", "skip"] = "comply"

    def validate(self, section: str) -> None:
        require(0.0 <= self.fraction < 1.0, f"{section}.fraction", f"must be in [0, 1), got {self.fraction}")
        require(all(c >= 0 for c in self.clients), f"{section}.clients", f"client ids are >= 0, got {list(self.clients)}")
        require(len(set(self.clients)) == len(self.clients), f"{section}.clients", f"lists a client twice: {list(self.clients)}")


FLAT_BEFORE = frozenset({"factor", "sigma", "z", "label_map", "target", "poison_fraction", "trigger_size"})
"""Every kind's options of the one flat ``[attack]`` dataclass before each kind had its own (chillfl up to 0b430e1): a
result folder of then writes all of them, whatever the kind. A table that holds every one of them is read as such a
folder's, so ``chillfl report``, ``resume`` and ``compare --resume`` still read it: the options of the other kinds,
which that version ignored, are dropped. A table written by hand names only some, and another kind's is refused."""


AttackKind = NamedSpec
"""What the config reads of an attack's spec (:class:`chillfl.attacks.spec.AttackSpec` has it all)."""


def _is_spec(obj: Any) -> bool:
    return not isinstance(obj, type) and all(hasattr(obj, name) for name in SPEC_FIELDS)


FAMILY = SpecFamily(BUILT_IN, f"{SECTION}.kind", "chillfl.extend.AttackSpec", _is_spec)
"""Built-ins (one module each under ``BUILT_IN``) and plugins, found the same way."""


def kind_names() -> list[str]:
    """Built-in kinds and the ``chillfl.plugins`` entry points that name an attack (listed, not imported: no torch)."""
    return FAMILY.names()


def attack_spec(name: Any) -> AttackKind:
    """The spec of kind ``name``: a built-in's (its module's ``SPEC``), or a user's by import path or entry point
    (a name that is none of them: a ConfigError listing every kind, ``none`` too)."""
    if isinstance(name, str) and name not in FAMILY.built_in_names() and not plugins.is_import_path(name) and name not in plugins.entry_points():
        raise choice_error(FAMILY.field, name, [OFF, *kind_names()])
    return FAMILY.spec(name)  # type: ignore[no-any-return]


def _kinds() -> dict[str, AttackKind]:
    """Every listed kind's spec (imports each one's module: only to name the owner of a misplaced option)."""
    return {name: attack_spec(name) for name in kind_names()}


CHOICE = Choice(SECTION, "kind", OFF, AttackOptions, _kinds, "attack", FLAT_BEFORE)
"""How ``[attack]`` is read and written (:class:`~chillfl.settings.chosen.Choice`, shared with ``[privacy]``)."""


@dataclass(frozen=True)
class AttackConfig(AttackOptions, OwnTable):
    """Adversarial clients (docs/attacks.md): the shared options (:class:`AttackOptions`) and the kind's own, parsed.

    ``options``: the kind's options dataclass, every default filled in (:class:`~chillfl.options.NoOptions` when off).
    ``held``: while off, other kinds' options the table holds for the variants that switch one on (checked, unused).
    """

    options: Any = field(default_factory=NoOptions)
    held: tuple[tuple[str, Any], ...] = ()

    SWITCH: ClassVar[str] = "kind"
    """The option that turns the table on: options written while no run of a config sets it are refused (``chillfl.config.check_switches``)."""

    @classmethod
    def switch_values(cls) -> list[str]:
        """What :attr:`SWITCH` may be set to (for the refusal's message)."""
        return [OFF, *kind_names()]

    @property
    def enabled(self) -> bool:
        return self.kind != OFF

    @property
    def spec(self) -> AttackKind:
        """The kind's spec (a :class:`chillfl.attacks.spec.AttackSpec`); only when :attr:`enabled`."""
        return attack_spec(self.kind)

    @classmethod
    def from_table(cls, table: Mapping[str, Any], section: str = SECTION) -> AttackConfig:
        """``[attack]`` checked, with the kind's defaults filled in; a ConfigError names any bad key
        (an option of another kind: which kind it belongs to)."""
        shared = CHOICE.parse_shared(table)
        if shared.kind == OFF:
            return cls(**CHOICE.shared_values(shared), options=NoOptions(), held=CHOICE.held(table, CHOICE.rest(table, None)))
        try:
            own = attack_spec(shared.kind).options
        except PluginNotImported:  # a folder read as data: the plugin's options kept as written (its spec is its code)
            return cls(**CHOICE.shared_values(shared), options=CHOICE.unread(table, shared.kind))
        return cls(**CHOICE.shared_values(shared), options=CHOICE.own(table, CHOICE.rest(table, own), shared.kind, own))

    def table(self) -> dict[str, Any]:
        """The flat table: the shared options, then the kind's own (every default written), or while off the options held."""
        return CHOICE.write(self, self.options, self.held)


def parse_attack(table: Mapping[str, Any]) -> AttackConfig:
    """``[attack]`` as a config reads it (see :meth:`AttackConfig.from_table`)."""
    if not isinstance(table, Mapping):
        raise ConfigError(SECTION, "expected a table")
    return AttackConfig.from_table(table, SECTION)

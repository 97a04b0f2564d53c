"""The ``[privacy]`` table and the family of mechanisms, typed: parsed once, by the config (docs/privacy.md).

One flat table turns a mechanism on and sets its budget::

    [privacy]
    mechanism = "dp-fedavg"    # or "mypkg.dp:SPEC"; "none" (the default): off
    clip_norm = 1.0            # the options every mechanism shares (PrivacyOptions)
    target_quantile = 0.5      # the mechanism's own options, validated like a built-in's

A mechanism is one :class:`chillfl.privacy.spec.MechanismSpec` (``SPEC`` in its module), found one way,
built-in or not: a built-in's name is the name of its module under ``chillfl/privacy/mechanisms/`` with
``_`` written ``-``; a user's is an import path ``"pkg.module:SPEC"`` or a ``chillfl.plugins`` entry point
(:class:`chillfl.plugins.SpecFamily`). Listing names imports nothing; parsing a mechanism's options imports
its module, as a plugin's would. The mechanisms themselves run in :mod:`chillfl.privacy`, which reads the hooks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Literal, Mapping, Protocol, runtime_checkable

from chillfl import plugins
from chillfl.errors import choice_error
from chillfl.options import FLOAT32_MAX, NoOptions, OwnTable, Scale, require
from chillfl.plugins import PluginNotImported, SpecFamily
from chillfl.settings.chosen import Choice, NamedSpec

SECTION = "privacy"

OFF = "none"
"""The mechanism that turns ``[privacy]`` off (the default)."""

BUILT_IN = "chillfl.privacy.mechanisms"
"""The package whose modules are the built-in mechanisms, each registered by its ``SPEC``."""


@dataclass(frozen=True)
class PrivacyOptions:
    """The options every mechanism shares.

    ``mechanism``: the mechanism (``none``: off), a built-in's name, an import path or an entry point.
    ``clip_norm``: C, the L2 bound on what the mechanism clips. ``noise_multiplier``: sigma, the Gaussian
    noise's standard deviation in units of C; unless ``target_epsilon`` > 0 picks it for the planned rounds
    before the run starts. ``delta``: the delta at which every round's ``epsilon`` is reported.
    ``accountant``: Opacus's ``rdp`` (Renyi DP, Mironov 2017) or ``prv`` (Gopi et al. 2021).
    ``rdp_orders``: the orders the RDP accountant minimises over: ``opacus``, its own (up to 63), or ``extended``,
    dp-accounting's (up to 1024: a smaller epsilon where the best order is past 63); the PRV accountant has none.
    ``adjacency``: the neighbouring inputs epsilon is for. ``replace``: any two clipped values of a client
    (sensitivity 2C); ``add_remove``: a value against none (sensitivity C), the only relation Opacus's
    subsampled accountants bound; ``auto``: the mechanism's own (its spec's ``adjacency``).
    """

    mechanism: str = OFF
    clip_norm: Scale = 1.0
    noise_multiplier: Scale = 1.0
    target_epsilon: float = 0.0
    delta: float = 1e-5
    accountant: Literal["rdp", "prv"] = "rdp"
    rdp_orders: Literal["opacus", "extended"] = "opacus"
    adjacency: Literal["auto", "replace", "add_remove"] = "auto"

    def validate(self, section: str) -> None:
        if self.mechanism == OFF:
            return
        require(math.isfinite(self.clip_norm) and self.clip_norm > 0, f"{section}.clip_norm", f"must be > 0 (the L2 bound on what is clipped), got {self.clip_norm}")
        require(0 < self.delta < 1, f"{section}.delta", f"must be in (0, 1), got {self.delta}")
        require(
            math.isfinite(self.noise_multiplier) and self.noise_multiplier > 0 or self.target_epsilon > 0,
            f"{section}.noise_multiplier",
            f"must be > 0 (sigma = 0 adds no noise: epsilon would be infinite), got {self.noise_multiplier}; or set target_epsilon",
        )
        # the noise's standard deviation is sigma * C, drawn in float32: each below the bound, their product overflowed to inf.
        # (It bounds sigma <= 3.4e38 / C, far inside where Opacus's RDP accountant's 2 * sigma**2 overflows float64, which
        # a square check refused before sigma had the float32 bound.)
        require(self.noise_multiplier * self.clip_norm <= FLOAT32_MAX, f"{section}.noise_multiplier",
                f"times clip_norm is the noise's standard deviation, drawn in float32: must be at most {FLOAT32_MAX:.4g}, "
                f"got {self.noise_multiplier:g} * {self.clip_norm:g}")
        require(math.isfinite(self.target_epsilon) and self.target_epsilon >= 0, f"{section}.target_epsilon", f"must be >= 0 (0: use noise_multiplier), got {self.target_epsilon}")
        require(self.rdp_orders == "opacus" or self.accountant == "rdp", f"{section}.rdp_orders",
                f"is the RDP accountant's grid of orders, and accountant = {self.accountant!r} has none: set accountant = 'rdp' or drop rdp_orders")


SPEC_FIELDS = ("name", "options", "summary", "accounts", "charges", "aggregator", "step", "rows", "settle", "check", "approximation", "adjacency", "subsampled", "figures")
"""What a mechanism's spec has: how the family tells one apart without importing the mechanisms' runtime (the
config sits below it); :func:`chillfl.privacy.spec.spec_of` checks the type where the runtime reads the hooks."""


@runtime_checkable
class MechanismKind(NamedSpec, Protocol):
    """What the config reads of a mechanism's spec (:class:`chillfl.privacy.spec.MechanismSpec` has it all)."""

    @property
    def adjacency(self) -> str:
        """What ``adjacency = "auto"`` means for it: ``add_remove`` or ``replace``."""
        ...

    @property
    def subsampled(self) -> bool:
        """Whether sampling amplifies its releases (then ``replace`` is refused)."""
        ...

    @property
    def approximation(self) -> Callable[[Any, Any], str | None] | None:
        """What its epsilon accounts as Poisson sampled though the run is not (options, config -> phrase or None)."""
        ...


def _is_spec(obj: Any) -> bool:
    return not isinstance(obj, type) and all(hasattr(obj, name) for name in SPEC_FIELDS)


FAMILY = SpecFamily(BUILT_IN, f"{SECTION}.mechanism", "chillfl.extend.MechanismSpec", _is_spec, dashed=True)
"""Built-ins (one module each under ``BUILT_IN``) and plugins, found the same way."""


def mechanism_names() -> list[str]:
    """Built-in mechanisms and the ``chillfl.plugins`` entry points that name one (listed, not imported: no torch)."""
    return FAMILY.names()


def mechanism_spec(name: Any) -> MechanismKind:
    """The spec of mechanism ``name``: a built-in's (its module's ``SPEC``), or a user's by import path or entry point
    (a name that is none of them: a ConfigError listing every mechanism, ``none`` too)."""
    if isinstance(name, str) and name not in FAMILY.built_in_names() and not plugins.is_import_path(name) and name not in plugins.entry_points():
        raise choice_error(FAMILY.field, name, [OFF, *mechanism_names()])
    spec: MechanismKind = FAMILY.spec(name)
    return spec


def _mechanisms() -> dict[str, MechanismKind]:
    """Every listed mechanism's spec (imports each one's module: only to name the owner of a misplaced option)."""
    return {name: mechanism_spec(name) for name in mechanism_names()}


FLAT_BEFORE = frozenset({"row_norm", "target_quantile", "clip_lr", "count_noise"})
"""Every mechanism's own options of the one flat ``[privacy]`` dataclass before each mechanism had its own (chillfl up to
0b430e1): a result folder of then writes all of them, whatever the mechanism, and still loads for report and resume
(the other mechanisms' options, which that version ignored, are dropped)."""

CHOICE = Choice(SECTION, "mechanism", OFF, PrivacyOptions, _mechanisms, "mechanism", FLAT_BEFORE)
"""How ``[privacy]`` is read and written (:class:`~chillfl.settings.chosen.Choice`, shared with ``[attack]``)."""


@dataclass(frozen=True)
class PrivacyConfig(PrivacyOptions, OwnTable):
    """Differential privacy (docs/privacy.md): the shared options (:class:`PrivacyOptions`) and the mechanism's own, parsed.

    ``options``: the mechanism's options dataclass, every default filled in (:class:`~chillfl.options.NoOptions` when off).
    ``held``: while off, mechanisms' options the table holds for the variants that switch one on (checked, unused).
    """

    options: Any = field(default_factory=NoOptions)
    held: tuple[tuple[str, Any], ...] = ()

    SWITCH: ClassVar[str] = "mechanism"
    """The option that turns the table on: options written while no run of a config sets it are refused (``chillfl.config.check_switches``)."""

    @classmethod
    def switch_values(cls) -> list[str]:
        """What :attr:`SWITCH` may be set to (for the refusal's message)."""
        return [OFF, *mechanism_names()]

    @property
    def enabled(self) -> bool:
        return self.mechanism != OFF

    @property
    def spec(self) -> MechanismKind:
        """The mechanism's spec (a :class:`chillfl.privacy.spec.MechanismSpec`); only when :attr:`enabled`."""
        return mechanism_spec(self.mechanism)

    @property
    def sensitivity(self) -> float:
        """The clipped release's L2 sensitivity in units of C under :attr:`adjacency`: 2 (any two values in a ball of radius C) or 1."""
        relation = self.spec.adjacency if self.adjacency == "auto" else self.adjacency
        return 2.0 if relation == "replace" else 1.0

    @classmethod
    def from_table(cls, table: Mapping[str, Any], section: str = SECTION) -> PrivacyConfig:
        """``[privacy]`` checked, with the mechanism's defaults filled in; a ConfigError names any bad key
        (an option of another mechanism: which mechanism it belongs to)."""
        shared = CHOICE.parse_shared(table)
        values = CHOICE.shared_values(shared)
        if shared.mechanism == OFF:
            return cls(**values, options=NoOptions(), held=CHOICE.held(table, CHOICE.rest(table, None)))
        try:
            spec = mechanism_spec(shared.mechanism)
        except PluginNotImported:  # a folder read as data: the plugin's options kept as written (its spec is its code)
            return cls(**values, options=CHOICE.unread(table, shared.mechanism))
        options = CHOICE.own(table, CHOICE.rest(table, spec.options), shared.mechanism, spec.options)
        require(
            shared.adjacency != "replace" or not spec.subsampled,
            f"{section}.adjacency",
            f"'replace' is accounted for releases that sampling does not amplify (q = 1, sensitivity 2C); {shared.mechanism!r} is subsampled, "
            "and Opacus's accountants bound add/remove neighbours: use 'auto' or 'add_remove'",
        )
        return cls(**values, options=options)

    def table(self) -> dict[str, Any]:
        """The flat table: the shared options, then the mechanism's own (every default written), or while off the options held."""
        return CHOICE.write(self, self.options, self.held)

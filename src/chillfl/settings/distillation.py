"""The ``[distillation]`` table (the soft-label methods), typed: parsed once, by the config, below everything that uses it.

One flat table chooses a method and sets the options every method shares
(:class:`DistillationOptions`) plus that method's own, declared by the method's spec
(:class:`chillfl.protocols.softlabels.SoftLabelSpec`, ``SPEC`` in the method's module).
:func:`parse_distillation` splits and checks it; the config keeps the result
(:attr:`chillfl.config.RunConfig.distillation_setup`), and the protocol reads it from there.

A method is found one way, built-in or not: by an import path ``"pkg.module:SPEC"``
(:func:`chillfl.plugins.resolve`; an entry point of the ``chillfl.plugins`` group names one
too). A built-in's name is the name of its module under ``chillfl/distillation/methods/``,
whose ``SPEC`` is its one registration. Listing names imports nothing; parsing a method's
options imports its module (and torch), as a plugin's would.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Protocol, runtime_checkable

from chillfl.capabilities import Capabilities
from chillfl.errors import ConfigError, did_you_mean
from chillfl.options import parse_options, require, require_visible_text
from chillfl.plugins import SpecFamily


SECTION = "distillation"
StoreMode = Literal["auto", "memory", "disk"]
_UPPER_BOUNDS = {
    "public_size": 2**31 - 1, "subset_size": 2**31 - 1, "distill_batch_size": 2**31 - 1, "server_batch_size": 2**31 - 1,  # C ints in torch
    "distill_epochs": 100_000, "server_epochs": 100_000, "cache_duration": 10**7, "max_clients_in_memory": 10**7,  # as client.epochs, rounds
}


# ---------------------------------------------------------------- shared options


@dataclass(frozen=True)
class DistillationOptions:
    """Options every soft-label method shares (SCARLET Sec. IV-A defaults where it gives them).

    ``public_size``: |P|, the public unlabeled pool: carved from the private
    dataset's train split (DS-FL's setting) or, with ``public_dataset``, drawn
    from that dataset's train split (SCARLET's setting: no class overlap).
    ``subset_size``: |P^t|, drawn per round (seeded). ``distill_*``: the
    clients' distillation on P^{t-1} (Algorithm 1: E_dist, eta_dist; the paper
    uses lr 0.1). ``server_*``: the server model's distillation on P^t
    (Algorithm 1 uses E, the local epochs, and eta_d). ``cache_duration``: D
    (None = the method's default); ``cache_request``: ``"authors"`` requests an
    entry again at t - t_c = D too, as the SCARLET authors' code does
    (:data:`chillfl.protocols.softlabels.RequestRule`). ``augment_public``: the clients' and the
    server model's distillation batches of public inputs go through
    ``[dataset.augment]``'s crop and flip too (the SCARLET authors' code reads
    its public pool through the train transform; off: the pool as stored,
    as the paper says nothing of it). ``client_store``: where per-client states
    live between rounds (``auto``: memory up to ``max_clients_in_memory``
    clients, else files under ``state_dir`` or the system temp dir).
    """

    method: str = ""
    public_size: int = 0
    public_dataset: str | None = None
    public_dataset_options: dict[str, Any] = field(default_factory=dict)
    subset_size: int = 1000
    distill_epochs: int = 1
    distill_lr: float = 0.1
    distill_batch_size: int | None = None
    server_epochs: int | None = None
    server_lr: float | None = None
    server_batch_size: int | None = None
    cache_duration: int | None = None
    cache_on_expire: Literal["drop", "refresh"] = "drop"
    cache_request: Literal["valid", "authors"] = "valid"
    augment_public: bool = False
    index_encoding: Literal["int32", "packed"] = "int32"
    client_store: StoreMode = "auto"
    max_clients_in_memory: int = 100
    state_dir: str | None = None

    def validate(self, section: str) -> None:
        spec = method_settings(self.method)
        if self.state_dir is not None:
            require_visible_text(self.state_dir, f"{section}.state_dir", "a path")
        require(self.public_size >= 0, f"{section}.public_size", f"must be >= 0, got {self.public_size}")
        require(self.subset_size >= 1, f"{section}.subset_size", f"must be >= 1, got {self.subset_size}")
        # sizes and loop counts no run can use: refused, not attempted (before the comparison below, which
        # would blame a huge subset_size on public_size)
        for name, most in _UPPER_BOUNDS.items():
            value = getattr(self, name)
            require(value is None or value <= most, f"{section}.{name}", f"must be at most {most}, got {value}")
        if spec.collaborative and self.public_size == 0:  # the default: a first [distillation] table leaves it out
            raise ConfigError(f"{section}.public_size", f"is not set (0), and method {self.method!r} distils on a public set of |P| >= subset_size={self.subset_size} "
                                                        "rows (|P^t| a round), carved from the training set or drawn from public_dataset: set both, "
                                                        "e.g. public_size = 400, subset_size = 100 on digits")
        if spec.collaborative:
            require(
                self.public_size >= self.subset_size,
                f"{section}.public_size",
                f"must be >= subset_size={self.subset_size} (|P| >= |P^t|) for method {self.method!r}, got {self.public_size}",
            )
        # Why: the options are read only with a public_dataset, so without one they (bogus keys too) did nothing, silently
        require(self.public_dataset is not None or not self.public_dataset_options, f"{section}.public_dataset_options",
                f"apply to public_dataset, which is unset (the pool is carved from the run's training split): set public_dataset "
                f"or leave them out, got {self.public_dataset_options}")
        for name in ("distill_epochs", "max_clients_in_memory"):
            require(getattr(self, name) >= 1, f"{section}.{name}", f"must be >= 1, got {getattr(self, name)}")
        for name in ("distill_batch_size", "server_epochs", "server_batch_size"):
            value = getattr(self, name)
            require(value is None or value >= 1, f"{section}.{name}", f"must be >= 1 or unset, got {value}")
        require(self.distill_lr > 0, f"{section}.distill_lr", f"must be > 0, got {self.distill_lr}")
        require(self.server_lr is None or self.server_lr > 0, f"{section}.server_lr", f"must be > 0 or unset, got {self.server_lr}")
        if self.cache_duration is not None:
            require(self.cache_duration >= 0, f"{section}.cache_duration", f"must be >= 0, got {self.cache_duration}")
            require(
                self.cache_duration == 0 or spec.collaborative,
                f"{section}.cache_duration",
                f"method {self.method!r} exchanges no soft-labels; leave it unset or 0",
            )


@dataclass(frozen=True)
class DistillationSetup:
    """The parsed ``[distillation]`` table: shared options + the method's own options."""

    common: DistillationOptions
    options: Any

    @property
    def spec(self) -> MethodSettings:
        """The method's spec (a :class:`chillfl.protocols.softlabels.SoftLabelSpec`)."""
        return method_settings(self.common.method)

    @property
    def cache_duration(self) -> int:
        d = self.common.cache_duration
        return self.spec.default_cache_duration if d is None else d

    @property
    def uses_cache(self) -> bool:
        return self.spec.collaborative and self.cache_duration > 0


# ---------------------------------------------------------------- finding a method


@runtime_checkable
class MethodSettings(Protocol):
    """What the config reads of a method's spec (:class:`chillfl.protocols.softlabels.SoftLabelSpec` has it all)."""

    @property
    def options(self) -> type:
        """Its own options, a dataclass."""
        ...

    @property
    def capabilities(self) -> Capabilities:
        """What the method declares (read where a runtime asks, e.g. the Flower apps' ``on_flower``)."""
        ...

    @property
    def default_cache_duration(self) -> int:
        """D when ``cache_duration`` is unset."""
        ...

    @property
    def collaborative(self) -> bool:
        """Whether clients share soft-labels at all."""
        ...

    @property
    def figures(self) -> tuple[str, ...]:
        """The run figures its round metrics feed (the runner draws them)."""
        ...

    @property
    def summary(self) -> str:
        ...


SPEC_FIELDS = ("options", "server", "client", "default_cache_duration", "collaborative", "summary")
"""What a soft-label method's spec has: how the settings tell one apart without importing the protocol."""

BUILT_IN = "chillfl.distillation.methods"
"""The package whose modules are the built-in methods, each registered by its ``SPEC``."""


def _is_spec(obj: Any) -> bool:
    return not isinstance(obj, type) and all(hasattr(obj, name) for name in SPEC_FIELDS)


FAMILY = SpecFamily(BUILT_IN, f"{SECTION}.method", "chillfl.extend.SoftLabelSpec", _is_spec)
"""Built-ins (one module each under ``BUILT_IN``) and plugins, found the same way (:class:`~chillfl.plugins.SpecFamily`)."""


def built_in_names() -> tuple[str, ...]:
    """The built-in methods: one module each under ``BUILT_IN`` (listed, not imported)."""
    return FAMILY.built_in_names()


def method_names() -> list[str]:
    """Built-in names and the ``chillfl.plugins`` entry points that name a spec of this family."""
    return FAMILY.names()


def method_settings(name: Any) -> MethodSettings:
    """The spec of method ``name``: a built-in's (its module's ``SPEC``), or a user's by import path or entry point."""
    return FAMILY.spec(name)  # type: ignore[no-any-return]


def __getattr__(name: str) -> Any:
    """``METHODS``: every built-in's spec by name (imports each method's module, so only on demand)."""
    if name == "METHODS":
        return {n: method_settings(n) for n in built_in_names()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


METHOD_DEFAULTED = frozenset({"cache_duration"})
"""Shared options whose default is the method's (``cache_duration``: the spec's ``default_cache_duration``, SCARLET's
50, the others' 0). Why: an override that switches ``method`` kept every shared option, so ``--grid
distillation.method=dsfl,scarlet`` on a SCARLET file with D = 2 ran DS-FL with SCARLET's cache, silently; a switch
drops these as it drops the old method's own options (:func:`chillfl.config.apply_overrides`), and the same
overrides may set them again."""


def method_defaulted(setup: DistillationSetup) -> dict[str, int]:
    """The value each of :data:`METHOD_DEFAULTED` runs at under ``setup`` (its default resolved for the method)."""
    return {"cache_duration": setup.cache_duration}


def dropped_method_defaults(base: Mapping[str, Any], run: DistillationSetup | None) -> list[tuple[str, Any, Any]]:
    """``(option, base's value, value run)`` for each of :data:`METHOD_DEFAULTED` that ``base``, a ``[distillation]``
    table, sets and that ``run``, a variant's setup of another method, runs otherwise (the switch dropped it)."""
    if run is None or base.get("method") in (None, run.common.method):
        return []
    ran = method_defaulted(run)
    return [(k, base[k], ran[k]) for k in sorted(METHOD_DEFAULTED) if base.get(k) is not None and ran[k] != base[k]]


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.init}


def parse_distillation(table: Mapping[str, Any]) -> DistillationSetup:
    """Split the flat ``[distillation]`` table into shared and method options; ConfigError names any bad key."""
    table = dict(table)
    method = table.get("method")
    if not isinstance(method, str) or not method:
        raise ConfigError(f"{SECTION}.method", f"is required; allowed: {', '.join(method_names())}")
    spec = method_settings(method)
    shared, own = _fields(DistillationOptions), _fields(spec.options)
    for key in sorted(table):
        if key not in shared and key not in own:
            raise ConfigError(
                f"{SECTION}.{key}",
                f"unknown option for method {method!r}{did_you_mean(key, shared | own)}; allowed: {', '.join(sorted(shared | own))}",
            )
    common = parse_options(DistillationOptions, {k: v for k, v in table.items() if k in shared}, SECTION)
    options: Any = parse_options(spec.options, {k: v for k, v in table.items() if k in own}, SECTION)
    return DistillationSetup(common, options)

"""The ``[distillation]`` table (the soft-label methods), typed: parsed once, by the config, below everything that uses it.

One flat table chooses a method and sets the options every method shares
(:class:`DistillationOptions`) plus that method's own (:data:`METHODS`); see
:mod:`chillfl.distillation.methods` for the methods themselves and the choices
made where the papers differ. :func:`parse_distillation` splits and checks it;
the config keeps the result (:attr:`chillfl.config.RunConfig.distillation_setup`),
and the protocol, the methods and the experiment builder read it from there.
Nothing here imports torch: ``chillfl --help`` and config validation stay light.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Protocol, runtime_checkable

from chillfl.errors import ConfigError, choice_error, did_you_mean
from chillfl.options import NoOptions, parse_options, require, require_range, short_repr
from chillfl.plugins import has_methods, plugin_names, resolve


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
    (None = the method's default). ``client_store``: where per-client states
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
    index_encoding: Literal["int32", "packed"] = "int32"
    client_store: StoreMode = "auto"
    max_clients_in_memory: int = 100
    state_dir: str | None = None

    def validate(self, section: str) -> None:
        spec = method_settings(self.method)
        require(self.public_size >= 0, f"{section}.public_size", f"must be >= 0, got {self.public_size}")
        require(self.subset_size >= 1, f"{section}.subset_size", f"must be >= 1, got {self.subset_size}")
        # sizes and loop counts no run can use: refused, not attempted (before the comparison below, which
        # would blame a huge subset_size on public_size)
        for name, most in _UPPER_BOUNDS.items():
            value = getattr(self, name)
            require(value is None or value <= most, f"{section}.{name}", f"must be at most {most}, got {value}")
        if spec.collaborative:
            require(
                self.public_size >= self.subset_size,
                f"{section}.public_size",
                f"must be >= subset_size={self.subset_size} (|P| >= |P^t|) for method {self.method!r}, got {self.public_size}",
            )
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
        return method_settings(self.common.method)

    @property
    def cache_duration(self) -> int:
        d = self.common.cache_duration
        return self.spec.default_cache_duration if d is None else d

    @property
    def uses_cache(self) -> bool:
        return self.spec.collaborative and self.cache_duration > 0


# ---------------------------------------------------------------- each method's own options


@dataclass(frozen=True)
class ERAOptions:
    """DS-FL's ERA temperature (SCARLET Table V: 0.1 CIFAR-10, 0.01 CIFAR-100, 0.05 Tiny ImageNet)."""

    temperature: float = 0.1

    def validate(self, section: str) -> None:
        require(self.temperature > 0, f"{section}.temperature", f"must be > 0, got {self.temperature}")


@dataclass(frozen=True)
class EnhancedERAOptions:
    """SCARLET's sharpness beta (Sec. IV-B: 2.0 CIFAR-10 alpha=0.05, 1.0 alpha=0.3, 1.25 CIFAR-100/Tiny ImageNet)."""

    beta: float = 2.0

    def validate(self, section: str) -> None:
        require(self.beta > 0, f"{section}.beta", f"must be > 0, got {self.beta}")


Granularity = Literal["client", "sample"]


MAX_N_INIT = 1000
"""k-means restarts per round (SCARLET's setting: a handful); the run time grows linearly with it."""
MAX_ITER = 10_000
"""Lloyd iterations per restart (they stop at convergence, usually within tens)."""


@dataclass(frozen=True)
class COMETOptions:
    """COMET options (defaults: SCARLET Table V, CIFAR-10)."""

    num_clusters: int = 2
    reg_weight: float = 1.0
    granularity: Granularity = "client"
    n_init: int = 4
    max_iter: int = 100

    def validate(self, section: str) -> None:
        require(self.num_clusters >= 1, f"{section}.num_clusters", f"must be >= 1, got {self.num_clusters}")
        require(self.reg_weight >= 0, f"{section}.reg_weight", f"must be >= 0, got {self.reg_weight}")
        require(self.granularity in ("client", "sample"), f"{section}.granularity", f"unknown value {self.granularity!r}; allowed: client, sample")
        require_range(self.n_init, 1, MAX_N_INIT, f"{section}.n_init")
        require_range(self.max_iter, 1, MAX_ITER, f"{section}.max_iter")

    def check_clients(self, clients_per_round: int, section: str) -> None:
        """More clusters than clients per round can never be used (each cluster needs a client), only allocated."""
        require(
            self.num_clusters <= clients_per_round,
            f"{section}.num_clusters",
            f"must be in [1, clients per round = {clients_per_round}] (a cluster groups clients), got {self.num_clusters}",
        )


FULL_PRECISION_BITS = 32
OneBitMode = Literal["uniform", "argmax"]


@dataclass(frozen=True)
class CFDOptions:
    """CFD options (defaults: SCARLET Table V, CIFAR-10)."""

    bits_up: int = 1
    bits_down: int = 32
    one_bit: OneBitMode = "uniform"
    renormalize: bool = False
    delta_coding: bool = False

    def validate(self, section: str) -> None:
        for name in ("bits_up", "bits_down"):
            value = getattr(self, name)
            require(1 <= value <= 16 or value == FULL_PRECISION_BITS, f"{section}.{name}", f"must be in 1..16 or 32, got {value}")
        require(self.one_bit in ("uniform", "argmax"), f"{section}.one_bit", f"unknown value {self.one_bit!r}; allowed: argmax, uniform")


ServerMeasure = Literal["l1", "entropy"]
ClientThresholdMode = Literal["quantile", "absolute"]


@dataclass(frozen=True)
class SelectiveFDOptions:
    """Selective-FD options (defaults: SCARLET Table V, CIFAR-10)."""

    tau_client: float = 0.0625
    tau_server: float = 2.0
    server_measure: ServerMeasure = "l1"
    client_threshold: ClientThresholdMode = "quantile"
    kernel_width: float = 25.0
    kernel_lambda: float = 1e-3

    def validate(self, section: str) -> None:
        if self.client_threshold == "quantile":
            require(0.0 <= self.tau_client <= 1.0, f"{section}.tau_client", f"must be in [0, 1] (a quantile level), got {self.tau_client}")
        require(self.tau_server > 0, f"{section}.tau_server", f"must be > 0, got {self.tau_server}")
        require(self.server_measure in ("l1", "entropy"), f"{section}.server_measure", f"unknown value {self.server_measure!r}; allowed: entropy, l1")
        require(
            self.client_threshold in ("quantile", "absolute"),
            f"{section}.client_threshold",
            f"unknown value {self.client_threshold!r}; allowed: absolute, quantile",
        )
        require(self.kernel_width > 0, f"{section}.kernel_width", f"must be > 0, got {self.kernel_width}")
        require(self.kernel_lambda > 0, f"{section}.kernel_lambda", f"must be > 0, got {self.kernel_lambda}")


@dataclass(frozen=True)
class FedMDOptions:
    """``transfer_epochs``: epochs of supervised training on the labelled public set before a model's first round
    (the paper trains to convergence; 0 = no transfer phase). ``transfer_lr``: its learning rate (None: ``client.lr``).
    ``scores``: what the class scores are: ``logits`` digested with an L1 loss (the reference code), or ``probs``
    (softmax outputs) digested with KL, as the other soft-label methods."""

    transfer_epochs: int = 20
    transfer_lr: float | None = None
    scores: Literal["logits", "probs"] = "logits"

    def validate(self, section: str) -> None:
        require(0 <= self.transfer_epochs <= 100_000, f"{section}.transfer_epochs", f"must be in [0, 100000], got {self.transfer_epochs}")
        require(self.transfer_lr is None or self.transfer_lr > 0, f"{section}.transfer_lr", f"must be > 0 or unset, got {self.transfer_lr}")


@runtime_checkable
class ChecksWithShared(Protocol):
    """A method's options that check themselves against the shared ``[distillation]`` options (CFD, COMET)."""

    def check_with(self, setup: DistillationSetup, section: str) -> None:
        ...


@dataclass(frozen=True)
class CFDMethodOptions(CFDOptions):
    """CFD options (SCARLET Table V: b_up = 1, b_down = 32, no delta coding)."""

    def check_with(self, setup: DistillationSetup, section: str) -> None:
        if self.delta_coding:
            require(self.bits_up < FULL_PRECISION_BITS, f"{section}.delta_coding", "needs bits_up in 1..16 (32 bits are not quantised)")
            require(
                not (self.bits_up == 1 and self.one_bit == "argmax"),
                f"{section}.delta_coding",
                "is not available with one_bit = 'argmax' (hard labels are not codes)",
            )


@dataclass(frozen=True)
class COMETMethodOptions(COMETOptions):
    """COMET options (SCARLET Table V: c = 2 clusters, lambda = 1.0)."""

    def check_with(self, setup: DistillationSetup, section: str) -> None:
        require(
            not (setup.uses_cache and self.granularity == "client"),
            f"{section}.cache_duration",
            "COMET caches only per-sample centroids: set granularity = 'sample' or cache_duration = 0",
        )


@dataclass(frozen=True)
class SCARLETOptions(EnhancedERAOptions):
    """SCARLET's own option: beta of Enhanced ERA (2.0 for CIFAR-10 alpha = 0.05, 1.0 for alpha = 0.3)."""


@dataclass(frozen=True)
class DSFLOptions(ERAOptions):
    """DS-FL's own options: the ERA temperature T (SCARLET Table V: 0.1 for CIFAR-10) and the aggregation.

    ``aggregation = "mean"`` replaces ERA by the plain mean (an ablation, not
    DS-FL): it is SCARLET with beta = 1 and D = 0, bit for bit.
    """

    aggregation: Literal["era", "mean"] = "era"


@dataclass(frozen=True)
class SelectiveFDMethodOptions(SelectiveFDOptions):
    """Selective-FD options (SCARLET Table V: tau_client = 0.0625, tau_server = 2.0 = off for L1)."""


# ---------------------------------------------------------------- registry


@dataclass(frozen=True)
class MethodSettings:
    """A registered method's settings: its options, default cache duration, whether it shares soft-labels, a summary.

    Its behaviour (the class that runs it) is :data:`chillfl.distillation.methods.BUILDERS`, under the same name.
    """

    options: type
    default_cache_duration: int
    collaborative: bool = True
    summary: str = ""


METHODS: dict[str, MethodSettings] = {
    "dsfl": MethodSettings(DSFLOptions, 0, summary="ERA (Eq. 2), no cache"),
    "scarlet": MethodSettings(SCARLETOptions, 50, summary="Enhanced ERA (Eq. 4) + synchronized cache (Alg. 2)"),
    "cfd": MethodSettings(CFDMethodOptions, 0, summary="quantised soft-labels, plain mean"),
    "comet": MethodSettings(COMETMethodOptions, 0, summary="clustered distillation targets"),
    "selective_fd": MethodSettings(SelectiveFDMethodOptions, 0, summary="client/server knowledge selectors"),
    "fedmd": MethodSettings(FedMDOptions, 0, summary="transfer learning on the labelled public set, consensus = mean class scores"),
    "individual": MethodSettings(NoOptions, 0, collaborative=False, summary="no collaboration"),
}


SOFT_LABEL_METHODS = ("aggregate", "client_half", "uplink_bytes", "row_width", "round_metrics", "state_dict", "load_state_dict")
"""What a user's soft-label method class has (a ``chillfl.extend.SoftLabelMethod`` subclass): how the settings tell it apart."""


def method_names() -> list[str]:
    """Built-in names and the ``chillfl.plugins`` entry points that name a soft-label method."""
    return sorted({*METHODS, *plugin_names(lambda obj: has_methods(obj, SOFT_LABEL_METHODS))})


def method_settings(name: Any) -> MethodSettings:
    """The built-in method ``name``'s settings, or a user's (``"pkg.module:Class"``, a ``chillfl.plugins`` entry point).

    A user's class (a :class:`chillfl.extend.SoftLabelMethod` subclass) declares its own options in a nested
    ``Options`` dataclass (none: no options), parsed and validated like a built-in's beside the shared
    ``[distillation]`` options; it shares soft-labels and caches nothing unless ``cache_duration`` says so.
    The class itself, which runs the method, is resolved the same way by :func:`chillfl.distillation.methods.make_method`.
    """
    if isinstance(name, str) and name in METHODS:
        return METHODS[name]
    field_name = f"{SECTION}.method"
    found = resolve(name, field_name) if isinstance(name, str) and name else None
    if found is None:
        raise choice_error(field_name, name, method_names())
    if not has_methods(found, SOFT_LABEL_METHODS):
        raise ConfigError(field_name, f"{name!r} must name a chillfl.extend.SoftLabelMethod subclass, got {short_repr(found)}")
    options = getattr(found, "Options", None) or NoOptions
    if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise ConfigError(field_name, f"{name!r}: its Options must be a dataclass, got {options!r}")
    return MethodSettings(options, 0, summary=name)


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
    setup = DistillationSetup(common, options)
    if isinstance(options, ChecksWithShared):
        options.check_with(setup, SECTION)
    return setup

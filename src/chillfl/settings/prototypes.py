"""The ``[prototypes]`` table (FedProto, FedHKD), typed: parsed once, by the config, below everything that uses it.

The maths these settings drive lives in :mod:`chillfl.protocols.knowledge`, the
protocol in :mod:`chillfl.protocols.prototypes`; both read
:attr:`chillfl.config.RunConfig.prototype_settings`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

from chillfl.errors import ConfigError
from chillfl.options import parse_options, require

Weighting = Literal["count", "uniform"]

SECTION = "prototypes"


@dataclass(frozen=True)
class PrototypeOptions:
    """``[prototypes]``: the method and its hyperparameters (defaults: the papers' official codes).

    ``lam``: weight of the representation term MSE(f(x), H_y) (FedProto's
    lambda = 1; FedHKD's gamma = 0.05). ``kd_weight``: FedHKD's lambda on
    the hyper-knowledge KD term (0.05; FedProto has none). ``temperature``:
    FedHKD's tau for the soft predictions and the KD term (0.5).
    ``noise_std``: FedHKD's Gaussian noise on each uploaded class mean
    (official code: 2.0; 0 = off). ``share_model``: also average the models
    (FedAvg), as FedHKD's official code does (``upload_model = True``);
    FedProto never shares them. ``weighting``: ``count`` or ``uniform``
    aggregation over clients (:func:`~chillfl.protocols.knowledge.aggregate_means`).
    """

    method: str = ""
    lam: float | None = None
    kd_weight: float | None = None
    temperature: float = 0.5
    noise_std: float | None = None
    share_model: bool | None = None
    weighting: Weighting = "count"

    def validate(self, section: str) -> None:
        require(self.method in METHODS, f"{section}.method", f"unknown value {self.method!r}; allowed: {', '.join(sorted(METHODS))}")
        for name in ("lam", "kd_weight", "noise_std"):
            value = vars(self)[name]
            require(value is None or value >= 0, f"{section}.{name}", f"must be >= 0, got {value}")
        require(self.temperature > 0, f"{section}.temperature", f"must be > 0, got {self.temperature}")
        if self.method == "fedproto":
            for name in ("kd_weight", "noise_std"):
                require(not vars(self)[name], f"{section}.{name}", "is FedHKD's; FedProto shares prototypes only")
            require(not self.share_model, f"{section}.share_model", "FedProto never shares models; use method = 'fedhkd'")

    def resolved(self) -> "PrototypeSettings":
        """The method's defaults filled in where the table leaves an option unset."""
        d = METHODS[self.method]
        return PrototypeSettings(
            self.method,
            float(d["lam"] if self.lam is None else self.lam),
            float(d["kd_weight"] if self.kd_weight is None else self.kd_weight),
            self.temperature,
            float(d["noise_std"] if self.noise_std is None else self.noise_std),
            bool(d["share_model"] if self.share_model is None else self.share_model),
            self.weighting,
        )


@dataclass(frozen=True)
class PrototypeSettings:
    """``[prototypes]`` with every default resolved (see :class:`PrototypeOptions`)."""

    method: str
    lam: float
    kd_weight: float
    temperature: float
    noise_std: float
    share_model: bool
    weighting: Weighting


@dataclass(frozen=True)
class PrototypeMethod:
    """A registered ``[prototypes]`` method: its options (shared), its defaults, a one-line summary."""

    options: type
    defaults: Mapping[str, Any]
    summary: str

    def __getitem__(self, key: str) -> Any:
        return self.defaults[key]


METHODS: dict[str, PrototypeMethod] = {
    "fedproto": PrototypeMethod(
        PrototypeOptions, {"lam": 1.0, "kd_weight": 0.0, "noise_std": 0.0, "share_model": False},
        "class prototypes only (lam = 1); models stay on the clients",
    ),
    "fedhkd": PrototypeMethod(
        PrototypeOptions, {"lam": 0.05, "kd_weight": 0.05, "noise_std": 2.0, "share_model": True},
        "prototypes + soft predictions (lam = kd_weight = 0.05, noise_std = 2, share_model = true)",
    ),
}


def parse_prototypes(table: Mapping[str, Any]) -> PrototypeSettings:
    """The ``[prototypes]`` table, checked, with the method's defaults filled in."""
    if not isinstance(table.get("method"), str):
        raise ConfigError(f"{SECTION}.method", f"is required; allowed: {', '.join(sorted(METHODS))}")
    options: PrototypeOptions = parse_options(PrototypeOptions, dict(table), SECTION)
    return options.resolved()

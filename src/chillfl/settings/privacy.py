"""The ``[privacy]`` table: which differential-privacy mechanism a run applies, and its budget (docs/privacy.md).

Typed and checked here, below the config; the mechanisms themselves live in :mod:`chillfl.privacy`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

from chillfl.options import require

MECHANISMS = ("none", "dp-fedavg", "dp-sgd", "local")


@dataclass(frozen=True)
class PrivacyConfig:
    """Differential privacy (docs/privacy.md): ``dp-fedavg`` (client-level, server noise), ``dp-sgd`` (sample-level), ``local``.

    ``clip_norm``: the L2 bound C on each client's update (``dp-fedavg``, ``local``) or each sample's
    gradient (``dp-sgd``). ``noise_multiplier``: sigma, the Gaussian noise's standard deviation in units
    of C; unless ``target_epsilon`` > 0 picks it for the planned rounds before the run starts.
    ``delta``: the delta at which every round's ``epsilon`` is reported. ``accountant``: Opacus's
    ``rdp`` (Renyi DP, Mironov 2017) or ``prv`` (privacy random variables, Gopi et al. 2021).
    ``row_norm``: under the soft-label protocol (``local`` only), the norm each uploaded row is clipped in.
    ``adjacency``: the neighbouring inputs epsilon is for. ``replace``: any two clipped values of a client
    (local DP's definition; sensitivity 2C); ``add_remove``: a value against none (sensitivity C), the only
    relation Opacus's subsampled accountants bound; ``auto``: ``replace`` for ``local``, else ``add_remove``.
    ``target_quantile`` > 0 (``dp-fedavg``): adaptive clipping (Andrew et al. 2021): C moves geometrically,
    at rate ``clip_lr``, toward that quantile of the clients' update norms, from a count noised with std
    ``count_noise`` (0: max(clients_per_round / 20, noise_multiplier)); ``clip_norm`` is its start.
    """

    mechanism: Literal["none", "dp-fedavg", "dp-sgd", "local"] = "none"
    clip_norm: float = 1.0
    noise_multiplier: float = 1.0
    target_epsilon: float = 0.0
    delta: float = 1e-5
    accountant: Literal["rdp", "prv"] = "rdp"
    row_norm: Literal["l2", "l1"] = "l2"
    adjacency: Literal["auto", "replace", "add_remove"] = "auto"
    target_quantile: float = 0.0
    clip_lr: float = 0.2
    count_noise: float = 0.0

    SWITCH: ClassVar[str] = "mechanism"
    """The option that turns the table on: options written while no run of a config sets it are refused (``chillfl.config.check_switches``)."""

    @classmethod
    def switch_values(cls) -> tuple[str, ...]:
        """What :attr:`SWITCH` may be set to (for the refusal's message)."""
        return MECHANISMS

    @property
    def enabled(self) -> bool:
        return self.mechanism != "none"

    @property
    def sensitivity(self) -> float:
        """The clipped release's L2 sensitivity in units of C under :attr:`adjacency`: 2 (any two values in a ball of radius C) or 1."""
        replace = self.adjacency == "replace" or (self.adjacency == "auto" and self.mechanism == "local")
        return 2.0 if replace else 1.0

    def validate(self, section: str) -> None:
        if not self.enabled:
            return
        require(math.isfinite(self.clip_norm) and self.clip_norm > 0, f"{section}.clip_norm", f"must be > 0 (the L2 bound on what is clipped), got {self.clip_norm}")
        require(0 < self.delta < 1, f"{section}.delta", f"must be in (0, 1), got {self.delta}")
        require(
            math.isfinite(self.noise_multiplier) and self.noise_multiplier > 0 or self.target_epsilon > 0,
            f"{section}.noise_multiplier",
            f"must be > 0 (sigma = 0 adds no noise: epsilon would be infinite), got {self.noise_multiplier}; or set target_epsilon",
        )
        require(0 <= self.target_quantile < 1, f"{section}.target_quantile", f"must be in [0, 1) (0: fixed clipping), got {self.target_quantile}")
        require(math.isfinite(self.clip_lr) and self.clip_lr > 0, f"{section}.clip_lr", f"must be > 0, got {self.clip_lr}")
        require(math.isfinite(self.count_noise) and self.count_noise >= 0, f"{section}.count_noise", f"must be >= 0 (0: the default), got {self.count_noise}")
        require(math.isfinite(self.target_epsilon) and self.target_epsilon >= 0, f"{section}.target_epsilon", f"must be >= 0 (0: use noise_multiplier), got {self.target_epsilon}")
        require(
            self.adjacency != "replace" or self.mechanism == "local",
            f"{section}.adjacency",
            f"'replace' is accounted for 'local' only (q = 1, sensitivity 2C); {self.mechanism!r} is subsampled, and Opacus's accountants bound add/remove neighbours: use 'auto' or 'add_remove'",
        )

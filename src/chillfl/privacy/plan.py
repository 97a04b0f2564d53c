"""A run's privacy plan: the mechanism with its noise decided, what the aggregator, the local step and the accountant read.

Checked against: Mironov 2017 Prop. 7 / Dwork & Roth 2014 Thm A.1 (a Gaussian of std sigma C on a release of L2
sensitivity s C is accounted as noise multiplier sigma / s), Opacus's accountants (add/remove neighbours, s = 1),
2026-12-02.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chillfl.privacy.spec import MechanismSpec, Noise

if TYPE_CHECKING:
    from chillfl.privacy.accounting import Orders


@dataclass(frozen=True)
class PrivacyPlan:
    """The run's mechanism with its noise decided (``target_epsilon`` resolved) and what the accountant needs."""

    mechanism: str
    """The name the config gave it (messages)."""
    spec: MechanismSpec[Any]
    options: Any
    """The mechanism's own options, settled (:attr:`MechanismSpec.settle`)."""
    noise: Noise
    delta: float
    accountant: str
    protocol: str = "parameters"
    sensitivity: float = 1.0
    """The release's L2 sensitivity in units of C: 2 under replace-one adjacency (any two clipped values of a
    client), 1 for add/remove. The accountant charges a Gaussian of ``accounted_sigma``."""
    rdp_orders: Orders = "opacus"
    """The RDP accountant's orders (``privacy.rdp_orders``): the ledger's and ``target_epsilon``'s."""

    @property
    def clip_norm(self) -> float:
        return self.noise.clip_norm

    @property
    def noise_multiplier(self) -> float:
        return self.noise.noise_multiplier

    @property
    def accounted_sigma(self) -> float:
        """The noise multiplier per unit of sensitivity: what the accountant's Gaussian steps are charged at."""
        return self.noise_multiplier / self.sensitivity

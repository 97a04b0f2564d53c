"""A run's privacy plan: the mechanism with its noise decided, what the aggregator, the local step and the accountant read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PrivacyPlan:
    """The run's mechanism with its noise decided (``target_epsilon`` resolved) and what the accountant needs."""

    mechanism: str
    clip_norm: float
    noise_multiplier: float
    delta: float
    accountant: str
    client_rate: float
    """dp-fedavg: q = clients_per_round / num_clients (fixed-size sampling accounted as Poisson at that rate)."""
    expected: int
    """dp-fedavg's fixed denominator: clients_per_round."""
    batch_size: int
    epochs: int
    protocol: str = "parameters"
    row_norm: str = "l2"
    target_quantile: float = 0.0
    """> 0: adaptive clipping toward this quantile of the update norms (dp-fedavg)."""
    clip_lr: float = 0.2
    count_noise: float = 0.0
    """The std sigma_b of the noise on the clipped-clients count (resolved: never 0 when adaptive)."""
    sensitivity: float = 1.0
    """The release's L2 sensitivity in units of C: 2 for ``local`` under replace-one adjacency (any two clipped
    values of a client), 1 for add/remove. The accountant charges a Gaussian of ``accounted_sigma``."""

    @property
    def accounted_sigma(self) -> float:
        """The noise multiplier per unit of sensitivity: what the accountant's Gaussian steps are charged at."""
        return self.noise_multiplier / self.sensitivity

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

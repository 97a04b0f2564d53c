"""``local``: each client clips and noises its own release: its model update, or under soft-label sharing each row it uploads.

The server sees who sent what, so sampling does not amplify: one Gaussian release (q = 1) per client and round
on its own history, and the neighbours are any two clipped values of a client (``adjacency = "auto"`` is
``replace``, sensitivity 2C). Updates: :class:`chillfl.privacy.aggregate.PrivateAggregation` with each client's
own noise stream; rows: :class:`chillfl.privacy.softlabels.RowNoise`, clipped in ``row_norm``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Sequence

from chillfl.privacy.spec import Accounting, Charge, MechanismSpec, Noise, Participant, RunSizes

if TYPE_CHECKING:
    from chillfl.aggregation.base import Aggregator
    from chillfl.privacy.aggregate import WeightedMean
    from chillfl.privacy.softlabels import RowNoise


@dataclass(frozen=True)
class LocalOptions:
    """``row_norm``: under the soft-label protocol, the norm each uploaded row is clipped in (an L1 bound C is also an L2 bound C)."""

    row_norm: Literal["l2", "l1"] = "l2"


def accounts(options: LocalOptions, sizes: RunSizes) -> Accounting:
    """A client's own noised release (soft-labels: each row) each round it takes part: no amplification, no bound on delta."""
    return Accounting(((1.0, sizes.rounds),))


def charges(options: LocalOptions, sizes: RunSizes, participants: Sequence[Participant]) -> list[Charge]:
    return [Charge(f"client {p.client_id}", 1.0) for p in participants]


def aggregator(options: LocalOptions, noise: Noise, base: WeightedMean) -> Aggregator:
    from chillfl.privacy.aggregate import PrivateAggregation

    return PrivateAggregation(base, client_noise=True, clip_norm=noise.clip_norm, noise_multiplier=noise.noise_multiplier, expected=noise.sizes.per_round,
                              seed=noise.seed, exempt=noise.exempt, nonnegative=noise.nonnegative, frozen=noise.frozen)


def rows(options: LocalOptions, noise: Noise, probabilities: bool) -> RowNoise:
    from chillfl.privacy.softlabels import RowNoise

    return RowNoise(noise.clip_norm, noise.noise_multiplier, options.row_norm, noise.seed, probabilities)


SPEC = MechanismSpec(
    "local",
    LocalOptions,
    accounts,
    summary="each client clips its update (soft-labels: each row) to C and adds its own N(0, (sigma C)^2)",
    charges=charges,
    aggregator=aggregator,
    rows=rows,
    adjacency="replace",
    subsampled=False,
    any_rule=True,  # each client's release is private before the server's rule reads it: median, Krum, ... post-process it
)

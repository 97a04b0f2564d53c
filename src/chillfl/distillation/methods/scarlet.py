"""SCARLET (Azuma et al.): Enhanced ERA, Eq. (4): zhat_i = zbar_i^beta / sum_j zbar_j^beta, and the synchronized cache D (Algorithm 2).

Checked against papers/scarlet.txt Eq. 4, Algorithm 1, Sec. IV-A/B (D = 50, beta = 2.0 / 1.0 / 1.25) and
kitsuyaazuma/SCARLET ``algorithm/scarlet.py`` (``SCARLETServerHandler.global_update``), 2026-12-02.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from chillfl.distillation.era import enhanced_era, power_sharpen, require_beta
from chillfl.protocols.softlabels.messages import SoftLabelUplink
from chillfl.protocols.softlabels.method import Aggregate, SoftLabelMethod, SoftLabelSpec, stack_uplinks


@dataclass(frozen=True)
class EnhancedERAOptions:
    """SCARLET's sharpness beta (Sec. IV-B: 2.0 CIFAR-10 alpha=0.05, 1.0 alpha=0.3, 1.25 CIFAR-100/Tiny ImageNet)."""

    beta: float = 2.0

    def validate(self, section: str) -> None:
        require_beta(self.beta, f"{section}.beta")


@dataclass(frozen=True)
class SCARLETOptions(EnhancedERAOptions):
    """SCARLET's own option: beta of Enhanced ERA (2.0 for CIFAR-10 alpha = 0.05, 1.0 for alpha = 0.3)."""


class SCARLET(SoftLabelMethod[SCARLETOptions]):
    """SCARLET's server half: Enhanced ERA on the clients' mean soft-labels (the cache is the protocol's)."""

    def combine(self, mean: torch.Tensor) -> torch.Tensor:
        return power_sharpen(mean, self.options.beta)

    def aggregate(self, round: int, indices: torch.Tensor, uplinks: Sequence[SoftLabelUplink]) -> Aggregate:
        stack, keep = stack_uplinks(indices, uplinks, self.num_classes)
        if bool(keep.all()):  # the block's Enhanced ERA, exactly Eq. (4)
            rows = enhanced_era(stack, self.options.beta)
            return Aggregate(torch.ones(len(indices), dtype=torch.bool), rows, rows)
        return super().aggregate(round, indices, uplinks)


SPEC = SoftLabelSpec(
    "scarlet", SCARLETOptions, SCARLET, summary="Enhanced ERA (Eq. 4) + synchronized cache (Alg. 2)", default_cache_duration=50,
)

"""DS-FL (Itahara et al. 2023): ERA, SCARLET Eq. (2): zhat = softmax(zbar / T); full-precision uploads, no cache.

Checked against: kitsuyaazuma/SCARLET (branch ``reproducibility``) ``src/algorithm/dsfl.py`` and ``src/config/algorithm/dsfl.yaml`` (T = 0.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import torch

from chillfl.distillation.era import era, require_era_temperature, tempered_softmax
from chillfl.protocols.softlabels.messages import SoftLabelUplink
from chillfl.protocols.softlabels.method import Aggregate, SoftLabelMethod, SoftLabelSpec, stack_uplinks


@dataclass(frozen=True)
class ERAOptions:
    """DS-FL's ERA temperature (SCARLET Table V: 0.1 CIFAR-10, 0.01 CIFAR-100, 0.05 Tiny ImageNet)."""

    temperature: float = 0.1

    def validate(self, section: str) -> None:
        require_era_temperature(self.temperature, f"{section}.temperature")


@dataclass(frozen=True)
class DSFLOptions(ERAOptions):
    """DS-FL's own options: the ERA temperature T (SCARLET Table V: 0.1 for CIFAR-10) and the aggregation.

    ``aggregation = "mean"`` replaces ERA by the plain mean (an ablation, not
    DS-FL): it is SCARLET with beta = 1 and D = 0, bit for bit.
    """

    aggregation: Literal["era", "mean"] = "era"


class DSFL(SoftLabelMethod[DSFLOptions]):
    """DS-FL's server half: ERA on the clients' mean soft-labels."""

    def combine(self, mean: torch.Tensor) -> torch.Tensor:
        return tempered_softmax(mean, self.options.temperature) if self.options.aggregation == "era" else mean

    def aggregate(self, round: int, indices: torch.Tensor, uplinks: Sequence[SoftLabelUplink]) -> Aggregate:
        stack, keep = stack_uplinks(indices, uplinks, self.num_classes)
        if bool(keep.all()) and self.options.aggregation == "era":  # the block's ERA, exactly Eq. (2)
            rows = era(stack, self.options.temperature)
            return Aggregate(torch.ones(len(indices), dtype=torch.bool), rows, rows)
        return super().aggregate(round, indices, uplinks)


SPEC = SoftLabelSpec("dsfl", DSFLOptions, DSFL, summary="ERA (Eq. 2), no cache")

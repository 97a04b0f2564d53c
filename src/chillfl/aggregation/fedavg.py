"""FedAvg's registry entry (the rule itself, :class:`~chillfl.aggregation.base.FedAvg`, lives with the contract it defines)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from chillfl.aggregation.base import FedAvg
from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm
from chillfl.capabilities import Capabilities


@dataclass(frozen=True)
class FedAvgOptions:
    """``weighting``: ``samples`` (m_i / m, McMahan et al.) or ``uniform`` (1/|S|, the FLex&Chill authors' code)."""

    weighting: Literal["samples", "uniform"] = "samples"


SPEC = register_algorithm(
    "fedavg",
    AlgorithmSpec(FedAvgOptions, lambda o, ctx: (FedAvg(o.weighting), []), "FedAvg (McMahan et al. 2017)", capabilities=Capabilities(takes_weights=True)),
)

"""FedAvg's registry entry (the rule itself, :class:`~chillfl.aggregation.base.FedAvg`, and its options live with the contract it defines)."""

from __future__ import annotations

from chillfl.aggregation.base import FedAvg, FedAvgOptions
from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm
from chillfl.capabilities import Capabilities


SPEC = register_algorithm(
    "fedavg",
    AlgorithmSpec(FedAvgOptions, lambda o, ctx: (FedAvg(o.weighting), []), "FedAvg (McMahan et al. 2017)", capabilities=Capabilities(takes_weights=True)),
)

"""FedAvg's registry entry (the rule itself, :class:`~chillfl.aggregation.base.FedAvg`, and its options live with the contract it defines).

Checked (2026-12) against McMahan et al. 2017 (Algorithm 1), Flower's ``FedAvg`` strategy, FL-bench, PFLlib and the
FedProx authors' baseline (litian96/FedProx ``flearn/trainers/fedavg.py``): weights n_k / n over the round's reporting
clients; ``max(1, floor(C N))`` clients without replacement, one seeded draw a round; server step 1 (no global lr);
float buffers (BN running statistics) averaged with the same weights, integer ones (``num_batches_tracked``) the max
(Flower and FL-bench average them, PFLlib leaves buffers out: they matter only to BN with ``momentum=None``); the
FedProx paper's FedAvg drops stragglers: ``federation.straggler_policy = "drop"``.
"""

from __future__ import annotations

from chillfl.aggregation.base import FedAvg, FedAvgOptions
from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm
from chillfl.capabilities import Capabilities


SPEC = register_algorithm(
    "fedavg",
    AlgorithmSpec(FedAvgOptions, lambda o, ctx: (FedAvg(o.weighting), []), "FedAvg (McMahan et al. 2017)", capabilities=Capabilities(takes_weights=True)),
)

"""MOON (Li, He & Song, CVPR 2021): FedAvg aggregation + the model-contrastive local term.

The server side only keeps what the term needs: every client's state after
its last local training (its "previous local model", the paper's w_i^{t-1}),
sent back with the global model when the client is next sampled. The
official code keeps the same models on the server side too (``old_nets_pool``
with ``model_buffer_size = 1``). Aggregation is FedAvg (Algorithm 1).

Choices
-------
* A client that has never trained has no previous model. The official code
  trains round 0 with an empty pool (its contrastive logits hold the
  positive pair only, so l_con = 0); here such a client gets weight 0 for
  the term (``moon_weight = 0``) in every round until it has trained once,
  which is the official round 0 and covers partial participation.
* One previous model (the official ``model_buffer_size`` default 1); a
  longer pool of negatives is not implemented.
* The previous model is the client's full state (parameters and batch-norm
  statistics), run in eval mode like the official code's frozen models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from chillfl.aggregation.base import (
    ClientResult,
    Downlink,
    FedAvg,
    Params,
    check_state_keys,
    client_params_state,
    load_client_params,
)
from chillfl.aggregation.client_states import ClientParams
from chillfl.options import require


@dataclass(frozen=True)
class MoonOptions:
    """``mu``: weight of l_con (paper: 5 on CIFAR-10, 1 on CIFAR-100 and Tiny-ImageNet); ``tau``: temperature (0.5)."""

    mu: float = 5.0
    tau: float = 0.5

    def validate(self, section: str) -> None:
        require(self.mu >= 0, f"{section}.mu", f"must be >= 0, got {self.mu}")
        require(self.tau > 0, f"{section}.tau", f"must be > 0, got {self.tau}")


class Moon(FedAvg):
    """FedAvg that remembers each client's last trained state and sends it as ``moon_prev``."""

    def __init__(self, options: MoonOptions = MoonOptions()) -> None:
        self.options = options
        self.previous = ClientParams()  # a copy, flat on the CPU: never a view pinning the executor's chunk

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        prev = self.previous.get(client_id)
        weight = self.options.mu if prev is not None else 0.0
        context: dict[str, Any] = {
            "moon_weight": weight,
            "moon_tau": self.options.tau,
            "moon_global": global_params,
            "moon_prev": prev if prev is not None else global_params,
        }
        return Downlink(context=context, local=("moon_global", "moon_prev"))

    def aggregate(
        self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None
    ) -> Params:
        for r in results:
            self.previous[r.client_id] = r.params
        return super().aggregate(global_params, results, round, weights)

    def state_dict(self) -> dict[str, Any]:
        """Every client's previous local model (clients never sampled have none)."""
        return {"previous": client_params_state(self.previous)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("previous",), "MOON")
        self.previous = ClientParams.of(load_client_params(state["previous"]))

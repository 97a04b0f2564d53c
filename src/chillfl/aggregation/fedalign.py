"""FedAlign's registry entry: FedAvg plus the final-stage Lipschitz alignment term (:mod:`chillfl.training.fedalign`).

Checked (2026-12): the term, its defaults and the sources it was checked against are in
:mod:`chillfl.training.fedalign`; the server is FedAvg by sample counts, as the official ``methods/base.py``'s
``Base_Server.operations`` (whose n_i is the client's batches times the batch size).
"""

from __future__ import annotations

from torch import nn

from chillfl.aggregation.base import FedAvg
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, Built, register_algorithm
from chillfl.capabilities import FORWARD, Capabilities, Cost
from chillfl.errors import ConfigError
from chillfl.training.fedalign import FedAlignOptions, FedAlignTerm


def _build(options: FedAlignOptions, ctx: BuildContext) -> Built:
    """FedAvg with FedAlign's term; the model must have a final stage that runs at reduced width."""
    from chillfl.models.parts import SlimStaged

    model: nn.Module = ctx.model
    stage = model.slim_stage if isinstance(model, SlimStaged) else None
    if not isinstance(stage, str):
        raise ConfigError("model.name", "FedAlign needs a ResNet whose final stage runs at reduced width: resnet20, resnet32 or resnet18_fedchill")
    return FedAvg(), [FedAlignTerm(stage, options)]


SPEC = register_algorithm(
    "fedalign",
    AlgorithmSpec(
        FedAlignOptions,
        _build,
        "FedAvg + final-stage Lipschitz alignment (Mendieta et al. 2022)",
        # each step runs the final stage again at reduced width, forward and backward (a third of ResNet-20's layers), and
        # the power iterations of both estimates: measured 1.44x FedAvg's CPU time (resnet20, benchmarks/estimates.py,
        # 2026-12-02), priced as a forward pass more a step
        capabilities=Capabilities(takes_weights=True, cost=Cost(step_passes=1 + FORWARD)),
    ),
)

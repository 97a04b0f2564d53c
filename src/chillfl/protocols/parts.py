"""The built parts of one run that every protocol's builder reads.

Kept below the protocols (and above models, data and training) so that each
protocol module builds itself from typed parts without importing
:mod:`chillfl.experiment`, which builds these parts and picks the protocol.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from chillfl.aggregation.base import Aggregator
from chillfl.config import RunConfig
from chillfl.data import FederatedData
from chillfl.models import build_model, count_parameters
from chillfl.models.assign import ModelPlan, arch_section, plan_models
from chillfl.temperature.base import TemperaturePolicy
from chillfl.seeds import derive_seed
from chillfl.training.local import LocalSpec, model_state


@dataclass
class Experiment:
    """The built parts of one run, on ``device``; :func:`chillfl.experiment.build_protocol` composes them.

    ``aggregator`` is None when the run's protocol averages no models (soft-label sharing).
    """

    config: RunConfig
    data: FederatedData
    model: nn.Module
    initial_state: dict[str, torch.Tensor]
    aggregator: Aggregator | None
    policy: TemperaturePolicy
    spec: LocalSpec
    device: torch.device = torch.device("cpu")
    other_models: tuple[nn.Module, ...] = ()
    """Architectures 1.. of ``model.assign`` / ``model.groups``, built (and their heads checked) with the run's other parts:
    :func:`build_client_models` places these rather than building them again at each protocol check, build and summary."""


@dataclass(frozen=True)
class ClientModels:
    """Every architecture the clients train: templates, seeded initial states, and who trains which."""

    plan: ModelPlan
    models: tuple[nn.Module, ...]
    states: tuple[dict[str, torch.Tensor], ...]

    def parameter_counts(self) -> list[int]:
        return [count_parameters(m) for m in self.models]


def build_architecture(config: RunConfig, plan: ModelPlan, index: int, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Architecture ``index`` (>= 1) of ``plan``, seeded by its index (the global RNG is left untouched); errors name its section."""
    name, options = RunConfig.component(plan.archs[index])
    return build_model(name, input_shape, num_classes, options, section=arch_section(plan, index), seed=derive_seed(config.seed, "init", index))


def build_client_models(exp: Experiment) -> ClientModels:
    """Architecture 0 is the experiment's model (same seeded weights); others are ``exp.other_models`` (seeded by their
    index), or built here for an experiment made without them."""
    config = exp.config
    plan = plan_models(config.model, exp.data.num_clients)
    others = exp.other_models or tuple(
        build_architecture(config, plan, i, tuple(exp.data.dataset.input_shape), exp.data.num_classes) for i in range(1, len(plan.archs))
    )
    models, states = [exp.model], [exp.initial_state]
    for model in others:
        model.to(exp.device)
        models.append(model)
        states.append({k: v.to(exp.device) for k, v in model_state(model).items()})
    return ClientModels(plan, tuple(models), tuple(states))

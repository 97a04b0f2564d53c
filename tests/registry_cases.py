"""Every registered method as a tiny run's config overrides: the CUDA suite and the device-mixing check share them.

Generated from the registries (algorithms, soft-label methods, prototype methods,
temperature policies) and the config's client optimisers, so that a new method is
covered without editing a test; plus SGD with momentum under a per-step cosine schedule.
"""

from __future__ import annotations

import typing
from typing import Any, Iterator

from chillfl.aggregation.registry import algorithm_names
from chillfl.config import ClientConfig
from chillfl.settings.distillation import method_names
from chillfl.settings.prototypes import method_names as prototype_method_names
from chillfl.temperature import policy_names

TINY: dict[str, Any] = {
    "dataset.name": "digits",
    "model.name": "mlp",
    "federation.num_clients": 4,
    "federation.clients_per_round": 3,
    "federation.rounds": 2,
    "client.batch_size": 32,
    "client.lr": 0.05,
    "eval.client_split_size": 20,
}
"""Two rounds: the soft-label methods distil from round 2 on."""

PUBLIC = {"distillation.public_size": 120, "distillation.subset_size": 40}
NEEDS: dict[str, dict[str, Any]] = {
    "algorithm-fedalign": {"model.name": "resnet20", "federation.num_clients": 3, "federation.clients_per_round": 2},  # a reduced-width final stage
    "algorithm-norm_bound": {"algorithm.max_norm": 0.5},
    "algorithm-fedbn": {"model.name": "flexchill_cnn", "model.batch_norm": True},  # batch-norm layers to keep local  # M has no default: the updates' scale is the run's
}
"""Settings a method cannot run without (its ConfigError says so); every other case runs ``TINY`` as is."""


def registry_cases() -> Iterator[tuple[str, dict[str, Any]]]:
    """(id, overrides) of every registered algorithm, soft-label method, prototype method and temperature policy."""
    cases: list[tuple[str, dict[str, Any]]] = [(f"algorithm-{n}", {"algorithm.name": n}) for n in algorithm_names()]
    cases += [(f"distillation-{n}", {"distillation.method": n, **PUBLIC}) for n in method_names()]
    cases += [(f"prototypes-{n}", {"prototypes.method": n}) for n in prototype_method_names()]
    cases += [(f"temperature-{n}", {"temperature.policy": n}) for n in policy_names()]
    optimizers = typing.get_args(typing.get_type_hints(ClientConfig)["optimizer"])  # the config's own list: a new optimiser is covered
    cases += [(f"client-optimizer-{n}", {"client.optimizer": n}) for n in optimizers if n != "sgd"]  # sgd: every other case
    cases += [("client-lr_schedule-cosine-steps", {"client.lr_schedule": "cosine", "client.lr_schedule_over": "steps", "client.momentum": 0.9})]
    for case, over in cases:
        yield case, {**TINY, **over, **NEEDS.get(case, {})}

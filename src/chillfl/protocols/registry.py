"""Which protocol runs: the one registry, keyed by :attr:`chillfl.config.RunConfig.protocol`.

``RunConfig.protocol`` names the protocol (derived in that one place from
``[distillation]`` / ``[prototypes]``); everything that depends on which
protocol runs (building it, its checks, whether models travel, whether it
needs an aggregator, what Flower carries) reads the entry below instead of
testing the config's tables again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from chillfl.capabilities import Capabilities, Cost
from chillfl.settings.distillation import DistillationSetup
from chillfl.settings.prototypes import PrototypeSettings
from chillfl.config import RunConfig
from chillfl.data import FederatedData
from chillfl.engine.protocol import ServerProtocol
from chillfl.protocols.common import Evaluation
from chillfl.protocols.parameters import build_parameter_sharing
from chillfl.protocols.parts import Experiment
from chillfl.protocols.prototypes import build_prototype_sharing, check_prototype_sharing, prototype_cost, share_models
from chillfl.protocols.softlabels.build import build_soft_label_sharing, check_distillation, soft_label_cost


def _always(config: RunConfig) -> bool:
    return True


def _never(config: RunConfig) -> bool:
    return False


def _no_cost(config: RunConfig) -> Cost:
    return Cost()


def _no_public_set(config: RunConfig) -> int:
    return 0


def _prototype_settings(config: RunConfig) -> PrototypeSettings:
    settings = config.prototype_settings
    assert settings is not None, "the prototype protocol runs only when [prototypes] is set"
    return settings


def _distillation_setup(config: RunConfig) -> DistillationSetup:
    setup = config.distillation_setup
    assert setup is not None, "the soft-label protocol runs only when [distillation] names a method"
    return setup


@dataclass(frozen=True)
class ProtocolKind:
    """One protocol: how it is built and what the rest of the run needs to know about it."""

    name: str
    title: str
    """How messages name it: "a {title} run"."""
    build: Callable[[Experiment, Evaluation], ServerProtocol]
    method_table: str | None
    """The config table that names its method (None: ``[algorithm]`` does)."""
    method_of: Callable[[RunConfig], str]
    """The method that table names."""
    uses_aggregator: bool
    """Whether it averages models with ``[algorithm]``'s aggregator (else none is built)."""
    models_travel: Callable[[RunConfig], bool]
    """Whether models go over the wire (then every client must train the same architecture)."""
    travel_reason: str
    """Why heterogeneous clients are refused when models travel."""
    own_objective: str | None = None
    """Why every ``[objective]`` term (``proximal_mu`` and ``terms``) is refused (None: they are allowed); one reason that
    holds for any term, a batch term too: the refusal adds what to leave unset."""
    check_data: Callable[[RunConfig, FederatedData], object] | None = None
    """Checks its options against the data, before any model is built."""
    check: Callable[[Experiment], object] | None = None
    """Checks the built parts, before anything is written."""
    bytes_figure: bool = False
    """Whether a run's report plots accuracy against the bytes sent (SCARLET Fig. 7)."""
    on_flower: str | None = None
    """Why chillfl.flower does not carry it (None: it does)."""
    method_capabilities: Callable[[RunConfig], Capabilities] | None = None
    """What the method its table names declares (None: ``[algorithm]``'s, read through the aggregation registry)."""
    method_figures: Callable[[RunConfig], tuple[str, ...]] | None = None
    """The run figures the method its table names declares in its spec's ``figures`` (None: ``[algorithm]``'s, where
    an aggregator runs; the runner draws them after the common ones)."""
    cost: Callable[[RunConfig], Cost] = _no_cost
    """The work the protocol itself adds to a round beyond local training, whatever its method (time estimates)."""
    public_size: Callable[[RunConfig], int] = _no_public_set
    """The samples of the public set its clients read (0: none), which prices a method's work over it (``Cost.first_public_pair_flops``)."""
    global_model: Callable[[RunConfig], bool] = _always
    """Whether the run keeps a global model the server scores (``global_acc`` of it, and ``val_acc`` on the server's
    validation split): tuning's global rules read ``val_acc``, so a run without one is refused before any point runs."""

    def method(self, config: RunConfig) -> str:
        """The method the config names for it (``[distillation] method``, ``[prototypes] method`` or ``[algorithm] name``)."""
        return self.method_of(config)


PROTOCOLS: dict[str, ProtocolKind] = {
    "parameters": ProtocolKind(
        name="parameters",
        title="parameter-sharing",
        build=build_parameter_sharing,
        method_table=None,
        method_of=lambda config: str(config.algorithm.get("name")),
        uses_aggregator=True,
        models_travel=_always,
        travel_reason="[distillation] or [prototypes] with share_model = false",
    ),
    "prototypes": ProtocolKind(
        name="prototypes",
        title="prototype-sharing",
        build=build_prototype_sharing,
        method_table="prototypes",
        method_of=lambda config: str(config.prototypes.get("method")),
        method_capabilities=lambda config: _prototype_settings(config).capabilities,
        uses_aggregator=True,
        models_travel=share_models,
        travel_reason="[prototypes] share_model = true averages models",
        global_model=share_models,  # else each client keeps its own model: global_acc is their mean, and no val_acc
        own_objective="the prototype-sharing protocol ([prototypes]) trains with its own objective",
        check=check_prototype_sharing,
        cost=prototype_cost,
        on_flower="chillfl.flower carries parameter sharing and soft-label sharing, not a [prototypes] method",
    ),
    "softlabels": ProtocolKind(
        name="softlabels",
        title="soft-label",
        build=build_soft_label_sharing,
        method_table="distillation",
        method_of=lambda config: str(config.distillation.get("method")),
        method_capabilities=lambda config: _distillation_setup(config).spec.capabilities,
        method_figures=lambda config: _distillation_setup(config).spec.figures,
        uses_aggregator=False,
        models_travel=_never,
        travel_reason="",
        own_objective="the soft-label protocol trains clients with the base loss only: no objective terms",
        check_data=check_distillation,
        cost=soft_label_cost,
        public_size=lambda config: _distillation_setup(config).common.public_size,
        global_model=lambda config: _distillation_setup(config).spec.collaborative,  # no collaboration: no server model
        bytes_figure=True,
    ),
}


def protocol_of(config: RunConfig) -> ProtocolKind:
    """The registry's entry for the protocol ``config`` runs."""
    return PROTOCOLS[config.protocol]

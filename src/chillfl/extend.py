"""The public extension API: write your own method outside the package, against these types.

A method is made of up to four parts, each one small class (docs/extending.md is the tutorial,
docs/architecture.md the reference of the seams they plug into):

* **an aggregator** (server rule, :class:`Aggregator`): it receives the global state and the
  round's :class:`ClientResult` s (sorted by client id) and returns the next global state; it
  may send each client extra :class:`Downlink` context, and owns the server's state between
  rounds (``state_dict`` / ``load_state_dict``, for bitwise resume). Subclass :class:`FedAvg`
  to inherit the no-op parts;
* **its client half** (:class:`ClientHalf`, optional, from ``Aggregator.client_half()``): it
  runs on the client around local training: ``prepare`` receives the client's own state
  (:data:`ClientState`, name -> tensor), the start model and the sent context, and returns the
  model and context to train with; ``finish`` receives the :class:`Trained` outcome and returns
  the client's next state and its :data:`Report` to the server. The runtime keeps the state
  (in checkpoints too); the half holds options only, since it travels to worker processes;
* **local objective terms** (:class:`LossTerm`, or :class:`BatchTerm` for terms that read the
  batch's features): each receives the trainable parameters and the client's :data:`Context`
  and returns a scalar added to the loss; ``reads`` names the context keys it reads
  (:func:`read_table`, :func:`read_number`, :func:`read_tensor` read them typed);
* **a temperature policy** (:class:`TemperaturePolicy`): the softmax temperature each client
  trains with, per round, updated from the clients' local accuracy; where the temperature is
  the client's own (FedChill), its client half (:class:`TemperatureHalf`) keeps it in the
  client's state;
* **a soft-label method** (:class:`SoftLabelMethod` with its :class:`SoftLabelClientHooks`):
  how the server combines the clients' soft-labels on the public set, and what clients upload.

Use them either way, with no global state touched:

* from Python, as instances: ``chillfl.run(config, aggregator=MyRule(), terms=[MyTerm()],
  policy=MyPolicy())`` (and ``chillfl.compare``); each run works on deep copies;
* from a config or the command line, by import path: ``[algorithm] name = "mypkg.rules:MyRule"``,
  ``[temperature] policy = "mypkg.warmup:Warmup"``, ``[distillation] method = "mypkg.sl:Sharpen"``,
  with the class's ``Options`` dataclass parsed and validated like a built-in's options
  (or an :class:`AlgorithmSpec` / :class:`PolicySpec` when the builder needs more, e.g. the
  number of clients, or adds terms); or by a name that an installed distribution registers
  under the ``chillfl.plugins`` entry-point group, which ``chillfl list`` then shows.

This module imports torch (the types are torch's); ``import chillfl`` alone does not.
"""

from __future__ import annotations

from chillfl.aggregation.base import (
    Aggregator,
    ClientHalf,
    ClientResult,
    ClientState,
    Context,
    Downlink,
    FedAvg,
    Params,
    Report,
    Stateless,
    Trained,
    Wire,
    check_state_keys,
    combine,
    load_params,
    own_entries,
    params_state,
    sample_weights,
    weighted_average,
    with_prefix,
)
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext
from chillfl.distillation.cache import SoftLabelUplink
from chillfl.distillation.methods import Aggregate, SoftLabelClientHooks, SoftLabelMethod, stack_uplinks
from chillfl.errors import ConfigError
from chillfl.options import require
from chillfl.settings.distillation import MethodSettings
from chillfl.temperature import PolicySpec
from chillfl.temperature.base import ConstantTemperature, TemperatureHalf, TemperaturePolicy, TemperatureState
from chillfl.training.objective import BatchTerm, ContextError, LossTerm, StepView, Term, read_number, read_table, read_tensor

__all__ = [
    "Aggregate",
    "Aggregator",
    "AlgorithmSpec",
    "BatchTerm",
    "BuildContext",
    "ClientHalf",
    "ClientResult",
    "ClientState",
    "ConfigError",
    "ConstantTemperature",
    "Context",
    "ContextError",
    "Downlink",
    "FedAvg",
    "LossTerm",
    "MethodSettings",
    "Params",
    "PolicySpec",
    "Report",
    "SoftLabelClientHooks",
    "SoftLabelMethod",
    "SoftLabelUplink",
    "Stateless",
    "StepView",
    "TemperatureHalf",
    "TemperaturePolicy",
    "TemperatureState",
    "Term",
    "Trained",
    "Wire",
    "check_state_keys",
    "combine",
    "load_params",
    "own_entries",
    "params_state",
    "read_number",
    "read_table",
    "read_tensor",
    "require",
    "sample_weights",
    "stack_uplinks",
    "weighted_average",
    "with_prefix",
]

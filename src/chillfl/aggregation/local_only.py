"""Local-only: every client trains a model of its own on its own data and never aggregates.

The sanity baseline of personalised FL that does not federate at all (PFLlib's
``Local``, FL-bench's ``Local-Only``): a personalised method that does not
beat it gains nothing from the federation. Client k, sampled in round t,
trains its own model from where its previous participation left it (at its
first, from the initial global model) for the run's local epochs, with the
run's objective and optimiser; its local accuracy measures that model, which
it keeps (its own state, so ``checkpoint.client_models`` saves it).

The server reads nothing (:meth:`LocalOnly.aggregated_keys` is empty), so the
global model stays bitwise at its initial values: its global accuracy is the
initial model's, a constant floor, and means nothing else. The uplink is
priced at 0 model bytes (the parameter protocol prices what the server
reads). Each round is still one local training of the one training path, so
every executor batches it as FedAvg's.

Choices
-------
* The client half is FedBN's :class:`~chillfl.aggregation.fedbn.KeepLocal`
  with every entry of the model (parameters and buffers) kept local: the
  global model only starts a client's first round.
* No options. A temperature policy, the run's ``[objective]`` terms (anchored
  at the global model, i.e. the initial one) and any client optimiser apply
  as in every run. A wrapper that reweights the clients' models (PA3Fed) has
  nothing to reweight: the rule takes no weights, so it is refused, and so
  are the ``[privacy]`` mechanisms that noise a weighted mean of the uploads.
* The downlink prices the initial global model at a client's first round
  only: no entry changes after it, so a returning client is sent nothing
  (:meth:`~chillfl.protocols.parameters.ParameterSharing.held`).
* Like every method here, a client's optimiser state (momentum) starts afresh
  each participation; PFLlib's clients keep their optimiser object between
  rounds. Without momentum the two agree.

Checked (2026-12) against PFLlib (``system/flcore/servers/serverlocal.py``: ``clientAVG`` training each sampled
client's own model, no aggregation) and FL-bench (``src/server/local.py``: every parameter personal, the trained
model stored as the client's): the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from torch import nn

from chillfl.aggregation.base import AggregatorBase, ClientHalf, ClientResult, Params
from chillfl.aggregation.fedbn import KeepLocal
from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm
from chillfl.capabilities import Capabilities

PREFIX = "local."
"""Where a client's own model lives in its state."""


@dataclass(frozen=True)
class LocalOnlyOptions:
    """Local-only takes no options: the run's own local training, on each client's own model."""


class LocalOnly(AggregatorBase):
    """Reads no upload: the global model stays as it was; every client's whole model is its own (:class:`KeepLocal`)."""

    def __init__(self, model: nn.Module) -> None:
        self.keys = frozenset(model.state_dict())

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        return dict(global_params)

    def aggregated_keys(self, global_params: Params) -> tuple[str, ...]:
        """None: the server never reads what the clients train (so no model bytes are priced up)."""
        return ()

    def client_half(self) -> ClientHalf:
        """The client keeps its whole model: it starts each round from its own and keeps the trained one."""
        return KeepLocal(self.keys, PREFIX)


SPEC = register_algorithm(
    "local_only",
    AlgorithmSpec(
        LocalOnlyOptions,
        lambda o, ctx: (LocalOnly(ctx.model), []),
        "each client trains its own model on its own data, never aggregated (a personalised-FL sanity baseline)",
        capabilities=Capabilities(personal_model=True),
    ),
)

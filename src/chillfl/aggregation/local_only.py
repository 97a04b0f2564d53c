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
* One option, ``keep_optimizer_state`` (below). A temperature policy, the run's ``[objective]`` terms (anchored
  at the global model, i.e. the initial one) and any client optimiser apply
  as in every run. A wrapper that reweights the clients' models (PA3Fed) has
  nothing to reweight: the rule takes no weights, so it is refused, and so
  are the ``[privacy]`` mechanisms that noise a weighted mean of the uploads.
* The downlink prices the initial global model at a client's first round
  only: no entry changes after it, so a returning client is sent nothing
  (:meth:`~chillfl.protocols.parameters.ParameterSharing.held`).
* Like every method here, a client's optimiser state (momentum, Adam's
  moments) starts afresh each participation by default; PFLlib's clients keep
  their optimiser object between rounds. Without momentum (plain SGD, PFLlib's
  own optimiser) the two agree. ``keep_optimizer_state = true`` keeps it: the
  state a client's training ends with is its own (under ``local_opt.`` in its
  state, so checkpoints keep it and a resumed run is bitwise the one that never
  stopped), its next training starts from it, and Adam's bias correction counts
  on from the steps taken so far, as ``torch.optim.Adam``'s step count. The
  vectorised executor then trains the round's clients one by one (their Adam
  step counts differ), with the same numbers as the sequential one.

Checked (2026-12) against PFLlib (``system/flcore/servers/serverlocal.py``: ``clientAVG`` training each sampled
client's own model, no aggregation) and FL-bench (``src/server/local.py``: every parameter personal, the trained
model stored as the client's): the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from chillfl.aggregation.base import AggregatorBase, ClientHalf, ClientResult, ClientState, Local, LocalProgram, Params, Personal, Train, own_entries
from chillfl.aggregation.fedbn import KeepLocal
from chillfl.training.local import LocalSpec
from chillfl.training.optim import Carried, OptState
from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm
from chillfl.capabilities import Capabilities

PREFIX = "local."
"""Where a client's own model lives in its state."""


OPTIMIZER = "local_opt."
"""Where a client's kept optimiser state lives in its state (``keep_optimizer_state``): ``local_opt.<slot>.<parameter>``
for each slot of the optimiser (``momentum``; ``exp_avg``, ``exp_avg_sq``) and ``local_opt.steps``, the steps taken so far."""
STEPS = "steps"


@dataclass(frozen=True)
class LocalOnlyOptions:
    """``keep_optimizer_state``: a client's optimiser state (momentum, Adam's moments and step count) carries over from one
    participation to its next, as PFLlib's clients keep their optimiser (false: it starts afresh each time, as every method's)."""

    keep_optimizer_state: bool = False


def carried(state: ClientState) -> Carried:
    """The optimiser state kept in a client's ``state`` (the zero state, at no steps, before its first training)."""
    own = own_entries(state, OPTIMIZER)
    slots: OptState = {}
    for key, t in own.items():
        if key != STEPS:
            slot, name = key.split(".", 1)
            slots.setdefault(slot, {})[name] = t
    return Carried(slots, int(own[STEPS]) if STEPS in own else 0)


def kept(carry: Carried) -> ClientState:
    """Inverse of :func:`carried`: the state entries of ``carry``."""
    out: ClientState = {f"{OPTIMIZER}{slot}.{name}": t for slot, entries in carry.state.items() for name, t in entries.items()}
    out[OPTIMIZER + STEPS] = torch.tensor(carry.steps, dtype=torch.int64)
    return out


@dataclass(frozen=True)
class KeepOptimizer(KeepLocal):
    """:class:`KeepLocal` of the whole model that also keeps the client's optimiser state: its one training starts from
    the state the last one ended with (a :class:`~chillfl.aggregation.base.Personalising` half, so the job carries it)."""

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        """None besides the run's own."""
        return ()

    def train(self, local: Local) -> LocalProgram:
        out = yield Train(local.start, local.context, carry=carried(local.state))
        assert out.carry is not None, "a job that carries an optimiser state returns one"
        return Personal(out.params, out.num_steps, out.mean_loss, state=kept(out.carry))


class LocalOnly(AggregatorBase):
    """Reads no upload: the global model stays as it was; every client's whole model is its own (:class:`KeepLocal`)."""

    def __init__(self, model: nn.Module, options: LocalOnlyOptions = LocalOnlyOptions()) -> None:
        self.keys = frozenset(model.state_dict())
        self.options = options

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        return dict(global_params)

    def aggregated_keys(self, global_params: Params) -> tuple[str, ...]:
        """None: the server never reads what the clients train (so no model bytes are priced up)."""
        return ()

    def client_half(self) -> ClientHalf:
        """The client keeps its whole model: it starts each round from its own and keeps the trained one (and its optimiser
        state with ``keep_optimizer_state``)."""
        return KeepOptimizer(self.keys, PREFIX) if self.options.keep_optimizer_state else KeepLocal(self.keys, PREFIX)


SPEC = register_algorithm(
    "local_only",
    AlgorithmSpec(
        LocalOnlyOptions,
        lambda o, ctx: (LocalOnly(ctx.model, o), []),
        "each client trains its own model on its own data, never aggregated (a personalised-FL sanity baseline)",
        capabilities=Capabilities(personal_model=True, static_global_model=True),  # aggregate() returns the global model unchanged
        makes=(LocalOnly,),
    ),
)

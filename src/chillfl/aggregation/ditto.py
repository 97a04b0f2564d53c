"""Ditto (Li, Hu, Beirami & Smith, ICML 2021): a global model by FedAvg, a personal model regularised towards it.

Each round, client k, sent w^t, runs two local trainings (Algorithm 1):

* the global update: the run's local training from w^t, uploaded and
  averaged as FedAvg (n_k / n);
* the personal update of its own v_k, from v_k, with the objective
  F_k(v) + lambda/2 ||v - w^t||^2, i.e. steps v <- v - eta (grad F_k(v) + lambda (v - w^t)):
  the run's objective plus a :class:`~chillfl.training.objective.ProximalTerm`
  reading ``ditto_lambda`` and ``ditto_global = w^t``.

v_k is the client's own state (:class:`DittoClient`), and local accuracy
measures v_k: the personalised model the paper evaluates.

Checked against the authors' litian96/ditto (``flearn/trainers_MTL/ditto.py``:
v <- v - lr (grad F_k(v) + lam (v - w^t)) per batch, beside the global update
from w^t on the same batches) and PFLlib (``clientditto.py``: ``ptrain`` with
``PerturbedGradientDescent`` at mu = lambda around the global model).

Choices
-------
* A client's v_k starts, at its first participation, from the global model
  it was sent (the paper initialises every v_k from w^0; with partial
  participation a late client would otherwise start far behind).
* The personal update runs ``personal_epochs`` epochs (default: the run's
  ``client.epochs``, the paper's "s local iterations" set equal to the
  global update's) at the round's learning rate and local optimiser.
* Both updates start from w^t and do not depend on each other; they run one
  after the other (global first), each as one job of the one training path.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from torch import nn

from chillfl.aggregation.base import (
    ClientHalf,
    ClientState,
    Context,
    FedAvg,
    Local,
    LocalProgram,
    Params,
    Personal,
    PlannedStage,
    Report,
    Train,
    Trained,
    Wire,
    own_entries,
    with_prefix,
)
from chillfl.options import Scale, require
from chillfl.training.local import LocalSpec
from chillfl.training.objective import ProximalTerm
from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm
from chillfl.capabilities import PARAMETER_TERM, Capabilities, Cost


@dataclass(frozen=True)
class DittoOptions:
    """``lam``: lambda of the personal objective (the paper tunes it in {0.01, 0.1, 1, 2}); ``personal_epochs``: unset = ``client.epochs``."""

    lam: Scale = 1.0
    personal_epochs: int | None = None

    def validate(self, section: str) -> None:
        require(self.lam >= 0, f"{section}.lam", f"must be >= 0, got {self.lam}")
        if self.personal_epochs is not None:
            require(self.personal_epochs >= 1, f"{section}.personal_epochs", f"must be >= 1, got {self.personal_epochs}")


LAMBDA, GLOBAL = "ditto_lambda", "ditto_global"
"""Context keys of the personal objective's proximal term."""
PREFIX = "ditto.v."
"""Where v_k lives in the client's state."""


@dataclass(frozen=True)
class DittoClient:
    """Ditto's client half: the global update, then v_k's regularised update; keeps v_k."""

    lam: float
    personal_epochs: int | None = None

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        """0: the run's objective + lambda/2 ||v - w^t||^2, for ``personal_epochs``."""
        epochs = spec.epochs if self.personal_epochs is None else self.personal_epochs
        return (replace(spec, epochs=epochs, terms=(*spec.terms, ProximalTerm(LAMBDA, GLOBAL))),)

    def planned_stages(self, spec: LocalSpec) -> tuple[PlannedStage, ...]:
        """v_k's training when ``personal_epochs`` sets its length (unset: ``client.epochs``, counted as the run's own)."""
        return () if self.personal_epochs is None else (PlannedStage(0, "personal_epochs"),)

    def train(self, local: Local) -> LocalProgram:
        w = yield Train(local.start, local.context)
        v = own_entries(local.state, PREFIX) or local.start
        personal = yield Train(v, {**local.context, LAMBDA: self.lam, GLOBAL: local.start}, objective=0)
        return Personal(w.params, w.num_steps, w.mean_loss, personal.params, with_prefix(personal.params, PREFIX))

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {}  # v_k is kept by its training (Personal.state)

    def personal_model(self, state: ClientState, global_model: Params) -> Params:
        """v_k, the model the paper evaluates (it has every entry of the model: no global part)."""
        return own_entries(state, PREFIX)


class Ditto(FedAvg):
    """FedAvg on the global updates; every v_k is its client's own (:class:`DittoClient`)."""

    def __init__(self, options: DittoOptions = DittoOptions()) -> None:
        super().__init__()
        self.options = options

    def client_half(self) -> ClientHalf:
        return DittoClient(self.options.lam, self.options.personal_epochs)


CAPABILITIES = Capabilities(
    private_steps="each client also trains its personal model v_k, a second training a round that the accountant does not count",
    takes_weights=True,
    not_a_base="Ditto's clients run their own local trainings, which PA3Fed's client half does not compose with",
    personal_model=True,
    trains_global_model=True,  # w: each client uploads FedAvg's local model; v_k stays home
    cost=Cost(trainings=2.0, extra_pass_overhead=PARAMETER_TERM),
)


def _capabilities(options: DittoOptions) -> Capabilities:
    """Its cost: the personal model's training beside the global update, as long unless ``personal_epochs`` says otherwise,
    each of its passes with the proximal term lambda/2 ||v - w^t||^2 (:data:`~chillfl.capabilities.PARAMETER_TERM`, on the
    personal training's passes alone: ``extra_pass_overhead``)."""
    if options.personal_epochs is None:
        return CAPABILITIES
    return replace(CAPABILITIES, cost=Cost(epochs=options.personal_epochs, extra_pass_overhead=PARAMETER_TERM))


SPEC = register_algorithm(
    "ditto",
    AlgorithmSpec(
        DittoOptions,
        lambda o, ctx: (Ditto(o), []),
        "personal models regularised towards FedAvg's (Li et al. 2021)",
        capabilities=CAPABILITIES,
        capabilities_of=_capabilities,
        makes=(Ditto,),
    ),
)

"""FedAvg-FT: FedAvg, with each client's local accuracy measured on the global model fine-tuned on its own data.

The sanity baseline of personalised FL that fine-tunes (PFLlib's and FL-bench's
tables report it beside Local-only): training and aggregation are FedAvg's
(the client trains the model it was sent for the run's local epochs and
uploads it; the server averages, n_i / n), so the global model is FedAvg's
bit for bit. Personalisation is fine-tuning: the client's local accuracy
measures the global model w^t it was sent, fine-tuned for ``finetune_epochs``
on its own training data at ``finetune_lr`` with the run's local optimiser.
A personalised method that does not beat it gains nothing over fine-tuning
FedAvg's model.

FedBABU (:mod:`chillfl.aggregation.fedbabu`) is this with the head frozen
during federated training: both use :class:`FineTuning`, the client half
that trains (uploaded) and then fine-tunes the model it was sent (measured).

Choices
-------
* ``finetune_epochs = 5`` (default): FedBABU's default, so that the two
  differ only in FedBABU's frozen head (the FedBABU paper's own comparison
  fine-tunes FedAvg's model and its own the same way). FL-bench's common
  ``finetune_epoch`` defaults to 0 (no fine-tuning), PFLlib has no
  fine-tuning baseline of its own.
* ``finetune_epochs = 0`` measures the global model w^t as the client was
  sent it, not fine-tuned (FL-bench's ``finetune_epoch = 0``, and the number
  PFLlib reports for FedAvg: the global model on each client's own data).
  FedBABU's 0 measures the client's trained model instead.
* ``finetune_lr`` unset: the round's learning rate; the whole model is
  fine-tuned, with the run's local optimiser.
* chillfl's FedAvg already measures the model each client trained this round
  (w^t trained ``client.epochs`` at the round's lr): FedAvg-FT separates what
  is measured from what is uploaded, so that the fine-tuning has epochs and a
  step size of its own.
* The fine-tuned model is made anew every round from w^t: not kept between
  rounds (no ``checkpoint.client_models``), and it never reaches the server.

Checked against (2026-12-02) KarhouTam/FL-bench ``src/client/fedavg.py``
(``test``: the model sent, evaluated, fine-tuned ``finetune_epoch`` epochs on
the client's own training loader, the whole model with the client's
optimiser, evaluated again, then restored: as here). The timing may differ:
FL-bench fine-tunes the global model its server holds when it tests; here the
w^t the client was sent at the start of the round, as every chillfl local
accuracy is measured from the round's own training.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

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
)
from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm
from chillfl.capabilities import Capabilities, Cost
from chillfl.options import require
from chillfl.training.local import LocalSpec


@dataclass(frozen=True)
class FedAvgFTOptions:
    """``finetune_epochs`` (0: the sent global model, not fine-tuned), ``finetune_lr`` (unset: the round's), ``weighting``."""

    finetune_epochs: int = 5
    finetune_lr: float | None = None
    weighting: Literal["samples", "uniform"] = "samples"
    """As FedAvg's: ``samples`` (m_i / m) or ``uniform`` (1/|S|)."""

    def validate(self, section: str) -> None:
        require(self.finetune_epochs >= 0, f"{section}.finetune_epochs", f"must be >= 0, got {self.finetune_epochs}")
        if self.finetune_lr is not None:
            require(self.finetune_lr > 0, f"{section}.finetune_lr", f"must be > 0, got {self.finetune_lr}")


@dataclass(frozen=True)
class FineTuning:
    """A client half that trains the model it was sent (uploaded), then fine-tunes that same sent model on its own data (measured).

    The fine-tuned model is the client's local model this round only: it is not kept (no state) and never uploaded.
    Both trainings are jobs of the one training path; the fine-tuning is the second, so its seed is derived from the
    round's.
    """

    epochs: int
    """Fine-tuning epochs; 0: no fine-tuning, local accuracy measures what ``untuned`` says."""
    lr: float | None = None
    """The fine-tuning step size (None: the round's learning rate)."""
    train_frozen: frozenset[str] = frozenset()
    """Entries the uploaded training keeps at their sent values (FedBABU's head); empty: the run's own objective."""
    tune_frozen: frozenset[str] = frozenset()
    """Entries the fine-tuning keeps at their sent values (FedBABU's ``finetune = "head"``: the body)."""
    untuned: Literal["sent", "trained"] = "sent"
    """What local accuracy measures when ``epochs`` is 0: the model the client was sent, or the one it trained (FedBABU)."""

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        """The uploaded training's (only when it freezes entries), then the fine-tuning's: ``epochs`` (at least 1), ``tune_frozen`` frozen."""
        tune = replace(spec, epochs=max(self.epochs, 1), frozen=spec.frozen | self.tune_frozen)
        if not self.train_frozen:
            return (tune,)
        return replace(spec, frozen=spec.frozen | self.train_frozen), tune

    def planned_stages(self, spec: LocalSpec) -> tuple[PlannedStage, ...]:
        """The fine-tuning, ``finetune_epochs`` over all the client's rows at ``finetune_lr`` (unset: the round's); none at 0."""
        return (PlannedStage(1 if self.train_frozen else 0, "finetune_epochs", self.lr),) if self.epochs else ()

    def train(self, local: Local) -> LocalProgram:
        own = 0 if self.train_frozen else None  # None: the run's own objective, the very training FedAvg runs
        trained = yield Train(local.start, local.context, objective=own)
        if not self.epochs:
            return Personal(trained.params, trained.num_steps, trained.mean_loss, local.start if self.untuned == "sent" else None)
        tuned = yield Train(local.start, local.context, objective=0 if own is None else 1, lr=self.lr)
        return Personal(trained.params, trained.num_steps, trained.mean_loss, tuned.params)

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {}


class FedAvgFT(FedAvg):
    """FedAvg's server rule; the clients fine-tune the model they were sent for their local accuracy (:class:`FineTuning`)."""

    def __init__(self, options: FedAvgFTOptions = FedAvgFTOptions()) -> None:
        super().__init__(options.weighting)
        self.options = options

    def client_half(self) -> ClientHalf:
        return FineTuning(self.options.finetune_epochs, self.options.finetune_lr)


CAPABILITIES = Capabilities(
    private_steps=("each client also fine-tunes the global model on its data, a training that the accountant does not count: "
                   "the tuned model is never uploaded, but the local_acc reported is measured on it"),
    takes_weights=True,
    not_a_base="FedAvg-FT's clients run their own local trainings, which PA3Fed's client half does not compose with",
)


SPEC = register_algorithm(
    "fedavg_ft",
    AlgorithmSpec(
        FedAvgFTOptions,
        lambda o, ctx: (FedAvgFT(o), []),
        "FedAvg, local accuracy of the global model fine-tuned on each client's data (a personalised-FL sanity baseline)",
        capabilities=CAPABILITIES,
        capabilities_of=lambda o: replace(CAPABILITIES, cost=Cost(epochs=o.finetune_epochs)),  # the fine-tuning, a client a round
        makes=(FedAvgFT,),
    ),
)

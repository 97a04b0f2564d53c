"""FedBABU (Oh, Kim & Yun, ICLR 2022): federate the body with the head frozen at its random start, then fine-tune.

During federated training every client trains the body only: the head (the
classifier head and the ``head_layers - 1`` parameterised modules before it, default 1:
the classifier, :func:`~chillfl.aggregation.fedper.head_keys`) stays
at the global model's initial, seeded random values, frozen
(:attr:`LocalSpec.frozen`), and the server averages the body (n_i / n) and
keeps the head. Personalisation is fine-tuning: local accuracy measures the
global model the client was sent, fine-tuned for ``finetune_epochs`` on its
own training data (the paper fine-tunes the whole model). The client half is
FedAvg-FT's (:class:`~chillfl.aggregation.fedavg_ft.FineTuning`) with the head
frozen during the uploaded training: FedBABU is FedAvg-FT with a frozen head.
Both trainings are jobs of the one training path.

Choices
-------
* ``finetune = "full"`` (default: the paper's best, and PFLlib's
  ``fine_tune(['base', 'head'])``), ``"head"`` or ``"body"``.
* ``finetune_epochs = 5`` (the paper's evaluation fine-tunes a few epochs;
  0 measures the client's trained model, head still at its start),
  ``finetune_lr`` unset = the round's learning rate, the run's local optimiser.
* The fine-tuned model is made anew every round from the global model, so it
  is not kept between rounds (no ``checkpoint.client_models``); it does not
  reach the server.
* The server keeps the head from the global model rather than averaging the
  clients' (identical) copies, so it stays bitwise at its start.

Checked against PFLlib (``system/flcore/clients/clientbabu.py``: the head's ``requires_grad`` off
during training, ``fine_tune(['base', 'head'])`` for ``fine_tuning_epochs``); PFLlib fine-tunes each
client's model once after the last round, here the global model is fine-tuned for every round's
``local_acc``. The model's own frozen weights stay frozen in both trainings.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from torch import nn

from chillfl.aggregation.base import ClientHalf
from chillfl.aggregation.fedavg_ft import FineTuning
from chillfl.aggregation.fedbn import FedBN, FedBNOptions
from chillfl.aggregation.fedper import head_keys
from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm
from chillfl.capabilities import FORWARD, Capabilities, Cost
from chillfl.options import require


@dataclass(frozen=True)
class FedBABUOptions:
    """``head_layers`` (the frozen head), ``finetune_epochs``, ``finetune`` (full/head/body), ``finetune_lr`` (unset: the round's)."""

    head_layers: int = 1
    finetune_epochs: int = 5
    finetune: Literal["full", "head", "body"] = "full"
    finetune_lr: float | None = None
    weighting: Literal["samples", "uniform"] = "samples"

    def validate(self, section: str) -> None:
        require(self.head_layers >= 1, f"{section}.head_layers", f"must be >= 1, got {self.head_layers}")
        require(self.finetune_epochs >= 0, f"{section}.finetune_epochs", f"must be >= 0, got {self.finetune_epochs}")
        if self.finetune_lr is not None:
            require(self.finetune_lr > 0, f"{section}.finetune_lr", f"must be > 0, got {self.finetune_lr}")


class FedBABU(FedBN):
    """FedAvg over the body; the head stays the global model's (FedBN's rule with the head as its kept keys)."""

    def __init__(self, model: nn.Module, options: FedBABUOptions = FedBABUOptions(), section: str = "algorithm") -> None:
        """``section``: the table ``options`` came from, named by errors."""
        keys = head_keys(model, options.head_layers, f"{section}.head_layers")
        super().__init__(keys, FedBNOptions(global_bn="keep", weighting=options.weighting))
        params = frozenset(n for n, _ in model.named_parameters())
        self.head, self.body = params & set(keys), params - set(keys)
        self.options = options  # FedBN's rule is ``self.rule``

    def client_half(self) -> ClientHalf:
        """FedAvg-FT's client half with the head frozen during the uploaded training; fine-tuning keeps what ``finetune`` leaves out."""
        o = self.options
        still = {"full": frozenset(), "head": self.body, "body": self.head}[o.finetune]
        return FineTuning(o.finetune_epochs, o.finetune_lr, train_frozen=self.head, tune_frozen=still, untuned="trained")


CAPABILITIES = Capabilities(
    private_steps="each client also fine-tunes the global model on its data for local_acc, a training that the accountant does not count",
    takes_weights=True,
    not_a_base="FedBABU's clients run their own local trainings, which PA3Fed's client half does not compose with",
)


def capabilities(options: FedBABUOptions) -> Capabilities:
    """Its limits, and its cost: the fine-tuning, ``finetune_epochs`` more epochs a client a round (the uploaded training, its
    head frozen, priced as a whole model's). Fine-tuning the head alone is a forward through the model and a backward through
    the head: ``FORWARD`` an epoch; the body, or the whole model, a full epoch."""
    per_epoch = FORWARD if options.finetune == "head" else 1.0
    return replace(CAPABILITIES, cost=Cost(epochs=options.finetune_epochs * per_epoch))


SPEC = register_algorithm(
    "fedbabu",
    AlgorithmSpec(
        FedBABUOptions,
        lambda o, ctx: (FedBABU(ctx.model, o, ctx.section), []),
        "body federated with a frozen random head, then fine-tuned (Oh et al. 2022)",
        capabilities=CAPABILITIES,
        capabilities_of=capabilities,
        makes=(FedBABU,),
    ),
)

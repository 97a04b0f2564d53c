"""FedRep (Collins et al., ICML 2021): a shared representation, a local head, trained one after the other.

Each round, client i, sent the global body phi^t, first trains its own head
h_i with the body frozen for ``head_epochs`` epochs, then trains the body
with its new head frozen for the run's ``client.epochs`` (Algorithm 1: tau_h
head updates, then tau_phi body updates). Only the body is averaged (FedAvg
weights n_i / n); the head stays with the client (:class:`FedRepClient`, the
same keep-local half as FedPer's). Both trainings are jobs of the one
training path with the other part frozen (:attr:`LocalSpec.frozen`), so
every executor trains them as it trains any job. Local accuracy measures the
client's model after both, with its own head (``local_eval = "trained"``,
default); ``local_eval = "averaged"`` measures its own head on the body the
server has just averaged, as the authors' ``test_img_local_all`` does (the
server evaluates it after the round,
:class:`~chillfl.aggregation.base.MeasuredAfterAverage`).

Choices
-------
* ``head_epochs = 10``: every run script of the authors' code
  (lgcollins/FedRep ``scripts/FedRep_*.sh``, read 2026-12-01) trains the head
  for ``local_ep - local_rep_ep = 10`` epochs. The body's epochs are the run's
  ``client.epochs``; those scripts use ``local_rep_ep = 1`` for CIFAR-10 with
  100 clients and 2 shards each, and 5 for the six others (CIFAR-10 with 5
  shards or 1000 clients, CIFAR-100, FEMNIST, Sent140). The paper's text was
  not reachable here (its abstract only), so these are the code's values.
  (``utils/options.py``'s own defaults, ``local_ep = 5``, ``local_rep_ep = 1``,
  i.e. 4 head epochs, are not what any script runs.)
* The head is the classifier head and the ``head_layers - 1`` parameterised modules
  before it (default 1, the classifier; :func:`~chillfl.aggregation.fedper.head_keys`) and the global head, kept only for the global model's
  evaluation, is the clients' average (``global_head``), as for FedPer.
* The reported ``train_loss`` and ``num_steps`` cover both trainings.
* The model's own frozen weights (``requires_grad = False``) stay frozen in both; over a frozen head the
  head phase moves nothing (its steps still count).

Checked against PFLlib (``system/flcore/clients/clientrep.py``: ``plocal_steps`` epochs of head training
with the base's ``requires_grad`` off, then ``local_epochs`` of the base with the head's off;
the server sends the base only) and lgcollins/FedRep's run scripts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from torch import nn

from chillfl.aggregation.base import ClientHalf, Local, LocalProgram, Personal, PlannedStage, Train
from chillfl.aggregation.fedbn import KeepLocal
from chillfl.aggregation.fedper import FedPer, FedPerOptions
from chillfl.options import require
from chillfl.training.local import LocalSpec
from chillfl.aggregation.registry import AlgorithmSpec, after_average, register_algorithm
from chillfl.capabilities import FORWARD, Capabilities, Cost


@dataclass(frozen=True)
class FedRepOptions:
    """``head_epochs``: epochs of head training before the body's (10, the authors' scripts); the rest as FedPer's."""

    head_epochs: int = 10
    head_layers: int = 1
    global_head: Literal["average", "keep"] = "average"
    weighting: Literal["samples", "uniform"] = "samples"
    local_eval: Literal["trained", "averaged"] = "trained"
    """``trained``: local accuracy of the client's model at the end of its training; ``averaged``: of its own head on
    the model the server has just averaged, measured by the server after the round (the authors' code's)."""

    def validate(self, section: str) -> None:
        require(self.head_epochs >= 1, f"{section}.head_epochs", f"must be >= 1, got {self.head_epochs}")
        require(self.head_layers >= 1, f"{section}.head_layers", f"must be >= 1, got {self.head_layers}")


@dataclass(frozen=True)
class FedRepClient(KeepLocal):
    """The client keeps its head (:class:`KeepLocal`) and trains head, then body (:class:`~chillfl.aggregation.base.Personalising`)."""

    param_keys: frozenset[str]
    head_epochs: int

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        """0: the head, body frozen, ``head_epochs``; 1: the body, head frozen, the run's epochs."""
        head = self.param_keys & self.keys
        return replace(spec, epochs=self.head_epochs, frozen=spec.frozen | (self.param_keys - head)), replace(spec, frozen=spec.frozen | head)

    def planned_stages(self, spec: LocalSpec) -> tuple[PlannedStage, ...]:
        """The head's training, ``head_epochs`` over all its rows at the round's lr (:class:`~chillfl.aggregation.base.PlansStages`)."""
        return (PlannedStage(0, "head_epochs"),)

    def train(self, local: Local) -> LocalProgram:
        head = yield Train(local.start, local.context, objective=0)
        body = yield Train(head.params, local.context, objective=1)
        steps = head.num_steps + body.num_steps
        loss = (head.mean_loss * head.num_steps + body.mean_loss * body.num_steps) / max(steps, 1)
        return Personal(body.params, steps, loss)


class FedRep(FedPer):
    """FedPer's server (the body averaged); the client trains its head, then the body (:class:`FedRepClient`)."""

    def __init__(self, model: nn.Module, options: FedRepOptions = FedRepOptions(), section: str = "algorithm") -> None:
        super().__init__(model, FedPerOptions(options.head_layers, options.global_head, options.weighting, options.local_eval), section)
        self.param_names = frozenset(n for n, _ in model.named_parameters())
        self.head_epochs = options.head_epochs
        self.options = options

    def client_half(self) -> ClientHalf:
        return FedRepClient(self.bn_keys, "fedrep.head.", self.param_names, self.head_epochs, after_average=self.options.local_eval == "averaged",
                            option=("global_head", "keep"))


CAPABILITIES = Capabilities(
    private_steps="each client trains its head and then its body from that head, two trainings a round",
    takes_weights=True,
    not_a_base="FedRep's clients run their own local trainings, which PA3Fed's client half does not compose with",
    personal_model=True,
    cost=Cost(epochs=FedRepOptions.head_epochs * FORWARD),
)
"""Its limits; its cost: ``head_epochs`` epochs of head training before the body's, each a forward through the whole model and
a backward through the head alone (the body frozen takes no gradient): priced as a forward pass, ``FORWARD`` an epoch."""


SPEC = register_algorithm(
    "fedrep",
    AlgorithmSpec(
        FedRepOptions,
        lambda o, ctx: (FedRep(ctx.model, o, ctx.section), []),
        "shared representation, local head trained first (Collins et al. 2021)",
        capabilities=CAPABILITIES,
        capabilities_of=lambda o: after_average(replace(CAPABILITIES, cost=Cost(epochs=o.head_epochs * FORWARD)), "local_eval", "averaged", o.local_eval == "averaged"),
        makes=(FedRep,),
    ),
)

"""FedRoD (Chen & Chao, ICLR 2022): a generic model trained with balanced softmax, a personal head on top of it.

Client i trains, in each local step on a batch (x, y) with features z = body(x),

* the body and the generic head G with the balanced softmax loss
  BSM = CE(G(z) + log n_i, y), n_i the client's per-class training counts
  (Ren et al. 2020), so the generic model learns the class-balanced posterior;
* its personal head P with CE(G(z).detach() + P(z.detach()), y): P's gradient
  never reaches the body or G (PFLlib's ``clientrod``: ``rep.detach()`` and
  ``out_g.detach()``).

Body + G are averaged (FedAvg, n_i / n); P stays with the client. Local
accuracy measures body + G + P: the logits G(z) + P(z). Both heads are linear
on the same z, so that model is the generic model with head weight W_G + W_P
and bias b_G + b_P (equal up to float rounding), which the run's model
template evaluates and ``checkpoint.client_models`` saves.

The two updates are one gradient step of one loss over (body, G, P), which the
one training path runs: a :class:`RoD` template holds P and the model (its
forward is the model's), and :class:`RoDLoss` adds both losses, the detaches
making each part's gradient the algorithm's.

Choices
-------
* P is a copy of the model's classifier head (the one it declares, :mod:`chillfl.models.parts`) and starts, at
  the client's first participation, from the global generic head it was sent
  (PFLlib and FL-bench copy the initial head: the same at round 0).
* P trains at the round's learning rate with the run's local optimiser (PFLlib:
  plain SGD at the same lr).
* The BSM is the run's base loss on G(z) + T log n_i, at the run's temperature
  CE(G(z)/T + log n_i): the prior is added after the temperature, not divided
  by it (the class-balanced posterior n_c exp(G_c(z)/T), normalised; the paper
  has no temperature). ``prior_scaling = "with_logits"`` takes the other reading,
  the base loss on G(z) + log n_i, CE((G(z) + log n_i)/T). P's loss is CE at T = 1. A class the client has no
  sample of gets log n = -1e9 (PFLlib's log 0 = -inf, without infinities).
  ``balanced = false`` trains G with the plain base loss (the paper's ablation).
* The run's parameter terms (``[objective] proximal_mu``) apply to body + G, and so do its frozen
  (``requires_grad = False``) and no-decay names; P, the method's own, trains even over a frozen G.

Checked against PFLlib (``system/flcore/clients/clientrod.py``: ``balanced_softmax_loss``, the
detached ``rep`` and ``out_g``, both steps from the same point); of the authors' ``hongyouc/Fed-RoD``
only the README was reachable.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal, Mapping, cast

import torch
from torch import nn
from torch.nn import functional as F

from chillfl.aggregation.base import (
    ClientHalf,
    ClientState,
    Context,
    FedAvg,
    Local,
    LocalProgram,
    Params,
    Personal,
    Report,
    Train,
    Trained,
    Wire,
    own_entries,
    with_prefix,
)
from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm
from chillfl.capabilities import Capabilities
from chillfl.models.parts import head_name, head_size, prefixed, refuse_tied_head
from chillfl.options import require
from chillfl.training.local import BaseLoss, LocalSpec, refuse_representation_readers
from chillfl.training.objective import LossTerm, Term, read_tensor, temperature_cross_entropy


@dataclass(frozen=True)
class FedRoDOptions:
    """``balanced``: train the generic head with the balanced softmax (True) or the plain base loss; ``prior_scaling``:
    where the balanced softmax adds log n_i at a temperature T (below)."""

    balanced: bool = True
    weighting: Literal["samples", "uniform"] = "samples"
    prior_scaling: Literal["after_temperature", "with_logits"] = "after_temperature"
    """``after_temperature``: CE(G(z)/T + log n_i), the prior added after the temperature (the class-balanced posterior
    n_c exp(G_c(z)/T), normalised); ``with_logits``: CE((G(z) + log n_i)/T), the prior divided by T with the logits.
    The paper has no temperature, so both read it; they agree at T = 1."""

    def validate(self, section: str) -> None:
        # the plain base loss adds no prior: a reading of where it goes would be silently ignored
        require(self.balanced or self.prior_scaling == "after_temperature", f"{section}.prior_scaling",
                "places the balanced softmax's log n_i, which balanced = false leaves out; set balanced = true too")


PREFIX = "fedrod.p."
"""Where P lives in the client's state."""
LOG_PRIOR = "fedrod_log_prior"
"""Context key of log n_i (the client's per-class training counts)."""
NO_SAMPLE = -1e9
"""log n for a class without samples (log 0)."""


class RoD(nn.Module):
    """P and the model as one module; the forward is the model's.

    The template's head (whose input the loss reads as z) is the model's G, which the
    forward runs; the template declares it under the model's prefix.
    """

    def __init__(self, model: nn.Module, head: str) -> None:
        super().__init__()
        self.personal = copy.deepcopy(model.get_submodule(head))
        self.model = copy.deepcopy(model)
        self.head = head

    def head_name(self) -> str:
        """G, the model's head (:class:`~chillfl.models.parts.DeclaresHead`)."""
        return prefixed("model", self.head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cast(torch.Tensor, self.model(x))


def rod_state(model: Params, personal: Params) -> Params:
    """The template's flat state from the model's and P's."""
    return {**{f"personal.{k}": t for k, t in personal.items()}, **{f"model.{k}": t for k, t in model.items()}}


def split_rod(state: Mapping[str, torch.Tensor]) -> tuple[Params, Params]:
    """Inverse of :func:`rod_state`: (model, P)."""
    model = {k[6:]: t for k, t in state.items() if k.startswith("model.")}
    personal = {k[9:]: t for k, t in state.items() if k.startswith("personal.")}
    return model, personal


def head_of_state(model: Params, head: str) -> Params:
    """G's entries of a model state, by their names in the head module (``weight``, ``bias``)."""
    return {k[len(head) + 1 :]: t for k, t in model.items() if k.startswith(head + ".")}


def combined(model: Params, personal: Params, head: str) -> Params:
    """The model with head G + P (weight W_G + W_P, bias b_G + b_P): logits G(z) + P(z)."""
    return {k: t + personal[k[len(head) + 1 :]].to(t.device) if k.startswith(head + ".") and k[len(head) + 1 :] in personal else t for k, t in model.items()}


class RoDLoss:
    """BSM(G(z) + log n_i, y) + CE(G(z).detach() + P(z.detach()), y): the :class:`RoD` step's loss (reads z, the head's input)."""

    uses_features: ClassVar[bool] = True

    def __init__(
        self, base_loss: BaseLoss = temperature_cross_entropy, balanced: bool = True,
        prior_scaling: Literal["after_temperature", "with_logits"] = "after_temperature",
    ) -> None:
        self.base_loss = base_loss
        self.balanced = balanced
        self.prior_scaling = prior_scaling

    def __call__(
        self,
        logits: torch.Tensor,
        y: torch.Tensor,
        temperature: Any,
        *,
        features: torch.Tensor | None = None,
        params: Mapping[str, torch.Tensor] | None = None,
        context: Context | None = None,
    ) -> torch.Tensor:
        if features is None or params is None or context is None:
            raise TypeError("RoDLoss needs the representation, the parameters and the context (StepLoss passes them)")
        prior = read_tensor(context, LOG_PRIOR).to(logits.dtype)
        if not self.balanced:
            adjusted = logits
        elif self.prior_scaling == "with_logits":
            adjusted = logits + prior  # the base loss divides it by T with the logits
        else:
            adjusted = logits + temperature * prior  # divided by T: log n_i added after the temperature
        generic = self.base_loss(adjusted, y, temperature)
        personal = F.linear(features.detach(), params["personal.weight"], params.get("personal.bias"))
        return generic + temperature_cross_entropy(logits.detach() + personal, y, 1.0)


class OnModel:
    """A parameter term of the run's objective applied to the template's model (body + G), not P."""

    def __init__(self, term: LossTerm) -> None:
        self.term = term
        self.reads = term.reads

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context) -> torch.Tensor:
        return self.term({k[6:]: t for k, t in params.items() if k.startswith("model.")}, context)


def log_prior(y: torch.Tensor, num_classes: int, dtype: torch.dtype) -> torch.Tensor:
    """log n_c for every class c (``NO_SAMPLE`` where n_c = 0)."""
    counts = torch.bincount(y, minlength=num_classes).to(dtype)
    return torch.where(counts > 0, counts.clamp_min(1).log(), torch.full_like(counts, NO_SAMPLE))


@dataclass(frozen=True)
class FedRoDClient:
    """FedRoD's client half: trains (body, G, P) as one :class:`RoD`; uploads body + G, keeps P."""

    model: nn.Module
    head: str
    num_classes: int
    balanced: bool
    prior_scaling: Literal["after_temperature", "with_logits"] = "after_temperature"

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        """0: the :class:`RoD` template's step under :class:`RoDLoss`; the run's parameter terms, frozen and
        no-decay names on body + G (renamed into the template's ``model.*``)."""
        refuse_representation_readers(spec, "FedRoD's loss reads the representation itself")
        terms: list[Term] = [OnModel(cast(LossTerm, t)) for t in spec.terms]
        frozen = frozenset(f"model.{k}" for k in spec.frozen)  # P is the method's own: it trains even over a frozen G
        no_decay = frozenset(f"model.{k}" for k in spec.no_decay)
        rod = RoD(self.model, self.head)
        return (replace(spec, model=rod, base_loss=RoDLoss(spec.base_loss, self.balanced, self.prior_scaling), terms=tuple(terms), frozen=frozen, no_decay=no_decay),)

    def train(self, local: Local) -> LocalProgram:
        personal = own_entries(local.state, PREFIX) or head_of_state(local.start, self.head)
        dtype = next((t.dtype for t in local.start.values() if t.is_floating_point()), torch.float32)
        context = {**local.context, LOG_PRIOR: log_prior(local.y, self.num_classes, dtype)}
        out = yield Train(rod_state(local.start, personal), context, objective=0)
        model, p = split_rod(out.params)
        return Personal(model, out.num_steps, out.mean_loss, combined(model, p, self.head), with_prefix(p, PREFIX))

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {}  # P is kept by the training (Personal.state)

    def personal_model(self, state: ClientState, global_model: Params) -> Params:
        """The current global model with head G + P: the model the client's local accuracy would measure now."""
        return combined(global_model, own_entries(state, PREFIX), self.head)


class FedRoD(FedAvg):
    """FedAvg on body + G; every P is its client's own (:class:`FedRoDClient`)."""

    def __init__(self, model: nn.Module, options: FedRoDOptions = FedRoDOptions()) -> None:
        super().__init__(options.weighting)
        self.options = options  # recorded for an instance passed from Python
        self.head = head_name(model)
        refuse_tied_head(model, [self.head])  # its P is the head's own parameters, by the head's names
        self.client = FedRoDClient(model, self.head, head_size(model).classes, options.balanced, options.prior_scaling)

    def client_half(self) -> ClientHalf:
        return self.client


SPEC = register_algorithm(
    "fedrod",
    AlgorithmSpec(
        FedRoDOptions,
        lambda o, ctx: (FedRoD(ctx.model, o), []),
        "generic head by balanced softmax, personal head on top (Chen & Chao 2022)",
        capabilities=Capabilities(
            private_steps=(
                "the generic head's balanced softmax (balanced = true, the default) reads the client's label counts: one sample changes every"
                " sample's gradient, which per-sample clipping does not bound; balanced = false is refused too, not audited"
            ),
            takes_weights=True,
            not_a_base="FedRoD's clients run their own local trainings, which PA3Fed's client half does not compose with",
            personal_model=True,
            trains_global_model=True,  # body + G: each client trains the global model it was sent and uploads it (FedAvg); the personal head P stays home
            linear_head="FedRoD's personal-head loss computes P(z) = W_P z + b_P, and its client model is the head W_G + W_P, b_G + b_P",
        ),
        makes=(FedRoD,),  # an instance passed from Python meets this spec's checks (check_instance)
    ),
)

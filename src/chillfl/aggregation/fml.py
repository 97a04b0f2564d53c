"""FML, Federated Mutual Learning (Shen, Zhang, Jia, Zhang, Huang, Zhou, Kuang, Wu & Wu, 2020, arXiv 2006.16765).

Client i keeps a private *local* model (never uploaded) and receives the
shared *meme* model, the current global model. On each local batch both are
trained by deep mutual learning, each with the other's prediction as a soft
target (the paper's Eqs. for L_local and L_meme)::

    L_local = alpha * CE(y, p_local) + (1 - alpha) * KL(p_meme || p_local)
    L_meme  = beta  * CE(y, p_meme)  + (1 - beta)  * KL(p_local || p_meme)

with p = softmax(logits) and KL(p || q) = sum_c p_c (log p_c - log q_c),
averaged over the batch. The KL target of each loss (the other model's
prediction) is detached, so the gradient of L = L_local + L_meme with respect
to the local model is that of L_local and with respect to the meme model that
of L_meme: one gradient step of L on a batch is both models' steps on it, from
the same point (the paper's and PFLlib's two optimisers, one step each per batch).
The server averages the meme models by FedAvg (n_i / n): the global model. The
personalised model, which local accuracy measures, is the local model.

The one training path trains the two models as one: a :class:`Mutual`
template holds them as two copies of the model (``meme.*`` and ``local.*``) and
its forward stacks their logits, ``[2, batch, classes]``; :class:`MutualLoss`,
the step's base loss, is L above on that stack, so both forwards run inside
the step's compute settings (autocast, batch norm under vmap, batched
convolutions) and every executor trains the pair as any model.

Choices
-------
Checked against the authors' code (ZJU-DAI/Federated-Mutual-Learning, ``Trainer.train_mutual``)
and PFLlib's ``clientFML``:

* **Weights** (``alpha``, ``beta``): the paper's convex form, alpha = beta =
  0.5 by default (the authors' ``Args.py``). ``beta`` unset follows ``alpha``
  (so a grid over ``alpha`` tunes alpha = beta). alpha = 1 (beta = 1) drops the
  KL term from the local (meme) loss. The additive form CE + lambda KL is this
  one scaled by 1 + lambda (alpha = 1 / (1 + lambda)), i.e. at another step size.
* **Detached targets** (``detach = true``, default): the authors' code
  (``Softmax(output_meme.detach())``), deep mutual learning's update.
  ``detach = false`` is PFLlib's ``clientFML``, whose two backward passes also
  send each loss's KL gradient into the *other* model (the target is not
  detached): the gradient of L_local + L_meme with respect to both.
* **KL's reduction** (``kl_reduction``): ``batchmean`` (default, the authors'
  ``nn.KLDivLoss(reduction='batchmean')``) is the divergence per sample averaged
  over the batch; ``mean`` is PFLlib's ``nn.KLDivLoss()`` default, which also
  divides by the number of classes.
* **Temperature**: the cross-entropies are the run's base loss at the run's
  temperature (logit chilling's T; 1 unless set); the KL terms are at T = 1
  (the paper and the authors' code have none).
* **The local model's start** (``local_init``): ``meme`` (default): at the
  client's first participation, a copy of the meme model it was sent (PFLlib
  copies the initial global model: the same for a client first sampled in the
  first round). ``independent`` (the authors', whose local models are
  initialised independently at random): a fresh initialisation of the run's
  architecture, every module's ``reset_parameters`` under torch's seed
  ``derive_seed(seed, "fml-local", client_id)`` (the run's seed) in a forked
  generator (:func:`~chillfl.aggregation.ifca.fresh_model`, as IFCA's extra
  cluster models): the same for a client under every executor and across a
  resume, different between clients and from the meme. Where a model's
  constructor re-initialises layers by hand (the CIFAR ResNet's kaiming-normal
  convolutions, the character LSTM's uniform gates) they get the layers'
  default scheme instead, and a parameter no ``reset_parameters`` covers (the
  ViT's class and position tokens) keeps the run's initial value, the first
  meme's. The client's state holds this model from the start
  (:class:`~chillfl.aggregation.base.StartsOwnState`), so
  :meth:`FMLClient.personal_model` of a client that has not trained yet is the
  model it would train. Its architecture is the meme model's: the paper allows a
  client's own architecture, which this implementation does not support (local
  accuracy evaluates personal models with the run's one template).
* **Optimiser**: both models step under the run's optimiser at the round's
  learning rate, its state (momentum) fresh at each round's training for both.
  The authors give each model its own SGD (momentum 0.9, weight decay 5e-4),
  re-made for the meme at each fork while the local model's keeps its momentum
  across rounds. A per-step gradient clip clips the pair's gradient as one
  vector (PFLlib clips each model's at norm 10).
* **Average** (``weighting``): n_i / n (``samples``, default, as FedAvg and
  PFLlib) or 1 / |S| (``uniform``, the authors' ``merge``).
* The run's parameter terms (``[objective] proximal_mu``) apply to the meme
  model, the one the server averages (:class:`OnMeme`); batch terms and
  representation-based losses do not compose (the forward is the pair's).
* ``train_loss`` is the mean of L = L_local + L_meme over the round's steps.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Literal, Mapping, cast

import torch
from torch import nn

from chillfl.aggregation.base import (
    ClientHalf,
    ClientState,
    Context,
    FedAvg,
    Local,
    OnPart,
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
from chillfl.aggregation.ifca import fresh_model
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, instance_field, register_algorithm, run_value
from chillfl.capabilities import Capabilities, Cost
from chillfl.models.parts import head_name, prefixed
from chillfl.options import require
from chillfl.seeds import derive_seed, instance_seed
from chillfl.training.local import BaseLoss, LocalSpec, reads_context, refuse_representation_readers
from chillfl.training.objective import LossTerm, Term, distillation_kl


@dataclass(frozen=True)
class FMLOptions:
    """``alpha``/``beta``: the CE weights of the local/meme losses (KL: 1 - them); ``beta`` unset = ``alpha``;
    ``detach``: the KL targets taken as constants (DML) or not (PFLlib); ``kl_reduction``: ``batchmean`` or ``mean``;
    ``weighting``: of the memes' average, n_i / n (``samples``) or 1 / |S| (``uniform``, the authors' code);
    ``local_init``: the local model's start, a copy of the meme it is first sent (``meme``) or a seeded random one
    (``independent``, the authors')."""

    alpha: float = 0.5
    beta: float | None = None
    detach: bool = True
    kl_reduction: Literal["batchmean", "mean"] = "batchmean"
    weighting: Literal["samples", "uniform"] = "samples"
    local_init: Literal["meme", "independent"] = "meme"

    def validate(self, section: str) -> None:
        require(0 <= self.alpha <= 1, f"{section}.alpha", f"must be in [0, 1], got {self.alpha}")
        if self.beta is not None:
            require(0 <= self.beta <= 1, f"{section}.beta", f"must be in [0, 1], got {self.beta}")

    @property
    def meme_weight(self) -> float:
        """beta, ``alpha`` when unset."""
        return self.alpha if self.beta is None else self.beta


MEME, LOCAL = "meme.", "local."
"""Where the two models live in the :class:`Mutual` template's state."""
PREFIX = "fml.local."
"""Where the local model lives in the client's state."""


class Mutual(nn.Module):
    """The meme and the local model as one module: its forward stacks their logits, ``[2, batch, classes]`` (meme first)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.meme = copy.deepcopy(model)
        self.local = copy.deepcopy(model)

    def head_name(self) -> str:
        """The local model's head (:class:`~chillfl.models.parts.DeclaresHead`): the last one the forward runs."""
        return prefixed("local", head_name(self.local))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack((self.meme(x), self.local(x)))


def mutual_state(meme: Params, local: Params) -> Params:
    """The :class:`Mutual` template's flat state from the two models'."""
    return {**with_prefix(meme, MEME), **with_prefix(local, LOCAL)}


def split_mutual(state: Mapping[str, torch.Tensor]) -> tuple[Params, Params]:
    """Inverse of :func:`mutual_state`: (meme, local)."""
    return own_entries(dict(state), MEME), own_entries(dict(state), LOCAL)


class MutualLoss:
    """L_local + L_meme on the :class:`Mutual` forward's stacked logits: the step's base loss.

    ``base`` is the run's base loss (its CE at the run's temperature); it may read the client's context
    (FedLC-style), which this loss then declares too.
    """

    def __init__(self, base: BaseLoss, alpha: float, beta: float, detach: bool = True, reduction: str = "batchmean") -> None:
        self.base = base
        self.alpha, self.beta, self.detach, self.reduction = alpha, beta, detach, reduction
        self.uses_context = reads_context(base)

    def __call__(self, logits: torch.Tensor, y: torch.Tensor, temperature: float | torch.Tensor, context: Context | None = None) -> torch.Tensor:
        meme, local = logits[0], logits[1]
        if self.uses_context:
            ce_meme, ce_local = (self.base(z, y, temperature, context=context) for z in (meme, local))  # type: ignore[call-arg]
        else:
            ce_meme, ce_local = self.base(meme, y, temperature), self.base(local, y, temperature)
        target_meme, target_local = (meme.detach(), local.detach()) if self.detach else (meme, local)
        kl_local = distillation_kl(local, target_meme, reduction=self.reduction)  # KL(p_meme || p_local)
        kl_meme = distillation_kl(meme, target_local, reduction=self.reduction)  # KL(p_local || p_meme)
        l_local = self.alpha * ce_local + (1 - self.alpha) * kl_local
        l_meme = self.beta * ce_meme + (1 - self.beta) * kl_meme
        return l_local + l_meme


class OnMeme(OnPart):
    """A parameter term of the run's objective applied to the meme model, the one averaged."""

    def __init__(self, term: LossTerm) -> None:
        super().__init__(term, MEME)


@dataclass(frozen=True)
class FMLClient:
    """FML's client half: trains (meme, local) from (w^t, its local model) by mutual learning; uploads the meme, keeps the local."""

    model: nn.Module
    options: FMLOptions
    seed: int = 0
    """The run's seed: ``local_init = "independent"`` draws each client's local model from it and the client's id."""

    def first_state(self, client_id: int, start: Params) -> ClientState:
        """``independent``: the client's local model before its first participation (:func:`local_seed`); ``meme``: none
        (its first training copies the meme it is sent)."""
        if self.options.local_init == "meme":
            return {}
        return with_prefix(fresh_model(self.model, local_seed(self.seed, client_id), start), PREFIX)

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        """0: the pair's step, L_local + L_meme on the :class:`Mutual` template, the run's parameter terms on the meme."""
        refuse_representation_readers(spec, "FML's forward is the pair's stacked logits")
        o = self.options
        loss = MutualLoss(spec.base_loss, o.alpha, o.meme_weight, o.detach, o.kl_reduction)
        terms: list[Term] = [OnMeme(cast(LossTerm, t)) for t in spec.terms]
        frozen = frozenset(f"{part}{k}" for k in spec.frozen for part in (MEME, LOCAL))
        no_decay = frozenset(f"{part}{k}" for k in spec.no_decay for part in (MEME, LOCAL))
        return (replace(spec, model=Mutual(self.model), base_loss=loss, terms=tuple(terms), frozen=frozen, no_decay=no_decay),)

    def train(self, local: Local) -> LocalProgram:
        own = own_entries(local.state, PREFIX) or local.start
        out = yield Train(mutual_state(local.start, own), local.context, objective=0)
        meme, mine = split_mutual(out.params)
        return Personal(meme, out.num_steps, out.mean_loss, mine, with_prefix(mine, PREFIX))

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {}  # the local model is kept by the training (Personal.state)

    def personal_model(self, state: ClientState, global_model: Params) -> Params:
        """The client's local model: before its first round, the global model (``meme``), or its independent start
        when ``state`` is the client's :meth:`first_state` (the runtime's, ``independent``)."""
        return own_entries(state, PREFIX) or dict(global_model)


class FML(FedAvg):
    """FedAvg on the meme models; every local model is its client's own (:class:`FMLClient`)."""

    def __init__(self, model: nn.Module, options: FMLOptions = FMLOptions(), seed: int | None = None) -> None:
        super().__init__(options.weighting)
        self.model = model
        self.options = options
        self.seed = seed
        """The run's seed, which draws each client's independent local model (None: the run's, which a run fills,
        :func:`_bind`; 0 outside a run)."""

    def client_half(self) -> ClientHalf:
        return FMLClient(self.model, self.options, instance_seed(self.seed))


def local_seed(seed: int, client_id: int) -> int:
    """The seed of client ``client_id``'s independent local model in a run of seed ``seed``."""
    return derive_seed(seed, "fml-local", client_id)


def _bind(aggregator: FML, ctx: BuildContext) -> None:
    """An instance passed from Python draws its clients' independent local models from the run's seed, as the builder's
    does: its ``seed`` the run's (None: filled), another refused on ``aggregator.seed`` (seed 0 drew every seed's alike)."""
    aggregator.seed = run_value(aggregator.seed, ctx.seed, instance_field(ctx, "seed"), "seed")


SPEC = register_algorithm(
    "fml",
    AlgorithmSpec(
        FMLOptions,
        lambda o, ctx: (FML(ctx.model, o, ctx.seed), []),
        "federated mutual learning: a kept local model and the shared meme model distilled into each other (Shen et al. 2020)",
        capabilities=Capabilities(
            private_steps=(
                "its one training also moves the client's kept local model, whose per-sample gradients would be clipped together"
                " with the meme's, and each sample's KL target is the other model's prediction on it"
            ),
            takes_weights=True,
            not_a_base="FML's clients run their own local trainings, which PA3Fed's client half does not compose with",
            personal_model=True,
            trains_global_model=True,  # the meme: each client trains the global model it was sent and uploads it (FedAvg); its local model stays home
            cost=Cost(step_passes=2.0),  # each step trains the meme and the local model on the batch: two forward + backward passes
        ),
        makes=(FML,),
        bind=_bind,
    ),
)

"""APFL (Deng, Kamani & Mahdavi, 2020): adaptive personalised FL, Algorithm 1 with the adaptive alpha.

Client i keeps a personal model v_i and a mixing weight alpha_i; its
personalised model is v_bar = alpha_i v_i + (1 - alpha_i) w_i. Every local
step on a batch xi updates, from the same point,

    w_i     <- w_i     - eta grad f_i(w_i; xi)
    v_i     <- v_i     - eta grad_v f_i(v_bar; xi)      = v_i - eta alpha_i grad f_i(v_bar; xi)
    alpha_i <- alpha_i - eta grad_alpha f_i(v_bar; xi)  = alpha_i - eta <v_i - w_i, grad f_i(v_bar; xi)>

and w_i is what the server averages (FedAvg, n_i / n). The three updates are
one gradient step of one loss over the triple (w, v, alpha), which the one
training path runs: a :class:`Pair` template holds w and v as two copies of
the model and alpha as a scalar parameter, its forward is w's (the base loss
gives f_i(w)), and :class:`MixedLoss` adds f_i(v_bar) with w detached in v_bar,
so that w's gradient is grad f_i(w) alone and v's and alpha's are the chain
rule's above. Local accuracy measures v_bar after the round's training.

Choices
-------
* v_bar mixes the parameters, as the paper's Algorithm 1 and its analysis do,
  and alpha's gradient is the exact <v - w, grad f_i(v_bar)>. The authors'
  code (FedTorch, ``fedtorch/comms/trainings/federated/apfl.py`` with
  ``inference_personal``) and FL-bench (``src/client/apfl.py``) mix the two
  models' outputs instead, alpha f_v(x) + (1 - alpha) f_w(x), and step alpha
  with FedTorch's ``alpha_update``, <v - w, alpha grad_v + (1 - alpha) grad_w>
  + 0.02 alpha (an L2 penalty 0.01 alpha^2 the paper does not have); FedTorch
  steps alpha once a round (at its first local step), FL-bench at every step
  of the first epoch, PFLlib (``clientapfl.py``) at every step, PFLlib then
  training v on f_i(v) alone. None of those is done here: an output mixture
  is an ensemble, not one personalised model (the alternative would need its
  own personal-model path).
* alpha_i starts at ``alpha`` (0.5) and is clipped to [0, 1] after each
  round's training (FedTorch and PFLlib clip after each alpha step; a
  per-step clip is not a gradient step, so it would need a second code path);
  ``adaptive = false`` keeps alpha fixed (the paper's APFL with a given alpha).
* f_i(v_bar) is the run's base loss at T = 1 (the run's temperature applies
  to w's loss; APFL has none of its own).
* The run's frozen weights (``LocalSpec.frozen``, a model's
  ``requires_grad = False`` layers) stay frozen in both w and v.
* ``client.weight_decay`` decays w and v as the run's optimiser does, never
  alpha: a mixing coefficient, whose Algorithm 1 step has no decay term.
  By default (``alpha_step = "optimizer"``) ``client.momentum`` (and Adam,
  and clipping) acts on alpha, as on w and v: Algorithm 1 steps alpha by plain
  SGD, and FL-bench / PFLlib step it by hand, outside their optimiser.
  ``alpha_step = "sgd"`` does that: alpha_i <- alpha_i - eta_alpha
  <v - w, grad f_i(v_bar)> on the raw gradient at every local step, with no
  momentum, Adam moments, weight decay or place in the clipping norm
  (:attr:`~chillfl.training.local.LocalSpec.plain_sgd`), at ``alpha_lr``
  (unset: the round's learning rate, Algorithm 1's one eta_t, schedule
  included). With the run's default plain SGD (momentum 0, no clipping) and
  ``alpha_lr`` unset the two agree.
* v_i starts, at the client's first participation, from the global model it
  was sent (paper: v_i^0 = w^0). v_bar's batch-norm buffers are v_i's (its
  training forward updates them).
* The run's parameter terms (``[objective] proximal_mu``) apply to w, the
  model the server averages (:class:`OnShared`), not to v.
* ``alpha = 0.5`` is FL-bench's default (``--alpha 0.5``, ``--adaptive_alpha 1``);
  PFLlib's shared ``-al`` defaults to 1.0 (v alone at the start). The
  paper's start for the adaptive alpha could not be read here (its abstract
  only), so the default follows FL-bench.

Checked (2026-12) against Deng, Kamani & Mahdavi 2020 (Algorithm 1: w's step on grad f_i(w), v's on
grad_v f_i(v_bar) = alpha grad f_i(v_bar), alpha's on <v - w, grad f_i(v_bar)>, all from the same iterate; the
server's FedAvg of the w_i), FL-bench (``src/client/apfl.py``, ``src/server/apfl.py``) and PFLlib
(``clientapfl.py``), whose differences are listed above; ``tests/test_personalised.py`` works one step by hand.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace
from typing import Literal, Mapping, cast

import torch
from torch import nn
from torch.func import functional_call

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
from chillfl.models.parts import head_name, prefixed
from chillfl.options import require
from chillfl.training.local import BaseLoss, LocalSpec, half_to_float, persistent_buffers, refuse_representation_readers
from chillfl.training.objective import LossTerm, StepView, Term, temperature_cross_entropy
from chillfl.aggregation.registry import AlgorithmSpec, register_algorithm
from chillfl.capabilities import Capabilities, Cost


@dataclass(frozen=True)
class APFLOptions:
    """``alpha``: alpha_i's start (0.5); ``adaptive``: learn alpha_i (Algorithm 1) or keep it fixed; ``alpha_step``:
    alpha_i takes the run's optimiser step (``optimizer``) or plain SGD (``sgd``, Algorithm 1's step); ``alpha_lr``:
    the learning rate of the ``sgd`` step (unset: the round's)."""

    alpha: float = 0.5
    adaptive: bool = True
    alpha_step: Literal["optimizer", "sgd"] = "optimizer"
    """``optimizer``: the run's momentum / Adam move alpha_i as they move w and v; ``sgd``: alpha_i <- alpha_i - eta_alpha
    <v - w, grad f_i(v_bar)> from the raw gradient, outside the optimiser (Algorithm 1; FL-bench and PFLlib step it by hand)."""
    alpha_lr: float | None = None
    """eta_alpha of ``alpha_step = "sgd"``; unset: the round's learning rate (Algorithm 1's one eta_t)."""

    def validate(self, section: str) -> None:
        require(0 <= self.alpha <= 1, f"{section}.alpha", f"must be in [0, 1], got {self.alpha}")
        require(self.alpha_step in ("optimizer", "sgd"), f"{section}.alpha_step", f"must be optimizer or sgd, got {self.alpha_step!r}")
        if self.alpha_lr is not None:
            require(math.isfinite(self.alpha_lr) and self.alpha_lr > 0, f"{section}.alpha_lr", f"must be a finite number > 0, got {self.alpha_lr}")
            require(self.alpha_step == "sgd", f"{section}.alpha_lr", 'is the learning rate of alpha_step = "sgd"; set alpha_step = "sgd" too')


class Pair(nn.Module):
    """v and w, two copies of a model, and alpha as one module: the forward is w's.

    The pair's head (whose input batch terms read) is w's, which the forward runs; it declares
    it under w's prefix. (v is registered first, so that a model declaring no head gets w's last ``nn.Linear``.)
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.v = copy.deepcopy(model)
        self.w = copy.deepcopy(model)
        self.alpha = nn.Parameter(torch.zeros(()))

    def head_name(self) -> str:
        """w's head (:class:`~chillfl.models.parts.DeclaresHead`), asked when a term reads the representation."""
        return prefixed("w", head_name(self.w))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w(x)


def pair_state(w: Params, v: Params, alpha: torch.Tensor) -> Params:
    """The pair's flat state from the two models' and alpha."""
    return {**with_prefix(v, "v."), **with_prefix(w, "w."), "alpha": alpha}


def split_pair(state: Mapping[str, torch.Tensor]) -> tuple[Params, Params, torch.Tensor]:
    """Inverse of :func:`pair_state`: (w, v, alpha)."""
    return own_entries(state, "w."), own_entries(state, "v."), state["alpha"]


def mixed(model: nn.Module, w: Params, v: Params, alpha: torch.Tensor) -> Params:
    """v_bar = alpha v + (1 - alpha) w on the parameters; buffers are v's."""
    names = {n for n, _ in model.named_parameters()}
    return {k: alpha * v[k] + (1 - alpha) * w[k] if k in names else v[k] for k in v}


class MixedLoss:
    """f_i(v_bar) with v_bar = alpha v + (1 - alpha) w.detach(): a batch term of the :class:`Pair`'s step.

    f_i is the run's base loss (the one w trains with), at temperature 1.
    """

    per_batch = True
    captures: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()

    def __init__(self, base_loss: BaseLoss = temperature_cross_entropy) -> None:
        self.base_loss = base_loss

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context, step: StepView) -> torch.Tensor:
        base = step.model.get_submodule("v")
        alpha = params["alpha"] if "alpha" in params else step.buffers["alpha"]  # fixed alpha: frozen, with the buffers
        # a frozen weight (LocalSpec.frozen) is read from the buffers, as alpha is when fixed
        both = {**step.buffers, **params}
        weights = {n: alpha * both[f"v.{n}"] + (1 - alpha) * both[f"w.{n}"].detach() for n, _ in base.named_parameters()}
        buffers = {n: step.buffers[f"v.{n}"] for n, _ in persistent_buffers(base)}  # a persistent=False one: the module's own
        logits = functional_call(base, (weights, buffers), (step.x,))
        return self.base_loss(half_to_float(logits), step.y, 1.0)  # bf16 autocast's in float32; a float64 model's as they are


class OnShared(OnPart):
    """A parameter term of the run's objective applied to w, the pair's shared model."""

    def __init__(self, term: LossTerm) -> None:
        super().__init__(term, "w.")


@dataclass(frozen=True)
class APFLClient:
    """APFL's client half: trains the pair (w, v, alpha) from (w^t, v_i, alpha_i); keeps v_i and alpha_i."""

    model: nn.Module
    alpha: float
    adaptive: bool
    alpha_sgd: bool = False
    """Step alpha by plain SGD outside the run's optimiser (:attr:`APFLOptions.alpha_step`)."""
    alpha_lr: float | None = None
    """That step's learning rate; None: the round's."""

    def prepare(self, state: ClientState, start: Params, context: Context) -> tuple[Params, dict[str, Wire]]:
        return start, dict(context)

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        """0: the pair's step (w's loss + f(v_bar)); alpha frozen when not adaptive."""
        refuse_representation_readers(spec, "APFL applies the run's parameter terms to w, and its forward is the pair's", losses=False)
        # the run's frozen (and undecayed) weights are the model's: both copies in the pair
        frozen = frozenset(f"{part}{k}" for k in spec.frozen for part in ("w.", "v.")) | (frozenset() if self.adaptive else {"alpha"})
        no_decay = frozenset(f"{part}{k}" for k in spec.no_decay for part in ("w.", "v.")) | {"alpha"}
        terms: list[Term] = [OnShared(cast(LossTerm, t)) for t in spec.terms]
        terms.append(MixedLoss(spec.base_loss))
        pair = replace(spec, model=Pair(self.model), terms=tuple(terms), frozen=frozen, no_decay=no_decay)
        if self.alpha_sgd:  # Algorithm 1's step on alpha, outside the run's optimiser
            pair = replace(pair, plain_sgd=frozenset({"alpha"}), plain_lr=self.alpha_lr)
        return (pair,)

    def train(self, local: Local) -> LocalProgram:
        own = own_entries(local.state, PREFIX)
        v = {k: t for k, t in own.items() if k != "alpha"} or local.start
        alpha = own["alpha"] if own else torch.tensor(self.alpha, dtype=_float(local.start), device=local.y.device)
        out = yield Train(pair_state(local.start, v, alpha), local.context, objective=0)
        w, v_new, a = split_pair(out.params)
        a = a.clamp(0.0, 1.0)
        return Personal(w, out.num_steps, out.mean_loss, mixed(self.model, w, v_new, a), with_prefix({**v_new, "alpha": a}, PREFIX))

    def finish(self, model: nn.Module, state: ClientState, trained: Trained) -> tuple[ClientState, Report]:
        return {}, {}  # v_i and alpha_i are kept by the training (Personal.state)

    def personal_model(self, state: ClientState, global_model: Params) -> Params:
        """v_bar = alpha_i v_i + (1 - alpha_i) w with the current global w: the personalised model the client would use now
        (Deng et al. evaluate v_bar with the client's own last w_i, which it does not keep between rounds)."""
        own = own_entries(state, PREFIX)
        device = next(iter(global_model.values())).device
        v = {k: t.to(device) for k, t in own.items() if k != "alpha"}
        return mixed(self.model, global_model, v, own["alpha"].to(device))


PREFIX = "apfl."
"""Where v_i (and alpha_i, as ``apfl.alpha``) live in the client's state."""


def _float(state: Params) -> torch.dtype:
    return next((t.dtype for t in state.values() if t.is_floating_point()), torch.float32)


class APFL(FedAvg):
    """FedAvg on the w_i; v_i and alpha_i are the clients' own (:class:`APFLClient`)."""

    def __init__(self, model: nn.Module, options: APFLOptions = APFLOptions()) -> None:
        super().__init__()
        self.model = model
        self.options = options

    def client_half(self) -> ClientHalf:
        o = self.options
        return APFLClient(self.model, o.alpha, o.adaptive, o.alpha_step == "sgd", o.alpha_lr)


SPEC = register_algorithm(
    "apfl",
    AlgorithmSpec(
        APFLOptions,
        lambda o, ctx: (APFL(ctx.model, o), []),
        "adaptive mixture of a local and the global model (Deng et al. 2020)",
        capabilities=Capabilities(
            private_steps="not audited: its one training also moves the client's kept v_i and alpha_i, whose per-sample gradients would be clipped together with w_i's",
            takes_weights=True,
            not_a_base="APFL's clients run their own local trainings, which PA3Fed's client half does not compose with",
            personal_model=True,
            trains_global_model=True,  # w_i, stepped on f_i(w_i) alone, is what the server averages; v_i and alpha_i stay home
            cost=Cost(step_passes=2.0),  # each step's forward + backward of w (f_i(w)) and of v_bar (f_i(v_bar)): two models' passes
        ),
        makes=(APFL,),
    ),
)

"""Local optimisers beyond plain SGD: Adam/AdamW, gradient clipping by norm, learning-rate schedules.

Functional, like the rest of the local step (:mod:`chillfl.training.local`):
the optimiser's state is a plain dict of tensors the step owns (one per
client, stacked along a leading client dimension under the vectorised
executor), never a ``torch.optim`` object bound to a module. It starts at
zero for every round's local training, as SGD's momentum buffer always has:
a client's optimiser state does not travel between rounds (clients are
stateless between participations unless a method keeps state). A method that
keeps it (Local-only's ``keep_optimizer_state``) hands a job its last state
as :class:`Carried` and gets the new one back with the outcome.

The maths follows ``torch.optim`` op for op (tests compare both on
hand-checked steps), for one client at time step ``t`` (1-based):

* Adam:  ``g <- g + wd w``;  ``m <- lerp(m, g, 1 - b1)``;  ``v <- b2 v + (1 - b2) g^2``;
  ``w <- w - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)``;
* AdamW: the same without the ``wd w`` gradient term, and ``w <- w (1 - lr wd)`` first
  (decoupled weight decay, Loshchilov & Hutter);
* clipping: ``g <- g * min(1, c / (||g|| + 1e-6))`` with ``||g||`` the L2 norm of
  the client's whole gradient (every parameter), as ``clip_grad_norm_``; applied
  after the gradient and before weight decay and momentum.

SGD (momentum, Nesterov, weight decay) stays in :func:`chillfl.training.local.sgd_update_`,
which can update linear weights from gradient factors; Adam and clipping need
every gradient whole (its square, its norm), so they materialise them first.

Schedules multiply the learning rate by a factor of a position ``t`` in ``[0, T)``:
``constant`` 1; ``step`` ``gamma ** (t // step_size)``; ``cosine``
``f + (1 - f) (1 + cos(pi t / T)) / 2`` with ``f = lr_min / lr`` (``torch``'s
``CosineAnnealingLR`` with ``T_max = T``, ``eta_min = lr_min``). Over ``rounds``
the position is the round (``T`` = rounds) and every step of a round shares one
lr; over ``steps`` it is the local step (``T`` = the client's planned steps this
round: epochs x batches, a straggler stopping early on the same curve) and the
curve restarts each round. ``client.lr_decay`` multiplies on top, per round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import torch

from chillfl.training.linear_factors import add_outer_
from chillfl.training.schedule import Optimizer

Params = dict[str, torch.Tensor]
OptState = dict[str, Params]
"""Optimiser state: slot (``momentum``, ``exp_avg``, ``exp_avg_sq``) -> parameter name -> tensor."""
Factors = dict[str, list[tuple[torch.Tensor, torch.Tensor]]]


@dataclass(frozen=True)
class Carried:
    """An optimiser state a client keeps from one local training to its next (Local-only's ``keep_optimizer_state``,
    as PFLlib's clients keep their ``torch.optim`` object): a training given one starts from it instead of zero and
    returns where it ended.

    ``state`` empty: the zero state (a client's first training); ``steps``: the optimiser steps taken so far, which
    Adam's bias correction counts on from (``torch.optim.Adam``'s per-parameter ``step``)."""

    state: OptState = field(default_factory=dict)
    steps: int = 0


def load_carried(fresh: OptState, carried: OptState) -> None:
    """Copy ``carried`` into the zero state ``fresh`` (in place: ``fresh`` keeps its tensors' layouts); a ValueError if
    the two do not hold the same slots and parameters (another optimiser, or other trainable parameters)."""
    layout = {slot: sorted(entries) for slot, entries in fresh.items()}
    if layout != {slot: sorted(entries) for slot, entries in carried.items()}:
        raise ValueError(f"the kept optimiser state has slots/parameters {sorted(carried)} that this training's optimiser does not: {sorted(fresh)}")
    for slot, entries in fresh.items():
        for k, t in entries.items():
            t.copy_(carried[slot][k])


def init_state(params: Mapping[str, torch.Tensor], optimizer: Optimizer, momentum: float, plain: Iterable[str] = ()) -> OptState:
    """Zero state for ``params``: SGD's momentum buffers (if any), or Adam's two moments; and ``plain_momentum``
    buffers for the parameters in ``plain`` (those stepped by hand with momentum, ``LocalSpec.plain_momentum``)."""
    if optimizer.name == "sgd":
        state = {"momentum": {k: torch.zeros_like(v) for k, v in params.items()}} if momentum else {}
    else:
        state = {slot: {k: torch.zeros_like(v) for k, v in params.items()} for slot in ("exp_avg", "exp_avg_sq")}
    mine = [k for k in params if k in frozenset(plain)]
    if mine:
        state["plain_momentum"] = {k: torch.zeros_like(params[k]) for k in mine}
    return state


def state_slots(optimizer: Optimizer, momentum: float, plain_momentum: bool = False) -> int:
    """Tensors of optimiser state a parameter holds, as :func:`init_state` makes them (for memory estimates): SGD's momentum
    buffer (if any) or Adam's two moments; ``plain_momentum``: the parameter is stepped by hand with momentum
    (:attr:`~chillfl.training.local.LocalSpec.plain_momentum`), and holds that step's buffer too."""
    slots = (1 if momentum else 0) if optimizer.name == "sgd" else 2
    return slots + 1 if plain_momentum else slots


def whole_grads(params: Params, grads: Sequence[torch.Tensor | None], factors: Factors | None) -> list[torch.Tensor]:
    """Every parameter's full gradient: its dense part (None = zero) plus its factored ``dz^T x`` terms."""
    out = []
    for (k, w), g in zip(params.items(), grads):
        pairs = factors.get(k, []) if factors else []
        if g is None:
            g = torch.zeros_like(w)
        elif pairs:
            g = g.clone()
        for x, dz in pairs:
            add_outer_(g, x, dz)
        out.append(g)
    return out


def clip_by_norm_(grads: Sequence[torch.Tensor], max_norm: float, stacked: bool) -> None:
    """Scale ``grads`` in place so that their joint L2 norm is at most ``max_norm`` (per client when ``stacked``).

    ``torch.nn.utils.clip_grad_norm_``'s rule: ``coef = min(1, max_norm / (norm + 1e-6))``.
    """
    if stacked:
        norms = torch.stack([torch.linalg.vector_norm(g, dim=tuple(range(1, g.dim()))) if g.dim() > 1 else g.abs() for g in grads])
        total = torch.linalg.vector_norm(norms, dim=0)
    else:
        total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *([1] * (g.dim() - 1))) if stacked else coef)


def _per_client(value: float | torch.Tensor, like: torch.Tensor) -> float | torch.Tensor:
    """A number as is; a per-client tensor [C] viewed to broadcast against a stacked ``like`` [C, ...]."""
    return value.view(-1, *([1] * (like.dim() - 1))) if isinstance(value, torch.Tensor) else value


@torch.no_grad()
def adam_update_(
    params: Params, grads: Sequence[torch.Tensor], state: OptState, lr: float | torch.Tensor, weight_decay: float, optimizer: Optimizer, step: int,
    no_decay: frozenset[str] = frozenset(),
) -> None:
    """One Adam / AdamW step ``step`` (1-based), in place on ``params`` and ``state`` (``torch.optim``'s single-tensor ops).

    ``lr`` a number, or a per-client tensor [C] for stacked parameters; ``no_decay``: keys weight decay skips.
    """
    b1, b2 = optimizer.betas
    bias1 = 1 - b1**step
    bias2_sqrt = (1 - b2**step) ** 0.5
    for (k, w), g in zip(params.items(), grads):
        rate = _per_client(lr, w)
        if weight_decay and k not in no_decay:
            if optimizer.name == "adamw":
                w.mul_(1 - rate * weight_decay)
            else:
                g = g.add(w, alpha=weight_decay)
        m, v = state["exp_avg"][k], state["exp_avg_sq"][k]
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = (v.sqrt() / bias2_sqrt).add_(optimizer.eps)
        if isinstance(rate, torch.Tensor):
            w.sub_(m / denom * (rate / bias1))
        else:
            w.addcdiv_(m, denom, value=-(rate / bias1))

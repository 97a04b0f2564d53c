"""Local training objectives.

The base loss is logit chilling's temperature cross-entropy (FLex&Chill,
Algorithm 1: z = f(x) / T, loss = CE(z, y)). Methods add *terms*: functions
of the flat parameter dict and the client's context (FedProx's proximal term,
SCAFFOLD's and VRL-SGD's linear corrections), so that one training step serves
every method and stays vmappable over clients.

Gradient: d CE(z/T, y) / dz = (softmax(z/T) - onehot(y)) / T per sample
(averaged over the batch), which ``tests/test_objective.py`` checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence, cast

import torch
import torch.nn.functional as F
from torch import nn

Params = dict[str, torch.Tensor]

Wire = float | torch.Tensor | dict[str, torch.Tensor]
"""What one entry of a message between server and client may hold: a number, a tensor, or a name -> tensor table."""

Context = Mapping[str, Wire]
"""What the local objective's terms read (``mu``, ``correction``, ``moon_prev``, ...), by name; each term
declares the names it reads in ``reads``. Under the vectorised executor a number arrives as a 0-d tensor."""


def read_table(context: Context, key: str) -> Mapping[str, torch.Tensor]:
    """``context[key]`` as a name -> tensor table (a model, a control variate)."""
    value = context[key]
    if not isinstance(value, Mapping):
        raise TypeError(f"context[{key!r}] must be a name -> tensor table, got {type(value).__name__}")
    return value


def read_number(context: Context, key: str) -> float | torch.Tensor:
    """``context[key]`` as a number (a float, or a 0-d tensor under vmap)."""
    value = context[key]
    if isinstance(value, Mapping):
        raise TypeError(f"context[{key!r}] must be a number, got a table")
    return value


def read_tensor(context: Context, key: str) -> torch.Tensor:
    """``context[key]`` as a tensor."""
    value = context[key]
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"context[{key!r}] must be a tensor, got {type(value).__name__}")
    return value


def temperature_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, temperature: float | torch.Tensor) -> torch.Tensor:
    """Mean CE(logits / T, y); log-softmax based, stable down to T = 0.01 and below.

    ``temperature`` may be a 0-d tensor (a batched per-client temperature under vmap).
    Written as log-softmax + gather rather than ``F.cross_entropy``: under
    ``vmap`` the latter runs a Python decomposition (milliseconds per call and
    an import of sympy on first use), the former two native batched kernels.
    """
    log_probs = F.log_softmax(logits / temperature, dim=-1)
    return -log_probs.gather(-1, targets.unsqueeze(-1)).mean()


class LossTerm(Protocol):
    """An additive term of the local objective: term(params, context) -> scalar; ``reads`` names its context keys."""

    reads: tuple[str, ...]

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context) -> torch.Tensor:
        ...


LossFn = Callable[[torch.Tensor, torch.Tensor, Any], torch.Tensor]
"""base loss signature: (logits, targets, temperature) -> scalar."""


@dataclass(unsafe_hash=True)
class ProximalTerm:
    """``mu/2 * sum_k ||w_k - w^t_k||^2`` over the trainable keys; reads ``mu`` and ``global_params``.

    FedProx's term (Li et al., Eq. 2). ``[algorithm] name = "fedprox"`` adds it,
    and so does ``[objective] proximal_mu`` on top of any other aggregator.
    ``weight`` / ``anchor`` name other context keys, so that methods whose
    objective has the same form (Ditto's lambda/2 ||v - w^t||^2, pFedMe's inner
    problem, FedDyn's alpha/2 ||theta - theta^{t-1}||^2) add their own copy
    beside FedProx's without sharing its keys.
    """

    weight: str = "mu"
    anchor: str = "global_params"
    reads: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.reads = (self.weight, self.anchor)

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context) -> torch.Tensor:
        anchor = read_table(context, self.anchor)
        parts = [((params[k] - anchor[k].detach()) ** 2).sum() for k in params if k in anchor]
        total = torch.stack(parts).sum() if parts else torch.zeros(())
        return 0.5 * read_number(context, self.weight) * total


@dataclass
class StepView:
    """What a batch term sees of one training step (see :class:`BatchTerm`).

    ``features`` is the model's representation (the input of its last
    ``nn.Linear``, :mod:`chillfl.models.parts`) and ``logits`` its output, both
    of the training forward, so a term's gradient flows through them;
    ``captured`` maps each module a term asked for (``BatchTerm.captures``) to
    its (input, output) in that forward. ``model`` is the step's template
    (run it with ``torch.func.functional_call``); ``buffers`` the client's.
    """

    model: nn.Module
    x: torch.Tensor
    y: torch.Tensor
    features: torch.Tensor
    logits: torch.Tensor
    base_loss: torch.Tensor
    buffers: Mapping[str, torch.Tensor]
    captured: Mapping[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)


class BatchTerm(Protocol):
    """A term that reads the step's batch and forward: term(params, context, step) -> scalar.

    MOON, FedAlign and FedGen regularise representations, not parameters, so
    they need the batch. :class:`~chillfl.training.local.StepLoss` tells the
    two kinds apart by ``per_batch`` (True here); ``captures`` names modules
    whose (input, output) the training forward records for the term.
    """

    per_batch: bool
    captures: tuple[str, ...]
    reads: tuple[str, ...]

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context, step: StepView) -> torch.Tensor:
        ...


def is_batch_term(term: object) -> bool:
    """Whether ``term`` is a :class:`BatchTerm` (reads the batch) rather than a :class:`LossTerm`."""
    return bool(getattr(term, "per_batch", False))


Term = LossTerm | BatchTerm
"""Any additive term of the local objective."""


def apply_term(term: Term, params: Mapping[str, torch.Tensor], context: Context, step: StepView | None) -> torch.Tensor:
    """``term``'s value: a batch term gets the step (which the caller builds only when some term needs it)."""
    if is_batch_term(term):
        assert step is not None, "a batch term needs the step's view"
        return cast(BatchTerm, term)(params, context, step)
    return cast(LossTerm, term)(params, context)


class ContextError(ValueError):
    """A term reads a context key that the round's context lacks: the method's downlink or client half must put it there."""


def check_reads(terms: Sequence[Term], context: Mapping[str, Any], client_id: int) -> None:
    """Every key the ``terms`` declare in ``reads`` is in ``context``; else one :class:`ContextError` naming the term and key.

    Checked once per client training (not per step): a missing key is a bug in a method's
    ``downlink``/``ClientHalf.prepare``, best reported before any step, by name.
    """
    for term in terms:
        missing = [key for key in term.reads if key not in context]
        if missing:
            have = ", ".join(sorted(map(str, context))) or "nothing"
            raise ContextError(
                f"{type(term).__qualname__} reads context key(s) {', '.join(map(repr, missing))}, which client {client_id}'s context "
                f"lacks (it has: {have}); the aggregator's downlink or its client half's prepare must provide them"
            )

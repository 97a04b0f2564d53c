"""Local training objectives.

Checked against papers/flexchill.txt Algorithm 1 (z = w(x) / T), papers/fedchill.txt Eq. 2-5 and eis-lab/temperature-scaling ``Clients/naive.py`` (``train``), 2026-12-02.

The base loss is logit chilling's temperature cross-entropy (FLex&Chill,
Algorithm 1: z = f(x) / T, loss = CE(z, y)). Methods add *terms*
(:mod:`chillfl.training.terms`: what a term is, and terms by name): functions
of the flat parameter dict and the client's context (FedProx's proximal term,
SCAFFOLD's and VRL-SGD's linear corrections), so that one training step serves
every method and stays vmappable over clients.

Gradient: d CE(z/T, y) / dz = (softmax(z/T) - onehot(y)) / T per sample
(averaged over the batch), which ``tests/test_objective.py`` checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
import torch.nn.functional as F

from chillfl.capabilities import PARAMETER_TERM, Cost
from chillfl.options import require
from chillfl.training.terms import (
    BatchTerm,
    Context,
    ContextError,
    LossTerm,
    Params,
    StepView,
    Term,
    TermSpec,
    Wire,
    apply_term,
    check_reads,
    half_to_float,
    is_batch_term,
    read_number,
    read_table,
    read_tensor,
    register_term,
)

__all__ = [  # the term types live in chillfl.training.terms; re-exported where methods have imported them from
    "BatchTerm",
    "Context",
    "ContextError",
    "LossFn",
    "LossTerm",
    "Params",
    "ProximalOptions",
    "ProximalTerm",
    "StepView",
    "Term",
    "Wire",
    "apply_term",
    "check_reads",
    "distillation_kl",
    "is_batch_term",
    "read_number",
    "read_table",
    "read_tensor",
    "temperature_cross_entropy",
]


def temperature_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, temperature: float | torch.Tensor) -> torch.Tensor:
    """Mean CE(logits / T, y); log-softmax based, stable down to T = 0.01 and below.

    ``temperature`` may be a 0-d tensor (a batched per-client temperature under vmap).
    Written as log-softmax + gather rather than ``F.cross_entropy``: under
    ``vmap`` the latter runs a Python decomposition (milliseconds per call and
    an import of sympy on first use), the former two native batched kernels.

    16-bit logits (a ``.half()`` model of one's own) are divided and log-softmaxed in float32 and the loss is cast
    back: in float16, ``z / T`` is inf once |z| / T > 65504 (|z| > 6.6 at T = 1e-4) although the loss fits.
    """
    log_probs = F.log_softmax(half_to_float(logits) / temperature, dim=-1)
    return -log_probs.gather(-1, targets.unsqueeze(-1)).mean().to(logits.dtype)


def distillation_kl(
    logits: torch.Tensor, teacher: torch.Tensor, temperature: float = 1.0, *, cross_entropy: bool = False, reduction: str = "batchmean",
) -> torch.Tensor:
    """KL(softmax(teacher / T) || softmax(logits)): a student's distillation towards a teacher's softened prediction.

    The student is read at T = 1 and there is no T^2 factor (FedPHP's authors' KD; FML's mutual KL has T = 1).
    ``cross_entropy``: ``-sum_c p_c log q_c`` instead, the KL plus the teacher's entropy H(p), which FedPHP's code
    minimises: the same gradient into the student, a value larger by H(p). ``reduction``: ``batchmean`` sums over
    classes and averages over the batch; ``mean`` averages over both (``nn.KLDivLoss()``'s default). The gradient
    flows into both arguments (detach the teacher to keep it fixed).

    One function for both methods (they were two copies); its branches keep each method's operations as they were,
    so their runs are bitwise what they were.
    """
    if cross_entropy:
        cross = F.softmax(teacher / temperature, dim=-1) * F.log_softmax(logits, dim=-1)
        return -(cross.sum(-1).mean() if reduction == "batchmean" else cross.mean())
    log_p = F.log_softmax(teacher if temperature == 1.0 else teacher / temperature, dim=-1)
    pointwise = log_p.exp() * (log_p - F.log_softmax(logits, dim=-1))
    return pointwise.sum(-1).mean() if reduction == "batchmean" else pointwise.mean()


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


@dataclass(frozen=True)
class ProximalOptions:
    """Options of the ``proximal`` term added from ``[objective] terms`` (``proximal_mu = x`` is ``{name = "proximal", mu = x}``)."""

    mu: float = 0.01

    def validate(self, section: str) -> None:
        require(0 <= self.mu <= 1e6, f"{section}.mu", f"must be in [0, 1e6], got {self.mu}")


PROXIMAL = register_term(
    "proximal",
    TermSpec(
        ProximalOptions, lambda o: ProximalTerm(), "the proximal term mu/2 ||w - w^t||^2 (FedProx)",
        sends=lambda o: {"mu": o.mu}, anchor="global_params", anchor_buffers=False,  # ProximalTerm: trainable keys only
        cost=Cost(pass_overhead=PARAMETER_TERM),  # over every parameter tensor a pass: calls, next to no FLOPs
    ),
)
"""FedProx's term on top of any parameter-sharing aggregator: it reads ``mu`` and the round's start model as ``global_params``."""

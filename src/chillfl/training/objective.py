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

from typing import Any, Callable, Mapping, Protocol

import torch
import torch.nn.functional as F

Params = dict[str, torch.Tensor]


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
    """An additive term of the local objective: term(params, context) -> scalar."""

    def __call__(self, params: Mapping[str, torch.Tensor], context: Mapping[str, Any]) -> torch.Tensor:
        ...


LossFn = Callable[[torch.Tensor, torch.Tensor, Any], torch.Tensor]
"""base loss signature: (logits, targets, temperature) -> scalar."""


class ProximalTerm:
    """``mu/2 * sum_k ||w_k - w^t_k||^2`` over the trainable keys; reads ``mu`` and ``global_params``.

    FedProx's term (Li et al., Eq. 2). ``[algorithm] name = "fedprox"`` adds it,
    and so does ``[objective] proximal_mu`` on top of any other aggregator.
    """

    def __call__(self, params: Mapping[str, torch.Tensor], context: Mapping[str, Any]) -> torch.Tensor:
        anchor: Mapping[str, torch.Tensor] = context["global_params"]
        parts = [((params[k] - anchor[k].detach()) ** 2).sum() for k in params if k in anchor]
        total = torch.stack(parts).sum() if parts else torch.zeros(())
        return 0.5 * context["mu"] * total

"""Sharpness-aware local steps: FedSAM and FedASAM (``[client] sam_rho``, ``sam_adaptive``).

SAM (Foret et al., ICLR 2021) takes each step's gradient at the worst point of a small ball around the weights,
which seeks flat minima; in FL the clients train with it (FedSAM: Qu et al., ICML 2022, and Caldarola, Caputo &
Ciccone, ECCV 2022, who also run the adaptive variant, FedASAM, after Kwon et al.'s ASAM, ICML 2021). One step:

    g     = grad L(w)                                   (the batch's gradient, every term of the objective)
    e(w)  = rho * T^2 g / ||T g||                       (T = I for SAM; T = diag(|w| + eta) for ASAM; ||.|| over every trained parameter)
    g_SAM = grad L(w + e(w))                            (the same batch, the same objective)
    w    <- optimiser step of w with g_SAM              (momentum, weight decay, clipping, Adam: as configured)

Choices:

* **The norm's guard**: ``||T g|| + 1e-12``, as the SAM reference implementation (github.com/davda54/sam, which the
  FedDecorr code copies for its FedSAM); a zero gradient gives no perturbation. Kwon et al.'s ASAM code, which the
  FedSAM/FedASAM code (debcaldarola/fedsam) copies, adds 1e-16 instead: the same perturbation but for a vanishing g.
* **ASAM's T**: ``|w| + eta`` on every trained parameter, ``eta = 0`` by default (``client.sam_eta``): the reference
  implementation's ``adaptive = True`` form, so a weight at 0 is not perturbed. Kwon et al.'s code takes
  ``|w| + eta`` (eta = 0.01 by default) on the parameters whose name contains ``weight`` and T = I on the others
  (biases); the FedASAM code runs it with ``-eta 0`` in its CIFAR-10 script. ``sam_eta = 0.01`` gives their eta;
  the biases' T = I is not an option here (a switch on parameter names).
* **Batch norm's running statistics** move once a step, in the first forward (at w): the second forward, at the
  perturbed weights, runs on a copy of the buffers that is thrown away (the reference implementation's README
  recommends this; its plain use, the FedSAM code and the FedDecorr code update them in both forwards).
* **The perturbation's g** is the plain gradient of the objective: weight decay, gradient clipping and momentum are
  the optimiser's and act on g_SAM only, as in all three codes (their base optimiser's ``weight_decay`` is applied
  in its ``step``, after the ascent; none clips).
* **The recorded train loss** is the first forward's, L(w): the loss of the weights being trained (the FedSAM and
  FedDecorr codes log the first and the second one respectively).
* Every step of a client's local training is sharpness-aware, including a straggler's; the other training phases
  of a method (distillation, a server model) are not (:meth:`chillfl.training.local.LocalSpec.phase`).

Checked (2026-12) against: Foret et al. (ICLR 2021) Algorithm 1 (e = rho g / ||g||, the gradient at w + e applied at
w); davda54/sam ``sam.py`` (``_grad_norm``, ``first_step``: ``e_w = (p^2 if adaptive else 1) * grad * rho / (norm +
1e-12)``); debcaldarola/fedsam ``models/clients/minimizers.py`` (``ASAM.ascent_step``: T = |w| + eta on ``weight``
parameters, 1e-16), ``asam_client.py`` / ``sam_client.py`` (two forwards in train mode, then the base optimiser's
step) and ``paper_experiments/cifar10.sh`` (rho 0.5, eta 0); bytedance/FedDecorr ``approach/fedsam.py`` (davda54's
code, rho 0.05). Found: ASAM's eta was missing (now ``sam_eta``, default 0, unchanged behaviour); the docs named
davda54's code as the FedSAM code's.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch

from chillfl.capabilities import Cost
from chillfl.training.optim import Factors, whole_grads

Params = dict[str, torch.Tensor]
NORM_GUARD = 1e-12
"""Added to ``||T g||``, as the reference implementation: a zero gradient perturbs nothing instead of dividing by 0."""
COST = Cost(step_passes=2.0)
"""A sharpness-aware step's work, for time estimates: two forward + backward passes (at w and at w + e(w))."""


@torch.no_grad()
def perturbation(
    params: Mapping[str, torch.Tensor], grads: Sequence[torch.Tensor], rho: float, adaptive: bool, stacked: bool = False, eta: float = 0.0
) -> list[torch.Tensor]:
    """``e(w) = rho * T^2 g / (||T g|| + 1e-12)``, one tensor per parameter (T = |w| + eta when ``adaptive``, else I).

    ``stacked``: parameters carry a leading client dimension (the vectorised executor); each client's norm runs over its
    own parameters only, with the same ops as one client's (a norm per tensor, then the norm of those norms).
    """
    scales = [(w.abs() + eta if eta else w.abs()) if adaptive else None for w in params.values()]
    scaled = [g if t is None else t * g for t, g in zip(scales, grads)]
    if not scaled:
        return []
    if stacked:
        norms = torch.stack([torch.linalg.vector_norm(s, dim=tuple(range(1, s.dim()))) if s.dim() > 1 else s.abs() for s in scaled])
        factor = rho / (torch.linalg.vector_norm(norms, dim=0) + NORM_GUARD)  # [C]
        return [(s if t is None else t * s) * factor.view(-1, *([1] * (s.dim() - 1))) for t, s in zip(scales, scaled)]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(s) for s in scaled]))
    factor = rho / (norm + NORM_GUARD)
    return [(s if t is None else t * s) * factor for t, s in zip(scales, scaled)]


Evaluate = Callable[[Params, Params], tuple[torch.Tensor, Any]]
"""``(params, buffers) -> (loss, captured)``: the step's objective on its batch."""
Differentiate = Callable[[torch.Tensor, Params, Any], tuple[list[torch.Tensor | None], Factors]]
"""``(loss, params, captured) -> (dense gradients, factored parts)``."""


def sharpness_aware_grads(
    params: Params, buffers: Params, grads: Sequence[torch.Tensor | None], factors: Factors | None,
    rho: float, adaptive: bool, evaluate: Evaluate, differentiate: Differentiate, stacked: bool = False, eta: float = 0.0,
) -> tuple[list[torch.Tensor | None], Factors]:
    """The gradient at ``w + e(w)`` from the gradient at ``w`` (``grads``, ``factors``): see the module docstring.

    ``buffers`` are the client's, already moved by the first forward; the second forward runs on a copy.
    ``stacked``: many clients' parameters along a leading dimension (the vectorised executor), each perturbed by its own
    norm; ``evaluate`` then returns the sum of the clients' losses, whose gradient is each client's own. ``eta``: ASAM's
    T = |w| + eta (with ``adaptive``).
    """
    first = whole_grads(params, grads, factors)
    moved = perturbation(params, first, rho, adaptive, stacked, eta)
    at = {k: (w.detach() + e).requires_grad_(True) for (k, w), e in zip(params.items(), moved)}
    loss, captured = evaluate(at, {k: v.clone() for k, v in buffers.items()})
    return differentiate(loss, at, captured)

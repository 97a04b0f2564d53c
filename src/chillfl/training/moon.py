"""MOON's model-contrastive term (Li, He & Song, CVPR 2021, Eq. 2-3).

With z the representation of the model being trained, z_glob that of the
global model the round started from and z_prev that of the client's own
model after its previous local training, all on the same input x,

    l_con = -log( exp(sim(z, z_glob)/tau) / (exp(sim(z, z_glob)/tau) + exp(sim(z, z_prev)/tau)) )

with cosine similarity, averaged over the batch; the local objective is
CE + mu * l_con (Eq. 3). z_glob and z_prev carry no gradient (the official
code freezes both models). "Representation" is the input of the model's
classifier head (:mod:`chillfl.models.parts`): with ``[model]
projection_dim`` set, the output of MOON's projection head, as in the paper.

Context (sent by :class:`chillfl.aggregation.moon.Moon`): ``moon_weight``
(mu, or 0 for a client with no previous model yet), ``moon_tau``,
``moon_global`` and ``moon_prev`` (full model states).

Checked against (2026-12-02) QinbinLi/MOON ``main.py`` ``train_net_fedcon``
(``cos = CosineSimilarity(dim=-1)`` on the projections ``pro1, pro2, pro3``,
``logits /= temperature``, ``CrossEntropyLoss`` with labels 0, ``mu *``) and
``model.py`` ``ModelFedCon`` (``l1``, ReLU, ``l2``: the projection, which the
output layer ``l3`` reads: :mod:`chillfl.models.projection`'s head).
"""

from __future__ import annotations

from typing import Mapping

import torch
import torch.nn.functional as F

from chillfl.models.parts import forward_with_features
from chillfl.training.objective import Context, StepView, read_number, read_table
from chillfl.training.terms import frozen_forward


def moon_loss(z: torch.Tensor, z_glob: torch.Tensor, z_prev: torch.Tensor, tau: float | torch.Tensor) -> torch.Tensor:
    """Mean over the batch of -log(e^{s_g/tau} / (e^{s_g/tau} + e^{s_p/tau})), s = cosine similarity (eps 1e-8, as nn.CosineSimilarity).

    Written as logsumexp(s_g/tau, s_p/tau) - s_g/tau: the cross-entropy of
    the 2-way logits (s_g, s_p)/tau with target 0, as the official code does.
    """
    pos = F.cosine_similarity(z, z_glob, dim=-1) / tau
    neg = F.cosine_similarity(z, z_prev, dim=-1) / tau
    return (torch.logsumexp(torch.stack([pos, neg], dim=-1), dim=-1) - pos).mean()


def frozen_features(step: StepView, state: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The representation of the model with ``state`` on the step's batch: eval mode, no gradient.

    Eval mode as the official code runs the global and previous models
    (batch norm uses the model's own running statistics, no dropout).
    """
    features, _ = frozen_forward(step, state, lambda call: forward_with_features(step.model, step.x, call=call, head=step.head))
    return features.detach()


class MoonTerm:
    """``moon_weight * l_con(z, z_glob, z_prev)``: a batch term (reads the step's representation)."""

    per_batch = True
    captures: tuple[str, ...] = ()
    reads: tuple[str, ...] = ("moon_weight", "moon_tau", "moon_global", "moon_prev")

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context, step: StepView) -> torch.Tensor:
        z_glob = frozen_features(step, read_table(context, "moon_global"))
        z_prev = frozen_features(step, read_table(context, "moon_prev"))
        return read_number(context, "moon_weight") * moon_loss(step.features, z_glob, z_prev, read_number(context, "moon_tau"))

"""``dp-sgd``: the local step's gradient from per-sample gradients, each clipped to C, summed, noised (Abadi et al. 2016).

For a batch B of b samples, with g_j the gradient of sample j's loss (``torch.func.grad`` under
``vmap`` over the samples) over all trainable parameters together:

    g = ( sum_j g_j min(1, C / ||g_j||_2) + z ) / b,      z ~ N(0, (sigma C)^2 I)

then the run's optimiser step takes g as the gradient. b is the batch's actual size (shuffled
fixed-size batches; the accountant assumes Poisson sampling at q = batch_size / n_k, the usual
approximation, Opacus's default data loader aside). The noise of local step s of a job comes from
``derive_seed(job seed, "dp-sgd", s)``: the same bits under every executor and after a resume.
Models with batch norm are refused (a sample's gradient would depend on its batch-mates).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch
from torch.func import grad, vmap

from chillfl.clipping import clip_factor, gaussian_like
from chillfl.seeds import derive_seed

Params = dict[str, torch.Tensor]
LossFn = Callable[..., tuple[torch.Tensor, Any]]


@dataclass(frozen=True)
class PerSampleClipping:
    """The options of ``dp-sgd``'s step (it travels to worker processes with the spec: numbers only)."""

    clip_norm: float
    noise_multiplier: float

    def gradients(
        self, loss_fn: LossFn, params: Params, buffers: Params, x: torch.Tensor, y: torch.Tensor, temperature: Any, context: Mapping[str, Any], seed: int, step: int
    ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """(mean of the samples' losses, the privatised gradient of every parameter in ``params``' order)."""
        keys = list(params)
        detached = {k: v.detach() for k, v in params.items()}

        def one(p: Params, xi: torch.Tensor, yi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            value, _ = loss_fn(p, buffers, xi[None], yi[None], temperature, context)
            return value, value.detach()

        per_sample, losses = vmap(grad(one, has_aux=True), in_dims=(None, 0, 0), randomness="different")(detached, x, y)
        flat = [per_sample[k].reshape(len(y), -1) for k in keys]
        norms = torch.sqrt(sum((g.double() ** 2).sum(1) for g in flat))  # ||g_j|| over all parameters together, float64
        scale = clip_factor(norms, self.clip_norm).to(flat[0].dtype)  # [b]
        noise = gaussian_like(detached, self.noise_multiplier * self.clip_norm, derive_seed(seed, "dp-sgd", step))
        out: list[torch.Tensor | None] = [(torch.tensordot(scale, per_sample[k], dims=1) + noise[k]) / len(y) for k in keys]
        return losses.mean(), out

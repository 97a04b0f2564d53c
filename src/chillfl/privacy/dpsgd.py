"""``dp-sgd``: the local step's gradient from per-sample gradients, each clipped to C, summed, noised (Abadi et al. 2016).

For a batch B of b samples, with g_j the gradient of sample j's loss (``torch.func.grad`` under
``vmap`` over the samples) over all trainable parameters together:

    g = ( sum_j g_j min(1, C / ||g_j||_2) + z ) / b,      z ~ N(0, (sigma C)^2 I)

then the run's optimiser step takes g as the gradient. b is the batch's actual size, or with ``lot`` the
configured batch size L, as Abadi et al. divide by their lot size (the two differ on an epoch's last batch:
shuffled fixed-size batches; the accountant assumes Poisson sampling at q = batch_size / n_k, the usual
approximation, Opacus's default data loader aside). The noise of local step s of a job comes from
``derive_seed(job seed, "dp-sgd", s)``: the same bits under every executor and after a resume.
Models with batch norm are refused (a sample's gradient would depend on its batch-mates).

Checked against: Abadi et al. 2016 Algorithm 1 and Sec. 3.1 (per-example clip to C, sum, N(0, sigma^2 C^2 I),
divide by the lot size L; lots drawn with q = L/N), pytorch/opacus 1.6 ``opacus/optimizers/optimizer.py``
(``clip_and_accumulate``: one norm over every parameter's per-sample norms, factor C / (norm + 1e-6) capped at 1;
``add_noise``: std ``noise_multiplier * max_grad_norm`` on the sum; ``scale_grad``: divided by the *expected* batch
size, since its Poisson batches' sizes are random: docs/privacy.md says why chillfl's fixed batches may use their
own), 2026-12-02.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch
from torch.func import grad, vmap

from chillfl.clipping import clip_factor, gaussian_like
from chillfl.seeds import derive_seed

Params = dict[str, torch.Tensor]
LossFn = Callable[..., tuple[torch.Tensor, Any]]
StackedLossFn = Callable[[Params, Params, torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]], tuple[torch.Tensor, Any]]
"""One client's ``(params, buffers, x, y, temperature, context leaves) -> (loss, aux)`` under the vmap over clients."""


@dataclass(frozen=True)
class PerSampleClipping:
    """The options of ``dp-sgd``'s step (it travels to worker processes with the spec: numbers only)."""

    clip_norm: float
    noise_multiplier: float
    lot: int = 0
    """The noised sum's divisor: 0, each batch's own size; > 0, this fixed L (Abadi et al.'s lot size, whatever the batch holds)."""

    def gradients(
        self, loss_fn: LossFn, params: Params, buffers: Params, x: torch.Tensor, y: torch.Tensor, temperature: Any, context: Mapping[str, Any], seed: int, step: int
    ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """(mean of the samples' losses, the privatised gradient of every parameter in ``params``' order)."""
        detached = {k: v.detach() for k, v in params.items()}
        loss, sums = self._clipped_sum(lambda p, xi, yi: loss_fn(p, buffers, xi, yi, temperature, context)[0], detached, x, y)
        noise = self.noise(detached, seed, step)
        out: list[torch.Tensor | None] = [(total + noise[k]) / (self.lot or len(y)) for k, total in zip(detached, sums)]
        return loss, out

    def stacked_gradients(
        self, loss_fn: StackedLossFn, params: Params, buffers: Params, x: torch.Tensor, y: torch.Tensor, temperature: torch.Tensor,
        leaves: Sequence[torch.Tensor], seeds: Sequence[int], step: int,
    ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """:meth:`gradients` of many clients at once (the vectorised executor): ``params``, ``buffers``, ``x``, ``y``,
        ``temperature`` and the context ``leaves`` carry a leading client dimension, and ``loss_fn(p, b, x, y, t, leaves)``
        is one client's loss. The per-sample gradients come from one ``vmap`` over the clients of the per-sample ``vmap``;
        the clipping and the sum run on them outside it, on plain [clients, samples, ...] tensors (under the outer vmap the
        float64 norms would read the gradients in vmap's strided layout, several times slower than the clients one by one).
        Client i's noise is the very draw it makes alone (``seeds[i]``, its job seed), drawn on the host and stacked.
        Returns (each client's mean loss [C], the privatised gradients [C, ...] in ``params``' order).
        """
        keys = list(params)
        detached = {k: v.detach() for k, v in params.items()}

        def client(p: Params, b: Params, xc: torch.Tensor, yc: torch.Tensor, tc: torch.Tensor, lc: list[torch.Tensor]) -> tuple[Params, torch.Tensor]:
            def one(q: Params, xi: torch.Tensor, yi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                value, _ = loss_fn(q, b, xi[None], yi[None], tc, lc)
                return value, value.detach()

            return vmap(grad(one, has_aux=True), in_dims=(None, 0, 0), randomness="different")(p, xc, yc)

        per_sample, losses = vmap(client)(detached, buffers, x, y, temperature, list(leaves))  # [C, b, ...], [C, b]
        clients, samples = losses.shape
        flat = [per_sample[k].reshape(clients, samples, -1) for k in keys]
        scale = self._scales(flat)  # [C, b]
        draws = [self.noise({k: v[0] for k, v in detached.items()}, seed, step) for seed in seeds]
        out: list[torch.Tensor | None] = [
            (torch.bmm(scale[:, None, :], g).view(detached[k].shape) + torch.stack([d[k] for d in draws])) / (self.lot or samples) for k, g in zip(keys, flat)
        ]
        return losses.mean(1), out

    def noise(self, like: Params, seed: int, step: int) -> Params:
        """z ~ N(0, (sigma C)^2 I) shaped like ``like``, from ``derive_seed(job seed, "dp-sgd", step)``."""
        return gaussian_like(like, self.noise_multiplier * self.clip_norm, derive_seed(seed, "dp-sgd", step))

    def _clipped_sum(
        self, loss_of: Callable[[Params, torch.Tensor, torch.Tensor], torch.Tensor], params: Params, x: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(mean of the samples' losses, sum_j g_j min(1, C / ||g_j||) per parameter): ``loss_of(params, x[j:j+1], y[j:j+1])``."""

        def one(p: Params, xi: torch.Tensor, yi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            value = loss_of(p, xi[None], yi[None])
            return value, value.detach()

        per_sample, losses = vmap(grad(one, has_aux=True), in_dims=(None, 0, 0), randomness="different")(params, x, y)
        scale = self._scales([per_sample[k].reshape(len(y), -1) for k in params])  # [b]
        return losses.mean(), [torch.tensordot(scale, per_sample[k], dims=1) for k in params]

    def _scales(self, flat: Sequence[torch.Tensor]) -> torch.Tensor:
        """min(1, C / ||g_j||) of every sample j, ``flat`` one [..., samples, n] tensor per parameter (norm over all together)."""
        # ||g_j|| in float64 over all parameters together, as float64 norms of the fp32 gradients and then the norm of those:
        # no float64 copy squared (about 4x faster on the CPU than squaring a float64 copy; equal to it up to float64 rounding)
        norms = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g, dim=-1, dtype=torch.float64) for g in flat]), dim=0)
        return clip_factor(norms, self.clip_norm).to(flat[0].dtype)

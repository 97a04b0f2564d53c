"""``dp-sgd``: the local step's gradient from per-sample gradients, each clipped to C, summed, noised (Abadi et al. 2016).

For a batch B of b samples, with g_j the gradient of sample j's loss (``torch.func.grad`` under
``vmap`` over the samples) over all trainable parameters together:

    g = ( sum_j g_j min(1, C / ||g_j||_2) + z ) / b,      z ~ N(0, (sigma C)^2 I)

then the run's optimiser step takes g as the gradient. b is the batch's actual size, or with ``lot`` the
configured batch size L, as Abadi et al. divide by their lot size (the two differ on an epoch's last batch:
shuffled fixed-size batches; the accountant assumes Poisson sampling at q = batch_size / n_k, or (batch_size + 1) / n_k
for an epoch's last batch that took a trailing single sample in (:func:`chillfl.privacy.mechanisms.dp_sgd.step_rates`),
the usual approximation, Opacus's default data loader aside). The noise of local step s of a job comes from
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
from torch import nn
from torch.func import functional_call, grad, vmap

from chillfl.clipping import cast_toward_zero, clip_factor, gaussian_like
from chillfl.errors import ConfigError
from chillfl.global_rng import GLOBAL_RNG
from chillfl.seeds import derive_seed

Params = dict[str, torch.Tensor]
LossFn = Callable[..., tuple[torch.Tensor, Any]]
StackedLossFn = Callable[[Params, Params, torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]], tuple[torch.Tensor, Any]]
"""One client's ``(params, buffers, x, y, temperature, context leaves) -> (loss, aux)`` under the vmap over clients."""


def check_per_sample(model: nn.Module, x: torch.Tensor, y: torch.Tensor, mechanism: str = "dp-sgd") -> None:
    """Before a run: one per-sample gradient step (``vmap`` over ``grad``, as :meth:`PerSampleClipping.gradients` runs it)
    on ``model`` with two rows ``x``, ``y``; a model it fails on is one ConfigError on ``privacy.mechanism``.

    Why a probe: a layer without a per-sample rule in ``torch.func`` (``nn.GRU``: its fused kernel's output does not
    broadcast over the vmapped sample) fails inside the first training step, mid-run, as a torch traceback. There is no
    fallback to fall to (every executor takes per-sample gradients the same way), so the run is refused up front.
    """
    params = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def one(p: Params, xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        logits = functional_call(model, (p, buffers), (xi[None],))
        return torch.nn.functional.cross_entropy(logits.float(), yi[None].long())

    device = next((t.device for t in params.values()), x.device)
    try:
        # a dropout layer's draws leave the run's stream as it was; under GLOBAL_RNG, as every block of chillfl's that forks
        # the global generator: forked and restored amid another thread's run, that run's seeded draws changed
        with GLOBAL_RNG, torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            vmap(grad(one), in_dims=(None, 0, 0), randomness="different")(params, x.to(device), y.to(device))
    except RuntimeError as exc:
        recurrent = [f"{type(m).__name__} {name!r}" for name, m in model.named_modules() if isinstance(m, nn.RNNBase)]
        where = f" (its fused recurrent layers: {', '.join(recurrent)})" if recurrent else ""
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError("privacy.mechanism", f"{mechanism!r} takes each sample's gradient under torch.func.vmap, which fails on model "
                                               f"{type(model).__name__}{where}: {reason}; use a mechanism that clips the uploads instead "
                                               "(dp-fedavg, local), or build the layer from nn.Linear cells") from None


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
        divisor = self.lot or len(y)
        out: list[torch.Tensor | None] = [total.add_(noise[k]).div_(divisor) for k, total in zip(detached, sums)]  # in place: the sums are ours
        return loss, out

    def stacked_gradients(
        self,
        loss_fn: StackedLossFn,
        params: Params,
        buffers: Params,
        x: torch.Tensor,
        y: torch.Tensor,
        temperature: torch.Tensor,
        leaves: Sequence[torch.Tensor],
        seeds: Sequence[int],
        step: int,
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
        one_client = {k: v[0] for k, v in detached.items()}
        if _one_kind(one_client):  # each client's flat draws, stacked once: [C, all parameters' entries]
            noise = _unflatten(torch.stack([self._flat_noise(one_client, seed, step) for seed in seeds]), one_client, lead=(clients,))
        else:
            draws = [self.noise(one_client, seed, step) for seed in seeds]
            noise = {k: torch.stack([d[k] for d in draws]) for k in keys}
        divisor = self.lot or samples
        out: list[torch.Tensor | None] = [torch.bmm(scale[:, None, :], g).view(detached[k].shape).add_(noise[k]).div_(divisor) for k, g in zip(keys, flat)]
        return losses.mean(1), out

    def noise(self, like: Params, seed: int, step: int) -> Params:
        """z ~ N(0, (sigma C)^2 I) shaped like ``like``, from ``derive_seed(job seed, "dp-sgd", step)``: the bits of
        :func:`~chillfl.clipping.gaussian_like`, each entry a view of one flat tensor (:meth:`_flat_noise`)."""
        if not _one_kind(like):
            return gaussian_like(like, self.noise_multiplier * self.clip_norm, derive_seed(seed, "dp-sgd", step))
        return _unflatten(self._flat_noise(like, seed, step), like)

    def _flat_noise(self, like: Params, seed: int, step: int) -> torch.Tensor:
        """:meth:`noise` as one flat tensor, ``like``'s entries in order, each flattened (all of one dtype and device: :func:`_one_kind`).

        The draws are gaussian_like's, one ``randn`` per entry from the same generator in the same order, each into its
        slice of one float64 buffer; then one scaling and one cast for all of them instead of one of each per entry (the
        same elementwise maths, so the same bits). One ``randn`` for all entries would be fewer calls but other bits.
        """
        gen = torch.Generator().manual_seed(derive_seed(seed, "dp-sgd", step))
        sizes = [v.numel() for v in like.values()]
        flat = torch.empty(sum(sizes), dtype=torch.float64)
        for v, part in zip(like.values(), flat.split(sizes)):
            torch.randn(v.shape, generator=gen, dtype=torch.float64, out=part.view(v.shape))
        first = next(iter(like.values()))
        return flat.mul_(self.noise_multiplier * self.clip_norm).to(device=first.device, dtype=first.dtype)

    def _clipped_sum(self, loss_of: Callable[[Params, torch.Tensor, torch.Tensor], torch.Tensor], params: Params, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
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
        norms = torch.linalg.vector_norm(torch.stack([row_norms_float64(g) for g in flat]), dim=0)
        # rounded down to the gradients' dtype, not to nearest: a factor rounded up would scale a clipped sample's
        # gradient to C (1 + 2^-24), past the sensitivity C the accountant charges (the products and their sum still
        # round in float32, so per-sample clipping holds up to that rounding; DP-FedAvg's clip_update holds exactly)
        return cast_toward_zero(clip_factor(norms, self.clip_norm), flat[0].dtype)


NORM_CHUNK = 1 << 17
"""Float64 entries (1 MiB, within a core's L2) of the buffer :func:`row_norms_float64` converts a large gradient's rows into,
a chunk of rows at a time: on the 2-core Xeon (4 MiB L2) 2^17 beat 2^14, 2^16, 2^18 and 2^20 on [16, n] float32 gradients
from n = 12,800 to 819,200 (0.37 ms against vector_norm's 0.58 at n = 40,000; 14 against 50 at 819,200)."""


def row_norms_float64(g: torch.Tensor) -> torch.Tensor:
    """``torch.linalg.vector_norm(g, dim=-1, dtype=torch.float64)``, the same bits, without its float64 copy of all of ``g``.

    That copy was the largest single cost of a large model's DP-SGD step on the CPU: for the McMahan CNN at batch 16 its
    first dense layer's per-sample gradients, 13 M entries, became a fresh 105 MB float64 tensor each step, whose pages
    are faulted in anew every time, then read back from memory. Here a contiguous CPU ``g`` of more than
    :data:`NORM_CHUNK` entries has its rows copied to float64 a chunk at a time into one buffer of at most that size
    (reused, in cache), and their norms taken there. Why the same bits: the CPU norm kernel reduces each row of a last-dimension reduction whole, in one call, the
    same way whatever the number of rows or threads (ATen's ``binary_kernel_reduce_lastdim``), so a row's norm does not
    depend on which rows are reduced with it; ``tests/test_dp_sgd.py`` compares the two bitwise. Anything else (a small
    ``g``, another device, whose kernels may split a row by the shape, other strides) takes ``vector_norm`` itself.
    """
    n = g.shape[-1] if g.dim() else 0
    if g.device.type != "cpu" or g.numel() <= NORM_CHUNK or n == 0 or not g.is_contiguous():
        return torch.linalg.vector_norm(g, dim=-1, dtype=torch.float64)
    rows = g.view(-1, n)
    per = max(1, NORM_CHUNK // n)
    buffer = torch.empty(min(per, len(rows)) * n, dtype=torch.float64)
    out = torch.empty(len(rows), dtype=torch.float64)
    for start in range(0, len(rows), per):
        chunk = rows[start : start + per]
        torch.linalg.vector_norm(buffer[: chunk.numel()].view(chunk.shape).copy_(chunk), dim=-1, out=out[start : start + len(chunk)])
    return out.view(g.shape[:-1])


def _one_kind(like: Params) -> bool:
    """Whether ``like`` is non-empty and all of one dtype and device (its noise then fits one flat tensor)."""
    kinds = {(v.dtype, v.device) for v in like.values()}
    return len(kinds) == 1


def _unflatten(flat: torch.Tensor, like: Params, lead: tuple[int, ...] = ()) -> Params:
    """Views of ``flat`` [*lead, all entries] shaped like each of ``like``'s entries (with the ``lead`` dimensions first)."""
    sizes = [v.numel() for v in like.values()]
    return {k: part.view((*lead, *v.shape)) for (k, v), part in zip(like.items(), flat.split(sizes, dim=-1))}

"""One vmapped step of a chunk: the clients' losses and the gradient of their sum (dense, factored, SAM, DP-SGD).

Why its own module: this is the only place the step is ``vmap``-ed, so what
vmap cannot batch (an op without a batching rule, client-dependent control
flow) turns into :class:`~chillfl.executors.stacking.NotVectorizable` here.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

import torch
from torch.func import vmap

from chillfl.errors import ConfigError
from chillfl.executors.compiled import CompiledSteps, compile_failure
from chillfl.executors.stacking import NotVectorizable, Params, StackedContext
from chillfl.training.local import Factors, PrivateGradients, StepLoss, step_grads
from chillfl.training.sam import sharpness_aware_grads


class StepInputs(NamedTuple):
    """What one vmapped step reads besides the clients' states: their batches, temperatures and context leaves."""

    x: torch.Tensor
    y: torch.Tensor
    t: torch.Tensor
    leaves: list[torch.Tensor]


class VmappedStep:
    """A replica's step loss vmapped over clients, and its gradients (dense and factored).

    The vmapped function takes and returns flat tuples of tensors: ``vmap``
    walks nested inputs and outputs in Python on every call, and for a small
    model's step dicts and nested lists cost as much as the step's kernels.
    """

    def __init__(self, loss_fn: StepLoss, context: StackedContext, seeds: Sequence[int] = ()) -> None:
        self.loss_fn = loss_fn
        self.context = context
        self.seeds = seeds
        """The chunk's job seeds, in chunk order (DP-SGD's noise: :meth:`private`)."""

    def grads(
        self,
        params: Params,
        buffers: Params,
        inputs: StepInputs,
        pending: Mapping[str, tuple[torch.Tensor, torch.Tensor]] | None = None,
        compiled: CompiledSteps | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor | None], Factors]:
        """The clients' losses and the gradient of their sum; any failure becomes NotVectorizable.

        ``compiled``: the vmapped loss runs through it (:class:`~chillfl.executors.compiled.CompiledSteps`). A failure
        of its forward or of its compiled backward is :class:`~chillfl.executors.compiled.CompileFailed` when the same
        step runs eagerly (tried once), not NotVectorizable: falling back would hide the compiler's failure.

        The gradient of the *sum* w.r.t. client i's parameters is client i's own
        gradient: no client's loss depends on another's parameters.
        ``pending``: deferred updates of factored weights (:class:`DeferredOuter`), per client.
        """
        try:
            with torch.enable_grad():
                losses, captured = self._forward(params, buffers, inputs, pending, compiled)
                grads, factors = step_grads(losses.sum(), params, self.loss_fn.keys, captured)
                return losses, grads, factors
        except ConfigError:  # a term that does not fit (TermError) is the config's fault, not vmap's: no fallback
            raise
        except Exception as exc:  # noqa: BLE001 - an op without a batching rule, dropout, client-dependent control flow, ...
            if compiled is not None:  # the compiled forward or backward failed: the compiler's fault if the step runs eagerly
                self.grads(params, buffers, inputs, pending)  # the step's own error propagates from here (NotVectorizable)
                raise compile_failure(exc) from exc
            raise NotVectorizable(f"the training step cannot be vmapped ({type(exc).__name__}: {exc})") from exc

    def _forward(
        self,
        params: Params,
        buffers: Params,
        inputs: StepInputs,
        pending: Mapping[str, tuple[torch.Tensor, torch.Tensor]] | None = None,
        compiled: CompiledSteps | None = None,
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """The clients' losses [C] and the factored linear calls' (input, output) pairs, vmapped (or compiled)."""
        pkeys, bkeys, dkeys = list(params), list(buffers), list(pending or {})
        np_, nb, nl = len(pkeys), len(bkeys), len(inputs.leaves)

        def flat_loss(*flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
            p, b = dict(zip(pkeys, flat[:np_])), dict(zip(bkeys, flat[np_ : np_ + nb]))
            xi, yi, ti = flat[np_ + nb : np_ + nb + 3]
            rest = flat[np_ + nb + 3 :]
            late = {k: (rest[nl + 2 * i], rest[nl + 2 * i + 1]) for i, k in enumerate(dkeys)}
            value, captured = self.loss_fn(p, b, xi, yi, ti, self.context.rebuild(rest[:nl]), late)
            return (value, *(tensor for pair in captured for tensor in pair))

        deferred = [tensor for k in dkeys for tensor in (pending or {})[k]]
        args = (*params.values(), *buffers.values(), inputs.x, inputs.y, inputs.t, *inputs.leaves, *deferred)
        losses, *flat_captured = compiled(flat_loss, args) if compiled is not None else vmap(flat_loss)(*args)
        return losses, list(zip(flat_captured[::2], flat_captured[1::2]))

    def sharpened(
        self,
        params: Params,
        buffers: Params,
        inputs: StepInputs,
        grads: list[torch.Tensor | None],
        factors: Factors,
        rho: float,
        adaptive: bool,
        eta: float = 0.0,
    ) -> tuple[list[torch.Tensor | None], Factors]:
        """SAM's gradient at every client's own ``w + e(w)`` from the gradients at ``w`` (:func:`~chillfl.training.sam.sharpness_aware_grads`,
        stacked: each client's perturbation by its own norm; the second forward on a copy of the buffers)."""

        def evaluate(p: Params, b: Params) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
            losses, captured = self._forward(p, b, inputs)
            return losses.sum(), captured  # d(sum)/d(p_i) is client i's own gradient (the class docstring)

        try:
            with torch.enable_grad():
                return sharpness_aware_grads(
                    params, buffers, grads, factors, rho, adaptive, evaluate, lambda v, p, c: step_grads(v, p, self.loss_fn.keys, c), stacked=True,
                    eta=eta,
                )
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - as in grads()
            raise NotVectorizable(f"the sharpness-aware step cannot be vmapped ({type(exc).__name__}: {exc})") from exc

    def private(
        self,
        clipping: PrivateGradients,
        params: Params,
        buffers: Params,
        inputs: StepInputs,
        members: Sequence[int],
        step: int,
    ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """DP-SGD's losses and privatised gradients of the clients ``members`` (chunk positions; empty: all), each client's
        noise from its own job seed and local ``step``, as the sequential step draws it (:meth:`PrivateGradients.stacked_gradients`)."""
        seeds = [self.seeds[i] for i in members] if members else list(self.seeds)

        def loss(p: Params, b: Params, xi: torch.Tensor, yi: torch.Tensor, ti: torch.Tensor, lc: list[torch.Tensor]) -> tuple[torch.Tensor, Any]:
            return self.loss_fn(p, b, xi, yi, ti, self.context.rebuild(lc))

        try:
            return clipping.stacked_gradients(loss, params, buffers, inputs.x, inputs.y, inputs.t, inputs.leaves, seeds, step)
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - as in grads()
            raise NotVectorizable(f"the DP-SGD step cannot be vmapped ({type(exc).__name__}: {exc})") from exc


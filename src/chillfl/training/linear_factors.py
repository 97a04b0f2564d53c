"""Linear layers' weight gradients kept as two factors and applied by one fused matmul.

For a linear layer ``z = x W^T + b`` the weight gradient is a sum of outer
products, ``dL/dW = dz^T x`` (rows of ``x`` and ``dz`` summed over the batch).
Materialising it writes a weight-sized tensor that the SGD update then reads
back beside the weight: for the small batches of FL clients those passes over
memory, not the arithmetic, are much of a step (a 3072x64 weight is 6.4 times
the size of a batch of 10 inputs, and its gradient is a matmul whose inner
dimension is only the batch). Here the step keeps the gradient as its factors
instead:

* in the training forward, a :class:`FactoredLinear` multiplies by its
  *detached* weight and records ``(x, z)``; autograd then differentiates the
  loss w.r.t. ``z`` (``dz``, batch-sized) instead of w.r.t. ``W``;
* the update applies ``W <- W - lr * dz^T x`` with one in-place
  ``addmm_`` / ``baddbmm_`` (:func:`add_outer_`): the weight is read and
  written once, no gradient tensor is ever allocated.

Exactness: only the layer's own ``F.linear`` runs on the detached weight. Any
other use of the same tensor (a tied output layer, FedProx's proximal term,
SCAFFOLD's correction) still sees the trainable weight and contributes its
ordinary dense gradient, which the update adds; a layer called twice records
two factor pairs. The layer returns a *copy* of ``z``, so an in-place op after
it (``ReLU(inplace=True)``) cannot change the ``z`` whose gradient is taken.
The result is the dense gradient up to float rounding (tests compare them).

Only modules whose type is exactly ``nn.Linear`` are factored: subclasses may
compute differently (e.g. attention's output projection is read directly by
``F.multi_head_attention_forward``), and their weights simply keep dense
gradients.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

Captured = tuple[torch.Tensor, torch.Tensor]
"""(input x, output z) of one factored linear call."""


class FactoredLinear(nn.Linear):
    """``nn.Linear`` that, while its model is recording, multiplies by the detached weight and records (x, z)."""

    weight_key: str
    recorder: Recorder | None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rec = self.recorder
        if rec is None or not (rec.vmapped or x.requires_grad or (self.bias is not None and self.bias.requires_grad)):
            # Not recording, or z would not be in the graph without the weight (constant input, no
            # bias): dense gradient. Under vmap ``requires_grad`` cannot be read (it says False);
            # such a z then fails to differentiate and the vectorised executor's probe turns
            # factoring off (z cannot be made a graph leaf inside a vmapped function).
            return F.linear(x, self.weight, self.bias)
        z = F.linear(x, self.weight.detach(), self.bias)
        late = rec.pending.get(self.weight_key)
        if late is not None:  # updates not yet written into the weight (DeferredOuter): x (W + U^T V)^T = x W^T + (x V^T) U
            rows_x, rows_dz = late
            z = z + x.matmul(rows_x.transpose(-1, -2)).matmul(rows_dz)
        rec.calls.append((self.weight_key, x, z))
        return z.clone()  # in-place ops downstream act on the copy, not on the recorded z


@dataclass
class Recorder:
    """The factored linear calls of one forward pass, in call order: (weight key, x, z)."""

    vmapped: bool
    calls: list[tuple[str, torch.Tensor, torch.Tensor]] = field(default_factory=list)
    pending: Mapping[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    """weight key -> (x rows, alpha * dz rows) of updates not yet applied to that weight (:class:`DeferredOuter`)."""


def factored_linears(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose ``nn.Linear`` layers are :class:`FactoredLinear` (the original is untouched).

    The copy computes exactly what the model computes; it only records while
    inside :func:`recording`. Like every template of the training step, its
    own tensors are never read (``functional_call`` supplies the state).
    """
    twin = copy.deepcopy(model)
    # a weight tied under two names (a char-LM's output layer reusing its embedding) is one state entry, under its first
    # name: its factors are recorded there, or the second use's gradient was dropped as a frozen weight's
    first = {id(p): n for n, p in twin.named_parameters()}
    for name, module in twin.named_modules():
        if type(module) is nn.Linear:
            module.__class__ = FactoredLinear
            setattr(module, "weight_key", first.get(id(module.weight), f"{name}.weight" if name else "weight"))  # noqa: B010 - attributes of the new class
            setattr(module, "recorder", None)  # noqa: B010
    return twin


def factored_layers(model: nn.Module) -> list[FactoredLinear]:
    """The model's :class:`FactoredLinear` layers (looked up once, not at every step)."""
    return [m for m in model.modules() if isinstance(m, FactoredLinear)]


@contextmanager
def recording(
    layers: Sequence[FactoredLinear], *, vmapped: bool = False, pending: Mapping[str, tuple[torch.Tensor, torch.Tensor]] | None = None
) -> Iterator[Recorder]:
    """Record every call of ``layers`` inside the block, in call order (``vmapped``: under ``vmap``; ``pending``: see Recorder)."""
    recorder = Recorder(vmapped, pending=pending or {})
    for m in layers:
        m.recorder = recorder
    try:
        yield recorder
    finally:
        for m in layers:
            m.recorder = None


def flat_rows(t: torch.Tensor, batch_dims: int) -> torch.Tensor:
    """``t`` as [*lead, rows, features]: every dim between the ``batch_dims`` leading ones and the last is a row."""
    return t.reshape(*t.shape[:batch_dims], -1, t.shape[-1])


def _oriented(target: torch.Tensor, x: torch.Tensor, dz: torch.Tensor, alpha: float | torch.Tensor) -> tuple[bool, torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """(flipped, target view, a, b, alpha): ``view += alpha * a @ b`` is ``target += alpha * dz^T x``.

    The view is whichever orientation of ``target`` is row-major (``flipped``:
    the transposed one), so a weight
    stacked in its transposed layout is written without a copy. A per-client
    ``alpha`` tensor [C] scales the small ``dz`` instead of the product.
    """
    lead = target.dim() - 2
    x, dz = flat_rows(x, lead), flat_rows(dz, lead)
    if isinstance(alpha, torch.Tensor):
        dz, alpha = dz * alpha.view(-1, *([1] * (dz.dim() - 1))).to(dz.dtype), 1.0
    if target.stride(-1) != 1 and target.stride(-2) == 1:
        return True, target.transpose(-1, -2), x.transpose(-1, -2), dz, alpha
    return False, target, dz.transpose(-1, -2), x, alpha


@torch.no_grad()
def add_outer_(target: torch.Tensor, x: torch.Tensor, dz: torch.Tensor, alpha: float | torch.Tensor = 1.0) -> None:
    """``target += alpha * dz^T x`` in place, summed over rows; one fused matmul.

    ``target`` is a weight [out, in] with x [..., in], dz [..., out], or a
    stack of weights [C, out, in] with x [C, ..., in], dz [C, ..., out];
    ``alpha`` a number or a per-client tensor [C]. Factors recorded under
    bf16 autocast are cast to the (fp32) target first: the update stays fp32.
    """
    if x.dtype != target.dtype or dz.dtype != target.dtype:
        x, dz = x.to(target.dtype), dz.to(target.dtype)
    _, out, a, b, alpha = _oriented(target, x, dz, alpha)
    if out.dim() == 3:
        out.baddbmm_(a, b, alpha=alpha)
    else:
        out.addmm_(a, b, alpha=alpha)



DEFER_MIN_ELEMENTS = 1 << 16
"""Elements of one client's weight from which :class:`DeferredOuter` defers its updates (256 KiB in fp32).

Below it the weight's eager update is cheap next to the step's other work, and
small models (the digits CNNs' heads) keep exactly their eager arithmetic."""


DEFER_MIN_STEPS = 4
"""A weight's updates are deferred only if this many steps' rows fit before a flush (rows of a step x 4 <= out).

Fewer, and the flush comes nearly every step: the rows' copy and the forward's
correction then cost more than the eager updates they replace (on the
benchmark's workload 3, batch 50 on a 64-wide layer, deferring made rounds
25 % slower)."""


def step_rows(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> int:
    """Rows one client's step adds to a weight's update: its factored calls' (x, dz) rows, over [C, ...] stacks."""
    return sum(flat_rows(x, 1).shape[1] for x, _ in pairs)


class DeferredOuter:
    """Factored SGD updates of stacked weights kept as rows, applied with one matmul every few steps.

    Why: for a large weight and a small batch (FL clients: 3072x64 at batch
    10), the eager update (:func:`add_outer_`) reads and writes the whole
    weight every step, and the next forward reads it again: three passes over
    the weight for a rank-10 change, the largest cost of such a step. Here a
    step's update ``W += alpha dz^T x`` is appended as rows to ``U = [alpha dz_k]``
    and ``V = [x_k]``; the training forward adds their effect,
    ``x (W + U^T V)^T = x W^T + (x V^T) U`` (:class:`FactoredLinear`, via
    ``Recorder.pending``), so every step computes with the updated weight, up
    to float rounding; :meth:`flush` writes ``U^T V`` into the weight in one
    matmul. That happens when the rows would exceed the weight's output size
    (beyond it the correction would cost more than the forward it rides on),
    before any step that trains only some of the stack's clients, and at the
    end of the chunk.

    A weight every client starts from as the same tensor may come broadcast
    (stride 0 along the clients, see the vectorised executor's
    :func:`~chillfl.executors.stacking.stack_states`): until the first flush all clients' forwards then read
    one copy, and the flush writes each client's own ``W + U^T V`` in the
    same pass that would have copied ``W`` to it.

    Valid only where nothing but the factored forward reads the weight
    (no dense gradient part, no weight decay, no momentum) and the forward
    runs in fp32: the vectorised executor's probe checks this once per run.
    """

    def __init__(self, params: dict[str, torch.Tensor], keys: Iterable[str], layouts: Mapping[str, Sequence[int]] | None = None) -> None:
        self.params = params  # the stack's parameters: broadcast weights are replaced by their own copies on flush
        self.layouts = dict(layouts or {})
        self.rows = {k: 0 for k in keys}
        self._v: dict[str, torch.Tensor] = {}  # [C, out, in]: room for "out" rows of x
        self._u: dict[str, torch.Tensor] = {}  # [C, out, out]: room for "out" rows of alpha * dz

    def pending(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """weight key -> (V, U) of the updates not yet in the weight: [C, rows, in], [C, rows, out]."""
        return {k: (self._v[k][:, :r], self._u[k][:, :r]) for k, r in self.rows.items() if r}

    @torch.no_grad()
    def add(self, key: str, x: torch.Tensor, dz: torch.Tensor, alpha: float | torch.Tensor) -> None:
        """Defer ``W[key] += alpha * dz^T x`` (x [C, ..., in], dz [C, ..., out]; ``alpha`` a number or [C])."""
        w = self.params[key]
        x, dz = flat_rows(x, 1), flat_rows(dz, 1)
        n, capacity = x.shape[1], w.shape[-2]
        if self.rows[key] + n > capacity:
            self.flush(key)
        if n > capacity:  # a batch wider than the weight's output: deferring it would not pay
            self._own(key)
            add_outer_(self.params[key], x, dz, alpha)
            return
        if key not in self._v:
            self._v[key] = torch.empty((w.shape[0], capacity, w.shape[-1]), dtype=w.dtype, device=w.device)
            self._u[key] = torch.empty((w.shape[0], capacity, w.shape[-2]), dtype=w.dtype, device=w.device)
        r = self.rows[key]
        self._v[key][:, r : r + n].copy_(x)
        scale = alpha.view(-1, 1, 1).to(dz.dtype) if isinstance(alpha, torch.Tensor) else alpha
        torch.mul(dz, scale, out=self._u[key][:, r : r + n])
        self.rows[key] = r + n

    @torch.no_grad()
    def flush(self, key: str | None = None) -> None:
        """Write the deferred rows of ``key`` (None: every weight) into the weight (each client's own copy)."""
        for k in [key] if key is not None else list(self.rows):
            r = self.rows[k]
            w = self.params[k]
            if not r:
                continue
            v, u = self._v[k][:, :r], self._u[k][:, :r]
            if _broadcast(w):
                self.params[k] = add_outer_into(self._fresh(k, w), w, v, u).requires_grad_(True)
            else:
                add_outer_(w, v, u)
            self.rows[k] = 0

    def _own(self, key: str) -> None:
        """Give every client its own copy of a broadcast weight (before an in-place update)."""
        w = self.params[key]
        if _broadcast(w):
            self.params[key] = self._fresh(key, w).copy_(w).requires_grad_(True)

    def _fresh(self, key: str, like: torch.Tensor) -> torch.Tensor:
        return empty_in_order(like.shape, self.layouts.get(key), like.dtype, like.device)


def empty_in_order(shape: Sequence[int], order: Sequence[int] | None, dtype: torch.dtype, device: torch.device | None = None) -> torch.Tensor:
    """An uninitialised dense tensor of ``shape`` whose dims lie in memory in ``order`` (None: row-major)."""
    if order is None:
        return torch.empty(tuple(shape), dtype=dtype, device=device)
    inverse = sorted(range(len(order)), key=lambda i: order[i])
    return torch.empty([shape[d] for d in order], dtype=dtype, device=device).permute(inverse)


def _broadcast(w: torch.Tensor) -> bool:
    """Whether ``w`` [C, ...] is one tensor expanded along the clients (stride 0, more than one client)."""
    return w.dim() > 0 and w.shape[0] > 1 and w.stride(0) == 0


@torch.no_grad()
def add_outer_into(out: torch.Tensor, base: torch.Tensor, x: torch.Tensor, dz: torch.Tensor, alpha: float | torch.Tensor = 1.0) -> torch.Tensor:
    """``out = base + alpha * dz^T x`` in one matmul pass (``base`` may be broadcast; ``out`` must not overlap it); returns ``out``.

    The same arithmetic as copying ``base`` into ``out`` and calling :func:`add_outer_` on it.
    """
    if x.dtype != out.dtype or dz.dtype != out.dtype:
        x, dz = x.to(out.dtype), dz.to(out.dtype)
    flipped, view, a, b, alpha = _oriented(out, x, dz, alpha)
    base_view = base.transpose(-1, -2) if flipped else base
    if view.dim() == 3:
        torch.baddbmm(base_view, a, b, alpha=alpha, out=view)
    else:
        torch.addmm(base_view, a, b, alpha=alpha, out=view)
    return out

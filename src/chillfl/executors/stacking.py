"""Stacking clients' states and objective contexts along a leading client dimension (the vectorized executor's input).

Why its own module: what may be stacked, and in which memory layout, is the
vectorized executor's contract with the vmapped step; :class:`NotVectorizable`
says a round's jobs break it, and the executor falls back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.utils._pytree as pytree
from torch import nn

from chillfl.numeric import is_real
from chillfl.training.linear_factors import empty_in_order
from chillfl.training.local import split_state

Params = dict[str, torch.Tensor]


class NotVectorizable(Exception):
    """The round's jobs cannot be stacked along a client dimension (reason in the message)."""


@dataclass
class StackedContext:
    """Per-client contexts as one pytree: shared leaves kept as-is, differing leaves stacked on dim 0."""

    spec: pytree.TreeSpec
    shared: list[Any]
    batched: dict[int, torch.Tensor]

    def select(self, rows: torch.Tensor | None) -> list[torch.Tensor]:
        """The batched leaves (in position order) for the clients ``rows`` (None = all)."""
        return [v if rows is None else v[rows] for _, v in sorted(self.batched.items())]

    def rebuild(self, batched_leaves: Sequence[Any]) -> Any:
        leaves = list(self.shared)
        for pos, value in zip(sorted(self.batched), batched_leaves):
            leaves[pos] = value
        return pytree.tree_unflatten(leaves, self.spec)


EMPTY_CONTEXT = pytree.tree_flatten({})[1]


def stack_contexts(contexts: Sequence[Mapping[str, Any]], float_dtype: torch.dtype, device: torch.device | None = None) -> StackedContext:
    """Split per-client contexts into broadcast leaves and stacked leaves (the vectorized executor's module docstring, "Choices")."""
    if not any(contexts):  # no objective context (FedAvg's): no per-client flattening (a TreeSpec costs ~30 us to build)
        return StackedContext(EMPTY_CONTEXT, [], {})
    flat = [pytree.tree_flatten(dict(c)) for c in contexts]
    spec = flat[0][1]
    if any(s != spec for _, s in flat[1:]):
        raise NotVectorizable("clients' objective contexts have different structures")
    shared: list[Any] = []
    batched: dict[int, torch.Tensor] = {}
    for pos, values in enumerate(zip(*(leaves for leaves, _ in flat))):
        first = values[0]
        shared.append(first)
        if all(v is first for v in values):
            continue
        if all(isinstance(v, torch.Tensor) for v in values):
            if any(v.shape != first.shape or v.dtype != first.dtype for v in values):
                raise NotVectorizable(f"context leaf {pos} has different shapes/dtypes across clients")
            batched[pos] = torch.stack([v.detach() for v in values])
        elif all(is_real(v) for v in values):
            if any(v != first for v in values):
                dtype = float_dtype if any(isinstance(v, float) for v in values) else torch.int64
                batched[pos] = torch.tensor(values, dtype=dtype).to(device, non_blocking=True)
        elif any(v != first for v in values):
            raise NotVectorizable(f"context leaf {pos} differs across clients and is not a number or tensor")
    return StackedContext(spec, shared, batched)


def dim_order(t: torch.Tensor) -> tuple[int, ...]:
    """``t``'s dims from outermost to innermost in memory (ties by dim index)."""
    strides = t.stride()
    return tuple(sorted(range(t.dim()), key=lambda d: (-strides[d], d)))


def one_in_order(t: torch.Tensor, order: Sequence[int] | None) -> torch.Tensor:
    """A copy of one client's ``t`` laid out as a row of a stack in dim ``order`` (None: ``t`` itself, detached)."""
    if order is None:
        return t.detach()
    return empty_in_order(t.shape, [d - 1 for d in order if d != 0], t.dtype, t.device).copy_(t)


def stack(tensors: Sequence[torch.Tensor], order: Sequence[int] | None = None) -> torch.Tensor:
    """The clients' tensors stacked on a new dim 0, laid out in memory in dim ``order`` (None: row-major).

    One copy; when every client starts from the very same tensor (the usual
    broadcast of the global model) it is a single broadcasting copy from one
    client's re-laid-out copy (a transposing copy of one client stays in cache).
    """
    first = tensors[0].detach()
    shape = (len(tensors), *first.shape)
    out = empty_in_order(shape, order, first.dtype, first.device)
    if all(t is tensors[0] for t in tensors):
        first = one_in_order(first, order)
        return out.copy_(first.expand(shape))
    for row, t in zip(out, tensors):
        row.copy_(t)
    return out


def stack_states(
    model: nn.Module,
    starts: Sequence[Mapping[str, torch.Tensor]],
    layouts: Mapping[str, tuple[int, ...]],
    broadcast: frozenset[str] = frozenset(),
    frozen: frozenset[str] = frozenset(),
) -> tuple[Params, Params, list[str]]:
    """Stacked (params as autograd leaves, buffers) of every client and the state's key order.

    A ``broadcast`` key that every client starts from as the very same tensor
    (the global model) is not copied per client: it becomes one copy in its
    layout, expanded along the client dimension (stride 0). Only weights whose
    updates :class:`DeferredOuter` keeps may be broadcast: it writes the
    clients' own copies when it first applies their updates.
    """
    keys = set(starts[0])
    if any(set(s) != keys for s in starts[1:]):
        raise NotVectorizable("clients' start states have different keys")
    params, buffers = split_state(model, starts[0], frozen)  # frozen parameters (LocalSpec.frozen) are stacked as buffers

    def stacked(k: str) -> torch.Tensor:
        first = starts[0][k]
        if k in broadcast and all(s[k] is first for s in starts):
            return one_in_order(first, layouts.get(k)).expand(len(starts), *first.shape)
        return stack([s[k] for s in starts], layouts.get(k))

    stacked_p = {k: stacked(k).requires_grad_(True) for k in params}
    stacked_b = {k: stack([s[k] for s in starts]) for k in buffers}
    return stacked_p, stacked_b, [*params, *buffers]  # the sequential executor's key order


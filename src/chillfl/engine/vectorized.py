"""Vectorised executor: many clients' local training as one ``vmap``-ed step.

Every client of a chunk keeps its own parameters, buffers (batch-norm running
statistics) and momentum buffers, stacked along a leading client dimension.
One call of ``torch.func.vmap`` over :func:`chillfl.training.local.make_loss`
and :func:`~chillfl.training.local.sgd_update` then advances all of them by
one SGD step, each on its own minibatch, with its own temperature, learning
rate and objective context (FedProx's anchor, SCAFFOLD's correction, ...).
Linear and convolution layers then run as one batched matmul / grouped
convolution over clients instead of one small call per client, which is what
makes it fast for many small models on a CPU.

Each client's batch order is exactly the sequential executor's
(``batch_order(len(y), batch_size, epochs, Generator().manual_seed(seed))``),
so the result equals :class:`~chillfl.engine.executors.SequentialExecutor`
up to float rounding (batched kernels may sum in a different order).

Unequal schedules: at global step ``s`` client ``i`` runs its own ``s``-th
batch. Clients whose batch has the same size share one vmapped call; a client
whose schedule is finished sits out (its state is untouched). A short last
batch therefore runs un-padded, giving the same mean loss and the same
batch-norm statistics as in sequential training.

Choices
-------
* Short batches are *grouped by size* rather than padded and masked: padding
  would change batch-norm statistics and would need a per-sample base loss,
  while the base loss is an opaque batch-mean function of (logits, y, T).
  Clients are sorted by step count before chunking so that a chunk's clients
  finish at about the same time.
* Context values (``job.context``) that are the very same object for every
  client are broadcast (e.g. FedProx's global model); all others are stacked
  (tensors) or turned into a tensor (differing numbers). Contexts of different
  structure, or differing non-numeric values, cannot be vmapped: fallback.
* If the first vmapped step raises (an op without a batching rule, dropout,
  ``.item()`` in the model, ...), the executor logs ONE warning and runs this
  and every later round with the sequential executor.
* Chunk size: ``chunk_size`` if given, else as many clients as fit in
  ``memory_budget`` bytes, estimated from the state size and one probe forward
  pass (activation sizes).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.utils._pytree as pytree
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from chillfl.engine.executors import ClientJob, SequentialExecutor
from chillfl.training.local import LocalOutcome, LocalSpec, batch_order, make_loss, sgd_update, split_state

log = logging.getLogger(__name__)

Params = dict[str, torch.Tensor]
DEFAULT_MEMORY_BUDGET = 1 << 30
"""Bytes the stacked state and activations of one chunk may take (1 GiB)."""


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


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def stack_contexts(contexts: Sequence[Mapping[str, Any]], float_dtype: torch.dtype) -> StackedContext:
    """Split per-client contexts into broadcast leaves and stacked leaves (see module Choices)."""
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
        elif all(_is_number(v) for v in values):
            if any(v != first for v in values):
                dtype = float_dtype if any(isinstance(v, float) for v in values) else torch.int64
                batched[pos] = torch.tensor(values, dtype=dtype)
        elif any(v != first for v in values):
            raise NotVectorizable(f"context leaf {pos} differs across clients and is not a number or tensor")
    return StackedContext(spec, shared, batched)


def _stack_states(model: nn.Module, starts: Sequence[Mapping[str, torch.Tensor]]) -> tuple[Params, Params, list[str]]:
    """Stacked (params, buffers) of every client and the state's key order."""
    keys = set(starts[0])
    if any(set(s) != keys for s in starts[1:]):
        raise NotVectorizable("clients' start states have different keys")
    params, buffers = split_state(model, starts[0])
    stacked_p = {k: torch.stack([s[k].detach() for s in starts]) for k in params}
    stacked_b = {k: torch.stack([s[k].detach() for s in starts]) for k in buffers}
    return stacked_p, stacked_b, [*params, *buffers]  # the sequential executor's key order


def _float_dtype(state: Mapping[str, torch.Tensor]) -> torch.dtype:
    return next((v.dtype for v in state.values() if v.is_floating_point()), torch.get_default_dtype())


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def activation_bytes(model: nn.Module, state: Mapping[str, torch.Tensor], x: torch.Tensor) -> int:
    """Bytes of every module output of one forward pass on ``x`` (eval mode, template untouched)."""
    total = 0

    def hook(_module: nn.Module, _inputs: Any, output: Any) -> None:
        nonlocal total
        total += sum(_nbytes(t) for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor))

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            functional_call(model, split_state(model, state), (x,))
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return total


def chunk_size_for(model: nn.Module, spec: LocalSpec, job: ClientJob, memory_budget: int) -> int:
    """How many clients fit in ``memory_budget``: state copies plus ~3x one batch's activations."""
    params, buffers = split_state(model, job.start)
    copies = 4 + (1 if spec.momentum else 0)  # params, grads, new params, temporaries (+ momenta)
    per_client = copies * sum(_nbytes(v) for v in params.values()) + sum(_nbytes(v) for v in buffers.values())
    per_client += sum(_nbytes(v) for v in pytree.tree_leaves(dict(job.context)) if isinstance(v, torch.Tensor))
    batch = job.x[: spec.batch_size]
    if len(batch):
        per_client += 3 * activation_bytes(model, job.start, batch) + _nbytes(batch)
    return max(1, memory_budget // max(per_client, 1))


def _schedule(jobs: Sequence[ClientJob], spec: LocalSpec) -> list[list[torch.Tensor]]:
    """Every client's batch order, exactly as the sequential executor draws it."""
    return [batch_order(len(j.y), spec.batch_size, spec.epochs, torch.Generator().manual_seed(j.seed)) for j in jobs]


class VectorizedExecutor:
    """Trains the round's clients in chunks, one vmapped SGD step per (step, batch size) group."""

    def __init__(
        self,
        model: nn.Module,
        spec: LocalSpec,
        *,
        chunk_size: int | None = None,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
    ) -> None:
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.model = model
        self.spec = spec
        self.chunk_size = chunk_size
        self.memory_budget = memory_budget
        self.loss_fn = make_loss(model, spec)
        self.fallback_reason: str | None = None
        self._verified = False
        self._sequential = SequentialExecutor(model, spec)

    def run(self, jobs: Sequence[ClientJob]) -> list[LocalOutcome]:
        if not jobs:
            return []
        if self.fallback_reason is None:
            try:
                return self._run_vectorized(jobs)
            except NotVectorizable as exc:
                self._fall_back(str(exc))
        return self._sequential.run(jobs)

    def close(self) -> None:
        return None

    def _fall_back(self, reason: str) -> None:
        self.fallback_reason = reason
        log.warning("vectorized executor: %s; falling back to the sequential executor for the rest of the run", reason)

    def _run_vectorized(self, jobs: Sequence[ClientJob]) -> list[LocalOutcome]:
        schedules = _schedule(jobs, self.spec)
        largest = max(jobs, key=lambda j: len(j.y))
        size = self.chunk_size or chunk_size_for(self.model, self.spec, largest, self.memory_budget)
        order = sorted(range(len(jobs)), key=lambda i: len(schedules[i]))  # stable: ties keep job order
        outcomes: dict[int, LocalOutcome] = {}
        for lo in range(0, len(order), size):
            chunk = order[lo : lo + size]
            outcomes.update(zip(chunk, self._run_chunk([jobs[i] for i in chunk], [schedules[i] for i in chunk])))
        return [outcomes[i] for i in range(len(jobs))]

    def _run_chunk(self, jobs: Sequence[ClientJob], schedules: Sequence[list[torch.Tensor]]) -> list[LocalOutcome]:
        params, buffers, keys = _stack_states(self.model, [j.start for j in jobs])
        dtype = _float_dtype(params)
        context = stack_contexts([j.context for j in jobs], dtype)
        momenta = {k: torch.zeros_like(v) for k, v in params.items()} if self.spec.momentum else {}
        temperature = torch.tensor([j.temperature for j in jobs], dtype=dtype)
        lr = torch.tensor([j.lr for j in jobs], dtype=dtype)
        x_all = torch.cat([j.x for j in jobs])
        y_all = torch.cat([j.y for j in jobs])
        offsets = [0]
        for j in jobs[:-1]:
            offsets.append(offsets[-1] + len(j.y))
        step = self._vmapped_step(context)
        totals = [0.0] * len(jobs)
        self.model.train()
        for s in range(max(len(b) for b in schedules)):
            groups: dict[int, list[int]] = {}
            for i, batches in enumerate(schedules):
                if s < len(batches):
                    groups.setdefault(len(batches[s]), []).append(i)
            for bsize, members in sorted(groups.items(), reverse=True):
                rows = None if len(members) == len(jobs) else torch.tensor(members)
                idx = torch.cat([schedules[i][s] + offsets[i] for i in members])
                xb = x_all[idx].reshape(len(members), bsize, *x_all.shape[1:])
                yb = y_all[idx].reshape(len(members), bsize, *y_all.shape[1:])
                sub = _select(rows, params, buffers, momenta)
                args = (*sub, xb, yb, _rows(temperature, rows), _rows(lr, rows), context.select(rows))
                new_params, new_momenta, loss = self._call(step, args)
                _write(params, new_params, rows)
                _write(momenta, new_momenta, rows)
                if rows is not None:
                    _write(buffers, sub[1], rows)  # updated in place by batch norm
                for i, value in zip(members, loss.tolist()):
                    totals[i] += value
        return [self._outcome(c, keys, params, buffers, len(schedules[c]), totals[c]) for c in range(len(jobs))]

    def _vmapped_step(self, context: StackedContext) -> Callable[..., Any]:
        loss_and_grad = grad_and_value(self.loss_fn)
        spec = self.spec

        def step(params: Params, buffers: Params, momenta: Params, x: torch.Tensor, y: torch.Tensor, t: torch.Tensor, lr: torch.Tensor, leaves: list[torch.Tensor]) -> Any:
            grads, loss = loss_and_grad(params, buffers, x, y, t, context.rebuild(leaves))
            new_params, new_momenta = sgd_update(params, grads, momenta, lr, spec)
            return new_params, new_momenta, loss

        return vmap(step)

    def _call(self, step: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        """Run one vmapped step; the executor's very first one turns any failure into NotVectorizable."""
        if self._verified:
            return step(*args)
        try:
            out = step(*args)
        except Exception as exc:  # noqa: BLE001 - any failure of the first vmapped step means "cannot vmap"
            raise NotVectorizable(f"the training step cannot be vmapped ({type(exc).__name__}: {exc})") from exc
        self._verified = True
        return out

    @staticmethod
    def _outcome(c: int, keys: list[str], params: Params, buffers: Params, steps: int, total: float) -> LocalOutcome:
        state = {k: (params[k] if k in params else buffers[k])[c] for k in keys}
        return LocalOutcome(state, steps, total / max(steps, 1))


def _rows(t: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    return t if rows is None else t[rows]


def _select(rows: torch.Tensor | None, *states: Params) -> tuple[Params, ...]:
    return tuple({k: _rows(v, rows) for k, v in state.items()} for state in states)


def _write(target: Params, values: Params, rows: torch.Tensor | None) -> None:
    for k, v in values.items():
        if rows is None:
            target[k] = v
        else:
            target[k][rows] = v

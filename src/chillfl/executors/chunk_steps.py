"""A chunk's steps: which clients take each vmapped step, their batches and learning rates.

Why its own module: the schedule (who steps, with which rows, at which rate)
is data, independent of how the step is computed; the CPU gathers each batch
when its step comes (:func:`host_batches`), an accelerator plans every step up
front and keeps the data resident (:class:`ResidentBatches`).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from chillfl.data.augment import crop_flip
from chillfl.executors.sequential import ClientJob, check_job
from chillfl.seeds import derive_seed
from chillfl.training.local import LocalSpec, step_batch
from chillfl.training.schedule import step_lr
from chillfl.data.stamp import chunk_codes, stamp_codes


@dataclass
class Batch:
    """One vmapped call of a chunk: inputs [m, batch, ...] and labels [m, batch] of its ``rows`` (None: every client)."""

    rows: torch.Tensor | None
    x: torch.Tensor
    y: torch.Tensor
    step: int = 0
    """The members' local step (0-based): the same for all of them (see the module's "Unequal schedules")."""
    members: Sequence[int] = ()
    """The chunk positions of ``rows``, on the host (empty: every client)."""


def step_groups(schedules: Sequence[list[torch.Tensor]]) -> Iterator[tuple[int, list[int]]]:
    """(step, clients) of every vmapped call: at each step, the clients with a batch, grouped by batch size (largest first)."""
    for s in range(max((len(b) for b in schedules), default=0)):
        groups: dict[int, list[int]] = {}
        for i, batches in enumerate(schedules):
            if s < len(batches):
                groups.setdefault(len(batches[s]), []).append(i)
        for _, members in sorted(groups.items(), reverse=True):
            yield s, members


class Stamping:
    """A chunk's marked rows (:mod:`chillfl.data.stamp`) when its steps crop and flip: each client's inputs without
    the pattern, and a code per row (0: none; k: ``patterns[k - 1]``, stamped after the crop and flip)."""

    def __init__(self, jobs: Sequence[ClientJob], spec: LocalSpec) -> None:
        self.patterns, codes = chunk_codes([j.stamp for j in jobs]) if spec.augment is not None else ([], [])
        self.active = bool(self.patterns)
        self.inputs = [j.stamp.clean if self.active and j.stamp is not None else j.x for j in jobs]
        self.codes = [
            j.stamp.marked.long() * code if j.stamp is not None and code else torch.zeros(len(j.y), dtype=torch.int64, device=j.y.device)
            for j, code in zip(jobs, codes)
        ]


def host_batches(jobs: Sequence[ClientJob], schedules: Sequence[list[torch.Tensor]], spec: LocalSpec) -> Iterator[Batch]:
    """The CPU policy's steps: each member's batch gathered from its own tensors when its step comes (no copy of all data)."""
    device = jobs[0].x.device
    stamping = Stamping(jobs, spec)
    for s, members in step_groups(schedules):
        rows = None if len(members) == len(jobs) else torch.tensor(members, device=device)
        batch = [schedules[i][s] for i in members]
        xb, yb = gather([stamping.inputs[i] for i in members], batch), gather([jobs[i].y for i in members], batch)
        codes = gather([stamping.codes[i] for i in members], batch) if stamping.active else None
        xb = step_batch(spec, xb, [jobs[i].seed for i in members], s, codes, stamping.patterns)  # each client's own crop/flip draws
        yield Batch(rows, xb, yb, s, () if rows is None else members)


class ResidentBatches:
    """The accelerator policy's steps: the chunk's data and its whole plan on the device, one gather per step.

    The clients' data are concatenated on the device once; every step's batch
    rows (offset into that concatenation), member rows and crop/flip draws are
    formed on the host -- the very draws :func:`step_batch` makes -- and copied
    to the device in one non-blocking copy. Iterating then only queues kernels.
    """

    def __init__(self, jobs: Sequence[ClientJob], schedules: Sequence[list[torch.Tensor]], spec: LocalSpec) -> None:
        device = jobs[0].x.device
        stamping = Stamping(jobs, spec)
        self.x = torch.cat(stamping.inputs)
        self.y = torch.cat([j.y for j in jobs])
        self.codes = torch.cat(stamping.codes) if stamping.active else None
        self.patterns = stamping.patterns
        self.augment = spec.augment
        starts = [0]
        for j in jobs[:-1]:
            starts.append(starts[-1] + len(j.y))
        host: list[torch.Tensor] = []
        self._layout: list[tuple[int, int, bool, int, list[int]]] = []  # (members, batch size, all clients?, step, member list) per step
        offsets = torch.tensor(starts, dtype=torch.int64).unsqueeze(1)
        for s, members in step_groups(schedules):
            everyone = len(members) == len(jobs)
            index = torch.stack([schedules[i][s] for i in members]).add_(offsets if everyone else offsets[members])  # not one add per client
            host.append(index)
            if not everyone:
                host.append(torch.tensor(members, dtype=torch.int64))
            if self.augment is not None:
                draws = [self.augment.draw(derive_seed(jobs[i].seed, "augment", s), index.shape[1]) for i in members]
                host += [torch.stack([d[k] for d in draws]).to(torch.int64) for k in range(3)]
            self._layout.append((len(members), index.shape[1], everyone, s, members))
        flat = torch.cat([t.reshape(-1) for t in host]) if host else torch.zeros(0, dtype=torch.int64)
        if device.type == "cuda":
            flat = flat.pin_memory()  # a truly asynchronous copy
        self._host = flat  # kept alive until the copy has certainly finished
        self._parts = list(torch.split(flat.to(device, non_blocking=True), [t.numel() for t in host]))

    def everyone_steps(self) -> collections.Counter[int]:
        """The steps of every client of the chunk, by batch size (what :class:`StepGraphs` may replay)."""
        return collections.Counter(b for _, b, everyone, _, _ in self._layout if everyone)

    def __iter__(self) -> Iterator[Batch]:
        parts = iter(self._parts)
        sample_shape = self.x.shape[1:]
        for m, b, everyone, s, members in self._layout:
            index = next(parts)
            rows = None if everyone else next(parts)
            xb = self.x.index_select(0, index).view(m, b, *sample_shape)
            yb = self.y.index_select(0, index).view(m, b, *self.y.shape[1:])  # labels, or soft labels [n, classes]
            if self.augment is not None:
                a = self.augment
                dy, dx, flip = next(parts).view(m, b), next(parts).view(m, b), next(parts).view(m, b).bool()
                xb = crop_flip(xb, dy, dx, flip, a.crop_padding, a.padding_mode, a.fill)
                if self.codes is not None:  # a data-poisoning attack's marked rows, stamped after the crop and flip
                    xb = stamp_codes(xb, self.codes.index_select(0, index).view(m, b), self.patterns)
            yield Batch(rows, xb, yb, s, () if everyone else members)


class LearningRates:
    """A chunk's learning rates at each step: one number where the clients agree, else a per-client tensor [C].

    With a schedule over local steps (:mod:`chillfl.training.optim`) client i's
    rate at step s is its round lr times the schedule at s of its own planned
    steps: the very Python float the sequential executor uses.
    """

    def __init__(self, spec: LocalSpec, jobs: Sequence[ClientJob], dtype: torch.dtype, device: torch.device) -> None:
        self.optim = spec.optim
        self.base = [j.lr for j in jobs]
        self.planned = [check_job(spec, j) for j in jobs]  # refused as train_job refuses (the executor's run checked them in job order)
        self.dtype, self.device = dtype, device
        self.constant = self._rates(self.base)

    def _rates(self, values: Sequence[float]) -> float | torch.Tensor:
        return values[0] if all(v == values[0] for v in values) else to_device(torch.tensor(values, dtype=self.dtype), self.device)

    def at(self, step: int, rows: torch.Tensor | None, members: Sequence[int]) -> float | torch.Tensor:
        """The rates of the clients ``rows`` (host positions ``members``; None/empty: all) at local step ``step``."""
        if self.optim.step_schedule.name == "constant":
            return rows_at(self.constant, rows)
        who = range(len(self.base)) if rows is None else members
        return self._rates([step_lr(self.optim, self.base[i], step, self.planned[i]) for i in who])


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small host tensor on ``device`` without blocking the host (a no-op on the CPU)."""
    return t.to(device, non_blocking=True)


def gather(tensors: Sequence[torch.Tensor], rows: Sequence[torch.Tensor]) -> torch.Tensor:
    """[C, batch, ...]: client i's rows ``rows[i]`` of ``tensors[i]``, copied once (no concatenated copy of all data).

    When every client's tensor is a row range of one shared pool (the usual
    ``FederatedData``), one ``index_select`` on the pool gathers the whole
    batch instead of one call per client: the same values, fewer calls.
    """
    first = tensors[0]
    pool = shared_pool(tensors)
    if pool is not None and all(len(r) == len(rows[0]) for r in rows):
        base, starts = pool
        index = (torch.tensor(starts)[:, None] + torch.stack(list(rows))).reshape(-1).to(first.device, non_blocking=True)
        return torch.index_select(base, 0, index).view(len(tensors), len(rows[0]), *first.shape[1:])
    out = torch.empty((len(tensors), len(rows[0]), *first.shape[1:]), dtype=first.dtype, device=first.device)
    for i, (t, r) in enumerate(zip(tensors, rows)):
        torch.index_select(t, 0, r.to(t.device, non_blocking=True), out=out[i])
    return out


def shared_pool(tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[int]] | None:
    """(the pool, each tensor's first row in it) when all are row ranges of one row-contiguous tensor; else None."""
    first = tensors[0]
    if first.dim() == 0 or not first.is_contiguous():
        return None
    row = first.stride(0) if first.dim() > 1 else 1
    storage = first.untyped_storage()
    if row == 0 or any(t.untyped_storage().data_ptr() != storage.data_ptr() or t.stride() != first.stride() or t.storage_offset() % row or t.dtype != first.dtype for t in tensors):
        return None
    count = storage.nbytes() // (row * first.element_size())
    base = torch.empty(0, dtype=first.dtype, device=first.device).set_(storage, 0, (count, *first.shape[1:]), first.stride())
    return base, [t.storage_offset() // row for t in tensors]


def rows_at(t: Any, rows: torch.Tensor | None) -> Any:
    """``t``'s entries for the clients ``rows`` (None = all; numbers are shared by all)."""
    return t if rows is None or not isinstance(t, torch.Tensor) else t[rows]


"""Client predictions as typed jobs, run one at a time or many clients per vmapped forward pass.

A client update asks for its model's outputs by yielding a :class:`PredictJob`
(the soft-label protocol does: its own predictions for COMET's targets, the
uploads on the requested public rows, its local accuracy) and receives a
:class:`Prediction`. :func:`~chillfl.engine.protocol.drive` groups the jobs
that programs yield at the same stage and hands each group to a predictor:

* :func:`predict_each`: one job after another, the reference every predictor
  matches (what the sequential, process and Ray executors use);
* :class:`BatchedPredictor`: a group's client states stacked along a leading
  client dimension and one ``vmap``-ed ``functional_call`` per chunk of
  clients and rows (the vectorised executor). Inputs that are the very same
  tensor for every client of a chunk (the public rows of a round) are
  broadcast, not copied: one batched matmul reads them once.

Predictions run in eval mode (batch norm uses its running statistics), so a
row's output does not depend on which other rows share its pass: chunking by
rows changes only float rounding, and a batched result equals the reference
within float tolerance. A run's chunking depends only on its config, so the
same seed gives bitwise the same numbers on the same executor.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
import os
import queue
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable, Literal, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from chillfl.engine.footprint import activation_bytes, nbytes
from chillfl.training.local import EVAL_SEED, client_rng, evaluate, model_draws, split_state

STRICT_FALLBACKS = "CHILLFL_STRICT_VECTORIZED"
"""Environment variable: ``1`` turns every vmap fallback (batched predictions, the vectorised executor) into an error.

The fallbacks rerun work one client at a time when vmap fails, for ops without a batching rule
or data-dependent control flow; but they also hide any other exception (a bug of the run's own
code, a device mix-up) behind a warning. The test suite sets it (``tests/conftest.py``); a test
that exercises a fallback on purpose unsets it.
"""


class FallbackRefused(RuntimeError):
    """A vmap fallback under ``CHILLFL_STRICT_VECTORIZED=1``; the exception that caused it is chained."""


def refuse_fallback(what: str, reason: str) -> None:
    """Raise :class:`FallbackRefused` when fallbacks are strict (call inside the ``except`` that would fall back)."""
    if os.environ.get(STRICT_FALLBACKS) == "1":
        raise FallbackRefused(f"{what} would fall back ({reason}); {STRICT_FALLBACKS}=1 makes that an error")

log = logging.getLogger(__name__)

Output = Literal["proba", "logits", "evaluate"]
DEFAULT_PREDICT_BUDGET = 256 << 20
"""Bytes the stacked states and activations of one prediction chunk may take (256 MiB).

Larger than training's budget: a forward pass keeps no gradients, and the
estimate counts the shared inputs once per client (an upper bound)."""


@dataclass
class PredictJob:
    """One client's model on ``x`` in eval mode.

    ``output``: ``"proba"`` (softmax at T = 1), ``"logits"``, or
    ``"evaluate"`` (accuracy and mean cross-entropy against ``y``, as
    :func:`~chillfl.training.local.evaluate`). ``batch_size`` bounds the rows
    of one forward pass (the reference's minibatches).
    """

    client_id: int
    model: nn.Module
    state: Mapping[str, torch.Tensor]
    x: torch.Tensor
    output: Output = "proba"
    y: torch.Tensor | None = None
    batch_size: int = 1024


@dataclass
class Prediction:
    """What a :class:`PredictJob` returns: ``values`` ``[n, C]`` float32 (proba/logits), or ``acc``/``loss`` (evaluate)."""

    values: torch.Tensor | None = None
    acc: float | None = None
    loss: float | None = None


Predictor = Callable[[Sequence[PredictJob]], list[Prediction]]
"""Runs prediction jobs; one :class:`Prediction` per job, in order."""


@torch.no_grad()
def outputs(model: nn.Module, state: Mapping[str, torch.Tensor], x: torch.Tensor, batch_size: int = 1024, *, logits: bool = False) -> torch.Tensor:
    """sigma(x; w): softmax outputs at T = 1 (``logits``: the raw logits), eval mode, ``[n, C]`` float32."""
    if len(x) == 0:
        return torch.zeros((0, 0))
    model.eval()
    params, buffers = split_state(model, state)
    out = []
    with client_rng(x.device, EVAL_SEED) if model_draws(model, training=False) else contextlib.nullcontext():  # as evaluate()
        for i in range(0, len(x), batch_size):
            z = functional_call(model, (params, buffers), (x[i : i + batch_size],))
            out.append(z if logits else torch.softmax(z, dim=-1))
    return torch.cat(out).to(torch.float32)


def predict_one(job: PredictJob) -> Prediction:
    """The reference: one job with the plain functional forward pass."""
    if job.output == "evaluate":
        assert job.y is not None, "an evaluate job needs labels"
        acc, loss = evaluate(job.model, job.state, job.x, job.y, job.batch_size)
        return Prediction(acc=acc, loss=loss)
    return Prediction(values=outputs(job.model, job.state, job.x, job.batch_size, logits=job.output == "logits"))


def predict_each(jobs: Sequence[PredictJob]) -> list[Prediction]:
    """Every job on its own, in order: the sequential predictor."""
    return [predict_one(j) for j in jobs]


# ---------------------------------------------------------------- batched


def _group_key(job: PredictJob) -> tuple[object, ...]:
    """Jobs that can share one stacked pass: same template, output, state layout and input row shape."""
    shapes = tuple((k, tuple(v.shape), v.dtype) for k, v in job.state.items())
    return (id(job.model), job.output, shapes, tuple(job.x.shape[1:]), job.x.dtype, job.x.device)


class BatchedPredictor:
    """Predictions of many clients per ``vmap``-ed forward pass, chunked by a memory budget.

    Jobs are grouped (same template, output kind, state layout and row
    shape); within a group, clients whose ``x`` is one shared tensor run as
    chunks of clients over chunks of rows with ``x`` broadcast; other clients
    are grouped by row count and their inputs stacked. A chunk holds as many
    clients as fit ``memory_budget`` (stacked state plus the activations of
    one row pass, rows up to the job's ``batch_size``). If a pass cannot be
    vmapped (an op without a batching rule), the predictor logs ONE warning
    and runs every later job with :func:`predict_each`. On a CPU, jobs whose
    pass is large (more than ``cpu_max_rows`` rows) or whose model is large
    (a state over ``cpu_max_state_bytes``) run with :func:`predict_each` too,
    where stacking was measured not to pay (:meth:`pays`).

    ``workers > 1`` threads run chunks concurrently, each on its own copy of
    the template (``functional_call`` swaps a module's tensors while it runs),
    with the caller's intra-op thread count, as the vectorised executor's
    training does: a chunk's result does not depend on the thread.
    """

    def __init__(
        self,
        memory_budget: int = DEFAULT_PREDICT_BUDGET,
        chunk_size: int | None = None,
        workers: int = 1,
        cpu_max_rows: int = 64,
        cpu_max_state_bytes: int = 512 << 10,
    ) -> None:
        self.memory_budget = memory_budget
        self.chunk_size = chunk_size
        self.workers = workers
        self.cpu_max_rows = cpu_max_rows
        self.cpu_max_state_bytes = cpu_max_state_bytes
        self.fallback_reason: str | None = None
        self._row_bytes: dict[tuple[object, ...], int] = {}
        self._replicas: dict[int, queue.SimpleQueue[nn.Module]] = {}
        self._pool: ThreadPoolExecutor | None = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __call__(self, jobs: Sequence[PredictJob]) -> list[Prediction]:
        if self.fallback_reason is not None:
            return predict_each(jobs)
        out: dict[int, Prediction] = {}
        groups: dict[tuple[object, ...], list[int]] = {}
        for i, j in enumerate(jobs):
            if len(j.x) == 0 or (j.output == "evaluate" and j.y is None):
                out[i] = predict_one(j)  # nothing to batch (the reference's own empty answer)
            else:
                groups.setdefault(_group_key(j), []).append(i)
        chunks: list[tuple[list[int], int, bool]] = []
        for key, members in groups.items():
            uses = Counter(id(jobs[i].x) for i in members)
            by_input: dict[tuple[int, int], list[int]] = {}
            for i in members:  # one tensor shared by several clients -> broadcast; otherwise equal lengths stack
                x = jobs[i].x
                by_input.setdefault((id(x), 0) if uses[id(x)] > 1 else (0, len(x)), []).append(i)
            for (shared, _n), idx in by_input.items():
                if not self.pays(jobs[idx[0]]):
                    out.update(zip(idx, self._loop([jobs[i] for i in idx])))
                    continue
                ranges, rows = self._plan(key, [jobs[i] for i in idx])
                chunks.extend((idx[lo:hi], rows, bool(shared)) for lo, hi in ranges)

        def run(chunk: tuple[list[int], int, bool]) -> list[Prediction]:
            return self._on_replica([jobs[i] for i in chunk[0]], chunk[1], chunk[2])

        try:
            if self.workers > 1 and len(chunks) > 1:
                futures = [self._executor().submit(run, c) for c in chunks]
                wait(futures)
                results = [f.result() for f in futures]
            else:
                results = [run(c) for c in chunks]
        except Exception as exc:  # noqa: BLE001 - an op without a batching rule, data-dependent control flow, ...
            refuse_fallback("batched predictions", f"{type(exc).__name__}: {exc}")
            self.fallback_reason = f"{type(exc).__name__}: {exc}"
            log.warning("batched predictions: the forward pass cannot be vmapped (%s); predicting one client at a time", self.fallback_reason)
            return predict_each(jobs)
        for (idx, _rows, _shared), preds in zip(chunks, results):
            out.update(zip(idx, preds))
        return [out[i] for i in range(len(jobs))]

    def pays(self, job: PredictJob) -> bool:
        """Whether stacking pays for jobs like ``job``: always off the CPU; on a CPU only for small passes of small models.

        Measured on the 2-core development machine (100 clients, one thread):
        a 20-row local split through a 2.4k-parameter MLP took 0.003 s
        batched against 0.05 s in a loop; through a small batch-norm CNN,
        0.11 against 0.22 s; but 1,000 shared public rows through the
        3072-64-10 MLP (787 KB a client) or 200 rows through the CNN ran no
        faster or slower batched (one large matmul per client already; vmap
        turns a shared input of a convolution into a grouped convolution over
        copies), and stacking the MLP's states cost more than its 20-row pass.
        Deterministic: it depends on the job's shapes only.
        """
        if job.x.device.type != "cpu":
            return True
        state = sum(nbytes(v) for v in job.state.values())
        return min(len(job.x), job.batch_size) <= self.cpu_max_rows and state <= self.cpu_max_state_bytes

    def _plan(self, key: tuple[object, ...], jobs: Sequence[PredictJob]) -> tuple[list[tuple[int, int]], int]:
        """Client ranges of equal size (within one) and the rows of one pass.

        A pass takes the reference's rows (the job's ``batch_size``): on a CPU,
        shorter passes over more clients ran slower than the plain loop (a
        3072-64-10 MLP on 1,000 public rows). A chunk holds as many clients as
        fit ``memory_budget``: each client's state plus one pass's activations.
        """
        n, job = len(jobs), jobs[0]
        rows = max(1, min(len(job.x), job.batch_size))
        if key not in self._row_bytes:
            self._row_bytes[key] = activation_bytes(job.model, job.state, job.x[:1]) + nbytes(job.x[:1])
        per_client = sum(nbytes(v) for v in job.state.values()) + rows * self._row_bytes[key]
        size = self.chunk_size or max(1, self.memory_budget // max(per_client, 1))
        count = -(-n // max(1, min(size, n)))
        return [(c * n // count, (c + 1) * n // count) for c in range(count)], rows

    def _loop(self, jobs: Sequence[PredictJob]) -> list[Prediction]:
        """The reference loop, its clients shared out to the worker threads (each on its own template copy): bitwise :func:`predict_each`."""
        if self.workers == 1 or len(jobs) < 2:
            return predict_each(jobs)
        n = len(jobs)
        parts = [list(jobs[w * n // self.workers : (w + 1) * n // self.workers]) for w in range(self.workers)]

        def run(part: list[PredictJob]) -> list[Prediction]:
            model = self._take(part[0].model)
            try:
                return predict_each([dataclasses.replace(j, model=model) for j in part])
            finally:
                self._replicas[id(part[0].model)].put(model)

        futures = [self._executor().submit(run, part) for part in parts if part]
        wait(futures)
        return [p for f in futures for p in f.result()]

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:  # OpenMP's thread count is per thread: the caller's, so kernels reduce the same way
            self._pool = ThreadPoolExecutor(self.workers, "chillfl-predict", torch.set_num_threads, (torch.get_num_threads(),))
        return self._pool

    def _take(self, model: nn.Module) -> nn.Module:
        """A free copy of ``model`` for one worker thread (``functional_call`` swaps a module's tensors while it runs)."""
        free = self._replicas.setdefault(id(model), queue.SimpleQueue())
        try:
            return free.get_nowait()
        except queue.Empty:
            return copy.deepcopy(model)

    def _on_replica(self, jobs: Sequence[PredictJob], step: int, shared: bool) -> list[Prediction]:
        """:meth:`_run` on the template itself (one worker) or on a free copy of it (one per worker thread)."""
        if self.workers == 1:
            return self._run(jobs[0].model, jobs, step, shared=shared)
        model = self._take(jobs[0].model)
        try:
            return self._run(model, jobs, step, shared=shared)
        finally:
            self._replicas[id(jobs[0].model)].put(model)

    @torch.no_grad()
    def _run(self, model: nn.Module, jobs: Sequence[PredictJob], step: int, *, shared: bool) -> list[Prediction]:
        """One chunk: stacked states, row passes of ``step`` rows, per-client outputs or (acc, loss)."""
        first = jobs[0]
        model.eval()
        params, buffers = split_state(model, first.state)
        pkeys, bkeys = list(params), list(buffers)
        stacked = [torch.stack([j.state[k] for j in jobs]) for k in (*pkeys, *bkeys)]
        np_ = len(pkeys)

        def forward(*flat: torch.Tensor) -> torch.Tensor:
            p, b = dict(zip(pkeys, flat[:np_])), dict(zip(bkeys, flat[np_:-1]))
            return functional_call(model, (p, b), (flat[-1],))

        batched = vmap(forward, in_dims=(*([0] * len(stacked)), None if shared else 0))
        x_all = first.x if shared else torch.stack([j.x for j in jobs])
        n = len(first.x)
        if first.output == "evaluate":
            y_all = torch.stack([j.y for j in jobs if j.y is not None])
            correct = torch.zeros(len(jobs), dtype=torch.int64, device=y_all.device)
            loss = torch.zeros(len(jobs), dtype=torch.float64, device=y_all.device)
            finite = torch.ones(len(jobs), dtype=torch.bool, device=y_all.device)  # NaN logits: a NaN accuracy, as evaluate() gives
            for lo in range(0, n, step):
                xb = x_all[lo : lo + step] if shared else x_all[:, lo : lo + step]
                z = batched(*stacked, xb)  # [C, b, classes]
                yb = y_all[:, lo : lo + step]
                # -log p(y) by log-softmax + gather (float32 batch sums, added in float64): F.cross_entropy of [C, classes, b]
                # is nll_loss2d, which CUDA refuses under deterministic algorithms (tests/test_deterministic_alerts.py)
                loss -= F.log_softmax(z, dim=-1).gather(-1, yb.unsqueeze(-1)).squeeze(-1).sum(dim=1)
                correct += (z.argmax(-1) == yb).sum(dim=1)
                finite &= torch.isfinite(z).flatten(1).all(dim=1)
            right = torch.where(finite, correct, -1).tolist()
            return [Prediction(acc=c / n if c >= 0 else math.nan, loss=float(s) / n) for c, s in zip(right, loss.tolist())]
        parts = []
        for lo in range(0, n, step):
            z = batched(*stacked, x_all[lo : lo + step] if shared else x_all[:, lo : lo + step])
            parts.append(z if first.output == "logits" else torch.softmax(z, dim=-1))
        values = torch.cat(parts, dim=1).to(torch.float32)
        return [Prediction(values=values[c]) for c in range(len(jobs))]

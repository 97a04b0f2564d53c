"""Vectorised executor: many clients' local training as one ``vmap``-ed step.

Every client of a chunk keeps its own parameters, buffers (batch-norm running
statistics) and momentum buffers, stacked along a leading client dimension.
One step of the chunk is the sequential step applied to the stack:

    losses, captured = vmap(StepLoss(...))(params, buffers, x, y, T, context)   # [C]
    grads, factors = step_grads(losses.sum(), params, ...)  # client i's own gradient
    optimizer_step_(params, grads, state, lr, spec, factors)  # in place, per-client lr and optimiser state

each client on its own minibatch, with its own temperature, learning rate and
objective context (FedProx's anchor, SCAFFOLD's correction, ...). Linear and
convolution layers then run as one batched matmul / grouped convolution over
clients instead of one small call per client, which is what makes it fast for
many small models on a CPU. Summing the losses is exact: no client's loss
depends on another client's parameters, so d(sum)/d(params_i) is client i's
gradient with the same values ``torch.autograd`` would give it alone.

Each client's batch order is exactly the sequential executor's
(``batch_order(len(y), batch_size, epochs, Generator().manual_seed(seed))``),
so the result equals :class:`~chillfl.executors.sequential.SequentialExecutor`
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
* Optimiser state (SGD's momentum, Adam's moments: :mod:`chillfl.training.optim`)
  is stacked like the parameters, each client's own; Adam's step count is the
  members' common local step. A schedule over local steps gives each client the
  rate of its own planned steps (:class:`~chillfl.executors.chunk_steps.LearningRates`), the very float the
  sequential executor uses.
* Context values (``job.context``) that are the very same object for every
  client are broadcast (e.g. FedProx's global model); all others are stacked
  (tensors) or turned into a tensor (differing numbers). Contexts of different
  structure, or differing non-numeric values, cannot be vmapped: fallback.
* Before the first chunk, a probe (one discarded gradient of two copies of
  one client) checks that the step vmaps and records each parameter's
  gradient memory layout (:meth:`VectorizedExecutor._probe`); every chunk then
  stacks parameters in that layout, so updates are contiguous. If the probe
  or any later step raises (an op without a batching rule, dropout,
  ``.item()`` in the model, ...), the executor logs ONE warning and runs this
  and every later round with its fallback (the sequential executor unless
  given another, e.g. ``auto``'s process pool). The fallback runs the round
  first: a step that raises there too (a loss term's own exception) is not
  vmap's fault, and that exception propagates with no fallback line.
* Linear layers' weight gradients stay factored (:mod:`chillfl.training.linear_factors`):
  the update applies ``dz^T x`` with one batched in-place matmul per layer
  instead of writing a [C, out, in] gradient and subtracting it (on the
  benchmark's 3072x64 MLP at batch 10 the weight-gradient matmul plus the
  update were half of the step). The probe differentiates its batch both
  ways; if the factored gradients differ from the dense ones, or cannot be
  taken (a bias-free linear layer on the constant input), the executor logs
  that at INFO level and keeps dense gradients.
* Large factored weights (at least ``DEFER_MIN_ELEMENTS`` = 65,536 a client)
  under plain fp32 SGD (no momentum, no weight decay) whose only reader is
  their own layer (the probe finds no dense gradient part) do not even take
  that update every step: :class:`~chillfl.training.linear_factors.DeferredOuter`
  keeps the steps' ``(x, -lr dz)`` rows, the forward adds ``(x V^T) U``, and
  one ``add_outer_`` writes them once the rows reach the layer's output
  size, before a step of only some clients, and at the end of the chunk.
  Same maths, other rounding (tests compare with the sequential executor and
  with eager updates); a weight read elsewhere mid-chunk (a dense part at
  any step) stops the round with NotVectorizable, so it reruns on the fallback.
  On the benchmark's workload 2 (3072x64 first layer, batch 10, 5 steps) it
  took 12 % off one worker's round time (0.205 -> 0.18 s, one worker thread, a busy machine).
* Chunk size: ``chunk_size`` if given, else as many clients as fit in
  ``memory_budget`` bytes (default 24 MiB, sized for the last-level cache, not
  for running out of memory), estimated from the state size (factored weights
  need no gradient copy) and one probe forward pass (activation sizes); the
  round's clients are then split into a multiple of ``workers`` chunks of
  equal size (within one), so that every worker thread has the same work.
* Convolutional models on the CPU whose convolutions output at least
  :data:`PER_CLIENT_MIN_CONV_OUTPUTS` elements a sample (:func:`per_client_steps`)
  are not vmapped: every chunk is one client, trained by the sequential
  executor's own step (:func:`~chillfl.executors.sequential.train_job`), on the
  ``workers`` threads, so the result is bitwise the sequential one (the
  probe still runs first: a step that cannot be vmapped, e.g. with dropout,
  whose draws from torch's global generator threads would race for, falls
  back as before). Under
  vmap a convolution over clients becomes one grouped convolution, which
  oneDNN runs more slowly than the clients' convolutions one by one, and it
  loses channels-last's and bf16's speed-ups. CPU time per McMahan-CNN step
  (4 clients x 200 samples, batch 50, one thread, 3x32x32 inputs): loop /
  vmap 30 / 33 ms in fp32, 23 / 27 ms channels-last, 20 / 35 ms bf16,
  11 / 26 ms channels-last + bf16. Small convolutions (the CNNs on 8x8
  digits) still gain from vmap, which saves per-call overhead: hence the
  threshold (:data:`PER_CLIENT_MIN_CONV_OUTPUTS`), decided once on the first
  round's data, deterministically (never from a timing).
* Steps that take their gradient their own way vmap too. SAM (``client.sam_rho``,
  :mod:`chillfl.training.sam`): the stacked gradient at w, each client's
  perturbation by the norm of its own gradient, the second vmapped gradient
  at the perturbed weights on a copy of the buffers; such steps never defer
  updates (the perturbation reads the weights). DP-SGD (``spec.private``,
  :mod:`chillfl.privacy.dpsgd`): the per-sample vmap nested in a vmap over
  clients, unfactored, each client's noise drawn on the host from its own
  job seed, as the sequential step draws it; not recorded by ``cuda_graphs``.
  Under ``compile`` both still train vmapped, eagerly (:func:`uncompiled_step`): compiled graphs are the plain
  step's.
  Results equal the sequential executor's up to float rounding. Measured
  on digits, 20 clients, training alone (one thread, a busy 2-core machine):
  SAM 0.23 -> 0.03 s (MLP) and DP-SGD 1.15 -> 0.71 s (``flexchill_cnn``),
  client by client -> vmapped.
* ``workers`` threads train chunks concurrently (each with its own model
  template); a chunk's result does not depend on the thread, so runs stay
  bitwise reproducible. The config's executor factory uses ``cores // threads``
  workers (:func:`chillfl.executors.parallel.vectorized_workers`).

On an accelerator (a GPU)
-------------------------
When the jobs' data live on a device other than the CPU (``accelerator=None``,
the default, decides from the data; ``True``/``False`` forces either policy on
any device, which is how the CPU tests exercise the GPU path), a chunk runs
*resident*:

* the chunk's client data are concatenated on the device once, and the
  chunk's whole plan (every step's batch rows, member rows, crop/flip draws)
  is built on the host and copied to the device in ONE non-blocking copy;
  every step then gathers its [clients, batch, ...] inputs with one
  ``index_select``, with no host<->device copy;
* the step loop (:meth:`VectorizedExecutor._train_steps`) never reads a device
  value on the host: losses accumulate on the device and are read once per
  chunk (one ``tolist``);
* the chunk size comes from free device memory
  (:func:`free_device_memory`, injectable as ``free_memory``):
  :data:`ACCELERATOR_MEMORY_FRACTION` of it, over a per-client estimate that
  also counts the client's resident data, rounded down to a power of two (so
  that a few MB more or less free memory between two runs does not change the
  chunking, which could change float rounding), taken once per batch shape;
* one worker thread: a GPU runs one stream of large kernels, and threads would
  only contend for it;
* with ``cuda_graphs = true`` (:mod:`chillfl.executors.step_graphs`) the
  chunk's steps of every client are recorded once per batch shape as a CUDA
  graph and replayed, one launch a step instead of about 1,500; the tensors
  the step reads live in a slot kept for the next chunk of the same
  structure (:class:`~chillfl.executors.step_graphs.GraphSlots`), so a run
  records once, not once a round. Only steps
  whose other inputs do not change within the chunk are recorded: plain SGD
  (momentum, Nesterov, weight decay, clipping) at a constant local rate;
  steps of only some clients (short last batches, stragglers) stay eager,
  and large linear weights' deferred updates (whose buffers grow) are not
  used;
* with ``compile = true`` (:mod:`chillfl.executors.compiled`, any device) the
  forward and backward of the steps of every client go through
  ``torch.compile``, one graph per shape; other steps stay eager, and linear
  layers are not factored. Compiled kernels round differently from eager
  ones: such a run repeats bitwise but does not equal the other executors.
"""

from __future__ import annotations

import logging
import os
import queue
import types
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

import torch
import torch.utils._pytree as pytree
from torch import nn

from chillfl.engine.footprint import activation_bytes, nbytes
from chillfl.executors.chunk_steps import Batch, LearningRates, ResidentBatches, host_batches, rows_at, to_device
from chillfl.executors.compiled import CompiledSteps, compiled_steps
from chillfl.executors.sequential import ClientJob, Executor, SequentialExecutor, check_job, train_job
from chillfl.executors.stacking import NotVectorizable, Params, StackedContext, dim_order, stack, stack_contexts, stack_states
from chillfl.executors.step_graphs import CudaGraphRecorder, GraphSlots, Recorder, StepGraphs
from chillfl.executors.vmapped_step import StepInputs, VmappedStep
from chillfl.engine.predict import BatchedPredictor, refuse_fallback
from chillfl.engine.protocol import ClientReply, ClientSide, ClientTask, drive_tasks
from chillfl.training.optim import OptState, init_state, state_slots
from chillfl.training.linear_factors import DEFER_MIN_ELEMENTS, DEFER_MIN_STEPS, DeferredOuter, add_outer_, factored_linears, step_rows
from chillfl.training.batched_conv import replayable_steps
from chillfl.training.local import (
    Factors,
    LocalOutcome,
    LocalSpec,
    StepLoss,
    batch_order,
    completed_steps,
    LARGE_CONV_OUTPUTS,
    conv2d_model,
    conv_outputs_per_sample,
    dropout_rng,
    leaf_params,
    optimizer_step_,
    split_state,
)

log = logging.getLogger(__name__)

DEFAULT_MEMORY_BUDGET = 24 << 20
"""Bytes the stacked state and activations of one chunk may take (24 MiB).

Sized for speed, not to avoid running out of memory: a chunk whose working
set stays in the last-level cache (32 MiB on the benchmark machine) trains
fastest. On the benchmark's workload 2 (a 197k-parameter MLP, ~2.5 MB per
client) chunks of 5-20 clients ran at 0.21-0.25 s per round against 0.41-0.56 s
for all 100 clients in one chunk."""


ACCELERATOR_MEMORY_FRACTION = 0.5
"""Share of the device's free memory one chunk may take: the rest is headroom for the
allocator's fragmentation, the evaluation and the aggregation between chunks."""


def free_device_memory(device: torch.device) -> int:
    """Bytes still free for a chunk on ``device``.

    CUDA: the driver's free memory plus what torch's caching allocator holds
    but does not use (it hands that out first). Any other device: the host's
    available memory (the CPU under the accelerator policy, in tests).
    """
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def accelerator_chunk_size(per_client: int, free: int, fraction: float = ACCELERATOR_MEMORY_FRACTION) -> int:
    """Clients per chunk on an accelerator: ``fraction`` of ``free`` bytes over ``per_client``, a power of two (>= 1)."""
    fit = max(1, int(fraction * free) // max(per_client, 1))
    return 1 << (fit.bit_length() - 1)


@dataclass
class _Replica:
    """A model template (with factored linear layers) and its loss function, used by one thread at a time."""

    model: nn.Module
    loss_fn: StepLoss


def _step_structure(model: nn.Module, spec: LocalSpec) -> Hashable:
    """What a compiled step's graphs depend on besides its inputs' shapes (:func:`~chillfl.executors.compiled.compiled_steps`):
    the architecture, its parameters' shapes, the loss and its terms, by type; the compute settings."""
    template = spec.model if spec.model is not None else model
    shapes = tuple((k, tuple(v.shape), v.dtype) for k, v in template.state_dict().items())
    loss = (_qualname(spec.base_loss), tuple(_qualname(t) for t in spec.terms))
    return type(template).__qualname__, shapes, loss, spec.precision, spec.memory_format, spec.batched_conv, spec.frozen


def _qualname(obj: object) -> str:
    """A function's or a class's name; any other object (a loss or term instance) by its class."""
    kind: type | types.FunctionType = obj if isinstance(obj, (type, types.FunctionType)) else type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def _float_dtype(state: Mapping[str, torch.Tensor]) -> torch.dtype:
    return next((v.dtype for v in state.values() if v.is_floating_point()), torch.get_default_dtype())


def chunk_size_for(model: nn.Module, spec: LocalSpec, job: ClientJob, memory_budget: int, factored: frozenset[str] = frozenset()) -> int:
    """How many clients fit in ``memory_budget``: state copies plus ~3x one batch's activations.

    A dense parameter takes 3 copies (itself, its gradient, one temporary), a
    ``factored`` linear weight 1 (no gradient is materialised); each optimiser-state slot adds one (:func:`state_slots`: momentum,
    Adam's two moments, the plain step's momentum buffer).
    """
    return max(1, memory_budget // client_bytes(model, spec, job, factored))


def client_bytes(
    model: nn.Module, spec: LocalSpec, job: ClientJob, factored: frozenset[str] = frozenset(), resident: bool = False, deferred: frozenset[str] = frozenset()
) -> int:
    """Estimated bytes one client of a chunk takes (see :func:`chunk_size_for`); ``resident``: plus its whole data set."""
    params, buffers = split_state(model, job.start)
    plain = spec.plain_sgd if spec.plain_momentum else frozenset()  # stepped by hand with momentum: a buffer each
    per_client = sum(((1 if k in factored else 3) + state_slots(spec.optim, spec.momentum, k in plain)) * nbytes(v) for k, v in params.items())
    per_client += sum(nbytes(v) for v in buffers.values())
    if spec.private is not None:  # DP-SGD's per-sample gradients (a copy of the parameters per sample of the batch), their
        # flattened copy and their norms' float64 cast: 5 fp32 copies a sample, counted so that a chunk's stay in the cache
        per_client += 5 * min(spec.batch_size, len(job.y)) * sum(nbytes(v) for v in params.values())
    if spec.optim.sam_rho:  # SAM's perturbed weights and the first gradient made whole
        per_client += 2 * sum(nbytes(v) for v in params.values())
    per_client += sum(nbytes(v) for v in pytree.tree_leaves(dict(job.context)) if isinstance(v, torch.Tensor))
    batch = job.x[: spec.batch_size]
    if len(batch):
        per_client += 3 * activation_bytes(model, job.start, batch, gemm_columns=spec.batched_conv == "gemm") + nbytes(batch)
    if resident and spec.cuda_graphs:  # recorded steps (GraphSlots): the results are a copy out of the slot
        per_client += sum(nbytes(v) for v in job.start.values())
    if resident:  # the chunk's concatenated data and its plan: batch rows (and 3 crop/flip draws) per sample-step, int64
        per_client += nbytes(job.x) + nbytes(job.y) + 8 * len(job.y) * spec.epochs * (4 if spec.augment is not None else 1)
        # deferred weights' row buffers (DeferredOuter): up to "out" rows of x and of dz. Counted where memory can run out;
        # on the CPU the budget is a cache-size target, tuned with such weights counted once.
        per_client += sum(v.shape[0] * (v.shape[0] + v.shape[-1]) * v.element_size() for k, v in params.items() if k in deferred and v.dim() == 2)
    return max(per_client, 1)


PER_CLIENT_MIN_CONV_OUTPUTS = LARGE_CONV_OUTPUTS
"""Conv2d output elements per sample from which the CPU trains clients one by one rather than vmapped.

Measured (CPU seconds of one epoch of 16-32 clients of 64-157 samples, batch 16, 2 worker threads,
vmap / per client, channels-last): the FLex&Chill CNN on 1x8x8 digits (960 outputs a sample)
0.33 / 0.66, on 1x28x28 (7,000) 0.56 / 0.55, on 3x32x32 (9,800) 1.04 / 0.65; the McMahan CNN on
3x32x32 (31,400): see the module's Choices."""


def uncompiled_step(spec: LocalSpec) -> str | None:
    """Why ``compile`` does not compile the spec's step, which takes its gradient its own way (None: it does, or is off).

    DP-SGD's clipped per-sample gradients (a per-sample vmap inside the vmap over clients, each client's noise drawn
    outside it) and SAM's second gradient at each client's perturbed weights vmap over clients, but not through
    ``compile`` (whose graphs are the plain step's): with it they run vmapped and eager, as without it (client by
    client, unvmapped, they were several times slower: SAM 0.03 -> 0.23 s on the module's Choices' measurement).
    """
    if spec.compiled and spec.private is not None:
        return "DP-SGD's per-sample step"
    if spec.compiled and spec.optim.sam_rho:
        return "sharpness-aware steps (client.sam_rho)"
    return None


def per_client_steps(model: nn.Module, x: torch.Tensor) -> bool:
    """Whether the executor trains each client with the plain (unvmapped) step: on the CPU, for a model
    whose convolutions output at least :data:`PER_CLIENT_MIN_CONV_OUTPUTS` elements a sample of ``x``.

    See the module's Choices: vmap turns a convolution over clients into a
    grouped convolution, which oneDNN runs slower than the clients' own
    convolutions one after another, and without the gains of channels-last
    or bf16; for small convolutions vmap's saving of per-call overhead wins.
    """
    if x.device.type != "cpu" or not len(x) or not conv2d_model(model):
        return False
    return conv_outputs_per_sample(model, x) >= PER_CLIENT_MIN_CONV_OUTPUTS


def _schedule(jobs: Sequence[ClientJob], spec: LocalSpec) -> list[list[torch.Tensor]]:
    """Every client's batch order, exactly as the sequential executor draws it."""
    return [completed_steps(batch_order(len(j.y), spec.batch_size, spec.epochs, torch.Generator().manual_seed(j.seed)), j.work) for j in jobs]


class VectorizedExecutor:
    """Trains the round's clients in chunks, one vmapped SGD step per (step, batch size) group.

    With ``workers > 1`` the chunks are shared out to that many threads, each
    with its own copy of the model template (``functional_call`` swaps a
    module's tensors while it runs, so one template cannot serve two threads).
    Torch kernels release the GIL, so on a CPU the threads' matmuls and updates
    run on different cores; a chunk's result does not depend on which thread
    ran it or when, so the run stays bitwise reproducible.
    """

    def __init__(
        self,
        model: nn.Module,
        spec: LocalSpec,
        *,
        chunk_size: int | None = None,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        workers: int = 1,
        fallback: Callable[[], Executor] | None = None,
        fallback_name: str = "sequential",
        client: ClientSide | None = None,
        accelerator: bool | None = None,
        free_memory: Callable[[torch.device], int] = free_device_memory,
        step_recorder: Callable[[torch.device], Recorder] | None = None,
    ) -> None:
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.model = model
        self.spec = spec
        self.chunk_size = chunk_size
        self.memory_budget = memory_budget
        self.workers = workers
        self.client = client
        self.accelerator = accelerator
        """The accelerator policy (resident chunks, memory-sized): None = when the data are not on the CPU."""
        self.free_memory = free_memory
        self.step_recorder = step_recorder
        """How ``cuda_graphs`` records steps on a device: None = CUDA graphs on CUDA devices, no recording elsewhere
        (tests pass :class:`~chillfl.executors.step_graphs.TapeRecorder` to replay recorded steps on the CPU)."""
        self.fallback_reason: str | None = None
        self.fallback_name = fallback_name
        """What ``fallback`` builds, as a :data:`chillfl.config.EXECUTORS` name: the run's record names it (``summary.json``)."""
        self._specs: dict[int, VectorizedExecutor] = {}  # executors for the other objectives client updates yield
        self._verified = False
        self._per_client: bool | None = None  # decided on the first round's data (:func:`per_client_steps`)
        self.per_client_reason: str | None = None
        """Why this executor trains client by client, unvmapped (large convolutions on the CPU); None: vmapped."""
        self._factored: frozenset[str] = frozenset()  # linear weights updated from factors (set by the probe)
        self._deferred: frozenset[str] = frozenset()  # factored weights whose updates DeferredOuter batches (set by the probe)
        self._layouts: dict[str, tuple[int, ...]] = {}
        self._chunk_sizes: dict[tuple[int, ...], int] = {}
        self._graph_warmups: dict[Hashable, int] = {}  # ``cuda_graphs``: warm-up steps per step shape, once a run (:class:`StepGraphs`)
        self._graph_slots = GraphSlots()  # ``cuda_graphs``: recorded steps and the tensors they read, kept from round to round
        self.uncompiled_reason = uncompiled_step(spec)
        """Why ``compile`` is not applied to this spec's steps (:func:`uncompiled_step`); None: it is, or is off."""
        compiled = spec.compiled and self.uncompiled_reason is None
        self._compiled = compiled_steps(_step_structure(model, spec)) if compiled else None  # ``compile``: graphs per step shape
        self._make_fallback = fallback or (lambda: SequentialExecutor(model, spec))
        self._fallback: Executor | None = None
        self._replicas: queue.SimpleQueue[_Replica] = queue.SimpleQueue()
        for _ in range(workers):
            replica = factored_linears(model)
            self._replicas.put(_Replica(replica, StepLoss(replica, spec, vmapped=True)))
        self._pool: ThreadPoolExecutor | None = None
        self.predict = BatchedPredictor(workers=workers)  # client updates' PredictJobs: many clients per vmapped forward pass

    @property
    def fell_back_to(self) -> Executor | None:
        """The executor that has run this one's rounds since a step could not be vmapped (:attr:`fallback_reason`); None: none has."""
        return self._fallback if self.fallback_reason is not None else None

    def map(self, tasks: Sequence[ClientTask[Any, Any]]) -> list[ClientReply[Any, Any]]:
        """Every task's client update; the training jobs of one stage are trained as vmapped chunks."""
        assert self.client is not None, "map() needs the executor built with the protocol's client side"
        return drive_tasks(self.client, tasks, lambda spec, jobs: self.for_spec(spec).run(jobs), self.predict)

    def for_spec(self, spec: LocalSpec | None) -> "VectorizedExecutor":
        """This executor for its own spec (None); a sibling with the same settings for any other objective."""
        if spec is None or spec == self.spec:
            return self
        if id(spec) not in self._specs:
            model = spec.model if spec.model is not None else self.model  # heterogeneous clients: the spec's architecture
            self._specs[id(spec)] = VectorizedExecutor(
                model, spec, chunk_size=self.chunk_size, memory_budget=self.memory_budget, workers=self.workers,
                fallback=lambda: SequentialExecutor(model, spec), accelerator=self.accelerator, free_memory=self.free_memory,
                step_recorder=self.step_recorder,
            )
        return self._specs[id(spec)]

    def run(self, jobs: Sequence[ClientJob]) -> list[LocalOutcome]:
        if not jobs:
            return []
        if any(j.spec is not None and j.spec != self.spec for j in jobs):
            return self.for_spec(jobs[0].spec).run(jobs)
        for job in jobs:  # before any step, in job order as the sequential executor meets them (not the chunks' order): a
            check_job(self.spec, job)  # term's missing context key, a step below float32's normal lr; the same job and line
        if self.fallback_reason is not None:
            assert self._fallback is not None
            return self._fallback.run(jobs)
        try:
            return self._run_vectorized(jobs)
        except NotVectorizable as exc:
            failed = exc
        # The fallback runs the round before anything is said: a step that raises unvmapped too (a loss term's own
        # exception) is the user's error, not vmap's, and propagates as it is (outside the except: no vmap context).
        if self._fallback is None:
            self._fallback = self._make_fallback()
        outcomes = self._fallback.run(jobs)
        refuse_fallback("the vectorized executor", str(failed))
        self.fallback_reason = str(failed)
        log.warning("vectorized executor: %s; falling back to the %s for the rest of the run", failed, _describe(self._fallback))
        return outcomes

    def close(self) -> None:
        self.predict.close()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        if self._fallback is not None:
            self._fallback.close()
        for sibling in self._specs.values():
            sibling.close()

    def _run_vectorized(self, jobs: Sequence[ClientJob]) -> list[LocalOutcome]:
        schedules = _schedule(jobs, self.spec)
        if not self._verified:  # also on the per-client path: a step that vmaps is free of global RNG draws (dropout), which threads would race for
            replica = self._replicas.get()
            try:
                self._probe(replica, jobs, schedules)
            finally:
                self._replicas.put(replica)
        resident = self.resident(jobs[0].x.device)
        workers = 1 if resident else self.workers
        if self._per_client is None:
            large = not resident and per_client_steps(self.model, next((j.x for j in jobs if len(j.x)), jobs[0].x))
            self.per_client_reason = "large convolutions on the CPU" if large else None
            self._per_client = self.per_client_reason is not None
            if self._per_client and self.spec.compiled:  # asked for, and not given: said once
                log.warning("compile: this run trains client by client (%s), whose steps are not compiled", self.per_client_reason)
            elif self.uncompiled_reason is not None:
                log.warning("compile: this run's steps are not compiled (%s); they run vmapped, eagerly", self.uncompiled_reason)
        if self._per_client or any(j.carry is not None for j in jobs):
            # one client per chunk, trained unvmapped (large CPU convolutions; DP-SGD's and SAM's steps under compile: see
            # module Choices; a kept optimiser state, ClientJob.carry, whose Adam step counts differ between clients)
            chunks = [[i] for i in range(len(jobs))]
            free = replace(self.spec, draw_free=True)  # the probe verified them: the workers neither fork nor hold torch's generators

            def work(replica: _Replica, chunk: list[int]) -> list[LocalOutcome]:
                return [train_job(replica.model, free, replace(jobs[i], spec=None)) for i in chunk]
        else:
            order = sorted(range(len(jobs)), key=lambda i: len(schedules[i]))  # stable: ties keep job order
            if self.chunk_size:
                chunks = [order[lo : lo + self.chunk_size] for lo in range(0, len(order), self.chunk_size)]
            else:
                chunks = self._balanced_chunks(order, self._budget_chunk_size(max(jobs, key=lambda j: len(j.y)), resident), workers)

            def work(replica: _Replica, chunk: list[int]) -> list[LocalOutcome]:
                return self._run_chunk(replica, [jobs[i] for i in chunk], [schedules[i] for i in chunk], resident)

        def train(chunk: list[int]) -> list[LocalOutcome]:
            replica = self._replicas.get()
            try:
                return work(replica, chunk)
            finally:
                self._replicas.put(replica)

        if workers > 1 and len(chunks) > 1:
            if self._pool is None:
                # OpenMP's thread count is per calling thread: give the workers the caller's, so that
                # kernels reduce in the same order (the same bits) on every thread.
                threads = torch.get_num_threads()
                self._pool = ThreadPoolExecutor(self.workers, "chillfl-vectorized", torch.set_num_threads, (threads,))
            # A per-client job forks and seeds the process's one CPU generator (dropout_rng, seed_dropout) on its pool
            # thread: interleaved, one fork restored another's seeded state, and the caller's generator was left
            # changed. Forked once here, around every thread's, the caller's state comes back whatever the order (the
            # steps draw nothing from it: the probe verified them free of global RNG draws, so no thread's bits change).
            with dropout_rng(jobs[0].x.device):
                futures = [self._pool.submit(train, chunk) for chunk in chunks]
                wait(futures)  # every chunk has stopped before a failure falls back to the (shared) template
            trained = [f.result() for f in futures]
        else:
            trained = [train(chunk) for chunk in chunks]
        outcomes = {i: out for chunk, outs in zip(chunks, trained) for i, out in zip(chunk, outs)}
        return [outcomes[i] for i in range(len(jobs))]

    @property
    def _factor(self) -> bool:
        """Whether steps record factored linear calls: the probe found factored weights and they were exact."""
        return bool(self._factored)

    def resident(self, device: torch.device) -> bool:
        """Whether chunks on ``device`` run under the accelerator policy (see the module's last section)."""
        return device.type != "cpu" if self.accelerator is None else self.accelerator

    def graphed(self, device: torch.device) -> bool:
        """Whether this executor's steps of every client of a chunk on ``device`` are recorded and replayed (``cuda_graphs``).

        Only a resident chunk (the accelerator policy) whose step reads nothing
        that changes from step to step besides its batch (:func:`replayable_steps`:
        plain SGD at a constant local rate, no DP-SGD; ``batched_conv = "auto"``
        asks the same), on a CUDA device or with an injected recorder.
        """
        spec = self.spec
        return (
            spec.cuda_graphs
            and self.resident(device)
            and replayable_steps(spec.optim, spec.private)
            and (device.type == "cuda" or self.step_recorder is not None)
        )

    def _step_graphs(self, device: torch.device) -> StepGraphs:
        """New :class:`StepGraphs` with a recorder of their own (for a :meth:`graphed` device).

        A recorder of their own: a CUDA recorder's graphs share its memory pool,
        and torch refuses a capture into a pool whose graphs have all been freed
        (as a dropped chunk's or slot's are), so a pool lives and dies with the
        graphs recorded into it.
        """
        recorder = self.step_recorder(device) if self.step_recorder is not None else CudaGraphRecorder(device)
        return StepGraphs(recorder, seen=self._graph_warmups)

    def _balanced_chunks(self, order: list[int], size: int, workers: int | None = None) -> list[list[int]]:
        """At most ``size`` clients per chunk, a multiple of ``workers`` chunks, sizes within one of each other.

        Chunks of the budget size plus one short remainder would leave one
        worker thread idle at the end of the round (19+19+19 against 19+19+5
        clients for 100 clients, 2 workers, a budget of 19).
        """
        n = len(order)
        count = -(-n // min(size, n))
        workers = workers or self.workers
        count = min(n, -(-count // workers) * workers)
        return [order[i * n // count : (i + 1) * n // count] for i in range(count)]

    def _budget_chunk_size(self, largest: ClientJob, resident: bool = False) -> int:
        """Clients per chunk for the round's largest client, probed once per batch shape (not every round).

        CPU: :func:`chunk_size_for` the cache-sized ``memory_budget``; accelerator:
        :func:`accelerator_chunk_size` of the device's free memory.
        """
        key = (*largest.x[: self.spec.batch_size].shape, resident)
        if key not in self._chunk_sizes:
            if resident:
                per_client = client_bytes(self.model, self.spec, largest, self._factored, resident=True, deferred=self._deferred)
                self._chunk_sizes[key] = accelerator_chunk_size(per_client, self.free_memory(largest.x.device))
                log.info("vectorized executor: %d clients per chunk on %s (%d bytes per client)", self._chunk_sizes[key], largest.x.device, per_client)
            else:
                self._chunk_sizes[key] = chunk_size_for(self.model, self.spec, largest, self.memory_budget, self._factored)
        return self._chunk_sizes[key]

    def _run_chunk(
        self, replica: _Replica, jobs: Sequence[ClientJob], schedules: Sequence[list[torch.Tensor]], resident: bool = False
    ) -> list[LocalOutcome]:
        params, buffers, keys = stack_states(replica.model, [j.start for j in jobs], self._layouts, self._deferred, self.spec.frozen)
        dtype = _float_dtype(params)
        device = jobs[0].x.device
        context = stack_contexts([j.context for j in jobs], dtype, device)
        opt_state = init_state(params, self.spec.optim, self.spec.momentum, self.spec.plain_sgd if self.spec.plain_momentum else ())
        temperature = to_device(torch.tensor([j.temperature for j in jobs], dtype=dtype), device)
        lr = LearningRates(self.spec, jobs, dtype, device)
        replica.loss_fn.factor = self._factor
        seeds = [j.seed for j in jobs]
        losses_of = VmappedStep(replica.loss_fn, context, seeds)
        steps: Iterable[Batch] = ResidentBatches(jobs, schedules, self.spec) if resident else host_batches(jobs, schedules, self.spec)
        replica.model.train()
        deferred = DeferredOuter(params, self._deferred, self._layouts) if self._deferred else None
        totals = torch.zeros(len(jobs), dtype=torch.float64, device=device)
        slot, graphs = None, None
        if self.graphed(device):
            slot = self._graph_slots.take(_slot_tree(params, buffers, opt_state, temperature, context, lr, totals), lambda: self._step_graphs(device))
            graphs = slot.graphs if slot is not None else self._step_graphs(device)
        if slot is not None:  # a slot's recorded steps read its tensors: the chunk trains on them, holding its values
            params, buffers, opt_state, temperature, shared, batched, lr.constant, totals = slot.tree
            context = StackedContext(context.spec, shared, batched)
            losses_of = VmappedStep(replica.loss_fn, context, seeds)
        totals = self._train_steps(losses_of, steps, params, buffers, opt_state, temperature, lr, context, totals, deferred, graphs)
        sums = totals.tolist()  # the chunk's one read of device values on the host
        if slot is not None:  # the next chunk of this structure overwrites the slot: the results are copies
            params, buffers = {k: v.detach().clone() for k, v in params.items()}, {k: v.clone() for k, v in buffers.items()}
            self._graph_slots.give(slot)
        return [self._outcome(c, keys, params, buffers, len(schedules[c]), sums[c]) for c in range(len(jobs))]

    def _train_steps(
        self,
        losses_of: VmappedStep,
        steps: Iterable[Batch],
        params: Params,
        buffers: Params,
        opt_state: OptState,
        temperature: torch.Tensor,
        lr: LearningRates,
        context: StackedContext,
        totals: torch.Tensor,
        deferred: DeferredOuter | None = None,
        graphs: StepGraphs | None = None,
    ) -> torch.Tensor:
        """Every vmapped step of one chunk, in place on the stacked state; ``totals``: the clients' summed losses (float64, zeros in).

        ``deferred``: large factored weights' updates, batched (:class:`DeferredOuter`); written
        into ``params`` before a step of only some clients and at the end.
        ``graphs``: the steps of every client are replayed from recorded graphs
        (:class:`~chillfl.executors.step_graphs.StepGraphs`; never with ``deferred``).

        Nothing here reads a device value on the host (no ``.item()``, no
        data-dependent branch): on a GPU the host only queues kernels, and the
        sums stay on the device until the caller reads them once.
        """
        every = context.select(None)
        left = steps.everyone_steps() if graphs is not None and isinstance(steps, ResidentBatches) else None  # to know a shape's last step
        for batch in steps:
            rows = batch.rows
            if graphs is not None and rows is None:
                rate = lr.at(batch.step, None, ())  # constant within the chunk (:meth:`graphed`): the graph keeps it

                def step(xy: Sequence[torch.Tensor], rate: float | torch.Tensor = rate, s: int = batch.step) -> None:
                    inputs = StepInputs(xy[0], xy[1], temperature, every)
                    totals.add_(self._step(losses_of, params, buffers, opt_state, inputs, rate, None, s, self._compiled_for(xy[0])))

                if left is not None:
                    left[batch.x.shape[1]] -= 1
                graphs((batch.x, batch.y), step, again=left is None or left[batch.x.shape[1]] > 0)
                continue
            if rows is None:
                p, b, m = params, buffers, opt_state
            else:
                if deferred is not None:
                    deferred.flush()
                p, b, m = leaf_params(_rows_of(params, rows)), _rows_of(buffers, rows), {slot: _rows_of(s, rows) for slot, s in opt_state.items()}
            later = deferred if rows is None else None
            rate = lr.at(batch.step, rows, batch.members)
            compiled = self._compiled_for(batch.x) if rows is None else None  # steps of only some clients stay eager (chillfl.executors.compiled)
            inputs = StepInputs(batch.x, batch.y, rows_at(temperature, rows), context.select(rows))
            losses = self._step(losses_of, p, b, m, inputs, rate, later, batch.step, compiled, batch.members)
            if rows is None:
                totals += losses  # float32 losses into float64 sums: each converted exactly, then added in float64
            else:
                totals[rows] += losses
                for target, values in ((params, p), (buffers, b), *((opt_state[slot], m[slot]) for slot in opt_state)):  # buffers: batch norm updated them in place
                    _write(target, values, rows)
        if deferred is not None:
            deferred.flush()
        return totals

    def _compiled_for(self, x: torch.Tensor) -> CompiledSteps | None:
        """``compile``'s step for a step of every client of a chunk on ``x`` ([clients, batch, ...]): only at the full batch
        size (a short last batch's size varies from client to client and seed to seed: each would be compiled)."""
        return self._compiled if x.shape[1] == self.spec.batch_size else None

    def _step(
        self,
        losses_of: VmappedStep,
        params: Params,
        buffers: Params,
        opt_state: OptState,
        inputs: StepInputs,
        lr: float | torch.Tensor,
        deferred: DeferredOuter | None = None,
        step: int = 0,
        compiled: CompiledSteps | None = None,
        members: Sequence[int] = (),
    ) -> torch.Tensor:
        """One SGD step of every client stacked in ``params``; returns their losses (detached, in the loss's dtype).

        ``compiled``: the forward and backward through it (``compile = true``; :mod:`chillfl.executors.compiled`).
        ``members``: the chunk positions of the stacked clients (empty: every client), whose job seeds DP-SGD's noise reads.
        The gradient is the plain step's, SAM's second one at each client's perturbed weights (``client.sam_rho``), or
        DP-SGD's (``spec.private``): as :func:`~chillfl.training.local.train_client` takes it, stacked.

        A failure becomes NotVectorizable here too, not only in the probe: a
        client-dependent number in Python control flow, e.g., only shows once
        the chunk's contexts differ. The round is then rerun by the fallback.
        """
        private, optim = self.spec.private, self.spec.optim
        if private is not None:  # DP-SGD: clipped, noised per-sample gradients (unfactored loss: the probe factors nothing)
            losses, grads = losses_of.private(private, params, buffers, inputs, members, step)
            factors: Factors = {}
        else:
            losses, grads, factors = losses_of.grads(params, buffers, inputs, deferred.pending() if deferred is not None else {}, compiled)
            if optim.sam_rho:  # FedSAM / FedASAM (never deferred, never compiled: see _probe and uncompiled_step)
                grads, factors = losses_of.sharpened(params, buffers, inputs, grads, factors, optim.sam_rho, optim.sam_adaptive, optim.sam_eta)
        if deferred is not None:
            for i, key in enumerate(params):
                if key not in deferred.rows:
                    continue
                if grads[i] is not None:  # something besides the factored forward read the weight: deferring was wrong
                    raise NotVectorizable(f"weight {key} has a dense gradient part, so its updates cannot be deferred")
                for xin, dz in factors.pop(key, []):
                    deferred.add(key, xin, dz, -lr)
        optimizer_step_(params, grads, opt_state, lr, self.spec, factors, step=step, stacked=True)
        return losses.detach()  # the caller's float64 ``+=`` converts it exactly: no separate conversion op a step

    def _probe(self, replica: _Replica, jobs: Sequence[ClientJob], schedules: Sequence[list[torch.Tensor]]) -> None:
        """Check that the step vmaps, learn each parameter's gradient layout, check factored gradients; nothing is kept.

        One gradient of two copies of the first client on its first batch.
        Under vmap a linear layer's weight gradient comes out transposed in
        memory; an update between tensors of different layouts is a strided
        gather, about 8x slower than a contiguous one and the largest cost of a
        small model's step. Every chunk therefore stacks each parameter in its
        gradient's layout from the start, the same for every chunk and round,
        so a client's result never depends on where it sits in the round.

        The same batch is then differentiated with factored linear layers; if
        their gradients differ from the dense ones (a model that reuses a
        layer's output in a way the factoring cannot see), every replica
        trains with dense gradients instead.
        """
        first = next((i for i, s in enumerate(schedules) if s), None)
        if first is None:
            return
        job, idx = jobs[first], schedules[first][0]
        params, buffers, _ = stack_states(replica.model, [job.start, job.start], {}, frozen=self.spec.frozen)
        context = stack_contexts([job.context, job.context], _float_dtype(params), job.x.device)
        t = torch.full((2,), float(job.temperature), dtype=_float_dtype(params), device=job.x.device)
        inputs = StepInputs(stack([job.x[idx]] * 2), stack([job.y[idx]] * 2), t, [])
        replica.model.train()
        losses_of = VmappedStep(replica.loss_fn, context)
        replica.loss_fn.factor = False
        _, dense, _ = losses_of.grads(params, buffers, inputs)  # batch-norm statistics touched here are discarded
        self._layouts = {k: dim_order(g) for (k, w), g in zip(params.items(), dense) if g is not None and dim_order(g) != dim_order(w)}
        if self._compiled is not None or self.spec.private is not None:  # a compiled forward is one autograd node: the gradient at a linear
            # layer's output is not reachable; DP-SGD's per-sample gradients are torch.func's, of the unfactored loss
            self._factored, self._deferred, self._verified = frozenset(), frozenset(), True
            return
        replica.loss_fn.factor = True
        try:
            _, grads, factors = losses_of.grads(params, buffers, inputs)
            rtol = 1e-4 if self.spec.precision == "fp32" else 1e-2  # bf16/tf32: the dense weight gradient is a reduced-precision matmul
            mismatch = [k for k, d, g in zip(params, dense, grads) if not _close(_full_grad(g, factors.get(k, []), params[k]), d, rtol)]
        except NotVectorizable as exc:  # e.g. a bias-free linear layer on the (constant) input
            mismatch, factors = [str(exc)], {}
        self._factored = frozenset() if mismatch else frozenset(factors)
        plain_sgd = not self.spec.momentum and not self.spec.weight_decay and not self.spec.optim.dense and self.spec.precision in ("fp32", "tf32")
        plain_sgd = plain_sgd and not self.spec.optim.sam_rho  # SAM perturbs the weights themselves: their updates cannot wait
        plain_sgd = plain_sgd and not self.graphed(job.x.device)  # deferred updates grow buffers: a recorded step cannot replay them
        dense_part = set() if mismatch else {k for k, g in zip(params, grads) if g is not None}
        self._deferred = frozenset(
            k
            for k in self._factored
            if plain_sgd
            and k not in dense_part
            and params[k][0].numel() >= DEFER_MIN_ELEMENTS
            and step_rows(factors[k]) * DEFER_MIN_STEPS <= params[k].shape[-2]
        )
        if mismatch:
            log.info("vectorized executor: factored linear gradients unavailable (%s); using dense gradients", ", ".join(mismatch))
        self._verified = True

    @staticmethod
    def _outcome(c: int, keys: list[str], params: Params, buffers: Params, steps: int, total: float) -> LocalOutcome:
        state = {k: (params[k] if k in params else buffers[k])[c].detach() for k in keys}
        return LocalOutcome(state, steps, total / max(steps, 1))


def _slot_tree(
    params: Params, buffers: Params, opt_state: OptState, temperature: torch.Tensor, context: StackedContext, lr: LearningRates, totals: torch.Tensor
) -> tuple[Any, ...]:
    """What a chunk's recorded steps read besides the batch, as :class:`GraphSlots` holds it (the order ``_run_chunk`` unpacks)."""
    shared = [None if pos in context.batched else v for pos, v in enumerate(context.shared)]  # a batched position's value is the stack's
    return params, buffers, opt_state, temperature, shared, context.batched, lr.constant, totals


def _full_grad(dense: torch.Tensor | None, pairs: list[tuple[torch.Tensor, torch.Tensor]], like: torch.Tensor) -> torch.Tensor:
    """A parameter's whole gradient from its dense part and its factored (x, dz) pairs."""
    total = torch.zeros_like(like) if dense is None else dense.detach().clone()
    for x, dz in pairs:
        add_outer_(total, x, dz)
    return total


def _close(a: torch.Tensor, b: torch.Tensor | None, rtol: float = 1e-4) -> bool:
    """Equal up to float rounding (relative to b's largest entry); None = zero."""
    b = torch.zeros_like(a) if b is None else b
    return bool((a - b).abs().max() <= rtol * b.abs().max() + 1e-6)


def _describe(executor: Executor) -> str:
    """'sequential executor', 'process executor', ... for log lines."""
    return type(executor).__name__.removesuffix("Executor").lower() + " executor"


def _rows_of(state: Params, rows: torch.Tensor) -> Params:
    return {k: v[rows] for k, v in state.items()}


@torch.no_grad()
def _write(target: Params, values: Params, rows: torch.Tensor) -> None:
    for k, v in values.items():
        target[k][rows] = v

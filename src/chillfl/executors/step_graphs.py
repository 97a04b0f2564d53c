"""A chunk's fixed-shape vmapped steps recorded once and replayed (``cuda_graphs = true``): CUDA graphs.

Why: on a GPU the vectorised executor's step is launch-bound. One vmapped
step of the McMahan CNN queues about 1,500 small kernels (issue 39: 75,647
launches in a round of workload 1, 532 ms of ``cudaLaunchKernel`` host time),
and the host's Python (vmap, autograd, the optimiser) takes longer to queue
them than the GPU takes to run them. A CUDA graph records one step's kernels
once; each later step is ONE launch of the whole graph, with no Python.

How (:class:`StepGraphs`), per step *shape* (the inputs' shapes and dtypes):

1. the first ``warmup`` steps of a shape run eagerly (real steps: cuDNN's
   and cuBLAS's lazy set-up happens there, on a side stream as torch asks);
2. the next one is *captured*: its inputs are copied into static buffers the
   graph reads, and the step's kernels are recorded, not run; the graph is
   then replayed once, which is that step;
3. every later step copies its inputs into the static buffers and replays.

A shape's last step in a chunk is not captured (``again=False``): a capture
costs more than an eager step and pays off only through replays.

Recorded once a run (:class:`GraphSlots`): a chunk trains on a *slot*'s
tensors -- stacked state, optimiser state, temperatures, loss sums, context --
kept for the next chunk of the same structure, whose values are copied in;
that chunk (usually the next round's) replays the graphs recorded there
instead of recording its own.

A replay runs the very kernels the eager step queued, with the same launch
parameters, on the same tensors (the chunk's stacked parameters, buffers,
optimiser state and loss sums, updated in place), so it computes the same
bits; the CUDA suite checks it against eager steps.

What a graph can replay is decided by the caller (the vectorised executor's
:meth:`~chillfl.executors.vectorized.VectorizedExecutor.step_recorder`): only
steps whose every other input is the same object at every step of the chunk
(every client in the call, a constant learning rate, no step-dependent
optimiser such as Adam's bias correction, no deferred linear updates, whose
buffers grow). Anything that changes between steps must be an input here.

:class:`TapeRecorder` is the CPU stand-in, with a CUDA graph's semantics: it
runs the captured step once under a dispatch mode that records every aten op
with the very tensors it read and wrote, and a replay reruns those ops on
those tensors (no Python of the step runs again). A step that read a tensor
that is not one of the static inputs, or baked a per-step number into an op,
is replayed wrongly on the CPU as it would be on a GPU, and the tests see it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Protocol, Sequence

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

log = logging.getLogger(__name__)

Step = Callable[[Sequence[torch.Tensor]], None]
"""One step on its inputs (a batch's x and y), in place on the chunk's state."""


class Recorder(Protocol):
    """How a step is warmed up and recorded: :class:`CudaGraphRecorder`, or :class:`TapeRecorder` on any device."""

    runs_while_recording: bool
    """Whether :meth:`capture` also runs the step (a tape does; a CUDA graph capture does not)."""

    def warmup(self, run: Callable[[], None]) -> None:
        """Run ``run`` eagerly, before any capture of its shape."""

    def capture(self, run: Callable[[], None]) -> Callable[[], None]:
        """Record ``run`` (not run it); return the replay of what was recorded."""


class CudaGraphRecorder:
    """``torch.cuda.CUDAGraph`` capture on ``device``; the graphs of one recorder share one memory pool.

    The capture is ``torch.cuda.graph``'s, less its set-up: that context manager
    synchronises the device and empties the allocator's device and pinned-host
    caches before every capture, to give the graph as much memory as it can
    (torch 2.13). Here a capture happens once per chunk and step shape, and a
    host sync would stall the queue each time; the capture stream instead waits
    for the work queued so far (an event, not a host sync), and the graph
    allocates from its pool as usual.
    """

    runs_while_recording = False

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._pool: Any = None  # torch's pool handle (``graph.pool()``), shared by the next capture
        self._stream = torch.cuda.Stream(device)

    def warmup(self, run: Callable[[], None]) -> None:
        current = torch.cuda.current_stream(self.device)
        self._stream.wait_stream(current)
        with torch.cuda.stream(self._stream):
            run()
        current.wait_stream(self._stream)

    def capture(self, run: Callable[[], None]) -> Callable[[], None]:
        graph = torch.cuda.CUDAGraph()
        current = torch.cuda.current_stream(self.device)
        self._stream.wait_stream(current)  # before the capture begins: not part of the graph
        with torch.cuda.stream(self._stream):
            graph.capture_begin(pool=self._pool)
            try:
                run()
            finally:
                graph.capture_end()
        current.wait_stream(self._stream)
        self._pool = graph.pool()
        return graph.replay


class _Tape(TorchDispatchMode):
    """Every aten op of the code it wraps, with its arguments and results (the tensor objects themselves)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, tuple, dict, Any]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.calls.append((func, args, kwargs, out))
        return out


def _storages(tree: Any) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes()}


class TapeRecorder:
    """The CPU stand-in for a CUDA graph (see the module docstring): record the step's aten ops, replay them on the same tensors.

    A replay reruns each recorded op on its recorded arguments; a result that
    is a new tensor is copied into the recorded one (which later ops read), a
    result that shares an argument's memory (in-place ops, views, ``out=``)
    already is. Runs without autograd: the recorded backward is replayed as ops.
    """

    runs_while_recording = True

    def __init__(self) -> None:
        self.captures = 0
        self.replays = 0

    def warmup(self, run: Callable[[], None]) -> None:
        run()

    def capture(self, run: Callable[[], None]) -> Callable[[], None]:
        tape = _Tape()
        with tape:
            run()
        self.captures += 1
        calls = [(func, args, kwargs, out, _storages((args, kwargs))) for func, args, kwargs, out in tape.calls]

        @torch.no_grad()
        def replay() -> None:
            self.replays += 1
            for func, args, kwargs, recorded, inputs in calls:
                fresh = func(*args, **kwargs)
                for new, old in zip(pytree.tree_leaves(fresh), pytree.tree_leaves(recorded)):
                    if isinstance(old, torch.Tensor) and old.untyped_storage().data_ptr() not in inputs:
                        old.copy_(new)

        return replay


class StepGraphs:
    """One chunk's steps: eager while a shape warms up, then one recorded graph per shape, replayed.

    ``warmup``: eager steps of a shape before its capture (torch's CUDA graph
    notes ask for a few on a side stream, for libraries' lazy set-up). ``seen``:
    the warm-up steps counted so far per shape, shared by the executor's chunks,
    so that a shape warms up once per run, not once per chunk and round. A capture that fails (an op that
    cannot be captured) is logged once; that step and every later one of the
    chunk then run eagerly, as without graphs.
    """

    def __init__(self, recorder: Recorder, warmup: int = 2, seen: dict[Hashable, int] | None = None) -> None:
        self.recorder = recorder
        self.warmup = warmup
        self._seen: dict[Hashable, int] = {} if seen is None else seen
        self._graphs: dict[Hashable, tuple[Callable[[], None], list[torch.Tensor]]] = {}
        self.failed: str | None = None

    @staticmethod
    def key(inputs: Sequence[torch.Tensor]) -> Hashable:
        return tuple(_layout(t) for t in inputs)

    def __call__(self, inputs: Sequence[torch.Tensor], step: Step, again: bool = True) -> None:
        """Run ``step(inputs)``: eagerly, or by a graph of this shape (capturing it first if its warm-up is over).

        ``again``: whether the chunk has a later step of this shape. A shape's
        last step is not captured: a capture costs more than an eager step, and
        is worth it only if a replay follows (a chunk of one step a shape, e.g.
        Per-FedAvg's meta-steps, would otherwise capture every step).
        """
        if self.failed is not None:
            step(inputs)
            return
        key = self.key(inputs)
        recorded = self._graphs.get(key)
        if recorded is None:
            seen = self._seen.get(key, 0)
            if seen < self.warmup:
                self._seen[key] = seen + 1
                self.recorder.warmup(lambda: step(inputs))
                return
            if not again:
                step(inputs)
                return
            static = [t.clone() for t in inputs]
            try:
                replay = self.recorder.capture(lambda: step(static))
            except Exception as exc:  # noqa: BLE001 - any capture failure: keep training eagerly
                self.failed = f"{type(exc).__name__}: {exc}"
                log.warning("step graphs: the step could not be captured (%s); this chunk's steps run eagerly", self.failed)
                step(inputs)
                return
            recorded = self._graphs[key] = (replay, static)
            if self.recorder.runs_while_recording:  # this step is done
                return
        replay, static = recorded
        for buffer, value in zip(static, inputs):
            buffer.copy_(value)
        replay()


def _layout(t: torch.Tensor) -> tuple[Hashable, ...]:
    """What a recorded op bakes in of a tensor besides its address: shape, strides, dtype, device."""
    return tuple(t.shape), t.stride(), t.dtype, t.device


PLAIN = (bool, int, float, str, type(None))
"""Leaves a recorded step may bake in by value (numbers, flags, names); any other object refuses :func:`tree_key`."""


def tree_key(tree: Any) -> Hashable | None:
    """What recorded steps bake in of ``tree``: its structure, each tensor's layout, each plain value (floats by their bits).

    None when a leaf is neither a dense tensor nor a plain value (an object a
    replay could neither refresh nor compare), or a tensor is a broadcast view
    (stride 0: it cannot be copied into).
    """
    leaves, spec = pytree.tree_flatten(tree)
    out: list[Hashable] = []
    for v in leaves:
        if isinstance(v, torch.Tensor):
            if v.numel() > 1 and 0 in v.stride():
                return None
            out.append((*_layout(v), v.requires_grad))
        elif isinstance(v, PLAIN):
            out.append((type(v), v.hex() if isinstance(v, float) else v))
        else:
            return None
    return spec, tuple(out)


def _owned(tree: Any) -> Any:
    """A copy of ``tree`` whose tensors are the slot's own (the caller's may be a protocol's, e.g. the global model)."""
    return pytree.tree_map(lambda v: v.detach().clone().requires_grad_(v.requires_grad) if isinstance(v, torch.Tensor) else v, tree)


@dataclass
class Slot:
    """One structure's persistent tensors (``tree``) and the steps recorded on them."""

    key: Hashable
    tree: Any
    graphs: StepGraphs


class GraphSlots:
    """A run's recorded steps, replayed by every later chunk of the same structure, not recorded again each round.

    A recorded step reads fixed memory: the chunk's stacked state, optimiser
    state, temperatures and context. A chunk takes (:meth:`take`) the slot of its
    structure (:func:`tree_key` of those tensors) and its values are copied in,
    so the steps recorded by an earlier chunk (an earlier round) replay on
    them; a chunk of a new structure gets a new slot, copies of its tensors.
    The results a chunk returns must not be views of the slot (the next chunk
    overwrites it): the caller copies them out. ``keep`` slots at most (the
    least recently used goes, with its graphs and their memory). A chunk holds
    its slot alone (another thread's chunk of the same structure gets its own).
    """

    def __init__(self, keep: int = 2) -> None:
        self.keep = keep
        self._free: dict[Hashable, Slot] = {}
        self._lock = threading.Lock()

    def take(self, tree: Any, new_graphs: Callable[[], StepGraphs]) -> Slot | None:
        """The slot for ``tree``'s structure, holding ``tree``'s values (a new one records with ``new_graphs()``, made only then:
        a CUDA recorder holds a stream); None if ``tree`` has an object no slot can hold."""
        key = tree_key(tree)
        if key is None:
            return None
        with self._lock:
            slot = self._free.pop(key, None)
        if slot is None:
            return Slot(key, _owned(tree), new_graphs())
        with torch.no_grad():
            for mine, value in zip(pytree.tree_leaves(slot.tree), pytree.tree_leaves(tree)):
                if isinstance(mine, torch.Tensor):
                    mine.copy_(value)
        return slot

    def give(self, slot: Slot) -> None:
        """``slot`` back, for the next chunk of its structure."""
        with self._lock:
            self._free.pop(slot.key, None)
            self._free[slot.key] = slot  # the most recently used last
            while len(self._free) > self.keep:
                del self._free[next(iter(self._free))]

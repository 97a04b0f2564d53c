"""Aten ops dispatched per client step, counted on the CPU; CUDA kernel launches where a GPU exists.

    python benchmarks/op_count.py [--model mcmahan_cnn|mlp] [--clients 2] [--batch-size 50] [--device cpu] [--top 40]

What is counted (:class:`OpCounter`): every aten operator call that reaches
PyTorch's Python dispatch key while the counter is on, i.e. the operators
left once autograd and ``vmap`` have done their work -- the forward's and the
backward's kernels, the optimiser's updates, copies, gathers and views --
each counted once however its kernel is implemented inside (an op a kernel
calls internally is not counted). So the number does not depend on the CPU's
instruction set (oneDNN's or the vectorised kernels' choices happen inside an
op), and on a GPU every counted op that computes is about one kernel launch
(views and metadata ops launch none). ``aten._local_scalar_dense`` is a host
read of a tensor value (``.item()``, ``.tolist()``, ``bool(t)``): a host sync
on a GPU; it is also reported on its own.

The counter is thread-aware: a Python dispatch mode is per thread, so
:func:`counting_threads` also turns it on in the threads the vectorised
executor's pool starts (its initializer) while the counter is installed.

``ops per client step`` = the ops dispatched while training (a round, or a
chunk) / the client steps trained in it (each client's SGD steps, summed over
clients). One vmapped step of C clients counts as C client steps, so on the
vmapped path the number falls as 1/C; :func:`vectorized_step_ops` also gives
the ops per *vmapped* step, which does not depend on C.

Nothing here is imported by the ``chillfl`` package.
"""

from __future__ import annotations

import collections
import contextlib
import json
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from bench_cli import OneLineParser  # benchmarks/ is on the path: this script's folder

HOST_READ = "aten._local_scalar_dense"
METADATA_OPS = frozenset({"aten._unsafe_view"})
"""Ops that only make a new view of a tensor but are not tagged as views (``OpOverload.is_view``)."""


class _Tally:
    """Counts shared by an :class:`OpCounter` and its children in other threads."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.views = 0
        self.lock = threading.Lock()


class OpCounter(TorchDispatchMode):
    """Counts aten ops by name (``aten.<op>``; overloads merged), thread-safely; views apart too.

    A view (``OpOverload.is_view``, or :data:`METADATA_OPS`) only makes new tensor metadata: on a GPU it
    launches no kernel. ``compute`` = ``total`` - ``views`` are the ops that read or write data.
    A mode is entered per thread: :meth:`child` is another mode object adding to the same counts.
    """

    def __init__(self, tally: _Tally | None = None) -> None:
        super().__init__()
        self._tally = tally or _Tally()

    def child(self) -> "OpCounter":
        return OpCounter(self._tally)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = f"{func.namespace}.{func.__name__.split('.')[0]}"
        t = self._tally
        with t.lock:
            t.counts[name] += 1
            t.views += bool(func.is_view or name in METADATA_OPS)
        return func(*args, **(kwargs or {}))

    @property
    def counts(self) -> collections.Counter[str]:
        return self._tally.counts

    @property
    def views(self) -> int:
        return self._tally.views

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def compute(self) -> int:
        return self.total - self.views

    def snapshot(self) -> tuple[collections.Counter[str], int]:
        """(counts by name, views) now."""
        with self._tally.lock:
            return collections.Counter(self._tally.counts), self._tally.views


@contextlib.contextmanager
def counting_threads(counter: OpCounter) -> Iterator[None]:
    """While on: ``counter`` also counts in threads started by a ``ThreadPoolExecutor`` (the vectorised executor's workers).

    The pool's threads run the counter's mode from their start to their end: start
    the executor (its first multi-chunk round) inside this context.
    """
    import concurrent.futures.thread as cft

    original = cft._worker

    def worker(*args: Any, **kwargs: Any) -> Any:
        with counter.child():
            return original(*args, **kwargs)

    cft._worker = worker  # type: ignore[assignment]
    try:
        yield
    finally:
        cft._worker = original  # type: ignore[assignment]


@dataclass
class CudaLaunches:
    """Kernel launches counted by ``torch.profiler`` (host-side ``cudaLaunchKernel``-like runtime calls)."""

    launches: int = 0
    by_name: dict[str, int] = field(default_factory=dict)


LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch")


def count_cuda_launches(fn: Callable[[], Any]) -> CudaLaunches:
    """Kernel launches (a CUDA-graph replay counts as one) while ``fn`` runs; CUDA only."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    by_name = {e.key: e.count for e in prof.key_averages() if e.key in LAUNCH_CALLS}
    return CudaLaunches(sum(by_name.values()), by_name)


@dataclass
class StepOps:
    """Ops of the vectorised executor's vmapped step on one resident chunk (the GPU path, forced on any device).

    Two chunks of the same ``clients`` are counted, of ``steps`` = (a, b) vmapped steps each; the per-step
    numbers are the difference over ``b - a`` steps, so the chunk's once-only work (stacking the states,
    the plan's copy, the results) drops out.
    """

    clients: int
    steps: tuple[int, int]
    ops: tuple[int, int]
    compute: tuple[int, int]
    host_reads: tuple[int, int]
    top: list[tuple[str, float]]
    """Per vmapped step, by op name (the difference of the two chunks' counts)."""

    @property
    def per_vmapped_step(self) -> float:
        return (self.ops[1] - self.ops[0]) / (self.steps[1] - self.steps[0])

    @property
    def compute_per_vmapped_step(self) -> float:
        return (self.compute[1] - self.compute[0]) / (self.steps[1] - self.steps[0])

    @property
    def per_client_step(self) -> float:
        return self.per_vmapped_step / self.clients


def chunk_ops(model: Any, spec: Any, jobs: list[Any]) -> OpCounter:
    """The ops of ``VectorizedExecutor(accelerator=True).run(jobs)`` as one chunk, after a warm-up run (the probe)."""
    from chillfl.executors.vectorized import VectorizedExecutor

    ex = VectorizedExecutor(model, spec, accelerator=True, free_memory=lambda _device: 1 << 62)  # one chunk of all clients
    ex.run(jobs)  # warm-up: the probe
    assert ex.fallback_reason is None, ex.fallback_reason
    counter = OpCounter()
    with counter:
        ex.run(jobs)
    return counter


def vectorized_step_ops(
    model_name: str = "mcmahan_cnn",
    sample_shape: tuple[int, ...] = (3, 32, 32),
    *,
    clients: int = 2,
    steps: tuple[int, int] = (2, 6),
    batch_size: int = 50,
    lr: float = 0.1,
    device: str = "cpu",
    model_options: dict[str, Any] | None = None,
    spec_options: dict[str, Any] | None = None,
) -> StepOps:
    """Ops a vmapped step of ``clients`` equal clients (workload 1's model, batch and plain SGD by default)."""
    from chillfl.executors.sequential import ClientJob
    from chillfl.models.registry import build_model
    from chillfl.training.local import LocalSpec, model_state

    torch.manual_seed(0)
    model = build_model(model_name, sample_shape, 10, model_options).to(device)
    spec = LocalSpec(epochs=1, batch_size=batch_size, **(spec_options or {}))
    start = model_state(model)
    counters = []
    for n in steps:
        g = torch.Generator().manual_seed(0)
        samples = n * batch_size  # every step has every client, at the full batch size
        jobs = [
            ClientJob(c, start, torch.randn(samples, *sample_shape, generator=g).to(device), torch.randint(0, 10, (samples,), generator=g).to(device), lr, 1.0, {}, c)
            for c in range(clients)
        ]
        counters.append(chunk_ops(model, spec, jobs))
    a, b = counters
    diff = {k: (b.counts[k] - a.counts[k]) / (steps[1] - steps[0]) for k in b.counts if b.counts[k] != a.counts[k]}
    return StepOps(
        clients, steps, (a.total, b.total), (a.compute, b.compute), (a.counts[HOST_READ], b.counts[HOST_READ]),
        sorted(diff.items(), key=lambda kv: -kv[1]),
    )


def batched_conv_choices() -> tuple[str, ...]:
    """The config's ``batched_conv`` values (a name outside them once ran vmap's grouped convolutions, labelled as asked)."""
    import typing

    from chillfl.config import RunConfig

    return typing.get_args(typing.get_type_hints(RunConfig)["batched_conv"])


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="op_count.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=2, help=">= 1")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--model", choices=["mcmahan_cnn", "mlp"], default="mcmahan_cnn", help="mcmahan_cnn (workload 1) or mlp (hidden 64: workloads 2-4)")
    p.add_argument("--batch-size", type=int, default=50, help=">= 1")
    p.add_argument("--batched-conv", choices=batched_conv_choices(), default="auto", help="the vmapped step's convolutions (LocalSpec.batched_conv)")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.clients < 1 or args.batch_size < 1:
        p.error(f"--clients and --batch-size must be >= 1 (got {args.clients} and {args.batch_size})")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error(f"--device cuda: torch {torch.__version__} sees no CUDA GPU on this machine")
    torch.set_num_threads(1)
    shape = (3, 32, 32)
    options = {"hidden": [64]} if args.model == "mlp" else None
    s = vectorized_step_ops(args.model, shape, clients=args.clients, device=args.device, model_options=options, batch_size=args.batch_size,
                            spec_options={"batched_conv": args.batched_conv})
    row = {"model": args.model, "batched_conv": args.batched_conv, "clients": s.clients, "batch_size": args.batch_size, "ops_per_vmapped_step": s.per_vmapped_step,
           "compute_ops_per_vmapped_step": s.compute_per_vmapped_step, "ops_per_client_step": s.per_client_step,
           "chunk_ops": s.ops, "chunk_steps": s.steps, "host_reads": s.host_reads}
    if args.json:
        print(json.dumps({**row, "top": s.top}))
        return 0
    print(json.dumps(row))
    for name, n in s.top[: args.top]:
        print(f"  {n:7.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

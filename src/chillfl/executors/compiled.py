"""``compile = true``: the vectorised executor's all-client step through ``torch.compile`` (issue 39).

What is compiled is the vmapped loss of a chunk's step of *every* client
at the full batch size (forward and, through AOTAutograd, backward); the
update stays the eager optimiser step. Steps of only some clients (a client
whose data ran out) and short last batches stay eager: their number of
clients and batch sizes differ from step to step (and from seed to seed),
and each new shape would be compiled again.

Choices
-------
* **Static shapes** (``dynamic=False``): one compiled graph per input shape,
  chosen by the shape alone. With dynamic shapes, the kernels a shape runs
  would depend on which shapes came first (torch marks a dimension dynamic
  when it first changes, and inductor tunes on the sizes it saw), so a
  resumed run, which sees its shapes in another order, could round
  differently. Static graphs keep resume bitwise.
* **A limit, then an error**: torch falls back to eager, silently, once one
  function has been compiled ``recompile_limit`` (8) times, which would
  again make a step's kernels depend on the order of shapes. Here the limit
  is :data:`COMPILE_LIMIT` and passing it is :class:`CompileFailed`.
* **Not bitwise equal to eager**: inductor fuses and reorders float
  arithmetic, so a compiled run is reproducible (same config and seed, the
  same bits, on one machine, torch build and thread count) but not equal to
  the eager run or to the other executors (benchmarks/compile_step.py
  measures both).
* **A failure is the compiler's**: a compiled step whose forward or
  backward fails is retried eagerly; if that works, the error is
  :class:`CompileFailed` (the run stops, naming ``compile``), never a
  silent fallback that would report eager speed as compiled. (The step's own
  error, e.g. one that cannot be vmapped, falls back as it does eagerly.)
* **The on-disk cache**: inductor keeps compiled kernels in
  ``TORCHINDUCTOR_CACHE_DIR`` (default ``/tmp/torchinductor_$USER``). With
  torch 2.13 its keys do not cover ``ATEN_CPU_CAPABILITY``: kernels built
  under one value and loaded under another crashed ("tuple args required",
  "double free or corruption"). Runs under different values need cache
  folders of their own (the tests use one per value).
"""

from __future__ import annotations

import types
from typing import Callable, Hashable, Sequence

import torch
from torch.func import vmap

from chillfl.errors import ConfigError

COMPILE_LIMIT = 64
"""Compiled step graphs one run's executor may hold (torch's ``recompile_limit`` for its step): see the module's Choices."""


class CompileFailed(ConfigError):
    """``torch.compile`` could not compile or run a step that runs eagerly: the run stops with one line naming
    ``compile`` (exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__("compile", f"{message}; set compile = false to train without it")


def _vmap_call(fn: Callable[..., tuple[torch.Tensor, ...]], *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return vmap(fn)(*args)


class CompiledSteps:
    """A compiled step: ``steps(fn, args)`` is ``vmap(fn)(*args)`` compiled (inductor, static shapes).

    torch keeps compiled graphs, and counts them against its limit, per code
    object. Each instance compiles its own copy of the wrapper's code, so its
    graphs and :data:`COMPILE_LIMIT` are its own. ``fn`` may be a new closure
    each call: torch checks its code and its closure's values with guards, so
    a step is compiled once per shape. Executors take theirs from
    :func:`compiled_steps`, one per step structure in a process.
    """

    def __init__(self) -> None:
        own = types.FunctionType(_vmap_call.__code__.replace(), _vmap_call.__globals__, _vmap_call.__name__)
        self._compiled = torch.compile(own, dynamic=False)
        self.takers = 0
        """Executors that took it (:func:`compiled_steps`)."""

    def __call__(self, fn: Callable[..., tuple[torch.Tensor, ...]], args: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """The compiled call (its backward runs when the caller differentiates its outputs). The limit is raised (and
        made an error) only around the call, so other compiled code keeps torch's; the patch is the calling thread's
        (torch keeps config patches per thread), so the executor's worker threads do not undo each other's."""
        with torch._dynamo.config.patch(recompile_limit=COMPILE_LIMIT, fail_on_recompile_limit_hit=True):
            return self._compiled(fn, *args)


_BY_STRUCTURE: dict[Hashable, CompiledSteps] = {}
"""The process's compiled steps by step structure (:func:`compiled_steps`): a cache, as torch's own compiled code is."""

REUSES = 16
"""Executors (runs) that share one :class:`CompiledSteps` before the next of their structure gets a new one."""


def compiled_steps(structure: Hashable) -> CompiledSteps:
    """The compiled step for a new executor whose step has this ``structure`` (model, parameter shapes, loss, settings).

    Shared by up to :data:`REUSES` executors of one structure in a process: a sweep's runs of one method and model
    (seeds, learning rates, variants) reuse what the first compiled, where a new :class:`CompiledSteps` would trace
    every step again and keep its own copies (measured on the tests' tiny MLP, 8 seeds in one process: 0.2 s a run
    after the first and no growth of memory, against 2-7 s and 10 MB a run). A run may still add graphs (a new chunk
    size), so after :data:`REUSES` executors the next gets a fresh one, well before :data:`COMPILE_LIMIT`, and the old
    one's graphs go with the executors that hold it. Runs of other methods or models never share one. Which graph a
    step runs is decided by torch's guards on its actual inputs.
    """
    steps = _BY_STRUCTURE.get(structure)
    if steps is None or steps.takers >= REUSES:
        steps = _BY_STRUCTURE[structure] = CompiledSteps()
    steps.takers += 1
    return steps


def compile_failure(exc: BaseException) -> CompileFailed:
    """The error of a compiled step (forward or backward) that runs eagerly: the compiler's, said in one line."""
    return CompileFailed(f"torch.compile failed on a step that runs eagerly ({type(exc).__name__}: {_headline(exc)})")


def _headline(exc: BaseException) -> str:
    """The error's first line, with the next one when it only introduces it (torch's "backend='inductor' raised:")."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return ""
    return f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


def check_toolchain(device: torch.device) -> None:
    """Refuse ``compile = true`` before anything is written where torch.compile cannot build kernels: inductor
    writes C++ for the CPU (a compiler on the PATH or in ``CXX``) and Triton kernels for a GPU."""
    if device.type == "cpu":
        from torch._inductor.cpp_builder import get_cpp_compiler

        try:
            get_cpp_compiler()
        except Exception as exc:  # noqa: BLE001 - torch raises its own error types for a missing or unusable compiler
            raise ConfigError("compile", f"torch.compile needs a C++ compiler on the CPU, and none was found ({type(exc).__name__}); install g++ or set CXX") from exc
    elif device.type == "cuda":
        from torch.utils._triton import has_triton

        if not has_triton():
            raise ConfigError("compile", "torch.compile needs Triton on a GPU, which is not installed; install torch's triton package")
    else:
        raise ConfigError("compile", f"torch.compile of the step is supported on cpu and cuda devices, not {device.type!r}")

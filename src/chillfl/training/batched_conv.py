"""``batched_conv``: how the vmapped step runs the clients' convolutions (the config's choice -> the step's mode).

* ``auto`` (default): a fixed rule, :func:`resolve_batched_conv`;
* ``grouped``: as vmap folds them, one grouped convolution in NCHW order;
* ``gemm``: a gather of the windows + one batched matrix product (:mod:`chillfl.training.conv_gemm`);
* ``nhwc``: one grouped convolution in NHWC order, the clients' channels interleaved (:mod:`chillfl.training.conv_nhwc`);
* ``loop``: one plain NHWC convolution per client, the clients folded into the batch (the same module).

One client's step (sequential training, the CPU's client-by-client path) always keeps its plain convolutions.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch

from chillfl.training.conv_gemm import GemmConvolutions
from chillfl.training.conv_nhwc import LoopConvolutions, NhwcConvolutions
from chillfl.training.schedule import Optimizer

MODES = {"gemm": GemmConvolutions, "nhwc": NhwcConvolutions, "loop": LoopConvolutions}
"""``batched_conv`` -> the TorchFunctionMode a vmapped step's forward runs under (``grouped``: none)."""


def batched_conv_mode(batched_conv: str, vmapped: bool) -> Any:
    """The mode of ``batched_conv`` for a vmapped step, else nothing (one client's step keeps cuDNN/oneDNN)."""
    mode = MODES.get(batched_conv) if vmapped else None
    return mode() if mode is not None else nullcontext()


def replayable_steps(optim: Optimizer, private: object | None) -> bool:
    """Whether a run's local steps read nothing that changes from step to step besides their batch, so that
    ``cuda_graphs`` can record one step and replay it: plain SGD at a constant local rate (Adam's bias correction and a
    schedule's rate are numbers of the step), without DP-SGD (its noise is drawn on the host, a new draw every step:
    a replay would repeat one). ``private``: the spec's DP-SGD step (``LocalSpec.private``), of which only whether
    there is one is read (typed ``object``: :mod:`chillfl.training.local` imports this module).

    One rule for both that ask: the vectorised executor, which records only such steps
    (:meth:`~chillfl.executors.vectorized.VectorizedExecutor.graphed`), and ``auto`` here, whose ``nhwc`` is fast only
    when replayed.
    """
    return optim.name == "sgd" and optim.step_schedule.name == "constant" and private is None


def resolve_batched_conv(batched_conv: str, precision: str, device: torch.device, cuda_graphs: bool, *,
                         optim: Optimizer, private: object | None) -> str:
    """The config's ``batched_conv`` -> the step's (``auto`` decided by a fixed rule, never a timing taken at run time).

    ``auto`` is ``nhwc`` on CUDA in bf16 or TF32 where the steps are recorded as CUDA graphs (``cuda_graphs`` and
    :func:`replayable_steps` of ``optim`` and ``private``), where it measured fastest:
    workload 1 on an H200 (2026-12-04, docs/gpu.md) took 0.459 s a round against 0.598 s grouped in bf16, and
    0.727 s against 0.783 s in TF32. Everywhere else it is ``grouped``: eagerly the same H200 ran one chunk of 50 of
    workload 1's clients slower with ``nhwc`` (9.6 ms a step against 8.0 ms in bf16, 12.2 against 10.0 in fp32:
    ``benchmarks/conv_layouts.py``; its Python autograd functions cost host time a replayed graph does not pay);
    in fp32 no other form was measured faster; and on the CPU the documented outputs are made with it (their bits
    stay as they were). So ``cuda_graphs = true`` with Adam, a step schedule or DP-SGD, whose steps run eagerly,
    keeps ``grouped`` (which also takes the second-order gradients that ``nhwc`` refuses).
    """
    if batched_conv != "auto":
        return batched_conv
    graphed = cuda_graphs and replayable_steps(optim, private)
    return "nhwc" if device.type == "cuda" and graphed and precision in ("bf16", "tf32") else "grouped"

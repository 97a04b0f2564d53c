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

MODES = {"gemm": GemmConvolutions, "nhwc": NhwcConvolutions, "loop": LoopConvolutions}
"""``batched_conv`` -> the TorchFunctionMode a vmapped step's forward runs under (``grouped``: none)."""


def batched_conv_mode(batched_conv: str, vmapped: bool) -> Any:
    """The mode of ``batched_conv`` for a vmapped step, else nothing (one client's step keeps cuDNN/oneDNN)."""
    mode = MODES.get(batched_conv) if vmapped else None
    return mode() if mode is not None else nullcontext()


def resolve_batched_conv(batched_conv: str, precision: str, device: torch.device, graphs: bool) -> str:
    """The config's ``batched_conv`` -> the step's (``auto`` decided by a fixed rule, never a timing taken at run time).

    ``auto`` is ``nhwc`` on CUDA with ``cuda_graphs`` (``graphs``) in bf16 or TF32, where it measured fastest:
    workload 1 on an H200 (2026-12-04, docs/gpu.md) took 0.459 s a round against 0.598 s grouped in bf16, and
    0.727 s against 0.783 s in TF32. Everywhere else it is ``grouped``: eagerly the same H200 ran one chunk of 50 of
    workload 1's clients slower with ``nhwc`` (9.6 ms a step against 8.0 ms in bf16, 12.2 against 10.0 in fp32:
    ``benchmarks/conv_layouts.py``; its Python autograd functions cost host time a replayed graph does not pay);
    in fp32 no other form was measured faster; and on the CPU the documented outputs are made with it (their bits
    stay as they were).
    """
    if batched_conv != "auto":
        return batched_conv
    return "nhwc" if device.type == "cuda" and graphs and precision in ("bf16", "tf32") else "grouped"

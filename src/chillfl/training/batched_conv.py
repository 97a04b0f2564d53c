"""``batched_conv``: how the vmapped step runs the clients' convolutions (the config's choice -> the step's mode).

* ``grouped`` (default): as vmap folds them, one grouped convolution in NCHW order;
* ``gemm``: a gather of the windows + one batched matrix product (:mod:`chillfl.training.conv_gemm`);
* ``nhwc``: one grouped convolution in NHWC order, the clients' channels interleaved (:mod:`chillfl.training.conv_nhwc`);
* ``loop``: one plain NHWC convolution per client, the clients folded into the batch (the same module).

One client's step (sequential training, the CPU's client-by-client path) always keeps its plain convolutions.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from chillfl.training.conv_gemm import GemmConvolutions
from chillfl.training.conv_nhwc import LoopConvolutions, NhwcConvolutions

MODES = {"gemm": GemmConvolutions, "nhwc": NhwcConvolutions, "loop": LoopConvolutions}
"""``batched_conv`` -> the TorchFunctionMode a vmapped step's forward runs under (``grouped``: none)."""


def batched_conv_mode(batched_conv: str, vmapped: bool) -> Any:
    """The mode of ``batched_conv`` for a vmapped step, else nothing (one client's step keeps cuDNN/oneDNN)."""
    mode = MODES.get(batched_conv) if vmapped else None
    return mode() if mode is not None else nullcontext()

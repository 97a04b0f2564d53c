"""Shape helpers shared by the model modules.

Models adapt to the dataset's input shape instead of hard-coding CIFAR's
32x32: spatial sizes are worked out with the conv/pool arithmetic below (to
reject inputs that are too small with a clear :class:`ConfigError`) and flatten
sizes are measured with one dummy forward pass at construction.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn

from chillfl.errors import ConfigError

Shape = tuple[int, ...]
ModuleT = TypeVar("ModuleT", bound=nn.Module)

MAX_WIDTH = 2**24
"""Widths, channels and hidden sizes above this are typos (the memory check catches the rest)."""
MAX_LAYERS = 1000
"""Layer counts above this are typos, and would take minutes even to build on the meta device."""
MAX_PADDING = 1024


def conv_out(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """Output length of a conv/pool window along one axis (0 = nothing left)."""
    if size < 1:
        return 0
    return max(0, (size + 2 * padding - kernel) // stride + 1)


def min_input_size(out_size: Callable[[int], int], limit: int = 4096) -> int:
    """Smallest side length for which ``out_size`` (a chain of :func:`conv_out`) is >= 1."""
    for size in range(1, limit + 1):
        if out_size(size) >= 1:
            return size
    raise ValueError("no input size up to the limit fits this architecture")


def require_image(name: str, input_shape: Shape, section: str) -> tuple[int, int, int]:
    """Check that the dataset gives (C, H, W) images; return them."""
    if len(input_shape) != 3 or min(input_shape) < 1:
        raise ConfigError(
            f"{section}.name",
            f"{name} needs image inputs of shape (C, H, W), dataset gives {tuple(input_shape)}",
        )
    c, h, w = input_shape
    return int(c), int(h), int(w)


def require_min_size(
    name: str, hw: tuple[int, int], out_size: Callable[[int], int], section: str
) -> None:
    """Raise ConfigError when an H x W input shrinks to nothing inside the network."""
    if out_size(hw[0]) >= 1 and out_size(hw[1]) >= 1:
        return
    need = min_input_size(out_size)
    raise ConfigError(
        f"{section}.name",
        f"{name} needs inputs of at least {need}x{need}, dataset gives {hw[0]}x{hw[1]}",
    )


def flat_features(features: nn.Module, input_shape: Shape) -> int:
    """Number of features ``features`` produces per sample, by one dummy forward.

    Runs in eval mode (so BatchNorm running statistics are not touched) and
    restores the module's previous mode.
    """
    first = next(itertools.chain(features.parameters(), features.buffers()), None)
    device = first.device if first is not None else torch.get_default_device()
    probe = features
    if device.type == "meta":
        # A meta-device build (the memory check, ``meta_size``): meta kernels of some ops (relu) go
        # through torch._refs, which imports torch._dynamo lazily; inside a ``torch.device("meta")``
        # context that import can fail half-way ("partially initialized module 'torch._dynamo'").
        # An uninitialised CPU copy of the features gives the same shape and touches no lazy import.
        # Not ``to_empty``: inside the meta context its ``empty_like`` runs torch._refs' Python
        # version, whose first call imports sympy (about 0.4 s of CPU a process, for a shape).
        probe = copy.deepcopy(features)._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device="cpu"))
        device = torch.device("cpu")
    was_training = probe.training
    probe.eval()
    try:
        with torch.no_grad():
            out = probe(torch.zeros(1, *input_shape, device=device))
    finally:
        probe.train(was_training)
    return int(out.flatten(1).shape[1])


def variance_buffers(model: nn.Module) -> frozenset[str]:
    """State-dict names of the model's running variances: every norm layer's ``running_var`` (BatchNorm, InstanceNorm
    with ``track_running_stats``), found by the modules that keep one, whatever the model names them.

    Why: a variance below 0 makes the layer's output NaN (sqrt of a negative), so what writes these entries from
    noised values (DP noise on the global model) keeps them at 0 or above."""
    return frozenset(f"{name}.running_var" if name else "running_var" for name, module in model.named_modules()
                     if isinstance(module, nn.modules.batchnorm._NormBase) and module.running_var is not None)


def torchvision_conv_init(model: ModuleT) -> ModuleT:
    """Every conv weight from ``kaiming_normal_(mode="fan_out", nonlinearity="relu")``, as torchvision's ResNet does.

    PyTorch's own ``Conv2d`` init (uniform, 1/sqrt(fan_in) bound) is about 2.5x narrower on a 3x3 64-channel
    conv (std 0.024 against 0.059); norms and linear layers keep their defaults, as in torchvision.
    """
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    return model

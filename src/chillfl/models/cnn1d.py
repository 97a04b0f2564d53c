"""FLex&Chill's 1-D CNN for human activity recognition (flexchill.txt, Table 9).

Four blocks Conv1d -> BatchNorm1d -> ReLU (kernels 7, 5, 5, 3 with "same"
padding; widths 16, 32, 64, 128), MaxPool1d(2) after the first three,
AdaptiveAvgPool1d(1) after the last, then Linear(128, classes).

Choices
-------
* The table's first layer is ``Conv1d(1, 16, ...)``: a single-channel
  sequence such as UCI-HAR's 561 features. We take the input channels from
  the dataset instead: ``(C, L)`` inputs use C channels (e.g. 9 raw inertial
  signals), and ``(L,)`` feature vectors are read as one channel.

Checked against: FLex&Chill Table 9 (kernels, paddings, widths, BN, pools,
``Linear(128, 6)``); 38,982 parameters on (561,) inputs with 6 classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from chillfl.errors import ConfigError
from chillfl.models.common import Shape, conv_out, min_input_size

BLOCKS = ((16, 7), (32, 5), (64, 5), (128, 3))  # (out channels, kernel); padding = kernel // 2


class HARCNN1d(nn.Module):
    """Table 9 1-D CNN; accepts (B, C, L) or, when built for (L,) inputs, (B, L)."""

    def __init__(self, in_channels: int, num_classes: int, add_channel_dim: bool) -> None:
        super().__init__()
        self.add_channel_dim = add_channel_dim  # fixed at construction: no data-dependent branching
        layers: list[nn.Module] = []
        channels = in_channels
        for i, (out, kernel) in enumerate(BLOCKS):
            layers += [nn.Conv1d(channels, out, kernel, padding=kernel // 2), nn.BatchNorm1d(out), nn.ReLU()]
            layers.append(nn.MaxPool1d(2) if i < len(BLOCKS) - 1 else nn.AdaptiveAvgPool1d(1))
            channels = out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(channels, num_classes)

    def head_name(self) -> str:
        """The classifier head (:class:`~chillfl.models.parts.DeclaresHead`)."""
        return "head"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.add_channel_dim:
            x = x.unsqueeze(1)
        return self.head(self.features(x).flatten(1))


@dataclass(frozen=True)
class HARCNN1dOptions:
    """The HAR 1-D CNN has no options (FLex&Chill Table 9 fixes every layer)."""


def _length_out(size: int) -> int:
    for _ in range(len(BLOCKS) - 1):
        size = conv_out(size, 2, stride=2)
    return size


def build_har_cnn1d(input_shape: Shape, num_classes: int, options: HARCNN1dOptions, section: str) -> HARCNN1d:
    """Build for (C, L) sequences or (L,) feature vectors."""
    if len(input_shape) not in (1, 2) or min(input_shape) < 1:
        raise ConfigError(
            f"{section}.name",
            f"har_cnn1d needs inputs of shape (C, L) or (L,), dataset gives {tuple(input_shape)}",
        )
    length = input_shape[-1]
    if _length_out(length) < 1:
        need = min_input_size(_length_out)
        raise ConfigError(f"{section}.name", f"har_cnn1d needs inputs of length at least {need}, dataset gives {length}")
    in_channels = input_shape[0] if len(input_shape) == 2 else 1
    return HARCNN1d(in_channels, num_classes, add_channel_dim=len(input_shape) == 1)

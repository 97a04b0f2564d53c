"""AlexNet for small images, as used by PA3Fed for CIFAR-10 and Fashion-MNIST.

PA3Fed (pa3fed.txt, Sec. "Experiments") trains "AlexNet (Krizhevsky, Sutskever
and Hinton 2012)" on CIFAR-10 and FMNIST but gives no layer table. We keep
AlexNet's shape -- five convs with widths 64, 192, 384, 256, 256, ReLU, three
max-pools, then Dropout -> FC -> ReLU -> Dropout -> FC -> ReLU -> FC -- and
shrink the receptive fields to small inputs:

* ``cifar`` (3x32x32): first conv 3x3 stride 2, then max-pools after conv 1,
  2 and 5: 32 -> 16 -> 8 -> 4 -> 2, flatten 256*2*2 = 1024.
* ``mnist`` (1x28x28): first conv 3x3 stride 1: 28 -> 14 -> 7 -> 3, flatten
  256*3*3 = 2304.

All other convs are 3x3 with padding 1; each max-pool is 2x2.

Choices
-------
* ``variant = "auto"`` picks ``cifar`` when both sides are >= 32 pixels and
  ``mnist`` otherwise (so 28x28 and 8x8 inputs keep enough resolution).
* ``hidden`` (default 4096, AlexNet's width) sets both FC widths; at 3x32x32
  the default has about 23.3M parameters, so CPU-scale configs may lower it.

Checked against: PA3Fed's text (no layer table, no public code found); the
``cifar`` variant's convs, pools and FC widths are those of the small-image
AlexNet in FL code bases (e.g. FedHF's ``AlexNetCIFAR10``: conv 3x3/2 to 64,
pools after convs 1, 2 and 5, FC 1024 -> 4096 -> 4096 -> C, whose dropouts are
commented out; ``dropout = 0`` gives that).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from chillfl.models.common import (
    MAX_WIDTH,
    Shape,
    conv_out,
    flat_features,
    require_image,
    require_min_size,
)
from chillfl.options import require, require_range

WIDTHS = (64, 192, 384, 256, 256)
POOL_AFTER = (0, 1, 4)  # indices of the convs followed by MaxPool2d(2)
CIFAR_MIN_SIDE = 32


class AlexNet(nn.Module):
    """Five-conv, three-FC AlexNet; ``first_stride`` is 2 for CIFAR, 1 for MNIST."""

    def __init__(self, input_shape: Shape, num_classes: int, first_stride: int, hidden: int, dropout: float) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = input_shape[0]
        for i, width in enumerate(WIDTHS):
            stride = first_stride if i == 0 else 1
            layers += [nn.Conv2d(channels, width, 3, stride=stride, padding=1), nn.ReLU()]
            if i in POOL_AFTER:
                layers.append(nn.MaxPool2d(2))
            channels = width
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Dropout(dropout),
            nn.Linear(flat_features(self.features, input_shape), hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def head_name(self) -> str:
        """The classifier head (:class:`~chillfl.models.parts.DeclaresHead`)."""
        return f"classifier.{len(self.classifier) - 1}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).flatten(1))


@dataclass(frozen=True)
class AlexNetOptions:
    """``variant``: auto | cifar | mnist; ``hidden``: FC width; ``dropout``: rate before each hidden FC."""

    variant: Literal["auto", "cifar", "mnist"] = "auto"
    hidden: int = 4096
    dropout: float = 0.5

    def validate(self, section: str) -> None:
        require_range(self.hidden, 1, MAX_WIDTH, f"{section}.hidden")
        require(0.0 <= self.dropout < 1.0, f"{section}.dropout", f"must be in [0, 1), got {self.dropout}")


def _spatial_out(first_stride: int):
    def out(size: int) -> int:
        for i in range(len(WIDTHS)):
            size = conv_out(size, 3, stride=first_stride if i == 0 else 1, padding=1)
            if i in POOL_AFTER:
                size = conv_out(size, 2, stride=2)
        return size

    return out


def resolve_variant(variant: str, hw: tuple[int, int]) -> str:
    """``auto`` -> ``cifar`` for inputs of at least 32x32, else ``mnist``."""
    if variant != "auto":
        return variant
    return "cifar" if min(hw) >= CIFAR_MIN_SIDE else "mnist"


def build_alexnet(input_shape: Shape, num_classes: int, options: AlexNetOptions, section: str) -> AlexNet:
    """PA3Fed's AlexNet in the variant that fits the input size."""
    _, h, w = require_image("alexnet", input_shape, section)
    first_stride = 2 if resolve_variant(options.variant, (h, w)) == "cifar" else 1
    require_min_size("alexnet", (h, w), _spatial_out(first_stride), section)
    return AlexNet(input_shape, num_classes, first_stride, options.hidden, options.dropout)

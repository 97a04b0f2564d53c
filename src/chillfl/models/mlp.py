"""Fully connected networks: FLex&Chill's FEMNIST-DNN and a generic MLP.

Inputs of any shape are flattened, so the same model serves (D,) feature
vectors and (C, H, W) images.

Choices
-------
* ``femnist_dnn`` follows FLex&Chill Table 1 (flexchill.txt):
  Linear(in, 512) ReLU, Linear(512, 256) ReLU, Linear(256, 128) ReLU,
  Linear(128, classes). The table's last row reads ``Linear(256, 62)``, which
  cannot follow a 128-wide layer; we take it as a typo for 128 (the table's
  "four linear layers" then chain). The input width comes from the dataset
  (784 for 28x28 FEMNIST) and the output width from its number of classes.
  The authors' public code (temperaturescaling/temperature-scaling,
  ``models/MLP.py``) has a smaller 784-256-256-C MLP; we follow the paper's
  table, which is what Table 4 reports.

Checked against: FLex&Chill Table 1 (574,142 parameters at 784 inputs and 62
classes) and the authors' ``models/MLP.py`` (see above).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import prod

import torch
import torch.nn.functional as F
from torch import nn

from chillfl.errors import ConfigError
from chillfl.models.common import MAX_LAYERS, MAX_WIDTH, Shape
from chillfl.options import require

FEMNIST_HIDDEN = (512, 256, 128)


class MLP(nn.Module):
    """Flatten, then Linear+ReLU for every hidden width, then the classifier."""

    def __init__(self, in_features: int, hidden: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        widths = (in_features, *hidden)
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(widths))
        self.head = nn.Linear(widths[-1], num_classes)

    def head_name(self) -> str:
        """The classifier head (:class:`~chillfl.models.parts.DeclaresHead`)."""
        return "head"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        for layer in self.hidden:
            x = F.relu(layer(x))
        return self.head(x)


@dataclass(frozen=True)
class MLPOptions:
    """``hidden``: widths of the hidden layers (empty = softmax regression)."""

    hidden: tuple[int, ...] = (64,)

    def validate(self, section: str) -> None:
        require(len(self.hidden) <= MAX_LAYERS, f"{section}.hidden", f"at most {MAX_LAYERS} hidden layers, got {len(self.hidden)}")
        require(
            all(1 <= h <= MAX_WIDTH for h in self.hidden),
            f"{section}.hidden",
            f"every width must be in [1, {MAX_WIDTH}], got {list(self.hidden)[:8]}",
        )


@dataclass(frozen=True)
class FemnistDNNOptions:
    """FEMNIST-DNN has no options (FLex&Chill Table 1 fixes every width)."""


def _in_features(name: str, input_shape: Shape, section: str) -> int:
    if len(input_shape) == 0 or min(input_shape) < 1:
        raise ConfigError(f"{section}.name", f"{name} needs a non-empty input shape, dataset gives {tuple(input_shape)}")
    return prod(input_shape)


def build_mlp(input_shape: Shape, num_classes: int, options: MLPOptions, section: str) -> MLP:
    """Generic MLP, e.g. 3072 -> 64 -> 10 for the benchmark on CIFAR-sized inputs."""
    return MLP(_in_features("mlp", input_shape, section), tuple(options.hidden), num_classes)


def build_femnist_dnn(
    input_shape: Shape, num_classes: int, options: FemnistDNNOptions, section: str
) -> MLP:
    """FLex&Chill Table 1: in -> 512 -> 256 -> 128 -> classes."""
    return MLP(_in_features("femnist_dnn", input_shape, section), FEMNIST_HIDDEN, num_classes)

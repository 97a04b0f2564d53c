"""ResNet-18 (He et al. 2016): BasicBlocks [2, 2, 2, 2], widths 64-512.

Used by FLex&Chill (CIFAR100-ResNet18, Sec. 4.1: torchvision's ResNet-18 with
a new head) and PA3Fed (CIFAR-100).

Choices
-------
* ``stem``: ``imagenet`` is torchvision's 7x7/2 conv + 3x3/2 max-pool, which
  FLex&Chill used as is; on 32x32 images it leaves 1x1 maps in the last
  stage, so ``auto`` picks the ``cifar`` stem (3x3/1 conv, no max-pool) for
  inputs of at most 64 pixels a side and ``imagenet`` above. At 3x32x32 and
  10 classes the cifar stem has 11,173,962 parameters, the imagenet stem
  11,181,642.
* ``norm``: ``batch`` (the original), ``group`` (GroupNorm with
  ``norm_groups`` groups, often preferred in FL because it keeps no running
  statistics) or ``none``. Convs have no bias, as in the original.
* ``init``: ``pytorch`` (default: each layer's own initialisation) or
  ``torchvision`` (convs from ``kaiming_normal_``, fan_out, as torchvision's
  ``resnet18`` that FLex&Chill used; norms and the head as PyTorch's).
* PA3Fed gives no stem for its CIFAR-100 ResNet-18, so its configs keep
  ``auto`` (cifar stem at 32x32) and the default init; FLex&Chill's config
  sets ``imagenet`` and ``init = "torchvision"``, as the authors'
  ``models/ResNet18.py`` builds torchvision's ``resnet18()``.

Checked against: torchvision's ``resnet18`` (the imagenet stem: 11,227,812
parameters at 100 classes, torchvision's 11,689,512 less its 1000-way head plus
a 100-way one) and the FLex&Chill authors' ``models/ResNet18.py``
(torchvision's model, 7x7/2 stem, head ``Linear(512, n_class)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from chillfl.models.common import Shape, require_image, torchvision_conv_init
from chillfl.options import require, warn_unread

WIDTHS = (64, 128, 256, 512)
BLOCKS_PER_STAGE = (2, 2, 2, 2)
CIFAR_STEM_MAX_SIDE = 64

NormName = Literal["batch", "group", "none"]


def make_norm(kind: str, channels: int, groups: int) -> nn.Module:
    """The normalisation layer after every conv."""
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(groups, channels)
    return nn.Identity()


class BasicBlock(nn.Module):
    """Two 3x3 convs with a residual connection (1x1 projection when shapes change)."""

    def __init__(self, cin: int, cout: int, stride: int, norm: str, groups: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.norm1 = make_norm(norm, cout, groups)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.norm2 = make_norm(norm, cout, groups)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), make_norm(norm, cout, groups)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18 with a cifar or imagenet stem and a choice of normalisation."""

    def __init__(self, in_channels: int, num_classes: int, stem: str, norm: str, groups: int) -> None:
        super().__init__()
        if stem == "cifar":
            self.stem = nn.Sequential(
                nn.Conv2d(in_channels, WIDTHS[0], 3, padding=1, bias=False),
                make_norm(norm, WIDTHS[0], groups),
                nn.ReLU(),
            )
        else:
            self.stem = nn.Sequential(
                nn.Conv2d(in_channels, WIDTHS[0], 7, stride=2, padding=3, bias=False),
                make_norm(norm, WIDTHS[0], groups),
                nn.ReLU(),
                nn.MaxPool2d(3, stride=2, padding=1),
            )
        blocks: list[nn.Module] = []
        cin = WIDTHS[0]
        for stage, (width, count) in enumerate(zip(WIDTHS, BLOCKS_PER_STAGE)):
            for i in range(count):
                stride = 2 if stage > 0 and i == 0 else 1
                blocks.append(BasicBlock(cin, width, stride, norm, groups))
                cin = width
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(WIDTHS[-1], num_classes)

    def head_name(self) -> str:
        """The classifier head (:class:`~chillfl.models.parts.DeclaresHead`)."""
        return "fc"

    def batch_norm_setting(self) -> tuple[str, str]:
        """``norm = "batch"`` (:class:`~chillfl.models.parts.SwitchesBatchNorm`)."""
        return "norm", '"batch"'

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.blocks(self.stem(x))).flatten(1))


@dataclass(frozen=True)
class ResNet18Options:
    """``stem``: auto | cifar | imagenet; ``norm``: batch | group | none; ``norm_groups`` for group norm; ``init``: pytorch | torchvision."""

    stem: Literal["auto", "cifar", "imagenet"] = "auto"
    norm: NormName = "batch"
    norm_groups: int = 2
    init: Literal["pytorch", "torchvision"] = "pytorch"

    def validate(self, section: str) -> None:
        """``norm_groups`` is group norm's: with another ``norm`` it is not read, so it is noted, not refused (a grid over
        ``norm`` sets it for its group-norm variant only), as the project's other unread options are."""
        if self.norm != "group":
            warn_unread(self, ("norm_groups",), section, f'with {section}.norm = "{self.norm}" (norm_groups is group norm\'s)')
            return
        require(
            self.norm_groups >= 1 and WIDTHS[0] % self.norm_groups == 0,
            f"{section}.norm_groups",
            f"must divide {WIDTHS[0]} (e.g. 1, 2, 4, 8, 16, 32, 64), got {self.norm_groups}",
        )


def resolve_stem(stem: str, hw: tuple[int, int]) -> str:
    """``auto`` -> ``cifar`` up to 64 pixels a side, else ``imagenet``."""
    if stem != "auto":
        return stem
    return "cifar" if max(hw) <= CIFAR_STEM_MAX_SIDE else "imagenet"


def build_resnet18(input_shape: Shape, num_classes: int, options: ResNet18Options, section: str) -> ResNet18:
    """ResNet-18; any input of at least 1x1 fits (stride-2 layers round up)."""
    c, h, w = require_image("resnet18", input_shape, section)
    stem = resolve_stem(options.stem, (h, w))
    model = ResNet18(c, num_classes, stem, options.norm, options.norm_groups)
    return torchvision_conv_init(model) if options.init == "torchvision" else model

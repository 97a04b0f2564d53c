"""ResNets whose final stage can also run at a reduced width: ResNet-20/32 (CIFAR) and FedChill's baseline ResNet-18.

* ``resnet20`` / ``resnet32`` (He et al. 2016, Sec. 4.2): a 3x3 conv with 16
  channels, three stages of n = 3 / 5 BasicBlocks with 16, 32, 64 channels
  (stride 2 at the start of stages 2 and 3), global average pooling, one
  linear layer. Shortcuts are the paper's option A (identity; a stride-2
  subsample zero-padded to the wider channel count), so the only parameters
  are convs, batch norms and the head: 269,722 (ResNet-20) and 464,154
  (ResNet-32) at 10 classes, the "0.27M" and "0.46M" of the paper and of
  SCARLET's Table III models (CIFAR-10: ResNet-20, CIFAR-100: ResNet-32).
  ``init``: ``torchvision`` (default: every conv from ``kaiming_normal_``,
  fan_out, the head as PyTorch's ``Linear``) or ``kaiming_fan_in`` (every conv
  **and** linear weight from ``kaiming_normal_`` at its defaults: fan_in, gain
  sqrt(2), std sqrt(2 / fan_in); biases as PyTorch's), which is Idelbayev's
  ``resnet.py`` that SCARLET's code uses (``src/model/resnet.py``,
  ``_weights_init``, ``reproducibility`` branch), so SCARLET's CIFAR-10
  configs set it. The two differ most at the stem and the head: ResNet-20's
  3->16 conv has std sqrt(2/27) = 0.272 against sqrt(2/144) = 0.118, its
  64->10 head 0.177 against PyTorch's uniform bound 1/8 (std 0.072).
* ``resnet18_fedchill``: the ResNet-18 of FedChill's Table 1 baselines, which
  is FedHKD's (Chen et al. 2023, official code: torchvision's ``resnet18``
  with ``num_classes = 64`` as the feature extractor, then ``Linear(64, C)``).
  Its 7x7/2 stem and max-pool, projection shortcuts (1x1 conv + BN), a
  512 -> ``code_length`` (64) linear layer and the classifier make 11,209,994
  parameters at 10 classes and 11,215,844 at 100: Table 1 lists 11.209 and
  11.215 (M, truncated). Its representation (the classifier's input) is the
  64-d code, with no non-linearity after it, as in that code. ``init =
  "torchvision"`` draws its convs as torchvision's ``resnet18`` does (FedHKD's
  model is one); the default keeps PyTorch's per-layer initialisation.

Checked against: He et al. (2016) Sec. 4.2 (0.27M / 0.46M), SCARLET Table III and
its authors' ``src/model/resnet.py`` (layout, option-A padding, ``kaiming_fan_in``),
FedChill Table 1's 11.209M / 11.215M.

Every model names its last stage in ``slim_stage``; :meth:`Stage.forward`
with ``width < 1`` runs that stage as a slimmable network (Yu et al. 2019)
does, which FedAlign's Lipschitz term needs (:mod:`chillfl.training.fedalign`):
every conv keeps its first ``make_divisible(c * width)`` input and output
channels, batch norm normalises with the batch's own statistics and the
matching slice of its affine parameters, and running statistics are left
alone (FedAlign's ``USBatchNorm2d`` below full width).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from chillfl.models.common import Shape, require_image, torchvision_conv_init
from chillfl.options import require

CIFAR_WIDTHS = (16, 32, 64)
IMAGENET_WIDTHS = (64, 128, 256, 512)


def make_divisible(value: float, divisor: int = 8, min_value: int = 1) -> int:
    """Channels of a width-reduced layer: ``value`` rounded to a multiple of ``divisor`` (never 10% below it).

    The slimmable-network rounding FedAlign's official code uses (from TF-slim's MobileNet).
    """
    rounded = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * value:
        rounded += divisor
    return rounded


def _slim_batch_norm(x: torch.Tensor, bn: nn.BatchNorm2d, channels: int) -> torch.Tensor:
    """Batch norm of a width-reduced map: batch statistics, the first ``channels`` affine parameters, no running update."""
    weight = bn.weight[:channels] if bn.weight is not None else None
    bias = bn.bias[:channels] if bn.bias is not None else None
    return F.batch_norm(x, None, None, weight, bias, True, 0.0, bn.eps)


def _slim_conv(x: torch.Tensor, conv: nn.Conv2d, cout: int) -> torch.Tensor:
    """``conv`` on its first ``x.shape[1]`` input and ``cout`` output channels."""
    weight = conv.weight[:cout, : x.shape[1]]
    return F.conv2d(x, weight, None, conv.stride, conv.padding)


class BasicBlock(nn.Module):
    """Two 3x3 conv + BN layers and a shortcut: ``pad`` (option A) or ``conv`` (1x1 conv + BN, option B)."""

    def __init__(self, cin: int, cout: int, stride: int, shortcut: str) -> None:
        super().__init__()
        self.cin, self.cout, self.stride = cin, cout, stride
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.pad = shortcut == "pad" and (stride != 1 or cin != cout)
        self.downsample: nn.Sequential | None = None
        if shortcut == "conv" and (stride != 1 or cin != cout):
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def _pad_shortcut(self, x: torch.Tensor, cout: int) -> torch.Tensor:
        """Option A: subsample by the stride, zero-pad the channels evenly on both sides."""
        x = x[:, :, :: self.stride, :: self.stride]
        extra = cout - x.shape[1]
        return F.pad(x, (0, 0, 0, 0, extra // 2, extra - extra // 2))

    def forward(self, x: torch.Tensor, width: float = 1.0) -> torch.Tensor:
        if width >= 1.0:
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            identity = self.downsample(x) if self.downsample is not None else (self._pad_shortcut(x, self.cout) if self.pad else x)
            return F.relu(out + identity)
        cout = make_divisible(self.cout * width)
        out = F.relu(_slim_batch_norm(_slim_conv(x, self.conv1, cout), self.bn1, cout))
        out = _slim_batch_norm(_slim_conv(out, self.conv2, cout), self.bn2, cout)
        if self.downsample is not None:
            conv, bn = self.downsample[0], self.downsample[1]
            assert isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d)
            identity = _slim_batch_norm(_slim_conv(x, conv, cout), bn, cout)
        elif self.pad:
            identity = self._pad_shortcut(x, cout)
        else:
            identity = x
        return F.relu(out + identity)


class Stage(nn.Module):
    """A sequence of blocks that runs at full width or, for FedAlign, at ``width`` < 1."""

    def __init__(self, blocks: list[BasicBlock]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.in_channels = blocks[0].cin

    def forward(self, x: torch.Tensor, width: float = 1.0) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, width)
        return x

    def input_channels(self, width: float) -> int:
        """Channels of the stage input that the width-reduced stage reads (the first ones)."""
        return make_divisible(self.in_channels * width)


def _stages(cin: int, widths: tuple[int, ...], count: int, shortcut: str) -> list[Stage]:
    stages = []
    for index, width in enumerate(widths):
        blocks = []
        for i in range(count):
            blocks.append(BasicBlock(cin, width, 2 if index > 0 and i == 0 else 1, shortcut))
            cin = width
        stages.append(Stage(blocks))
    return stages


class CifarResNet(nn.Module):
    """ResNet-(6n+2) for small images: 16-32-64 channels, option-A shortcuts."""

    slim_stage = "layer3"

    def __init__(self, in_channels: int, num_classes: int, blocks_per_stage: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, CIFAR_WIDTHS[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(CIFAR_WIDTHS[0])
        self.layer1, self.layer2, self.layer3 = _stages(CIFAR_WIDTHS[0], CIFAR_WIDTHS, blocks_per_stage, "pad")
        self.fc = nn.Linear(CIFAR_WIDTHS[-1], num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def head_name(self) -> str:
        """The classifier head (:class:`~chillfl.models.parts.DeclaresHead`)."""
        return "fc"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(x.mean(dim=(2, 3)))


class FedChillResNet18(nn.Module):
    """FedHKD's ResNet-18 (FedChill's Table 1 baselines): torchvision's layout, a 512 -> code linear, a classifier."""

    slim_stage = "layer4"

    def __init__(self, in_channels: int, num_classes: int, code_length: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, IMAGENET_WIDTHS[0], 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(IMAGENET_WIDTHS[0])
        self.layer1, self.layer2, self.layer3, self.layer4 = _stages(IMAGENET_WIDTHS[0], IMAGENET_WIDTHS, 2, "conv")
        self.code = nn.Linear(IMAGENET_WIDTHS[-1], code_length)
        self.classifier = nn.Linear(code_length, num_classes)

    def head_name(self) -> str:
        """The classifier head (:class:`~chillfl.models.parts.DeclaresHead`)."""
        return "classifier"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, stride=2, padding=1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.classifier(self.code(x.mean(dim=(2, 3))))


def kaiming_fan_in_init(model: CifarResNet) -> CifarResNet:
    """Every conv and linear weight from ``kaiming_normal_`` at its defaults (fan_in, gain sqrt(2)), as SCARLET's code.

    Its ResNet (Idelbayev's ``resnet.py``) applies ``init.kaiming_normal_(m.weight)`` to every ``Conv2d`` and ``Linear``;
    the default fan_out draw gives a different std wherever fan_in != fan_out (the stem, stage transitions, the head).
    """
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(m.weight)
    return model


@dataclass(frozen=True)
class CifarResNetOptions:
    """``init``: torchvision (convs kaiming_normal_ fan_out) | kaiming_fan_in (convs and head fan_in, SCARLET's code)."""

    init: Literal["torchvision", "kaiming_fan_in"] = "torchvision"


@dataclass(frozen=True)
class FedChillResNet18Options:
    """``code_length``: width of the representation before the classifier (64 in FedHKD's code); ``init``: pytorch | torchvision."""

    code_length: int = 64
    init: Literal["pytorch", "torchvision"] = "pytorch"

    def validate(self, section: str) -> None:
        require(1 <= self.code_length <= 65536, f"{section}.code_length", f"must be in [1, 65536], got {self.code_length}")


def build_resnet20(input_shape: Shape, num_classes: int, options: CifarResNetOptions, section: str) -> CifarResNet:
    c, _, _ = require_image("resnet20", input_shape, section)
    model = CifarResNet(c, num_classes, 3)
    return kaiming_fan_in_init(model) if options.init == "kaiming_fan_in" else model


def build_resnet32(input_shape: Shape, num_classes: int, options: CifarResNetOptions, section: str) -> CifarResNet:
    c, _, _ = require_image("resnet32", input_shape, section)
    model = CifarResNet(c, num_classes, 5)
    return kaiming_fan_in_init(model) if options.init == "kaiming_fan_in" else model


def build_resnet18_fedchill(input_shape: Shape, num_classes: int, options: FedChillResNet18Options, section: str) -> FedChillResNet18:
    c, _, _ = require_image("resnet18_fedchill", input_shape, section)
    model = FedChillResNet18(c, num_classes, options.code_length)
    return torchvision_conv_init(model) if options.init == "torchvision" else model

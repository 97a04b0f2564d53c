"""Two-conv CNNs: FLex&Chill's CIFAR10-CNN and McMahan et al.'s CNN.

Both are ``conv5x5 -> ReLU -> maxpool2 -> conv5x5 -> ReLU -> maxpool2 -> FC ->
ReLU -> FC``, only the widths differ:

* ``flexchill_cnn``: FLex&Chill Table 2 (flexchill.txt): channels 10, 20,
  hidden 256 (``Linear(500, 256)`` at 3x32x32). Option ``batch_norm`` adds a
  BatchNorm2d after each conv: the variant FLex&Chill Sec. 4.7 uses for FedBN.
* ``mcmahan_cnn``: McMahan et al. (2017), "Communication-efficient learning of
  deep networks from decentralized data", CNN: channels 32, 64, hidden 512.
  At 3x32x32 with no padding the flatten size is 64*5*5 = 1600 (the CIFAR
  variant common in FL benchmarks); on 1x28x28 the default is "same" padding
  (2), the paper's MNIST CNN with 1,663,370 parameters.

Checked against: FLex&Chill Table 2 and the authors' code
(temperaturescaling/temperature-scaling ``models/CNN.py``: same layers, pool
before ReLU, its unused ``Dropout2d`` left out; 136,606 parameters at 3x32x32);
McMahan et al. (2017) Sec. 3 "1,663,370 total parameters" and the TFF/FedML
``create_original_fedavg_cnn_model`` / ``CNN_OriginalFedAvg`` (TF "same" padding).

Choices
-------
* ``padding`` (None = automatic), ``flexchill_cnn``: FLex&Chill uses no
  padding on 32x32; with no padding the layout needs inputs of at least 16x16,
  so smaller inputs (8x8 sklearn digits) get padding 2, i.e. "same" padding for
  a 5x5 kernel (sizes then go H -> H/2 -> H/4, needing at least 4x4).
* ``padding`` (None = automatic), ``mcmahan_cnn``: no padding from 32 pixels a
  side (the CIFAR variant, 878,538 parameters at 3x32x32), "same" padding (2)
  below, so that 28x28 MNIST/FEMNIST gets McMahan's own MNIST CNN: its
  1,663,370 parameters only come out with "same" padding (7*7*64 = 3136
  features into the 512-unit layer); without padding it would have 582,026.
  Set ``padding`` explicitly to override.
* ``batch_norm``: the FedBN variant is not spelled out in FLex&Chill; we keep the
  conv biases and put BatchNorm between each conv and its ReLU.
* Each block pools before its ReLU: ``relu(maxpool(z)) == maxpool(relu(z))``
  exactly (ReLU is monotone), and the gradients are the same bits too (both
  route a window's gradient to its maximum when it is positive, else nowhere),
  but the ReLU and its backward then touch a quarter of the elements: about
  15 % of a McMahan-CNN step on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from chillfl.models.common import (
    MAX_PADDING,
    Shape,
    conv_out,
    flat_features,
    require_image,
    require_min_size,
)
from chillfl.options import require_range

KERNEL = 5
SAME_PADDING = KERNEL // 2
MCMAHAN_VALID_MIN_SIDE = 32  # mcmahan_cnn: no padding from here up (CIFAR), "same" below (28x28 MNIST)


class TwoConvCNN(nn.Module):
    """conv-pool-ReLU x2 (= conv-ReLU-pool, see Choices), then a ReLU hidden layer and the classifier."""

    def __init__(
        self,
        input_shape: Shape,
        num_classes: int,
        channels: tuple[int, int],
        hidden: int,
        padding: int,
        batch_norm: bool = False,
        batch_norm_option: str | None = None,
    ) -> None:
        super().__init__()
        self.batch_norm_option = batch_norm_option  # the builder's option that adds the BN (mcmahan_cnn has none)
        c1, c2 = channels
        layers: list[nn.Module] = []
        for cin, cout in ((input_shape[0], c1), (c1, c2)):
            layers.append(nn.Conv2d(cin, cout, KERNEL, padding=padding))
            if batch_norm:
                layers.append(nn.BatchNorm2d(cout))
            layers += [nn.MaxPool2d(2), nn.ReLU()]  # = ReLU then pool (they commute), on 4x fewer elements
        self.features = nn.Sequential(*layers)
        self.fc1 = nn.Linear(flat_features(self.features, input_shape), hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def head_name(self) -> str:
        """The classifier head (:class:`~chillfl.models.parts.DeclaresHead`)."""
        return "fc2"

    def batch_norm_setting(self) -> tuple[str, str] | None:
        """``batch_norm = true`` where the builder has that option (:class:`~chillfl.models.parts.SwitchesBatchNorm`)."""
        return None if self.batch_norm_option is None else (self.batch_norm_option, "true")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x).flatten(1)
        return self.fc2(F.relu(self.fc1(x)))


def _spatial_out(padding: int):
    def out(size: int) -> int:
        for _ in range(2):
            size = conv_out(conv_out(size, KERNEL, padding=padding), 2, stride=2)
        return size

    return out


def resolve_padding(padding: int | None, hw: tuple[int, int]) -> int:
    """``flexchill_cnn``'s padding: 0 (the paper's layout) when it fits, else 'same' (2)."""
    if padding is not None:
        return padding
    fits = _spatial_out(0)
    return 0 if fits(hw[0]) >= 1 and fits(hw[1]) >= 1 else SAME_PADDING


def resolve_mcmahan_padding(padding: int | None, hw: tuple[int, int]) -> int:
    """``mcmahan_cnn``'s padding: 0 (the CIFAR variant) from 32 pixels a side, else 'same' (2, McMahan's MNIST CNN)."""
    if padding is not None:
        return padding
    return 0 if min(hw) >= MCMAHAN_VALID_MIN_SIDE else SAME_PADDING


@dataclass(frozen=True)
class FlexChillCNNOptions:
    """``batch_norm``: BN after each conv (FedBN variant, Sec. 4.7); ``padding``: None = auto."""

    batch_norm: bool = False
    padding: int | None = None

    def validate(self, section: str) -> None:
        if self.padding is not None:
            require_range(self.padding, 0, MAX_PADDING, f"{section}.padding")


@dataclass(frozen=True)
class McMahanCNNOptions:
    """``padding``: None = auto (0 from 32x32 up; below, 2 = "same", as McMahan's 28x28 MNIST CNN)."""

    padding: int | None = None

    def validate(self, section: str) -> None:
        if self.padding is not None:
            require_range(self.padding, 0, MAX_PADDING, f"{section}.padding")


def _build(
    name: str,
    input_shape: Shape,
    num_classes: int,
    channels: tuple[int, int],
    hidden: int,
    padding: int,
    batch_norm: bool,
    section: str,
    batch_norm_option: str | None = None,
) -> TwoConvCNN:
    _, h, w = input_shape
    require_min_size(name, (h, w), _spatial_out(padding), section)
    return TwoConvCNN(input_shape, num_classes, channels, hidden, padding, batch_norm, batch_norm_option)


def build_flexchill_cnn(
    input_shape: Shape, num_classes: int, options: FlexChillCNNOptions, section: str
) -> TwoConvCNN:
    """FLex&Chill Table 2: Conv(C,10,5), Conv(10,20,5), FC(flat,256), FC(256,classes)."""
    _, h, w = require_image("flexchill_cnn", input_shape, section)
    return _build(
        "flexchill_cnn", input_shape, num_classes, (10, 20), 256,
        resolve_padding(options.padding, (h, w)), options.batch_norm, section, "batch_norm",
    )


def build_mcmahan_cnn(
    input_shape: Shape, num_classes: int, options: McMahanCNNOptions, section: str
) -> TwoConvCNN:
    """McMahan et al. (2017) CNN: Conv(C,32,5), Conv(32,64,5), FC(flat,512), FC(512,classes)."""
    _, h, w = require_image("mcmahan_cnn", input_shape, section)
    return _build(
        "mcmahan_cnn", input_shape, num_classes, (32, 64), 512,
        resolve_mcmahan_padding(options.padding, (h, w)), False, section,
    )

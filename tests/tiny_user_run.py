"""A user's own tiny data and model for Python-API tests (120 rows of 8 features, 3 classes; a two-layer MLP)."""

from __future__ import annotations

import torch
from torch import nn

import chillfl


def tiny_data() -> chillfl.TensorData:
    """90 training and 30 test rows, seeded."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(120, 8, generator=g), torch.randint(0, 3, (120,), generator=g)
    return chillfl.TensorData(x[:90], y[:90], x[90:], y[90:], num_classes=3)


def tiny_net() -> nn.Module:
    """The same weights each call."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))

"""The small user model of the Python-API tests: an MLP on sklearn's 8x8 digits (64 features, 10 classes)."""

from __future__ import annotations

import torch
from torch import nn


class Net(nn.Module):
    """A user's own ``nn.Module`` with named layers, as the API docs write one."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 24)
        self.fc2 = nn.Linear(24, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))

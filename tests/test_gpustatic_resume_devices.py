"""A resume reads a checkpoint onto the run's device (a GPU's), while CFD's delta coder and Selective-FD's mask live on
the CPU in a live run: both are moved back to the CPU when restored (a CUDA resume met the next CPU upload with a device
mismatch). Shown here with the ``meta`` device, which no CPU tensor may be combined with either: loaded from a ``meta``
state, the restored tensors must be CPU tensors."""
from __future__ import annotations

import pytest
import torch

from chillfl.distillation.quantize import DeltaCoder


def moves(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The devices every ``Tensor.to`` call from now on names, in order (the calls still move)."""
    moved: list[str] = []
    real = torch.Tensor.to

    def to(self: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        moved.append(str(args[0]) if args else str(kwargs.get("device")))
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(torch.Tensor, "to", to)
    return moved


def test_the_delta_coders_codes_come_back_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    coder = DeltaCoder.__new__(DeltaCoder)
    moved = moves(monkeypatch)
    coder.load_state_dict({"indices": torch.tensor([3, 5]), "codes": torch.tensor([[1, 0], [0, 1]])})
    assert moved == ["cpu", "cpu"] and all(row.device.type == "cpu" for row in coder._last.values())
    assert torch.equal(coder._last[5], torch.tensor([0, 1]))


def test_selective_fds_mask_comes_back_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from chillfl.distillation.methods.selective_fd import SelectiveFDClient

    moved = moves(monkeypatch)
    state = SelectiveFDClient.restore(SelectiveFDClient.__new__(SelectiveFDClient), {"in_distribution": torch.tensor([True, False])})
    assert moved == ["cpu"] and torch.equal(state.in_distribution, torch.tensor([True, False]))

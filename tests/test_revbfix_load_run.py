"""Review rev99b, findings 1 and 4: load_run reads back a run on a module with a non-persistent buffer or a tied
submodule, and leaves the caller's module where it was."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import chillfl
from chillfl.training.local import persistent_buffers

X = torch.randn(40, 4, generator=torch.Generator().manual_seed(0))
Y = (X[:, 0] > 0).long()
DATA = chillfl.TensorData(X, Y, X, Y, num_classes=2)
CONFIG = {"federation": {"num_clients": 2, "rounds": 1}, "eval": {"clients": "none", "client_split": "none"}}


class Scaled(nn.Module):
    """A non-persistent buffer: in named_buffers(), not in state_dict() nor (since umfix) in model.safetensors."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.register_buffer("scale", torch.ones(4), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x * self.scale)


class Tied(nn.Module):
    """A submodule under two names: once in named_parameters(), twice in state_dict()."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.again = self.fc
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.again(self.fc(x))))


MOVED: list[int] = []


class Watched(nn.Module):
    """Records each module that ``.cpu()`` / ``.to()`` is applied to, by id."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
        MOVED.append(id(self))
        return super()._apply(fn, recurse)


def _finished(tmp_path: Path, model: nn.Module) -> Path:
    torch.manual_seed(0)
    folder = chillfl.run(model=model, data=DATA, config=CONFIG, out_dir=tmp_path, name="r", progress=False).folder
    assert folder is not None
    return folder


def _final_acc(folder: Path) -> float:
    import json

    return float(json.loads((folder / "summary.json").read_text())["final_global_acc"])


@pytest.mark.parametrize("make", [Scaled, Tied])
def test_load_run_reads_back_a_module_whose_names_state_dict_spells_otherwise(tmp_path: Path, make: type[nn.Module]) -> None:
    """load_run compared model.safetensors' names with state_dict()'s and refused both: ['scale'] / ['again.*'] differ."""
    folder = _finished(tmp_path, make())
    saved = chillfl.load_run(folder, model=make(), data=DATA)
    assert saved.model is not None
    assert saved.evaluate(*saved.data.test())[0] == _final_acc(folder)
    state = {**dict(saved.model.named_parameters()), **dict(persistent_buffers(saved.model))}
    assert saved.evaluate(*saved.data.test(), state)[0] == _final_acc(folder)  # a client state of the same names is taken


def test_load_run_leaves_the_callers_module_where_it_was(tmp_path: Path) -> None:
    """finished_run called model.cpu() on the caller's module: a CUDA module came back on the CPU."""
    folder = _finished(tmp_path, Watched())
    given = Watched()
    before = {k: v.clone() for k, v in given.state_dict().items()}
    MOVED.clear()
    saved = chillfl.load_run(folder, model=given, data=DATA)
    assert id(given) not in MOVED and saved.model is not given
    assert all(torch.equal(before[k], v) for k, v in given.state_dict().items())  # nor loaded into

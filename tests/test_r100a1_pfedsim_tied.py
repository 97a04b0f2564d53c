"""pFedSim on a model with tied body weights: its keys are the run's state's names (model_state), not state_dict()'s,
which repeats a tied tensor under every alias (KeyError 'b.weight' at the first personalised round)."""

from __future__ import annotations

import torch
from torch import nn

import chillfl
from chillfl.aggregation.pfedsim import PFedSim
from chillfl.aggregation.registry import BuildContext, algorithm_spec
from chillfl.training.local import model_state


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.b.weight = self.a.weight
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.b(torch.tanh(self.a(x)))))

    def head_name(self) -> str:
        return "head"


def test_pfedsim_is_built_on_the_states_names() -> None:
    model = Tied()
    spec = algorithm_spec("pfedsim")
    server, _ = spec.build(spec.options(), BuildContext(num_clients=3, model=model, seed=0, rounds=4))
    assert isinstance(server, PFedSim)
    assert set(server.body) | set(server.head) == set(model_state(model)) and "b.weight" not in server.body


def test_pfedsim_runs_a_model_with_tied_body_weights() -> None:
    x = torch.randn(40, 4, generator=torch.Generator().manual_seed(0))
    y = (x[:, 0] > 0).long()
    torch.manual_seed(1)
    config = {"algorithm": {"name": "pfedsim"}, "federation": {"num_clients": 3, "rounds": 3}, "client": {"batch_size": 8},
              "eval": {"clients": "none", "client_split": "none"}}
    result = chillfl.run(model=Tied(), data=chillfl.TensorData(x, y, x, y, num_classes=2), config=config, write=False, progress=False)
    assert "b.weight" not in result.state and torch.isfinite(result.state["a.weight"]).all()

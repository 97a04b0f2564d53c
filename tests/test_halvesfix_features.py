"""FedPAC's features and the prototype protocol's features_and_logits run one batch loop (models.parts.head_inputs),
with the values of the loops each had before, bit for bit on the same machine."""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call

from chillfl.aggregation.fedpac import features
from chillfl.models.parts import forward_with_features, head_name
from chillfl.protocols.prototypes import features_and_logits
from chillfl.training.local import split_state


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Dropout(0.5))
        self.head = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


@torch.no_grad()
def old_loop(model: nn.Module, state: dict[str, torch.Tensor], x: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The loop both copies ran (eval mode, split state, head's input flattened), as the reference."""
    model.eval()
    params, buffers = split_state(model, state)
    head = head_name(model, warn=False)
    feats, logits = [], []
    for i in range(0, len(x), batch_size):
        f, z = forward_with_features(model, x[i : i + batch_size], call=lambda b: functional_call(model, (params, buffers), (b,)), head=head)
        feats.append(f.reshape(f.shape[0], -1))
        logits.append(z)
    return torch.cat(feats), torch.cat(logits)


def test_one_loop_same_values() -> None:
    torch.manual_seed(0)
    model = Net().train()  # left in train mode: both must evaluate (dropout off, running statistics)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state["body.1.running_mean"] = torch.randn(6)
    x = torch.randn(11, 5)
    want_f, want_z = old_loop(model, state, x, 4)
    model.train()
    got_f, got_z = features_and_logits(model, state, x, 4)
    assert torch.equal(got_f, want_f) and torch.equal(got_z, want_z)
    model.train()
    assert torch.equal(features(model, state, x, 4), want_f)
    assert not model.training


def test_features_keep_the_states_dtype() -> None:
    model = Net().double()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out = features(model, state, torch.randn(3, 5, dtype=torch.float64), 2)
    assert out.dtype == torch.float64 and out.shape == (3, 6)

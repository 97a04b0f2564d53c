"""The prototype protocol reads the nearest-prototype accuracy from the evaluation's own forward pass: the same
(accuracy, loss, proto accuracy) bit for bit as the two passes it ran before, from one pass over the rows."""

from __future__ import annotations

import math
from typing import Any, Callable

import pytest
import torch
from torch import nn

import chillfl.protocols.prototypes as prototypes
from chillfl.protocols.prototypes import HeadTap, evaluate_with_prototypes, features_and_logits
from chillfl.prototypes.maths import nearest_prototype
from chillfl.training.local import evaluate

from kd_helpers import records


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.ReLU())
        self.head = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


@pytest.mark.parametrize("space", ["features", "logits"])
def test_one_pass_gives_the_two_passes_values(space: str) -> None:
    torch.manual_seed(0)
    model = Net()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state["body.1.running_mean"] = torch.randn(6)
    x, y = torch.randn(11, 5), torch.randint(0, 3, (11,))
    width = 6 if space == "features" else 3
    protos, mask = torch.randn(3, width), torch.tensor([True, False, True])
    represent: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = (lambda f, z: f) if space == "features" else (lambda f, z: z)
    # the two passes of before: evaluate, then the representation of the same rows again
    want_acc, want_loss = evaluate(model, state, x, y, 4)
    feats, logits = features_and_logits(model, state, x, 4)
    want_p = float((nearest_prototype(represent(feats, logits), protos, mask) == y).to(torch.float64).mean())
    forwards = []
    handle = model.register_forward_pre_hook(lambda _m, inputs: forwards.append(len(inputs[0])))
    try:
        got = evaluate_with_prototypes(model, state, x, y, protos, mask, 4, represent)
    finally:
        handle.remove()
    assert got == (want_acc, want_loss, want_p)
    assert forwards == [4, 4, 3]  # one pass: each row forwarded once
    assert not model.head._forward_pre_hooks  # the tap is removed


def test_no_prototypes_or_no_rows_is_nan() -> None:
    model = Net()
    state = dict(model.state_dict())
    acc, _, p = evaluate_with_prototypes(model, state, torch.randn(4, 5), torch.zeros(4, dtype=torch.long), torch.zeros(3, 6),
                                         torch.zeros(3, dtype=torch.bool), 4, lambda f, z: f)
    assert math.isnan(p) and not math.isnan(acc)
    with HeadTap(model) as tap:  # no rows observed
        pass
    assert math.isnan(tap.accuracy(torch.zeros(0, dtype=torch.long), torch.zeros(3, 6), torch.ones(3, dtype=torch.bool), lambda f, z: f))

@pytest.mark.parametrize("method", ["fedproto", "fedhkd"])
def test_a_run_forwards_the_representation_only_for_the_release(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """features_and_logits is the second pass the metrics took before; now only each client update's release (of its
    training rows) calls it: 2 rounds x 3 clients a round, whether client models (FedProto) or a global one (FedHKD) are evaluated."""
    calls: list[int] = []

    def counted(*args: Any) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(1)
        return features_and_logits(*args)

    monkeypatch.setattr(prototypes, "features_and_logits", counted)
    recs = records({"model": {"name": "mlp"}, "prototypes": {"method": method}})
    assert len(calls) == 6
    assert recs[-1]["global_proto_acc"] is not None and recs[-1]["local_proto_acc"] is not None

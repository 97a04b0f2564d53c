"""Frozen weights (``requires_grad = False``) under SCAFFOLD and the DP wrappers: no state, no noise, no clip share."""

from __future__ import annotations

import torch
from torch import nn

from chillfl.aggregation.base import ClientResult, Trained
from chillfl.aggregation.scaffold import CONTROL


def frozen_model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
    model[0].requires_grad_(False)  # a "pretrained" body: read, never updated
    return model


def test_scaffold_keeps_no_control_variate_for_a_frozen_weight() -> None:
    # SCAFFOLD kept c and every c_i as zeros for the frozen layer and sent them each round (bytes doubled)
    from chillfl.aggregation.registry import BuildContext, algorithm_spec

    model = frozen_model()
    spec = algorithm_spec("scaffold")
    server, _ = spec.build(spec.options(), BuildContext(num_clients=3, model=model, seed=0, client_momentum=0.0))
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    trained = {**start, "2.weight": start["2.weight"] + 0.1, "2.bias": start["2.bias"] - 0.1}
    sent = server.downlink(0, 0, start).context
    assert set(sent[CONTROL]) == {"2.weight", "2.bias"}
    half = server.client_half()
    _, context = half.prepare({}, start, sent)
    x, y = torch.zeros(1, 4), torch.zeros(1, dtype=torch.long)
    state, report = half.finish(model, {}, Trained(0, x, y, start, sent, context, 0.1, 1.0, trained, 1))
    assert all(not k.endswith(("0.weight", "0.bias")) for k in state)
    out = server.aggregate(start, [ClientResult(0, trained, 5, 1, 0.1, 1.0, 0.0, report)], 0)
    assert torch.equal(out["0.weight"], start["0.weight"]) and torch.equal(out["0.bias"], start["0.bias"])
    assert set(server.state_dict()["control"]) == {"2.weight", "2.bias"}

"""Frozen weights (``requires_grad = False``) under SCAFFOLD and the DP wrappers: no state, no noise, no clip share."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import ClientResult, FedAvg, Trained
from chillfl.privacy.aggregate import PrivateAggregation
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


def private(client_noise: bool, per_layer: bool = False, frozen: frozenset[str] = frozenset({"0.weight", "0.bias"})) -> PrivateAggregation:
    return PrivateAggregation(FedAvg(), client_noise=client_noise, clip_norm=0.5, noise_multiplier=1.0, expected=3, seed=5,
                              per_layer=per_layer, frozen=frozen)


def uploads(start: dict[str, torch.Tensor]) -> list[ClientResult]:
    """Three clients that trained the head only: the frozen body comes back as it was sent."""
    gen = torch.Generator().manual_seed(1)
    moved = [{**start, "2.weight": start["2.weight"] + torch.randn(start["2.weight"].shape, generator=gen),
              "2.bias": start["2.bias"] + torch.randn(start["2.bias"].shape, generator=gen)} for _ in range(3)]
    return [ClientResult(i, p, 10, 1, 0.1, 1.0, 0.0) for i, p in enumerate(moved)]


@pytest.mark.parametrize(("client_noise", "per_layer"), [(False, False), (False, True), (True, False)], ids=["dp-fedavg", "dp-fedavg-per-layer", "local"])
def test_dp_wrappers_leave_a_frozen_weight_bitwise_as_it_was(client_noise: bool, per_layer: bool) -> None:
    # the noise was drawn for every float entry the base aggregates, frozen ones included: a pretrained body walked away
    start = {k: v.detach().clone() for k, v in frozen_model().state_dict().items()}
    out = private(client_noise, per_layer).aggregate(start, uploads(start), 0)
    assert torch.equal(out["0.weight"], start["0.weight"]) and torch.equal(out["0.bias"], start["0.bias"])
    assert not torch.equal(out["2.weight"], start["2.weight"])  # the trained head is noised as before


def test_per_layer_clipping_counts_no_frozen_entry_in_k() -> None:
    # with the two frozen entries in k = 4, each trainable entry's bound was C / 2, not C / sqrt(2)
    start = {k: v.detach().clone() for k, v in frozen_model().state_dict().items()}
    results = uploads(start)
    clipped = {}
    for frozen in (frozenset({"0.weight", "0.bias"}), frozenset()):
        agg = PrivateAggregation(FedAvg(), client_noise=False, clip_norm=0.5, noise_multiplier=0.0, expected=3, seed=5, per_layer=True, frozen=frozen)
        clipped[bool(frozen)] = agg.aggregate(start, results, 0)
    step = (clipped[True]["2.bias"] - start["2.bias"]).norm()
    assert step > (clipped[False]["2.bias"] - start["2.bias"]).norm()

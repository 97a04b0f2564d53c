"""LG-FedAvg (local representation, global head) and FedBABU (frozen random head, fine-tuning): hand-worked values.

Two-layer scalar models x -> b (a x) (body ``0.weight`` = a, head ``1.weight`` = b) with x = 1 and
f = 1/2 (b a - 1)^2 (``half_mse``), so that grad_a = r b and grad_b = r a with r = b a - 1.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import ClientResult, personal_model
from chillfl.aggregation.fedbabu import FedBABU, FedBABUOptions
from chillfl.aggregation.lg_fedavg import LGFedAvg, LGFedAvgOptions, representation_keys
from chillfl.errors import ConfigError
from chillfl.models import build_model
from chillfl.models.parts import head_name
from chillfl.options import parse_options
from chillfl.training.local import LocalSpec, evaluate
from test_perfedavg import client_reply, close, half_mse, one_sample, program

SPEC = LocalSpec(epochs=1, batch_size=8, base_loss=half_mse)


def two_layers(a: float, b: float) -> nn.Module:
    model = nn.Sequential(nn.Linear(1, 1, bias=False), nn.Linear(1, 1, bias=False))
    with torch.no_grad():
        model[0].weight.fill_(a)
        model[1].weight.fill_(b)
    return model


def state(a: float, b: float) -> dict[str, torch.Tensor]:
    return {"0.weight": torch.tensor([[a]]), "1.weight": torch.tensor([[b]])}


def results_of(glob: dict[str, torch.Tensor]) -> list[ClientResult]:
    a = {k: torch.full_like(v, 1.0) for k, v in glob.items()}
    b = {k: torch.full_like(v, 3.0) for k, v in glob.items()}
    return [ClientResult(0, a, 10, 1, 0.1, 1.0, 0.0), ClientResult(1, b, 30, 1, 0.1, 1.0, 0.0)]


# ---------------------------------------------------------------- LG-FedAvg


def test_lg_fedavg_server_averages_the_head_and_the_client_keeps_its_representation() -> None:
    model = build_model("mlp", (6,), 3, {"hidden": [5]}, seed=0)
    head = head_name(model)
    assert set(representation_keys(model)) == {k for k in model.state_dict() if not k.startswith(head + ".")}
    glob = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    out = LGFedAvg(model).aggregate(glob, results_of(glob), 0)
    assert all(torch.all(out[k] == 2.5) for k in glob)  # (10 * 1 + 30 * 3) / 40; the representation for the global model only
    kept = LGFedAvg(model, LGFedAvgOptions(global_body="keep")).aggregate(glob, results_of(glob), 0)
    for k in glob:
        assert torch.all(kept[k] == (2.5 if k.startswith(head + ".") else 0.0)), k
    with pytest.raises(ValueError):
        LGFedAvg(model, LGFedAvgOptions(global_layers=2))  # the MLP has 2 linear layers: no representation would be left


def test_lg_fedavg_client_trains_jointly_and_keeps_its_body() -> None:
    # a = 1, b = 2: r = 1, grad_a = r b = 2, grad_b = r a = 1, lr 0.1 -> a = 0.8, b = 1.9
    model = two_layers(1.0, 2.0)
    half = LGFedAvg(model).client_half()
    x, y = one_sample()
    first = client_reply(half, model, SPEC, state(1.0, 2.0), lr=0.1, x=x, y=y, x_eval=x, y_eval=y)
    close(first.uplink.params["0.weight"], 0.8)
    close(first.uplink.params["1.weight"], 1.9)
    assert set(first.state) == {"lg_fedavg.local.0.weight"}
    # next round, sent (a, b) = (0.5, 7): its own a = 0.8 and the global head b = 7 -> r = 4.6, a = 0.8 - 0.1 * 4.6 * 7 = -2.42
    again = client_reply(half, model, SPEC, state(0.5, 7.0), lr=0.1, x=x, y=y, x_eval=x, y_eval=y, state=first.state)
    close(again.uplink.params["0.weight"], -2.42, atol=1e-5)
    # local accuracy and the saved personal model: its own representation with the current global head
    own = personal_model(half, first.state, state(0.5, 7.0))
    assert own is not None
    close(own["0.weight"], 0.8)
    close(own["1.weight"], 7.0)
    _, loss = evaluate(model, first.uplink.params, x, y)
    assert first.local_loss == pytest.approx(loss)


# ---------------------------------------------------------------- FedBABU


def test_fedbabu_trains_the_body_with_the_head_frozen_then_fine_tunes_the_global_model() -> None:
    # Body, head frozen at b = 2: r = 1, grad_a = 2 -> a = 0.8 (uploaded), b = 2 (exactly).
    # Fine-tuning w^t = (1, 2), whole model, 2 epochs (one step each):
    #   step 1: r = 1,  grad_a = 2, grad_b = 1           -> (0.8, 1.9)
    #   step 2: r = 0.8 * 1.9 - 1 = 0.52, grad_a = 0.52 * 1.9 = 0.988, grad_b = 0.52 * 0.8 = 0.416 -> (0.7012, 1.8584)
    # head only: b = 2 - 0.1 * 1 = 1.9, then r = 0.9 -> b = 1.9 - 0.09 = 1.81 (a = 1)
    # body only: a = 1 - 0.2 = 0.8, then r = 0.6, grad_a = 1.2 -> a = 0.68 (b = 2)
    model = two_layers(1.0, 2.0)
    x, y = one_sample()
    cases = {"full": (0.7012, 1.8584), "head": (1.0, 1.81), "body": (0.68, 2.0)}
    for part, (a, b) in cases.items():
        half = FedBABU(model, FedBABUOptions(finetune_epochs=2, finetune=part)).client_half()  # type: ignore[arg-type]
        out = program(half, model, SPEC, state(1.0, 2.0), lr=0.1, x=x, y=y)  # type: ignore[arg-type]
        close(out.params["0.weight"], 0.8)
        assert torch.equal(out.params["1.weight"], torch.tensor([[2.0]]))
        assert out.personal is not None and out.num_steps == 1
        close(out.personal["0.weight"], a, atol=1e-6)
        close(out.personal["1.weight"], b, atol=1e-6)
    # finetune_lr = 0.2, 1 epoch: (1 - 0.2 * 2, 2 - 0.2 * 1) = (0.6, 1.8); finetune_epochs = 0: the trained model itself
    fast = program(FedBABU(model, FedBABUOptions(finetune_epochs=1, finetune_lr=0.2)).client_half(), model, SPEC, state(1.0, 2.0), lr=0.1, x=x, y=y)  # type: ignore[arg-type]
    assert fast.personal is not None
    close(fast.personal["0.weight"], 0.6)
    close(fast.personal["1.weight"], 1.8)
    none = program(FedBABU(model, FedBABUOptions(finetune_epochs=0)).client_half(), model, SPEC, state(1.0, 2.0), lr=0.1, x=x, y=y)  # type: ignore[arg-type]
    assert none.personal is None


def test_fedbabu_local_accuracy_measures_the_fine_tuned_model() -> None:
    """Through the real client on an MLP: local loss is the fine-tuned model's (driven with the same job seeds), not the uploaded one's."""
    model = build_model("mlp", (6,), 3, {"hidden": [5]}, seed=0)
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(20, 6, generator=g), torch.randint(0, 3, (20,), generator=g)
    spec = LocalSpec(epochs=1, batch_size=8)
    half = FedBABU(model, FedBABUOptions(finetune_epochs=2)).client_half()
    reply = client_reply(half, model, spec, start, lr=0.1, x=x, y=y, x_eval=x, y_eval=y)
    out = program(half, model, spec, start, lr=0.1, x=x, y=y)  # type: ignore[arg-type]
    assert out.personal is not None
    assert all(torch.equal(reply.uplink.params[k], out.params[k]) for k in start)
    assert (reply.local_acc, reply.local_loss) == evaluate(model, out.personal, x, y)
    assert reply.local_loss != evaluate(model, out.params, x, y)[1]
    assert reply.state is None  # the fine-tuned model is made anew each round


def test_fedbabu_server_averages_the_body_and_keeps_the_head_bitwise() -> None:
    model = build_model("mlp", (6,), 3, {"hidden": [5]}, seed=0)
    head = head_name(model)
    glob = {k: torch.randn_like(v) for k, v in model.state_dict().items()}
    out = FedBABU(model).aggregate(glob, results_of(glob), 0)
    for k in glob:
        if k.startswith(head + "."):
            assert torch.equal(out[k], glob[k]), k
        else:
            assert torch.all(out[k] == 2.5), k


@pytest.mark.parametrize(("options", "key", "value"), [
    (LGFedAvgOptions, "global_layers", 0), (FedBABUOptions, "head_layers", 0), (FedBABUOptions, "finetune_epochs", -1),
    (FedBABUOptions, "finetune_lr", 0.0), (FedBABUOptions, "finetune", "all"),
])
def test_bad_options_name_the_field(options: type, key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"algorithm.{key}"):
        parse_options(options, {key: value}, "algorithm")


@pytest.mark.parametrize("name", ["lg_fedavg", "fedbabu"])
def test_under_every_executor(name: str) -> None:
    """sequential == processes bitwise, vectorized within rounding; local accuracy is the personal model's, not FedAvg's clients'."""
    from methods_e2e import assert_executors_agree, config, records

    cfg = config(**{"algorithm.name": name, "federation.rounds": 2, "model.name": "mlp"})
    seq = assert_executors_agree(cfg)
    assert all(r["local_acc"] is not None for r in seq)
    assert seq[-1]["local_loss"] != records(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))[-1]["local_loss"]

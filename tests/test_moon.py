"""MOON (Li et al., CVPR 2021): the model-contrastive loss on hand-worked embeddings, the term inside
the one training step, the server's per-client previous models, executors and resume."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import ClientResult
from chillfl.aggregation.moon import Moon, MoonOptions
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.models import build_model
from chillfl.models.parts import forward_with_features
from chillfl.protocols.parameters import ParamDownlink
from chillfl.training.local import LocalSpec, model_state, train_client
from chillfl.training.moon import MoonTerm, moon_loss
from method_round import Clients
from methods_e2e import assert_executors_agree, config, records, resumed_records


def test_moon_loss_on_three_given_embeddings() -> None:
    # Sample 1: z = (1, 0), z_glob = (1, 0), z_prev = (0, 1): sim_g = 1, sim_p = 0; tau = 0.5 -> logits (2, 0)
    #   l = -log(e^2 / (e^2 + e^0)) = log(1 + e^-2) = 0.126928011...
    # Sample 2: z = (3, 4), z_glob = (4, 3), z_prev = (-3, -4): sim_g = 24/25 = 0.96, sim_p = -1 -> logits (1.92, -2)
    #   l = log(1 + e^(-2 - 1.92)) = log(1 + e^-3.92) = 0.019647...
    # Mean over the batch = (0.126928 + 0.019647) / 2
    z = torch.tensor([[1.0, 0.0], [3.0, 4.0]])
    z_glob = torch.tensor([[1.0, 0.0], [4.0, 3.0]])
    z_prev = torch.tensor([[0.0, 1.0], [-3.0, -4.0]])
    expected = (math.log1p(math.exp(-2.0)) + math.log1p(math.exp(-3.92))) / 2
    assert moon_loss(z, z_glob, z_prev, 0.5).item() == pytest.approx(expected, rel=1e-6)
    # scale invariance of the cosine, and the symmetric case: sim_g = sim_p -> l = log 2
    assert moon_loss(2 * z, z_glob, z_prev, 0.5).item() == pytest.approx(expected, rel=1e-6)
    assert moon_loss(z, z_glob, z_glob, 0.5).item() == pytest.approx(math.log(2.0), rel=1e-6)


def test_moon_gradient_pulls_towards_the_global_representation() -> None:
    # d l / d z at z = (1, 1)/sqrt2-ish: moving z towards z_glob lowers the loss
    z = torch.tensor([[1.0, 1.0]], requires_grad=True)
    z_glob, z_prev = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    (g,) = torch.autograd.grad(moon_loss(z, z_glob, z_prev, 0.5), [z])
    assert g[0, 0] < 0 < g[0, 1]  # gradient descent increases z_0 (towards z_glob), decreases z_1


def _mlp() -> nn.Module:
    return build_model("mlp", (6,), 3, {"hidden": [5]}, seed=0)


def test_moon_term_in_the_training_step_equals_the_hand_written_objective() -> None:
    model = _mlp()
    start = model_state(model)
    glob = {k: v + 0.1 * torch.randn_like(v, generator=torch.Generator().manual_seed(1)) for k, v in start.items()}
    prev = {k: v - 0.2 * torch.randn_like(v, generator=torch.Generator().manual_seed(2)) for k, v in start.items()}
    x, y = torch.randn(8, 6, generator=torch.Generator().manual_seed(3)), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    mu, tau, lr = 2.0, 0.5, 0.1
    spec = LocalSpec(epochs=1, batch_size=8, terms=(MoonTerm(),))
    ctx = {"moon_weight": mu, "moon_tau": tau, "moon_global": glob, "moon_prev": prev}
    out = train_client(model, start, x, y, spec=spec, lr=lr, temperature=1.0, context=ctx, generator=torch.Generator().manual_seed(0))
    # by hand: CE + mu * l_con(z(w), z(w_glob), z(w_prev)), one SGD step
    w = {k: v.clone().requires_grad_(True) for k, v in start.items()}

    def feats(state: dict) -> tuple[torch.Tensor, torch.Tensor]:
        return forward_with_features(model, x, call=lambda xb: torch.func.functional_call(model, state, (xb,)))

    z, logits = feats(w)
    with torch.no_grad():
        zg, _ = feats(glob)
        zp, _ = feats(prev)
    loss = nn.functional.cross_entropy(logits, y) + mu * moon_loss(z, zg, zp, tau)
    grads = torch.autograd.grad(loss, list(w.values()))
    for (k, v), g in zip(start.items(), grads):
        torch.testing.assert_close(out.params[k], v - lr * g)
    # and the term changed the step (weight 0 gives plain CE)
    plain = train_client(model, start, x, y, spec=spec, lr=lr, temperature=1.0, context={**ctx, "moon_weight": 0.0},
                         generator=torch.Generator().manual_seed(0))
    assert any(not torch.equal(plain.params[k], out.params[k]) for k in start)


def _result(cid: int, params: dict) -> ClientResult:
    return ClientResult(cid, params, 10, 1, 0.1, 1.0, 0.5)


def test_each_client_keeps_its_previous_model_and_trains_against_it() -> None:
    moon = Moon(MoonOptions(mu=5.0, tau=0.5))
    clients = Clients(moon)  # the previous models are the clients' own states
    glob = {"w": torch.zeros(2)}
    _, first = clients.start(0, 0, glob)
    assert first["moon_weight"] == 0.0 and first["moon_prev"] is glob  # never trained: no negative pair, no term
    trained = {"w": torch.tensor([1.0, 2.0])}
    new = moon.aggregate(glob, clients.results(0, glob, [_result(0, trained), _result(1, {"w": torch.tensor([3.0, 4.0])})]), 0)
    torch.testing.assert_close(new["w"], torch.tensor([2.0, 3.0]))  # FedAvg, equal sample counts
    _, ctx = clients.start(0, 1, new)
    assert ctx["moon_weight"] == 5.0 and ctx["moon_tau"] == 0.5
    assert torch.equal(ctx["moon_prev"]["w"], trained["w"]) and ctx["moon_global"] is new
    assert torch.equal(clients.start(1, 1, new)[1]["moon_prev"]["w"], torch.tensor([3.0, 4.0]))
    assert moon.state_dict() == {}  # the server keeps no model of any client
    with pytest.raises(ValueError):
        moon.load_state_dict({"control": {}})


def test_previous_model_is_not_counted_as_sent() -> None:
    glob = {"w": torch.zeros(100)}
    moon = Moon()
    down = moon.downlink(0, 0, glob)
    _, context = Clients(moon).start(0, 0, glob)  # what the client trains with: moon_prev too
    assert ParamDownlink(glob, 0.1, 1.0, context, local=down.local).nbytes()["control"] < 100  # two scalars, not two models
    assert ParamDownlink(glob, 0.1, 1.0, context).nbytes()["control"] >= 800  # undeclared, the two models would count


def test_moon_under_every_executor() -> None:
    cfg = config(**{"algorithm.name": "moon", "algorithm.mu": 1.0, "federation.rounds": 2, "model.name": "mlp"})
    seq = assert_executors_agree(cfg)
    fedavg = records(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))
    assert seq[0]["train_loss"] == fedavg[0]["train_loss"]  # round 0: no previous models, exactly FedAvg
    assert seq[-1]["train_loss"] != fedavg[-1]["train_loss"]


def test_moon_with_projection_head_under_vectorized() -> None:
    cfg = config(**{"algorithm.name": "moon", "federation.rounds": 2}).with_overrides({"model": {"name": "mlp", "projection_dim": 8}})
    seq = records(cfg)
    vec = records(cfg.with_overrides({"executor": "vectorized"}))
    assert vec[-1]["train_loss"] == pytest.approx(seq[-1]["train_loss"], rel=1e-4)


def test_moon_with_batch_norm_under_vectorized() -> None:
    cfg = config(**{"algorithm.name": "moon", "federation.rounds": 2}).with_overrides({"model": {"name": "flexchill_cnn", "batch_norm": True}})
    seq = records(cfg)
    vec = records(cfg.with_overrides({"executor": "vectorized"}))
    assert vec[-1]["train_loss"] == pytest.approx(seq[-1]["train_loss"], rel=1e-4)


def test_moon_resume_is_bitwise(tmp_path: Path) -> None:
    cfg = config(**{"algorithm.name": "moon", "model.name": "mlp"})
    assert resumed_records(cfg, 2, tmp_path) == records(cfg)


@pytest.mark.parametrize("bad", [{"algorithm.mu": -1.0}, {"algorithm.tau": 0.0}, {"algorithm.pool": 2}])
def test_bad_options_name_the_field(bad: dict) -> None:
    with pytest.raises(ConfigError) as info:
        build_experiment(config(**{"algorithm.name": "moon", "model.name": "mlp", **bad}))
    assert info.value.field.startswith("algorithm.")


def test_projection_head_option() -> None:
    plain, projected = build_model("mlp", (6,), 3, {"hidden": [5]}, seed=0), build_model("mlp", (6,), 3, {"hidden": [5], "projection_dim": 4}, seed=0)
    z, logits = forward_with_features(projected, torch.randn(2, 6))
    assert z.shape == (2, 4) and logits.shape == (2, 3)
    # Linear(5, 5) + Linear(5, 4) + Linear(4, 3) replace Linear(5, 3)
    extra = (5 * 5 + 5) + (5 * 4 + 4) + (4 * 3 + 3) - (5 * 3 + 3)
    assert sum(p.numel() for p in projected.parameters()) - sum(p.numel() for p in plain.parameters()) == extra
    with pytest.raises(ConfigError) as info:
        build_model("mlp", (6,), 3, {"projection_dim": -1})
    assert info.value.field == "model.projection_dim"


def test_moon_composes_with_pa3fed() -> None:
    cfg = config(**{"algorithm.name": "pa3fed", "algorithm.base": "moon", "model.name": "mlp", "federation.rounds": 2})
    out = records(cfg)
    assert all(math.isfinite(r["train_loss"]) for r in out)

"""pFedHN: the chain-rule server step on a hand-worked hypernetwork, the per-client downlink and its bytes, a replayed
round against torch's own modules and optimiser, pFedHN-PC's kept head, executors, resume and option errors.

The tiny hypernetwork of the hand-worked tests: 2 clients, 2-d embeddings, one hidden unit (``hidden = 1``,
``hidden_layers = 0``: f = W_1 v + b_1, a scalar), and a 3-parameter model ``w`` = U f + c::

    E = [[1, 2], [0, -1]]    W_1 = [[0.5, -1]]    b_1 = [1]    U = [[1], [2], [-1]]    c = [0, 1, 0.5]

Every expected number below is worked out in the comment beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import ClientResult, Trained
from chillfl.aggregation.pfedhn import (
    EMBEDDINGS,
    HEAD,
    Generated,
    KeepHead,
    PFedHN,
    PFedHNOptions,
    chain_rule_gradient,
    clipped,
    generate,
    hypernetwork_size,
    init_hypernetwork,
)
from chillfl.errors import ConfigError
from chillfl.engine.loop import run_rounds
from chillfl.experiment import build_experiment, build_protocol, make_executor
from chillfl.runner import CLIENT_MODELS, run_experiment
from chillfl.storage.model_file import read_client_models
from methods_e2e import assert_executors_agree, cli_option_error, config, records, resumed_records

SHAPES = {"w": torch.Size([3])}
PLAIN = {"hidden": 1, "hidden_layers": 0, "embed_dim": 2, "momentum": 0.0, "weight_decay": 0.0, "clip_norm": 0.0, "server_lr": 0.5, "embedding_lr": 0.25}
"""Algorithm 1's plain step at alpha = 0.5 on the MLP, 0.25 on the embeddings."""


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def tiny(**over: Any) -> PFedHN:
    agg = PFedHN(PFedHNOptions(**{**PLAIN, **over}), 2, SHAPES, seed=0, dtype=torch.float64)
    agg.hyper = {
        EMBEDDINGS: torch.tensor([[1.0, 2.0], [0.0, -1.0]], dtype=torch.float64),
        "mlp.0.weight": torch.tensor([[0.5, -1.0]], dtype=torch.float64),
        "mlp.0.bias": t(1.0),
        "out.w.weight": torch.tensor([[1.0], [2.0], [-1.0]], dtype=torch.float64),
        "out.w.bias": t(0.0, 1.0, 0.5),
    }
    return agg


def result(cid: int, w: torch.Tensor, n: int = 10) -> ClientResult:
    return ClientResult(cid, {"w": w}, n, 1, 0.1, 1.0, 0.0)


GLOBAL = {"w": t(0.0, 0.0, 0.0)}


# ---------------------------------------------------------------- h and the downlink


def test_each_client_is_sent_its_own_generated_model() -> None:
    agg = tiny()
    # client 0: f = 0.5 * 1 - 1 * 2 + 1 = -0.5; w = U f + c = (-0.5, -1, 0.5) + (0, 1, 0.5) = (-0.5, 0, 1)
    # client 1: f = 0.5 * 0 - 1 * (-1) + 1 = 2;   w = (2, 4, -2) + (0, 1, 0.5) = (2, 5, -1.5)
    down = {c: agg.downlink(c, 0, GLOBAL) for c in (0, 1)}
    assert down[0].params is not None and down[1].params is not None
    torch.testing.assert_close(down[0].params["w"], t(-0.5, 0.0, 1.0), rtol=0, atol=0)
    torch.testing.assert_close(down[1].params["w"], t(2.0, 5.0, -1.5), rtol=0, atol=0)
    assert down[0].context == {} and isinstance(agg.client_half(), Generated)  # the model only; full pFedHN keeps nothing on the client
    assert Generated().finish(nn.Linear(1, 1), {}, None) == ({}, {})  # type: ignore[arg-type]  # (it reads nothing of what was trained)
    # sent in the run's dtype and device
    assert agg.downlink(0, 0, {"w": torch.zeros(3)}).params["w"].dtype == torch.float32  # type: ignore[index]


def test_the_mlp_puts_a_relu_between_its_layers_and_none_after_the_last() -> None:
    # two layers, widths 1 -> 1 -> 1, v = 1: f0 = -1 * 1 + 0 = -1; ReLU -> 0; f1 = 3 * 0 + (-2) = -2 (no ReLU); w = 1 * f1 + 0 = -2
    hyper = {"mlp.0.weight": torch.tensor([[-1.0]]), "mlp.0.bias": torch.tensor([0.0]),
             "mlp.1.weight": torch.tensor([[3.0]]), "mlp.1.bias": torch.tensor([-2.0]),
             "out.w.weight": torch.tensor([[1.0]]), "out.w.bias": torch.tensor([0.0])}
    assert generate(hyper, torch.tensor([1.0]), {"w": torch.Size([1])})["w"].tolist() == [-2.0]


# ---------------------------------------------------------------- the chain-rule server step


def test_the_chain_rule_step_of_one_client_by_hand() -> None:
    agg = tiny()
    # client 0 was sent (-0.5, 0, 1) and trained it to (0.5, -1, 1): delta = sent - trained = (-1, 1, 0)
    # d/dc = delta = (-1, 1, 0);  d/dU = delta f = (0.5, -0.5, 0) (f = -0.5)
    # g_f = U^T delta = -1 + 2 + 0 = 1;  d/dW_1 = g_f v^T = (1, 2);  d/db_1 = 1;  d/dv_0 = W_1^T g_f = (0.5, -1); v_1: 0
    # step at 0.5 (0.25 for E): c = (0, 1, 0.5) - 0.5 (-1, 1, 0) = (0.5, 0.5, 0.5); U = (1, 2, -1) - 0.5 (0.5, -0.5, 0) = (0.75, 2.25, -1)
    # W_1 = (0.5, -1) - 0.5 (1, 2) = (0, -2); b_1 = 1 - 0.5 = 0.5; v_0 = (1, 2) - 0.25 (0.5, -1) = (0.875, 2.25); v_1 unchanged
    out = agg.aggregate(GLOBAL, [result(0, t(0.5, -1.0, 1.0))], 0)
    h = agg.hyper
    torch.testing.assert_close(h["out.w.bias"], t(0.5, 0.5, 0.5), rtol=0, atol=0)
    torch.testing.assert_close(h["out.w.weight"], torch.tensor([[0.75], [2.25], [-1.0]], dtype=torch.float64), rtol=0, atol=0)
    torch.testing.assert_close(h["mlp.0.weight"], torch.tensor([[0.0, -2.0]], dtype=torch.float64), rtol=0, atol=0)
    torch.testing.assert_close(h["mlp.0.bias"], t(0.5), rtol=0, atol=0)
    torch.testing.assert_close(h[EMBEDDINGS], torch.tensor([[0.875, 2.25], [0.0, -1.0]], dtype=torch.float64), rtol=0, atol=0)
    # the global model is h at the mean embedding: v = (0.4375, 0.625); f = 0 * 0.4375 - 2 * 0.625 + 0.5 = -0.75
    # w = (0.75, 2.25, -1) * -0.75 + (0.5, 0.5, 0.5) = (-0.0625, -1.1875, 1.25)
    torch.testing.assert_close(out["w"], t(-0.0625, -1.1875, 1.25), rtol=0, atol=0)
    # ||g||^2 = 1 + 1 + 0.25 + 0.25 + 1 + 4 + 1 + 0.25 + 1 = 9.75 (c, U, W_1, b_1, v_0)
    assert agg.round_metrics() == {"hn_grad_norm": pytest.approx(9.75**0.5)}


def test_the_chain_rule_gradient_is_bitwise_the_vector_jacobian_product() -> None:
    """chain_rule_gradient differentiates sum(theta_k * delta_k) (no tensor in grad_outputs: no sympy import); its bits
    are those of autograd.grad(theta, grad_outputs=delta), on a real model's shapes, several widths and depths, both signs."""
    from chillfl.models.registry import build_model

    shapes = {k: v.shape for k, v in build_model("flexchill_cnn", (1, 8, 8), 10, seed=0).named_parameters()}
    for seed, (layers, hidden) in enumerate(((1, 100), (2, 37), (0, 50))):
        hyper = init_hypernetwork(shapes, 5, 13, hidden, layers, seed)
        g = torch.Generator().manual_seed(seed + 100)
        trained = {k: torch.randn(s, generator=g) for k, s in shapes.items()}
        for sign in ("descent", "as_printed"):
            leaves = {k: v.detach().requires_grad_(True) for k, v in hyper.items()}
            theta = generate(leaves, leaves[EMBEDDINGS][seed], shapes)
            delta = [theta[k].detach() - trained[k] if sign == "descent" else trained[k] - theta[k].detach() for k in shapes]
            expected = torch.autograd.grad([theta[k] for k in shapes], list(leaves.values()), grad_outputs=delta)
            got = chain_rule_gradient(hyper, seed, shapes, trained, sign)
            assert list(got) == list(hyper)
            for k, e in zip(hyper, expected):
                assert torch.equal(got[k], e), (seed, sign, k)


def test_the_chain_rule_gradient_imports_no_sympy() -> None:
    """torch.autograd.grad with a tensor in grad_outputs imports sympy on its first use (torch 2.13: 0.4 s of CPU a
    process); the server's step must not pay it. In a fresh interpreter, where nothing has imported it yet."""
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import sys
        import torch
        from chillfl.aggregation.pfedhn import chain_rule_gradient, init_hypernetwork
        had = "sympy" in sys.modules
        shapes = {"w": torch.Size([3])}
        grads = chain_rule_gradient(init_hypernetwork(shapes, 2, 2, 4, 1, 0), 0, shapes, {"w": torch.zeros(3)})
        print(len(grads), had or "sympy" not in sys.modules)
        """
    )
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["7", "True"]


def test_the_printed_sign_moves_the_other_way() -> None:
    # delta = trained - sent = (1, -1, 0): every gradient negated; c = (0, 1, 0.5) + 0.5 (-1, 1, 0) = (-0.5, 1.5, 0.5)
    agg = tiny(sign="as_printed")
    agg.aggregate(GLOBAL, [result(0, t(0.5, -1.0, 1.0))], 0)
    torch.testing.assert_close(agg.hyper["out.w.bias"], t(-0.5, 1.5, 0.5), rtol=0, atol=0)
    torch.testing.assert_close(agg.hyper["mlp.0.bias"], t(1.5), rtol=0, atol=0)
    # the generated model of client 0 moved away from what it trained to (0.5, -1, 1): further than before (its start)
    after = agg.theta(0)["w"]
    assert float((after - t(0.5, -1.0, 1.0)).norm()) > float((t(-0.5, 0.0, 1.0) - t(0.5, -1.0, 1.0)).norm())


def test_two_clients_step_one_after_the_other_with_the_jacobian_they_were_sent_from() -> None:
    # client 1 was sent (2, 5, -1.5) (f = 2) and trained it to (2, 5, -0.5): delta_1 = (0, 0, -1)
    # d/dc = (0, 0, -1); d/dU = delta f = (0, 0, -2); g_f = U^T delta = (-1)(-1) = 1; d/dW_1 = (0, -1); d/db_1 = 1; d/dv_1 = (0.5, -1)
    # "each", plain SGD: phi - 0.5 (g_0 + g_1), both at the round's phi (client 0's g_0 as in the test above)
    # c = (0, 1, 0.5) - 0.5 (-1, 1, -1) = (0.5, 0.5, 1); U = (1, 2, -1) - 0.5 (0.5, -0.5, -2) = (0.75, 2.25, 0)
    # W_1 = (0.5, -1) - 0.5 (1, 1) = (0, -1.5); b_1 = 1 - 0.5 * 2 = 0; v_0 = (0.875, 2.25); v_1 = (0, -1) - 0.25 (0.5, -1) = (-0.125, -0.75)
    ups = [result(0, t(0.5, -1.0, 1.0)), result(1, t(2.0, 5.0, -0.5))]
    each = tiny()
    each.aggregate(GLOBAL, ups, 0)
    torch.testing.assert_close(each.hyper["out.w.bias"], t(0.5, 0.5, 1.0), rtol=0, atol=0)
    torch.testing.assert_close(each.hyper["out.w.weight"], torch.tensor([[0.75], [2.25], [0.0]], dtype=torch.float64), rtol=0, atol=0)
    torch.testing.assert_close(each.hyper["mlp.0.weight"], torch.tensor([[0.0, -1.5]], dtype=torch.float64), rtol=0, atol=0)
    torch.testing.assert_close(each.hyper["mlp.0.bias"], t(0.0), rtol=0, atol=0)
    torch.testing.assert_close(each.hyper[EMBEDDINGS], torch.tensor([[0.875, 2.25], [-0.125, -0.75]], dtype=torch.float64), rtol=0, atol=0)
    # "mean": one step on (g_0 + g_1) / 2: c = (0, 1, 0.5) - 0.25 (-1, 1, -1) = (0.25, 0.75, 0.75); b_1 = 1 - 0.25 * 2 = 0.5
    mean = tiny(server_steps="mean")
    mean.aggregate(GLOBAL, ups, 0)
    torch.testing.assert_close(mean.hyper["out.w.bias"], t(0.25, 0.75, 0.75), rtol=0, atol=0)
    torch.testing.assert_close(mean.hyper["mlp.0.bias"], t(0.5), rtol=0, atol=0)
    # the mean over clients: ||g_0|| = sqrt(9.75); ||g_1||^2 = 1 + 4 + 1 + 1 + 0.25 + 1 = 8.25
    assert each.round_metrics() == {"hn_grad_norm": pytest.approx((9.75**0.5 + 8.25**0.5) / 2)}


def test_the_server_optimiser_is_torch_sgd_with_momentum_and_decay() -> None:
    # p = 2, lr 0.1, momentum 0.5, weight decay 0.1, embedding_lr 0.2 on E
    # step 1, g = 1:  d = 1 + 0.1 * 2 = 1.2; b = 1.2 (first); p = 2 - 0.12 = 1.88
    # step 2, g = -1: d = -1 + 0.188 = -0.812; b = 0.5 * 1.2 - 0.812 = -0.212; p = 1.88 + 0.0212 = 1.9012
    # E, at lr 0.2: 2 - 0.24 = 1.76; then d = -1 + 0.176 = -0.824; b = 0.6 - 0.824 = -0.224; 1.76 + 0.0448 = 1.8048
    agg = PFedHN(PFedHNOptions(server_lr=0.1, embedding_lr=0.2, momentum=0.5, weight_decay=0.1), 1, {}, seed=0, dtype=torch.float64)
    agg.hyper = {"p": t(2.0), EMBEDDINGS: t(2.0)}
    agg.step({"p": t(1.0), EMBEDDINGS: t(1.0)})
    assert agg.hyper["p"].item() == pytest.approx(1.88) and agg.hyper[EMBEDDINGS].item() == pytest.approx(1.76)
    agg.step({"p": t(-1.0), EMBEDDINGS: t(-1.0)})
    assert agg.hyper["p"].item() == pytest.approx(1.9012) and agg.hyper[EMBEDDINGS].item() == pytest.approx(1.8048)
    # the same two steps with torch.optim.SGD
    p, e = nn.Parameter(t(2.0)), nn.Parameter(t(2.0))
    sgd = torch.optim.SGD([{"params": [p]}, {"params": [e], "lr": 0.2}], lr=0.1, momentum=0.5, weight_decay=0.1)
    for g in (1.0, -1.0):
        p.grad, e.grad = t(g), t(g)
        sgd.step()
    assert agg.hyper["p"].item() == pytest.approx(p.item()) and agg.hyper[EMBEDDINGS].item() == pytest.approx(e.item())


def test_the_gradient_is_clipped_to_clip_norm_over_all_of_the_hypernetwork() -> None:
    # g = (3, 4) over two tensors: ||g|| = 5; C = 1 -> (0.6, 0.8); C = 10 or 0 (off) -> unchanged
    g = {"a": t(3.0), "b": t(4.0)}
    assert [v.item() for v in clipped(g, 1.0).values()] == pytest.approx([0.6, 0.8])
    assert [v.item() for v in clipped(g, 10.0).values()] == [3.0, 4.0] and [v.item() for v in clipped(g, 0.0).values()] == [3.0, 4.0]
    # in the server step: the one-client gradient above has norm sqrt(9.75) = 3.1225; C = 1 scales it by 1/3.1225
    agg = tiny(clip_norm=1.0)
    agg.aggregate(GLOBAL, [result(0, t(0.5, -1.0, 1.0))], 0)
    torch.testing.assert_close(agg.hyper["mlp.0.bias"], t(1.0 - 0.5 / 9.75**0.5))


def test_the_state_round_trips_and_another_layout_is_refused() -> None:
    agg = tiny(momentum=0.9)
    agg.aggregate(GLOBAL, [result(0, t(0.5, -1.0, 1.0))], 0)
    again = tiny(momentum=0.9)
    again.load_state_dict(agg.state_dict())
    assert all(torch.equal(again.hyper[k], v) for k, v in agg.hyper.items())
    assert again.velocity.keys() == agg.velocity.keys() and all(torch.equal(again.velocity[k], v) for k, v in agg.velocity.items())
    wider = PFedHN(PFedHNOptions(**{**PLAIN, "hidden": 2}), 2, SHAPES, seed=0, dtype=torch.float64)
    with pytest.raises(ValueError, match="does not match"):
        wider.load_state_dict(agg.state_dict())


def test_the_initialisation_is_torchs_default_and_seeded() -> None:
    a = init_hypernetwork({"w": torch.Size([4, 5])}, 3, 2, 6, 1, seed=7)
    assert torch.equal(a["out.w.weight"], init_hypernetwork({"w": torch.Size([4, 5])}, 3, 2, 6, 1, seed=7)["out.w.weight"])
    assert not torch.equal(a["out.w.weight"], init_hypernetwork({"w": torch.Size([4, 5])}, 3, 2, 6, 1, seed=8)["out.w.weight"])
    assert {k: tuple(v.shape) for k, v in a.items()} == {
        EMBEDDINGS: (3, 2), "mlp.0.weight": (6, 2), "mlp.0.bias": (6,), "mlp.1.weight": (6, 6), "mlp.1.bias": (6,),
        "out.w.weight": (20, 6), "out.w.bias": (20,)}
    # nn.Linear's bound 1/sqrt(fan_in): 1/sqrt(2) for the first layer, 1/sqrt(6) for the others
    assert float(a["mlp.0.weight"].abs().max()) <= 2**-0.5 and float(a["out.w.weight"].abs().max()) <= 6**-0.5
    # E 3*2 = 6, mlp.0 6*2 + 6 = 18, mlp.1 6*6 + 6 = 42, out.w 20*6 + 20 = 140: 206
    assert hypernetwork_size({"w": torch.Size([4, 5])}, 3, 2, 6, 1) == 206 == sum(v.numel() for v in a.values())


def test_a_hypernetwork_over_max_params_is_one_config_error_before_it_is_built() -> None:
    # the test config's model has 28,586 parameters and 4 clients (embed_dim int(1 + 4/4) = 2); at hidden = 100, 3 hidden layers:
    # E 4*2 = 8, mlp 2*100 + 100 + 3 * (100*100 + 100) = 30,600, outputs 101 * 28,586 = 2,887,186: 2,917,794
    cfg = config(**{"algorithm.name": "pfedhn", "algorithm.max_params": 2_917_793})
    assert sum(p.numel() for p in build_experiment(config(**{"algorithm.name": "fedavg"})).model.parameters()) == 28_586
    with pytest.raises(ConfigError) as err:
        build_experiment(cfg)
    assert err.value.field == "algorithm.max_params" and "\n" not in str(err.value)
    assert "would hold 2,917,794 parameters" in err.value.message and "28,586 generated entries" in err.value.message
    assert isinstance(build_experiment(config(**{"algorithm.name": "pfedhn", "algorithm.max_params": 2_917_794})).aggregator, PFedHN)


def test_a_frozen_weight_keeps_the_models_value_and_is_not_generated() -> None:
    # Linear(2, 3) -> Linear(3, 2), the first layer frozen (requires_grad = False) at all-ones: h generates the second
    # layer only (before the fix it generated the first too, replacing the frozen ones by h's untrained output)
    from chillfl.aggregation.pfedhn import SPEC
    from chillfl.aggregation.registry import BuildContext

    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 2))
    with torch.no_grad():
        model[0].weight.fill_(1.0)
        model[0].bias.fill_(1.0)
    model[0].requires_grad_(False)
    server, _ = SPEC.build(PFedHNOptions(hidden=4, hidden_layers=1), BuildContext(num_clients=3, model=model, seed=0))
    assert isinstance(server, PFedHN) and set(server.shapes) == {"1.weight", "1.bias"}
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    assert set(server.downlink(0, 0, start).params) == {"1.weight", "1.bias"}
    trained = {**start, "1.weight": start["1.weight"] + 0.1, "1.bias": start["1.bias"] - 0.1}
    out = server.aggregate(start, [ClientResult(0, trained, 5, 1, 0.1, 1.0, 0.0)], 0)
    assert torch.equal(out["0.weight"], torch.ones(3, 2)) and torch.equal(out["0.bias"], torch.ones(3))


# ---------------------------------------------------------------- pFedHN-PC: the client keeps its head


def test_the_pc_client_completes_the_body_with_its_own_head_and_keeps_the_trained_one() -> None:
    half = KeepHead(frozenset({"fc.weight", "fc.bias"}))
    sent = {"body": t(1.0), "fc.weight": t(0.0), "fc.bias": t(0.0)}
    first, context = half.prepare({}, sent, {"k": 1.0})
    assert first == sent and context == {"k": 1.0}  # first round: the global (initial) head
    state = {f"{HEAD}fc.weight": t(5.0), f"{HEAD}fc.bias": t(6.0)}
    start, _ = half.prepare(state, sent, {})
    assert start == {"body": t(1.0), "fc.weight": t(5.0), "fc.bias": t(6.0)}
    trained = Trained(0, torch.ones(1, 1), torch.zeros(1, dtype=torch.long), start, {}, {}, 0.1, 1.0, {"body": t(2.0), "fc.weight": t(7.0), "fc.bias": t(8.0)}, 1)
    assert half.finish(nn.Identity(), state, trained) == ({f"{HEAD}fc.weight": t(7.0), f"{HEAD}fc.bias": t(8.0)}, {})


def test_pc_generates_the_body_only_and_prices_no_head() -> None:
    cfg = config(**{"algorithm.name": "pfedhn", "algorithm.variant": "pc", "model.name": "mlp", "model.hidden": [16], "federation.clients_per_round": 2})
    exp = build_experiment(cfg)
    agg = exp.aggregator
    assert isinstance(agg, PFedHN)
    assert agg.head == {"head.weight", "head.bias"}
    assert not agg.head & set(agg.shapes) and set(agg.shapes) | agg.head == {n for n, _ in exp.model.named_parameters()}
    recs = records(cfg)
    sizes = {n: p.numel() * 4 for n, p in exp.model.named_parameters()}
    body, head = sum(v for k, v in sizes.items() if k not in agg.head), sum(v for k, v in sizes.items() if k in agg.head)
    assert [r["bytes_up"] for r in recs] == [2 * body] * 3  # the head never leaves a client
    # down: the body every round; the (unchanging initial) head only to a client that has not been sent one
    seen: set[int] = set()
    for r in recs:
        new = [c for c in r["clients"] if c not in seen]
        seen.update(r["clients"])
        assert r["bytes_down"] == 2 * body + len(new) * head


# ---------------------------------------------------------------- options and privacy


@pytest.mark.parametrize(
    ("field", "value"),
    [("embed_dim", -1), ("hidden", 0), ("hidden_layers", 17), ("server_lr", 0.0), ("embedding_lr", -0.1), ("momentum", 1.0),
     ("weight_decay", -1e-3), ("clip_norm", -1.0), ("sign", "ascent"), ("server_steps", "all"), ("variant", "head"),
     ("max_params", 0)],
)
def test_options_are_checked(field: str, value: Any) -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(config(**{"algorithm.name": "pfedhn", f"algorithm.{field}": value}))
    assert err.value.field == f"algorithm.{field}" and "\n" not in str(err.value)


def test_a_bad_option_on_the_command_line_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_option_error(tmp_path, capsys, "pfedhn", "algorithm.momentum=1.5") == (2, ["chillfl: error: algorithm.momentum: must be in [0, 1), got 1.5"], False)


def test_privacy_dp_sgd_bounds_the_upload_and_the_weighted_mechanisms_refuse() -> None:
    pytest.importorskip("opacus")
    private = {"privacy.clip_norm": 1.0, "privacy.noise_multiplier": 1.5, "privacy.delta": 1e-3, "model.name": "mlp", "algorithm.name": "pfedhn"}
    # one training a round, the model alone uploaded; the hypernetwork's step is post-processing of it: dp-sgd runs
    assert build_experiment(config(**private, **{"privacy.mechanism": "dp-sgd"})).aggregator is not None
    for mechanism, why in (("dp-fedavg", "takes no external per-client weights"), ("local", "which the server step of algorithm 'pfedhn' is not")):  # no shared model's rule
        with pytest.raises(ConfigError) as err:
            build_experiment(config(**private, **{"privacy.mechanism": mechanism}))
        assert err.value.field == "privacy.mechanism" and why in err.value.message


# ---------------------------------------------------------------- a replayed round, executors, resume


class Reference(nn.Module):
    """The authors' hypernetwork written with torch modules: nn.Embedding, nn.Linear layers with ReLU between, one nn.Linear per tensor."""

    def __init__(self, hyper: dict[str, torch.Tensor], shapes: dict[str, torch.Size]) -> None:
        super().__init__()
        self.shapes = shapes
        self.embeddings = nn.Embedding.from_pretrained(hyper[EMBEDDINGS].clone(), freeze=False)
        layers = sorted({k.split(".")[1] for k in hyper if k.startswith("mlp.")}, key=int)
        self.mlp = nn.ModuleList(nn.Linear(*hyper[f"mlp.{j}.weight"].shape[::-1]) for j in layers)
        self.heads = nn.ModuleList(nn.Linear(*hyper[f"out.{k}.weight"].shape[::-1]) for k in shapes)
        with torch.no_grad():
            for j, layer in zip(layers, self.mlp):
                layer.weight.copy_(hyper[f"mlp.{j}.weight"])
                layer.bias.copy_(hyper[f"mlp.{j}.bias"])
            for k, head in zip(shapes, self.heads):
                head.weight.copy_(hyper[f"out.{k}.weight"])
                head.bias.copy_(hyper[f"out.{k}.bias"])

    def forward(self, client: int) -> list[torch.Tensor]:
        f = self.embeddings(torch.tensor(client))
        for j, layer in enumerate(self.mlp):
            f = layer(torch.relu(f) if j else f)
        return [head(f).reshape(shape) for head, shape in zip(self.heads, self.shapes.values())]


def test_a_run_replays_its_first_round_with_torch_modules_and_sgd() -> None:
    """Round 0 of a run: each client was sent the reference module's output; its gradients (autograd.grad with the
    uploads' deltas), torch's clip_grad_norm_ and torch.optim.SGD (the authors' recipe), one step per client in
    client-id order, give the run's hypernetwork; its global model is the reference at the mean embedding, and its
    local accuracy is the mean of the clients' uploads (generated, then trained) on their own held-out splits."""
    from chillfl.engine.loop import run_rounds
    from chillfl.experiment import build_protocol, make_executor
    from chillfl.protocols.common import mean_or_none
    from chillfl.protocols.parameters import ParameterSharing
    from chillfl.training.local import evaluate

    cfg = config(**{"algorithm.name": "pfedhn", "model.name": "mlp", "model.hidden": [16], "algorithm.hidden": 8, "algorithm.clip_norm": 0.5})
    exp = build_experiment(cfg)
    protocol = build_protocol(exp)
    agg = exp.aggregator
    assert isinstance(protocol, ParameterSharing) and isinstance(agg, PFedHN)
    start = {k: v.clone() for k, v in agg.hyper.items()}
    sent: dict[int, dict[str, torch.Tensor]] = {}
    uploads: dict[int, dict[str, torch.Tensor]] = {}
    downlink, aggregate = agg.downlink, agg.aggregate

    def spy_down(cid: int, round: int, glob: Any) -> Any:
        d = downlink(cid, round, glob)
        sent[cid] = d.params
        return d

    def spy_up(glob: Any, results: Any, round: int) -> Any:
        uploads.update({r.client_id: r.params for r in results})
        return aggregate(glob, results, round)

    agg.downlink, agg.aggregate = spy_down, spy_up  # type: ignore[method-assign]
    executor = make_executor(exp, protocol)
    try:
        first = list(run_rounds(protocol, executor, seed=cfg.seed, num_clients=4, clients_per_round=3, rounds=1))[0]
    finally:
        executor.close()
    ref = Reference(start, agg.shapes)
    keys = list(agg.shapes)
    outputs = {c: ref(c) for c in sorted(sent)}
    for c, out in outputs.items():
        for k, o in zip(keys, out):
            torch.testing.assert_close(sent[c][k], o.detach())
    grads = {c: torch.autograd.grad(out, list(ref.parameters()), grad_outputs=[o.detach() - uploads[c][k] for k, o in zip(keys, out)]) for c, out in outputs.items()}
    sgd = torch.optim.SGD([{"params": [p for n, p in ref.named_parameters() if n != "embeddings.weight"]}, {"params": [ref.embeddings.weight]}],
                          lr=0.01, momentum=0.9, weight_decay=1e-3)
    for c in sorted(grads):
        for p, g in zip(ref.parameters(), grads[c]):
            p.grad = g.clone()
        nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        sgd.step()
    torch.testing.assert_close(agg.hyper[EMBEDDINGS], ref.embeddings.weight.detach())
    for j, layer in enumerate(ref.mlp):
        torch.testing.assert_close(agg.hyper[f"mlp.{j}.weight"], layer.weight.detach())
    for k, head in zip(keys, ref.heads):
        torch.testing.assert_close(agg.hyper[f"out.{k}.weight"], head.weight.detach())
        torch.testing.assert_close(agg.hyper[f"out.{k}.bias"], head.bias.detach())
    with torch.no_grad():
        f = ref.embeddings.weight.mean(dim=0)
        for j, layer in enumerate(ref.mlp):
            f = layer(torch.relu(f) if j else f)
        for k, head in zip(keys, ref.heads):
            torch.testing.assert_close(protocol.state[k], head(f).reshape(agg.shapes[k]))
    norms = [float(torch.linalg.vector_norm(torch.cat([g.reshape(-1) for g in grads[c]]))) for c in sorted(grads)]
    assert first["agg_hn_grad_norm"] == pytest.approx(sum(norms) / len(norms), rel=1e-5)
    assert first["bytes_down"] == first["bytes_up"] == 3 * sum(p.numel() * 4 for p in exp.model.parameters())
    # local accuracy: each client's generated-and-trained model (its upload) on its own held-out split
    accs = []
    for c in first["clients"]:
        data = protocol.evaluation.client_data(c)
        assert data.x_eval is not None and data.y_eval is not None
        accs.append(evaluate(exp.model, uploads[c], data.x_eval, data.y_eval, cfg.eval.batch_size)[0])
    assert first["local_acc"] == mean_or_none(accs)


def test_it_is_not_fedavg() -> None:
    cfg = config(**{"algorithm.name": "pfedhn", "model.name": "mlp", "model.hidden": [16]})
    pfedhn, fedavg = records(cfg), records(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))
    assert pfedhn[-1]["local_acc"] != fedavg[-1]["local_acc"] and pfedhn[-1]["global_acc"] != fedavg[-1]["global_acc"]
    assert all(r["agg_hn_grad_norm"] > 0 for r in pfedhn)


@pytest.mark.slow  # three runs, one of them in a process pool
def test_runs_agree_across_executors() -> None:
    assert_executors_agree(config(**{"algorithm.name": "pfedhn", "model.name": "mlp", "model.hidden": [16]}))


@pytest.mark.parametrize("variant", ["full", "pc"])
def test_resume_is_bitwise(variant: str, tmp_path: Path) -> None:
    cfg = config(**{"algorithm.name": "pfedhn", "algorithm.variant": variant, "model.name": "mlp", "model.hidden": [16]})
    assert resumed_records(cfg, 2, tmp_path) == records(cfg)


def rounds_of(cfg: Any) -> tuple[Any, Any]:
    """The run's rounds, driven here without writing (its experiment and protocol, to read the state it ends in)."""
    exp = build_experiment(cfg)
    protocol: Any = build_protocol(exp)
    executor = make_executor(exp, protocol)
    try:
        fed = cfg.federation
        list(run_rounds(protocol, executor, seed=cfg.seed, num_clients=exp.data.num_clients, clients_per_round=fed.sample_size(), rounds=fed.rounds,
                        participation=fed))
    finally:
        executor.close()
    return exp, protocol


def test_pc_writes_each_clients_model_the_hypernetwork_body_with_its_own_head(tmp_path: Path) -> None:
    """``checkpoint.client_models`` under pFedHN-PC: client i's model is h(v_i; phi) at the run's end with the head it keeps."""
    cfg = config(**{"algorithm.name": "pfedhn", "algorithm.variant": "pc", "model.name": "mlp", "model.hidden": [16], "checkpoint.client_models": True,
                    "out_dir": str(tmp_path), "name": "pc"})
    exp, protocol = rounds_of(cfg)
    agg = exp.aggregator
    assert isinstance(agg, PFedHN)
    took_part = sorted(protocol.store.ids())
    assert took_part
    expected = {}
    for cid in took_part:
        head = {k[len(HEAD):]: v for k, v in protocol.store.load(cid).items() if k.startswith(HEAD)}
        assert set(head) == agg.head
        expected[cid] = {**agg.theta(cid), **head}
        assert set(expected[cid]) == set(protocol.global_state())  # a whole model: body and head, nothing else
    out = run_experiment(cfg, progress=False)  # the same run, written
    assert out.folder is not None
    saved = read_client_models(out.folder / CLIENT_MODELS)
    assert sorted(saved) == took_part
    for cid, model in saved.items():
        assert set(model) == set(expected[cid]) and all(torch.equal(model[k], v) for k, v in expected[cid].items()), cid


def test_full_writes_each_clients_generated_model_h_of_its_embedding(tmp_path: Path) -> None:
    """``checkpoint.client_models`` under full pFedHN: every client that took part has h(v_i; phi) of the final hypernetwork."""
    cfg = config(**{"algorithm.name": "pfedhn", "model.name": "mlp", "model.hidden": [16], "checkpoint.client_models": True,
                    "out_dir": str(tmp_path), "name": "full"})
    exp, protocol = rounds_of(cfg)
    agg = exp.aggregator
    assert isinstance(agg, PFedHN) and not agg.head
    took_part = sorted(protocol.finished)
    assert took_part and not protocol.store.ids()  # its clients keep nothing: the server makes each one's model
    out = run_experiment(cfg, progress=False)  # the same run, written
    assert out.folder is not None
    saved = read_client_models(out.folder / CLIENT_MODELS)
    assert sorted(saved) == took_part
    cid = took_part[-1]
    with torch.no_grad():  # the same run's final hypernetwork, phi and v_i, as the manual run left it
        expected = generate(agg.hyper, agg.hyper[EMBEDDINGS][cid], agg.shapes)
    assert set(saved[cid]) == set(protocol.global_state()) == set(expected)  # a whole model, every entry generated (the mlp has no buffers)
    assert all(torch.equal(saved[cid][k], v) for k, v in expected.items())
    other = took_part[0]
    assert not all(torch.equal(saved[other][k], saved[cid][k]) for k in expected)  # each client its own model

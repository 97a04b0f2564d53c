"""Per-FedAvg (FO and HF): the meta step and the personalised adaptation on hand-worked values, through the real client.

The hand-worked cases use one-weight linear models and f(theta) = 1/2 (theta x - 1)^2 (``half_mse``, labels
unused) with one sample x = 1, so the batch order is that one sample and every gradient is theta - 1.
"""

from __future__ import annotations

from itertools import count
from typing import Any

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import ClientHalf, ClientState, Local, Personal, Personalising
from chillfl.aggregation.perfedavg import PerFedAvg, PerFedAvgOptions
from chillfl.engine.protocol import ClientData, ClientJob, ClientReply, ClientTask, drive
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.executors.sequential import train_job
from chillfl.options import parse_options
from chillfl.protocols.parameters import ParamDownlink, ParameterClient
from chillfl.seeds import derive_seed
from chillfl.training.local import LocalSpec, batch_order, evaluate
from methods_e2e import config


def half_mse(logits: torch.Tensor, y: torch.Tensor, temperature: Any) -> torch.Tensor:
    """1/2 sum_j (z_j - 1)^2, averaged over the batch (labels unused)."""
    return 0.5 * ((logits - 1.0) ** 2).sum(-1).mean()


def linear(*weights: float) -> nn.Module:
    """A bias-free Linear(1, len(weights)) with the given weights."""
    layer = nn.Linear(1, len(weights), bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(weights).view(-1, 1))
    return layer


def one_sample() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ones(1, 1), torch.zeros(1, dtype=torch.long)


def program(half: Personalising, model: nn.Module, spec: LocalSpec, start: dict[str, torch.Tensor], *, lr: float,
            x: torch.Tensor, y: torch.Tensor, state: ClientState | None = None, seed: int = 0) -> Personal:
    """The half's trainings driven as :class:`ParameterClient` drives them (same job seeds), on the sequential path."""
    objectives = half.objectives(spec)
    prog = half.train(Local(0, x, y, start, {}, lr, state or {}, seed, spec))
    outcome = None
    for i in count():
        try:
            req = next(prog) if outcome is None else prog.send(outcome)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        xs, ys = (x, y) if req.rows is None else (x[req.rows], y[req.rows])
        job_seed = seed if i == 0 else derive_seed(seed, "personal", i)
        job = ClientJob(0, req.start, xs, ys, lr if req.lr is None else req.lr, 1.0, req.context, job_seed,
                        None if req.objective is None else objectives[req.objective])
        outcome = train_job(model, spec, job)
    raise AssertionError("unreachable")


def client_reply(half: ClientHalf, model: nn.Module, spec: LocalSpec, start: dict[str, torch.Tensor], *, lr: float,
                 x: torch.Tensor, y: torch.Tensor, x_eval: torch.Tensor, y_eval: torch.Tensor, state: ClientState | None = None) -> ClientReply[Any, Any]:
    """One client update through the real :class:`ParameterClient`, evaluated on (x_eval, y_eval)."""
    trainer = half if isinstance(half, Personalising) else None
    client = ParameterClient(model, 64, half, trainer=trainer, spec=spec, objectives=() if trainer is None else trainer.objectives(spec))
    task = ClientTask(0, 0, ParamDownlink(start, lr, 1.0, {}, seed=0), ClientData(x, y, x_eval, y_eval), state)
    return drive([client.update(task)], lambda _spec, jobs: [train_job(model, spec, j) for j in jobs])[0]


def close(actual: torch.Tensor, *expected: float, atol: float = 1e-6) -> None:
    torch.testing.assert_close(actual.flatten(), torch.tensor(expected, dtype=actual.dtype), atol=atol, rtol=1e-5)


SPEC = LocalSpec(epochs=1, batch_size=8, base_loss=half_mse)


def test_first_order_meta_step_and_adaptation_by_hand() -> None:
    # w = 2, alpha = the round's lr 0.1, beta = 0.5; one sample, so D = D' = that sample and R = max(1, 1 // 2) = 1.
    # inner: grad f(2) = 1          -> w' = 2 - 0.1 * 1 = 1.9
    # outer: grad f(w') = 0.9       -> w = 2 - 0.5 * 0.9 = 1.55
    # personalised: one step from w^t = 2 at alpha -> 1.9; two steps: 1.9 - 0.1 * 0.9 = 1.81
    model = linear(0.0)
    x, y = one_sample()
    start = {"weight": torch.tensor([[2.0]])}
    out = program(PerFedAvg(model, PerFedAvgOptions(beta=0.5)).client_half(), model, SPEC, start, lr=0.1, x=x, y=y)  # type: ignore[arg-type]
    close(out.params["weight"], 1.55)
    assert out.personal is not None
    close(out.personal["weight"], 1.9)
    assert out.num_steps == 1 and out.train_loss == pytest.approx(0.5)  # f(2) = 1/2 (2 - 1)^2
    two = program(PerFedAvg(model, PerFedAvgOptions(beta=0.5, adapt_steps=2)).client_half(), model, SPEC, start, lr=0.1, x=x, y=y)  # type: ignore[arg-type]
    assert two.personal is not None
    close(two.personal["weight"], 1.81)
    none = program(PerFedAvg(model, PerFedAvgOptions(beta=0.5, adapt_steps=0)).client_half(), model, SPEC, start, lr=0.1, x=x, y=y)  # type: ignore[arg-type]
    assert none.personal is not None and torch.equal(none.personal["weight"], start["weight"])  # w^t itself


def test_hessian_free_meta_step_by_hand() -> None:
    # As above, plus the Hessian term: f'' = 1, so H g = g = 0.9, and the finite difference is exact on a quadratic:
    # grad f(w + delta g) - grad f(w - delta g) = 2 delta g = 0.018 (delta = 0.01)  ->  H g ~ 0.018 / 0.02 = 0.9
    # w <- w - beta (g - alpha H g) = 2 - 0.5 * (0.9 - 0.1 * 0.9) = 2 - 0.405 = 1.595
    # alpha = 0.2 given explicitly: w' = 1.8, g = 0.8, w = 2 - 0.5 * (0.8 - 0.2 * 0.8) = 2 - 0.32 = 1.68
    model = linear(0.0)
    x, y = one_sample()
    start = {"weight": torch.tensor([[2.0]])}
    out = program(PerFedAvg(model, PerFedAvgOptions(variant="hf", beta=0.5, delta=0.01)).client_half(), model, SPEC, start, lr=0.1, x=x, y=y)  # type: ignore[arg-type]
    close(out.params["weight"], 1.595, atol=1e-5)
    own = program(PerFedAvg(model, PerFedAvgOptions(variant="hf", alpha=0.2, beta=0.5, delta=0.01)).client_half(), model, SPEC, start, lr=0.1, x=x, y=y)  # type: ignore[arg-type]
    close(own.params["weight"], 1.68, atol=1e-5)
    assert own.personal is not None
    close(own.personal["weight"], 1.8)  # adapted at alpha = 0.2: 2 - 0.2 * 1


def test_steps_take_two_or_three_batches() -> None:
    # 10 samples, batch 2: 5 batches an epoch -> FO: 5 // 2 = 2 meta steps, HF: 5 // 3 = 1; 1 sample: 1 step (wraps round)
    model = linear(0.0)
    x, y = torch.ones(10, 1), torch.zeros(10, dtype=torch.long)
    spec = LocalSpec(epochs=1, batch_size=2, base_loss=half_mse)
    start = {"weight": torch.tensor([[2.0]])}
    fo = program(PerFedAvg(model).client_half(), model, spec, start, lr=0.1, x=x, y=y)  # type: ignore[arg-type]
    hf = program(PerFedAvg(model, PerFedAvgOptions(variant="hf")).client_half(), model, spec, start, lr=0.1, x=x, y=y)  # type: ignore[arg-type]
    assert (fo.num_steps, hf.num_steps) == (2, 1)


def test_local_accuracy_measures_the_adapted_global_model() -> None:
    # W (2x1) at w^t = (2, 0), x = 1, f = 1/2 sum_j (W_j - 1)^2: grad = (1, -1).
    # personalised: w^t - 0.1 (1, -1) = (1.9, 0.1)                        -> class 0 (the label): local_acc 1
    # uploaded: w' = (1.9, 0.1), grad f(w') = (0.9, -0.9), beta = 2: w^t - 2 (0.9, -0.9) = (0.2, 1.8) -> class 1
    model = linear(0.0, 0.0)
    x, y = one_sample()
    half = PerFedAvg(model, PerFedAvgOptions(beta=2.0)).client_half()
    reply = client_reply(half, model, SPEC, {"weight": torch.tensor([[2.0], [0.0]])}, lr=0.1, x=x, y=y, x_eval=x, y_eval=y)
    close(reply.uplink.params["weight"], 0.2, 1.8, atol=1e-5)
    assert reply.local_acc == 1.0
    _, loss = evaluate(model, {"weight": torch.tensor([[1.9], [0.1]])}, x, y)
    assert reply.local_loss == pytest.approx(loss, rel=1e-5)
    assert evaluate(model, reply.uplink.params, x, y)[0] == 0.0
    assert reply.state is None  # nothing kept between rounds


def test_first_order_step_uses_two_different_batches_by_hand() -> None:
    # Rows x = (1, 2, 1, 2), batch 2, one epoch: two batches, so R = 2 // 2 = 1 FO step with D, D' those two batches.
    # f(theta; x) = 1/2 (theta x - 1)^2, grad = x (theta x - 1), each averaged over the batch; w = 2, alpha = 0.1,
    # beta = 0.1. train_loss = f(w; D) tells which rows D holds (the client's batch order at seed 0 is rows {0, 2}
    # then {1, 3}: the first case):
    # D = {1, 1}, D' = {2, 2}: f = 1/2 (2 - 1)^2 = 0.5; grad 1 -> w' = 1.9; grad f(1.9; 2) = 2 (3.8 - 1) = 5.6 -> w = 2 - 0.56 = 1.44
    # D = {2, 2}, D' = {1, 1}: f = 1/2 (4 - 1)^2 = 4.5; grad 6 -> w' = 1.4; grad f(1.4; 1) = 0.4 -> w = 2 - 0.04 = 1.96
    # D = D' = {1, 2}: f = (0.5 + 4.5) / 2 = 2.5; grad (1 + 6) / 2 = 3.5 -> w' = 1.65; grad (0.65 + 2 * 2.3) / 2 = 2.625 -> w = 1.7375
    # In the first case: the outer step taken from w' gives 1.34, D' = D gives 1.91, a flipped sign 2.56.
    model = linear(0.0)
    x, y = torch.tensor([[1.0], [2.0], [1.0], [2.0]]), torch.zeros(4, dtype=torch.long)
    spec = LocalSpec(epochs=1, batch_size=2, base_loss=half_mse)
    out = program(PerFedAvg(model, PerFedAvgOptions(beta=0.1)).client_half(), model, spec, {"weight": torch.tensor([[2.0]])}, lr=0.1, x=x, y=y)  # type: ignore[arg-type]
    assert out.num_steps == 1
    expected = {0.5: 1.44, 4.5: 1.96, 2.5: 1.7375}[round(out.train_loss, 4)]
    close(out.params["weight"], expected, atol=1e-5)


def test_first_order_climbs_where_alpha_times_curvature_exceeds_one_by_hand() -> None:
    # Why FO diverges at alpha = lr = 0.1 on the digits CNN (docs/personalised.md): one sample x = 2, so
    # f(theta) = 1/2 (2 theta - 1)^2 has curvature lambda = 4 and minimum 0.5; alpha = 0.5 (alpha lambda = 2 > 1), beta = 0.1.
    # w = 2: grad 2 (4 - 1) = 6 -> w' = 2 - 3 = -1 (past the minimum); g = grad f(-1) = 2 (-2 - 1) = -6.
    # FO: w = 2 - 0.1 (-6) = 2.6: the distance to 0.5 grows 1.5 -> 2.1, factor 1 - beta lambda (1 - alpha lambda) = 1.4.
    # HF: H g = 4 (-6) = -24 (exact on a quadratic); w = 2 - 0.1 (-6 - 0.5 (-24)) = 2 - 0.6 = 1.4: factor 1 - beta lambda (1 - alpha lambda)^2 = 0.6.
    model = linear(0.0)
    x, y = torch.tensor([[2.0]]), torch.zeros(1, dtype=torch.long)
    start = {"weight": torch.tensor([[2.0]])}
    fo = program(PerFedAvg(model, PerFedAvgOptions(alpha=0.5, beta=0.1)).client_half(), model, SPEC, start, lr=0.1, x=x, y=y)  # type: ignore[arg-type]
    hf = program(PerFedAvg(model, PerFedAvgOptions(variant="hf", alpha=0.5, beta=0.1, delta=0.01)).client_half(), model, SPEC, start, lr=0.1, x=x, y=y)  # type: ignore[arg-type]
    close(fo.params["weight"], 2.6, atol=1e-5)
    close(hf.params["weight"], 1.4, atol=1e-4)


def two_layer(x: torch.Tensor, p: dict[str, torch.Tensor]) -> torch.Tensor:
    """The reference's forward: Linear(3, 4) then Linear(4, 3), written out (nn.Sequential's names)."""
    return (x @ p["0.weight"].T + p["0.bias"]) @ p["1.weight"].T + p["1.bias"]


def reference_grad(p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, wd: float) -> dict[str, torch.Tensor]:
    """grad of mean CE + wd/2 |p|^2 (weight decay as part of f_i), by autograd."""
    q = {k: v.detach().clone().requires_grad_() for k, v in p.items()}
    loss = nn.functional.cross_entropy(two_layer(x, q), y) + 0.5 * wd * sum((v * v).sum() for v in q.values())
    return dict(zip(q, torch.autograd.grad(loss, list(q.values()))))


def reference_perfedavg(w: dict[str, torch.Tensor], batches: list[tuple[torch.Tensor, torch.Tensor]], *, hf: bool,
                        alpha: float, beta: float, delta: float, wd: float) -> dict[str, torch.Tensor]:
    """Fallah et al.'s Algorithm 1 on one client, written from the paper, in float64: each local step takes fresh D, D' (, D'')
    and sets w <- w - beta (I - alpha H(w; D'')) grad f(w - alpha grad f(w; D); D'), H g by the finite difference (HF),
    or w <- w - beta grad f(w - alpha grad f(w; D); D') (FO)."""
    per = 3 if hf else 2
    for r in range(len(batches) // per):
        (x1, y1), (x2, y2) = batches[per * r], batches[per * r + 1]
        g_in = reference_grad(w, x1, y1, wd)
        g = reference_grad({k: w[k] - alpha * g_in[k] for k in w}, x2, y2, wd)
        if hf:
            x3, y3 = batches[per * r + 2]
            up = reference_grad({k: w[k] + delta * g[k] for k in w}, x3, y3, wd)
            down = reference_grad({k: w[k] - delta * g[k] for k in w}, x3, y3, wd)
            g = {k: g[k] - alpha * (up[k] - down[k]) / (2 * delta) for k in w}
        w = {k: w[k] - beta * g[k] for k in w}
    return w


@pytest.mark.parametrize(("variant", "wd"), [("fo", 0.0), ("hf", 0.0), ("fo", 0.05), ("hf", 0.05)])
def test_client_update_matches_an_independent_reference(variant: str, wd: float) -> None:
    """The real client's uplink and personal model against :func:`reference_perfedavg` on the same batches.

    24 hand-made rows, batch 4, one epoch: six batches of the client's batch order, so FO makes 3 steps, HF 2
    (each step's batches distinct, w carried from step to step). A two-layer linear model under cross-entropy has
    a Hessian that varies with w, so probing at w' instead of w, or on the wrong batch, shows.
    """
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 3))
    i = torch.arange(24.0)
    x = torch.stack([(i % 5 - 2) / 2, (i * 7 % 11 - 5) / 5, torch.cos(i)], dim=1)
    y = (i * 5 % 3).long()
    start = {k: (0.5 * torch.sin(torch.arange(v.numel()) * 1.3 + n)).view_as(v) for n, (k, v) in enumerate(model.named_parameters())}
    alpha, beta, delta = 0.3, 0.2, 1e-3
    spec = LocalSpec(epochs=1, batch_size=4, weight_decay=wd)
    half = PerFedAvg(model, PerFedAvgOptions(variant=variant, beta=beta, delta=delta)).client_half()  # type: ignore[arg-type]
    reply = client_reply(half, model, spec, start, lr=alpha, x=x, y=y, x_eval=x, y_eval=y)  # alpha = the round's lr
    # The client's batch order (the documented one: its seed-0 order over client.epochs) and the adaptation batch.
    order = batch_order(24, 4, 1, torch.Generator().manual_seed(derive_seed(0, "perfedavg")))
    assert len(order) == 6 and reply.uplink.num_steps == (2 if variant == "hf" else 3)
    x64 = x.double()
    want = reference_perfedavg({k: v.double() for k, v in start.items()}, [(x64[b], y[b]) for b in order],
                               hf=variant == "hf", alpha=alpha, beta=beta, delta=delta, wd=wd)
    for k, v in want.items():
        torch.testing.assert_close(reply.uplink.params[k].double(), v, atol=2e-5, rtol=1e-4)  # the server gets w, not w'
    adapt = batch_order(24, 4, 1, torch.Generator().manual_seed(derive_seed(0, "perfedavg-adapt")))[0]
    assert not torch.equal(adapt, order[0])  # its own stream (before, one 4-byte key: the first training batch)
    g = reference_grad({k: v.double() for k, v in start.items()}, x64[adapt], y[adapt], wd)
    personal = {k: (start[k].double() - alpha * g[k]).float() for k in start}  # w^t - alpha grad f(w^t; D)
    _, loss = evaluate(model, personal, x, y)
    assert reply.local_loss == pytest.approx(loss, rel=1e-4)


@pytest.mark.parametrize(("key", "value"), [("beta", 0.0), ("alpha", -1.0), ("delta", 0.0), ("adapt_steps", -1), ("variant", "so")])
def test_bad_options_name_the_field(key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"algorithm.{key}"):
        parse_options(PerFedAvgOptions, {key: value}, "algorithm")


@pytest.mark.parametrize("variant", ["fo", "hf"])
def test_under_every_executor(variant: str) -> None:
    """sequential == processes bitwise, vectorized within rounding; local accuracy is the adapted model's, not FedAvg's clients'."""
    from methods_e2e import assert_executors_agree, config, records

    cfg = config(**{"algorithm.name": "perfedavg", "algorithm.variant": variant, "federation.rounds": 2, "model.name": "mlp"})
    seq = assert_executors_agree(cfg)
    assert all(r["local_acc"] is not None for r in seq)
    assert seq[-1]["local_loss"] != records(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))[-1]["local_loss"]


@pytest.mark.parametrize(("override", "field"), [
    ({"client.optimizer": "adam"}, "client.optimizer"),
    ({"client.momentum": 0.9}, "client.momentum"),
    ({"client.momentum": 0.9, "client.nesterov": True}, "client.momentum"),
    ({"client.clip_norm": 0.5}, "client.clip_norm"),
    ({"client.sam_rho": 0.05}, "client.sam_rho"),
    ({"client.lr_schedule": "cosine", "client.lr_schedule_over": "steps"}, "client.lr_schedule_over"),
])
def test_client_optimiser_settings_the_meta_steps_never_run_are_refused(override: dict, field: str) -> None:
    """They were accepted and ignored: the six runs' models were bitwise the plain SGD run's."""
    with pytest.raises(ConfigError) as err:
        build_experiment(config(**{"algorithm.name": "perfedavg", **override}))
    assert err.value.field == field


def test_a_schedule_over_rounds_and_weight_decay_are_taken() -> None:
    build_experiment(config(**{"algorithm.name": "perfedavg", "client.lr_schedule": "step", "client.lr_gamma": 0.5, "client.weight_decay": 1e-3}))

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
from chillfl.executors.sequential import train_job
from chillfl.options import parse_options
from chillfl.protocols.parameters import ParamDownlink, ParameterClient
from chillfl.seeds import derive_seed
from chillfl.training.local import LocalSpec, evaluate


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

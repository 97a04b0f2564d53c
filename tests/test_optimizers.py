"""Client optimisers and schedules (``[client] optimizer``, ``clip_norm``, ``lr_schedule``): hand-checked steps,
``torch.optim`` on the same steps, every executor, and the config errors."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.executors.sequential import ClientJob, SequentialExecutor
from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.runner import run_experiment
from chillfl.training.local import LocalSpec, batch_order, model_state, optimizer_step_, train_client
from chillfl.training.optim import clip_by_norm_, init_state
from chillfl.training.schedule import LrSchedule, Optimizer, planned_steps
from lent_pools import pools

DEMO = "src/chillfl/experiments/demo.toml"


def _step(name: str, params: dict[str, torch.Tensor], grads: list[torch.Tensor], steps: int, *, lr: float = 0.1, momentum: float = 0.0,
          weight_decay: float = 0.0, **optim: Any) -> dict[str, torch.Tensor]:
    """``steps`` updates of ``params`` (copies) with the same gradients each step, by :func:`optimizer_step_`."""
    spec = LocalSpec(epochs=1, batch_size=1, momentum=momentum, weight_decay=weight_decay, optim=Optimizer(name, **optim))
    p = {k: v.clone() for k, v in params.items()}
    state = init_state(p, spec.optim, momentum)
    for s in range(steps):
        optimizer_step_(p, [g.clone() for g in grads], state, lr, spec, step=s)
    return p


def test_adam_first_two_steps_by_hand() -> None:
    # w = 1, g = 0.5 then 0.25, lr = 0.1, b = (0.9, 0.999), eps = 1e-8
    # step 1: m = 0.05, v = 0.00025; m/(1-0.9) = 0.5, sqrt(v/(1-0.999)) = 0.5 -> w = 1 - 0.1 * 0.5 / (0.5 + 1e-8)
    w1 = 1 - 0.1 * 0.5 / (0.5 + 1e-8)
    # step 2: m = 0.9*0.05 + 0.1*0.25 = 0.07, v = 0.999*0.00025 + 0.001*0.0625 = 0.00031225
    m, v = 0.07, 0.00031225
    w2 = w1 - 0.1 * (m / (1 - 0.9**2)) / (math.sqrt(v / (1 - 0.999**2)) + 1e-8)
    spec = LocalSpec(epochs=1, batch_size=1, optim=Optimizer("adam"))
    p = {"w": torch.tensor([1.0], dtype=torch.float64)}
    state = init_state(p, spec.optim, 0.0)
    optimizer_step_(p, [torch.tensor([0.5], dtype=torch.float64)], state, 0.1, spec, step=0)
    assert p["w"].item() == pytest.approx(w1, rel=1e-14)
    optimizer_step_(p, [torch.tensor([0.25], dtype=torch.float64)], state, 0.1, spec, step=1)
    assert p["w"].item() == pytest.approx(w2, rel=1e-14)


def test_adamw_decays_the_weight_before_the_adam_step_and_adam_adds_l2_to_the_gradient() -> None:
    p, g = {"w": torch.tensor([2.0], dtype=torch.float64)}, [torch.tensor([0.5], dtype=torch.float64)]
    # AdamW: w <- 2 (1 - 0.1 * 0.1) = 1.98, then the Adam step of g = 0.5: - 0.1 * 0.5 / (0.5 + 1e-8)
    assert _step("adamw", p, g, 1, weight_decay=0.1)["w"].item() == pytest.approx(1.98 - 0.1 * 0.5 / (0.5 + 1e-8), rel=1e-14)
    # Adam: g <- 0.5 + 0.1 * 2 = 0.7; first step is lr * g / (|g| + eps)
    assert _step("adam", p, g, 1, weight_decay=0.1)["w"].item() == pytest.approx(2 - 0.1 * 0.7 / (0.7 + 1e-8), rel=1e-14)


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw"])
def test_weight_decay_skips_the_specs_no_decay_parameters(name: str) -> None:
    # w = 2, a = 2, both with gradient 0 and weight decay 0.1 at lr 0.1; a is in no_decay, so nothing moves it
    spec = LocalSpec(epochs=1, batch_size=1, weight_decay=0.1, optim=Optimizer(name), no_decay=frozenset({"a"}))
    p = {"w": torch.tensor([2.0], dtype=torch.float64), "a": torch.tensor([2.0], dtype=torch.float64)}
    optimizer_step_(p, [torch.zeros(1, dtype=torch.float64)] * 2, init_state(p, spec.optim, 0.0), 0.1, spec, step=0)
    assert p["a"].item() == 2.0
    # w decays: SGD 2 - 0.1 * 0.2 = 1.98; AdamW 2 (1 - 0.01) = 1.98; Adam's first step of g = 0.2: 2 - 0.1 * 0.2 / (0.2 + 1e-8)
    assert p["w"].item() == pytest.approx(2 - 0.1 * 0.2 / (0.2 + 1e-8) if name == "adam" else 1.98, rel=1e-14)


def test_sgd_nesterov_two_steps_by_hand() -> None:
    # g = 1 both steps, momentum 0.5, lr 0.1: b1 = 1, step g + 0.5 b1 = 1.5; b2 = 1.5, step 1 + 0.75 = 1.75
    out = _step("sgd", {"w": torch.tensor([0.0], dtype=torch.float64)}, [torch.tensor([1.0], dtype=torch.float64)], 2, momentum=0.5, nesterov=True)
    assert out["w"].item() == pytest.approx(-0.1 * (1.5 + 1.75), rel=1e-14)


CASES = [
    ("sgd", dict(momentum=0.9, nesterov=True, weight_decay=0.01), lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("sgd", dict(momentum=0.5, weight_decay=0.0), lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.5)),
    ("adam", dict(weight_decay=0.01, betas=(0.8, 0.99), eps=1e-6), lambda ps: torch.optim.Adam(ps, lr=0.1, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.01, foreach=False)),
    ("adamw", dict(weight_decay=0.05), lambda ps: torch.optim.AdamW(ps, lr=0.1, weight_decay=0.05, foreach=False)),
]


@pytest.mark.parametrize("name,kw,make", CASES)
def test_matches_torch_optim_step_for_step(name: str, kw: dict[str, Any], make: Any) -> None:
    """Five steps on random gradients equal ``torch.optim``'s single-tensor implementation (the same ops, so the same bits)."""
    gen = torch.Generator().manual_seed(0)
    params = {"a": torch.randn(3, 4, generator=gen), "b": torch.randn(4, generator=gen)}
    grads = [[torch.randn(3, 4, generator=gen), torch.randn(4, generator=gen)] for _ in range(5)]
    kw = dict(kw)
    momentum, weight_decay = kw.pop("momentum", 0.0), kw.pop("weight_decay", 0.0)
    spec = LocalSpec(epochs=1, batch_size=1, momentum=momentum, weight_decay=weight_decay, optim=Optimizer(name, **kw))
    ours = {k: v.clone() for k, v in params.items()}
    state = init_state(ours, spec.optim, momentum)
    theirs = [nn.Parameter(v.clone()) for v in params.values()]
    opt = make(theirs)
    for s, g in enumerate(grads):
        optimizer_step_(ours, [t.clone() for t in g], state, 0.1, spec, step=s)
        for p, t in zip(theirs, g):
            p.grad = t.clone()
        opt.step()
    for (k, mine), ref in zip(ours.items(), theirs):
        assert torch.equal(mine, ref.detach()), k


def test_clipping_matches_clip_grad_norm_and_is_per_client_when_stacked() -> None:
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(3, 5, generator=gen) * 4, torch.randn(5, generator=gen)]
    ref = [nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(ref, grads):
        p.grad = g.clone()
    torch.nn.utils.clip_grad_norm_(ref, 1.5)
    mine = [g.clone() for g in grads]
    clip_by_norm_(mine, 1.5, stacked=False)
    for a, p in zip(mine, ref):
        torch.testing.assert_close(a, p.grad, rtol=1e-6, atol=0)
    # stacked: client 0 is clipped to norm 1.5, client 1 (norm 0.3 < 1.5) is untouched
    stacked = [torch.stack([grads[0], torch.full((3, 5), 0.01)]), torch.stack([grads[1], torch.full((5,), 0.1)])]
    clip_by_norm_(stacked, 1.5, stacked=True)
    for a, s in zip(mine, stacked):
        torch.testing.assert_close(s[0], a, rtol=1e-6, atol=0)
    assert torch.equal(stacked[0][1], torch.full((3, 5), 0.01)) and torch.equal(stacked[1][1], torch.full((5,), 0.1))
    norm = math.sqrt(sum(float(s[0].pow(2).sum()) for s in stacked))
    assert norm == pytest.approx(1.5, rel=1e-5)


def test_schedules_match_torch_lr_schedulers() -> None:
    p = [nn.Parameter(torch.zeros(1))]
    for schedule, make in [
        (LrSchedule("step", step_size=3, gamma=0.5), lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)),
        (LrSchedule("cosine", min_factor=0.1), lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=10, eta_min=0.02)),
    ]:
        opt = torch.optim.SGD(p, lr=0.2)
        sched = make(opt)
        for t in range(10):
            assert 0.2 * schedule.factor(t, 10) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-12, abs=1e-15), (schedule.name, t)
            opt.step()
            sched.step()
    # hand values: cosine at t = 5 of 10 is halfway, (lr + lr_min) / 2; step halves every 3
    assert LrSchedule("cosine", min_factor=0.1).factor(5, 10) == pytest.approx(0.55)
    assert [LrSchedule("step", 3, 0.5).factor(t, 10) for t in (0, 2, 3, 6)] == [1.0, 1.0, 0.5, 0.25]


def test_round_schedule_in_the_config() -> None:
    cfg = load_config(None, {"federation.rounds": 4, "client.lr": 0.1, "client.lr_schedule": "cosine", "client.lr_min": 0.02})
    assert [cfg.lr_at(t) for t in range(4)] == pytest.approx([0.1, 0.02 + 0.08 * (1 + math.cos(math.pi / 4)) / 2, 0.06, 0.02 + 0.08 * (1 + math.cos(3 * math.pi / 4)) / 2])
    step = load_config(None, {"client.lr": 0.1, "client.lr_decay": 0.5, "client.lr_schedule": "step", "client.lr_step_size": 2, "client.lr_gamma": 0.1})
    assert [step.lr_at(t) for t in range(4)] == pytest.approx([0.1, 0.05, 0.1 * 0.25 * 0.1, 0.1 * 0.125 * 0.1])
    assert load_config(None, {"client.lr_schedule": "cosine", "client.lr_schedule_over": "steps"}).lr_at(3) == 0.01  # the round lr is untouched


def test_train_client_equals_a_torch_optim_loop_with_a_cosine_over_local_steps() -> None:
    """One client's local training (Adam, cosine over its planned steps, clipping) is the plain nn.Module +
    torch.optim + CosineAnnealingLR + clip_grad_norm_ loop on the same batches, up to float rounding."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    start = model_state(model)
    gen = torch.Generator().manual_seed(2)
    x, y = torch.randn(23, 6, generator=gen), torch.randint(0, 3, (23,), generator=gen)
    optim = Optimizer("adamw", clip_norm=0.5, step_schedule=LrSchedule("cosine", min_factor=0.1))
    spec = LocalSpec(epochs=2, batch_size=5, weight_decay=0.01, optim=optim)
    out = train_client(model, start, x, y, spec=spec, lr=0.05, temperature=0.5, context={}, generator=torch.Generator().manual_seed(7))

    ref = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    ref.load_state_dict(start)
    total = planned_steps(23, 5, 2)
    opt = torch.optim.AdamW(ref.parameters(), lr=0.05, weight_decay=0.01, foreach=False)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total, eta_min=0.005)
    order = batch_order(23, 5, 2, torch.Generator().manual_seed(7))
    assert len(order) == total == out.num_steps == 10  # 23 samples in batches of 5: 5 a epoch (the 3 last are a batch)
    for idx in order:
        opt.zero_grad()
        nn.functional.cross_entropy(ref(x[idx]) / 0.5, y[idx]).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        opt.step()
        sched.step()
    for k, v in ref.state_dict().items():
        torch.testing.assert_close(out.params[k], v, rtol=1e-5, atol=1e-6)


def _jobs(model: nn.Module) -> list[ClientJob]:
    start = model_state(model)
    gen = torch.Generator().manual_seed(3)
    jobs = []
    for c, n in enumerate([37, 20, 5, 16, 29]):  # unequal sizes: unequal planned steps, so per-client scheduled rates
        x, y = torch.randn(n, 12, generator=gen), torch.randint(0, 5, (n,), generator=gen)
        jobs.append(ClientJob(c, start, x, y, 0.05 * (1 + c / 4), 1.0, {}, 1000 + c))
    return jobs


@pytest.mark.parametrize("optim,momentum", [
    (Optimizer("adam", clip_norm=1.0, step_schedule=LrSchedule("cosine", min_factor=0.1)), 0.0),
    (Optimizer("adamw", step_schedule=LrSchedule("step", step_size=2, gamma=0.5)), 0.0),
    (Optimizer("sgd", nesterov=True, clip_norm=0.5, step_schedule=LrSchedule("cosine")), 0.9),
])
def test_vectorized_equals_sequential_up_to_rounding(optim: Optimizer, momentum: float) -> None:
    """The vmapped step keeps every client's optimiser state and scheduled rate; results agree to float rounding.

    Tolerance: these steps are fp32 sums of a few dozen terms, whose order differs between a batched and a
    per-client kernel (about 1e-7 relative a step); 10 steps stay well inside 1e-5. (An MLP: no coordinate
    has an exactly-zero true gradient, which Adam's normalised step would turn into lr-sized noise.)
    """
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 5))
    spec = LocalSpec(epochs=2, batch_size=8, momentum=momentum, weight_decay=1e-2, optim=optim)
    jobs = _jobs(model)
    ref = SequentialExecutor(model, spec).run(jobs)
    for chunk in (None, 2):
        got = VectorizedExecutor(model, spec, chunk_size=chunk).run(jobs)
        for a, b in zip(ref, got, strict=True):
            assert a.num_steps == b.num_steps
            assert b.mean_loss == pytest.approx(a.mean_loss, rel=1e-5)
            for k in a.params:
                torch.testing.assert_close(b.params[k], a.params[k], rtol=1e-5, atol=1e-5)


def _demo(optimizer: str, executor: str, over: str) -> list[dict[str, Any]]:
    overrides = {
        "executor": executor, "federation.num_clients": 6, "federation.clients_per_round": 3, "federation.rounds": 2,
        "eval.validation": 0.0, "client.epochs": 1, "client.optimizer": optimizer, "client.lr": 0.003,
        "client.weight_decay": 0.01, "client.lr_schedule": "cosine", "client.lr_schedule_over": over,
    }
    return run_experiment(load_config(DEMO, overrides), write=False, progress=False, pools=pools()).records  # workers lent (lent_pools)


@pytest.mark.slow  # the demo's data under every executor, twice: minutes; `pytest -m "not slow"` leaves it out
@pytest.mark.parametrize("optimizer,over", [("adam", "steps"), ("adamw", "rounds")])
def test_demo_trains_with_adam_and_adamw_under_every_executor(optimizer: str, over: str) -> None:
    """The demo's digits setup with Adam / AdamW and a cosine schedule: processes is bitwise sequential; vectorized agrees
    on round 1 (every client starts from the same model) to float rounding, and stays close after."""
    seq = _demo(optimizer, "sequential", over)
    assert len(seq) == 2 and seq[-1]["train_loss"] < seq[0]["train_loss"] * 1.5 and math.isfinite(seq[-1]["global_acc"])
    assert _demo(optimizer, "processes", over) == seq
    vec = _demo(optimizer, "vectorized", over)
    assert vec[0]["train_loss"] == pytest.approx(seq[0]["train_loss"], rel=1e-5)
    assert vec[-1]["train_loss"] == pytest.approx(seq[-1]["train_loss"], rel=1e-2)
    assert vec[-1]["global_acc"] == pytest.approx(seq[-1]["global_acc"], abs=0.03)  # ~10 of 359 test images


def test_defaults_keep_the_sgd_spec() -> None:
    exp = build_experiment(load_config(None, {"dataset.name": "digits", "model.name": "mlp"}))
    assert exp.spec.optim == Optimizer() and not exp.spec.optim.dense


@pytest.mark.parametrize("overrides,field", [
    ({"client.optimizer": "adam", "client.momentum": 0.9}, "client.momentum"),
    ({"client.nesterov": True}, "client.nesterov"),
    ({"client.beta1": 0.8}, "client.beta1"),
    ({"client.optimizer": "adam", "client.beta2": 1.0}, "client.beta2"),
    ({"client.optimizer": "rmsprop"}, "client.optimizer"),
    ({"client.lr_schedule": "cosine", "client.lr_min": 0.5}, "client.lr_min"),
    ({"client.lr_min": -0.1}, "client.lr_min"),
    ({"client.clip_norm": -1.0}, "client.clip_norm"),
])
def test_bad_optimizer_settings_name_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert err.value.field == field


@pytest.mark.parametrize("algorithm,overrides,field", [
    ("scaffold", {"client.optimizer": "adam"}, "client.optimizer"),
    ("fednova", {"client.momentum": 0.5, "client.nesterov": True}, "client.nesterov"),
    ("vrl_sgd", {"client.lr_schedule": "cosine", "client.lr_schedule_over": "steps"}, "client.lr_schedule_over"),
])
def test_methods_that_assume_sgd_steps_refuse_other_optimisers(algorithm: str, overrides: dict[str, Any], field: str) -> None:
    cfg = load_config(None, {"dataset.name": "digits", "model.name": "mlp", "algorithm.name": algorithm, **overrides})
    with pytest.raises(ConfigError) as err:
        build_experiment(cfg)
    assert err.value.field == field
    # PA3Fed over SCAFFOLD: the same check on its base
    pa3 = load_config(None, {"dataset.name": "digits", "model.name": "mlp", "algorithm.name": "pa3fed", "algorithm.base": algorithm, **overrides})
    with pytest.raises(ConfigError):
        build_experiment(pa3)
    # a schedule over rounds keeps one lr for a round's steps: allowed
    build_experiment(load_config(None, {"dataset.name": "digits", "model.name": "mlp", "algorithm.name": algorithm, "client.lr_schedule": "cosine"}))


def test_cli_reports_an_optimizer_mismatch_in_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    code = main(["run", DEMO, "algorithm.name=scaffold", "client.optimizer=adamw", f"out_dir={tmp_path}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "client.optimizer" in err[0] and "SGD" in err[0]
    assert not any(tmp_path.iterdir())


def test_lr_min_above_lr_is_no_clash_where_the_schedule_never_reads_it() -> None:
    """Only cosine anneals to lr_min: under another schedule a tuned lr below it was refused though nothing reads it."""
    cfg = load_config(None, {"client.lr": 0.001, "client.lr_min": 0.005, "client.lr_schedule": "step"})
    assert cfg.client.lr_min == 0.005

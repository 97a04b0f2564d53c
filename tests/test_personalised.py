"""The personalised family (Ditto, FedRep, FedPer, APFL, pFedMe) and FedDyn: formulas on hand-worked values, run
through the real client update (:class:`ParameterClient`), the server rules, every executor, and resume.

The hand-worked cases use one-weight linear models and the loss f(theta) = 1/2 (theta x - 1)^2 (``half_mse``,
which ignores the labels), so that every gradient is a line of arithmetic in the comments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from chillfl.aggregation.apfl import APFL, APFLOptions
from chillfl.aggregation.base import ClientHalf, ClientResult, ClientState, Personalising, personal_model
from chillfl.aggregation.ditto import Ditto, DittoOptions
from chillfl.aggregation.feddyn import ALPHA, ANCHOR, LINEAR, FedDyn, FedDynOptions, client_alphas, feddyn_terms
from chillfl.aggregation.registry import make_aggregator
from chillfl.aggregation.fedper import FedPer, FedPerOptions, head_keys
from chillfl.aggregation.fedrep import FedRep, FedRepOptions
from chillfl.aggregation.pfedme import PFedMe, PFedMeOptions
from chillfl.executors.sequential import train_job
from chillfl.engine.protocol import ClientData, ClientReply, ClientTask, drive
from chillfl.errors import ConfigError
from chillfl.executors.sequential import SequentialExecutor
from chillfl.engine.protocol import ClientJob
from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.models import build_model
from chillfl.models.parts import head_name
from chillfl.training.schedule import Optimizer
from chillfl.protocols.parameters import ParamDownlink, ParameterClient
from chillfl.training.local import LocalSpec, evaluate
import resume_cases
from test_nbfix_head_notes import head_notes
from chillfl.experiment import build_experiment
from methods_e2e import assert_executors_agree, config, records, resumed_records


def half_mse(logits: torch.Tensor, y: torch.Tensor, temperature: Any) -> torch.Tensor:
    """1/2 sum_j (z_j - 1)^2, averaged over the batch (labels unused)."""
    return 0.5 * ((logits - 1.0) ** 2).sum(-1).mean()


def linear(*shape: float) -> nn.Module:
    """A bias-free Linear(1, len(shape)) with the given weights."""
    layer = nn.Linear(1, len(shape), bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(shape).view(-1, 1))
    return layer


def run_client(
    half: ClientHalf | None,
    model: nn.Module,
    spec: LocalSpec,
    start: dict[str, torch.Tensor],
    *,
    lr: float,
    state: ClientState | None = None,
    context: dict[str, Any] | None = None,
    x: torch.Tensor | None = None,
    x_eval: torch.Tensor | None = None,
    y_eval: torch.Tensor | None = None,
) -> ClientReply[Any, Any]:
    """One client update through ParameterClient, its jobs trained one after another (the sequential executor's path)."""
    trainer = half if isinstance(half, Personalising) else None
    client = ParameterClient(model, 64, half, trainer=trainer, spec=spec, objectives=() if trainer is None else trainer.objectives(spec))
    xs = torch.ones(1, 1) if x is None else x
    data = ClientData(xs, torch.zeros(len(xs), dtype=torch.long), x_eval, y_eval)
    task = ClientTask(0, 0, ParamDownlink(start, lr, 1.0, context or {}, seed=0), data, state)
    return drive([client.update(task)], lambda _spec, jobs: [train_job(model, spec, j) for j in jobs])[0]


def one_step(epochs: int = 1) -> LocalSpec:
    return LocalSpec(epochs=epochs, batch_size=8, base_loss=half_mse)


def close(actual: torch.Tensor, *expected: float) -> None:
    torch.testing.assert_close(actual.flatten(), torch.tensor(expected, dtype=actual.dtype))


# ---------------------------------------------------------------- frozen parameters


@pytest.mark.parametrize("optim", ["sgd", "adam"])
def test_frozen_parameters_stay_put_under_sequential_and_vectorized(optim: str) -> None:
    """LocalSpec.frozen: read by the step, never updated (no momentum, no weight decay, no Adam state), under both paths."""
    model = build_model("mlp", (6,), 3, {"hidden": [5]}, seed=0)
    frozen = frozenset(head_keys(model))
    spec = LocalSpec(epochs=2, batch_size=4, momentum=0.9, weight_decay=0.01, frozen=frozen, optim=Optimizer(name=optim))
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(0)
    jobs = [ClientJob(c, start, torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g), 0.1, 1.0, {}, 10 + c) for c, n in enumerate([9, 6])]
    seq = SequentialExecutor(model, spec).run(jobs)
    vec = VectorizedExecutor(model, spec).run(jobs)
    for a, b in zip(seq, vec):
        for k in start:
            if k in frozen:
                assert torch.equal(a.params[k], start[k]) and torch.equal(b.params[k], start[k]), k
            else:
                assert not torch.equal(a.params[k], start[k]), k
                torch.testing.assert_close(b.params[k], a.params[k], atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- Ditto


def test_ditto_global_and_regularised_personal_step_by_hand() -> None:
    # W (2x1) at w^t = (2, 0), x = 1, lr 0.1, lambda 1, one step each.
    # Global update: grad = W x - 1 = (1, -1)  ->  w = (1.9, 0.1)                       (uploaded)
    # Personal, from v = (0, 4): grad f = (-1, 3), lambda (v - w^t) = (-2, 4), sum (-3, 7) -> v = (0.3, 3.3)
    model = linear(2.0, 0.0)
    half = Ditto(DittoOptions(lam=1.0)).client_half()
    reply = run_client(half, model, one_step(), {"weight": torch.tensor([[2.0], [0.0]])}, lr=0.1,
                       state={"ditto.v.weight": torch.tensor([[0.0], [4.0]])}, x_eval=torch.ones(1, 1), y_eval=torch.zeros(1, dtype=torch.long))
    close(reply.uplink.params["weight"], 1.9, 0.1)
    close(reply.state["ditto.v.weight"], 0.3, 3.3)
    # local accuracy is v's: logits (0.3, 3.3) on x = 1 say class 1, the label is 0 (w's (1.9, 0.1) would be right)
    assert reply.local_acc == 0.0
    assert evaluate(model, reply.uplink.params, torch.ones(1, 1), torch.zeros(1, dtype=torch.long))[0] == 1.0


def test_ditto_first_participation_starts_v_from_the_global_model() -> None:
    # no v yet: v starts at w^t = (2, 0), where the proximal term is zero -> the same step as the global update
    reply = run_client(Ditto().client_half(), linear(0, 0), one_step(), {"weight": torch.tensor([[2.0], [0.0]])}, lr=0.1)
    close(reply.state["ditto.v.weight"], 1.9, 0.1)


# ---------------------------------------------------------------- FedRep / FedPer


def two_layers(a: float, b: float) -> nn.Module:
    """x -> b (a x): body weight ``0.weight`` = a, head ``1.weight`` = b."""
    model = nn.Sequential(nn.Linear(1, 1, bias=False), nn.Linear(1, 1, bias=False))
    with torch.no_grad():
        model[0].weight.fill_(a)
        model[1].weight.fill_(b)
    return model


def test_fedrep_trains_head_with_body_frozen_then_body_with_head_frozen() -> None:
    # a = 1 (body), b = 2 (head), x = 1, lr 0.1, f = 1/2 (b a - 1)^2.
    # Head, 2 epochs (a fixed): r = 1 -> b = 2 - 0.1 * 1 = 1.9; r = 0.9 -> b = 1.9 - 0.09 = 1.81.
    # Body, 1 epoch (b = 1.81 fixed): r = 0.81 -> grad_a = 0.81 * 1.81 = 1.4661 -> a = 0.85339.
    model = two_layers(1.0, 2.0)
    half = FedRep(model, FedRepOptions(head_epochs=2)).client_half()
    start = {"0.weight": torch.tensor([[1.0]]), "1.weight": torch.tensor([[2.0]])}
    reply = run_client(half, model, one_step(), start, lr=0.1)
    close(reply.uplink.params["1.weight"], 1.81)
    close(reply.uplink.params["0.weight"], 0.85339)
    assert reply.uplink.num_steps == 3
    # the reported loss: the mean over all three steps, 1/2 r^2 at r = 1, 0.9, 0.81: (0.5 + 0.405 + 0.32805) / 3
    assert reply.uplink.train_loss == pytest.approx((0.5 + 0.405 + 0.32805) / 3, rel=1e-5)
    assert set(reply.state) == {"fedrep.head.1.weight"}
    close(reply.state["fedrep.head.1.weight"], 1.81)
    # next round: its own head replaces the global one in its start; the head trains from 1.81 against the new body
    again = run_client(half, model, one_step(), {"0.weight": torch.tensor([[1.0]]), "1.weight": torch.tensor([[5.0]])}, lr=0.1, state=reply.state)
    # head: r = 0.81 -> b = 1.81 - 0.081 = 1.729; r = 0.729 -> b = 1.729 - 0.0729 = 1.6561
    close(again.uplink.params["1.weight"], 1.6561)


def test_fedrep_default_head_epochs_are_the_authors_scripts() -> None:
    # lgcollins/FedRep scripts/FedRep_*.sh: local_ep - local_rep_ep = 11 - 1 or 15 - 5 = 10 head epochs in every one
    assert FedRepOptions().head_epochs == 10


def test_fedper_and_fedrep_server_average_the_body_only() -> None:
    model = build_model("mlp", (6,), 3, {"hidden": [5]}, seed=0)
    keys = head_keys(model)
    assert keys == [f"{head_name(model)}.weight", f"{head_name(model)}.bias"]  # the classifier
    glob = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    a = {k: torch.full_like(v, 1.0) for k, v in glob.items()}
    b = {k: torch.full_like(v, 3.0) for k, v in glob.items()}
    results = [ClientResult(0, a, 10, 1, 0.1, 1.0, 0.0), ClientResult(1, b, 30, 1, 0.1, 1.0, 0.0)]
    for server in (FedPer(model), FedRep(model)):
        out = server.aggregate(glob, results, 0)
        for k in glob:
            assert torch.all(out[k] == 2.5), k  # n-weighted: (10 * 1 + 30 * 3) / 40, the head averaged for the global model only
    kept = FedPer(model, FedPerOptions(global_head="keep")).aggregate(glob, results, 0)
    assert all(torch.all(kept[k] == 0.0) for k in keys) and all(torch.all(kept[k] == 2.5) for k in glob if k not in keys)
    with pytest.raises(ValueError):
        head_keys(model, layers=3)  # the MLP has 2 linear layers: no base would be left


def test_fedper_client_keeps_its_head() -> None:
    model = two_layers(1.0, 2.0)
    half = FedPer(model).client_half()
    first = run_client(half, model, one_step(), {"0.weight": torch.tensor([[1.0]]), "1.weight": torch.tensor([[2.0]])}, lr=0.1)
    # joint step: r = 1, grad_a = r b = 2, grad_b = r a = 1 -> a = 0.8, b = 1.9
    close(first.uplink.params["0.weight"], 0.8)
    close(first.state["fedper.head.1.weight"], 1.9)
    start, _ = half.prepare(first.state, {"0.weight": torch.tensor([[0.5]]), "1.weight": torch.tensor([[7.0]])}, {})
    close(start["1.weight"], 1.9)
    close(start["0.weight"], 0.5)


# ---------------------------------------------------------------- APFL


def test_apfl_step_and_alpha_update_by_hand() -> None:
    # scalar model, x = 1, f(t) = 1/2 (t - 1)^2, lr 0.1; w = 2 (sent), v = 3, alpha = 0.5.
    # w: grad f(w) = 1                       -> w = 1.9
    # v_bar = 0.5 * 3 + 0.5 * 2 = 2.5, grad f(v_bar) = 1.5
    # v: alpha * 1.5 = 0.75                  -> v = 2.925
    # alpha: <v - w, grad f(v_bar)> = 1.5    -> alpha = 0.35
    # personal model: 0.35 * 2.925 + 0.65 * 1.9 = 2.25875
    model = linear(0.0)
    half = APFL(model).client_half()
    state = {"apfl.weight": torch.tensor([[3.0]]), "apfl.alpha": torch.tensor(0.5)}
    reply = run_client(half, model, one_step(), {"weight": torch.tensor([[2.0]])}, lr=0.1, state=state,
                       x_eval=torch.tensor([[1.0]]), y_eval=torch.zeros(1, dtype=torch.long))
    close(reply.uplink.params["weight"], 1.9)
    close(reply.state["apfl.weight"], 2.925)
    close(reply.state["apfl.alpha"], 0.35)
    assert set(reply.uplink.params) == {"weight"}


def test_apfl_weight_decay_decays_w_and_v_never_alpha() -> None:
    # the hand case above with client.weight_decay = 0.1 (added to each weight's gradient):
    # w: 1 + 0.1 * 2 = 1.2 -> w = 1.88; v: 0.75 + 0.1 * 3 = 1.05 -> v = 2.895
    # alpha: Algorithm 1's step alone, 0.5 - 0.1 * 1.5 = 0.35 (decayed, it was 0.345)
    model = linear(0.0)
    state = {"apfl.weight": torch.tensor([[3.0]]), "apfl.alpha": torch.tensor(0.5)}
    spec = LocalSpec(epochs=1, batch_size=8, base_loss=half_mse, weight_decay=0.1)
    reply = run_client(APFL(model).client_half(), model, spec, {"weight": torch.tensor([[2.0]])}, lr=0.1, state=state)
    close(reply.uplink.params["weight"], 1.88)
    close(reply.state["apfl.weight"], 2.895)
    close(reply.state["apfl.alpha"], 0.35)


def test_apfl_personal_model_is_evaluated_and_alpha_is_clipped() -> None:
    # lr 1: alpha = 0.5 - 1.5 = -1 -> clipped to 0; v = 3 - 0.75 = 2.25; w = 2 - 1 = 1; personal = w = 1
    model = linear(0.0, 0.0)
    half = APFL(model).client_half()
    state = {"apfl.weight": torch.tensor([[3.0], [3.0]]), "apfl.alpha": torch.tensor(0.5)}
    reply = run_client(half, model, one_step(), {"weight": torch.tensor([[2.0], [2.0]])}, lr=1.0, state=state)
    close(reply.state["apfl.alpha"], 0.0)
    # fixed alpha: alpha stays, w and v still move
    fixed = APFL(model, APFLOptions(adaptive=False)).client_half()
    reply = run_client(fixed, model, one_step(), {"weight": torch.tensor([[2.0], [2.0]])}, lr=0.1, state=state)
    close(reply.state["apfl.alpha"], 0.5)
    close(reply.state["apfl.weight"], 2.925, 2.925)


def test_apfl_applies_the_runs_proximal_term_to_w_only() -> None:
    # as the hand case above plus [objective] proximal_mu = 1 around w^t_anchor = 1:
    # w: grad f(w) + mu (w - 1) = 1 + 1 = 2 -> w = 1.8; v and alpha as before (v_bar uses w = 2): 2.925, 0.35
    from chillfl.training.objective import ProximalTerm

    model = linear(0.0)
    spec = LocalSpec(epochs=1, batch_size=8, base_loss=half_mse, terms=(ProximalTerm(),))
    state = {"apfl.weight": torch.tensor([[3.0]]), "apfl.alpha": torch.tensor(0.5)}
    reply = run_client(APFL(model).client_half(), model, spec, {"weight": torch.tensor([[2.0]])}, lr=0.1, state=state,
                       context={"mu": 1.0, "global_params": {"weight": torch.tensor([[1.0]])}})
    close(reply.uplink.params["weight"], 1.8)
    close(reply.state["apfl.weight"], 2.925)
    close(reply.state["apfl.alpha"], 0.35)


def test_apfl_keeps_the_runs_frozen_weights_frozen_in_w_and_v() -> None:
    # LocalSpec.frozen names the model's entries; the pair holds them as w.* and v.*, both must stay put.
    # Linear(1, 1) with its bias frozen at 0.5, x = 1, f(t) = 1/2 (t - 1)^2, lr 0.1; w = 2 (sent), v = 3, alpha = 0.5.
    # w: t = 2.5, grad 1.5                                 -> weight 1.85, bias 0.5 (it moved to 0.35 before the fix)
    # v_bar: weight 2.5, bias 0.5, t = 3, grad f(v_bar) = 2 -> v weight 3 - 0.1 * 0.5 * 2 = 2.9, bias 0.5 (was 0.4)
    # alpha: (3 - 2) * 2 + (0.5 - 0.5) * 2 = 2              -> 0.3
    model = nn.Linear(1, 1)
    spec = LocalSpec(epochs=1, batch_size=8, base_loss=half_mse, frozen=frozenset({"bias"}))
    state = {"apfl.weight": torch.tensor([[3.0]]), "apfl.bias": torch.tensor([0.5]), "apfl.alpha": torch.tensor(0.5)}
    with head_notes() as notes:
        reply = run_client(APFL(model).client_half(), model, spec, {"weight": torch.tensor([[2.0]]), "bias": torch.tensor([0.5])}, lr=0.1, state=state)
    assert len(notes) == 1
    close(reply.uplink.params["weight"], 1.85)
    close(reply.uplink.params["bias"], 0.5)
    close(reply.state["apfl.weight"], 2.9)
    close(reply.state["apfl.bias"], 0.5)
    close(reply.state["apfl.alpha"], 0.3)


def test_apfl_alpha_step_sgd_takes_algorithm_1s_plain_step_outside_the_runs_optimiser() -> None:
    # The first hand case (g_w = 1, g_v = 0.75, g_alpha = 1.5, lr 0.1) under Adam: its first step moves each
    # parameter by lr g / (|g| + eps) ~ lr sign(g): w = 1.9, v = 2.9, and by default alpha = 0.5 - 0.1 = 0.4.
    # alpha_step = "sgd": alpha = 0.5 - 0.1 * 1.5 = 0.35 (Algorithm 1); alpha_lr = 0.2: 0.5 - 0.2 * 1.5 = 0.2.
    model = linear(0.0)
    adam = LocalSpec(epochs=1, batch_size=8, base_loss=half_mse, optim=Optimizer(name="adam"))
    state = {"apfl.weight": torch.tensor([[3.0]]), "apfl.alpha": torch.tensor(0.5)}
    for options, alpha in ((APFLOptions(), 0.4), (APFLOptions(alpha_step="sgd"), 0.35), (APFLOptions(alpha_step="sgd", alpha_lr=0.2), 0.2)):
        reply = run_client(APFL(model, options).client_half(), model, adam, {"weight": torch.tensor([[2.0]])}, lr=0.1, state=state)
        close(reply.uplink.params["weight"], 1.9)
        close(reply.state["apfl.weight"], 2.9)
        close(reply.state["apfl.alpha"], alpha)
    # SGD clipped to norm 0.5: by default alpha is in the norm, ||(1, 0.75, 1.5)|| = sqrt(3.8125), coefficient
    # c = 0.5 / (sqrt(3.8125) + 1e-6): w = 2 - 0.1 c, v = 3 - 0.075 c, alpha = 0.5 - 0.15 c.
    # alpha_step = "sgd": the norm is w's and v's, ||(1, 0.75)|| = 1.25, c' = 0.5 / (1.25 + 1e-6): w = 2 - 0.1 c',
    # v = 3 - 0.075 c'; alpha = 0.35, unclipped.
    clipped = LocalSpec(epochs=1, batch_size=8, base_loss=half_mse, optim=Optimizer(clip_norm=0.5))
    c, c2 = 0.5 / (3.8125**0.5 + 1e-6), 0.5 / (1.25 + 1e-6)
    for options, (w, v, alpha) in ((APFLOptions(), (2 - 0.1 * c, 3 - 0.075 * c, 0.5 - 0.15 * c)), (APFLOptions(alpha_step="sgd"), (2 - 0.1 * c2, 3 - 0.075 * c2, 0.35))):
        reply = run_client(APFL(model, options).client_half(), model, clipped, {"weight": torch.tensor([[2.0]])}, lr=0.1, state=state)
        close(reply.uplink.params["weight"], w)
        close(reply.state["apfl.weight"], v)
        close(reply.state["apfl.alpha"], alpha)


def test_apfl_alpha_step_sgd_ignores_the_runs_momentum_over_two_steps() -> None:
    # Two steps (two epochs of the one sample x = 1), momentum 0.9, lr 0.1, f(t) = 1/2 (t - 1)^2; w = 2, v = 3, alpha = 0.5.
    # step 1: g_w = 1, v_bar = 2.5, g_v = 0.5 * 1.5 = 0.75, g_alpha = (3 - 2) * 1.5 = 1.5 (momentum starts at g)
    #   w = 1.9, v = 2.925, alpha = 0.35 either way
    # step 2: g_w = 0.9; v_bar = 0.35 * 2.925 + 0.65 * 1.9 = 2.25875, grad f(v_bar) = 1.25875
    #   g_alpha = (2.925 - 1.9) * 1.25875 = 1.29021875
    #   by default alpha's momentum 0.9 * 1.5 + 1.29021875 = 2.64021875 -> alpha = 0.35 - 0.264021875 = 0.085978125
    #   alpha_step = "sgd": alpha = 0.35 - 0.129021875 = 0.220978125 (w and v keep their momentum steps either way)
    model = linear(0.0)
    spec = LocalSpec(epochs=2, batch_size=8, momentum=0.9, base_loss=half_mse)
    state = {"apfl.weight": torch.tensor([[3.0]]), "apfl.alpha": torch.tensor(0.5)}
    ws = []
    for options, alpha in ((APFLOptions(), 0.085978125), (APFLOptions(alpha_step="sgd"), 0.220978125)):
        reply = run_client(APFL(model, options).client_half(), model, spec, {"weight": torch.tensor([[2.0]])}, lr=0.1, state=state)
        close(reply.state["apfl.alpha"], alpha)
        ws.append(reply.uplink.params["weight"])
    close(ws[0], 2 - 0.1 - 0.1 * (0.9 * 1 + 0.9))  # w's own momentum step, the same under both
    assert torch.equal(ws[0], ws[1])


@pytest.mark.parametrize("options,field", [({"alpha_step": "adam"}, "alpha_step"), ({"alpha_lr": 0.1}, "alpha_lr"),
                                           ({"alpha_step": "sgd", "alpha_lr": 0.0}, "alpha_lr")])
def test_apfl_alpha_step_options_are_checked(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"algorithm\.{field}"):
        APFLOptions(**options).validate("algorithm")


# ---------------------------------------------------------------- pFedMe


def test_pfedme_inner_moreau_problem_and_outer_step_by_hand() -> None:
    # scalar model, x = 1, f(t) = 1/2 (t - 1)^2; w^t = 3, lambda 2, K = 2, personal lr 0.1, eta (lr) 0.25, one batch.
    # inner: h(t) = f(t) + lambda/2 (t - 3)^2, grad = (t - 1) + 2 (t - 3)
    #   t = 3:   grad 2            -> t = 2.8
    #   t = 2.8: grad 1.8 - 0.4    -> t = 2.8 - 0.14 = 2.66     (theta, the personal model)
    # outer: w = 3 - 0.25 * 2 * (3 - 2.66) = 2.83               (uploaded)
    model = linear(0.0)
    half = PFedMe(model, PFedMeOptions(lam=2.0, inner_steps=2, personal_lr=0.1)).client_half()
    reply = run_client(half, model, one_step(), {"weight": torch.tensor([[3.0]])}, lr=0.25,
                       x_eval=torch.tensor([[1.0], [-1.0]]), y_eval=torch.zeros(2, dtype=torch.long))
    close(reply.uplink.params["weight"], 2.83)
    assert reply.uplink.num_steps == 1 and reply.state is None  # R = 1 outer step; pFedMe keeps nothing between rounds


def test_pfedme_takes_one_outer_step_per_batch() -> None:
    # four equal samples, batch size 2: R = 2 outer steps, each an inner problem on one batch
    model = linear(0.0)
    spec = LocalSpec(epochs=1, batch_size=2, base_loss=half_mse)
    half = PFedMe(model, PFedMeOptions(lam=2.0, inner_steps=2, personal_lr=0.1)).client_half()
    reply = run_client(half, model, spec, {"weight": torch.tensor([[3.0]])}, lr=0.25, x=torch.ones(4, 1))
    # step 1 as above: theta = 2.66, w = 2.83. Step 2 from theta = 2.66 against w = 2.83:
    #   grad = 1.66 + 2 (2.66 - 2.83) = 1.32 -> 2.528; grad = 1.528 + 2 (2.528 - 2.83) = 0.924 -> 2.4356
    #   w = 2.83 - 0.5 * (2.83 - 2.4356) = 2.6328
    assert reply.uplink.num_steps == 2
    close(reply.uplink.params["weight"], 2.6328)


def test_pfedme_server_mixes_with_beta() -> None:
    # (1 - beta) w^t + beta * mean: beta 2, w^t = 3, clients 2.83 and 2.43 -> -3 + 2 * 2.63 = 2.26 (uniform mean)
    server = PFedMe(linear(0.0), PFedMeOptions(beta=2.0))
    results = [ClientResult(0, {"weight": torch.tensor([[2.83]])}, 10, 1, 0.1, 1.0, 0.0), ClientResult(1, {"weight": torch.tensor([[2.43]])}, 30, 1, 0.1, 1.0, 0.0)]
    close(server.aggregate({"weight": torch.tensor([[3.0]])}, results, 0)["weight"], 2.26)


# ---------------------------------------------------------------- FedDyn


def test_feddyn_linear_and_quadratic_terms_by_hand() -> None:
    # theta = (1, 2), g = (0.5, -1): -<g, theta> = -(0.5 - 2) = 1.5; alpha/2 ||theta - (0, 1)||^2 = 0.05 * 2 = 0.1
    theta = {"w": torch.tensor([1.0, 2.0])}
    context = {LINEAR: {"w": torch.tensor([-0.5, 1.0])}, ALPHA: 0.1, ANCHOR: {"w": torch.tensor([0.0, 1.0])}}
    linear_term, quadratic = feddyn_terms()
    assert linear_term(theta, context).item() == pytest.approx(1.5)
    assert quadratic(theta, context).item() == pytest.approx(0.1)


def test_feddyn_client_step_and_gradient_state_by_hand() -> None:
    # scalar, x = 1, f = 1/2 (t - 1)^2, theta^{t-1} = 2, g = 0.5, alpha 0.1, lr 0.1:
    # grad = (2 - 1) - 0.5 + 0.1 (2 - 2) = 0.5 -> theta_k = 1.95;  g <- 0.5 - 0.1 (1.95 - 2) = 0.505
    model = linear(0.0)
    server = FedDyn(4, FedDynOptions(alpha=0.1), ["weight"])
    spec = LocalSpec(epochs=1, batch_size=8, base_loss=half_mse, terms=tuple(feddyn_terms()))
    down = server.downlink(0, 0, {"weight": torch.tensor([[2.0]])})
    reply = run_client(server.client_half(), model, spec, {"weight": torch.tensor([[2.0]])}, lr=0.1,
                       state={"feddyn.grad.weight": torch.tensor([[0.5]])}, context=down.context)
    close(reply.uplink.params["weight"], 1.95)
    close(reply.state["feddyn.grad.weight"], 0.505)
    # a first-time client has g = 0: grad = 1 -> 1.9, g = -0.1 (1.9 - 2) = 0.01
    first = run_client(server.client_half(), model, spec, {"weight": torch.tensor([[2.0]])}, lr=0.1, context=down.context)
    close(first.uplink.params["weight"], 1.9)
    close(first.state["feddyn.grad.weight"], 0.01)


def test_feddyn_server_update_by_hand() -> None:
    # m = 4, alpha 0.1, theta^{t-1} = 2; clients 1.95 and 2.15 (drifts -0.05, 0.15, sum 0.1):
    # h = 0 - 0.1/4 * 0.1 = -0.0025;  theta = mean 2.05 - h / alpha = 2.05 + 0.025 = 2.075
    server = FedDyn(4, FedDynOptions(alpha=0.1), ["weight"])
    glob = {"weight": torch.tensor([[2.0]], dtype=torch.float64)}
    results = [ClientResult(0, {"weight": torch.tensor([[1.95]], dtype=torch.float64)}, 10, 1, 0.1, 1.0, 0.0),
               ClientResult(1, {"weight": torch.tensor([[2.15]], dtype=torch.float64)}, 30, 1, 0.1, 1.0, 0.0)]
    out = server.aggregate(glob, results, 0)
    close(server.h["weight"], -0.0025)
    close(out["weight"], 2.075)
    # next round from 2.075, one client at 2.275: h = -0.0025 - 0.025 * 0.2 = -0.0075; theta = 2.275 + 0.075 = 2.35
    out = server.aggregate(out, [ClientResult(0, {"weight": torch.tensor([[2.275]], dtype=torch.float64)}, 10, 1, 0.1, 1.0, 0.0)], 1)
    close(server.h["weight"], -0.0075)
    close(out["weight"], 2.35)
    assert server.round_metrics()["h_norm"] == pytest.approx(0.0075)  # ||h|| = |-0.0075|, not its square
    restored = FedDyn(4, FedDynOptions(alpha=0.1), ["weight"])
    restored.load_state_dict(server.state_dict())
    assert torch.equal(restored.h["weight"], server.h["weight"])
    with pytest.raises(ValueError):
        restored.load_state_dict({"control": {}})


# ---------------------------------------------------------------- FedDyn: the authors' per-client alpha


def test_feddyn_client_size_alphas_by_hand() -> None:
    # m = 2 clients of 10 and 30 rows: sum 40, w_k = n_k m / 40 = 0.5 and 1.5; alpha 0.1 -> alpha_k = 0.2 and 0.0666...
    built, _ = make_aggregator("feddyn", {"alpha": 0.1, "alpha_scaling": "client_size"}, num_clients=2, model=linear(0.0), seed=0, client_sizes=(10, 30))
    assert isinstance(built, FedDyn)
    glob = {"weight": torch.tensor([[2.0]])}
    assert built.downlink(0, 0, glob).context[ALPHA] == pytest.approx(0.2)
    assert built.downlink(1, 0, glob).context[ALPHA] == pytest.approx(0.1 / 1.5)
    # the default is one alpha for every client, whatever the sizes
    plain, _ = make_aggregator("feddyn", {"alpha": 0.1}, num_clients=2, model=linear(0.0), seed=0, client_sizes=(10, 30))
    assert [plain.downlink(k, 0, glob).context[ALPHA] for k in (0, 1)] == [0.1, 0.1]
    # a client without training rows (it never trains) has none: 0, 20, 20 rows -> w = 0, 1.5, 1.5
    assert client_alphas(0.1, (0, 20, 20)) == (None, pytest.approx(0.1 / 1.5), pytest.approx(0.1 / 1.5))


def test_feddyn_client_size_alpha_drives_the_client_step_and_not_the_server() -> None:
    # scalar, f = 1/2 (t - 1)^2, theta^{t-1} = 2, g = 0, lr 0.1: grad 1 -> theta_k = 1.9, and with alpha_k = 0.2
    # g <- 0 - 0.2 (1.9 - 2) = 0.02 (one alpha 0.1 gave 0.01: test_feddyn_client_step_and_gradient_state_by_hand)
    server = FedDyn(2, FedDynOptions(alpha=0.1, alpha_scaling="client_size"), ["weight"], alphas=(0.2, 0.1 / 1.5))
    spec = LocalSpec(epochs=1, batch_size=8, base_loss=half_mse, terms=tuple(feddyn_terms()))
    down = server.downlink(0, 0, {"weight": torch.tensor([[2.0]])})
    reply = run_client(server.client_half(), linear(0.0), spec, {"weight": torch.tensor([[2.0]])}, lr=0.1, context=down.context)
    close(reply.uplink.params["weight"], 1.9)
    close(reply.state["feddyn.grad.weight"], 0.02)
    # the server keeps the one alpha: m = 2, theta^{t-1} = 2, clients 1.95 and 2.15 (drift sum 0.1):
    # h = -0.1/2 * 0.1 = -0.005, theta = 2.05 - h / 0.1 = 2.1, as the authors' mean + (1/m) sum of drifts
    glob = {"weight": torch.tensor([[2.0]], dtype=torch.float64)}
    results = [ClientResult(0, {"weight": torch.tensor([[1.95]], dtype=torch.float64)}, 10, 1, 0.1, 1.0, 0.0),
               ClientResult(1, {"weight": torch.tensor([[2.15]], dtype=torch.float64)}, 30, 1, 0.1, 1.0, 0.0)]
    close(server.aggregate(glob, results, 0)["weight"], 2.1)
    close(server.h["weight"], -0.005)


def test_feddyn_client_size_needs_the_clients_sizes() -> None:
    with pytest.raises(ConfigError) as exc:  # built outside a run: no sizes
        make_aggregator("feddyn", {"alpha_scaling": "client_size"}, num_clients=2, model=linear(0.0), seed=0)
    assert exc.value.field == "algorithm.alpha_scaling"
    with pytest.raises(ConfigError) as bad:
        make_aggregator("feddyn", {"alpha_scaling": "size"}, num_clients=2, model=linear(0.0), seed=0)
    assert bad.value.field == "algorithm.alpha_scaling"


def test_a_run_gives_the_builder_its_clients_training_sizes() -> None:
    exp = build_experiment(config(**{"algorithm.name": "feddyn", "algorithm.alpha": 0.1, "algorithm.alpha_scaling": "client_size"}))
    sizes = [int(n) for n in exp.data.train_sizes()]
    assert len(set(sizes)) > 1  # a Dirichlet split: unequal clients, unequal alphas
    assert isinstance(exp.aggregator, FedDyn)
    assert exp.aggregator.alphas == pytest.approx([0.1 / (n * len(sizes) / sum(sizes)) for n in sizes])


def test_feddyn_client_size_resumes_bitwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(resume_cases.NEEDS, "algorithm.feddyn", {"algorithm": {"name": "feddyn", "alpha": 0.1, "alpha_scaling": "client_size"}})
    resume_cases.check_resume("algorithm.feddyn", "sequential", 1, tmp_path, monkeypatch)


# ---------------------------------------------------------------- end to end


E2E: dict[str, dict[str, Any]] = {
    "ditto": {"algorithm.lam": 0.5},
    "fedper": {},
    "fedrep": {"algorithm.head_epochs": 2},
    "apfl": {},
    "pfedme": {"algorithm.inner_steps": 2, "algorithm.personal_lr": 0.05},
    "feddyn": {"algorithm.alpha": 0.1},
}


@pytest.mark.slow  # every personalised method under every executor
@pytest.mark.parametrize("name", sorted(E2E))
def test_under_every_executor(name: str) -> None:
    cfg = config(**{"algorithm.name": name, "federation.rounds": 2, "model.name": "mlp", **E2E[name]})
    seq = assert_executors_agree(cfg)
    assert all(r["local_acc"] is not None for r in seq)  # the personal models' accuracy on the clients' own splits
    fedavg = records(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))
    assert seq[-1]["local_loss"] != fedavg[-1]["local_loss"]  # the personal models are not FedAvg's clients' models
    if name == "ditto":  # Ditto's global model is exactly FedAvg's: its global updates are FedAvg's local trainings
        assert [r["train_loss"] for r in seq] == [r["train_loss"] for r in fedavg]


def test_ditto_local_accuracy_is_that_of_the_clients_personal_models() -> None:
    """In a real run the record's local_acc is the mean over the round's clients of their v_k's accuracy on their own splits."""
    from chillfl.engine.loop import run_rounds
    from chillfl.experiment import build_experiment, build_protocol, make_executor
    from chillfl.protocols.common import mean_or_none
    from chillfl.protocols.parameters import ParameterSharing

    cfg = config(**{"algorithm.name": "ditto", "algorithm.lam": 0.5, "model.name": "mlp", "federation.rounds": 2})
    exp = build_experiment(cfg)
    protocol = build_protocol(exp)
    assert isinstance(protocol, ParameterSharing)
    executor = make_executor(exp, protocol)
    try:
        records = list(run_rounds(protocol, executor, seed=cfg.seed, num_clients=exp.data.num_clients, clients_per_round=3, rounds=2))
    finally:
        executor.close()
    last = records[-1]
    personal, shared = [], []
    for cid in last["clients"]:
        state = protocol.store.load(cid)
        assert state is not None
        v = {k[len("ditto.v."):]: t for k, t in state.items()}
        data = protocol.evaluation.client_data(cid)
        assert data.x_eval is not None and data.y_eval is not None
        personal.append(evaluate(exp.model, v, data.x_eval, data.y_eval, cfg.eval.batch_size)[0])
        shared.append(evaluate(exp.model, protocol.global_state(), data.x_eval, data.y_eval, cfg.eval.batch_size)[0])
    assert last["local_acc"] == mean_or_none(personal)
    assert mean_or_none(personal) != mean_or_none(shared)  # not the global model's accuracy on the same splits


@pytest.mark.parametrize("name", ["ditto", "feddyn"])
def test_resume_is_bitwise(name: str, tmp_path: Path) -> None:
    cfg = config(**{"algorithm.name": name, "model.name": "mlp", **E2E[name]})
    assert resumed_records(cfg, 2, tmp_path) == records(cfg)


APFL_ALPHA_SGD = {"algorithm.name": "apfl", "algorithm.alpha_step": "sgd", "algorithm.alpha_lr": 0.02, "client.momentum": 0.9, "model.name": "mlp"}
"""With momentum, where ``alpha_step = "sgd"`` matters."""


def test_apfl_alpha_step_sgd_resumes_bitwise(tmp_path: Path) -> None:
    """A resumed run is bitwise the one that never stopped, and the run differs from the default one."""
    cfg = config(**APFL_ALPHA_SGD)
    seq = records(cfg)
    assert resumed_records(cfg, 2, tmp_path) == seq
    default = records(cfg.with_overrides({"algorithm": {"name": "apfl"}}))
    assert [r["local_loss"] for r in default] != [r["local_loss"] for r in seq]


@pytest.mark.slow  # the process pool's start: seconds
def test_apfl_alpha_step_sgd_under_every_executor() -> None:
    """The vectorised executor steps the stacked alphas (per-client learning rates) as the sequential one steps each."""
    assert_executors_agree(config(**APFL_ALPHA_SGD))


# ---------------------------------------------------------------- the personal models a run saves


def test_personal_models_by_hand() -> None:
    """What ``checkpoint.client_models`` saves, from a client's state and the final global model."""
    # FedPer: the global body with the client's own head (the model it starts its next round from)
    fedper = FedPer(two_layers(1.0, 2.0)).client_half()
    out = personal_model(fedper, {"fedper.head.1.weight": torch.tensor([[1.9]])}, {"0.weight": torch.tensor([[0.5]]), "1.weight": torch.tensor([[7.0]])})
    assert out is not None and set(out) == {"0.weight", "1.weight"}
    close(out["0.weight"], 0.5)
    close(out["1.weight"], 1.9)
    # APFL: alpha v + (1 - alpha) w with the global w = 1.9, v = 2.925, alpha = 0.35 -> 0.35 * 2.925 + 0.65 * 1.9 = 2.25875
    apfl = APFL(linear(0.0)).client_half()
    out = personal_model(apfl, {"apfl.weight": torch.tensor([[2.925]]), "apfl.alpha": torch.tensor(0.35)}, {"weight": torch.tensor([[1.9]])})
    assert out is not None and set(out) == {"weight"}
    close(out["weight"], 2.25875)
    # Ditto: v_k itself; FedChill's entries in the same table are not part of it
    ditto = Ditto().client_half()
    out = personal_model(ditto, {"ditto.v.weight": torch.tensor([[3.0]]), "fedchill.temperature": torch.tensor(0.5)}, {"weight": torch.tensor([[9.0]])})
    assert out is not None and set(out) == {"weight"}
    close(out["weight"], 3.0)
    # pFedMe and FedDyn keep no model between rounds
    assert personal_model(PFedMe(linear(0.0)).client_half(), {}, {"weight": torch.tensor([[1.0]])}) is None
    assert personal_model(FedDyn(4, FedDynOptions(), ["weight"]).client_half(), {"feddyn.g.weight": torch.tensor([[1.0]])}, {"weight": torch.tensor([[1.0]])}) is None


@pytest.mark.parametrize("name", ["ditto", "fedper", "fedrep", "apfl", "fedbn", "pfedme", "feddyn", "fedavg"])
def test_a_run_returns_and_writes_the_personal_models(name: str, tmp_path: Path) -> None:
    """``checkpoint.client_models``: one model per client that took part, of the model's own keys, from its state."""
    from chillfl.storage.model_file import read_client_models
    from chillfl.runner import CLIENT_MODELS, run_experiment

    model = {"model.name": "flexchill_cnn", "model.batch_norm": True} if name == "fedbn" else {"model.name": "mlp"}
    cfg = config(**{"algorithm.name": name, "federation.rounds": 2, "checkpoint.client_models": True, "out_dir": str(tmp_path), "name": name,
                    **model, **E2E.get(name, {})})
    out = run_experiment(cfg, progress=False)
    assert out.folder is not None
    took_part = sorted({c for r in out.records for c in r["clients"]})
    if name in ("pfedme", "feddyn", "fedavg"):
        assert out.client_states == {} and not (out.folder / CLIENT_MODELS).exists()
        return
    assert sorted(out.client_states) == took_part
    assert out.model_state is not None
    for cid, personal in out.client_states.items():
        assert set(personal) == set(out.model_state)  # a whole model: load_state_dict takes it
        assert any(not torch.equal(personal[k], out.model_state[k]) for k in personal)  # not the global model
    saved = read_client_models(out.folder / CLIENT_MODELS)
    assert set(saved) == set(took_part)
    assert all(torch.equal(saved[c][k], v) for c, m in out.client_states.items() for k, v in m.items())


def test_pa3fed_refuses_a_personalised_base() -> None:
    with pytest.raises(ConfigError, match="algorithm.base"):
        records(config(**{"algorithm.name": "pa3fed", "algorithm.base": "ditto", "model.name": "mlp"}))


@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
def test_fedrep_over_a_frozen_head_trains_the_body_only(executor: str) -> None:
    # the head phase freezes the body on top of the run's frozen head: no weight left to step (before the fix:
    # RuntimeError "`inputs` argument to `grad()` cannot be empty", a traceback); now it moves nothing
    import chillfl

    module = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))
    module[3].requires_grad_(False)
    head = {k: v.detach().clone() for k, v in module[3].state_dict().items()}
    config = {"dataset": {"name": "digits"}, "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 1},
              "algorithm": {"name": "fedrep", "head_epochs": 1}, "executor": executor}
    with head_notes() as notes:
        res = chillfl.run(module, config=config, write=False, progress=False)
    assert len(notes) == 1
    assert len(res.records) == 1 and res.records[0]["local_acc"] is not None
    for state in [res.state, *res.client_states.values()]:
        assert torch.equal(state["3.weight"], head["weight"]) and torch.equal(state["3.bias"], head["bias"])
    assert not torch.equal(res.state["1.weight"], module[1].weight)

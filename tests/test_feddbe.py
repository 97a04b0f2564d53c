"""FedDBE: MR and its gradient, the running mean, the consensus, the PRBM in the logits and one client step by hand; runs.

The client model of the step checks: a one-weight body ``0.weight`` = a (z = a x) and a 2-class head ``1`` with
weight W = (1, 0) and bias b = (0, 0), so the logits are (W_0 (z + p) + b_0, W_1 (z + p) + b_1) with p the PRBM.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.func import functional_call

from chillfl.aggregation.base import ClientResult, personal_model, weighted_average
from chillfl.aggregation.feddbe import (
    BIAS,
    CONSENSUS,
    KAPPA,
    MEAN,
    RUNNING,
    RUNNING_MODULE,
    FedDBE,
    FedDBEOptions,
    MeanRegularisation,
    RunningMean,
    folded,
    mr_distance,
    with_bias_memory,
)
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.training.local import LocalSpec, evaluate
from chillfl.training.terms import StepView
from float_paths import REL
from methods_e2e import assert_executors_agree, cli_option_error, config, records, resumed_records
from test_personalised import run_client

SPEC = LocalSpec(epochs=1, batch_size=8)


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values)


def close(actual: torch.Tensor, *expected: float, atol: float = 1e-6) -> None:
    torch.testing.assert_close(actual.flatten(), torch.tensor(expected, dtype=actual.dtype), atol=atol, rtol=1e-5)


def body_and_head() -> nn.Module:
    model = nn.Sequential(nn.Linear(1, 1, bias=False), nn.Linear(1, 2))
    with torch.no_grad():
        model[0].weight.fill_(1.0)
        model[1].weight.copy_(torch.tensor([[1.0], [0.0]]))
        model[1].bias.zero_()
    return model


def start() -> dict[str, torch.Tensor]:
    return {"0.weight": torch.tensor([[1.0]]), "1.weight": torch.tensor([[1.0], [0.0]]), "1.bias": torch.zeros(2)}


def view(captured: tuple[torch.Tensor, torch.Tensor]) -> StepView:
    """A step as the MR term sees it: only the running mean module's (input, output) is read."""
    empty = torch.zeros(0)
    return StepView(nn.Identity(), empty, empty, empty, empty, empty, {}, {RUNNING_MODULE: captured})


def test_mr_distance_and_its_gradient_by_hand() -> None:
    # m = (1, 3), g = (0, 1): m - g = (1, 2), d = 2
    # mse: (1^2 + 2^2) / (2 * 2) = 1.25; gradient (m - g) / d = (0.5, 1)
    # norm: sqrt(5) = 2.236068; gradient (m - g) / sqrt(5) = (0.447214, 0.894427)
    for distance, value, grad in (("mse", 1.25, (0.5, 1.0)), ("norm", 2.236068, (0.447214, 0.894427))):
        m = t(1.0, 3.0).requires_grad_(True)
        r = mr_distance(m, t(0.0, 1.0), distance)
        r.backward()
        close(r.detach(), value)
        assert m.grad is not None
        close(m.grad, *grad)


def test_running_mean_and_the_mr_term_by_hand() -> None:
    # rows z = (1, 2), (3, 4): batch mean (2, 3); running mean before (4, 1), beta 0.5 -> m = (3, 2), kept in the buffer
    # MR, kappa 3, g = (1, 0): 3 * ((2^2 + 2^2) / 4) = 6
    # d/dz_j = kappa (m - g) / d * beta / B = 3 * (2, 2) / 2 * 0.5 / 2 = (0.75, 0.75) for each row; the old mean takes none
    running = RunningMean(2, 0.5)
    running.mean.copy_(t(4.0, 1.0))
    z = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    m = running(z)
    close(running.mean, 3.0, 2.0)
    value = MeanRegularisation()({}, {KAPPA: 3.0, CONSENSUS: t(1.0, 0.0)}, view((z, m)))
    close(value.detach(), 6.0)
    value.backward()
    assert z.grad is not None
    close(z.grad, 0.75, 0.75, 0.75, 0.75)
    running.eval()  # evaluation reads, never updates
    running(z.detach())
    close(running.mean, 3.0, 2.0)


def test_the_running_mean_over_two_steps_by_hand() -> None:
    # beta 0.25, reset to 0: batch means 4 (rows 2, 6) then 8 (rows 7, 9)
    #   m_1 = 0.75 * 0 + 0.25 * 4 = 1;  m_2 = 0.75 * 1 + 0.25 * 8 = 2.75
    # dm_2/dz: beta / B = 0.125 for each row of the second batch, nothing for the first (m_1 is held detached)
    running = RunningMean(1, 0.25)
    first = torch.tensor([[2.0], [6.0]], requires_grad=True)
    second = torch.tensor([[7.0], [9.0]], requires_grad=True)
    close(running(first).detach(), 1.0)
    m = running(second)
    close(m.detach(), 2.75)
    close(running.mean, 2.75)
    m.sum().backward()
    assert second.grad is not None and first.grad is None
    close(second.grad, 0.125, 0.125)


def test_the_prbm_enters_the_logits_and_folds_into_the_head_bias() -> None:
    # W = ((1), (2)), b = (0.5, -1), p = 3, z = a x = 1: logits W (z + p) + b = (4.5, 7); folded bias b + W p = (3.5, 5)
    model = nn.Sequential(nn.Linear(1, 1, bias=False), nn.Linear(1, 2))
    state = {"0.weight": torch.tensor([[1.0]]), "1.weight": torch.tensor([[1.0], [2.0]]), "1.bias": t(0.5, -1.0)}
    template = with_bias_memory(model, 1.0)
    template.eval()
    logits = functional_call(template, {**state, BIAS: t(3.0), RUNNING: t(0.0)}, (torch.ones(1, 1),))
    close(logits, 4.5, 7.0)
    own = folded(state, t(3.0), "1")
    close(own["1.bias"], 3.5, 5.0)
    close(functional_call(model, own, (torch.ones(1, 1),)), 4.5, 7.0)
    assert set(template.state_dict()) == {*state, BIAS, RUNNING}


def test_a_two_wide_prbm_enters_the_logits_and_folds_into_the_head_bias_by_hand() -> None:
    # z = (1, 1) (body weights (1, 1), x = 1), p = (0.5, 2), W = ((1, 2), (3, -1)), b = (1, 1):
    # logits W (z + p) + b = W (1.5, 3) + b = (1.5 + 6, 4.5 - 3) + (1, 1) = (8.5, 2.5); folded bias b + W p = (1, 1) + (0.5 + 4, 1.5 - 2)
    #   = (5.5, 0.5), and W z + that = (3, 2) + (5.5, 0.5) = (8.5, 2.5)
    model = nn.Sequential(nn.Linear(1, 2, bias=False), nn.Linear(2, 2))
    state = {"0.weight": torch.tensor([[1.0], [1.0]]), "1.weight": torch.tensor([[1.0, 2.0], [3.0, -1.0]]), "1.bias": t(1.0, 1.0)}
    template = with_bias_memory(model, 1.0)
    template.eval()
    close(functional_call(template, {**state, BIAS: t(0.5, 2.0), RUNNING: t(0.0, 0.0)}, (torch.ones(1, 1),)), 8.5, 2.5)
    own = folded(state, t(0.5, 2.0), "1")
    close(own["1.bias"], 5.5, 0.5)
    close(functional_call(model, own, (torch.ones(1, 1),)), 8.5, 2.5)


def test_a_head_without_bias_is_refused() -> None:
    with pytest.raises(ConfigError, match="algorithm.name"):
        FedDBE(nn.Sequential(nn.Linear(1, 1), nn.Linear(1, 2, bias=False)))


@pytest.mark.parametrize(("momentum", "a", "mean", "loss"), [(1.0, 0.413518, 2.0, 2.365582), (0.5, 0.913518, 1.0, 0.365582)])
def test_one_dbe_step_by_hand(momentum: float, a: float, mean: float, loss: float) -> None:
    # x = (1, 3), y = (0, 0), a = 1, W = (1, 0), b = 0, p = 0.5 (the client's), lr 0.1, kappa 2, g = 0.5, one step of both samples.
    # z = (1, 3); logits (z + p, 0) = (1.5, 0), (3.5, 0): softmax_0 = 0.817574, 0.970688
    # CE: (-ln 0.817574 - ln 0.970688) / 2 = (0.201413 + 0.029750) / 2 = 0.115582
    #   dL/dlogit_0 per sample (s_0 - 1) / 2 = -0.091213, -0.014656 (dlogit_1 = minus those)
    #   dW_0 = -0.091213 * 1.5 - 0.014656 * 3.5 = -0.188116; db_0 = -0.105869; dp = W_0 (sum) = -0.105869
    #   da (CE) = -0.091213 * 1 - 0.014656 * 3 = -0.135181
    # MR on the batch mean of z (the PRBM not in it), beta = 1: m = 2; kappa R = 2 * 0.5 * 1.5^2 = 2.25;
    #   dMR/dm = 2 * 1.5 = 3, dm/dz_j = 1/2: da (MR) = 3 * (1 + 3) / 2 = 6 -> a = 1 - 0.1 (6 - 0.135181) = 0.413518
    #   beta = 0.5 (the running mean reset to 0): m = 1; kappa R = 2 * 0.5 * 0.5^2 = 0.25; dMR/dm = 1, dm/dz_j = 1/4:
    #   da (MR) = 1 -> a = 1 - 0.1 (1 - 0.135181) = 0.913518
    # W_0 = 1 + 0.0188116 = 1.018812, W_1 = -0.018812; b = (0.010587, -0.010587); p = 0.5 + 0.010587 = 0.510587
    # local model: head bias b + W p = (0.010587 + 1.018812 * 0.510587, -0.010587 - 0.018812 * 0.510587) = (0.530779, -0.020192)
    model = body_and_head()
    half = FedDBE(model, FedDBEOptions(kappa=2.0, momentum=momentum)).client_half()
    x, x_eval, y_eval = t(1.0, 3.0).view(2, 1), t(1.0, -1.0).view(2, 1), torch.tensor([0, 1])
    reply = run_client(half, model, SPEC, start(), lr=0.1, state={"feddbe.bias": t(0.5)}, context={KAPPA: 2.0, CONSENSUS: t(0.5)},
                       x=x, x_eval=x_eval, y_eval=y_eval)
    up = reply.uplink
    assert set(up.params) == {"0.weight", "1.weight", "1.bias"}
    close(up.params["0.weight"], a)
    close(up.params["1.weight"], 1.018812, -0.018812)
    close(up.params["1.bias"], 0.010587, -0.010587)
    close(up.report[MEAN], mean)
    assert up.train_loss == pytest.approx(loss, rel=1e-5)
    assert set(reply.state) == {"feddbe.bias"}
    close(reply.state["feddbe.bias"], 0.510587)
    own = {**up.params, "1.bias": t(0.530779, -0.020192)}
    assert (reply.local_acc, reply.local_loss) == pytest.approx(evaluate(model, own, x_eval, y_eval), rel=1e-5)
    saved = personal_model(half, reply.state, up.params)
    assert saved is not None
    close(saved["1.bias"], 0.530779, -0.020192)


def test_the_first_round_trains_without_prbm_or_mr() -> None:
    # no consensus yet: logits (z, 0) = (1, 0), (3, 0), whatever PRBM the state holds; softmax_0 = 0.731059, 0.952574
    #   dL/dlogit_0 = (-0.268941, -0.047426) / 2 = (-0.134471, -0.023713): da = -0.134471 - 0.071139 = -0.205610
    #   a = 1 + 0.020561; W_0 = 1 - 0.1 (-0.134471 - 0.071139) = 1.020561; nothing kept; the uploaded mean is 2
    model = body_and_head()
    half = FedDBE(model, FedDBEOptions(kappa=2.0)).client_half()
    reply = run_client(half, model, SPEC, start(), lr=0.1, state={"feddbe.bias": t(0.5)}, x=t(1.0, 3.0).view(2, 1))
    close(reply.uplink.params["0.weight"], 1.020561)
    close(reply.uplink.params["1.weight"], 1.020561, -0.020561)
    close(reply.uplink.report[MEAN], 2.0)
    assert not reply.state  # nothing kept


def result(cid: int, n: int, value: float, mean: tuple[float, float]) -> ClientResult:
    params = {"0.weight": torch.full((1, 1), value), "1.weight": torch.full((2, 1), value), "1.bias": torch.full((2,), value)}
    return ClientResult(cid, params, n, 1, 0.1, 1.0, 0.0, report={MEAN: t(*mean)})


def test_the_server_consensus_by_hand() -> None:
    # n = (10, 30), means (1, 2) and (3, 6): g = 0.25 (1, 2) + 0.75 (3, 6) = (2.5, 5); models: 0.25 * 1 + 0.75 * 3 = 2.5
    model = body_and_head()
    glob = start()
    dbe = FedDBE(model, FedDBEOptions(kappa=4.0))
    assert dbe.downlink(0, 0, glob).context == {}  # the first round: no DBE
    out = dbe.aggregate(glob, [result(0, 10, 1.0, (1.0, 2.0)), result(1, 30, 3.0, (3.0, 6.0))], 0)
    assert all(torch.all(v == 2.5) for v in out.values())
    down = dbe.downlink(0, 1, out).context
    assert down[KAPPA] == 4.0
    close(down[CONSENSUS], 2.5, 5.0)  # type: ignore[arg-type]
    # once (default): later rounds leave it; every_round: the round's means (here uniform ones: (5, 5))
    dbe.aggregate(out, [result(0, 10, 1.0, (5.0, 5.0))], 1)
    close(dbe.downlink(0, 2, out).context[CONSENSUS], 2.5, 5.0)  # type: ignore[arg-type]
    again = FedDBE(model, FedDBEOptions(consensus="every_round"))
    again.load_state_dict(dbe.state_dict())
    close(again.downlink(0, 2, out).context[CONSENSUS], 2.5, 5.0)  # type: ignore[arg-type]
    again.aggregate(out, [result(0, 10, 1.0, (5.0, 5.0))], 1)
    close(again.downlink(0, 2, out).context[CONSENSUS], 5.0, 5.0)  # type: ignore[arg-type]
    # warmup = "discard": the first round's models are thrown away (the authors' initialisation period), g still made
    discard = FedDBE(model, FedDBEOptions(warmup="discard"))
    assert discard.aggregate(glob, [result(0, 10, 1.0, (1.0, 2.0))], 0) == glob
    close(discard.downlink(0, 1, glob).context[CONSENSUS], 1.0, 2.0)  # type: ignore[arg-type]
    assert weighted_average([{"z": t(1.0)}, {"z": t(3.0)}], torch.tensor([0.5, 0.5]))["z"].tolist() == [2.0]


def test_the_consensus_is_sample_weighted_under_uniform_weighting() -> None:
    # weighting = "uniform" weighs the models alike: (1 + 3) / 2 = 2; the consensus stays n_i / n (the authors' uploaded_weights):
    # n = (10, 30), means (1, 2) and (3, 6): 0.25 (1, 2) + 0.75 (3, 6) = (2.5, 5), not the plain mean (2, 4)
    dbe = FedDBE(body_and_head(), FedDBEOptions(weighting="uniform"))
    out = dbe.aggregate(start(), [result(0, 10, 1.0, (1.0, 2.0)), result(1, 30, 3.0, (3.0, 6.0))], 0)
    assert all(torch.all(v == 2.0) for v in out.values())
    close(dbe.downlink(0, 1, out).context[CONSENSUS], 2.5, 5.0)  # type: ignore[arg-type]


def test_a_run_replays_the_consensus_and_the_average_of_its_uploads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two rounds of a run, every client sampled: recompute \\bar z^g and each global model from the uploads with plain
    float64 sums, and check that round 2 sent the consensus and each client kept a PRBM; round 1 is FedAvg's."""
    from chillfl.engine.loop import run_rounds
    from chillfl.experiment import build_protocol, make_executor
    from chillfl.protocols.parameters import ParameterSharing

    cfg = config(**{"algorithm.name": "feddbe", "model.name": "mlp", "federation.clients_per_round": 4, "algorithm.kappa": 5.0})
    exp = build_experiment(cfg)
    protocol = build_protocol(exp)
    assert isinstance(protocol, ParameterSharing)
    agg = exp.aggregator
    assert isinstance(agg, FedDBE)
    seen: list[tuple[list[ClientResult], dict[str, torch.Tensor], torch.Tensor]] = []
    plain = agg.aggregate

    def recorded(global_params, results, round, weights=None):  # type: ignore[no-untyped-def]
        out = plain(global_params, results, round, weights)
        assert agg.consensus is not None
        seen.append((list(results), out, agg.consensus.clone()))
        return out

    monkeypatch.setattr(agg, "aggregate", recorded)
    executor = make_executor(exp, protocol)
    try:
        recs = list(run_rounds(protocol, executor, seed=cfg.seed, num_clients=4, clients_per_round=4, rounds=2))
    finally:
        executor.close()
    n = [[r.num_samples for r in results] for results, _, _ in seen]
    for (results, out, consensus), counts in zip(seen, n):
        total = sum(counts)
        for k, v in out.items():
            expect = sum(c / total * r.params[k].double() for c, r in zip(counts, results))
            torch.testing.assert_close(v.double(), expect, rtol=1e-6, atol=1e-7)
    first, _, g = seen[0]
    expect_g = [sum(c / sum(n[0]) * float(r.report[MEAN][j]) for c, r in zip(n[0], first)) for j in range(len(g))]  # type: ignore[index]
    torch.testing.assert_close(g.double(), torch.tensor(expect_g, dtype=torch.float64), rtol=1e-6, atol=1e-7)
    assert torch.equal(seen[1][2], g)  # made once
    assert recs[1]["agg_consensus_norm"] == pytest.approx(math.sqrt(sum(v * v for v in expect_g)), rel=1e-6)
    assert all(set(protocol.store.load(c) or {}) == {"feddbe.bias"} for c in range(4))  # round 2 left each client its PRBM


@pytest.mark.slow  # three runs, one of them in a process pool, and a resumed one
def test_run_agrees_across_executors_and_resumes_bitwise(tmp_path: Path) -> None:
    cfg = config(**{"algorithm.name": "feddbe", "model.name": "mlp", "algorithm.momentum": 0.5, "algorithm.kappa": 5.0})
    seq = assert_executors_agree(cfg)
    assert all(r["local_acc"] is not None for r in seq)
    fedavg = records(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))
    assert seq[0]["train_loss"] == pytest.approx(fedavg[0]["train_loss"], rel=REL)  # round 1 is FedAvg's
    assert seq[-1]["train_loss"] != pytest.approx(fedavg[-1]["train_loss"], rel=REL)
    assert resumed_records(cfg, 1, tmp_path) == seq  # the consensus and the PRBMs come back from the checkpoint


@pytest.mark.parametrize(("field", "value", "message"), [
    ("kappa", "-1.0", "must be in [0, 1e6], got -1.0"),
    ("momentum", "0", "must be in (0, 1], got 0.0"),
])
def test_a_bad_option_on_the_command_line_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: str, message: str
) -> None:
    assert cli_option_error(tmp_path, capsys, "feddbe", f"algorithm.{field}={value}") == (2, [f"chillfl: error: algorithm.{field}: {message}"], False)


def test_a_batch_term_is_one_line_and_exit_2_and_leaves_no_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # it was a ValueError's traceback (exit 1) that left results/run.partial behind
    from chillfl.cli import main

    run = tmp_path / "run.toml"
    run.write_text(f'out_dir = "{tmp_path / "results"}"\ndevice = "cpu"\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\n'
                   '[algorithm]\nname = "feddbe"\n[objective]\nterms = [{name = "decorr"}]\n', encoding="utf-8")
    assert main(["run", str(run), "federation.rounds=1"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "chillfl: error: objective.terms[0]: FedDBE's head reads the representation shifted by the PRBM; a batch term (one that reads the batch's"
        " representation) does not compose with it"]
    assert not any((tmp_path / "results").glob("*"))


@pytest.mark.parametrize("field", ["distance", "consensus", "warmup"])
def test_choices_are_checked(field: str) -> None:
    with pytest.raises(ConfigError, match=f"algorithm.{field}"):
        build_experiment(config(**{"algorithm.name": "feddbe", f"algorithm.{field}": "other"}))


def test_math_of_the_docstring_numbers() -> None:
    """The hand values above rest on these softmax values (e^v / (e^v + 1))."""
    for v, s in ((1.5, 0.817574), (3.5, 0.970688), (1.0, 0.731059), (3.0, 0.952574)):
        assert math.exp(v) / (math.exp(v) + 1) == pytest.approx(s, abs=1e-6)

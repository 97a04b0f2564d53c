"""CCVR: the clients' class statistics and their exact pooling by hand, the sampling, the head-only calibration, runs of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import ClientResult, Local, Train
from chillfl.aggregation.ccvr import (
    CLASSES,
    COUNTS,
    COVS,
    MEANS,
    PHASE,
    RIDGE,
    STATS_ONLY,
    TRAIN_AND_STATS,
    CCVR,
    CCVROptions,
    calibrate_head,
    class_statistics,
    draw_virtual,
    pool,
    pool_reports,
)
import chillfl
from chillfl.config import RunConfig, load_config
from chillfl.engine.loop import run_rounds
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment, build_protocol, make_executor
from chillfl.models.parts import head_name
from chillfl.training.local import LocalOutcome, LocalSpec
from methods_e2e import assert_executors_agree, cli_option_error, config, records, resumed_records


def f64(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def test_pooled_mean_and_variance_in_one_dimension_by_hand() -> None:
    # client a: {1, 3}: mean 2, unbiased variance ((1-2)^2 + (3-2)^2) / 1 = 2; client b: {5, 7, 9}: mean 7, variance (4 + 0 + 4) / 2 = 4
    # all five: mean 5, variance (16 + 4 + 0 + 4 + 16) / 4 = 10
    # the formula: 1/4 * 2 + 2/4 * 4 + 2/4 * 2^2 + 3/4 * 7^2 - 5/4 * 5^2 = 0.5 + 2 + 2 + 36.75 - 31.25 = 10
    n, mu, sigma = pool([2, 3], [f64([[2.0]])[0], f64([[7.0]])[0]], [f64([[2.0]]), f64([[4.0]])])
    assert n == 5
    torch.testing.assert_close(mu, f64([[5.0]])[0])
    torch.testing.assert_close(sigma, f64([[10.0]]))


def test_pooled_covariance_in_two_dimensions_is_that_of_all_rows_by_hand() -> None:
    # client a holds (0, 0) and (2, 0); client b holds (0, 2) alone (N = 1: a zero covariance, weight N - 1 = 0)
    # all three: mean (2/3, 2/3); deviations (-2/3, -2/3), (4/3, -2/3), (-2/3, 4/3)
    # Sxx = Syy = (4 + 16 + 4) / 9 / 2 = 4/3, Sxy = (4 - 8 - 8) / 9 / 2 = -2/3
    a = class_statistics(torch.tensor([[0.0, 0.0], [2.0, 0.0]]), torch.tensor([3, 3]))
    b = class_statistics(torch.tensor([[0.0, 2.0]]), torch.tensor([3]))
    assert a[CLASSES].tolist() == [3] and a[COUNTS].tolist() == [2] and b[COUNTS].tolist() == [1]
    torch.testing.assert_close(a[COVS][0], torch.tensor([[2.0, 0.0], [0.0, 0.0]]))  # (0 - 1)^2 + (2 - 1)^2 over 1
    assert torch.equal(b[COVS][0], torch.zeros(2, 2))
    n, mu, sigma = pool([2, 1], [a[MEANS][0], b[MEANS][0]], [a[COVS][0], b[COVS][0]])
    assert n == 3
    torch.testing.assert_close(mu, torch.tensor([2 / 3, 2 / 3], dtype=torch.float64))
    torch.testing.assert_close(sigma, f64([[4 / 3, -2 / 3], [-2 / 3, 4 / 3]]))
    torch.testing.assert_close(sigma, torch.cov(f64([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0]]).T))


def test_a_class_seen_once_in_all_has_a_zero_covariance() -> None:
    n, mu, sigma = pool([1], [torch.tensor([1.0, 2.0])], [torch.zeros(2, 2)])
    assert n == 1 and torch.equal(sigma, torch.zeros(2, 2, dtype=torch.float64))


def test_the_client_sends_the_classes_it_holds_only() -> None:
    feats = torch.tensor([[1.0], [3.0], [5.0], [7.0], [9.0]])
    report = class_statistics(feats, torch.tensor([4, 1, 4, 4, 1]))
    assert report[CLASSES].tolist() == [1, 4] and report[COUNTS].tolist() == [2, 3]
    torch.testing.assert_close(report[MEANS], torch.tensor([[6.0], [13 / 3]]))
    # class 1: {3, 9}: (9 + 9) / 1 = 18; class 4: {1, 5, 7}: mean 13/3, ((10/3)^2 + (2/3)^2 + (8/3)^2) / 2 = 28/3
    torch.testing.assert_close(report[COVS], torch.tensor([[[18.0]], [[28 / 3]]]))


def result(cid: int, params: dict[str, torch.Tensor], report: dict[str, Any], n: int = 10) -> ClientResult:
    return ClientResult(cid, params, n, 1, 0.1, 1.0, 0.5, report)


def test_reports_pool_per_class_over_the_clients_that_hold_it() -> None:
    a = class_statistics(torch.tensor([[1.0], [3.0], [0.0]]), torch.tensor([0, 0, 2]))
    b = class_statistics(torch.tensor([[5.0], [7.0], [9.0]]), torch.tensor([0, 0, 0]))
    pooled = pool_reports([result(0, {}, a), result(1, {}, b)], 3)
    assert sorted(pooled) == [0, 2]
    assert pooled[0][0] == 5 and float(pooled[0][1]) == 5.0 and float(pooled[0][2]) == pytest.approx(10.0)
    assert pooled[2][0] == 1 and float(pooled[2][1]) == 0.0 and float(pooled[2][2]) == 0.0


def test_virtual_features_are_seeded_and_a_degenerate_covariance_samples_within_the_ridge() -> None:
    pooled = {0: (4, torch.tensor([1.0, -1.0], dtype=torch.float64), torch.zeros(2, 2, dtype=torch.float64)),
              2: (9, torch.tensor([0.0, 0.0], dtype=torch.float64), f64([[4.0, 0.0], [0.0, 0.0]]))}
    x, y = draw_virtual(pooled, 50, torch.Generator().manual_seed(7))
    x2, _ = draw_virtual(pooled, 50, torch.Generator().manual_seed(7))
    assert torch.equal(x, x2) and y.tolist() == [0] * 50 + [2] * 50
    spread = (x[:50] - torch.tensor([1.0, -1.0], dtype=torch.float64)).abs()
    assert 0 < float(spread.max()) < 10 * RIDGE ** 0.5  # N(mu, ridge I): a few standard deviations sqrt(ridge) at most
    assert float(x[50:, 0].std()) > 1.0 and float(x[50:, 1].abs().max()) < 10 * RIDGE ** 0.5  # variance 4 along x, none along y


class Counting(nn.Linear):
    """A linear head that records the number of rows of every batch it is called on."""

    def __init__(self) -> None:
        super().__init__(2, 3, dtype=torch.float64)
        self.batches: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.batches.append(len(x))
        return super().forward(x)


HEAD_W = f64([[0.5, -1.0], [0.0, 2.0], [-1.5, 0.5]])
HEAD_B = torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64)
ROWS_X = f64([[1.0, 2.0], [-1.0, 0.5], [3.0, -2.0], [0.0, -1.0]])
ROWS_Y = torch.tensor([2, 0, 1, 1])


def sgd_step_by_hand(w: torch.Tensor, b: torch.Tensor, x: torch.Tensor, y: torch.Tensor, lr: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One SGD step of the mean cross-entropy of softmax(x W^T + b), from its closed-form gradient:
    dL/dlogits = (softmax - onehot(y)) / B, so dW = (P - Y)^T x / B and db = sum_i (P - Y)_i / B."""
    logits = x @ w.T + b
    e = (logits - logits.max(dim=1, keepdim=True).values).exp()
    g = (e / e.sum(dim=1, keepdim=True) - torch.eye(3, dtype=torch.float64)[y]) / len(y)
    return w - lr * g.T @ x, b - lr * g.sum(0)


def test_one_calibration_step_is_an_sgd_step_of_cross_entropy_by_hand() -> None:
    # a batch of all four rows: the mean gradient is the same in any order of the permutation
    head = Counting()
    out = calibrate_head(head, "fc", {"fc.weight": HEAD_W, "fc.bias": HEAD_B}, ROWS_X, ROWS_Y,
                         CCVROptions(calibration_steps=1, calibration_batch=4, calibration_lr=0.3), torch.Generator().manual_seed(5))
    w, b = sgd_step_by_hand(HEAD_W, HEAD_B, ROWS_X, ROWS_Y, 0.3)
    assert head.batches == [4] and sorted(out) == ["fc.bias", "fc.weight"]
    torch.testing.assert_close(out["fc.weight"], w, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out["fc.bias"], b, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(w, HEAD_W)  # the step moves the head
    # the head's own parameters are left as they were: calibrate_head steps a copy of the global model's entries
    assert torch.equal(HEAD_W, f64([[0.5, -1.0], [0.0, 2.0], [-1.5, 0.5]]))


@pytest.mark.parametrize(("batch", "sizes", "walk"), [
    (2, [2, 2, 2], lambda p, q: [p[0:2], p[2:4], q[0:2]]),  # two batches a pass, then a fresh permutation
    (3, [3, 1, 3], lambda p, q: [p[0:3], p[3:4], q[0:3]]),  # a pass ends on its short last batch, never an empty one
], ids=["batch-2", "batch-3"])
def test_calibration_batches_walk_a_fresh_permutation_each_pass_by_hand(batch: int, sizes: list[int], walk: Any) -> None:
    head = Counting()
    out = calibrate_head(head, "fc", {"fc.weight": HEAD_W, "fc.bias": HEAD_B}, ROWS_X, ROWS_Y,
                         CCVROptions(calibration_steps=3, calibration_batch=batch, calibration_lr=0.3), torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)  # the generator's two permutations of the 4 rows, drawn again
    first, second = torch.randperm(4, generator=g), torch.randperm(4, generator=g)
    w, b = HEAD_W, HEAD_B
    for rows in walk(first, second):
        w, b = sgd_step_by_hand(w, b, ROWS_X[rows], ROWS_Y[rows], 0.3)
    assert head.batches == sizes
    torch.testing.assert_close(out["fc.weight"], w, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out["fc.bias"], b, rtol=1e-12, atol=1e-12)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
        self.fc = nn.Linear(4, 3)

    def head_name(self) -> str:
        return "fc"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x))


def reported(model: nn.Module, params: dict[str, torch.Tensor], seed: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(30, 3, generator=g), torch.arange(30) % 3
    prog = CCVR(model).client_half().train(Local(0, x, y, params, {PHASE: STATS_ONLY}, 0.1, {}, 0, LocalSpec(epochs=1, batch_size=8)))  # type: ignore[attr-defined]
    with pytest.raises(StopIteration) as stop:
        next(prog)
    return stop.value.value.report  # type: ignore[no-any-return]


@pytest.mark.parametrize("every_round", [False, True])
def test_calibration_moves_the_head_parameters_only(every_round: bool) -> None:
    torch.manual_seed(0)
    model = Net()
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    agg = CCVR(model, CCVROptions(every_round=every_round, calibration_lr=0.5), rounds=3, seed=1)
    uploads = [{k: v + 0.01 * (i + 1) for k, v in start.items()} for i in range(2)] if every_round else [start, start]
    results = [result(i, uploads[i], reported(model, start, i)) for i in range(2)]
    out = agg.aggregate(start, results, 2)
    base = start if not every_round else {k: (uploads[0][k] + uploads[1][k]) / 2 for k in start}  # equal sample counts
    assert set(out) == set(start)
    for k in start:
        if k.startswith("fc."):
            assert not torch.allclose(out[k], base[k]), k
        elif every_round:
            torch.testing.assert_close(out[k], base[k])
        else:
            assert torch.equal(out[k], start[k]), k
    if every_round:  # the next round's clients start from the average's own head
        assert agg.trained_head is not None and sorted(agg.trained_head) == ["fc.bias", "fc.weight"]
        torch.testing.assert_close(agg.downlink(0, 3, out).params["fc.weight"], base["fc.weight"])  # type: ignore[index]


def test_the_client_half_trains_as_fedavg_and_reports_only_when_asked() -> None:
    model = Net()
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    x, y = torch.randn(12, 3), torch.arange(12) % 3
    half = CCVR(model).client_half()
    for context, reports in (({}, False), ({PHASE: TRAIN_AND_STATS}, True)):
        prog = half.train(Local(0, x, y, start, context, 0.1, {}, 0, LocalSpec(epochs=1, batch_size=8)))  # type: ignore[attr-defined]
        job = next(prog)
        assert isinstance(job, Train) and job.objective is None and job.start is start
        with pytest.raises(StopIteration) as stop:
            prog.send(LocalOutcome(start, 3, 0.25))
        done = stop.value.value
        assert done.num_steps == 3 and done.train_loss == 0.25 and bool(done.report) == reports
    report = reported(model, start, 0)  # the calibration round: no training
    assert report[CLASSES].tolist() == [0, 1, 2] and report[COVS].shape == (3, 4, 4)


def test_aggregating_a_calibration_round_without_the_runs_rounds_is_refused() -> None:
    with pytest.raises(ValueError, match="rounds"):
        CCVR(Net()).downlink(0, 0, dict(Net().state_dict()))


def fedavg_state(cfg: RunConfig, rounds: int) -> dict[str, torch.Tensor]:
    """FedAvg's global model after the first ``rounds`` rounds of ``cfg``'s run (its lr schedule spans the whole run)."""
    exp = build_experiment(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))
    protocol = build_protocol(exp)
    executor = make_executor(exp, protocol)
    try:
        fed = cfg.federation
        list(run_rounds(protocol, executor, seed=cfg.seed, num_clients=exp.data.num_clients, clients_per_round=fed.sample_size(),
                        rounds=rounds, participation=fed))
    finally:
        executor.close()
    return dict(protocol.global_state())


def test_the_last_rounds_model_is_fedavgs_of_the_round_before_calibrated_and_its_accuracy_is_reported() -> None:
    cfg = config(**{"algorithm.name": "ccvr", "model.name": "mlp", "eval.clients": "none"})
    ccvr = chillfl.run(config=cfg, write=False, progress=False)
    fedavg = records(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))
    assert [(r["global_acc"], r["train_loss"]) for r in ccvr.records[:2]] == [(r["global_acc"], r["train_loss"]) for r in fedavg[:2]]
    before = fedavg_state(cfg, 2)
    assert ccvr.state is not None and ccvr.model is not None
    exp = build_experiment(cfg)
    name = head_name(exp.model, warn=False)
    changed = sorted(k for k in before if not torch.equal(ccvr.state[k], before[k]))
    assert changed == sorted(k for k, _ in exp.model.named_parameters() if k.startswith(f"{name}."))  # the head's parameters, only they
    x, y = exp.data.test()
    with torch.no_grad():
        accuracy = float((ccvr.model.eval()(x).argmax(1) == y).double().mean())
    assert ccvr.records[-1]["global_acc"] == pytest.approx(accuracy, abs=1e-12)  # the calibrated model's accuracy


def test_the_calibration_rounds_uplink_carries_the_statistics_in_the_ledger() -> None:
    """Round 3's upload adds per client and class it holds: its class and count (int64) and its mean and covariance
    (float32, d = 16 the MLP's last hidden width)."""
    cfg = config(**{"algorithm.name": "ccvr", "model.name": "mlp", "model.hidden": [16]})
    seq = records(cfg)
    exp = build_experiment(cfg)
    held = sum(len(torch.unique(exp.data.client_train(c)[1])) for c in seq[-1]["clients"])
    assert seq[-1]["bytes_up"] - seq[-2]["bytes_up"] == held * (8 + 8 + 16 * 4 + 16 * 16 * 4)


@pytest.mark.parametrize("every_round", [False, True])
def test_runs_are_deterministic_and_resume_bitwise(every_round: bool, tmp_path: Path) -> None:
    cfg = config(**{"algorithm.name": "ccvr", "algorithm.every_round": every_round, "model.name": "mlp", "federation.rounds": 2})
    seq = records(cfg)
    assert len(seq) == 2 and all(r["global_acc"] is not None for r in seq)
    assert records(cfg) == seq
    assert resumed_records(cfg, 1, tmp_path) == seq


@pytest.mark.parametrize("every_round", [False, True])
def test_executors_agree_with_a_round_that_trains_nothing(every_round: bool) -> None:
    """The calibration round's clients yield no training job: every executor runs such a client update."""
    seq = assert_executors_agree(config(**{"algorithm.name": "ccvr", "algorithm.every_round": every_round, "model.name": "mlp"}))
    assert len(seq) == 3


def test_every_round_calibrates_each_rounds_evaluation_and_not_the_training() -> None:
    cfg = config(**{"algorithm.name": "ccvr", "algorithm.every_round": True, "model.name": "mlp"})
    seq = records(cfg)
    fedavg = records(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))
    assert [r["train_loss"] for r in seq] == [r["train_loss"] for r in fedavg]  # clients train from the average's own head
    assert all(a["global_acc"] != b["global_acc"] for a, b in zip(seq, fedavg))


@pytest.mark.parametrize(("field", "value"), [
    ("virtual_per_class", 0), ("calibration_steps", 0), ("calibration_lr", 0.0), ("calibration_lr", float("inf")),
    ("calibration_batch", 0), ("every_round", "yes"), ("weighting", "squares"),
])
def test_options_are_checked(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"algorithm.{field}"):
        build_experiment(config(**{"algorithm.name": "ccvr", f"algorithm.{field}": value}))


def test_one_round_without_every_round_is_refused_on_the_rounds() -> None:
    with pytest.raises(ConfigError, match="federation.rounds"):
        build_experiment(load_config(None, {"dataset.name": "digits", "algorithm.name": "ccvr", "federation.rounds": 1}))
    build_experiment(load_config(None, {"dataset.name": "digits", "algorithm.name": "ccvr", "algorithm.every_round": True, "federation.rounds": 1}))


def test_a_bad_option_on_the_command_line_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err, written = cli_option_error(tmp_path, capsys, "ccvr", "algorithm.virtual_per_class=0")
    assert code == 2 and len(err) == 1 and "algorithm.virtual_per_class" in err[0] and not written

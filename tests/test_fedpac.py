"""FedPAC: the feature statistics, the collaboration QP, the alignment term and the server's heads by hand; a run of it."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import ClientResult, Context, Local, Train
from chillfl.aggregation.fedpac import (
    COUNTS,
    LAM,
    MASK,
    MEANS,
    PROTOS,
    STATS,
    VAR,
    AlignTerm,
    FedPAC,
    FedPACOptions,
    distance_matrix,
    project_simplex,
    solve_qp,
    statistics,
)
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.training.local import LocalOutcome, LocalSpec
from chillfl.training.terms import StepView
from chillfl.config import load_config
from methods_e2e import TINY, assert_executors_agree, config, records, resumed_records


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_statistics_by_hand() -> None:
    # features (1, 0), (3, 0) of class 0 and (0, 2) of class 1; n = 3, p = (2/3, 1/3), mu_0 = (2, 0), mu_1 = (0, 2)
    # tr(F_0^T F_0) / n_0 = (1 + 9) / 2 = 5, tr(F_1^T F_1) / n_1 = 4
    # V = (2/3 * 5 + 1/3 * 4 - 4/9 * 4 - 1/9 * 4) / 3 = (42/9 - 20/9) / 3 = 22/27; h = (p_k mu_k) = ((4/3, 0), (0, 2/3))
    v, h = statistics(torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0]]), torch.tensor([0, 0, 1]), 2)
    assert float(v) == pytest.approx(22 / 27)
    torch.testing.assert_close(h, torch.tensor([[4 / 3, 0.0], [0.0, 2 / 3]], dtype=torch.float64))


def test_distance_matrix_is_the_gram_matrix_of_the_differences() -> None:
    # h_i = (1, 0); h_0 = h_i, h_1 = (0, 1): differences (0, 0) and (1, -1) -> D = [[0, 0], [0, 2]]
    own = torch.tensor([[1.0, 0.0]])
    d = distance_matrix(own, [own, torch.tensor([[0.0, 1.0]])])
    torch.testing.assert_close(d, torch.tensor([[0.0, 0.0], [0.0, 2.0]], dtype=torch.float64))


def test_distance_matrix_keeps_the_signs_of_the_differences() -> None:
    # h_i = (1, 0); h_0 = (0, 1), h_1 = (0, -1): differences (1, -1) and (1, 1) -> D = [[2, 1 - 1], [1 - 1, 2]] = [[2, 0], [0, 2]]
    d = distance_matrix(t(1.0, 0.0), [t(0.0, 1.0), t(0.0, -1.0)])
    torch.testing.assert_close(d, torch.tensor([[2.0, 0.0], [0.0, 2.0]], dtype=torch.float64))


def test_simplex_projection_by_hand() -> None:
    # v = (0.5, 0.2, -0.3): u - (cumsum - 1) / k = (1, 0.35, -0.1) -> rho = 2, theta = (0.7 - 1) / 2 = -0.15 -> (0.65, 0.35, 0)
    torch.testing.assert_close(project_simplex(t(0.5, 0.2, -0.3)), t(0.65, 0.35, 0.0))
    torch.testing.assert_close(project_simplex(t(0.25, 0.75)), t(0.25, 0.75))  # already on the simplex


def test_qp_by_hand() -> None:
    # min a_1^2 + 3 a_2^2 on a_1 + a_2 = 1: a_1 = 3 / 4, a_2 = 1 / 4
    torch.testing.assert_close(solve_qp(torch.diag(t(1.0, 3.0)), 2000), t(0.75, 0.25))
    # a weight below 1e-3 is dropped and the rest renormalised: min a_1^2 + 10000 a_2^2 -> a_2 = 1/10001 < 1e-3 -> (1, 0)
    torch.testing.assert_close(solve_qp(torch.diag(t(1.0, 10000.0)), 2000), t(1.0, 0.0))


def _torch_iterates(p: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """Every iterate of the solver as first written, all in torch (running sums by ``itertools.accumulate``)."""
    def project(v: torch.Tensor) -> torch.Tensor:
        u = torch.sort(v, descending=True).values
        css = torch.stack(list(itertools.accumulate(u.unbind())))
        rho = int(torch.nonzero(u - (css - 1) / torch.arange(1, len(v) + 1, dtype=v.dtype) > 0).max()) + 1
        return (v - (css[rho - 1] - 1) / rho).clamp(min=0)

    a = [torch.full((p.shape[0],), 1.0 / p.shape[0], dtype=torch.float64)]
    top = float(torch.linalg.eigvalsh(p).max())
    for _ in range(steps if top > 0 else 0):
        a.append(project(a[-1] - 1.0 / (2 * top) * 2 * (p @ a[-1])))
    return a


def _weights(a: torch.Tensor) -> torch.Tensor:
    a = torch.where(a > 1e-3, a, torch.zeros_like(a))
    return a / a.sum()


def test_the_host_loop_gives_the_torch_solvers_numbers_bit_for_bit() -> None:
    """Random FedPAC-shaped problems (diag(V) + a Gram matrix; 1 to 12 clients; a zero matrix) at step counts of both
    parities: equal bit patterns, including where the loop stopped early at a fixed point or a 2-cycle (both occur)."""
    g = torch.Generator().manual_seed(0)
    stops = {"fixed point": 0, "2-cycle": 0}
    for trial in range(36):
        n = 1 + trial % 12
        h = torch.randn(n, 30, dtype=torch.float64, generator=g) * torch.rand(n, 1, dtype=torch.float64, generator=g)
        p = torch.diag(torch.rand(n, dtype=torch.float64, generator=g) * (trial % 3)) + (h[:1] - h) @ (h[:1] - h).T
        if trial == 5:
            p = torch.zeros(n, n, dtype=torch.float64)
        iterates = _torch_iterates(p, 601)
        same = [torch.equal(x.view(torch.int64), y.view(torch.int64)) for x, y in zip(iterates[1:], iterates)]
        cycle = [torch.equal(x.view(torch.int64), y.view(torch.int64)) for x, y in zip(iterates[2:], iterates)]
        stops["fixed point"] += any(same[:599])
        stops["2-cycle"] += any(c and not s for c, s in zip(cycle[:599], same))
        for steps in (1, 2, 600, 601):
            want = _weights(iterates[min(steps, len(iterates) - 1)])
            assert torch.equal(solve_qp(p, steps).view(torch.int64), want.view(torch.int64)), (trial, steps)
    assert all(stops.values()), stops


def test_alignment_term_by_hand() -> None:
    # features (1, 2) of class 0, (3, 4) of class 1; prototypes c_0 = (0, 0), class 1 has none (masked):
    # MSE = ((1 - 0)^2 + (2 - 0)^2 + 0 + 0) / 4 = 1.25; lam = 2 -> 2.5
    feats = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    step = StepView(nn.Identity(), feats, torch.tensor([0, 1]), feats, feats, torch.zeros(()), {})
    context = {LAM: 2.0, PROTOS: torch.tensor([[0.0, 0.0], [1.0, 1.0]]), MASK: torch.tensor([True, False])}
    assert float(AlignTerm()({}, context, step)) == pytest.approx(2.5)


def body_context(options: FedPACOptions, context: Context) -> Context:
    """The context of the client's body training (its second request), the head's training stubbed."""
    body = nn.Linear(2, 2)  # the identity, so the features are x
    with torch.no_grad():
        body.weight.copy_(torch.eye(2))
        body.bias.zero_()
    model = nn.Sequential(body, nn.Linear(2, 3))
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    x, y = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0]]), torch.tensor([0, 0, 1])
    prog = FedPAC(model, options).client_half().train(Local(0, x, y, start, context, 0.1, {}, 0, LocalSpec(epochs=1, batch_size=8)))  # type: ignore[attr-defined]
    head = next(prog)
    assert isinstance(head, Train) and head.objective == 0
    body = prog.send(LocalOutcome(start, 1, 0.0))
    assert isinstance(body, Train) and body.objective == 1
    return body.context


def test_client_trains_head_then_body_and_reports_the_trained_bodys_means_and_the_received_bodys_statistics() -> None:
    # head_epochs 2 with the run's 3 epochs: the head's training runs 2 epochs with the body frozen, the body's 3 with the
    # head frozen and the alignment term last. The body (the identity) and x, y of test_statistics_by_hand: received
    # features (1, 0), (3, 0), (0, 2) -> V = 22/27, h = ((4/3, 0), (0, 2/3), (0, 0)). The body's training (stubbed)
    # returns weight 2 I, bias (1, 0): trained features (3, 0), (7, 0), (1, 4) -> class means (5, 0), (1, 4), (0, 0),
    # counts (2, 1, 0). Steps: the head's 3 + the body's 5 = 8.
    body = nn.Linear(2, 2)
    with torch.no_grad():
        body.weight.copy_(torch.eye(2))
        body.bias.zero_()
    model = nn.Sequential(body, nn.Linear(2, 3))
    half = FedPAC(model, FedPACOptions(head_epochs=2)).client_half()
    spec = LocalSpec(epochs=3, batch_size=8)
    head_spec, body_spec = half.objectives(spec)  # type: ignore[attr-defined]
    assert head_spec.epochs == 2 and head_spec.frozen == {"0.weight", "0.bias"} and head_spec.terms == ()
    assert body_spec.epochs == 3 and body_spec.frozen == {"1.weight", "1.bias"} and isinstance(body_spec.terms[-1], AlignTerm)
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    x, y = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0]]), torch.tensor([0, 0, 1])
    prog = half.train(Local(0, x, y, start, {LAM: 1.0}, 0.1, {}, 0, spec))  # type: ignore[attr-defined]
    next(prog)
    prog.send(LocalOutcome(start, 3, 0.0))
    trained = {**start, "0.weight": 2 * torch.eye(2), "0.bias": torch.tensor([1.0, 0.0])}
    with pytest.raises(StopIteration) as stop:
        prog.send(LocalOutcome(trained, 5, 0.0))
    out = stop.value.value
    assert out.num_steps == 8
    torch.testing.assert_close(out.report[MEANS], torch.tensor([[5.0, 0.0], [1.0, 4.0], [0.0, 0.0]]))
    assert out.report[COUNTS].tolist() == [2.0, 1.0, 0.0]
    assert float(out.report[VAR]) == pytest.approx(22 / 27)
    torch.testing.assert_close(out.report[STATS], torch.tensor([[4 / 3, 0.0], [0.0, 2 / 3], [0.0, 0.0]]))  # the model's dtype (float32)


def test_a_class_without_a_global_prototype_aligns_to_the_clients_own_mean_before_training() -> None:
    # The client holds class 0 (features (1, 0), (3, 0): mean (2, 0)) and class 1 ((0, 2)); the server's prototypes
    # know class 0 only, c_0 = (5, 5). The authors' code aligns class 1 to the client's own mean of the received body's
    # features, (0, 2) (``local_protos1``); class 2, which it does not hold, stays unknown. ``unseen = "skip"``: no term.
    glob: Context = {LAM: 1.0, PROTOS: torch.tensor([[5.0, 5.0], [0.0, 0.0], [0.0, 0.0]]), MASK: torch.tensor([True, False, False])}
    own = body_context(FedPACOptions(), glob)
    torch.testing.assert_close(own[PROTOS], torch.tensor([[5.0, 5.0], [0.0, 2.0], [0.0, 0.0]]))
    assert tensor(own, MASK).tolist() == [True, True, False]
    skip = body_context(FedPACOptions(unseen="skip"), glob)
    torch.testing.assert_close(skip[PROTOS], glob[PROTOS])
    assert tensor(skip, MASK).tolist() == [True, False, False]
    # the first round (no global prototypes yet): no term at all, as the authors' ``round > 0``
    assert tensor(body_context(FedPACOptions(), {LAM: 1.0}), MASK).tolist() == [False, False, False]


def tensor(context: Context, key: str) -> torch.Tensor:
    value = context[key]
    assert isinstance(value, torch.Tensor)
    return value


def report(v: float, h: list[list[float]], means: list[list[float]], counts: list[float]) -> dict[str, torch.Tensor]:
    return {VAR: torch.tensor(v, dtype=torch.float64), STATS: torch.tensor(h, dtype=torch.float64), MEANS: torch.tensor(means, dtype=torch.float32), COUNTS: torch.tensor(counts, dtype=torch.float64)}


def test_server_combines_heads_and_prototypes_by_hand() -> None:
    # A two-layer model: body 0.weight / 0.bias, head 1.weight / 1.bias.
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    pac = FedPAC(model, FedPACOptions(lam=0.5))
    glob = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}

    def params(head: float) -> dict[str, torch.Tensor]:
        return {**glob, "1.weight": torch.full((2, 2), head), "1.bias": torch.full((2,), head)}

    # V = (0.5, 0.5); h_0 = ((1, 0), (0, 0)), h_1 = ((0, 1), (0, 0)).
    # Client 0: D = [[0, 0], [0, 2]], P = diag(0.5, 2.5) -> alpha = (2.5, 0.5) / 3 = (5/6, 1/6); head = 5/6 * 0 + 1/6 * 6 = 1
    # Client 1: symmetric -> alpha = (1/6, 5/6); head = 5/6 * 6 = 5
    # Prototypes weighted by the clients' class counts (the authors' protos_aggregation): class 0 held by both,
    # 1 sample at (1, 1) and 9 at (3, 3) -> (1 + 27) / 10 = (2.8, 2.8); class 1 by client 1 only -> (4, 4)
    r0 = ClientResult(0, params(0.0), 10, 1, 0.1, 1.0, 0.0, report(0.5, [[1, 0], [0, 0]], [[1, 1], [0, 0]], [1, 0]))
    r1 = ClientResult(1, params(6.0), 30, 1, 0.1, 1.0, 0.0, report(0.5, [[0, 1], [0, 0]], [[3, 3], [4, 4]], [9, 7]))
    out = pac.aggregate(glob, [r0, r1], 0)
    torch.testing.assert_close(out["1.bias"], torch.full((2,), 4.5))  # the global head: FedAvg (10 * 0 + 30 * 6) / 40
    torch.testing.assert_close(pac.heads[0]["1.weight"], torch.full((2, 2), 1.0))
    torch.testing.assert_close(pac.heads[1]["1.bias"], torch.full((2,), 5.0))
    down = pac.downlink(1, 1, out)
    assert down.params is not None and set(down.params) == {"1.weight", "1.bias"}
    assert down.context[LAM] == 0.5
    torch.testing.assert_close(down.context[PROTOS], torch.tensor([[2.8, 2.8], [4.0, 4.0]]))
    assert down.context[MASK].tolist() == [True, True]  # type: ignore[union-attr]
    uniform = FedPAC(model, FedPACOptions(lam=0.5, protos="uniform"))  # PFLlib's: the plain mean over the holders of class 0
    uniform.aggregate(glob, [r0, r1], 0)
    torch.testing.assert_close(uniform.downlink(1, 1, out).context[PROTOS], torch.tensor([[2.0, 2.0], [4.0, 4.0]]))
    assert pac.downlink(2, 1, out).params is None  # never sampled: the global head
    again = FedPAC(model, FedPACOptions(lam=0.5))
    again.load_state_dict(pac.state_dict())
    torch.testing.assert_close(again.downlink(1, 1, out).params, down.params)


def test_first_head_initial_sends_the_initial_models_head_to_a_first_time_client() -> None:
    # The authors' code: every client holds a copy of the initial model; the server overwrites every body each round
    # and only the round's clients' heads. A client first sampled in round 1 starts from the initial head.
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    glob0 = {k: torch.full_like(v, 7.0) for k, v in model.state_dict().items()}  # the initial model (round 0's global)
    r0 = ClientResult(0, {k: torch.full_like(v, 1.0) for k, v in glob0.items()}, 10, 1, 0.1, 1.0, 0.0, report(0.5, [[1, 0], [0, 0]], [[1, 1], [0, 0]], [1, 0]))
    r1 = ClientResult(1, {k: torch.full_like(v, 3.0) for k, v in glob0.items()}, 30, 1, 0.1, 1.0, 0.0, report(0.5, [[0, 1], [0, 0]], [[3, 3], [4, 4]], [9, 7]))
    for first_head in ("global", "initial"):
        pac = FedPAC(model, FedPACOptions(first_head=first_head))  # type: ignore[arg-type]
        for cid in (0, 1):
            down = pac.downlink(cid, 0, glob0)
            if first_head == "global":
                assert down.params is None  # the global head, which is the initial one in round 0
            else:
                assert down.params is not None and set(down.params) == {"1.weight", "1.bias"}
                assert all(torch.equal(v, glob0[k]) for k, v in down.params.items())
        glob1 = pac.aggregate(glob0, [r0, r1], 0)
        torch.testing.assert_close(glob1["1.bias"], torch.full((2,), 2.5))  # the averaged head: (10 * 1 + 30 * 3) / 40
        newcomer = pac.downlink(2, 1, glob1)
        if first_head == "global":
            assert newcomer.params is None  # client 2 starts from the averaged head, 2.5
        else:
            assert newcomer.params is not None and torch.equal(newcomer.params["1.bias"], torch.full((2,), 7.0))  # the initial head
            assert set(newcomer.params) == {"1.weight", "1.bias"}  # the body is the global one
        combined = pac.downlink(0, 1, glob1).params
        assert combined is not None and torch.equal(combined["1.bias"], pac.heads[0]["1.bias"])  # a returning client: its combined head
        again = FedPAC(model, FedPACOptions(first_head=first_head))  # type: ignore[arg-type]
        again.load_state_dict(pac.state_dict())  # the initial head is checkpointed: a resumed run sends it, not the current global head
        resumed = again.downlink(3, 2, glob1).params
        assert (resumed is None) if first_head == "global" else (resumed is not None and torch.equal(resumed["1.weight"], glob0["1.weight"]))
    assert set(FedPAC(model).state_dict()) == {"protos", "heads"}  # the default's checkpoint layout is unchanged
    with pytest.raises(ValueError, match="FedPAC state"):
        FedPAC(model, FedPACOptions(first_head="initial")).load_state_dict(FedPAC(model).state_dict())


def test_head_lr_sets_the_heads_training_step_and_leaves_the_bodys() -> None:
    # The authors' code trains the head at a fixed lr_g = 0.1 and the body at --lr; unset, both take the round's (None).
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 3))
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    x, y = torch.tensor([[1.0, 0.0], [0.0, 2.0]]), torch.tensor([0, 1])
    for options, expected in ((FedPACOptions(), None), (FedPACOptions(head_lr=0.1), 0.1)):
        prog = FedPAC(model, options).client_half().train(Local(0, x, y, start, {LAM: 1.0}, 0.01, {}, 0, LocalSpec(epochs=1, batch_size=8)))  # type: ignore[attr-defined]
        head = next(prog)
        assert isinstance(head, Train) and head.objective == 0 and head.lr == expected
        body = prog.send(LocalOutcome(start, 1, 0.0))
        assert isinstance(body, Train) and body.objective == 1 and body.lr is None


@pytest.mark.parametrize(("field", "value"), [("lam", -1.0), ("head_epochs", 0), ("qp_steps", 0), ("unseen", "zero"), ("head_lr", 0.0), ("first_head", "averaged")])
def test_options_are_checked(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=f"algorithm.{field}"):
        build_experiment(config(**{"algorithm.name": "fedpac", f"algorithm.{field}": value}))


def test_run_agrees_across_executors_and_resumes_bitwise(tmp_path: Path) -> None:
    cfg = config(**{"algorithm.name": "fedpac", "model.name": "mlp"})
    seq = assert_executors_agree(cfg)
    assert all(r["local_acc"] is not None for r in seq)
    assert seq[-1]["local_loss"] != records(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))[-1]["local_loss"]
    assert resumed_records(cfg, 1, tmp_path) == seq


def test_first_head_initial_acts_under_partial_participation_and_resumes_bitwise(tmp_path: Path) -> None:
    """Client 3 is first sampled in round 2 (after the checkpoint of round 1): it starts from the initial head, which the
    resumed run reads from the checkpoint."""
    cfg = config(**{"algorithm.name": "fedpac", "algorithm.first_head": "initial", "model.name": "mlp"})
    seq = records(cfg)
    assert [r["clients"] for r in seq] == [[0, 1, 2], [0, 1, 2], [1, 2, 3]]
    default = records(cfg.with_overrides({"algorithm": {"name": "fedpac"}}))
    assert default[:2] == seq[:2]  # every client of rounds 0 and 1 first trained in round 0, whose global head is the initial one
    assert default[2]["client_train_loss"]["3"] != seq[2]["client_train_loss"]["3"]
    assert default[2]["client_train_loss"]["1"] == seq[2]["client_train_loss"]["1"]  # a returning client: its combined head either way
    assert resumed_records(cfg, 2, tmp_path) == seq


@pytest.mark.slow  # the process pool's start: seconds
def test_first_head_initial_under_every_executor() -> None:
    assert_executors_agree(config(**{"algorithm.name": "fedpac", "algorithm.first_head": "initial", "model.name": "mlp"}))


def test_unseen_classes_act_under_partial_participation_and_executors_agree() -> None:
    """Two of ten shard clients a round: a client holds classes the last round's prototypes lack, so ``own`` and ``skip`` differ."""
    cfg = load_config(None, {**{k: v for k, v in TINY.items() if k != "partition.alpha"}, "algorithm.name": "fedpac", "model.name": "mlp",
                             "partition.name": "shards", "federation.num_clients": 10, "federation.clients_per_round": 2})
    seq = assert_executors_agree(cfg)
    skip = records(cfg.with_overrides({"algorithm": {"name": "fedpac", "unseen": "skip"}}))
    assert [r["local_loss"] for r in seq[:2]] != [r["local_loss"] for r in skip[:2]]
    assert seq[0] == skip[0]  # the first round has no prototypes: the same

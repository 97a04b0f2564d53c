"""APPLE: the combination, the p_i step, the loss scheduler and the download rule on hand-worked values, the client
update through the real parameter-sharing client, runs under the executors, resume, and option refusals.

The client cases use a scalar model z = w x (``linear(0.0)``), x = 1 and f = 1/2 (z - 1)^2 (``half_mse``), so that the
gradient at theta_hat is g = theta_hat - 1 and every step is a line of arithmetic.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from chillfl.aggregation.apple import (
    APPLE,
    APPLEOptions,
    IDS,
    MODEL,
    P,
    P0,
    PROX,
    RelationProximal,
    choose_downloads,
    combine,
    download_base,
    fill,
    initial_relations,
    loss_scheduler,
)
from chillfl.aggregation.base import ClientResult
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.training.local import LocalSpec
from methods_e2e import assert_executors_agree, cli_option_error, config, records, resumed_records
from test_personalised import close, half_mse, linear, run_client


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values)


def one_step() -> LocalSpec:
    return LocalSpec(epochs=1, batch_size=8, base_loss=half_mse)


# ---------------------------------------------------------------- formulas


def test_combination_takes_the_own_core_model_for_its_own_slot() -> None:
    # p = [0.5, 0.25, 0.25], i = 0, theta_0 = 2, copies [9 (own slot: ignored), 4, 3]:
    # theta_hat = 0.5 * 2 + 0.25 * 4 + 0.25 * 3 = 1 + 1 + 0.75 = 2.75
    out = combine(t(0.5, 0.25, 0.25), t(1.0, 0.0, 0.0), t(2.0), t(9.0, 4.0, 3.0))
    close(out, 2.75)
    # i = 1 instead: 0.5 * 9 + 0.25 * 2 (theta_1 in place of the copy 4) + 0.25 * 3 = 4.5 + 0.5 + 0.75 = 5.75
    close(combine(t(0.5, 0.25, 0.25), t(0.0, 1.0, 0.0), t(2.0), t(9.0, 4.0, 3.0)), 5.75)


def test_copies_not_held_are_the_global_model() -> None:
    # held = [0, 1, 0]: slots 0 and 2 take the global 7 (a [2]-shaped parameter: each slot a row)
    out = fill({"w": torch.tensor([[1.0, 1.0], [4.0, 5.0], [3.0, 3.0]])}, t(0.0, 1.0, 0.0), {"w": t(7.0, 8.0)})
    torch.testing.assert_close(out["w"], torch.tensor([[7.0, 8.0], [4.0, 5.0], [7.0, 8.0]]))


def test_loss_scheduler_by_hand() -> None:
    # cosine, L = 4: (cos(pi r / 4) + 1) / 2 = 1, (0.70711 + 1) / 2 = 0.85355, 0.5, (1 - 0.70711) / 2 = 0.14645, then 0
    cos = [loss_scheduler(r, 4, "cosine") for r in range(6)]
    assert cos == pytest.approx([1.0, 0.8535534, 0.5, 0.1464466, 0.0, 0.0], abs=1e-7)
    # exponential, L = 4: 0.001^(r / 4) = 1, 0.17783, 0.031623, 0.0056234, then 0
    exp = [loss_scheduler(r, 4, "exponential") for r in range(6)]
    assert exp == pytest.approx([1.0, 0.1778279, 0.0316228, 0.0056234, 0.0, 0.0], abs=1e-7)
    # L = 0 (a short run: int(0.1 * 3) = 0): always 0, as the authors' get_reg_coef
    assert loss_scheduler(0, 0, "exponential") == 0.0


def test_server_sends_lambda_mu_and_p0() -> None:
    # sizes (1, 1, 2): p0 = [0.25, 0.25, 0.5]; rounds 10, share 0.2: L = 2; mu 0.1, exponential:
    # r = 0: 0.1 * 1 = 0.1; r = 1: 0.1 * 0.001^0.5 = 0.0031623; r = 2: 0
    server = APPLE(3, linear(0.0), APPLEOptions(schedule_share=0.2), client_sizes=(1, 1, 2), rounds=10)
    g = {"weight": torch.zeros(1, 1)}
    assert [server.downlink(0, r, g).context[PROX] for r in range(3)] == pytest.approx([0.1, 0.0031623, 0.0], abs=1e-7)
    torch.testing.assert_close(server.downlink(0, 0, g).context[P0], t(0.25, 0.25, 0.5))
    close(initial_relations(4, None, "uniform"), 0.25, 0.25, 0.25, 0.25)


@pytest.mark.parametrize(("reading", "weight", "value", "grad"), [("sum", 0.1, 0.0005, 0.01), ("half", 0.05, 0.00025, 0.005)])
def test_the_proximal_term_by_hand_in_both_readings(reading: str, weight: float, value: float, grad: float) -> None:
    # mu 0.1 at round 0 (lambda = 1): the client's ||p - p0||^2 is multiplied by 0.1 (the authors' reg_loss, no 1/2) or by
    # 0.1 / 2 = 0.05 ("half"). p = [0.5, 0.25, 0.25], p0 = [0.5, 0.3, 0.2]: ||p - p0||^2 = 0 + 0.0025 + 0.0025 = 0.005,
    # so the term is 0.1 * 0.005 = 0.0005 or 0.05 * 0.005 = 0.00025; its gradient 2 c (p - p0) = 2 c [0, -0.05, 0.05]
    # = [0, -0.01, 0.01] or [0, -0.005, 0.005].
    server = APPLE(3, linear(0.0), APPLEOptions(proximal=reading), client_sizes=(1, 1, 2), rounds=10)
    c = server.downlink(0, 0, {"weight": torch.zeros(1, 1)}).context[PROX]
    assert c == pytest.approx(weight, abs=1e-12)
    p = t(0.5, 0.25, 0.25).requires_grad_(True)
    term = RelationProximal()({"p": p}, {PROX: c, P0: t(0.5, 0.3, 0.2)})
    assert float(term.detach()) == pytest.approx(value, abs=1e-9)
    (d,) = torch.autograd.grad(term, p)
    close(d, 0.0, -grad, grad)


# ---------------------------------------------------------------- the client's step


def client_0_of_3() -> dict[str, torch.Tensor]:
    """Client 0 of 3 as the hand-worked tests start it: core model theta_0 = 2, p = [0.5, 0.25, 0.25], a held copy 4
    of client 1's core model (slots 0 and 2 not held)."""
    return {
        "apple.core.weight": torch.tensor([[2.0]]),
        "apple.p": t(0.5, 0.25, 0.25),
        "apple.bank.weight": torch.tensor([[[0.0]], [[4.0]], [[0.0]]]),
        "apple.held": t(0.0, 1.0, 0.0),
        "apple.own": t(1.0, 0.0, 0.0),
    }

def test_core_model_and_relationship_step_by_hand() -> None:
    # client 0 of 3; theta_0 = 2, p = [0.5, 0.25, 0.25], p0 = [0.5, 0.3, 0.2], lambda mu = 0.5; it holds a copy 4 of
    # client 1's core model and is sent client 2's, 3.  lr 0.1 (theta_0), p_lr 0.01 (p).
    # theta_hat = 0.5 * 2 + 0.25 * 4 + 0.25 * 3 = 2.75; g = 2.75 - 1 = 1.75
    # theta_0: p_00 g = 0.875                       -> 2 - 0.1 * 0.875 = 1.9125
    # p_j: <g, theta_j> + 2 * 0.5 * (p_j - p0_j) = [3.5 + 0, 7 - 0.05, 5.25 + 0.05] = [3.5, 6.95, 5.3]
    #                                               -> p = [0.5 - 0.035, 0.25 - 0.0695, 0.25 - 0.053] = [0.465, 0.1805, 0.197]
    # personalised after: 0.465 * 1.9125 + 0.1805 * 4 + 0.197 * 3 = 0.8893125 + 0.722 + 0.591 = 2.2023125
    model = linear(0.0)
    half = APPLE(3, model, APPLEOptions(p_lr=0.01)).client_half()
    state = client_0_of_3()
    context: dict[str, Any] = {PROX: 0.5, P0: t(0.5, 0.3, 0.2), IDS: torch.tensor([2]), f"{MODEL}0": {"weight": torch.tensor([[3.0]])}}
    reply = run_client(half, model, one_step(), {"weight": torch.tensor([[1.0]])}, lr=0.1, state=state, context=context)
    assert reply.state is not None
    close(reply.uplink.params["weight"], 1.9125)
    close(reply.state["apple.core.weight"], 1.9125)
    close(reply.state["apple.p"], 0.465, 0.1805, 0.197)
    close(reply.state["apple.bank.weight"], 4.0, 3.0)  # the copy sent is kept (and only the copies held)
    assert reply.state["apple.held"].tolist() == [1, 2]
    close(state["apple.held"], 0.0, 1.0, 0.0)  # the state it came with is not written to
    close(half.personal_model(reply.state, {"weight": torch.tensor([[1.0]])})["weight"], 2.2023125)
    assert torch.equal(reply.uplink.report[IDS], torch.tensor([2]))
    close(reply.uplink.report[P], 0.465, 0.1805, 0.197)


@pytest.mark.parametrize(("momentum", "expected"), [(0.5, (0.42265, 0.0953, 0.133975)), (0.0, (0.44015, 0.1303, 0.160225))])
def test_two_steps_of_p_with_and_without_momentum_by_hand(momentum: float, expected: tuple[float, float, float]) -> None:
    # client 0 of 3 as above (theta_0 = 2, p = [0.5, 0.25, 0.25], copy 4 of client 1 held, client 2's 3 sent); lr 0 holds
    # theta_0 at 2, no proximal term; p_lr 0.01; one sample, two epochs: two steps. dL/dp = g [2, 4, 3], g = theta_hat - 1.
    # step 1: theta_hat = 1 + 1 + 0.75 = 2.75, g = 1.75, grad [3.5, 7, 5.25]; b = grad (from zero: 0.5 * 0 + grad)
    #         p = [0.5, 0.25, 0.25] - 0.01 [3.5, 7, 5.25] = [0.465, 0.18, 0.1975]
    # step 2: theta_hat = 0.93 + 0.72 + 0.5925 = 2.2425, g = 1.2425, grad [2.485, 4.97, 3.7275]
    #   momentum 0.5: b = 0.5 [3.5, 7, 5.25] + grad = [4.235, 8.47, 6.3525]
    #         p = [0.465 - 0.04235, 0.18 - 0.0847, 0.1975 - 0.063525] = [0.42265, 0.0953, 0.133975]
    #   momentum 0 (the plain step): p = [0.465 - 0.02485, 0.18 - 0.0497, 0.1975 - 0.037275] = [0.44015, 0.1303, 0.160225]
    model = linear(0.0)
    half = APPLE(3, model, APPLEOptions(p_lr=0.01, p_momentum=momentum)).client_half()
    context: dict[str, Any] = {PROX: 0.0, P0: t(0.5, 0.3, 0.2), IDS: torch.tensor([2]), f"{MODEL}0": {"weight": torch.tensor([[3.0]])}}
    spec = LocalSpec(epochs=2, batch_size=8, base_loss=half_mse)
    reply = run_client(half, model, spec, {"weight": torch.tensor([[1.0]])}, lr=0.0, state=client_0_of_3(), context=context)
    assert reply.state is not None
    close(reply.state["apple.p"], *expected)
    close(reply.state["apple.core.weight"], 2.0)


def test_the_runs_proximal_term_applies_to_the_core_model_only() -> None:
    # the hand case above plus [objective] proximal_mu = 1 around the anchor 1:
    # theta_0: p_00 g + mu (theta_0 - 1) = 0.875 + 1 = 1.875 -> 2 - 0.1875 = 1.8125; p as before (theta_hat used theta_0 = 2)
    from chillfl.training.objective import ProximalTerm

    model = linear(0.0)
    half = APPLE(3, model, APPLEOptions(p_lr=0.01)).client_half()
    state = client_0_of_3()
    context: dict[str, Any] = {PROX: 0.5, P0: t(0.5, 0.3, 0.2), IDS: torch.tensor([2]), f"{MODEL}0": {"weight": torch.tensor([[3.0]])}}
    context.update({"mu": 1.0, "global_params": {"weight": torch.tensor([[1.0]])}})
    spec = LocalSpec(epochs=1, batch_size=8, base_loss=half_mse, terms=(ProximalTerm(),))
    reply = run_client(half, model, spec, {"weight": torch.tensor([[1.0]])}, lr=0.1, state=state, context=context)
    assert reply.state is not None
    close(reply.uplink.params["weight"], 1.8125)
    close(reply.state["apple.p"], 0.465, 0.1805, 0.197)


def test_the_runs_frozen_parameters_are_the_core_models() -> None:
    # the hand case above with the run's "weight" frozen: theta_0 stays 2, p steps as there (its gradient is taken at the
    # same theta_hat = 2.75): [0.465, 0.1805, 0.197]
    model = linear(0.0)
    half = APPLE(3, model, APPLEOptions(p_lr=0.01)).client_half()
    context: dict[str, Any] = {PROX: 0.5, P0: t(0.5, 0.3, 0.2), IDS: torch.tensor([2]), f"{MODEL}0": {"weight": torch.tensor([[3.0]])}}
    spec = LocalSpec(epochs=1, batch_size=8, base_loss=half_mse, frozen=frozenset({"weight"}))
    reply = run_client(half, model, spec, {"weight": torch.tensor([[1.0]])}, lr=0.1, state=client_0_of_3(), context=context)
    assert reply.state is not None
    close(reply.uplink.params["weight"], 2.0)
    close(reply.state["apple.p"], 0.465, 0.1805, 0.197)


def test_the_own_slot_is_the_clients_id() -> None:
    # client 1 of 3: its one-hot (which slot of p_i weighs its core model theta_1) is [0, 1, 0]
    from chillfl.aggregation.base import Local, Train

    half = APPLE(3, linear(0.0), APPLEOptions()).client_half()
    local = Local(1, torch.ones(1, 1), torch.zeros(1, dtype=torch.long), {"weight": torch.tensor([[3.0]])}, {PROX: 0.0, P0: t(0.2, 0.3, 0.5)},
                  0.1, {}, 0, one_step())
    request = next(half.train(local))  # type: ignore[attr-defined]
    assert isinstance(request, Train)
    close(request.start["own"], 0.0, 1.0, 0.0)
    close(request.start["p"], 0.2, 0.3, 0.5)  # a first participation starts from p^0


def test_a_copy_sent_again_replaces_the_stale_one() -> None:
    # client 0 of 3 holds a copy 4 of client 1's core model and is sent client 1's newer one, 6; no step (lr 0, p_lr 0);
    # slot 2 is not held: the global 1. theta_hat = 0.5 * 2 + 0.25 * 6 + 0.25 * 1 = 1 + 1.5 + 0.25 = 2.75
    model = linear(0.0)
    half = APPLE(3, model, APPLEOptions(p_lr=0.0)).client_half()
    state = client_0_of_3()
    context: dict[str, Any] = {PROX: 0.0, P0: t(0.5, 0.25, 0.25), IDS: torch.tensor([1]), f"{MODEL}0": {"weight": torch.tensor([[6.0]])}}
    reply = run_client(half, model, one_step(), {"weight": torch.tensor([[1.0]])}, lr=0.0, state=state, context=context)
    assert reply.state is not None
    close(reply.state["apple.bank.weight"], 6.0)
    assert reply.state["apple.held"].tolist() == [1]
    close(half.personal_model(reply.state, {"weight": torch.tensor([[1.0]])})["weight"], 2.75)


def test_first_participation_starts_from_the_global_model_and_p0() -> None:
    # no state, global w = 3, p0 = [0.25, 0.75], lambda mu = 0 (client 0 of 2, nothing sent):
    # every slot is the global model: theta_hat = 0.25 * 3 + 0.75 * 3 = 3, g = 2
    # theta_0: 0.25 * 2 = 0.5 -> 3 - 0.1 * 0.5 = 2.95; p_j: g * 3 = 6 -> p = [0.25 - 0.06, 0.75 - 0.06] = [0.19, 0.69]
    model = linear(0.0)
    half = APPLE(2, model, APPLEOptions(p_lr=0.01)).client_half()
    reply = run_client(half, model, one_step(), {"weight": torch.tensor([[3.0]])}, lr=0.1, context={PROX: 0.0, P0: t(0.25, 0.75)})
    assert reply.state is not None
    close(reply.uplink.params["weight"], 2.95)
    close(reply.state["apple.p"], 0.19, 0.69)
    assert reply.state["apple.held"].tolist() == []


def test_local_accuracy_is_the_personalised_models() -> None:
    # two classes, x = 1, no step (lr 0, p_lr 0): theta_0 = [1, 0] predicts class 0; client 1's copy [0, 5];
    # p = [0.5, 0.5]: theta_hat = [0.5, 2.5] predicts class 1, the label: local accuracy 1 (theta_0's would be 0)
    model = linear(0.0, 0.0)
    half = APPLE(2, model, APPLEOptions(p_lr=0.0)).client_half()
    state = {
        "apple.core.weight": torch.tensor([[1.0], [0.0]]),
        "apple.p": t(0.5, 0.5),
        "apple.bank.weight": torch.tensor([[[0.0], [0.0]], [[0.0], [5.0]]]),
        "apple.held": t(0.0, 1.0),
        "apple.own": t(1.0, 0.0),
    }
    reply = run_client(
        half, model, one_step(), {"weight": torch.zeros(2, 1)}, lr=0.0, state=state, context={PROX: 0.0, P0: t(0.5, 0.5)}, x_eval=torch.ones(1, 1), y_eval=torch.ones(1, dtype=torch.long)
    )
    assert reply.local_acc == 1.0


# ---------------------------------------------------------------- downloads


def test_download_base_by_hand() -> None:
    # max(1.5, 1.0 * r M / N): r = 1, M = 2, N = 4 -> 0.5 < 1.5: 1.5; r = 10 -> 5
    assert download_base(1, 2, 4, 1.5, 1.0) == 1.5
    assert download_base(10, 2, 4, 1.5, 1.0) == 5.0


def test_downloads_are_bounded_never_sent_first() -> None:
    g = torch.Generator().manual_seed(0)
    p = t(0.0, 0.0, 0.0, 0.0, 0.0)
    assert choose_downloads([1, 2, 3], set(), p, None, 1.5, g) == [1, 2, 3]  # unbounded: all
    assert choose_downloads([1, 2, 3], set(), p, 3, 1.5, g) == [1, 2, 3]  # M >= candidates: all
    for seed in range(20):  # three never sent, M = 2: two of them, never client 1
        chosen = choose_downloads([1, 2, 3, 4], {2, 3, 4}, p, 2, 1.5, torch.Generator().manual_seed(seed))
        assert len(chosen) == 2 and set(chosen) <= {2, 3, 4}
    # one never sent (3), M = 2: 3, and one of {1, 2}
    assert all(3 in choose_downloads([1, 2, 3], {3}, p, 2, 1.5, torch.Generator().manual_seed(s)) for s in range(20))


def test_relationship_draw_favours_large_weights() -> None:
    # candidates 1 (p = 0) and 2 (|p| = 2), M = 1, base 1.5: weights 1.5^0 = 1 and 1.5^2 = 2.25,
    # P(2) = 2.25 / 3.25 = 0.6923; over 2000 seeded draws the share is within 0.05 (5 standard deviations of 0.0103)
    p = t(0.0, 0.0, -2.0)
    twos = sum(choose_downloads([1, 2], set(), p, 1, 1.5, torch.Generator().manual_seed(s)) == [2] for s in range(2000))
    assert abs(twos / 2000 - 2.25 / 3.25) < 0.05
    # uniform: 1/2 each, whatever p
    twos = sum(choose_downloads([1, 2], set(), p, 1, 1.5, torch.Generator().manual_seed(s), "uniform") == [2] for s in range(2000))
    assert abs(twos / 2000 - 0.5) < 0.06


def test_relationship_draws_are_without_replacement() -> None:
    # M = 2 of 3 candidates, none never sent: 2 distinct ids every time (with replacement, 1/3 of draws would repeat one)
    p = t(0.0, 0.0, 0.0, 0.0)
    assert all(len(set(choose_downloads([1, 2, 3], set(), p, 2, 1.5, torch.Generator().manual_seed(s)))) == 2 for s in range(20))


def test_schedule_length_rounds_down() -> None:
    # schedule_share 0.15 of 10 rounds: L = int(1.5) = 1, so lambda(1) = 0; lambda(0) = 1, times mu = 1
    server = APPLE(3, linear(0.0), APPLEOptions(mu=1.0, scheduler="cosine", schedule_share=0.15), client_sizes=(1, 1, 1), rounds=10)
    assert server.proximal_weight(0) == 1.0 and server.proximal_weight(1) == 0.0


def test_server_draws_with_the_clients_reported_relationships_and_weights_the_global_model_by_samples() -> None:
    # 4 clients, M = 1; client 0 was sent 1, 2, 3 before and reported p_0 = (0, 0, 0, 3). base = threshold = 1e6:
    # weights 1e6^0 = 1, 1, and 1e6^3 = 1e18 -> client 3 (the start p^0 = 1/4 each would draw uniformly).
    # The global model: sizes 1, 1, 1, 5 and w = 0, 1, 2, 3 -> (0 + 1 + 2 + 15) / 8 = 2.25
    def result(cid: int, n: int, report: dict[str, torch.Tensor]) -> ClientResult:
        return ClientResult(cid, {"weight": torch.tensor([[float(cid)]])}, n, 1, 0.1, 1.0, 0.0, dict(report))

    for seed in range(10):
        server = APPLE(4, linear(0.0), APPLEOptions(downloads=1, threshold=1e6), client_sizes=(1, 1, 1, 5), rounds=10, seed=seed)
        reported = {IDS: torch.tensor([1, 2, 3]), P: t(0.0, 0.0, 0.0, 3.0).double()}
        glob = server.aggregate({"weight": torch.zeros(1, 1)}, [result(0, 1, reported), result(1, 1, {}), result(2, 1, {}), result(3, 5, {})], 0)
        close(glob["weight"], 2.25)
        assert server.choose(0, 1) == [3]


def test_server_sends_at_most_m_models_never_sent_ones_first() -> None:
    server = APPLE(4, linear(0.0), APPLEOptions(downloads=2), client_sizes=(1, 1, 1, 1), rounds=10)
    g = {"weight": torch.zeros(1, 1)}
    assert IDS not in server.downlink(0, 0, g).context  # nothing held yet

    def result(cid: int, w: float, sent: list[int]) -> ClientResult:
        report: dict[str, Any] = {IDS: torch.tensor(sent, dtype=torch.int64), P: torch.full((4,), 0.25, dtype=torch.float64)}
        return ClientResult(cid, {"weight": torch.tensor([[w]])}, 1, 1, 0.1, 1.0, 0.0, report)

    glob = server.aggregate(g, [result(0, 0.0, [1]), result(1, 1.0, []), result(2, 2.0, []), result(3, 3.0, [])], 0)
    close(glob["weight"], 1.5)  # FedAvg of 0, 1, 2, 3 with equal sizes
    assert server.sent[0] == {1}
    # client 0 may get 2 of 1, 2, 3; it was sent 1 before, and 2 and 3 never: exactly M = 2 never-sent ones
    context = server.downlink(0, 1, g).context
    assert context[IDS].tolist() == [2, 3]
    close(context[f"{MODEL}0"]["weight"], 2.0)  # each model sent is that client's latest upload
    close(context[f"{MODEL}1"]["weight"], 3.0)
    # client 1 was sent none: 2 of the 3 never-sent 0, 2, 3, drawn uniformly
    ids = server.downlink(1, 1, g).context[IDS].tolist()
    assert len(ids) == 2 and set(ids) <= {0, 2, 3}


# ---------------------------------------------------------------- runs


TINY_APPLE: dict[str, Any] = {"algorithm.name": "apple", "model.name": "mlp", "algorithm.downloads": 2, "algorithm.schedule_share": 1.0}
"""Two downloads of three held models, and lambda(r) > 0 throughout the 3 rounds (L = 3)."""


@pytest.mark.slow  # the process pool's start dominates (about 20 s on a loaded 2-core machine)
def test_run_agrees_across_executors() -> None:
    seq = assert_executors_agree(config(**TINY_APPLE))
    assert all(r["local_acc"] is not None for r in seq)


def test_p_momentum_changes_the_run_and_the_vectorized_executor_agrees() -> None:
    cfg = config(**TINY_APPLE, **{"algorithm.p_momentum": 0.9})
    seq = records(cfg)
    assert [r["train_loss"] for r in seq] != [r["train_loss"] for r in records(config(**TINY_APPLE))]
    vec = records(cfg.with_overrides({"executor": "vectorized"}))
    assert [r["train_loss"] for r in vec] == pytest.approx([r["train_loss"] for r in seq], rel=1e-4, abs=1e-6)


@pytest.mark.parametrize(
    "options", [{}, {"algorithm.selection": "uniform", "algorithm.scheduler": "cosine", "algorithm.p0": "uniform", "algorithm.p_momentum": 0.9}]
)
def test_resume_is_bitwise(options: dict[str, Any], tmp_path: Path) -> None:
    cfg = config(**TINY_APPLE, **options)
    assert resumed_records(cfg, 2, tmp_path) == records(cfg)


@pytest.mark.parametrize(
    ("field", "value"),
    [("mu", -1.0), ("schedule_share", 1.5), ("p_lr", math.inf), ("p_momentum", 1.0), ("downloads", 0), ("threshold", 0.5), ("growth", -1.0),
     ("scheduler", "linear"), ("proximal", "third")],
)
def test_options_are_checked(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"algorithm.{field}"):
        build_experiment(config(**{"algorithm.name": "apple", f"algorithm.{field}": value}))


def test_a_bad_option_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err, folder = cli_option_error(tmp_path, capsys, "apple", "algorithm.downloads=0")
    assert (code, folder) == (2, False)
    assert err == ["chillfl: error: algorithm.downloads: must be >= 1 (unset: every core model), got 0"]


def test_banks_past_this_machines_memory_are_refused_at_build(monkeypatch: pytest.MonkeyPatch) -> None:
    # every client keeps a bank of all N core models: 4 bytes x P trainable parameters x N^2 in all
    cfg = config(**{"algorithm.name": "apple"})
    exp = build_experiment(cfg)
    n = exp.data.num_clients
    p = sum(t.numel() for t in exp.model.parameters() if t.requires_grad)
    need = 4 * p * n * n
    monkeypatch.setattr("chillfl.options.total_memory_bytes", lambda: need)  # exactly enough: built
    build_experiment(cfg)
    monkeypatch.setattr("chillfl.options.total_memory_bytes", lambda: need - 1)  # a byte short: one line on the client count
    with pytest.raises(ConfigError, match=r"^federation\.num_clients: APPLE keeps, for each of the \d+ clients") as caught:
        build_experiment(cfg)
    assert "\n" not in str(caught.value)

"""FedAMP and FedFomo: their formulas on hand-worked values, their server state, and a run of each.

Both keep every client's latest model on the server; FedAMP sends each client its cloud model u_i, FedFomo the M models
its client rates highest, which the client weights on its validation split.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import ClientResult, Local, Train
from chillfl.aggregation.fedamp import CLOUD, WEIGHT, FedAMP, FedAMPOptions, attention, cloud_model
from chillfl.aggregation.fedfomo import (
    IDS,
    MODEL,
    WEIGHTS,
    FedFomo,
    FedFomoOptions,
    combine_models,
    fomo_weights,
    ranked,
    validation_rows,
    validation_split,
)
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.training.local import LocalSpec, evaluate
from methods_e2e import assert_executors_agree, config, records, resumed_records
from test_personalised import run_client


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values)


def result(cid: int, w: float, n: int = 10, **report: torch.Tensor) -> ClientResult:
    return ClientResult(cid, {"w": t(w)}, n, 1, 0.1, 1.0, 0.0, dict(report))


# ---------------------------------------------------------------- FedAMP


def test_fedamp_attention_and_cloud_model_by_hand() -> None:
    # w_i = 0, w_1 = 1, w_2 = 2; alpha_k = 1, sigma = 1: xi_i1 = e^-1 = 0.3678794, xi_i2 = e^-4 = 0.0183156
    # xi_ii = 1 - 0.3861951 = 0.6138049; u_i = 0.6138049 * 0 + 0.3678794 * 1 + 0.0183156 * 2 = 0.4045106
    coefs, own = attention({"w": t(0.0)}, [{"w": t(1.0)}, {"w": t(2.0)}], ["w"], 1.0, 1.0)
    assert coefs == pytest.approx([math.exp(-1), math.exp(-4)]) and own == pytest.approx(1 - math.exp(-1) - math.exp(-4))
    torch.testing.assert_close(cloud_model({"w": t(0.0)}, [{"w": t(1.0)}, {"w": t(2.0)}], ["w"], 1.0, 1.0)["w"], t(0.4045106))
    # alpha_k = 0.5, sigma = 2: xi = 0.5 e^(-d/2) / 2 -> 0.25 e^-0.5 = 0.1516327, 0.25 e^-2 = 0.0338338
    # u_i (w_i = 0) = 0.1516327 + 2 * 0.0338338 = 0.2193003
    torch.testing.assert_close(cloud_model({"w": t(0.0)}, [{"w": t(1.0)}, {"w": t(2.0)}], ["w"], 0.5, 2.0)["w"], t(0.2193003))


def test_fedamp_server_sends_each_client_its_cloud_model_and_the_proximal_weight() -> None:
    amp = FedAMP(["w"], FedAMPOptions(alpha_k=1.0, lam=2.0, sigma=1.0))
    glob = {"w": t(0.0)}
    # before any upload: u_i = w_i = the global model; lambda / alpha_k = 2
    down = amp.downlink(0, 0, glob)
    assert down.context[WEIGHT] == 2.0
    torch.testing.assert_close(down.context[CLOUD]["w"], t(0.0))  # type: ignore[index]
    # uploads w_0 = 0 (10 samples), w_1 = 1 (30 samples): global = FedAvg = 0.75
    out = amp.aggregate(glob, [result(0, 0.0, 10), result(1, 1.0, 30)], 0)
    torch.testing.assert_close(out["w"], t(0.75))
    # client 0: u_0 = (1 - e^-1) 0 + e^-1 1 = 0.3678794; client 2 (no model yet: w_2 = the global 0.75):
    # distances to 0 and 1: 0.5625 and 0.0625 -> xi = e^-0.5625 = 0.5697828, e^-0.0625 = 0.9394131; xi_22 = 1 - 1.5091959 = -0.5091959
    # u_2 = -0.5091959 * 0.75 + 0.5697828 * 0 + 0.9394131 * 1 = 0.5575162
    torch.testing.assert_close(amp.downlink(0, 1, out).context[CLOUD]["w"], t(0.3678794))  # type: ignore[index]
    torch.testing.assert_close(amp.downlink(2, 1, out).context[CLOUD]["w"], t(0.5575162))  # type: ignore[index]
    # the state round-trips
    again = FedAMP(["w"], FedAMPOptions(alpha_k=1.0, lam=2.0, sigma=1.0))
    again.load_state_dict(amp.state_dict())
    torch.testing.assert_close(again.downlink(2, 1, out).context[CLOUD]["w"], t(0.5575162))  # type: ignore[index]


def test_fedamp_proximal_weight_is_lambda_over_alpha_k() -> None:
    # Eq. 8's lambda / (2 alpha_k) ||w - u_i||^2, the term's weight lambda / alpha_k: lam = 2, alpha_k = 0.5 -> 4 (not 2 * 0.5 = 1)
    down = FedAMP(["w"], FedAMPOptions(alpha_k=0.5, lam=2.0)).downlink(0, 0, {"w": t(0.0)})
    assert down.context[WEIGHT] == 4.0


def test_fedamp_client_trains_its_own_model_towards_its_cloud_model() -> None:
    # Linear(1, 1) without bias, own w = 2 (from its state), global 5 (not used), u = 1, lambda / alpha_k = 1, x = 1,
    # loss 1/2 (w x - 1)^2 + 1/2 * 1 * (w - u)^2: grad = (2 - 1) + (2 - 1) = 2; lr 0.1 -> w = 1.8 (uploaded and kept)
    from chillfl.aggregation.fedamp import fedamp_terms
    from test_personalised import half_mse

    model = nn.Linear(1, 1, bias=False)
    spec = LocalSpec(epochs=1, batch_size=8, base_loss=half_mse, terms=tuple(fedamp_terms()))
    half = FedAMP(["weight"]).client_half()
    reply = run_client(half, model, spec, {"weight": t(5.0).view(1, 1)}, lr=0.1, state={"fedamp.w.weight": t(2.0).view(1, 1)},
                       context={WEIGHT: 1.0, CLOUD: {"weight": t(1.0).view(1, 1)}})
    torch.testing.assert_close(reply.uplink.params["weight"].flatten(), t(1.8))
    assert reply.state is not None
    torch.testing.assert_close(reply.state["fedamp.w.weight"].flatten(), t(1.8))


# ---------------------------------------------------------------- FedFomo


def test_fedfomo_weights_by_hand() -> None:
    # L_i = 2; model a: loss 1 at distance 2 -> (2 - 1) / 2.00001 = 0.4999975; model b: loss 3 at distance 1 -> -1 / 1.00001 = -0.99999
    assert fomo_weights(2.0, [1.0, 3.0], [2.0, 1.0]) == pytest.approx([1 / 2.00001, -1 / 1.00001], rel=1e-12)


def test_fedfomo_combination_clips_and_normalises() -> None:
    own = {"w": t(9.0), "buf": t(7.0)}
    a, b = {"w": t(1.0), "buf": t(0.0)}, {"w": t(5.0), "buf": t(0.0)}
    # weights (1, 3) -> 0.25 * 1 + 0.75 * 5 = 4; the buffer stays the client's own
    out = combine_models(own, [a, b], [1.0, 3.0], ["w"])
    torch.testing.assert_close(out["w"], t(4.0))
    torch.testing.assert_close(out["buf"], t(7.0))
    # weights (-1, 2): the negative one is clipped -> b alone
    torch.testing.assert_close(combine_models(own, [a, b], [-1.0, 2.0], ["w"])["w"], t(5.0))
    # no positive weight: the client keeps its own model
    assert combine_models(own, [a, b], [-1.0, 0.0], ["w"]) is own


def test_fedfomo_ranking_and_validation_split() -> None:
    row = {1: 0.5, 2: 0.5, 3: -1.0, 4: 2.0}
    assert ranked(row, [1, 2, 3, 4], 2) == [4, 1]  # 2.0 first, then the 0.5 tie to the lower id
    assert ranked(row, [1, 2, 3], 5) == [1, 2, 3]
    assert validation_rows(10, 0.2) == 2 and validation_rows(4, 0.2) == 0 and validation_rows(1, 0.5) == 0


def test_fedfomo_server_sends_the_best_rated_models_and_adds_the_reported_weights() -> None:
    fomo = FedFomo(4, ["w"], FedFomoOptions(m=2))
    glob = {"w": t(0.0)}
    assert fomo.downlink(0, 0, glob).context == {}  # no model held yet
    fomo.aggregate(glob, [result(0, 0.0), result(1, 1.0), result(2, 2.0), result(3, 3.0)], 0)
    # no affinity yet: the two lowest other ids
    down = fomo.downlink(0, 1, glob)
    assert down.context[IDS].tolist() == [1, 2]  # type: ignore[union-attr]
    torch.testing.assert_close(down.context[f"{MODEL}1"]["w"], t(2.0))  # type: ignore[index]
    # client 0 reports w = (-0.5, 0.25) for (1, 2), then (0.5) for 3: P[0] = (0, -0.5, 0.25, 0) + (0, 0, 0, 0.5)
    fomo.aggregate(glob, [result(0, 0.0, **{IDS: torch.tensor([1, 2]), WEIGHTS: t(-0.5, 0.25).double()})], 1)
    fomo.aggregate(glob, [result(0, 0.0, **{IDS: torch.tensor([3]), WEIGHTS: t(0.5).double()})], 2)
    assert fomo.affinity[0] == {1: -0.5, 2: 0.25, 3: 0.5}
    assert fomo.downlink(0, 3, glob).context[IDS].tolist() == [3, 2]  # type: ignore[union-attr]
    again = FedFomo(4, ["w"], FedFomoOptions(m=2))
    again.load_state_dict(fomo.state_dict())
    assert again.affinity == fomo.affinity and again.downlink(0, 3, glob).context[IDS].tolist() == [3, 2]  # type: ignore[union-attr]


def test_fedfomo_client_weights_on_its_validation_split_and_trains_on_the_rest() -> None:
    # Linear(1, 2) without bias, 5 samples x = 1 (labels 0): validation = int(0.2 * 5) = 1 drawn sample, training the other 4.
    # own W = (0, 0): CE = ln 2 = 0.6931472. Model a = (2, 0): CE = ln(1 + e^-2) = 0.1269280, distance 2;
    # model b = (0, 2): CE = ln(1 + e^2) = 2.1269280, distance 2.
    # w_a = (0.6931472 - 0.1269280) / 2.00001 = 0.2831082 > 0, w_b < 0 -> start from a alone = (2, 0).
    # One step (batch 8 >= 4 rows) of mean CE at (2, 0): p = softmax(2, 0) = (0.8807971, 0.1192029),
    # grad W = (p - onehot(0)) x = (-0.1192029, 0.1192029); lr 1 -> (2.1192029, -0.1192029)
    model = nn.Linear(1, 2, bias=False)
    half = FedFomo(3, ["weight"], model=model).client_half()
    context = {IDS: torch.tensor([1, 2]), f"{MODEL}0": {"weight": torch.tensor([[2.0], [0.0]])}, f"{MODEL}1": {"weight": torch.tensor([[0.0], [2.0]])}}
    reply = run_client(half, model, LocalSpec(epochs=1, batch_size=8), {"weight": torch.zeros(2, 1)}, lr=1.0,
                       state={"fedfomo.theta.weight": torch.zeros(2, 1)}, context=context, x=torch.ones(5, 1))
    torch.testing.assert_close(reply.uplink.params["weight"].flatten(), t(2.1192029, -0.1192029))
    assert reply.uplink.num_steps == 1
    assert reply.uplink.report[IDS].tolist() == [1, 2]  # type: ignore[union-attr]
    weights = reply.uplink.report[WEIGHTS]
    assert isinstance(weights, torch.Tensor)
    assert weights.tolist() == pytest.approx([(math.log(2) - math.log(1 + math.exp(-2))) / 2.00001, (math.log(2) - math.log(1 + math.exp(2))) / 2.00001], rel=1e-6)
    assert reply.state is not None
    torch.testing.assert_close(reply.state["fedfomo.theta.weight"], reply.uplink.params["weight"])


def test_fedfomo_client_weights_against_its_own_model_not_the_global_start() -> None:
    # as above (5 samples x = 1, labels 0, one validation row), own W = (0, 0) from its state, the global start (0, 1),
    # one model b = (0, 2): CE ln(1 + e^2) = 2.1269280 against the own model's ln 2 = 0.6931472, at distance ||(0, 2) - (0, 0)|| = 2:
    # w_b = (0.6931472 - 2.1269280) / 2.00001 = -0.7168868 (against the start: (1.3132617 - 2.1269280) / 1.00001).
    # No weight > 0: it trains its own (0, 0): p = (0.5, 0.5), grad W = (-0.5, 0.5); lr 1 -> (0.5, -0.5) (from the start: (0.7310586, 0.2689414))
    model = nn.Linear(1, 2, bias=False)
    half = FedFomo(3, ["weight"], model=model).client_half()
    context = {IDS: torch.tensor([2]), f"{MODEL}0": {"weight": torch.tensor([[0.0], [2.0]])}}
    reply = run_client(half, model, LocalSpec(epochs=1, batch_size=8), {"weight": torch.tensor([[0.0], [1.0]])}, lr=1.0,
                       state={"fedfomo.theta.weight": torch.zeros(2, 1)}, context=context, x=torch.ones(5, 1))
    torch.testing.assert_close(reply.uplink.params["weight"].flatten(), t(0.5, -0.5))
    weights = reply.uplink.report[WEIGHTS]
    assert isinstance(weights, torch.Tensor) and weights.tolist() == pytest.approx([-0.7168868], rel=1e-6)


def test_fedfomo_affinity_accumulates_and_the_global_model_is_weighted_by_samples() -> None:
    fomo = FedFomo(3, ["w"], FedFomoOptions(m=2))
    glob = {"w": t(0.0)}
    # uploads w_0 = 0 (10 samples), w_1 = 1 (30 samples): global = (0 * 10 + 1 * 30) / 40 = 0.75
    torch.testing.assert_close(fomo.aggregate(glob, [result(0, 0.0, 10), result(1, 1.0, 30)], 0)["w"], t(0.75))
    # client 0 rates client 1 twice, -0.5 then 0.25: P[0, 1] = -0.5 + 0.25 = -0.25 (the sum, not the last)
    fomo.aggregate(glob, [result(0, 0.0, **{IDS: torch.tensor([1]), WEIGHTS: t(-0.5).double()})], 1)
    fomo.aggregate(glob, [result(0, 0.0, **{IDS: torch.tensor([1]), WEIGHTS: t(0.25).double()})], 2)
    assert fomo.affinity[0] == {1: -0.25}


def test_fedfomo_epsilon_decays_from_round_0() -> None:
    # epsilon 1, epsilon_decay 1: max(1 - t * 1, 0) is 1 at round 0 (every slot drawn, as with no decay) and 0 from round 1
    glob = {"w": t(0.0)}
    uploads = [result(c, float(c)) for c in range(6)]

    def choose(seed: int, decay: float, round: int) -> list[int]:
        fomo = FedFomo(6, ["w"], FedFomoOptions(m=2, epsilon=1.0, epsilon_decay=decay), seed=seed)
        fomo.aggregate(glob, uploads, 0)
        fomo.affinity[0] = {1: 5.0, 2: 4.0}
        return fomo.choose(0, round)

    assert all(choose(s, 1.0, 0) == choose(s, 0.0, 0) for s in range(10)) and any(choose(s, 1.0, 0) != [1, 2] for s in range(10))
    assert all(choose(s, 1.0, 1) == [1, 2] for s in range(10))


def fomo_requests(half: object, x: torch.Tensor, y: torch.Tensor, context: dict[str, object], client_id: int, seed: int) -> tuple[Train, dict[str, object]]:
    """The training a FedFomo client asks for, and its report (the training answered with its start, unchanged)."""
    model = {"weight": torch.zeros(2, 1)}
    local = Local(client_id, x, y, model, context, 0.1, {"fedfomo.theta.weight": model["weight"]}, seed, LocalSpec(epochs=1, batch_size=8))  # type: ignore[arg-type]
    program = half.train(local)  # type: ignore[attr-defined]
    request = next(program)
    assert isinstance(request, Train)
    try:
        program.send(type("Out", (), {"params": request.start, "num_steps": 1, "mean_loss": 0.0})())
    except StopIteration as stop:
        return request, dict(stop.value.report)
    raise AssertionError("FedFomo asks for one training")


def test_fedfomo_validation_rows_are_drawn_not_the_last_rows_of_label_sorted_data() -> None:
    # 100 rows, x = 1, sorted by label as a data set read class folder by class folder gives them: 50 of label 0, then 50 of 1.
    # The last int(0.2 * 100) = 20 rows would all be label 1 (and the training would see 30 of its 50). Drawn, the 20
    # validation rows hold both labels; the training sees the other 80, the same rows every round (the client's round
    # seed changes, the split does not), other rows for another client or run seed.
    # Weights, by hand from the validation's k rows of label 0: model a = (2, 0) has CE ln(1 + e^-2) = 0.1269280 on a
    # label-0 row and ln(1 + e^2) = 2.1269280 on a label-1 row; model b = (0, 2) the reverse; own (0, 0): ln 2; both at distance 2.
    model = nn.Linear(1, 2, bias=False)
    half = FedFomo(3, ["weight"], model=model, seed=7).client_half()
    x, y = torch.ones(100, 1), torch.cat([torch.zeros(50, dtype=torch.long), torch.ones(50, dtype=torch.long)])
    context = {IDS: torch.tensor([1, 2]), f"{MODEL}0": {"weight": torch.tensor([[2.0], [0.0]])}, f"{MODEL}1": {"weight": torch.tensor([[0.0], [2.0]])}}
    request, report = fomo_requests(half, x, y, context, client_id=0, seed=11)
    assert request.rows is not None and len(request.rows) == 80
    val = sorted(set(range(100)) - set(request.rows.tolist()))
    k = sum(1 for i in val if i < 50)
    assert 0 < k < 20  # both labels (before: the last 20 rows, k = 0)
    low, high = math.log1p(math.exp(-2)), math.log1p(math.exp(2))
    loss_a, loss_b = (k * low + (20 - k) * high) / 20, (k * high + (20 - k) * low) / 20
    weights = report[WEIGHTS]
    assert isinstance(weights, torch.Tensor)
    # float32 losses of size ~1, differenced: an absolute tolerance (a relative one fails when a weight is near 0)
    assert weights.tolist() == pytest.approx([(math.log(2) - loss_a) / 2.00001, (math.log(2) - loss_b) / 2.00001], abs=1e-6)
    again, _ = fomo_requests(half, x, y, context, client_id=0, seed=12)  # another round
    assert again.rows is not None and torch.equal(again.rows, request.rows)
    other, _ = fomo_requests(half, x, y, context, client_id=1, seed=11)
    assert other.rows is not None and not torch.equal(other.rows, request.rows)
    val_rows, train_rows = validation_split(100, 20, 7, 0)
    assert val_rows.tolist() == val and torch.equal(train_rows, request.rows)


# ---------------------------------------------------------------- both: options, runs, resume


@pytest.mark.parametrize(("name", "field", "value"), [("fedamp", "sigma", 0.0), ("fedamp", "alpha_k", -1.0), ("fedamp", "self_attention", 1.5), ("fedfomo", "m", 0),
                                                     ("fedfomo", "val_ratio", 1.0), ("fedfomo", "epsilon", 2.0), ("fedfomo", "epsilon_decay", -0.1)])
def test_options_are_checked(name: str, field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=f"algorithm.{field}"):
        build_experiment(config(**{"algorithm.name": name, f"algorithm.{field}": value}))


@pytest.mark.parametrize(("name", "prefix"), [("fedamp", "fedamp.w."), ("fedfomo", "fedfomo.theta.")])
def test_runs_agree_across_executors_and_local_accuracy_is_the_clients_own_models(name: str, prefix: str) -> None:
    from chillfl.engine.loop import run_rounds
    from chillfl.experiment import build_protocol, make_executor
    from chillfl.protocols.common import mean_or_none
    from chillfl.protocols.parameters import ParameterSharing

    cfg = config(**{"algorithm.name": name, "model.name": "mlp"})
    seq = assert_executors_agree(cfg)
    fedavg = records(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))
    assert seq[-1]["local_loss"] != fedavg[-1]["local_loss"]
    exp = build_experiment(cfg)
    protocol = build_protocol(exp)
    assert isinstance(protocol, ParameterSharing)
    executor = make_executor(exp, protocol)
    try:
        last = list(run_rounds(protocol, executor, seed=cfg.seed, num_clients=exp.data.num_clients, clients_per_round=3, rounds=3))[-1]
    finally:
        executor.close()
    accs = []
    for cid in last["clients"]:
        state = protocol.store.load(cid)
        assert state is not None
        own = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        data = protocol.evaluation.client_data(cid)
        assert data.x_eval is not None and data.y_eval is not None
        accs.append(evaluate(exp.model, own, data.x_eval, data.y_eval, cfg.eval.batch_size)[0])
    assert last["local_acc"] == mean_or_none(accs)


@pytest.mark.parametrize("name", ["fedamp", "fedfomo"])
def test_resume_is_bitwise(name: str, tmp_path: Path) -> None:
    cfg = config(**{"algorithm.name": name, "model.name": "mlp"})
    assert resumed_records(cfg, 1, tmp_path) == records(cfg)


# ---------------------------------------------------------------- the references' variants (options, off by default)


def test_fedamp_cosine_attention_is_heurfedamps_by_hand() -> None:
    from chillfl.aggregation.fedamp import cosine_attention

    # w_i = (1, 0); w_1 = (0, 2): cos 0; w_2 = (3, 3): cos 1/sqrt(2) = 0.7071068. sigma = 2, xi_ii = 0.2:
    # exp(0) = 1, exp(1.4142136) = 4.1132504; xi_i1 = 0.8 * 1 / 5.1132504 = 0.1564563, xi_i2 = 0.8 * 4.1132504 / 5.1132504 = 0.6435437
    own, others = {"w": t(1.0, 0.0)}, [{"w": t(0.0, 2.0)}, {"w": t(3.0, 3.0)}]
    coefs, self_coef = cosine_attention(own, others, ["w"], 2.0, 0.2)
    assert coefs == pytest.approx([0.1564563, 0.6435437], abs=1e-7) and self_coef == 0.2
    # u_i = 0.2 (1, 0) + 0.1564563 (0, 2) + 0.6435437 (3, 3) = (2.1306312, 2.2435437)
    u = cloud_model(own, others, ["w"], 1.0, 2.0, "cosine", 0.2)["w"]
    torch.testing.assert_close(u, t(2.1306312, 2.2435437))
    # no other model: u_i = w_i
    assert cosine_attention(own, [], ["w"], 2.0, 0.2) == ([], 1.0)
    # a large sigma does not overflow: all the others' weight on the most similar
    coefs, _ = cosine_attention(own, others, ["w"], 1e4, 0.2)
    assert coefs == pytest.approx([0.0, 0.8])


def test_fedamp_server_uses_the_cosine_attention_when_asked() -> None:
    amp = FedAMP(["w"], FedAMPOptions(attention="cosine", self_attention=0.5, sigma=1.0))
    glob = {"w": t(1.0, 0.0)}
    amp.aggregate(glob, [result2(0, (1.0, 0.0)), result2(1, (0.0, 1.0))], 0)
    # client 0: one other model, so xi_01 = 1 - 0.5: u_0 = 0.5 (1, 0) + 0.5 (0, 1)
    torch.testing.assert_close(amp.downlink(0, 1, glob).context[CLOUD]["w"], t(0.5, 0.5))  # type: ignore[index]


def result2(cid: int, w: tuple[float, float]) -> ClientResult:
    return ClientResult(cid, {"w": t(*w)}, 10, 1, 0.1, 1.0, 0.0, {})


def test_fedfomo_l1_distance_by_hand() -> None:
    from chillfl.aggregation.fedfomo import distance

    a, b = {"w": t(0.0, 0.0), "v": t(1.0)}, {"w": t(3.0, -4.0), "v": t(3.0)}
    assert distance(a, b, ["w", "v"]) == pytest.approx(29 ** 0.5)  # 9 + 16 + 4
    assert distance(a, b, ["w", "v"], "l1") == pytest.approx(9.0)  # 3 + 4 + 2


def test_fedfomo_epsilon_greedy_choice() -> None:
    from chillfl.aggregation.fedfomo import epsilon_greedy

    row = {1: 3.0, 2: 2.0, 3: 1.0, 4: -1.0}
    gen = torch.Generator().manual_seed(0)
    # epsilon 0: the ranking, nothing drawn
    assert epsilon_greedy(row, [1, 2, 3, 4], 2, 0.0, gen) == [1, 2]
    assert torch.equal(gen.get_state(), torch.Generator().manual_seed(0).get_state())
    # epsilon 1: every slot a uniform draw among those left: m distinct candidates, all ids reached over seeds
    seen: set[int] = set()
    for seed in range(40):
        got = epsilon_greedy(row, [1, 2, 3, 4], 2, 1.0, torch.Generator().manual_seed(seed))
        assert len(set(got)) == 2 and set(got) <= {1, 2, 3, 4}
        seen.update(got)
    assert seen == {1, 2, 3, 4}
    # never more than the candidates
    assert sorted(epsilon_greedy(row, [3, 4], 5, 1.0, gen)) == [3, 4]


def test_fedfomo_server_explores_with_epsilon_and_decays_it() -> None:
    glob = {"w": t(0.0)}
    uploads = [result(c, float(c)) for c in range(6)]
    fomo = FedFomo(6, ["w"], FedFomoOptions(m=2, epsilon=1.0, epsilon_decay=0.5), seed=3)
    fomo.aggregate(glob, uploads, 0)
    fomo.affinity[0] = {1: 5.0, 2: 4.0}
    # round 2: epsilon = 1 - 2 * 0.5 = 0: the two best-rated
    assert fomo.downlink(0, 2, glob).context[IDS].tolist() == [1, 2]  # type: ignore[union-attr]
    # round 0: epsilon 1, drawn from (seed, round, client): reproducible, and not always the best two
    def draw(seed: int) -> tuple[int, ...]:
        other = FedFomo(6, ["w"], FedFomoOptions(m=2, epsilon=1.0), seed=seed)
        other.aggregate(glob, uploads, 0)
        other.affinity[0] = fomo.affinity[0]
        return tuple(other.choose(0, 0))

    draws = [draw(s) for s in range(10)]
    assert draws == [draw(s) for s in range(10)]
    assert any(d != (1, 2) for d in draws) and all(0 not in d and len(set(d)) == 2 for d in draws)


@pytest.mark.parametrize(("name", "base", "options"), [("fedamp", {}, {"attention": "cosine", "self_attention": 0.3}),
                                                     ("fedfomo", {"m": 1}, {"epsilon": 1.0, "epsilon_decay": 0.1, "distance": "l1"})])
def test_the_variants_run_and_resume(name: str, base: dict[str, object], options: dict[str, object], tmp_path: Path) -> None:
    """Off by default; on, they change the run (FedFomo with one model sent: the draw picks another), and resume bitwise."""
    plain = {"algorithm.name": name, "model.name": "mlp", **{f"algorithm.{k}": v for k, v in base.items()}}
    cfg = config(**plain, **{f"algorithm.{k}": v for k, v in options.items()})
    got = records(cfg)
    assert resumed_records(cfg, 1, tmp_path) == got
    assert got != records(config(**plain))

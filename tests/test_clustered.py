"""Clustered FL, IFCA and CFL: the choice, the split and the per-cluster averages on hand-worked values; bytes; state; end to end.

Models are tiny Linear layers or one- and two-scalar tables (``w``) so that every value is a line of arithmetic in the comments.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import ClientResult, Personal, Train
from chillfl.aggregation.cfl import Cfl, CflOptions, bipartition, cosine_similarities, update_norms
from chillfl.aggregation.ifca import CHOSEN, MODEL, Ifca, IfcaClient, IfcaOptions, choose, fresh_model
from chillfl.aggregation.registry import make_aggregator
from chillfl.engine.protocol import ClientData, ClientTask, drive
from chillfl.errors import ConfigError
from chillfl.executors.sequential import train_job
from chillfl.protocols.common import state_bytes
from chillfl.protocols.parameters import ParamDownlink, ParameterClient
from chillfl.training.local import LocalOutcome, LocalSpec, evaluate
from methods_e2e import assert_executors_agree, config, records, resumed_records


def result(cid: int, w: list[float], n: int = 1, **report: float) -> ClientResult:
    return ClientResult(cid, {"w": torch.tensor(w)}, n, 1, 0.1, 1.0, 0.0, dict(report))


def close(actual: torch.Tensor, *expected: float) -> None:
    torch.testing.assert_close(actual.flatten(), torch.tensor(expected, dtype=actual.dtype))


# ---------------------------------------------------------------- IFCA


def test_ifca_choice_is_the_lowest_loss_first_on_ties() -> None:
    assert choose([0.5, 0.2, 0.2]) == 1
    assert choose([0.3]) == 0
    assert choose([math.nan, 0.3]) == 1  # a NaN loss is never the choice


def diagonal(a: float) -> dict[str, torch.Tensor]:
    return {"weight": torch.eye(2) * a}


def test_ifca_client_trains_the_cluster_model_of_lowest_loss_on_its_data() -> None:
    # x = e_0 (label 0), e_1 (label 1); Linear(2, 2) without bias, weight a I: logits of e_0 = [a, 0]
    # a = 0: CE = ln 2 = 0.693; a = ln 3: p = 3/4, CE = ln 4/3 = 0.288; a = -ln 3: p = 1/4, CE = ln 4 = 1.386
    model = nn.Linear(2, 2, bias=False)
    x, y = torch.eye(2), torch.tensor([0, 1])
    assert evaluate(model, diagonal(math.log(3)), x, y)[1] == pytest.approx(math.log(4 / 3), rel=1e-6)
    half = IfcaClient(model, 3)
    start = diagonal(0.0)  # cluster 0 is the global model, the start; clusters 1 and 2 come in the context
    context: dict[str, Any] = {f"{MODEL}1": diagonal(math.log(3)), f"{MODEL}2": diagonal(-math.log(3)), "mu": 0.5}
    from chillfl.aggregation.base import Local

    spec = LocalSpec(epochs=1, batch_size=2)
    program = half.train(Local(0, x, y, start, context, 0.1, {}, 0, spec))
    request = next(program)
    assert isinstance(request, Train)
    assert torch.equal(request.start["weight"], diagonal(math.log(3))["weight"])  # cluster 1: the lowest loss
    assert set(request.context) == {"mu"}  # the cluster models are not the training's context
    trained = {"weight": torch.full((2, 2), 7.0)}
    with pytest.raises(StopIteration) as stop:
        program.send(LocalOutcome(trained, 3, 0.25))
    done: Personal = stop.value.value
    assert done.report == {CHOSEN: 1.0}
    assert done.params is trained and done.personal is None  # local accuracy measures the trained chosen model
    assert (done.num_steps, done.train_loss) == (3, 0.25)


def test_ifca_local_accuracy_is_that_of_the_trained_chosen_model() -> None:
    """Through the real client update: the reply's local accuracy is the trained model's, and the report names the cluster."""
    model = nn.Linear(2, 2, bias=False)
    spec = LocalSpec(epochs=1, batch_size=2)
    half = IfcaClient(model, 2)
    client = ParameterClient(model, 64, half, trainer=half, spec=spec, objectives=())
    x, y = torch.eye(2), torch.tensor([0, 1])
    data = ClientData(x, y, x, torch.tensor([1, 0]))  # the own split's labels are flipped: accuracy 0 for a diagonal model
    context: dict[str, Any] = {f"{MODEL}1": diagonal(-math.log(3))}
    task = ClientTask(0, 0, ParamDownlink(diagonal(math.log(3)), 0.5, 1.0, context, seed=0), data, None)
    reply = drive([client.update(task)], lambda _s, jobs: [train_job(model, spec, j) for j in jobs])[0]
    assert reply.uplink.report == {CHOSEN: 0.0}  # cluster 0 (a = ln 3) fits the training labels
    assert reply.local_acc == evaluate(model, reply.uplink.params, x, torch.tensor([1, 0]))[0]
    assert not torch.equal(reply.uplink.params["weight"], diagonal(math.log(3))["weight"])  # it was trained


def test_ifca_cluster_models_are_seeded_and_distinct() -> None:
    model = nn.Linear(3, 2)
    like = {k: v.detach().clone() for k, v in model.state_dict().items()}
    a, b, c = fresh_model(model, 1, like), fresh_model(model, 1, like), fresh_model(model, 2, like)
    assert all(torch.equal(a[k], b[k]) for k in like)
    assert not torch.equal(a["weight"], c["weight"]) and not torch.equal(a["weight"], like["weight"])
    agg = Ifca(model, seed=0, options=IfcaOptions(clusters=3))
    down = agg.downlink(0, 0, like)
    assert set(down.context) == {f"{MODEL}1", f"{MODEL}2"} and down.params is None  # cluster 0 is the global model, the start
    assert not torch.equal(down.context[f"{MODEL}1"]["weight"], down.context[f"{MODEL}2"]["weight"])  # type: ignore[index]


def test_ifca_averages_within_clusters_and_sends_k_models() -> None:
    agg = Ifca(nn.Linear(1, 1), seed=0, options=IfcaOptions(clusters=2))
    g = {"w": torch.tensor([0.0, 0.0])}
    agg.models = [dict(g), {"w": torch.tensor([5.0, 5.0])}]
    # clients 0 and 2 chose cluster 1, client 1 cluster 0; uniform mean within each cluster (sample counts ignored)
    out = agg.aggregate(g, [result(0, [1.0, 2.0], 10, **{CHOSEN: 1.0}), result(1, [3.0, 3.0], 1, **{CHOSEN: 0.0}), result(2, [3.0, 4.0], 1, **{CHOSEN: 1.0})], 0)
    close(agg.models[0]["w"], 3.0, 3.0)
    close(agg.models[1]["w"], 2.0, 3.0)  # (1 + 3) / 2, (2 + 4) / 2
    close(out["w"], 2.0, 3.0)  # the global model: cluster 1, chosen by two of three clients
    assert agg.round_metrics() == {"ifca_global_cluster": 1, "ifca_clusters_chosen": 2, "ifca_cluster_0": 1, "ifca_cluster_1": 2}
    down = agg.downlink(0, 1, out)
    assert set(down.context) == {f"{MODEL}0"}
    message = ParamDownlink(out, 0.1, 1.0, dict(down.context), local=down.local)
    assert message.nbytes() == {"params": 8, "control": 8}  # k = 2 models of two float32s: both on the wire
    assert state_bytes(agg.models) == 16


def test_ifca_empty_cluster_keeps_its_model_and_samples_weighting() -> None:
    agg = Ifca(nn.Linear(1, 1), seed=0, options=IfcaOptions(clusters=2, weighting="samples"))
    g = {"w": torch.tensor([0.0])}
    agg.models = [dict(g), {"w": torch.tensor([5.0])}]
    # both chose cluster 0, n = 1 and 3: 0.25 * 0 + 0.75 * 4 = 3; cluster 1 unchosen keeps 5
    agg.aggregate(g, [result(0, [0.0], 1, **{CHOSEN: 0.0}), result(1, [4.0], 3, **{CHOSEN: 0.0})], 0)
    close(agg.models[0]["w"], 3.0)
    close(agg.models[1]["w"], 5.0)


def test_ifca_state_round_trip() -> None:
    model = nn.Linear(2, 1)
    like = {k: v.detach().clone() for k, v in model.state_dict().items()}
    agg = Ifca(model, seed=4, options=IfcaOptions(clusters=2))
    agg.downlink(0, 0, like)
    trained = {k: v + 1 for k, v in like.items()}
    agg.aggregate(like, [ClientResult(0, trained, 1, 1, 0.1, 1.0, 0.0, {CHOSEN: 1.0})], 0)
    again = Ifca(model, seed=4, options=IfcaOptions(clusters=2))
    again.load_state_dict(agg.state_dict())
    assert again.best == agg.best == 1
    assert all(torch.equal(a[k], b[k]) for a, b in zip(agg.models, again.models) for k in a)


# ---------------------------------------------------------------- CFL


def test_cfl_norms_and_cosines_by_hand() -> None:
    # [3, 0] and [0, 4]: mean [1.5, 2], norm 2.5; norms 3 and 4
    assert update_norms([{"w": torch.tensor([3.0, 0.0])}, {"w": torch.tensor([0.0, 4.0])}], ["w"]) == pytest.approx((2.5, 4.0))
    sims = cosine_similarities([{"w": torch.tensor([1.0, 0.0])}, {"w": torch.tensor([0.0, 2.0])}, {"w": torch.tensor([-3.0, 0.0])}], ["w"])
    # <e0, 2 e1> = 0; <e0, -3 e0> / (1 * 3) = -1; diagonal 1 (up to 1e-12)
    torch.testing.assert_close(torch.tensor(sims, dtype=torch.float64), torch.tensor([[1.0, 0, -1], [0, 1, 0], [-1, 0, 1]], dtype=torch.float64))


def test_cfl_complete_linkage_bipartition_by_hand() -> None:
    # distances -sim: d13 = -0.95 (merge first), then d02 = -0.9 against d(0,{1,3}) = max(1, 0.8) = 1 and d(2,{1,3}) = max(0.7, 0.9) = 0.9
    sim = [[1, -1, 0.9, -0.8], [-1, 1, -0.7, 0.95], [0.9, -0.7, 1, -0.9], [-0.8, 0.95, -0.9, 1]]
    assert bipartition(sim) == ([0, 2], [1, 3])
    # complete, not single, linkage: 2 is close to 0 (0.9) but far from 1 (-0.9); {0, 1} merge first (0.95)
    assert bipartition([[1, 0.95, 0.9], [0.95, 1, -0.9], [0.9, -0.9, 1]]) == ([0, 1], [2])
    # an updated distance decides: points 0, 2, 4.1, 6.3 on a line, sim = -|xi - xj|. {0, 1} merge first (2); then
    # complete linkage: d({0,1}, 2) = max(4.1, 2.1) = 4.1 > d(2, 3) = 2.2, so {2, 3}; single linkage would take
    # min(4.1, 2.1) = 2.1 < 2.2 and merge 2 into {0, 1}, leaving ([0, 1, 2], [3])
    xs = [0.0, 2.0, 4.1, 6.3]
    assert bipartition([[-abs(a - b) for b in xs] for a in xs]) == ([0, 1], [2, 3])


def split_case(options: CflOptions, rnd: int = 0) -> tuple[Cfl, dict[str, torch.Tensor]]:
    # four clients from w = [0, 0]: updates [2, 0], [-2, 0], [1.5, 0], [-1.5, 0]
    # mean [0, 0] (norm 0 < eps1); max norm 2 > eps2 = 1.5; cosines +1 within {0, 2} and {1, 3}, -1 across
    agg = Cfl(5, ["w"], options)
    g = {"w": torch.tensor([0.0, 0.0])}
    out = agg.aggregate(g, [result(0, [2.0, 0.0]), result(1, [-2.0, 0.0]), result(2, [1.5, 0.0]), result(3, [-1.5, 0.0], 4)], rnd)
    return agg, out


def test_cfl_splits_and_averages_each_part() -> None:
    agg, out = split_case(CflOptions(eps1=1.0, eps2=1.5, warmup_rounds=0))
    assert agg.assignment.tolist() == [0, 1, 0, 1, 0]  # client 4, not sampled, stays in cluster 0
    close(agg.models[0]["w"], 1.75, 0.0)  # (2 + 1.5) / 2
    close(agg.models[1]["w"], -1.75, 0.0)  # (-2 - 1.5) / 2, uniform: client 3's 4 samples do not count
    close(out["w"], 1.75, 0.0)  # the global model: cluster 0, with 3 clients against 2
    assert agg.round_metrics() == {"cfl_clusters": 2, "cfl_splits": 1, "cfl_mean_norm": 0.0, "cfl_max_norm": 2.0}
    sent = agg.downlink(3, 1, out).params
    assert sent is not None
    close(sent["w"], -1.75, 0.0)  # client 3 starts from its cluster's model
    again = Cfl(5, ["w"], CflOptions(eps1=1.0, eps2=1.5, warmup_rounds=0))
    again.load_state_dict(agg.state_dict())
    assert again.assignment.tolist() == [0, 1, 0, 1, 0] and torch.equal(again.models[1]["w"], agg.models[1]["w"])


@pytest.mark.parametrize(
    "options, rnd",
    [
        (CflOptions(eps1=1.0, eps2=1.5, warmup_rounds=1), 0),  # before the warm-up ends
        (CflOptions(eps1=0.0, eps2=1.5, warmup_rounds=0), 0),  # mean norm 0 is not < 0
        (CflOptions(eps1=1.0, eps2=2.0, warmup_rounds=0), 0),  # max norm 2 is not > 2
        (CflOptions(eps1=1.0, eps2=1.5, warmup_rounds=0, min_cluster_size=4), 0),  # 4 members are not > 4
    ],
)
def test_cfl_does_not_split_unless_every_criterion_holds(options: CflOptions, rnd: int) -> None:
    agg, out = split_case(options, rnd)
    assert len(agg.models) == 1 and agg.assignment.tolist() == [0] * 5
    close(out["w"], 0.0, 0.0)  # the mean of the four updates


def test_cfl_samples_weighting() -> None:
    agg = Cfl(2, ["w"], CflOptions(weighting="samples"))
    out = agg.aggregate({"w": torch.tensor([0.0])}, [result(0, [0.0], 1), result(1, [4.0], 3)], 0)
    close(out["w"], 3.0)  # 0.25 * 0 + 0.75 * 4


# ---------------------------------------------------------------- options, end to end


@pytest.mark.parametrize(
    "name, options, field",
    [
        ("ifca", {"clusters": 0}, "algorithm.clusters"),
        ("ifca", {"weighting": "median"}, "algorithm.weighting"),
        ("cfl", {"eps1": -1.0}, "algorithm.eps1"),
        ("cfl", {"min_cluster_size": 0}, "algorithm.min_cluster_size"),
        ("cfl", {"warmup_rounds": -1}, "algorithm.warmup_rounds"),
    ],
)
def test_bad_options_name_the_field(name: str, options: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        make_aggregator(name, options, num_clients=2, model=nn.Linear(1, 1), seed=0)
    assert info.value.field == field


SPLITTING = {"algorithm.warmup_rounds": 0, "algorithm.eps1": 1e9, "algorithm.eps2": 0.0, "algorithm.min_cluster_size": 1}
"""CFL settings under which every cluster with two or more sampled clients splits at once: the clustered path end to end."""


@pytest.mark.parametrize("name, extra", [("ifca", {"algorithm.clusters": 3}), ("cfl", SPLITTING)])
def test_clustered_under_every_executor_and_resume(name: str, extra: dict[str, Any], tmp_path: Path) -> None:
    cfg = config(**{"algorithm.name": name, "model.name": "mlp", **extra})
    seq = assert_executors_agree(cfg)
    assert all(r["local_acc"] is not None for r in seq)
    if name == "cfl":
        assert seq[-1]["agg_cfl_clusters"] > 1
    assert resumed_records(cfg, 2, tmp_path) == records(cfg)

"""pFedSim: its similarity and weights on hand-worked heads, the personalised extractor, the warm-up switch, a replayed round,
the downlink's price, executors and resume.

After a FedAvg warm-up each client keeps its own classifier; the server measures the similarity of two clients by the
cosine of their classifiers' rows and sends client i the average of the clients' extractors weighted by
-log(1 - s_ij), normalised. Every expected number below is worked out in the comment beside it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from chillfl.aggregation.base import ClientResult, Trained
from chillfl.aggregation.pfedsim import (
    PERSONAL,
    PREFIX,
    PFedSim,
    PFedSimClient,
    PFedSimOptions,
    similarity,
    warmup_rounds,
    weights,
)
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.training.local import evaluate
from methods_e2e import assert_executors_agree, cli_option_error, config, protocol_rounds, records, resumed_records

SQRT2 = math.sqrt(2)
LOG_SELF = 9.210340371976182
"""-log(1 - 0.9999) = -log(1e-4) = 4 ln 10 = 4 * 2.302585093 = 9.210340372."""


def t(*rows: Any) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


# Three tiny heads (2 classes x 2 features) and their biases:
#   W0 = [[1, 0], [0, 1]]   W1 = [[1, 1], [0, 1]]   W2 = [[-1, 0], [0, 2]]
HEADS = {
    0: {"head.weight": t([1.0, 0.0], [0.0, 1.0]), "head.bias": t(1.0, 0.0)},
    1: {"head.weight": t([1.0, 1.0], [0.0, 1.0]), "head.bias": t(0.0, 1.0)},
    2: {"head.weight": t([-1.0, 0.0], [0.0, 2.0]), "head.bias": t(0.0, 0.0)},
}
BODIES = {0: t(1.0, 2.0), 1: t(3.0, 4.0), 2: t(5.0, 8.0)}
S01 = (1 / SQRT2 + 1) / 2  # rows: cos([1,0],[1,1]) = 1/sqrt2, cos([0,1],[0,1]) = 1 -> mean 0.853553
S12 = (-1 / SQRT2 + 1) / 2  # rows: cos([1,1],[-1,0]) = -1/sqrt2, cos([0,1],[0,2]) = 1 -> mean 0.146447


# ---------------------------------------------------------------- the similarity of classifiers


def test_the_similarity_of_three_tiny_heads_by_hand() -> None:
    w = "head.weight"
    assert similarity(HEADS[0], HEADS[1], w, "rows") == pytest.approx(0.8535533905932737, rel=1e-12)
    assert similarity(HEADS[1], HEADS[2], w, "rows") == pytest.approx(0.14644660940672627, rel=1e-12)
    # 0 and 2: cos([1,0],[-1,0]) = -1 and cos([0,1],[0,2]) = 1 -> mean 0 (and never below 0: max(0, .))
    assert similarity(HEADS[0], HEADS[2], w, "rows") == 0.0
    assert similarity(HEADS[2], {w: -HEADS[2][w]}, w, "rows") == 0.0  # opposite classifiers: cos -1, clipped to 0
    # flat: (bias, weight) flattened: [1,0, 1,0,0,1] . [0,1, 1,1,0,1] = 2; norms sqrt3, 2 -> 1/sqrt3 = 0.577350
    assert similarity(HEADS[0], HEADS[1], w, "flat") == pytest.approx(0.5773502691896258, rel=1e-12)
    # [1,0, 1,0,0,1] . [0,0, -1,0,0,2] = 1; norms sqrt3, sqrt5 -> 1/sqrt15 = 0.258199
    assert similarity(HEADS[0], HEADS[2], w, "flat") == pytest.approx(0.2581988897471611, rel=1e-12)
    assert similarity(HEADS[0], {w: torch.zeros(2, 2, dtype=torch.float64)}, w, "rows") == 0.0  # a zero row is similar to nothing


def test_the_weights_by_hand() -> None:
    # log: s = 0.9999 (self), 0.5, 0.9 -> 9.210340, -log 0.5 = 0.693147, -log 0.1 = 2.302585; total 12.206073
    assert weights([0.5, 0.9], 0.9999, "log") == pytest.approx([0.7545703388344965, 0.05678707645687933, 0.18864258470862413], rel=1e-12)
    # linear: 0.9999, 0.5, 0.9 over 2.3999
    assert weights([0.5, 0.9], 0.9999, "linear") == pytest.approx([0.4166423600983374, 0.20834201425059376, 0.3750156256510688], rel=1e-12)
    # s = 1 would weigh infinitely: clipped to the self-similarity, it weighs as much as the client; s < 0 weighs nothing
    assert weights([1.0, -0.3], 0.9999, "log") == pytest.approx([0.5, 0.5, 0.0], rel=1e-12)
    assert weights([0.0, 0.0], 0.9999, "log") == [1.0, 0.0, 0.0]  # no similar client: its own extractor
    assert weights([0.5], 0.5, "log") == pytest.approx([0.5, 0.5], rel=1e-12)  # self_similarity is the self's s


def warmup_case(rounds: int = 1) -> PFedSim:
    return PFedSim(3, ["body", "head.weight", "head.bias"], {"head.weight", "head.bias"}, "head.weight", rounds)


def uploads(ids: tuple[int, ...] = (0, 1, 2)) -> list[ClientResult]:
    return [ClientResult(c, {"body": BODIES[c], **HEADS[c]}, 10 * (c + 1), 1, 0.1, 1.0, 0.0) for c in ids]


def glob() -> dict[str, torch.Tensor]:
    return {"body": t(0.0, 0.0), "head.weight": torch.zeros(2, 2, dtype=torch.float64), "head.bias": t(0.0, 0.0)}


def test_the_personalised_extractors_of_three_clients_by_hand() -> None:
    agg = warmup_case(rounds=0)
    new = agg.aggregate(glob(), uploads(), 0)
    # the similarity matrix: s01 = 0.853553, s12 = 0.146447, s02 = 0
    assert agg.similarity_of(0, 1) == agg.similarity_of(1, 0) == pytest.approx(S01, rel=1e-12)
    assert agg.similarity_of(1, 2) == agg.similarity_of(2, 1) == pytest.approx(S12, rel=1e-12)
    assert agg.similarity_of(0, 2) == agg.similarity_of(2, 0) == 0.0
    assert agg.round_metrics() == {"similarity": pytest.approx((S01 + S12 + 0) / 3, rel=1e-12)}
    # -log(1 - s01) = -log 0.146447 = 1.921094; -log(1 - s12) = -log 0.853553 = 0.158347
    # client 0: 9.210340 / 11.131435 = 0.827417 on itself, 0.172583 on client 1 (0 on client 2):
    #   [1,2] + 0.172583 * ([3,4] - [1,2]) = [1.345166, 2.345166]
    sent = agg.downlink(0, 1, new)
    assert sent.params is not None and set(sent.params) == {"body", "head.weight", "head.bias"} and sent.held == ("head.weight", "head.bias")
    assert all(torch.equal(sent.params[k], HEADS[0][k]) for k in HEADS[0])  # its own head, held (unpriced), as it uploaded it
    assert sent.context == {PERSONAL: 1.0}
    assert sent.params["body"].tolist() == pytest.approx([1.3451656330895678, 2.3451656330895676], rel=1e-12)
    # client 1: total 9.210340 + 1.921094 + 0.158347 = 11.289782 -> 0.815812, 0.170162 (client 0), 0.014026 (client 2):
    #   [3,4] + 0.170162 * ([1,2] - [3,4]) + 0.014026 * ([5,8] - [3,4]) = [2.687727, 3.715778]
    assert agg.downlink(1, 1, new).params["body"].tolist() == pytest.approx([2.687726975149647, 3.715778391028432], rel=1e-12)  # type: ignore[index]
    # client 2: 9.210340 / 9.368688 = 0.983098 on itself, 0.016902 on client 1: [5,8] + 0.016902 * [-2,-4] = [4.966197, 7.932393]
    assert agg.downlink(2, 1, new).params["body"].tolist() == pytest.approx([4.966196506633973, 7.932393013267946], rel=1e-12)  # type: ignore[index]
    # the global model: FedAvg, n = 10, 20, 30: body [1,2]/6 + [3,4]/3 + [5,8]/2 = [3.666667, 5.666667]
    assert new["body"].tolist() == pytest.approx([22 / 6, 34 / 6], rel=1e-12)


def test_the_flat_similarity_and_linear_weights_by_hand() -> None:
    options = PFedSimOptions(similarity="flat", transform="linear")
    agg = PFedSim(3, ["body", "head.weight", "head.bias"], {"head.weight", "head.bias"}, "", 0, options)
    agg.aggregate(glob(), uploads(), 0)
    # flat: s01 = 1/sqrt3 = 0.577350, s02 = 1/sqrt15 = 0.258199 (above); client 0's weights 0.9999, 0.577350, 0.258199
    # over 1.835449: 0.544771, 0.314555, 0.140673 -> body (1 * 0.9999 + 3 * 0.577350 + 5 * 0.258199) / 1.835449 = 2.191804,
    # (2 * 0.9999 + 4 * 0.577350 + 8 * 0.258199) / 1.835449 = 3.473151
    assert agg.similarity_of(0, 2) == pytest.approx(0.2581988897471611, rel=1e-12)
    assert agg.downlink(0, 1, glob()).params["body"].tolist() == pytest.approx([2.19180424405492, 3.473151061524631], rel=1e-12)  # type: ignore[index]


def test_a_client_sampled_alone_keeps_the_similarities_it_had_and_gets_its_own_extractor_when_none() -> None:
    agg = warmup_case(rounds=0)
    agg.aggregate(glob(), uploads((0, 2)), 0)  # s02 = 0: no similar client
    assert agg.round_metrics() == {"similarity": 0.0}
    assert agg.downlink(0, 1, glob()).params["body"].tolist() == [1.0, 2.0]  # type: ignore[index]
    agg.aggregate(glob(), uploads((0, 1)), 1)
    agg.aggregate(glob(), uploads((1,)), 2)  # alone: no pair, no metric; s01 kept
    assert agg.round_metrics() == {} and agg.similarity_of(0, 1) == pytest.approx(S01, rel=1e-12)


def test_the_warm_up_is_fedavg_and_the_switch() -> None:
    assert [warmup_rounds(0.5, 20), warmup_rounds(0.25, 10), warmup_rounds(0.0, 10), warmup_rounds(1.0, 5), warmup_rounds(3.0, 10)] == [10, 2, 0, 5, 3]
    agg = warmup_case(rounds=2)
    for r in (0, 1):  # warm-up: the global model, nothing kept
        down = agg.downlink(0, r, glob())
        assert down.params is None and down.context == {} and down.held == ()
        agg.aggregate(glob(), uploads(), r)
        assert not agg.models and agg.round_metrics() == {} and not agg.sim
    first = agg.downlink(0, 2, glob())  # the first personalised round: the global model, with the flag
    assert first.params is None and first.context == {PERSONAL: 1.0} and first.held == ()
    agg.aggregate(glob(), uploads(), 2)
    assert sorted(agg.models) == [0, 1, 2] and agg.downlink(0, 3, glob()).params is not None


def test_the_client_puts_its_own_head_in_only_in_a_personalised_round_and_keeps_its_model() -> None:
    half = PFedSimClient(frozenset({"head.weight", "head.bias"}))
    start = {"body": BODIES[0], **HEADS[0]}
    mine = {PREFIX + k: v for k, v in {"body": BODIES[2], **HEADS[2]}.items()}
    # warm-up: no flag: the start as sent, the context as sent
    assert half.prepare(mine, start, {"mu": 0.5}) == (start, {"mu": 0.5})
    # personalised, with a model kept: its own head, the sent body; the flag stays out of the objective's context
    got, ctx = half.prepare(mine, start, {PERSONAL: 1.0})
    assert ctx == {} and got["body"] is BODIES[0] and got["head.weight"] is HEADS[2]["head.weight"] and got["head.bias"] is HEADS[2]["head.bias"]
    assert half.prepare({}, start, {PERSONAL: 1.0}) == (start, {})  # its first personalised round: the global head
    trained = {"body": BODIES[1], **HEADS[1]}

    def finish(sent: dict[str, Any]) -> dict[str, torch.Tensor]:
        done = Trained(0, torch.zeros(1), torch.zeros(1), start, sent, {}, 0.1, 1.0, trained, 1)
        return half.finish(torch.nn.Linear(1, 1), {}, done)[0]

    assert finish({}) == {}
    kept = finish({PERSONAL: 1.0})
    assert kept == {PREFIX + k: v for k, v in trained.items()}
    g = glob()
    assert half.personal_model(kept, g) == trained and half.personal_model({}, g) == g  # the same tensors


# ---------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("field", "value"),
    [("warmup", -0.1), ("warmup", 2.5), ("warmup", 3.0), ("head_layers", 0), ("self_similarity", 1.0), ("self_similarity", 0.0),
     ("similarity", "l2"), ("transform", "softmax"), ("weighting", "equal")],
)
def test_options_are_checked(field: str, value: Any) -> None:
    with pytest.raises(ConfigError) as err:  # warmup 3.0: a count of rounds, not below the run's 3
        build_experiment(config(**{"algorithm.name": "pfedsim", f"algorithm.{field}": value}))
    assert err.value.field == f"algorithm.{field}" and "\n" not in str(err.value)


def test_a_bad_option_on_the_command_line_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_option_error(tmp_path, capsys, "pfedsim", "algorithm.self_similarity=1.5") == (2, ["chillfl: error: algorithm.self_similarity: must be in (0, 1), got 1.5"], False)


def test_privacy_dp_sgd_bounds_the_upload_and_the_weighted_mechanisms_refuse() -> None:
    pytest.importorskip("opacus")
    private = {"privacy.clip_norm": 1.0, "privacy.noise_multiplier": 1.5, "privacy.delta": 1e-3, "model.name": "mlp", "algorithm.name": "pfedsim"}
    # the client trains once and sends its model only; the similarities are the server's, from those models: dp-sgd runs
    assert build_experiment(config(**private, **{"privacy.mechanism": "dp-sgd"})).aggregator is not None
    with pytest.raises(ConfigError) as err:  # personalised extractors are no weighted mean to clip and noise
        build_experiment(config(**private, **{"privacy.mechanism": "dp-fedavg"}))
    assert err.value.field == "privacy.mechanism" and "takes no external per-client weights" in err.value.message


# ---------------------------------------------------------------- a replayed round, the downlink's price, executors, resume


PERSONALISED = {"algorithm.name": "pfedsim", "model.name": "mlp", "algorithm.warmup": 0.34}  # int(0.34 * 3) = 1 warm-up round


def test_a_run_replays_the_similarities_extractors_and_global_model_of_its_first_personalised_round() -> None:
    """After the warm-up round and the first personalised one (every client sampled), recompute the similarities, each
    client's next extractor and the global model with numpy loops, and compare with what the run's server holds and sends."""
    exp, protocol, done = protocol_rounds(config(**PERSONALISED, **{"federation.clients_per_round": 4}), rounds=2)
    agg = exp.aggregator
    assert isinstance(agg, PFedSim) and agg.warmup == 1 and "agg_similarity" not in done[0]
    head = [k for k in agg.head if k.endswith("weight")][0]
    sims = np.zeros((4, 4))
    for i in range(4):
        for j in range(4):
            if i != j:
                a, b = agg.models[i][head].double().numpy(), agg.models[j][head].double().numpy()
                rows = [float(a[c] @ b[c]) / (np.linalg.norm(a[c]) * np.linalg.norm(b[c])) for c in range(a.shape[0])]
                sims[i, j] = max(0.0, sum(rows) / len(rows))
    assert 0 < sims.max() < 1  # classifiers alike enough to share, none identical: the weights are neither all nor nothing
    np.testing.assert_allclose([[agg.similarity_of(i, j) if i != j else 0.0 for j in range(4)] for i in range(4)], sims, rtol=1e-12, atol=1e-15)
    assert done[1]["agg_similarity"] == pytest.approx(sum(sims[i, j] for i in range(4) for j in range(i + 1, 4)) / 6, rel=1e-12)
    sizes = [len(protocol.evaluation.client_data(c).y) for c in range(4)]
    for k, v in protocol.state.items():  # the global model: FedAvg of the four uploads
        want = sum(sizes[c] * agg.models[c][k].double().numpy() for c in range(4)) / sum(sizes)
        np.testing.assert_allclose(v.double().numpy(), want, rtol=1e-6, atol=1e-7)
    for i in range(4):
        raw = [-math.log(1 - min(s, 0.9999)) for s in [0.9999] + [sims[i, j] for j in range(4) if j != i]]
        order = [i] + [j for j in range(4) if j != i]
        sent = agg.downlink(i, 2, protocol.state)
        assert sent.params is not None and set(sent.params) == {*agg.body, *agg.head} and sent.held == agg.head
        assert all(torch.equal(sent.params[k], agg.models[i][k]) for k in agg.head)  # its own head (held: not priced)
        for k in agg.body:
            want = sum(r * agg.models[j][k].double().numpy() for r, j in zip(raw, order)) / sum(raw)
            np.testing.assert_allclose(sent.params[k].double().numpy(), want, rtol=1e-6, atol=1e-7)


def test_the_downlink_prices_the_whole_model_until_a_client_holds_its_head_then_the_extractor() -> None:
    cfg = config(**PERSONALISED, **{"federation.clients_per_round": 4})
    exp = build_experiment(cfg)
    agg = exp.aggregator
    assert isinstance(agg, PFedSim)
    state = exp.model.state_dict()
    whole = sum(v.numel() * v.element_size() for v in state.values())
    head = sum(state[k].numel() * state[k].element_size() for k in agg.head)
    got = [r["bytes_down"] for r in records(cfg)]
    # round 0 warm-up and round 1 (no head of its own yet): the whole model to each of 4; round 2: the extractor only.
    # From round 1 each downlink also carries the personalised-round flag, a Python float: 8 bytes
    assert got == [4 * whole, 4 * (whole + 8), 4 * (whole - head + 8)]


@pytest.mark.slow  # three runs, one of them in a process pool
def test_runs_agree_across_executors_and_local_accuracy_is_the_clients_trained_models() -> None:
    from chillfl.protocols.common import mean_or_none

    cfg = config(**PERSONALISED)
    seq = assert_executors_agree(cfg)
    fedavg = records(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))
    assert seq[0]["train_loss"] == fedavg[0]["train_loss"]  # the warm-up round is FedAvg's
    assert seq[-1]["local_loss"] != fedavg[-1]["local_loss"]
    exp, protocol, done = protocol_rounds(cfg, rounds=3)
    last = done[-1]
    agg = exp.aggregator
    assert isinstance(agg, PFedSim)
    accs = []
    for cid in last["clients"]:
        state = protocol.store.load(cid)
        assert state is not None
        own = {k[len(PREFIX):]: v for k, v in state.items() if k.startswith(PREFIX)}
        assert all(torch.equal(own[k], agg.models[cid][k]) for k in own)  # what it keeps is what it uploaded
        data = protocol.evaluation.client_data(cid)
        assert data.x_eval is not None and data.y_eval is not None
        accs.append(evaluate(exp.model, own, data.x_eval, data.y_eval, cfg.eval.batch_size)[0])
    assert last["local_acc"] == mean_or_none(accs)


def test_resume_is_bitwise(tmp_path: Path) -> None:
    cfg = config(**{**PERSONALISED, "federation.rounds": 4, "algorithm.warmup": 0.25})  # one warm-up round, three personalised
    assert resumed_records(cfg, 2, tmp_path) == records(cfg)


def test_the_build_reads_the_runs_rounds_and_the_classifiers_weight_matrix() -> None:
    from torch import nn

    from chillfl.aggregation.registry import make_aggregator

    linear = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    agg, terms = make_aggregator("pfedsim", {"warmup": 0.3}, num_clients=2, model=linear, seed=0, rounds=10)
    assert isinstance(agg, PFedSim) and terms == [] and agg.warmup == 3  # int(0.3 * 10)
    assert agg.head == ("2.weight", "2.bias") and agg.body == ("0.weight", "0.bias") and agg.weight_key == "2.weight"
    unknown, _ = make_aggregator("pfedsim", None, num_clients=2, model=linear, seed=0)  # built outside a run: a share can't be resolved
    assert isinstance(unknown, PFedSim) and unknown.warmup is None
    with pytest.raises(ValueError, match="share of the run's rounds"):
        unknown.downlink(0, 0, glob())
    counted, _ = make_aggregator("pfedsim", {"warmup": 4.0}, num_clients=2, model=linear, seed=0)
    assert isinstance(counted, PFedSim) and counted.warmup == 4  # a count needs no rounds
    # a head without a weight matrix (the last parameterised layer a batch norm): compared flattened
    bn = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    flat, _ = make_aggregator("pfedsim", None, num_clients=2, model=bn, seed=0, rounds=4)
    assert isinstance(flat, PFedSim) and flat.options.similarity == "flat" and "1.running_mean" in flat.head


def test_start_warmup_sends_newcomers_the_warm_up_model_as_fl_bench() -> None:
    """FL-bench sets every client's personal model to the warm-up's last global model: a client first sampled later starts
    there, not from the FedAvg of the personalised uploads (the default ``start = "global"``)."""
    agg = PFedSim(3, ["body", "head.weight", "head.bias"], {"head.weight", "head.bias"}, "head.weight", 1, PFedSimOptions(start="warmup"))
    warm = agg.aggregate(glob(), uploads(), 0)  # the warm-up's FedAvg: body = (10 (1, 2) + 20 (3, 4) + 30 (5, 8)) / 60 = (11/3, 17/3)
    torch.testing.assert_close(warm["body"], t(11 / 3, 17 / 3))
    first = agg.downlink(0, 1, warm)
    assert first.context == {PERSONAL: 1.0} and first.params is not None
    torch.testing.assert_close(first.params["body"], warm["body"])
    later = agg.aggregate(warm, uploads((0, 1)), 1)  # the personalised round's FedAvg: body = (10 (1, 2) + 20 (3, 4)) / 30 = (7/3, 10/3)
    torch.testing.assert_close(later["body"], t(7 / 3, 10 / 3))
    # client 2, first sampled now: the warm-up's model, not the round's global (7/3, 10/3)
    newcomer = agg.downlink(2, 2, later)
    assert newcomer.params is not None
    torch.testing.assert_close(newcomer.params["body"], t(11 / 3, 17 / 3))
    torch.testing.assert_close(newcomer.params["head.weight"], warm["head.weight"])
    # the default: the round's global model (no params sent)
    plain = warmup_case(rounds=1)
    plain.aggregate(glob(), uploads(), 0)
    plain.downlink(0, 1, warm)
    plain.aggregate(warm, uploads((0, 1)), 1)
    assert plain.downlink(2, 2, later).params is None and "warm" not in plain.state_dict()
    # the kept model round-trips
    again = PFedSim(3, ["body", "head.weight", "head.bias"], {"head.weight", "head.bias"}, "head.weight", 1, PFedSimOptions(start="warmup"))
    again.load_state_dict(agg.state_dict())
    torch.testing.assert_close(again.downlink(2, 2, later).params["body"], t(11 / 3, 17 / 3))  # type: ignore[index]


def test_start_warmup_runs_and_resumes(tmp_path: Path) -> None:
    base = {"algorithm.name": "pfedsim", "model.name": "mlp", "federation.rounds": 4, "algorithm.warmup": 0.5}
    cfg = config(**base, **{"algorithm.start": "warmup"})
    got = records(cfg)
    assert resumed_records(cfg, 3, tmp_path) == got
    # clients (0, 1, 2), (0, 1, 2), then (1, 2, 3) and (0, 1, 3): client 0, first personalised in the last round, starts
    # elsewhere; the rounds before are the default's
    plain = records(config(**base))
    assert [r["clients"] for r in got] == [[0, 1, 2], [0, 1, 2], [1, 2, 3], [0, 1, 3]]
    assert got[:3] == plain[:3] and got[3] != plain[3]


@pytest.mark.parametrize(("warmup", "refused"), [(1.0, True), (0.99, False), (0.67, False), (2.0, False), (3.0, True)])
def test_a_warmup_that_leaves_no_personalised_round_is_refused(warmup: float, refused: bool) -> None:
    """``warmup = 1`` is a share (the whole run): every round was warm-up, a run of FedAvg with nothing said, while a count
    of rounds as large was refused. Both are now refused alike (3 rounds: a share of 0.99 leaves int(2.97) = 2)."""
    from chillfl.experiment import check_config

    cfg = config(**{**PERSONALISED, "federation.rounds": 3, "algorithm.warmup": warmup})
    if refused:
        with pytest.raises(ConfigError) as err:
            check_config(cfg)
        assert err.value.field == "algorithm.warmup"
    else:
        check_config(cfg)


def test_what_a_wrapper_reads_as_a_clients_start_holds_its_own_head() -> None:
    """An attack's update w_i - start_i read the start from the downlink (:class:`SentStarts`): pFedSim's
    named only the extractor, so from a client's second personalised round the start's head was the global one, which
    the client never trained from (it puts its own in), and the gap to it counted as the client's update."""
    from chillfl.aggregation.base import SentStarts

    agg = warmup_case(rounds=0)
    new = agg.aggregate(glob(), uploads(), 0)
    sent = SentStarts()
    for c in (0, 1, 2):
        sent.record(c, 1, agg.downlink(c, 1, new))
    starts = sent.starts(1, new, uploads())
    for c in (0, 1, 2):
        assert all(torch.equal(starts[c][k], HEADS[c][k]) for k in HEADS[c])  # the head it trains from: its own
        assert torch.equal(starts[c]["body"], agg.downlink(c, 1, new).params["body"])  # type: ignore[index]

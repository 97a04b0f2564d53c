"""A client's update is taken from the model it started from, not the server's one global model, where a method sends
each client a model of its own (``Downlink.params``): the attacks forge from it (pFedHN's generated models) and
DP-FedAvg clips it (FedMut's mutated models)."""

from __future__ import annotations

from typing import Any, Sequence

import pytest
import torch

import chillfl
from chillfl.aggregation.base import ClientResult, Downlink, FedAvg, Params, report_number
from chillfl.attacks.aggregate import AttackedAggregation
from chillfl.attacks.spec import ModelRound
from chillfl.privacy.aggregate import PrivateAggregation
from chillfl.settings.attack import AttackConfig

TINY: dict[str, Any] = {
    "seed": 0, "executor": "sequential", "device": "cpu", "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]},
    "partition": {"name": "iid"}, "federation": {"num_clients": 3, "clients_per_round": 3, "rounds": 1},
    "client": {"lr": 0.1, "batch_size": 64, "epochs": 1}, "eval": {"clients": "none"},
}


def distance(a: Params, b: Params) -> float:
    return float(sum(((a[k].double() - b[k].double()) ** 2).sum() for k in b if b[k].is_floating_point()) ** 0.5)


def pfedhn_distances(monkeypatch: pytest.MonkeyPatch, attack: dict[str, Any]) -> dict[int, float]:
    """||upload - the model pFedHN made for the client|| per client of the run's one round."""
    import chillfl.aggregation.pfedhn as hn

    seen: dict[int, float] = {}
    aggregate = hn.PFedHN.aggregate

    def spy(self: Any, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        seen.update({r.client_id: distance(r.params, self.client_model(r.client_id, global_params)) for r in results})
        return aggregate(self, global_params, results, round)

    with monkeypatch.context() as patch:  # undone after the run: the next run's spy wraps the method itself, not this spy
        patch.setattr(hn.PFedHN, "aggregate", spy)
        chillfl.run(config={**TINY, "algorithm": {"name": "pfedhn"}, **attack}, write=False, progress=False)
    return seen


def test_sign_flip_under_pfedhn_negates_the_update_from_the_model_the_client_was_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    honest = pfedhn_distances(monkeypatch, {})
    attacked = pfedhn_distances(monkeypatch, {"attack": {"kind": "sign_flip", "clients": [0]}})
    assert honest[0] > 0
    assert attacked[0] == pytest.approx(honest[0], rel=1e-4)  # before: measured from the global model, many times larger
    assert attacked[1] == honest[1] and attacked[2] == honest[2]


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def result(cid: int, w: torch.Tensor) -> ClientResult:
    return ClientResult(cid, {"w": w}, 10, 1, 0.1, 1.0, 0.0)


class SendsOwn(FedAvg):
    """FedAvg whose downlink sends each client a model of its own (as FedMut, cluster methods and pFedHN do)."""

    def __init__(self, starts: dict[int, Params]) -> None:
        super().__init__()
        self.own = starts

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        return Downlink(params=self.own[client_id]) if client_id in self.own else Downlink()


def test_the_attack_wrapper_hands_the_kind_each_uploaders_start_from_its_downlink() -> None:
    w = {"w": t(0.0, 0.0)}
    starts = {0: {"w": t(10.0, 0.0)}, 1: {"w": t(0.0, 10.0)}}
    base = SendsOwn(starts)
    wrapper = AttackedAggregation(base, AttackConfig.from_table({"kind": "sign_flip"}, "attack"), frozenset({0}), 0)
    for cid in (0, 1, 2):
        wrapper.downlink(cid, 0, w)
    got: list[Params] = []
    base.aggregate = lambda g, results, round, weights=None: got.extend(r.params for r in results) or dict(g)  # type: ignore[method-assign]
    wrapper.aggregate(w, [result(0, t(11.0, 0.0)), result(1, t(0.0, 11.0)), result(2, t(1.0, 1.0))], 0)
    assert torch.equal(got[0]["w"], t(9.0, 0.0))  # its start minus its update (1, 0); from the global model: (-11, 0)
    assert torch.equal(got[1]["w"], t(0.0, 11.0)) and torch.equal(got[2]["w"], t(1.0, 1.0))


def test_ipm_and_lie_read_the_benign_updates_from_each_ones_start() -> None:
    from chillfl.attacks.kinds import ipm, lie

    g = {"w": t(0.0, 0.0)}
    a, b = {"w": t(100.0, 0.0)}, {"w": t(0.0, 100.0)}  # two benign clients in two clusters, updates (1, 0) and (3, 0)
    results = [result(0, t(5.0, 5.0)), result(1, t(101.0, 0.0)), result(2, t(3.0, 100.0))]
    round = ModelRound(g, results, frozenset({0}), 0, 0, {1: a, 2: b})
    sent = ipm.forge_models(ipm.IpmOptions(epsilon=1.0), round)[0]["w"]
    assert torch.allclose(sent, t(-2.0, 0.0))  # the attacker started from g: g - mean update (2, 0)
    sent = lie.forge_models(lie.LieOptions(z=1.0), round)[0]["w"]
    assert torch.allclose(sent, t(3.0, 0.0))  # g + mean (2, 0) + z std (1, 0)


def test_dp_fedavg_clips_the_update_from_the_start_the_client_was_sent() -> None:
    g = {"w": t(0.0, 0.0)}
    starts = {0: {"w": t(5.0, 0.0)}, 1: {"w": t(-5.0, 0.0)}}  # balanced mutations, far beyond the clip norm from g
    private = PrivateAggregation(SendsOwn(starts), client_noise=False, clip_norm=1.0, noise_multiplier=0.0, expected=2, seed=0)
    for cid in (0, 1):
        private.downlink(cid, 0, g)
    new = private.aggregate(g, [result(0, t(5.0, 0.5)), result(1, t(-5.0, 0.5))], 0)
    assert private.round_metrics()["clipped"] == 0.0  # updates (0, 0.5): within C; before, the mutations (+-5, 0.5) were clipped
    assert torch.allclose(new["w"], t(0.0, 0.5))  # the starts' mean (g) plus the mean update, as without privacy


class ChoosesCluster(FedAvg):
    """Sends two cluster models in the context (none as ``params``); each client reports which it trained, as IFCA's do."""

    def __init__(self, clusters: list[Params]) -> None:
        super().__init__()
        self.clusters = clusters

    def client_start(self, result: ClientResult, global_params: Params) -> Params | None:
        return self.clusters[int(result.report["chosen"])]


def test_the_attack_wrapper_asks_an_aggregator_whose_clients_choose_their_start() -> None:
    w = {"w": t(0.0, 0.0)}
    base = ChoosesCluster([w, {"w": t(10.0, 0.0)}])
    wrapper = AttackedAggregation(base, AttackConfig.from_table({"kind": "sign_flip"}, "attack"), frozenset({0}), 0)
    for cid in (0, 1):
        wrapper.downlink(cid, 0, w)
    got: list[Params] = []
    base.aggregate = lambda g, results, round, weights=None: got.extend(r.params for r in results) or dict(g)  # type: ignore[method-assign]
    chose = [ClientResult(0, {"w": t(11.0, 0.0)}, 10, 1, 0.1, 1.0, 0.0, {"chosen": 1.0}), ClientResult(1, {"w": t(1.0, 0.0)}, 10, 1, 0.1, 1.0, 0.0, {"chosen": 0.0})]
    wrapper.aggregate(w, chose, 0)
    assert torch.equal(got[0]["w"], t(9.0, 0.0))  # cluster 1's model minus its update (1, 0); from the global model: (-11, 0)


def test_sign_flip_under_ifca_negates_the_update_from_the_cluster_model_the_client_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every client attacks; each round, an upload's distance from the cluster model its client chose equals the
    honest model's (sign_flip at factor 1 negates the update, keeping its norm). Before, under a client that chose a
    cluster other than the global model's, the update was taken from the global model: many times as far."""
    import chillfl.aggregation.ifca as ifca

    honest: dict[tuple[int, int], Params] = {}
    pairs: list[tuple[float, float, bool]] = []
    wrapper, aggregate = AttackedAggregation.aggregate, ifca.Ifca.aggregate

    def before(self: Any, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        honest.update({(round, r.client_id): r.params for r in results})
        return wrapper(self, global_params, results, round)

    def after(self: Any, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        self._ensure(global_params)
        for r in results:
            j = int(report_number(r, ifca.CHOSEN, "IFCA"))
            pairs.append((distance(r.params, self.models[j]), distance(honest[(round, r.client_id)], self.models[j]), j != self.best))
        return aggregate(self, global_params, results, round)

    monkeypatch.setattr(AttackedAggregation, "aggregate", before)
    monkeypatch.setattr(ifca.Ifca, "aggregate", after)
    config = {**TINY, "federation": {"num_clients": 6, "clients_per_round": 6, "rounds": 3}, "algorithm": {"name": "ifca", "clusters": 2},
              "attack": {"kind": "sign_flip", "clients": [0, 1, 2, 3, 4, 5]}}
    chillfl.run(config=config, write=False, progress=False)
    assert any(other for _, _, other in pairs)  # some client started from a cluster model that was not the global one
    for sent, trained, _ in pairs:
        assert sent == pytest.approx(trained, rel=1e-4)


def test_a_wrapper_between_the_attack_and_such_an_aggregator_passes_its_choice_on() -> None:
    """AttackedAggregation(PrivateAggregation(base)), as a run builds them: the privacy layer hid the base's choice,
    and the attacker's update was taken from the global model again."""
    from chillfl.aggregation.base import AroundAggregator, ChoosesStart
    from chillfl.aggregation.pa3fed import PA3Fed

    base = ChoosesCluster([{"w": t(0.0, 0.0)}, {"w": t(10.0, 0.0)}])
    chose = ClientResult(0, {"w": t(11.0, 0.0)}, 10, 1, 0.1, 1.0, 0.0, {"chosen": 1.0})
    for wrapped in (AroundAggregator(base), PA3Fed(base)):
        assert isinstance(wrapped, ChoosesStart)
        start = wrapped.client_start(chose, {"w": t(0.0, 0.0)})
        assert start is not None and torch.equal(start["w"], t(10.0, 0.0))
    assert AroundAggregator(FedAvg()).client_start(chose, {"w": t(0.0, 0.0)}) is None  # a base that chooses none

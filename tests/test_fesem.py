"""FeSEM: the E-step's distances and assignment, the M-step's centres (both orders), the initial centres, the global model; state; end to end.

Models are two-scalar tables (``w``) so that every distance and mean is a line of arithmetic in the comments.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import ClientResult
from chillfl.aggregation.fesem import Fesem, FesemOptions, distance, nearest, picks
from chillfl.aggregation.ifca import fresh_model
from chillfl.cli import main
from chillfl.seeds import derive_seed
from methods_e2e import assert_executors_agree, config, records, resumed_records


def result(cid: int, w: list[float], n: int = 1) -> ClientResult:
    return ClientResult(cid, {"w": torch.tensor(w)}, n, 1, 0.1, 1.0, 0.0, {})


def close(actual: torch.Tensor, *expected: float) -> None:
    torch.testing.assert_close(actual.flatten(), torch.tensor(expected, dtype=actual.dtype))


def two_centres(options: FesemOptions, assignment: list[int] | None = None) -> Fesem:
    """Centres A = [0, 0] and B = [4, 0]; five clients, none assigned unless ``assignment``."""
    agg = Fesem(5, ["w"], nn.Linear(1, 1), 0, options)
    agg.centres = [{"w": torch.tensor([0.0, 0.0])}, {"w": torch.tensor([4.0, 0.0])}]
    if assignment is not None:
        agg.assignment = torch.tensor(assignment)
    return agg


G = {"w": torch.tensor([0.0, 0.0])}


def test_distance_and_nearest_by_hand() -> None:
    # [3, 4] - [0, 0]: sqrt(9 + 16) = 5; [3, 4] - [3, 0]: 4; over two entries: sqrt(5^2 + 1^2) = sqrt(26)
    w = {"w": torch.tensor([3.0, 4.0]), "b": torch.tensor([1.0])}
    assert distance(w, {"w": torch.zeros(2), "b": torch.zeros(1)}, ["w"]) == pytest.approx(5.0)
    assert distance(w, {"w": torch.zeros(2), "b": torch.zeros(1)}, ["w", "b"]) == pytest.approx(math.sqrt(26))
    assert nearest(w, [{"w": torch.zeros(2)}, {"w": torch.tensor([3.0, 0.0])}], ["w"]) == (1, pytest.approx(4.0))
    # [2, 0] is 2 from both [0, 0] and [4, 0]: the lowest index
    assert nearest({"w": torch.tensor([2.0, 0.0])}, [{"w": torch.zeros(2)}, {"w": torch.tensor([4.0, 0.0])}], ["w"])[0] == 0


def test_e_step_then_m_step_on_two_centres_by_hand() -> None:
    agg = two_centres(FesemOptions(clusters=2))
    # distances to A = [0, 0] and B = [4, 0]:
    #   c0 [1, 0]: 1 and 3 -> A;  c1 [3, 1]: sqrt 10 and sqrt 2 -> B;  c2 [2, 0]: 2 and 2 -> A (tie: the lowest);  c3 [5, 2]: sqrt 29 and sqrt 5 -> B
    ups = [result(0, [1.0, 0.0]), result(1, [3.0, 1.0]), result(2, [2.0, 0.0], 3), result(3, [5.0, 2.0])]
    out = agg.aggregate(G, ups, 0)
    assert agg.assignment.tolist() == [0, 1, 0, 1, -1]  # client 4, not sampled, stays unassigned
    close(agg.centres[0]["w"], 1.5, 0.0)  # ([1, 0] + [2, 0]) / 2: uniform, client 2's 3 samples do not count
    close(agg.centres[1]["w"], 4.0, 1.5)  # ([3, 1] + [5, 2]) / 2
    close(out["w"], 1.5, 0.0)  # two clients each: the tie goes to centre 0
    m = agg.round_metrics()
    assert m["fesem_distance"] == pytest.approx((1 + math.sqrt(2) + 2 + math.sqrt(5)) / 4)
    assert (m["fesem_global_cluster"], m["fesem_clusters"], m["fesem_moved"]) == (0, 2, 0)
    sent = agg.downlink(3, 1, out).params
    assert sent is not None
    close(sent["w"], 4.0, 1.5)  # client 3 trains from its centre
    assert agg.downlink(4, 1, out).params is None  # client 4 from the global model


def test_samples_weighting_and_a_centre_without_members_keeps_its_value() -> None:
    agg = two_centres(FesemOptions(clusters=3, weighting="samples"))
    agg.centres.append({"w": torch.tensor([100.0, 100.0])})
    # c0 [1, 0] (n = 1) and c2 [2, 0] (n = 3) -> A: 0.25 * 1 + 0.75 * 2 = 1.75; c1 [3, 1] alone -> B; nobody near C
    agg.aggregate(G, [result(0, [1.0, 0.0]), result(1, [3.0, 1.0]), result(2, [2.0, 0.0], 3)], 0)
    close(agg.centres[0]["w"], 1.75, 0.0)
    close(agg.centres[1]["w"], 3.0, 1.0)
    close(agg.centres[2]["w"], 100.0, 100.0)
    assert agg.round_metrics()["fesem_clusters"] == 2


def test_m_then_e_averages_by_the_start_then_reassigns_to_the_updated_centres() -> None:
    # c0 and c1 trained from B, c2 from A; uploads [1, 0], [3, 1], [2, 0]
    ups = [result(0, [1.0, 0.0]), result(1, [3.0, 1.0]), result(2, [2.0, 0.0])]
    agg = two_centres(FesemOptions(order="m_then_e"), [1, 1, 0, -1, -1])
    agg.aggregate(G, ups, 3)
    # M-step by the start: A = [2, 0]; B = ([1, 0] + [3, 1]) / 2 = [2, 0.5]
    close(agg.centres[0]["w"], 2.0, 0.0)
    close(agg.centres[1]["w"], 2.0, 0.5)
    # E-step against the updated centres: c0 [1, 0]: 1 to A, sqrt(1 + 0.25) to B -> A (moved); c1 [3, 1]: sqrt 2 and sqrt 1.25 -> B; c2: 0 -> A
    assert agg.assignment.tolist() == [0, 1, 0, -1, -1]
    m = agg.round_metrics()
    assert m["fesem_moved"] == 1 and m["fesem_distance"] == pytest.approx((1 + math.sqrt(1.25) + 0) / 3)
    # the paper's order on the same round: E against A = [0, 0], B = [4, 0]: c0 -> A, c1 -> B, c2 -> A (tie); A = [1.5, 0], B = [3, 1]
    paper = two_centres(FesemOptions(order="e_then_m"), [1, 1, 0, -1, -1])
    paper.aggregate(G, ups, 3)
    close(paper.centres[0]["w"], 1.5, 0.0)
    close(paper.centres[1]["w"], 3.0, 1.0)
    assert paper.assignment.tolist() == [0, 1, 0, -1, -1] and paper.round_metrics()["fesem_moved"] == 1


def test_m_then_e_newcomer_joins_the_centre_it_trained_from() -> None:
    # clients 0 and 1 in B, 2 in A: B is the largest, the global model; newcomer 3 trained from it
    agg = two_centres(FesemOptions(order="m_then_e"), [1, 1, 0, -1, -1])
    agg.aggregate(G, [result(0, [5.0, 0.0]), result(3, [3.0, 0.0])], 1)
    close(agg.centres[1]["w"], 4.0, 0.0)  # ([5, 0] + [3, 0]) / 2
    close(agg.centres[0]["w"], 0.0, 0.0)  # nobody trained from A this round
    assert agg.assignment.tolist() == [1, 1, 0, 1, -1]  # [3, 0]: 3 to A, 1 to B


def test_global_model_is_the_centre_with_the_most_clients_over_all_rounds() -> None:
    # clients 2, 3, 4 assigned to A in earlier rounds; this round's two uploads both go to B
    agg = two_centres(FesemOptions(), [-1, -1, 0, 0, 0])
    out = agg.aggregate(G, [result(0, [4.0, 0.0]), result(1, [6.0, 0.0])], 2)
    close(agg.centres[1]["w"], 5.0, 0.0)
    close(out["w"], 0.0, 0.0)  # A keeps its three clients against B's two
    assert agg.round_metrics()["fesem_global_cluster"] == 0


def test_picks_are_seeded_distinct_and_repeat_only_past_n() -> None:
    a = picks(5, 3, 7)
    assert a == picks(5, 3, 7) and len(set(a)) == 3 and set(a) <= set(range(5))
    assert len({tuple(picks(5, 3, s)) for s in range(20)}) > 1  # the seed chooses
    b = picks(2, 5, 7)
    assert sorted(b[:2]) == [0, 1] and b[2:] == [b[0], b[1], b[0]]


def test_first_round_centres_are_the_round_uploads() -> None:
    agg = Fesem(4, ["w"], nn.Linear(1, 1), 3, FesemOptions(clusters=2))
    assert agg.downlink(1, 0, G).params is None  # before the centres: every client trains the initial model
    # two uploads, two centres: the centres are the two uploads (in a seeded order), each its own member
    agg.aggregate(G, [result(1, [1.0, 0.0]), result(2, [9.0, 0.0])], 0)
    first = agg.assignment.tolist()
    assert sorted(first[1:3]) == [0, 1] and first[0] == first[3] == -1
    close(agg.centres[first[1]]["w"], 1.0, 0.0)
    close(agg.centres[first[2]]["w"], 9.0, 0.0)
    assert agg.round_metrics()["fesem_distance"] == 0.0


def test_first_round_with_more_uploads_than_centres_is_one_k_means_step() -> None:
    # uploads [0], [1], [10]; whichever two are picked, [1] joins [0] (1 away) rather than [10] (9 away), and the two ends are apart:
    # the centres after the M-step are [0.5] and [10] (or [1] picked with [10]: [0] joins [1], the same means), or [0] and [5.5] if [0]
    # and [1] are picked ([10]: 10 from [0], 9 from [1] -> with [1]: ([1] + [10]) / 2 = 5.5)
    ups = [ClientResult(i, {"w": torch.tensor([v])}, 1, 1, 0.1, 1.0, 0.0, {}) for i, v in enumerate([0.0, 1.0, 10.0])]
    seen = set()
    for seed in range(12):
        agg = Fesem(3, ["w"], nn.Linear(1, 1), seed, FesemOptions(clusters=2))
        agg.aggregate({"w": torch.zeros(1)}, ups, 0)
        means = tuple(sorted(float(c["w"]) for c in agg.centres))
        assert means in {(0.5, 10.0), (0.0, 5.5)}
        seen.add(means)
    assert len(seen) == 2  # both kinds of picks occur over the seeds


def test_random_init_is_the_initial_model_and_fresh_models() -> None:
    model = nn.Linear(3, 2)
    like = {k: v.detach().clone() for k, v in model.state_dict().items()}
    agg = Fesem(2, ["weight", "bias"], model, 5, FesemOptions(clusters=3, init="random"))
    assert agg.downlink(0, 0, like).params is None  # the global model: centre 0
    assert torch.equal(agg.centres[0]["weight"], like["weight"])
    for j in (1, 2):
        fresh = fresh_model(model, derive_seed(5, "fesem", j), like)
        assert all(torch.equal(agg.centres[j][k], fresh[k]) for k in like)
    assert not torch.equal(agg.centres[1]["weight"], agg.centres[2]["weight"])


def test_state_round_trip() -> None:
    agg = two_centres(FesemOptions())
    agg.aggregate(G, [result(0, [1.0, 0.0]), result(1, [3.0, 1.0])], 0)
    again = Fesem(5, ["w"], nn.Linear(1, 1), 0, FesemOptions())
    again.load_state_dict(agg.state_dict())
    assert again.assignment.tolist() == agg.assignment.tolist() == [0, 1, -1, -1, -1]
    assert all(torch.equal(a["w"], b["w"]) for a, b in zip(agg.centres, again.centres))
    with pytest.raises(ValueError, match="FeSEM state"):
        again.load_state_dict({"models": {}, "assignment": agg.assignment})


@pytest.mark.parametrize(
    "override, field",
    [
        ("algorithm.clusters=0", "algorithm.clusters"),
        ("algorithm.order=m_only", "algorithm.order"),
        ("algorithm.init=kmeans", "algorithm.init"),
        ("algorithm.weighting=median", "algorithm.weighting"),
    ],
)
def test_bad_options_exit_2_with_one_line_naming_the_field(override: str, field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "exp.toml").write_text(f'out_dir = "{tmp_path / "out"}"\n')
    tiny = ["dataset.name=digits", "federation.num_clients=4", "federation.rounds=1", "model.name=mlp", "algorithm.name=fesem"]
    assert main(["run", str(tmp_path / "exp.toml"), "-q", *tiny, override]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"chillfl: error: {field}:")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("order", ["e_then_m", "m_then_e"])
def test_one_centre_is_fedavg_round_for_round(order: str) -> None:
    """Replay: with K = 1 and samples weighting every round is FedAvg's (the one centre is the samples-weighted mean of every upload)."""
    over = {"model.name": "mlp", "federation.clients_per_round": 4}
    fes = records(config(**{"algorithm.name": "fesem", "algorithm.clusters": 1, "algorithm.weighting": "samples", "algorithm.order": order, **over}))
    avg = records(config(**{"algorithm.name": "fedavg", **over}))
    assert all(r["agg_fesem_clusters"] == 1 for r in fes)
    for a, b in zip(fes, avg):
        assert (a["global_acc"], a["global_loss"], a["train_loss"], a["local_acc"]) == (b["global_acc"], b["global_loss"], b["train_loss"], b["local_acc"])


@pytest.mark.slow  # three executors and a resumed run: about 4 s each
@pytest.mark.parametrize("order, init", [("e_then_m", "clients"), ("m_then_e", "random")])
def test_under_every_executor_and_resume(order: str, init: str, tmp_path: Path) -> None:
    # 3 of 4 clients a round, K = 2: centres from round 0's uploads (or fresh models), the fourth client arrives later
    cfg = config(**{"algorithm.name": "fesem", "model.name": "mlp", "algorithm.clusters": 2, "algorithm.order": order, "algorithm.init": init})
    seq = assert_executors_agree(cfg)
    assert all(r["local_acc"] is not None for r in seq)
    if init == "clients":
        assert seq[0]["agg_fesem_clusters"] == 2
    assert resumed_records(cfg, 2, tmp_path) == seq


def test_two_rounds_replayed_from_the_run_uploads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replay: the run's real uploads, the centres re-made from the seeded picks, the E-step by torch.cdist and the M-step as plain means."""
    calls: list[tuple[list[ClientResult], int, list[dict[str, torch.Tensor]], list[dict[str, torch.Tensor]], list[int]]] = []
    real = Fesem.aggregate

    def spy(self: Fesem, global_params: dict[str, torch.Tensor], results: list[ClientResult], round: int) -> dict[str, torch.Tensor]:
        before = [dict(c) for c in self.centres]
        out = real(self, global_params, results, round)
        calls.append((list(results), round, before, [dict(c) for c in self.centres], self.assignment.tolist()))
        return out

    monkeypatch.setattr(Fesem, "aggregate", spy)
    cfg = config(**{"algorithm.name": "fesem", "model.name": "mlp", "algorithm.clusters": 2, "federation.clients_per_round": 4, "federation.rounds": 2})
    records(cfg)
    assert [c[1] for c in calls] == [0, 1]
    keys = [k for k in calls[0][0][0].params if "weight" in k or "bias" in k]

    def flat(params: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([params[k].double().flatten() for k in keys])

    for results, rnd, before, after, assignment in calls:
        ups = torch.stack([flat(r.params) for r in results])
        if not before:  # round 0: two of the four uploads, by the seeded permutation
            order = torch.randperm(len(results), generator=torch.Generator().manual_seed(derive_seed(cfg.seed, "fesem-init", rnd)))
            centres = ups[order[:2]]
        else:
            centres = torch.stack([flat(c) for c in before])
        chosen = torch.cdist(ups, centres).argmin(dim=1)
        assert [assignment[r.client_id] for r in results] == chosen.tolist()
        for k in range(2):
            expected = ups[chosen == k].mean(dim=0) if bool((chosen == k).any()) else centres[k]
            torch.testing.assert_close(flat(after[k]).float(), expected.float())

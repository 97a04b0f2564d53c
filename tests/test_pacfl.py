"""PACFL: the signature's SVD, the principal angles, the proximity matrix and the clustering on hand-worked values; the server's rounds; end to end.

Subspaces are spans of unit vectors of R^2 and R^3 whose angles are known (0, 45, 90 degrees); models are one-entry tables (``w``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from chillfl.aggregation.base import ClientResult
from chillfl.aggregation.pacfl import (
    ASK,
    SIGNATURE,
    Pacfl,
    PacflClient,
    PacflOptions,
    basis,
    hierarchical_clustering,
    linkage_distance,
    principal_angles,
    proximity,
    proximity_matrix,
    signature,
)
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.engine.protocol import ClientData, ClientTask, drive
from chillfl.executors.sequential import train_job
from chillfl.experiment import build_experiment
from chillfl.protocols.parameters import ParamDownlink, ParamUplink, ParameterClient
from chillfl.training.local import LocalSpec
from methods_e2e import TINY, assert_executors_agree, config, records, resumed_records

R = 1 / math.sqrt(2)
E1, E2, E3 = torch.eye(3, dtype=torch.float64)  # float64: arccos near 1 turns a rounding of 1e-8 (float32) into 0.01 degrees


def cols(*vectors: torch.Tensor) -> torch.Tensor:
    """A d x p basis from its columns."""
    return torch.stack(vectors, dim=1)


def sig(*blocks: torch.Tensor) -> torch.Tensor:
    """A (blocks, d, p) signature."""
    return torch.stack(blocks)


def result(cid: int, w: float, n: int = 1, signature: torch.Tensor | None = None) -> ClientResult:
    return ClientResult(cid, {"w": torch.tensor([w])}, n, 1, 0.1, 1.0, 0.0, {} if signature is None else {SIGNATURE: signature})


def at(degrees: float) -> torch.Tensor:
    """The unit vector of R^2 at ``degrees`` from e_1, as a one-block, one-column signature."""
    r = math.radians(degrees)
    return torch.tensor([[[math.cos(r)], [math.sin(r)]]], dtype=torch.float64)


# ---------------------------------------------------------------- angles


def test_principal_angles_of_known_subspaces() -> None:
    # lines of R^2: e_1 and (e_1 + e_2)/sqrt 2 -> cos = 1/sqrt 2 -> 45 degrees
    torch.testing.assert_close(principal_angles(torch.tensor([[1.0], [0.0]]), torch.tensor([[R], [R]])), torch.tensor([45.0], dtype=torch.float64))
    # planes of R^3: span(e1, e2) and span(e1, e3): U^T W = [[1, 0], [0, 0]] -> 0 and 90
    torch.testing.assert_close(principal_angles(cols(E1, E2), cols(E1, E3)), torch.tensor([0.0, 90.0], dtype=torch.float64))
    # span(e1, e2) and span(e1, (e2 + e3)/sqrt 2): singular values 1, 1/sqrt 2 -> 0 and 45
    torch.testing.assert_close(principal_angles(cols(E1, E2), cols(E1, R * (E2 + E3))), torch.tensor([0.0, 45.0], dtype=torch.float64))
    # a zero column (a block of rank 1 < p = 2) is orthogonal to everything: 0 and 90
    torch.testing.assert_close(principal_angles(cols(E1, torch.zeros(3)), cols(E1, E2)), torch.tensor([0.0, 90.0], dtype=torch.float64))


def test_the_three_measures_by_hand() -> None:
    # the same plane in two bases: span(e1, e2) and span((e1 + e2)/sqrt 2, (e1 - e2)/sqrt 2):
    # every principal angle 0, but every pair of basis columns at 45 degrees (the authors' code's column measure)
    u = sig(cols(E1, E2))
    w = sig(cols(R * (E1 + E2), R * (E1 - E2)))
    assert proximity(u, w, "smallest") == pytest.approx(0.0, abs=1e-6)
    assert proximity(u, w, "sum") == pytest.approx(0.0, abs=1e-6)
    assert proximity(u, w, "vectors") == pytest.approx(45.0)
    # span(e1, e2) against span(e1, (e2 + e3)/sqrt 2): smallest 0, sum 0 + 45, columns: e1 with e1 -> 0
    v = sig(cols(E1, R * (E2 + E3)))
    assert proximity(u, v, "sum") == pytest.approx(45.0)
    # a singular vector's sign is arbitrary: e1 against -e1 is 0 degrees under every measure
    for measure in ("smallest", "sum", "vectors"):
        assert proximity(sig(cols(E1)), sig(cols(-E1)), measure) == pytest.approx(0.0, abs=1e-6)  # type: ignore[arg-type]


def test_proximity_matrix_is_the_least_angle_over_pairs_of_blocks() -> None:
    # a: blocks e1 and e2; b: one block (e1 + e3)/sqrt 2; c: one block e3
    # a-b: min(45 (e1), 90 (e2)) = 45; a-c: 90, 90 -> 90; b-c: 45
    a, b, c = sig(cols(E1), cols(E2)), sig(cols(R * (E1 + E3))), sig(cols(E3))
    torch.testing.assert_close(torch.tensor(proximity_matrix([a, b, c])), torch.tensor([[0.0, 45, 90], [45, 0, 45], [90, 45, 0]]))


# ---------------------------------------------------------------- the signature


def test_basis_is_the_first_left_singular_vectors_zero_past_the_rank() -> None:
    # rows (2, 0, 0) and (0, 1, 0): D = X^T has singular values 2 and 1 with vectors +-e1, +-e2; p = 3: the third is zero
    u = basis(torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), 3)
    torch.testing.assert_close(u.abs(), torch.tensor([[1.0, 0, 0], [0, 1, 0], [0, 0, 0]], dtype=torch.float64))
    # rows (1, 1, 0) and (2, 2, 0): rank 1; the second singular value is rounding, so its vector (arbitrary) is zeroed
    u = basis(torch.tensor([[1.0, 1.0, 0.0], [2.0, 2.0, 0.0]]), 2)
    torch.testing.assert_close(u.abs(), torch.tensor([[R, 0], [R, 0], [0, 0]], dtype=torch.float64))


def test_more_vectors_than_dimensions_keep_d_columns_and_the_same_angles() -> None:
    # d = 2, p = 5: the rank is at most 2, so the signature holds 2 columns, not 5 zero-padded ones (its size, the
    # ledger's bytes and the server's p x p products would grow with p: p = 5000 took gigabytes and minutes on digits)
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    s = signature(x, torch.zeros(3, dtype=torch.int64), 5, per_label=False)
    assert s.shape == (1, 2, 2)
    # the same plane (R^2) in two bases: the 5 principal angles of the padded form are 0, 0, 90, 90, 90
    w = sig(cols(torch.tensor([R, R]), torch.tensor([R, -R])))
    assert proximity(s, w, "smallest", p=5) == pytest.approx(0.0, abs=1e-5)
    assert proximity(s, w, "sum", p=5) == pytest.approx(270.0, abs=1e-4)  # 0 + 0 + 3 * 90: the padded form's sum
    # every measure as on the zero-padded (blocks, 2, 5) forms
    pad = torch.zeros(1, 2, 3, dtype=torch.float64)
    for measure in ("smallest", "sum", "vectors"):
        padded = proximity(torch.cat([s.double(), pad], 2), torch.cat([w, pad], 2), measure)  # type: ignore[arg-type]
        assert proximity(s, w, measure, p=5) == pytest.approx(padded, abs=1e-4)  # type: ignore[arg-type]


def test_signature_has_one_block_per_label_or_one_of_all_rows() -> None:
    # label 0: rows (1, 1, 0) and (2, 2, 0) -> (1, 1, 0)/sqrt 2; label 2: the image (0, 0, 3), flattened from 1 x 3 -> e3
    x = torch.tensor([[[1.0, 1.0, 0.0]], [[0.0, 0.0, 3.0]], [[2.0, 2.0, 0.0]]])
    y = torch.tensor([0, 2, 0])
    s = signature(x, y, 2, per_label=True)
    assert s.shape == (2, 3, 2) and s.dtype == torch.float32  # labels 0 and 2 in order; d = 3; p = 2
    torch.testing.assert_close(s.abs(), torch.tensor([[[R, 0], [R, 0], [0, 0]], [[0, 0], [0, 0], [1, 0]]]))
    # all rows: D has the orthogonal columns (1,1,0), (0,0,3), (2,2,0): singular values 3 and sqrt 10 -> (1,1,0)/sqrt 2 first
    s = signature(x, y, 2, per_label=False)
    torch.testing.assert_close(s.abs(), torch.tensor([[[R, 0], [R, 0], [0, 1]]]))


def test_client_sends_its_signature_when_asked_and_the_ledger_counts_it() -> None:
    model = nn.Linear(3, 2)
    spec = LocalSpec(epochs=1, batch_size=4)
    x = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 3.0], [2.0, 2.0, 0.0]])
    y = torch.tensor([0, 1, 0])
    half = PacflClient(p=2)
    client = ParameterClient(model, 64, half)
    data = ClientData(x, y, x, y)
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def reply(context: dict[str, Any]) -> ParamUplink:
        task = ClientTask(0, 0, ParamDownlink(start, 0.1, 1.0, context, seed=0), data, None)
        out = drive([client.update(task)], lambda _s, jobs: [train_job(model, spec, j) for j in jobs])[0]
        return out.uplink  # type: ignore[no-any-return]

    asked, not_asked = reply({ASK: 1.0}), reply({})
    assert set(asked.report) == {SIGNATURE} and not_asked.report == {}
    torch.testing.assert_close(asked.report[SIGNATURE].abs(), torch.tensor([[[R, 0], [R, 0], [0, 0]], [[0, 0], [0, 0], [1, 0]]]))  # type: ignore[union-attr]
    assert all(torch.equal(asked.params[k], not_asked.params[k]) for k in start)  # the request is not the training's context
    # 2 blocks x d = 3 x p = 2 float32 entries: 48 bytes in the uplink's control part, on top of the model
    assert asked.nbytes() == {"params": not_asked.nbytes()["params"], "control": 48}
    assert half.prepare({}, start, {ASK: 1.0, "mu": 0.5})[1] == {"mu": 0.5}


# ---------------------------------------------------------------- hierarchical clustering


def test_clustering_merges_while_the_linkage_distance_is_at_most_beta() -> None:
    # points 0, 2, 4 on a line: d01 = d12 = 2, d02 = 4; (0, 1) first (the tie goes to the first pair in index order)
    # then d({0, 1}, 2) = single min(4, 2) = 2, complete max = 4, weighted / average (4 + 2)/2 = 3
    chain = [[0, 2, 4], [2, 0, 2], [4, 2, 0]]
    assert hierarchical_clustering(chain, 3.0, "single") == [[0, 1, 2]]
    assert hierarchical_clustering(chain, 3.0, "complete") == [[0, 1], [2]]
    assert hierarchical_clustering(chain, 3.0, "weighted") == [[0, 1, 2]]  # 3 <= 3
    assert hierarchical_clustering(chain, 2.9, "weighted") == [[0, 1], [2]]
    assert hierarchical_clustering(chain, 1.9, "single") == [[0], [1], [2]]


def test_weighted_and_average_linkage_differ_by_hand() -> None:
    # d01 = 1 merges first; d({0,1}, 2) = (4 + 2)/2 = 3 < d23 = 4 merges next (both linkages, sizes 1 and 1)
    # then to 3: weighted (WPGMA, the authors' "average") ((10 + 10)/2 + 4)/2 = 7; average (UPGMA) (2 * 10 + 1 * 4)/3 = 8
    d = [[0, 1, 4, 10], [1, 0, 2, 10], [4, 2, 0, 4], [10, 10, 4, 0]]
    assert hierarchical_clustering(d, 7.5, "weighted") == [[0, 1, 2, 3]]
    assert hierarchical_clustering(d, 7.5, "average") == [[0, 1, 2], [3]]
    assert hierarchical_clustering(d, 7.5, "single") == [[0, 1, 2, 3]]  # min(10, 4)
    assert hierarchical_clustering(d, 7.5, "complete") == [[0, 1, 2], [3]]  # d({0,1},2) = 4 <= 7.5, then max(10, 4) = 10


def test_clusters_are_numbered_by_their_lowest_member() -> None:
    # 1 and 3 merge (d = 1), 0 and 2 stay apart: [[0], [1, 3], [2]]
    d = [[0, 9, 9, 9], [9, 0, 9, 1], [9, 9, 0, 9], [9, 1, 9, 0]]
    assert hierarchical_clustering(d, 5.0) == [[0], [1, 3], [2]]


def test_newcomer_linkage_distances() -> None:
    assert (linkage_distance([10.0, 80.0], "single"), linkage_distance([10.0, 80.0], "complete")) == (10.0, 80.0)
    assert linkage_distance([10.0, 80.0], "average") == linkage_distance([10.0, 80.0], "weighted") == 45.0


# ---------------------------------------------------------------- the server


def test_first_round_clusters_and_averages_within_each_cluster() -> None:
    agg = Pacfl(5, PacflOptions(beta=10.0, weighting="samples"))
    g = {"w": torch.tensor([0.0])}
    down = agg.downlink(0, 0, g)
    assert down.params is None and down.context == {ASK: 1.0}  # no signature yet: the global model, and the request
    # signatures at 0, 5 degrees (clients 0, 1) and 90, 88 degrees (clients 2, 3): 5 and 2 <= 10 merge; 83 and more do not
    out = agg.aggregate(g, [result(0, 1.0, 1, at(0)), result(1, 5.0, 3, at(5)), result(2, 8.0, 1, at(90)), result(3, 2.0, 1, at(88))], 0)
    assert agg.assignment.tolist() == [0, 0, 1, 1, -1]
    torch.testing.assert_close(agg.models[0]["w"], torch.tensor([4.0]))  # (1 * 1 + 3 * 5) / 4
    torch.testing.assert_close(agg.models[1]["w"], torch.tensor([5.0]))  # (8 + 2) / 2
    torch.testing.assert_close(out["w"], torch.tensor([4.0]))  # two clusters of two clients: the lowest index
    assert agg.round_metrics() == {"pacfl_clusters": 2, "pacfl_signatures": 4, "pacfl_global_cluster": 0}
    sent = agg.downlink(2, 1, out)
    assert sent.params is not None and sent.context == {}  # its cluster's model, and no request
    torch.testing.assert_close(sent.params["w"], torch.tensor([5.0]))
    # round 1: client 4 is new (80 degrees: cluster 1 at the mean of 10 and 8 = 9 against (80 + 75)/2 = 77.5 for cluster 0)
    # it started from the global model (cluster 0's), so its upload is not in cluster 1's mean
    out = agg.aggregate(out, [result(0, 2.0), result(2, 6.0), result(4, 100.0, 1, at(80))], 1)
    assert agg.assignment.tolist() == [0, 0, 1, 1, 1]
    torch.testing.assert_close(agg.models[0]["w"], torch.tensor([2.0]))
    torch.testing.assert_close(agg.models[1]["w"], torch.tensor([6.0]))
    torch.testing.assert_close(out["w"], torch.tensor([6.0]))  # cluster 1 now has three clients
    assert agg.round_metrics() == {"pacfl_clusters": 2, "pacfl_signatures": 1, "pacfl_global_cluster": 1}
    again = Pacfl(5, PacflOptions(beta=10.0))
    again.load_state_dict(agg.state_dict())
    assert again.assignment.tolist() == agg.assignment.tolist() and torch.equal(again.models[1]["w"], agg.models[1]["w"])
    assert set(again.signatures) == {0, 1, 2, 3, 4} and torch.equal(again.signatures[4], at(80))


def newcomer_case(options: PacflOptions) -> Pacfl:
    # cluster 0: clients at 10 and 80 degrees from the newcomer (e_1); cluster 1: both at 30; cluster 0 is the global one (3 clients)
    agg = Pacfl(6, options)
    agg.models = [{"w": torch.tensor([1.0])}, {"w": torch.tensor([2.0])}]
    agg.assignment = torch.tensor([0, 0, 1, 1, 0, -1])
    agg.signatures = {0: at(10), 1: at(80), 2: at(30), 3: at(30), 4: at(10)}
    return agg


@pytest.mark.parametrize(
    "linkage, cluster, w0",
    [
        ("single", 0, 5.0),  # 10 < 30; it started from cluster 0's model, so its upload joins cluster 0's mean: (1 + 9) / 2
        ("complete", 1, 1.0),  # 80 > 30
        ("weighted", 1, 1.0),  # mean (10 + 80 + 10) / 3 = 33.3 > 30
    ],
)
def test_newcomer_joins_the_nearest_cluster_by_the_linkage(linkage: str, cluster: int, w0: float) -> None:
    agg = newcomer_case(PacflOptions(linkage=linkage))  # type: ignore[arg-type]
    agg.aggregate({"w": torch.tensor([1.0])}, [result(0, 1.0), result(5, 9.0, 1, at(0))], 3)
    assert int(agg.assignment[5]) == cluster
    torch.testing.assert_close(agg.models[0]["w"], torch.tensor([w0]))
    torch.testing.assert_close(agg.models[1]["w"], torch.tensor([2.0]))  # no member of cluster 1 was sampled


def test_a_far_newcomer_starts_its_own_cluster_under_threshold() -> None:
    # single linkage: the least distance is 10 > beta = 5 -> a new cluster 2, whose model is its upload
    agg = newcomer_case(PacflOptions(linkage="single", beta=5.0, newcomers="threshold"))
    agg.aggregate({"w": torch.tensor([1.0])}, [result(5, 9.0, 1, at(0))], 3)
    assert int(agg.assignment[5]) == 2 and len(agg.models) == 3
    torch.testing.assert_close(agg.models[2]["w"], torch.tensor([9.0]))
    near = newcomer_case(PacflOptions(linkage="single", beta=10.5, newcomers="threshold"))  # 10 <= 10.5: it joins cluster 0
    near.aggregate({"w": torch.tensor([1.0])}, [result(5, 9.0, 1, at(0))], 3)
    assert int(near.assignment[5]) == 0 and len(near.models) == 2


def test_a_newcomer_without_its_signature_is_an_error() -> None:
    with pytest.raises(ValueError, match="client 5"):
        newcomer_case(PacflOptions()).aggregate({"w": torch.tensor([1.0])}, [result(5, 9.0)], 3)


# ---------------------------------------------------------------- options, end to end


@pytest.mark.parametrize(
    "override, field",
    [
        ("algorithm.p=0", "algorithm.p"),
        ("algorithm.beta=-1", "algorithm.beta"),
        ("algorithm.linkage=ward", "algorithm.linkage"),
        ("algorithm.measure=chordal", "algorithm.measure"),
        ("algorithm.signature=label", "algorithm.signature"),
        ("algorithm.newcomers=drop", "algorithm.newcomers"),
    ],
)
def test_bad_options_exit_2_with_one_line_naming_the_field(override: str, field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "exp.toml").write_text(f'out_dir = "{tmp_path / "out"}"\n')
    tiny = ["dataset.name=digits", "federation.num_clients=4", "federation.rounds=1", "model.name=mlp", "algorithm.name=pacfl"]
    assert main(["run", str(tmp_path / "exp.toml"), "-q", *tiny, override]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"chillfl: error: {field}:")


def disjoint_partition(tmp_path: Path) -> str:
    """Four clients: 0 and 1 hold digits 0-4, 2 and 3 digits 5-9 (alternate samples of each class)."""
    labels = build_experiment(config(**{"algorithm.name": "fedavg"})).data.dataset.y_train
    labels = np.asarray(labels)
    low, high = np.flatnonzero(labels < 5), np.flatnonzero(labels >= 5)
    clients = [low[0::2], low[1::2], high[0::2], high[1::2]]
    doc = {"format": "chillfl-partition", "version": 1, "dataset": "digits", "train_size": len(labels), "partition": {}, "clients": [c.tolist() for c in clients]}
    path = tmp_path / "partition.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_clients_of_disjoint_labels_end_in_two_clusters(tmp_path: Path) -> None:
    part = disjoint_partition(tmp_path)
    over = {k: v for k, v in TINY.items() if not k.startswith("partition.")}
    over.update({"algorithm.name": "pacfl", "model.name": "mlp", "partition.from": part, "federation.clients_per_round": 4, "federation.rounds": 2})
    for measure in ("smallest", "vectors"):
        for signature_kind in ("per_label", "all"):
            cfg = load_config(None, {**over, "algorithm.measure": measure, "algorithm.signature": signature_kind})
            exp = build_experiment(cfg)
            sigs = [signature(*exp.data.client_train(k), 3, signature_kind == "per_label") for k in range(4)]
            a = proximity_matrix(sigs, measure)  # type: ignore[arg-type]
            within, across = max(a[0][1], a[2][3]), min(a[i][j] for i in (0, 1) for j in (2, 3))
            assert within < across, (measure, signature_kind, a)
            beta = (within + across) / 2  # a threshold between the two
            recs = records(cfg.with_overrides({"algorithm": {"name": "pacfl", "measure": measure, "signature": signature_kind, "beta": beta}}))
            assert recs[0]["agg_pacfl_clusters"] == recs[1]["agg_pacfl_clusters"] == 2
            assert recs[0]["agg_pacfl_signatures"] == 4 and recs[1]["agg_pacfl_signatures"] == 0
            # the signatures travel in round 0 only: 4 clients x (5 labels or 1 block) x d = 64 x p = 3 float32s
            blocks = 5 if signature_kind == "per_label" else 1
            assert recs[0]["bytes_up"] - recs[1]["bytes_up"] == 4 * blocks * 64 * 3 * 4


def test_one_cluster_is_fedavg_round_for_round() -> None:
    """Replay: with beta past every angle and every client sampled, each round is FedAvg's (samples-weighted mean)."""
    over = {"model.name": "mlp", "federation.clients_per_round": 4}
    pac = records(config(**{"algorithm.name": "pacfl", "algorithm.beta": 180.0, **over}))
    avg = records(config(**{"algorithm.name": "fedavg", **over}))
    assert all(r["agg_pacfl_clusters"] == 1 for r in pac)
    for a, b in zip(pac, avg):
        assert (a["global_acc"], a["global_loss"], a["train_loss"], a["local_acc"]) == (b["global_acc"], b["global_loss"], b["train_loss"], b["local_acc"])


@pytest.mark.slow  # three executors and a resumed run: about 4 s each
@pytest.mark.parametrize("newcomers", ["nearest", "threshold"])
def test_under_every_executor_and_resume(newcomers: str, tmp_path: Path) -> None:
    # 3 of 4 clients a round: round 0 clusters three (their angles are 3 to 5 degrees: apart at beta = 2), the fourth arrives later
    cfg = config(**{"algorithm.name": "pacfl", "model.name": "mlp", "algorithm.beta": 2.0, "algorithm.newcomers": newcomers})
    seq = assert_executors_agree(cfg)
    assert all(r["local_acc"] is not None for r in seq)
    assert seq[0]["agg_pacfl_clusters"] > 1 and sum(r["agg_pacfl_signatures"] for r in seq) == 4
    assert resumed_records(cfg, 2, tmp_path) == seq

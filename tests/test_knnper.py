"""kNN-Per: p_kNN and the interpolation by hand, the leave-one-out choice of lam, and runs of it (FedAvg's global model,
local accuracy of the interpolation, determinism, resume, executors, option refusals)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.func import functional_call

import chillfl
from chillfl.aggregation.knnper import KNNPer, KNNPerModel, choose_lam, interpolate, knn_probs
from chillfl.models.parts import head_inputs
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.models.parts import head_name
from methods_e2e import assert_executors_agree, cli_option_error, config, records, resumed_records

E = math.exp(-1.0)

# A datastore of three 2-D representations: x0 = (0, 0) label 0, x1 = (3, 4) label 1, x2 = (0, 1) label 1.
STORE_X = torch.tensor([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0]])
STORE_Y = torch.tensor([0, 1, 1])


def f64(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def test_p_knn_by_hand() -> None:
    q = torch.tensor([[0.0, 0.0]])
    # distances from q: d0 = 0, d1 = 5, d2 = 1. k = 2, sigma = 1: x0 and x2, weights e^0 = 1 and e^-1 = 0.3679
    # p_kNN = [1, e^-1] / (1 + e^-1) = [0.7311, 0.2689]
    torch.testing.assert_close(knn_probs(q, STORE_X, STORE_Y, 2, k=2, sigma=1.0), f64([[1 / (1 + E), E / (1 + E)]]))
    # k = 3 adds x1 (label 1) at weight e^-5 = 0.0067: [1, e^-1 + e^-5] / (1 + e^-1 + e^-5) = [0.7275, 0.2725]
    z = 1 + E + math.exp(-5)
    torch.testing.assert_close(knn_probs(q, STORE_X, STORE_Y, 2, k=3, sigma=1.0), f64([[1 / z, (E + math.exp(-5)) / z]]))
    # k larger than the datastore uses all of it: the same as k = 3
    torch.testing.assert_close(knn_probs(q, STORE_X, STORE_Y, 2, k=10, sigma=1.0), f64([[1 / z, (E + math.exp(-5)) / z]]))
    # sigma = 2, k = 2: weights 1 and e^-1/2 = 0.6065: [0.6225, 0.3775]
    h = math.exp(-0.5)
    torch.testing.assert_close(knn_probs(q, STORE_X, STORE_Y, 2, k=2, sigma=2.0), f64([[1 / (1 + h), h / (1 + h)]]))
    # three classes: label 2 has no neighbour, so no weight
    torch.testing.assert_close(knn_probs(q, STORE_X, STORE_Y, 3, k=2, sigma=1.0), f64([[1 / (1 + E), E / (1 + E), 0.0]]))


def test_p_knn_with_the_authors_squared_kernel_by_hand() -> None:
    # kernel = "squared": exp(-d^2 / (D sigma)), D = 2 (the representation's size). From q = (0, 0): d0^2 = 0, d2^2 = 1,
    # d1^2 = 25. k = 2, sigma = 1: weights 1 and e^-1/2 = 0.6065: [0.6225, 0.3775] (the distance kernel: [0.7311, 0.2689])
    q = torch.tensor([[0.0, 0.0]])
    h = math.exp(-0.5)
    torch.testing.assert_close(knn_probs(q, STORE_X, STORE_Y, 2, k=2, sigma=1.0, kernel="squared"), f64([[1 / (1 + h), h / (1 + h)]]))
    # k = 3 adds x1 at e^-12.5; sigma = 2 halves the exponents: 1, e^-1/4, e^-25/4
    z = 1 + h + math.exp(-12.5)
    torch.testing.assert_close(knn_probs(q, STORE_X, STORE_Y, 2, k=3, sigma=1.0, kernel="squared"), f64([[1 / z, (h + math.exp(-12.5)) / z]]))
    a, b = math.exp(-0.25), math.exp(-6.25)
    torch.testing.assert_close(knn_probs(q, STORE_X, STORE_Y, 2, k=3, sigma=2.0, kernel="squared"), f64([[1 / (1 + a + b), (a + b) / (1 + a + b)]]))
    # far from everything: q = (0, -1000), d0^2 = 1e6 (e^-5e5 would underflow to 0, and 0 / 0), d2^2 = 1001^2; shifted,
    # the nearest weighs 1 and x2 e^-1000.5, which is 0 in float64: [1, 0], not NaN
    far = torch.tensor([[0.0, -1000.0]])
    torch.testing.assert_close(knn_probs(far, STORE_X, STORE_Y, 2, k=2, sigma=1.0, kernel="squared"), f64([[1.0, 0.0]]))


def test_the_kernel_option_reaches_the_clients_and_changes_their_local_accuracy_only() -> None:
    """``kernel = "squared"`` is carried to every client's own model; the global model, FedAvg's, is the same bit for bit."""
    base = config(**{"algorithm.name": "knnper", "model.name": "mlp"})
    squared = config(**{"algorithm.name": "knnper", "model.name": "mlp", "algorithm.kernel": "squared"})
    exp = build_experiment(squared)
    assert exp.aggregator.client_half().personal_template().kernel == "squared"  # type: ignore[union-attr]
    a, b = records(base), records(squared)
    assert [r["global_acc"] for r in a] == [r["global_acc"] for r in b] and [r["train_loss"] for r in a] == [r["train_loss"] for r in b]


def test_far_neighbours_do_not_underflow() -> None:
    # q = (0, -1000): d0 = 1000, d2 = 1001 (d1 = sqrt(9 + 1004^2) = 1004.0045); exp(-1000) underflows in float64 (to 0,
    # and 0 / 0), the shifted weights 1 (x0) and e^-1 (x2) do not: [0.7311, 0.2689] as at the origin
    q = torch.tensor([[0.0, -1000.0]])
    torch.testing.assert_close(knn_probs(q, STORE_X, STORE_Y, 2, k=2, sigma=1.0), f64([[1 / (1 + E), E / (1 + E)]]))


def test_ties_go_to_the_lower_datastore_index() -> None:
    # q = (0, 0.5) is at 0.5 from x0 (label 0) and x2 (label 1): k = 1 takes x0, the lower index
    q = torch.tensor([[0.0, 0.5]])
    torch.testing.assert_close(knn_probs(q, STORE_X, STORE_Y, 2, k=1, sigma=1.0), f64([[1.0, 0.0]]))
    # the same points stored the other way round: x2 comes first and is taken
    flipped = knn_probs(q, STORE_X.flip(0), STORE_Y.flip(0), 2, k=1, sigma=1.0)
    torch.testing.assert_close(flipped, f64([[0.0, 1.0]]))


def test_leave_one_out_leaves_each_rows_own_entry_out() -> None:
    # row 0 = x0 among the others: x2 (d = 1, label 1) and x1 (d = 5, label 1): k = 1 gives [0, 1], not its own [1, 0]
    p = knn_probs(STORE_X[:1], STORE_X, STORE_Y, 2, k=1, sigma=1.0, exclude=torch.tensor([0]))
    torch.testing.assert_close(p, f64([[0.0, 1.0]]))
    # k = 10 over a datastore of 3 leaves 2 neighbours: all label 1
    p = knn_probs(STORE_X[:1], STORE_X, STORE_Y, 2, k=10, sigma=1.0, exclude=torch.tensor([0]))
    torch.testing.assert_close(p, f64([[0.0, 1.0]]))


def test_interpolation_by_hand() -> None:
    p_knn = f64([[1 / (1 + E), E / (1 + E)]])  # [0.7311, 0.2689], the k = 2 example above
    logits = torch.tensor([[0.0, math.log(3.0)]])  # p_global = [1/4, 3/4]
    # lam = 0.5: [0.5 * 0.7311 + 0.5 * 0.25, 0.5 * 0.2689 + 0.5 * 0.75] = [0.4905, 0.5095]: label 1
    p = interpolate(p_knn, logits, 0.5).exp()
    expected = torch.tensor([[0.5 / (1 + E) + 0.125, 0.5 * E / (1 + E) + 0.375]])
    torch.testing.assert_close(p, expected)
    assert int(p.argmax()) == 1
    # lam = 0.8: [0.8 * 0.7311 + 0.2 * 0.25, 0.8 * 0.2689 + 0.2 * 0.75] = [0.6348, 0.3652]: label 0
    p = interpolate(p_knn, logits, 0.8).exp()
    torch.testing.assert_close(p, torch.tensor([[0.8 / (1 + E) + 0.05, 0.8 * E / (1 + E) + 0.15]]))
    assert int(p.argmax()) == 0
    # lam = 1: the kNN alone
    torch.testing.assert_close(interpolate(p_knn, logits, 1.0).exp(), p_knn.float())


def test_lam_zero_is_the_global_models_log_softmax_bitwise_and_lam_one_stays_finite() -> None:
    logits = torch.randn(5, 4, generator=torch.Generator().manual_seed(0)) * 30
    p_knn = torch.zeros(5, 4, dtype=torch.float64)
    p_knn[:, 0] = 1.0  # zeros elsewhere: log 0 = -inf
    assert torch.equal(interpolate(p_knn, logits, 0.0), torch.log_softmax(logits, 1))
    out = interpolate(p_knn, logits, 1.0)
    assert torch.isfinite(out).all()
    assert torch.equal(out[:, 1:], torch.full((5, 3), math.log(torch.finfo(torch.float32).tiny)))


def test_lam_is_chosen_on_the_rows_leave_one_out_ties_to_the_smallest() -> None:
    x = torch.tensor([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]])
    y = torch.tensor([0, 0, 1, 1])
    # each row's nearest other row has its label (k = 1: p_kNN one-hot right); the global model is wrong on every row,
    # p_global(wrong) = 1 / (1 + e^-10). A row is right when lam + (1 - lam) p_c > (1 - lam) p_w, i.e. lam > ~0.49998:
    # 0.5 is the smallest lam of the grid right on all four
    wrong = torch.where(y[:, None] == torch.arange(2), -5.0, 5.0)
    assert choose_lam(x, y, wrong, 2, k=1, sigma=1.0, batch_size=3) == 0.5
    # the global model right (p = 0.6) and each row's nearest other of the other label (x = 0, 1 on a line): lam = 0
    # and 0.1 are right (0.9 * 0.6 = 0.54 > 0.1 + 0.9 * 0.4 = 0.46), 0.2 is not (0.48 < 0.52): the smallest, 0
    line, labels = torch.tensor([[0.0], [1.0]]), torch.tensor([0, 1])
    right = torch.where(labels[:, None] == torch.arange(2), math.log(0.6), math.log(0.4))
    assert choose_lam(line, labels, right, 2, k=1, sigma=1.0, batch_size=8) == 0.0
    # the global model wrong too (p_global(wrong) = 0.6): every lam is wrong on both rows, so the smallest, 0; a kNN that
    # saw each row's own entry (at distance 0) would be right from lam = 0.5 (0.5 + 0.5 * 0.4 > 0.5 * 0.6) and pick it
    assert choose_lam(line, labels, right.flip(1), 2, k=1, sigma=1.0, batch_size=8) == 0.0
    # a single row has no other: lam = 0
    assert choose_lam(line[:1], labels[:1], right[:1], 2, k=1, sigma=1.0, batch_size=8) == 0.0


def tiny_model_and_state(cfg: Any) -> tuple[torch.nn.Module, dict[str, torch.Tensor], Any]:
    exp = build_experiment(cfg)
    return exp.model, dict(exp.initial_state), exp


def test_the_personal_model_at_lam_zero_predicts_as_the_global_model_bitwise() -> None:
    model, state, exp = tiny_model_and_state(config(**{"algorithm.name": "knnper", "model.name": "mlp"}))
    head = head_name(model, warn=False)
    x, y = exp.data.client_train(0)
    store_x, _ = head_inputs(model, head, state, x, 64)
    template = KNNPerModel(model, head, k=10, sigma=1.0).eval()
    own = {**{f"model.{k}": v for k, v in state.items()}, "store_x": store_x, "store_y": y, "lam": torch.tensor(0.0)}
    xt, _ = exp.data.client_eval(0)
    with torch.no_grad():
        personal = functional_call(template, own, (xt,))
        glob = functional_call(model.eval(), state, (xt,))
    assert torch.equal(personal, torch.log_softmax(glob, 1))
    assert torch.equal(personal.argmax(1), glob.argmax(1))


def test_local_accuracy_is_the_interpolations_on_each_clients_own_split() -> None:
    """One round, every client sampled: each measures w^0 (the model it was sent) with its datastore under w^0 and its
    lam chosen on its rows; recomputed here from the parts, the mean over the equal-sized splits is the record's."""
    cfg = config(**{"algorithm.name": "knnper", "model.name": "mlp", "federation.rounds": 1, "federation.clients_per_round": 4})
    seq = records(cfg)
    model, state, exp = tiny_model_and_state(cfg)
    head = head_name(model, warn=False)
    classes = 10
    accs = []
    for c in range(4):
        x, y = exp.data.client_train(c)
        store_x, logits = head_inputs(model, head, state, x, 1024)
        lam = choose_lam(store_x, y, logits, classes, 10, 1.0, 1024)
        xt, yt = exp.data.client_eval(c)
        rep, out = head_inputs(model, head, state, xt, 1024)
        pred = interpolate(knn_probs(rep, store_x, y, classes, 10, 1.0), out, lam).argmax(1)
        accs.append(float((pred == yt).double().mean()))
    assert seq[0]["local_acc"] == pytest.approx(sum(accs) / 4, abs=1e-12)
    assert seq[0]["local_acc"] != seq[0]["global_acc"]


def test_the_global_model_and_its_metrics_are_fedavgs_bitwise() -> None:
    cfg = config(**{"algorithm.name": "knnper", "model.name": "mlp"})
    knn = chillfl.run(config=cfg, write=False, progress=False)
    fedavg = chillfl.run(config=cfg.with_overrides({"algorithm": {"name": "fedavg"}}), write=False, progress=False)
    keys = [k for k in fedavg.records[0] if k.startswith("global_") or k in ("train_loss", "client_train_loss", "bytes_up", "bytes_down")]
    assert [{k: r[k] for k in keys} for r in knn.records] == [{k: r[k] for k in keys} for r in fedavg.records]
    assert knn.state is not None and fedavg.state is not None
    assert all(torch.equal(knn.state[k], fedavg.state[k]) for k in fedavg.state) and knn.state.keys() == fedavg.state.keys()
    assert [r["local_acc"] for r in knn.records] != [r["local_acc"] for r in fedavg.records]


def test_lam_zero_measures_the_sent_global_model_as_fedavg_ft_without_fine_tuning() -> None:
    cfg = config(**{"algorithm.name": "knnper", "algorithm.lam": 0.0, "model.name": "mlp"})
    knn = records(cfg)
    sent = records(cfg.with_overrides({"algorithm": {"name": "fedavg_ft", "finetune_epochs": 0}}))
    assert [r["local_acc"] for r in knn] == [r["local_acc"] for r in sent]
    assert [r["local_loss"] for r in knn] == pytest.approx([r["local_loss"] for r in sent], rel=1e-5)  # log_softmax applied twice: float32 rounding


def test_runs_are_deterministic_and_resume_bitwise(tmp_path: Path) -> None:
    cfg = config(**{"algorithm.name": "knnper", "model.name": "mlp", "algorithm.k": 3, "algorithm.sigma": 0.5})
    seq = records(cfg)
    assert len(seq) == 3 and all(r["local_acc"] is not None for r in seq)
    assert records(cfg) == seq
    assert resumed_records(cfg, 1, tmp_path) == seq


def test_executors_agree() -> None:
    assert len(assert_executors_agree(config(**{"algorithm.name": "knnper", "model.name": "mlp"}))) == 3


def test_a_run_through_the_cli_writes_local_accuracy(tmp_path: Path) -> None:
    from chillfl.cli import main

    run = tmp_path / "run.toml"
    run.write_text(
        f'out_dir = "{tmp_path / "results"}"\ndevice = "cpu"\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\n'
        '[federation]\nnum_clients = 4\nclients_per_round = 2\nrounds = 2\n[algorithm]\nname = "knnper"\nk = 5\n',
        encoding="utf-8",
    )
    assert main(["run", str(run)]) == 0
    lines = [json.loads(line) for line in next((tmp_path / "results").rglob("metrics.jsonl")).read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 2 and all(0.0 <= r["local_acc"] <= 1.0 for r in lines)


def test_the_builder_carries_the_options() -> None:
    model, _, _ = tiny_model_and_state(config(**{"algorithm.name": "knnper", "model.name": "mlp"}))
    agg = KNNPer(model, head_name(model, warn=False))
    half = agg.client_half()
    assert half.personal_template().k == 10 and half.personal_template().sigma == 1.0 and half.lam is None  # type: ignore[attr-defined]


@pytest.mark.parametrize(("field", "value"), [
    ("k", 0), ("k", 1.5), ("sigma", 0.0), ("sigma", -1.0), ("sigma", float("inf")), ("lam", -0.1), ("lam", 1.5), ("lam", float("nan")),
    ("weighting", "squares"), ("kernel", "gaussian"),
])
def test_options_are_checked(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"algorithm.{field}"):
        build_experiment(config(**{"algorithm.name": "knnper", f"algorithm.{field}": value}))


def test_a_bad_option_on_the_command_line_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err, written = cli_option_error(tmp_path, capsys, "knnper", "algorithm.lam=2")
    assert code == 2 and len(err) == 1 and "algorithm.lam" in err[0] and not written

"""FedDistill (Jeong et al., 2018; PFLlib's feddistill): per-class average logits up, their mean down; by hand, replayed, end to end."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.engine.loop import run_rounds
from chillfl.errors import ConfigError
from chillfl.executors.sequential import SequentialExecutor
from chillfl.experiment import build_experiment, build_protocol
from chillfl.prototypes.methods.feddistill import FedDistill, FedDistillOptions, LogitDistillLoss, distillation_distance
from chillfl.prototypes.spec import ClassRows
from chillfl.settings.prototypes import parse_prototypes

from float_paths import assert_close
from kd_helpers import BASE, check_every_executor, records
from methods_e2e import resumed_records

FD = {"method": "feddistill"}
LN2, LN3 = math.log(2.0), math.log(3.0)


def hooks(**options: Any) -> FedDistill:
    return FedDistill(FedDistillOptions(**options), num_classes=3, seed=0)


# ---------------------------------------------------------------- the formulas, by hand


def test_the_uploaded_rows_are_per_class_mean_logits_and_counts_by_hand():
    # logits: class 0 rows [1,2,3] and [3,0,1] -> mean [2,1,2] (count 2); class 1 none -> zeros (0); class 2 [0,6,0] (1)
    logits = torch.tensor([[1.0, 2.0, 3.0], [0.0, 6.0, 0.0], [3.0, 0.0, 1.0]])
    features = torch.full((3, 5), 7.0)  # the representation (width 5) is not what travels
    rows = hooks().release(0, 0, features, logits, torch.tensor([0, 2, 0]))
    assert torch.equal(rows.means, torch.tensor([[2.0, 1.0, 2.0], [0.0, 0.0, 0.0], [0.0, 6.0, 0.0]]))
    assert rows.counts.tolist() == [2, 0, 1] and rows.extra == {} and rows.width() == 3  # C floats a class


def test_the_servers_table_uniform_by_default_and_count_weighted_by_hand():
    # A: class 0 average [2,1,2] from 2 samples, class 2 [0,6,0] from 1;  B: class 0 [5,1,-1] from 1, class 1 [1,1,1] from 4
    a = ClassRows(torch.tensor([[2.0, 1.0, 2.0], [0.0, 0.0, 0.0], [0.0, 6.0, 0.0]]), torch.tensor([2, 0, 1]))
    b = ClassRows(torch.tensor([[5.0, 1.0, -1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]), torch.tensor([1, 4, 0]))
    # uniform (PFLlib): class 0 = ([2,1,2] + [5,1,-1]) / 2 = [3.5, 1, 0.5]; class 1 = B's alone; class 2 = A's alone
    k = hooks().combine([a, b])
    assert torch.allclose(k.protos, torch.tensor([[3.5, 1.0, 0.5], [1.0, 1.0, 1.0], [0.0, 6.0, 0.0]]))
    assert k.mask.tolist() == [True, True, True] and k.extra == {} and k.params == {}
    # count: class 0 = (2 [2,1,2] + 1 [5,1,-1]) / 3 = [9, 3, 3] / 3 = [3, 1, 1]; the single-holder classes as before
    c = hooks(weighting="count").combine([a, b])
    assert torch.allclose(c.protos[0], torch.tensor([3.0, 1.0, 1.0])) and torch.allclose(c.protos[1:], k.protos[1:])
    # a class no client of the round holds is not in the table: nothing of it goes down
    only_a = hooks().combine([a])
    assert only_a.mask.tolist() == [True, False, True] and torch.equal(only_a.protos[1], torch.zeros(3))


def batch() -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Sample 0 (class 0, known, Fhat_0 = [0,0,0]): z = [ln 2, 0, 0], softmax [1/2, 1/4, 1/4];
    sample 1 (class 2, not in the table, garbage row [9,9,9]): z = [0,0,0], softmax [1/3, 1/3, 1/3]."""
    z = torch.tensor([[LN2, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    ctx = {"protos": torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [9.0, 9.0, 9.0]], dtype=torch.float64), "proto_mask": torch.tensor([True, True, False])}
    return z, torch.tensor([0, 2]), ctx


def test_the_mse_loss_value_and_gradient_by_hand():
    z, y, ctx = batch()
    # CE: (-ln 1/2 - ln 1/3) / 2 = (ln 2 + ln 3) / 2;  MSE over n C = 6: ((ln 2)^2 + 0 [masked]) / 6;  lam = 2
    value = LogitDistillLoss(lam=2.0)(z, y, 1.0, context=ctx)
    assert value.item() == pytest.approx((LN2 + LN3) / 2 + 2 * LN2**2 / 6, rel=1e-12)
    value.backward()
    # CE: (softmax - onehot) / n: [-1/4, 1/8, 1/8] and [1/6, 1/6, -1/3];  MSE: lam 2 (z - Fhat) / (n C) = (2/3)[ln 2, 0, 0], 0
    want = torch.tensor([[-1 / 4 + 2 * LN2 / 3, 1 / 8, 1 / 8], [1 / 6, 1 / 6, -1 / 3]], dtype=torch.float64)
    assert torch.allclose(z.grad, want, rtol=1e-12, atol=1e-12)


def test_the_kl_loss_value_and_gradient_by_hand():
    z, y, ctx = batch()
    # KL(q || p) for sample 0, q = softmax([0,0,0]) = 1/3 each, p = [1/2, 1/4, 1/4]:
    #   1/3 (ln (1/3)/(1/2) + 2 ln (1/3)/(1/4)) = 1/3 ln (2/3 * 16/9) = ln(32/27) / 3;  sample 1 masked; mean over n = 2; lam = 2
    value = LogitDistillLoss(lam=2.0, distance="kl")(z, y, 1.0, context=ctx)
    assert value.item() == pytest.approx((LN2 + LN3) / 2 + 2 * (math.log(32 / 27) / 3) / 2, rel=1e-12)
    value.backward()
    # KL: lam (p - q) / n = [1/2 - 1/3, 1/4 - 1/3, 1/4 - 1/3] = [1/6, -1/12, -1/12] for sample 0, on top of CE's
    want = torch.tensor([[-1 / 4 + 1 / 6, 1 / 8 - 1 / 12, 1 / 8 - 1 / 12], [1 / 6, 1 / 6, -1 / 3]], dtype=torch.float64)
    assert torch.allclose(z.grad, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("distance", ["mse", "kl"])
def test_a_class_missing_from_the_table_contributes_nothing(distance):
    z, y, ctx = batch()
    other = {**ctx, "protos": ctx["protos"].clone()}
    other["protos"][2] = torch.tensor([-5.0, 3.0, 100.0], dtype=torch.float64)  # the unknown class's row: any value
    assert distillation_distance(z, y, ctx["protos"], ctx["proto_mask"], distance) == distillation_distance(z, y, other["protos"], ctx["proto_mask"], distance)
    # no class known (round 1): the loss is plain CE at the run's T, whatever lam
    empty = {**ctx, "proto_mask": torch.zeros(3, dtype=torch.bool)}
    ce = nn.functional.cross_entropy(z / 0.5, y)
    assert LogitDistillLoss(5.0, distance)(z, y, 0.5, context=empty).item() == pytest.approx(ce.item(), rel=1e-12)


def test_the_mse_loss_is_pflibs_construction_recomputed_with_torch():
    """An independent recomputation: nn.MSELoss against a copy of the outputs with each known class's row put in."""
    gen = torch.Generator().manual_seed(0)
    z, y = torch.randn(7, 4, generator=gen, dtype=torch.float64), torch.tensor([0, 1, 3, 3, 2, 1, 0])
    table, mask = torch.randn(4, 4, generator=gen, dtype=torch.float64), torch.tensor([True, False, True, True])
    target = z.clone()
    for i, c in enumerate(y.tolist()):
        if mask[c]:
            target[i] = table[c]
    want = nn.functional.cross_entropy(z, y) + 0.3 * nn.MSELoss()(z, target)
    got = LogitDistillLoss(0.3)(z, y, 1.0, context={"protos": table, "proto_mask": mask})
    assert got.item() == pytest.approx(want.item(), rel=1e-12)
    # kl: torch's kl_div against the softmax of each known class's row, summed per sample, over all n samples
    q = torch.softmax(table[y], dim=1)
    per = nn.functional.kl_div(torch.log_softmax(z, dim=1), q, reduction="none").sum(1) * mask[y]
    want_kl = nn.functional.cross_entropy(z, y) + 0.3 * per.sum() / len(y)
    assert LogitDistillLoss(0.3, "kl")(z, y, 1.0, context={"protos": table, "proto_mask": mask}).item() == pytest.approx(want_kl.item(), rel=1e-12)


# ---------------------------------------------------------------- one round, replayed


def tiny(**over: Any) -> Any:
    return load_config(None, {**BASE, "federation.rounds": 1, **over}).with_overrides({"model": {"name": "mlp"}, "prototypes": FD})


def test_one_round_replayed_table_bytes_and_accuracies():
    cfg = tiny()
    exp = build_experiment(cfg)
    protocol = build_protocol(exp)
    ex = SequentialExecutor(exp.model, exp.spec, protocol.client)
    (rec,) = list(run_rounds(protocol, ex, seed=cfg.seed, num_clients=6, clients_per_round=3, rounds=1))
    model, ev = exp.model, protocol.evaluation
    model.eval()

    # the table, recomputed: each trained client's model on its training split, per-class mean logits, uniform over holders
    sums, holders, up = torch.zeros(10, 10, dtype=torch.float64), torch.zeros(10), 0
    for cid in rec["clients"]:
        model.load_state_dict(dict(protocol.clients[cid]))
        data = ev.client_data(cid)
        with torch.no_grad():
            out = model(data.x).to(torch.float64)
        for c in sorted(set(data.y.tolist())):
            sums[c] += out[data.y == c].mean(0)
            holders[c] += 1
            up += 10 * 4 + 8  # C floats + its class id and count
    known = holders > 0
    k = protocol.knowledge
    assert k.mask.tolist() == known.tolist() and rec["known_classes"] == int(known.sum())
    assert_close(sums[known] / holders[known].unsqueeze(1), k.protos[known].to(torch.float64))
    assert torch.equal(k.protos[~known], torch.zeros(int((~known).sum()), 10))

    # bytes: the rows only, no model; nothing down in round 1 (no class known yet)
    assert rec["bytes_up"] == up and rec["bytes_down"] == 0

    # global_acc: the mean over the trained clients' own models on the test set; global_proto_acc: nearest average logit
    accs, paccs = [], []
    for cid in sorted(rec["clients"]):
        model.load_state_dict(dict(protocol.clients[cid]))
        with torch.no_grad():
            z = model(ev.x_test)
        accs.append(float((z.argmax(1) == ev.y_test).double().mean()))
        dist = torch.cdist(z, k.protos).masked_fill(~k.mask.unsqueeze(0), float("inf"))
        paccs.append(float((dist.argmin(1) == ev.y_test).double().mean()))
    assert rec["global_acc"] == pytest.approx(sum(accs) / len(accs))
    assert rec["global_proto_acc"] == pytest.approx(sum(paccs) / len(paccs))

    # next round: the table goes down (known classes x (C floats + id)), and a returning client trains its own model on it
    cid = rec["clients"][0]
    (task,) = protocol.configure(1, [cid])
    assert task.downlink.model is None and task.downlink.nbytes() == {"knowledge": int(known.sum()) * (10 * 4 + 4)}
    job = next(protocol.client.update(task))
    assert all(torch.equal(job.start[n], v) for n, v in protocol.clients[cid].items())
    assert job.context["protos"] is k.protos and job.context["proto_mask"] is k.mask


def test_every_client_trains_its_own_model_from_the_start_it_was_built_with():
    protocol = build_protocol(build_experiment(tiny()))
    assert protocol.global_state() is None and protocol.knowledge.protos.shape == (10, 10)  # [C, C]: among the logits


# ---------------------------------------------------------------- end to end


@pytest.mark.slow
def test_feddistill_every_executor_same_records():
    recs = check_every_executor({"model": {"name": "mlp"}, "prototypes": FD})
    last = recs[-1]
    assert last["known_classes"] == 10 and last["local_acc"] is not None and last["global_proto_acc"] is not None
    assert last["bytes_down"] == 3 * 10 * (10 * 4 + 4) and 0 < last["bytes_up"] <= 3 * 10 * (10 * 4 + 8)


@pytest.mark.slow
def test_feddistill_every_executor_models_of_different_representation_widths_kl():
    """Only C-wide rows travel: an MLP (width 64) and a CNN (width 256) side by side, which FedProto refuses."""
    model = {"name": "mlp", "assign": ["mlp", "flexchill_cnn", "mlp", "flexchill_cnn", "mlp", "mlp"]}
    with pytest.raises(ConfigError):
        build_experiment(load_config(None, BASE).with_overrides({"model": model, "prototypes": {"method": "fedproto"}}))
    recs = check_every_executor({"model": model, "prototypes": {**FD, "distance": "kl", "weighting": "count"}})
    assert recs[-1]["local_acc"] is not None and recs[-1]["known_classes"] == 10


def test_resume_is_bitwise(tmp_path: Path):
    over = {"model": {"name": "mlp"}, "prototypes": {**FD, "distance": "kl"}}
    cfg = load_config(None, {**BASE, "federation.rounds": 3}).with_overrides(over)
    assert resumed_records(cfg, 1, tmp_path) == records({"federation.rounds": 3, **over})


def test_at_lam_0_every_client_trains_exactly_as_local_only():
    """An independent replay of the training path: no distillation term, each client's own model, the same seeds."""
    mine = records({"model": {"name": "mlp"}, "prototypes": {**FD, "lam": 0.0}})
    alone = records({"model": {"name": "mlp"}, "algorithm": {"name": "local_only"}})
    assert [(r["client_train_loss"], r["local_acc"], r["local_loss"]) for r in mine] == [(r["client_train_loss"], r["local_acc"], r["local_loss"]) for r in alone]


def test_round_one_is_plain_training_and_lam_and_the_distance_change_the_rest():
    plain = records({"model": {"name": "mlp"}, "prototypes": {**FD, "lam": 0.0}})
    mse = records({"model": {"name": "mlp"}, "prototypes": FD})
    kl = records({"model": {"name": "mlp"}, "prototypes": {**FD, "distance": "kl"}})
    assert plain[0]["train_loss"] == mse[0]["train_loss"] == kl[0]["train_loss"]  # no table yet
    assert len({plain[1]["train_loss"], mse[1]["train_loss"], kl[1]["train_loss"]}) == 3


# ---------------------------------------------------------------- options


def test_defaults_are_pfllibs():
    o = parse_prototypes(FD)
    assert o.options == FedDistillOptions(lam=1.0, distance="mse", weighting="uniform") and not o.share_model


@pytest.mark.parametrize("option, value", [("lam", "-1.0"), ("distance", '"l1"'), ("weighting", '"median"'), ("noise_std", "1.0")])
def test_bad_options_exit_2_with_one_line_naming_the_field(tmp_path, capsys, option, value):
    config = tmp_path / "exp.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\n[prototypes]\nmethod = "feddistill"\n{option} = {value}\n')
    assert main(["run", str(config), "-q", "dataset.name=digits", "federation.num_clients=4", "model.name=mlp"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"chillfl: error: prototypes.{option}:")
    assert not (tmp_path / "out").exists()

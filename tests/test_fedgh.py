"""FedGH (Yi et al., ACM MM 2023): class means up, a server-trained global header down; by hand, replayed, end to end."""

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
from chillfl.prototypes.methods.fedgh import FedGH, FedGHOptions, header_pairs, header_step
from chillfl.prototypes.spec import ClassRows, Head, Knowledge
from chillfl.settings.prototypes import parse_prototypes

from float_paths import assert_close
from kd_helpers import BASE, MIXED, check_every_executor, records
from methods_e2e import resumed_records
from test_nbfix_head_notes import head_notes

GH = {"method": "fedgh"}


def hooks(**options: Any) -> FedGH:
    return FedGH(FedGHOptions(**options), num_classes=3, seed=0)


# ---------------------------------------------------------------- the formulas, by hand


def test_the_uploaded_class_means_and_the_servers_pairs_by_hand():
    # client A: class 0 rows [1,2], [3,4] -> mean [2,3] (count 2); class 1 none; class 2 row [5,6] -> [5,6] (count 1)
    a = hooks().release(0, 0, torch.tensor([[1.0, 2.0], [5.0, 6.0], [3.0, 4.0]]), torch.zeros(3, 3), torch.tensor([0, 2, 0]))
    assert torch.equal(a.means, torch.tensor([[2.0, 3.0], [0.0, 0.0], [5.0, 6.0]])) and a.counts.tolist() == [2, 0, 1]
    # client B holds class 1 only: mean of [0,1] and [2,1] = [1,1]
    b = hooks().release(1, 0, torch.tensor([[0.0, 1.0], [2.0, 1.0]]), torch.zeros(2, 3), torch.tensor([1, 1]))
    x, y = header_pairs([a, b])  # client by client, classes ascending, one pair per class held (counts do not weigh)
    assert torch.equal(x, torch.tensor([[2.0, 3.0], [5.0, 6.0], [1.0, 1.0]])) and y.tolist() == [0, 2, 1]


def test_one_header_step_by_hand():
    # W = 0, b = 0, 3 classes: p = [1/3, 1/3, 1/3] for both pairs; batch B = 2, lr 0.5
    # pair 1: x = [1,0], y = 0 -> G1 = (p - e0) / 2 = [-1/3, 1/6, 1/6];  pair 2: x = [0,2], y = 2 -> G2 = [1/6, 1/6, -1/3]
    # grad_W[c] = G1[c] x1 + G2[c] x2:  c0 [-1/3, 1/3], c1 [1/6, 1/3], c2 [1/6, -2/3];  grad_b = G1 + G2 = [-1/6, 1/3, -1/6]
    w, b = header_step(torch.zeros(3, 2), torch.zeros(3), torch.tensor([[1.0, 0.0], [0.0, 2.0]]), torch.tensor([0, 2]), 0.5)
    assert torch.allclose(w, torch.tensor([[1 / 6, -1 / 6], [-1 / 12, -1 / 6], [-1 / 12, 1 / 3]]))
    assert torch.allclose(b, torch.tensor([1 / 12, -1 / 6, 1 / 12]))
    # the loss went down: CE at the start is ln 3 for both; after the step pair 1's logits are [1/6+1/12, -1/12-1/6, -1/12+1/12]
    logits = torch.tensor([0.25, -0.25, 0.0])
    assert -torch.log_softmax(logits, 0)[0].item() < math.log(3)


def test_the_server_update_is_one_step_per_class_mean_in_client_order_by_hand():
    # batch 1 (the authors' code): pair 1 alone first: G = p - e0 = [-2/3, 1/3, 1/3], x = [1,0], lr 0.5
    # -> W1 = -0.5 * G^T x = [[1/3, 0], [-1/6, 0], [-1/6, 0]], b1 = -0.5 G = [1/3, -1/6, -1/6]
    # pair 2 (x = [0,2], y = 2) then sees logits W1 x + b1 = b1 (x's only entry meets W1's zero column):
    # p = softmax([1/3, -1/6, -1/6]) = [e^{1/2}, 1, 1] / (e^{1/2} + 2)
    e = math.exp(0.5)
    p = torch.tensor([e, 1.0, 1.0]) / (e + 2)
    g = p - torch.tensor([0.0, 0.0, 1.0])
    w2 = torch.tensor([[1 / 3, 0.0], [-1 / 6, 0.0], [-1 / 6, 0.0]]) - 0.5 * g.unsqueeze(1) * torch.tensor([[0.0, 2.0]])
    b2 = torch.tensor([1 / 3, -1 / 6, -1 / 6]) - 0.5 * g
    a = ClassRows(torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]), torch.tensor([4, 0, 0]))
    c = ClassRows(torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 2.0]]), torch.tensor([0, 0, 7]))
    before = Knowledge(torch.zeros(3, 2), torch.zeros(3, dtype=torch.bool), {}, {"weight": torch.zeros(3, 2), "bias": torch.zeros(3)})
    after = hooks(server_lr=0.5).update(before, [a, c], round=0)
    assert torch.allclose(after.params["weight"], w2) and torch.allclose(after.params["bias"], b2)
    assert not after.mask.any()  # FedGH keeps no global prototypes: nothing but the header goes down
    # the other order (c first) is another header: the order is part of the method
    swapped = hooks(server_lr=0.5).update(before, [c, a], round=0)
    assert not torch.allclose(swapped.params["weight"], w2)


def test_the_update_is_torchs_sgd_on_cross_entropy_over_epochs_and_batches():
    """An independent recomputation: nn.Linear, F.cross_entropy and torch.optim.SGD, 2 epochs of batches of 2, in order."""
    gen = torch.Generator().manual_seed(0)
    rows = [ClassRows(torch.randn(3, 4, generator=gen), torch.tensor([2, 0, 5])), ClassRows(torch.randn(3, 4, generator=gen), torch.tensor([1, 3, 3]))]
    w0, b0 = torch.randn(3, 4, generator=gen), torch.randn(3, generator=gen)
    before = Knowledge(torch.zeros(3, 4), torch.zeros(3, dtype=torch.bool), {}, {"weight": w0, "bias": b0})
    after = hooks(server_lr=0.3, server_epochs=2, server_batch_size=2).update(before, rows, round=4)
    head = nn.Linear(4, 3)
    head.load_state_dict({"weight": w0, "bias": b0})
    opt = torch.optim.SGD(head.parameters(), lr=0.3)
    x = torch.stack([rows[0].means[0], rows[0].means[2], rows[1].means[0], rows[1].means[1], rows[1].means[2]])
    y = torch.tensor([0, 2, 0, 1, 2])
    for _ in range(2):
        for i in range(0, 5, 2):
            opt.zero_grad()
            nn.functional.cross_entropy(head(x[i : i + 2]), y[i : i + 2]).backward()
            opt.step()
    assert_close({"weight": head.weight.detach(), "bias": head.bias.detach()}, after.params)
    # shuffled: a seeded order, the same for the same (seed, round), another for another round
    shuffled = [hooks(server_lr=0.3, server_batch_size=2, shuffle=True).update(before, rows, round=r).params["weight"] for r in (4, 4, 5)]
    assert torch.equal(shuffled[0], shuffled[1]) and not torch.equal(shuffled[0], shuffled[2])


def test_a_client_starts_from_its_own_body_and_the_header():
    head = Head("fc.weight", "fc.bias")
    own = {"body.weight": torch.ones(2, 2), "fc.weight": torch.zeros(3, 2), "fc.bias": torch.zeros(3)}
    header = {"weight": torch.full((3, 2), 7.0), "bias": torch.full((3,), 8.0)}
    start = hooks().start(own, Knowledge(torch.zeros(3, 2), torch.zeros(3, dtype=torch.bool), {}, header), head)
    assert torch.equal(start["body.weight"], own["body.weight"]) and torch.equal(start["fc.weight"], header["weight"])
    assert torch.equal(start["fc.bias"], header["bias"]) and torch.equal(own["fc.weight"], torch.zeros(3, 2))  # its own left as it was


# ---------------------------------------------------------------- one round, replayed


def tiny(**over: Any) -> Any:
    return load_config(None, {**BASE, "federation.rounds": 1, **over}).with_overrides({"model": {"name": "mlp"}, "prototypes": GH})


def last_linear(model: nn.Module) -> nn.Linear:
    return [m for m in model.modules() if isinstance(m, nn.Linear)][-1]


def test_one_round_replayed_header_bytes_and_global_accuracy():
    cfg = tiny()
    exp = build_experiment(cfg)
    protocol = build_protocol(exp)
    ex = SequentialExecutor(exp.model, exp.spec, protocol.client)
    (rec,) = list(run_rounds(protocol, ex, seed=cfg.seed, num_clients=6, clients_per_round=3, rounds=1))
    model, ev = exp.model, protocol.evaluation
    fc = last_linear(model)
    names = [n for n, m in model.named_modules() if m is fc][0]
    w_key, b_key = f"{names}.weight", f"{names}.bias"

    # the server's header, recomputed: torch SGD at lr 0.01, one step per (class mean, class), client by client
    header = nn.Linear(fc.in_features, fc.out_features)
    header.load_state_dict({"weight": exp.initial_state[w_key], "bias": exp.initial_state[b_key]})
    opt = torch.optim.SGD(header.parameters(), lr=0.01)
    seen: list[torch.Tensor] = []
    fc.register_forward_pre_hook(lambda _m, inp: seen.append(inp[0]))
    up = 0
    for cid in rec["clients"]:
        state = protocol.clients[cid]
        model.load_state_dict(dict(state))
        model.eval()
        data = ev.client_data(cid)
        seen.clear()
        with torch.no_grad():
            model(data.x)
        feats = seen[0]
        for c in sorted(set(data.y.tolist())):
            opt.zero_grad()
            nn.functional.cross_entropy(header(feats[data.y == c].mean(0, keepdim=True)), torch.tensor([c])).backward()
            opt.step()
            up += fc.in_features * 4 + 8  # one row of floats + its class id and count
    got = protocol.knowledge.params
    assert_close({"weight": header.weight.detach(), "bias": header.bias.detach()}, got)
    assert not torch.equal(got["weight"], exp.initial_state[w_key])  # it moved

    # bytes: class means only up (no model), the header only down (C x (d + 1) floats to each client)
    assert rec["bytes_up"] == up
    assert rec["bytes_down"] == 3 * 4 * fc.out_features * (fc.in_features + 1)
    assert rec["known_classes"] == 0 and rec["global_proto_acc"] is None

    # global_acc: each trained client's own body with the new header, on the test set, averaged
    accs = []
    for cid in sorted(rec["clients"]):
        model.load_state_dict({**dict(protocol.clients[cid]), w_key: got["weight"], b_key: got["bias"]})
        with torch.no_grad():
            accs.append(float((model(ev.x_test).argmax(1) == ev.y_test).double().mean()))
    assert rec["global_acc"] == pytest.approx(sum(accs) / len(accs))

    # next round: the header sent is the server's, and a returning client starts from its own body + that header
    cid = rec["clients"][0]
    (task,) = protocol.configure(1, [cid])
    assert task.downlink.model is None and task.downlink.knowledge.params is protocol.knowledge.params
    job = next(protocol.client.update(task))
    own = protocol.clients[cid]
    assert torch.equal(job.start[w_key], got["weight"]) and torch.equal(job.start[b_key], got["bias"])
    assert all(torch.equal(job.start[k], own[k]) for k in own if k not in (w_key, b_key))
    assert not torch.equal(own[w_key], got["weight"])  # the head it trained is its own, replaced only at the start


def test_the_first_round_starts_every_client_from_the_default_architectures_head():
    cfg = tiny()
    exp = build_experiment(cfg)
    protocol = build_protocol(exp)
    (task,) = protocol.configure(0, [2])
    job = next(protocol.client.update(task))
    assert all(torch.equal(job.start[k], v) for k, v in exp.initial_state.items())


# ---------------------------------------------------------------- end to end


@pytest.mark.slow
def test_fedgh_every_executor_same_records():
    recs = check_every_executor({"model": {"name": "mlp"}, "prototypes": GH})
    assert recs[-1]["local_acc"] is not None and recs[-1]["global_acc"] is not None
    assert recs[-1]["bytes_down"] == 3 * 4 * 10 * (64 + 1)  # the MLP's last layer: 10 x 64 + 10 floats to 3 clients


@pytest.mark.slow
def test_fedgh_every_executor_heterogeneous_models_shuffled_batches():
    recs = check_every_executor({"model": MIXED, "prototypes": {**GH, "shuffle": True, "server_batch_size": 4, "server_epochs": 3}})
    assert recs[-1]["local_acc"] is not None and recs[-1]["global_acc"] is not None


def test_resume_is_bitwise(tmp_path: Path):
    cfg = load_config(None, {**BASE, "federation.rounds": 3}).with_overrides({"model": {"name": "mlp"}, "prototypes": {**GH, "shuffle": True, "server_batch_size": 2}})
    assert resumed_records(cfg, 1, tmp_path) == records({"federation.rounds": 3, "model": {"name": "mlp"}, "prototypes": {**GH, "shuffle": True, "server_batch_size": 2}})


def test_the_server_lr_changes_the_run_and_the_first_round_is_plain_training():
    low = records({"model": {"name": "mlp"}, "prototypes": GH})
    high = records({"model": {"name": "mlp"}, "prototypes": {**GH, "server_lr": 0.5}})
    assert low[0]["train_loss"] == high[0]["train_loss"]  # round 1: every client starts from the initial head
    assert low[1]["train_loss"] != high[1]["train_loss"]


# ---------------------------------------------------------------- options


def test_defaults_are_the_authors_code():
    o = parse_prototypes(GH)
    assert o.options == FedGHOptions(server_lr=0.01, server_epochs=1, server_batch_size=1, shuffle=False) and not o.share_model


@pytest.mark.parametrize("option, value", [("server_lr", 0), ("server_epochs", 0), ("server_batch_size", 0), ("lam", 1.0)])
def test_bad_options_exit_2_with_one_line_naming_the_field(tmp_path, capsys, option, value):
    config = tmp_path / "exp.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\n[prototypes]\nmethod = "fedgh"\n{option} = {value}\n')
    assert main(["run", str(config), "-q", "dataset.name=digits", "federation.num_clients=4", "model.name=mlp"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"chillfl: error: prototypes.{option}:")


def test_a_last_layer_without_a_bias_is_refused_in_one_line():
    with pytest.raises(ConfigError) as err:
        hooks().loss(Head("fc.weight", None))
    assert err.value.field == "model.name" and "bias" in err.value.message


def test_a_frozen_header_is_refused_in_one_line_instead_of_trained_by_the_server():
    # A model whose last layer is frozen (requires_grad = False, LocalSpec.frozen): the clients never move it, but
    # FedGH's server trained it on the class means all the same (before the fix its header moved by ~0.025 in round 1)
    module = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))
    module[3].requires_grad_(False)
    cfg = load_config(None, {**BASE, "federation.rounds": 1}).with_overrides({"model": {"name": "custom"}, "prototypes": GH})
    with head_notes() as notes, pytest.raises(ConfigError) as err:
        build_experiment(cfg, model=module)
    assert len(notes) == 1 and err.value.field == "model.name" and "frozen" in err.value.message and "'3'" in err.value.message
    assert hooks().loss(Head("fc.weight", "fc.bias")) is not None  # a trainable header with a bias is taken
    with pytest.raises(ConfigError):
        hooks().loss(Head("fc.weight", "fc.bias", frozen=True))

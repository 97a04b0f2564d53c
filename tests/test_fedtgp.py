"""FedTGP (Zhang et al., AAAI 2024): the adaptive margin, the contrastive loss, the server step by hand; end to end; resume."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.executors.sequential import SequentialExecutor
from chillfl.experiment import build_experiment, build_protocol
from chillfl.prototypes.methods.fedtgp import (
    EMBEDDING,
    HIDDEN_B,
    HIDDEN_W,
    OUT_B,
    OUT_W,
    EuclideanPrototypeLoss,
    FedTGP,
    FedTGPOptions,
    adaptive_margin,
    contrastive_loss,
    euclidean_distance,
    generate,
    server_pairs,
    server_step,
)
from chillfl.prototypes.spec import ClassRows, Knowledge
from chillfl.settings.prototypes import parse_prototypes

from float_paths import assert_close
from kd_helpers import BASE, MIXED, check_every_executor, records
from methods_e2e import resumed_records

TGP = {"method": "fedtgp", "server_epochs": 3}
"""A few server epochs: the tests' runs stay short (the default is 100)."""


def hooks(num_classes: int = 3, **options: Any) -> FedTGP:
    return FedTGP(FedTGPOptions(**options), num_classes=num_classes, seed=0)


def rows(means: list[list[float]], counts: list[int]) -> ClassRows:
    return ClassRows(torch.tensor(means), torch.tensor(counts))


# ---------------------------------------------------------------- the formulas, by hand

# client A holds class 0 at [0,0] (5 samples) and class 1 at [3,0]; client B holds class 0 at [2,0] (1 sample) and class 2 at [1,4]
A = rows([[0.0, 0.0], [3.0, 0.0], [0.0, 0.0]], [5, 2, 0])
B = rows([[2.0, 0.0], [0.0, 0.0], [1.0, 4.0]], [1, 0, 3])


def test_the_adaptive_margin_by_hand():
    # centres, a plain mean over the clients holding the class (counts do not weigh): Q0 = ([0,0] + [2,0]) / 2 = [1,0],
    # Q1 = [3,0], Q2 = [1,4].  ||Q0-Q1|| = 2, ||Q0-Q2|| = 4, ||Q1-Q2|| = sqrt(2^2 + 4^2) = sqrt(20) ~ 4.472
    # nearest other centre: class 0 -> 2, class 1 -> 2, class 2 -> 4; the widest of these: 4
    assert adaptive_margin([A, B], tau=100.0) == pytest.approx(4.0)
    assert adaptive_margin([A, B], tau=3.0) == 3.0  # capped at tau: min(4, 3)
    assert adaptive_margin([A, B], tau=0.0) == 0.0  # no margin
    # "farthest": the widest distance between any two centres, sqrt(20)
    assert adaptive_margin([A, B], tau=100.0, margin="farthest") == pytest.approx(math.sqrt(20.0))
    # one class held in the round: no distance between centres, the margin is tau
    assert adaptive_margin([rows([[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]], [4, 0, 0])], tau=7.0) == 7.0


def test_the_margin_is_reported_as_a_round_metric():
    # the round's delta as test_the_adaptive_margin_by_hand worked it out: 4 (tau 100), 3 (capped at tau 3); a round
    # where no client holds a class has no server step and reports nothing
    k = Knowledge(torch.zeros(3, 2), torch.ones(3, dtype=torch.bool))
    assert hooks(tau=100.0).round_metrics(k, [A, B], 0) == {"margin": pytest.approx(4.0)}
    assert hooks(tau=3.0).round_metrics(k, [A, B], 0) == {"margin": 3.0}
    assert hooks().round_metrics(k, [rows([[0.0, 0.0]] * 3, [0, 0, 0])], 0) == {}


def test_the_contrastive_loss_by_hand():
    generated = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])  # the TGP of classes 0 and 1
    # P = [0,0] of class 0: distances [1, 1]; margin 1 -> logits -[1 + 1, 1] = [-2, -1]
    # CE = -log(e^-2 / (e^-2 + e^-1)) = log(1 + e^(-1 + 2)) = log(1 + e) ~ 1.3133
    one = contrastive_loss(torch.tensor([[0.0, 0.0]]), torch.tensor([0]), generated, 1.0)
    assert one.item() == pytest.approx(math.log(1 + math.e), rel=1e-5)
    # without margin the two classes are as near: log 2
    assert contrastive_loss(torch.tensor([[0.0, 0.0]]), torch.tensor([0]), generated, 0.0).item() == pytest.approx(math.log(2), rel=1e-5)
    # a batch: add P = [2,0] of class 1: distances [1, 3], logits -[1, 3 + 1] = [-1, -4] -> CE = log(1 + e^(4 - 1)) = log(1 + e^3)
    # the batch's loss is the mean: (log(1 + e) + log(1 + e^3)) / 2
    two = contrastive_loss(torch.tensor([[0.0, 0.0], [2.0, 0.0]]), torch.tensor([0, 1]), generated, 1.0)
    assert two.item() == pytest.approx((math.log(1 + math.e) + math.log(1 + math.e**3)) / 2, rel=1e-5)


def test_the_generator_by_hand():
    # e_c one-hot, W1 = I, b1 = [0, -5]: h_0 = relu([1, -5]) = [1, 0], h_1 = relu([0, -4]) = [0, 0]
    # W2 = [[2, 0], [0, 3]], b2 = [1, 1]: Phat_0 = [2 + 1, 0 + 1] = [3, 1], Phat_1 = b2 = [1, 1]
    g = {EMBEDDING: torch.eye(2), HIDDEN_W: torch.eye(2), HIDDEN_B: torch.tensor([0.0, -5.0]), OUT_W: torch.tensor([[2.0, 0.0], [0.0, 3.0]]), OUT_B: torch.ones(2)}
    assert torch.equal(generate(g), torch.tensor([[3.0, 1.0], [1.0, 1.0]]))


def test_one_server_step_by_hand():
    # e_c one-hot, W1 = I, b1 = 0 -> h_0 = [1, 0], h_1 = [0, 1]; W2 = 0, b2 = 0 -> Phat_0 = Phat_1 = [0, 0]
    # one pair: P = [3, 4] of class 0; ||P - Phat_c|| = 5 for both; margin ln 3 -> logits [-(5 + ln 3), -5]
    # p = softmax = [1/3, 1] / (4/3) = [1/4, 3/4]; loss = -log(1/4) = log 4
    # dL/dPhat_c = (p_c - [c = 0]) * (P - Phat_c) / ||P - Phat_c|| ... with the sign of -dist: (p_c - [c = 0]) * [0.6, 0.8]
    #   class 0: (1/4 - 1) [0.6, 0.8] = [-0.45, -0.6];  class 1: 3/4 [0.6, 0.8] = [0.45, 0.6]
    # Phat_c = W2 h_c + b2: grad W2 = sum_c dL/dPhat_c h_c^T = [[-0.45, 0.45], [-0.6, 0.6]]; grad b2 = sum = 0;
    # W1, b1 and the embeddings get W2^T (...) = 0. SGD at lr 0.1: W2 = -0.1 grad = [[0.045, -0.045], [0.06, -0.06]]
    g = {EMBEDDING: torch.eye(2), HIDDEN_W: torch.eye(2), HIDDEN_B: torch.zeros(2), OUT_W: torch.zeros(2, 2), OUT_B: torch.zeros(2)}
    p, y, delta = torch.tensor([[3.0, 4.0]]), torch.tensor([0]), math.log(3)
    assert contrastive_loss(p, y, generate(g), delta).item() == pytest.approx(math.log(4), rel=1e-5)
    after = server_step(g, p, y, delta, 0.1)
    assert torch.allclose(after[OUT_W], torch.tensor([[0.045, -0.045], [0.06, -0.06]]), atol=1e-6)
    for name in (EMBEDDING, HIDDEN_W, HIDDEN_B, OUT_B):
        assert torch.allclose(after[name], g[name], atol=1e-6), name
    # Phat_0 = 0.015 [3, 4] moved towards P, Phat_1 = -0.015 [3, 4] away: distances 5 (1 -+ 0.015) = 4.925, 5.075
    # loss = log(1 + e^((4.925 + ln 3) - 5.075)) = log(1 + 3 e^-0.15) < log 4
    assert contrastive_loss(p, y, generate(after), delta).item() == pytest.approx(math.log(1 + 3 * math.exp(-0.15)), rel=1e-5)
    assert torch.equal(g[OUT_W], torch.zeros(2, 2))  # the step returns new tensors, the old ones untouched


def test_the_servers_pairs_one_per_class_held_client_by_client():
    x, y = server_pairs([A, B])
    assert torch.equal(x, torch.tensor([[0.0, 0.0], [3.0, 0.0], [2.0, 0.0], [1.0, 4.0]])) and y.tolist() == [0, 1, 0, 2]


def test_the_update_is_torchs_sgd_on_an_embedding_and_an_mlp():
    """An independent recomputation: nn.Embedding, nn.Linear, torch.optim.SGD on the contrastive loss, 2 epochs of batches of 3, in order."""
    h = hooks(server_lr=0.2, server_epochs=2, server_batch_size=3, shuffle=False, tau=1.5, embed_dim=4, hidden_dim=5)
    before = Knowledge(torch.zeros(3, 2), torch.zeros(3, dtype=torch.bool))
    after = h.update(before, [A, B], round=0)
    g0 = h.generator(2)  # what update started from: the run's seed alone
    emb, hidden, out = nn.Embedding(3, 4), nn.Linear(4, 5), nn.Linear(5, 2)
    emb.weight.data, hidden.weight.data, hidden.bias.data = g0[EMBEDDING].clone(), g0[HIDDEN_W].clone(), g0[HIDDEN_B].clone()
    out.weight.data, out.bias.data = g0[OUT_W].clone(), g0[OUT_B].clone()
    opt = torch.optim.SGD([*emb.parameters(), *hidden.parameters(), *out.parameters()], lr=0.2)
    x, y = server_pairs([A, B])
    delta = min(4.0, 1.5)  # the margin above, capped at tau = 1.5
    for _ in range(2):
        for i in range(0, 4, 3):
            opt.zero_grad()
            tgp = out(torch.relu(hidden(emb(torch.arange(3)))))
            dist = torch.cdist(x[i : i + 3], tgp)
            nn.functional.cross_entropy(-(dist + delta * nn.functional.one_hot(y[i : i + 3], 3)), y[i : i + 3]).backward()
            opt.step()
    assert_close({EMBEDDING: emb.weight, HIDDEN_W: hidden.weight, HIDDEN_B: hidden.bias, OUT_W: out.weight, OUT_B: out.bias}, after.server)
    with torch.no_grad():
        assert_close({"protos": out(torch.relu(hidden(emb(torch.arange(3)))))}, {"protos": after.protos})
    assert after.mask.tolist() == [True, True, True] and after.params == {} and after.extra == {}
    # the next round continues from the generator the server kept
    again = h.update(after, [A], round=1)
    assert not torch.equal(again.server[OUT_W], after.server[OUT_W])


def test_the_generator_and_the_order_are_seeded_by_the_run_not_the_global_rng():
    state = torch.get_rng_state()
    runs = [hooks(server_epochs=2, server_batch_size=1).update(Knowledge(torch.zeros(3, 2), torch.zeros(3, dtype=torch.bool)), [A, B], round=r) for r in (4, 4, 5)]
    assert torch.equal(torch.get_rng_state(), state)  # nothing drawn from, nor seeded into, the global generator
    assert torch.equal(runs[0].protos, runs[1].protos) and not torch.equal(runs[0].protos, runs[2].protos)  # the order: (seed, round, epoch)
    other = FedTGP(FedTGPOptions(), num_classes=3, seed=1).generator(2)
    assert not torch.equal(other[EMBEDDING], hooks().generator(2)[EMBEDDING])  # the start: the run's seed
    assert hooks(embed_dim=4, hidden_dim=6).generator(2)[HIDDEN_W].shape == (6, 4)  # the widths: d unless set


def test_which_prototypes_go_down():
    before = Knowledge(torch.zeros(3, 2), torch.tensor([False, False, True]))
    only_a = [A]  # classes 0 and 1 held this round; class 2 known from an earlier round
    assert hooks(server_epochs=1, send="all").update(before, only_a, 0).mask.tolist() == [True, True, True]
    assert hooks(server_epochs=1, send="seen").update(before, only_a, 0).mask.tolist() == [True, True, True]
    fresh = Knowledge(torch.zeros(3, 2), torch.zeros(3, dtype=torch.bool))
    assert hooks(server_epochs=1, send="seen").update(fresh, only_a, 0).mask.tolist() == [True, True, False]
    # a round whose clients hold no class: nothing trained, nothing new known, the generator kept
    empty = hooks(server_epochs=1).update(fresh, [rows([[0.0, 0.0]] * 3, [0, 0, 0])], 0)
    assert not empty.mask.any() and set(empty.server) == {EMBEDDING, HIDDEN_W, HIDDEN_B, OUT_W, OUT_B}


def test_the_euclidean_client_term_by_hand():
    # sample 0 (class 0): ||[3,4] - [0,0]|| = 5; sample 1 (class 1) has no prototype: 0; mean over n = 2 -> 2.5
    features = torch.tensor([[3.0, 4.0], [1.0, 1.0]], requires_grad=True)
    protos, mask, y = torch.tensor([[0.0, 0.0], [1.0, 1.0]]), torch.tensor([True, False]), torch.tensor([0, 1])
    assert euclidean_distance(features, y, protos, mask).item() == pytest.approx(2.5, rel=1e-6)
    # with the CE of zero logits (ln 2) and lambda 2: ln 2 + 5
    value = EuclideanPrototypeLoss(2.0)(torch.zeros(2, 2), y, 1.0, features=features, params={}, context={"protos": protos, "proto_mask": mask})
    assert value.item() == pytest.approx(math.log(2) + 5.0, rel=1e-5)
    value.backward()
    # d/df_0 of 2 * ||f_0|| / 2 = f_0 / ||f_0|| = [0.6, 0.8]; the masked sample: 0 (not the NaN of ||0||'s gradient)
    assert torch.allclose(features.grad, torch.tensor([[0.6, 0.8], [0.0, 0.0]]))


def test_the_generator_starts_as_torchs_embedding_and_linear_initialisations():
    # embedding N(0, 1); each Linear's weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in its input width:
    # embed_dim 4 -> the hidden layer's bound 1/2; hidden_dim 16 -> the output layer's 1/4; drawn in that order from
    # the stream seeded by the run's seed alone
    from chillfl.seeds import derive_seed

    g = hooks(embed_dim=4, hidden_dim=16).generator(2)
    gen = torch.Generator().manual_seed(derive_seed(0, "fedtgp-generator"))
    expected = {EMBEDDING: torch.randn((3, 4), generator=gen)}
    expected[HIDDEN_W] = (torch.rand((16, 4), generator=gen) * 2 - 1) * 0.5
    expected[HIDDEN_B] = (torch.rand((16,), generator=gen) * 2 - 1) * 0.5
    expected[OUT_W] = (torch.rand((2, 16), generator=gen) * 2 - 1) * 0.25
    expected[OUT_B] = (torch.rand((2,), generator=gen) * 2 - 1) * 0.25
    for name, value in expected.items():
        assert torch.equal(g[name], value), name


def test_the_margin_option_reaches_the_servers_training():
    # the round's nearest-centre margin is 4 and the farthest sqrt(20) = 4.472 (test_the_adaptive_margin_by_hand):
    # "nearest" at tau 100 trains as "farthest" capped at tau 4 (delta 4 both), not as "farthest" at tau 100
    fresh = Knowledge(torch.zeros(3, 2), torch.zeros(3, dtype=torch.bool))

    def protos(**options: Any) -> torch.Tensor:
        return hooks(server_epochs=1, shuffle=False, **options).update(fresh, [A, B], 0).protos

    assert torch.equal(protos(tau=100.0), protos(tau=4.0, margin="farthest"))
    assert not torch.equal(protos(tau=100.0), protos(tau=100.0, margin="farthest"))


def test_each_server_epoch_draws_its_own_order():
    # 2 epochs of the 4 pairs in batches of 1, epoch e in the order randperm(4) seeded by (seed, round, e)
    from chillfl.seeds import derive_seed

    h = hooks(server_epochs=2, server_batch_size=1, tau=100.0)
    after = h.update(Knowledge(torch.zeros(3, 2), torch.zeros(3, dtype=torch.bool)), [A, B], round=3)
    g = h.generator(2)
    x, y = server_pairs([A, B])
    for epoch in range(2):
        for i in torch.randperm(4, generator=torch.Generator().manual_seed(derive_seed(0, "fedtgp-pairs", 3, epoch))).tolist():
            g = server_step(g, x[i : i + 1], y[i : i + 1], 4.0, 0.01)
    assert all(torch.equal(after.server[k], g[k]) for k in g)


def test_send_all_marks_every_class_even_those_never_uploaded():
    # no class known before, clients hold 0 and 1: "all" sends all three TGP, "seen" the two
    fresh = Knowledge(torch.zeros(3, 2), torch.zeros(3, dtype=torch.bool))
    assert hooks(server_epochs=1, send="all").update(fresh, [A], 0).mask.tolist() == [True, True, True]


def test_the_euclidean_term_leaves_out_a_sample_whose_class_has_no_prototype():
    # sample 0: ||[3,4] - [0,0]|| = 5; sample 1 (class 1, masked) sits 5 from the stored row [4,5] but adds 0: (5 + 0) / 2
    features = torch.tensor([[3.0, 4.0], [1.0, 1.0]])
    protos, mask, y = torch.tensor([[0.0, 0.0], [4.0, 5.0]]), torch.tensor([True, False]), torch.tensor([0, 1])
    assert euclidean_distance(features, y, protos, mask).item() == pytest.approx(2.5, rel=1e-6)


def test_the_mse_client_term_is_weighted_by_lam():
    # CE of zero logits ln 2 + lam * MSE([3,4], [0,0]) = ln 2 + 2 * (9 + 16) / 2 = ln 2 + 25
    loss = hooks(lam=2.0).loss(None)  # type: ignore[arg-type]
    context = {"protos": torch.tensor([[0.0, 0.0], [1.0, 1.0]]), "proto_mask": torch.tensor([True, True])}
    value = loss(torch.zeros(1, 2), torch.tensor([0]), 1.0, features=torch.tensor([[3.0, 4.0]]), params={}, context=context)
    assert value.item() == pytest.approx(math.log(2) + 25.0, rel=1e-6)


# ---------------------------------------------------------------- the protocol


def tiny(**prototypes: Any) -> Any:
    cfg = load_config(None, {**BASE, "federation.rounds": 1})
    return cfg.with_overrides({"model": {"name": "mlp"}, "prototypes": {**TGP, **prototypes}})


def test_the_generator_stays_on_the_server_and_round_one_is_plain_training():
    exp = build_experiment(tiny())
    protocol = build_protocol(exp)
    assert protocol.knowledge.server == {} and not protocol.knowledge.mask.any()  # before round 1: nothing known
    tasks = protocol.configure(0, [0, 1, 2])
    protocol.server_update(0, tasks, SequentialExecutor(exp.model, exp.spec, protocol.client).map(tasks))
    k = protocol.knowledge
    assert set(k.server) == {EMBEDDING, HIDDEN_W, HIDDEN_B, OUT_W, OUT_B} and k.server[OUT_W].shape == (64, 64)
    assert torch.equal(k.protos, generate(k.server)) and bool(k.mask.all())
    (task,) = protocol.configure(1, [3])
    down = task.downlink
    assert down.knowledge.server == {} and torch.equal(down.knowledge.protos, k.protos)  # the C prototypes go down, not the generator
    assert down.nbytes() == {"knowledge": 10 * (64 * 4 + 4)}  # 10 classes x (64 floats + class id)
    restored = Knowledge.from_state(k.state_dict())
    assert all(torch.equal(restored.server[n], k.server[n]) for n in k.server)


def test_the_seam_keeps_server_state_out_of_downlinks_and_carries_it_by_default():
    """Knowledge.server: stripped by sent(), carried over by the default update, reserved as a row name."""
    from chillfl.prototypes.spec import PrototypeHooks

    k = Knowledge(torch.zeros(3, 2), torch.zeros(3, dtype=torch.bool), {}, {}, {"w": torch.ones(2)})
    assert k.sent().server == {} and k.sent().protos is k.protos and k.server  # the server's copy keeps it
    plain = Knowledge(torch.zeros(3, 2), torch.zeros(3, dtype=torch.bool))
    assert plain.sent() is plain and "server" not in plain.state_dict()  # other methods' checkpoints unchanged
    carried = PrototypeHooks(None, 3, 0).update(k, [A, B], 0)  # the default server step: combine(), the state kept
    assert PrototypeHooks(None, 3, 0).round_metrics(carried, [A, B], 0) == {}  # no numbers of its own by default
    assert torch.equal(carried.server["w"], torch.ones(2)) and carried.mask.tolist() == [True, True, True]
    with pytest.raises(ValueError):
        ClassRows(torch.zeros(3, 2), torch.zeros(3, dtype=torch.int64), {"server": torch.zeros(3, 1)})


def test_fedtgp_every_executor_same_records():
    recs = check_every_executor({"model": {"name": "mlp"}, "prototypes": TGP})
    assert recs[0]["bytes_down"] == 0 and recs[1]["bytes_down"] == 3 * 10 * (64 * 4 + 4)  # no generator in the downlink
    assert recs[-1]["known_classes"] == 10 and recs[-1]["global_proto_acc"] is not None and recs[-1]["local_acc"] is not None
    assert all(0.0 < r["agg_margin"] <= 100.0 for r in recs)  # every round's adaptive margin, in metrics.jsonl


@pytest.mark.slow
def test_fedtgp_every_executor_heterogeneous_models_euclidean_seen():
    recs = check_every_executor({"model": MIXED, "prototypes": {**TGP, "distance": "euclidean", "send": "seen", "margin": "farthest"}})
    assert recs[-1]["local_acc"] is not None and recs[-1]["global_proto_acc"] is not None


def test_resume_is_bitwise(tmp_path: Path):
    over = {"federation.rounds": 3, "model": {"name": "mlp"}, "prototypes": TGP}
    cfg = load_config(None, {**BASE, "federation.rounds": 3}).with_overrides({"model": {"name": "mlp"}, "prototypes": TGP})
    assert resumed_records(cfg, 2, tmp_path) == records(over)


def test_the_options_change_the_run():
    base = records({"model": {"name": "mlp"}, "prototypes": TGP})
    other = records({"model": {"name": "mlp"}, "prototypes": {**TGP, "tau": 0.0}})
    assert base[0]["train_loss"] == other[0]["train_loss"]  # round 1: no prototypes yet, plain CE
    assert base[1]["train_loss"] != other[1]["train_loss"]  # the margin shaped the prototypes round 2 trains towards


# ---------------------------------------------------------------- options


def test_defaults_are_the_authors():
    o = parse_prototypes({"method": "fedtgp"})
    assert o.options == FedTGPOptions(
        lam=10.0, tau=100.0, server_epochs=100, server_lr=0.01, server_batch_size=10, embed_dim=0, hidden_dim=0, margin="nearest", send="all", distance="mse", shuffle=True
    )
    assert not o.share_model


@pytest.mark.parametrize(
    "option, value",
    [
        ("lam", -1.0),
        ("tau", -0.5),
        ("server_epochs", 0),
        ("server_lr", 0),
        ("server_batch_size", 0),
        ("embed_dim", -1),
        ("hidden_dim", -2),
        ("margin", '"widest"'),
        ("send", '"some"'),
        ("distance", '"l1"'),
        ("kd_weight", 0.1),
    ],
)
def test_bad_options_exit_2_with_one_line_naming_the_field(tmp_path, capsys, option, value):
    config = tmp_path / "exp.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\n[prototypes]\nmethod = "fedtgp"\n{option} = {value}\n')
    assert main(["run", str(config), "-q", "dataset.name=digits", "federation.num_clients=4", "model.name=mlp"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"chillfl: error: prototypes.{option}:")
    assert not (tmp_path / "out").exists()

"""FedGen (Zhu et al., ICML 2021): generator losses and the client term on hand-worked examples, label
weights, deterministic server-side training, executors and resume."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from chillfl.aggregation.base import ClientResult, Trained
from chillfl.aggregation.fedgen import FedGen, FedGenOptions, LabelCounts, label_weights
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.seeds import derive_seed
from chillfl.training.fedgen import FedGenLatentTerm, FedGenTerm, FeatureGenerator, diversity_loss, teacher_loss
from chillfl.training.terms import StepView
from methods_e2e import assert_executors_agree, config, records, resumed_records

SWAP = torch.tensor([[0.0, 1.0], [1.0, 0.0]])


def test_teacher_loss_by_hand() -> None:
    # z_0 = (1, 0) for label 0, z_1 = (0, 1) for label 1; client A's head is the identity, B's swaps the logits.
    # counts: label 0 -> A 3, B 1 (weights 0.75, 0.25); label 1 -> A 0, B 2 (weights 0, 1)
    # CE_A(z_0, 0) = CE_A(z_1, 1) = log(1 + e^-1) = 0.3132617; CE_B(z_0, 0) = CE_B(z_1, 1) = log(1 + e^1) = 1.3132617
    # teacher = mean_i w[y_i, A] CE_A + mean_i w[y_i, B] CE_B = (0.75 * 0.31326 + 0) / 2 + (0.25 * 1.31326 + 1.31326) / 2
    z, y = torch.eye(2), torch.tensor([0, 1])
    table, qualified = label_weights([torch.tensor([3, 0]), torch.tensor([1, 2])])
    torch.testing.assert_close(table, torch.tensor([[0.75, 0.25], [0.0, 1.0]]))
    assert qualified == [0, 1]
    ce_a, ce_b = math.log1p(math.exp(-1.0)), math.log1p(math.exp(1.0))
    expected = (0.75 * ce_a) / 2 + (0.25 * ce_b + 1.0 * ce_b) / 2
    heads = [(torch.eye(2), torch.zeros(2)), (SWAP, None)]
    assert teacher_loss(z, y, heads, table).item() == pytest.approx(expected, rel=1e-6)


def test_teacher_forms_by_hand() -> None:
    # z_0 = (1, 0) for label 0, z_1 = (0, 2) for label 1; heads A = identity (bias 0), B = swap; weights as above:
    # label 0 -> (A 0.75, B 0.25), label 1 -> (A 0, B 1).
    # CE_A(z_0, 0) = log(1 + e^-1) = 0.3132617, CE_A(z_1, 1) = log(1 + e^-2) = 0.1269280
    # CE_B(z_0, 0) = log(1 + e^1) = 1.3132617, CE_B(z_1, 1) = log(1 + e^2) = 2.1269280
    # clients:   (0.75 * 0.3132617 + 0) / 2 + (0.25 * 1.3132617 + 2.1269280) / 2 = 0.1174731 + 1.2276217 = 1.3450948
    # broadcast: mean w_A = 0.375, mean w_B = 0.625 times each head's mean CE:
    #            0.375 * 0.2200949 + 0.625 * 1.7200949 = 0.0825356 + 1.0750593 = 1.1575948
    # ensemble:  logits_0 = 0.75 (1, 0) + 0.25 (0, 1) = (0.75, 0.25): CE = log(1 + e^-0.5) = 0.4740770
    #            logits_1 = 0 (0, 2) + 1 (2, 0) = (2, 0): CE = log(1 + e^2) = 2.1269280; mean 1.3005025
    z, y = torch.tensor([[1.0, 0.0], [0.0, 2.0]]), torch.tensor([0, 1])
    table, _ = label_weights([torch.tensor([3, 0]), torch.tensor([1, 2])])
    heads = [(torch.eye(2), torch.zeros(2)), (SWAP, None)]
    assert teacher_loss(z, y, heads, table).item() == pytest.approx(1.3450948, abs=1e-6)
    assert teacher_loss(z, y, heads, table, "clients").item() == pytest.approx(1.3450948, abs=1e-6)
    assert teacher_loss(z, y, heads, table, "broadcast").item() == pytest.approx(1.1575948, abs=1e-6)
    assert teacher_loss(z, y, heads, table, "ensemble").item() == pytest.approx(1.3005025, abs=1e-6)


def test_the_teacher_option_reaches_the_generator_training() -> None:
    # the same round with each form trains a different generator; the default is "clients"
    trained = {}
    for form in ("clients", "ensemble"):
        gen = FedGen(FedGenOptions(samples=4, noise_dim=3, hidden=8, generator_steps=3, generator_batch=6, generator_lr=1e-2, teacher=form), "fc", 2, 2, seed=7)
        gen.aggregate({"fc.weight": torch.zeros(2, 2), "fc.bias": torch.zeros(2)}, _results(), 0)
        trained[form] = gen.params
    default = _fedgen(3)
    default.aggregate({"fc.weight": torch.zeros(2, 2), "fc.bias": torch.zeros(2)}, _results(), 0)
    assert all(torch.equal(default.params[k], trained["clients"][k]) for k in default.params)
    assert not all(torch.equal(trained["ensemble"][k], trained["clients"][k]) for k in default.params)


def test_latent_term_by_hand() -> None:
    # beta = 3; head W = I, b = 0; generated class features z_0 = (2, 0), z_1 = (0, 0); a batch of labels (0, 1)
    # whose training logits are (0, 0) and (1, 0).
    # targets (detached): softmax(2, 0) = (0.8807971, 0.1192029), softmax(0, 0) = (0.5, 0.5)
    # KL_0 = 0.8807971 log(0.8807971 / 0.5) + 0.1192029 log(0.1192029 / 0.5) = 0.3278133
    # KL_1 = 0.5 log(0.5 / 0.7310586) + 0.5 log(0.5 / 0.2689414) = 0.1201145
    # term = 3 * (0.3278133 + 0.1201145) / 2 = 0.6718917
    # d/dlogits = 3 (softmax(logits) - target) / 2: sample 0 -> 1.5 (0.5 - 0.8807971, 0.5 - 0.1192029) = (-0.5711956, 0.5711956)
    term = FedGenLatentTerm("fc")
    assert term.per_batch and set(term.reads) == {"fedgen_class_z", "fedgen_beta"}
    params = {"fc.weight": torch.eye(2, requires_grad=True), "fc.bias": torch.zeros(2, requires_grad=True)}
    logits = torch.tensor([[0.0, 0.0], [1.0, 0.0]], requires_grad=True)
    step = StepView(torch.nn.Identity(), torch.zeros(2, 2), torch.tensor([0, 1]), torch.zeros(2, 2), logits, torch.zeros(()), {})
    ctx = {"fedgen_class_z": torch.tensor([[2.0, 0.0], [0.0, 0.0]]), "fedgen_beta": 3.0}
    value = term(params, ctx, step)
    assert value.item() == pytest.approx(0.6718917, abs=1e-6)
    g_logits, g_w, g_b = torch.autograd.grad(value, [logits, params["fc.weight"], params["fc.bias"]], allow_unused=True)
    torch.testing.assert_close(g_logits[0], torch.tensor([-0.5711956, 0.5711956]), atol=1e-6, rtol=0)
    assert g_w is None and g_b is None  # the target is detached: the head is not trained towards it


def test_beta_sends_one_generated_feature_per_class_and_leaves_the_samples_alone() -> None:
    state = {"fc.weight": torch.zeros(2, 2), "fc.bias": torch.zeros(2)}
    sent = {}
    for beta in (0.0, 10.0):
        gen = FedGen(FedGenOptions(samples=4, noise_dim=3, hidden=8, generator_steps=2, generator_batch=6, beta=beta), "fc", 2, 2, seed=7)
        assert gen.downlink(0, 0, state).context.get("fedgen_beta", 0.0) == 0.0  # round 0: no generator, no term
        gen.aggregate(state, _results(), 0)
        sent[beta] = gen.downlink(1, 2, state).context
    assert "fedgen_class_z" not in sent[0.0] and "fedgen_beta" not in sent[0.0]  # beta = 0: the wire is as before
    assert sent[10.0]["fedgen_class_z"].shape == (2, 2)
    assert sent[10.0]["fedgen_beta"] == pytest.approx(10 * 0.98**2)  # the official decay, as alpha's
    assert torch.equal(sent[0.0]["fedgen_z"], sent[10.0]["fedgen_z"]) and torch.equal(sent[0.0]["fedgen_y"], sent[10.0]["fedgen_y"])


def test_label_weights_qualify_labels_held_more_than_once() -> None:
    # label 2: nobody; label 1: at most one sample per client -> not qualified (official MIN_SAMPLES_PER_LABEL = 1)
    table, qualified = label_weights([torch.tensor([4, 1, 0]), torch.tensor([0, 1, 0])])
    torch.testing.assert_close(table, torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.0, 0.0]]))
    assert qualified == [0]


def test_diversity_loss_by_hand() -> None:
    # eps = (0), (1): squared noise distances [[0, 1], [1, 0]]; z = (1, 0), (0, 1): mean |z_i - z_j| = [[0, 1], [1, 0]]
    # mean of the products = (0 + 1 + 1 + 0) / 4 = 0.5 -> exp(-0.5)
    assert diversity_loss(torch.tensor([[0.0], [1.0]]), torch.eye(2)).item() == pytest.approx(math.exp(-0.5), rel=1e-6)


def test_client_term_by_hand() -> None:
    # weight 10, one generated feature (1, 0) of label 0 through the identity head: 10 * log(1 + e^-1)
    term = FedGenTerm("fc")
    params = {"fc.weight": torch.eye(2, requires_grad=True), "fc.bias": torch.zeros(2, requires_grad=True)}
    ctx = {"fedgen_z": torch.tensor([[1.0, 0.0], [0.0, 1.0]]), "fedgen_y": torch.tensor([0, 0]), "fedgen_weight": 10.0}
    # second sample: logits (0, 1), label 0: log(1 + e^1); mean of the two
    value = term(params, ctx)
    assert value.item() == pytest.approx(10 * (math.log1p(math.exp(-1)) + math.log1p(math.exp(1))) / 2, rel=1e-6)
    (g,) = torch.autograd.grad(value, [params["fc.weight"]])
    assert g.abs().sum() > 0  # it trains the head


def _fedgen(steps: int = 5) -> FedGen:
    return FedGen(FedGenOptions(samples=4, noise_dim=3, hidden=8, generator_steps=steps, generator_batch=6, generator_lr=1e-2), "fc", 2, 2, seed=7)


def _results() -> list[ClientResult]:
    a = ClientResult(0, {"fc.weight": torch.eye(2), "fc.bias": torch.zeros(2)}, 3, 1, 0.1, 1.0, 0.5, {"label_counts": torch.tensor([3, 0])})
    b = ClientResult(1, {"fc.weight": SWAP, "fc.bias": torch.zeros(2)}, 3, 1, 0.1, 1.0, 0.5, {"label_counts": torch.tensor([1, 2])})
    return [a, b]


def test_generator_training_lowers_the_loss_and_is_deterministic() -> None:
    gen = _fedgen(0)
    first = gen.downlink(0, 0, {"fc.weight": torch.zeros(2, 2)}).context
    assert first["fedgen_weight"] == 0.0  # round 0: no generator yet
    g1, g2 = _fedgen(40), _fedgen(40)
    g1.aggregate({"fc.weight": torch.zeros(2, 2), "fc.bias": torch.zeros(2)}, _results(), 0)
    g2.aggregate({"fc.weight": torch.zeros(2, 2), "fc.bias": torch.zeros(2)}, _results(), 0)
    for k in g1.params:
        assert torch.equal(g1.params[k], g2.params[k])
    # the trained generator's features fool the weighted teacher better than the initial generator's
    y, noise = torch.tensor([0, 1, 0, 1, 0, 1]), torch.rand(6, 3, generator=torch.Generator().manual_seed(0))
    table, _ = label_weights([torch.tensor([3, 0]), torch.tensor([1, 2])])
    heads = [(torch.eye(2), torch.zeros(2)), (SWAP, torch.zeros(2))]
    before = teacher_loss(_fedgen()._generate(y, noise, _fedgen().params), y, heads, table)
    after = teacher_loss(g1._generate(y, noise, g1.params), y, heads, table)
    assert after < before
    ctx = g1.downlink(1, 1, {"fc.weight": torch.zeros(2, 2)}).context
    assert ctx["fedgen_weight"] == pytest.approx(10 * 0.98)
    assert ctx["fedgen_z"].shape == (4, 2) and set(ctx["fedgen_y"].tolist()) <= {0, 1}
    assert torch.equal(ctx["fedgen_z"], g2.downlink(1, 1, {"fc.weight": torch.zeros(2, 2)}).context["fedgen_z"])


def _adam_fedgen(weights: dict[str, torch.Tensor], lr: float, weight_decay: float) -> FedGen:
    """A FedGen whose generator is ``weights`` (float64: the comparisons below hold to rounding), no step taken yet."""
    gen = FedGen(FedGenOptions(samples=4, noise_dim=3, hidden=8, generator_lr=lr, weight_decay=weight_decay), "fc", 2, 2, seed=7)
    gen.params = {k: v.clone() for k, v in weights.items()}
    return gen


def test_the_generators_adam_step_by_hand() -> None:
    # w = 1, g = 0.2, weight decay 0.5, lr 0.1: g' = g + 0.5 w = 0.7
    # step 1: m = 0.1 * 0.7 = 0.07, v = 0.001 * 0.49; m^ = 0.07 / 0.1 = 0.7, v^ = 0.00049 / 0.001 = 0.49
    #   w = 1 - 0.1 * 0.7 / (0.7 + 1e-8)
    gen = _adam_fedgen({"w": torch.tensor([1.0], dtype=torch.float64)}, lr=0.1, weight_decay=0.5)
    gen._adam_step({"w": torch.tensor([0.2], dtype=torch.float64)})
    w1 = 1 - 0.1 * 0.7 / (0.7 + 1e-8)
    assert float(gen.params["w"]) == pytest.approx(w1, rel=1e-12)
    # step 2: g = -0.4, g' = -0.4 + 0.5 w1; m = 0.9 * 0.07 + 0.1 g', v = 0.999 * 0.00049 + 0.001 g'^2
    #   m^ = m / (1 - 0.9^2), v^ = v / (1 - 0.999^2)
    gen._adam_step({"w": torch.tensor([-0.4], dtype=torch.float64)})
    g2 = -0.4 + 0.5 * w1
    m, v = 0.9 * 0.07 + 0.1 * g2, 0.999 * 0.00049 + 0.001 * g2 * g2
    w2 = w1 - 0.1 * (m / (1 - 0.9**2)) / (math.sqrt(v / (1 - 0.999**2)) + 1e-8)
    assert gen.steps == 2 and float(gen.params["w"]) == pytest.approx(w2, rel=1e-12)


def test_the_generators_adam_steps_are_torch_adams_with_l2_weight_decay() -> None:
    """Three steps, the learning rate changed before the third (it decays between rounds; the moments and the step
    count carry on), against torch.optim.Adam(weight_decay=wd) on the same gradients."""
    g = torch.Generator().manual_seed(3)
    weights = {"a": torch.randn(3, 2, generator=g, dtype=torch.float64), "b": torch.randn(4, generator=g, dtype=torch.float64)}
    grads = [{k: 0.3 * torch.randn(v.shape, generator=g, dtype=torch.float64) for k, v in weights.items()} for _ in range(3)]
    gen = _adam_fedgen(weights, lr=0.05, weight_decay=0.3)
    leaves = {k: torch.nn.Parameter(v.clone()) for k, v in weights.items()}
    adam = torch.optim.Adam(list(leaves.values()), lr=0.05, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.3)
    for step, grad in enumerate(grads):
        if step == 2:
            gen.lr = adam.param_groups[0]["lr"] = 0.05 * 0.98
        gen._adam_step(grad)
        for k, leaf in leaves.items():
            leaf.grad = grad[k].clone()
        adam.step()
        for k, leaf in leaves.items():
            torch.testing.assert_close(gen.params[k], leaf.detach(), rtol=1e-6, atol=1e-12, msg=f"step {step + 1}, {k}")
    assert not torch.allclose(gen.params["a"], weights["a"])


def test_generator_state_resumes_bitwise() -> None:
    g1 = _fedgen()
    g1.aggregate({"fc.weight": torch.zeros(2, 2), "fc.bias": torch.zeros(2)}, _results(), 0)
    g2 = _fedgen()
    g2.load_state_dict(g1.state_dict())
    for g in (g1, g2):
        g.aggregate({"fc.weight": torch.zeros(2, 2), "fc.bias": torch.zeros(2)}, _results(), 1)
    for k in g1.params:
        assert torch.equal(g1.params[k], g2.params[k])
    assert g1.round_metrics() == g2.round_metrics()


def test_label_counts_report() -> None:
    y = torch.tensor([2, 0, 2])
    trained = Trained(0, torch.zeros(3, 1), y, {}, {}, {}, 0.1, 1.0, {}, 1)
    state, report = LabelCounts(4).finish(torch.nn.Identity(), {}, trained)
    assert state == {} and report["label_counts"].tolist() == [1, 0, 2, 0]  # type: ignore[union-attr]


def test_generator_shapes() -> None:
    gen = FeatureGenerator(num_classes=3, noise_dim=2, hidden=5, feature_dim=4)
    assert gen(torch.tensor([0, 2]), torch.rand(2, 2)).shape == (2, 4)


FAST = {"algorithm.name": "fedgen", "algorithm.generator_steps": 5, "algorithm.hidden": 32, "algorithm.noise_dim": 8, "model.name": "mlp"}


def test_fedgen_under_every_executor() -> None:
    cfg = config(**FAST)
    seq = assert_executors_agree(cfg)
    assert "agg_generator_loss" in seq[-1]
    fedavg = records(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))
    assert seq[0]["train_loss"] == fedavg[0]["train_loss"]  # no term in round 0
    assert seq[-1]["train_loss"] != fedavg[-1]["train_loss"]


def test_fedgen_resume_is_bitwise(tmp_path: Path) -> None:
    cfg = config(**FAST)
    assert resumed_records(cfg, 2, tmp_path) == records(cfg)


def test_fedgen_with_the_latent_term_under_every_executor() -> None:
    cfg = config(**FAST, **{"algorithm.beta": 10.0})
    seq = assert_executors_agree(cfg)
    assert seq[-1]["train_loss"] != records(config(**FAST))[-1]["train_loss"]  # the term trains


@pytest.mark.parametrize("bad", [{"algorithm.alpha": -1.0}, {"algorithm.beta": -1.0}, {"algorithm.samples": 1}, {"algorithm.lr_decay": 0.0}])
def test_bad_options_name_the_field(bad: dict) -> None:
    with pytest.raises(ConfigError) as info:
        build_experiment(config(**{**FAST, **bad}))
    assert info.value.field.startswith("algorithm.")


@pytest.mark.parametrize("prior,expected", [("qualified", [0.5, 0.5, 0.0]), ("counts", [6 / 9, 3 / 9, 0.0])])
def test_label_prior(prior: str, expected: list[float]) -> None:
    # counts: label 0 -> 4 + 2 = 6, label 1 -> 1 + 2 = 3 (B holds 2: qualified), label 2 -> 1 (nobody holds > 1: not qualified)
    gen = FedGen(FedGenOptions(samples=4, noise_dim=3, hidden=8, generator_steps=1, generator_batch=4, label_prior=prior), "fc", 3, 2, seed=0)
    results = [
        ClientResult(0, {"fc.weight": torch.zeros(3, 2), "fc.bias": torch.zeros(3)}, 6, 1, 0.1, 1.0, 0.5, {"label_counts": torch.tensor([4, 1, 1])}),
        ClientResult(1, {"fc.weight": torch.zeros(3, 2), "fc.bias": torch.zeros(3)}, 4, 1, 0.1, 1.0, 0.5, {"label_counts": torch.tensor([2, 2, 0])}),
    ]
    gen.aggregate({"fc.weight": torch.zeros(3, 2), "fc.bias": torch.zeros(3)}, results, 0)
    torch.testing.assert_close(gen.prior, torch.tensor(expected, dtype=torch.float64))
    assert set(gen.downlink(0, 1, {"fc.weight": torch.zeros(3, 2)}).context["fedgen_y"].tolist()) <= {0, 1}


def test_client_labels_all_draws_every_class_as_the_official_client() -> None:
    # only label 0 qualifies (client 0 holds 3 of it; nobody holds 2 of labels 1, 2): "prior" generates label 0 only;
    # "all" draws uniformly over the 3 classes from the same documented stream (seed, "fedgen-samples", round, client)
    results = [ClientResult(0, {"fc.weight": torch.zeros(3, 2), "fc.bias": torch.zeros(3)}, 5, 1, 0.1, 1.0, 0.5, {"label_counts": torch.tensor([3, 1, 1])})]
    state = {"fc.weight": torch.zeros(3, 2), "fc.bias": torch.zeros(3)}
    drawn = {}
    for labels in ("prior", "all"):
        gen = FedGen(FedGenOptions(samples=64, noise_dim=3, hidden=8, generator_steps=1, generator_batch=4, client_labels=labels), "fc", 3, 2, seed=0)
        gen.aggregate(state, results, 0)
        drawn[labels] = gen.downlink(4, 1, state).context["fedgen_y"]
    assert set(drawn["prior"].tolist()) == {0}
    rng = torch.Generator().manual_seed(derive_seed(0, "fedgen-samples", 1, 4))
    assert torch.equal(drawn["all"], torch.multinomial(torch.ones(3, dtype=torch.float64), 64, replacement=True, generator=rng))
    assert set(drawn["all"].tolist()) == {0, 1, 2}


def test_pa3fed_over_fedgen_gets_both_client_reports() -> None:
    """PA3Fed's client half runs after FedGen's (label counts), so the pair is a valid composition (it was refused
    while PA3Fed's report replaced its base's)."""
    opts = {"generator_steps": 3, "hidden": 16, "noise_dim": 4}
    cfg = config(**{"algorithm": {"name": "pa3fed", "base": "fedgen", "mode": "always", "base_options": opts}, "federation.rounds": 2, "model.name": "mlp"})
    last = records(cfg)[-1]
    assert "agg_generator_loss" in last and math.isfinite(last["agg_generator_loss"])  # FedGen trained on the counts
    assert set(last["agg_alphas"]) == set(last["clients"])  # PA3Fed got every client's alpha


@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_round_0_sends_no_generated_features_only_the_zero_weight(beta: float) -> None:
    """Before the first generator a client gets zeros its term never reads: they cost no bytes; the term's weight (0,
    one float64 scalar: 8 bytes, and beta's too) is what tells it so. From round 1 the features are on the wire."""
    cfg = config(**FAST, **{"algorithm.beta": beta})
    fedgen = records(cfg)
    fedavg = records(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))
    scalars = 2 if beta else 1  # alpha's weight, and beta's with the latent term
    assert fedgen[0]["bytes_down"] - fedavg[0]["bytes_down"] == 8 * scalars * len(fedavg[0]["clients"])
    samples = FedGenOptions().samples
    assert fedgen[1]["bytes_down"] - fedavg[1]["bytes_down"] >= 8 * samples * len(fedavg[1]["clients"])  # features and labels sent

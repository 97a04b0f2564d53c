"""Every parameter-sharing algorithm x every temperature policy, end to end on tiny digits data.

Each case runs 2 rounds through the real round loop (one local-training path,
the configured aggregator and objective terms, the temperature policy) and
checks that every round's aggregation moved the global model, that the
training temperature is the policy's, and that losses stay finite (T = 0.05
included: FLex&Chill Table 7 runs SCAFFOLD / FedProx / FedBN at T = 0.05).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from chillfl.aggregation.base import ClientResult, aggregated_keys
from chillfl.aggregation.fedbn import FedBN
from chillfl.aggregation.fedmut import FedMut, FedMutOptions
from chillfl.aggregation.fednova import FedNova
from chillfl.aggregation.pa3fed import PA3Fed
from chillfl.aggregation.registry import algorithm_names
from chillfl.aggregation.scaffold import LinearCorrectionTerm, Scaffold, ScaffoldOptions
from chillfl.aggregation.vrl_sgd import VRLSGD, VRLSGDOptions
from chillfl.config import RunConfig, load_config
from chillfl.data import FederatedData
from chillfl.runner import rounds_for
from chillfl.experiment import build_data, build_experiment
from chillfl.errors import ConfigError
from chillfl.training.local import LocalSpec, model_state, train_client
from method_round import Clients

pytestmark = pytest.mark.slow  # every baseline end to end; `pytest -m "not slow"` leaves it out

BASE: dict[str, Any] = {
    "seed": 1,
    "dataset.name": "digits",
    "partition.name": "dirichlet",
    "partition.alpha": 0.5,
    "federation.num_clients": 6,
    "federation.clients_per_round": 3,
    "federation.rounds": 2,
    "client.epochs": 1,
    "client.batch_size": 32,
    "client.lr": 0.05,
    "eval.clients": "sampled",
    "eval.client_split_size": 20,
}

POLICIES: dict[str, dict[str, Any]] = {
    "none": {"policy": "none"},
    "fixed-0.05": {"policy": "fixed", "value": 0.05},
    "fedchill": {"policy": "fedchill"},
}


def tiny_config(algorithm: dict[str, Any], temperature: dict[str, Any], batch_norm: bool = False, **extra: Any) -> RunConfig:
    overrides = dict(BASE)
    overrides.update(extra)
    cfg = load_config(None, overrides)
    model: dict[str, Any] = {"name": "flexchill_cnn", "batch_norm": batch_norm}
    if algorithm["name"] == "fedalign":  # its term needs a ResNet whose final stage runs at reduced width
        model = {"name": "resnet20"}
    return cfg.with_overrides({"algorithm": algorithm, "temperature": temperature, "model": model})


@pytest.fixture(scope="module")
def data() -> FederatedData:
    return build_data(tiny_config({"name": "fedavg"}, POLICIES["none"]))


Spied = tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], list[dict[str, torch.Tensor]]]


def run_and_spy(cfg: RunConfig, data: FederatedData) -> tuple[Any, list[dict[str, Any]], list[Spied]]:
    """Run ``cfg``; return the experiment, its records and every round's global states before and after, with the clients' uploads."""
    exp = build_experiment(cfg, data=data)
    pairs: list[Spied] = []
    aggregate = exp.aggregator.aggregate

    def spy(global_params: dict[str, torch.Tensor], results: Any, rnd: int) -> dict[str, torch.Tensor]:
        out = aggregate(global_params, results, rnd)
        pairs.append(({k: v.clone() for k, v in global_params.items()}, out, [r.params for r in results]))
        return out

    exp.aggregator.aggregate = spy  # type: ignore[method-assign]
    records = list(rounds_for(exp)(exp))
    return exp, records, pairs


def bias_before_batchnorm(model: torch.nn.Module) -> set[str]:
    """Biases of layers directly followed by BatchNorm: BN subtracts them out, so their gradient is exactly 0."""
    out = set()
    for prefix, module in model.named_modules():
        children = list(module.named_children())
        for (name, layer), (_, nxt) in zip(children, children[1:]):
            if isinstance(nxt, torch.nn.modules.batchnorm._BatchNorm) and getattr(layer, "bias", None) is not None:
                out.add(f"{prefix}.{name}.bias" if prefix else f"{name}.bias")
    return out


def algorithm_table(name: str) -> dict[str, Any]:
    if name == "fedrep":  # the paper's 10 head epochs at T = 0.05 and lr 0.05 blow the tiny CNN's head up (loss ~4e3), killing its ReLUs
        return {"name": "fedrep", "head_epochs": 1}
    if name == "norm_bound":  # M has no default: the bound is in the units of the run's updates
        return {"name": "norm_bound", "max_norm": 0.5}
    if name == "fedgen":  # the server's generator at tests/test_fedgen.py's FAST size (5 steps a round at width 32, not 50 at 512):
        return {"name": "fedgen", "generator_steps": 5, "hidden": 32, "noise_dim": 8}  # what the clients train and send is the same
    if name in ("fedavg_ft", "fedbabu"):  # one fine-tuning epoch at evaluation, not 5: the fine-tuning still runs, on what the round sent
        return {"name": name, "finetune_epochs": 1}
    if name == "ccvr":  # every round trains and calibrates: by default the last round trains nothing (its calibration exchange,
        return {"name": "ccvr", "every_round": True}  # tests/test_ccvr.py), which this test's "every client trained" would flag
    return {"name": "pa3fed", "base": "fedprox"} if name == "pa3fed" else {"name": name}


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("algorithm", algorithm_names())
def test_every_algorithm_with_every_temperature_policy(algorithm: str, policy: str, data: FederatedData) -> None:
    batch_norm = algorithm == "fedbn"  # FLex&Chill Sec. 4.7: FedBN runs on the CNN variant with BN
    cfg = tiny_config(algorithm_table(algorithm), POLICIES[policy], batch_norm=batch_norm)
    exp, records, pairs = run_and_spy(cfg, data)
    assert [r["round"] for r in records] == [1, 2]
    frozen_by_bn = bias_before_batchnorm(exp.model)
    assert bool(frozen_by_bn) == batch_norm
    trainable = [n for n, _ in exp.model.named_parameters() if n not in frozen_by_bn]
    for before, after, uploads in pairs:
        assert set(after) == set(before)
        # what the server computes from the uploads moves; the rest stays bitwise (FedBABU's head at its random start,
        # Oh et al. 2022; Local-only's whole global model, which reads nothing)
        read = set(aggregated_keys(exp.aggregator, before))
        moved = [k for k in trainable if not torch.equal(before[k], after[k])]
        assert moved == [k for k in trainable if k in read], f"{algorithm}/{policy}: unchanged {sorted(read & set(trainable) - set(moved))}"
        for up in uploads:  # every client trained what the server reads (all of it when it reads nothing)
            still = [k for k in trainable if (k in read or not read) and torch.equal(up[k].to(before[k].device), before[k])]
            assert still == [], f"{algorithm}/{policy}: a client did not train {still}"
        assert all(torch.isfinite(v).all() for v in after.values() if v.is_floating_point())
    for r in records:
        assert math.isfinite(r["train_loss"]) and math.isfinite(r["global_loss"])
        assert 0.0 <= r["global_acc"] <= 1.0
        assert set(r["client_train_loss"]) == {str(c) for c in r["clients"]}
    if policy == "fixed-0.05":
        assert all(r["temperature_mean"] == pytest.approx(0.05) for r in records)
    elif policy == "none":
        assert all(r["temperature_mean"] == 1.0 for r in records)
    else:  # FedChill: per-client temperatures from the heterogeneity score, all in (0, inf)
        assert records[0]["temperatures"] and all(t > 0 for t in records[0]["temperatures"].values())


def test_fedbn_keeps_each_clients_bn_layers(data: FederatedData) -> None:
    from chillfl.engine.loop import run_rounds
    from chillfl.experiment import build_protocol, make_executor

    cfg = tiny_config({"name": "fedbn"}, POLICIES["fixed-0.05"], batch_norm=True)
    exp = build_experiment(cfg, data=data)
    agg = exp.aggregator
    assert isinstance(agg, FedBN) and agg.bn_keys
    protocol = build_protocol(exp)
    executor = make_executor(exp, protocol)
    try:
        records = list(run_rounds(protocol, executor, seed=cfg.seed, num_clients=data.num_clients, clients_per_round=cfg.federation.sample_size(), rounds=cfg.federation.rounds))
        trained = {c for r in records for c in r["clients"]}
        store = protocol.store  # type: ignore[attr-defined]
        assert set(store.ids()) == trained and agg.state_dict() == {}  # the clients' own, not the aggregator's
        own = {c: {k.removeprefix("fedbn."): v for k, v in store.load(c).items()} for c in trained}
        assert all(set(own[c]) == set(agg.bn_keys) for c in trained)
        # each client's stored BN statistics are its own: two clients never hold identical running means
        means = [own[c][k] for c in sorted(trained) for k in agg.bn_keys if k.endswith("running_mean")][:2]
        assert not torch.equal(means[0], means[1])
        # a returning client starts from its own BN entries, not the global ones
        cid = sorted(trained)[0]
        task = protocol.configure(cfg.federation.rounds, [cid])[0]
        start, _ = protocol.client.half.prepare(task.state, task.downlink.start, task.downlink.context)  # type: ignore[attr-defined]
        assert all(torch.equal(start[k], own[cid][k]) for k in agg.bn_keys)
        assert not all(torch.equal(task.downlink.start[k], own[cid][k]) for k in agg.bn_keys)
    finally:
        executor.close()
        protocol.close()


@pytest.mark.parametrize("name", ["fednova", "scaffold", "vrl_sgd"])
def test_momentum_normalised_methods_take_the_client_momentum(name: str, data: FederatedData) -> None:
    cfg = tiny_config({"name": name}, POLICIES["none"], **{"client.momentum": 0.9})
    exp, records, _ = run_and_spy(cfg, data)
    assert exp.aggregator.options.momentum == 0.9
    assert all(math.isfinite(r["global_loss"]) for r in records)
    wrapped = build_experiment(cfg.with_overrides({"algorithm": {"name": "pa3fed", "base": name}}), data=data).aggregator
    assert isinstance(wrapped, PA3Fed) and wrapped.base.options.momentum == 0.9  # type: ignore[attr-defined]
    # an explicit value equal to client.momentum is accepted, a different one names the field
    assert build_experiment(cfg.with_overrides({"algorithm": {"name": name, "momentum": 0.9}}), data=data).aggregator.options.momentum == 0.9
    with pytest.raises(ConfigError) as info:
        build_experiment(cfg.with_overrides({"algorithm": {"name": name, "momentum": 0.5}}), data=data)
    assert info.value.field == "algorithm.momentum" and "client.momentum" in info.value.message
    with pytest.raises(ConfigError) as info:
        build_experiment(cfg.with_overrides({"algorithm": {"name": "pa3fed", "base": name, "base_options": {"momentum": 0.0}}}), data=data)
    assert info.value.field == "algorithm.base_options.momentum"
    assert isinstance(build_experiment(tiny_config({"name": "fednova"}, POLICIES["none"]), data=data).aggregator, FedNova)


def test_scaffold_option_ii_with_momentum_recovers_a_constant_gradient() -> None:
    """Through the real local step: a linear loss has a constant gradient G, and c_i+ must equal G.

    Loss sum(W x + b) on one sample x = (1, 2): G_W = x per output row, G_b = 1. K = 3 steps of
    SGD with momentum 0.5 move w by lr * (1 + 1.5 + 1.75) * G = lr * 4.25 * G (FedNova's a(3) = 4.25),
    so c_i+ = (w0 - w3) / (4.25 lr) = G; dividing by K lr = 3 lr would give 4.25 / 3 * G instead.
    """
    model = torch.nn.Linear(2, 1)
    start = model_state(model)
    x, y = torch.tensor([[1.0, 2.0]]), torch.tensor([0])
    spec = LocalSpec(epochs=3, batch_size=1, momentum=0.5, base_loss=lambda logits, targets, t: logits.sum(), terms=(LinearCorrectionTerm(),))
    agg = Scaffold(num_clients=1, options=ScaffoldOptions(momentum=0.5))
    clients = Clients(agg, model)
    _, context = clients.start(0, 0, start)
    out = train_client(model, start, x, y, spec=spec, lr=0.1, temperature=1.0, context=context, generator=torch.Generator().manual_seed(0))
    agg.aggregate(start, clients.results(0, start, [ClientResult(0, out.params, 1, out.num_steps, 0.1, 1.0, out.mean_loss)]), 0)
    assert out.num_steps == 3
    torch.testing.assert_close(clients.states[0]["scaffold.c.weight"], torch.tensor([[1.0, 2.0]]))
    torch.testing.assert_close(clients.states[0]["scaffold.c.bias"], torch.tensor([1.0]))


def test_vrl_sgd_with_momentum_by_hand() -> None:
    # momentum 0.5, k = 2 steps -> a(2) = 1 + 1.5 = 2.5; lr 0.125 -> scale 0.3125
    # x_hat = mean(0.5, 1.5) = 1.0; Delta_0 = (1.0 - 0.5) / 0.3125 = 1.6; Delta_1 = (1.0 - 1.5) / 0.3125 = -1.6
    agg = VRLSGD(VRLSGDOptions(momentum=0.5))
    res = [ClientResult(c, {"w": torch.tensor([w])}, 1, 2, 0.125, 1.0, 0.0) for c, w in ((0, 0.5), (1, 1.5))]
    agg.aggregate({"w": torch.tensor([1.0])}, res, 0)
    assert agg.deltas[0]["w"].item() == pytest.approx(1.6)
    assert agg.deltas[1]["w"].item() == pytest.approx(-1.6)


def test_fedmut_averages_uniformly_so_mutations_cancel() -> None:
    # sizes 1 and 3 but uniform weights: (2 + 6) / 2 = 4 (FedAvg would give 0.25 * 2 + 0.75 * 6 = 5)
    res = [ClientResult(0, {"w": torch.tensor([2.0])}, 1, 1, 0.1, 1.0, 0.0), ClientResult(1, {"w": torch.tensor([6.0])}, 3, 1, 0.1, 1.0, 0.0)]
    assert FedMut(0).aggregate({"w": torch.zeros(1)}, res, 0)["w"].item() == 4.0
    assert FedMut(0, FedMutOptions(weighting="samples")).aggregate({"w": torch.zeros(1)}, res, 0)["w"].item() == 5.0


def test_same_config_same_metrics(data: FederatedData) -> None:
    cfg = tiny_config({"name": "scaffold"}, POLICIES["fixed-0.05"])
    _, first, _ = run_and_spy(cfg, data)
    _, second, _ = run_and_spy(cfg, data)
    assert first == second


def test_scaffold_option_i_runs_under_every_executor_and_differs_from_option_ii() -> None:
    from methods_e2e import assert_executors_agree, config, records

    cfg = config(**{"algorithm.name": "scaffold", "algorithm.option": "I", "federation.rounds": 2, "model.name": "mlp"})
    seq = assert_executors_agree(cfg)
    option_ii = records(cfg.with_overrides({"algorithm": {"name": "scaffold"}}))
    assert seq[0]["train_loss"] == option_ii[0]["train_loss"]  # round 0 trains with c = c_i = 0 either way
    assert seq[-1]["train_loss"] != option_ii[-1]["train_loss"]
    assert all(math.isfinite(r["train_loss"]) for r in seq)

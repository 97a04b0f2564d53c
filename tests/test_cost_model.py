"""The catalogue's time estimate prices what each run's method declares it adds to plain local SGD (its spec's ``Cost``).

Hand-worked on the config of ``test_catalogue.py``'s cost-model test: an MLP on digits (1,438 train, 359 test rows),
2 clients of 719 rows, 1 a round, 1 epoch, batch 100, 3 rounds: 3 x ceil(719 / 100) = 24 steps over 3 x 719 samples.
No wall time is asserted: the arithmetic is (docs/performance.md, "Time estimates").
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from chillfl.capabilities import FORWARD, Capabilities, Cost
from chillfl.catalogue import SMALL_FLOPS, STEP_S, _forward_flops, declared_cost, estimate_cpu_minutes, estimate_gpu_minutes, work
from chillfl.config import RunConfig, config_from_dict
from user_modules import install

BASE: dict[str, Any] = {
    "dataset": {"name": "digits"},
    "model": {"name": "mlp"},
    "federation": {"num_clients": 2, "clients_per_round": 1, "rounds": 3},
    "client": {"batch_size": 100},
}
STEPS, SAMPLES, TEST = 24, 3 * 719, 3 * 359


def _config(**tables: dict[str, Any]) -> RunConfig:
    out = {k: dict(v) for k, v in BASE.items()}
    for key, table in tables.items():
        out[key] = {**out.get(key, {}), **table}
    return config_from_dict(out)


def _minutes(steps: float, trained: float, tested: float = TEST) -> float:
    """The cost model by hand: steps x overhead + (3 FLOPs a trained sample's forward + backward, 1 a tested one)."""
    flops = _forward_flops(_config())
    assert flops is not None
    return (steps * STEP_S + (3 * trained + tested) * flops / SMALL_FLOPS) / 60


def _close(config: RunConfig, expected: float) -> None:
    got = estimate_cpu_minutes(config)
    assert got is not None and math.isclose(got, expected, rel_tol=1e-12), (got, expected)


def test_fedavg_declares_nothing_and_is_priced_as_before() -> None:
    assert declared_cost(_config()) == Cost()
    _close(_config(), _minutes(STEPS, SAMPLES))


def test_two_passes_a_step_double_the_training_not_the_evaluation() -> None:
    sam = _config(client={"sam_rho": 0.05})
    assert declared_cost(sam) == Cost(step_passes=2.0)
    _close(sam, _minutes(2 * STEPS, 2 * SAMPLES))
    fedavg = work(_config())
    doubled = work(sam)
    assert fedavg is not None and doubled is not None
    assert doubled.client_steps == 2 * fedavg.client_steps


def test_a_frozen_forward_a_step_adds_a_forward_pass() -> None:
    ntd = _config(objective={"terms": [{"name": "ntd"}]})  # the term's spec declares its teacher's forward
    assert declared_cost(ntd).step_passes == 1 + FORWARD == 1.5
    _close(ntd, _minutes(1.5 * STEPS, 1.5 * SAMPLES))
    moon = _config(algorithm={"name": "moon"})  # the global and the previous model's forwards
    _close(moon, _minutes(2 * STEPS, 2 * SAMPLES))


def test_extra_passes_add_up_across_the_parts_of_a_run() -> None:
    # MOON (1 + 2 x 0.5) with the NTD term (+0.5) and sharpness-aware steps (+1): 3.5 passes a step.
    both = _config(algorithm={"name": "moon"}, objective={"terms": [{"name": "ntd"}]}, client={"sam_rho": 0.05})
    assert declared_cost(both).step_passes == 3.5
    _close(both, _minutes(3.5 * STEPS, 3.5 * SAMPLES))


def test_a_personal_model_and_fine_tuning_add_local_epochs() -> None:
    _close(_config(algorithm={"name": "ditto"}), _minutes(2 * STEPS, 2 * SAMPLES))  # a second training as long
    _close(_config(algorithm={"name": "ditto", "personal_epochs": 3}), _minutes(4 * STEPS, 4 * SAMPLES))  # 1 + 3 epochs
    _close(_config(algorithm={"name": "fedavg_ft", "finetune_epochs": 2}), _minutes(3 * STEPS, 3 * SAMPLES))


def test_a_wrapper_is_priced_with_its_base() -> None:
    wrapped = _config(algorithm={"name": "pa3fed", "base": "moon"})
    assert declared_cost(wrapped) == declared_cost(_config(algorithm={"name": "moon"}))


def test_the_soft_label_protocol_prices_its_public_set_and_server_model() -> None:
    # DS-FL, |P^t| = 50 of |P| = 100: a client distils 2 epochs on 50 samples and labels 50 (0.5 each): 125 samples,
    # ceil(125 / 100) = 2 steps a round; the server trains its model 1 epoch (client.epochs) on 50: 50 samples, 1 step.
    dsfl = _config(distillation={"method": "dsfl", "public_size": 100, "subset_size": 50, "distill_epochs": 2})
    assert declared_cost(dsfl) == Cost(public_samples=125.0, server_samples=50.0)
    public = 3 * (1 * 125 + 50)  # 3 rounds, 1 client a round; the clients' own rows as without a public set (an estimate)
    _close(dsfl, _minutes(STEPS + 3 * (2 + 1), SAMPLES + public))


def test_a_prototype_method_prices_its_forward_and_test_passes() -> None:
    # FedProto keeps the models with the clients: each client's own model and its prototype accuracy on the test set,
    # 2 x 2 clients = 4 passes a round (one of them the global evaluation already counted), and a forward over its rows.
    proto = _config(prototypes={"method": "fedproto"})
    assert declared_cost(proto) == Cost(epochs=FORWARD, test_passes=3.0)
    _close(proto, _minutes(1.5 * STEPS, 1.5 * SAMPLES, 4 * TEST))


def test_a_comparison_prices_each_run_with_its_own_method(tmp_path: Path) -> None:
    config = config_from_dict({**BASE, "out_dir": str(tmp_path), "compare": {"baseline": "FedAvg"},
                               "variants": {"FedAvg": {}, "FedSAM": {"client": {"sam_rho": 0.05}}}})
    _close(config, _minutes(STEPS, SAMPLES) + _minutes(2 * STEPS, 2 * SAMPLES))
    gpu, fedavg, sam = estimate_gpu_minutes(config), estimate_gpu_minutes(_config()), estimate_gpu_minutes(_config(client={"sam_rho": 0.05}))
    assert gpu is not None and fedavg is not None and sam is not None
    assert math.isclose(gpu[0], fedavg[0] + sam[0], rel_tol=1e-12) and math.isclose(gpu[1], fedavg[1] + sam[1], rel_tol=1e-12)


PLUGIN = '''
from dataclasses import dataclass
from chillfl.extend import AlgorithmSpec, Capabilities, Cost, FedAvg


@dataclass(frozen=True)
class Options:
    passes: float = 3.0


SPEC = AlgorithmSpec(Options, lambda o, ctx: (FedAvg(), []), "a plugin that declares its cost",
                     capabilities_of=lambda o: Capabilities(takes_weights=True, cost=Cost(step_passes=o.passes, server_steps=10)))
'''


def test_a_plugin_declares_its_cost_through_its_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(tmp_path, monkeypatch, "costly_rule", PLUGIN)
    config = _config(algorithm={"name": "costly_rule:SPEC", "passes": 2.5})
    assert declared_cost(config) == Cost(step_passes=2.5, server_steps=10)
    _close(config, _minutes(2.5 * STEPS + 3 * 10, 2.5 * SAMPLES))  # 10 server steps a round, at the step overhead alone


def test_costs_add_their_extras() -> None:
    a = Cost(step_passes=2.0, trainings=2.0, epochs=1.0, public_samples=10, server_samples=5, server_steps=3, test_passes=1)
    b = Cost(step_passes=1.5, epochs=0.5, test_passes=2)
    assert a.plus(b) == Cost(step_passes=2.5, trainings=2.0, epochs=1.5, public_samples=10, server_samples=5, server_steps=3, test_passes=3)
    assert Cost().plus(Cost()) == Cost()
    assert Capabilities(cost=b).wrapping(Capabilities(cost=a)).cost == a.plus(b)

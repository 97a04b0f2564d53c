"""Plugin seams core decided by a bundled class or a blanket rule (the seams explorer's findings F1-F4).

* a plugin constant temperature policy (``trains_at``) is one T, as ``fixed`` is: no per-client temperatures, and
  ``analyze grad-norms`` reads its T;
* a plugin mechanism's row release that returns rows off the simplex where probabilities are asked: one ConfigError
  on ``privacy.mechanism`` (SCARLET met a bare ValueError, DS-FL ran at chance);
* a rule that does not declare ``takes_weights`` is said to declare none (not to take none), with the fix where its
  ``aggregate()`` does take ``weights=``;
* ``local`` (client-side noise: ``any_rule``) runs with a rule that takes no weights (median, Krum); ``dp-fedavg`` stays refused.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

import chillfl
from chillfl.aggregation.registry import check_algorithm
from chillfl.config import load_config
from chillfl.distillation.era import power_sharpen
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.privacy.mechanisms.local import SPEC as LOCAL
from chillfl.privacy.softlabels import RowNoise
from chillfl.temperature.base import ConstantTemperature

sys.path.insert(0, str(Path(__file__).parent))
from plugin_modules import plugin_module  # noqa: E402

MODULE = '''
from dataclasses import dataclass

import torch

from chillfl.extend import Accounting, Capabilities, Charge, FedAvg, MechanismSpec


class ConstantHalf:
    """A constant policy declaring its T (as ``fixed`` does), not the bundled class."""

    capabilities = Capabilities(trains_at=0.5)

    def temperature(self, client_id, round):
        return 0.5

    def observe(self, client_id, round, local_accuracy):
        return None

    def client_half(self, num_classes):
        return None

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class StepDown(ConstantHalf):
    """T changes with the round: it declares no trains_at (capabilities are not inherited)."""

    def temperature(self, client_id, round):
        return 1.0 if round < 1 else 0.5


class WeightsNoDeclare(FedAvg):  # aggregate() takes weights=, but it declares nothing: capabilities are not inherited
    pass


class NoWeights(FedAvg):
    def aggregate(self, global_params, results, round):
        return super().aggregate(global_params, results, round)


@dataclass(frozen=True)
class NoOptions:
    pass


@dataclass(frozen=True)
class Raw:
    """Rows plus noise, never projected back onto the simplex."""

    seed: int

    def release(self, rows, client_id, round):
        gen = torch.Generator().manual_seed(self.seed + 1000 * client_id + round)
        return rows + 0.5 * torch.randn(rows.shape, generator=gen, dtype=rows.dtype)


RAW = MechanismSpec("raw", NoOptions, lambda o, sizes: Accounting(((1.0, sizes.rounds),)), summary="unprojected rows",
                    charges=lambda o, sizes, ps: [Charge(f"client {p.client_id}", 1.0) for p in ps],
                    rows=lambda o, noise, probabilities: Raw(noise.seed), adjacency="replace", subsampled=False)
'''

TINY: dict[str, Any] = {
    "seed": 3, "device": "cpu", "threads": 1, "executor": "sequential", "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]},
    "federation": {"num_clients": 4, "clients_per_round": 4, "rounds": 2}, "client": {"lr": 0.05, "batch_size": 32},
}
PRIVATE = {"clip_norm": 1.0, "noise_multiplier": 1.0, "delta": 1e-3}


@pytest.fixture()
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with plugin_module(tmp_path, monkeypatch, "seamfix_plugins", MODULE):
        yield


def records(**over: Any) -> list[dict[str, Any]]:
    return list(chillfl.run(config={**TINY, **over}, write=False, progress=False).records)


# ---------------------------------------------------------------- F1: a declared constant T is one T


def test_a_plugin_constant_policy_records_no_per_client_temperatures_as_fixed_does(plugin: None) -> None:
    fixed = records(temperature={"policy": "fixed", "value": 0.5}, federation={**TINY["federation"], "rounds": 1})
    plugged = records(temperature={"policy": "seamfix_plugins:ConstantHalf"}, federation={**TINY["federation"], "rounds": 1})
    assert "temperatures" not in fixed[0] and "temperatures" not in plugged[0]
    stepping = records(temperature={"policy": "seamfix_plugins:StepDown"}, federation={**TINY["federation"], "rounds": 1})
    assert stepping[0]["temperatures"] == {str(c): 1.0 for c in range(4)}  # one that declares no trains_at: per client, as before


def test_a_constant_policy_passed_from_python_stays_one_temperature() -> None:
    run = chillfl.run(config={**TINY, "federation": {**TINY["federation"], "rounds": 1}}, policy=ConstantTemperature(0.5), write=False, progress=False)
    assert "temperatures" not in run.records[0]


def test_grad_norms_reads_the_single_temperature_a_plugin_policy_declares(plugin: None) -> None:
    from chillfl.analysis.grad_norms import training_temperature

    exp = build_experiment(load_config(None, {**TINY, "temperature": {"policy": "seamfix_plugins:ConstantHalf"}}))
    assert training_temperature(exp) == 0.5
    stepping = build_experiment(load_config(None, {**TINY, "temperature": {"policy": "seamfix_plugins:StepDown"}}))
    with pytest.raises(ConfigError) as err:
        training_temperature(stepping)
    assert err.value.field == "--temperature"


# ---------------------------------------------------------------- F2: a row release off the simplex


@pytest.mark.parametrize("method", ["dsfl", "scarlet"])
def test_a_plugin_row_release_off_the_simplex_is_one_line_on_privacy_mechanism(plugin: None, method: str) -> None:
    with pytest.raises(ConfigError) as err:
        records(distillation={"method": method, "public_size": 100, "subset_size": 50},
                privacy={"mechanism": "seamfix_plugins:RAW", **PRIVATE})
    assert err.value.field == "privacy.mechanism" and "\n" not in str(err.value)
    assert err.value.message.startswith("'seamfix_plugins:RAW': its row release returned, for client ")
    assert "where the method uploads probabilities" in err.value.message and "project each row onto the simplex" in err.value.message


def test_the_cli_says_it_in_one_line_with_exit_2(plugin: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from chillfl.cli import main

    (tmp_path / "exp.toml").write_text(f'out_dir = "{tmp_path / "out"}"\n')
    args = ["dataset.name=digits", "model.name=mlp", "federation.num_clients=4", "federation.clients_per_round=4", "federation.rounds=1",
            "executor=sequential", "device=cpu", "distillation.method=dsfl", "distillation.public_size=100", "distillation.subset_size=50",
            "privacy.mechanism=seamfix_plugins:RAW", "privacy.clip_norm=1.0", "privacy.noise_multiplier=1.0", "privacy.delta=0.001"]
    assert main(["run", str(tmp_path / "exp.toml"), "-q", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("chillfl: error: privacy.mechanism: 'seamfix_plugins:RAW': its row release returned")


@pytest.mark.parametrize("classes", [2, 10, 100, 1000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_built_in_release_passes_the_check_at_any_width(classes: int, dtype: torch.dtype) -> None:
    from chillfl.privacy.softlabels import CheckedRelease, row_problem

    rows = torch.softmax(torch.randn(64, classes, generator=torch.Generator().manual_seed(classes), dtype=torch.float64), 1).to(dtype)
    for sigma in (0.0, 0.5, 5.0):
        release = CheckedRelease(RowNoise(1.0, sigma, "l2", 7, True), "local", True)
        out = release.release(rows, 0, 1)
        assert out.shape == rows.shape and row_problem(out, rows, True) is None
    logits = torch.randn(8, classes, dtype=dtype) * 30  # logits need no simplex: only the shape and finite entries
    assert CheckedRelease(RowNoise(1.0, 0.5, "l2", 7, False), "local", False).release(logits, 0, 1).shape == logits.shape


def test_row_problem_names_each_misfit() -> None:
    from chillfl.privacy.softlabels import row_problem

    rows = torch.full((3, 4), 0.25)
    assert row_problem(rows, rows, True) is None
    assert row_problem([[0.25] * 4] * 3, rows, True) == "a list, not a tensor"
    assert row_problem(rows[:2], rows, True) == "rows of shape (2, 4) for rows of shape (3, 4)"
    assert row_problem(torch.full((3, 4), float("nan")), rows, False) == "a non-finite entry"
    assert row_problem(rows * 2, rows, False) is None  # logits: any finite values
    assert row_problem(rows * 2, rows, True) == "a row summing to 1 + 1 where the method uploads probabilities"
    assert (row_problem(torch.tensor([[-0.5, 1.5, 0.0, 0.0]] * 3), rows, True) or "").startswith("a negative entry (-0.5)")


def test_enhanced_era_on_negative_rows_is_a_config_error_not_a_bare_value_error() -> None:
    with pytest.raises(ConfigError) as err:
        power_sharpen(torch.tensor([[-0.1, 1.1]]), 2.0)
    assert err.value.field == "distillation.method" and "project each onto the simplex" in err.value.message


# ---------------------------------------------------------------- F3: declares no takes_weights


def test_pa3fed_says_a_subclass_that_takes_weights_must_declare_it(plugin: None) -> None:
    cfg = load_config(None, TINY)
    with pytest.raises(ConfigError) as err:
        check_algorithm("pa3fed", {"base": "seamfix_plugins:WeightsNoDeclare"}, cfg)
    assert err.value.field == "algorithm.base"
    assert err.value.message.startswith("seamfix_plugins:WeightsNoDeclare declares no takes_weights, and PA3Fed's coefficients are weights")
    assert "takes no per-client weights" not in err.value.message
    assert err.value.message.endswith("its aggregate() does take weights=, but capabilities are not inherited: declare capabilities = Capabilities(takes_weights=True)")
    with pytest.raises(ConfigError) as err:  # one whose aggregate() takes none: what a rule that does take them declares
        check_algorithm("pa3fed", {"base": "seamfix_plugins:NoWeights"}, cfg)
    assert "not inherited" not in err.value.message and "declares capabilities = Capabilities(takes_weights=True)" in err.value.message


def test_the_dp_refusal_says_a_subclass_that_takes_weights_must_declare_it(plugin: None) -> None:
    config = load_config(None, {**TINY, "algorithm": {"name": "seamfix_plugins:WeightsNoDeclare"}, "privacy": {"mechanism": "dp-fedavg", **PRIVATE}})
    with pytest.raises(ConfigError) as err:
        build_experiment(config)
    assert err.value.field == "privacy.mechanism"
    assert "(it declares no takes_weights: chillfl treats it as a rule that takes no external per-client weights; its aggregate() does take weights=, but capabilities " \
           "are not inherited: declare capabilities = Capabilities(takes_weights=True))" in err.value.message
    config = load_config(None, {**TINY, "algorithm": {"name": "seamfix_plugins:NoWeights"}, "privacy": {"mechanism": "dp-fedavg", **PRIVATE}})
    with pytest.raises(ConfigError) as err:
        build_experiment(config)
    assert "(it declares no takes_weights: chillfl treats it as a rule that takes no external per-client weights); " in err.value.message


# ---------------------------------------------------------------- F4: client-side noise under any server rule


def test_local_declares_any_rule_and_dp_fedavg_does_not() -> None:
    from chillfl.privacy.mechanisms.dp_fedavg import SPEC as DP_FEDAVG

    assert getattr(LOCAL, "any_rule", False) and not getattr(DP_FEDAVG, "any_rule", False)


@pytest.mark.parametrize("algorithm", ["median", "krum"])
def test_local_noise_runs_with_a_rule_that_takes_no_weights(algorithm: str) -> None:
    from chillfl.privacy.build import EqualWeights

    config = {"algorithm": {"name": algorithm}, "privacy": {"mechanism": "local", **PRIVATE}}
    exp = build_experiment(load_config(None, {**TINY, **config}))
    assert exp.aggregator is not None and isinstance(getattr(exp.aggregator, "base", None), EqualWeights)
    run = records(**config)
    assert len(run) == 2 and run[-1]["epsilon"] > run[0]["epsilon"] > 0
    assert all(torch.isfinite(torch.tensor(r["global_acc"])) for r in run)


def test_dp_fedavg_and_a_personalised_rule_stay_refused() -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(load_config(None, {**TINY, "algorithm": {"name": "median"}, "privacy": {"mechanism": "dp-fedavg", **PRIVATE}}))
    assert err.value.field == "privacy.mechanism" and "which algorithm 'median' is not (it declares no takes_weights" in err.value.message
    with pytest.raises(ConfigError) as err:  # local: each client's own model is nothing the privatised updates rebuild
        build_experiment(load_config(None, {**TINY, "algorithm": {"name": "local_only"}, "privacy": {"mechanism": "local", **PRIVATE}}))
    assert err.value.field == "privacy.mechanism" and "which the server step of algorithm 'local_only' is not (" \
        "each client has a model of its own, which the privatised updates would not rebuild)" in err.value.message


def test_equal_weights_passes_equal_weights_to_the_rule_and_refuses_others() -> None:
    from chillfl.aggregation.base import ClientResult
    from chillfl.aggregation.robust import Median
    from chillfl.privacy.build import EqualWeights

    g = {"w": torch.zeros(3)}
    results = [ClientResult(i, {"w": torch.full((3,), float(i))}, 10, 1, 0.0, 1.0, 0.0) for i in range(3)]
    rule = EqualWeights(Median())
    assert torch.equal(rule.aggregate(g, results, 0, weights=torch.full((3,), 1 / 3, dtype=torch.float64))["w"], torch.ones(3))
    assert torch.equal(rule.aggregate(g, results, 0)["w"], torch.ones(3))
    with pytest.raises(ConfigError) as err:
        rule.aggregate(g, results, 0, weights=torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64))
    assert err.value.field == "privacy.mechanism" and "weighs the clients unequally" in err.value.message

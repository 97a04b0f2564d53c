"""The step-size caveat printed with comparisons of temperatures at one shared lr; the test-set caveat; the loss caveat; the epsilon
caveat; the steering caveat; saved sub-run configs."""

from __future__ import annotations

import importlib
import math
import sys

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from chillfl.config import RunConfig, load_config
from chillfl.experiments import resolve_config
from chillfl.storage.results import summarize
from chillfl.report.caveats import ends_with_nonfinite_loss, nonfinite_loss_caveat, other_test_rows_caveat, step_size_caveat
from chillfl.sweeps.plan import apply_variant, parse_grid, variants_from_config
from chillfl.sweeps import run as sweeps_run
from chillfl.sweeps.plan import CompareOptions
from chillfl.sweeps.run import run_compare
from plugin_modules import plugin_module

TINY = {"dataset.name": "digits", "federation.num_clients": 4, "federation.clients_per_round": 2, "federation.rounds": 2, "eval.client_split_size": 10}


def _variant_configs(name: str) -> list:
    config = load_config(resolve_config(name), {})
    return [apply_variant(config, v) for v in variants_from_config(config)]


def test_bundled_temperature_tables_at_one_lr_carry_the_caveat() -> None:
    for name in ("flexchill/table4-digits", "flexchill/table7-scaffold-digits", "fedchill/table4-digits"):
        caveat = step_size_caveat(_variant_configs(name), {}, controls=False)
        assert caveat is not None and "--controls" in caveat and "--tune client.lr=" in caveat, name


def test_no_caveat_when_tuned_controlled_or_one_temperature() -> None:
    configs = _variant_configs("flexchill/table4-digits")
    assert step_size_caveat(configs, {"client.lr": [0.01, 0.1]}, controls=False) is None
    assert step_size_caveat(configs, {}, controls=True) is None
    assert step_size_caveat(_variant_configs("pa3fed/table2-h0.1"), {}, controls=False) is None  # aggregators, all at T = 1


def test_no_caveat_when_the_lr_differs_between_variants() -> None:
    configs = _variant_configs("flexchill/table4-digits")
    configs[0] = configs[0].with_overrides({"client.lr": 0.2})
    assert step_size_caveat(configs, {}, controls=False) is None


def test_compare_prints_the_caveat_and_saved_configs_name_the_final_folder(tmp_path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(f'name = "t"\nout_dir = "{tmp_path / "out"}"\n[variants."T=1"]\ntemperature = {{ policy = "none" }}\n'
                    '[variants."T=0.5"]\ntemperature = { policy = "fixed", value = 0.5 }\n')
    result = run_compare(load_config(path, {"client.lr": 0.05, **TINY}), [], progress=False)
    assert "step-size caveat: every variant trains at one shared client.lr = 0.05" in result.table
    assert "step-size caveat" in (result.folder / "table.md").read_text()
    saved = sorted(result.folder.glob("*/config.toml"))
    assert len(saved) == 2
    for p in saved:
        assert tomllib.loads(p.read_text())["out_dir"] == str(result.folder)


def test_variants_scored_on_other_test_rows_carry_the_test_set_caveat(tmp_path) -> None:
    """``--grid eval.validation=0,0.5`` scored one variant on the whole test set and the other on its other half, and printed
    their difference "paired per seed" with nothing saying the samples differ."""
    base = load_config(resolve_config("demo"), {"out_dir": str(tmp_path / "out"), **TINY})
    configs = [apply_variant(base, v) for v in parse_grid(["eval.validation=0,0.5"])]
    caveat = other_test_rows_caveat(configs)
    assert caveat is not None and caveat.startswith("test-set caveat: the variants differ in eval.validation,") and "same samples" in caveat
    both = [apply_variant(base, v) for v in parse_grid(["dataset.name=digits,mnist1d", "eval.validation=0.1,0.2"])]
    assert "differ in dataset and eval.validation," in (other_test_rows_caveat(both) or "")
    assert other_test_rows_caveat(_variant_configs("flexchill/table4-digits")) is None  # temperatures: one test set
    assert other_test_rows_caveat([apply_variant(base, v) for v in parse_grid(["partition.alpha=0.1,1.0"])]) is None  # the partition moves no test row


def test_no_caveat_when_every_variant_tunes_its_lr_in_its_own_grid(tmp_path) -> None:
    """Each variant's own grid tunes client.lr (no shared grid): the caveat said every variant trained at the one shared lr."""
    path = tmp_path / "t.toml"
    path.write_text('name = "t"\n[eval]\nvalidation = 0.2\n[variants."T=1"]\ntemperature = { policy = "none" }\ntune = { "client.lr" = [0.05, 0.2] }\n'
                    '[variants."T=0.5"]\ntemperature = { policy = "fixed", value = 0.5 }\ntune = { "client.lr" = [0.05, 0.2] }\n')
    result = run_compare(load_config(path, {"out_dir": str(tmp_path / "out"), **TINY}), [], progress=False, write=False)
    assert "| T=0.5 | client.lr=" in result.table and "step-size caveat" not in result.table


@pytest.mark.parametrize(
    ("records", "nonfinite"),
    [
        ([{"round": 1, "global_acc": 0.1, "global_loss": None}], True),  # metrics.jsonl writes NaN / inf as null
        ([{"round": 1, "global_acc": 0.1, "global_loss": math.nan}], True),  # in memory, before it is written
        ([{"round": 1, "global_acc": 0.1, "global_loss": math.inf}], True),
        ([{"round": 1, "global_acc": 0.1, "global_loss": 2.3}], False),
        ([{"round": 1, "global_acc": 0.1, "global_loss": None}, {"round": 2, "global_acc": 0.2, "global_loss": 2.3}], False),  # recovered by the end
        ([{"round": 1, "global_acc": 0.1, "global_loss": None}, {"round": 2, "skipped": True}], True),  # a skipped last round measures nothing
        ([{"round": 1, "global_acc": 0.1}], False),  # no global loss recorded at all
        ([], False),
    ],
)
def test_a_run_ends_with_a_nonfinite_loss_by_its_last_measured_round(records, nonfinite) -> None:
    assert ends_with_nonfinite_loss(records) is nonfinite


def test_the_loss_caveat_names_the_runs() -> None:
    assert nonfinite_loss_caveat([]) is None
    assert nonfinite_loss_caveat(["T0.05-lr0.2-s0"]) == (
        "loss caveat: 1 run finished with a non-finite final global test loss (weights finite, so not diverged; "
        "their accuracy and validation scores count, the loss column leaves them out): T0.05-lr0.2-s0.")
    assert (nonfinite_loss_caveat(["a-s0", "b-s1"]) or "").startswith("loss caveat: 2 runs finished")


@pytest.mark.parametrize("seeds", [[0], [0, 1]])
def test_a_run_with_a_nonfinite_final_loss_counts_and_is_named_below_the_table(tmp_path, monkeypatch, seeds) -> None:
    """A run whose weights stay finite but whose last global loss overflows finished: its accuracy counts, the loss
    column left it out (over seeds) or printed nan (one seed), and nothing said so. Now one line names it."""
    path = tmp_path / "t.toml"
    path.write_text('name = "t"\n[variants."T=1"]\ntemperature = { policy = "none" }\n[variants."T=0.5"]\ntemperature = { policy = "fixed", value = 0.5 }\n')
    config = load_config(path, {"client.lr": 0.05, "out_dir": str(tmp_path / "out"), **TINY})
    options = CompareOptions(seeds=seeds)
    plain = run_compare(config, [], progress=False, write=False, options=options)
    assert "loss caveat" not in plain.table
    real, overflowed = sweeps_run.run_experiment, "T0.5-s1" if len(seeds) > 1 else "T0.5"

    def overflowing(cfg, **kwargs):  # the run's last global loss overflows (its weights untouched: not a divergence)
        out = real(cfg, **kwargs)
        if cfg.name == overflowed:
            out.records[-1]["global_loss"] = math.nan
            out.summary.update(summarize(out.records))
        return out

    monkeypatch.setattr(sweeps_run, "run_experiment", overflowing)
    result = run_compare(config, [], progress=False, write=False, options=options)
    assert result.failures == {}
    assert result.table.endswith("\n\nloss caveat: 1 run finished with a non-finite final global test loss (weights finite, so not diverged; "
                                 f"their accuracy and validation scores count, the loss column leaves them out): {overflowed}.")
    assert "nan" not in result.table
    before, after = ({r["variant"]: r for r in res.rows}["T=0.5"] for res in (plain, result))
    assert after["final_acc"] == before["final_acc"]  # it counts as before
    if len(seeds) > 1:
        assert after["final_loss"]["n"] == 1 and after["final_loss"]["mean"] == before["final_loss"]["per_seed"][0]
    else:
        assert after["final_loss"] is None and before["final_loss"] is not None


def test_epsilon_caveat_names_each_variants_guarantee_and_says_units_do_not_compare() -> None:
    # privacy/epsilon-digits: dp-fedavg rows (a client, add/remove) and local soft-label rows (a row, replace) in one
    # epsilon column, under the default fixed-size sampling: the table alone read them as one scale
    variants = variants_from_config(load_config(resolve_config("privacy/epsilon-digits"), {}))
    configs = [(v.label, c) for v, c in zip(variants, _variant_configs("privacy/epsilon-digits"))]
    from chillfl.report.caveats import epsilon_caveat

    caveat = epsilon_caveat(configs)
    assert caveat is not None
    assert "dp-fedavg (add_remove neighbours, delta = 1e-05): 'FedAvg, eps=32', 'FedAvg, eps=8'," in caveat
    assert "local (replace neighbours, delta = 1e-05): 'DS-FL, eps=32'" in caveat
    assert "do not compare epsilons across them" in caveat and "not a proven bound" in caveat
    assert "'FedAvg + chilling T=0.5'" not in caveat and "'DS-FL'" not in caveat  # the non-private rows are in no group


def test_epsilon_caveat_one_group_under_poisson_sampling_and_none_without_privacy() -> None:
    from chillfl.report.caveats import epsilon_caveat

    private = load_config(None, {**TINY, "privacy.mechanism": "dp-fedavg", "privacy.delta": 1e-3, "federation.sampling": "poisson"})
    clean = load_config(None, TINY)
    caveat = epsilon_caveat([("clean", clean), ("dp", private)])
    assert caveat is not None and "dp-fedavg (add_remove neighbours, delta = 0.001): 'dp'." in caveat
    assert "do not compare" not in caveat and "proven" not in caveat  # one guarantee; Poisson sampling is the proven bound
    assert epsilon_caveat([("clean", clean)]) is None


def test_epsilon_caveat_names_what_each_variant_approximates() -> None:
    """The clause read "under fixed sampling a subsampled mechanism accounts the round's clients as Poisson sampled" for any
    private variant under the default fixed sampling: at q = 1 (every client every round) that is Poisson sampling itself,
    a proven bound, and dp-sgd accounts no client sampling at all but its shuffled fixed-size batches, under either
    sampling. Now each variant's own approximation is named, from its mechanism."""
    from chillfl.report.caveats import epsilon_caveat

    def private(mechanism: str, **extra: object) -> RunConfig:
        return load_config(None, {**TINY, "privacy.mechanism": mechanism, "privacy.delta": 1e-4, **extra})

    all_clients = private("dp-fedavg", **{"federation.clients_per_round": 4})
    assert all_clients.federation.sample_size() == all_clients.federation.num_clients
    caveat = epsilon_caveat([("all", all_clients)])
    assert caveat is not None and "proven" not in caveat and "Poisson" not in caveat

    half = private("dp-fedavg", **{"federation.clients_per_round": 2})
    sgd = private("dp-sgd", **{"federation.sampling": "poisson"})
    caveat = epsilon_caveat([("half", half), ("all", all_clients), ("sgd", sgd)])
    assert caveat is not None
    assert ("The usual approximation, not a proven bound: 'half' accounts the round's clients, drawn without replacement under "
            'federation.sampling = "fixed", as Poisson sampled at q = m / N; '
            "'sgd' accounts each client's shuffled fixed-size batches as Poisson sampled at q = batch_size / n_k, "
            "where its epoch is more than one batch (n_k > batch_size + 1; a one-batch epoch is charged q = 1, a proven bound).") in caveat
    assert "'all' account" not in caveat


STEERING_PLUGIN = '''
from chillfl.extend import Capabilities


class Steering:
    """A plugin policy whose class declares that the clients' accuracy steers their training."""

    capabilities = Capabilities(steers_by_accuracy="my schedule (it reads local accuracy)")

    def temperature(self, client_id, round):
        return 1.0

    def observe(self, client_id, round, local_accuracy):
        return None

    def client_half(self, num_classes):
        return None

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        return None


class Silent(Steering):
    """The same policy declaring nothing of its own (a class's own ``capabilities`` only, not an inherited one)."""
'''


def _steering(label: str, **overrides: object) -> tuple[str, RunConfig]:
    return label, load_config(None, {**TINY, **overrides})


def test_steering_caveat_names_the_fedchill_variants_whose_decay_reads_test_rows() -> None:
    """FedChill's decay without a validation split reads each client's evaluation split (test rows): the table names those
    variants, quoted (a label may hold commas), with what reads the rows (the capability's text) and the fix; the
    others (FedAvg, a fixed T, FedChill with the decay off or with a validation split) are not named."""
    from chillfl.report.caveats import steering_caveat

    variants = [
        _steering("FedAvg"),
        _steering("T=0.5", **{"temperature.policy": "fixed", "temperature.value": 0.5}),
        _steering("FedChill, gamma=0.9", **{"temperature.policy": "fedchill", "temperature.gamma": 0.9}),
        _steering("FedChill (init only)", **{"temperature.policy": "fedchill", "temperature.decay": False}),
        _steering("FedChill*", **{"temperature.policy": "fedchill"}),
    ]
    assert steering_caveat(variants) == (
        "steering caveat: FedChill's decay (temperature.decay = true) in 'FedChill, gamma=0.9', 'FedChill*' reads each client's accuracy "
        "on its evaluation split, drawn from the test rows this table reports (eval.validation = 0): test rows steer those variants' "
        "training, so their accuracies are not on held-out rows; rerun with eval.validation = 0.2 to keep them out (docs/comparisons.md).")


def test_no_steering_caveat_with_a_validation_split_without_the_decay_or_without_fedchill() -> None:
    from chillfl.report.caveats import steering_caveat

    assert steering_caveat([_steering("FedChill", **{"temperature.policy": "fedchill", "eval.validation": 0.2})]) is None  # validation rows steer
    assert steering_caveat([_steering("init only", **{"temperature.policy": "fedchill", "temperature.decay": False})]) is None
    assert steering_caveat([_steering("T=0.5", **{"temperature.policy": "fixed", "temperature.value": 0.5}), _steering("T=1")]) is None
    assert steering_caveat([]) is None


def test_a_plugin_policy_declaring_steers_by_accuracy_gets_the_steering_caveat(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The caveat asks the policy's capability, never its name: a user's class by import path that declares it is named
    (beside FedChill, each with its own text), one that declares nothing is not; and an instance passed from Python
    (``custom``) is asked what its class declares, as the run's stderr note asks it."""
    from chillfl.report.caveats import steering_caveat

    with plugin_module(tmp_path, monkeypatch, "steering_plugin", STEERING_PLUGIN):
        mine = _steering("mine", **{"temperature.policy": "steering_plugin:Steering"})
        caveat = steering_caveat([_steering("FedChill", **{"temperature.policy": "fedchill"}), mine,
                                  _steering("silent", **{"temperature.policy": "steering_plugin:Silent"})])
        assert caveat is not None and caveat.startswith(
            "steering caveat: FedChill's decay (temperature.decay = true) in 'FedChill' and my schedule (it reads local accuracy) in 'mine' "
            "read each client's accuracy on its evaluation split,")  # two texts: "read", one: "reads"
        assert "'silent'" not in caveat
        assert steering_caveat([_steering("mine", **{"temperature.policy": "steering_plugin:Steering", "eval.validation": 0.2})]) is None
        plugin = importlib.import_module("steering_plugin")
        custom = _steering("passed", **{"temperature.policy": "custom"})
        caveat = steering_caveat([custom], plugin.Steering())
        assert caveat is not None and caveat.startswith("steering caveat: my schedule (it reads local accuracy) in 'passed' reads ")
        assert steering_caveat([custom], plugin.Silent()) is None
        assert steering_caveat([custom]) is None  # a custom policy nobody passed declares nothing


CONSTANT_PLUGIN = '''
from dataclasses import dataclass

from chillfl.extend import Capabilities, ConstantTemperature, PolicySpec


@dataclass(frozen=True)
class WarmOptions:
    """One T for every client and round, a plugin's."""

    t: float = 1.0


SPEC = PolicySpec(WarmOptions, lambda o, counts: ConstantTemperature(o.t), "a plugin's constant T", capabilities=lambda o: Capabilities(trains_at=o.t))
'''


def test_the_step_size_caveat_asks_a_policy_for_its_one_temperature(tmp_path, monkeypatch) -> None:
    """The caveat named the built-in policies (``none``, ``fixed``) to find each variant's T: a plugin's constant policy at
    T = 1 beside ``none`` got the caveat (two "temperatures": its name and 1), and ``fixed`` with its default value
    (0.05) read as T = 1, so ``fixed`` against ``none`` at one lr got none. Now each policy declares ``trains_at``."""
    base = load_config(None, {**TINY, "client.lr": 0.05})

    def configs(*tables: dict) -> list[RunConfig]:
        return [base.with_overrides({f"temperature.{k}": v for k, v in table.items()}) for table in tables]

    with plugin_module(tmp_path, monkeypatch, "warm_plugin", CONSTANT_PLUGIN):
        plugin = "warm_plugin:SPEC"
        assert step_size_caveat(configs({"policy": "none"}, {"policy": plugin}), {}, controls=False) is None  # both at T = 1
        assert step_size_caveat(configs({"policy": "none"}, {"policy": plugin, "t": 0.5}), {}, controls=False) is not None
        assert step_size_caveat(configs({"policy": "fixed", "value": 1.0}, {"policy": plugin}), {}, controls=False) is None
    assert step_size_caveat(configs({"policy": "none"}, {"policy": "fixed"}), {}, controls=False) is not None  # fixed's default T = 0.05

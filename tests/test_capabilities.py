"""Parameter-sharing methods declare their capabilities; the run builder, PA3Fed and the Flower apps read them, never names.

Each check on hand-picked values: the plain-SGD refusal of every method that declares it (with its own
reason), Krum's bounds, which bases PA3Fed refuses (robust, own rules, a plugin that declares nothing), the
Flower refusal of a method and of a wrapper's base, the personal-model declaration against the class, the
``checkpoint.client_models`` warning, and the registry's names, unchanged by moving each spec into its module.
"""

from __future__ import annotations

import logging
import re
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import AggregatorBase, ClientResult, FedAvg, Params, holds_personal_model
from chillfl.aggregation.registry import (
    algorithm_names,
    algorithm_parts,
    algorithm_spec,
    check_algorithm,
    effective_capabilities,
    make_aggregator,
    registered_algorithms,
    weighted_bases,
)
from chillfl.capabilities import Capabilities
from chillfl.cli import main
from chillfl.config import RunConfig, load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_algorithm
from chillfl.options import parse_options

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"

BUILT_INS = [
    "apfl", "ditto", "fedadagrad", "fedadam", "fedalign", "fedavg", "fedbn", "feddyn", "fedgen", "fedmut", "fednova", "fedper",
    "fedprox", "fedrep", "fedyogi", "krum", "median", "moon", "pa3fed", "pfedme", "scaffold", "trimmed_mean", "vrl_sgd",
]
"""The names the one-table registry had before each spec moved into its method's module."""
PERSONALISED_BREADTH = [
    "apple", "cfl", "fedala", "fedamp", "fedavgm", "fedbabu", "fedcac", "feddbe", "fedexp", "fedfomo", "fml", "fedpac", "fedphp", "fedrod", "ifca",
    "lg_fedavg", "perfedavg", "pfedsim", "qffl",
]
"""The methods issue #38 added, each in its own module through the public spec (no core file names them)."""
ROBUST_MORE = ["bulyan", "centered_clip", "dnc", "geomed", "norm_bound"]
"""Byzantine-robust rules added next to median, trimmed mean and Krum, each in its own module."""
LABEL_SKEW = ["fedlc", "fedrs"]
"""FedAvg with a local loss adjusted by the client's label counts, each in its own module."""
SANITY = ["fedavg_ft", "local_only"]
"""The two sanity baselines of personalised FL: FedAvg fine-tuned, and each client on its own."""
CLUSTERED = ["fesem", "pacfl"]
"""Clustered FL beside IFCA and CFL (PACFL, FeSEM), each in its own module."""
HYPERNETWORKS = ["pfedhn"]
"""A server-side hypernetwork that generates each client's model, in its own module."""
FEATURE_SPLIT = ["fedcp"]
"""FedCP: a policy network splits each feature between a global and a personal head, in its own module."""
CALIBRATION = ["ccvr"]
"""CCVR: FedAvg with the classifier head calibrated on the server from the clients' class statistics, in its own module."""
MEMORY = ["knnper"]
"""kNN-Per: FedAvg whose clients interpolate the global model with a kNN over their own representations, in its own module."""
ALL_BUILT_INS = sorted(BUILT_INS + PERSONALISED_BREADTH + ROBUST_MORE + LABEL_SKEW + SANITY + CLUSTERED + HYPERNETWORKS + FEATURE_SPLIT + CALIBRATION
                       + MEMORY)


def config(**overrides: Any) -> RunConfig:
    return load_config(None, {"dataset.name": "digits", "model.name": "mlp", **overrides})


def table(cfg: RunConfig) -> tuple[str, dict[str, Any]]:
    name, options = RunConfig.component(cfg.algorithm)
    return name, dict(options or {})


def check(**overrides: Any) -> None:
    cfg = config(**overrides)
    name, options = table(cfg)
    check_algorithm(name, options, cfg)


# ---------------------------------------------------------------- the registry


def test_the_registry_finds_every_built_in_as_before() -> None:
    assert algorithm_names() == ALL_BUILT_INS
    assert sorted(registered_algorithms()) == ALL_BUILT_INS


def test_each_built_in_spec_lives_in_its_method_module() -> None:
    """Registered next to its code: the builder is defined in a method module, not in the registry."""
    for name, spec in registered_algorithms().items():
        module = spec.build.__module__
        assert module.startswith("chillfl.aggregation.") and module != "chillfl.aggregation.registry", (name, module)


def test_pa3fed_bases_are_read_from_declared_capabilities() -> None:
    """The old list plus FedAvgM and LG-FedAvg: every algorithm but PA3Fed itself, the robust rules and those with rules of their own."""
    assert weighted_bases() == [
        "fedadagrad", "fedadam", "fedalign", "fedavg", "fedavgm", "fedbn", "fedgen", "fedmut", "fednova", "fedper", "fedprox", "fedyogi", "lg_fedavg", "moon",
        "scaffold", "vrl_sgd",
    ]


# ---------------------------------------------------------------- plain SGD


PLAIN_SGD = {
    "scaffold": "SCAFFOLD's option II control variate (x - y_i) / (K lr)",
    "fednova": "FedNova's normalised update (x - y_i) / (a_i lr)",
    "vrl_sgd": "VRL-SGD's Delta_i += (x_hat - x_i) / (k lr)",
}


def test_exactly_three_built_ins_declare_plain_sgd_with_their_reason() -> None:
    declared = {n: s.capabilities.plain_sgd for n, s in registered_algorithms().items() if s.capabilities.plain_sgd is not None}
    assert declared == PLAIN_SGD


@pytest.mark.parametrize("name", sorted(PLAIN_SGD))
def test_plain_sgd_methods_refuse_other_optimisers_nesterov_and_per_step_schedules(name: str) -> None:
    why = PLAIN_SGD[name]
    with pytest.raises(ConfigError) as err:
        check(**{"algorithm.name": name, "client.optimizer": "adam"})
    assert err.value.field == "client.optimizer" and err.value.message == f"{why} assumes SGD steps, so {name} needs optimizer = 'sgd', got 'adam'"
    with pytest.raises(ConfigError) as err:
        check(**{"algorithm.name": name, "client.momentum": 0.9, "client.nesterov": True})
    assert err.value.field == "client.nesterov" and err.value.message.startswith(why)
    with pytest.raises(ConfigError) as err:
        check(**{"algorithm.name": name, "client.lr_schedule": "cosine", "client.lr_schedule_over": "steps"})
    assert err.value.field == "client.lr_schedule_over" and err.value.message.startswith(why)
    check(**{"algorithm.name": name, "client.lr_schedule": "cosine", "client.lr_schedule_over": "rounds"})  # one lr a round: fine


def test_methods_that_declare_nothing_take_any_optimiser() -> None:
    check(**{"algorithm.name": "fedavg", "client.optimizer": "adam"})
    check(**{"algorithm.name": "fedprox", "client.momentum": 0.9, "client.nesterov": True})


def test_a_wrapper_inherits_its_bases_plain_sgd_limit() -> None:
    with pytest.raises(ConfigError) as err:
        check(**{"algorithm.name": "pa3fed", "algorithm.base": "scaffold", "client.optimizer": "adam"})
    assert err.value.field == "client.optimizer" and "so scaffold needs optimizer = 'sgd'" in err.value.message
    check(**{"algorithm.name": "pa3fed", "algorithm.base": "fedprox", "client.optimizer": "adam"})


def test_a_plugin_spec_declaring_plain_sgd_is_refused_the_same_way(plugin: Any) -> None:
    with pytest.raises(ConfigError) as err:
        check(**{"algorithm.name": "caps_plugin:PLAIN", "client.optimizer": "adamw"})
    assert err.value.field == "client.optimizer" and err.value.message.startswith("my rule's (x - y) / lr assumes SGD steps")


# ---------------------------------------------------------------- Krum


def test_krum_needs_more_than_2f_plus_2_clients_per_round() -> None:
    """5 clients a round: f = 1 fits (5 > 4), f = 2 does not (5 <= 6) and the message says f <= 1."""
    base = {"algorithm.name": "krum", "federation.num_clients": 10, "federation.clients_per_round": 5}
    check(**base, **{"algorithm.f": 1})
    with pytest.raises(ConfigError) as err:
        check(**base, **{"algorithm.f": 2})
    assert err.value.field == "algorithm.f" and "tolerate f <= 1, got 2" in err.value.message


def test_multi_krum_averages_at_most_n_minus_f_models() -> None:
    """5 clients a round, f = 1: m = 4 models at most."""
    base = {"algorithm.name": "krum", "algorithm.f": 1, "federation.num_clients": 10, "federation.clients_per_round": 5}
    check(**base, **{"algorithm.m": 4})
    with pytest.raises(ConfigError) as err:
        check(**base, **{"algorithm.m": 5})
    assert err.value.field == "algorithm.m" and "at most clients per round - f = 4 models, got 5" in err.value.message


def test_krums_check_runs_when_the_run_is_built() -> None:
    cfg = config(**{"algorithm.name": "krum", "algorithm.f": 1, "federation.num_clients": 10, "federation.clients_per_round": 4})
    with pytest.raises(ConfigError, match=r"clients per round > 2f \+ 2"):
        build_algorithm(cfg, nn.Linear(4, 2))


# ---------------------------------------------------------------- PA3Fed's bases


@pytest.mark.parametrize("base", ["median", "trimmed_mean", "krum", "bulyan", "geomed", "centered_clip"])
def test_pa3fed_refuses_rules_that_take_no_weights(base: str) -> None:
    with pytest.raises(ConfigError) as err:
        check(**{"algorithm.name": "pa3fed", "algorithm.base": base})
    assert err.value.field == "algorithm.base" and err.value.message.startswith(f"{base} declares no takes_weights")


@pytest.mark.parametrize("base", ["feddyn", "ditto", "fedrep", "apfl", "pfedme"])
def test_pa3fed_refuses_rules_of_their_own_with_their_declared_reason(base: str) -> None:
    reason = algorithm_spec(base).capabilities.not_a_base
    assert reason
    with pytest.raises(ConfigError) as err:
        check(**{"algorithm.name": "pa3fed", "algorithm.base": base})
    assert err.value.field == "algorithm.base" and err.value.message.startswith(f"{base} cannot be PA3Fed's base: {reason}")


def test_pa3fed_cannot_wrap_itself() -> None:
    with pytest.raises(ConfigError) as err:
        check(**{"algorithm.name": "pa3fed", "algorithm.base": "pa3fed"})
    assert err.value.field == "algorithm.base"


PLUGIN = '''
from dataclasses import dataclass

from chillfl.aggregation.base import FedAvg, Stateless
from chillfl.aggregation.registry import AlgorithmSpec
from chillfl.capabilities import Capabilities


class Subclass(FedAvg):
    """A FedAvg subclass that declares nothing: not a base by accident."""


class Declared(FedAvg):
    capabilities = Capabilities(takes_weights=True)


class ChildOfDeclared(Declared):
    """Inherits Declared's code, not its declaration."""


class KeepsDeclared(Declared):
    capabilities = Declared.capabilities


class NodeLess(FedAvg):
    capabilities = Capabilities(takes_weights=True, on_flower="my rule needs every client's model on the server")


class Keeper(Stateless):
    def personal_model(self, state, global_model):
        return dict(global_model)


class ClaimsPersonal(FedAvg):
    capabilities = Capabilities(personal_model=True)


class HidesPersonal(FedAvg):
    def client_half(self):
        return Keeper()


class HoldsPersonal(FedAvg):
    capabilities = Capabilities(personal_model=True)

    def client_half(self):
        return Keeper()


class BadDeclaration(FedAvg):
    capabilities = {"takes_weights": True}


@dataclass(frozen=True)
class PlainOptions:
    pass


PLAIN = AlgorithmSpec(PlainOptions, lambda o, ctx: (FedAvg(), []), "plain", capabilities=Capabilities(plain_sgd="my rule's (x - y) / lr"))
'''


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    (tmp_path / "caps_plugin.py").write_text(PLUGIN, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import caps_plugin

    yield caps_plugin
    sys.modules.pop("caps_plugin", None)


def test_a_fedavg_subclass_is_no_base_until_it_declares_takes_weights(plugin: Any) -> None:
    with pytest.raises(ConfigError) as err:
        check(**{"algorithm.name": "pa3fed", "algorithm.base": "caps_plugin:Subclass"})
    assert err.value.field == "algorithm.base" and "caps_plugin:Subclass declares no takes_weights" in err.value.message
    check(**{"algorithm.name": "pa3fed", "algorithm.base": "caps_plugin:Declared"})
    agg, _ = make_aggregator("pa3fed", {"base": "caps_plugin:Declared"}, num_clients=3, model=nn.Linear(2, 2), seed=0)
    assert isinstance(agg.base, plugin.Declared)  # type: ignore[attr-defined]


def test_declared_capabilities_are_not_inherited(plugin: Any) -> None:
    assert algorithm_spec("caps_plugin:Declared").capabilities == Capabilities(takes_weights=True)
    assert algorithm_spec("caps_plugin:ChildOfDeclared").capabilities == Capabilities()
    assert algorithm_spec("caps_plugin:KeepsDeclared").capabilities == Capabilities(takes_weights=True)
    with pytest.raises(ConfigError, match="declares no takes_weights"):
        check(**{"algorithm.name": "pa3fed", "algorithm.base": "caps_plugin:ChildOfDeclared"})


def test_capabilities_of_the_wrong_type_are_one_line(plugin: Any) -> None:
    with pytest.raises(ConfigError) as err:
        algorithm_spec("caps_plugin:BadDeclaration")
    assert err.value.field == "algorithm.name" and "must be a chillfl.extend.Capabilities, got dict" in err.value.message


def test_an_unknown_base_lists_the_weighted_ones() -> None:
    with pytest.raises(ConfigError) as err:
        check(**{"algorithm.name": "pa3fed", "algorithm.base": "fedsgd"})
    assert err.value.field == "algorithm.base" and "fedadagrad, fedadam" in err.value.message and "krum" not in err.value.message


def trimmed_mean_of_the_docs() -> str:
    """The page's TrimmedMean block as written, with the imports the page's first block gives it."""
    blocks = re.findall(r"```python\n(.*?)^```", DOC.read_text(encoding="utf-8"), flags=re.S | re.M)
    found = [b for b in blocks if "class TrimmedMean(" in b]
    assert len(found) == 1
    return ("from collections.abc import Sequence\nfrom dataclasses import dataclass\n\nimport torch\n\n"
            "from chillfl.extend import ClientResult, Params, require\n" + found[0])


def test_the_docs_trimmed_mean_as_pa3fed_base_is_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "docs_rules.py").write_text(trimmed_mean_of_the_docs(), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run.toml"
    run.write_text(textwrap.dedent(f'''
        out_dir = "{tmp_path / 'results'}"
        executor = "sequential"
        device = "cpu"
        [dataset]
        name = "digits"
        [model]
        name = "mlp"
        [federation]
        num_clients = 4
        clients_per_round = 2
        rounds = 2
        [algorithm]
        name = "pa3fed"
        base = "docs_rules:TrimmedMean"
        '''), encoding="utf-8")
    try:
        code = main(["run", str(run)])
        err = capsys.readouterr().err
    finally:
        sys.modules.pop("docs_rules", None)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith("chillfl: error: algorithm.base: docs_rules:TrimmedMean declares no takes_weights")
    assert not (tmp_path / "results").exists()


# ---------------------------------------------------------------- Flower


def test_flower_refuses_by_on_flower_for_the_method_and_a_wrappers_base(plugin: Any) -> None:
    from chillfl.flower.apps import check_supported

    assert [n for n, s in registered_algorithms().items() if s.capabilities.on_flower] == ["vrl_sgd"]
    with pytest.raises(ConfigError) as err:
        check_supported(config(**{"algorithm.name": "vrl_sgd"}))
    assert err.value.field == "algorithm.name" and err.value.message.startswith("VRL-SGD's Delta_i update needs the round's new average model")
    with pytest.raises(ConfigError) as err:
        check_supported(config(**{"algorithm.name": "pa3fed", "algorithm.base": "vrl_sgd"}))
    assert err.value.field == "algorithm.base"
    with pytest.raises(ConfigError) as err:
        check_supported(config(**{"algorithm.name": "pa3fed", "algorithm.base": "caps_plugin:NodeLess"}))
    assert err.value.field == "algorithm.base" and err.value.message.startswith("my rule needs every client's model on the server; ")
    check_supported(config(**{"algorithm.name": "pa3fed", "algorithm.base": "scaffold"}))


def test_algorithm_parts_follow_the_declared_wrapped_option() -> None:
    parts = algorithm_parts({"name": "pa3fed", "base": "fedprox", "base_options": {"mu": 0.1}})
    assert [(f, n) for f, n, _ in parts] == [("algorithm.name", "pa3fed"), ("algorithm.base", "fedprox")]
    assert [(f, n) for f, n, _ in algorithm_parts({"name": "fedavg"})] == [("algorithm.name", "fedavg")]
    assert algorithm_spec("pa3fed").wraps == "base"


# ---------------------------------------------------------------- personal models


def model_for(name: str) -> nn.Module:
    from chillfl.models import build_model

    if name == "fedalign":
        return build_model("resnet20", (3, 8, 8), 10, {}, seed=0)
    if name == "fedbn":
        return build_model("flexchill_cnn", (1, 8, 8), 10, {"batch_norm": True}, seed=0)
    return build_model("mlp", (64,), 10, {}, seed=0)


@pytest.mark.parametrize("name", ALL_BUILT_INS)
def test_every_built_ins_personal_model_declaration_agrees_with_its_class(name: str) -> None:
    """make_aggregator checks it; built here on a model each method accepts (with the options it cannot run without)."""
    from registry_cases import NEEDS

    required = {k.removeprefix("algorithm."): v for k, v in NEEDS.get(f"algorithm-{name}", {}).items() if k.startswith("algorithm.")} or None
    agg, _ = make_aggregator(name, required, num_clients=4, model=model_for(name), seed=0)
    spec = algorithm_spec(name)
    assert effective_capabilities(spec, parse_options(spec.options, required, "algorithm")).personal_model == holds_personal_model(agg.client_half())
    holders = {
        "apfl", "apple", "ditto", "fedala", "fedamp", "fedbn", "fedcac", "fedcp", "feddbe", "fedfomo", "fedper", "fedphp", "fedrep", "fedrod", "fml",
        "lg_fedavg", "local_only", "pfedhn", "pfedsim",
    }
    assert spec.capabilities.personal_model == (name in holders)


def test_a_wrapper_holds_its_bases_personal_model() -> None:
    spec = algorithm_spec("pa3fed")
    options = parse_options(spec.options, {"base": "fedbn"}, "algorithm")
    assert effective_capabilities(spec, options).personal_model and not spec.capabilities.personal_model


def test_a_declared_personal_model_must_agree_with_the_class(plugin: Any) -> None:
    with pytest.raises(ConfigError) as err:
        make_aggregator("caps_plugin:ClaimsPersonal", None, num_clients=3, model=nn.Linear(2, 2), seed=0)
    assert err.value.field == "algorithm.name" and "declares personal_model = True, but its client half implements no HoldsPersonalModel" in err.value.message
    with pytest.raises(ConfigError) as err:
        make_aggregator("caps_plugin:HidesPersonal", None, num_clients=3, model=nn.Linear(2, 2), seed=0)
    assert err.value.field == "algorithm.name" and "declares no personal_model, but its client half implements HoldsPersonalModel" in err.value.message
    make_aggregator("caps_plugin:HoldsPersonal", None, num_clients=3, model=nn.Linear(2, 2), seed=0)


def test_client_models_on_a_method_that_keeps_none_is_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    model = model_for("fedavg")
    with caplog.at_level(logging.WARNING, logger="chillfl.experiment"):
        build_algorithm(config(**{"algorithm.name": "fedprox", "checkpoint.client_models": True}), model)
    warned = [r.getMessage() for r in caplog.records if r.name == "chillfl.experiment"]
    # Not "keep nothing": FedDyn's clients keep g_k and SCAFFOLD's c_i between rounds, just no model of their own.
    assert warned == ["checkpoint.client_models: fedprox keeps no model per client (its clients train what the server sends them each round "
                      "and keep no model of their own between rounds), so no client_models.safetensors is saved"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="chillfl.experiment"):
        build_algorithm(config(**{"algorithm.name": "ditto", "checkpoint.client_models": True}), model)
        build_algorithm(config(**{"algorithm.name": "pfedhn", "checkpoint.client_models": True}), model)  # the server makes each client's h(v_i; phi)
        build_algorithm(config(**{"algorithm.name": "pfedhn", "algorithm.variant": "pc", "checkpoint.client_models": True}), model)  # keeps its heads
        build_algorithm(config(**{"algorithm.name": "fedprox"}), model)
    assert not [r for r in caplog.records if r.name == "chillfl.experiment"]


# ---------------------------------------------------------------- the aggregator base


class Sum(AggregatorBase):
    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        return {k: sum((r.params[k] for r in results), torch.zeros_like(v)) for k, v in global_params.items()}


def test_aggregator_base_gives_the_do_nothing_parts() -> None:
    rule = Sum()
    assert rule.client_half() is None and rule.downlink(0, 0, {}).context == {} and rule.downlink(0, 0, {}).params is None
    rule.begin_round(0, [0])
    assert rule.round_metrics() == {} and rule.state_dict() == {}
    rule.load_state_dict({})
    with pytest.raises(ValueError, match="Sum state must have keys"):
        rule.load_state_dict({"h": torch.zeros(1)})
    assert issubclass(FedAvg, AggregatorBase)


def test_no_built_in_inherits_fedavg_but_for_its_weighted_mean() -> None:
    """The FedAvg subclasses call its ``aggregate``: FedNova, whose server step is its own, is an AggregatorBase."""
    from chillfl.aggregation.fednova import FedNova

    assert not issubclass(FedNova, FedAvg) and issubclass(FedNova, AggregatorBase)


SOFT_LABEL_PLUGIN = '''
import dataclasses

from chillfl.capabilities import Capabilities
from chillfl.distillation.methods.dsfl import SPEC as DSFL

SPEC = dataclasses.replace(DSFL, name="needs_a_server_view", capabilities=Capabilities(on_flower="its server reads every client's raw logits"))
'''


def test_a_soft_label_methods_declared_on_flower_is_what_the_flower_apps_refuse(user_module) -> None:
    """The Flower apps ask the named method's capabilities, whatever its family: a plugin's reason, on its field."""
    from chillfl.flower.apps import check_supported

    user_module("needs_a_server_view", SOFT_LABEL_PLUGIN)
    base = {"dataset.name": "digits", "distillation.public_size": 120, "distillation.subset_size": 40}
    check_supported(load_config(None, {**base, "distillation.method": "dsfl"}))  # the built-in declares nothing: carried
    with pytest.raises(ConfigError) as err:
        check_supported(load_config(None, {**base, "distillation.method": "needs_a_server_view:SPEC"}))
    assert err.value.field == "distillation.method" and "its server reads every client's raw logits" in str(err.value)


# ---------------------------------------------------------------- instances passed from Python


@pytest.mark.parametrize(("name", "said"), [("ClaimsPersonal", "declares personal_model = True, but its client half implements no HoldsPersonalModel"),
                                            ("HidesPersonal", "declares no personal_model, but its client half implements HoldsPersonalModel")])
def test_an_instance_from_python_is_held_to_its_personal_model_declaration(plugin: Any, name: str, said: str) -> None:
    """``chillfl.run(aggregator=...)`` checks the class's declaration against its half as the class named in a config is:
    it ran (client_models silently followed the half, whatever the class declared)."""
    from chillfl.experiment import Plugged

    cfg = config(**{"algorithm.name": "custom"})
    with pytest.raises(ConfigError) as err:
        build_algorithm(cfg, model_for("fedavg"), Plugged(aggregator=getattr(plugin, name)()))
    assert err.value.field == "aggregator" and err.value.message == f"{name} {said} (chillfl.extend); make the two agree"
    build_algorithm(cfg, model_for("fedavg"), Plugged(aggregator=plugin.HoldsPersonal()))


class SteeringPolicy:
    """A plugin-like policy whose class declares that the clients' accuracy steers their training."""

    capabilities = Capabilities(steers_by_accuracy="my policy's accuracy-driven schedule")

    def temperature(self, client_id: int, round: int) -> float:
        return 1.0

    def observe(self, client_id: int, round: int, local_accuracy: float | None) -> None:
        return None

    def client_half(self, num_classes: int) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Any) -> None:
        return None


def test_a_policy_instance_from_python_declares_steers_by_accuracy_as_its_class_in_a_config_does(caplog: pytest.LogCaptureFixture) -> None:
    """The test-rows note follows the policy class's own ``capabilities`` when an instance is passed to ``chillfl.run``
    (it was skipped: "a policy passed from Python declares nothing here")."""
    import chillfl
    from chillfl import once

    small = {"dataset": {"name": "digits"}, "model": {"name": "mlp"}, "executor": "sequential", "device": "cpu",
             "federation": {"num_clients": 2, "rounds": 1}}
    once.forget()
    with caplog.at_level(logging.WARNING, logger="chillfl.experiment"):
        chillfl.run(config=small, policy=SteeringPolicy(), write=False, progress=False)
        chillfl.run(config={**small, "eval": {"validation": 0.2}}, policy=SteeringPolicy(), write=False, progress=False)
    notes = [r.getMessage() for r in caplog.records if r.name == "chillfl.experiment" and r.getMessage().startswith("note:")]
    assert notes == ["note: my policy's accuracy-driven schedule reads each client's accuracy on its evaluation split, drawn from the test rows "
                     "the run reports (eval.validation = 0): test rows steer training; eval.validation = 0.2 keeps them out"]


def test_a_policy_instance_passed_to_compare_gets_the_steering_caveat_under_the_table() -> None:
    """``chillfl.compare(policy=...)``: the variants run copies of the instance (``custom``), and the table's steering caveat
    asks its class, as the note does; with a validation split, no caveat."""
    import chillfl

    small = {"dataset": {"name": "digits"}, "model": {"name": "mlp"}, "executor": "sequential", "device": "cpu",
             "federation": {"num_clients": 2, "rounds": 1}}
    result = chillfl.compare(config=small, grid={"client.lr": [0.01, 0.1]}, policy=SteeringPolicy(), write=False, progress=False)
    assert "\n\nsteering caveat: my policy's accuracy-driven schedule in 'client.lr=0.01', 'client.lr=0.1' reads " in result.table
    validated = chillfl.compare(config={**small, "eval": {"validation": 0.2}}, grid={"client.lr": [0.01, 0.1]}, policy=SteeringPolicy(),
                                write=False, progress=False)
    assert "steering caveat" not in validated.table

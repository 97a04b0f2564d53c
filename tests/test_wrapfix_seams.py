"""A plugin wrapper holds its base's limits and is written with chillfl.extend alone; options-dependent capabilities
count at the Flower refusal and at PA3Fed's base check; a base loss's flags are declared and checked when its spec is
built; the Flower apps name the option that keeps a method off Flower from its declaration, not by the option's name.

Each plugin is a module written to a temporary folder (:func:`plugin_module`), named by import path as a user would.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch
from plugin_modules import plugin_module

import chillfl
from chillfl.aggregation.registry import check_algorithm, make_aggregator
from chillfl.config import config_from_dict, load_config
from chillfl.errors import ConfigError
from chillfl.training.local import LocalSpec, temperature_cross_entropy

WRAPPER = '''
from dataclasses import dataclass, field

from chillfl.extend import AlgorithmSpec, AroundAggregator, build_base


@dataclass(frozen=True)
class EmaOptions:
    base: str = "fedavg"
    base_options: dict = field(default_factory=dict)
    beta: float = 0.5


class Ema(AroundAggregator):
    """A server EMA over any base, written against chillfl.extend alone."""

    def __init__(self, base, beta):
        super().__init__(base)
        self.beta = beta

    def aggregate(self, global_params, results, round):
        new = self.base.aggregate(global_params, results, round)
        return {k: self.beta * global_params[k] + (1 - self.beta) * v if v.is_floating_point() else v for k, v in new.items()}


def build(o, ctx):
    base, terms = build_base(o, ctx)
    return Ema(base, o.beta), terms


EMA = AlgorithmSpec(EmaOptions, build, "server EMA over any base", wraps="base")
'''

MODULE = '''
from dataclasses import dataclass, replace
from typing import ClassVar

import torch

from chillfl.extend import AlgorithmSpec, Capabilities, FedAvg, Local, LocalProgram, LocalSpec, Personal, Stateless, Train


@dataclass(frozen=True)
class ServerSide:
    server_side: bool = False


OFF_FLOWER = AlgorithmSpec(ServerSide, lambda o, ctx: (FedAvg(), []), "demo",
                           capabilities_of=lambda o: Capabilities(on_flower="every client's data on the server" if o.server_side else None))


class Weighted(FedAvg):
    pass


@dataclass(frozen=True)
class OwnSteps:
    own_steps: bool = False


BASE = AlgorithmSpec(
    OwnSteps, lambda o, ctx: (Weighted(), []), "demo base", capabilities=Capabilities(takes_weights=True),
    capabilities_of=lambda o: Capabilities(takes_weights=True, not_a_base="own_steps runs a server step of its own" if o.own_steps else None),
)


@dataclass(frozen=True)
class MyEval:
    my_eval: str = "trained"


def asks(o):
    from chillfl.extend import after_average

    return after_average(Capabilities(), "my_eval", "averaged", o.my_eval == "averaged")


ASKS = AlgorithmSpec(MyEval, lambda o, ctx: (FedAvg(), []), "demo", capabilities_of=asks)


class Undeclared:
    """Reads the context but declares nothing: the step would call it with three arguments."""

    def __init__(self, base):
        self.base = base

    def __call__(self, logits, y, temperature, context):
        return self.base(logits + torch.log(context["my_counts"] + 1.0), y, temperature)


class Misspelt(Undeclared):
    use_context = True


class Declared(Undeclared):
    uses_context: ClassVar[bool] = True
    SEEN: ClassVar[list] = []

    def __call__(self, logits, y, temperature, *, context):
        Declared.SEEN.append(float(context["my_counts"].sum()))
        return super().__call__(logits, y, temperature, context)


def half_with(loss):
    @dataclass(frozen=True)
    class Adjusting(Stateless):
        def objectives(self, spec: LocalSpec):
            return (replace(spec, base_loss=loss(spec.base_loss)),)

        def train(self, local: Local) -> LocalProgram:
            counts = torch.bincount(local.y, minlength=10).to(torch.float32)
            out = yield Train(local.start, {**local.context, "my_counts": counts}, objective=0)
            return Personal(out.params, out.num_steps, out.mean_loss)

    class Adjusted(FedAvg):
        def client_half(self):
            return Adjusting()

    return Adjusted


UndeclaredAvg = half_with(Undeclared)
MisspeltAvg = half_with(Misspelt)
DeclaredAvg = half_with(Declared)
'''

TINY: dict[str, Any] = {
    "seed": 3, "device": "cpu", "threads": 1, "executor": "sequential", "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]},
    "federation": {"num_clients": 4, "clients_per_round": 4, "rounds": 1}, "client": {"lr": 0.05, "batch_size": 32},
}


@pytest.fixture()
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with plugin_module(tmp_path, monkeypatch, "wrapfix_plugins", MODULE), plugin_module(tmp_path, monkeypatch, "wrapfix_wrapper", WRAPPER):
        yield


def run(**over: Any) -> list[dict[str, Any]]:
    return list(chillfl.run(config={**TINY, **over}, write=False, progress=False).records)


# ---------------------------------------------------------------- F4: a plugin wrapper holds its base's limits


def test_a_plugin_wrapper_holds_its_bases_plain_sgd_limit(plugin: None) -> None:
    """It ran SCAFFOLD's maths under Adam: only the outer spec's own declaration was checked."""
    cfg = load_config(None, {**TINY, "client": {**TINY["client"], "optimizer": "adam"}})
    with pytest.raises(ConfigError) as err:
        check_algorithm("wrapfix_wrapper:EMA", {"base": "scaffold"}, cfg)
    assert err.value.field == "client.optimizer" and "so scaffold needs optimizer = 'sgd'" in err.value.message
    check_algorithm("wrapfix_wrapper:EMA", {"base": "fedprox"}, cfg)  # a base without the limit: fine


def test_a_plugin_wrapper_holds_its_bases_own_check(plugin: None) -> None:
    """Krum's f against the clients a round samples, named on the base's option."""
    cfg = load_config(None, TINY)
    with pytest.raises(ConfigError) as err:
        check_algorithm("wrapfix_wrapper:EMA", {"base": "krum", "base_options": {"f": 3}}, cfg)
    assert err.value.field.startswith("algorithm.base_options.")


def test_a_plugin_wrapper_is_written_with_chillfl_extend_alone_and_runs(plugin: None) -> None:
    records = run(algorithm={"name": "wrapfix_wrapper:EMA", "base": "fedprox", "base_options": {"mu": 0.01}, "beta": 0.5})
    assert len(records) == 1 and 0.0 <= records[0]["global_acc"] <= 1.0
    from chillfl.aggregation.fedprox import FedProx  # the base, built as the run builds its own
    from wrapfix_wrapper import Ema  # type: ignore[import-not-found]

    agg, terms = make_aggregator("wrapfix_wrapper:EMA", {"base": "fedprox", "base_options": {"mu": 0.01}}, num_clients=4,
                                 model=torch.nn.Linear(3, 2), seed=0)
    assert isinstance(agg, Ema) and isinstance(agg.base, FedProx) and len(terms) == 1  # FedProx's proximal term comes along


@pytest.mark.parametrize(("table", "field"), [
    ({"base": "nope"}, "algorithm.base"),
    ({"base": "fedprox", "base_options": {"mu_typo": 1.0}}, "algorithm.base_options.mu_typo"),
])
def test_the_public_base_builder_names_the_line_the_user_wrote(plugin: None, table: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        make_aggregator("wrapfix_wrapper:EMA", table, num_clients=4, model=torch.nn.Linear(3, 2), seed=0)
    assert err.value.field == field


def test_pa3fed_over_scaffold_still_refuses_adam_once_its_own_check_no_longer_repeats_the_bases() -> None:
    cfg = load_config(None, {**TINY, "client": {**TINY["client"], "optimizer": "adam"}})
    with pytest.raises(ConfigError) as err:
        check_algorithm("pa3fed", {"base": "scaffold"}, cfg)
    assert err.value.field == "client.optimizer" and "so scaffold needs optimizer = 'sgd'" in err.value.message


# ---------------------------------------------------------------- F5: options-dependent capabilities count


def test_the_flower_refusal_reads_what_a_method_declares_under_its_options(plugin: None, tmp_path: Path) -> None:
    from chillfl.flower.apps import check_supported

    cfg = config_from_dict({**TINY, "out_dir": str(tmp_path), "algorithm": {"name": "wrapfix_plugins:OFF_FLOWER", "server_side": True}})
    with pytest.raises(ConfigError) as err:
        check_supported(cfg)
    assert err.value.field == "algorithm.name" and err.value.message.startswith("every client's data on the server; run it with chillfl's own runtime")
    check_supported(config_from_dict({**TINY, "out_dir": str(tmp_path), "algorithm": {"name": "wrapfix_plugins:OFF_FLOWER"}}))
    wrapped = {"name": "pa3fed", "base": "wrapfix_plugins:BASE"}  # a wrapped base's declaration too
    check_supported(config_from_dict({**TINY, "out_dir": str(tmp_path), "algorithm": wrapped}))


def test_pa3fed_refuses_a_base_that_declares_not_a_base_under_its_options(plugin: None) -> None:
    cfg = load_config(None, TINY)
    with pytest.raises(ConfigError) as err:
        check_algorithm("pa3fed", {"base": "wrapfix_plugins:BASE", "base_options": {"own_steps": True}}, cfg)
    assert err.value.field == "algorithm.base" and "own_steps runs a server step of its own" in err.value.message
    with pytest.raises(ConfigError):
        make_aggregator("pa3fed", {"base": "wrapfix_plugins:BASE", "base_options": {"own_steps": True}}, num_clients=4,
                        model=torch.nn.Linear(3, 2), seed=0)
    check_algorithm("pa3fed", {"base": "wrapfix_plugins:BASE"}, cfg)


# ---------------------------------------------------------------- F6: a base loss's flags, declared and checked


def test_a_base_loss_that_reads_the_context_undeclared_is_one_config_error_not_a_type_error_mid_run(plugin: None) -> None:
    with pytest.raises(ConfigError) as err:
        run(algorithm={"name": "wrapfix_plugins:UndeclaredAvg"})
    assert err.value.field == "algorithm.name" and "declare uses_context = True" in err.value.message
    assert "missing a required argument: 'context'" in err.value.message


def test_a_misspelt_loss_flag_is_named(plugin: None) -> None:
    with pytest.raises(ConfigError) as err:
        run(algorithm={"name": "wrapfix_plugins:MisspeltAvg"})
    assert err.value.field == "algorithm.name" and "sets use_context" in err.value.message and "declare uses_context" in err.value.message


def test_a_declared_context_loss_gets_the_context(plugin: None) -> None:
    from wrapfix_plugins import Declared

    Declared.SEEN.clear()
    run(algorithm={"name": "wrapfix_plugins:DeclaredAvg"})
    assert Declared.SEEN and all(n > 0 for n in Declared.SEEN)  # each client's label counts, through the context


class FeaturesWithoutKeywords:
    uses_features = True

    def __call__(self, logits: torch.Tensor, y: torch.Tensor, temperature: Any, context: Any) -> torch.Tensor:
        return temperature_cross_entropy(logits, y, temperature)


def test_flags_that_ask_for_more_than_the_signature_takes_are_refused_when_the_spec_is_built() -> None:
    from chillfl.training.local import check_base_loss

    with pytest.raises(ConfigError) as err:
        LocalSpec(epochs=1, batch_size=8, base_loss=FeaturesWithoutKeywords(), method_field="aggregator")
    assert err.value.field == "aggregator" and "features=..." in err.value.message
    spec = LocalSpec(epochs=1, batch_size=8)  # the plain loss: nothing to declare
    with pytest.raises(ConfigError):
        __import__("dataclasses").replace(spec, base_loss=FeaturesWithoutKeywords())
    check_base_loss(max, "algorithm.name")  # no signature to read: trusted


def test_fedlc_and_fedrs_losses_pass_the_check_with_and_without_a_head_bias() -> None:
    from chillfl.aggregation.logit_adjust import AdjustedLoss
    from chillfl.training.local import check_base_loss

    for bias in (None, "fc.bias"):
        check_base_loss(AdjustedLoss(temperature_cross_entropy, lambda z, n: z, "k", bias), "algorithm.name")


# ---------------------------------------------------------------- F7: the option that keeps a method off Flower, declared


def test_a_declared_after_average_option_names_the_refusal(plugin: None, tmp_path: Path) -> None:
    from chillfl.flower.apps import check_supported

    cfg = config_from_dict({**TINY, "out_dir": str(tmp_path), "algorithm": {"name": "wrapfix_plugins:ASKS", "my_eval": "averaged"}})
    with pytest.raises(ConfigError) as err:
        check_supported(cfg)
    assert err.value.field == "algorithm.my_eval" and err.value.message.startswith('"averaged" measures each client\'s own model on the server')


def test_a_wrapped_bases_local_eval_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    from chillfl.flower.apps import check_supported

    table = {"name": "pa3fed", "base": "fedper", "base_options": {"local_eval": "averaged"}}
    with pytest.raises(ConfigError) as err:
        check_supported(config_from_dict({**TINY, "out_dir": str(tmp_path), "algorithm": table}))
    assert err.value.field == "algorithm.base_options.local_eval"


def test_the_flower_apps_name_no_option_of_one_method() -> None:
    import chillfl.flower.apps as apps

    assert "local_eval" not in inspect.getsource(apps)  # the refusal is declared by each method (after_average)


def test_the_docs_wrapper_example_runs_by_import_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """extending.md's EMA over FedProx (its my_methods.py, as the page's own tests write it)."""
    from test_extending_docs import files

    with plugin_module(tmp_path, monkeypatch, "my_methods", files()["my_methods.py"]):
        records = run(algorithm={"name": "my_methods:EMA", "base": "fedprox", "base_options": {"mu": 0.01}})
    assert len(records) == 1 and 0.0 <= records[0]["global_acc"] <= 1.0

"""A method passed from Python as an instance records every option it runs with in the saved config (``[algorithm.options]``).

The record kept an instance's ``options`` only when every value was a number, flag or name: one unset (None) value,
a tuple of them or a nested table dropped the whole table, and built-in aggregators that kept their options as
attributes recorded none, so ``chillfl.run(aggregator=FedProx(FedProxOptions(mu=0.1)))`` saved ``mu`` nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

from chillfl.aggregation.registry import algorithm_options, make_aggregator, registered_algorithms
from chillfl.errors import ConfigError
from chillfl.experiment import options_record
from chillfl.extend import FedAvg
from chillfl.models import build_model
from chillfl.resolve import option_table
from chillfl.temperature.registry import make_policy, policy_options, registered_policies

REQUIRED = {"norm_bound": {"max_norm": 1.0}}
"""Options without a default, given to build the method at all."""
MODELS = {"fedalign": ("resnet20", (3, 32, 32))}
"""Methods that need a particular model; the others build on a small CNN with batch norm (FedBN needs one)."""


def _set(table: Any) -> Any:
    """A table as TOML can hold it: unset (None) options left out, as the resolved config leaves them out."""
    if isinstance(table, dict):
        return {k: _set(v) for k, v in table.items() if v is not None}
    if isinstance(table, (list, tuple)):
        return [_set(v) for v in table]
    return table


TERM_OPTIONS = {"fedalign"}
"""Methods whose options are their loss term's (FedAlign: plain :class:`FedAvg` and the FedAlign term): the aggregator
records FedAvg's ``weighting``, the term its own options (``[algorithm] terms``)."""


def _built(name: str) -> Any:
    model_name, shape = MODELS.get(name, ("flexchill_cnn", (3, 8, 8)))
    model = build_model(model_name, shape, 10, {"batch_norm": True} if model_name == "flexchill_cnn" else {}, seed=0)
    aggregator, _ = make_aggregator(name, REQUIRED.get(name, {}), num_clients=4, model=model, seed=0, client_momentum=0.0, rounds=2, clients_per_round=2)
    return aggregator


@pytest.mark.parametrize("name", sorted(set(registered_algorithms()) - TERM_OPTIONS))
def test_every_builtin_aggregator_passed_as_an_instance_records_all_of_its_options(name: str) -> None:
    """Every option of its spec, at the value the instance runs with: an unset one filled in at build time (FedNova's
    ``momentum`` from ``client.momentum`` = 0.0) is recorded with that value."""
    aggregator = _built(name)
    spec = registered_algorithms()[name]
    parsed = option_table(algorithm_options(spec, name, REQUIRED.get(name, {})))
    record = options_record(aggregator, "algorithm").get("options", {})
    assert {k: v for k, v in record.items() if parsed.get(k) is not None} == _set(parsed)
    assert all(k in parsed for k in record)


def test_a_method_whose_options_are_its_terms_records_fedavgs_weighting() -> None:
    assert {name: options_record(_built(name), "algorithm") for name in TERM_OPTIONS} == {"fedalign": {"options": {"weighting": "samples"}}}


@pytest.mark.parametrize("name", sorted(registered_policies()))
def test_every_builtin_policy_passed_as_an_instance_records_all_of_its_options(name: str) -> None:
    table = {"policy": name, **({"value": 0.5} if name == "fixed" else {})}
    policy = make_policy(table, np.ones((4, 10)))
    options = policy_options(registered_policies()[name], name, {k: v for k, v in table.items() if k != "policy"})
    expected = _set(option_table(options)) or {"value": 1.0}  # ``none`` is the constant policy at T = 1
    assert options_record(policy, "temperature") == {"options": expected}


@dataclass(frozen=True)
class Inner:
    steps: int = 3


@dataclass(frozen=True)
class Nested:
    scale: float = 0.5
    start: float | None = None
    pair: tuple[int, int] = (1, 2)
    inner: Inner = Inner()
    extra: dict[str, float] = field(default_factory=lambda: {"a": 1.0})


@dataclass(frozen=True)
class WithTensor:
    scale: float = 0.5
    prior: Any = None


class Rule(FedAvg):
    def __init__(self, options: Any) -> None:
        super().__init__()
        self.options = options


def test_unset_values_tuples_and_nested_tables_are_recorded_not_dropped() -> None:
    assert options_record(Rule(Nested()), "algorithm") == {"options": {"scale": 0.5, "pair": [1, 2], "inner": {"steps": 3}, "extra": {"a": 1.0}}}


def test_an_option_toml_cannot_hold_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError) as err:
        options_record(Rule(WithTensor(prior=torch.zeros(2))), "algorithm")
    assert err.value.field == "algorithm.options.prior" and "Tensor" in err.value.message


def test_a_builtin_aggregator_passed_from_python_has_its_options_in_the_saved_config(tmp_path: Any) -> None:
    """``aggregator=FedProx(FedProxOptions(mu=0.1))`` saved ``[algorithm] name = "custom"`` and its class only: ``mu`` nowhere."""
    import chillfl
    from chillfl.aggregation.fedprox import FedProx, FedProxOptions
    from chillfl.config import load_config

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(80, 6, generator=g), torch.arange(80) % 3
    data = chillfl.TensorData(x[:60], y[:60], x[60:], y[60:], num_classes=3)
    result = chillfl.run(torch.nn.Linear(6, 3), data, {"federation": {"num_clients": 2, "rounds": 1}}, aggregator=FedProx(FedProxOptions(mu=0.1)),
                         out_dir=tmp_path, progress=False)
    assert result.folder is not None and result.config.algorithm["options"] == {"mu": 0.1, "weighting": "samples"}
    assert load_config(result.folder / "config.toml").algorithm["options"] == {"mu": 0.1, "weighting": "samples"}


# ---------------------------------------------------------------- resuming a run saved before options were recorded


def _stopped_after_1(record: dict[str, Any], run: Any) -> None:
    if record["round"] == 1:
        run.stop("test")


def _tiny(tmp_path: Any, aggregator: Any, **parts: Any) -> Any:
    """A 2-round run on a linear model, stopped after round 1 (checkpoint kept)."""
    import chillfl

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(80, 6, generator=g), torch.arange(80) % 3
    data = chillfl.TensorData(x[:60], y[:60], x[60:], y[60:], num_classes=3)
    torch.manual_seed(0)
    cut = chillfl.run(torch.nn.Linear(6, 3), data, {"federation": {"num_clients": 2, "rounds": 2}, "checkpoint": {"every": 1}}, aggregator=aggregator,
                      out_dir=tmp_path, progress=False, callbacks=[_stopped_after_1], **parts)
    return cut, data


def _as_older_chillfl_saved_it(folder: Any, edit: Any) -> None:
    """Rewrite ``folder``'s config.toml by ``edit`` (its raw tables) as an older chillfl wrote it, and sign the checkpoint anew
    (the checksums an older chillfl would have written for that file)."""
    from chillfl.config import read_toml
    from chillfl.storage.checkpoint import read_checkpoint, write_state
    from chillfl.storage.results import to_toml
    from chillfl.storage.run_folder import run_metadata

    raw = read_toml(folder / "config.toml")
    edit(raw)
    text = to_toml(raw).encode("utf-8")
    (folder / "config.toml").write_bytes(text)
    tree, run = read_checkpoint(folder / "checkpoint.safetensors")
    write_state(folder / "checkpoint.safetensors", tree, run_metadata(text, run["metrics_bytes"], run["metrics_sha256"]))


def test_a_run_saved_without_options_resumes_on_an_instance_of_its_class(tmp_path: Any) -> None:
    """An older chillfl saved ``[algorithm] name = "custom"`` and the class, no ``[algorithm.options]``: resuming it with the same
    class was refused as "not what the run was made with" (its options against none). With no options saved, the class decides."""
    import chillfl
    from chillfl.aggregation.fedprox import FedProx, FedProxOptions
    from chillfl.temperature.base import ConstantTemperature

    cut, data = _tiny(tmp_path, FedProx(FedProxOptions(mu=0.1)), policy=ConstantTemperature(0.5))
    assert cut.folder is not None and "options" in cut.config.algorithm and "options" in cut.config.temperature
    _as_older_chillfl_saved_it(cut.folder, lambda raw: (raw["algorithm"].pop("options"), raw["temperature"].pop("options")))
    torch.manual_seed(0)
    done = chillfl.resume(cut.folder, torch.nn.Linear(6, 3), data, aggregator=FedProx(FedProxOptions(mu=0.1)), policy=ConstantTemperature(0.5), progress=False)
    assert [r["round"] for r in done.records] == [1, 2]


def test_a_run_saved_with_options_is_still_checked_strictly(tmp_path: Any) -> None:
    import chillfl
    from chillfl.aggregation.fedprox import FedProx, FedProxOptions

    cut, data = _tiny(tmp_path, FedProx(FedProxOptions(mu=0.1)))
    assert cut.folder is not None
    with pytest.raises(ConfigError) as err:
        chillfl.resume(cut.folder, torch.nn.Linear(6, 3), data, aggregator=FedProx(FedProxOptions(mu=0.2)), progress=False)
    assert err.value.field == "aggregator" and "not what the run was made with" in err.value.message and "0.2" in err.value.message
    _as_older_chillfl_saved_it(cut.folder, lambda raw: raw["algorithm"].__setitem__("class", "chillfl.aggregation.robust.Krum"))
    with pytest.raises(ConfigError) as err:  # an older record names its class all the same
        chillfl.resume(cut.folder, torch.nn.Linear(6, 3), data, aggregator=FedProx(FedProxOptions(mu=0.1)), progress=False)
    assert err.value.field == "aggregator" and "Krum" in err.value.message


# ---------------------------------------------------------------- plain FedAvg's weighting


def test_plain_fedavgs_weighting_is_recorded_and_read_back_on_resume(tmp_path: Any) -> None:
    """``aggregator=FedAvg(weighting="uniform")`` saved no options: the weighting it ran with was recorded nowhere."""
    import chillfl
    from chillfl.config import load_config

    cut, data = _tiny(tmp_path, FedAvg(weighting="uniform"))
    assert cut.folder is not None and cut.config.algorithm["options"] == {"weighting": "uniform"}
    assert load_config(cut.folder / "config.toml").algorithm["options"] == {"weighting": "uniform"}
    with pytest.raises(ConfigError) as err:
        chillfl.resume(cut.folder, torch.nn.Linear(6, 3), data, aggregator=FedAvg(), progress=False)
    assert err.value.field == "aggregator" and "'uniform'" in err.value.message and "'samples'" in err.value.message
    torch.manual_seed(0)
    done = chillfl.resume(cut.folder, torch.nn.Linear(6, 3), data, aggregator=FedAvg(weighting="uniform"), progress=False)
    assert [r["round"] for r in done.records] == [1, 2] and done.config.algorithm["options"] == {"weighting": "uniform"}


class SetsFirst(FedAvg):
    """A subclass that keeps its options before FedAvg's ``__init__`` runs."""

    def __init__(self) -> None:
        self.options = Inner(steps=5)
        super().__init__("uniform")


class OnTheClass(FedAvg):
    """A subclass whose options are a class attribute."""

    options = Inner(steps=7)


class Undeclared(FedAvg):
    """A subclass keeping no options of its own."""


def test_a_subclass_keeps_its_own_options_and_records_none_of_fedavgs() -> None:
    assert options_record(SetsFirst(), "algorithm") == {"options": {"steps": 5}}
    assert OnTheClass().options == Inner(steps=7) and options_record(OnTheClass(), "algorithm") == {}
    assert options_record(Undeclared(), "algorithm") == {}
    assert options_record(Rule(Nested()), "algorithm")["options"]["scale"] == 0.5


# ---------------------------------------------------------------- loss terms passed from Python


@dataclass(frozen=True)
class ShrinkOptions:
    lam: float = 0.01
    keys: tuple[str, ...] = ("weight",)


class Shrink:
    """lam * sum ||w||^2 over the parameters named in ``keys``: a term that keeps its options dataclass."""

    reads: tuple[str, ...] = ()

    def __init__(self, options: ShrinkOptions = ShrinkOptions()) -> None:
        self.options = options

    def __call__(self, params: Any, context: Any) -> torch.Tensor:
        return self.options.lam * sum((params[k] ** 2).sum() for k in self.options.keys)


class Plain:
    """A term keeping no options: recorded by its class path alone."""

    reads: tuple[str, ...] = ()

    def __call__(self, params: Any, context: Any) -> torch.Tensor:
        return 0.0 * params["weight"].sum()


def test_a_terms_options_are_recorded_and_checked_on_resume(tmp_path: Any) -> None:
    """``terms=[Shrink(ShrinkOptions(lam=0.3))]`` saved ``terms = ["...Shrink"]``: the term's options were recorded nowhere."""
    import chillfl
    from chillfl.config import load_config

    cut, data = _tiny(tmp_path, FedAvg(), terms=[Shrink(ShrinkOptions(lam=0.3)), Plain()])
    assert cut.folder is not None
    recorded = [{"class": f"{__name__}.Shrink", "options": {"lam": 0.3, "keys": ["weight"]}}, f"{__name__}.Plain"]
    assert cut.config.algorithm["terms"] == recorded and load_config(cut.folder / "config.toml").algorithm["terms"] == recorded
    with pytest.raises(ConfigError) as err:
        chillfl.resume(cut.folder, torch.nn.Linear(6, 3), data, aggregator=FedAvg(), terms=[Shrink(ShrinkOptions(lam=0.5)), Plain()], progress=False)
    assert err.value.field == "aggregator" and "terms" in err.value.message and "0.5" in err.value.message
    torch.manual_seed(0)
    done = chillfl.resume(cut.folder, torch.nn.Linear(6, 3), data, aggregator=FedAvg(), terms=[Shrink(ShrinkOptions(lam=0.3)), Plain()], progress=False)
    assert [r["round"] for r in done.records] == [1, 2]


def test_a_term_saved_by_its_class_alone_resumes_on_an_instance_of_it(tmp_path: Any) -> None:
    """An older chillfl recorded each term's class path only: the class decides, as for the aggregator's options."""
    import chillfl

    cut, data = _tiny(tmp_path, FedAvg(), terms=[Shrink(ShrinkOptions(lam=0.3))])
    assert cut.folder is not None
    _as_older_chillfl_saved_it(cut.folder, lambda raw: raw["algorithm"].__setitem__("terms", [f"{__name__}.Shrink"]))
    with pytest.raises(ConfigError) as err:  # another class is refused all the same
        chillfl.resume(cut.folder, torch.nn.Linear(6, 3), data, aggregator=FedAvg(), terms=[Plain()], progress=False)
    assert err.value.field == "aggregator" and "Plain" in err.value.message
    torch.manual_seed(0)
    done = chillfl.resume(cut.folder, torch.nn.Linear(6, 3), data, aggregator=FedAvg(), terms=[Shrink(ShrinkOptions(lam=0.3))], progress=False)
    assert [r["round"] for r in done.records] == [1, 2]


def test_a_terms_option_toml_cannot_hold_is_refused_naming_it() -> None:
    from chillfl.experiment import Plugged, plugged_records

    with pytest.raises(ConfigError) as err:
        plugged_records(Plugged(FedAvg(), (Plain(), Shrink(ShrinkOptions(keys=(torch.zeros(1),))))))  # type: ignore[arg-type]
    assert err.value.field == "algorithm.terms[1].options.keys[0]"


def test_saved_options_an_instance_does_not_keep_are_not_what_the_run_was_made_with(tmp_path: Any) -> None:
    """The check ran over the instance's record only: options the saved run recorded, of an instance keeping none, passed."""
    import chillfl

    cut, data = _tiny(tmp_path, Undeclared())
    assert cut.folder is not None and "options" not in cut.config.algorithm
    _as_older_chillfl_saved_it(cut.folder, lambda raw: raw["algorithm"].__setitem__("options", {"weighting": "uniform"}))
    with pytest.raises(ConfigError) as err:
        chillfl.resume(cut.folder, torch.nn.Linear(6, 3), data, aggregator=Undeclared(), progress=False)
    assert err.value.field == "aggregator" and "options {'weighting': 'uniform'}, got None" in err.value.message

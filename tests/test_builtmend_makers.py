"""rev110b 2-5: a plugin spec's built instance of a class another registered spec makes (``DnC()``, ``Scaffold(2)``) is
bound to the run even where the spec lists the class in its own ``makes=`` (a ``dataclasses.replace`` of a built-in with
another build drew with seed None, 0 in every run), bound on a copy (one shared instance was refused on a comparison's
second seed), its refusals of options the config set named by that config field (``algorithm.f``), and found without
importing every built-in module."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from dataclasses import dataclass, replace
from typing import Any

import pytest
from torch import nn

import chillfl
from chillfl.aggregation import dnc
from chillfl.aggregation.dnc import DnC, DnCOptions
from chillfl.aggregation.registry import make_aggregator
from chillfl.aggregation.scaffold import Scaffold, ScaffoldOptions
from chillfl.errors import ConfigError
from chillfl.extend import AlgorithmSpec
from test_apifix_hook_calls import CONFIG, _data


@dataclass(frozen=True)
class OwnF:
    """A plugin's own options with a field named as DnC's, which its build does not pass on."""

    f: int = 1


class Holding(DnC):
    """A DnC that keeps the run's model its builder is given."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model


DERIVED_NOSEED = replace(dnc.SPEC, build=lambda o, ctx: (DnC(None, o), []), summary="DnC derived, its build leaving the seed out")
MAKES_DNC = AlgorithmSpec(DnCOptions, lambda o, ctx: (DnC(None, o), []), "DnC, declared its own", makes=(DnC,))
SHARED = DnC(options=DnCOptions(f=1))
DNC_SHARED = AlgorithmSpec(DnCOptions, lambda o, ctx: (SHARED, []), "one DnC object, every build")
DNC_PASS = AlgorithmSpec(DnCOptions, lambda o, ctx: (DnC(ctx.seed, o), []), "DnC with DnC's options")
DNC_OWN_F = AlgorithmSpec(OwnF, lambda o, ctx: (DnC(ctx.seed, DnCOptions(f=2)), []), "DnC removing 2, whatever its own f")
HOLDING = AlgorithmSpec(DnCOptions, lambda o, ctx: (Holding(ctx.model), []), "a DnC holding the run's model")
class LockedTerm:
    """A parameter term holding what copy.deepcopy cannot copy (a lock)."""

    reads = ()

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __call__(self, params: Any, context: Any) -> Any:
        return next(iter(params.values())).sum() * 0


LOCKED = LockedTerm()
DNC_LOCKED_TERM = AlgorithmSpec(DnCOptions, lambda o, ctx: (DnC(None, o), [LOCKED]), "DnC with a term holding a lock")
SCAFFOLD_PASS = AlgorithmSpec(ScaffoldOptions, lambda o, ctx: (Scaffold(ctx.num_clients, o), []), "SCAFFOLD with SCAFFOLD's options")


def _named(spec: str, **more: Any) -> dict[str, Any]:
    return {**CONFIG, "algorithm": {"name": f"{__name__}:{spec}", **more}}


def _run(config: dict[str, Any]) -> Any:
    return chillfl.run(model=nn.Linear(8, 3), data=_data(), config=config, write=False, progress=False)


def _built(spec: str, seed: int) -> Any:
    return make_aggregator(f"{__name__}:{spec}", None, num_clients=4, model=nn.Linear(8, 3), seed=seed)[0]


@pytest.mark.parametrize("spec", ["DERIVED_NOSEED", "MAKES_DNC"])
def test_a_spec_making_dnc_itself_still_draws_from_the_runs_seed(spec: str) -> None:
    """rev110b 2: its class in the spec's own makes= skipped the bind, so each seed drew as seed 0."""
    assert [_built(spec, seed).seed for seed in (3, 4)] == [3, 4]


def test_a_derived_spec_is_checked_once_on_its_own_option() -> None:
    """The makes= exemption stays for the checks: DnC's check refuses f = 2 of 2 clients once, as dnc's own name does."""
    with pytest.raises(ConfigError) as by_dnc:
        _run({**CONFIG, "algorithm": {"name": "dnc", "f": 2}})
    with pytest.raises(ConfigError) as derived:
        _run(_named("DERIVED_NOSEED", f=2))
    assert (derived.value.field, derived.value.message) == (by_dnc.value.field, by_dnc.value.message) == ("algorithm.f", by_dnc.value.message)


def test_a_shared_instance_is_bound_on_a_copy_at_each_seed() -> None:
    """rev110b 3: the first build wrote seed 0 into the one object, and seed 1 was refused ("got 0; pass seed=1")."""
    first, second = _built("DNC_SHARED", 0), _built("DNC_SHARED", 1)
    assert (first.seed, second.seed, SHARED.seed) == (0, 1, None)
    assert first is not SHARED and second is not SHARED and second.options == SHARED.options


def test_two_runs_of_a_shared_instance_both_run() -> None:
    assert [_run({**_named("DNC_SHARED"), "seed": seed}) is not None for seed in (3, 4)] == [True, True]


def test_only_the_aggregator_is_copied_its_terms_stay_as_built() -> None:
    """rev110c 2: the terms were copied with the aggregator, so a term holding a lock was refused (on algorithm.name,
    blaming DnC) and a term holding large objects was copied every build; the bind writes nothing into a term."""
    built, terms = make_aggregator(f"{__name__}:DNC_LOCKED_TERM", None, num_clients=4, model=nn.Linear(8, 3), seed=6)[:2]
    assert isinstance(built, DnC) and built.seed == 6 and LOCKED in list(terms)


def test_the_copy_keeps_the_runs_model() -> None:
    """What the builder gave the instance of the run (its model) stays the run's, not a copy of it."""
    model = nn.Linear(8, 3)
    built = make_aggregator(f"{__name__}:HOLDING", None, num_clients=4, model=model, seed=5)[0]
    assert isinstance(built, Holding) and built.model is model and built.seed == 5


def test_a_passed_through_option_is_refused_on_its_config_field() -> None:
    """rev110b 4: f = 2 written as algorithm.f was refused on algorithm.name as "(aggregator.options.f: ...) refused as one
    passed from Python is"; it is the config's algorithm.f, as dnc's own name refuses it."""
    with pytest.raises(ConfigError) as by_dnc:
        _run({**CONFIG, "algorithm": {"name": "dnc", "f": 2}})
    with pytest.raises(ConfigError) as passed:
        _run(_named("DNC_PASS", f=2))
    assert passed.value.field == "algorithm.f"
    assert passed.value.message.startswith(by_dnc.value.message) and "'dnc'" in passed.value.message
    assert "passed from Python" not in passed.value.message and "aggregator.options" not in passed.value.message


def test_a_passed_through_option_the_bind_refuses_is_named_by_its_config_field() -> None:
    """The bind's refusal (SCAFFOLD's momentum against client.momentum) on the option the config wrote."""
    with pytest.raises(ConfigError) as err:
        _run({**_named("SCAFFOLD_PASS", momentum=0.5), "client": {"momentum": 0.9}})
    assert err.value.field == "algorithm.momentum" and "must equal client.momentum = 0.9" in err.value.message


def test_an_option_the_build_did_not_pass_keeps_the_specs_field() -> None:
    """A field of the spec's options by the same name whose value the build did not use: not the config's line."""
    with pytest.raises(ConfigError) as err:
        _run(_named("DNC_OWN_F"))
    assert err.value.field == "algorithm.name" and "(aggregator.options.f: DnC removes floor(c f) = 2" in err.value.message


COUNT = """
import sys
from torch import nn
from chillfl.aggregation.dnc import DnC
from chillfl.aggregation.registry import BuildContext, bind_instance, built_by
def aggregation() -> set[str]:
    return {m for m in sys.modules if m.startswith("chillfl.aggregation.")}
before = aggregation()
found = built_by(DnC())
bound = DnC()
bind_instance(bound, BuildContext(num_clients=4, model=nn.Linear(8, 3), seed=3, section="aggregator.options"))
print(found[0] if found else None, bound.seed, sorted(aggregation() - before))
"""


def test_finding_an_instances_maker_imports_no_other_built_in_module() -> None:
    """rev110b 5: finding the spec that makes an instance's class (built_by, through which a plugin spec's built DnC and
    one passed from Python are bound and checked) imported every module of chillfl.aggregation (56 more); counted in a
    fresh interpreter, it imports none, and finds the same spec."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(COUNT)], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip() == "dnc 3 []", out


def test_every_built_in_class_is_registered_by_the_module_that_defines_it() -> None:
    """What makes built_by's lookup (_MADE alone) complete: an instance's class exists only once its module ran, and that
    module registered the spec that makes it. A built-in made elsewhere would need its module imported there."""
    from chillfl.aggregation import registry

    specs = registry.registered_algorithms()
    homes = {name: registry._REGISTRY._homes[name] for name in specs}
    elsewhere = [(name, cls.__qualname__) for name, spec in specs.items() for cls in spec.makes if cls.__module__ != homes[name]]
    assert elsewhere == []


class Made:
    """A class two specs make, for the registry's bookkeeping alone."""


def test_a_class_another_spec_makes_stays_found_after_its_first_maker_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """built_by read every registered spec's makes; it reads _MADE, so a replaced first maker hands the class on."""
    from chillfl.aggregation import registry

    registry.registered_algorithms()
    monkeypatch.setattr(registry, "_MADE", dict(registry._MADE))
    monkeypatch.setattr(registry._REGISTRY, "_specs", dict(registry._REGISTRY._specs))
    monkeypatch.setattr(registry._REGISTRY, "_homes", dict(registry._REGISTRY._homes))
    registry.register_algorithm("builtmend_first", AlgorithmSpec(OwnF, lambda o, ctx: (DnC(), []), "first", makes=(Made,)))
    registry.register_algorithm("builtmend_alias", AlgorithmSpec(OwnF, lambda o, ctx: (DnC(), []), "alias", makes=(Made,)))
    registry.register_algorithm("builtmend_first", AlgorithmSpec(OwnF, lambda o, ctx: (DnC(), []), "first, no longer Made"))
    found = registry.built_by(Made())
    assert found is not None and found[0] == "builtmend_alias"

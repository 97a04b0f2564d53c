"""rev111 1-2: the copies a run makes of a method's parts.

1. An aggregator, term or policy passed from Python that copy.deepcopy cannot copy (it holds a lock) ended the run with
   copy.py's ``TypeError: cannot pickle '_thread.lock' object``; it is one ConfigError naming ``aggregator``,
   ``terms[i]`` or ``policy``, as a plugin build's uncopyable aggregator is refused on its field.
2. A plugin build returning one aggregator that is also its own term had the aggregator mapped to itself in the copy's
   memo: the "copy" was the shared object, the run's seed was written into it, and the next seed was refused.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from torch import nn

import chillfl
import chillfl.extend
from chillfl.aggregation.dnc import DnC, DnCOptions
from chillfl.aggregation.registry import make_aggregator
from chillfl.errors import ConfigError
from chillfl.experiment import Plugged, build_algorithm
from chillfl.extend import AlgorithmSpec
from test_apifix_hook_calls import CONFIG, _data
from test_builtmend_makers import LockedTerm


class LockedFedAvg(chillfl.extend.FedAvg):
    """FedAvg holding a lock."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()


class LockedTemperature(chillfl.extend.ConstantTemperature):
    """T = 1, holding a lock."""

    def __init__(self) -> None:
        super().__init__(1.0)
        self.lock = threading.Lock()


class FedAvgWithTerm(chillfl.extend.FedAvg):
    """A server rule that is also its own (zero) loss term."""

    reads = ()

    def __call__(self, params: Any, context: Any) -> Any:
        return next(iter(params.values())).sum() * 0


class DnCWithTerm(DnC):
    """DnC that is also its own (zero) loss term."""

    reads = ()

    def __call__(self, params: Any, context: Any) -> Any:
        return next(iter(params.values())).sum() * 0


SHARED = DnCWithTerm(options=DnCOptions(f=1))
SELF_TERM = AlgorithmSpec(DnCOptions, lambda o, ctx: (SHARED, [SHARED]), "one DnC, its own term, every build")
LOCKED = LockedTerm()
TWO_TERMS = AlgorithmSpec(DnCOptions, lambda o, ctx: (SHARED, [LOCKED, SHARED]), "one DnC, a term holding a lock, then itself")


def _refusal(**parts: Any) -> ConfigError:
    config = {**CONFIG, "algorithm": {"name": "custom"}}
    if "policy" in parts:
        config["temperature"] = {"policy": "custom"}
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=nn.Linear(8, 3), data=_data(), config=config, write=False, progress=False,
                    **{"aggregator": chillfl.extend.FedAvg(), **parts})
    return err.value


@pytest.mark.parametrize(("parts", "field", "name"), [
    ({"terms": [LockedTerm()]}, "terms[0]", "LockedTerm"),
    ({"terms": [FedAvgWithTerm(), LockedTerm()]}, "terms[1]", "LockedTerm"),
    ({"aggregator": LockedFedAvg()}, "aggregator", "LockedFedAvg"),
    ({"policy": LockedTemperature()}, "policy", "LockedTemperature"),
])
def test_an_uncopyable_part_from_python_is_one_line_on_its_field(parts: dict[str, Any], field: str, name: str) -> None:
    err = _refusal(**parts)
    assert err.field == field
    assert err.message.startswith(f"{name}: the run works on a copy") and "cannot pickle '_thread.lock' object" in err.message


def test_an_aggregator_from_python_that_is_its_own_term_stays_one_object_in_the_copy() -> None:
    """Copied apart, the rule and the term were two objects with two states where the caller had one."""
    agg = FedAvgWithTerm()
    model = nn.Linear(8, 3)
    config = chillfl.make_config({**CONFIG, "algorithm": {"name": "custom"}})
    built, terms = build_algorithm(config, model, Plugged(aggregator=agg, terms=(agg,)))
    assert built is not agg and terms[0] is built


def test_a_plugin_aggregator_that_is_its_own_term_is_copied_for_each_seed() -> None:
    """rev111 2: seed 1 was refused (``aggregator.seed: must equal the run's seed = 1, got 0``), SHARED.seed set to 0."""
    seed_before = SHARED.seed
    for seed in (0, 1):
        built, terms = make_aggregator(f"{__name__}:SELF_TERM", None, num_clients=4, model=nn.Linear(8, 3), seed=seed)[:2]
        assert built is not SHARED and built.seed == seed and list(terms) == [built] and terms[0] is built
    assert SHARED.seed == seed_before


def test_the_terms_a_plugin_build_returns_stay_as_built_beside_the_copy() -> None:
    """Only the term that is the aggregator becomes the copy; another term the build returned is the build's own."""
    built, terms = make_aggregator(f"{__name__}:TWO_TERMS", None, num_clients=4, model=nn.Linear(8, 3), seed=2)[:2]
    assert built is not SHARED and built.seed == 2 and terms[0] is LOCKED and terms[1] is built

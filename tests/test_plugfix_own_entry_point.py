"""A plugin that registers its own spec under its entry point's name (docs/extending.md: ``register_algorithm`` in the
module that defines the class) is not warned about as "an entry point named like a built-in ... never used": the
registry's entry is the object the entry point loads, or one its module holds. An entry point that a true built-in
shadows is still warned about, even from a module that imports that built-in's spec."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

from test_bindfix_registry import scratch_registry  # noqa: F401 - the fixture, restoring the registry after each test

RULES = '''
from dataclasses import dataclass

from chillfl.aggregation.robust import MEDIAN  # a built-in's spec, held here: "median" is still not this plugin's
from chillfl.extend import AggregatorBase, AlgorithmSpec, register_algorithm


@dataclass(frozen=True)
class NoOptions:
    pass


class First(AggregatorBase):
    def aggregate(self, global_params, results, round):
        return dict(results[0].params)


class ByClass(First):
    pass


OWN = register_algorithm("plugfix_own", AlgorithmSpec(NoOptions, lambda o, ctx: (First(), []), "the spec the entry point names",
                                                      makes=(First,)))
BY_CLASS = register_algorithm("plugfix_by_class", AlgorithmSpec(NoOptions, lambda o, ctx: (ByClass(), []), "the entry point names its class",
                                                                makes=(ByClass,)))
'''

ENTRY_POINTS = """[chillfl.plugins]
plugfix_own = plugfix_own_rules:OWN
plugfix_by_class = plugfix_own_rules:ByClass
median = plugfix_own_rules:First
"""


@pytest.fixture()
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scratch_registry: None) -> Iterator[Path]:  # noqa: F811
    (tmp_path / "plugfix_own_rules.py").write_text(RULES)
    info = tmp_path / "plugfix_own_rules-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugfix-own-rules\nVersion: 0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    os.utime(tmp_path, ns=(0, 0))  # the entry points are cached per state of the import path: make this one new
    yield tmp_path
    sys.modules.pop("plugfix_own_rules", None)


def test_a_plugin_registering_its_own_entry_point_name_is_not_warned_about(plugin: Path, caplog: pytest.LogCaptureFixture) -> None:
    from chillfl import once
    from chillfl.aggregation.registry import algorithm_names, algorithm_spec, registered_algorithms

    with caplog.at_level(logging.WARNING, logger="chillfl.plugins"), once.said_once():  # one call's scope, as `chillfl list` or a run
        names = algorithm_names()  # imports the plugin: its specs are registered under the entry points' names
        assert {"plugfix_own", "plugfix_by_class"} <= set(names)
        assert algorithm_spec("plugfix_own") is registered_algorithms()["plugfix_own"]
        assert algorithm_spec("plugfix_by_class").summary == "the entry point names its class"
        algorithm_names()
        algorithm_spec("median")
    warned = [r.getMessage() for r in caplog.records if r.name == "chillfl.plugins"]
    assert warned == ["algorithm.name: chillfl.plugins entry point 'median' (plugfix_own_rules:First) has the name of a built-in, "
                      "which 'median' keeps meaning: the entry point is never used; give it another name"]

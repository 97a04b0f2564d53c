"""A spec declares which of its options take a registry's name (``takes_names``), and the configuration reference lists
those names for a plugin's option as for a built-in's. The reference named PA3Fed's ``base`` and FedChill's ``measure``
itself, so a plugin's option that takes a name was listed as a bare ``str`` with no allowed values."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.report.reference import enumerated_options, render_reference
from user_modules import install

USER_METHODS = '''
"""A wrapper whose ``base`` takes an algorithm's name, and a policy whose ``shape`` takes a name from a list of its own."""

from dataclasses import dataclass

from chillfl.extend import AlgorithmSpec, Capabilities, FedAvg, PolicySpec, TakesName, weighted_bases


@dataclass(frozen=True)
class WrapOptions:
    base: str = "fedavg"
    label: str = "x"


@dataclass(frozen=True)
class ShapeOptions:
    shape: str = "flat"


def shapes():
    return ["flat", "steep"]


WRAP = AlgorithmSpec(WrapOptions, lambda o, c: (FedAvg(), []), "a wrapper over a named base",
                     takes_names={"base": TakesName(weighted_bases, "algorithm", weighted_bases)})
RULE = AlgorithmSpec(WrapOptions, lambda o, c: (FedAvg(), []), "a plain rule, a base WRAP may take", capabilities=Capabilities(takes_weights=True))
SHAPE = PolicySpec(ShapeOptions, lambda o, counts: None, "a policy", takes_names={"shape": TakesName(shapes)})
'''


@pytest.fixture(autouse=True)
def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(tmp_path, monkeypatch, "dedup_methods", USER_METHODS)


def _row(text: str, heading: str, option: str) -> str:
    part = text[text.index(heading):]
    return next(line for line in part.splitlines() if line.startswith(f"| `{option}` |"))


def test_a_plugins_option_that_takes_a_registry_name_lists_the_names() -> None:
    """Fails on the old code: AlgorithmSpec and PolicySpec took no ``takes_names`` (and the reference read none)."""
    text = render_reference(["dedup_methods:WRAP", "dedup_methods:SHAPE"], only=["dedup_methods:WRAP", "dedup_methods:SHAPE"])
    base = _row(text, "### `dedup_methods:WRAP`", "base")
    assert "`fedavg`" in base and "`fedprox`" in base and "`pa3fed`" not in base  # the bases PA3Fed lists: they take weights
    assert _row(text, "### `dedup_methods:WRAP`", "label").endswith("|  |")  # an option that declares nothing: a plain str
    assert _row(text, "### `dedup_methods:SHAPE`", "shape") == '| `shape` | `str` | `"flat"` | `flat`, `steep` |'


def test_an_option_that_takes_a_part_lists_that_parts_listed_plugin_path() -> None:
    text = render_reference(["dedup_methods:WRAP", "dedup_methods:RULE"], only=["dedup_methods:WRAP", "pa3fed"])
    assert "`dedup_methods:RULE`" in _row(text, "### `dedup_methods:WRAP`", "base")  # RULE takes weights: a base
    assert "`dedup_methods:RULE`" in _row(text, "### `pa3fed`", "base")  # and so does the built-in's option


def test_the_builtins_declare_theirs_on_their_specs() -> None:
    enumerated = enumerated_options(["dedup_methods:WRAP"])
    assert enumerated["algorithm.pa3fed.base"].part == "algorithm" and "fedavg" in enumerated["algorithm.pa3fed.base"].names()
    assert enumerated["temperature.fedchill.measure"].names() == sorted(enumerated["temperature.fedchill.measure"].names()) != []
    assert "algorithm.dedup_methods:WRAP.base" in enumerated and "algorithm.dedup_methods:RULE.base" not in enumerated

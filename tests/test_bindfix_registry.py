"""A plugin spec derived from a built-in (``dataclasses.replace``, inheriting its ``makes``) or one spec under a second
name registers (bindfix #3: a ValueError at import broke its config-only use); an instance passed from Python is held to
the first spec registered to make its class."""

from __future__ import annotations

import dataclasses

import pytest

from chillfl.aggregation import registry
from chillfl.aggregation.registry import built_by, make_aggregator, register_algorithm, registered_algorithms
from test_pyagg_bind import model


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry as it is, restored after the test."""
    registered_algorithms()
    monkeypatch.setattr(registry, "_MADE", dict(registry._MADE))
    monkeypatch.setattr(registry._REGISTRY, "_specs", dict(registry._REGISTRY._specs))


def test_a_derived_spec_and_an_alias_register_and_build(scratch_registry: None) -> None:
    from chillfl.aggregation import robust, scaffold

    options = dataclasses.make_dataclass("ScaffoldI", [("option", str, dataclasses.field(default="I"))], bases=(scaffold.ScaffoldOptions,), frozen=True)
    register_algorithm("bindfix_scaffold_i", dataclasses.replace(scaffold.SPEC, options=options, summary="SCAFFOLD, option I by default"))
    register_algorithm("a_krum_alias", robust.KRUM)  # sorts before "krum"
    built, _ = make_aggregator("bindfix_scaffold_i", {}, num_clients=3, model=model(), seed=0, client_momentum=0.0)
    assert isinstance(built, scaffold.Scaffold) and built.options.option == "I"
    found = built_by(scaffold.Scaffold(3))
    assert found is not None and found[0] == "scaffold"
    krum = make_aggregator("krum", {}, num_clients=8, model=model(), seed=0, clients_per_round=8)[0]
    found = built_by(krum)
    assert found is not None and found[0] == "krum"

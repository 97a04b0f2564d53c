"""A soft-label method's ``notes`` hook: its pitfalls said once on stderr before the run is built (CFD's 1-bit uniform
thresholding under chilled clients is one such note)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

from chillfl.config import RunConfig, load_config
from chillfl.errors import ConfigError
from chillfl.once import said_once
from chillfl.protocols.softlabels import build
from chillfl.protocols.softlabels.method import SoftLabelSpec, spec_of


def with_notes(monkeypatch: pytest.MonkeyPatch, notes: Any) -> RunConfig:
    config = load_config(None, {}).with_overrides({"distillation": {"method": "individual"}})
    setup = config.distillation_setup
    assert setup is not None
    spec: SoftLabelSpec[Any] = dataclasses.replace(spec_of(setup), notes=notes)
    monkeypatch.setattr(build, "spec_of", lambda setup: spec)
    return config


def test_a_methods_notes_are_said_once_as_warnings(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    config = with_notes(monkeypatch, lambda options, config: [f"T is {config.temperature.get('policy')}: mind the thresholds"])
    with caplog.at_level(logging.WARNING), said_once():  # one call's scope (chillfl.compare, `chillfl compare`)
        build.check_distillation(config, None)
        build.check_distillation(config, None)  # a comparison builds each run: said once
    said = [r.getMessage() for r in caplog.records if "mind the thresholds" in r.getMessage()]
    assert said == [f"T is {config.temperature.get('policy')}: mind the thresholds"]


def test_a_notes_hook_that_returns_no_strings_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    config = with_notes(monkeypatch, lambda options, config: [["nested"]])
    with pytest.raises(ConfigError) as err:
        build.check_distillation(config, None)
    assert err.value.field == "distillation.method"
    assert "notes hook must return strings, got list" in err.value.message


@pytest.mark.parametrize(("overrides", "warned"), [
    ({"temperature": {"policy": "fixed", "value": 0.5}}, True),
    ({"temperature": {"policy": "fedchill"}}, True),
    ({"temperature": {"policy": "none"}}, False),
    ({"temperature": {"policy": "fixed", "value": 0.5}, "distillation.one_bit": "argmax"}, False),
])
def test_cfd_warns_of_uniform_thresholding_under_chilled_clients(overrides: dict[str, Any], warned: bool) -> None:
    """Chilled clients' T = 1 softmax is near uniform: the 0.5 threshold zeroed 99 % of the rows and the server model froze."""
    from chillfl.distillation.methods.cfd import CFDMethodOptions, notes

    config = load_config(None, {}).with_overrides({"distillation": {"method": "cfd", "public_size": 400, "subset_size": 100}}).with_overrides(overrides)
    one_bit = overrides.get("distillation.one_bit", "uniform")
    said = notes(CFDMethodOptions(one_bit=one_bit), config)
    assert bool(said) == warned
    if warned:
        assert "distillation.one_bit = 'argmax'" in said[0]

"""rev105d: a user Options.validate raising ValueError is one line, one of another signature is not called (as before);
a NaN option equals its record's NaN; the seeded table's epsilon is the spent budget (inf where the last round's is
unbounded); an accountant's ArithmeticError is one line; a config file ``x.partial.toml`` from Python runs as ``x_partial``,
as on the command line."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import chillfl
from chillfl.api import _validate_options
from chillfl.errors import ConfigError
from chillfl.experiment import record_difference
from chillfl.privacy.protocol import accounted_epsilon
from chillfl.report.compare import build_seed_rows
from chillfl.runner import RunOutput
from chillfl.storage.results import summarize
from chillfl.sweeps.plan import Variant


@dataclass(frozen=True)
class Raising:
    beta: float = 0.7

    def validate(self, section: str) -> None:
        if not 0 <= self.beta < 0.5:
            raise ValueError("beta must be in [0, 0.5)")


@dataclass(frozen=True)
class NoSection:
    beta: float = 0.7

    def validate(self) -> None:
        raise AssertionError("not called: it takes no section")


class Agg:
    def __init__(self, options: Any) -> None:
        self.options = options


def test_a_validate_raising_value_error_is_one_line_on_the_options() -> None:
    with pytest.raises(ConfigError) as info:
        _validate_options(Agg(Raising()), "aggregator")
    assert info.value.field == "aggregator.options" and "beta must be in [0, 0.5)" in info.value.message


def test_a_validate_of_another_signature_is_not_called() -> None:
    _validate_options(Agg(NoSection()), "aggregator")


def test_a_nan_option_equals_its_records_nan() -> None:
    assert record_difference({"options": {"clip": math.nan}}, {"options": {"clip": math.nan}}, "algorithm") is None
    found = record_difference({"clip": math.nan}, {"clip": 1.0}, "algorithm")  # a NaN against a number still differs
    assert found is not None and found[:2] == ("algorithm.clip", 1.0)


def test_the_seeded_tables_epsilon_is_unbounded_where_a_seeds_last_round_is() -> None:
    records = [{"round": 1, "global_acc": 0.5, "epsilon": 284.4}, {"round": 2, "global_acc": 0.6, "epsilon": None}]
    v = Variant("a", {})
    runs = {("a", 0): RunOutput(None, records, summarize(records))}
    (row,) = build_seed_rows([v], runs, [0], v, v, None)
    assert row["epsilon"]["per_seed"] == [math.inf]  # last_value gave 284.4, the round before the unbounded one


class Dividing:
    def epsilon(self) -> float:
        raise ZeroDivisionError("float division by zero")


def test_an_accountants_arithmetic_error_is_one_line_on_the_noise() -> None:
    with pytest.raises(ConfigError) as info:
        accounted_epsilon(Dividing(), 1)  # type: ignore[arg-type]
    assert info.value.field == "privacy.noise_multiplier" and "ZeroDivisionError" in info.value.message


def test_a_config_file_named_like_a_partial_folder_runs_under_a_safe_name(tmp_path: Path) -> None:
    path = tmp_path / "x.partial.toml"
    path.write_text('[federation]\nnum_clients = 2\n')
    assert chillfl.make_config(str(path)).name == "x_partial"

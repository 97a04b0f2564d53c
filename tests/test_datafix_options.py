"""FedNova's ``tau_eff`` is a Literal: ``chillfl list --options`` (and docs/reference.md) shows its allowed values, and a
config's typo gets the nearest one. Typed ``str``, the reference left the column empty and the line named no spelling."""

from __future__ import annotations

import pytest

from chillfl.aggregation.fednova import FedNovaOptions
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import check_config


def test_the_reference_lists_tau_eff_s_values(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--options", "fednova"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| `tau_eff` |")]
    assert rows == ['| `tau_eff` | `str` | `"normaliser"` | `normaliser`, `steps` |']


def test_a_misspelt_tau_eff_is_one_line_with_the_nearest_value() -> None:
    base = {"dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 4, "algorithm.name": "fednova"}
    with pytest.raises(ConfigError) as err:
        check_config(load_config(None, {**base, "algorithm.tau_eff": "step"}))
    assert err.value.field == "algorithm.tau_eff" and "did you mean 'steps'" in err.value.message and "normaliser, steps" in err.value.message
    with pytest.raises(ConfigError, match="must be one of 'normaliser', 'steps', got 'mean'"):  # made in Python: validate's line, as before
        FedNovaOptions(tau_eff="mean").validate("algorithm")  # type: ignore[arg-type]

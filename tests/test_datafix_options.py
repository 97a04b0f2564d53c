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


def test_dp_sgd_refuses_fedavg_ft_for_what_it_reports_not_for_its_uploads() -> None:
    """FedAvg-FT's fine-tuned model never reaches the server: the line said dp-sgd "does not bound what fedavg_ft
    uploads", which it does; what it leaves out of epsilon is the local accuracy measured on the tuned model."""
    pytest.importorskip("opacus")
    from chillfl.experiment import build_experiment

    overrides = {"dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 4, "algorithm.name": "fedavg_ft",
                 "privacy.mechanism": "dp-sgd", "privacy.clip_norm": 1.0, "privacy.noise_multiplier": 1.5, "privacy.delta": 1e-3}
    with pytest.raises(ConfigError) as err:
        build_experiment(load_config(None, overrides))
    assert err.value.field == "privacy.mechanism"
    assert "uploads:" not in err.value.message and "uploads or reports from a client's data: each client also fine-tunes" in err.value.message
    assert "the tuned model is never uploaded, but the local_acc reported is measured on it;" in err.value.message

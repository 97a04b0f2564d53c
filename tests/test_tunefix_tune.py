"""Tuning a method that keeps no global model on the global rule is refused before any point runs, on compare.select."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import chillfl
import chillfl.sweeps.run as sweep_run
from chillfl.errors import ConfigError
from chillfl.tune import validation_score

BASE: dict[str, Any] = {
    "name": "tp", "seed": 0, "executor": "sequential", "device": "cpu", "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]},
    "partition": {"name": "iid"}, "federation": {"num_clients": 4, "clients_per_round": 4, "rounds": 1},
    "client": {"lr": 0.1, "batch_size": 64, "epochs": 1}, "eval": {"validation": 0.2},
}


def _no_run(*args: object, **kwargs: object) -> None:
    raise AssertionError("a point ran before the comparison was refused")


@pytest.mark.parametrize("method", [{"prototypes": {"method": "fedproto"}}, {"distillation": {"method": "individual"}}])
def test_a_global_rule_without_a_global_model_is_refused_before_any_run(method: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sweep_run, "run_experiment", _no_run)
    with pytest.raises(ConfigError) as err:
        chillfl.compare(config={**BASE, **method}, tune={"client.lr": [0.05, 0.1]}, out_dir=tmp_path, progress=False)
    assert err.value.field == "compare.select"
    assert "keeps no global model" in err.value.message and "'local_final' or 'local_best'" in err.value.message
    assert list(tmp_path.iterdir()) == []  # no folder, no .partial left behind


def test_a_tuning_point_that_takes_the_global_model_away_is_refused_before_any_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FedHKD shares its model by default; a grid over prototypes.share_model holds a point that keeps none (the check
    read the variant's own config only, and the grid trained before selection failed)."""
    monkeypatch.setattr(sweep_run, "run_experiment", _no_run)
    with pytest.raises(ConfigError) as err:
        chillfl.compare(config={**BASE, "prototypes": {"method": "fedhkd"}}, tune={"prototypes.share_model": [True, False]}, out_dir=tmp_path, progress=False)
    assert err.value.field == "compare.select" and "keeps no global model at tuning point prototypes.share_model=False" in err.value.message
    assert list(tmp_path.iterdir()) == []


def test_a_method_that_shares_its_model_still_tunes_on_the_global_rule(tmp_path: Path) -> None:
    result = chillfl.compare(config=BASE, tune={"client.lr": [0.05, 0.1]}, write=False, progress=False)
    assert len(result.rows) == 1


def test_a_run_without_val_acc_names_the_selection_rule() -> None:
    """The fallback after the runs (should a run still lack val_acc) names compare.select, not eval.validation."""
    with pytest.raises(ConfigError) as err:
        validation_score([{"global_acc": 0.5, "local_val_acc": 0.4}], "final")
    assert err.value.field == "compare.select" and "'local_final' or 'local_best'" in err.value.message

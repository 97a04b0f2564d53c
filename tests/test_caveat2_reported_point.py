"""Every caveat under a tuned comparison's table reads the config of the point each row reports, as the global-model
caveat does (:func:`chillfl.sweeps.run.reported_configs`), not the variant's own config.

A variant tuned to another temperature, clip norm or delta than its own config's ran with that point's value: the
step-size, controls and epsilon caveats judged the config it did not run with (a T = 1 variant tuned to T = 0.5 beside
a T = 1 baseline at one shared lr had no step-size caveat; one at T = 0.5 tuned to T = 1 had one naming a step size
that no row took).

The steering caveat reads the reported point too, but no config reaches a point where that differs from the variant's own
config: it speaks only where ``eval.validation = 0``, a tuned comparison refuses a variant without a validation split
(``check_selectable``), and no ``eval.*`` key can be tuned (``chillfl.tune``'s ``EVALUATION_PREFIX``). Nor does the
test-set caveat's: a grid over the dataset's rows (``dataset.test_fraction``) is refused (``chillfl.tune``'s
``DATASET_PREFIX``), and its one tunable table, ``dataset.augment``, decides no test rows, so the caveat does not read it
(below)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import chillfl.sweeps.run as sweep_run

from chillfl.sweeps.plan import CompareOptions
from chillfl.sweeps.run import run_compare
from test_statfix3_global_model import _config

VALIDATED = {"eval.validation": 0.2}


@pytest.mark.parametrize(("own", "point", "warned"), [(1.0, 0.5, True), (0.5, 1.0, False)])
def test_the_step_size_caveat_reads_the_tuned_temperature(tmp_path: Path, own: float, point: float, warned: bool) -> None:
    variants = ('[variants."base"]\ntemperature = { policy = "none" }\n'
                f'[variants."tuned"]\ntemperature = {{ policy = "fixed", value = {own} }}\ntune = {{ "temperature.value" = [{point}] }}\n')
    result = run_compare(_config(tmp_path, variants, VALIDATED), [], options=CompareOptions(seeds=[0]), progress=False, write=False)
    tuned = next(r for r in result.rows if r["variant"] == "tuned")
    assert tuned["tuned"] == {"temperature.value": point}
    # both rows train at the shared client.lr = 0.05 (TINY's); they differ in T exactly where the reported point is not 1
    assert ("step-size caveat: every variant trains at one shared client.lr = 0.05" in result.table) is warned


def test_the_controls_caveat_reads_the_tuned_clip_norm(tmp_path: Path) -> None:
    variants = ('[variants."T=1"]\ntemperature = { policy = "none" }\n'
                '[variants."T=0.5"]\ntemperature = { policy = "fixed", value = 0.5 }\n')
    options = CompareOptions(seeds=[0], controls=True, tune={"client.clip_norm": [1.0]})
    result = run_compare(_config(tmp_path, variants, VALIDATED), [], options=options, progress=False, write=False)
    # every row ran at clip_norm = 1 (the one point), which breaks "magnitude only at lr = T = 1 at lr x 1/T"
    assert all(r["tuned"] == {"client.clip_norm": 1.0} for r in result.rows)
    assert ("controls caveat: the step-size controls rest on magnitude only at lr taking the steps of T = 1 at lr x 1/T, which holds "
            "for plain SGD (momentum included), not with client.clip_norm = 1 (it clips the gradient x 1/T to one norm, not the step)") in result.table


def test_the_epsilon_caveat_reads_the_tuned_delta(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    units: list[Any] = []  # privacy_utility.png's marks, as write_tables hands them to the figures (not drawn here)
    monkeypatch.setattr(sweep_run, "write_compare_figures", lambda *args, **kwargs: units.append(args[5]))
    monkeypatch.setattr(sweep_run, "write_band_figures", lambda *args, **kwargs: units.append(args[7]))  # one seed: either
    variants = ('[variants."clean"]\nalgorithm = { name = "fedavg" }\n'
                '[variants."dp"]\nprivacy = { mechanism = "dp-fedavg", delta = 1e-5 }\ntune = { "privacy.delta" = [0.001] }\n')
    result = run_compare(_config(tmp_path, variants, {**VALIDATED, "federation.sampling": "poisson"}), [], options=CompareOptions(seeds=[0]),
                         progress=False, write=True)
    assert next(r for r in result.rows if r["variant"] == "dp")["tuned"] == {"privacy.delta": 0.001}
    assert "dp-fedavg (add_remove neighbours, delta = 0.001): 'dp'." in result.table
    assert "delta = 1e-05" not in result.table
    assert units == [{"dp": "dp-fedavg (add_remove neighbours, delta = 0.001)"}]


@pytest.mark.parametrize(("a", "b", "warned"), [('"dataset.augment.normalize" = "dataset"', '"dataset.augment.normalize" = false', False),
                                                 ('"dataset.test_fraction" = 0.2', '"dataset.test_fraction" = 0.3', True)])
def test_the_test_set_caveat_reads_the_rows_not_the_augmentation(tmp_path: Path, a: str, b: str, warned: bool) -> None:
    # a normalisation maps every row alike (crops and flips touch training batches only): "a" and "b" are scored on the
    # same test samples; another test fraction holds out other rows
    variants = f'[variants."a"]\n{a}\n[variants."b"]\n{b}\n'
    result = run_compare(_config(tmp_path, variants, VALIDATED), [], options=CompareOptions(seeds=[0]), progress=False, write=False)
    assert ("test-set caveat: the variants differ in dataset, so each is scored on other test rows" in result.table) is warned

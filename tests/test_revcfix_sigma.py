"""The report's "sigma used" reads every seed's run: under ``target_epsilon`` sigma is calibrated to each seed's client
sizes, so the seeds of one group can have run at different sigmas, and the first seed's alone read as the group's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from chillfl.config import load_config
from chillfl.report.html import render
from chillfl.runner import run_experiment
from test_privacy import TINY as PRIVATE  # seed 3, digits, an MLP, 4 clients, dp-fedavg

pytest.importorskip("opacus")


def _configs_table(page: str) -> str:
    table = page[page.index('<table id="configs">'):]
    return table[:table.index("</table>")]


def _second_seed(first: Path, seed: int, sigma: float) -> None:
    """A copy of ``first`` as the same config's run at ``seed`` that ran at ``sigma`` (as a target_epsilon run calibrates it)."""
    second = first.with_name(f"{first.name}-seed{seed}")
    shutil.copytree(first, second)
    config = second / "config.toml"
    config.write_text(config.read_text().replace("seed = 3\n", f"seed = {seed}\n", 1))
    summary = json.loads((second / "summary.json").read_text())
    summary["privacy"]["noise_multiplier"] = sigma
    (second / "summary.json").write_text(json.dumps(summary))


def _one_private_run(tmp_path: Path) -> Path:
    run_experiment(load_config(None, {**PRIVATE, "out_dir": str(tmp_path), "name": "dp", "federation.rounds": 1}), progress=False)
    [first] = list(tmp_path.iterdir())
    return first


def test_seeds_that_ran_at_different_sigmas_show_the_range(tmp_path: Path) -> None:
    first = _one_private_run(tmp_path)
    _second_seed(first, 4, 0.681458)
    sigma = json.loads((first / "summary.json").read_text())["privacy"]["noise_multiplier"]
    table = _configs_table(render([tmp_path], models=False, partitions=False))
    assert "4" in table and table.count("<tr>") == 2  # one group (header and its row), over seeds 3 and 4
    low, high = sorted([sigma, 0.681458])
    assert f"sigma used={low:.6g}–{high:.6g} (differs by seed)" in table


def test_seeds_at_one_sigma_show_it_once(tmp_path: Path) -> None:
    first = _one_private_run(tmp_path)
    sigma = json.loads((first / "summary.json").read_text())["privacy"]["noise_multiplier"]
    _second_seed(first, 4, sigma)
    table = _configs_table(render([tmp_path], models=False, partitions=False))
    assert f"sigma used={sigma:.6g}<" in table and "differs by seed" not in table

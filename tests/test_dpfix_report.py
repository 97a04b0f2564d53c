"""What a private run's outputs say: the epsilon caveat of a tuned private variant, the sigma that ran in the report's
configurations table, the single-seed table's epsilon digits, ``final_epsilon_upload`` in ``summary.json``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from chillfl.config import load_config
from chillfl.report.caveats import epsilon_caveat
from chillfl.report.compare import format_table
from chillfl.report.html import render
from chillfl.runner import run_experiment
from chillfl.storage.results import summarize
from chillfl.sweeps.run import run_compare
from test_privacy import TINY as PRIVATE  # seed 3, digits, an MLP, 4 clients, dp-fedavg

pytest.importorskip("opacus")

TINY: dict[str, Any] = {"dataset.name": "digits", "federation.num_clients": 4, "federation.clients_per_round": 2, "federation.rounds": 2,
                        "eval.client_split_size": 10}


# ---------------------------------------------------------------- F4: tuning is not accounted


def test_the_epsilon_caveat_says_a_tuned_private_variants_selection_is_not_accounted() -> None:
    private = load_config(None, {**TINY, "privacy.mechanism": "dp-fedavg", "privacy.delta": 1e-3})
    clean = load_config(None, TINY)
    variants = [("clean", clean), ("dp", private), ("dp2", private)]
    caveat = epsilon_caveat(variants, {"clean": 4, "dp": 4, "dp2": 1})
    assert caveat is not None
    assert "'dp': epsilon is one run's; the selection over 4 tuning points is not accounted" in caveat and "(Papernot & Steinke 2022)" in caveat
    assert "'clean'" not in caveat.split("Tuned")[1] and "'dp2'" not in caveat.split("Tuned")[1]  # not private; one point: nothing chosen
    assert "Tuned" not in (epsilon_caveat(variants) or "") and "Tuned" not in (epsilon_caveat(variants, {"dp": 1}) or "")


def test_a_tuned_private_comparison_prints_the_selection_caveat(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text('name = "t"\n[eval]\nvalidation = 0.2\n[tune]\n"client.lr" = [0.05, 0.2]\n[variants."plain"]\n'
                    '[variants."dp"]\nprivacy = { mechanism = "dp-fedavg", clip_norm = 1.0, noise_multiplier = 1.0, delta = 1e-3 }\n')
    result = run_compare(load_config(path, {"out_dir": str(tmp_path / "out"), **TINY}), [], progress=False, write=False)
    assert "'dp': epsilon is one run's; the selection over 2 tuning points is not accounted" in result.table
    assert "'plain': epsilon" not in result.table


# ---------------------------------------------------------------- F5: the sigma that ran, in the report


def test_the_report_shows_the_sigma_a_target_epsilon_run_used(tmp_path: Path) -> None:
    # target_epsilon picks sigma; the config keeps the written noise_multiplier (2.0 here, unused), which the table showed
    over = {**PRIVATE, "out_dir": str(tmp_path), "federation.rounds": 2}
    run_experiment(load_config(None, {**over, "name": "dp", "privacy.target_epsilon": 8.0, "privacy.noise_multiplier": 2.0}), progress=False)
    run_experiment(load_config(None, {**over, "name": "plain", "privacy.mechanism": "none", "privacy.clip_norm": 1.0,
                                      "privacy.noise_multiplier": 1.0, "privacy.delta": 1e-5}), progress=False)
    [dp] = [p for p in tmp_path.iterdir() if p.name.startswith("dp")]
    sigma = json.loads((dp / "summary.json").read_text())["privacy"]["noise_multiplier"]
    assert sigma != pytest.approx(2.0)
    page = render([tmp_path], models=False, partitions=False)
    table = page[page.index('<table id="configs">'):]
    table = table[:table.index("</table>")]
    assert f"sigma used={sigma:.6g}" in table
    assert "privacy.noise_multiplier=2.0" not in table


def test_one_private_run_alone_gets_the_column(tmp_path: Path) -> None:
    run_experiment(load_config(None, {**PRIVATE, "out_dir": str(tmp_path), "name": "dp", "federation.rounds": 1}), progress=False)
    page = render([tmp_path], models=False, partitions=False)
    assert re.search(r'<th class="l">other</th>', page) and "sigma used=1.5" in page


# ---------------------------------------------------------------- F6: epsilon's digits, final_epsilon_upload


@pytest.mark.parametrize(("eps", "shown"), [(31.998, "31.998"), (8.004, "8.004"), (0.5, "0.500")])
def test_the_single_seed_table_prints_epsilon_to_three_decimals(eps: float, shown: str) -> None:
    row = {"variant": "dp", "final_acc": 0.5, "delta_acc": 0.0, "final_loss": 1.0, "final_local_acc": None, "rounds_to_target": None,
           "speedup": None, "target": None, "epsilon": eps}
    table = format_table([row], "dp", "dp")
    assert table.splitlines()[-1].endswith(f" {shown} |")


def test_the_summary_keeps_the_final_upload_epsilon_only_where_recorded() -> None:
    records = [{"round": 1, "global_acc": 0.1, "epsilon": 1.0, "epsilon_upload": 3.0}, {"round": 2, "global_acc": 0.2, "epsilon": 1.5, "epsilon_upload": 4.5}]
    out = summarize(records)
    assert out["final_epsilon"] == 1.5 and out["final_epsilon_upload"] == 4.5
    assert "final_epsilon_upload" not in summarize([{"round": 1, "global_acc": 0.1, "epsilon": 1.0}])

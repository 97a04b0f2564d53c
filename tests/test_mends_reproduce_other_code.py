"""``reproduce --resume`` after an upgrade: an interrupted comparison made by other code or torch is never reused (its
``sweep.json`` says another ``made_with``), but it was passed over without a word, and the claim ran again from
scratch into ``NAME-compare-2`` (report-compat 1). It is named now, with the ``chillfl resume`` that continues it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import chillfl.reproduce as reproduce
from chillfl.reproduce import Claim, claim_config
from chillfl.sweeps.plan import CompareOptions, plan_runs
from chillfl.sweeps.record import comparison_toml, compares_by_other_code, find_compare, sweep_record

SMALL = {"federation.num_clients": 4, "federation.clients_per_round": 2, "federation.rounds": 3, "eval.clients": "none"}
CLAIM = Claim("flexchill", "T = 0.05 beats T = 1 (small)", "demo", "T=0.05", "T=1", grid=("temperature=1,0.05",), overrides={**SMALL, "client.lr": 0.01})


def _left(tmp_path: Path, **changed: object) -> tuple[Path, object, object]:
    """The claim's config and plan, and a ``.partial`` comparison folder whose ``sweep.json`` is the record but for ``changed``."""
    config = claim_config(CLAIM, [0, 1], str(tmp_path))
    plan = plan_runs(config, CLAIM.grid, CompareOptions(seeds=[0, 1]))
    record = json.loads(json.dumps(sweep_record(comparison_toml(config, plan).encode(), plan, resumable=True)))
    record.update(changed)
    folder = tmp_path / f"{config.name}-compare.partial"
    folder.mkdir()
    (folder / "sweep.json").write_text(json.dumps(record))
    return folder, config, plan


def test_a_comparison_made_by_other_code_is_named_not_reused(tmp_path: Path) -> None:
    folder, config, plan = _left(tmp_path, made_with={"code_sha256": "0" * 64, "torch": "0.0.1"})
    assert find_compare(config, plan) is None  # never reused, as before
    assert compares_by_other_code(config, plan) == [folder]


def test_another_comparison_is_not_named(tmp_path: Path) -> None:
    _, config, plan = _left(tmp_path, seeds=[5], made_with={"code_sha256": "0" * 64, "torch": "0.0.1"})
    assert compares_by_other_code(config, plan) == []


def test_this_codes_own_comparison_is_resumed_not_named(tmp_path: Path) -> None:
    folder, config, plan = _left(tmp_path)
    assert find_compare(config, plan) == folder and compares_by_other_code(config, plan) == []


def test_the_dry_run_says_it_is_not_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _, _ = _left(tmp_path, made_with={"code_sha256": "0" * 64, "torch": "0.0.1"})
    monkeypatch.setattr(reproduce, "CLAIMS", (CLAIM,))
    [planned] = reproduce.plan("flexchill", [0, 1], out_dir=str(tmp_path), resume=True)
    assert planned.action == f"run ({folder.name}: other code, not reused)"


def test_a_resumed_claim_says_the_folder_it_does_not_reuse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    folder, _, _ = _left(tmp_path, made_with={"code_sha256": "0" * 64, "torch": "0.0.1"})

    class Ran(Exception):
        pass

    def run_plan(*args: object, **kwargs: object) -> None:
        raise Ran  # the claim runs again (not run here): what was said before it is the point

    monkeypatch.setattr(reproduce, "run_plan", run_plan)
    with pytest.raises(Ran):
        reproduce.run_claim(CLAIM, [0, 1], out_dir=str(tmp_path), resume=True)
    said = [line for line in capsys.readouterr().err.splitlines() if "not reused" in line]
    assert said == [f"chillfl reproduce: {folder} was made by other code or torch: not reused; `chillfl resume {folder}` continues it "
                    "(the rounds left may not be bitwise)"]

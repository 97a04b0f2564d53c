"""``analyze temperature-sweep`` under a policy other than ``fedchill``: its heterogeneity score is FedChill's defaults,
which the config did not choose, and the output says so (it said nothing)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from chillfl.analysis.temperature_sweep import add_parser
from chillfl.config import load_config

CONFIG = ('name = "cli"\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\nhidden = [16]\n[federation]\nnum_clients = 3\n'
          "[client]\nepochs = 1\nbatch_size = 64\n[eval]\nclient_split_size = 30\n")


def sweep(tmp_path: Path, policy: str, capsys) -> tuple[str, dict]:  # type: ignore[no-untyped-def]
    parser = argparse.ArgumentParser(prog="chillfl analyze")
    add_parser(parser.add_subparsers(dest="analysis", required=True))
    (tmp_path / "exp.toml").write_text(CONFIG)
    out = tmp_path / policy
    args = parser.parse_args(["temperature-sweep", str(tmp_path / "exp.toml"), f"out_dir={out}", f"temperature.policy={policy}", "--temperatures", "0.25,1", "-q"])
    assert args.func(args) == 0
    return capsys.readouterr().out, json.loads((out / "cli-temperature-sweep" / "temperature_sweep.json").read_text())


def test_a_sweep_under_another_policy_says_its_score_is_fedchills_defaults(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    printed, written = sweep(tmp_path, "fixed", capsys)
    note = ("h is Eq. 6 at FedChill's defaults (measure ratio, normalisation max, uniform p_g): "
            "temperature.policy 'fixed' has no heterogeneity score of its own")
    assert f"note: {note}\n" in printed and written["heterogeneity_note"] == note
    printed, written = sweep(tmp_path, "fedchill", capsys)  # the config's own score: nothing to say
    assert "note:" not in printed and "heterogeneity_note" not in written


def test_score_options_reads_fedchills_table_only() -> None:
    from chillfl.analysis.temperature_sweep import score_options

    options, note = score_options(load_config(None, {"temperature": {"policy": "fedchill", "measure": "kl"}}))
    assert options.measure == "kl" and note is None
    options, note = score_options(load_config(None, {"temperature": {"policy": "none"}}))
    assert options.measure == "ratio" and note is not None and "'none'" in note

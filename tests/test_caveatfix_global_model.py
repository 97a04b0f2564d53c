"""The global-model caveat labels each row by the config of the point it reports, and says when the baseline or the
reference is such a row (every row's diff / rounds to target is then measured against its number).

A tuning point may take the global model away (fedhkd's ``prototypes.share_model = false``) or give it back: the row's
accuracy is then the clients' own models' mean, or a global model's, whatever the variant's own config says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chillfl.report.caveats import NO_GLOBAL_MODEL, STATIC_GLOBAL_MODEL, global_model_caveat
from chillfl.report.compare import format_seed_table, format_table
from chillfl.sweeps.plan import CompareOptions
from chillfl.sweeps.run import run_compare, table_json
from test_statfix3_global_model import _config

HKD = "[variants.\"FedAvg\"]\nalgorithm = {{ name = \"fedavg\" }}\n[variants.\"HKD\"]\nprototypes = {{ method = \"fedhkd\"{own} }}\ntune = {{ \"prototypes.share_model\" = [{point}] }}\n"


@pytest.mark.parametrize(("own", "point", "kind"), [("", "false", NO_GLOBAL_MODEL), (", share_model = false", "true", None)])
def test_a_tuned_row_is_labelled_by_its_chosen_point(tmp_path: Path, own: str, point: str, kind: str | None) -> None:
    config = _config(tmp_path, HKD.format(own=own, point=point), {"eval.validation": 0.2})
    result = run_compare(config, [], options=CompareOptions(seeds=[0], select="local_final"), progress=False, write=False)
    rows = {r["variant"]: r for r in json.loads(table_json(result.rows))}
    assert rows["HKD"]["tuned"] == {"prototypes.share_model": point == "true"}
    assert rows["HKD"].get("global_model") == kind and "global_model" not in rows["FedAvg"]
    assert ("global-model caveat: 'HKD' keeps no global model" in result.table) == (kind is not None)


ROWS = [{"variant": "FedAvg", "final_acc": 0.9}, {"variant": "HKD0", "final_acc": 0.5, "global_model": NO_GLOBAL_MODEL},
        {"variant": "Local", "final_acc": 0.1, "global_model": STATIC_GLOBAL_MODEL}]
KINDS = ("global-model caveat: 'HKD0' keeps no global model: its accuracy is the mean of its clients' own models on the global test set, "
         "not one model's accuracy (docs/baselines.md); 'Local' never trains its global model (the server reads no upload): its accuracy "
         "is the initial model's, which no client uses (docs/personalised.md). ")


def test_the_caveat_says_when_the_baseline_or_the_reference_is_such_a_row() -> None:
    assert global_model_caveat(ROWS, "FedAvg", "FedAvg") == KINDS + (
        "The diff and rounds to target of such a row set that number against global models' accuracies.")  # as before
    assert global_model_caveat(ROWS, "HKD0", "Local") == KINDS + (
        "'HKD0' is the baseline, so every row's diff is against its number, not a global model's; 'Local' is the reference, "
        "so every row's rounds to target count to its best accuracy, not a global model's.")
    assert global_model_caveat(ROWS, "HKD0", "FedAvg") == KINDS + (
        "The rounds to target of such a row set that number against global models' accuracies; 'HKD0' is the baseline, "
        "so every row's diff is against its number, not a global model's.")
    assert global_model_caveat(ROWS, "FedAvg", "Local") == KINDS + (
        "The diff of such a row sets that number against global models' accuracies; 'Local' is the reference, "
        "so every row's rounds to target count to its best accuracy, not a global model's.")
    assert global_model_caveat(ROWS, "Local", "Local") == KINDS + (
        "'Local' is the baseline and the reference, so every row's diff and rounds to target are against its number, not a global model's.")


def _one_seed_rows(target: float) -> list[dict[str, object]]:
    common = {"final_loss": 0.3, "final_local_acc": None, "rounds_to_target": 1, "speedup": 1.0, "target": target}
    return [{**ROWS[0], **common, "delta_acc": 0.8}, {**ROWS[2], **common, "delta_acc": None}]


def test_the_target_line_calls_no_untrained_model_global() -> None:
    table = format_table(_one_seed_rows(0.0975), "Local", "Local")
    assert table.splitlines()[0] == ("target = best accuracy of Local (the initial model's, no trained global model; global-model caveat below): "
                                     "9.75%; differences and speed-ups relative to Local")
    trained = format_table(_one_seed_rows(0.9), "FedAvg", "FedAvg")
    assert trained.splitlines()[0] == "target = best global accuracy of FedAvg: 90.00%; differences and speed-ups relative to FedAvg"


def test_the_seed_table_target_names_the_flagged_reference() -> None:
    stat = {"mean": 0.5, "std": 0.0, "n": 2, "ci_low": 0.5, "ci_high": 0.5}
    rows = [{"variant": v, "seeds": [0, 1], "final_acc": stat, "rounds_to_target": [1, 1], "target": [0.1, 0.1], "diverged_seeds": [],
             "final_loss": None, "delta_acc": None, **({"global_model": NO_GLOBAL_MODEL} if v == "HKD0" else {})} for v in ("FedAvg", "HKD0")]
    lines = format_seed_table(rows, "HKD0", "FedAvg", None, "final", 0.0).splitlines()
    assert lines[1].endswith("target = best accuracy of HKD0 (the reference, not the baseline FedAvg: --reference or compare.reference, else the "
                             "variant with the highest set temperature, else the first) at the same seed (its clients' own models' mean, "
                             "no global model; global-model caveat below)")

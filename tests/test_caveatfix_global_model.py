"""The global-model caveat labels each row by the config of the point it reports, and says when the baseline or the
reference is such a row (every row's diff / rounds to target is then measured against its number).

A tuning point may take the global model away (fedhkd's ``prototypes.share_model = false``) or give it back: the row's
accuracy is then the clients' own models' mean, or a global model's, whatever the variant's own config says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chillfl.report.caveats import NO_GLOBAL_MODEL
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


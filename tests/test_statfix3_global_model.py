"""A comparison's row whose accuracy is no trained global model's says so under the table (the global-model caveat).

The tables head every accuracy "final global test accuracy" and pair it with the baseline's global model (diff, sign
holds, rounds to target). A method whose protocol keeps no global model (FedProto: the mean of its clients' own models
on the global test set) and a method whose server never changes the global model (``local_only``: the initial model's
accuracy) printed under that head with no word. Now one line names them, ``table.json``'s row says it
(``global_model``), and which rows get it is asked of the protocol and of a declared capability
(``static_global_model``), never of a method's name: a plugin declaring it gets the line too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chillfl.capabilities import Capabilities
from chillfl.config import RunConfig, load_config
from chillfl.report.caveats import NO_GLOBAL_MODEL, STATIC_GLOBAL_MODEL, global_model_caveat, global_model_kind
from chillfl.report.compare import format_table
from chillfl.sweeps.plan import CompareOptions
from chillfl.sweeps.run import run_compare, table_json
from plugin_modules import plugin_module

TINY = {"dataset.name": "digits", "federation.num_clients": 4, "federation.clients_per_round": 2, "federation.rounds": 1,
        "eval.client_split_size": 10, "client.lr": 0.05}

PROTO = '[variants."FedAvg"]\nalgorithm = { name = "fedavg" }\n[variants."FedProto"]\nprototypes = { method = "fedproto" }\n'


def _config(tmp_path: Path, variants: str, overrides: dict[str, Any] | None = None) -> RunConfig:
    path = tmp_path / "t.toml"
    path.write_text(f'name = "t"\nout_dir = "{tmp_path / "out"}"\n{variants}')
    return load_config(path, {**TINY, **(overrides or {})})


FROZEN_PLUGIN = '''
from chillfl.extend import Capabilities, FedAvg


class Frozen(FedAvg):
    """A plugin rule whose server keeps the global model as it began, and says so."""

    capabilities = Capabilities(static_global_model=True)

    def aggregate(self, global_params, results, round):
        return dict(global_params)
'''


def test_the_kind_is_asked_of_the_protocol_and_the_declared_capability() -> None:
    assert global_model_kind(load_config(None, TINY)) is None  # FedAvg: a trained global model
    assert global_model_kind(load_config(None, {**TINY, "prototypes.method": "fedproto"})) == NO_GLOBAL_MODEL
    assert global_model_kind(load_config(None, {**TINY, "algorithm.name": "local_only"})) == STATIC_GLOBAL_MODEL
    assert global_model_kind(load_config(None, {**TINY, "algorithm.name": "ditto"})) is None  # a personal model, and a trained global one
    assert Capabilities().wrapping(Capabilities(static_global_model=True)).static_global_model  # a wrapper runs its base's server
    assert Capabilities(static_global_model=True).wrapping(Capabilities()).static_global_model  # and the wrapper's own declaration


def test_the_caveat_names_each_kind_and_only_rows_with_an_accuracy() -> None:
    rows = [{"variant": "FedAvg", "final_acc": 0.9}, {"variant": "P", "final_acc": 0.5, "global_model": NO_GLOBAL_MODEL},
            {"variant": "Q", "final_acc": 0.4, "global_model": NO_GLOBAL_MODEL}, {"variant": "L", "final_acc": 0.1, "global_model": STATIC_GLOBAL_MODEL},
            {"variant": "gone", "final_acc": None, "global_model": NO_GLOBAL_MODEL}]
    assert global_model_caveat(rows) == (
        "global-model caveat: 'P', 'Q' keep no global model: their accuracy is the mean of their clients' own models on the global test set, "
        "not one model's accuracy (docs/baselines.md); 'L' never trains its global model (the server reads no upload): its accuracy is the "
        "initial model's, which no client uses (docs/personalised.md). The diff and rounds to target of such a row set that number against "
        "global models' accuracies.")
    assert global_model_caveat(rows[:1]) is None
    assert global_model_caveat([{"variant": "old", "final_acc": 0.5}]) is None  # an older table.json's row: no field, nothing said
    one = [{"variant": "F", "baseline": True, "final_acc": 0.9, "delta_acc": None, "final_loss": 0.3, "final_local_acc": None, "rounds_to_target": 1,
            "speedup": 1.0, "target": 0.9}, {**rows[1], "baseline": False, "delta_acc": -0.4, "final_loss": 1.0, "final_local_acc": None,
                                             "rounds_to_target": None, "speedup": None, "target": 0.9}]
    assert format_table(one, "F", "F").endswith("\n\nglobal-model caveat: 'P' keeps no global model: its accuracy is the mean of its clients' own "
                                                "models on the global test set, not one model's accuracy (docs/baselines.md). The diff and rounds "
                                                "to target of such a row set that number against global models' accuracies.")


@pytest.mark.parametrize("seeds", [[0], [0, 1]])
def test_a_fedproto_comparison_names_fedproto_and_table_json_marks_its_row(tmp_path: Path, seeds: list[int]) -> None:
    config = _config(tmp_path, PROTO)
    result = run_compare(config, [], options=CompareOptions(seeds=seeds), progress=False, write=False)
    line = ("global-model caveat: 'FedProto' keeps no global model: its accuracy is the mean of its clients' own models on the global "
            "test set, not one model's accuracy (docs/baselines.md).")
    assert f"\n\n{line}" in result.table  # table.md is this text
    rows = {r["variant"]: r for r in json.loads(table_json(result.rows))}  # table.json's text
    assert rows["FedProto"]["global_model"] == "none" and "global_model" not in rows["FedAvg"]


def test_a_fedavg_only_comparison_has_no_caveat(tmp_path: Path) -> None:
    config = _config(tmp_path, '[variants."A"]\nclient = { lr = 0.05 }\n[variants."B"]\nclient = { lr = 0.1 }\n')
    result = run_compare(config, [], progress=False, write=False)
    assert "global-model caveat" not in result.table and all("global_model" not in r for r in result.rows)


def test_a_plugin_rule_declaring_a_static_global_model_gets_the_caveat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with plugin_module(tmp_path, monkeypatch, "frozen_plugin", FROZEN_PLUGIN):
        config = _config(tmp_path, '[variants."FedAvg"]\nalgorithm = { name = "fedavg" }\n[variants."Mine"]\nalgorithm = { name = "frozen_plugin:Frozen" }\n')
        result = run_compare(config, [], progress=False, write=False)
        assert ("global-model caveat: 'Mine' never trains its global model (the server reads no upload): its accuracy is the initial "
                "model's, which no client uses (docs/personalised.md).") in result.table
        assert [r.get("global_model") for r in result.rows] == [None, "untrained"]
        import frozen_plugin

        assert global_model_kind(load_config(None, {**TINY, "algorithm.name": "custom"}), frozen_plugin.Frozen()) == STATIC_GLOBAL_MODEL
        assert global_model_kind(load_config(None, {**TINY, "algorithm.name": "custom"}), frozen_plugin.FedAvg()) is None

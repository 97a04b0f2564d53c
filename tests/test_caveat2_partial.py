"""A comparison's row whose clients keep models of their own and do not train the global model itself is marked
``global_model = "partial"`` and named in the global-model caveat.

FedRep, FedPer and LG-FedAvg average only the shared part of their uploads into the model their clients start from; the
global model's personal part (the head, the representation) is the clients' average under the default ``global_head`` /
``global_body = "average"``, the initial one under ``"keep"``, and no client uses that model. The row printed it under
"final global test accuracy" with no word. Which rows get it is asked of the capabilities the analyses of the global
model ask (``personal_model`` without ``trains_global_model``), never of a method's name: a plugin declaring them gets it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chillfl.config import load_config
from chillfl.report.caveats import NO_GLOBAL_MODEL, PARTIAL_GLOBAL_MODEL, STATIC_GLOBAL_MODEL, global_model_caveat, global_model_kind, target_words
from chillfl.sweeps.plan import CompareOptions
from chillfl.sweeps.run import run_compare, table_json
from plugin_modules import plugin_module
from test_statfix3_global_model import TINY, _config

ONE = ("global-model caveat: 'FedRep' keeps a model of its own on each client, and its clients do not train the global model itself: "
       "its accuracy is the server's global model, only partly the clients' training (what each keeps for itself is in it averaged, "
       "at its initial value or not at all), which no client trains or uses as it is (docs/personalised.md).")


@pytest.mark.parametrize(("overrides", "kind"), [
    ({"algorithm.name": "fedrep"}, PARTIAL_GLOBAL_MODEL),
    ({"algorithm.name": "fedper"}, PARTIAL_GLOBAL_MODEL),
    ({"algorithm.name": "fedper", "algorithm.global_head": "keep"}, PARTIAL_GLOBAL_MODEL),
    ({"algorithm.name": "lg_fedavg"}, PARTIAL_GLOBAL_MODEL),
    ({"algorithm.name": "fedbn"}, PARTIAL_GLOBAL_MODEL),
    ({"algorithm.name": "ditto"}, None),  # a personal model beside a global model its clients train (trains_global_model)
    ({"algorithm.name": "apfl"}, None),
    # each client trains the global model it was sent and uploads it, as FedAvg's (the meme; w; body + G): rev116b 1
    ({"algorithm.name": "fml"}, None),
    ({"algorithm.name": "fedphp"}, None),
    ({"algorithm.name": "fedrod"}, None),
    ({"algorithm.name": "fedavg"}, None),
    ({"algorithm.name": "local_only"}, STATIC_GLOBAL_MODEL),  # personal too, but never trained at all: the stronger word
    ({"prototypes.method": "fedproto"}, NO_GLOBAL_MODEL),  # personal too, but no global model at all
])
def test_the_kind_is_asked_of_the_declared_capabilities(overrides: dict[str, object], kind: str | None) -> None:
    assert global_model_kind(load_config(None, {**TINY, **overrides})) == kind


PERSONAL_PLUGIN = '''
from chillfl.extend import Capabilities, FedAvg


class KeepsHeads(FedAvg):
    """A plugin rule whose clients keep a part of the model: it says so, and not that they train the global model."""

    capabilities = Capabilities(personal_model=True)


class TrainsBoth(FedAvg):
    """A plugin rule with a personal model beside a global model its clients train, as Ditto's."""

    capabilities = Capabilities(personal_model=True, trains_global_model=True)
'''


def test_a_plugin_rule_is_asked_as_a_built_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with plugin_module(tmp_path, monkeypatch, "heads_plugin", PERSONAL_PLUGIN):
        import heads_plugin

        custom = load_config(None, {**TINY, "algorithm.name": "custom"})
        assert global_model_kind(custom, heads_plugin.KeepsHeads()) == PARTIAL_GLOBAL_MODEL
        assert global_model_kind(custom, heads_plugin.TrainsBoth()) is None


def test_the_caveat_names_the_partial_rows() -> None:
    rows = [{"variant": "FedAvg", "final_acc": 0.9}, {"variant": "FedRep", "final_acc": 0.3, "global_model": PARTIAL_GLOBAL_MODEL}]
    assert global_model_caveat(rows, "FedAvg", "FedAvg") == ONE.removesuffix(".") + (
        ". The diff and rounds to target of such a row set that number against global models' accuracies.")
    # a partial reference: the target line does not call its best accuracy a global model's without a word
    assert target_words(rows, "FedRep") == " (a global model no client trains or uses as it is; global-model caveat below)"
    two = [*rows, {"variant": "LG", "final_acc": 0.2, "global_model": PARTIAL_GLOBAL_MODEL}]
    caveat = global_model_caveat(two)
    assert caveat is not None and caveat.startswith(
        "global-model caveat: 'FedRep', 'LG' keep a model of their own on each client, and their clients do not train the global model "
        "itself: their accuracy is the server's global model, only partly the clients' training")


def test_a_fedrep_comparison_marks_its_row(tmp_path: Path) -> None:
    config = _config(tmp_path, '[variants."FedAvg"]\nalgorithm = { name = "fedavg" }\n[variants."FedRep"]\nalgorithm = { name = "fedrep", head_epochs = 1 }\n')
    result = run_compare(config, [], options=CompareOptions(seeds=[0]), progress=False, write=False)
    assert f"\n\n{ONE} The diff and rounds to target" in result.table
    rows = {r["variant"]: r for r in json.loads(table_json(result.rows))}
    assert rows["FedRep"]["global_model"] == PARTIAL_GLOBAL_MODEL and "global_model" not in rows["FedAvg"]

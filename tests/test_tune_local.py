"""Tuning on the clients' local validation accuracy (``select = "local_final" | "local_best"``): the splits, the rule, the table."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest
import torch

from chillfl.data import build_federated_data, load_dataset
from chillfl.data.datasets import ArrayDataset
from chillfl.data.federated import validation_split
from chillfl.engine.protocol import ClientReply
from chillfl.errors import ConfigError
from chillfl.protocols.common import LocalLog
from chillfl.tune import describe_rule, point_scores, rule_key, select_point, validation_score


class OnlyKey(Mapping[str, Any]):
    """A metrics record that fails the test if anything but ``key`` is read from it."""

    def __init__(self, key: str, record: dict[str, Any]) -> None:
        self.key, self.record = key, record

    def __getitem__(self, key: str) -> Any:
        assert key == self.key, f"selection read {key!r}"
        return self.record[key]

    def get(self, key: str, default: Any = None) -> Any:
        assert key == self.key, f"selection read {key!r}"
        return self.record.get(key, default)

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("selection iterated a record")

    def __len__(self) -> int:
        return len(self.record)


def _records(key: str, glob: list[float], local: list[float]) -> list[OnlyKey]:
    return [OnlyKey(key, {"round": i + 1, "val_acc": g, "local_val_acc": v, "global_acc": 0.5, "local_acc": 0.5}) for i, (g, v) in enumerate(zip(glob, local))]


def test_local_rules_read_local_validation_only_and_can_choose_otherwise() -> None:
    # point 0: global val 0.9 -> 0.8, local val 0.4 -> 0.5; point 1: global 0.6 -> 0.7, local 0.9 -> 0.6
    # final: global 0.8 vs 0.7 -> point 0; local_final: 0.5 vs 0.6 -> point 1;
    # best: global 0.9 vs 0.7 -> point 0; local_best: 0.5 vs 0.9 -> point 1
    glob = [[_records("val_acc", [0.9, 0.8], [0.4, 0.5])], [_records("val_acc", [0.6, 0.7], [0.9, 0.6])]]
    local = [[_records("local_val_acc", [0.9, 0.8], [0.4, 0.5])], [_records("local_val_acc", [0.6, 0.7], [0.9, 0.6])]]
    assert select_point(point_scores(glob, "final")) == 0 and select_point(point_scores(glob, "best")) == 0
    assert validation_score(local[0][0], "local_final") == 0.5 and validation_score(local[1][0], "local_final") == 0.6
    assert validation_score(local[0][0], "local_best") == 0.5 and validation_score(local[1][0], "local_best") == 0.9
    assert select_point(point_scores(local, "local_final")) == 1 and select_point(point_scores(local, "local_best")) == 1
    # mean over seeds: point 0 at seeds (0.5, 0.7) -> 0.6, point 1 at (0.6, 0.4) -> 0.5: point 0
    two = [[_records("local_val_acc", [0], [0.5]), _records("local_val_acc", [0], [0.7])],
           [_records("local_val_acc", [0], [0.6]), _records("local_val_acc", [0], [0.4])]]
    scores = point_scores(two, "local_final")
    assert scores == [pytest.approx(0.6), pytest.approx(0.5)] and select_point(scores) == 0


def test_rule_names_keys_and_errors() -> None:
    assert rule_key("final") == "val_acc" and rule_key("local_best") == "local_val_acc"
    assert "local_val_acc" in describe_rule("local_final") and "final round" in describe_rule("local_final")
    assert "server's model" in describe_rule("best") and "best round" in describe_rule("best")
    with pytest.raises(ConfigError) as err:
        validation_score([{"round": 1, "val_acc": 0.5}], "local_final")  # a run that never measured local validation
    assert err.value.field == "compare.select" and "eval.validation > 0" in err.value.message
    with pytest.raises(ConfigError, match="allowed: final, best, local_final, local_best"):
        validation_score([{"val_acc": 0.5}], "local")
    from chillfl.config import config_from_dict

    assert config_from_dict({"compare": {"select": "local_best"}}).compare["select"] == "local_best"
    with pytest.raises(ConfigError, match="compare.select"):
        config_from_dict({"compare": {"select": "local"}})


def test_local_log_averages_the_clients_local_validation() -> None:
    log = LocalLog(empty_val=frozenset({1}))  # client 1's validation split is empty (its NaN measures nothing)
    # client 0: local 0.5, local val 0.25; client 1: local 1.0, local val NaN (an empty validation split);
    # client 2: local 0.75, local val 0.75. Sampled {0, 1}: local_val_acc = 0.25 (NaN left out);
    # all: (0.25 + 0.75) / 2 = 0.5; local_acc over all = (0.5 + 1.0 + 0.75) / 3 = 0.75
    for cid, acc, val in ((0, 0.5, 0.25), (1, 1.0, math.nan), (2, 0.75, 0.75)):
        log.observe(ClientReply(cid, None, None, acc, 0.1, None, local_val_acc=val))
    assert log.metrics([0, 1], "sampled")["local_val_acc"] == 0.25
    every = log.metrics([0], "all")
    assert every["local_val_acc"] == 0.5 and every["local_acc"] == pytest.approx(0.75)
    again = LocalLog(empty_val=frozenset({1}))
    again.load_state_dict(log.state_dict())
    assert again.metrics([0, 2], "sampled") == log.metrics([0, 2], "sampled")
    older = LocalLog()
    older.load_state_dict({"acc": {"0": 0.5}, "loss": {"0": 0.1}})  # a checkpoint from before local validation
    assert "local_val_acc" not in older.metrics([0], "sampled")


def test_natural_splits_give_each_client_its_own_validation_rows() -> None:
    # 12 test rows, clients {0..5} and {6..11}; the server validation split holds round(0.25 * 12) = 3 rows
    x = torch.arange(24, dtype=torch.float32).reshape(12, 2)
    y = torch.tensor([0, 1] * 6)
    groups = (np.arange(0, 6), np.arange(6, 12))
    ds = ArrayDataset("toy", x, y, x.clone(), y.clone(), 2, groups, groups)
    fed = build_federated_data(ds, num_clients=2, partitioner="natural", partition_options={}, seed=4, client_eval="natural", validation=0.25)
    held = validation_split(12, 0.25, seed=4)
    assert held is not None and fed.client_validation_indices is not None
    for cid, g in enumerate(groups):
        assert fed.client_validation_indices[cid].tolist() == sorted(set(g) & set(held))  # its own rows that are validation rows
        assert fed.eval_indices[cid].tolist() == sorted(set(g) - set(held))  # local_acc's rows: unchanged, disjoint
    assert sum(len(v) for v in fed.client_validation_indices) == 3
    xv, yv = fed.client_validation(0)  # type: ignore[misc]
    assert torch.equal(yv, y[torch.from_numpy(fed.client_validation_indices[0])])
    plain = build_federated_data(ds, num_clients=2, partitioner="natural", partition_options={}, seed=4, client_eval="natural")
    assert plain.client_validation_indices is None and plain.client_validation(0) is None


def test_proportional_local_validation_comes_from_the_validation_rows_only() -> None:
    ds = load_dataset("digits", {})
    kw: dict[str, Any] = {"num_clients": 4, "partitioner": "dirichlet", "partition_options": {"alpha": 0.5}, "seed": 1, "client_eval_size": 20}
    fed = build_federated_data(ds, validation=0.2, **kw)
    held = set(fed.validation_indices.tolist())  # type: ignore[union-attr]
    assert fed.client_validation_indices is not None
    for cid in range(4):
        own = set(fed.client_validation_indices[cid].tolist())
        assert own and own <= held and not own & set(fed.eval_indices[cid].tolist())
        train_classes = set(ds.y_train[torch.from_numpy(fed.train_indices[cid])].tolist())
        assert set(ds.y_test[torch.from_numpy(fed.client_validation_indices[cid])].tolist()) <= train_classes  # the client's class mix
    # the eval splits (local_acc) are the ones drawn before local validation existed: their own stream is untouched
    from chillfl.data.federated import _EVAL, _proportional_eval, _rng

    y = ds.y_train.numpy()
    weights = np.stack([np.bincount(y[ix], minlength=10) for ix in fed.train_indices]).astype(np.float64)
    before = _proportional_eval(weights, ds.y_test.numpy(), 20, 10, _rng(1, _EVAL), fed.validation_indices)
    assert all(np.array_equal(a, b) for a, b in zip(before, fed.eval_indices))


TINY = {"dataset": {"name": "digits"}, "model": {"name": "mlp"}, "federation": {"num_clients": 4, "rounds": 2},
        "eval": {"client_split_size": 20, "validation": 0.2}}


def test_runs_record_local_validation_and_a_local_tuned_table_names_its_rule() -> None:
    import chillfl

    out = chillfl.run(config={**TINY, "algorithm": {"name": "ditto"}}, write=False, progress=False)
    last = out.records[-1]
    assert 0.0 <= last["local_val_acc"] <= 1.0 and "final_local_val_acc" in out.summary
    result = chillfl.compare(config=TINY, grid={"algorithm.name": ["fedavg", "ditto"]}, seeds=[0], tune={"client.lr": [0.01, 0.3]},
                             select="local_final", write=False, progress=False)
    assert "tuned per variant on the clients' local validation splits (select = local_final: local validation accuracy (local_val_acc" in result.table
    assert "| variant | tuned (local_final) | local val acc % |" in result.table
    for row in result.rows:  # the chosen point is the one with the higher final local_val_acc
        scores = row["validation_scores"]
        assert row["tuned"]["client.lr"] == [0.01, 0.3][select_point([-math.inf if s is None else s for s in scores])]
    with pytest.raises(ConfigError) as err:
        chillfl.compare(config={**TINY, "eval": {**TINY["eval"], "clients": "none"}}, grid={"algorithm.name": ["fedavg"]}, seeds=[0],
                        tune={"client.lr": [0.01, 0.3]}, select="local_final", write=False, progress=False)
    assert err.value.field == "eval.clients"


@pytest.mark.parametrize("protocol", [{"distillation": {"method": "dsfl", "public_size": 60, "subset_size": 20}},
                                      {"prototypes": {"method": "fedproto"}}])
def test_soft_label_and_prototype_clients_measure_their_own_validation_split(protocol: dict[str, Any]) -> None:
    """local_val_acc is each sampled client's own model on its own validation rows, averaged (so select = local_* tunes these families too)."""
    from chillfl.config import config_from_dict
    from chillfl.experiment import build_experiment
    from chillfl.runner import run_experiment
    from chillfl.training.local import evaluate

    cfg = config_from_dict({**TINY, "model": {"name": "mlp", "hidden": [16]}, "federation": {"num_clients": 4, "rounds": 2}, **protocol})
    exp = build_experiment(cfg)
    models: dict[int, dict[str, torch.Tensor]] = {}
    out = run_experiment(cfg, write=False, progress=False, experiment=exp,
                         hooks=[lambda record, view: models.update(view.client_states())])
    last = out.records[-1]
    scores = []
    for cid in range(4):  # every client is sampled every round (clients_per_round defaults to all)
        own = exp.data.client_validation(cid)
        assert own is not None and len(own[1]) > 0
        scores.append(evaluate(exp.model, models[cid], own[0], own[1], 1024)[0])
    assert last["local_val_acc"] == pytest.approx(sum(scores) / 4, abs=1e-12)
    assert 0.0 < last["local_val_acc"] <= 1.0


def test_the_local_validation_mismatch_is_the_mean_total_variation_distance() -> None:
    """Hand-worked: 8 train rows, 8 test rows; client 0 trains on labels [0, 0, 0, 1] (mix 3/4, 1/4) and is validated on
    test rows with labels [0, 1] (1/2, 1/2): TV = 0.5 * (|3/4 - 1/2| + |1/4 - 1/2|) = 0.5 * 0.5 = 0.25. Client 1 trains on
    [1, 1, 1, 1] (0, 1) and is validated on [1, 1, 1] (0, 1): TV 0. Client 2 has no validation rows, client 3 no training
    rows: both left out. Mean over clients 0 and 1: (0.25 + 0) / 2 = 0.125."""
    from chillfl.data.federated import FederatedData

    y_train = torch.tensor([0, 0, 0, 1, 1, 1, 1, 1])
    y_test = torch.tensor([0, 1, 1, 1, 1, 0, 0, 0])
    ds = ArrayDataset("toy", torch.zeros(8, 2), y_train, torch.zeros(8, 2), y_test, 2)
    ix = [np.array([0, 1, 2, 3]), np.array([4, 5, 6, 7]), np.array([4]), np.zeros(0, dtype=np.int64)]
    val = [np.array([0, 1]), np.array([2, 3, 4]), np.zeros(0, dtype=np.int64), np.array([5])]
    fed = FederatedData(ds, ix, [np.zeros(0, dtype=np.int64)] * 4, None, np.zeros(0, dtype=np.int64), validation_indices=np.arange(5),
                        client_validation_indices=val)
    assert fed.local_validation_mismatch() == pytest.approx(0.125)
    # client 1 (trains on class 1 only) validated on test rows 0 and 5 (class 0 only): TV = 0.5 * (|0 - 1| + |1 - 0|) = 1
    apart = FederatedData(ds, ix[1:2], [np.zeros(0, dtype=np.int64)], None, np.zeros(0, dtype=np.int64), validation_indices=np.arange(6),
                          client_validation_indices=[np.array([0, 5])])
    assert apart.local_validation_mismatch() == pytest.approx(1.0)
    assert FederatedData(ds, ix, ix, None, np.zeros(0, dtype=np.int64)).local_validation_mismatch() is None  # no local validation


SKEWED = """name = "mix"
out_dir = "{out}"
[dataset]
name = "digits"
[model]
name = "mlp"
hidden = [16]
[partition]
name = "dirichlet"
alpha = 0.1
[federation]
num_clients = 4
rounds = 1
[eval]
validation = 0.2
client_split_size = {size}
[variants.FedAvg]
algorithm = {{ name = "fedavg" }}
"""


@pytest.mark.parametrize("select", ["local_final", "local_best", "final"])
def test_a_comparison_warns_once_when_it_selects_on_local_splits_that_miss_the_mix(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], select: str,
) -> None:
    """Digits at eval.validation = 0.2 (72 validation rows, about 7 a class), Dirichlet(0.1) over 4 clients and 100-row
    splits: the clients' local validation mix is far from their training mix (seed 0: mean TV 0.43 > 0.2). A comparison
    that selects on local_val_acc says so in one stderr line (and atop table.md); one that selects on val_acc says nothing."""
    import json

    from chillfl.cli import main
    from chillfl.report.caveats import LOCAL_MIX_TOLERANCE
    from chillfl.storage.results import LOCAL_MIX_TV

    config = tmp_path / "mix.toml"
    config.write_text(SKEWED.format(out=tmp_path / "out", size=100))
    assert main(["compare", str(config), "-q", "--seeds", "0", "--tune", "client.lr=0.05,0.2", "--select", select]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    folder = tmp_path / "out" / "mix-compare"
    runs = sorted(p.parent.name for p in folder.glob("*/summary.json"))
    mismatch = {name: json.loads((folder / name / "summary.json").read_text())[LOCAL_MIX_TV] for name in runs}
    assert len(runs) == 2 and all(value > LOCAL_MIX_TOLERANCE for value in mismatch.values())  # the summary holds the number
    warned = [line for line in err if "local validation mismatch" in line]
    if select == "final":
        assert warned == [] and err == []
        return
    worst = max(mismatch, key=lambda name: mismatch[name])
    assert len(warned) == 1 and warned == err  # one line, the only one
    assert warned[0] == (
        f"chillfl: local validation mismatch: select = {select} chooses on local_val_acc, but in 2 of 2 runs the clients' local validation "
        f"splits do not follow their training class mix (mean total variation distance up to {mismatch[worst]:.2f}, in {worst}; above 0.2), "
        "so local_val_acc scores them on a flatter mix than they train on; a larger eval.validation or a smaller eval.client_split_size "
        "lets the splits follow it (docs/comparisons.md)")
    assert (folder / "table.md").read_text().splitlines()[0] == "warning: " + warned[0].removeprefix("chillfl: ")


def test_a_local_selection_whose_splits_follow_the_mix_does_not_warn(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The same comparison at eval.validation = 0.5 and 20-row splits: the splits follow the mix (seed 0: mean TV 0.04)."""
    from chillfl.cli import main

    config = tmp_path / "mix.toml"
    config.write_text(SKEWED.format(out=tmp_path / "out", size=20).replace("validation = 0.2", "validation = 0.5"))
    assert main(["compare", str(config), "-q", "--seeds", "0", "--tune", "client.lr=0.05,0.2", "--select", "local_final"]) == 0
    assert "local validation mismatch" not in capsys.readouterr().err


def test_the_local_mix_warning_gives_each_split_kinds_own_advice() -> None:
    """Run "p" (proportional) at TV 0.43 and "n" (natural) at 0.31 are over 0.2, run "q" at 0.1 is not. A proportional
    split misses the mix because a small validation split cannot supply it (flatter: more eval.validation, a smaller
    eval.client_split_size); a natural / partition split is the client's own test rows in the validation split, which
    eval.client_split_size does not size (more eval.validation; eval.client_split = "proportional" for rows off the mix)."""
    from chillfl.data.federated import CLIENT_EVAL_MODES
    from chillfl.report.caveats import LOCAL_MIX_ADVICE, local_mix_warning

    assert set(LOCAL_MIX_ADVICE) == set(CLIENT_EVAL_MODES) - {"none"}  # every kind with local validation splits has advice
    head = "local validation mismatch: select = local_best chooses on local_val_acc, but in 1 of 2 runs the clients' local validation splits do not follow their training class mix "
    proportional = local_mix_warning({"p": 0.43, "q": 0.1}, "local_best", {"p": "proportional", "q": "proportional"})
    assert proportional == head + ("(mean total variation distance up to 0.43, in p; above 0.2), so local_val_acc scores them on a flatter mix than they "
                                   "train on; a larger eval.validation or a smaller eval.client_split_size lets the splits follow it (docs/comparisons.md)")
    for kind, whose in (("natural", "the dataset's"), ("partition", "the partitioner's")):
        line = local_mix_warning({"n": 0.31, "q": 0.1}, "local_best", {"n": kind, "q": "proportional"})
        assert line is not None and line.startswith(head + "(mean total variation distance up to 0.31, in n; above 0.2), so local_val_acc scores them on another mix")
        assert f"their own test rows ({whose} per-client test split)" in line and "eval.client_split_size does not size them" in line
        assert 'eval.client_split = "proportional" draws its split with that mix' in line and "a smaller eval.client_split_size" not in line
    # both kinds over the tolerance: each kind's advice once, named by its kind; the worst run is named
    both = local_mix_warning({"p": 0.43, "n": 0.31, "q": 0.1}, "local_final", {"p": "proportional", "n": "natural", "q": "natural"})
    assert both is not None and "in 2 of 3 runs" in both and "up to 0.43, in p;" in both and "on another mix than they train on" in both
    assert 'eval.client_split = "proportional": a larger eval.validation or a smaller eval.client_split_size' in both
    assert 'eval.client_split = "natural": their splits are their own test rows' in both
    assert local_mix_warning({"q": 0.1}, "local_final", {"q": "natural"}) is None

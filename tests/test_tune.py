"""Tuning on the server validation split: the split itself, the selection rule, and proof that selection never reads the test set."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest
import torch

import chillfl.experiment as experiment
from chillfl.config import RunConfig, config_from_dict
from chillfl.data import build_federated_data, load_dataset
from chillfl.data.federated import validation_split
from chillfl.errors import ConfigError
from chillfl.sweeps.plan import CompareOptions
from chillfl.sweeps.run import run_compare
from chillfl.tune import parse_tune, point_scores, select_point, validation_score


# --- the validation split -------------------------------------------------


def test_validation_split_is_seeded_and_sized() -> None:
    # round(0.25 * 10) = 2 (banker's rounding of 2.5 gives 2), sorted, within range, a function of the seed
    a = validation_split(10, 0.25, seed=3)
    assert a is not None and len(a) == 2 and list(a) == sorted(a) and a.max() < 10
    assert np.array_equal(a, validation_split(10, 0.25, seed=3))
    assert validation_split(10, 0.0, seed=3) is None
    assert len(validation_split(100, 0.1, seed=0)) == 10  # type: ignore[arg-type]
    draws = {tuple(validation_split(100, 0.1, seed=s)) for s in range(5)}  # type: ignore[arg-type]
    assert len(draws) == 5
    for bad in (1.0, -0.1):
        with pytest.raises(ConfigError, match="eval.validation"):
            validation_split(10, bad, seed=0)
    with pytest.raises(ConfigError, match="eval.validation"):
        validation_split(10, 0.01, seed=0)  # round(0.1) = 0 samples


def test_validation_is_disjoint_from_every_test_metric() -> None:
    ds = load_dataset("digits", {})
    fed = build_federated_data(ds, num_clients=5, partitioner="dirichlet", partition_options={"alpha": 0.5}, seed=1, client_eval_size=30, validation=0.2)
    val = fed.validation_indices
    assert val is not None and len(val) == round(0.2 * len(ds.y_test))
    x_test, y_test = fed.test()
    xv, yv = fed.validation()  # type: ignore[misc]
    assert len(y_test) + len(yv) == len(ds.y_test)
    # the global test rows are exactly the complement: no test row equals a validation row index-wise
    rest = np.setdiff1d(np.arange(len(ds.y_test)), val)
    assert torch.equal(x_test, ds.x_test[torch.from_numpy(rest)]) and torch.equal(xv, ds.x_test[torch.from_numpy(val)])
    for cid in range(5):  # the clients' proportional splits (local_acc) never use validation samples
        assert not set(fed.eval_indices[cid]) & set(val)
    plain = build_federated_data(ds, num_clients=5, partitioner="dirichlet", partition_options={"alpha": 0.5}, seed=1, client_eval_size=30)
    assert plain.validation() is None and torch.equal(plain.test()[1], ds.y_test)
    assert all(np.array_equal(a, b) for a, b in zip(plain.train_indices, fed.train_indices))  # the partition does not move


def test_validation_option_is_checked() -> None:
    with pytest.raises(ConfigError, match="eval.validation"):
        config_from_dict({"eval": {"validation": 1.0}})
    assert RunConfig().eval.validation == 0.0


# --- the selection rule ---------------------------------------------------


class OnlyValidation(Mapping[str, Any]):
    """A metrics record that fails the test if anything but ``val_acc`` is read from it."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record

    def __getitem__(self, key: str) -> Any:
        assert key == "val_acc", f"selection read {key!r}"
        return self.record[key]

    def get(self, key: str, default: Any = None) -> Any:
        assert key == "val_acc", f"selection read {key!r}"
        return self.record.get(key, default)

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("selection iterated a record")

    def __len__(self) -> int:
        return len(self.record)


def _records(val: list[float], test: list[float]) -> list[OnlyValidation]:
    return [OnlyValidation({"round": i + 1, "val_acc": v, "global_acc": t}) for i, (v, t) in enumerate(zip(val, test))]


def test_scores_read_validation_only() -> None:
    # point 0: val 0.5 -> 0.7 (final 0.7, best 0.7), test 0.99; point 1: val 0.8 -> 0.6 (final 0.6, best 0.8), test 0.1
    p0 = _records([0.5, 0.7], [0.99, 0.99])
    p1 = _records([0.8, 0.6], [0.10, 0.10])
    assert validation_score(p0, "final") == 0.7 and validation_score(p1, "final") == 0.6
    assert validation_score(p0, "best") == 0.7 and validation_score(p1, "best") == 0.8
    # "final" picks point 0, "best" picks point 1, whatever the test accuracy says
    assert select_point(point_scores([[p0], [p1]], "final")) == 0
    assert select_point(point_scores([[p0], [p1]], "best")) == 1


def test_mean_over_seeds_divergence_and_ties() -> None:
    # point 0: seeds 0.6, 0.8 -> 0.7; point 1: 0.9 and a diverged seed -> -inf; point 2: 0.7, 0.7 -> 0.7 (tie: the earlier wins)
    a = [_records([0.6], [0]), _records([0.8], [0])]
    b = [_records([0.9], [0]), None]
    c = [_records([0.7], [0]), _records([0.7], [0])]
    scores = point_scores([a, b, c], "final")
    assert scores[0] == pytest.approx(0.7) and math.isinf(scores[1]) and scores[2] == pytest.approx(0.7)
    assert select_point(scores) == 0
    with pytest.raises(ConfigError, match="eval.validation"):
        validation_score([{"round": 1, "global_acc": 0.5}], "final")


def test_parse_tune() -> None:
    assert parse_tune({}) == [{}]
    assert parse_tune({"client.lr": [0.1, 0.2], "client.epochs": [1, 2]}) == [
        {"client.lr": 0.1, "client.epochs": 1}, {"client.lr": 0.1, "client.epochs": 2},
        {"client.lr": 0.2, "client.epochs": 1}, {"client.lr": 0.2, "client.epochs": 2},
    ]
    for table, msg in (({"client.lr": []}, "non-empty"), ({"client.lr": 0.1}, "list"), ({"client.lr": [0.1, 0.1]}, "duplicate"), ({"seed": [1, 2]}, "tunable")):
        with pytest.raises(ConfigError, match=msg):
            parse_tune(table)
    with pytest.raises(ConfigError, match="tune.client.lr"):
        config_from_dict({"tune": {"client.lr": "fast"}})


@pytest.mark.parametrize("key", ["eval.validation", "eval.client_split_size", "eval.client_split", "dataset.name", "data_dir"])
def test_a_grid_over_the_evaluation_is_refused(key: str) -> None:
    """``--tune eval.validation=0.1,0.5`` ran: each point scored on its own validation rows (selection picked the split) and
    reported on other test rows than the other points'."""
    with pytest.raises(ConfigError) as err:
        parse_tune({"client.lr": [0.1], key: ["a", "b"]})
    assert err.value.field == f"tune.{key}" and "evaluated" in err.value.message
    assert len(parse_tune({"dataset.augment.flip": [True, False]})) == 2  # a training-time option of the dataset stays tunable


# --- end to end: poisoned test labels change test numbers, never the selection --------------

TINY = {
    "name": "tune", "dataset": {"name": "digits"}, "model": {"name": "mlp"}, "partition": {"name": "dirichlet", "alpha": 0.5},
    "federation": {"num_clients": 4, "rounds": 2}, "eval": {"validation": 0.25, "client_split_size": 20},
    "compare": {"seeds": [0, 1]}, "tune": {"client.lr": [0.002, 0.05, 0.3]},
}


def _compare(monkeypatch: pytest.MonkeyPatch, poison: bool) -> list[dict[str, Any]]:
    real = experiment.load_dataset

    def load(name: str, options: Any, data_dir: str = "data") -> Any:
        ds = real(name, options, data_dir=data_dir)
        if not poison:
            return ds
        y = ds.y_test.clone()
        keep = torch.zeros(len(y), dtype=torch.bool)
        for seed in (0, 1):  # the validation rows of every seed of the comparison keep their labels
            keep[torch.from_numpy(validation_split(len(y), 0.25, seed))] = True  # type: ignore[arg-type]
        y[~keep] = (y[~keep] + 1) % ds.num_classes  # every test label wrong
        return dataclasses.replace(ds, y_test=y)

    monkeypatch.setattr(experiment, "load_dataset", load)
    cfg = config_from_dict(TINY)
    return run_compare(cfg, ["temperature=1,0.1"], progress=False, write=False, options=CompareOptions()).rows


def test_selection_never_reads_the_test_set(monkeypatch: pytest.MonkeyPatch) -> None:
    clean = _compare(monkeypatch, poison=False)
    poisoned = _compare(monkeypatch, poison=True)
    for a, b in zip(clean, poisoned):
        assert a["tuned"] == b["tuned"]
        assert a["validation_scores"] == b["validation_scores"]
        # a seed's validation rows shared with the other seed's test rows are poisoned for that other seed
        # only in its test metric; each seed's own validation numbers are identical
        assert a["final_val_acc"] == b["final_val_acc"]
        assert a["final_acc"]["per_seed"] != b["final_acc"]["per_seed"]
    assert all(len(r["validation_scores"]) == 3 for r in clean)


# ---------------------------------------------------------------- a grid's identity: numerically equal grids are one comparison

_GRID_BASE = {"name": "g", "dataset": {"name": "digits"}, "model": {"name": "mlp"}, "eval": {"validation": 0.2},
              "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 1}}


def _identity(data: Mapping[str, Any], options: Any = None) -> tuple[Any, list[str], list[dict[str, Any]]]:
    """What ``sweep.json`` records of the comparison ``data`` (less the folder it started in), its runs' names and configs."""
    import json

    from chillfl.sweeps.plan import plan_runs
    from chillfl.sweeps.record import comparison_toml, sweep_record

    config = config_from_dict(data)
    plan = plan_runs(config, [], options)
    record = json.loads(json.dumps(sweep_record(comparison_toml(config, plan).encode(), plan, resumable=True), sort_keys=True))
    record.pop("started_in")
    return record, [c.config.name for c in plan.cells], [c.config.to_dict() for c in plan.cells]


def test_numerically_equal_tune_grids_are_one_comparison() -> None:
    """``client.lr = [1, 0.1]`` and ``[1.0, 0.1]`` run the same configs under the same names, but their ``sweep.json``
    differed (the config's SHA-256, its options): a shard of one did not join the other's folder, ``reproduce --resume``
    did not reuse it. An integer option written as a float (``epochs = [1.0, 2]``) likewise."""
    written = _identity({**_GRID_BASE, "tune": {"client": {"lr": [1, 0.1], "epochs": [1, 2]}}})
    typed = _identity({**_GRID_BASE, "tune": {"client.lr": [1.0, 0.1], "client.epochs": [1.0, 2]}})
    assert written == typed
    assert written[0]["options"]["tune"] == {"client.lr": [1.0, 0.1], "client.epochs": [1, 2]}


def test_numerically_equal_tune_flags_and_own_grids_are_one_comparison() -> None:
    """The same for ``--tune`` (``chillfl.compare(tune=...)``) and a variant's own grid (``[variants.LABEL.tune]``)."""
    from chillfl.sweeps.plan import CompareOptions

    own = {"variants": {"a": {"client.epochs": 2, "tune": {"client.momentum": [0, 0.9]}}, "b": {"client.epochs": 3}}}
    assert _identity({**_GRID_BASE, **own}, CompareOptions(tune={"client.lr": [1, 0.1]})) == _identity(
        {**_GRID_BASE, "variants": {"a": {"client.epochs": 2, "tune": {"client.momentum": [0.0, 0.9]}}, "b": {"client.epochs": 3}}},
        CompareOptions(tune={"client.lr": [1.0, 0.1]}))


def test_a_grid_value_its_option_refuses_is_still_named_as_written() -> None:
    with pytest.raises(ConfigError) as info:
        _identity({**_GRID_BASE, "tune": {"client.epochs": [1.5, 2]}})
    assert info.value.field == "tune.client.epochs" and "1.5" in info.value.message


def test_a_comparison_started_with_a_grid_as_typed_resumes_the_same_runs(tmp_path: Any) -> None:
    """A folder an older chillfl started with ``[1, 0.1]`` keeps its files (its checksum is of their bytes): its resume
    reads the grid typed, and plans the very runs (names and configs) it started."""
    from chillfl.config import load_config
    from chillfl.storage.results import to_toml
    from chillfl.sweeps.plan import CompareOptions, plan_runs

    (tmp_path / "config.toml").write_text(to_toml({**_GRID_BASE, "tune": {"client.lr": [1, 0.1]}}))
    resumed = plan_runs(load_config(tmp_path / "config.toml"), [], CompareOptions(tune={"client.lr": [1, 0.1]}))  # its sweep.json's options
    started = _identity({**_GRID_BASE, "tune": {"client.lr": [1.0, 0.1]}})
    assert [c.config.name for c in resumed.cells] == started[1]
    assert [c.config.to_dict() for c in resumed.cells] == started[2]


def _grid_identity(grid: list[str], base: Mapping[str, Any] = {}) -> tuple[Any, list[str], list[dict[str, Any]], list[str]]:
    """:func:`_identity` of the comparison ``--grid grid`` makes of :data:`_GRID_BASE` (with ``base``'s tables), with its variants' labels."""
    import json

    from chillfl.sweeps.plan import plan_runs
    from chillfl.sweeps.record import comparison_toml, sweep_record

    config = config_from_dict({**_GRID_BASE, **base})
    plan = plan_runs(config, grid, CompareOptions(seeds=[0, 1]))
    record = json.loads(json.dumps(sweep_record(comparison_toml(config, plan).encode(), plan, resumable=True), sort_keys=True))
    record.pop("started_in")
    return record, [c.config.name for c in plan.cells], [c.config.to_dict() for c in plan.cells], [v.label for v in plan.variants]


def test_numerically_equal_grid_values_are_one_comparison() -> None:
    """``--grid client.lr=1,0.1`` and ``client.lr=1.0,0.1`` ran the same configs, but the first variant was labelled
    ``client.lr=1`` (its table row, its long folder name) and recorded as ``1`` in ``sweep.json``: two comparisons
    that never shared a folder. The value is the option's (a float), and the float spelling's label is kept."""
    written = _grid_identity(["client.lr=1,0.1", "client.epochs=1.0,2"])
    typed = _grid_identity(["client.lr=1.0,0.1", "client.epochs=1,2"])
    assert written == typed
    assert typed[3] == ["client.lr=1.0, client.epochs=1", "client.lr=1.0, client.epochs=2", "client.lr=0.1, client.epochs=1",
                        "client.lr=0.1, client.epochs=2"]
    assert typed[1][:2] == ["lr1-epochs1-s0", "lr1-epochs1-s1"]  # the folder names as before: 1 and 1.0 both wrote lr1
    assert [v["overrides"] for v in typed[0]["variants"]][0] == {"client.lr": 1.0, "client.epochs": 1}


def test_a_list_options_numerically_equal_grid_values_are_one_comparison() -> None:
    """``--grid 'model.hidden=[16.0]'`` ran the MLP of ``[16]`` (the option holds ints), yet was labelled, named
    (``hidden_16.0_``) and recorded as typed: the list's numbers are taken as the option holds them, as a number is."""
    written, typed = _grid_identity(["model.hidden=[16.0]"]), _grid_identity(["model.hidden=[16]"])
    assert written == typed
    assert typed[3] == ["model.hidden=[16]"] and typed[1] == ["hidden_16_-s0", "hidden_16_-s1"]


def test_a_grid_of_lists_splits_at_the_commas_between_them() -> None:
    """``--grid 'model.hidden=[16,16],[32]'`` was split at every comma (``[16``, ``16]``, ``[32]``), so a list of more than
    one item could not be swept from the command line; the commas inside a list, table or string are its own."""
    from chillfl.options import comma_items

    labels = _grid_identity(["model.hidden=[16,16],[32]"])[3]
    assert labels == ["model.hidden=[16, 16]", "model.hidden=[32]"]
    assert comma_items('"a,b",{x = 1, y = 2},3', "--grid", "") == ['"a,b"', "{x = 1, y = 2}", "3"]
    assert comma_items("0, 1,2", "--seeds", "") == ["0", "1", "2"]
    # a quote opens a string only where a value starts: a bare word's apostrophe kept the rest as one item
    assert comma_items("it's,b", "--grid", "") == ["it's", "b"]
    assert comma_items("'a,b',c, \"d,e\"", "--grid", "") == ["'a,b'", "c", '"d,e"']


def test_a_grid_value_given_twice_in_two_spellings_is_a_duplicate() -> None:
    """``--grid client.lr=1,1.0`` ran the same runs twice, as two variants under their long folder names."""
    from chillfl.sweeps.plan import parse_grid

    with pytest.raises(ConfigError) as info:
        parse_grid(["client.lr=1,1.0"])
    assert (info.value.field, info.value.message) == ("--grid", "duplicate values: two variants would both be client.lr=1.0")


def test_a_grid_value_its_integer_option_refuses_is_named_as_written() -> None:
    """An integer option takes a whole float (``1.0`` is 1, as in a config file) and refuses 1.5, named as typed."""
    with pytest.raises(ConfigError) as info:
        _grid_identity(["client.epochs=1.5,2"])
    assert (info.value.field, info.value.message) == ("client.epochs", "expected an integer, got 1.5 (grid variant client.epochs=1.5)")


def test_numerically_equal_variant_overrides_are_one_comparison() -> None:
    """``[variants.B] "client.lr" = 1`` and ``= 1.0`` (or ``client = { epochs = 2.0 }`` and ``2``) ran the same runs,
    but the comparison's ``config.toml`` kept them as typed: its SHA-256 in ``sweep.json`` differed, so a shard of one did
    not join the other's folder. A part's own option (``algorithm.mu``) stays as written, as a grid's does."""
    written = _identity({**_GRID_BASE, "variants": {"A": {}, "B": {"client.lr": 1, "client": {"epochs": 2.0}, "algorithm": {"name": "fedprox", "mu": 0}}}})
    typed = _identity({**_GRID_BASE, "variants": {"A": {}, "B": {"client.lr": 1.0, "client": {"epochs": 2}, "algorithm": {"name": "fedprox", "mu": 0}}}})
    assert written == typed
    assert written[0]["config_toml"] == typed[0]["config_toml"]
    b = config_from_dict({**_GRID_BASE, "variants": {"B": {"client.lr": 1, "client": {"epochs": 2.0}, "algorithm": {"name": "fedprox", "mu": 0}}}}).variants["B"]
    assert b == {"client.lr": 1.0, "client": {"epochs": 2}, "algorithm": {"name": "fedprox", "mu": 0}}
    assert [type(b["client.lr"]), type(b["client"]["epochs"]), type(b["algorithm"]["mu"])] == [float, int, int]


def test_a_variant_override_its_option_refuses_is_still_named_as_written() -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict({**_GRID_BASE, "variants": {"B": {"client.epochs": 1.5}}})
    assert (info.value.field, info.value.message) == ("variants.B.client.epochs", "expected an integer, got 1.5")


def test_a_comparison_started_with_a_grid_value_as_typed_resumes_its_runs_by_their_names() -> None:
    """A folder an older chillfl started with ``--grid client.lr=1,0.1`` recorded the label ``client.lr=1`` in its
    ``sweep.json``; a resume plans from that record (not from the grid again), so its runs keep their folders."""
    from chillfl.sweeps.plan import Variant, plan_runs

    old = [Variant("client.lr=1", {"client.lr": 1}, short="lr1"), Variant("client.lr=0.1", {"client.lr": 0.1}, short="lr0.1")]
    resumed = plan_runs(config_from_dict(_GRID_BASE), [], CompareOptions(seeds=[0, 1]), old)
    assert [c.config.name for c in resumed.cells] == _grid_identity(["client.lr=1,0.1"])[1] == ["lr1-s0", "lr1-s1", "lr0.1-s0", "lr0.1-s1"]
    assert [v.label for v in resumed.variants] == ["client.lr=1", "client.lr=0.1"]


_FEDPROX = {"algorithm": {"name": "fedprox"}}


def test_numerically_equal_grid_values_of_a_methods_own_option_are_one_comparison() -> None:
    """``--grid algorithm.mu=0,0.1`` and ``0.0,0.1`` ran the same runs, but only :class:`RunConfig`'s own options were
    typed: FedProx's ``mu`` stayed ``0``, a label ``algorithm.mu=0`` and another ``sweep.json``. It is typed as the method
    the variant's config selects holds it (here the base's ``algorithm.name``); ``0.1`` keeps its label."""
    written = _grid_identity(["algorithm.mu=0,0.1"], _FEDPROX)
    typed = _grid_identity(["algorithm.mu=0.0,0.1"], _FEDPROX)
    assert written == typed
    assert typed[3] == ["algorithm.mu=0.0", "algorithm.mu=0.1"]
    assert type(typed[0]["variants"][0]["overrides"]["algorithm.mu"]) is float
    both = _grid_identity(["algorithm.name=fedprox", "algorithm.mu=0,0.1"])  # the method named by the variant itself
    assert both[3] == ["algorithm.name=fedprox, algorithm.mu=0.0", "algorithm.name=fedprox, algorithm.mu=0.1"]
    from chillfl.resolve import resolved
    from chillfl.sweeps.plan import grid_variants, parse_grid

    complete = resolved(config_from_dict({**_GRID_BASE, **_FEDPROX}))  # as the command line plans it: every option set
    assert [v.label for v in parse_grid(["algorithm.mu=0,0.1"], complete)] == ["algorithm.mu=0.0", "algorithm.mu=0.1"]
    assert [v.label for v in grid_variants([("algorithm.mu", [0, 0.1])], complete)] == ["algorithm.mu=0.0", "algorithm.mu=0.1"]  # compare(grid=)


def test_a_methods_integer_option_takes_a_whole_float_and_refuses_a_fraction_named(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """IFCA's ``clusters`` (an int): ``2.0`` is ``2`` (label, folder, ``sweep.json``); ``2.5`` stays as written for the
    option's own check to name (exit 2, one line)."""
    from chillfl.cli import main
    from chillfl.storage.results import to_toml

    ifca = {"algorithm": {"name": "ifca"}}
    assert _grid_identity(["algorithm.clusters=2.0,3"], ifca) == _grid_identity(["algorithm.clusters=2,3"], ifca)
    assert _grid_identity(["algorithm.clusters=2.0,3"], ifca)[3] == ["algorithm.clusters=2", "algorithm.clusters=3"]
    (tmp_path / "c.toml").write_text(to_toml({**_GRID_BASE, **ifca}))
    assert main(["compare", str(tmp_path / "c.toml"), "--grid", "algorithm.clusters=2.5,3", "--dry-run"]) == 2
    assert capsys.readouterr().err.splitlines() == ["chillfl: error: algorithm.clusters: expected an integer, got 2.5 (grid variant algorithm.clusters=2.5)"]


def test_numerically_equal_tune_values_of_a_methods_own_option_are_one_comparison() -> None:
    """``[tune] "algorithm.mu" = [0, 0.1]`` and ``[0.0, 0.1]``: one ``sweep.json`` (its tuning grid and its ``config.toml``'s
    SHA-256), the same runs; so for ``--tune`` and a variant's own grid, each typed under the method that variant runs."""
    written = _identity({**_GRID_BASE, **_FEDPROX, "tune": {"algorithm.mu": [0, 0.1]}})
    typed = _identity({**_GRID_BASE, **_FEDPROX, "tune": {"algorithm.mu": [0.0, 0.1]}})
    assert written == typed
    assert written[0]["options"]["tune"] == {"algorithm.mu": [0.0, 0.1]}
    assert _identity({**_GRID_BASE, **_FEDPROX}, CompareOptions(tune={"algorithm.mu": [0, 0.1]})) == _identity(
        {**_GRID_BASE, **_FEDPROX}, CompareOptions(tune={"algorithm.mu": [0.0, 0.1]}))
    own = {"variants": {"a": {}, "b": {"algorithm.name": "fedprox", "tune": {"algorithm.mu": [0, 0.1]}}}}
    own_typed = {"variants": {"a": {}, "b": {"algorithm.name": "fedprox", "tune": {"algorithm.mu": [0.0, 0.1]}}}}
    assert _identity({**_GRID_BASE, **own}) == _identity({**_GRID_BASE, **own_typed})


def test_numerically_equal_variant_and_base_options_of_a_method_are_one_comparison() -> None:
    """``[variants.B] algorithm = { name = "fedprox", mu = 0 }`` and ``mu = 0.0``, and a base ``[algorithm] mu = 0``:
    one ``config.toml`` SHA-256 and ``sweep.json`` (the config as written, a number of an option typed as it is held)."""
    variant = _identity({**_GRID_BASE, "variants": {"A": {}, "B": {"algorithm": {"name": "fedprox", "mu": 0}}}})
    assert variant == _identity({**_GRID_BASE, "variants": {"A": {}, "B": {"algorithm": {"name": "fedprox", "mu": 0.0}}}})
    base = _identity({**_GRID_BASE, "algorithm": {"name": "fedprox", "mu": 0}, "variants": {"A": {}, "B": {"client.lr": 0.1}}})
    assert base == _identity({**_GRID_BASE, "algorithm": {"name": "fedprox", "mu": 0.0}, "variants": {"A": {}, "B": {"client.lr": 0.1}}})
    assert "mu = 0.0" in base[0]["config_toml"]

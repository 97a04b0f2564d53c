"""A dataset whose options set its size declares it in its spec (``DatasetEntry.size``), and the cost model asks that.

The catalogue held a name-keyed table of the datasets sized by their options (``SIZED_BY_OPTIONS``: MNIST-1D and FEMNIST),
so a plugin's dataset was never priced: ``work`` of a config on one was None, whatever it declared.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from chillfl.catalogue import computed_entry, dataset_size, rows, stored_rows, work
from chillfl.config import config_from_dict, load_config, read_config_file
from chillfl.data.datasets import DATASETS, dataset_spec
from chillfl.errors import ConfigError
from chillfl.experiments import bundled_experiments, resolve_config
from chillfl.extend import DatasetEntry, DatasetSize

PLUGIN = '''
from dataclasses import dataclass

import torch

from chillfl import ArrayDataset
from chillfl.extend import DatasetEntry, DatasetSize


@dataclass(frozen=True)
class Options:
    rows: int = 100


def build(options, data_dir):
    x = torch.randn(options.rows, 1, 6, 6)
    y = torch.arange(options.rows) % 3
    cut = options.rows * 3 // 4
    return ArrayDataset("sized", x[:cut], y[:cut], x[cut:], y[cut:], 3)


def size(options):
    cut = options.rows * 3 // 4
    return DatasetSize(cut, options.rows - cut, (1, 6, 6), 3)


SIZED = DatasetEntry(Options, build, "real", size=size)
UNSIZED = DatasetEntry(Options, build, "real")
WRONG = DatasetEntry(Options, build, "real", size=lambda options: (1, 2))
NEGATIVE = DatasetEntry(Options, build, "real", size=lambda options: DatasetSize(-1, 2, (1, 6, 6), 3))
RAISES = DatasetEntry(Options, build, "real", size=lambda options: 1 / 0)
TWO_ARGS = DatasetEntry(Options, build, "real", size=lambda options, data_dir: DatasetSize(1, 1, (1,), 2))
'''

BASE = {"name": "s", "device": "cpu", "model": {"name": "mlp"}, "partition": {"name": "iid"},
        "federation": {"num_clients": 2, "clients_per_round": 2, "rounds": 1}, "client": {"batch_size": 10}}


@pytest.fixture
def plugin(user_module: Callable[[str, str], None]) -> str:
    user_module("seamfix2_sized", PLUGIN)
    return "seamfix2_sized"


def test_a_plugin_dataset_that_declares_its_size_is_priced_by_its_options(plugin: str) -> None:
    small = config_from_dict({**BASE, "dataset": {"name": f"{plugin}:SIZED", "rows": 100}})
    large = config_from_dict({**BASE, "dataset": {"name": f"{plugin}:SIZED", "rows": 400}})
    assert rows(small) == (75, 25) and rows(large) == (300, 100)
    a, b = work(small), work(large)
    assert a is not None and b is not None  # None on the old code: only names in its own tables were priced
    assert a.client_steps == 2 * 4 and b.client_steps == 2 * 15  # ceil(37.5 / 10), ceil(150 / 10) steps a client
    assert b.flops > a.flops > 0  # counted on the (1, 6, 6) inputs it declares


def test_a_plugin_dataset_without_a_size_is_not_priced(plugin: str) -> None:
    config = config_from_dict({**BASE, "dataset": {"name": f"{plugin}:UNSIZED"}})
    assert dataset_size(config) is None and work(config) is None


@pytest.mark.parametrize(("entry", "said"), [("WRONG", "must return a chillfl.extend.DatasetSize"), ("NEGATIVE", "whole counts > 0"),
                                             ("RAISES", "called as size(options)): ZeroDivisionError")])
def test_a_plugin_size_that_gives_no_size_is_one_line_on_its_field(plugin: str, entry: str, said: str) -> None:
    config = config_from_dict({**BASE, "dataset": {"name": f"{plugin}:{entry}"}})
    with pytest.raises(ConfigError) as info:
        work(config)
    assert info.value.field == "dataset.name" and said in info.value.message


def test_a_plugin_size_called_otherwise_is_refused_where_the_spec_is_read(plugin: str) -> None:
    with pytest.raises(ConfigError) as info:
        dataset_spec(f"{plugin}:TWO_ARGS")
    assert info.value.field == "dataset.name" and "size(options)" in info.value.message


def test_mnist1d_and_femnist_declare_their_size_in_their_spec_with_the_numbers_the_catalogue_had() -> None:
    assert DATASETS["mnist1d"].size is not None and DATASETS["femnist"].size is not None
    mnist1d = config_from_dict({**BASE, "dataset": {"name": "mnist1d", "num_samples": 4000}})
    assert dataset_size(mnist1d) == DatasetSize(3200, 800, (1, 40), 10)
    assert rows(config_from_dict({**BASE, "dataset": {"name": "mnist1d", "num_samples": 1234, "train_split": 0.7}})) == (861, 369)
    femnist = config_from_dict({**BASE, "dataset": {"name": "femnist"}})
    assert dataset_size(femnist) == DatasetSize(724_736, 80_527, (1, 28, 28), 62)  # the old table's row: every writer at 90/10
    assert rows(load_config(resolve_config("flexchill/table4-femnist-dnn"), {})) == (7349, 817)  # 36 writers' mean size
    assert rows(config_from_dict({**BASE, "dataset": {"name": "femnist", "sample_fraction": 0.05, "train_fraction": 0.8}})) == (32210, 8053)


OLD_WORK = {  # (client steps, FLOPs) of work() on the old code (its SIZED_BY_OPTIONS table), config as bundled
    "flexchill/table4-femnist-dnn": (390000.0, 21342620876800.0),
    "pa3fed/fig5-stability": (4500.0, 220147200000.0),
    "pa3fed/fig6-beta": (4500.0, 220147200000.0),
    "pa3fed/fig7-clp-ablation": (4500.0, 220147200000.0),
    "pa3fed/study-base": (2250.0, 110073600000.0),
    "pa3fed/table2-h0.1": (4500.0, 220147200000.0),
    "pa3fed/table2-h0.1-nova-vrl-mut": (4500.0, 220147200000.0),
    "pa3fed/table2-h0.2": (4500.0, 220147200000.0),
    "pa3fed/table2-h0.2-nova-vrl-mut": (4500.0, 220147200000.0),
    "pa3fed/table2-h0.3": (4500.0, 220147200000.0),
    "pa3fed/table2-h0.3-nova-vrl-mut": (4500.0, 220147200000.0),
    "scarlet/public-dataset-mnist1d": (11760.0, 34200000000.0),
}


def test_every_bundled_experiment_on_them_is_listed_here() -> None:
    on_them = [name for name in bundled_experiments() if read_config_file(resolve_config(name)).get("dataset", {}).get("name") in ("mnist1d", "femnist")]
    assert sorted(on_them) == sorted(OLD_WORK)


@pytest.mark.parametrize("name", sorted(OLD_WORK))
def test_the_bundled_experiments_on_them_are_priced_as_before(name: str) -> None:
    w = work(load_config(resolve_config(name), {}))
    assert w is not None
    assert math.isclose(w.client_steps, OLD_WORK[name][0], rel_tol=1e-12) and math.isclose(w.flops, OLD_WORK[name][1], rel_tol=1e-12)


@pytest.mark.parametrize(("dataset", "old"), [({"name": "mnist1d", "num_samples": 1234}, (100.0, 11832600.0)),
                                              ({"name": "femnist", "max_writers": 5}, (102.0, 198705096.0))])
def test_a_model_counted_afresh_on_them_is_counted_on_the_inputs_their_spec_declares(dataset: dict[str, object], old: tuple[float, float]) -> None:
    """A model with no stored count (an MLP of 37 units) is built on the spec's input shape and classes."""
    w = work(config_from_dict({**BASE, "model": {"name": "mlp", "hidden": [37]}, "dataset": dataset}))
    assert w is not None and math.isclose(w.client_steps, old[0], rel_tol=1e-12) and math.isclose(w.flops, old[1], rel_tol=1e-12)


def test_the_listing_still_prices_the_femnist_row_as_stored() -> None:
    stored = stored_rows()["flexchill/table4-femnist-dnn"][1]  # computed by the old code
    row = computed_entry("flexchill/table4-femnist-dnn")
    assert (row.cpu_min, row.gpu_min, row.kind, row.data) == (stored.cpu_min, stored.gpu_min, stored.kind, stored.data)


def test_the_public_spec_carries_the_size() -> None:
    entry = DatasetEntry(object, lambda options, data_dir: None, "real")  # type: ignore[arg-type,return-value]
    assert entry.size is None and "size" in DatasetEntry._fields

"""partition.name = "flwr": flwr-datasets partitioners by name, run by the real library on an in-memory dataset."""

from __future__ import annotations

import logging
import re
import sys

import numpy as np
import pytest

flwr_partitioner = pytest.importorskip("flwr_datasets.partitioner")  # in the `test` extra
import datasets  # noqa: E402

from chillfl.data import partition  # noqa: E402
from chillfl.data.flwr_partition import FlwrOptions, library_error  # noqa: E402
from chillfl.errors import ConfigError  # noqa: E402

LABELS = np.random.default_rng(0).integers(0, 4, 400)


def _direct(cls: type, **kwargs: object) -> list[list[int]]:
    """The library's own partitions of LABELS, as sorted positions (a 'pos' column carried along)."""
    p = cls(**kwargs)
    p.dataset = datasets.Dataset.from_dict({"label": LABELS, "pos": np.arange(len(LABELS))})
    return [sorted(p.load_partition(i)["pos"]) for i in range(p.num_partitions)]


def test_dirichlet_partitioner_matches_the_library():
    opts = {"partitioner": "DirichletPartitioner", "options": {"alpha": 0.5, "min_partition_size": 5, "seed": 7}}
    part = partition("flwr", LABELS, 5, np.random.default_rng(1), opts)
    want = _direct(flwr_partitioner.DirichletPartitioner, num_partitions=5, partition_by="label", alpha=0.5, min_partition_size=5, seed=7)
    assert [p.tolist() for p in part.client_indices] == want
    assert part.sizes.min() >= 5
    flat = np.concatenate(part.client_indices)
    assert len(np.unique(flat)) == len(flat) == len(LABELS)  # DirichletPartitioner uses every sample once


def test_iid_and_shard_partitioners_and_seed_from_the_run():
    iid = partition("flwr", LABELS, 4, np.random.default_rng(1), {"partitioner": "IidPartitioner"})
    assert iid.sizes.tolist() == [100] * 4
    a = partition("flwr", LABELS, 4, np.random.default_rng(1), {"partitioner": "ShardPartitioner", "options": {"num_shards_per_partition": 2}})
    b = partition("flwr", LABELS, 4, np.random.default_rng(1), {"partitioner": "ShardPartitioner", "options": {"num_shards_per_partition": 2}})
    c = partition("flwr", LABELS, 4, np.random.default_rng(2), {"partitioner": "ShardPartitioner", "options": {"num_shards_per_partition": 2}})
    assert all(np.array_equal(u, v) for u, v in zip(a.client_indices, b.client_indices))  # seeded from chillfl's stream
    assert any(not np.array_equal(u, v) for u, v in zip(a.client_indices, c.client_indices))


def test_a_partitioner_without_a_seed_sees_shuffled_rows():
    """IidPartitioner cuts contiguous ranges: on label-sorted rows it gave each client one class, for every seed."""
    labels = np.repeat(np.arange(4), 50)
    parts = [partition("flwr", labels, 4, np.random.default_rng(seed), {"partitioner": "IidPartitioner"}) for seed in (1, 1, 2)]
    counts = [np.bincount(labels[ix], minlength=4) for ix in parts[0].client_indices]
    assert parts[0].sizes.tolist() == [50] * 4 and all((c > 0).sum() >= 3 for c in counts)  # IID: every client sees (nearly) every class
    assert all(np.array_equal(u, v) for u, v in zip(parts[0].client_indices, parts[1].client_indices))  # seeded by the run
    assert any(not np.array_equal(u, v) for u, v in zip(parts[0].client_indices, parts[2].client_indices))


@pytest.mark.parametrize(
    "opts, field, text",
    [
        ({"partitioner": "Dirichlet"}, "partition.partitioner", "DirichletPartitioner"),
        ({"partitioner": "NaturalIdPartitioner"}, "partition.partitioner", "natural clients"),
        ({"partitioner": "DirichletPartitioner", "options": {"alpha": 0.5, "beta": 1}}, "partition.options.beta", "min_partition_size"),
        ({"partitioner": "DirichletPartitioner", "options": {}}, "partition.options.alpha", "required"),
        ({"partitioner": "DirichletPartitioner", "options": {"alpha": 0.5, "num_partitions": 3}}, "partition.options.num_partitions", "num_clients"),
        ({"partitioner": "DirichletPartitioner", "options": {"alpha": 0.5, "partition_by": "writer"}}, "partition.options.partition_by", "label"),
        # the library's own errors: on the one given option its message names
        ({"partitioner": "DirichletPartitioner", "options": {"alpha": -1.0}}, "partition.options.alpha", "DirichletPartitioner: Alpha values"),
        ({"partitioner": "ShardPartitioner", "options": {"num_shards_per_partition": -1}}, "partition.options.num_shards_per_partition", "ShardPartitioner"),
        # values checked against the constructor's annotation (bool, Literal, int) before the library sees them
        ({"partitioner": "DirichletPartitioner", "options": {"alpha": 0.5, "self_balancing": "yes"}}, "partition.options.self_balancing", "true or false"),
        ({"partitioner": "PathologicalPartitioner", "options": {"num_classes_per_partition": 1, "class_assignment_mode": "rand"}},
         "partition.options.class_assignment_mode", "random, deterministic"),
        ({"partitioner": "DirichletPartitioner", "options": {"alpha": 0.5, "min_partition_size": 2.5}}, "partition.options.min_partition_size", "integer"),
        ({"partitioner": "SizePartitioner", "options": {"partition_sizes": [10, 10]}}, "federation.num_clients", "2 partitions"),
        ({"partitioner": "IidPartitioner", "colour": 1}, "partition.colour", "unknown"),
        # a partitioner that takes nothing beyond num_partitions says so ("allowed: " and nothing was the line)
        ({"partitioner": "IidPartitioner", "options": {"alpha": 0.3}}, "partition.options.alpha", "IidPartitioner takes no options"),
    ],
)
def test_errors_are_config_errors(opts, field, text):
    with pytest.raises(ConfigError) as err:
        partition("flwr", LABELS, 5, np.random.default_rng(0), opts)
    assert err.value.field == field and text in err.value.message
    assert "\n" not in err.value.message


def test_an_error_naming_several_given_options_stays_on_options():
    with pytest.raises(ConfigError) as err:  # "... update the values of alpha ...": and min_partition_size, also given, is not named
        partition("flwr", LABELS, 5, np.random.default_rng(0), {"partitioner": "DirichletPartitioner", "options": {"alpha": 0.01, "min_partition_size": 90}})
    assert err.value.field == "partition.options.alpha" and "max number of attempts" in err.value.message
    exc = ValueError("alpha and min_partition_size cannot both hold")
    both = FlwrOptions("DirichletPartitioner", {"alpha": 0.5, "min_partition_size": 3})
    assert library_error(exc, both, "partition").field == "partition.options"
    assert library_error(ValueError("alphabet"), both, "partition").field == "partition.options"  # a whole word only


def test_the_librarys_warnings_are_logged_once_each_with_a_count(caplog: pytest.LogCaptureFixture, recwarn: pytest.WarningsRecorder) -> None:
    """DirichletPartitioner warns on every failed draw; the user gets one log line per message, not Python's warnings."""
    with caplog.at_level(logging.WARNING, logger="chillfl.data.flwr_partition"):
        part = partition("flwr", LABELS, 5, np.random.default_rng(1), {"partitioner": "DirichletPartitioner", "options": {"alpha": 0.5, "min_partition_size": 60}})
    assert part.sizes.min() >= 60
    lines = [r.getMessage() for r in caplog.records]
    assert lines and all(m.startswith("partition.options: DirichletPartitioner: The specified min_partition_size") for m in lines)
    assert len(lines) == 1 and re.search(r"\((\d+) times\)$", lines[0]), lines
    assert not [w for w in recwarn if "min_partition_size" in str(w.message)]


def test_missing_library_names_the_extra(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "flwr_datasets.partitioner", None)
    with pytest.raises(ConfigError, match=r"chillfl\[flwr-datasets\]"):
        partition("flwr", LABELS, 5, np.random.default_rng(0), {"partitioner": "IidPartitioner"})


NATURAL_CONFIG = """
out_dir = "{out}"
seed = 0
device = "cpu"
[dataset]
name = "synthetic"
num_clients = 3
size_log_mean = 1.0
size_log_sigma = 0.1
min_samples = 10
dim = 5
num_classes = 3
[partition]
name = "flwr"
partitioner = "NaturalIdPartitioner"
[model]
name = "mlp"
hidden = [4]
[federation]
num_clients = 3
clients_per_round = 3
rounds = 1
[eval]
clients = "none"
"""


@pytest.mark.parametrize("quiet", [True, False])
def test_the_natural_id_partitioners_own_bar_follows_quiet(quiet: bool, tmp_path, capfd: pytest.CaptureFixture[str]) -> None:
    """NaturalIdPartitioner draws its own tqdm bar ('Generating partition_id_to_indices'); under -q it printed anyway.
    Silenced only while it splits: its module's tqdm is the library's own again afterwards."""
    from chillfl.cli import main
    from flwr_datasets.partitioner import natural_id_partitioner

    bar = natural_id_partitioner.tqdm
    config = tmp_path / "natural.toml"
    config.write_text(NATURAL_CONFIG.format(out=tmp_path / "out"))
    assert main(["run", str(config), *(["-q"] if quiet else [])]) == 0
    err = capfd.readouterr().err
    assert ("Generating partition_id_to_indices" in err) is not quiet
    assert natural_id_partitioner.tqdm is bar

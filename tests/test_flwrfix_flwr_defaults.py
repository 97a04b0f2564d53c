"""``partition.name = "flwr"``: the resolved config (``--dry-run``, a run's ``config.toml``) writes the partitioner
class's own keyword defaults that chillfl passes through, not only the options the user set; a rerun of the written
``config.toml`` under a flwr-datasets whose defaults changed is the same run, bitwise.

Most tests stand a small partitioner class in for ``flwr_datasets.partitioner`` (and ``datasets.Dataset.from_dict``
for its rows), put in ``sys.modules`` for the test only, so they run, and pass, whether or not the optional
``flwr-datasets`` extra is installed; one test reads the real library's classes and is skipped where it is absent.

No ``from __future__ import annotations`` here: the stand-in's constructor annotations must be real types, as the
library's are (the options are checked against them).
"""

import sys
from chillfl.config import tomllib  # tomli on Python 3.10
import types
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

from chillfl.cli import main
from chillfl.data.flwr_partition import FlwrOptions
from chillfl.data.partition import partition
from chillfl.errors import ConfigError
from chillfl.options import parse_options
from chillfl.paths import PARTITION_FILE
from chillfl.resolve import partition_table
from chillfl.storage.results import to_toml

try:  # the real library, for the one test that reads it (imported here: its import takes seconds)
    import flwr_datasets.partitioner as FLWR_PARTITIONER
except ImportError:
    FLWR_PARTITIONER = None


class Partitioner:
    """The stand-in library's base class (chillfl lists the subclasses of ``Partitioner``)."""


def stand_in(min_size_default: int) -> type:
    """A partitioner class as a flwr-datasets release defines it, with ``min_size`` defaulting to ``min_size_default``
    (another release: another default). Its split depends on every option, so a changed default changes it."""

    class StandInPartitioner(Partitioner):
        def __init__(
            self,
            num_partitions: int,
            partition_by: str,
            alpha: float,
            min_size: int = min_size_default,
            balanced: bool = False,
            mode: Literal["even", "odd"] = "even",
            cap: int | None = None,
            weights: tuple[float, ...] = (1.0, 2.0),  # TOML reads a list back: not written
            strictness: float = 1,  # checked as a float it would reach the class as 1.0: not written
            seed: int | None = 42,  # never the class's own: chillfl draws it from the run's stream when unset
        ) -> None:
            self.k, self.alpha, self.min_size, self.balanced, self.mode, self.seed = num_partitions, alpha, min_size, balanced, mode, seed
            self.dataset: Any = None

        @property
        def num_partitions(self) -> int:
            return self.k

        def load_partition(self, i: int) -> dict[str, np.ndarray]:
            rows = np.asarray(self.dataset["_index"])
            key = [int(self.seed or 0), self.min_size, int(self.balanced), int(self.mode == "odd"), int(self.alpha * 1000)]
            order = np.random.default_rng(key).permutation(len(rows))
            return {"_index": rows[np.array_split(order, self.k)[i]]}

    return StandInPartitioner


@pytest.fixture()
def library(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """``flwr_datasets.partitioner`` (and ``datasets``) stood in for this test; ``release(n)`` swaps in a release whose
    ``min_size`` defaults to ``n``."""
    module = types.ModuleType("flwr_datasets.partitioner")
    rows = types.ModuleType("datasets")
    rows.Dataset = types.SimpleNamespace(from_dict=dict)  # type: ignore[attr-defined]  # the columns as they are
    module.Partitioner = Partitioner  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flwr_datasets.partitioner", module)
    monkeypatch.setitem(sys.modules, "datasets", rows)

    def release(min_size_default: int) -> None:
        module.StandInPartitioner = stand_in(min_size_default)  # type: ignore[attr-defined]

    release(2)
    return types.SimpleNamespace(release=release)


TABLE = {"name": "flwr", "partitioner": "StandInPartitioner", "options": {"alpha": 0.5}}


def test_the_resolved_table_writes_the_defaults_chillfl_passes_through(library: types.SimpleNamespace) -> None:
    options = partition_table(TABLE)["options"]
    assert options == {"alpha": 0.5, "min_size": 2, "balanced": False, "mode": "even", "cap": None}
    assert list(options) == ["alpha", "min_size", "balanced", "mode", "cap"]  # the signature's order
    written = tomllib.loads(to_toml({"partition": partition_table(TABLE)}))["partition"]
    assert written["options"] == {"alpha": 0.5, "min_size": 2, "balanced": False, "mode": "even"}  # None: unset, omitted
    assert partition_table(written) == partition_table(TABLE)  # read back and resolved again: the same table
    given = partition_table({**TABLE, "options": {"mode": "odd", "seed": 3, "alpha": 0.5}})["options"]
    assert given["mode"] == "odd" and given["seed"] == 3 and given["min_size"] == 2  # what is set stays set


def test_an_explicit_default_parses_to_the_unset_option(library: types.SimpleNamespace) -> None:
    """As for every part: parsing the resolved table gives the very options the bare table parses to."""
    bare = parse_options(FlwrOptions, {k: v for k, v in TABLE.items() if k != "name"}, "partition")
    full = parse_options(FlwrOptions, {k: v for k, v in partition_table(TABLE).items() if k != "name"}, "partition")
    assert full == bare and bare.options["min_size"] == 2


def test_an_unknown_partitioner_is_named_when_the_table_is_resolved(library: types.SimpleNamespace) -> None:
    with pytest.raises(ConfigError) as err:
        partition_table({**TABLE, "partitioner": "StandIn"})
    assert err.value.field == "partition.partitioner" and "StandInPartitioner" in err.value.message


def test_the_written_table_splits_alike_under_a_release_with_other_defaults(library: types.SimpleNamespace) -> None:
    written = tomllib.loads(to_toml({"partition": partition_table(TABLE)}))["partition"]
    labels = np.arange(60) % 3

    def split(table: dict[str, Any]) -> list[list[int]]:
        part = partition("flwr", labels, 3, np.random.default_rng(0), {k: v for k, v in table.items() if k != "name"})
        return [ix.tolist() for ix in part.client_indices]

    first = split(TABLE)
    library.release(7)
    assert split(written) == first
    assert split(TABLE) != first  # the table as the user wrote it takes the new release's default


CONFIG = """
seed = 0
device = "cpu"
[dataset]
name = "synthetic"
num_clients = 3
size_log_mean = 3.0
size_log_sigma = 0.1
min_samples = 10
dim = 5
num_classes = 3
[partition]
name = "flwr"
partitioner = "StandInPartitioner"
options = { alpha = 0.5 }
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


@pytest.mark.slow  # two runs end to end (about 3 s on a 2-core machine)
def test_a_rerun_of_config_toml_is_bitwise_under_a_release_with_other_defaults(
    library: types.SimpleNamespace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "flwr.toml"
    path.write_text(CONFIG, encoding="utf-8")
    assert main(["run", str(path), f"out_dir={tmp_path / 'first'}", "-q"]) == 0
    first = tmp_path / "first" / "flwr"
    saved = tomllib.loads((first / "config.toml").read_text(encoding="utf-8"))
    assert saved["partition"]["options"] == {"alpha": 0.5, "min_size": 2, "balanced": False, "mode": "even"}
    library.release(7)  # a newer flwr-datasets: another default
    assert main(["run", str(first / "config.toml"), f"out_dir={tmp_path / 'again'}", "-q"]) == 0
    again = tmp_path / "again" / "flwr"
    assert tomllib.loads((again / "config.toml").read_text(encoding="utf-8")) | {"out_dir": ""} == saved | {"out_dir": ""}
    for name in (PARTITION_FILE, "metrics.jsonl"):
        assert (again / name).read_bytes() == (first / name).read_bytes(), name
    capsys.readouterr()


@pytest.mark.skipif(FLWR_PARTITIONER is None, reason="reads the real flwr-datasets' signatures (the flwr-datasets extra)")
def test_the_real_librarys_defaults_are_written() -> None:
    """Against the installed flwr-datasets: the one test that needs it (skipped, and said so, where it is absent)."""
    import inspect

    options = partition_table({"name": "flwr", "partitioner": "DirichletPartitioner", "options": {"alpha": 0.3}})["options"]
    signature = inspect.signature(FLWR_PARTITIONER.DirichletPartitioner).parameters
    defaults = {k: p.default for k, p in signature.items() if p.default is not inspect.Parameter.empty}
    assert options == {"alpha": 0.3, **{k: v for k, v in defaults.items() if k != "seed"}}
    assert {"min_partition_size", "self_balancing", "shuffle"} <= set(options) and "seed" not in options

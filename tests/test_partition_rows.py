"""``partition.from`` checks the file's rows, not only the dataset's size: a changed ``dataset.split_seed`` reorders them.

The file records a digest of the training labels in row order, taken when the data were split (before an attack
relabels any row), and the dataset options it was made with; a run reading it compares the digest. Files written
before the record are read with the older checks (size, clients, indices).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import chillfl

BASE: dict[str, Any] = {
    "seed": 0,
    "device": "cpu",
    "dataset": {"name": "digits"},
    "model": {"name": "mlp", "hidden": [8]},
    "partition": {"name": "iid"},
    "federation": {"num_clients": 3, "clients_per_round": 3, "rounds": 1},
    "eval": {"clients": "none"},
}


def _run(tmp_path: Path, label: str, **overrides: Any) -> chillfl.Result:
    return chillfl.run(config=BASE, out_dir=tmp_path / label, progress=False, **overrides)


def _saved(tmp_path: Path, **overrides: Any) -> Path:
    first = _run(tmp_path, "first", **overrides)
    assert first.folder is not None
    return first.folder / "partition.json"


def test_the_file_records_the_row_order_and_the_dataset_options(tmp_path: Path) -> None:
    doc = json.loads(_saved(tmp_path).read_text())
    assert doc["version"] == 2
    assert doc["rows"]["labels_sha256"] and len(doc["rows"]["labels_sha256"]) == 64
    assert doc["rows"]["dataset"] == {"name": "digits", "test_fraction": 0.2, "split_seed": 0}


def test_another_split_seed_is_one_line_on_partition_from(tmp_path: Path) -> None:
    path = str(_saved(tmp_path))
    assert _run(tmp_path, "same", **{"partition.from": path}).folder is not None  # same rows: read as before
    with pytest.raises(chillfl.ConfigError, match="rows .* another order") as err:
        _run(tmp_path, "reordered", **{"partition.from": path, "dataset.split_seed": 1})
    assert err.value.field == "partition.from" and "split_seed" in err.value.message and "\n" not in str(err.value)
    assert not (tmp_path / "reordered").exists() or not any((tmp_path / "reordered").iterdir())


def test_the_digest_is_of_the_labels_before_a_label_flip(tmp_path: Path) -> None:
    """An attacked run's file fits the clean data: the attack relabels rows after the split."""
    path = str(_saved(tmp_path, **{"attack.kind": "label_flip", "attack.fraction": 0.4}))
    assert _run(tmp_path, "clean", **{"partition.from": path}).folder is not None


def test_an_older_file_without_the_record_is_read_with_the_older_checks(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    doc = json.loads(path.read_text())
    del doc["rows"]
    doc["version"] = 1
    path.write_text(json.dumps(doc))
    assert _run(tmp_path, "old", **{"partition.from": str(path), "dataset.split_seed": 1}).folder is not None

"""flwr_shakespeare's (and flwr_femnist's) client ids are grouped and sorted by pyarrow, not as a Python ``str`` per row.

Before, ``leaf_hub._ids`` made a Python list of every row's id and a numpy ``<U`` copy of it: most of the first
load's memory at the hub's 4.2M rows. The loaded arrays must stay bit-identical to those the strings gave.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.csv as pcsv  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from chillfl.data import leaf_hub  # noqa: E402
from chillfl.data.leaf_hub import LEAF_LETTERS, ShakespeareOptions  # noqa: E402
from chillfl.errors import ConfigError  # noqa: E402

SPEAKERS = ["KING LEAR", "Éowyn", "ZOË", "zoe", "😀 FOOL", "b", "B", "10", "9", "A\u0301", "\u00c1"]
"""Non-ASCII ids (2-, 3- and 4-byte UTF-8, a combining accent and its composed form: two clients), case, digits."""


def old_ids(table: Any, name: str) -> np.ndarray:
    """``_ids`` as it was (strings): the reference."""
    column = table.column(name).combine_chunks()
    return np.asarray(column.to_pylist(), dtype=object).astype(str)


def _table(ids: list[Any], seed: int = 0) -> Any:
    """LEAF-format rows (character_id, x of 80 characters, y), with characters outside the alphabet and non-ASCII."""
    rng = np.random.default_rng(seed)
    letters = list(LEAF_LETTERS) + list("~\té—😀\x7f{")
    rows = [[letters[i] for i in rng.integers(0, len(letters), 81)] for _ in ids]
    return pa.table({"character_id": ids, "x": ["".join(r[:80]) for r in rows], "y": [r[80] for r in rows]})


def _ids_of(n: int, speakers: list[Any]) -> list[Any]:
    rng = np.random.default_rng(n)
    return [speakers[i] for i in rng.integers(0, len(speakers), n)]  # interleaved, as speakers' lines are


def _both(table: Any, opts: ShakespeareOptions, monkeypatch: pytest.MonkeyPatch) -> None:
    new = leaf_hub._shakespeare_decoded(table, opts)
    with monkeypatch.context() as m:
        m.setattr(leaf_hub, "_ids", old_ids)
        old = leaf_hub._shakespeare_decoded(table, opts)
    for field in ("x_train", "y_train", "x_test", "y_test", "train_bounds", "test_bounds"):
        a, b = getattr(new, field), getattr(old, field)
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), field
    assert len(new.train_bounds) > 2


def test_a_generated_shakespeare_csv_and_parquet_load_bit_identical_to_the_strings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = _table(_ids_of(400, SPEAKERS))
    pcsv.write_csv(table, tmp_path / "shakespeare.csv")
    pq.write_table(table, tmp_path / "part.parquet")
    for path in ("shakespeare.csv", "part.parquet"):
        read = leaf_hub.read_table(str(tmp_path / path), tmp_path)[0]
        for opts in (ShakespeareOptions(train_fraction=0.7), ShakespeareOptions(min_samples=40, max_clients=5, sample_fraction=0.8, split_seed=3)):
            _both(read, opts, monkeypatch)


def test_integer_dictionary_and_nul_ended_ids_group_as_their_strings_did(monkeypatch: pytest.MonkeyPatch) -> None:
    """Integers as their decimal text ("10" before "9"); a trailing NUL dropped as numpy's strings drop it ("A\\0" is "A")."""
    ints = _ids_of(300, [3, 10, 9, -1, 100, 2**40])
    _both(_table(ints), ShakespeareOptions(), monkeypatch)
    table = _table(_ids_of(300, ["A", "A\0", "A\0\0", "\0A", "B\0C", "B"]))
    _both(table, ShakespeareOptions(), monkeypatch)
    encoded = table.set_column(0, "character_id", table.column("character_id").dictionary_encode())
    _both(encoded, ShakespeareOptions(), monkeypatch)


def test_ids_are_ranks_in_the_strings_order() -> None:
    table = pa.table({"character_id": ["b", "é", "a", "b", "B", "😀", "a\0"]})
    assert leaf_hub._ids(table, "character_id").tolist() == [2, 3, 1, 2, 0, 4, 1]  # B < a < b < é < 😀 (code points)
    assert leaf_hub._ids(pa.table({"character_id": [10, 9, 10]}), "character_id").tolist() == [0, 1, 0]  # "10" < "9"


def test_an_id_column_that_is_no_utf8_is_one_line() -> None:
    bad = pa.Array.from_buffers(pa.string(), 2, [None, pa.py_buffer(np.array([0, 2, 3], np.int32).tobytes()), pa.py_buffer(b"\xff\xfeA")])
    with pytest.raises(ConfigError, match="column 'character_id' is not valid UTF-8"):  # was a UnicodeDecodeError traceback
        leaf_hub._ids(pa.table({"character_id": bad}), "character_id")


def test_a_null_id_is_refused_not_made_a_client_of_its_own() -> None:
    with pytest.raises(ConfigError, match=r"1 rows have no 'character_id' \(null\); every row needs its client's id") as info:
        leaf_hub._ids(pa.table({"character_id": ["a", None, "b"]}), "character_id")
    assert info.value.field == f"{leaf_hub.SECTION}.path"

"""flwr_shakespeare's characters are encoded over the whole column at once (uint8) and cached memory-mapped.

Before, a Python loop over every character filled an int64 array (about 2 minutes and 8 GB at the hub's 4.2M
rows) on every run, with no cache. The encoding must stay bit-identical to that loop.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.csv as pcsv  # noqa: E402
from test_leaf_parquet import write_shakespeare  # noqa: E402

from chillfl.data import leaf_hub, load_dataset  # noqa: E402
from chillfl.data.leaf_hub import LEAF_LETTERS, encode_column  # noqa: E402
from chillfl.errors import ConfigError  # noqa: E402


def _loop(texts: list[str]) -> tuple[np.ndarray, int]:
    """The encoding as it was (every character through a dict, into int64): the reference."""
    lut = {c: i for i, c in enumerate(LEAF_LETTERS)}
    width = len(texts[0])
    flat = np.fromiter((lut.get(c, -1) for t in texts for c in t), dtype=np.int64, count=width * len(texts))
    return np.maximum(flat, 0).reshape(len(texts), width), int((flat < 0).sum())


def test_the_vectorised_encoder_equals_the_loop_on_every_letter_and_unknown_characters() -> None:
    odd = '~\té—😀\r"\n\'\x00\x7f'  # ASCII outside the alphabet, 2-, 3- and 4-byte UTF-8, quotes, newlines, NUL, DEL
    text = (LEAF_LETTERS + odd) * 3
    texts = [text[i : i + 20] for i in range(len(text) - 20)]  # windows of 20 characters, of 20 to 35 bytes each
    x, unknown = encode_column(pa.array(texts))
    want, want_unknown = _loop(texts)
    assert x.dtype == np.uint8 and np.array_equal(x, want) and unknown == want_unknown
    assert want_unknown > 0 and sorted(set(want.ravel().tolist())) == list(range(80))  # every letter and an unknown seen
    sliced = pa.array(["?" * 20, *texts]).slice(1)  # an array that starts past its buffers' start
    assert np.array_equal(encode_column(sliced)[0], want)


def test_lengths_count_characters_not_bytes_and_nulls_are_one_line() -> None:
    with pytest.raises(ConfigError, match=r"different lengths \[2, 3\]"):
        encode_column(pa.array(["éé", "abc"]))  # 4 and 3 bytes, 2 and 3 characters
    with pytest.raises(ConfigError, match="1 Shakespeare rows have no 'x'"):
        encode_column(pa.array(["ab", None]))


def _csv(path: Path, ys: list[str]) -> None:
    texts = ["a,\"b\"\n" + "c" * 74, "d" * 80, "é" * 80, "f" * 80]
    pcsv.write_csv(pa.table({"character_id": ["A", "A", "B", "B"], "x": texts, "y": ys}), path)


def test_a_second_load_reads_the_cache_and_a_changed_source_or_alphabet_is_not_read_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "shakespeare.csv"
    _csv(root, ["1", "2", "3", "~"])
    opts = {"path": str(root), "train_fraction": 0.5}
    first = load_dataset("flwr_shakespeare", opts, data_dir=tmp_path)
    assert first.x_train[0, :6].tolist() == [53.0, 8.0, 3.0, 54.0, 3.0, 0.0]  # a , " b " \n
    assert first.x_train[1].tolist() == [0.0] * 80  # B's "é" * 80: outside the alphabet, index 0
    assert first.y_train.tolist() == [12, 14] and first.y_test.tolist() == [13, 0]  # "1" = 12, "3" = 14; "2" = 13, "~" (unknown)

    def no_read(*args: object) -> None:
        raise AssertionError("the source was read again")

    with monkeypatch.context() as m:
        m.setattr(leaf_hub, "read_table", no_read)
        again = load_dataset("flwr_shakespeare", opts, data_dir=tmp_path)
    assert again.x_train.equal(first.x_train) and again.y_train.equal(first.y_train) and again.y_test.equal(first.y_test)
    assert again.channel_mean is None  # indices: nothing standardised, nothing to undo

    _csv(root, ["1", "2", "3", "4"])  # the same size: only its mtime tells
    os.utime(root, ns=(1, 1))
    assert load_dataset("flwr_shakespeare", opts, data_dir=tmp_path).y_test.tolist() == [13, 15]  # "4" = 15

    monkeypatch.setattr(leaf_hub, "LEAF_LETTERS", LEAF_LETTERS[1:] + LEAF_LETTERS[0])  # "\n" last: every index one less
    assert load_dataset("flwr_shakespeare", opts, data_dir=tmp_path).y_test.tolist() == [12, 14]


def test_the_cached_folder_load_equals_the_in_memory_one(tmp_path: Path) -> None:
    root = tmp_path / "flwrlabs" / "shakespeare"
    write_shakespeare(root)
    cached = load_dataset("flwr_shakespeare", {}, data_dir=tmp_path)
    assert any((tmp_path / ".chillfl-cache").glob("flwr_shakespeare-*/meta.json"))
    mapped = leaf_hub._shakespeare_decoded(leaf_hub.read_table(str(root), tmp_path)[0], leaf_hub.ShakespeareOptions())
    assert np.array_equal(cached.x_train.numpy(), mapped.x_train.astype(np.float32)) and np.array_equal(cached.y_test.numpy(), mapped.y_test)

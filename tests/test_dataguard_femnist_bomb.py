"""FEMNIST (flwr_femnist) PNGs past PIL's decompression-bomb limit are refused with one line naming the row.

PIL only *warns* (DecompressionBombWarning) for an image between MAX_IMAGE_PIXELS and twice that, and
leaf_hub decoded it anyway (hf.py already turned the warning into an error). The limit is lowered here
so that a small real PNG trips the warning, in the parquet layout flwrlabs/femnist stores.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402
from PIL import Image  # noqa: E402

from chillfl.data import load_dataset  # noqa: E402
from chillfl.errors import ConfigError  # noqa: E402

BAD_ROW = 7


def _png(side: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((side, side), 128, dtype=np.uint8), mode="L").save(buf, format="PNG")
    return buf.getvalue()


def _write(root: Path, bad_side: int) -> None:
    """12 rows, 2 writers; every image 28x28 (784 pixels) but row BAD_ROW's, bad_side x bad_side."""
    n = 12
    blobs = [_png(bad_side if i == BAD_ROW else 28) for i in range(n)]
    image = pa.StructArray.from_arrays([pa.array(blobs, pa.binary()), pa.array([None] * n, pa.string())], names=["bytes", "path"])
    table = pa.table({"image": image, "writer_id": ["w0", "w1"] * (n // 2), "hsf_id": [0] * n, "character": pa.array([i % 62 for i in range(n)], pa.int64())})
    (root / "data").mkdir(parents=True)
    pq.write_table(table, root / "data" / "train-00000-of-00001.parquet")


def test_a_png_over_the_pixel_limit_is_one_line_naming_its_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 40x40 = 1600: over the limit, under 2x (a warning, not an error)
    _write(tmp_path / "fem", bad_side=40)
    with pytest.raises(ConfigError) as err:
        load_dataset("flwr_femnist", {"path": str(tmp_path / "fem")}, data_dir=tmp_path / "data")
    assert err.value.field == "dataset.path"
    message = str(err.value)
    assert "\n" not in message
    assert f"FEMNIST row {BAD_ROW}: cannot decode the image" in message and "decompression bomb" in message


def test_images_under_the_limit_still_decode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 28x28 = 784: under the limit
    _write(tmp_path / "fem", bad_side=28)
    ds = load_dataset("flwr_femnist", {"path": str(tmp_path / "fem")}, data_dir=tmp_path / "data")
    assert tuple(ds.x_train.shape[1:]) == (1, 28, 28) and len(ds.x_train) + len(ds.x_test) == 12


def test_a_corrupt_png_names_its_table_row(tmp_path: Path) -> None:
    """The row named is the table's (it was the position in decode order: train rows first, then test rows)."""
    root = tmp_path / "fem"
    _write(root, bad_side=28)
    path = root / "data" / "train-00000-of-00001.parquet"
    table = pq.read_table(path)
    blobs = [_png(28)] * 12
    blobs[BAD_ROW] = b"\x89PNG\r\n\x1a\n not a png"
    image = pa.StructArray.from_arrays([pa.array(blobs, pa.binary()), pa.array([None] * 12, pa.string())], names=["bytes", "path"])
    pq.write_table(table.set_column(0, "image", image), path)
    with pytest.raises(ConfigError, match=f"FEMNIST row {BAD_ROW}: cannot decode"):
        load_dataset("flwr_femnist", {"path": str(root)}, data_dir=tmp_path / "data")

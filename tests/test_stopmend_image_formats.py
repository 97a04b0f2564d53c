"""Images in a format ``datasets`` stores and decodes (TGA, JPEG 2000, AVIF, ...) load: the allow-list of seven formats
refused them; only EPS (which Pillow hands to Ghostscript) is kept out, in the hf, Caltech-256 and FEMNIST loaders."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("datasets")
import pyarrow.parquet as pq  # noqa: E402
from PIL import Image, features  # noqa: E402

from chillfl.data import load_dataset, loaders  # noqa: E402
from fake_datasets import caltech_members  # noqa: E402
from test_fsfix_loaders import _write  # noqa: E402
from test_secfix_images import _hf_parquet, _png  # noqa: E402

FORMATS = ["TGA", "JPEG2000"]


def _encoded(fmt: str, value: int, mode: str = "RGB", size: int = 8) -> bytes:
    if fmt == "JPEG2000" and not features.check("jpg_2000"):
        pytest.skip("this Pillow was built without OpenJPEG")
    buf = io.BytesIO()
    Image.fromarray(np.full((size, size, 3), value, np.uint8)).convert(mode).save(buf, format=fmt)
    assert Image.open(io.BytesIO(buf.getvalue())).format == fmt
    return buf.getvalue()


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_hf_cell_in_a_format_datasets_keeps_decodes(tmp_path: Path, fmt: str) -> None:
    root = _hf_parquet(tmp_path / "hfdata", _encoded(fmt, 77))
    ds = load_dataset("hf", {"path": str(root), "augment": {"normalize": False}})
    assert tuple(ds.x_train.shape) == (12, 3, 8, 8)
    assert sorted(np.unique(ds.x_train.numpy() * 255).round().astype(int).tolist()) == sorted({77, *range(10, 120, 10)})  # TGA lossless; J2K too at 8x8 flat


def test_a_caltech_file_that_is_not_a_jpeg_decodes(tmp_path: Path) -> None:
    members = caltech_members(per_class=2)
    members["256_ObjectCategories/001.ak47/001_0001.jpg"] = _encoded("TGA", 30, size=48)  # was: "not a JPEG or PNG image"
    _write(tmp_path, members)
    x, y, _ = loaders.load_caltech256_images(tmp_path, loaders.Caltech256Options())
    assert x.shape == (4, 3, 64, 64) and y.tolist() == [0, 0, 1, 1]
    assert np.abs(x[1].astype(int) - 30).max() <= 1  # the TGA file (sorted second in class 0), grey 30


def test_a_femnist_cell_in_tga_decodes(tmp_path: Path) -> None:
    n = 12
    blobs = [_encoded("TGA", 128, "L") if i == 3 else _png(128, "L") for i in range(n)]  # 8x8, as _png
    image = pa.StructArray.from_arrays([pa.array(blobs, pa.binary()), pa.array([None] * n, pa.string())], names=["bytes", "path"])
    table = pa.table({"image": image, "writer_id": ["w0", "w1"] * (n // 2), "hsf_id": [0] * n, "character": pa.array([i % 62 for i in range(n)], pa.int64())})
    (tmp_path / "fem" / "data").mkdir(parents=True)
    pq.write_table(table, tmp_path / "fem" / "data" / "train-00000-of-00001.parquet")
    ds = load_dataset("flwr_femnist", {"path": str(tmp_path / "fem")}, data_dir=tmp_path / "data")
    assert len(ds.x_train) + len(ds.x_test) == n

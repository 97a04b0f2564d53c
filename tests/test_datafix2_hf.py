"""dataset.name = "hf" reads the image bytes stored in the file and nothing else: a ``datasets.Image`` row with no
bytes but a ``path`` made ``datasets`` open that path (a URL fetched over the network, a FIFO that hung the run, any
local file read silently), and a corrupt, truncated or decompression-bomb image was a PIL traceback. Both are now one
line on ``dataset.image_column`` naming the row. Files are written with the real ``datasets`` library."""

from __future__ import annotations

import io
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest

datasets = pytest.importorskip("datasets")
from PIL import Image  # noqa: E402

from chillfl.data import load_dataset  # noqa: E402
from chillfl.errors import ConfigError  # noqa: E402


def _png(i: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray((np.arange(20).reshape(4, 5) + 10 * i).astype(np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def _write(tmp_path: Path, rows: list[dict[str, Any]], disk: bool = False) -> Path:
    """A train split of 12 rows (``rows`` first, the rest good PNGs) as parquet or a save_to_disk folder."""
    images = rows + [{"bytes": _png(i), "path": None} for i in range(12 - len(rows))]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=2)})
    ds = datasets.Dataset.from_dict({"image": images, "label": [i % 2 for i in range(12)]}, features=features)
    if disk:
        ds.save_to_disk(str(tmp_path / "folder"), num_shards=1)  # no size estimate: it asks a URL for its size
        return tmp_path / "folder"
    import pyarrow.parquet as pq

    # pyarrow writes the rows as they are (schema metadata with the datasets features included, as to_parquet's):
    # to_parquet itself asks for the size of a URL it finds (a request)
    pq.write_table(ds.data.table, str(tmp_path / "train.parquet"))
    return tmp_path / "train.parquet"


def _load(path: Path, **opts: Any) -> Any:
    return load_dataset("hf", {"path": str(path), "test_fraction": 0.25, "augment": {"normalize": False}, **opts})


@pytest.fixture()
def no_fetch(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records (and stops) every attempt to fetch a URL or connect a socket."""
    import datasets.features.image as image_feature

    tried: list[str] = []

    def xopen(path: str, *a: Any, **k: Any) -> Any:
        tried.append(path)
        raise OSError("fetching is not allowed in this test")

    def connect(self: socket.socket, address: Any) -> None:
        tried.append(str(address))
        raise OSError("network is not allowed in this test")

    monkeypatch.setattr(image_feature, "xopen", xopen)
    monkeypatch.setattr(socket.socket, "connect", connect)
    return tried


@pytest.mark.parametrize("disk", [False, True], ids=["parquet", "save_to_disk"])
def test_an_image_named_by_url_is_refused_and_never_fetched(tmp_path: Path, no_fetch: list[str], disk: bool) -> None:
    path = _write(tmp_path, [{"bytes": None, "path": "http://127.0.0.1:9/beacon.png"}], disk=disk)
    with pytest.raises(ConfigError, match=r"dataset\.image_column.*row 0 .*no image bytes.*beacon\.png") as err:
        _load(path)
    assert len(str(err.value).splitlines()) == 1
    assert no_fetch == []


def test_an_image_named_by_local_path_is_refused_not_read(tmp_path: Path, no_fetch: list[str]) -> None:
    """A real image on the user's disk was trained on silently."""
    real = tmp_path / "private.png"
    real.write_bytes(_png(3))
    path = _write(tmp_path, [{"bytes": _png(1), "path": None}, {"bytes": None, "path": str(real)}])
    with pytest.raises(ConfigError, match=r"dataset\.image_column.*row 1 .*no image bytes.*private\.png"):
        _load(path)


@pytest.mark.parametrize("column", ["label_column", "feature_columns"])
def test_other_columns_never_open_an_image_path(tmp_path: Path, no_fetch: list[str], column: str) -> None:
    """The label or feature columns are read undecoded too: an Image column named there is refused, not fetched."""
    path = _write(tmp_path, [{"bytes": None, "path": "http://127.0.0.1:9/beacon.png"}])
    opts: dict[str, Any] = {"label_column": "image"} if column == "label_column" else {"feature_columns": ["image"]}
    with pytest.raises(ConfigError, match=rf"dataset\.{column}"):
        _load(path, **opts)
    assert no_fetch == []


CORRUPT = {
    "not-an-image": b"notapng",
    "truncated-png": _png(2)[:30],
    "empty": b"",
}


@pytest.mark.parametrize("case", list(CORRUPT))
def test_a_corrupt_image_is_one_line_naming_its_row(tmp_path: Path, case: str) -> None:
    path = _write(tmp_path, [{"bytes": _png(0), "path": None}, {"bytes": CORRUPT[case], "path": None}])
    with pytest.raises(ConfigError, match=r"dataset\.image_column.*row 1 of column 'image': cannot decode the image") as err:
        _load(path)
    assert len(str(err.value).splitlines()) == 1


@pytest.mark.parametrize("limit", [12, 5], ids=["bomb-warning", "bomb-error"])
def test_a_decompression_bomb_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: int) -> None:
    """PIL warns above MAX_IMAGE_PIXELS and raises above twice that; both refuse the image (the 4x5 images stand in for
    a 20000x20000 one, with the limit lowered)."""
    path = _write(tmp_path, [])
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", limit)
    with pytest.raises(ConfigError, match=r"dataset\.image_column.*row 0 of column 'image': cannot decode the image.*(decompression bomb|exceeds limit)"):
        _load(path)


def test_good_images_still_load_with_their_pixels(tmp_path: Path) -> None:
    ds = _load(_write(tmp_path, []))
    assert tuple(ds.x_train.shape[1:]) == (1, 4, 5) and len(ds.x_train) + len(ds.x_test) == 12
    got = np.concatenate([ds.x_train.numpy(), ds.x_test.numpy()])
    want = {round(float(i * 10 / 255), 5) for i in range(12)}
    assert {round(float(a[0, 0, 0]), 5) for a in got} == want

"""No dataset image reaches Ghostscript: Pillow picks a format from the bytes, so an image cell of an ``hf`` parquet
file, a Tiny-ImageNet/Caltech-256 ``.JPEG``, or a FEMNIST cell holding EPS bytes was opened as EPS, and loading it ran
``gs`` on the data file's PostScript program (a gs failure was a CalledProcessError traceback). Each loader now opens
only the raster formats its datasets use, and such a file is one line naming the row or file.

No Ghostscript is needed: a stand-in ``gs`` on PATH writes a marker file if it is ever run, and Pillow's EPS plugin
records being asked to open anything."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
datasets = pytest.importorskip("datasets")
import pyarrow.parquet as pq  # noqa: E402
from PIL import EpsImagePlugin, Image  # noqa: E402

from chillfl.data import load_dataset, loaders  # noqa: E402
from chillfl.errors import ConfigError  # noqa: E402
from fake_datasets import caltech_members, tiny_imagenet_members  # noqa: E402
from test_fsfix_loaders import _write  # noqa: E402

EPS = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\n(hello from the data file) print\nshowpage\n%%EOF\n"


class Trap:
    """Where the stand-in ``gs`` writes, and the EPS plugin's calls."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker
        self.eps_opened = 0

    def untouched(self) -> bool:
        return not self.marker.exists() and self.eps_opened == 0


@pytest.fixture()
def trap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Trap:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    caught = Trap(tmp_path / "GS_CALLED")
    gs = bin_dir / "gs"
    gs.write_text(f'#!/bin/sh\n[ "$1" = --version ] && {{ echo 10.02.1; exit 0; }}\necho "gs $*" >> {caught.marker}\nexit 1\n')
    gs.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(EpsImagePlugin, "gs_binary", None)  # Pillow caches where gs is: look again, find the stand-in
    real_open = EpsImagePlugin.EpsImageFile._open

    def recording_open(self: EpsImagePlugin.EpsImageFile) -> None:
        caught.eps_opened += 1
        real_open(self)

    monkeypatch.setattr(EpsImagePlugin.EpsImageFile, "_open", recording_open)
    return caught


def _png(value: int, mode: str = "RGB") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), value, np.uint8)).convert(mode).save(buf, format="PNG")
    return buf.getvalue()


def test_the_eps_trap_fires_when_pillow_is_left_to_choose(trap: Trap) -> None:
    """The control: Pillow on its own opens these bytes as EPS and runs the stand-in gs."""
    with pytest.raises(Exception):  # noqa: B017 - the stand-in gs exits 1: CalledProcessError
        Image.open(io.BytesIO(EPS)).load()
    assert trap.marker.exists() and trap.eps_opened == 1


def _hf_parquet(root: Path, bad: bytes) -> Path:
    """Train and test splits of 12 8x8 images, row 0 of train holding ``bad``."""
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(num_classes=2)})
    root.mkdir()
    for split in ("train", "test"):
        blobs = [bad if split == "train" and i == 0 else _png(10 * i) for i in range(12)]
        ds = datasets.Dataset.from_dict({"img": [{"bytes": b, "path": None} for b in blobs], "label": [i % 2 for i in range(12)]}, features=features)
        pq.write_table(ds.data.table, str(root / f"{split}-00000-of-00001.parquet"))
    return root


def test_an_eps_cell_of_an_hf_parquet_file_is_one_line_and_never_reaches_ghostscript(tmp_path: Path, trap: Trap) -> None:
    root = _hf_parquet(tmp_path / "hfdata", EPS)
    with pytest.raises(ConfigError) as err:
        load_dataset("hf", {"path": str(root)})
    assert err.value.field == "dataset.image_column"
    assert err.value.message == "row 0 of column 'img': cannot decode the image (not an image format Pillow decodes, EPS refused)"
    assert trap.untouched()


@pytest.mark.parametrize("fmt", ["JPEG", "TIFF", "WEBP", "BMP", "GIF"])
def test_raster_formats_of_hub_datasets_still_decode(tmp_path: Path, fmt: str) -> None:
    from PIL import features

    if fmt == "WEBP" and not features.check("webp"):
        pytest.skip("this Pillow was built without WebP")
    buf = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), 77, np.uint8)).save(buf, format=fmt)
    root = _hf_parquet(tmp_path / "hfdata", buf.getvalue())
    ds = load_dataset("hf", {"path": str(root), "augment": {"normalize": False}})
    assert tuple(ds.x_train.shape) == (12, 3, 8, 8)


def test_an_eps_tiny_imagenet_jpeg_is_one_line_naming_it_and_never_reaches_ghostscript(tmp_path: Path, trap: Trap) -> None:
    members = tiny_imagenet_members()
    members["tiny-imagenet-200/train/n01/images/n01_1.JPEG"] = EPS
    _write(tmp_path, members)
    bad = tmp_path / "tiny-imagenet-200" / "train" / "n01" / "images" / "n01_1.JPEG"
    with pytest.raises(ConfigError) as err:
        loaders.load_tiny_imagenet(tmp_path, loaders.TinyImagenetOptions())
    assert err.value.field == "data_dir"
    assert err.value.message == f"cannot read {bad}: corrupt or wrong format (not an image format Pillow decodes, EPS refused)"
    assert trap.untouched()


def test_an_eps_caltech_jpg_is_one_line_naming_it_and_never_reaches_ghostscript(tmp_path: Path, trap: Trap) -> None:
    members = caltech_members(per_class=2)
    members["256_ObjectCategories/001.ak47/001_0001.jpg"] = EPS
    _write(tmp_path, members)
    bad = tmp_path / "256_ObjectCategories" / "001.ak47" / "001_0001.jpg"
    with pytest.raises(ConfigError) as err:
        loaders.load_caltech256_images(tmp_path, loaders.Caltech256Options())
    assert err.value.field == "data_dir"
    assert err.value.message == f"cannot read {bad}: corrupt or wrong format (not an image format Pillow decodes, EPS refused)"
    assert trap.untouched()


def test_an_eps_femnist_cell_is_one_line_and_never_reaches_ghostscript(tmp_path: Path, trap: Trap) -> None:
    n = 12
    blobs = [EPS if i == 3 else _png(128, "L") for i in range(n)]
    image = pa.StructArray.from_arrays([pa.array(blobs, pa.binary()), pa.array([None] * n, pa.string())], names=["bytes", "path"])
    table = pa.table({"image": image, "writer_id": ["w0", "w1"] * (n // 2), "hsf_id": [0] * n, "character": pa.array([i % 62 for i in range(n)], pa.int64())})
    (tmp_path / "fem" / "data").mkdir(parents=True)
    pq.write_table(table, tmp_path / "fem" / "data" / "train-00000-of-00001.parquet")
    with pytest.raises(ConfigError, match="FEMNIST row 3: cannot decode the image") as err:
        load_dataset("flwr_femnist", {"path": str(tmp_path / "fem")}, data_dir=tmp_path / "data")
    assert err.value.field == "dataset.path" and "\n" not in str(err.value)
    assert trap.untouched()

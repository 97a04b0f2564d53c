"""A damaged AVIF image is one line naming the file or row, as any corrupt image is: Pillow's AVIF decoder raises
RuntimeError ("Conversion from YUV failed"), which the image loaders did not catch once every Pillow format but EPS was
decoded (a Caltech-256 run over such a file ended in a traceback, exit 1)."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest

from chillfl.errors import ConfigError

Image = pytest.importorskip("PIL.Image")
Image.init()
if "AVIF" not in Image.OPEN:
    pytest.skip("this Pillow has no AVIF plugin", allow_module_level=True)


def _damaged_avif() -> bytes:
    """AVIF bytes with one flipped byte on which Pillow's decoder raises RuntimeError (searched with a fixed seed)."""
    buf = io.BytesIO()
    Image.new("RGB", (17, 13)).save(buf, "AVIF")
    data = buf.getvalue()
    rng = random.Random(1)
    for _ in range(2000):
        damaged = bytearray(data)
        damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        try:
            with Image.open(io.BytesIO(bytes(damaged)), formats=["AVIF"]) as im:
                im.load()
        except RuntimeError:
            return bytes(damaged)
        except Exception:  # noqa: BLE001 - another error Pillow raises itself: not the case sought
            continue
    pytest.fail("no flipped byte made Pillow's AVIF decoder raise RuntimeError")


def test_a_damaged_avif_file_is_a_corrupt_file_on_data_dir(tmp_path: Path) -> None:
    from chillfl.data.loaders import _decode

    path = tmp_path / "002_0003.jpg"
    path.write_bytes(_damaged_avif())
    with pytest.raises(ConfigError) as caught:
        _decode(path, 8, True)
    assert caught.value.field == "data_dir" and path.name in str(caught.value)


def test_a_damaged_avif_cell_is_one_line_on_the_image_column() -> None:
    from chillfl.data.hf import _open_image

    with pytest.raises(ConfigError) as caught:
        _open_image(_damaged_avif(), "RGB", 7, "img")
    assert caught.value.field.endswith("image_column") and "row 7" in str(caught.value)

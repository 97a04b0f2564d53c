"""dataset.name = "hf": 1-bit ("1") and gray + alpha ("LA") images are grayscale, read as one channel like "L" ones
(they were converted to 3-channel RGB). Images are written by Pillow in those modes and stored by the real ``datasets``
library; expected pixels are worked out by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

datasets = pytest.importorskip("datasets")
from PIL import Image  # noqa: E402

from chillfl.data import load_dataset  # noqa: E402

RAW = {"augment": {"normalize": False}}
"""normalize = false: the inputs as the loader scaled them (8-bit pixels / 255), before standardisation."""

BITS = np.array([[1, 0, 1], [0, 0, 1]], dtype=bool)
"""A 2x3 1-bit image: Pillow's "1" -> "L" gives 255 where set, so 1.0 and 0.0 after / 255."""
GRAY = np.array([[0, 51, 102], [153, 204, 255]], dtype=np.uint8)
"""Gray values of the LA images (/ 255: 0, 0.2, 0.4, 0.6, 0.8, 1.0); their alpha is dropped."""
ALPHA = np.array([[255, 0, 128], [7, 255, 1]], dtype=np.uint8)


def _save(root: Path, train: list[Any], test: list[Any]) -> Path:
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])})
    split = lambda images: datasets.Dataset.from_dict({"img": images, "label": [i % 2 for i in range(len(images))]}, features=features)  # noqa: E731
    datasets.DatasetDict({"train": split(train), "test": split(test)}).save_to_disk(str(root))
    return root


def _bits(flip: bool = False) -> Any:
    image = Image.fromarray(BITS[:, ::-1] if flip else BITS)
    assert image.mode == "1"
    return image


def _gray_alpha() -> Any:
    image = Image.merge("LA", [Image.fromarray(GRAY), Image.fromarray(ALPHA)])
    assert image.mode == "LA"
    return image


def test_one_bit_images_are_one_channel_like_their_l_copies(tmp_path: Path) -> None:
    # train in mode "1", test the same pixels saved as "L": the train split was 3 channels, the test 1 (refused as
    # "train inputs have shape [3, 2, 3], test inputs [1, 2, 3]")
    ds = load_dataset("hf", {"path": str(_save(tmp_path / "bits", [_bits(), _bits(True)], [_bits().convert("L")])), **RAW})
    assert tuple(ds.x_train.shape) == (2, 1, 2, 3) and tuple(ds.x_test.shape) == (1, 1, 2, 3)
    torch.testing.assert_close(ds.x_train[0, 0], torch.from_numpy(BITS.astype(np.float32)))
    torch.testing.assert_close(ds.x_train[1, 0], torch.from_numpy(BITS[:, ::-1].astype(np.float32)))
    torch.testing.assert_close(ds.x_test, ds.x_train[:1])


def test_gray_alpha_images_are_their_gray_channel(tmp_path: Path) -> None:
    ds = load_dataset("hf", {"path": str(_save(tmp_path / "la", [_gray_alpha(), _gray_alpha()], [_gray_alpha()])), **RAW})
    assert tuple(ds.x_train.shape) == (2, 1, 2, 3)  # was (2, 3, 2, 3): three copies of the gray channel
    torch.testing.assert_close(ds.x_test[0, 0], torch.from_numpy(GRAY.astype(np.float32) / 255), atol=1e-6, rtol=0)


def test_a_column_mixing_gray_modes_is_read_as_the_first_image_says(tmp_path: Path) -> None:
    """The first image decides the column's channels, as for "L": a gray + alpha first row makes every row "L" (an RGB
    row too, by Pillow's luma); an RGB first row keeps 3 channels, a 1-bit row among them converted to RGB."""
    rgb = Image.fromarray(np.stack([GRAY, GRAY, GRAY], axis=-1))
    gray_first = load_dataset("hf", {"path": str(_save(tmp_path / "gray_first", [_gray_alpha(), _bits(), rgb], [_bits()])), **RAW})
    assert tuple(gray_first.x_train.shape) == (3, 1, 2, 3)
    torch.testing.assert_close(gray_first.x_train[1, 0], torch.from_numpy(BITS.astype(np.float32)))
    torch.testing.assert_close(gray_first.x_train[2, 0], torch.from_numpy(GRAY.astype(np.float32) / 255), atol=1e-6, rtol=0)
    rgb_first = load_dataset("hf", {"path": str(_save(tmp_path / "rgb_first", [rgb, _bits()], [rgb])), **RAW})
    assert tuple(rgb_first.x_train.shape) == (2, 3, 2, 3)
    torch.testing.assert_close(rgb_first.x_train[1], torch.from_numpy(np.repeat(BITS[None].astype(np.float32), 3, axis=0)))

"""A data folder the file system will not list is one line on ``data_dir`` saying so ("permission denied"), as an
unreadable file is (tests/test_fsfix_loaders.py): Caltech-256's root or class folder was a PermissionError traceback,
and Tiny-ImageNet's class folder or FEMNIST's LEAF folder was globbed to nothing and said to hold no images (or no
json files), which sent the user looking for missing files.

EACCES is simulated (tests may run as root, who lists any folder): ``Path.iterdir`` raises PermissionError for the one
folder, as ``os.scandir`` does for a folder of mode 000 not the user's."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Iterator

import pytest

from chillfl.data import loaders
from chillfl.errors import ConfigError
from fake_datasets import caltech_members, leaf_json, tiny_imagenet_members
from test_fsfix_loaders import _write

pytest.importorskip("PIL")


def _unlistable(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    real = Path.iterdir

    def fake(self: Path) -> Iterator[Path]:
        if self == folder:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
        return real(self)

    monkeypatch.setattr(Path, "iterdir", fake)


@pytest.mark.parametrize("which", ["root", "class"])
def test_an_unlistable_caltech_folder_is_one_line_saying_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str) -> None:
    _write(tmp_path, caltech_members(per_class=1))
    root = tmp_path / "256_ObjectCategories"
    x, y, classes = loaders.load_caltech256_images(tmp_path, loaders.Caltech256Options())
    assert classes == 2 and list(y) == [0, 1]  # the control: listed, the clutter class left out
    bad = root if which == "root" else root / "002.american-flag"
    _unlistable(monkeypatch, bad)
    with pytest.raises(ConfigError) as info:
        loaders.load_caltech256_images(tmp_path, loaders.Caltech256Options())
    assert info.value.field == "data_dir" and info.value.message == f"cannot read {bad}: permission denied"


def test_an_unlistable_tiny_imagenet_class_is_not_said_to_have_no_images(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, tiny_imagenet_members())
    assert loaders.load_tiny_imagenet(tmp_path, loaders.TinyImagenetOptions()).x_train.shape[0] == 4
    bad = tmp_path / "tiny-imagenet-200" / "train" / "n02" / "images"
    _unlistable(monkeypatch, bad)
    with pytest.raises(ConfigError) as info:
        loaders.load_tiny_imagenet(tmp_path, loaders.TinyImagenetOptions())
    assert info.value.field == "data_dir" and info.value.message == f"cannot read {bad}: permission denied"


def test_a_tiny_imagenet_class_without_images_is_still_said_so(tmp_path: Path) -> None:
    """The control: an empty (or missing) class folder keeps its own message."""
    _write(tmp_path, {k: v for k, v in tiny_imagenet_members().items() if "/train/n02/images/" not in k})
    with pytest.raises(ConfigError) as info:
        loaders.load_tiny_imagenet(tmp_path, loaders.TinyImagenetOptions())
    assert info.value.message == f"Tiny-ImageNet class n02 has no images in {tmp_path / 'tiny-imagenet-200' / 'train' / 'n02' / 'images'}"


def test_an_unlistable_leaf_folder_is_not_said_to_hold_no_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "all_data"
    _write(tmp_path, {"all_data/all_data_0.json": leaf_json({"f0001_01": [0, 1]}), "all_data/notes.txt": b""})
    assert list(loaders.read_leaf_json(folder)) == ["f0001_01"]
    _unlistable(monkeypatch, folder)
    with pytest.raises(ConfigError) as info:
        loaders.read_leaf_json(folder)
    assert info.value.field == "data_dir" and info.value.message == f"cannot read {folder}: permission denied"

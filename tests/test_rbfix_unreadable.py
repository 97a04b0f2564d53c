"""A data folder of mode 000 is one line on ``data_dir`` ("cannot read X: permission denied"), never a traceback and
never "no files" (rev101b findings 2 and 3).

Such a folder refuses both its listing and every lookup inside it. tests/test_r100bfix_loaders.py fakes the listing
alone (mode ``--x``); here ``os.stat`` of any path under the folder and ``os.scandir``/``os.listdir`` of the folder
raise EACCES too, as the kernel does for a user other than root (tests may run as root, who reads any folder).
Caltech-256's and Tiny-ImageNet's ``Path.is_dir`` re-raised the stat's PermissionError; the LEAF hub's and the HF
loader's ``rglob`` skipped the folder and said there were no files.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from chillfl.data import hf, loaders
from chillfl.errors import ConfigError
from fake_datasets import caltech_members, tiny_imagenet_members
from test_fsfix_loaders import _write


def _mode_000(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """``folder`` as one of mode 000 that is not the user's: listing it and looking up anything in it are refused."""
    inside = str(folder) + os.sep

    def denied(path: Any) -> PermissionError:
        return PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))

    real_stat, real_scandir, real_listdir = os.stat, os.scandir, os.listdir

    def fake_stat(path: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(path, (str, os.PathLike)) and os.fspath(path).startswith(inside):
            raise denied(path)
        return real_stat(path, *args, **kwargs)

    def fake_scandir(path: Any = ".") -> Any:
        if isinstance(path, (str, os.PathLike)) and os.fspath(path) == str(folder):
            raise denied(path)
        return real_scandir(path)

    def fake_listdir(path: Any = ".") -> Any:
        if isinstance(path, (str, os.PathLike)) and os.fspath(path) == str(folder):
            raise denied(path)
        return real_listdir(path)

    monkeypatch.setattr(os, "stat", fake_stat)
    monkeypatch.setattr(os, "scandir", fake_scandir)
    monkeypatch.setattr(os, "listdir", fake_listdir)


def _refused(folder: Path, info: pytest.ExceptionInfo[ConfigError]) -> None:
    assert info.value.field == "data_dir" and info.value.message.endswith(": permission denied"), info.value
    assert info.value.message.startswith(f"cannot read {folder}"), info.value


@pytest.mark.parametrize("which", ["categories", "class"])
def test_a_mode_000_caltech_folder_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str) -> None:
    pytest.importorskip("PIL")
    _write(tmp_path, caltech_members(per_class=1))
    root = tmp_path / "256_ObjectCategories"
    assert loaders.load_caltech256_images(tmp_path, loaders.Caltech256Options())[2] == 2  # the control
    bad = root if which == "categories" else root / "002.american-flag"
    _mode_000(monkeypatch, bad)
    with pytest.raises(ConfigError) as info:
        loaders.load_caltech256_images(tmp_path, loaders.Caltech256Options())
    _refused(bad, info)


def test_a_mode_000_tiny_imagenet_class_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("PIL")
    _write(tmp_path, tiny_imagenet_members())
    assert loaders.load_tiny_imagenet(tmp_path, loaders.TinyImagenetOptions()).x_train.shape[0] == 4  # the control
    bad = tmp_path / "tiny-imagenet-200" / "train" / "n02"
    _mode_000(monkeypatch, bad)
    with pytest.raises(ConfigError) as info:
        loaders.load_tiny_imagenet(tmp_path, loaders.TinyImagenetOptions())
    _refused(bad, info)


def test_a_mode_000_folder_of_a_table_source_is_not_no_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "leaf"
    (root / "d" / "train").mkdir(parents=True)
    (root / "d" / "train" / "a.parquet").write_bytes(b"")
    assert loaders.table_files(root) == [root / "d" / "train" / "a.parquet"]  # the controls
    assert hf._parquet_files(root / "d", ("train", "test")) == {"train": [root / "d" / "train" / "a.parquet"]}
    bad = root / "d"
    _mode_000(monkeypatch, bad)
    for read in (lambda: loaders.table_files(root), lambda: hf._parquet_files(root, ("train", "test"))):
        with pytest.raises(ConfigError) as info:
            read()
        _refused(bad, info)


def test_a_missing_folder_is_still_not_found(tmp_path: Path) -> None:
    """The control: ENOENT is absence, not a refusal (Caltech-256's own not-found line)."""
    with pytest.raises(ConfigError, match="Caltech-256 not found at"):
        loaders.caltech256_root(tmp_path)
    assert loaders.table_files(tmp_path / "none") == []

"""A symlinked folder under a local HF or LEAF parquet root is listed (mut101 N11): ``tree_files`` walks with
``followlinks=True``, as the ``rglob`` it replaced did on Python 3.11; without it such files vanished ("no files")."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.data import load_dataset
from chillfl.data.hf import _parquet_files
from chillfl.data.loaders import tree_files
from test_fsfix_wording import needs_links


def linked(root: Path, name: str, target: Path) -> None:
    """``root/name`` -> ``target`` (made), the files written through the link land in ``target``."""
    target.mkdir(parents=True)
    root.mkdir(parents=True, exist_ok=True)
    (root / name).symlink_to(target, target_is_directory=True)


@needs_links
def test_tree_files_lists_the_files_of_a_linked_folder(tmp_path: Path) -> None:
    linked(tmp_path / "root", "part", tmp_path / "elsewhere")
    (tmp_path / "elsewhere" / "a.parquet").write_bytes(b"")
    (tmp_path / "root" / "b.parquet").write_bytes(b"")
    assert tree_files(tmp_path / "root", ".parquet") == [tmp_path / "root" / "b.parquet", tmp_path / "root" / "part" / "a.parquet"]


@needs_links
def test_an_hf_parquet_root_with_a_linked_data_folder_lists_its_splits(tmp_path: Path) -> None:
    root = tmp_path / "gray"
    linked(root, "data", tmp_path / "shards")  # the hub layout, data/ kept on another disk
    for name in ("train-00000-of-00001.parquet", "test-00000-of-00001.parquet"):
        (root / "data" / name).write_bytes(b"")  # listed only: what load_dataset("hf") reads its splits from
    assert _parquet_files(root, ("train", "test")) == {"train": [root / "data" / "train-00000-of-00001.parquet"],
                                                       "test": [root / "data" / "test-00000-of-00001.parquet"]}


@needs_links
def test_a_leaf_parquet_root_with_a_linked_data_folder_is_read(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    pytest.importorskip("PIL")
    from test_leaf_parquet import WRITERS, write_femnist

    root = tmp_path / "fem"
    linked(root, "data", tmp_path / "shards")
    write_femnist(root)
    ds = load_dataset("flwr_femnist", {"path": str(root)}, data_dir=tmp_path / "data")
    assert ds.train_groups is not None and len(ds.train_groups) == len(WRITERS)

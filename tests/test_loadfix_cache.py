"""A cached (memory-mapped) dataset whose split is empty is refused before its cache entry is written: the entry
(gigabytes for Tiny-ImageNet) was written first, for a run that was then refused (report-loaders finding 7)."""

from __future__ import annotations

from pathlib import Path

from fake_datasets import tiny_imagenet_members
from test_dataset_formats import _write
from test_loadfix_femnist import _cache_entries, _refused


def test_a_refused_mapped_dataset_leaves_no_cache_entry(tmp_path: Path) -> None:
    """Tiny-ImageNet with an empty val split: refused before its entry is written (it was written, then refused)."""
    _write({**tiny_imagenet_members(), "tiny-imagenet-200/val/val_annotations.txt": b""}, tmp_path)
    _refused("tiny_imagenet", tmp_path, "tiny_imagenet test split is empty")
    assert _cache_entries(tmp_path) == []

"""``chillfl data download``'s listing (no names) says of the hub datasets and of a flat idx folder what their loaders
will do: a hub folder without table files is missing (it was "present" whenever the folder existed), and idx files
directly in ``data_dir`` are MNIST's or Fashion-MNIST's only as the loader tells them apart (both rows said "present")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chillfl.data import load_dataset
from chillfl.data.leaf_hub import read_table
from chillfl.data.loaders import NoOptions, load_fashion_mnist, load_mnist
from chillfl.errors import ConfigError
from fake_datasets import GENERATORS, idx_bytes
from test_hfdl_download import _listing

HF_FEMNIST = "hf download flwrlabs/femnist --repo-type dataset --local-dir {data}/flwrlabs/femnist"


def _put(folder: Path, files: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, blob in files.items():
        (folder / name).write_bytes(blob)
    return folder


def _refusal(name: str, data: Path) -> str:
    with pytest.raises(ConfigError) as err:
        load_dataset(name, {}, data_dir=data)
    assert err.value.field == "data_dir"
    return err.value.message


# ---------------------------------------------------------------- finding 1: the hub rows


def test_a_hub_folder_without_table_files_is_missing_as_its_loader_says(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    femnist = data / "flwrlabs" / "femnist"
    (femnist / ".cache" / "huggingface" / "download").mkdir(parents=True)  # an hf download stopped before any file landed
    (femnist / ".cache" / "huggingface" / "download" / "train-00000-of-00001.parquet").write_bytes(b"hf's bookkeeping")
    (femnist / "README.md").write_text("---\nlicense: bsd-2-clause\n---\n")
    (data / "flwrlabs" / "shakespeare").mkdir()  # empty
    rows = _listing(data, capsys)
    assert rows["flwr_femnist"] == ("flwrlabs/femnist/", f"missing (no .parquet or .csv files in flwrlabs/femnist/): {HF_FEMNIST.format(data=data)}")  # was: present
    assert rows["flwr_shakespeare"][1].startswith("missing (no .parquet or .csv files in flwrlabs/shakespeare/): hf download flwrlabs/shakespeare ")
    with pytest.raises(ConfigError, match="no .parquet or .csv files under"):  # the loader's own answer on the same folder
        read_table("flwrlabs/femnist", data)


def test_a_hub_folder_with_its_table_file_is_present(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    _put(data / "flwrlabs" / "shakespeare", {"shakespeare.csv": b'character_id,x,y\nA,"to be or not to b",e\n'})
    assert _listing(data, capsys)["flwr_shakespeare"] == ("flwrlabs/shakespeare/", "present")
    assert read_table("flwrlabs/shakespeare", data)[0].num_rows == 1
    assert _listing(tmp_path / "none", capsys)["flwr_femnist"][1] == f"missing: {HF_FEMNIST.format(data=tmp_path / 'none')}"


# ---------------------------------------------------------------- finding 2: idx files directly in data_dir


def test_flat_idx_files_in_a_neutral_folder_of_other_sizes_are_neithers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _put(tmp_path / "data", GENERATORS["mnist"]())  # 4 train and 2 test images, gzipped, directly in data/
    rows = _listing(data, capsys)
    for name, folder in (("mnist", "mnist"), ("fashion_mnist", "fashion_mnist")):  # both were "present (not by us)"
        assert rows[name] == ("./", f"missing (cannot tell whether the idx files in ./ are mnist's or fashion_mnist's: move them into {folder}/)")
        assert "cannot tell whether the idx files directly in" in _refusal(name, data)  # as the loader says


def test_flat_idx_files_in_a_named_folder_are_that_sets_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _put(tmp_path / "fashion", GENERATORS["fashion_mnist"]())  # Zalando's repository keeps them in data/fashion/
    rows = _listing(data, capsys)
    assert rows["fashion_mnist"] == ("./", "present (not by us)")
    assert rows["mnist"] == ("./", "missing (the idx files in ./ are fashion_mnist's, by the folder's name)")  # was: present (not by us)
    assert len(load_dataset("fashion_mnist", {}, data_dir=data).y_test) == 1
    assert "are Fashion-MNIST's, not MNIST's (by the folder name)" in _refusal("mnist", data)


def test_flat_idx_files_of_the_published_sizes_are_ambiguous_without_reading_their_pixels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """60,000 + 10,000 images: the loader tells them apart by the mean train pixel (33 here: MNIST's 33.3), which the
    listing does not read; it says so instead of "present" for both."""
    from chillfl.data.loaders import idx_count  # here: the old code had none (the rest of the file runs against it)

    data = tmp_path / "data"
    images = {"train": np.full((60_000, 28, 28), 33, np.uint8), "t10k": np.zeros((10_000, 28, 28), np.uint8)}
    for prefix, x in images.items():
        _put(data, {f"{prefix}-images-idx3-ubyte": idx_bytes(x), f"{prefix}-labels-idx1-ubyte": idx_bytes(np.arange(len(x), dtype=np.uint8) % 10)})
    assert idx_count(data / "train-images-idx3-ubyte") == 60_000 and idx_count(data / "t10k-labels-idx1-ubyte") == 10_000
    rows = _listing(data, capsys)
    for name, folder in (("mnist", "mnist"), ("fashion_mnist", "fashion_mnist")):
        assert rows[name] == ("./", f"ambiguous: mnist or fashion_mnist (the loader tells the idx files in ./ apart by their pixels; move them into {folder}/ to be sure)")
    assert load_mnist(data, NoOptions()).x_test.shape == (10_000, 1, 28, 28)  # the raw reader: no 188 MB of float inputs
    with pytest.raises(ConfigError, match=r"are MNIST's, not Fashion-MNIST's \(by their pixels\)"):
        load_fashion_mnist(data, NoOptions())


def test_idx_count_reads_only_a_header(tmp_path: Path) -> None:
    from chillfl.data.loaders import idx_count

    files = _put(tmp_path, {"ok": idx_bytes(np.zeros((3, 2, 2), np.uint8)), "short": b"\x00\x00\x08", "float": b"\x00\x00\x0d\x01\x00\x00\x00\x02"})
    assert [idx_count(files / n) for n in ("ok", "short", "float", "absent")] == [3, None, None, None]

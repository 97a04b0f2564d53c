"""``chillfl data download``'s listing (no names) says of the hub datasets and of a flat idx folder what their loaders
will do: a hub folder without table files is missing (it was "present" whenever the folder existed), and idx files
directly in ``data_dir`` are MNIST's or Fashion-MNIST's only as the loader tells them apart (both rows said "present")."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.data import load_dataset
from chillfl.data.leaf_hub import read_table
from chillfl.errors import ConfigError
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

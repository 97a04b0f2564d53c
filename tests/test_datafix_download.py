"""A file deleted from a downloaded dataset: the loader names the command that restores it, and ``chillfl data download``
sees the loss and fetches the dataset again (it said "already in" and restored nothing; only ``--force`` helped)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.data import load_dataset
from chillfl.data.download import MARKER, download_dataset, read_checksums
from chillfl.errors import ConfigError
from fake_datasets import GENERATORS, ServerState, manifest, publish, serve


def _download(tmp_path: Path, state: ServerState, name: str = "cifar10") -> Path:
    files = GENERATORS[name]()
    (tmp_path / "sums").write_text(manifest(name, files))
    publish(state, name, files)
    with serve(state) as base:
        return download_dataset(name, tmp_path / "data", mirror=base, checksums=read_checksums(tmp_path / "sums"))


def test_a_lost_file_is_named_with_the_download_command_and_force(tmp_path: Path) -> None:
    folder = _download(tmp_path, ServerState())
    (folder / "test_batch").unlink()
    with pytest.raises(ConfigError) as err:
        load_dataset("cifar10", data_dir=tmp_path / "data")
    assert err.value.field == "data_dir"
    assert f"fetch it again with: chillfl data download cifar10 --data-dir {tmp_path / 'data'} --force" in err.value.message


def test_download_fetches_a_dataset_that_lost_a_file_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = ServerState()
    folder = _download(tmp_path, state)
    assert "test_batch" in (folder / MARKER).read_text().splitlines()  # the marker lists what it installed
    (folder / "test_batch").unlink()
    with caplog.at_level("WARNING", logger="chillfl"):
        _download(tmp_path, state)
    assert len(state.requests) == 2 and (folder / "test_batch").is_file()
    assert "cifar10 in" in caplog.text and "is incomplete (test_batch missing): fetching it again" in caplog.text
    assert load_dataset("cifar10", data_dir=tmp_path / "data").y_test.tolist() == [3, 9]
    _download(tmp_path, state)  # complete again: nothing fetched
    assert len(state.requests) == 2


def test_the_listing_says_incomplete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _download(tmp_path, ServerState(), "mnist")
    (folder / "t10k-labels-idx1-ubyte.gz").unlink()
    assert main(["data", "download", "--data-dir", str(tmp_path / "data")]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert rows["mnist"].endswith("incomplete (1 file missing)")


def test_a_marker_without_a_file_list_is_still_complete(tmp_path: Path) -> None:
    # a dataset downloaded before the marker listed its files: nothing is known to be missing, nothing is fetched
    state = ServerState()
    folder = _download(tmp_path, state)
    (folder / MARKER).write_text("cifar10\n")
    (folder / "test_batch").unlink()
    _download(tmp_path, state)
    assert len(state.requests) == 1

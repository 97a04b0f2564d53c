"""``chillfl data download``: its listing asks the loaders whether a dataset is there, and a repacked archive is either
installed where the loader reads it or refused (report-loaders findings 8, 13). Files are served by the loopback
server of tests/fake_datasets.py (127.0.0.1, a free port, stopped with its ``with`` block)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from chillfl.cli import main
from chillfl.data import load_dataset
from chillfl.data.download import DOWNLOADS, MARKER, ArchiveError, MIRROR_ENV, download_dataset, read_checksums
from chillfl.data.sources import MANUAL, MIRRORED_ONLY, SOURCES
from fake_datasets import GENERATORS, ServerState, cifar_batch, manifest, publish, serve, tar_bytes


def _listing(data: Path, capsys: pytest.CaptureFixture[str], cwd: Path | None = None) -> dict[str, tuple[str, str]]:
    """{name: (folder column, state)} of ``chillfl data download --data-dir data`` (columns of 16, 26 and 12 characters),
    run from ``cwd`` (default: the folder holding ``data``): the hub rows also read ``./flwrlabs/NAME`` in the current
    folder, as their loader does, so a checkout holding one would change the rows."""
    capsys.readouterr()
    here = os.getcwd()
    os.chdir(cwd or data.parent)
    try:
        assert main(["data", "download", "--data-dir", str(data)]) == 0
    finally:
        os.chdir(here)
    return {line[:16].strip(): (line[17:43].strip(), line[58:].strip()) for line in capsys.readouterr().out.splitlines()}


def _state(rows: dict[str, tuple[str, str]], name: str) -> str:
    return rows[name][1]


def _repacked(top: str) -> dict[str, bytes]:
    """CIFAR-10's python batches (as fake_datasets' cifar10_files) in a tar whose top folder is ``top``."""
    members = {f"{top}data_batch_{i}": cifar_batch([i - 1, i]) for i in range(1, 6)}
    members[f"{top}test_batch"] = cifar_batch([3, 9])
    return {"cifar-10-python.tar.gz": tar_bytes(members)}


def _download(tmp_path: Path, files: dict[str, bytes], name: str = "cifar10", **kw: bool) -> Path:
    """A download from a mirror whose ``--checksums`` manifest vouches for ``files`` (a lab mirror that repacks)."""
    (tmp_path / "sums").write_text(manifest(name, files))
    state = ServerState()
    publish(state, name, files)
    with serve(state) as base:
        return download_dataset(name, tmp_path / "data", mirror=base, checksums=read_checksums(tmp_path / "sums"), timeout=10, **kw)


def _leftovers(data: Path) -> list[str]:
    return sorted(p.relative_to(data).as_posix() for p in data.rglob("*")) if data.exists() else []


# ---------------------------------------------------------------- finding 13: a repacked archive


def test_a_repacked_archive_with_one_other_top_folder_installs_where_the_loader_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the files landed in data/cifar-10-batches-py/cifar10-repacked/, marked downloaded; the loader said "fetch it"
    folder = _download(tmp_path, _repacked("cifar10-repacked/"))
    assert folder == tmp_path / "data" / "cifar-10-batches-py" and (folder / "data_batch_1").is_file() and (folder / MARKER).is_file()
    ds = load_dataset("cifar10", {}, data_dir=tmp_path / "data")
    assert ds.y_train.tolist() == [0, 1, 1, 2, 2, 3, 3, 4, 4, 5] and ds.y_test.tolist() == [3, 9]
    assert _state(_listing(tmp_path / "data", capsys), "cifar10") == "downloaded"


def test_a_repacked_archive_the_loader_cannot_read_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    files = _repacked("a/b/")  # two levels down: no one top folder holds the batches
    with pytest.raises(ArchiveError) as err:
        _download(tmp_path, files)
    message = str(err.value)
    assert err.value.exit_status == 2 and "\n" not in message
    assert "unpacked to a/" in message and "no cifar-10-batches-py/data_batch_1" in message
    assert _leftovers(tmp_path / "data") == []  # no folder, no marker, no archive, no .downloads


def test_cli_refuses_it_in_one_line_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    files = {"cifar-10-python.tar.gz": tar_bytes({"x/batch1": cifar_batch([0, 1]), "y/batch2": cifar_batch([2, 3])})}
    (tmp_path / "sums").write_text(manifest("cifar10", files))
    state = ServerState()
    publish(state, "cifar10", files)
    with serve(state) as base:
        monkeypatch.setenv(MIRROR_ENV, base)
        rc = main(["data", "download", "cifar10", "--data-dir", str(tmp_path / "data"), "--checksums", str(tmp_path / "sums"), "-q"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "unpacked to x/, y/" in err and "Traceback" not in err
    assert _leftovers(tmp_path / "data") == []


def test_an_install_marked_done_that_the_loader_cannot_read_is_fetched_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # what the old downloader left from a repacked archive: the marker, the batches one level down
    folder = tmp_path / "data" / "cifar-10-batches-py"
    (folder / "cifar10-repacked").mkdir(parents=True)
    for i in range(1, 6):
        (folder / "cifar10-repacked" / f"data_batch_{i}").write_bytes(pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": [0]}))
    (folder / MARKER).write_text("cifar10\n" + "".join(f"cifar10-repacked/data_batch_{i}\n" for i in range(1, 6)))
    assert _state(_listing(tmp_path / "data", capsys), "cifar10") == "incomplete (no cifar-10-batches-py/data_batch_1)"  # was: downloaded
    _download(tmp_path, GENERATORS["cifar10"]())  # was: "cifar10 is already in ...", nothing fetched
    assert load_dataset("cifar10", {}, data_dir=tmp_path / "data").y_test.tolist() == [3, 9]
    assert _state(_listing(tmp_path / "data", capsys), "cifar10") == "downloaded"


# ---------------------------------------------------------------- finding 8: the listing asks the loaders


def test_the_listing_sees_what_the_loaders_read_and_nothing_else(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    raw = data / "MNIST" / "raw"  # torchvision's layout, which load_dataset("mnist") reads
    raw.mkdir(parents=True)
    for name, blob in GENERATORS["mnist"]().items():
        (raw / name).write_bytes(blob)
    (data / "cifar-10-batches-py").mkdir()  # empty: the loader finds nothing there
    (data / "femnist" / "data" / "train").mkdir(parents=True)  # LEAF's train/ under femnist/data, which femnist reads
    assert load_dataset("mnist", {}, data_dir=data).y_train.tolist() == [7, 0, 1, 9]
    rows = _listing(data, capsys)
    assert rows["mnist"] == ("MNIST/raw/", "present (not by us)")  # was: mnist/ missing
    assert rows["cifar10"] == ("cifar-10-batches-py/", "missing (no cifar-10-batches-py/data_batch_1; --force replaces the cifar-10-batches-py/ there)")
    assert rows["femnist"] == ("femnist/data/", "present")
    assert _state(rows, "fashion_mnist") == "missing" and _state(rows, "svhn") == "missing"


def test_every_dataset_the_downloader_knows_has_the_loaders_presence_test() -> None:
    from chillfl.data.loaders import ROOTS

    assert set(SOURCES) | set(MIRRORED_ONLY) | set(MANUAL) <= set(ROOTS)
    for name, source in SOURCES.items():  # the downloader installs data_dir/<folder>; the loader looks there (or inside) first
        assert ROOTS[name][0][0].split("/")[0] == source.folder, name


@pytest.mark.parametrize("name", ["mnist", "emnist", "uci_har"])
def test_a_published_layout_still_installs_and_lists_downloaded(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    # files at the archive's top (mnist), a sub-folder the loader reads (emnist/gzip), a zip in a zip (uci_har)
    folder = _download(tmp_path, GENERATORS[name](), name)
    read = {"mnist": "mnist/", "emnist": "emnist/gzip/", "uci_har": "UCI HAR Dataset/"}[name]  # where the loader reads it
    assert folder == tmp_path / "data" / SOURCES[name].folder and not (tmp_path / "data" / DOWNLOADS).exists()
    rows = _listing(tmp_path / "data", capsys)
    assert rows[name] == (read, "downloaded")

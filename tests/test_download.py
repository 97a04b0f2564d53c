"""``chillfl data download`` against a loopback HTTP server: every dataset's real format, and the faults.

The server (tests/fake_datasets.py) runs on 127.0.0.1 on a free port for one
test and serves files generated here; the real download code is pointed at it
with ``mirror=`` / ``CHILLFL_DATA_MIRROR`` and told their checksums with a
``sha256sum``-style manifest, as a user of a private mirror would.
"""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

import numpy as np
import pytest
import torch

from chillfl.cli import main
from chillfl.data import load_dataset
from chillfl.data.download import DOWNLOADS, MARKER, MIRROR_ENV, DownloadError, download_dataset, fetch, read_checksums, resolve_source
from chillfl.data.sources import HUB, SOURCES, RemoteFile
from chillfl.errors import ConfigError
from fake_datasets import GENERATORS, ServerState, manifest, publish, serve, tar_bytes, zip_bytes

OPTIONS = {"emnist": {"split": "letters"}, "caltech256": {"size": 16, "test_fraction": 0.2}, "femnist": {"train_fraction": 0.5}}


def _checksums(name: str, files: dict[str, bytes], tmp_path: Path, algorithm: str = "sha256") -> dict[str, str]:
    path = tmp_path / f"{name}.{algorithm}"
    path.write_text(manifest(name, files, algorithm))
    return read_checksums(path)


def _get(name: str, files: dict[str, bytes], tmp_path: Path, state: ServerState | None = None, **kw: object) -> Path:
    state = state or ServerState()
    publish(state, name, files)
    with serve(state) as base:
        return download_dataset(name, tmp_path / "data", mirror=base, checksums=_checksums(name, files, tmp_path), timeout=10, **kw)  # type: ignore[arg-type]


def _leftovers(data: Path) -> list[str]:
    """Temporary folders or partial files left in ``data`` (there must be none)."""
    return [p.name for p in data.rglob("*") if p.name.endswith(".part") or (p.is_dir() and p.parent == data and p.name.startswith(".") and p.name not in (".chillfl-cache", DOWNLOADS))]


# ---------------------------------------------------------------- every dataset, end to end


def _check_loaded(name: str, data: Path) -> None:
    ds = load_dataset(name, OPTIONS.get(name), data_dir=data)
    if name == "cifar10":
        # 5 batches of labels [i - 1, i], test [3, 9]
        assert ds.x_train.shape == (10, 3, 32, 32) and ds.y_train.tolist() == [0, 1, 1, 2, 2, 3, 3, 4, 4, 5] and ds.y_test.tolist() == [3, 9]
    elif name == "cifar100":
        assert ds.num_classes == 100 and ds.y_train.tolist() == [3, 10, 17, 24] and ds.y_test.tolist() == [3, 10]
    elif name == "svhn":
        assert ds.x_train.shape == (3, 3, 32, 32) and ds.y_train.tolist() == [0, 1, 5] and ds.y_test.tolist() == [2, 0]  # label 10 is digit 0
    elif name == "mnist":
        assert ds.x_train.shape == (4, 1, 28, 28) and ds.y_train.tolist() == [7, 0, 1, 9]
    elif name == "fashion_mnist":
        assert ds.y_train.tolist() == [4, 4, 8] and ds.y_test.tolist() == [1]
    elif name == "emnist":
        # letters 1..26 become 0..25; the pixel stored at [0, 3] is shown at [3, 0] (NIST stores images transposed)
        assert ds.num_classes == 26 and ds.y_train.tolist() == [0, 25, 4] and ds.y_test.tolist() == [1, 1]
        assert int(ds.x_train[0, 0].flatten().argmax()) == 3 * 28 + 0
    elif name == "uci_har":
        assert ds.input_shape == (9, 128) and ds.y_train.tolist() == [0, 5, 2]
    elif name == "tiny_imagenet":
        # classes sorted: n01 -> 0, n02 -> 1; val_0 is n02, val_1 is n01 (from val_annotations.txt)
        assert ds.x_train.shape == (4, 3, 64, 64) and ds.y_train.tolist() == [0, 0, 1, 1] and ds.y_test.tolist() == [1, 0]
    elif name == "caltech256":
        # clutter left out: 2 classes x 5 images; 20% of each class (1 image) is test
        assert ds.num_classes == 2 and ds.x_train.shape == (8, 3, 16, 16) and ds.y_train.tolist() == [0] * 4 + [1] * 4 and ds.y_test.tolist() == [0, 1]
    elif name == "femnist":
        assert ds.train_groups is not None and len(ds.train_groups) == 3  # the 1-sample writer is dropped
    else:  # pragma: no cover - a new generator must add its check here
        raise AssertionError(name)


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_download_unpacks_where_the_loader_reads(tmp_path: Path, name: str) -> None:
    files = GENERATORS[name]()
    folder = _get(name, files, tmp_path)
    data = tmp_path / "data"
    assert (folder / MARKER).is_file() and folder.parent == data
    assert not (data / DOWNLOADS).exists() and _leftovers(data) == []
    _check_loaded(name, data)


def test_every_registered_real_dataset_has_a_source_and_a_format_test() -> None:
    from chillfl.data.sources import MANUAL

    assert set(GENERATORS) == set(SOURCES) | set(MANUAL)


def test_complete_dataset_is_not_fetched_again(tmp_path: Path) -> None:
    files = GENERATORS["mnist"]()
    state = ServerState()
    publish(state, "mnist", files)
    with serve(state) as base:
        sums = _checksums("mnist", files, tmp_path)
        download_dataset("mnist", tmp_path / "data", mirror=base, checksums=sums)
        n = len(state.requests)
        download_dataset("mnist", tmp_path / "data", mirror=base, checksums=sums)
    assert n == 4 and len(state.requests) == 4


# ---------------------------------------------------------------- faults


def test_truncated_file_is_rejected_and_removed(tmp_path: Path) -> None:
    files = GENERATORS["cifar10"]()
    state = ServerState()
    publish(state, "cifar10", {"cifar-10-python.tar.gz": files["cifar-10-python.tar.gz"][:-100]})  # a complete response of a short file
    with serve(state) as base, pytest.raises(DownloadError, match="checksum mismatch.*removed"):
        download_dataset("cifar10", tmp_path / "data", mirror=base, checksums=_checksums("cifar10", files, tmp_path))
    data = tmp_path / "data"
    assert not (data / "cifar-10-batches-py").exists() and not list(data.rglob("*.part")) and not list(data.rglob("*.tar.gz"))


@pytest.mark.parametrize("algorithm", ["sha256", "md5"])
def test_corrupted_byte_is_a_checksum_mismatch(tmp_path: Path, algorithm: str) -> None:
    files = GENERATORS["svhn"]()
    bad = bytearray(files["test_32x32.mat"])
    bad[len(bad) // 2] ^= 0xFF
    state = ServerState()
    publish(state, "svhn", {**files, "test_32x32.mat": bytes(bad)})
    sums = _checksums("svhn", files, tmp_path, algorithm)
    with serve(state) as base, pytest.raises(DownloadError, match="checksum mismatch for test_32x32.mat"):
        download_dataset("svhn", tmp_path / "data", mirror=base, checksums=sums)
    downloads = tmp_path / "data" / DOWNLOADS / "svhn"
    assert (downloads / "train_32x32.mat").is_file()  # the good file is kept for the rerun
    assert not (downloads / "test_32x32.mat.part").exists() and not (tmp_path / "data" / "svhn").exists()


def test_dropped_connection_resumes_with_range(tmp_path: Path) -> None:
    files = GENERATORS["tiny_imagenet"]()
    size = len(files["tiny-imagenet-200.zip"])
    state = ServerState(drop_after=1000)
    _get("tiny_imagenet", files, tmp_path, state)
    assert state.requests == [("/tiny_imagenet/tiny-imagenet-200.zip", None, 200), ("/tiny_imagenet/tiny-imagenet-200.zip", "bytes=1000-", 206)]
    assert size > 1000
    _check_loaded("tiny_imagenet", tmp_path / "data")


def test_redirect_is_followed_and_the_resume_keeps_its_range(tmp_path: Path) -> None:
    files = GENERATORS["caltech256"]()
    state = ServerState(drop_after=700, redirects={"/caltech256/256_ObjectCategories.tar": "/store/abc.tar"})
    state.files["/store/abc.tar"] = files["256_ObjectCategories.tar"]
    with serve(state) as base:
        download_dataset("caltech256", tmp_path / "data", mirror=base, checksums=_checksums("caltech256", files, tmp_path))
    assert [r[1:] for r in state.requests] == [(None, 302), (None, 200), ("bytes=700-", 302), ("bytes=700-", 206)]
    _check_loaded("caltech256", tmp_path / "data")


def test_server_ignoring_range_is_read_again_from_the_start(tmp_path: Path) -> None:
    files = GENERATORS["cifar100"]()
    assert len(files["cifar-100-python.tar.gz"]) > 50
    state = ServerState(drop_after=50, ignore_range=True)
    _get("cifar100", files, tmp_path, state)
    assert [r[1:] for r in state.requests] == [(None, 200), ("bytes=50-", 200)]
    _check_loaded("cifar100", tmp_path / "data")


def test_partial_answer_for_another_range_starts_over(tmp_path: Path) -> None:
    files = GENERATORS["cifar10"]()
    state = ServerState(drop_after=50, wrong_range_once=True)
    _get("cifar10", files, tmp_path, state)
    assert [r[1:] for r in state.requests] == [(None, 200), ("bytes=50-", 206), (None, 200)]
    _check_loaded("cifar10", tmp_path / "data")


def test_part_file_from_an_interrupted_run_is_continued(tmp_path: Path) -> None:
    files = GENERATORS["caltech256"]()
    blob = files["256_ObjectCategories.tar"]
    part = tmp_path / "data" / DOWNLOADS / "caltech256" / "256_ObjectCategories.tar.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(blob[:3000])
    state = ServerState()
    _get("caltech256", files, tmp_path, state)
    assert [r[1:] for r in state.requests] == [("bytes=3000-", 206)]


def test_connection_that_keeps_dropping_keeps_the_part(tmp_path: Path) -> None:
    files = GENERATORS["mnist"]()
    state = ServerState(drop_after=10)
    publish(state, "mnist", files)
    with serve(state) as base, pytest.raises(DownloadError, match="dropped or stalled 1 times.*rerun to resume"):
        download_dataset("mnist", tmp_path / "data", mirror=base, checksums=_checksums("mnist", files, tmp_path), retries=0)
    part = tmp_path / "data" / DOWNLOADS / "mnist" / "train-images-idx3-ubyte.gz.part"
    assert part.stat().st_size == 10
    # the rerun resumes from byte 10 (the server drops each path once, then behaves)
    with serve(state) as base:
        download_dataset("mnist", tmp_path / "data", mirror=base, checksums=_checksums("mnist", files, tmp_path))
    assert ("/mnist/train-images-idx3-ubyte.gz", "bytes=10-", 206) in state.requests


def test_part_longer_than_the_file_starts_over(tmp_path: Path) -> None:
    files = GENERATORS["mnist"]()
    part = tmp_path / "data" / DOWNLOADS / "mnist" / "t10k-labels-idx1-ubyte.gz.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"x" * (len(files["t10k-labels-idx1-ubyte.gz"]) + 5))  # e.g. left by another version of the file
    state = ServerState()
    _get("mnist", files, tmp_path, state)
    assert [r[1:] for r in state.requests if r[0].endswith("t10k-labels-idx1-ubyte.gz")] == [(f"bytes={len(files['t10k-labels-idx1-ubyte.gz']) + 5}-", 416), (None, 200)]


def test_next_url_is_tried_after_an_http_error(tmp_path: Path) -> None:
    data = b"payload" * 100
    state = ServerState(files={"/b/f.bin": data})
    with serve(state) as base:
        f = RemoteFile("f.bin", (f"{base}/a/f.bin", f"{base}/b/f.bin"), sha256=hashlib.sha256(data).hexdigest())
        path = fetch(f, tmp_path)
    assert path.read_bytes() == data and [r[2] for r in state.requests] == [404, 200]


def test_stalled_server_times_out_and_keeps_the_part(tmp_path: Path) -> None:
    files = GENERATORS["mnist"]()
    state = ServerState(stall_s=1.5)
    publish(state, "mnist", files)
    with serve(state) as base, pytest.raises(DownloadError, match="dropped or stalled 2 times"):
        download_dataset("mnist", tmp_path / "data", mirror=base, checksums=_checksums("mnist", files, tmp_path), timeout=0.3, retries=1)
    # half of the first file arrived before the stall; the retry asked for the rest
    half = len(files["train-images-idx3-ubyte.gz"]) // 2
    assert state.requests[:2] == [("/mnist/train-images-idx3-ubyte.gz", None, 200), ("/mnist/train-images-idx3-ubyte.gz", f"bytes={half}-", 206)]


def test_http_error_names_status_and_url(tmp_path: Path) -> None:
    state = ServerState()  # serves nothing
    with serve(state) as base, pytest.raises(DownloadError, match=r"HTTP 404 .* from http://127\.0\.0\.1:\d+/svhn/train_32x32\.mat"):
        download_dataset("svhn", tmp_path / "data", mirror=base)


def test_no_network_is_one_clear_error(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DownloadError, match=f"cannot reach http://127.0.0.1:{port}/mnist/.*check the network, or set {MIRROR_ENV}"):
        download_dataset("mnist", tmp_path / "data", mirror=f"http://127.0.0.1:{port}")


def _closed_port() -> int:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_cli_no_network_is_one_line_exit_1_and_leaves_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A network failure is a run that could not finish, exit 1; it was exit 2, the status of bad input. The folders it
    made for files that never arrived are gone again."""
    port = _closed_port()
    rc = main(["data", "download", "mnist", "--data-dir", str(tmp_path / "d"), "--mirror", f"http://127.0.0.1:{port}", "-q"])
    err = capsys.readouterr().err
    assert rc == 1 and len(err.splitlines()) == 1
    assert err.startswith(f"chillfl: error: download mnist: cannot reach http://127.0.0.1:{port}/mnist/") and "Traceback" not in err
    assert not (tmp_path / "d").exists()


def test_cli_dropped_connection_is_exit_1_and_only_a_part_is_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """What arrived before the drop stays a ``.part`` (the rerun resumes it), never a file under its final name."""
    files = GENERATORS["mnist"]()
    (tmp_path / "sums").write_text(manifest("mnist", files))
    state = ServerState(stall_s=0.05)  # every answer stops half-way: the retries run out
    publish(state, "mnist", files)
    with serve(state) as base:
        rc = main(["data", "download", "mnist", "--data-dir", str(tmp_path / "d"), "--mirror", base, "--checksums", str(tmp_path / "sums"), "-q"])
    err = capsys.readouterr().err
    assert rc == 1 and len(err.splitlines()) == 1 and "dropped or stalled" in err
    left = sorted(str(p.relative_to(tmp_path / "d")) for p in (tmp_path / "d").rglob("*") if p.is_file())
    assert left and all(name.endswith(".part") for name in left), left
    assert not (tmp_path / "d" / "mnist").exists()


def test_cli_bad_input_is_still_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "download", "imagenet", "--data-dir", str(tmp_path / "d"), "-q"]) == 2
    assert capsys.readouterr().err.startswith("chillfl: error: download imagenet: unknown dataset 'imagenet'")
    (tmp_path / "sums").write_text("not a manifest\n")
    assert main(["data", "download", "mnist", "--data-dir", str(tmp_path / "d"), "--checksums", str(tmp_path / "sums"), "-q"]) == 2
    assert "expected '<md5 or sha256 hex>" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full to fake a full disk")
def test_full_disk_is_one_clear_error(tmp_path: Path) -> None:
    files = GENERATORS["mnist"]()
    part = tmp_path / "data" / DOWNLOADS / "mnist" / "train-images-idx3-ubyte.gz.part"
    part.parent.mkdir(parents=True)
    part.symlink_to("/dev/full")  # every write there fails with ENOSPC
    state = ServerState()
    publish(state, "mnist", files)
    with serve(state) as base, pytest.raises(DownloadError, match="disk full while writing"):
        download_dataset("mnist", tmp_path / "data", mirror=base, checksums=_checksums("mnist", files, tmp_path))
    assert not (tmp_path / "data" / "mnist").exists()


@pytest.mark.parametrize("archive", ["tar", "zip", "tar-symlink", "tar-absolute"])
def test_archive_escaping_its_folder_is_refused(tmp_path: Path, archive: str) -> None:
    import io
    import tarfile

    if archive == "zip":
        name, fname, blob = "tiny_imagenet", "tiny-imagenet-200.zip", zip_bytes({"tiny-imagenet-200/wnids.txt": b"n01\n", "../../evil.txt": b"x"})
    elif archive == "tar":
        name, fname, blob = "cifar10", "cifar-10-python.tar.gz", tar_bytes({"cifar-10-batches-py/test_batch": b"x", "cifar-10-batches-py/../../evil.txt": b"x"})
    elif archive == "tar-absolute":
        name, fname, blob = "cifar10", "cifar-10-python.tar.gz", tar_bytes({str(tmp_path / "evil.txt"): b"x"})
    else:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            link = tarfile.TarInfo("256_ObjectCategories/001.ak47/link.jpg")
            link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(link)
        name, fname, blob = "caltech256", "256_ObjectCategories.tar", buf.getvalue()
    with pytest.raises(DownloadError, match="refusing"):
        _get(name, {fname: blob}, tmp_path)
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path.parent / "evil.txt").exists()
    assert not (tmp_path / "data" / SOURCES[name].folder).exists() and _leftovers(tmp_path / "data") == []


def test_unpacking_killed_midway_never_looks_complete_and_is_cleaned(tmp_path: Path) -> None:
    # what kill -9 during unpacking leaves: the checked archive and a half-filled temporary folder
    files = GENERATORS["cifar10"]()
    data = tmp_path / "data"
    (data / DOWNLOADS / "cifar10").mkdir(parents=True)
    (data / DOWNLOADS / "cifar10" / "cifar-10-python.tar.gz").write_bytes(files["cifar-10-python.tar.gz"])
    (data / ".cifar10.unpacking-x1y2" / "cifar-10-batches-py").mkdir(parents=True)
    with pytest.raises(ConfigError, match="CIFAR-10 not found"):
        load_dataset("cifar10", data_dir=data)
    state = ServerState()  # serves nothing: the kept archive is enough
    with serve(state) as base:
        download_dataset("cifar10", data, mirror=base, checksums=_checksums("cifar10", files, tmp_path))
    assert state.requests == [] and not (data / ".cifar10.unpacking-x1y2").exists() and _leftovers(data) == []
    _check_loaded("cifar10", data)


def test_folder_not_made_by_the_downloader_is_left_alone(tmp_path: Path) -> None:
    files = GENERATORS["mnist"]()
    mine = tmp_path / "data" / "mnist"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(DownloadError, match="not completed by `chillfl data download`.*--force"):
        _get("mnist", files, tmp_path)
    assert (mine / "notes.txt").read_text() == "mine"
    _get("mnist", files, tmp_path, force=True)
    assert not (mine / "notes.txt").exists() and (mine / MARKER).is_file()


def test_unverifiable_file_is_fetched_with_its_sha256_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    files = GENERATORS["uci_har"]()
    state = ServerState()
    publish(state, "uci_har", files)
    with serve(state) as base, caplog.at_level("WARNING", logger="chillfl"):
        download_dataset("uci_har", tmp_path / "data", mirror=base)  # UCI publishes no checksum
    digest = hashlib.sha256(files["human+activity+recognition+using+smartphones.zip"]).hexdigest()
    assert f"no published checksum; not verified (sha256 {digest})" in caplog.text


def test_official_table_has_a_checksum_for_every_file_but_uci() -> None:
    for name, source in SOURCES.items():
        for f in source.files:
            assert f.urls and all(u.startswith(("http://", "https://")) for u in f.urls), name
            assert (f.md5 is None) == (name == "uci_har"), name
            assert f.md5 is None or (len(f.md5) == 32 and int(f.md5, 16) >= 0)


def test_mirror_replaces_urls_and_manifest_replaces_checksums(tmp_path: Path) -> None:
    path = tmp_path / "sums"
    path.write_text(f"# comment\n{'ab' * 32}  mnist/t10k-labels-idx1-ubyte.gz\n")
    src = resolve_source("mnist", "http://mirror.example/x/", read_checksums(path))
    assert src.files[0].urls == ("http://mirror.example/x/mnist/train-images-idx3-ubyte.gz",)
    assert src.files[0].md5 == SOURCES["mnist"].files[0].md5
    assert src.files[3].sha256 == "ab" * 32 and src.files[3].md5 is None
    path.write_text("nothex  mnist/a\n")
    with pytest.raises(DownloadError, match="sums:1: expected"):
        read_checksums(path)


def test_femnist_without_mirror_explains_leaf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MIRROR_ENV, raising=False)
    with pytest.raises(DownloadError, match="hf download flwrlabs/femnist --repo-type dataset"):
        download_dataset("femnist", tmp_path / "data")
    with pytest.raises(DownloadError, match="unknown dataset 'imagenet'; downloadable: caltech256"):
        download_dataset("imagenet", tmp_path / "data")


# ---------------------------------------------------------------- the command line


def test_cli_download_via_environment_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    files = GENERATORS["fashion_mnist"]()
    har = GENERATORS["uci_har"]()
    (tmp_path / "sums").write_text(manifest("fashion_mnist", files) + manifest("uci_har", har))
    state = ServerState()
    publish(state, "fashion_mnist", files)
    publish(state, "uci_har", har)
    with serve(state) as base:
        monkeypatch.setenv(MIRROR_ENV, base)
        rc = main(["data", "download", "fashion_mnist", "uci_har", "--data-dir", str(tmp_path / "d"), "--checksums", str(tmp_path / "sums"), "-q"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0 and out == [f"fashion_mnist: {tmp_path / 'd' / 'fashion_mnist'}", f"uci_har: {tmp_path / 'd' / 'UCI HAR Dataset'}"]
    ds = load_dataset("fashion_mnist", data_dir=tmp_path / "d")
    assert ds.y_train.tolist() == [4, 4, 8] and torch.isfinite(ds.x_train).all()


def _download_from_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, files: dict[str, bytes], sums: dict[str, bytes]) -> int:
    """``chillfl data download NAME`` from a loopback mirror serving ``files``, checked against a manifest of ``sums``."""
    (tmp_path / "sums").write_text(manifest(name, sums))
    state = ServerState()
    publish(state, name, files)
    with serve(state) as base:
        monkeypatch.setenv(MIRROR_ENV, base)
        return main(["data", "download", name, "--data-dir", str(tmp_path / "d"), "--checksums", str(tmp_path / "sums"), "-q"])


def test_cli_download_error_is_one_line_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A file that fails its check is a download that could not finish (exit 1), not bad input (2)."""
    files = GENERATORS["mnist"]()
    rc = _download_from_mirror(tmp_path, monkeypatch, "mnist", files, {k: v + b"!" for k, v in files.items()})  # wrong checksums
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1 and err.startswith("chillfl: error: download mnist: checksum mismatch")


def test_archive_that_passes_its_checksum_but_is_not_one_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A mirror's manifest can vouch for any bytes: tarfile's error lists every compression it tried, a line each."""
    files = {"cifar-10-python.tar.gz": b"not an archive at all"}
    rc = _download_from_mirror(tmp_path, monkeypatch, "cifar10", files, files)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "is not a readable tar archive" in err and err.endswith("and rerun")


def test_cli_without_names_lists_what_data_dir_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _get("mnist", GENERATORS["mnist"](), tmp_path)
    (tmp_path / "data" / "svhn").mkdir()  # empty: the loader reads nothing there (it was listed "present (not by us)")
    assert main(["data", "download", "--data-dir", str(tmp_path / "data")]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert set(rows) == set(SOURCES) | {"femnist"} | set(HUB)
    assert rows["mnist"].endswith("downloaded") and rows["svhn"].endswith("missing (no svhn/train_32x32.mat; --force replaces the svhn/ there)")
    assert rows["cifar10"].endswith("missing")
    assert "170 MB" in rows["cifar10"] and rows["femnist"].endswith("manual (LEAF)")


def test_run_on_missing_dataset_prints_the_download_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    config = tmp_path / "exp.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\n')
    overrides = ["dataset.name=cifar10", "federation.num_clients=4", "federation.rounds=1", "model.name=mlp", f"data_dir={empty}"]
    rc = main(["run", str(config), "-q", *overrides])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert f"fetch it with: chillfl data download cifar10 --data-dir {empty}" in err


def test_downloaded_arrays_match_the_published_bytes(tmp_path: Path) -> None:
    # CIFAR-10 batch i's image j is filled with 10 * j: after download the per-channel
    # standardised train set has two distinct values per batch (0 and 10 -> 0 and 10/255).
    _get("cifar10", GENERATORS["cifar10"](), tmp_path)
    ds = load_dataset("cifar10", data_dir=tmp_path / "data")
    raw = np.tile([0.0, 10.0], 5) / 255.0
    expected = (raw - raw.mean()) / raw.std()
    assert np.allclose(ds.x_train[:, 0, 0, 0].numpy(), expected, atol=1e-5)


@pytest.mark.parametrize(("flag", "env"), [(["--mirror", "mirror.example.org/data"], None), ([], "mirror.example.org/data")])
def test_a_mirror_that_is_not_a_url_is_one_line_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flag: list[str], env: str | None,
) -> None:
    """A scheme-less mirror reached urllib, whose ValueError ("unknown url type") was a traceback, exit 1, with
    data_dir/.downloads/NAME made already."""
    if env is not None:
        monkeypatch.setenv(MIRROR_ENV, env)
    rc = main(["data", "download", "cifar10", "--data-dir", str(tmp_path / "d"), *flag, "-q"])
    said = "--mirror" if flag else MIRROR_ENV
    assert (rc, capsys.readouterr().err) == (2, f"chillfl: error: download cifar10: {said}: 'mirror.example.org/data' is not a URL; "
                                                 "give one starting with http://, https://, ftp://, file://\n")
    assert not (tmp_path / "d").exists()


def test_a_fetched_dataset_folder_has_a_plain_folders_permissions(tmp_path: Path) -> None:
    """mnist's files unpack into the temporary folder itself, which mkdtemp made 0700: a shared data_dir's dataset was
    readable by its downloader alone. It now has what a plain mkdir gives under the umask, as the folders beside it."""
    import stat

    folder = _get("mnist", GENERATORS["mnist"](), tmp_path)
    (tmp_path / "plain").mkdir()
    assert stat.S_IMODE(folder.stat().st_mode) == stat.S_IMODE((tmp_path / "plain").stat().st_mode)

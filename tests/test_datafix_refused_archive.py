"""An archive that passes its checksum but is refused when unpacked (a member ``../escaped``, or bytes that are no
archive) is deleted: it stayed in ``data_dir/.downloads/NAME/``, and every rerun, ``--force`` too, took the cached
file (it passes its check) and refused it again, with a line that did not say where it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.data.download import DOWNLOADS
from fake_datasets import GENERATORS, manifest, tar_bytes, zip_bytes

ESCAPING_TAR = tar_bytes({"cifar-10-batches-py/test_batch": b"x", "../escaped": b"x"})


def _mirror(tmp_path: Path, name: str, files: dict[str, bytes]) -> tuple[str, Path]:
    """A ``file://`` mirror serving ``files`` of dataset ``name``, and a checksum manifest that vouches for them."""
    for fname, blob in files.items():
        (tmp_path / "mirror" / name).mkdir(parents=True, exist_ok=True)
        (tmp_path / "mirror" / name / fname).write_bytes(blob)
    sums = tmp_path / f"{name}.sha256"
    sums.write_text(manifest(name, files))
    return (tmp_path / "mirror").as_uri(), sums


def _download(data: Path, name: str, mirror: str, sums: Path, *extra: str) -> int:
    return main(["data", "download", name, "--data-dir", str(data), "--mirror", mirror, "--checksums", str(sums), "-q", *extra])


@pytest.mark.parametrize(
    ("name", "files", "said"),
    [
        ("cifar10", {"cifar-10-python.tar.gz": ESCAPING_TAR}, "refusing cifar-10-python.tar.gz: member '../escaped' is outside the target folder"),
        ("cifar10", {"cifar-10-python.tar.gz": b"not an archive at all"}, "cifar-10-python.tar.gz is not a readable tar archive"),
        ("tiny_imagenet", {"tiny-imagenet-200.zip": zip_bytes({"tiny-imagenet-200/wnids.txt": b"n01\n", "../../evil.txt": b"x"})},
         "refusing tiny-imagenet-200.zip: member '../../evil.txt' is outside the target folder"),
    ],
    ids=["tar-escaping", "tar-unreadable", "zip-escaping"],
)
def test_a_refused_archive_is_removed_and_the_line_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, files: dict[str, bytes], said: str) -> None:
    mirror, sums = _mirror(tmp_path, name, files)
    data = tmp_path / "data"
    assert _download(data, name, mirror, sums) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err
    assert f"the download was removed from {data / DOWNLOADS / name}" in err and err.endswith("and rerun")
    assert not data.exists()  # nothing left behind: no archive, no .downloads, not even the data_dir it made
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "evil.txt").exists()


def test_a_refused_archive_cached_by_an_earlier_run_is_not_taken_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The cached archive (what an older chillfl left) passes its check, so it is taken without a fetch: refused, it is
    now deleted, and the next run fetches the mirror's (fixed) file instead of refusing the cached one forever."""
    good = GENERATORS["cifar10"]()
    mirror, sums = _mirror(tmp_path, "cifar10", good)
    data = tmp_path / "data"
    (data / "kept").mkdir(parents=True)  # a data_dir of the user's: kept, whatever happens to .downloads
    cached = data / DOWNLOADS / "cifar10" / "cifar-10-python.tar.gz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(ESCAPING_TAR)
    sums.write_text(manifest("cifar10", {"cifar-10-python.tar.gz": ESCAPING_TAR}))
    assert _download(data, "cifar10", mirror, sums, "--force") == 2
    assert "refusing cifar-10-python.tar.gz" in capsys.readouterr().err
    assert not cached.exists() and not (data / DOWNLOADS).exists() and (data / "kept").is_dir()
    sums.write_text(manifest("cifar10", good))  # the mirror's file, vouched for
    assert _download(data, "cifar10", mirror, sums) == 0
    assert (data / "cifar-10-batches-py" / "test_batch").is_file() and not (data / DOWNLOADS).exists()

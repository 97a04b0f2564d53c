"""A zip whose checksum passes but whose bytes are damaged (a corrupt deflate stream, an encrypted member, an unknown
compression method), or a tar whose gzip stream fails its CRC or holds a file and a folder of one name, is one line
(exit status 2, bad input: naming the archive), and the archive is removed from ``data_dir/.downloads``: these were tracebacks
(zlib.error, RuntimeError, NotImplementedError) or a plain error that kept the archive, so every rerun failed alike."""

from __future__ import annotations

import gzip
import io
import struct
import tarfile
import zipfile
from pathlib import Path

import pytest

from chillfl.data.download import DOWNLOADS
from fake_datasets import GENERATORS
from test_datafix_refused_archive import _download, _mirror

ZIP_NAME = "tiny_imagenet"
ZIP_FILE = "tiny-imagenet-200.zip"
MEMBER = "tiny-imagenet-200/wnids.txt"


def _deflated() -> bytes:
    """A one-member zip written by zipfile: 100 kB of varied text, deflated."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(MEMBER, "".join(f"n{i * 7919 % 100003:08d}\n" for i in range(11000)).encode())
    return buf.getvalue()


def _patched(blob: bytes, local: int, central: int, fmt: str, value: int, xor: bool = False) -> bytes:
    """``blob`` with the field at ``local`` (in the local header) and ``central`` (in the central directory entry) set."""
    out = bytearray(blob)
    cd = blob.rindex(b"PK\x01\x02")
    for at in (local, cd + central):
        old = struct.unpack_from(fmt, out, at)[0]
        struct.pack_into(fmt, out, at, old | value if xor else value)
    return bytes(out)


def _corrupt_deflate() -> bytes:
    out = bytearray(_deflated())
    start = 30 + len(MEMBER)  # the compressed stream starts after the local header and the name
    for i in range(start + 3, start + 23):
        out[i] ^= 0xFF
    return bytes(out)


def _gzip_crc_fails() -> bytes:
    """A tar.gz whose gzip trailer CRC is wrong: the tar reads to its end, then gzip raises (an OSError, no errno)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("cifar-10-batches-py/test_batch")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"abcd"))
    blob = bytearray(gzip.compress(raw.getvalue()[:1024]))  # one member, no end blocks: tarfile reads to gzip's trailer
    blob[-8] ^= 0xFF
    return bytes(blob)


def _file_and_folder() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in (("cifar-10-batches-py/x", b"file"), ("cifar-10-batches-py/x/y", b"inside")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


CASES = {
    "zip-corrupt-deflate": (ZIP_NAME, ZIP_FILE, _corrupt_deflate),
    "zip-encrypted": (ZIP_NAME, ZIP_FILE, lambda: _patched(_deflated(), 6, 8, "<H", 1, xor=True)),
    "zip-method-99": (ZIP_NAME, ZIP_FILE, lambda: _patched(_deflated(), 8, 10, "<H", 99)),
    "tar-gzip-crc": ("cifar10", "cifar-10-python.tar.gz", _gzip_crc_fails),
    "tar-file-and-folder": ("cifar10", "cifar-10-python.tar.gz", _file_and_folder),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_damaged_archive_is_one_line_and_removed(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    name, fname, make = CASES[case]
    mirror, sums = _mirror(tmp_path, name, {fname: make()})
    data = tmp_path / "data"
    assert _download(data, name, mirror, sums) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{fname} is not a readable" in err, err
    assert f"the download was removed from {data / DOWNLOADS / name}" in err
    assert not (data / DOWNLOADS).exists() and not data.exists()


def test_the_rerun_fetches_the_mirrors_fixed_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The damaged archive is gone, so the next run takes the mirror's good file instead of failing the same way."""
    good = GENERATORS["cifar10"]()
    mirror, sums = _mirror(tmp_path, "cifar10", {"cifar-10-python.tar.gz": _gzip_crc_fails()})
    data = tmp_path / "data"
    (data / "kept").mkdir(parents=True)
    assert _download(data, "cifar10", mirror, sums) == 2
    assert "is not a readable tar archive" in capsys.readouterr().err
    assert not (data / DOWNLOADS).exists()
    mirror, sums = _mirror(tmp_path, "cifar10", good)
    assert _download(data, "cifar10", mirror, sums) == 0
    assert (data / "cifar-10-batches-py" / "test_batch").is_file()

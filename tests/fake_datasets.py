"""Tiny files in each real dataset's published format, and a loopback HTTP server that serves them.

The generators return ``{file name on the server: bytes}`` for one dataset,
laid out exactly as the publisher ships it (archive folder names included), so
that the real download code unpacks them into the folders the loaders read.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import pickle
import tarfile
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

HAR_SIGNALS = tuple(f"{kind}_{axis}" for kind in ("body_acc", "body_gyro", "total_acc") for axis in "xyz")


# ---------------------------------------------------------------- archive helpers


def tar_bytes(members: dict[str, bytes], mode: str = "w:gz") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:  # type: ignore[call-overload]
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def idx_bytes(array: np.ndarray) -> bytes:
    """idx: 0, 0, 0x08 (ubyte), ndim, big-endian int32 sizes, then the bytes."""
    header = bytes([0, 0, 8, array.ndim]) + np.asarray(array.shape, dtype=">i4").tobytes()
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def jpeg_bytes(rgb: tuple[int, int, int], size: tuple[int, int] = (64, 64)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, rgb).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def cifar_batch(labels: list[int], key: bytes = b"labels", extra: dict[bytes, list[int]] | None = None) -> bytes:
    """A CIFAR python batch: image i is filled with the value 10 * i (so rows are recognisable)."""
    data = np.stack([np.full(3072, 10 * i, dtype=np.uint8) for i in range(len(labels))])
    return pickle.dumps({b"data": data, key: labels, **(extra or {})}, protocol=2)


# ---------------------------------------------------------------- one generator per dataset


def cifar10_files() -> dict[str, bytes]:
    members = {f"cifar-10-batches-py/data_batch_{i}": cifar_batch([i - 1, i]) for i in range(1, 6)}
    members["cifar-10-batches-py/test_batch"] = cifar_batch([3, 9])
    return {"cifar-10-python.tar.gz": tar_bytes(members)}


def cifar100_files() -> dict[str, bytes]:
    # fine labels 0..99, coarse 0..19: sample i has fine 7 * i + 3 and coarse i
    def batch(n: int) -> bytes:
        return cifar_batch([7 * i + 3 for i in range(n)], b"fine_labels", {b"coarse_labels": list(range(n))})

    return {"cifar-100-python.tar.gz": tar_bytes({"cifar-100-python/train": batch(4), "cifar-100-python/test": batch(2)})}


def svhn_files() -> dict[str, bytes]:
    from scipy.io import savemat

    out = {}
    for split, labels in (("train", [10, 1, 5]), ("test", [2, 10])):
        x = np.zeros((32, 32, 3, len(labels)), dtype=np.uint8)
        for i in range(len(labels)):
            x[..., i] = 20 * i
        buf = io.BytesIO()
        savemat(buf, {"X": x, "y": np.array(labels, dtype=np.uint8).reshape(-1, 1)})
        out[f"{split}_32x32.mat"] = buf.getvalue()
    return out


def idx_files(train_labels: list[int], test_labels: list[int]) -> dict[str, bytes]:
    out = {}
    for prefix, labels in (("train", train_labels), ("t10k", test_labels)):
        images = np.zeros((len(labels), 28, 28), dtype=np.uint8)
        images[:, 0, 3] = 255  # one bright pixel at row 0, column 3
        out[f"{prefix}-images-idx3-ubyte.gz"] = gzip.compress(idx_bytes(images))
        out[f"{prefix}-labels-idx1-ubyte.gz"] = gzip.compress(idx_bytes(np.array(labels, dtype=np.uint8)))
    return out


def emnist_files(split: str = "letters") -> dict[str, bytes]:
    members = {}
    for part, labels in (("train", [1, 26, 5]), ("test", [2, 2])):
        images = np.zeros((len(labels), 28, 28), dtype=np.uint8)
        images[:, 0, 3] = 255  # stored transposed: the loader moves it to row 3, column 0
        members[f"gzip/emnist-{split}-{part}-images-idx3-ubyte.gz"] = gzip.compress(idx_bytes(images))
        members[f"gzip/emnist-{split}-{part}-labels-idx1-ubyte.gz"] = gzip.compress(idx_bytes(np.array(labels, dtype=np.uint8)))
    return {"gzip.zip": zip_bytes(members)}


def har_members(prefix: str = "UCI HAR Dataset/") -> dict[str, bytes]:
    members = {}
    for split, labels in (("train", [1, 6, 3]), ("test", [2, 2])):
        for ch, signal in enumerate(HAR_SIGNALS):
            rows = np.full((len(labels), 128), float(ch)) + np.arange(len(labels))[:, None]
            members[f"{prefix}{split}/Inertial Signals/{signal}_{split}.txt"] = "\n".join(" ".join(f"{v:.6e}" for v in row) for row in rows).encode()
        members[f"{prefix}{split}/y_{split}.txt"] = "\n".join(str(v) for v in labels).encode()
    return members


def uci_har_files() -> dict[str, bytes]:
    # UCI's current archive wraps the dataset's own zip, next to a .names file.
    inner = zip_bytes(har_members())
    return {"human+activity+recognition+using+smartphones.zip": zip_bytes({"UCI HAR Dataset.zip": inner, "UCI HAR Dataset.names": b"HAR"})}


TINY_WNIDS = ("n02", "n01")  # sorted: n01 -> class 0, n02 -> class 1


def tiny_imagenet_members(prefix: str = "tiny-imagenet-200/") -> dict[str, bytes]:
    members = {f"{prefix}wnids.txt": "\n".join(TINY_WNIDS).encode() + b"\n"}
    for w, value in (("n01", 40), ("n02", 200)):
        for k in range(2):
            members[f"{prefix}train/{w}/images/{w}_{k}.JPEG"] = jpeg_bytes((value, value, value))
        members[f"{prefix}train/{w}/{w}_boxes.txt"] = b""
    members[f"{prefix}val/images/val_0.JPEG"] = jpeg_bytes((200, 200, 200))
    members[f"{prefix}val/images/val_1.JPEG"] = jpeg_bytes((40, 40, 40))
    members[f"{prefix}val/val_annotations.txt"] = b"val_0.JPEG\tn02\t0\t0\t63\t63\nval_1.JPEG\tn01\t1\t2\t30\t40\n"
    members[f"{prefix}test/images/test_0.JPEG"] = jpeg_bytes((0, 0, 0))
    return members


def tiny_imagenet_files() -> dict[str, bytes]:
    return {"tiny-imagenet-200.zip": zip_bytes(tiny_imagenet_members())}


def caltech_members(per_class: int = 5) -> dict[str, bytes]:
    members = {}
    for folder, value in (("001.ak47", 30), ("002.american-flag", 220), ("257.clutter", 128)):
        for k in range(per_class):
            members[f"256_ObjectCategories/{folder}/{folder[:3]}_{k:04d}.jpg"] = jpeg_bytes((value, value, value), (48 + 8 * k, 40))
    members["256_ObjectCategories/002.american-flag/RENAME2"] = b"not an image"
    return members


def caltech256_files() -> dict[str, bytes]:
    return {"256_ObjectCategories.tar": tar_bytes(caltech_members(), mode="w")}


def leaf_json(writers: dict[str, list[int]]) -> bytes:
    """LEAF json: writer w's sample j has every pixel = (j + 1) / 100 and label writers[w][j]."""
    data = {w: {"x": [[(j + 1) / 100] * 784 for j in range(len(ys))], "y": ys} for w, ys in writers.items()}
    return json.dumps({"users": list(writers), "num_samples": [len(v) for v in writers.values()], "user_data": data}).encode()


FEMNIST_WRITERS = {"f0001_01": [0, 1, 2, 3, 4], "f0002_02": [61, 60, 59], "f0003_03": [10], "f0004_04": [35, 36, 37, 38]}


def femnist_files() -> dict[str, bytes]:
    items = list(FEMNIST_WRITERS.items())
    return {"all_data.zip": zip_bytes({"all_data/all_data_0.json": leaf_json(dict(items[:2])), "all_data/all_data_1.json": leaf_json(dict(items[2:]))})}


GENERATORS = {
    "cifar10": cifar10_files,
    "cifar100": cifar100_files,
    "svhn": svhn_files,
    "mnist": lambda: idx_files([7, 0, 1, 9], [2, 3]),
    "fashion_mnist": lambda: idx_files([4, 4, 8], [1]),
    "emnist": emnist_files,
    "uci_har": uci_har_files,
    "tiny_imagenet": tiny_imagenet_files,
    "caltech256": caltech256_files,
    "femnist": femnist_files,
}


def manifest(name: str, files: dict[str, bytes], algorithm: str = "sha256") -> str:
    """``sha256sum``-style lines for ``files`` of dataset ``name``."""
    return "".join(f"{hashlib.new(algorithm, data).hexdigest()}  {name}/{fname}\n" for fname, data in files.items())


# ---------------------------------------------------------------- the loopback server


@dataclass
class ServerState:
    """What the server serves and how it misbehaves; ``requests`` records (path, Range header, status)."""

    files: dict[str, bytes] = field(default_factory=dict)
    drop_after: int | None = None
    """Close the connection after this many body bytes, once per path (then behave)."""
    ignore_range: bool = False
    stall_s: float = 0.0
    """Send the headers and half the body, then wait this long before the rest (a stalled server)."""
    wrong_range_once: bool = False
    """Answer the first Range request with 206 and the whole file (``Content-Range: bytes 0-``)."""
    redirects: dict[str, str] = field(default_factory=dict)
    """path -> path answered with 302 (as CaltechDATA and UCI send downloads elsewhere)."""
    requests: list[tuple[str, str | None, int]] = field(default_factory=list)
    dropped: set[str] = field(default_factory=set)


def _handler(state: ServerState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?")[0]
            rng = self.headers.get("Range")
            if path in state.redirects:
                state.requests.append((path, rng, 302))
                self.send_response(302)
                self.send_header("Location", state.redirects[path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = state.files.get(path)
            if data is None:
                state.requests.append((path, rng, 404))
                self.send_error(404)
                return
            start = 0
            if rng and not state.ignore_range and rng.startswith("bytes=") and rng.endswith("-"):
                start = int(rng[6:-1])
            if start >= len(data) and start:
                state.requests.append((path, rng, 416))
                self.send_error(416)
                return
            if start and state.wrong_range_once:
                state.wrong_range_once = False
                state.requests.append((path, rng, 206))
                self.send_response(206)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Content-Range", f"bytes 0-{len(data) - 1}/{len(data)}")
                self.end_headers()
                self.wfile.write(data)
                return
            body = data[start:]
            status = 206 if start else 200
            state.requests.append((path, rng, status))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            if state.drop_after is not None and path not in state.dropped and len(body) > state.drop_after:
                state.dropped.add(path)
                self.wfile.write(body[: state.drop_after])
                self.wfile.flush()
                self.close_connection = True
                return
            if state.stall_s:
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                time.sleep(state.stall_s)
                self.close_connection = True
                return
            self.wfile.write(body)

    return Handler


@contextmanager
def serve(state: ServerState) -> Iterator[str]:
    """A loopback HTTP server on a free port for the ``with`` block; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def publish(state: ServerState, name: str, files: dict[str, bytes]) -> None:
    """Serve ``files`` at ``/<name>/<file>``, the layout ``CHILLFL_DATA_MIRROR`` expects."""
    for fname, data in files.items():
        state.files[f"/{name}/{fname}"] = data

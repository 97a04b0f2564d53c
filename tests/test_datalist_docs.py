"""docs/datasets.md names every state ``chillfl data download``'s listing (no names) prints: the page said only how
the hub rows read. Each state is made here on disk (files written by the test, markers as the downloader writes them),
read from the listing, its dataset-specific parts turned into the page's placeholders, and looked up in the page."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from chillfl.data.download import MARKER
from fake_datasets import GENERATORS, idx_bytes
from test_hfdl_download import _listing

PAGE = Path(__file__).parents[1] / "docs" / "datasets.md"
PLACEHOLDERS = (
    (r"\d+ files? missing", "N files missing"),
    (r"^(incomplete|missing) \(no (?!\.parquet)[^;)]+", r"\1 (no FOLDER/FILE"),
    (r"--force replaces the [^ ]+/ there", "--force replaces the FOLDER/ there"),
    (r"move them into [a-z_]+/", "move them into FOLDER/"),
    (r"files in flwrlabs/[a-z]+/", "files in flwrlabs/NAME/"),
    (r"hf download .*", "hf download ..."),
)
"""The listing's concrete words -> the page's: a count, a folder and a file, the hub command (its --local-dir varies)."""


def _put(folder: Path, files: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, blob in files.items():
        (folder / name).write_bytes(blob)
    return folder


def _headers_only(count: int) -> bytes:
    """An idx image file's header saying ``count`` 28x28 images: the listing reads headers only."""
    return idx_bytes(np.zeros((0, 28, 28), np.uint8))[:4] + np.array([count, 28, 28], ">i4").tobytes()


def _data_dirs(tmp: Path) -> list[Path]:
    """Folders that, between them, give every state of the listing."""
    main = tmp / "data"
    _put(main / "mnist", GENERATORS["mnist"]())  # downloaded: the marker lists every file
    (main / "mnist" / MARKER).write_text("mnist\n" + "".join(f"{n}\n" for n in sorted(GENERATORS["mnist"]())))
    _put(main / "cifar-100-python", {"train": b"x", MARKER: b"cifar100\ntrain\ntest\n"})  # incomplete (1 file missing)
    _put(main / "cifar-10-batches-py" / "repacked", {"data_batch_1": b"x"})  # incomplete (no ...): one folder too deep
    (main / "cifar-10-batches-py" / MARKER).write_text("cifar10\n")
    _put(main / "svhn", {"train_32x32.mat": b"x"})  # present (not by us)
    (main / "tiny-imagenet-200").mkdir()  # missing (no ...; --force ...)
    (main / "femnist" / "all_data").mkdir(parents=True)  # present (LEAF)
    _put(main / "flwrlabs" / "shakespeare", {"shakespeare.csv": b"character_id,x,y\n"})  # present (hub)
    (main / "flwrlabs" / "femnist").mkdir()  # missing (no .parquet or .csv files ...)
    named = _put(tmp / "fashion", GENERATORS["fashion_mnist"]())  # the idx files are fashion_mnist's by the name
    neutral = _put(tmp / "neutral", GENERATORS["mnist"]())  # cannot tell
    published = _put(tmp / "published", {"train-images-idx3-ubyte": _headers_only(60_000), "t10k-images-idx3-ubyte": _headers_only(10_000)})
    return [main, named, neutral, published, tmp / "empty"]  # empty: missing, manual (LEAF), missing: hf download ...


def _documented(state: str) -> str:
    for pattern, words in PLACEHOLDERS:
        state = re.sub(pattern, words, state)
    return state


def test_every_state_of_the_listing_is_in_docs_datasets_md(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    states = {state for data in _data_dirs(tmp_path) for _, state in _listing(data, capsys).values()}
    words = {_documented(s) for s in states}
    expected = {  # what the listing said, as the page writes it: one of each state
        "downloaded", "incomplete (N files missing)", "incomplete (no FOLDER/FILE)", "present (not by us)", "present",
        "manual (LEAF)", "missing", "missing (no FOLDER/FILE; --force replaces the FOLDER/ there)",
        "missing (the idx files in ./ are fashion_mnist's, by the folder's name)",
        "missing (cannot tell whether the idx files in ./ are mnist's or fashion_mnist's: move them into FOLDER/)",
        "ambiguous: mnist or fashion_mnist (the loader tells the idx files in ./ apart by their pixels; move them into FOLDER/ to be sure)",
        "missing: hf download ...", "missing (no .parquet or .csv files in flwrlabs/NAME/): hf download ...",
    }
    assert words == expected
    page = PAGE.read_text(encoding="utf-8")
    undocumented = sorted(w for w in words if f"| `{w}`" not in page)
    assert not undocumented, f"docs/datasets.md's table of the listing's states lacks {undocumented}"

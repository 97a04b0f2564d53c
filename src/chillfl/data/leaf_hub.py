"""``flwr_femnist`` and ``flwr_shakespeare``: LEAF's two natural-client benchmarks in the Flower Datasets layout.

::

    [dataset]
    name = "flwr_femnist"          # or "flwr_shakespeare"
    path = "flwrlabs/femnist"      # default; a folder under data_dir, a local folder/file, or (online) the hub
    train_fraction = 0.9           # each client's own train/test split
    # min_samples = 0; max_clients = 0; sample_fraction = 1.0; split_seed = 0

    [partition]
    name = "natural"               # one client per writer / speaker (or "flwr" + NaturalIdPartitioner)
    [eval]
    client_split = "natural"       # each client's own test part

Files (the hub datasets ``flwrlabs/femnist`` and ``flwrlabs/shakespeare``, one
``train`` split each):

* FEMNIST: parquet, columns ``image`` (a ``datasets.Image``: a struct of PNG
  ``bytes`` and ``path``, 28x28 grayscale), ``writer_id`` (str), ``hsf_id``
  (int, unused), ``character`` (ClassLabel, 62 classes: digits, A-Z, a-z in
  LEAF's order).
* Shakespeare: ``character_id`` (str: one speaker of one play), ``x`` (80
  characters), ``y`` (the next character). The hub stores it as
  ``shakespeare.csv`` (its parquet conversion as ``*.parquet``); both read.

Where they come from: ``path`` is a folder or file (absolute, or relative to
``data_dir`` when it exists there, else to the working directory) holding the
``*.parquet`` (or ``*.csv``) files, read with pyarrow in sorted path order. A
``path`` found nowhere that reads as a hub name (``owner/name``) is loaded with
``datasets.load_dataset(path, split="train")`` (extra ``hf``), unless the hub
is offline (``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE``: a ConfigError on
``dataset.path``, exit 2) or unreachable (:class:`~chillfl.errors.Unreachable`,
exit 1: the network, not the input, as ``chillfl data download``): then one line
says how to fetch the files into ``data_dir``. A hub whose host name does not
resolve (no network) is told at once, not after huggingface_hub's five retries
(about 25 s and a log line each).

Choices
-------
* Clients are the natural ids (``writer_id`` / ``character_id``) in sorted
  order -- the order ``flwr_datasets``' ``NaturalIdPartitioner`` numbers them --
  so ``partition.name = "natural"`` and the ``flwr`` NaturalIdPartitioner give
  the same clients. A client's rows keep their file order.
* Client selection follows LEAF's options (``chillfl.data.loaders.select_writers``,
  shared with ``femnist``): ``sample_fraction`` (``--sf``), ``min_samples``
  (``-k``), then ``max_clients`` (the first N kept); clients with fewer than 2
  samples are dropped (they cannot have a train and a test sample).
* Each client's train part is ``max(1, floor(train_fraction * n))`` of its n
  samples (LEAF's ``split_data.py`` with ``-t sample``). FEMNIST draws them at
  random (``SeedSequence(split_seed, spawn_key=(client position,))``, as
  ``femnist``); Shakespeare takes the *first* ones in file order and tests on
  the rest, because its samples overlap in time (the dataset card warns that a
  random split leaks test text into training).
* FEMNIST images are decoded with Pillow as grayscale ("L"), scaled to [0, 1]
  and standardised with the train set's mean and std; from local files the
  result is cached memory-mapped under ``data_dir/.chillfl-cache`` like
  ``femnist`` (:mod:`chillfl.data.arraycache`), from the hub it is kept in memory.
* Shakespeare characters become indices into LEAF's 80-letter alphabet
  (:data:`LEAF_LETTERS`), stored as float32 ``[N, 80]`` (exact integers) for the
  ``char_lstm`` model; labels are the next character's index (80 classes).
  A character outside the alphabet maps to index 0 (as the common PyTorch
  ports of LEAF do; LEAF's own ``str.find`` gives -1), and the count of such
  characters is logged. The column is encoded at once (:func:`encode_column`) and,
  from local files, cached memory-mapped like FEMNIST (the indices as they are).

Checked against (2026-12): LEAF's language_utils.ALL_LETTERS (80 characters, sequences of 80) and split_data.py (max(1, int(tf * n)) train; LEAF splits Shakespeare at random).
"""

from __future__ import annotations

import io
import logging
import os
import re
import socket
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import torch

from chillfl.data import arraycache
from chillfl.data.loaders import FemnistOptions, image_formats, local_source, select_writers, table_files
from chillfl.data.sources import hub_download_command
from chillfl.errors import ConfigError, DataAbsent, Unreachable
from chillfl.extras import need
from chillfl.options import require

SECTION = "dataset"
LEAF_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
"""LEAF's Shakespeare alphabet (``ALL_LETTERS`` of its ``language_utils.py``): 80 characters."""
FEMNIST_CLASSES = 62
HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
DEFAULT_ENDPOINT = "https://huggingface.co"
"""The hub huggingface_hub talks to unless ``HF_ENDPOINT`` names another."""
TEXT_COLUMNS = ("character_id", "x", "y", "writer_id")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeafHubOptions:
    """Where the files are, and LEAF's client sampling and per-client train/test split."""

    path: str = ""
    train_fraction: float = 0.9
    sample_fraction: float = 1.0
    min_samples: int = 0
    max_clients: int = 0
    split_seed: int = 0

    def validate(self, section: str) -> None:
        require(bool(self.path), f"{section}.path", "is required: a folder of the dataset's parquet files, or its hub name")
        require(0 < self.train_fraction < 1, f"{section}.train_fraction", f"must be in (0, 1), got {self.train_fraction}")
        require(0 < self.sample_fraction <= 1, f"{section}.sample_fraction", f"must be in (0, 1], got {self.sample_fraction}")
        require(0 <= self.min_samples < 2**31, f"{section}.min_samples", f"must be in [0, 2**31), got {self.min_samples}")
        require(0 <= self.max_clients < 2**31, f"{section}.max_clients", f"must be >= 0 (0: all), got {self.max_clients}")
        require(0 <= self.split_seed < 2**63, f"{section}.split_seed", f"must be in [0, 2**63), got {self.split_seed}")


@dataclass(frozen=True)
class FemnistHubOptions(LeafHubOptions):
    """``flwr_femnist``: ``path`` defaults to the hub's ``flwrlabs/femnist``."""

    path: str = "flwrlabs/femnist"


@dataclass(frozen=True)
class ShakespeareOptions(LeafHubOptions):
    """``flwr_shakespeare``: ``path`` defaults to the hub's ``flwrlabs/shakespeare``."""

    path: str = "flwrlabs/shakespeare"


# ---------------------------------------------------------------- reading the table


def fetch_hint(name: str, data_dir: Path) -> str:
    """How to put hub dataset ``name`` where ``path = name`` finds it offline."""
    return f"fetch it once with `{hub_download_command(name, data_dir)}` (huggingface_hub's CLI), or run online with pip install 'chillfl[hf]'"


def _offline() -> bool:
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on") for v in OFFLINE_VARS)


def unreachable_hub() -> str | None:
    """Why the hub cannot be reached at all (its host name does not resolve), or None when it may be.

    Without network, huggingface_hub retries a request five times over about 25 s, logging a line each time,
    before it gives up; a name that does not resolve fails here at once. Behind a proxy the local resolver may
    not know names the proxy does, so nothing is checked there.
    """
    if any(os.environ.get(v) for v in PROXY_VARS):
        return None
    host = urlsplit(os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).hostname
    if not host:
        return None
    try:
        socket.getaddrinfo(host, 443)
    except (socket.gaierror, UnicodeError) as exc:
        return f"{host} does not resolve: {exc}"
    return None


def read_table(path: str, data_dir: Path) -> tuple[Any, Path | None]:
    """(pyarrow Table of every row, the local source or None when it came from the hub)."""
    pa = need("pyarrow", "hf", "reading the LEAF parquet files")
    root = local_source(path, data_dir)
    if root is not None:
        files = table_files(root)  # a folder unreadable: one line on data_dir, not "no files" (tree_files)
        if not files:
            raise ConfigError(f"{SECTION}.path", f"no .parquet or .csv files under {root}")
        try:
            tables = [_read_one(f) for f in files]
            return pa.concat_tables(tables, promote_options="default"), root
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise ConfigError(f"{SECTION}.path", f"cannot read the files under {root}: {' '.join(str(exc).split())[:200]}") from None
    if not HUB_NAME.match(path):
        raise ConfigError(f"{SECTION}.path", f"{path!r} not found (looked in {data_dir} and the working directory)")
    if _offline():
        raise DataAbsent(f"{SECTION}.path", f"{path!r} is not under {data_dir} and the hub is offline; {fetch_hint(path, data_dir)}")
    unreachable = unreachable_hub()
    if unreachable is not None:  # no network: not bad input (exit 1, as `chillfl data download`'s)
        raise Unreachable(f"{SECTION}.path", f"{path!r} is not under {data_dir} and the hub cannot be reached ({unreachable}); {fetch_hint(path, data_dir)}")
    datasets = need("datasets", "hf", f"loading {path} from the Hugging Face hub")
    try:
        ds = datasets.load_dataset(path, split="train")
    except Exception as exc:  # noqa: BLE001 - no network, no such dataset, ...: the user's setup, one line
        reason = " ".join(str(exc).split())[:160] or type(exc).__name__
        if isinstance(exc, (ConnectionError, TimeoutError)):  # datasets' "Couldn't reach ... on the Hub": the network, not the name
            raise Unreachable(f"{SECTION}.path", f"cannot reach the hub for {path!r} ({reason}); {fetch_hint(path, data_dir)}") from None
        raise ConfigError(f"{SECTION}.path", f"cannot load {path!r} from the hub ({reason}); {fetch_hint(path, data_dir)}") from None
    table = ds.data.table if hasattr(ds.data, "table") else ds.data
    return table, None


def _read_one(f: Path) -> Any:
    if f.suffix == ".csv":
        import pyarrow as pa
        import pyarrow.csv as pcsv

        text = {c: pa.string() for c in TEXT_COLUMNS}  # never inferred as numbers (a "y" of digits only is still text)
        return pcsv.read_csv(f, parse_options=pcsv.ParseOptions(newlines_in_values=True), convert_options=pcsv.ConvertOptions(strings_can_be_null=False, column_types=text))
    import pyarrow.parquet as pq

    return pq.read_table(f)


def _column(table: Any, name: str) -> Any:
    if name not in table.column_names:
        raise ConfigError(f"{SECTION}.path", f"no column {name!r} in the files; columns: {', '.join(table.column_names)}")
    return table.column(name).combine_chunks()


# ---------------------------------------------------------------- clients and their splits


def client_rows(ids: np.ndarray, opts: LeafHubOptions) -> list[np.ndarray]:
    """Row positions of every kept client (sorted natural ids; rows in file order), after LEAF's sampling."""
    names, inverse = np.unique(ids, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    counts = np.bincount(inverse, minlength=len(names))
    starts = np.concatenate([[0], np.cumsum(counts)])
    rows = [order[starts[g] : starts[g + 1]] for g in range(len(names))]
    leaf = FemnistOptions(opts.sample_fraction, opts.min_samples, opts.train_fraction, 0, opts.split_seed)
    kept = [g for g in select_writers([int(c) for c in counts], leaf) if counts[g] >= 2]
    if opts.max_clients:
        kept = kept[: opts.max_clients]
    if not kept:
        raise ConfigError(f"{SECTION}.min_samples", "no client is left after sampling (each needs at least 2 samples)")
    return [rows[g] for g in kept]


def split_client(rows: np.ndarray, position: int, opts: LeafHubOptions, temporal: bool) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, test rows) of one client: max(1, floor(tf * n)) train, random or the first ones."""
    n = len(rows)
    n_train = max(1, int(np.floor(opts.train_fraction * n)))
    if temporal:
        return rows[:n_train], rows[n_train:]
    perm = np.random.default_rng(np.random.SeedSequence(opts.split_seed, spawn_key=(position,))).permutation(n)
    return rows[np.sort(perm[:n_train])], rows[np.sort(perm[n_train:])]


def _bounds(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)


def _splits(ids: np.ndarray, opts: LeafHubOptions, temporal: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train rows, test rows, train bounds, test bounds): clients as contiguous blocks."""
    parts = [split_client(r, i, opts, temporal) for i, r in enumerate(client_rows(ids, opts))]
    trains, tests = [p[0] for p in parts], [p[1] for p in parts]
    return np.concatenate(trains), np.concatenate(tests), _bounds(trains), _bounds(tests)


# ---------------------------------------------------------------- FEMNIST


def decode_png_column(column: Any, rows: np.ndarray | None = None) -> np.ndarray:
    """``[N, 1, H, W]`` uint8 from a ``datasets.Image`` column (struct of PNG bytes) or a column of bytes.

    ``rows``: the table row of each value (the column was taken from them), so an error names the row
    of the data that holds the bad image. An image past PIL's decompression-bomb limit is refused, its
    warning (over MAX_IMAGE_PIXELS) too: decoding it anyway could take gigabytes for one 28x28 sample.
    """
    Image = need("PIL.Image", "images", "decoding FEMNIST's PNG images")
    values = column.field("bytes") if hasattr(column.type, "get_field_index") and column.type.get_field_index("bytes") >= 0 else column
    images = []
    formats = image_formats(Image)  # never EPS (Ghostscript)
    for i, blob in enumerate(values.to_pylist()):
        row = i if rows is None else int(rows[i])
        if blob is None:
            raise ConfigError(f"{SECTION}.path", f"FEMNIST row {row} has no image bytes")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                images.append(np.asarray(Image.open(io.BytesIO(blob), formats=formats).convert("L"), dtype=np.uint8))
        except Exception as exc:  # noqa: BLE001 - a corrupt PNG (or a decompression bomb) is the file's fault: one line
            raise ConfigError(f"{SECTION}.path", f"FEMNIST row {row}: cannot decode the image ({' '.join(str(exc).split())})") from None
    shapes = {a.shape for a in images}
    if len(shapes) > 1:
        raise ConfigError(f"{SECTION}.path", f"FEMNIST images of different sizes: {sorted(shapes)[:3]}")
    return np.stack(images)[:, None] if images else np.zeros((0, 1, 28, 28), np.uint8)


def _ids(table: Any, name: str) -> np.ndarray:
    """Every row's natural client id as an int64 rank among the distinct ids sorted as text (``np.unique``'s order of
    their strings: by code point), all that :func:`client_rows` asks; a row without one (null) would silently become
    client "None".

    Why ranks, not strings: ``to_pylist`` made a Python ``str`` per row and then a numpy ``<U`` copy (4 bytes a
    character), most of the first load's memory at the hub's 4.2M rows. Text and integer ids are grouped
    (``dictionary_encode``) and sorted by pyarrow over their UTF-8 bytes, whose order is the code points'; other types
    go through ``str`` as before.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    column = _column(table, name)
    if column.null_count:
        raise ConfigError(f"{SECTION}.path", f"{column.null_count} rows have no {name!r} (null); every row needs its client's id")
    t = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t) or str(t) == "string_view"):
        return np.unique(np.asarray(column.to_pylist(), dtype=object).astype(str), return_inverse=True)[1].astype(np.int64)
    text = column.cast(pa.large_string())  # integers as their decimal text, as str() gave them
    try:
        text.validate(full=True)
    except pa.ArrowInvalid as exc:  # bytes that are no UTF-8 (a parquet file written by hand): was a UnicodeDecodeError traceback
        raise ConfigError(f"{SECTION}.path", f"column {name!r} is not valid UTF-8 ({' '.join(str(exc).split())[:160]})") from None
    if pc.any(pc.ends_with(text, "\0")).as_py():  # a numpy string drops its trailing NULs: "A\0" was client "A"
        text = pc.utf8_rtrim(text, characters="\0")
    encoded = pc.dictionary_encode(text)  # the distinct ids, in order of first appearance, and each row's position there
    order = np.asarray(pc.sort_indices(encoded.dictionary))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    return rank[np.asarray(encoded.indices)]


def _femnist_decoded(table: Any, opts: LeafHubOptions) -> arraycache.Decoded:
    import pyarrow as pa

    ids = _ids(table, "writer_id")
    character = _column(table, "character")
    if character.null_count or not pa.types.is_integer(character.type):  # strings or nulls: no class ids to cast
        raise ConfigError(f"{SECTION}.path", f"FEMNIST's column 'character' must hold class ids 0..{FEMNIST_CLASSES - 1} in every row, got {character.type} with {character.null_count} nulls")
    labels = np.asarray(character.to_numpy(zero_copy_only=False), dtype=np.int64)
    if len(labels) and (labels.min() < 0 or labels.max() >= FEMNIST_CLASSES):
        raise ConfigError(f"{SECTION}.path", f"FEMNIST labels outside 0..{FEMNIST_CLASSES - 1} in column 'character'")
    train, test, b_train, b_test = _splits(ids, opts, temporal=False)
    rows = np.concatenate([train, test])
    x = decode_png_column(_column(table, "image").take(rows), rows)
    return arraycache.Decoded(x[: len(train)], labels[train], x[len(train) :], labels[test], FEMNIST_CLASSES, b_train, b_test)


FLWR_FEMNIST_OUTPUT = 1
"""Output version of ``flwr_femnist``'s decoding (:func:`_femnist_decoded`), in its cache key (:mod:`chillfl.data.arraycache`): bump it when what it produces changes."""


def load_femnist(data_dir: Path, opts: LeafHubOptions) -> arraycache.Mapped:
    """FEMNIST by writer: standardised images, writers as contiguous row blocks (``train_bounds``/``test_bounds``)."""
    root = local_source(opts.path, data_dir)
    if root is not None:  # decoded once, then memory-mapped from data_dir/.chillfl-cache
        return arraycache.cached("flwr_femnist", opts, root, data_dir, lambda: _femnist_decoded(read_table(opts.path, data_dir)[0], opts),
                                 output_version=FLWR_FEMNIST_OUTPUT)
    table, _ = read_table(opts.path, data_dir)
    d = _femnist_decoded(table, opts)
    mean, std = arraycache.channel_stats(d.x_train)
    xs = []
    for x in (d.x_train, d.x_test):
        out = np.empty(x.shape, dtype=np.float32)
        arraycache.standardise_into(x, mean, std, out)
        xs.append(torch.from_numpy(out))
    return arraycache.Mapped(xs[0], torch.from_numpy(d.y_train), xs[1], torch.from_numpy(d.y_test), FEMNIST_CLASSES, d.train_bounds, d.test_bounds,
                             *arraycache.recorded_stats(mean, std))


# ---------------------------------------------------------------- Shakespeare


FLWR_SHAKESPEARE_OUTPUT = 1
"""Output version of ``flwr_shakespeare``'s encoding (:func:`_shakespeare_decoded`), in its cache key (:mod:`chillfl.data.arraycache`):
bump it when what it produces changes. :data:`LEAF_LETTERS` is in the key itself, so a changed alphabet is never read stale."""
UNKNOWN = 0xFF
"""The lead byte's mark in :func:`_byte_table` for a character outside :data:`LEAF_LETTERS` (it becomes index 0)."""


def _byte_table() -> np.ndarray:
    """``uint8[256]``: the :data:`LEAF_LETTERS` index of each UTF-8 lead byte, :data:`UNKNOWN` for the others.

    Why bytes: every letter is ASCII (one byte, its code point), so a character is one lead byte (a byte not of the
    form ``10xxxxxx``), and a lead byte of 0x80 or more starts a character outside the alphabet, whatever it is.
    """
    if not (LEAF_LETTERS.isascii() and len(LEAF_LETTERS) < UNKNOWN):
        raise ValueError("the byte table needs an ASCII alphabet of fewer than 255 letters (uint8 indices)")
    table = np.full(256, UNKNOWN, dtype=np.uint8)
    table[np.frombuffer(LEAF_LETTERS.encode("ascii"), dtype=np.uint8)] = np.arange(len(LEAF_LETTERS), dtype=np.uint8)
    return table


def _text_column(column: Any, name: str) -> Any:
    """``column`` as a ``large_string`` Array of valid UTF-8; numbers as their decimal text (as ``str`` gave them)."""
    import pyarrow as pa

    if column.null_count:
        raise ConfigError(f"{SECTION}.path", f"{column.null_count} Shakespeare rows have no {name!r} (null)")
    t = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t) or str(t) == "string_view"):
        raise ConfigError(f"{SECTION}.path", f"Shakespeare's column {name!r} must hold text, got {t}")
    text = column.cast(pa.large_string())
    try:
        text.validate(full=True)
    except pa.ArrowInvalid as exc:  # bytes that are no UTF-8 (a parquet file written by hand): one line, not a traceback
        raise ConfigError(f"{SECTION}.path", f"Shakespeare's column {name!r} is not valid UTF-8 ({' '.join(str(exc).split())[:160]})") from None
    return text


def text_lengths(column: Any) -> np.ndarray:
    """Each value's length in characters (code points, as ``len(str)``) of a :func:`_text_column`."""
    import pyarrow.compute as pc

    return np.asarray(pc.utf8_length(column).to_numpy(zero_copy_only=False), dtype=np.int64)


def encode_column(column: Any, name: str = "x") -> tuple[np.ndarray, int]:
    """``[N, L]`` uint8 indices into :data:`LEAF_LETTERS` of a text column (every value of one length L), and how many
    characters were outside it (index 0).

    Vectorised over the column's UTF-8 bytes (:func:`_byte_table`): a Python loop over every character into int64
    took about 2 minutes and 8 GB for the hub's 4.2M rows.
    """
    text = _text_column(column, name)
    lengths = text_lengths(text)
    widths = np.unique(lengths)
    if len(widths) > 1:
        raise ConfigError(f"{SECTION}.path", f"Shakespeare inputs {name!r} of different lengths {widths[:4].tolist()}; LEAF's are all 80 characters")
    width = int(widths[0]) if len(widths) else 80
    _, offsets, data = text.buffers()
    ends = np.frombuffer(offsets, dtype=np.int64)[text.offset : text.offset + len(text) + 1]
    raw = np.frombuffer(data, dtype=np.uint8)[ends[0] : ends[-1]] if data is not None and len(ends) > 1 else np.zeros(0, np.uint8)
    leads = raw if len(raw) == len(text) * width else raw[(raw & 0xC0) != 0x80]  # all ASCII: every byte is a character
    codes = _byte_table()[leads]
    outside = codes == UNKNOWN
    unknown = int(outside.sum())
    codes[outside] = 0
    return codes.reshape(len(text), width), unknown


def encode_text(texts: list[str]) -> tuple[np.ndarray, int]:
    """:func:`encode_column` of Python strings."""
    import pyarrow as pa

    return encode_column(pa.array(texts, type=pa.large_string()))


def _shakespeare_decoded(table: Any, opts: LeafHubOptions) -> arraycache.Decoded:
    ids = _ids(table, "character_id")
    labels = _text_column(_column(table, "y"), "y")
    if (text_lengths(labels) != 1).any():
        raise ConfigError(f"{SECTION}.path", "Shakespeare labels 'y' must be single characters")
    x, unknown_x = encode_column(_column(table, "x"), "x")
    y, unknown_y = encode_column(labels, "y")
    if unknown_x or unknown_y:
        log.warning("%d characters of Shakespeare are outside LEAF's 80-letter alphabet; they read as index 0 (%r)", unknown_x + unknown_y, LEAF_LETTERS[0])
    train, test, b_train, b_test = _splits(ids, opts, temporal=True)
    next_char = y[:, 0].astype(np.int64)
    return arraycache.Decoded(x[train], next_char[train], x[test], next_char[test], len(LEAF_LETTERS), b_train, b_test, indices=True)


def load_shakespeare(data_dir: Path, opts: LeafHubOptions) -> arraycache.Mapped:
    """Shakespeare by speaker: ``[N, 80]`` character indices (float32), next-character labels, speakers as row blocks.

    From local files the encoded arrays are cached memory-mapped under ``data_dir/.chillfl-cache`` (keyed by the files,
    the options, :data:`FLWR_SHAKESPEARE_OUTPUT` and :data:`LEAF_LETTERS`), as ``flwr_femnist``'s; from the hub, in memory.
    """
    root = local_source(opts.path, data_dir)
    if root is not None:
        return arraycache.cached("flwr_shakespeare", (opts, LEAF_LETTERS), root, data_dir,
                                 lambda: _shakespeare_decoded(read_table(opts.path, data_dir)[0], opts), output_version=FLWR_SHAKESPEARE_OUTPUT)
    d = _shakespeare_decoded(read_table(opts.path, data_dir)[0], opts)
    x_tr, x_te = (torch.from_numpy(x.astype(np.float32)) for x in (d.x_train, d.x_test))
    return arraycache.Mapped(x_tr, torch.from_numpy(d.y_train), x_te, torch.from_numpy(d.y_test), len(LEAF_LETTERS), d.train_bounds, d.test_bounds)

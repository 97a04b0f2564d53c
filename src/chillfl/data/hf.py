"""``dataset.name = "hf"``: a Hugging Face ``datasets`` dataset from a local folder or parquet files.

::

    [dataset]
    name = "hf"
    path = "my_cifar"            # a save_to_disk folder, a folder of parquet files, or one .parquet file
    image_column = "img"         # images (datasets.Image or nested arrays) -> [N, C, H, W]
    label_column = "label"
    # feature_columns = ["a", "b"]   # tabular instead of images -> [N, F]
    train_split = "train"
    test_split = "test"
    # test_fraction = 0.2            # when the files hold no test split

Needs the optional extra ``hf`` (``pip install 'chillfl[hf]'``, which brings
``datasets``). Nothing is downloaded: a hub name is not a path.

Choices
-------
* ``path``: absolute, or relative to ``data_dir`` when it exists there, else to
  the working directory. A folder written by ``save_to_disk`` (a
  ``DatasetDict`` or a single ``Dataset``) is opened memory-mapped
  (``load_from_disk``). Otherwise the split's parquet files are the ``.parquet``
  files under ``path`` whose relative path starts with the split's name
  (``train-00000-of-00001.parquet``, ``train/0.parquet``, ``data/train-*.parquet``
  after stripping a leading ``data/``); a single ``.parquet`` file is the
  train split. They are read with pyarrow, and the ``datasets`` features kept
  in the file's schema (``Image``, ``ClassLabel``) decide how columns decode.
* Columns: ``image_column`` unset and no ``feature_columns``: the first of
  ``image``, ``img``, ``pixel_values`` present. Images are decoded with Pillow
  from the bytes stored in the file, never from a ``path`` or URL a row names
  (``datasets`` would open or fetch it: a file from elsewhere would reach the
  disk or the network): such a row, and a corrupt or decompression-bomb image,
  is one line on ``image_column`` naming the row;
  all must share one size (resize them beforehand); a split whose first image
  is grayscale ("L") is read as 1 channel, anything else as RGB. ``uint8``
  pixels are scaled to [0, 1] and standardised per channel with the train
  set's statistics, like every image dataset (``[dataset.augment] normalize``
  can change that). An image column of nested lists or ``Array2D``/``Array3D``
  comes back from ``datasets`` as Python ints (int64, even when declared
  ``uint8``): when every value of both splits lies in [0, 255] they are 8-bit
  pixels and scale as ``uint8`` ones; integers beyond that range (16-bit
  scans) are kept as numbers, standardised as they are; floats are taken as
  they are. ``feature_columns`` (numbers) give tabular inputs, standardised
  per feature (integers are no pixels there).
* Labels: a ``ClassLabel`` column gives its class count; integer labels give
  ``max + 1``; string labels are numbered in sorted order over both splits.
* ``test_fraction``: a seeded, per-class split of the train split
  (``split_seed``), when the files have no test split.

Checked against (2026-12): Hugging Face datasets' Image/ClassLabel features; scaled and standardised as the built-in
image datasets (uint8 pixels, and integer ones in [0, 255], are divided by 255; until 2026-12-02 integer lists were not).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chillfl.data.loaders import RawSplit, is_file, tree_files
from chillfl.errors import ConfigError
from chillfl.extras import need
from chillfl.options import require

SECTION = "dataset"
IMAGE_COLUMNS = ("image", "img", "pixel_values")


@dataclass(frozen=True)
class HFOptions:
    """Where the dataset lies and which columns hold the inputs and the labels."""

    path: str = ""
    image_column: str | None = None
    label_column: str = "label"
    feature_columns: list[str] | None = None
    train_split: str = "train"
    test_split: str = "test"
    test_fraction: float | None = None
    split_seed: int = 0

    def validate(self, section: str) -> None:
        require(bool(self.path), f"{section}.path", "is required: a save_to_disk folder or parquet file(s) of a Hugging Face dataset")
        require(self.feature_columns is None or len(self.feature_columns) > 0, f"{section}.feature_columns", "must name at least one column")
        require(
            self.image_column is None or self.feature_columns is None,
            f"{section}.feature_columns",
            "give either image_column (images) or feature_columns (tabular), not both",
        )
        require(self.test_fraction is None or 0 < self.test_fraction < 1, f"{section}.test_fraction", f"must be in (0, 1), got {self.test_fraction}")
        require(0 <= self.split_seed < 2**63, f"{section}.split_seed", f"must be in [0, 2**63), got {self.split_seed}")


def _datasets() -> Any:
    return need("datasets", "hf", "Hugging Face datasets (dataset.name = 'hf')")


def _resolve(path: str, data_dir: Path) -> Path:
    p = Path(path).expanduser()
    if not p.is_absolute() and (data_dir / p).exists():
        p = data_dir / p
    if not p.exists():
        raise ConfigError(f"{SECTION}.path", f"{path!r} not found (looked in {data_dir} and the working directory)")
    return p


def _parquet_files(root: Path, split: str) -> list[Path]:
    """The parquet files of ``split`` under a local folder (one unreadable: one line on ``data_dir``, not "no files": :func:`tree_files`)."""
    if is_file(root):
        return [root] if split == "train" else []
    out = []
    for f in tree_files(root, ".parquet"):
        rel = f.relative_to(root).parts
        rel = rel[1:] if rel[0] == "data" and len(rel) > 1 else rel
        if rel[0] == split or rel[0].startswith(f"{split}-") or rel[0].startswith(f"{split}.") or rel[0].startswith(f"{split}_"):
            out.append(f)
    return out


def open_splits(root: Path, opts: HFOptions) -> tuple[dict[str, Any], list[str]]:
    """({split name: datasets.Dataset} for the train and (if present) test split, every split name found)."""
    ds = _datasets()
    if root.is_dir() and any((root / m).is_file() for m in ("dataset_dict.json", "state.json")):
        try:
            loaded = ds.load_from_disk(str(root))
        except Exception as exc:  # noqa: BLE001 - any unreadable folder is the user's input
            raise ConfigError(f"{SECTION}.path", f"cannot read the save_to_disk folder {root}: {exc}") from None
        if isinstance(loaded, ds.DatasetDict):
            return {k: loaded[k] for k in (opts.train_split, opts.test_split) if k in loaded}, list(loaded)
        return {opts.train_split: loaded}, [opts.train_split]
    import pyarrow as pa
    import pyarrow.parquet as pq

    out: dict[str, Any] = {}
    for split in (opts.train_split, opts.test_split):
        files = _parquet_files(root, split)
        if not files:
            continue
        try:
            table = pa.concat_tables([pq.read_table(f) for f in files])
        except Exception as exc:  # noqa: BLE001
            raise ConfigError(f"{SECTION}.path", f"cannot read parquet files under {root}: {exc}") from None
        out[split] = ds.Dataset(table)
    return out, list(out)


def _column(dataset: Any, name: str, field: str) -> None:
    if name not in dataset.column_names:
        raise ConfigError(field, f"no column {name!r}; columns: {', '.join(dataset.column_names)}")


def _undecoded(dataset: Any, column: str, field: str) -> Any:
    """``dataset`` with ``column`` read as stored: a ``datasets.Image`` (``Audio``, ...) value whose ``bytes`` are null
    makes ``datasets`` open its ``path`` (any local file, a FIFO that blocks, a URL fetched over the network), so a
    data file from elsewhere would reach the disk or the network; chillfl decodes the stored bytes itself."""
    from datasets.features.features import require_decoding

    feature = dataset.features.get(column)
    if feature is None or not require_decoding(feature):
        return dataset
    image = _datasets().Image
    if not isinstance(feature, image):
        raise ConfigError(field, f"column {column!r} holds {type(feature).__name__} values, not one image or number per row")
    return dataset.cast_column(column, image(mode=feature.mode, decode=False))


def _open_image(blob: bytes, mode: str | None, row: int, column: str) -> Any:
    """One stored image decoded as ``datasets`` would (EXIF orientation, the feature's mode); a corrupt, truncated or
    absurdly large image (PIL's decompression-bomb guard, its warning too) is one line naming the row."""
    import io
    import warnings

    Image = need("PIL.Image", "images", "decoding the images of dataset.name = 'hf'")
    from PIL import ImageOps

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(blob))
            image.load()
            if image.getexif().get(0x0112) is not None:  # Orientation, as datasets' Image.decode_example applies it
                image = ImageOps.exif_transpose(image)
            return image.convert(mode) if mode and mode != image.mode else image
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ConfigError(f"{SECTION}.image_column", f"row {row} of column {column!r}: cannot decode the image ({' '.join(str(exc).split())})") from None


def _decoded(values: list[Any], mode: str | None, column: str) -> list[Any]:
    """The PIL images of a ``datasets.Image`` column read undecoded (``{"bytes", "path"}`` per row)."""
    out = []
    for i, v in enumerate(values):
        blob = v.get("bytes") if isinstance(v, dict) else v
        if not isinstance(blob, bytes):
            named = v.get("path") if isinstance(v, dict) else v
            raise ConfigError(
                f"{SECTION}.image_column",
                f"row {i} of column {column!r} has no image bytes (it names {named!r}); images must carry their bytes: chillfl opens no file or URL named in a data file",
            )
        out.append(_open_image(blob, mode, i, column))
    return out


def _images(dataset: Any, column: str) -> np.ndarray:
    """[N, C, H, W] uint8 (decoded images) or the column's numbers as an array."""
    field = f"{SECTION}.image_column"
    _column(dataset, column, field)
    feature = dataset.features.get(column)
    values = _undecoded(dataset, column, field)[column]
    missing = next((i for i, v in enumerate(values) if v is None), None)
    if missing is not None:
        raise ConfigError(field, f"row {missing} of column {column!r} has no image (None); drop such rows first")
    if isinstance(feature, _datasets().Image):
        values = _decoded(values, feature.mode, column)
    pil = len(values) > 0 and hasattr(values[0], "convert")
    if pil:  # decoded PIL images: [H, W] (L) or [H, W, 3] (RGB)
        mode = "L" if values[0].mode == "L" else "RGB"
        arrays = []
        for i, v in enumerate(values):
            try:
                arrays.append(np.asarray(v.convert(mode)))
            except (OSError, ValueError) as exc:  # a mode PIL cannot convert
                raise ConfigError(field, f"row {i} of column {column!r}: cannot convert the image to {mode} ({exc})") from None
    else:
        arrays = [np.asarray(v) for v in values]
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise ConfigError(f"{SECTION}.image_column", f"images of different sizes {sorted(shapes)[:3]}...; resize them to one size first")
    x = np.stack(arrays) if arrays else np.zeros((0, 1, 1, 1), dtype=np.uint8)
    if x.ndim == 3:  # [N, H, W]: one channel
        x = x[:, None]
    elif x.ndim == 4 and (pil or (x.shape[-1] in (1, 3, 4) and x.shape[1] not in (1, 3, 4))):  # [N, H, W, C] -> [N, C, H, W]
        x = x.transpose(0, 3, 1, 2)
    if x.ndim != 4:
        raise ConfigError(f"{SECTION}.image_column", f"column {column!r} is not images (shape {list(x.shape[1:])})")
    return np.ascontiguousarray(x)


def eight_bit(*splits: np.ndarray) -> tuple[np.ndarray, ...]:
    """Integer images as ``uint8`` pixels when every value of every split lies in [0, 255]; else as they are.

    Why: ``datasets`` hands a column of nested lists or ``Array2D``/``Array3D`` back as Python ints, whatever
    its declared ``uint8``, so ``np.asarray`` makes them int64, and only ``uint8`` is divided by 255
    (:func:`chillfl.data.datasets.standardise`). Decided over all splits at once, so train and test share one
    scale. Integers beyond [0, 255] (16-bit scans) are no 8-bit pixels: kept as numbers, standardised as they are.
    """
    ints = [a for a in splits if a.dtype.kind in "iu" and a.dtype != np.uint8]
    if not ints or any(a.size and (a.min() < 0 or a.max() > 255) for a in ints):
        return splits
    return tuple(a.astype(np.uint8) if a.dtype.kind in "iu" else a for a in splits)


def _features(dataset: Any, columns: list[str]) -> np.ndarray:
    cols = []
    for c in columns:
        _column(dataset, c, f"{SECTION}.feature_columns")
        try:
            a = np.asarray(_undecoded(dataset, c, f"{SECTION}.feature_columns")[c])
        except ValueError:  # ragged lists: numpy cannot make one array of them
            raise ConfigError(f"{SECTION}.feature_columns", f"column {c!r} has rows of different lengths") from None
        if a.dtype.kind not in "biuf":
            raise ConfigError(f"{SECTION}.feature_columns", f"column {c!r} is not numeric (dtype {a.dtype})")
        a = a.reshape(len(a), -1).astype(np.float32)
        if not np.isfinite(a).all():  # NaN would only show later as a diverged training loss
            raise ConfigError(f"{SECTION}.feature_columns", f"column {c!r} holds NaN or infinite values; fill or drop them first")
        cols.append(a)
    return np.concatenate(cols, axis=1)


def _labels(train: Any, test: Any | None, column: str) -> tuple[np.ndarray, np.ndarray | None, int]:
    feature = train.features.get(column)
    field = f"{SECTION}.label_column"
    y_tr = np.asarray(_undecoded(train, column, field)[column])
    y_te = np.asarray(_undecoded(test, column, field)[column]) if test is not None else None
    if y_te is not None and len(y_tr) and len(y_te) and (y_tr.dtype.kind in "US") != (y_te.dtype.kind in "US"):
        raise ConfigError(f"{SECTION}.label_column", f"column {column!r} holds {y_tr.dtype} labels in the train split but {y_te.dtype} in the test split")
    if getattr(feature, "names", None) is not None:
        return y_tr.astype(np.int64), None if y_te is None else y_te.astype(np.int64), len(feature.names)
    if y_tr.dtype.kind in "iu":
        top = max(int(y_tr.max(initial=-1)), int(y_te.max(initial=-1)) if y_te is not None else -1)
        return y_tr.astype(np.int64), None if y_te is None else y_te.astype(np.int64), top + 1
    if y_tr.dtype.kind in "US":
        names = np.unique(np.concatenate([y_tr, y_te]) if y_te is not None else y_tr)
        code = {n: i for i, n in enumerate(names.tolist())}
        enc = lambda a: np.array([code[v] for v in a.tolist()], dtype=np.int64)  # noqa: E731
        return enc(y_tr), None if y_te is None else enc(y_te), len(names)
    raise ConfigError(f"{SECTION}.label_column", f"column {column!r} holds neither class ids nor class names (dtype {y_tr.dtype})")


def _hold_out(y: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted (train, test) positions: round(fraction * n_c) of each class c to test, seeded."""
    rng = np.random.default_rng(seed)
    test = [rng.permutation(np.flatnonzero(y == c))[: int(np.floor(fraction * np.sum(y == c) + 0.5))] for c in np.unique(y)]
    test_idx = np.sort(np.concatenate(test)) if test else np.zeros(0, dtype=np.int64)
    return np.setdiff1d(np.arange(len(y)), test_idx), test_idx


def load_hf(data_dir: Path, opts: HFOptions) -> RawSplit:
    """The train/test arrays of a local Hugging Face dataset (see the module docstring)."""
    splits, names = open_splits(_resolve(opts.path, data_dir), opts)
    if opts.train_split not in splits:
        raise ConfigError(f"{SECTION}.train_split", f"no split {opts.train_split!r} under {opts.path}; splits found: {', '.join(names) or 'none'}")
    train, test = splits[opts.train_split], splits.get(opts.test_split)
    if test is None and opts.test_fraction is None:
        raise ConfigError(f"{SECTION}.test_split", f"no split {opts.test_split!r} under {opts.path} (found: {', '.join(names)}); set test_fraction to hold out part of the train split")
    _column(train, opts.label_column, f"{SECTION}.label_column")
    if test is not None:
        _column(test, opts.label_column, f"{SECTION}.label_column")
    if opts.feature_columns is not None:
        def inputs(d: Any) -> np.ndarray:
            return _features(d, list(opts.feature_columns or []))
    else:
        column = opts.image_column or next((c for c in IMAGE_COLUMNS if c in train.column_names), None)
        if column is None:
            raise ConfigError(f"{SECTION}.image_column", f"not set and none of {', '.join(IMAGE_COLUMNS)} is a column; columns: {', '.join(train.column_names)}")
        _column(train, column, f"{SECTION}.image_column")

        def inputs(d: Any) -> np.ndarray:
            return _images(d, column)

    for part, name in ((train, opts.train_split), (test, opts.test_split)):
        if part is not None and len(part) == 0:
            raise ConfigError(f"{SECTION}.{'train' if part is train else 'test'}_split", f"split {name!r} under {opts.path} has no rows")
    y_train, y_test, num_classes = _labels(train, test, opts.label_column)
    require(num_classes >= 2, f"{SECTION}.label_column", f"column {opts.label_column!r} holds {num_classes} class; classification needs at least 2 (as chillfl.run's data.num_classes)")
    for y, name in ((y_train, opts.train_split), (y_test, opts.test_split)):
        if y is not None and len(y) and y.min() < 0:  # ClassLabel's -1: an unlabelled row (e.g. a hidden test split)
            raise ConfigError(f"{SECTION}.label_column", f"split {name!r} has label {int(y.min())} (unlabelled rows); use a labelled split")
    x_train = inputs(train)
    if test is None:
        tr, te = _hold_out(y_train, float(opts.test_fraction or 0), opts.split_seed)
        require(len(te) > 0 and len(tr) > 0, f"{SECTION}.test_fraction", f"{opts.test_fraction} of the {len(y_train)} train rows leaves an empty train or test split")
        if opts.feature_columns is None:
            (x_train,) = eight_bit(x_train)
        return RawSplit(x_train[tr], y_train[tr], x_train[te], y_train[te], num_classes)
    x_test = inputs(test)
    if opts.feature_columns is None:  # images: integer pixels in [0, 255] scale as uint8 ones
        x_train, x_test = eight_bit(x_train, x_test)
    if x_test.shape[1:] != x_train.shape[1:]:
        raise ConfigError(f"{SECTION}.path", f"train inputs have shape {list(x_train.shape[1:])}, test inputs {list(x_test.shape[1:])}")
    assert y_test is not None
    return RawSplit(x_train, y_train, x_test, y_test, num_classes)

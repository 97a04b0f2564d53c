"""``dataset.name = "hf"``: a Hugging Face ``datasets`` dataset from a local folder or parquet files.

::

    [dataset]
    name = "hf"
    path = "my_cifar"            # a save_to_disk folder, a folder of parquet files, or one .parquet file
    image_column = "img"         # images (datasets.Image or nested arrays) -> [N, C, H, W]
    # image_layout = "hwc"         # numeric arrays: "chw" or "hwc" (default "auto": the shape decides; both fit: refused)
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
  after stripping a leading ``data/``) or, when none does, one config folder
  deeper, as ``hf download`` lays out a hub dataset
  (``plain_text/train-00000-of-00001.parquet``; several configs: refused, naming
  them); hidden folders (``.cache/``) are skipped. A single ``.parquet`` file is
  the train split. They are read with pyarrow, and the ``datasets`` features kept
  in the file's schema (``Image``, ``ClassLabel``) decide how columns decode; a
  binary (or ``{bytes, path}``) column without them is decoded as images too.
* Columns: ``image_column`` unset and no ``feature_columns``: the first of
  ``image``, ``img``, ``pixel_values`` present. Images are decoded with Pillow
  from the bytes stored in the file, never from a ``path`` or URL a row names
  (``datasets`` would open or fetch it: a file from elsewhere would reach the
  disk or the network): such a row, and a corrupt or decompression-bomb image,
  is one line on ``image_column`` naming the row;
  all must share one size (resize them beforehand) and one bit depth; a split
  whose first image is grayscale ("L", 1-bit "1", gray + alpha "LA": alpha
  dropped) is read as 1 channel, every image of it converted to "L", a 16-bit
  ("I;16"), 32-bit ("I") or float ("F") one as 1 channel of its numbers,
  anything else as RGB. Pixels are scaled to [0, 1] (8-bit by 255, 16-bit by
  65535: :func:`pixel_scale`) and standardised per channel with the train
  set's statistics, like every image dataset (``[dataset.augment] normalize``
  can change that). An image column of nested lists or ``Array2D``/``Array3D``
  comes back from ``datasets`` as Python ints (int64, even when declared
  ``uint8``): a declared ``uint8``/``uint16`` gives the scale; else every value
  of both splits in [0, 255] makes them 8-bit pixels, in [0, 65535] 16-bit
  ones; integers beyond that are kept as numbers, standardised as they are;
  floats are taken as they are. Numeric [C, H, W] / [H, W, C] arrays: the end
  holding 1, 3 or 4 is the channels; when both ends do, ``image_layout`` must
  say which. ``feature_columns`` (numbers) give tabular inputs, standardised
  per feature (integers are no pixels there).
* Labels: a ``ClassLabel`` column gives its class count; integer labels give
  ``max + 1``; string labels are numbered in sorted order over both splits.
* ``test_fraction``: a seeded, per-class split of the train split
  (``split_seed``), when the files have no test split.

Checked against (2026-12): Hugging Face datasets' Image/ClassLabel features; scaled and standardised as the built-in
image datasets (uint8 pixels, and integer ones in [0, 255], are divided by 255; until 2026-12-02 integer lists were not;
16-bit ones by 65535 since 2026-12-07); Pillow 13's modes of 16-bit PNG/TIFF images (I;16) and the hub's ``<config>/<split>-*.parquet``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from chillfl.data.checks import check_class_count
from chillfl.data.loaders import RawSplit, image_formats, is_file, tree_files
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
    image_layout: Literal["auto", "chw", "hwc"] = "auto"
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
        require(
            self.image_layout == "auto" or self.feature_columns is None,
            f"{section}.image_layout",
            "says how image arrays are laid out; feature_columns gives tabular inputs, which have none",
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


def _is_split(name: str, split: str) -> bool:
    """Whether a file or folder ``name`` belongs to ``split`` (``train``, ``train-00000-of-00001.parquet``, ``train.parquet``)."""
    return name == split or name.startswith((f"{split}-", f"{split}.", f"{split}_"))


def _parquet_files(root: Path, splits: tuple[str, str]) -> dict[str, list[Path]]:
    """{split: its parquet files} under a local folder, for the splits found (one unreadable: one line on ``data_dir``,
    not "no files": :func:`tree_files`).

    Two layouts: the split named at the top (after a leading ``data/``), or, when nothing is named so, one level
    deeper under a config folder, as ``hf download`` lays out a hub dataset (``plain_text/train-00000-of-00001.parquet``,
    the card's ``data_files: plain_text/train-*``). Several configs: one line asking for one of them, never a guess."""
    if is_file(root):
        return {"train": [root]} if "train" in splits else {}
    rels = {}
    for f in tree_files(root, ".parquet"):
        rel = f.relative_to(root).parts
        if not any(part.startswith(".") for part in rel):  # hf download's .cache/huggingface/ bookkeeping
            rels[f] = rel[1:] if rel[0] == "data" and len(rel) > 1 else rel
    top = {s: [f for f, rel in rels.items() if _is_split(rel[0], s)] for s in splits}
    if any(top.values()):
        return {s: files for s, files in top.items() if files}
    configs: dict[str, dict[str, list[Path]]] = {}
    for f, rel in rels.items():
        for s in splits:
            if len(rel) > 1 and _is_split(rel[1], s):
                configs.setdefault(rel[0], {}).setdefault(s, []).append(f)
    if len(configs) > 1:
        names = sorted(configs)
        raise ConfigError(f"{SECTION}.path", f"{root} holds the parquet files of {len(names)} configs ({', '.join(names)}); point path at one of them, e.g. {root / names[0]}")
    if configs:
        return next(iter(configs.values()))
    if not rels:
        raise ConfigError(f"{SECTION}.path", f"no save_to_disk folder (dataset_dict.json, state.json) and no .parquet files under {root}")
    shown = ", ".join(sorted(Path(*f.relative_to(root).parts).as_posix() for f in rels)[:3]) + (f" and {len(rels) - 3} more" if len(rels) > 3 else "")
    raise ConfigError(
        f"{SECTION}.train_split",
        f"no parquet file of split {splits[0]!r} under {root} (found {shown}); expected {splits[0]}-*.parquet or {splits[0]}/*.parquet, "
        f"under data/ or one config folder (<config>/{splits[0]}-*.parquet) at most",
    )


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
    for split, files in _parquet_files(root, (opts.train_split, opts.test_split)).items():
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
    absurdly large image (PIL's decompression-bomb guard, its warning too), or one in no format of
    :func:`~chillfl.data.loaders.image_formats` (every Pillow format but EPS, which Pillow hands to Ghostscript to run
    the cell's PostScript program), is one line naming the row."""
    import io
    import warnings

    Image = need("PIL.Image", "images", "decoding the images of dataset.name = 'hf'")
    from PIL import ImageOps

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(blob), formats=image_formats(Image))
            image.load()
            if image.getexif().get(0x0112) is not None:  # Orientation, as datasets' Image.decode_example applies it
                image = ImageOps.exif_transpose(image)
            return image.convert(mode) if mode and mode != image.mode else image
    except Image.UnidentifiedImageError:  # its text names an in-memory buffer, not what was wrong
        raise ConfigError(f"{SECTION}.image_column", f"row {row} of column {column!r}: cannot decode the image (not an image format Pillow decodes, EPS refused)") from None
    except (OSError, ValueError, SyntaxError, EOFError, RuntimeError, Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:  # RuntimeError: a damaged AVIF
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


SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")
"""PIL modes of 16-bit grayscale (a 16-bit PNG or TIFF): read as uint16, never converted to 8 bits (Pillow clamps)."""
WIDE_MODES = (*SIXTEEN_BIT_MODES, "I", "F")
"""PIL modes kept as their numbers (one channel): converting them to L or RGB clamps every value above 255."""
GRAY_MODES = ("L", "1", "LA")
"""8-bit PIL modes of grayscale images (1-bit, gray + alpha too): read as one channel ("L"). Why: a column of 1-bit or
gray + alpha images was converted to RGB, three equal channels, where the same pixels saved as "L" gave one."""


def _raw_bytes(feature: Any) -> bool:
    """Whether a column holds encoded images without a ``datasets.Image`` feature: binary values, or ``{bytes, path}``
    structs (a parquet file written by pyarrow or another tool, without the schema metadata ``datasets`` adds)."""
    value = _datasets().Value

    def binary(f: Any) -> bool:
        return isinstance(f, value) and f.dtype in ("binary", "large_binary")

    return binary(feature) or (isinstance(feature, dict) and binary(feature.get("bytes")))


def _declared_dtype(feature: Any) -> str | None:
    """The element dtype a nested-list or ``ArrayND`` feature declares (``datasets`` hands the values back as Python
    ints whatever it is, so only the feature says that ``uint16`` pixels are 16-bit ones)."""
    ds = _datasets()
    while isinstance(feature, (ds.List, ds.LargeList)):
        feature = feature.feature
    if isinstance(feature, (ds.Value, ds.Array2D, ds.Array3D, ds.Array4D, ds.Array5D)):
        return str(feature.dtype)
    return None


def _pil_arrays(values: list[Any], column: str) -> list[np.ndarray]:
    """Decoded PIL images as arrays: 8-bit ones as [H, W] (L: the first image's mode is gray, :data:`GRAY_MODES`) or
    [H, W, 3] (RGB: every other 8-bit mode), every image of the column alike, as the first decides; 16-bit,
    32-bit integer and float ones (``I;16``, ``I``, ``F``) as [H, W] of their own numbers. One column mixing the
    two kinds, or two wide modes, is refused: there is no one scale for its pixels."""
    field = f"{SECTION}.image_column"
    first = values[0].mode
    for i, v in enumerate(values):
        if (v.mode in WIDE_MODES or first in WIDE_MODES) and v.mode != first:
            raise ConfigError(field, f"row {i} of column {column!r} is a mode {v.mode} image but row 0 is mode {first}; give the column one bit depth (convert the images to one mode first)")
    if first in WIDE_MODES:
        arrays = [np.asarray(v) for v in values]
        return [a.astype(a.dtype.newbyteorder("=")) for a in arrays]  # I;16B is big-endian uint16
    mode = "L" if first in GRAY_MODES else "RGB"
    arrays = []
    for i, v in enumerate(values):
        try:
            arrays.append(np.asarray(v.convert(mode)))
        except (OSError, ValueError) as exc:  # a mode PIL cannot convert
            raise ConfigError(field, f"row {i} of column {column!r}: cannot convert the image to {mode} ({exc})") from None
    return arrays


def _images(dataset: Any, column: str, layout: str = "auto") -> np.ndarray:
    """[N, C, H, W]: decoded images (uint8, or uint16 / int32 / float32 for 16-bit, ``I`` and ``F`` modes) or the
    column's numbers as an array (in its declared ``uint8``/``uint16`` dtype where the feature gives one).

    ``layout``: how numeric [H, W, C] / [C, H, W] arrays are stored; ``auto`` takes the one the shape allows and
    refuses a shape both allow (both ends 1, 3 or 4) instead of guessing CHW."""
    field = f"{SECTION}.image_column"
    _column(dataset, column, field)
    feature = dataset.features.get(column)
    values = _undecoded(dataset, column, field)[column]
    missing = next((i for i, v in enumerate(values) if v is None), None)
    if missing is not None:
        raise ConfigError(field, f"row {missing} of column {column!r} has no image (None); drop such rows first")
    if isinstance(feature, _datasets().Image):
        values = _decoded(values, feature.mode, column)
    elif _raw_bytes(feature):
        values = _decoded(values, None, column)
    pil = len(values) > 0 and hasattr(values[0], "convert")
    if pil:  # decoded PIL images: [H, W] or [H, W, 3]
        arrays = _pil_arrays(values, column)
    else:
        declared = _declared_dtype(feature)
        arrays = [np.asarray(v) for v in values]
        if declared in ("uint8", "uint16"):  # stored in that type, so every value fits it
            arrays = [a.astype(declared) if a.dtype.kind in "iu" else a for a in arrays]
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise ConfigError(f"{SECTION}.image_column", f"images of different sizes {sorted(shapes)[:3]}...; resize them to one size first")
    x = np.stack(arrays) if arrays else np.zeros((0, 1, 1, 1), dtype=np.uint8)
    if x.ndim == 3:  # [N, H, W]: one channel
        x = x[:, None]
    elif x.ndim == 4 and pil:  # PIL gives [N, H, W, C]
        x = x.transpose(0, 3, 1, 2)
    elif x.ndim == 4:
        last, first = x.shape[-1] in (1, 3, 4), x.shape[1] in (1, 3, 4)
        if layout == "auto" and last and first:
            a, b, c = x.shape[1:]
            raise ConfigError(
                f"{SECTION}.image_layout",
                f"column {column!r} holds arrays of shape {[a, b, c]}: {a} channels of {b}x{c} (chw) or {c} channels of {a}x{b} (hwc)? "
                'set image_layout = "chw" or "hwc"',
            )
        if layout == "hwc" or (layout == "auto" and last):  # [N, H, W, C] -> [N, C, H, W]
            x = x.transpose(0, 3, 1, 2)
    if x.ndim != 4:
        raise ConfigError(f"{SECTION}.image_column", f"column {column!r} is not images (shape {list(x.shape[1:])})")
    return np.ascontiguousarray(x)


def pixel_scale(*splits: np.ndarray) -> tuple[np.ndarray, ...]:
    """Image inputs of every split on one scale: 8-bit pixels as ``uint8`` (divided by 255 when the dataset is built),
    16-bit ones divided by 65535 here into the same [0, 1] (float32); other numbers as they are.

    Why: only ``uint8`` is divided by 255 (:func:`chillfl.data.datasets.standardise`'s caller), so 16-bit pixels were
    kept as 0..65535 (nested lists) or clamped to 255 by an RGB conversion (16-bit PNG/TIFF images); a 16-bit value
    ``257 * k`` is the 8-bit value ``k`` on either route now. The range comes from the type where one says it (``uint8``,
    ``uint16``: a PIL image's mode, a feature's declared dtype); integers of no stated range (nested lists read back
    as int64, PIL mode ``I``) are judged by their values over all splits at once, so train and test share one scale:
    all in [0, 255] 8-bit, in [0, 65535] 16-bit, else kept as numbers (standardised as they are); floats as they are.
    """
    free = [a for a in splits if a.dtype.kind in "iu" and a.dtype not in (np.uint8, np.uint16) and a.size]
    low = min((int(a.min()) for a in free), default=0)
    high = max((int(a.max()) for a in free), default=0)
    free_range = 255 if low >= 0 and high <= 255 else 65535 if low >= 0 and high <= 65535 else 1

    def divisor(a: np.ndarray) -> int:
        if a.dtype == np.uint8:
            return 255
        if a.dtype == np.uint16:
            return 65535
        return free_range if a.dtype.kind in "iu" else 1

    divisors = [divisor(a) for a in splits]
    if all(d == 255 for d in divisors):
        return tuple(a.astype(np.uint8) for a in splits)
    if all(d == 1 for d in divisors):
        return splits
    return tuple(a.astype(np.float32) / np.float32(d) for a, d in zip(splits, divisors))


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


def _finite_images(x: np.ndarray, column: str, split: str, path: str) -> np.ndarray:
    """``x`` when every value is finite; else one line on ``dataset.image_column`` naming the column, split and first
    row. Why here: the generic check after loading blamed ``data_dir`` ('corrupt files?') for a float Array column
    holding NaN, found through ``dataset.path``."""
    if x.dtype.kind == "f":
        bad = ~np.isfinite(x.reshape(len(x), -1)).all(axis=1)
        if bad.any():
            raise ConfigError(f"{SECTION}.image_column", f"column {column!r} of split {split!r} under {path} holds NaN or infinite values "
                                                         f"(first at row {int(np.argmax(bad))}); fill or drop them first")
    return x


def _labels(train: Any, test: Any | None, column: str, splits: tuple[str, str] = ("train", "test")) -> tuple[np.ndarray, np.ndarray | None, int]:
    """The labels of both splits and the class count; ``splits``: the configured splits' names, which a refusal names."""
    feature = train.features.get(column)
    field = f"{SECTION}.label_column"
    y_tr = np.asarray(_undecoded(train, column, field)[column])
    y_te = np.asarray(_undecoded(test, column, field)[column]) if test is not None else None
    for y, split in ((y_tr, splits[0]), (y_te, splits[1])):  # each split: float test ids were cut to ints, a null crashed
        if y is not None and len(y):
            _label_kind(y, column, split)
    if y_te is not None and len(y_tr) and len(y_te) and (y_tr.dtype.kind in "US") != (y_te.dtype.kind in "US"):
        raise ConfigError(f"{SECTION}.label_column", f"column {column!r} holds {y_tr.dtype} labels in the train split but {y_te.dtype} in the test split")
    if getattr(feature, "names", None) is not None:
        return y_tr.astype(np.int64), None if y_te is None else y_te.astype(np.int64), len(feature.names)
    if y_tr.dtype.kind in "iu":
        top = max(int(y_tr.max(initial=-1)), int(y_te.max(initial=-1)) if y_te is not None else -1)
        distinct = len(np.unique(np.concatenate([y_tr, y_te]) if y_te is not None else y_tr))
        check_class_count(top + 1, distinct, field, "store them as a ClassLabel with that many names")
        return y_tr.astype(np.int64), None if y_te is None else y_te.astype(np.int64), top + 1
    if y_tr.dtype.kind in "US":
        names = np.unique(np.concatenate([y_tr, y_te]) if y_te is not None else y_tr)
        code = {n: i for i, n in enumerate(names.tolist())}
        enc = lambda a: np.array([code[v] for v in a.tolist()], dtype=np.int64)  # noqa: E731
        return enc(y_tr), None if y_te is None else enc(y_te), len(names)
    raise ConfigError(f"{SECTION}.label_column", f"column {column!r} holds neither class ids nor class names (dtype {y_tr.dtype})")


def _label_kind(y: np.ndarray, column: str, split: str) -> None:
    """One split's labels are class ids (integers) or class names (strings); a null (None, NaN) is a missing label.
    Why each split: the labels' dtype was read from the train split only, so float test labels were truncated to
    ints and a null test label met a comparison's TypeError."""
    missing = any(v is None for v in y.tolist()) if y.dtype == object else y.dtype.kind == "f" and bool(np.isnan(y).any())
    if missing:
        raise ConfigError(f"{SECTION}.label_column", f"column {column!r} has missing labels (null) in split {split!r}; drop or label those rows first")
    if y.dtype.kind not in "iuUS":
        raise ConfigError(f"{SECTION}.label_column", f"column {column!r} holds neither class ids nor class names in split {split!r} (dtype {y.dtype})")


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
            return _finite_images(_images(d, column, opts.image_layout), column, opts.train_split if d is train else opts.test_split, opts.path)

    for part, name in ((train, opts.train_split), (test, opts.test_split)):
        if part is not None and len(part) == 0:
            raise ConfigError(f"{SECTION}.{'train' if part is train else 'test'}_split", f"split {name!r} under {opts.path} has no rows")
    y_train, y_test, num_classes = _labels(train, test, opts.label_column, (opts.train_split, opts.test_split))
    require(num_classes >= 2, f"{SECTION}.label_column", f"column {opts.label_column!r} holds {num_classes} class; classification needs at least 2 (as chillfl.run's data.num_classes)")
    for y, name in ((y_train, opts.train_split), (y_test, opts.test_split)):
        if y is not None and len(y) and y.min() < 0:  # ClassLabel's -1: an unlabelled row (e.g. a hidden test split)
            raise ConfigError(f"{SECTION}.label_column", f"split {name!r} has label {int(y.min())} (unlabelled rows); use a labelled split")
    x_train = inputs(train)
    if test is None:
        tr, te = _hold_out(y_train, float(opts.test_fraction or 0), opts.split_seed)
        require(len(te) > 0 and len(tr) > 0, f"{SECTION}.test_fraction", f"{opts.test_fraction} of the {len(y_train)} train rows leaves an empty train or test split")
        if opts.feature_columns is None:
            (x_train,) = pixel_scale(x_train)
        return RawSplit(x_train[tr], y_train[tr], x_train[te], y_train[te], num_classes)
    x_test = inputs(test)
    if opts.feature_columns is None:  # images: 8-bit and 16-bit pixels on one [0, 1] scale
        x_train, x_test = pixel_scale(x_train, x_test)
    if x_test.shape[1:] != x_train.shape[1:]:
        raise ConfigError(f"{SECTION}.path", f"train inputs have shape {list(x_train.shape[1:])}, test inputs {list(x_test.shape[1:])}")
    assert y_test is not None
    return RawSplit(x_train, y_train, x_test, y_test, num_classes)

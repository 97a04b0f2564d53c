"""dataset.name = "hf": 16-bit images keep their values, ambiguous array layouts are asked for, the hub's parquet layout
and raw image bytes are read (report-loaders findings 1, 4, 10). Files are written with the real ``datasets`` and
pyarrow libraries; expected values are worked out by hand."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

datasets = pytest.importorskip("datasets")
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from PIL import Image  # noqa: E402

from chillfl.cli import main  # noqa: E402
from chillfl.data import load_dataset  # noqa: E402
from chillfl.errors import ConfigError  # noqa: E402

RAW = {"augment": {"normalize": False}}
"""normalize = false: the inputs as the loader scaled them, before standardisation."""

A16 = np.array([[0, 257, 13107], [32768, 65535, 1000]], dtype=np.uint16)
"""A 2x3 16-bit image; divided by 65535: 0, 257/65535 = 1/255, 13107/65535 = 1/5, 32768/65535, 1, 1000/65535."""
A16_SCALED = np.array([[0.0, 1 / 255, 0.2], [32768 / 65535, 1.0, 1000 / 65535]], dtype=np.float32)
TRAIN16 = [A16, A16[::-1], A16[:, ::-1], A16]
TEST16 = [A16[::-1], A16]


def _load(path: Path, **options: Any) -> Any:
    return load_dataset("hf", {"path": str(path), **RAW, **options})


def _refused(path: Path, **options: Any) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        _load(path, **options)
    return err.value


def _save(root: Path, column: list[Any], test_column: list[Any], feature: Any) -> Path:
    features = datasets.Features({"img": feature, "label": datasets.ClassLabel(names=["a", "b"])})
    split = lambda values: datasets.Dataset.from_dict({"img": values, "label": [i % 2 for i in range(len(values))]}, features=features)  # noqa: E731
    datasets.DatasetDict({"train": split(column), "test": split(test_column)}).save_to_disk(str(root))
    return root


# ---------------------------------------------------------------- finding 1: 16-bit images


def test_sixteen_bit_images_keep_their_values_divided_by_65535(tmp_path: Path) -> None:
    # datasets stores a mode I;16 image as a 16-bit TIFF; it was converted to RGB, which clamps to 255: 3 channels of 255
    root = _save(tmp_path / "g16", [Image.fromarray(a) for a in TRAIN16], [Image.fromarray(a) for a in TEST16], datasets.Image())
    ds = _load(root)
    assert tuple(ds.x_train.shape) == (4, 1, 2, 3) and tuple(ds.x_test.shape) == (2, 1, 2, 3)
    torch.testing.assert_close(ds.x_train[0, 0], torch.from_numpy(A16_SCALED), atol=1e-6, rtol=0)
    torch.testing.assert_close(ds.x_test[0, 0], torch.from_numpy(A16_SCALED[::-1].copy()), atol=1e-6, rtol=0)
    # standardised (the default) with the train set's statistics: mean 0 over the 4 train images
    assert abs(float(load_dataset("hf", {"path": str(root)}).x_train.mean())) < 1e-5


def test_sixteen_bit_png_bytes_and_nested_integers_agree(tmp_path: Path) -> None:
    """The same 16-bit pixels as PNG images, as nested int lists and as a declared Array2D uint16 give the same inputs;
    nested integers beyond 255 were kept as 0..65535 (normalize = false), the PNG was clamped."""
    def png(a: np.ndarray) -> dict[str, Any]:
        out = io.BytesIO()
        Image.fromarray(a).save(out, format="PNG")
        return {"bytes": out.getvalue(), "path": None}

    routes = {
        "png": ([png(a) for a in TRAIN16], [png(a) for a in TEST16], datasets.Image()),
        "lists": ([a.tolist() for a in TRAIN16], [a.tolist() for a in TEST16], datasets.Sequence(datasets.Sequence(datasets.Value("int64")))),
        "array2d": ([a.tolist() for a in TRAIN16], [a.tolist() for a in TEST16], datasets.Array2D(shape=(2, 3), dtype="uint16")),
    }
    loaded = {name: _load(_save(tmp_path / name, *route)) for name, route in routes.items()}
    for name, ds in loaded.items():
        assert tuple(ds.x_train.shape) == (4, 1, 2, 3), name
        torch.testing.assert_close(ds.x_train[0, 0], torch.from_numpy(A16_SCALED), atol=1e-6, rtol=0, msg=name)
        torch.testing.assert_close(ds.x_test, loaded["png"].x_test, atol=1e-6, rtol=0, msg=name)


def test_a_declared_uint16_column_is_sixteen_bit_even_with_small_values(tmp_path: Path) -> None:
    # values all <= 255 but stored as uint16: the feature says 16-bit, so 255 is 255/65535, not 1.0
    small = [np.array([[0, 255, 51]], dtype=np.uint16)] * 2
    ds = _load(_save(tmp_path / "u16", [a.tolist() for a in small], [a.tolist() for a in small], datasets.Array2D(shape=(1, 3), dtype="uint16")))
    torch.testing.assert_close(ds.x_train[0, 0, 0], torch.tensor([0.0, 255 / 65535, 51 / 65535]), atol=1e-7, rtol=0)
    # the same values as int64 lists (no stated range): 8-bit, as before
    ds8 = _load(_save(tmp_path / "i64", [a.tolist() for a in small], [a.tolist() for a in small], datasets.Sequence(datasets.Sequence(datasets.Value("int64")))))
    torch.testing.assert_close(ds8.x_train[0, 0, 0], torch.tensor([0.0, 1.0, 0.2]), atol=1e-6, rtol=0)


def test_integers_beyond_sixteen_bits_stay_numbers(tmp_path: Path) -> None:
    wide = [np.array([[0, 70000, 5]], dtype=np.int64)] * 2
    ds = _load(_save(tmp_path / "wide", [a.tolist() for a in wide], [a.tolist() for a in wide], datasets.Sequence(datasets.Sequence(datasets.Value("int64")))))
    torch.testing.assert_close(ds.x_test[0, 0, 0], torch.tensor([0.0, 70000.0, 5.0]), atol=1e-2, rtol=0)


def test_a_column_mixing_eight_and_sixteen_bit_images_is_refused_naming_the_row(tmp_path: Path) -> None:
    # row 1 was converted to L: every value above 255 clamped to 255, silently
    train = [Image.fromarray((A16 // 257).astype(np.uint8)), Image.fromarray(A16)]
    err = _refused(_save(tmp_path / "mixed", train, train, datasets.Image()))
    assert err.field == "dataset.image_column" and "row 1" in err.message and "mode I;16" in err.message and "mode L" in err.message


# ---------------------------------------------------------------- finding 4: HWC or CHW


def _hwc(i: int, h: int, w: int) -> np.ndarray:
    """Image i as [H, W, 3] uint8: value 10 i + 3 (row * w + col) + channel."""
    base = (np.arange(h * w).reshape(h, w) * 3 + 10 * i).astype(np.uint8)
    return np.stack([base + c for c in range(3)], axis=-1)


def _arrays(tmp_path: Path, name: str, shape: tuple[int, int, int], make: Any) -> Path:
    train, test = [make(i).tolist() for i in range(4)], [make(4 + i).tolist() for i in range(2)]
    return _save(tmp_path / name, train, test, datasets.Array3D(shape=shape, dtype="uint8"))


def test_an_array_both_layouts_fit_is_refused_naming_image_layout(tmp_path: Path) -> None:
    # [4, 4, 3] HWC: was read as 4 channels of 4x3, without a word
    root = _arrays(tmp_path, "h4", (4, 4, 3), lambda i: _hwc(i, 4, 4))
    err = _refused(root)
    assert err.field == "dataset.image_layout" and "[4, 4, 3]" in err.message and '"hwc"' in err.message
    ds = _load(root, image_layout="hwc")
    assert tuple(ds.x_train.shape) == (4, 3, 4, 4)
    torch.testing.assert_close(ds.x_test[1], torch.from_numpy(_hwc(5, 4, 4).transpose(2, 0, 1).astype(np.float32) / 255), atol=1e-6, rtol=0)
    assert tuple(_load(root, image_layout="chw").x_train.shape) == (4, 4, 4, 3)


def test_unambiguous_layouts_read_as_before_and_the_option_overrides(tmp_path: Path) -> None:
    hwc = _arrays(tmp_path, "hwc", (6, 5, 3), lambda i: _hwc(i, 6, 5))
    chw = _arrays(tmp_path, "chw", (3, 6, 5), lambda i: _hwc(i, 6, 5).transpose(2, 0, 1))
    a, b = _load(hwc), _load(chw)
    assert tuple(a.x_train.shape) == tuple(b.x_train.shape) == (4, 3, 6, 5)
    torch.testing.assert_close(a.x_train, b.x_train)
    assert tuple(_load(hwc, image_layout="chw").x_train.shape) == (4, 6, 5, 3)  # said so: taken as said
    # 13-band HWC (no channel count of 1, 3 or 4 at either end): the option says how to read it
    bands = _save(tmp_path / "bands", [np.zeros((5, 6, 13), np.uint8).tolist()] * 2, [np.zeros((5, 6, 13), np.uint8).tolist()] * 2,
                  datasets.Array3D(shape=(5, 6, 13), dtype="uint8"))
    assert tuple(_load(bands, image_layout="hwc").x_train.shape) == (2, 13, 5, 6)


def test_image_layout_with_feature_columns_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        load_dataset("hf", {"path": "x.parquet", "feature_columns": ["a"], "image_layout": "hwc"})
    assert err.value.field == "dataset.image_layout"


def test_cli_ambiguous_layout_is_exit_2_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _arrays(tmp_path, "h4", (4, 4, 3), lambda i: _hwc(i, 4, 4))
    cfg = tmp_path / "hf.toml"
    cfg.write_text(f'out_dir = "{tmp_path / "out"}"\n[dataset]\nname = "hf"\npath = "{root}"\n[partition]\nname = "iid"\n'
                   "[federation]\nnum_clients = 2\nclients_per_round = 2\n")
    capsys.readouterr()  # datasets' progress bars from writing the files
    rc = main(["data", "show", str(cfg)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "dataset.image_layout" in err and "Traceback" not in err


# ---------------------------------------------------------------- finding 10: hub layout, raw bytes


def _png(a: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(a).save(out, format="PNG")
    return out.getvalue()


def _gray(i: int) -> np.ndarray:
    return (np.arange(12).reshape(3, 4) + 20 * i).astype(np.uint8)


def _hub_split(path: Path, first: int, n: int) -> None:
    """A split as ``hf download`` leaves it: parquet with the datasets Image/ClassLabel features in its schema."""
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])})
    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_dict({"img": [Image.fromarray(_gray(first + i)) for i in range(n)], "label": [i % 2 for i in range(n)]},
                               features=features).to_parquet(str(path))


def test_the_hubs_config_folder_layout_is_read(tmp_path: Path) -> None:
    hub = tmp_path / "hub_cifar"  # hf download uoft-cs/cifar10 --local-dir hub_cifar: plain_text/train-00000-of-00001.parquet
    _hub_split(hub / "plain_text" / "train-00000-of-00001.parquet", 0, 4)
    _hub_split(hub / "plain_text" / "test-00000-of-00001.parquet", 4, 2)
    (hub / ".cache" / "huggingface" / "download" / "plain_text").mkdir(parents=True)
    (hub / ".cache" / "huggingface" / "download" / "plain_text" / "train-00000-of-00001.parquet").write_bytes(b"not parquet: hf's bookkeeping")
    (hub / "README.md").write_text("---\nconfigs:\n- config_name: plain_text\n  data_files:\n  - split: train\n    path: plain_text/train-*\n---\n")
    ds = _load(hub)  # was: dataset.train_split: no split 'train' under hub_cifar; splits found: none
    assert tuple(ds.x_train.shape) == (4, 1, 3, 4) and ds.y_test.tolist() == [0, 1]
    torch.testing.assert_close(ds.x_test[1, 0], torch.from_numpy(_gray(5).astype(np.float32) / 255), atol=1e-6, rtol=0)
    torch.testing.assert_close(_load(hub / "plain_text").x_train, ds.x_train)


def test_several_configs_or_no_split_files_say_what_was_found(tmp_path: Path) -> None:
    two = tmp_path / "two"
    for config in ("a", "b"):
        _hub_split(two / config / "train-0.parquet", 0, 2)
    err = _refused(two)
    assert err.field == "dataset.path" and "2 configs (a, b)" in err.message and str(two / "a") in err.message
    deep = tmp_path / "deep"
    _hub_split(deep / "x" / "y" / "train-0.parquet", 0, 2)
    err = _refused(deep)
    assert err.field == "dataset.train_split" and "found x/y/train-0.parquet" in err.message and "<config>/train-*.parquet" in err.message
    (tmp_path / "empty").mkdir()
    err = _refused(tmp_path / "empty")
    assert err.field == "dataset.path" and "no .parquet files" in err.message


def _raw_table(path: Path, images: list[Any], kind: pa.DataType) -> None:
    """A parquet file written by pyarrow alone: no ``huggingface`` schema metadata, images as encoded bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({"image": pa.array(images, type=kind), "label": pa.array([i % 2 for i in range(len(images))], type=pa.int64())})
    assert table.schema.metadata is None
    pq.write_table(table, str(path))


@pytest.mark.parametrize("kind", ["binary", "struct"])
def test_png_bytes_without_a_datasets_image_feature_are_decoded(tmp_path: Path, kind: str) -> None:
    # was: dataset.image_column: column 'image' is not images (shape [])
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    cell = (lambda i: _png(_gray(i))) if kind == "binary" else (lambda i: {"bytes": _png(_gray(i)), "path": None})
    for split, first, n in (("train", 0, 4), ("test", 4, 2)):
        _raw_table(tmp_path / "raw" / f"{split}.parquet", [cell(first + i) for i in range(n)], pa.binary() if kind == "binary" else struct)
    ds = _load(tmp_path / "raw")
    assert tuple(ds.x_train.shape) == (4, 1, 3, 4)
    torch.testing.assert_close(ds.x_train[2, 0], torch.from_numpy(_gray(2).astype(np.float32) / 255), atol=1e-6, rtol=0)


def test_bytes_that_are_no_image_are_one_line_naming_the_row(tmp_path: Path) -> None:
    _raw_table(tmp_path / "junk" / "train.parquet", [_png(_gray(0)), b"\x00not an image"], pa.binary())
    _raw_table(tmp_path / "junk" / "test.parquet", [_png(_gray(0))], pa.binary())
    err = _refused(tmp_path / "junk")
    assert err.field == "dataset.image_column" and "row 1" in err.message and "cannot decode" in err.message

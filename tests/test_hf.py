"""dataset.name = "hf": small datasets written with the real Hugging Face ``datasets`` library, read back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

datasets = pytest.importorskip("datasets")  # the `test` extra installs it; skipped only outside CI's environment
from PIL import Image  # noqa: E402

from chillfl.data import load_dataset  # noqa: E402
from chillfl.errors import ConfigError  # noqa: E402


def _pixels(i: int, channels: int) -> np.ndarray:
    """Image i: 4x5 pixels, value 10 * i + (row * 5 + col) % 7 (+ 1 per channel)."""
    base = (np.arange(20).reshape(4, 5) % 7 + 10 * i).astype(np.uint8)
    return base if channels == 1 else np.stack([base + c for c in range(channels)], axis=-1)


def _image_split(n: int, channels: int, offset: int = 0) -> "datasets.Dataset":
    images = [Image.fromarray(_pixels(offset + i, channels)) for i in range(n)]
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=["cat", "dog", "eel"])})
    return datasets.Dataset.from_dict({"img": images, "label": [i % 3 for i in range(n)]}, features=features)


@pytest.fixture(scope="module")
def rgb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hf") / "rgb"
    datasets.DatasetDict({"train": _image_split(12, 3), "test": _image_split(6, 3, offset=12)}).save_to_disk(str(root))
    return root


def test_save_to_disk_images(rgb_dir: Path):
    ds = load_dataset("hf", {"path": str(rgb_dir), "augment": {"normalize": False}})
    assert ds.name == "hf" and ds.num_classes == 3
    assert tuple(ds.x_train.shape) == (12, 3, 4, 5) and tuple(ds.x_test.shape) == (6, 3, 4, 5)
    assert ds.y_train.tolist() == [i % 3 for i in range(12)]
    # normalize = false: pixel / 255 back (uint8 scaled to [0, 1]); channel c of image i is _pixels(i) + c
    want = torch.from_numpy(_pixels(13, 3).transpose(2, 0, 1).astype(np.float32) / 255)
    torch.testing.assert_close(ds.x_test[1], want, atol=1e-6, rtol=0)
    standard = load_dataset("hf", {"path": str(rgb_dir)})  # default: per-channel standardisation with train statistics
    mean = standard.x_train.mean(dim=(0, 2, 3))
    torch.testing.assert_close(mean, torch.zeros(3), atol=1e-5, rtol=0)


def test_parquet_folder_grayscale_and_hub_layout(tmp_path: Path):
    root = tmp_path / "gray"
    (root / "data").mkdir(parents=True)
    _image_split(9, 1).rename_column("img", "image").to_parquet(str(root / "data" / "train-00000-of-00001.parquet"))
    _image_split(3, 1, offset=9).rename_column("img", "image").to_parquet(str(root / "data" / "test-00000-of-00001.parquet"))
    ds = load_dataset("hf", {"path": str(root), "augment": {"normalize": False}})  # image column found by its usual name
    assert tuple(ds.x_train.shape) == (9, 1, 4, 5) and ds.num_classes == 3
    torch.testing.assert_close(ds.x_train[4, 0], torch.from_numpy(_pixels(4, 1).astype(np.float32) / 255), atol=1e-6, rtol=0)


def test_tabular_parquet_string_labels_and_held_out_test(tmp_path: Path):
    f = tmp_path / "table.parquet"
    n = 40
    table = datasets.Dataset.from_dict({"a": [float(i) for i in range(n)], "b": [2 * i for i in range(n)], "kind": ["x" if i % 4 else "w" for i in range(n)]})
    table.to_parquet(str(f))
    ds = load_dataset("hf", {"path": str(f), "feature_columns": ["a", "b"], "label_column": "kind", "test_fraction": 0.25, "augment": {"normalize": False}})
    assert ds.num_classes == 2  # sorted names: w -> 0, x -> 1
    assert tuple(ds.x_train.shape[1:]) == (2,) and len(ds.y_train) + len(ds.y_test) == n
    # per class floor(0.25 * n_c + 0.5) held out: w has 10 rows -> floor(3.0) = 3, x has 30 -> floor(8.0) = 8
    assert sorted(np.bincount(ds.y_test.numpy(), minlength=2).tolist()) == [3, 8]
    x = torch.cat([ds.x_train, ds.x_test])
    torch.testing.assert_close(x[:, 1], 2 * x[:, 0])  # the columns stay paired: b = 2 a on every row
    with pytest.raises(ConfigError, match="not numeric"):
        load_dataset("hf", {"path": str(f), "feature_columns": ["kind"], "label_column": "kind", "test_fraction": 0.25})
    label_of = {float(i): (0 if i % 4 == 0 else 1) for i in range(n)}
    assert all(label_of[float(a)] == int(y) for a, y in zip(ds.x_train[:, 0], ds.y_train))


def test_errors_name_the_field(rgb_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    cases = [
        ({}, "dataset.path"),
        ({"path": str(tmp_path / "absent")}, "dataset.path"),
        ({"path": str(rgb_dir), "label_column": "y"}, "dataset.label_column"),
        ({"path": str(rgb_dir), "image_column": "pixels"}, "dataset.image_column"),
        ({"path": str(rgb_dir), "test_split": "validation"}, "dataset.test_split"),
        ({"path": str(rgb_dir), "feature_columns": ["label"], "image_column": "img"}, "dataset.feature_columns"),
    ]
    for options, field in cases:
        with pytest.raises(ConfigError) as err:
            load_dataset("hf", options)
        assert err.value.field == field, (options, err.value)
    with pytest.raises(ConfigError, match="splits found: train, test|found: train, test"):
        load_dataset("hf", {"path": str(rgb_dir), "test_split": "validation"})
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if the extra were not installed
    with pytest.raises(ConfigError, match=r"chillfl\[hf\]"):
        load_dataset("hf", {"path": str(rgb_dir)})


def test_cli_data_show_on_an_hf_dataset(rgb_dir: Path, tmp_path: Path):
    cfg = tmp_path / "hf.toml"
    cfg.write_text(
        f'name = "hf-demo"\nout_dir = "{tmp_path / "out"}"\n[dataset]\nname = "hf"\npath = "{rgb_dir}"\n'
        '[partition]\nname = "iid"\n[federation]\nnum_clients = 3\nclients_per_round = 3\n[eval]\nclient_split_size = 2\n'
    )
    proc = subprocess.run([sys.executable, "-m", "chillfl", "data", "show", str(cfg)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("hf: 3 clients, 3 classes, train sizes min/mean/max 4/4.0/4, public pool 0, test set 6")
    assert " total     12     6   4   4   4" in proc.stdout  # 12 train images, 4 of each ClassLabel class
    assert (tmp_path / "out" / "data-show" / "hf-demo-partition.png").is_file()  # under out_dir, not the current folder


def test_relative_path_under_data_dir_and_a_run_with_augmentation(rgb_dir: Path):
    from chillfl.api import run

    ds = load_dataset("hf", {"path": rgb_dir.name}, data_dir=rgb_dir.parent)  # relative: looked up under data_dir first
    assert tuple(ds.x_train.shape) == (12, 3, 4, 5)
    config = {
        "data_dir": str(rgb_dir.parent),
        "dataset": {"name": "hf", "path": rgb_dir.name, "augment": {"crop_padding": 1, "flip": True}},
        "partition": {"name": "iid"},
        "model": {"name": "mlp"},
        "federation": {"num_clients": 2, "clients_per_round": 2, "rounds": 1},
        "client": {"batch_size": 4},
        "eval": {"clients": "none"},
    }
    a = run(config=config, write=False, progress=False).records[-1]
    b = run(config=config, write=False, progress=False).records[-1]
    assert a == b and 0.0 <= a["global_acc"] <= 1.0


def test_bad_rows_and_splits_are_one_line_errors_naming_the_field(tmp_path: Path):
    """Unlabelled (-1) rows, missing images, NaN or ragged features, mixed label kinds, empty splits: a ConfigError
    on the right field, never a traceback, a NaN loss or a 'data_dir' error."""
    def save(name: str, train: "datasets.Dataset", test: "datasets.Dataset") -> str:
        datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(tmp_path / name))
        return str(tmp_path / name)

    def parquet(name: str, train: "datasets.Dataset", test_table: Any) -> str:  # an empty split: save_to_disk cannot write one
        import pyarrow.parquet as pq

        (tmp_path / name).mkdir()
        train.to_parquet(str(tmp_path / name / "train.parquet"))
        pq.write_table(test_table, str(tmp_path / name / "test.parquet"))
        return str(tmp_path / name)

    def table(**columns: list) -> "datasets.Dataset":
        return datasets.Dataset.from_dict(columns)

    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=["cat", "dog", "eel"])})
    no_image = datasets.Dataset.from_dict({"img": [Image.fromarray(_pixels(0, 3)), None], "label": [0, 1]}, features=features)
    ok = table(f=[1.0, 2.0, 3.0], label=[0, 1, 0])
    cases = [
        ({"path": save("unlabelled", _image_split(6, 3), _image_split(3, 3).cast_column("label", datasets.Value("int64")).map(lambda r: {"label": -1}))},
         "dataset.label_column", "label -1"),
        ({"path": save("none", no_image, no_image)}, "dataset.image_column", "row 1"),
        ({"path": save("nan", table(f=[1.0, float("nan"), 3.0], label=[0, 1, 0]), ok), "feature_columns": ["f"]}, "dataset.feature_columns", "NaN"),
        ({"path": save("ragged", table(f=[[1.0, 2.0], [3.0], [4.0, 5.0]], label=[0, 1, 0]), ok), "feature_columns": ["f"]}, "dataset.feature_columns", "lengths"),
        ({"path": save("mixed", ok, table(f=[1.0, 2.0], label=["a", "b"])), "feature_columns": ["f"]}, "dataset.label_column", "test split"),
        ({"path": save("one", table(f=[1.0, 2.0], label=["a", "a"]), table(f=[3.0], label=["a"])), "feature_columns": ["f"]}, "dataset.label_column", "1 class"),
        ({"path": parquet("empty", ok, ok.data.table.slice(0, 0)), "feature_columns": ["f"]}, "dataset.test_split", "no rows"),
        ({"path": save("tiny", table(f=[1.0, 2.0], label=[0, 1]), ok), "feature_columns": ["f"], "test_split": "none", "test_fraction": 0.1},
         "dataset.test_fraction", "empty"),
    ]
    for options, field, words in cases:
        with pytest.raises(ConfigError) as err:
            load_dataset("hf", options)
        assert err.value.field == field and words in err.value.message, (options, err.value)


def _integer_split(n: int, offset: int, feature: Any) -> "datasets.Dataset":
    """Images as nested integer lists [3, H, W] (no Image feature): what ``datasets`` returns as Python ints."""
    features = datasets.Features({"img": feature, "label": datasets.Value("int64")})
    return datasets.Dataset.from_dict({"img": [_pixels(offset + i, 3).transpose(2, 0, 1).tolist() for i in range(n)], "label": [i % 3 for i in range(n)]}, features=features)


@pytest.mark.parametrize(
    "feature",
    [
        datasets.Sequence(datasets.Sequence(datasets.Sequence(datasets.Value("int64")))),  # plain int lists
        datasets.Array3D(shape=(3, 4, 5), dtype="uint8"),  # declared uint8: read back as ints all the same
    ],
    ids=["int64-lists", "array3d-uint8"],
)
def test_integer_pixel_columns_scale_as_uint8_images(feature: Any, tmp_path: Path):
    # the uint8 Image column of rgb_dir and these integer columns hold the same pixels: the same inputs.
    # Before 2026-12-02 the integer ones were not divided by 255 (normalize = false gave 0..255).
    root = tmp_path / "ints"
    datasets.DatasetDict({"train": _integer_split(12, 0, feature), "test": _integer_split(6, 12, feature)}).save_to_disk(str(root))
    ds = load_dataset("hf", {"path": str(root), "image_column": "img", "augment": {"normalize": False}})
    assert tuple(ds.x_train.shape) == (12, 3, 4, 5)
    want = torch.from_numpy(_pixels(13, 3).transpose(2, 0, 1).astype(np.float32) / 255)
    torch.testing.assert_close(ds.x_test[1], want, atol=1e-6, rtol=0)
    assert float(ds.x_train.max()) <= 1.0


def test_integers_beyond_eight_bits_stay_numbers(tmp_path: Path):
    # a 16-bit scan (a value 300 in the test split) is no 8-bit image: both splits are 16-bit, divided by 65535
    # (as a 16-bit PNG's pixels: tests/test_hfdl_images.py); beyond 65535 they stay numbers (same file)
    feature = datasets.Sequence(datasets.Sequence(datasets.Value("int64")))
    train = datasets.Dataset.from_dict({"img": [(_pixels(i, 1).astype(np.int64)).tolist() for i in range(6)], "label": [0, 1] * 3},
                                       features=datasets.Features({"img": feature, "label": datasets.Value("int64")}))
    test = datasets.Dataset.from_dict({"img": [(_pixels(0, 1).astype(np.int64) + 300).tolist()] * 2, "label": [0, 1]},
                                      features=datasets.Features({"img": feature, "label": datasets.Value("int64")}))
    (tmp_path / "wide").mkdir()
    train.to_parquet(str(tmp_path / "wide" / "train.parquet"))
    test.to_parquet(str(tmp_path / "wide" / "test.parquet"))
    ds = load_dataset("hf", {"path": str(tmp_path / "wide"), "image_column": "img", "augment": {"normalize": False}})
    assert float(ds.x_test.min()) == pytest.approx(300 / 65535, rel=1e-5) and float(ds.x_train.max()) == pytest.approx(_pixels(5, 1).max() / 65535, rel=1e-5)

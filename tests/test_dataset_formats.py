"""The new datasets' on-disk formats read directly (no download): FEMNIST (LEAF json) and its natural
split, Tiny-ImageNet, Caltech-256, CIFAR-100 coarse/fine, EMNIST, and the memory-mapped cache."""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from chillfl.data import build_federated_data, load_dataset
from chillfl.data.arraycache import CACHE_DIR, channel_stats, standardise_into
from chillfl.data.loaders import FemnistOptions, select_writers
from chillfl.errors import ConfigError
from fake_datasets import FEMNIST_WRITERS, caltech_members, cifar100_files, emnist_files, leaf_json, tiny_imagenet_members


def _unzip(blob: bytes, dest: Path) -> None:
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        z.extractall(dest)


def _write(members: dict[str, bytes], dest: Path) -> None:
    for name, data in members.items():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes(data)


def _femnist_all_data(root: Path) -> None:
    (root / "femnist" / "all_data").mkdir(parents=True)
    (root / "femnist" / "all_data" / "all_data_0.json").write_bytes(leaf_json(FEMNIST_WRITERS))


# ---------------------------------------------------------------- FEMNIST


def test_femnist_writers_become_natural_clients(tmp_path: Path) -> None:
    _femnist_all_data(tmp_path)
    ds = load_dataset("femnist", {"train_fraction": 0.5}, data_dir=tmp_path)
    # writers have 5, 3, 1, 4 samples; the 1-sample writer is dropped (LEAF's split needs 2);
    # train = max(1, floor(0.5 n)): 2, 1, 2 train and 3, 2, 2 test.
    assert [len(g) for g in ds.train_groups] == [2, 1, 2] and [len(g) for g in ds.test_groups] == [3, 2, 2]
    assert ds.num_classes == 62 and ds.input_shape == (1, 28, 28)
    kept = [v for k, v in FEMNIST_WRITERS.items() if k != "f0003_03"]
    for g, t, labels in zip(ds.train_groups, ds.test_groups, kept):
        assert sorted(ds.y_train[torch.from_numpy(g)].tolist() + ds.y_test[torch.from_numpy(t)].tolist()) == sorted(labels)
    assert ds.x_train.shape == (5, 1, 28, 28) and ds.x_test.shape == (7, 1, 28, 28)
    fed = build_federated_data(ds, num_clients=3, partitioner="natural", partition_options=None, seed=3, client_eval="natural")
    for cid, g in enumerate(ds.train_groups):
        x, y = fed.client_train(cid)
        assert y.tolist() == ds.y_train[torch.from_numpy(g)].tolist()
        # a writer is a contiguous block: its inputs are a view of the dataset, not a copy
        assert x.data_ptr() == ds.x_train[int(g[0])].data_ptr()
    assert [len(fed.client_eval(c)[1]) for c in range(3)] == [3, 2, 2]
    with pytest.raises(ConfigError) as info:  # the natural split has exactly one client per writer
        build_federated_data(ds, num_clients=4, partitioner="natural", partition_options=None, seed=3)
    assert info.value.field == "federation.num_clients"


def test_femnist_leaf_sampling_options() -> None:
    counts = [len(v) for v in FEMNIST_WRITERS.values()]  # 5, 3, 1, 4; 13 in all
    # split_seed 0: default_rng(0).permutation(4) = [2, 0, 1, 3]. sample_fraction 0.5 -> 6.5 samples:
    # writer 2 (1, total 1), writer 0 (5, total 6), writer 1 (3, total 9 >= 6.5): stop -> {0, 1, 2}.
    assert list(np.random.default_rng(0).permutation(4)) == [2, 0, 1, 3]
    assert select_writers(counts, FemnistOptions(sample_fraction=0.5)) == [0, 1, 2]
    assert select_writers(counts, FemnistOptions(sample_fraction=0.5, min_samples=2)) == [0, 1]  # LEAF's -k
    assert select_writers(counts, FemnistOptions()) == [0, 1, 2, 3]
    assert select_writers(counts, FemnistOptions(max_writers=2)) == [0, 1]


def test_femnist_leaf_train_test_folders(tmp_path: Path) -> None:
    root = tmp_path / "femnist"
    (root / "train").mkdir(parents=True)
    (root / "test").mkdir()
    (root / "train" / "t.json").write_bytes(leaf_json({"a": [1, 2], "b": [3]}))
    (root / "test" / "t.json").write_bytes(leaf_json({"b": [3, 3], "a": [2]}))
    ds = load_dataset("femnist", data_dir=tmp_path)
    assert ds.y_train.tolist() == [1, 2, 3] and ds.y_test.tolist() == [2, 3, 3]
    assert [g.tolist() for g in ds.train_groups] == [[0, 1], [2]] and [g.tolist() for g in ds.test_groups] == [[0], [1, 2]]


@pytest.mark.parametrize("blob, why", [
    (b"{not json", "Expecting"),
    (json.dumps({"users": ["a"], "num_samples": [1], "user_data": {"a": {"x": [[0.5] * 10], "y": [0]}}}).encode(), "784"),
    (json.dumps({"users": ["a"], "num_samples": [1], "user_data": {"a": {"x": [[0.5] * 784], "y": [62]}}}).encode(), "labels 0..61"),
    (json.dumps({"users": ["a"], "num_samples": [1]}).encode(), "user_data"),
    (json.dumps({"users": ["a"], "num_samples": [1], "user_data": {"a": {"x": [[0.5] * 784], "y": [1.7]}}}).encode(), "labels must be integers"),
    (b'{"users": ["a"], "num_samples": [1], "user_data": {"a": {"x": [[NaN' + b", 0.5" * 783 + b']], "y": [0]}}}', "non-finite"),
])
def test_femnist_corrupt_json_names_the_file(tmp_path: Path, blob: bytes, why: str) -> None:
    (tmp_path / "femnist" / "all_data").mkdir(parents=True)
    (tmp_path / "femnist" / "all_data" / "bad.json").write_bytes(blob)
    with pytest.raises(ConfigError, match=f"bad.json.*{why}") as info:
        load_dataset("femnist", data_dir=tmp_path)
    assert info.value.field == "data_dir"


def test_femnist_option_errors() -> None:
    with pytest.raises(ConfigError) as info:
        load_dataset("femnist", {"sample_fraction": 0})
    assert info.value.field == "dataset.sample_fraction"


# ---------------------------------------------------------------- CIFAR-100, EMNIST


def test_cifar100_fine_and_coarse_labels(tmp_path: Path) -> None:
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(cifar100_files()["cifar-100-python.tar.gz"])) as tar:
        tar.extractall(tmp_path, filter="data")
    fine = load_dataset("cifar100", data_dir=tmp_path)
    coarse = load_dataset("cifar100", {"labels": "coarse"}, data_dir=tmp_path)
    # sample i: fine 7 i + 3, coarse i
    assert fine.num_classes == 100 and fine.y_train.tolist() == [3, 10, 17, 24]
    assert coarse.num_classes == 20 and coarse.y_train.tolist() == [0, 1, 2, 3] and coarse.y_test.tolist() == [0, 1]
    assert torch.equal(fine.x_train, coarse.x_train)


def test_emnist_byclass_has_62_classes(tmp_path: Path) -> None:
    _unzip(emnist_files("byclass")["gzip.zip"], tmp_path / "emnist")
    ds = load_dataset("emnist", {"split": "byclass"}, data_dir=tmp_path)
    assert ds.num_classes == 62 and ds.y_train.tolist() == [1, 26, 5]  # byclass labels are 0-based: kept as they are


# ---------------------------------------------------------------- Tiny-ImageNet, Caltech-256


def test_tiny_imagenet_train_folders_and_val_annotations(tmp_path: Path) -> None:
    _write(tiny_imagenet_members(), tmp_path)
    ds = load_dataset("tiny_imagenet", data_dir=tmp_path)
    assert ds.num_classes == 2 and ds.input_shape == (3, 64, 64)
    assert ds.y_train.tolist() == [0, 0, 1, 1] and ds.y_test.tolist() == [1, 0]
    # n01 images are grey 40, n02 grey 200 (JPEG keeps a flat image within a level or two):
    # train mean per channel 120/255, std 80/255 -> n01 at -1, n02 at +1
    assert torch.allclose(ds.x_train[:, :, 10, 10], torch.tensor([-1.0, -1.0, 1.0, 1.0])[:, None].expand(4, 3), atol=0.03)
    assert torch.allclose(ds.x_test[:, 0, 5, 5], torch.tensor([1.0, -1.0]), atol=0.03)
    resized = load_dataset("tiny_imagenet", {"size": 32}, data_dir=tmp_path)
    assert resized.input_shape == (3, 32, 32)


def test_unreadable_jpeg_names_the_file(tmp_path: Path) -> None:
    members = tiny_imagenet_members()
    members["tiny-imagenet-200/train/n01/images/n01_1.JPEG"] = b"\xff\xd8 not really a jpeg"
    _write(members, tmp_path)
    with pytest.raises(ConfigError, match="n01_1.JPEG: corrupt or wrong format") as info:
        load_dataset("tiny_imagenet", data_dir=tmp_path)
    assert info.value.field == "data_dir"


def test_tiny_imagenet_annotation_escaping_the_folder_is_refused(tmp_path: Path) -> None:
    members = tiny_imagenet_members()
    members["tiny-imagenet-200/val/val_annotations.txt"] = b"../../secret.JPEG\tn01\t0\t0\t1\t1\n"
    _write(members, tmp_path)
    with pytest.raises(ConfigError, match="val_annotations.txt.*line 1"):
        load_dataset("tiny_imagenet", data_dir=tmp_path)


def test_bad_lists_and_empty_splits_of_the_mapped_datasets_are_one_line(tmp_path: Path) -> None:
    """Non-UTF-8 or duplicated wnids, an empty val split, a Caltech split leaving no test image, a LEAF train/ without
    test/: one error line, not a UnicodeDecodeError, a class loaded twice, or a run whose every metric is null."""
    def refused(name: str, members: dict[str, bytes], words: str, field: str = "data_dir", options: dict | None = None) -> None:
        root = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
        _write(members, root)
        with pytest.raises(ConfigError, match=words) as info:
            load_dataset(name, options, data_dir=root)
        assert info.value.field == field

    for wnids, words in ((b"\xff\xfe", "wnids.txt.*codec"), (b"n01\nn02\nn01\n", "3 wnids, 2 distinct"), (b"\n", "0 wnids")):
        refused("tiny_imagenet", {**tiny_imagenet_members(), "tiny-imagenet-200/wnids.txt": wnids}, words)
    refused("tiny_imagenet", {**tiny_imagenet_members(), "tiny-imagenet-200/val/val_annotations.txt": b"\xff"}, "val_annotations.txt.*codec")
    refused("tiny_imagenet", {**tiny_imagenet_members(), "tiny-imagenet-200/val/val_annotations.txt": b""}, "test split is empty")
    refused("caltech256", caltech_members(per_class=1), "empty train or test split", "dataset.test_fraction", {"size": 8})
    only_train = {"femnist/train/a.json": leaf_json({"w1": [0, 1, 2], "w2": [3, 4]}), "femnist/test/a.json": leaf_json({"w1": []})}
    refused("femnist", only_train, "test split is empty")  # a writer without samples ([]) reads; no test sample is left


def test_caltech256_classes_crop_resize_and_split(tmp_path: Path) -> None:
    _write(caltech_members(), tmp_path)
    ds = load_dataset("caltech256", {"size": 16}, data_dir=tmp_path)
    # clutter (257) left out, RENAME2 (not a .jpg) ignored: 2 classes x 5 images, 20% of each class is test
    assert ds.num_classes == 2 and ds.input_shape == (3, 16, 16)
    assert ds.y_train.tolist() == [0] * 4 + [1] * 4 and ds.y_test.tolist() == [0, 1]
    with_clutter = load_dataset("caltech256", {"size": 16, "include_clutter": True}, data_dir=tmp_path)
    assert with_clutter.num_classes == 3 and len(with_clutter.y_train) + len(with_clutter.y_test) == 15
    with pytest.raises(ConfigError) as info:
        load_dataset("caltech256", {"size": 4}, data_dir=tmp_path)
    assert info.value.field == "dataset.size"


# ---------------------------------------------------------------- the memory-mapped cache


def _mapped_file(ptr: int) -> str | None:
    """The file whose mapping holds address ``ptr`` in this process (Linux /proc/self/maps)."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            start, end = (int(v, 16) for v in parts[0].split("-"))
            if start <= ptr < end:
                return parts[5].strip() if len(parts) == 6 else None
    return None


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux's /proc/self/maps to see mappings")
def test_decoded_arrays_are_cached_once_and_memory_mapped(tmp_path: Path) -> None:
    _write(caltech_members(), tmp_path)
    first = load_dataset("caltech256", {"size": 16}, data_dir=tmp_path)
    caches = list((tmp_path / CACHE_DIR).iterdir())
    assert len(caches) == 1 and (caches[0] / "meta.json").is_file()
    stamp = (caches[0] / "x_train.npy").stat().st_mtime_ns
    again = load_dataset("caltech256", {"size": 16}, data_dir=tmp_path)
    assert (caches[0] / "x_train.npy").stat().st_mtime_ns == stamp  # read, not rebuilt
    assert torch.equal(first.x_train, again.x_train) and torch.equal(first.y_test, again.y_test)
    assert _mapped_file(again.x_train.data_ptr()) == str(caches[0] / "x_train.npy")
    # other options or changed source files make a new cache entry
    load_dataset("caltech256", {"size": 8}, data_dir=tmp_path)
    (tmp_path / "256_ObjectCategories" / "001.ak47" / "001_0000.jpg").unlink()
    smaller = load_dataset("caltech256", {"size": 16}, data_dir=tmp_path)
    assert len(list((tmp_path / CACHE_DIR).iterdir())) == 3 and len(smaller.y_train) + len(smaller.y_test) == 9


def test_cache_key_ignores_its_own_folder_when_data_dir_is_the_source(tmp_path: Path) -> None:
    _write({k.removeprefix("256_ObjectCategories/"): v for k, v in caltech_members(2).items()}, tmp_path)  # class folders right in data_dir
    load_dataset("caltech256", {"size": 8, "test_fraction": 0.5}, data_dir=tmp_path)
    load_dataset("caltech256", {"size": 8, "test_fraction": 0.5}, data_dir=tmp_path)
    assert len(list((tmp_path / CACHE_DIR).iterdir())) == 1


def test_cached_tensor_writes_stay_private(tmp_path: Path) -> None:
    _femnist_all_data(tmp_path)
    ds = load_dataset("femnist", data_dir=tmp_path)
    before = ds.x_train[0].clone()
    ds.x_train[0] += 1.0  # copy-on-write map: allowed, and never written back
    assert torch.equal(load_dataset("femnist", data_dir=tmp_path).x_train[0], before)


def test_chunked_standardisation_by_hand() -> None:
    # channel 0 holds 0 and 255 -> /255: 0, 1 -> mean 0.5, std 0.5 -> -1, 1; channel 1 is constant 51
    # -> 0.2, std 0 (divided by 1 instead) -> 0.
    x = np.array([[[0], [51]], [[255], [51]]], dtype=np.uint8)  # [N=2, C=2, 1]
    mean, std = channel_stats(x)
    assert np.allclose(mean.ravel(), [0.5, 0.2]) and np.allclose(std.ravel(), [0.5, 0.0])
    out = np.empty(x.shape, dtype=np.float32)
    standardise_into(x, mean, std, out)
    assert np.allclose(out[:, 0, 0], [-1.0, 1.0]) and np.allclose(out[:, 1, 0], [0.0, 0.0], atol=1e-6)


def test_femnist_natural_run_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from chillfl.cli import main

    (tmp_path / "data" / "femnist" / "all_data").mkdir(parents=True)
    writers = {f"w{i}": [(7 * i + j) % 62 for j in range(6 + i)] for i in range(6)}
    (tmp_path / "data" / "femnist" / "all_data" / "a.json").write_bytes(leaf_json(writers))
    config = tmp_path / "exp.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\ndata_dir = "{tmp_path / "data"}"\n')
    overrides = ["dataset.name=femnist", "dataset.max_writers=4", "partition.name=natural", "federation.num_clients=4", "federation.rounds=1", "model.name=femnist_dnn", "eval.client_split=natural"]
    assert main(["run", str(config), "-q", *overrides]) == 0
    assert "final_global_acc=" in capsys.readouterr().out


def test_a_cache_of_an_older_loader_output_is_rebuilt_not_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache key holds the loader's output version: a cache written by an older (buggy) loader is not read once it is bumped."""
    from chillfl.data import loaders

    _femnist_all_data(tmp_path)
    fresh = load_dataset("femnist", data_dir=tmp_path)
    (old,) = (tmp_path / CACHE_DIR).iterdir()
    np.save(old / "y_train.npy", np.zeros(len(fresh.y_train), dtype=np.int64))  # what an older loader wrote
    assert int(load_dataset("femnist", data_dir=tmp_path).y_train.max()) == 0  # same version: served as it is
    monkeypatch.setattr(loaders, "FEMNIST_OUTPUT", loaders.FEMNIST_OUTPUT + 1)  # the loader's output changed
    again = load_dataset("femnist", data_dir=tmp_path)
    assert torch.equal(again.y_train, fresh.y_train) and [p.name for p in (tmp_path / CACHE_DIR).iterdir()] != [old.name]  # rebuilt
    assert not old.exists()  # and the entry it supersedes removed (tests/test_cache_superseded.py)


def test_memory_mapped_datasets_record_their_standardisation(tmp_path: Path) -> None:
    """Tiny-ImageNet's cache records the train means/stds it applied (grey 40 and 200: mean 120/255, std 80/255), read
    back from meta.json on the next run: so ``normalize = false`` or constants work there, and constant padding is raw
    black ((0 - mean) / std = -1.5 here) as torchvision's RandomCrop(fill=0) before Normalize, not the mean colour."""
    from chillfl.data.augment import Augment, parse_augment

    _write(tiny_imagenet_members(), tmp_path)
    for _ in range(2):  # decoded and written, then mapped from the cache
        ds = load_dataset("tiny_imagenet", data_dir=tmp_path)
        assert ds.channel_mean is not None and ds.channel_std is not None
        assert np.allclose(ds.channel_mean, [120 / 255] * 3, atol=2 / 255) and np.allclose(ds.channel_std, [80 / 255] * 3, atol=2 / 255)
    black = Augment.from_options(parse_augment({"crop_padding": 4, "padding_mode": "constant"}), ds.channel_mean, ds.channel_std)
    assert black is not None and np.allclose(black.fill, [-1.5] * 3, atol=0.03)
    raw = load_dataset("tiny_imagenet", {"augment": {"normalize": False}}, data_dir=tmp_path)
    assert torch.allclose(raw.x_train[:, :, 10, 10], torch.tensor([40.0, 40.0, 200.0, 200.0])[:, None].expand(4, 3) / 255, atol=2 / 255)
    assert raw.channel_mean == (0.0, 0.0, 0.0) and raw.channel_std == (1.0, 1.0, 1.0)

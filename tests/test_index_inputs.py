"""Models that read integer indices (``char_lstm``, by its spec's ``reads_indices``) refuse inputs that are not indices.

A standardised float dataset was read as clamped index casts, and the ``feature_noise`` partitioner added
Gaussian noise to indices: both ran to the end without a word. Each is now one line naming the field.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset, TensorDataset

import chillfl
from chillfl.api import as_dataset
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.data.datasets import ArrayDataset
from chillfl.errors import ConfigError
from chillfl.experiment import build_client_models, build_experiment, dataset_record
from chillfl.models.registry import MODELS

VOCAB = 6


def _config(**change: Any) -> dict[str, Any]:
    table: dict[str, Any] = {
        "model": {"name": "char_lstm", "hidden": 4, "embed_dim": 2},
        "partition": {"name": "iid"},
        "federation": {"num_clients": 2, "clients_per_round": 2, "rounds": 1},
        "client": {"batch_size": 8, "epochs": 1},
    }
    return {**table, **change}


def _indices(x_train: torch.Tensor | None = None, x_test: torch.Tensor | None = None) -> chillfl.TensorData:
    """Sequences of 5 indices below VOCAB (as floats, the way flwr_shakespeare stores them); the label is the next index."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, VOCAB, (60, 5), generator=gen).float()
    y = torch.randint(0, VOCAB, (60,), generator=gen)
    return chillfl.TensorData(x[:40] if x_train is None else x_train, y[:40], x[40:] if x_test is None else x_test, y[40:], num_classes=VOCAB)


def test_char_lstm_declares_it_reads_indices() -> None:
    spec = MODELS["char_lstm"]
    assert spec.reads_indices is not None
    assert spec.reads_indices(chillfl.models.registry.model_options("char_lstm", {}), 80) == 80
    assert MODELS["mlp"].reads_indices is None


def test_index_data_runs() -> None:
    result = chillfl.run(data=_indices(), config=_config(), write=False, progress=False)
    assert result.records[-1]["round"] == 1


def test_a_float_feature_dataset_is_one_line_on_model_name() -> None:
    standardised = torch.randn(40, 5, generator=torch.Generator().manual_seed(1))
    with pytest.raises(ConfigError, match="integer indices") as err:
        chillfl.run(data=_indices(x_train=standardised), config=_config(), write=False, progress=False)
    assert err.value.field == "model.name" and "\n" not in str(err.value)


def test_a_float_test_split_is_refused_too() -> None:
    test = torch.full((20, 5), 2.5)
    with pytest.raises(ConfigError, match="test inputs") as err:
        chillfl.run(data=_indices(x_test=test), config=_config(), write=False, progress=False)
    assert err.value.field == "model.name"


def test_feature_noise_on_indices_is_one_line_on_partition_name() -> None:
    config = _config(partition={"name": "feature_noise", "sigma_min": 0.1, "sigma_max": 0.3})
    with pytest.raises(ConfigError, match="noise") as err:
        chillfl.run(data=_indices(), config=config, write=False, progress=False)
    assert err.value.field == "partition.name"


def test_feature_noise_of_zero_changes_nothing_and_runs() -> None:
    config = _config(partition={"name": "feature_noise", "sigma_min": 0.0, "sigma_max": 0.0})
    assert chillfl.run(data=_indices(), config=config, write=False, progress=False).records


@pytest.mark.parametrize("value", [VOCAB, -1, 1e9], ids=["vocab", "negative", "huge"])
@pytest.mark.parametrize("split", ["train", "test"])
def test_an_index_out_of_range_in_the_last_row_is_one_line(value: float, split: str) -> None:
    """Every row is checked (min/max over all of them), not the first ones: the stray index sits in the last row."""
    data = _indices()
    x = (data.x_train if split == "train" else data.x_test).clone()
    x[-1, -1] = value
    bad = _indices(x_train=x) if split == "train" else _indices(x_test=x)
    with pytest.raises(ConfigError, match=f"{split} inputs .*outside 0..{VOCAB - 1}") as err:
        chillfl.run(data=bad, config=_config(), write=False, progress=False)
    assert err.value.field == "model.name" and "\n" not in str(err.value)


def test_a_larger_vocab_option_accepts_larger_indices() -> None:
    data = _indices()
    x = data.x_train.clone()
    x[-1, -1] = VOCAB + 3
    config = _config(model={"name": "char_lstm", "hidden": 4, "embed_dim": 2, "vocab": VOCAB + 4})
    assert chillfl.run(data=_indices(x_train=x), config=config, write=False, progress=False).records


NOISE_LINE = ("partition.name: adds Gaussian noise to the clients' inputs, and char_lstm reads its inputs as integer indices ({field}); "
              "choose a partitioner that leaves inputs as they are")


def _dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], model: str, *extra: str) -> tuple[int, list[str]]:
    """``chillfl run CONFIG --dry-run`` where the dataset's files are absent: only names and options can be checked."""
    config = tmp_path / "c.toml"
    config.write_text(f'[dataset]\nname = "uci_har"\n[model]\n{model}\n[partition]\nname = "feature_noise"\n'
                      "[federation]\nnum_clients = 4\nclients_per_round = 2\nrounds = 1\n")
    code = main(["run", str(config), "--dry-run", f"data_dir={tmp_path / 'absent'}", *extra])
    return code, capsys.readouterr().err.strip().splitlines()


def test_a_dry_run_without_data_refuses_feature_noise_on_an_index_reader_in_the_same_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The full build refused it once the data were split; the dry run, which builds nothing from data, let it pass."""
    code, err = _dry_run(tmp_path, capsys, 'name = "char_lstm"')
    assert code == 2 and err == ["chillfl: error: " + NOISE_LINE.format(field="model.name")], err
    config = _config(partition={"name": "feature_noise", "sigma_min": 0.1, "sigma_max": 0.3})
    with pytest.raises(ConfigError) as built:
        chillfl.run(data=_indices(), config=config, write=False, progress=False)
    assert str(built.value) == NOISE_LINE.format(field="model.name")  # the full build's line, word for word


def test_a_dry_run_without_data_asks_every_architecture_and_the_noise_it_would_add(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    groups = 'name = "mlp"\ngroups = [{ clients = "0-1", name = "char_lstm" }]\n[distillation]\nmethod = "dsfl"\npublic_size = 1000'
    code, err = _dry_run(tmp_path, capsys, groups)
    assert code == 2 and err == ["chillfl: error: " + NOISE_LINE.format(field="model.groups[0].name")], err
    code, err = _dry_run(tmp_path, capsys, 'name = "char_lstm"', "partition.sigma_min=0", "partition.sigma_max=0")
    assert code == 2 and err == ["chillfl: error: " + REAL_LINE.replace("cifar10", "uci_har")], err  # no noise, but uci_har's inputs are real
    code, err = _dry_run(tmp_path, capsys, 'name = "mlp"')
    assert code == 0, err  # a model that reads features takes the noise


REAL_LINE = ("model.name: char_lstm reads its inputs as integer indices, and the inputs of 'cifar10' are real-valued features, not indices "
             "(a character-index dataset such as flwr_shakespeare, or another model)")


def test_a_dry_run_without_data_refuses_an_index_reader_on_a_real_valued_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The dataset's registry entry declares its input kind; the dry run asks it (before: cifar10's files absent, it passed)."""
    config = tmp_path / "c.toml"
    config.write_text('[dataset]\nname = "cifar10"\n[model]\nname = "char_lstm"\n[federation]\nnum_clients = 4\nclients_per_round = 2\nrounds = 1\n')
    code = main(["run", str(config), "--dry-run", f"data_dir={tmp_path / 'absent'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["chillfl: error: " + REAL_LINE], err
    code = main(["run", str(config), "--dry-run", f"data_dir={tmp_path / 'absent'}", "model.name=mlp"])
    assert code == 0, capsys.readouterr().err  # a model that reads features
    # char_lstm on flwr_shakespeare ("indices") offline passes: test_leaf_parquet's dry run of a hub dataset


def test_a_dry_run_without_data_refuses_an_index_reader_on_a_real_valued_public_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``distillation.public_dataset``'s entry declares its input kind too: the full run scans the public rows it draws
    (:func:`check_index_rows`) and refuses them; the dry run without files let them pass."""
    config = tmp_path / "c.toml"
    config.write_text('[dataset]\nname = "flwr_shakespeare"\n[model]\nname = "char_lstm"\n[federation]\nnum_clients = 4\nclients_per_round = 2\nrounds = 1\n'
                      '[distillation]\nmethod = "dsfl"\npublic_size = 1000\npublic_dataset = "cifar10"\n')
    code = main(["run", str(config), "--dry-run", f"data_dir={tmp_path / 'absent'}"])
    err = capsys.readouterr().err.strip().splitlines()
    line = REAL_LINE.replace("and the inputs of 'cifar10'", "and the public inputs of 'cifar10' (distillation.public_dataset)")
    assert code == 2 and err == ["chillfl: error: " + line], err
    code = main(["run", str(config), "--dry-run", f"data_dir={tmp_path / 'absent'}", "distillation.method=individual", "distillation.public_size=0"])
    assert code == 0, capsys.readouterr().err  # no collaboration: the public set is never read


def test_every_dataset_declares_its_input_kind() -> None:
    from chillfl.data.datasets import DATASETS

    kinds = {name: entry.inputs for name, entry in DATASETS.items()}
    assert set(kinds.values()) <= {"real", "indices", "any"}
    assert kinds["flwr_shakespeare"] == "indices" and kinds["hf"] == "any" and kinds["cifar10"] == kinds["digits"] == "real"


def _soft_labels(**public: Any) -> dict[str, Any]:
    """DS-FL over a public pool of 10 rows, from another dataset when ``public`` names one."""
    return _config(distillation={"method": "dsfl", "public_size": 10, "subset_size": 5, "server_epochs": 1, "distill_batch_size": 8, **public})


def _other_dataset(monkeypatch: pytest.MonkeyPatch, x: torch.Tensor) -> None:
    """``distillation.public_dataset = "synthetic"`` loads ``x`` (rows of 5 values): another dataset with this one's input shape."""
    public_module = importlib.import_module("chillfl.protocols.softlabels.public")

    def load(name: str, options: Any, data_dir: str) -> ArrayDataset:
        y = torch.zeros(len(x), dtype=torch.int64)
        return ArrayDataset(name, x, y, x[:4], y[:4], VOCAB)

    public_module._load_public_dataset.cache_clear()
    monkeypatch.setattr(public_module, "load_dataset", load)


@pytest.mark.parametrize("value", [VOCAB, -1, 2.5], ids=["vocab", "negative", "fraction"])
def test_a_public_set_from_another_dataset_is_checked_as_the_data_are(monkeypatch: pytest.MonkeyPatch, value: float) -> None:
    """Its rows reached the embedding clamped (or cast), without a word: the check covered the private data only."""
    x = torch.randint(0, VOCAB, (40, 5), generator=torch.Generator().manual_seed(2)).float()
    x[:, 0] = value  # in every row: whichever rows the pool draws
    _other_dataset(monkeypatch, x)
    try:
        with pytest.raises(ConfigError, match="public inputs of 'synthetic'") as err:
            chillfl.run(data=_indices(), config=_soft_labels(public_dataset="synthetic"), write=False, progress=False)
    finally:
        importlib.import_module("chillfl.protocols.softlabels.public")._load_public_dataset.cache_clear()
    assert err.value.field == "model.name" and "\n" not in str(err.value)


def test_a_public_set_from_another_dataset_in_range_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    _other_dataset(monkeypatch, torch.randint(0, VOCAB, (40, 5), generator=torch.Generator().manual_seed(2)).float())
    try:
        assert chillfl.run(data=_indices(), config=_soft_labels(public_dataset="synthetic"), write=False, progress=False).records
    finally:
        importlib.import_module("chillfl.protocols.softlabels.public")._load_public_dataset.cache_clear()


class _Drifting(Dataset):
    """Indices below VOCAB at the first read; from then on every redraw of an item reads ``VOCAB`` at its end."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y, self.reads = x, y, 0

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        self.reads += 1
        x = self.x[i].clone()
        if self.reads > len(self.y):
            x[-1] = VOCAB
        return x, int(self.y[i])


def test_items_redrawn_each_round_are_checked_when_they_are_read() -> None:
    """The first read is checked with the data; a redraw was read by the embedding clamped, without a word."""
    tensors = _indices()
    data = chillfl.DatasetData(_Drifting(tensors.x_train, tensors.y_train), TensorDataset(tensors.x_test, tensors.y_test), num_classes=VOCAB, name="drifting")
    with pytest.raises(ConfigError, match=rf"the train inputs of 'drifting' redrawn for client \d+ in round 1 hold indices 0..{VOCAB}, outside") as err:
        chillfl.run(data=data, config=_config(), write=False, progress=False)
    assert err.value.field == "model.name" and "\n" not in str(err.value)


def test_a_comparison_scans_the_loaded_data_once_not_once_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its check built every run and its run built each again, each scanning every row of the data (4 runs: 8 scans)."""
    datasets = importlib.import_module("chillfl.data.datasets")
    scanned: list[int] = []
    real = datasets.input_values
    monkeypatch.setattr(datasets, "input_values", lambda x: scanned.append(len(x)) or real(x))
    result = chillfl.compare(data=_indices(), config=_config(), grid={"client.lr": [0.05, 0.1]}, seeds=[0, 1], write=False, progress=False)
    assert len(result.rows) == 2
    assert scanned == [40, 20]  # the train and the test inputs, once each


def _groups(low: int, high: int) -> dict[str, Any]:
    """Soft labels over three char_lstm architectures: the default reads ``VOCAB`` indices, group 0 ``high``, group 1 ``low``."""
    lstm = {"name": "char_lstm", "hidden": 4, "embed_dim": 2}
    groups = [{"clients": "0-1", **lstm, "vocab": high}, {"clients": [3], **lstm, "vocab": low}]
    return {**_soft_labels(), "model": {**lstm, "groups": groups}, "federation": {"num_clients": 4, "clients_per_round": 4, "rounds": 2}}


def test_char_lstm_groups_with_different_vocabularies_each_train_their_own_embedding() -> None:
    config = _groups(VOCAB, VOCAB + 4)
    dataset = as_dataset(_indices())
    exp = build_experiment(load_config(None, {**config, "dataset": dataset_record(dataset)}), dataset)
    models = build_client_models(exp)
    assert [m.embed.num_embeddings for m in models.models] == [VOCAB, VOCAB + 4, VOCAB]  # vocab 0 (the class count) and vocab VOCAB: two tables
    seq = chillfl.run(data=_indices(), config=config, write=False, progress=False)
    assert seq.records == chillfl.run(data=_indices(), config={**config, "executor": "processes"}, write=False, progress=False).records
    vec = chillfl.run(data=_indices(), config={**config, "executor": "vectorized"}, write=False, progress=False)
    assert [r["clients"] for r in vec.records] == [r["clients"] for r in seq.records] == [[0, 1, 2, 3]] * 2
    arch = seq.summary["architectures"]
    assert [a["clients"] for a in arch.values()] == [[2], [0, 1], [3]] and all(k.startswith("char_lstm(") for k in arch), arch


def test_the_group_whose_vocabulary_the_data_leave_is_named() -> None:
    """The data hold indices up to VOCAB + 1: the default and group 0 read more, group 1 (VOCAB) is named, by its place in the list.

    Before, the line said ``model.groups.name``, which of two groups it did not say."""
    x = _indices().x_train.clone()
    x[-1, -1] = VOCAB + 1
    data = _indices(x_train=x)
    config = _groups(VOCAB, VOCAB + 4)
    config["model"]["vocab"] = VOCAB + 2
    with pytest.raises(ConfigError) as err:
        chillfl.run(data=data, config=config, write=False, progress=False)
    assert err.value.field == "model.groups[1].name" and f"(0..{VOCAB - 1})" in str(err.value), str(err.value)
    config["model"]["groups"][1]["vocab"] = VOCAB + 2
    assert chillfl.run(data=data, config=config, write=False, progress=False).records

"""Models that read integer indices (``char_lstm``, by its spec's ``reads_indices``) refuse inputs that are not indices.

A standardised float dataset was read as clamped index casts, and the ``feature_noise`` partitioner added
Gaussian noise to indices: both ran to the end without a word. Each is now one line naming the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import chillfl
from chillfl.cli import main
from chillfl.errors import ConfigError
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
    assert code == 2 and err == ["chillfl: error: " + NOISE_LINE.format(field="model.groups.name")], err
    code, err = _dry_run(tmp_path, capsys, 'name = "char_lstm"', "partition.sigma_min=0", "partition.sigma_max=0")
    assert code == 0 and "names and options checked" in err[0], err  # no noise: nothing to refuse
    code, err = _dry_run(tmp_path, capsys, 'name = "mlp"')
    assert code == 0, err  # a model that reads features takes the noise
